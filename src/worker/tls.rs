//! The mock worker's sockets with the request plane's TLS, as a real worker sets it up from
//! `DYN_TCP_TLS_*` (docs/dynamo/request-plane-tls.md): its request-plane listener serves TLS
//! (and asks for client certificates with a client CA), its call-backs dial TLS.
//!
//! A [`Sock`] is a blocking `TcpStream`, plain or carrying a rustls session that the threads
//! using one connection share (the stream writer and its kill / stop reader): the session is
//! locked only while bytes go in or out of it, never during a socket read or write, and one
//! writer at a time seals and writes (so records leave in order). Handshakes run on the
//! connection's own thread with the plane's handshake timeout as the socket timeouts.

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpStream};
use std::sync::{Arc, Mutex, MutexGuard};

use rustls::Connection;

use crate::tls::plane::{Acceptor, Dialer};

struct Session {
    state: Mutex<State>,
    /// Held by the one thread sealing and writing records.
    writing: Mutex<()>,
}

struct State {
    conn: Connection,
    /// Ciphertext read but not yet taken by the session (it takes more once its plaintext is
    /// read out).
    backlog: Vec<u8>,
}

impl State {
    /// Give the session what it will take of the backlog; whether it took anything.
    fn feed(&mut self) -> io::Result<bool> {
        let mut data = &self.backlog[..];
        while !data.is_empty() {
            match self.conn.read_tls(&mut data) {
                Ok(0) => break,
                Ok(_) => {
                    self.conn.process_new_packets().map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e))?;
                }
                // Its plaintext buffer is full: read that out first.
                Err(e) if e.kind() == io::ErrorKind::Other => break,
                Err(e) => return Err(e),
            }
        }
        let taken = self.backlog.len() - data.len();
        self.backlog.drain(..taken);
        Ok(taken > 0)
    }
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(|e| e.into_inner())
}

/// A worker connection: plain TCP, or TLS over it.
pub(crate) struct Sock {
    tcp: TcpStream,
    tls: Option<Arc<Session>>,
}

impl Sock {
    pub(crate) fn plain(tcp: TcpStream) -> Sock {
        Sock { tcp, tls: None }
    }

    /// The server side of a TLS handshake on an accepted connection.
    pub(crate) fn accept(tcp: TcpStream, acceptor: &Acceptor) -> io::Result<Sock> {
        let session = acceptor.session().map_err(io::Error::other)?;
        Sock::handshake(tcp, Connection::Server(session), acceptor.handshake_timeout)
    }

    /// The client side of a TLS handshake on a dialed connection.
    pub(crate) fn connect(tcp: TcpStream, dialer: &Dialer) -> io::Result<Sock> {
        let session = dialer.session(tcp.peer_addr()?.ip()).map_err(io::Error::other)?;
        Sock::handshake(tcp, Connection::Client(session), dialer.handshake_timeout)
    }

    fn handshake(mut tcp: TcpStream, mut conn: Connection, timeout: std::time::Duration) -> io::Result<Sock> {
        let (read, write) = (tcp.read_timeout()?, tcp.write_timeout()?);
        tcp.set_read_timeout(Some(timeout))?;
        tcp.set_write_timeout(Some(timeout))?;
        while conn.is_handshaking() {
            conn.complete_io(&mut tcp)?;
        }
        while conn.wants_write() {
            conn.write_tls(&mut tcp)?;
        }
        tcp.set_read_timeout(read)?;
        tcp.set_write_timeout(write)?;
        conn.set_buffer_limit(None);
        let state = State { conn, backlog: Vec::new() };
        Ok(Sock { tcp, tls: Some(Arc::new(Session { state: Mutex::new(state), writing: Mutex::new(()) })) })
    }

    /// Another handle on the same connection (and session), for another thread.
    pub(crate) fn try_clone(&self) -> io::Result<Sock> {
        Ok(Sock { tcp: self.tcp.try_clone()?, tls: self.tls.clone() })
    }

    /// The socket, for its options and for shutting it down.
    pub(crate) fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    pub(crate) fn shutdown(&self, how: Shutdown) -> io::Result<()> {
        self.tcp.shutdown(how)
    }
}

impl Read for &Sock {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = &self.tls else { return (&self.tcp).read(buf) };
        let mut chunk = [0u8; 16 * 1024];
        loop {
            {
                let mut st = lock(&tls.state);
                match st.conn.reader().read(buf) {
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                    got => return got,
                }
                if !st.backlog.is_empty() {
                    if !st.feed()? {
                        return Err(io::Error::new(io::ErrorKind::InvalidData, "TLS: the session takes no more input"));
                    }
                    continue;
                }
            }
            let n = (&self.tcp).read(&mut chunk)?;
            if n == 0 {
                return Ok(0);
            }
            let mut st = lock(&tls.state);
            st.backlog.extend_from_slice(&chunk[..n]);
            st.feed()?;
        }
    }
}

impl Write for &Sock {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let Some(tls) = &self.tls else { return (&self.tcp).write(buf) };
        let _one_writer = lock(&tls.writing);
        let mut out = Vec::with_capacity(buf.len() + 64);
        {
            let mut st = lock(&tls.state);
            st.conn.writer().write_all(buf)?;
            while st.conn.wants_write() {
                st.conn.write_tls(&mut out)?;
            }
        }
        (&self.tcp).write_all(&out)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
