//! The byte streams the request plane runs on: plain TCP, or TLS over it ([`Tls`]), behind
//! the two traits the plane's code is written against ([`ReadSome`], [`WriteAll`]), so the
//! client and the call-back listener are generic over the stream and the plain path is the
//! socket calls it always was (same buffers, same syscalls, nothing allocated).
//!
//! A [`Tls`] stream is a rustls session driven by hand over monoio's completion-based I/O:
//! ciphertext is read into a buffer of its own and fed to the session, plaintext is copied
//! out into the caller's buffer; a write seals the caller's bytes into records and writes
//! them in one `write_all`. The session is shared through an `Rc<RefCell<…>>` by the two
//! halves of a split stream (the client's reader and writer tasks); each borrow is taken
//! and released between awaits, never across one. Only the writer writes ciphertext, so
//! records leave in the order they were sealed; what the reader's side would have to send
//! (a key update's answer, an alert) goes out with the next write.
//!
//! Runs on a shard thread (monoio: io_uring or epoll alike). Sessions and their
//! configurations come from [`crate::tls::plane`]; a handshake is bounded by the plane's
//! handshake timeout and its failure is an `io::Error` naming what rustls refused.

use std::cell::RefCell;
use std::future::Future;
use std::io::{self, Read, Write};
use std::rc::Rc;
use std::time::Duration;

use bytes::BytesMut;
use monoio::buf::IoBufMut;
use monoio::io::{AsyncReadRent, AsyncWriteRent, AsyncWriteRentExt, Splitable};
use monoio::net::tcp::{TcpOwnedReadHalf, TcpOwnedWriteHalf};
use monoio::net::TcpStream;
use rustls::Connection;

/// Ciphertext read per socket read (a little over one full TLS record).
const CIPHER_READ: usize = 17 * 1024;

/// Reading side of a plane stream.
pub(crate) trait ReadSome {
    /// Read what arrives into the spare capacity of `buf` (after its length; reserve first):
    /// `Ok(n)` with `n > 0` bytes appended, `Ok(0)` when the peer has closed.
    fn read_some(&mut self, buf: BytesMut) -> impl Future<Output = (io::Result<usize>, BytesMut)>;
}

/// Writing side of a plane stream.
pub(crate) trait WriteAll {
    /// Write all of `buf`; it comes back for reuse.
    fn write_all_of(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<()>, Vec<u8>)>;

    /// Shut the sending side (a TLS stream first says `close_notify`).
    fn close(&mut self) -> impl Future<Output = io::Result<()>>;
}

async fn plain_read<R: AsyncReadRent>(io: &mut R, buf: BytesMut) -> (io::Result<usize>, BytesMut) {
    let len = buf.len();
    let (res, b) = io.read(buf.slice_mut(len..)).await;
    (res, b.into_inner())
}

async fn plain_write<W: AsyncWriteRent>(io: &mut W, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
    let (res, buf) = io.write_all(buf).await;
    (res.map(|_| ()), buf)
}

impl ReadSome for TcpStream {
    fn read_some(&mut self, buf: BytesMut) -> impl Future<Output = (io::Result<usize>, BytesMut)> {
        plain_read(self, buf)
    }
}

impl ReadSome for TcpOwnedReadHalf {
    fn read_some(&mut self, buf: BytesMut) -> impl Future<Output = (io::Result<usize>, BytesMut)> {
        plain_read(self, buf)
    }
}

impl WriteAll for TcpStream {
    fn write_all_of(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<()>, Vec<u8>)> {
        plain_write(self, buf)
    }

    fn close(&mut self) -> impl Future<Output = io::Result<()>> {
        AsyncWriteRent::shutdown(self)
    }
}

impl WriteAll for TcpOwnedWriteHalf {
    fn write_all_of(&mut self, buf: Vec<u8>) -> impl Future<Output = (io::Result<()>, Vec<u8>)> {
        plain_write(self, buf)
    }

    fn close(&mut self) -> impl Future<Output = io::Result<()>> {
        AsyncWriteRent::shutdown(self)
    }
}

/// A TLS stream over `S` (a socket, or one half of a split one).
pub(crate) struct Tls<S> {
    io: S,
    session: Rc<RefCell<Connection>>,
    /// Ciphertext read buffer (reading side).
    cipher: Vec<u8>,
    /// Sealed records waiting for the socket (writing side).
    out: Vec<u8>,
    /// Plaintext that arrived with the end of the handshake.
    early: Option<BytesMut>,
}

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, e)
}

/// What the session holds for the reader.
enum Plain {
    /// Some bytes were appended.
    Got,
    /// The peer said `close_notify`.
    Closed,
    /// Nothing yet: more ciphertext is needed.
    Empty,
}

/// Move the session's received plaintext to the end of `buf`.
fn take_plain(session: &mut Connection, buf: &mut BytesMut) -> io::Result<Plain> {
    let start = buf.len();
    loop {
        if buf.capacity() - buf.len() < 4096 {
            buf.reserve(16 * 1024);
        }
        let len = buf.len();
        buf.resize(buf.capacity(), 0);
        let got = session.reader().read(&mut buf[len..]);
        match got {
            Ok(0) => {
                buf.truncate(len);
                return Ok(if len > start { Plain::Got } else { Plain::Closed });
            }
            Ok(n) => buf.truncate(len + n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                buf.truncate(len);
                return Ok(if len > start { Plain::Got } else { Plain::Empty });
            }
            Err(e) => {
                buf.truncate(len);
                return Err(e);
            }
        }
    }
}

/// Give `data` (ciphertext) to the session, moving the plaintext it yields to `plain`.
fn feed(session: &mut Connection, mut data: &[u8], plain: &mut BytesMut) -> io::Result<()> {
    while !data.is_empty() {
        match session.read_tls(&mut data) {
            Ok(0) => break,
            Ok(_) => {}
            // The session's plaintext buffer is full: empty it and go on.
            Err(e) if e.kind() == io::ErrorKind::Other => {}
            Err(e) => return Err(e),
        }
        session.process_new_packets().map_err(tls_error)?;
        take_plain(session, plain)?;
    }
    Ok(())
}

/// Seal `plain` (possibly empty) and every pending record into `out`.
fn seal(session: &mut Connection, plain: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
    if !plain.is_empty() {
        session.writer().write_all(plain)?;
    }
    while session.wants_write() {
        session.write_tls(out)?;
    }
    Ok(())
}

impl<S> Tls<S> {
    fn new(io: S, mut session: Connection) -> Tls<S> {
        // Sealing is bounded by the caller's buffers, not by rustls's.
        session.set_buffer_limit(None);
        Tls {
            io,
            session: Rc::new(RefCell::new(session)),
            cipher: Vec::with_capacity(CIPHER_READ),
            out: Vec::new(),
            early: None,
        }
    }
}

impl<S: AsyncReadRent + AsyncWriteRent> Tls<S> {
    /// Run the handshake of `session` over `io`, within `timeout`. A session that fails
    /// sends its alert before the error is returned.
    pub(crate) async fn handshake(io: S, session: Connection, timeout: Duration) -> io::Result<Tls<S>> {
        let mut tls = Tls::new(io, session);
        let done = monoio::select! {
            r = tls.drive_handshake() => r,
            _ = monoio::time::sleep(timeout) => Err(io::Error::new(io::ErrorKind::TimedOut, "TLS handshake timed out")),
        };
        done.map(|()| tls)
    }

    async fn drive_handshake(&mut self) -> io::Result<()> {
        let mut early = BytesMut::new();
        loop {
            let mut out = std::mem::take(&mut self.out);
            out.clear();
            let (sealed, handshaking) = {
                let mut s = self.session.borrow_mut();
                (seal(&mut s, &[], &mut out), s.is_handshaking())
            };
            sealed?;
            if !out.is_empty() {
                let (res, out) = self.io.write_all(out).await;
                self.out = out;
                res?;
            }
            if !handshaking {
                self.early = (!early.is_empty()).then_some(early);
                return Ok(());
            }
            let mut cipher = std::mem::take(&mut self.cipher);
            cipher.clear();
            cipher.reserve(CIPHER_READ);
            let (res, cipher) = self.io.read(cipher).await;
            self.cipher = cipher;
            if res? == 0 {
                return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "the peer closed during the TLS handshake"));
            }
            let fed = feed(&mut self.session.borrow_mut(), &self.cipher, &mut early);
            if let Err(e) = fed {
                // The session's alert, if it has one, is the peer's explanation.
                let mut out = std::mem::take(&mut self.out);
                out.clear();
                let _ = seal(&mut self.session.borrow_mut(), &[], &mut out);
                if !out.is_empty() {
                    let _ = self.io.write_all(out).await;
                }
                return Err(e);
            }
        }
    }
}

impl Tls<TcpStream> {
    /// The reading and writing halves, sharing the session.
    pub(crate) fn into_split(self) -> (Tls<TcpOwnedReadHalf>, Tls<TcpOwnedWriteHalf>) {
        let (r, w) = self.io.into_split();
        let read =
            Tls { io: r, session: self.session.clone(), cipher: self.cipher, out: Vec::new(), early: self.early };
        let write = Tls { io: w, session: self.session, cipher: Vec::new(), out: self.out, early: None };
        (read, write)
    }
}

impl<S: AsyncReadRent> ReadSome for Tls<S> {
    async fn read_some(&mut self, mut buf: BytesMut) -> (io::Result<usize>, BytesMut) {
        let start = buf.len();
        if let Some(early) = self.early.take() {
            buf.extend_from_slice(&early);
            return (Ok(buf.len() - start), buf);
        }
        loop {
            match take_plain(&mut self.session.borrow_mut(), &mut buf) {
                Ok(Plain::Got) => return (Ok(buf.len() - start), buf),
                Ok(Plain::Closed) => return (Ok(0), buf),
                Ok(Plain::Empty) => {}
                Err(e) => return (Err(e), buf),
            }
            let mut cipher = std::mem::take(&mut self.cipher);
            cipher.clear();
            // A read cancelled earlier took the buffer with it: never read into nothing.
            cipher.reserve(CIPHER_READ);
            let (res, cipher) = self.io.read(cipher).await;
            self.cipher = cipher;
            match res {
                Ok(0) => return (Ok(0), buf),
                Ok(_) => {}
                Err(e) => return (Err(e), buf),
            }
            if let Err(e) = feed(&mut self.session.borrow_mut(), &self.cipher, &mut buf) {
                return (Err(e), buf);
            }
            if buf.len() > start {
                return (Ok(buf.len() - start), buf);
            }
        }
    }
}

impl<S: AsyncWriteRent> WriteAll for Tls<S> {
    async fn write_all_of(&mut self, buf: Vec<u8>) -> (io::Result<()>, Vec<u8>) {
        let mut out = std::mem::take(&mut self.out);
        out.clear();
        if let Err(e) = seal(&mut self.session.borrow_mut(), &buf, &mut out) {
            self.out = out;
            return (Err(e), buf);
        }
        let (res, out) = self.io.write_all(out).await;
        self.out = out;
        (res.map(|_| ()), buf)
    }

    async fn close(&mut self) -> io::Result<()> {
        self.session.borrow_mut().send_close_notify();
        let (res, _) = self.write_all_of(Vec::new()).await;
        res?;
        self.io.shutdown().await
    }
}
