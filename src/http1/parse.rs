//! Request-head parsing and body framing for HTTP/1.1. No I/O happens here.
//!
//! [`parse_head`] runs httparse over the bytes buffered so far with a fixed header array and a
//! byte budget, records offsets (not copies) of the path and every header, and decides the
//! body framing once, applying the message-framing rules of RFC 9112 §6:
//!
//! * `Transfer-Encoding` together with `Content-Length` is rejected (§6.1: "a server MAY reject
//!   a request that contains both ... and ought to handle such a message as an error"); we do,
//!   because it is the classic request-smuggling shape.
//! * A `Transfer-Encoding` whose final coding is not `chunked` is rejected with 400 (§6.3 rule
//!   4); other codings before `chunked` get 501 (we implement none).
//! * Several `Content-Length` values must be identical (§6.3 rule 5), otherwise 400; each must
//!   be `1*DIGIT`.
//! * `Transfer-Encoding` in an HTTP/1.0 request is rejected (§6.1).
//!
//! [`ChunkedDecoder`] decodes a chunked body incrementally (§7.1): strict CRLF line endings,
//! 1–16 hex digits per size, bounded extensions and trailers, a body-size limit checked before
//! bytes are copied.

use smallvec::SmallVec;

use crate::error::{Error, Kind};

/// Size limits for one request. Defaults match the flags' defaults.
#[derive(Clone, Copy, Debug)]
pub struct Limits {
    /// Most header fields a request may carry (more → 431).
    pub max_headers: usize,
    /// Most bytes of request line + headers (more → 431).
    pub max_head_bytes: usize,
    /// Most body bytes after de-chunking (more → 413).
    pub max_body_bytes: usize,
}

impl Default for Limits {
    fn default() -> Self {
        Limits { max_headers: 100, max_head_bytes: 64 * 1024, max_body_bytes: 45 * 1024 * 1024 }
    }
}

pub use crate::config::settings::MAX_HEADERS_CAP;

/// A byte range `[start, start+len)` inside the request's head bytes.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Span {
    pub start: u32,
    pub len: u32,
}

impl Span {
    fn of(base: &[u8], part: &[u8]) -> Span {
        let start = part.as_ptr() as usize - base.as_ptr() as usize;
        Span { start: start as u32, len: part.len() as u32 }
    }
    /// The bytes of this span inside `buf` (the buffer the head was parsed from).
    pub fn get<'a>(&self, buf: &'a [u8]) -> &'a [u8] {
        &buf[self.start as usize..(self.start + self.len) as usize]
    }
}

/// Request methods the router distinguishes; everything else is `Other`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Method {
    Get,
    Head,
    Post,
    Put,
    Delete,
    Options,
    Patch,
    Other,
}

impl Method {
    fn from_bytes(m: &[u8]) -> Method {
        match m {
            b"GET" => Method::Get,
            b"HEAD" => Method::Head,
            b"POST" => Method::Post,
            b"PUT" => Method::Put,
            b"DELETE" => Method::Delete,
            b"OPTIONS" => Method::Options,
            b"PATCH" => Method::Patch,
            _ => Method::Other,
        }
    }
    pub fn as_str(self) -> &'static str {
        match self {
            Method::Get => "GET",
            Method::Head => "HEAD",
            Method::Post => "POST",
            Method::Put => "PUT",
            Method::Delete => "DELETE",
            Method::Options => "OPTIONS",
            Method::Patch => "PATCH",
            Method::Other => "OTHER",
        }
    }
}

/// How the request body is framed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum BodyFraming {
    /// No body (no Content-Length, no Transfer-Encoding).
    None,
    /// Exactly this many bytes follow the head.
    Length(u64),
    /// `Transfer-Encoding: chunked`.
    Chunked,
}

/// What the `Expect` header asked for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Expect {
    None,
    Continue,
}

/// A parsed request head: offsets into the head bytes plus the framing decisions.
#[derive(Clone, Debug)]
pub struct Head {
    pub method: Method,
    /// Path without the query string.
    pub path: Span,
    /// Query string without the `?`, if any.
    pub query: Option<Span>,
    /// 0 for HTTP/1.0, 1 for HTTP/1.1.
    pub minor_version: u8,
    /// Every header as (name, value).
    pub headers: SmallVec<[(Span, Span); 16]>,
    pub framing: BodyFraming,
    /// Whether the connection may carry another request after this one.
    pub keep_alive: bool,
    pub expect: Expect,
    pub content_type: Option<Span>,
    /// Bytes of the request line and headers including the final CRLF CRLF.
    pub head_len: usize,
}

impl Head {
    /// The first header called `name` (ASCII case-insensitive), resolved against `buf`.
    pub fn header<'a>(&self, buf: &'a [u8], name: &str) -> Option<&'a [u8]> {
        self.headers.iter().find(|(n, _)| n.get(buf).eq_ignore_ascii_case(name.as_bytes())).map(|(_, v)| v.get(buf))
    }
}

fn bad(msg: &'static str) -> Error {
    Error::new(Kind::BadRequest, msg)
}

/// Parse the head at the start of `buf`.
///
/// `Ok(None)` means the head is not complete yet (read more). Errors carry their status:
/// 431 for the header budget, 400 for malformed or smuggling shapes, 501 for unsupported
/// transfer codings, 505 for other HTTP versions, 417 for unknown expectations.
pub fn parse_head(buf: &[u8], limits: &Limits) -> Result<Option<Head>, Error> {
    // Uninitialised slots: httparse writes the ones it fills, and nothing else is read, so a
    // parse does not pay for clearing the whole array.
    let mut raw = [const { std::mem::MaybeUninit::<httparse::Header<'_>>::uninit() }; MAX_HEADERS_CAP];
    let max = limits.max_headers.min(MAX_HEADERS_CAP);
    // Only the bytes up to the limit are judged: beyond them the head is too large, whether a
    // malformed byte follows or not, so the answer does not depend on how much is buffered.
    let buf = &buf[..buf.len().min(limits.max_head_bytes + 1)];
    let mut req = httparse::Request::new(&mut []);
    let status = match req.parse_with_uninit_headers(buf, &mut raw[..max]) {
        Ok(s) => s,
        Err(httparse::Error::TooManyHeaders) => {
            return Err(Error::new(Kind::HeadersTooLarge, "too many header fields"))
        }
        Err(httparse::Error::Version) => {
            return version_error(buf).map_or(Ok(None), Err);
        }
        Err(e) => return Err(Error::new(Kind::BadRequest, format!("malformed request head: {e}"))),
    };
    let head_len = match status {
        httparse::Status::Complete(n) => n,
        httparse::Status::Partial => {
            if buf.len() > limits.max_head_bytes {
                return Err(Error::new(Kind::HeadersTooLarge, "request header section too large"));
            }
            return Ok(None);
        }
    };
    if head_len > limits.max_head_bytes {
        return Err(Error::new(Kind::HeadersTooLarge, "request header section too large"));
    }

    let method = Method::from_bytes(req.method.unwrap_or("").as_bytes());
    let target = req.path.unwrap_or("");
    if target.is_empty() {
        return Err(bad("empty request target"));
    }
    let minor_version = req.version.unwrap_or(1);
    let (path_str, query_str) = match target.find('?') {
        Some(i) => (&target[..i], Some(&target[i + 1..])),
        None => (target, None),
    };
    let path = Span::of(buf, path_str.as_bytes());
    let query = query_str.map(|q| Span::of(buf, q.as_bytes()));

    let mut headers = SmallVec::new();
    let mut content_length: Option<u64> = None;
    let mut transfer_encoding = false;
    let mut chunked_last = false;
    let mut other_coding = false;
    let mut conn_close = false;
    let mut conn_keep_alive = false;
    let mut expect = Expect::None;
    let mut content_type = None;

    for h in req.headers.iter() {
        let name = h.name.as_bytes();
        let value = h.value;
        headers.push((Span::of(buf, name), Span::of(buf, value)));
        if name.eq_ignore_ascii_case(b"content-length") {
            // A list of identical values is allowed (RFC 9110 §8.6); anything else is not.
            for part in value.split(|&b| b == b',') {
                let n = parse_content_length(trim(part))?;
                match content_length {
                    Some(prev) if prev != n => return Err(bad("conflicting Content-Length values")),
                    _ => content_length = Some(n),
                }
            }
        } else if name.eq_ignore_ascii_case(b"transfer-encoding") {
            transfer_encoding = true;
            for coding in value.split(|&b| b == b',') {
                let coding = trim(coding);
                if coding.is_empty() {
                    continue;
                }
                if chunked_last {
                    // `chunked` must be the final coding and appear once.
                    return Err(bad("chunked must be the final transfer coding"));
                }
                if coding.eq_ignore_ascii_case(b"chunked") {
                    chunked_last = true;
                } else {
                    other_coding = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"connection") {
            for token in value.split(|&b| b == b',') {
                let token = trim(token);
                if token.eq_ignore_ascii_case(b"close") {
                    conn_close = true;
                } else if token.eq_ignore_ascii_case(b"keep-alive") {
                    conn_keep_alive = true;
                }
            }
        } else if name.eq_ignore_ascii_case(b"expect") {
            if trim(value).eq_ignore_ascii_case(b"100-continue") {
                expect = Expect::Continue;
            } else {
                return Err(Error::new(Kind::ExpectationFailed, "unsupported Expect value"));
            }
        } else if name.eq_ignore_ascii_case(b"content-type") {
            content_type = Some(Span::of(buf, value));
        }
    }

    let framing = if transfer_encoding {
        if content_length.is_some() {
            return Err(bad("both Transfer-Encoding and Content-Length"));
        }
        if minor_version == 0 {
            return Err(bad("Transfer-Encoding in an HTTP/1.0 request"));
        }
        if !chunked_last {
            return Err(bad("Transfer-Encoding without chunked as the final coding"));
        }
        if other_coding {
            return Err(Error::new(Kind::NotImplemented, "unsupported transfer coding"));
        }
        BodyFraming::Chunked
    } else {
        match content_length {
            Some(0) | None => BodyFraming::None,
            Some(n) => BodyFraming::Length(n),
        }
    };
    let keep_alive = if minor_version == 0 { conn_keep_alive && !conn_close } else { !conn_close };
    if minor_version == 0 {
        // 100-continue is an HTTP/1.1 mechanism; ignore it for 1.0 clients.
        expect = Expect::None;
    }
    Ok(Some(Head { method, path, query, minor_version, headers, framing, keep_alive, expect, content_type, head_len }))
}

/// httparse says "version" both for HTTP/2's preface and for garbage; tell them apart by the
/// request line's version, what follows its second space: `HTTP/2.0`, `HTTP/3.0` or `HTTP/2`
/// is 505, anything else 400. `None` while the line is incomplete and its version may still
/// become one of the first two (`HTTP/2.` read so far): the answer must not depend on how
/// the line was split.
fn version_error(buf: &[u8]) -> Option<Error> {
    const OTHER_VERSIONS: [&[u8]; 3] = [b"HTTP/2.0", b"HTTP/3.0", b"HTTP/2"];
    let line_end = buf.iter().position(|&b| b == b'\r' || b == b'\n');
    let line = &buf[..line_end.unwrap_or(buf.len())];
    let version = line.splitn(3, |&b| b == b' ').nth(2).unwrap_or_default();
    if line_end.is_none() && OTHER_VERSIONS[..2].iter().any(|v| v.starts_with(version)) {
        return None;
    }
    Some(if OTHER_VERSIONS.contains(&version) {
        Error::new(Kind::VersionNotSupported, "HTTP version not supported on this listener")
    } else {
        bad("malformed HTTP version")
    })
}

fn trim(mut s: &[u8]) -> &[u8] {
    while let [b' ' | b'\t', rest @ ..] = s {
        s = rest;
    }
    while let [rest @ .., b' ' | b'\t'] = s {
        s = rest;
    }
    s
}

fn parse_content_length(v: &[u8]) -> Result<u64, Error> {
    if v.is_empty() || v.len() > 19 || !v.iter().all(u8::is_ascii_digit) {
        return Err(bad("invalid Content-Length"));
    }
    let mut n: u64 = 0;
    for &d in v {
        n = n * 10 + u64::from(d - b'0');
    }
    Ok(n)
}

/// Incremental decoder for a chunked request body (RFC 9112 §7.1).
#[derive(Debug)]
pub struct ChunkedDecoder {
    state: ChunkState,
    size_digits: u8,
    remaining: u64,
    line_bytes: usize,
    trailer_bytes: usize,
    max_line: usize,
    max_trailer: usize,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum ChunkState {
    /// Reading hex digits of a chunk size.
    Size,
    /// After the digits: optional whitespace, then `;ext` or CR.
    AfterSize,
    /// Inside a chunk extension, until CR.
    Ext,
    /// Expecting LF after a size line's CR.
    SizeLf,
    /// Copying chunk data.
    Data,
    /// Expecting CR after chunk data.
    DataCr,
    /// Expecting LF after chunk data.
    DataLf,
    /// At the start of a trailer line (or the final empty line).
    TrailerStart,
    /// Inside a trailer field line, until CR.
    Trailer,
    /// Expecting LF after a trailer line's CR.
    TrailerLf,
    /// Expecting LF after the final empty line's CR.
    EndLf,
    Done,
}

/// Result of feeding bytes to a [`ChunkedDecoder`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ChunkProgress {
    /// Input bytes consumed.
    pub consumed: usize,
    /// The whole body (including trailers) has been read.
    pub done: bool,
}

impl ChunkedDecoder {
    /// A decoder whose size/extension lines and trailers are bounded by `max_head_bytes`.
    pub fn new(max_head_bytes: usize) -> Self {
        ChunkedDecoder {
            state: ChunkState::Size,
            size_digits: 0,
            remaining: 0,
            line_bytes: 0,
            trailer_bytes: 0,
            max_line: 4096.min(max_head_bytes.max(64)),
            max_trailer: max_head_bytes,
        }
    }

    pub fn is_done(&self) -> bool {
        self.state == ChunkState::Done
    }

    /// Decode from `input`, appending body bytes to `out`; `out` never grows past `max_body`.
    pub fn decode(&mut self, input: &[u8], out: &mut Vec<u8>, max_body: usize) -> Result<ChunkProgress, Error> {
        use ChunkState::*;
        let mut i = 0;
        while i < input.len() && self.state != Done {
            let b = input[i];
            match self.state {
                Size => match crate::util::hex_digit(b) {
                    Some(d) => {
                        self.size_digits += 1;
                        if self.size_digits > 16 {
                            return Err(bad("chunk size too long"));
                        }
                        self.remaining = (self.remaining << 4) | u64::from(d);
                        i += 1;
                    }
                    None if self.size_digits == 0 => return Err(bad("invalid chunk size")),
                    None => self.state = AfterSize,
                },
                AfterSize => {
                    match b {
                        b' ' | b'\t' => {}
                        b';' => self.state = Ext,
                        b'\r' => self.state = SizeLf,
                        _ => return Err(bad("invalid chunk size line")),
                    }
                    i += 1;
                    self.bump_line()?;
                }
                Ext => {
                    match b {
                        b'\r' => self.state = SizeLf,
                        b'\n' => return Err(bad("bare LF in chunk extension")),
                        _ => {}
                    }
                    i += 1;
                    self.bump_line()?;
                }
                SizeLf => {
                    if b != b'\n' {
                        return Err(bad("expected LF after chunk size"));
                    }
                    i += 1;
                    self.line_bytes = 0;
                    self.size_digits = 0;
                    if self.remaining == 0 {
                        self.state = TrailerStart;
                    } else {
                        if (out.len() as u64).saturating_add(self.remaining) > max_body as u64 {
                            return Err(Error::new(Kind::PayloadTooLarge, "request body too large"));
                        }
                        self.state = Data;
                    }
                }
                Data => {
                    let take = (input.len() - i).min(self.remaining as usize);
                    out.extend_from_slice(&input[i..i + take]);
                    i += take;
                    self.remaining -= take as u64;
                    if self.remaining == 0 {
                        self.state = DataCr;
                    }
                }
                DataCr => {
                    if b != b'\r' {
                        return Err(bad("chunk data longer than its size"));
                    }
                    i += 1;
                    self.state = DataLf;
                }
                DataLf => {
                    if b != b'\n' {
                        return Err(bad("expected LF after chunk data"));
                    }
                    i += 1;
                    self.state = Size;
                }
                TrailerStart => {
                    i += 1;
                    self.state = match b {
                        b'\r' => EndLf,
                        b'\n' => return Err(bad("bare LF in trailer section")),
                        _ => {
                            self.bump_trailer()?;
                            Trailer
                        }
                    };
                }
                Trailer => {
                    i += 1;
                    self.bump_trailer()?;
                    match b {
                        b'\r' => self.state = TrailerLf,
                        b'\n' => return Err(bad("bare LF in trailer section")),
                        _ => {}
                    }
                }
                TrailerLf => {
                    if b != b'\n' {
                        return Err(bad("expected LF in trailer section"));
                    }
                    i += 1;
                    self.state = TrailerStart;
                }
                EndLf => {
                    if b != b'\n' {
                        return Err(bad("expected LF after last chunk"));
                    }
                    i += 1;
                    self.state = Done;
                }
                Done => unreachable!("loop condition excludes Done"),
            }
        }
        Ok(ChunkProgress { consumed: i, done: self.state == Done })
    }

    fn bump_line(&mut self) -> Result<(), Error> {
        self.line_bytes += 1;
        if self.line_bytes > self.max_line {
            return Err(bad("chunk size line too long"));
        }
        Ok(())
    }

    fn bump_trailer(&mut self) -> Result<(), Error> {
        self.trailer_bytes += 1;
        if self.trailer_bytes > self.max_trailer {
            return Err(Error::new(Kind::HeadersTooLarge, "trailer section too large"));
        }
        Ok(())
    }
}
