//! The HTTP/1.1 keep-alive client: one [`Conn`] per connection, one request at a time on it.
//!
//! Reading an answer is a sans-I/O state machine ([`Answer`]): bytes in, a [`Step`] out. It
//! parses the head with httparse, frames the body by `Content-Length`, chunked coding
//! (the server's own [`ChunkedDecoder`]) or connection close, and hands the body to the SSE
//! parser as it arrives (streams) or collects it (whole answers, non-200 answers). The I/O
//! side ([`exchange`]) writes the prepared request bytes and feeds reads into it; it runs on
//! the bench's monoio runtime, one task per connection, no extra threads.
//!
//! A connection is reused unless the server said `Connection: close`, framed by close, or the
//! answer failed part-way (unread bytes would poison the next answer). One that sat idle for
//! a while is checked before reuse: the server may have closed it meanwhile (its idle
//! timeout), and a request sent on it would be lost.

use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use bytes::Bytes;
use monoio::io::{AsyncReadRent, AsyncWriteRentExt};
use monoio::net::TcpStream;

use super::sse::{inspect_whole, SseParser, StreamTracker};
use super::stats::{FailKind, Failure, Sample};
use crate::http1::parse::ChunkedDecoder;

/// Largest response head accepted.
const MAX_HEAD: usize = 64 << 10;
/// Largest whole body kept.
const MAX_BODY: usize = 64 << 20;
/// Read buffer size.
const READ_BUF: usize = 64 << 10;

/// An open keep-alive connection.
pub struct Conn {
    stream: TcpStream,
    buf: Vec<u8>,
    /// When it last went back to the pool.
    idle_since: Instant,
}

/// A connection idle longer than this is looked at before it carries a request (see
/// [`Conn::closed_while_idle`]); one reused sooner is not (no system call per request).
const LOOK_AFTER: Duration = Duration::from_secs(1);

impl Conn {
    /// Mark the start of an idle spell (the connection goes back to the pool).
    pub fn park(&mut self) {
        self.idle_since = Instant::now();
    }

    /// Whether the server closed (or reset) this connection while it sat in the pool: a
    /// server's idle timeout ends keep-alive connections, and a request sent on one of
    /// them would fail unanswered. Looked at only after [`LOOK_AFTER`] of idleness.
    pub fn closed_while_idle(&self) -> bool {
        self.idle_since.elapsed() >= LOOK_AFTER
            && crate::http1::watch::peer(&self.stream) != crate::http1::watch::Peer::Quiet
    }
}

/// Open a connection (Nagle off: requests are written whole).
pub async fn connect(addr: SocketAddr) -> io::Result<Conn> {
    let stream = TcpStream::connect(addr).await?;
    stream.set_nodelay(true)?;
    Ok(Conn { stream, buf: Vec::with_capacity(READ_BUF), idle_since: Instant::now() })
}

/// Send `req` on `conn` and read its answer. Returns the outcome, and whether the connection
/// may carry the next request.
pub async fn exchange(conn: &mut Conn, req: Bytes, stream: bool, start: Instant) -> (Result<Sample, Failure>, bool) {
    let (res, _) = conn.stream.write_all(req).await;
    if let Err(e) = res {
        return (Err(Failure::new(FailKind::Closed, format!("write failed: {e}"))), false);
    }
    let mut answer = Answer::new(stream, start);
    loop {
        let mut buf = std::mem::take(&mut conn.buf);
        buf.clear();
        let (res, buf) = conn.stream.read(buf).await;
        conn.buf = buf;
        let now = Instant::now();
        let step = match res {
            Ok(0) => answer.eof(now),
            Ok(n) => answer.feed(&conn.buf[..n], now),
            Err(e) => Step::Done(Err(Failure::new(FailKind::Closed, format!("read failed: {e}"))), false),
        };
        if let Step::Done(outcome, reuse) = step {
            return (outcome, reuse);
        }
    }
}

/// What the answer needs next.
#[derive(Debug)]
pub enum Step {
    More,
    /// Finished: the outcome, and whether the connection is reusable.
    Done(Result<Sample, Failure>, bool),
}

#[derive(Debug)]
enum Framing {
    Length(u64),
    Chunked(ChunkedDecoder),
    Close,
}

#[derive(Debug)]
struct Head {
    status: u16,
    close: bool,
    framing: Framing,
}

/// The reading side of one request.
#[derive(Debug)]
pub struct Answer {
    stream: bool,
    start: Instant,
    head: Option<Head>,
    head_buf: Vec<u8>,
    dechunked: Vec<u8>,
    whole: Vec<u8>,
    sse: SseParser,
    tracker: StreamTracker,
}

fn done_err(f: Failure) -> Step {
    Step::Done(Err(f), false)
}

impl Answer {
    pub fn new(stream: bool, start: Instant) -> Answer {
        Answer {
            stream,
            start,
            head: None,
            head_buf: Vec::new(),
            dechunked: Vec::new(),
            whole: Vec::new(),
            sse: SseParser::default(),
            tracker: StreamTracker::default(),
        }
    }

    /// Bytes read at `now`.
    pub fn feed(&mut self, data: &[u8], now: Instant) -> Step {
        if self.head.is_some() {
            return self.body(data, now);
        }
        self.head_buf.extend_from_slice(data);
        let mut headers = [httparse::EMPTY_HEADER; 48];
        let mut resp = httparse::Response::new(&mut headers);
        let len = match resp.parse(&self.head_buf) {
            Ok(httparse::Status::Complete(len)) => len,
            Ok(httparse::Status::Partial) if self.head_buf.len() > MAX_HEAD => {
                return done_err(Failure::malformed("a response head over 64 KiB"))
            }
            Ok(httparse::Status::Partial) => return Step::More,
            Err(e) => return done_err(Failure::malformed(format!("not an HTTP/1.1 response: {e}"))),
        };
        let status = resp.code.unwrap_or(0);
        let mut close = resp.version == Some(0);
        let (mut length, mut chunked, mut event_stream) = (None, false, false);
        for h in resp.headers.iter() {
            let v = std::str::from_utf8(h.value).unwrap_or("").trim();
            if h.name.eq_ignore_ascii_case("content-length") {
                match v.parse::<u64>() {
                    Ok(n) => length = Some(n),
                    Err(_) => return done_err(Failure::malformed(format!("bad Content-Length {v:?}"))),
                }
            } else if h.name.eq_ignore_ascii_case("transfer-encoding") {
                chunked = v.to_ascii_lowercase().ends_with("chunked");
            } else if h.name.eq_ignore_ascii_case("connection") {
                close = v.eq_ignore_ascii_case("close");
            } else if h.name.eq_ignore_ascii_case("content-type") {
                event_stream = v.to_ascii_lowercase().starts_with("text/event-stream");
            }
        }
        if (100..200).contains(&status) {
            // An interim answer: drop it and read the real one.
            self.head_buf.drain(..len);
            return if self.head_buf.is_empty() { Step::More } else { self.feed(&[], now) };
        }
        if status == 200 && self.stream && !event_stream {
            return done_err(Failure::malformed("a streamed request answered without text/event-stream"));
        }
        let framing = if chunked {
            Framing::Chunked(ChunkedDecoder::new(MAX_HEAD))
        } else if let Some(n) = length {
            Framing::Length(n)
        } else {
            close = true;
            Framing::Close
        };
        self.head = Some(Head { status, close, framing });
        let rest = self.head_buf.split_off(len);
        if let Some(Head { framing: Framing::Length(0), .. }) = self.head {
            return self.complete(now);
        }
        self.body(&rest, now)
    }

    /// The connection ended at `now`.
    pub fn eof(&mut self, now: Instant) -> Step {
        match &self.head {
            Some(Head { framing: Framing::Close, .. }) => self.complete(now),
            _ => done_err(Failure::new(FailKind::Closed, "the connection closed before the answer was complete")),
        }
    }

    fn body(&mut self, data: &[u8], now: Instant) -> Step {
        let Some(head) = self.head.as_mut() else { return Step::More };
        match &mut head.framing {
            Framing::Length(rem) => {
                let take = (*rem).min(data.len() as u64) as usize;
                *rem -= take as u64;
                let finished = *rem == 0;
                if let Err(f) = self.content(&data[..take], now) {
                    return done_err(f);
                }
                if finished {
                    return self.complete(now);
                }
            }
            Framing::Chunked(dec) => {
                // The decoder consumes everything up to the end of the body.
                let p = match dec.decode(data, &mut self.dechunked, usize::MAX) {
                    Ok(p) => p,
                    Err(e) => return done_err(Failure::malformed(format!("bad chunked body: {}", e.message()))),
                };
                let piece = std::mem::take(&mut self.dechunked);
                let r = self.content(&piece, now);
                self.dechunked = piece;
                self.dechunked.clear();
                if let Err(f) = r {
                    return done_err(f);
                }
                if p.done {
                    return self.complete(now);
                }
            }
            Framing::Close => {
                if let Err(f) = self.content(data, now) {
                    return done_err(f);
                }
            }
        }
        Step::More
    }

    fn content(&mut self, bytes: &[u8], now: Instant) -> Result<(), Failure> {
        let status = self.head.as_ref().map_or(0, |h| h.status);
        if status == 200 && self.stream {
            let tracker = &mut self.tracker;
            return self.sse.feed(bytes, &mut |ev| tracker.on_event(ev, now));
        }
        if self.whole.len() + bytes.len() > MAX_BODY {
            return Err(Failure::malformed("an answer body over 64 MiB"));
        }
        self.whole.extend_from_slice(bytes);
        Ok(())
    }

    fn complete(&mut self, now: Instant) -> Step {
        let Some(head) = &self.head else { return Step::More };
        let reuse = !head.close;
        let e2e = now.saturating_duration_since(self.start);
        if head.status != 200 {
            let text = String::from_utf8_lossy(&self.whole);
            let detail: String = serde_json::from_slice::<serde_json::Value>(&self.whole)
                .ok()
                .and_then(|v| {
                    let e = v.get("error").unwrap_or(&v);
                    let m = e.get("message").or_else(|| v.get("message"))?;
                    m.as_str().map(str::to_string)
                })
                .unwrap_or_else(|| text.into_owned())
                .chars()
                .take(200)
                .collect();
            return Step::Done(Err(Failure::new(FailKind::Status(head.status), detail)), reuse);
        }
        let outcome = if self.stream {
            self.sse.finish().and_then(|()| self.tracker.finish()).map(|tokens| Sample {
                e2e,
                ttft: Some(self.tracker.first_token.map_or(e2e, |t| t.saturating_duration_since(self.start))),
                output_tokens: tokens,
                prompt_tokens: self.tracker.usage.and_then(|u| u.prompt_tokens),
            })
        } else {
            inspect_whole(&self.whole).map(|u| Sample {
                e2e,
                ttft: None,
                output_tokens: u.completion_tokens,
                prompt_tokens: u.prompt_tokens,
            })
        };
        let reuse = reuse && outcome.is_ok();
        Step::Done(outcome, reuse)
    }
}

/// A request that did not finish within its time.
pub fn timed_out(limit: Duration) -> Failure {
    Failure::new(FailKind::Timeout, format!("no complete answer within {:.1} s", limit.as_secs_f64()))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Feed `input` in pieces of `step` bytes, then EOF if it asked for more.
    fn run(stream: bool, input: &[u8], step: usize) -> (Result<Sample, Failure>, bool) {
        let t0 = Instant::now();
        let mut a = Answer::new(stream, t0);
        for piece in input.chunks(step) {
            if let Step::Done(o, r) = a.feed(piece, Instant::now()) {
                return (o, r);
            }
        }
        match a.eof(Instant::now()) {
            Step::Done(o, r) => (o, r),
            Step::More => unreachable!(),
        }
    }

    /// A chunked SSE answer: one chunk per event.
    fn sse(events: &[&str]) -> Vec<u8> {
        let mut out =
            b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n".to_vec();
        for e in events {
            let ev = format!("data: {e}\n\n");
            out.extend_from_slice(format!("{:x}\r\n{ev}\r\n", ev.len()).as_bytes());
        }
        out.extend_from_slice(b"0\r\n\r\n");
        out
    }

    #[test]
    fn streamed_answer_in_any_split() {
        let input = sse(&[
            r#"{"choices":[{"text":"a"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":4,"completion_tokens":3}}"#,
            "[DONE]",
        ]);
        for step in [1, 2, 5, 17, input.len()] {
            let (o, reuse) = run(true, &input, step);
            let s = o.unwrap_or_else(|f| panic!("split {step}: {f:?}"));
            assert_eq!((s.output_tokens, s.prompt_tokens), (3, Some(4)));
            assert!(s.ttft.is_some());
            assert!(reuse, "split {step}");
        }
    }

    #[test]
    fn whole_answer_and_error_status() {
        let body = br#"{"choices":[{"message":{"content":"hi"}}],"usage":{"prompt_tokens":2,"completion_tokens":5}}"#;
        let mut resp = format!("HTTP/1.1 200 OK\r\ncontent-length: {}\r\n\r\n", body.len()).into_bytes();
        resp.extend_from_slice(body);
        let (o, reuse) = run(false, &resp, 3);
        assert_eq!(o.unwrap().output_tokens, 5);
        assert!(reuse);
        let err = br#"{"message":"Model not found: nope","type":"Not Found","code":404,"error":{"message":"Model not found: nope"}}"#;
        let mut resp = format!("HTTP/1.1 404 Not Found\r\ncontent-length: {}\r\n\r\n", err.len()).into_bytes();
        resp.extend_from_slice(err);
        let (o, reuse) = run(true, &resp, 7);
        let f = o.unwrap_err();
        assert_eq!((f.kind, f.detail.as_str()), (FailKind::Status(404), "Model not found: nope"));
        assert!(reuse, "a complete error answer leaves the connection usable");
    }

    #[test]
    fn broken_answers() {
        let cases: &[(bool, &[u8], FailKind)] = &[
            (
                true,
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n5\r\ndata:",
                FailKind::Closed,
            ),
            (
                true,
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\nzz\r\n",
                FailKind::Malformed,
            ),
            (
                true,
                b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 2\r\n\r\n{}",
                FailKind::Malformed,
            ),
            (
                true,
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: {\"choices\":[]}\n\n",
                FailKind::Malformed,
            ),
            (false, b"SMTP ready\r\n\r\n", FailKind::Malformed),
            (false, b"HTTP/1.1 200 OK\r\ncontent-length: 9\r\n\r\n{\"a\"", FailKind::Closed),
            (false, b"HTTP/1.1 200 OK\r\ncontent-length: 4\r\n\r\nnope", FailKind::Malformed),
        ];
        for (stream, input, kind) in cases {
            let (o, _) = run(*stream, input, 4);
            assert_eq!(o.unwrap_err().kind, *kind, "{}", String::from_utf8_lossy(input));
        }
    }
}
