//! The HTTP/2 connection loop: handshake, accept streams, hand each to the [`Handler`] on its
//! own task, close gracefully when the shard drains.
//!
//! The socket moves from monoio's completion-based I/O to its poll-based `TcpStreamPoll`
//! (`into_poll_io`), which implements tokio's `AsyncRead`/`AsyncWrite` as `h2` needs; the
//! bytes read while detecting the protocol are replayed through [`Prefixed`]. Polling
//! `poll_accept` drives the whole connection (reads, writes, flow control, pings); the stream
//! tasks only queue frames. Protocol errors are `h2`'s to answer (GOAWAY or RST_STREAM as
//! RFC 9113 says); a failed connection ends only its own task.
//!
//! Shutdown: when the shard's gate closes, the server sends GOAWAY and keeps serving the
//! streams already open; once they finish `poll_accept` ends. When the gate finishes (grace
//! period over) the connection is dropped.

use std::future::poll_fn;
use std::rc::Rc;
use std::time::Duration;

use bytes::{Bytes, BytesMut};
use monoio::io::IntoPollIo;
use monoio::net::TcpStream;

use super::{Handler, Prefixed, Settings};
use crate::shard::gate::Gate;

/// Serve one HTTP/2 connection whose first bytes (`read`, the preface among them) were already
/// read. `handshake_timeout` bounds the wait for the client's SETTINGS.
pub async fn serve<H: Handler>(
    stream: TcpStream,
    read: BytesMut,
    handler: Rc<H>,
    settings: &Settings,
    handshake_timeout: Duration,
    gate: &Gate,
) {
    let _ = stream.set_nodelay(true);
    let io = match stream.into_poll_io() {
        Ok(io) => io,
        Err(e) => {
            crate::log::warn(&format!("h2: cannot switch the connection to poll I/O: {e}"));
            return;
        }
    };
    let mut builder = h2::server::Builder::new();
    builder.max_concurrent_streams(settings.max_concurrent_streams).max_header_list_size(settings.max_header_list_size);
    if let Some(w) = settings.stream_window {
        builder.initial_window_size(w);
    }
    if let Some(w) = settings.connection_window {
        builder.initial_connection_window_size(w);
    }
    let handshake = builder.handshake::<_, Bytes>(Prefixed::new(read.freeze(), io));
    let mut conn = monoio::select! {
        c = handshake => match c {
            Ok(c) => c,
            Err(_) => return,
        },
        _ = monoio::time::sleep(handshake_timeout) => return,
        _ = gate.finished() => return,
    };
    let mut closing = false;
    loop {
        monoio::select! {
            next = poll_fn(|cx| conn.poll_accept(cx)) => match next {
                Some(Ok((req, respond))) => {
                    monoio::spawn(handler.clone().stream(req, respond));
                }
                // A connection error: h2 has already told the peer (GOAWAY) where it could.
                Some(Err(_)) | None => return,
            },
            _ = gate.closed(), if !closing => {
                conn.graceful_shutdown();
                closing = true;
            },
            _ = gate.finished() => return,
        }
    }
}
