//! HTTPS connections on a shard: the rustls handshake (with the shard's current server
//! configuration, see [`crate::tls`]), ALPN choosing HTTP/2 or HTTP/1.1, then the same
//! connection loops as plain connections. Runs in the connection's task on its shard; the TLS
//! state belongs to that task alone.
//!
//! The socket is switched to monoio's poll-style I/O (`into_poll_io`) and `tokio-rustls` runs
//! over it. HTTP/2 takes that stream as it is (it speaks tokio's I/O traits); HTTP/1.1's loop
//! takes monoio's owned-buffer traits, which [`PollRent`] provides over any tokio-style
//! stream. A client that offers no ALPN is told apart by its first bytes, as on a plain port
//! (an HTTP/2 client with prior knowledge sends the preface).
//!
//! A handshake that fails (no common version, an untrusted client certificate under mutual
//! TLS, not TLS at all) or does not finish within the header-read timeout ends the connection;
//! each is counted in `/metrics` (`switchyard_tls_handshakes_total`).

use std::future::poll_fn;
use std::io;
use std::mem::MaybeUninit;
use std::os::fd::{AsRawFd, RawFd};
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use bytes::BytesMut;
use monoio::buf::{IoBuf, IoBufMut, IoVecBuf, IoVecBufMut};
use monoio::io::{AsyncReadRent, AsyncWriteRent, IntoPollIo};
use monoio::net::TcpStream;
use monoio::BufResult;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use super::ShardCtx;
use crate::h2::Detected;
use crate::metrics::Edge;

/// A tokio-style stream seen through monoio's owned-buffer traits. Every write is flushed
/// before it completes (the HTTP/1.1 loop counts a finished write as sent), and the socket's
/// descriptor is kept for the watch that notices a client leaving.
pub struct PollRent<T> {
    inner: T,
    fd: RawFd,
}

impl<T> PollRent<T> {
    pub fn new(inner: T, fd: RawFd) -> Self {
        PollRent { inner, fd }
    }
    pub fn into_inner(self) -> T {
        self.inner
    }
}

impl<T> AsRawFd for PollRent<T> {
    fn as_raw_fd(&self) -> RawFd {
        self.fd
    }
}

impl<T: AsyncRead + Unpin> PollRent<T> {
    /// Read into `len` bytes at `ptr`.
    async fn read_raw(&mut self, ptr: *mut u8, len: usize) -> io::Result<usize> {
        // SAFETY: the caller owns the buffer `ptr` points into for the whole call (it holds the
        // owned buffer it came from) and `len` bytes are writable there; they are seen as
        // uninitialised memory, which ReadBuf only ever writes.
        let slice = unsafe { std::slice::from_raw_parts_mut(ptr.cast::<MaybeUninit<u8>>(), len) };
        poll_fn(|cx| {
            let mut rb = ReadBuf::uninit(&mut *slice);
            Pin::new(&mut self.inner).poll_read(cx, &mut rb).map_ok(|()| rb.filled().len())
        })
        .await
    }
}

impl<T: AsyncRead + AsyncWrite + Unpin> super::conn_io::Io for PollRent<T> {
    /// Always ready: TLS may hold decrypted bytes already read from the socket, so an idle
    /// HTTPS connection keeps its read buffer (and rustls its own).
    async fn readable(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<T: AsyncRead + Unpin> AsyncReadRent for PollRent<T> {
    async fn read<B: IoBufMut>(&mut self, mut buf: B) -> BufResult<usize, B> {
        let res = self.read_raw(buf.write_ptr(), buf.bytes_total()).await;
        if let Ok(n) = res {
            // SAFETY: the read wrote `n` bytes at the start of the buffer's writable part.
            unsafe { buf.set_init(n) };
        }
        (res, buf)
    }

    async fn readv<B: IoVecBufMut>(&mut self, mut buf: B) -> BufResult<usize, B> {
        // The first iovec with room takes what one read gives.
        let (ptr, n) = (buf.write_iovec_ptr(), buf.write_iovec_len());
        // SAFETY: IoVecBufMut promises `n` valid iovecs at `ptr` while we own the buffer.
        let vecs = unsafe { std::slice::from_raw_parts(ptr, n) };
        let Some(v) = vecs.iter().find(|v| v.iov_len > 0) else { return (Ok(0), buf) };
        let (base, len) = (v.iov_base.cast::<u8>(), v.iov_len);
        let res = self.read_raw(base, len).await;
        if let Ok(n) = res {
            // SAFETY: the read wrote `n` bytes at the start of the first iovec with room; the
            // iovecs before it are empty, so `n` bytes from the start are initialised.
            unsafe { buf.set_init(n) };
        }
        (res, buf)
    }
}

impl<T: AsyncWrite + Unpin> PollRent<T> {
    async fn write_raw(&mut self, bytes: &[u8]) -> io::Result<usize> {
        let n = poll_fn(|cx| Pin::new(&mut self.inner).poll_write(cx, bytes)).await?;
        poll_fn(|cx| Pin::new(&mut self.inner).poll_flush(cx)).await?;
        Ok(n)
    }
}

impl<T: AsyncWrite + Unpin> AsyncWriteRent for PollRent<T> {
    async fn write<B: IoBuf>(&mut self, buf: B) -> BufResult<usize, B> {
        // SAFETY: IoBuf promises `bytes_init()` initialised bytes at `read_ptr()` while we own it.
        let bytes = unsafe { std::slice::from_raw_parts(buf.read_ptr(), buf.bytes_init()) };
        let res = self.write_raw(bytes).await;
        (res, buf)
    }

    async fn writev<B: IoVecBuf>(&mut self, buf: B) -> BufResult<usize, B> {
        // SAFETY: IoVecBuf promises `read_iovec_len()` valid iovecs at `read_iovec_ptr()`.
        let vecs = unsafe { std::slice::from_raw_parts(buf.read_iovec_ptr(), buf.read_iovec_len()) };
        let res = match vecs.iter().find(|v| v.iov_len > 0) {
            // SAFETY: a valid iovec of the buffer we own: `iov_len` readable bytes at `iov_base`.
            Some(v) => self.write_raw(unsafe { std::slice::from_raw_parts(v.iov_base.cast::<u8>(), v.iov_len) }).await,
            None => Ok(0),
        };
        (res, buf)
    }

    async fn flush(&mut self) -> io::Result<()> {
        poll_fn(|cx| Pin::new(&mut self.inner).poll_flush(cx)).await
    }

    async fn shutdown(&mut self) -> io::Result<()> {
        poll_fn(|cx| Pin::new(&mut self.inner).poll_shutdown(cx)).await
    }
}

/// Serve one accepted connection over TLS with `config`.
pub async fn serve<S: crate::http1::Service + crate::h2::Handler>(
    stream: TcpStream,
    config: Arc<rustls::ServerConfig>,
    ctx: &Rc<ShardCtx>,
    service: Rc<S>,
) {
    let fd = stream.as_raw_fd();
    let io = match stream.into_poll_io() {
        Ok(io) => io,
        Err(e) => {
            crate::log::warn(&format!("tls: cannot switch the connection to poll I/O: {e}"));
            return;
        }
    };
    let accept = tokio_rustls::TlsAcceptor::from(config).accept(io);
    let tls = monoio::select! {
        r = accept => match r {
            Ok(tls) => tls,
            Err(_) => {
                ctx.metrics.edge(Edge::TlsFailed);
                return;
            }
        },
        _ = monoio::time::sleep(ctx.conn.header_timeout) => {
            ctx.metrics.edge(Edge::TlsTimedOut);
            return;
        },
        _ = ctx.gate.finished() => return,
    };
    ctx.metrics.edge(Edge::TlsOk);
    let timeouts = crate::h2::conn::Timeouts { handshake: ctx.conn.header_timeout, idle: ctx.conn.idle_timeout };
    let settings = ctx.shared.config.h2;
    if tls.get_ref().1.alpn_protocol() == Some(b"h2") {
        Box::pin(crate::h2::conn::serve(tls, BytesMut::new(), service, &settings, timeouts, &ctx.gate, &ctx.metrics))
            .await;
        return;
    }
    let mut io = PollRent::new(tls, fd);
    match crate::h2::detect(&mut io, ctx.conn.idle_timeout, &ctx.gate).await {
        Detected::Http1(read) => {
            Box::pin(crate::http1::conn::serve(io, read, &*service, &ctx.conn, &ctx.gate, &ctx.date, &ctx.metrics))
                .await;
        }
        Detected::H2(read) => {
            let io = io.into_inner();
            Box::pin(crate::h2::conn::serve(io, read, service, &settings, timeouts, &ctx.gate, &ctx.metrics)).await;
        }
        Detected::BadPreface => crate::h2::refuse(io).await,
        Detected::Closed => {}
    }
}
