//! Turning a connection's read buffer into whole requests. No I/O happens here.
//!
//! The [`Assembler`] is the mini-redis-style framing step: check cheaply whether a whole unit
//! is buffered, parse only then, and advance the buffer by exactly one request. A request's head
//! and Content-Length body are split off the read buffer without copying (`BytesMut::split_to`
//! then `freeze`), so the request owns its bytes and header offsets resolve against one frozen
//! buffer. Chunked bodies are de-chunked into their own buffer as bytes arrive.

use bytes::{Buf, Bytes, BytesMut};

use super::parse::{parse_head, BodyFraming, ChunkedDecoder, Expect, Head, Limits};
use crate::error::{Error, Kind};

/// One complete request: the parsed head, the bytes it points into, and the body.
#[derive(Debug)]
pub struct Request {
    pub head: Head,
    /// Request line and headers; every [`super::parse::Span`] of `head` resolves against it.
    pub head_bytes: Bytes,
    /// The body after de-chunking (empty when there is none).
    pub body: Bytes,
    /// Its first byte arrived after the shard began to drain (set by the connection loop).
    pub arrived_draining: bool,
}

impl Request {
    /// The path without the query string.
    pub fn path(&self) -> &[u8] {
        self.head.path.get(&self.head_bytes)
    }
    /// The first header called `name`, ASCII case-insensitive.
    pub fn header(&self, name: &str) -> Option<&[u8]> {
        self.head.header(&self.head_bytes, name)
    }
    /// The `Content-Type` value, if any.
    pub fn content_type(&self) -> Option<&[u8]> {
        self.head.content_type.map(|s| s.get(&self.head_bytes))
    }

    /// A request that arrived another way (an HTTP/2 stream, a gRPC call answered by an HTTP
    /// route): its head is written out as HTTP/1.1 and parsed like any other, so every handler
    /// sees one request type and one set of limits. `content-length` is set from `body`;
    /// hop-by-hop and framing headers given in `headers` are left out.
    pub fn synthetic<'a>(
        method: &str,
        target: &str,
        headers: impl IntoIterator<Item = (&'a str, &'a [u8])>,
        body: Bytes,
        limits: &Limits,
    ) -> Result<Request, Error> {
        let bad = |what: &str| Error::new(Kind::BadRequest, format!("malformed request head: {what}"));
        if method.bytes().any(|b| !b.is_ascii_graphic()) || target.bytes().any(|b| !b.is_ascii_graphic()) {
            return Err(bad("method or path"));
        }
        let mut raw = Vec::with_capacity(256);
        raw.extend_from_slice(method.as_bytes());
        raw.push(b' ');
        raw.extend_from_slice(if target.is_empty() { b"/" } else { target.as_bytes() });
        raw.extend_from_slice(b" HTTP/1.1\r\n");
        for (name, value) in headers {
            const SKIP: [&str; 6] =
                ["content-length", "transfer-encoding", "connection", "keep-alive", "upgrade", "te"];
            if SKIP.iter().any(|s| name.eq_ignore_ascii_case(s)) {
                continue;
            }
            if value.iter().any(|&b| b == b'\r' || b == b'\n' || b == 0) {
                return Err(bad("header value"));
            }
            raw.extend_from_slice(name.as_bytes());
            raw.extend_from_slice(b": ");
            raw.extend_from_slice(value);
            raw.extend_from_slice(b"\r\n");
        }
        raw.extend_from_slice(b"content-length: ");
        raw.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
        raw.extend_from_slice(b"\r\n\r\n");
        if body.len() > limits.max_body_bytes {
            return Err(body_too_large(limits));
        }
        let head = parse_head(&raw, limits)?.ok_or_else(|| bad("incomplete"))?;
        Ok(Request { head, head_bytes: Bytes::from(raw), body, arrived_draining: false })
    }
}

/// What the connection should do next.
// A request is moved out once per request; boxing it would add an allocation to the hot path.
#[allow(clippy::large_enum_variant)]
#[derive(Debug)]
pub enum Step {
    /// A whole request is ready.
    Ready(Request),
    /// Read more bytes. If `send_continue`, first answer `100 Continue` (once per request).
    NeedMore { send_continue: bool, mid_request: bool },
}

enum Pending {
    /// Head parsed, waiting for `head_len + len` bytes in the buffer.
    Length { head: Head, len: usize },
    /// Head split off; body being de-chunked.
    Chunked { head: Head, head_bytes: Bytes, decoder: ChunkedDecoder, body: Vec<u8> },
}

/// Per-connection request framing state.
pub struct Assembler {
    limits: Limits,
    pending: Option<Pending>,
    continue_sent: bool,
}

impl Assembler {
    pub fn new(limits: Limits) -> Self {
        Assembler { limits, pending: None, continue_sent: false }
    }

    /// Whether part of a request has been consumed into framing state.
    pub fn mid_request(&self) -> bool {
        self.pending.is_some()
    }

    /// Try to take one whole request off the front of `buf`.
    pub fn next(&mut self, buf: &mut BytesMut) -> Result<Step, Error> {
        loop {
            match self.pending.take() {
                None => {
                    if buf.is_empty() {
                        return Ok(Step::NeedMore { send_continue: false, mid_request: false });
                    }
                    let Some(head) = parse_head(buf, &self.limits)? else {
                        return Ok(Step::NeedMore { send_continue: false, mid_request: true });
                    };
                    self.continue_sent = false;
                    match head.framing {
                        BodyFraming::None => {
                            let head_bytes = buf.split_to(head.head_len).freeze();
                            return Ok(Step::Ready(Request {
                                head,
                                head_bytes,
                                body: Bytes::new(),
                                arrived_draining: false,
                            }));
                        }
                        BodyFraming::Length(n) => {
                            if n > self.limits.max_body_bytes as u64 {
                                return Err(body_too_large(&self.limits));
                            }
                            self.pending = Some(Pending::Length { head, len: n as usize });
                        }
                        BodyFraming::Chunked => {
                            let head_bytes = buf.split_to(head.head_len).freeze();
                            let decoder = ChunkedDecoder::new(self.limits.max_head_bytes);
                            self.pending = Some(Pending::Chunked { head, head_bytes, decoder, body: Vec::new() });
                        }
                    }
                }
                Some(Pending::Length { head, len }) => {
                    let total = head.head_len + len;
                    if buf.len() >= total {
                        let raw = buf.split_to(total).freeze();
                        let head_bytes = raw.slice(..head.head_len);
                        let body = raw.slice(head.head_len..);
                        return Ok(Step::Ready(Request { head, head_bytes, body, arrived_draining: false }));
                    }
                    let send = self.want_continue(&head, buf.len() > head.head_len);
                    if buf.capacity() < total {
                        buf.reserve(total - buf.len());
                    }
                    self.pending = Some(Pending::Length { head, len });
                    return Ok(Step::NeedMore { send_continue: send, mid_request: true });
                }
                Some(Pending::Chunked { head, head_bytes, mut decoder, mut body }) => {
                    let had_body = !buf.is_empty() || !body.is_empty();
                    let progress = decoder.decode(buf, &mut body, self.limits.max_body_bytes).map_err(|e| {
                        if e.kind() == Kind::PayloadTooLarge {
                            body_too_large(&self.limits)
                        } else {
                            e
                        }
                    })?;
                    buf.advance(progress.consumed);
                    if progress.done {
                        return Ok(Step::Ready(Request {
                            head,
                            head_bytes,
                            body: body.into(),
                            arrived_draining: false,
                        }));
                    }
                    let send = self.want_continue(&head, had_body);
                    self.pending = Some(Pending::Chunked { head, head_bytes, decoder, body });
                    return Ok(Step::NeedMore { send_continue: send, mid_request: true });
                }
            }
        }
    }

    fn want_continue(&mut self, head: &Head, body_started: bool) -> bool {
        if head.expect == Expect::Continue && !self.continue_sent && !body_started {
            self.continue_sent = true;
            return true;
        }
        false
    }
}

/// Dynamo 1.6.1's words for a body over `DYN_HTTP_BODY_LIMIT_MB`.
pub fn body_too_large(limits: &Limits) -> Error {
    let mb = limits.max_body_bytes / (1024 * 1024);
    Error::new(
        Kind::PayloadTooLarge,
        format!("Request body exceeds the limit of {mb} MB set by DYN_HTTP_BODY_LIMIT_MB"),
    )
}
