//! Byte framing of the TCP request plane: request frame, two-part message, acknowledgement.
//!
//! All integers are big-endian. Facts: docs/dynamo/request-plane.md §5.2, §5.3, §5.5, §6.6, checked against
//! `req1`, `stream1`, `deadworker` (4 pipelined frames) and `concurrency` (30 pipelined frames).
//!
//! Request frame (frontend → worker, one persistent pipelined connection per worker):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 2 | `path_len` (u16) |
//! | 2 | path_len | endpoint path, UTF-8 (`<instance hex>/<ns>/<component>/<endpoint>`) |
//! | .. | 2 | `headers_len` (u16) |
//! | .. | headers_len | compact JSON object string → string (`request-id`, `x-endpoint-path`, `x-frontend-send-ts-ns`); 1.6.1 writes them in hash-map order |
//! | .. | 4 | `payload_len` (u32) |
//! | .. | payload_len | payload: one two-part message |
//!
//! Two-part message (request payload and every response-stream frame):
//!
//! | offset | size | field |
//! |---|---|---|
//! | 0 | 8 | `header_len` (u64) |
//! | 8 | 8 | `body_len` (u64) |
//! | 16 | 8 | checksum: 0 from release builds; we write 0 and do not verify (debug builds put xxh3-64 of header‖body) |
//! | 24 | header_len | header (JSON) |
//! | .. | body_len | body (codec) |
//!
//! Header only = control frame, body only = data frame.
//!
//! Acknowledgement (worker → frontend, FIFO, one per request frame): u32 length + UTF-8
//! text; empty = accepted, anything else = the worker's refusal
//! (`Server unavailable: unknown endpoint <path>`, `Server overloaded: ...`).
//!
//! Limits: the payload of a request frame, the header+body of a two-part message and the
//! text of an ack are each bounded by `max` (`DYN_TCP_MAX_MESSAGE_SIZE`, default 32 MiB);
//! an oversized declared length is an error as soon as the prelude is readable.

use bytes::{Buf, Bytes, BytesMut};

use super::{Decoded, PlaneError};

/// Length of the two-part prelude (header_len, body_len, checksum).
pub const TWO_PART_PRELUDE_LEN: usize = 24;

fn too_large(what: &'static str, len: u64, max: usize) -> PlaneError {
    PlaneError::TooLarge { what, len, max: max as u64 }
}

// ---------------------------------------------------------------- two-part message

/// Which halves of a two-part message are present.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TwoPartKind {
    /// Header only (handshake, prologue, sentinel, kill/stop).
    Control,
    /// Body only (response items, `complete_final`).
    Data,
    /// Both (the request payload: control JSON + encoded request).
    HeaderAndBody,
    /// Neither.
    Empty,
}

fn kind_of(header: &[u8], body: &[u8]) -> TwoPartKind {
    match (header.is_empty(), body.is_empty()) {
        (false, true) => TwoPartKind::Control,
        (true, false) => TwoPartKind::Data,
        (false, false) => TwoPartKind::HeaderAndBody,
        (true, true) => TwoPartKind::Empty,
    }
}

/// A two-part message borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TwoPartRef<'a> {
    pub header: &'a [u8],
    pub body: &'a [u8],
    pub checksum: u64,
}

impl<'a> TwoPartRef<'a> {
    /// Parse one two-part message from the front of `buf`; on success also returns how many
    /// bytes it spans.
    pub fn parse(buf: &'a [u8], max: usize) -> Result<Decoded<(TwoPartRef<'a>, usize)>, PlaneError> {
        if buf.len() < TWO_PART_PRELUDE_LEN {
            return Ok(Decoded::Incomplete { need: TWO_PART_PRELUDE_LEN });
        }
        let header_len = u64::from_be_bytes(buf[0..8].try_into().unwrap_or_default());
        let body_len = u64::from_be_bytes(buf[8..16].try_into().unwrap_or_default());
        let checksum = u64::from_be_bytes(buf[16..24].try_into().unwrap_or_default());
        let total = header_len.checked_add(body_len).ok_or_else(|| too_large("two-part message", u64::MAX, max))?;
        if total > max as u64 {
            return Err(too_large("two-part message", total, max));
        }
        // total <= max <= usize::MAX, so these casts are lossless.
        let (hl, bl) = (header_len as usize, body_len as usize);
        let end = TWO_PART_PRELUDE_LEN + hl + bl;
        if buf.len() < end {
            return Ok(Decoded::Incomplete { need: end });
        }
        let header = &buf[TWO_PART_PRELUDE_LEN..TWO_PART_PRELUDE_LEN + hl];
        let body = &buf[TWO_PART_PRELUDE_LEN + hl..end];
        Ok(Decoded::Frame((TwoPartRef { header, body, checksum }, end)))
    }

    /// Parse a buffer that must hold exactly one two-part message (a request payload).
    pub fn parse_exact(buf: &'a [u8], max: usize) -> Result<TwoPartRef<'a>, PlaneError> {
        match Self::parse(buf, max)? {
            Decoded::Frame((tp, used)) if used == buf.len() => Ok(tp),
            Decoded::Frame((_, used)) => {
                Err(PlaneError::malformed("two-part payload", format!("{} trailing bytes", buf.len() - used)))
            }
            Decoded::Incomplete { need } => Err(PlaneError::malformed(
                "two-part payload",
                format!("{} bytes declared, {} present", need, buf.len()),
            )),
        }
    }

    pub fn kind(&self) -> TwoPartKind {
        kind_of(self.header, self.body)
    }
}

/// An owned two-part message (zero-copy slices of the read buffer).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TwoPart {
    pub header: Bytes,
    pub body: Bytes,
    pub checksum: u64,
}

impl TwoPart {
    pub fn kind(&self) -> TwoPartKind {
        kind_of(&self.header, &self.body)
    }
}

/// Append a two-part message (checksum 0, as 1.6.1 release builds write it).
pub fn encode_two_part(out: &mut Vec<u8>, header: &[u8], body: &[u8]) {
    out.reserve(TWO_PART_PRELUDE_LEN + header.len() + body.len());
    out.extend_from_slice(&(header.len() as u64).to_be_bytes());
    out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    out.extend_from_slice(&0u64.to_be_bytes());
    out.extend_from_slice(header);
    out.extend_from_slice(body);
}

/// Incremental decoder of a stream of two-part messages (the response-stream socket, in
/// either direction).
#[derive(Clone, Copy, Debug)]
pub struct TwoPartDecoder {
    max: usize,
}

impl Default for TwoPartDecoder {
    fn default() -> Self {
        TwoPartDecoder { max: super::DEFAULT_MAX_MESSAGE_SIZE }
    }
}

impl TwoPartDecoder {
    pub fn new(max_message_size: usize) -> Self {
        TwoPartDecoder { max: max_message_size }
    }

    /// Take one message off the front of `buf`, or say how many bytes are needed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Decoded<TwoPart>, PlaneError> {
        let (hl, bl, checksum) = match TwoPartRef::parse(buf, self.max)? {
            Decoded::Frame((tp, _)) => (tp.header.len(), tp.body.len(), tp.checksum),
            Decoded::Incomplete { need } => return Ok(Decoded::Incomplete { need }),
        };
        buf.advance(TWO_PART_PRELUDE_LEN);
        let header = buf.split_to(hl).freeze();
        let body = buf.split_to(bl).freeze();
        Ok(Decoded::Frame(TwoPart { header, body, checksum }))
    }
}

// ---------------------------------------------------------------- request frame

/// A request frame borrowed from a buffer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RequestFrameRef<'a> {
    pub path: &'a str,
    /// The raw JSON header object.
    pub headers_json: &'a [u8],
    /// The payload: one two-part message (not yet checked; the worker acks before decoding it).
    pub payload: &'a [u8],
}

impl<'a> RequestFrameRef<'a> {
    /// Parse one request frame from the front of `buf`; also returns its length.
    pub fn parse(buf: &'a [u8], max: usize) -> Result<Decoded<(RequestFrameRef<'a>, usize)>, PlaneError> {
        let mut at = 0usize;
        let Some(path) = take_len_prefixed(buf, &mut at, 2) else {
            return Ok(Decoded::Incomplete { need: need_for(buf, at, 2) });
        };
        let Some(headers_json) = take_len_prefixed(buf, &mut at, 2) else {
            return Ok(Decoded::Incomplete { need: need_for(buf, at, 2) });
        };
        if buf.len() >= at + 4 {
            let len = u32::from_be_bytes(buf[at..at + 4].try_into().unwrap_or_default()) as u64;
            if len > max as u64 {
                return Err(too_large("request payload", len, max));
            }
        }
        let Some(payload) = take_len_prefixed(buf, &mut at, 4) else {
            return Ok(Decoded::Incomplete { need: need_for(buf, at, 4) });
        };
        let path = std::str::from_utf8(path).map_err(|e| PlaneError::malformed("endpoint path", e))?;
        Ok(Decoded::Frame((RequestFrameRef { path, headers_json, payload }, at)))
    }

    /// The headers in wire order. Values must be strings (1.6.1 uses a string map).
    pub fn headers(&self) -> Result<Vec<(String, String)>, PlaneError> {
        parse_headers(self.headers_json)
    }

    /// The payload as a two-part message.
    pub fn two_part(&self, max: usize) -> Result<TwoPartRef<'a>, PlaneError> {
        TwoPartRef::parse_exact(self.payload, max)
    }
}

/// Read a `width`-byte big-endian length and that many bytes at `*at`; `None` if incomplete.
fn take_len_prefixed<'a>(buf: &'a [u8], at: &mut usize, width: usize) -> Option<&'a [u8]> {
    let start = *at;
    let prefix = buf.get(start..start + width)?;
    let len = prefix.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize);
    let field = buf.get(start + width..start + width + len)?;
    *at = start + width + len;
    Some(field)
}

/// Total length needed to finish the length-prefixed field starting at `at`.
fn need_for(buf: &[u8], at: usize, width: usize) -> usize {
    match buf.get(at..at + width) {
        Some(prefix) => at + width + prefix.iter().fold(0usize, |acc, b| (acc << 8) | *b as usize),
        None => at + width,
    }
}

fn parse_headers(json: &[u8]) -> Result<Vec<(String, String)>, PlaneError> {
    let map: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(json).map_err(|e| PlaneError::malformed("request headers", e))?;
    map.into_iter()
        .map(|(k, v)| match v {
            serde_json::Value::String(s) => Ok((k, s)),
            other => Err(PlaneError::malformed("request headers", format!("header {k} is not a string: {other}"))),
        })
        .collect()
}

/// An owned request frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RequestFrame {
    pub path: String,
    /// Headers in wire order.
    pub headers: Vec<(String, String)>,
    /// The payload: one two-part message (not yet checked).
    pub payload: Bytes,
}

impl RequestFrame {
    /// The value of a header.
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(k, _)| k == name).map(|(_, v)| v.as_str())
    }

    /// The payload as a two-part message.
    pub fn two_part(&self, max: usize) -> Result<TwoPartRef<'_>, PlaneError> {
        TwoPartRef::parse_exact(&self.payload, max)
    }
}

/// Append a request frame whose payload is the two-part message (`control`, `body`).
///
/// Headers are written as a compact JSON object in the order given, escaped as serde_json
/// escapes them, so a capture's header bytes can be reproduced by passing its order.
pub fn encode_request_frame(
    out: &mut Vec<u8>,
    path: &str,
    headers: &[(&str, &str)],
    control: &[u8],
    body: &[u8],
    max: usize,
) -> Result<(), PlaneError> {
    let mut hjson = Vec::with_capacity(128);
    hjson.push(b'{');
    for (i, (k, v)) in headers.iter().enumerate() {
        if i > 0 {
            hjson.push(b',');
        }
        crate::util::json_string(&mut hjson, k);
        hjson.push(b':');
        crate::util::json_string(&mut hjson, v);
    }
    hjson.push(b'}');
    let path_len = u16::try_from(path.len()).map_err(|_| too_large("endpoint path", path.len() as u64, 0xffff))?;
    let headers_len =
        u16::try_from(hjson.len()).map_err(|_| too_large("request headers", hjson.len() as u64, 0xffff))?;
    let payload_len = TWO_PART_PRELUDE_LEN as u64 + control.len() as u64 + body.len() as u64;
    if payload_len > max as u64 || payload_len > u32::MAX as u64 {
        return Err(too_large("request payload", payload_len, max.min(u32::MAX as usize)));
    }
    out.reserve(8 + path.len() + hjson.len() + payload_len as usize);
    out.extend_from_slice(&path_len.to_be_bytes());
    out.extend_from_slice(path.as_bytes());
    out.extend_from_slice(&headers_len.to_be_bytes());
    out.extend_from_slice(&hjson);
    out.extend_from_slice(&(payload_len as u32).to_be_bytes());
    encode_two_part(out, control, body);
    Ok(())
}

/// Incremental decoder of the request-plane connection (frontend → worker direction).
#[derive(Clone, Copy, Debug)]
pub struct RequestFrameDecoder {
    max: usize,
}

impl Default for RequestFrameDecoder {
    fn default() -> Self {
        RequestFrameDecoder { max: super::DEFAULT_MAX_MESSAGE_SIZE }
    }
}

impl RequestFrameDecoder {
    pub fn new(max_message_size: usize) -> Self {
        RequestFrameDecoder { max: max_message_size }
    }

    /// Take one request frame off the front of `buf`, or say how many bytes are needed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Decoded<RequestFrame>, PlaneError> {
        let (path, headers, payload_at, payload_len, used) = match RequestFrameRef::parse(buf, self.max)? {
            Decoded::Frame((f, used)) => {
                (f.path.to_owned(), f.headers()?, used - f.payload.len(), f.payload.len(), used)
            }
            Decoded::Incomplete { need } => return Ok(Decoded::Incomplete { need }),
        };
        let mut frame = buf.split_to(used);
        frame.advance(payload_at);
        let payload = frame.split_to(payload_len).freeze();
        Ok(Decoded::Frame(RequestFrame { path, headers, payload }))
    }
}

// ---------------------------------------------------------------- acknowledgement

/// The worker's answer to one request frame.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Ack {
    /// Empty ack (`00000000`): the worker took the request.
    Accepted,
    /// Non-empty ack: the worker's refusal text (lossily decoded if not UTF-8).
    Rejected(String),
}

impl Ack {
    /// Whether a refusal means the worker is overloaded rather than unavailable.
    pub fn is_overloaded(&self) -> bool {
        matches!(self, Ack::Rejected(t) if t.starts_with("Server overloaded"))
    }
}

/// Append an ack frame.
pub fn encode_ack(out: &mut Vec<u8>, ack: &Ack) {
    let text: &[u8] = match ack {
        Ack::Accepted => b"",
        Ack::Rejected(t) => t.as_bytes(),
    };
    out.extend_from_slice(&(text.len() as u32).to_be_bytes());
    out.extend_from_slice(text);
}

/// Incremental decoder of the acks coming back on a request-plane connection.
#[derive(Clone, Copy, Debug)]
pub struct AckDecoder {
    max: usize,
}

impl Default for AckDecoder {
    fn default() -> Self {
        AckDecoder { max: super::DEFAULT_MAX_MESSAGE_SIZE }
    }
}

impl AckDecoder {
    pub fn new(max_message_size: usize) -> Self {
        AckDecoder { max: max_message_size }
    }

    /// Parse one ack from the front of `buf`; also returns its length.
    pub fn parse(&self, buf: &[u8]) -> Result<Decoded<(Ack, usize)>, PlaneError> {
        let Some(prefix) = buf.get(0..4) else {
            return Ok(Decoded::Incomplete { need: 4 });
        };
        let len = u32::from_be_bytes(prefix.try_into().unwrap_or_default()) as usize;
        if len as u64 > self.max as u64 {
            return Err(too_large("ack", len as u64, self.max));
        }
        let Some(text) = buf.get(4..4 + len) else {
            return Ok(Decoded::Incomplete { need: 4 + len });
        };
        let ack =
            if text.is_empty() { Ack::Accepted } else { Ack::Rejected(String::from_utf8_lossy(text).into_owned()) };
        Ok(Decoded::Frame((ack, 4 + len)))
    }

    /// Take one ack off the front of `buf`, or say how many bytes are needed.
    pub fn decode(&self, buf: &mut BytesMut) -> Result<Decoded<Ack>, PlaneError> {
        match self.parse(buf)? {
            Decoded::Frame((ack, used)) => {
                buf.advance(used);
                Ok(Decoded::Frame(ack))
            }
            Decoded::Incomplete { need } => Ok(Decoded::Incomplete { need }),
        }
    }
}
