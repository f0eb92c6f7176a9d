//! The HTTP/1.1 connection loop: read, frame, call the service, write, repeat.
//!
//! One task per connection on its shard. Every request already buffered is answered before
//! the next read, so pipelined requests get their responses in order and in one write.
//! Timeouts: a request whose head has not fully arrived `header_timeout` after its first byte
//! gets 408; a connection idle (between requests, or mid-body with no progress) longer than
//! `idle_timeout` is closed. A connection holds the shard's gate only while a request is in
//! flight (first byte to response written); once the gate closes, every response carries
//! `connection: close`, and the shard exits when no request is in flight. When the drain's
//! grace period is over ([`Gate::finished`]) an answer still being made ends cleanly: a whole
//! one as 503, a streamed one with the body's own clean end ([`Response::cut`]).
//!
//! Closing after an error is a *lingering close*: write the response, shut down our sending
//! side, then read and discard what the client still sends for a bounded time. Without it a
//! client that is still uploading (a body over the limit) sees a reset instead of the 413.

use std::future::Future;
use std::task::Poll;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use monoio::buf::IoBufMut;
use monoio::io::AsyncWriteRentExt;

use super::parse::{Limits, Method};
use super::request::{Assembler, Request, Step};
use super::response::{write_chunk, write_head, write_response, DateCache, Response, CONTINUE, LAST_CHUNK};
use super::watch::{self, Stop};
use crate::error::{Error, Kind};
use crate::metrics::{Edge, ShardMetrics};
use crate::shard::gate::{Gate, GateGuard};
use crate::shard::local::Receiver;

/// Something that answers requests. `!Send` on purpose: it lives on one shard.
pub trait Service {
    fn call(&self, req: Request) -> impl Future<Output = Response>;
}

pub use crate::shard::conn_io::Io;

/// Per-connection settings, fixed at start-up.
#[derive(Clone, Copy, Debug)]
pub struct ConnConfig {
    pub limits: Limits,
    pub header_timeout: Duration,
    pub idle_timeout: Duration,
    /// How long a closing connection keeps draining what the client still sends.
    pub linger: Duration,
}

impl Default for ConnConfig {
    fn default() -> Self {
        ConnConfig {
            limits: Limits::default(),
            header_timeout: Duration::from_secs(30),
            idle_timeout: Duration::from_secs(300),
            linger: Duration::from_secs(5),
        }
    }
}

const READ_CHUNK: usize = 16 * 1024;
/// What the output buffer starts with (it grows for larger answers).
const OUT_CHUNK: usize = 4 * 1024;
/// Pipelined responses are flushed once this much output is pending.
const FLUSH_AT: usize = 64 * 1024;

enum ReadOutcome {
    Data,
    Eof,
    Failed,
    TimedOut,
}

/// Serve one connection until it closes. `buf` holds what was already read from it (the
/// bytes that told HTTP/1.1 from HTTP/2, see [`crate::h2::detect`]).
pub async fn serve<S: Service, C: Io>(
    mut stream: C,
    mut buf: BytesMut,
    svc: &S,
    cfg: &ConnConfig,
    gate: &Gate,
    date: &DateCache,
    metrics: &ShardMetrics,
) {
    let mut out: Vec<u8> = Vec::with_capacity(OUT_CHUNK);
    let mut asm = Assembler::new(cfg.limits);
    // When the first byte of the current, not yet complete, request arrived.
    let mut started: Option<Instant> = None;
    // Held from the first byte of a request until its response is written: a draining shard
    // waits for these, not for idle keep-alive connections.
    let mut inflight: Option<GateGuard> = None;
    // Whether the request that holds `inflight` began after the drain started.
    let mut arrived_draining = false;

    loop {
        // Answer everything that is already buffered.
        let mut close = false;
        loop {
            // One request off the buffer, its answer's future made and boxed in this one
            // statement: the request and the step it came in are gone before any await, so
            // they take no room in the connection's future.
            let (call, head_only, keep_alive) = match asm.next(&mut buf) {
                Ok(Step::Ready(mut req)) => {
                    started = None;
                    if inflight.is_none() {
                        inflight = Some(gate.enter());
                        arrived_draining = gate.is_closed();
                    }
                    req.arrived_draining = arrived_draining;
                    let head_only = req.head.method == Method::Head;
                    let keep_alive = req.head.keep_alive;
                    (Box::pin(svc.call(req)), head_only, keep_alive)
                }
                Ok(Step::NeedMore { send_continue, mid_request }) => {
                    if send_continue {
                        out.extend_from_slice(CONTINUE);
                    }
                    if mid_request && started.is_none() {
                        started = Some(Instant::now());
                    }
                    if mid_request && inflight.is_none() {
                        inflight = Some(gate.enter());
                        arrived_draining = gate.is_closed();
                    }
                    break;
                }
                Err(e) => {
                    match e.kind() {
                        Kind::PayloadTooLarge => metrics.edge(Edge::BodyTooLarge),
                        Kind::HeadersTooLarge => metrics.edge(Edge::HeadersTooLarge),
                        _ => {}
                    }
                    write_response(&mut out, &Response::error(&e), false, true, date);
                    close = true;
                    break;
                }
            };
            // The client may leave while its answer is made: dropping the call cancels
            // the request (its worker is told to stop).
            let mut resp = monoio::select! {
                // The watch is boxed, as the call and every other wait an idle connection
                // is not in: their state lives on the heap while they run, so the
                // connection's own future (all an idle connection holds) stays small
                // (a timer alone is 640 bytes).
                r = call => r,
                stop = Box::pin(watch::until_stop(&stream, gate)) => match stop {
                    Stop::PeerGone => return,
                    Stop::ShuttingDown => Response::error(&Error::shutting_down()),
                },
            };
            close = !keep_alive || resp.close || gate.is_closed();
            if let Some(chunks) = resp.take_stream() {
                write_head(&mut out, &resp, close, true, date);
                if head_only {
                    out.extend_from_slice(LAST_CHUNK);
                } else {
                    let sent;
                    // Its own statement: a temporary of the awaiting one would stay in
                    // this future's layout.
                    let body = Box::pin(stream_body(&mut stream, out, chunks, resp.cut, gate));
                    (sent, out) = body.await;
                    if !sent {
                        // The client went away mid-stream; dropping the receiver told the
                        // producer.
                        return;
                    }
                }
            } else {
                write_response(&mut out, &resp, head_only, close, date);
            }
            if close {
                break;
            }
            if out.len() >= FLUSH_AT {
                let (res, o) = stream.write_all(out).await;
                out = o;
                out.clear();
                if res.is_err() {
                    return;
                }
            }
        }
        if !out.is_empty() {
            let (res, o) = stream.write_all(out).await;
            out = o;
            out.clear();
            if res.is_err() {
                return;
            }
        }
        if close {
            drop(inflight);
            let close = Box::pin(linger_close(stream, cfg.linger));
            close.await;
            return;
        }

        // Read more. Which clock applies depends on where we are in a request.
        let head_pending = !buf.is_empty() && !asm.mid_request();
        if buf.is_empty() && !asm.mid_request() {
            // Nothing of a request is here: this connection no longer holds up a drain.
            inflight = None;
        }
        let wait = match (head_pending, started) {
            (true, Some(t0)) => cfg.header_timeout.saturating_sub(t0.elapsed()),
            _ => cfg.idle_timeout,
        };
        if buf.is_empty() && !asm.mid_request() {
            // Between requests: wait for the next one holding no buffer, so an idle
            // keep-alive connection costs its socket and this task, not 32 KB of buffers.
            buf = BytesMut::new();
            out = Vec::new();
            monoio::select! {
                r = stream.readable() => if r.is_err() { return },
                _ = gate.finished() => return,
                _ = monoio::time::sleep(wait) => {
                    metrics.edge(Edge::IdleTimeout);
                    return;
                },
            }
            out.reserve(OUT_CHUNK);
        }
        if buf.capacity() - buf.len() < READ_CHUNK / 4 {
            buf.reserve(READ_CHUNK);
        }
        let read = Box::pin(read_some(&mut stream, buf, wait, gate));
        let (outcome, b) = read.await;
        match outcome {
            ReadOutcome::Data => buf = b.expect("buffer returns with data"),
            ReadOutcome::Eof | ReadOutcome::Failed => return,
            ReadOutcome::TimedOut => {
                drop(inflight);
                metrics.edge(if head_pending { Edge::HeaderTimeout } else { Edge::IdleTimeout });
                if head_pending {
                    let e = Error::new(Kind::RequestTimeout, "request header not received in time");
                    write_response(&mut out, &Response::error(&e), false, true, date);
                    let (_, _) = stream.write_all(out).await;
                    let close = Box::pin(linger_close(stream, cfg.linger));
                    close.await;
                }
                return;
            }
        }
    }
}

/// One read into the buffer's spare capacity, with a timeout, cut short when the shard
/// finishes. The buffer comes back only when the read finished; otherwise the connection is
/// about to close anyway.
///
/// monoio reads into the *start* of an `IoBufMut`, so the read targets `buf[len..]` through a
/// `SliceMut`; the slice's `set_init` then extends `buf`'s length by what arrived.
async fn read_some<C: Io>(
    stream: &mut C,
    buf: BytesMut,
    wait: Duration,
    gate: &Gate,
) -> (ReadOutcome, Option<BytesMut>) {
    let len = buf.len();
    let read = stream.read(buf.slice_mut(len..));
    monoio::select! {
        _ = gate.finished() => (ReadOutcome::Eof, None),
        (res, b) = read => match res {
            Ok(0) => (ReadOutcome::Eof, None),
            Ok(_) => (ReadOutcome::Data, Some(b.into_inner())),
            Err(_) => (ReadOutcome::Failed, None),
        },
        _ = monoio::time::sleep(wait) => (ReadOutcome::TimedOut, None),
    }
}

/// Write what `out` holds, then every chunk of `chunks` as it arrives (each flushed at once:
/// a streamed answer must not wait in a buffer), then the last chunk. Returns false when the
/// client is gone (a write failed, or the peer closed while the producer was quiet); `out`
/// comes back empty.
async fn stream_body<C: Io>(
    stream: &mut C,
    mut out: Vec<u8>,
    mut chunks: Receiver<Bytes>,
    cut: Option<&'static [u8]>,
    gate: &Gate,
) -> (bool, Vec<u8>) {
    // The peer is watched through a second descriptor of the socket, waiting for it to become
    // readable (a close, a reset, or pipelined bytes): no timer stays pending through the
    // stream, which would turn every park of the shard into a timed wait (a kernel timer armed
    // and cancelled per token). The drain's end is registered once and then only checked when
    // the task wakes.
    let second = watch::second_handle(stream);
    let gone = async move {
        match second {
            Some(handle) => watch::gone(handle).await,
            None => std::future::pending().await,
        }
    };
    let mut gone = std::pin::pin!(gone);
    let finished = gate.finished();
    let mut finished = std::pin::pin!(finished);
    let mut finished_armed = false;
    loop {
        let (res, o) = stream.write_all(out).await;
        out = o;
        out.clear();
        if res.is_err() {
            return (false, out);
        }
        let wait = std::future::poll_fn(|cx| {
            if let Poll::Ready(c) = chunks.poll_recv(cx) {
                return Poll::Ready(Wait::Chunk(c));
            }
            if gate.is_finished() {
                return Poll::Ready(Wait::Finished);
            }
            if !finished_armed {
                if finished.as_mut().poll(cx).is_ready() {
                    return Poll::Ready(Wait::Finished);
                }
                finished_armed = true;
            }
            if gone.as_mut().poll(cx).is_ready() {
                return Poll::Ready(Wait::Gone);
            }
            Poll::Pending
        })
        .await;
        let next = match wait {
            Wait::Chunk(c) => c,
            Wait::Gone => return (false, out),
            Wait::Finished => {
                // The drain is over: what is already made goes out, then the body's clean
                // end (an error event for SSE), then the last chunk.
                while let Some(more) = chunks.try_recv() {
                    write_chunk(&mut out, &more);
                }
                if let Some(cut) = cut {
                    write_chunk(&mut out, cut);
                }
                let (_, out) = end_body(stream, out).await;
                return (false, out);
            }
        };
        match next {
            Some(chunk) => {
                write_chunk(&mut out, &chunk);
                // Whatever else is already queued goes out in the same write, and so does the
                // body's end when the producer is already done (a stream's last events and its
                // end are one write, one wake-up of the client, not two).
                while let Some(more) = chunks.try_recv() {
                    write_chunk(&mut out, &more);
                }
                if chunks.is_finished() {
                    return end_body(stream, out).await;
                }
            }
            None => return end_body(stream, out).await,
        }
    }
}

/// Write what `out` holds and the chunked body's last chunk, in one write; whether it went
/// out, and the buffer back (cleared).
async fn end_body<C: Io>(stream: &mut C, mut out: Vec<u8>) -> (bool, Vec<u8>) {
    out.extend_from_slice(LAST_CHUNK);
    let (res, mut out) = stream.write_all(out).await;
    out.clear();
    (res.is_ok(), out)
}

/// What woke a streamed body's wait.
enum Wait {
    Chunk(Option<Bytes>),
    /// The peer closed or reset the connection.
    Gone,
    /// The drain is over.
    Finished,
}

/// Shut our side, then discard what the client still sends until it closes or `linger` ends.
async fn linger_close<C: Io>(mut stream: C, linger: Duration) {
    let _ = stream.shutdown().await;
    let deadline = Instant::now() + linger;
    let mut scratch = vec![0u8; READ_CHUNK];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return;
        }
        monoio::select! {
            (res, b) = stream.read(scratch) => match res {
                Ok(n) if n > 0 => scratch = b,
                _ => return,
            },
            _ = monoio::time::sleep(left) => return,
        }
    }
}
