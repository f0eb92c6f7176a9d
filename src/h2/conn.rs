//! The HTTP/2 connection loop: handshake, accept streams, hand each to the [`Handler`] on its
//! own task, close gracefully when the shard drains.
//!
//! The caller has moved the socket from monoio's completion-based I/O to its poll-based
//! `TcpStreamPoll` (`into_poll_io`), which implements tokio's `AsyncRead`/`AsyncWrite` as `h2`
//! needs (or put TLS over it); the bytes read while detecting the protocol are replayed
//! through [`Prefixed`]. Polling
//! `poll_accept` drives the whole connection (reads, writes, flow control, pings); the stream
//! tasks only queue frames. Protocol errors are `h2`'s to answer (GOAWAY or RST_STREAM, then
//! the close, as RFC 9113 says; for malformed frames and HPACK errors `h2` uses PROTOCOL_ERROR
//! where the RFC names FRAME_SIZE_ERROR, COMPRESSION_ERROR or FLOW_CONTROL_ERROR:
//! `scripts/h2_conformance.py` lists them); a failed connection ends only its own task.
//! `h2` drops pseudo-header fields of request trailers unseen, so the bytes read also go past
//! a [`super::trailers::Watch`], and each stream's request carries its
//! [`super::trailers::Flag`] for the handler to refuse such a request (RST_STREAM
//! PROTOCOL_ERROR).
//!
//! A connection with no open stream for `idle_timeout` is closed the same graceful way.
//!
//! Shutdown: when the shard's gate closes, the server sends GOAWAY and keeps serving the
//! streams already open; once they finish `poll_accept` ends. When the gate finishes (grace
//! period over) each open stream writes its clean end (an SSE error event and `[DONE]`, a
//! gRPC status), and the connection is dropped once they are written (at most
//! [`FINISH_FLUSH`] later).

use std::cell::Cell;
use std::future::poll_fn;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Handler, Prefixed, Settings};
use crate::metrics::{Edge, ShardMetrics};
use crate::shard::gate::Gate;

/// The open streams of a connection, and when the last one ended.
#[derive(Default)]
struct Streams {
    open: Cell<usize>,
    last_end: Cell<Option<Instant>>,
}

/// Counts a stream as open while it lives.
struct Open(Rc<Streams>);

impl Open {
    fn new(s: &Rc<Streams>) -> Open {
        s.open.set(s.open.get() + 1);
        Open(s.clone())
    }
}

impl Drop for Open {
    fn drop(&mut self) {
        self.0.open.set(self.0.open.get() - 1);
        self.0.last_end.set(Some(Instant::now()));
    }
}

/// Timeouts of a connection.
#[derive(Clone, Copy, Debug)]
pub struct Timeouts {
    /// For the client's SETTINGS after the preface.
    pub handshake: Duration,
    /// With no stream open.
    pub idle: Duration,
}

/// Serve one HTTP/2 connection (a socket switched to poll I/O, or TLS over one) whose first
/// bytes (`read`, the preface among them) were already read.
pub async fn serve<H: Handler, IO: AsyncRead + AsyncWrite + Unpin>(
    io: IO,
    read: BytesMut,
    handler: Rc<H>,
    settings: &Settings,
    timeouts: Timeouts,
    gate: &Gate,
    metrics: &ShardMetrics,
) {
    let mut builder = h2::server::Builder::new();
    builder
        .max_concurrent_streams(settings.max_concurrent_streams)
        .max_header_list_size(settings.max_header_list_size)
        .max_pending_accept_reset_streams(settings.max_pending_resets);
    if let Some(w) = settings.stream_window {
        builder.initial_window_size(w);
    }
    if let Some(w) = settings.connection_window {
        builder.initial_connection_window_size(w);
    }
    let (watch, marker) = super::trailers::Watch::new();
    let handshake = builder.handshake::<_, Bytes>(Prefixed::new(read.freeze(), io).watching(watch));
    let mut conn = monoio::select! {
        c = handshake => match c {
            Ok(c) => c,
            Err(_) => return,
        },
        _ = monoio::time::sleep(timeouts.handshake) => {
            metrics.edge(Edge::H2HandshakeTimeout);
            return;
        },
        _ = gate.finished() => return,
    };
    let mut closing = false;
    // When the drain ended with streams open: they get until FINISH_FLUSH after it.
    let mut finishing: Option<Instant> = None;
    let streams = Rc::new(Streams::default());
    let opened = Instant::now();
    loop {
        let idle_for = streams.last_end.get().unwrap_or(opened).elapsed();
        let idle_left = match streams.open.get() {
            0 => timeouts.idle.saturating_sub(idle_for),
            _ => timeouts.idle,
        };
        monoio::select! {
            next = poll_fn(|cx| conn.poll_accept(cx)) => match next {
                Some(Ok((mut req, respond))) => {
                    let open = Open::new(&streams);
                    let h = handler.clone();
                    let id = respond.stream_id().as_u32();
                    req.extensions_mut().insert(marker.accept(id));
                    let marker = marker.clone();
                    monoio::spawn(async move {
                        h.stream(req, respond).await;
                        marker.finish(id);
                        drop(open);
                    });
                }
                // A connection error: h2 has already told the peer (GOAWAY) where it could.
                Some(Err(e)) => {
                    if e.reason() == Some(h2::Reason::ENHANCE_YOUR_CALM) {
                        metrics.edge(Edge::H2Calm);
                    } else if !e.is_io() && e.reason() != Some(h2::Reason::NO_ERROR) {
                        metrics.edge(Edge::H2Error);
                    }
                    return;
                }
                None => return,
            },
            _ = gate.closed(), if !closing => {
                conn.graceful_shutdown();
                closing = true;
            },
            _ = monoio::time::sleep(idle_left), if !closing => {
                let idle_for = streams.last_end.get().unwrap_or(opened).elapsed();
                if streams.open.get() == 0 && idle_for >= timeouts.idle {
                    metrics.edge(Edge::IdleTimeout);
                    conn.graceful_shutdown();
                    closing = true;
                }
            },
            _ = gate.finished(), if finishing.is_none() => {
                // The drain is over: streams still open write their clean ends; drive the
                // connection a moment longer for them, then drop it.
                if streams.open.get() == 0 {
                    return;
                }
                finishing = Some(Instant::now() + FINISH_FLUSH);
                closing = true;
                conn.graceful_shutdown();
            },
            _ = monoio::time::sleep(finishing.map_or(Duration::ZERO, |t| t.saturating_duration_since(Instant::now()))),
                if finishing.is_some() => return,
        }
        if finishing.is_some() && streams.open.get() == 0 {
            return;
        }
    }
}

/// How long a connection keeps going after the drain ends, for its streams' clean ends.
const FINISH_FLUSH: Duration = Duration::from_millis(500);
