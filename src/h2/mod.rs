//! HTTP/2 on a shard: cleartext prior-knowledge h2c over the shard's own monoio connections.
//!
//! * this file: telling an HTTP/2 connection from an HTTP/1.1 one by its first bytes
//!   ([`detect`]), the connection's [`Settings`] (flow-control windows from
//!   `DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE` / `DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE`), and
//!   [`Prefixed`], which hands the bytes read while detecting back to the HTTP/2 codec;
//! * [`conn`]: the connection loop (the `h2` crate's server over monoio's poll-style
//!   `TcpStreamPoll`), one task per stream, graceful close with the shard's gate;
//! * [`body`]: reading a request body within a limit and sending data within the peer's
//!   flow-control window (capacity reserved before each send, received bytes released);
//! * [`trailers`]: spotting pseudo-header fields in request trailers, which `h2` drops unseen.
//!
//! The HTTP/1.1 path never goes through any of this beyond [`detect`]: the first read of a
//! connection happens here, and an HTTP/1.1 connection continues on monoio's completion-based
//! I/O in [`crate::http1::conn::serve`] with the bytes already read. Only an HTTP/2
//! connection is switched to poll-style I/O, which is what `h2` (tokio's I/O traits) needs.
//!
//! Called by `shard`; calls only the [`Handler`] it is given. Knows nothing of routes, models
//! or gRPC.

pub mod body;
pub mod conn;
pub mod trailers;

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::{Buf, Bytes, BytesMut};
use monoio::buf::IoBufMut;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};

use crate::shard::gate::Gate;

/// The client connection preface of RFC 9113 §3.4.
pub const PREFACE: &[u8; 24] = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";

/// What a connection's first bytes say.
pub enum Detected {
    /// HTTP/1.x (or anything else that is not the HTTP/2 preface), with the bytes read.
    Http1(BytesMut),
    /// The HTTP/2 connection preface, with the bytes read (preface included).
    H2(BytesMut),
    /// A preface that starts as HTTP/2's (`PRI * HTTP/2.0`, a request line no HTTP/1.x client
    /// sends) and then goes wrong: answered with [`refuse`].
    BadPreface,
    /// The peer closed, the read failed or timed out, or the shard finished.
    Closed,
}

/// Classify `bytes`: `Some(true)` for the whole preface, `Some(false)` when they cannot begin
/// it, `None` while they are a strict prefix of it.
pub fn classify(bytes: &[u8]) -> Option<bool> {
    let n = bytes.len().min(PREFACE.len());
    if bytes[..n] != PREFACE[..n] {
        return Some(false);
    }
    (n == PREFACE.len()).then_some(true)
}

/// Whether `bytes`, which are not the preface, begin as only an HTTP/2 client would.
fn broken_preface(bytes: &[u8]) -> bool {
    bytes.starts_with(&PREFACE[..14])
}

/// GOAWAY (last stream 0, PROTOCOL_ERROR) for a connection whose preface is invalid.
const BAD_PREFACE_GOAWAY: &[u8] =
    b"\x00\x00\x29\x07\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00\x01invalid HTTP/2 connection preface";

/// Answer an invalid connection preface as RFC 9113 §3.4 says: a connection error of type
/// PROTOCOL_ERROR (the GOAWAY, then the close).
pub async fn refuse(mut stream: impl monoio::io::AsyncWriteRent) {
    let (_, _) = monoio::io::AsyncWriteRentExt::write_all(&mut stream, BAD_PREFACE_GOAWAY).await;
    let _ = monoio::io::AsyncWriteRent::shutdown(&mut stream).await;
}

/// Read a new connection's first bytes until they tell HTTP/2 from HTTP/1.1. Waits at most
/// `wait` for them (the idle timeout of a fresh connection).
pub async fn detect(stream: &mut impl crate::shard::conn_io::Io, wait: Duration, gate: &Gate) -> Detected {
    let deadline = std::time::Instant::now() + wait;
    // A connection that says nothing yet holds no buffer.
    monoio::select! {
        r = stream.readable() => if r.is_err() { return Detected::Closed },
        _ = gate.finished() => return Detected::Closed,
        _ = monoio::time::sleep(wait) => return Detected::Closed,
    }
    let mut buf = BytesMut::with_capacity(16 * 1024);
    loop {
        let len = buf.len();
        let read = stream.read(buf.slice_mut(len..));
        let left = deadline.saturating_duration_since(std::time::Instant::now());
        buf = monoio::select! {
            _ = gate.finished() => return Detected::Closed,
            (res, b) = read => match res {
                Ok(n) if n > 0 => b.into_inner(),
                _ => return Detected::Closed,
            },
            _ = monoio::time::sleep(left) => return Detected::Closed,
        };
        match classify(&buf) {
            Some(true) => return Detected::H2(buf),
            Some(false) if broken_preface(&buf) => return Detected::BadPreface,
            Some(false) => return Detected::Http1(buf),
            None => {}
        }
    }
}

pub use crate::config::settings::{Settings, MAX_WINDOW};

/// What serves the streams of an HTTP/2 connection. `!Send`: it lives on one shard.
pub trait Handler: 'static {
    /// Answer one stream: its request (body still arriving) and the handle to respond with.
    fn stream(
        self: Rc<Self>,
        req: http::Request<::h2::RecvStream>,
        respond: ::h2::server::SendResponse<Bytes>,
    ) -> impl Future<Output = ()>;
}

/// An I/O object that yields `prefix` before reading from `inner`: the bytes [`detect`] read
/// go back to the HTTP/2 codec, which expects to read the preface itself.
/// With a [`trailers::Watch`], every byte read is shown to it too.
pub struct Prefixed<T> {
    prefix: Bytes,
    inner: T,
    watch: Option<trailers::Watch>,
}

impl<T> Prefixed<T> {
    pub fn new(prefix: Bytes, inner: T) -> Self {
        Prefixed { prefix, inner, watch: None }
    }

    /// Show every byte read (preface included) to `watch`.
    pub fn watching(mut self, watch: trailers::Watch) -> Self {
        self.watch = Some(watch);
        self
    }
}

impl<T: AsyncRead + Unpin> AsyncRead for Prefixed<T> {
    fn poll_read(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &mut ReadBuf<'_>) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        if !self.prefix.is_empty() {
            let n = self.prefix.len().min(buf.remaining());
            buf.put_slice(&self.prefix[..n]);
            self.prefix.advance(n);
        } else {
            let this = &mut *self;
            if Pin::new(&mut this.inner).poll_read(cx, buf)?.is_pending() {
                return Poll::Pending;
            }
        }
        if let Some(w) = self.watch.as_mut() {
            w.feed(&buf.filled()[before..]);
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: AsyncWrite + Unpin> AsyncWrite for Prefixed<T> {
    fn poll_write(mut self: Pin<&mut Self>, cx: &mut Context<'_>, buf: &[u8]) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write(cx, buf)
    }
    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }
    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.inner).poll_write_vectored(cx, bufs)
    }
    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn preface_is_told_from_http1() {
        assert_eq!(classify(PREFACE), Some(true));
        assert_eq!(classify(&PREFACE[..10]), None);
        assert_eq!(classify(b"P"), None);
        assert_eq!(classify(b"POST / HTTP/1.1\r\n"), Some(false));
        assert_eq!(classify(b"GET / HTTP/1.1\r\n\r\n"), Some(false));
        assert_eq!(classify(b"PRI * HTTP/1.1\r\n"), Some(false));
        let mut longer = PREFACE.to_vec();
        longer.extend_from_slice(b"\x00\x00\x00\x04\x00");
        assert_eq!(classify(&longer), Some(true));
        assert!(broken_preface(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n"));
        assert!(!broken_preface(b"PRI * HTTP/1.1\r\n\r\n"));
        assert!(!broken_preface(b"GET / HTTP/1.1\r\n"));
        assert_eq!(BAD_PREFACE_GOAWAY.len(), 9 + BAD_PREFACE_GOAWAY[2] as usize);
    }

    #[test]
    fn windows_come_from_the_environment() {
        let env = |n: &str| match n {
            "DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE" => Some("16777216".to_string()),
            "DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE" => Some("nope".to_string()),
            _ => None,
        };
        let s = Settings::from_env(env, 8192);
        assert_eq!(s.connection_window, Some(16 * 1024 * 1024));
        assert_eq!(s.stream_window, None);
        assert_eq!(s.max_header_list_size, 8192);
        let huge = Settings::from_env(|_| Some("4294967295".into()), 1);
        assert_eq!(huge.stream_window, Some(MAX_WINDOW));
    }
}
