//! Response serialization for HTTP/1.1. No I/O happens here.
//!
//! A handler returns a [`Response`]; [`write_response`] appends its status line, headers and
//! body to the connection's output buffer, so pipelined responses are written with one syscall.
//! `Date` comes from a per-shard [`DateCache`] that formats at most once a second.

use bytes::Bytes;
use smallvec::SmallVec;

use crate::error::Error;
use crate::shard::local::Receiver;

/// A response body: whole, or streamed chunk by chunk (chunked transfer coding).
#[derive(Debug)]
pub enum Body {
    Empty,
    Static(&'static [u8]),
    Bytes(Bytes),
    /// Chunks produced by another task of the shard; the body ends when every sender is gone.
    Stream(Receiver<Bytes>),
}

impl Body {
    pub fn len(&self) -> usize {
        match self {
            Body::Empty => 0,
            Body::Static(b) => b.len(),
            Body::Bytes(b) => b.len(),
            Body::Stream(_) => 0,
        }
    }
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
    pub fn as_slice(&self) -> &[u8] {
        match self {
            Body::Empty => &[],
            Body::Static(b) => b,
            Body::Bytes(b) => b,
            Body::Stream(_) => &[],
        }
    }
}

/// A response.
#[derive(Debug)]
pub struct Response {
    pub status: u16,
    pub content_type: Option<&'static str>,
    /// Extra headers (name, value); names in lower case.
    pub headers: SmallVec<[(&'static str, String); 2]>,
    pub body: Body,
    /// Close the connection after this response.
    pub close: bool,
    /// For a streamed body: the bytes that end it cleanly if the server must stop it before
    /// its producer does (the drain's grace period is over), e.g. an SSE error event and
    /// `[DONE]`.
    pub cut: Option<&'static [u8]>,
}

impl Response {
    pub fn new(status: u16) -> Self {
        Response { status, content_type: None, headers: SmallVec::new(), body: Body::Empty, close: false, cut: None }
    }
    pub fn json(status: u16, body: impl Into<Bytes>) -> Self {
        Response { content_type: Some("application/json"), body: Body::Bytes(body.into()), ..Self::new(status) }
    }
    pub fn json_static(status: u16, body: &'static [u8]) -> Self {
        Response { content_type: Some("application/json"), body: Body::Static(body), ..Self::new(status) }
    }
    pub fn text(status: u16, content_type: &'static str, body: impl Into<Bytes>) -> Self {
        Response { content_type: Some(content_type), body: Body::Bytes(body.into()), ..Self::new(status) }
    }
    /// The error's status and its two-dialect JSON body.
    pub fn error(err: &Error) -> Self {
        Response::json(err.status(), err.to_json_body())
    }
    pub fn with_header(mut self, name: &'static str, value: impl Into<String>) -> Self {
        self.headers.push((name, value.into()));
        self
    }
    /// A streamed body of `content_type`, fed through the returned receiver's sender.
    pub fn stream(status: u16, content_type: &'static str, body: Receiver<Bytes>) -> Self {
        Response { content_type: Some(content_type), body: Body::Stream(body), ..Self::new(status) }
    }
    /// The bytes that end this streamed body cleanly if it must be stopped early.
    pub fn with_cut(mut self, cut: &'static [u8]) -> Self {
        self.cut = Some(cut);
        self
    }
    /// Take a streamed body out, leaving an empty one (the head is then written as chunked).
    pub fn take_stream(&mut self) -> Option<Receiver<Bytes>> {
        match std::mem::replace(&mut self.body, Body::Empty) {
            Body::Stream(rx) => Some(rx),
            other => {
                self.body = other;
                None
            }
        }
    }
}

/// The reason phrase of a status code.
pub fn reason(status: u16) -> &'static str {
    match status {
        100 => "Continue",
        200 => "OK",
        201 => "Created",
        204 => "No Content",
        400 => "Bad Request",
        401 => "Unauthorized",
        403 => "Forbidden",
        404 => "Not Found",
        405 => "Method Not Allowed",
        408 => "Request Timeout",
        413 => "Payload Too Large",
        415 => "Unsupported Media Type",
        417 => "Expectation Failed",
        422 => "Unprocessable Entity",
        429 => "Too Many Requests",
        431 => "Request Header Fields Too Large",
        500 => "Internal Server Error",
        501 => "Not Implemented",
        502 => "Bad Gateway",
        503 => "Service Unavailable",
        504 => "Gateway Timeout",
        505 => "HTTP Version Not Supported",
        529 => "Site is overloaded",
        _ => "Unknown",
    }
}

/// Append `resp` to `out`. With `head_only` (a HEAD request) the body is left out but
/// `content-length` still states its size. With `chunked` the head announces
/// `transfer-encoding: chunked` and the caller writes the body chunks.
pub fn write_response(out: &mut Vec<u8>, resp: &Response, head_only: bool, close: bool, date: &DateCache) {
    write_head(out, resp, close, false, date);
    if !head_only {
        out.extend_from_slice(resp.body.as_slice());
    }
}

/// Append the status line and headers of `resp`; `chunked` replaces `content-length`.
pub fn write_head(out: &mut Vec<u8>, resp: &Response, close: bool, chunked: bool, date: &DateCache) {
    let mut num = itoa::Buffer::new();
    out.extend_from_slice(b"HTTP/1.1 ");
    out.extend_from_slice(num.format(resp.status).as_bytes());
    out.push(b' ');
    out.extend_from_slice(reason(resp.status).as_bytes());
    out.extend_from_slice(b"\r\n");
    if let Some(ct) = resp.content_type {
        out.extend_from_slice(b"content-type: ");
        out.extend_from_slice(ct.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    for (name, value) in &resp.headers {
        out.extend_from_slice(name.as_bytes());
        out.extend_from_slice(b": ");
        out.extend_from_slice(value.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if chunked {
        out.extend_from_slice(b"transfer-encoding: chunked\r\n");
    } else {
        out.extend_from_slice(b"content-length: ");
        out.extend_from_slice(num.format(resp.body.len()).as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    if close {
        out.extend_from_slice(b"connection: close\r\n");
    }
    out.extend_from_slice(b"date: ");
    date.with(|d| out.extend_from_slice(d));
    out.extend_from_slice(b"\r\n\r\n");
}

/// Append one chunk of the chunked transfer coding (an empty `data` is skipped: a zero-length
/// chunk would end the body).
pub fn write_chunk(out: &mut Vec<u8>, data: &[u8]) {
    if data.is_empty() {
        return;
    }
    // The size in lower-case hex without leading zeros, written by hand (a `write!` here
    // cost more than the rest of the chunk's framing).
    let n = data.len();
    let digits = (usize::BITS - n.leading_zeros()).div_ceil(4) as usize;
    out.reserve(digits + data.len() + 4);
    for i in (0..digits).rev() {
        out.push(b"0123456789abcdef"[(n >> (4 * i)) & 0xf]);
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(data);
    out.extend_from_slice(b"\r\n");
}

/// The end of a chunked body.
pub const LAST_CHUNK: &[u8] = b"0\r\n\r\n";

/// `100 Continue`, sent before reading a body the client is holding back.
pub const CONTINUE: &[u8] = b"HTTP/1.1 100 Continue\r\n\r\n";

pub use crate::util::date::DateCache;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chunk_sizes_in_hex() {
        for n in [1usize, 9, 10, 15, 16, 255, 256, 4095, 4096, 65_537] {
            let mut out = Vec::new();
            write_chunk(&mut out, &vec![b'x'; n]);
            let head = format!("{n:x}\r\n");
            assert!(out.starts_with(head.as_bytes()), "{n}");
            assert_eq!(out.len(), head.len() + n + 2);
            assert!(out.ends_with(b"x\r\n"));
        }
        let mut out = Vec::new();
        write_chunk(&mut out, b"");
        assert!(out.is_empty());
    }

    #[test]
    fn head_response_keeps_length_drops_body() {
        let date = DateCache::default();
        let mut out = Vec::new();
        let r = Response::json_static(200, b"{\"a\":1}");
        write_response(&mut out, &r, true, false, &date);
        let s = String::from_utf8(out).unwrap();
        assert!(s.starts_with("HTTP/1.1 200 OK\r\n"));
        assert!(s.contains("content-length: 7\r\n"));
        assert!(s.ends_with("\r\n\r\n"));
    }
}
