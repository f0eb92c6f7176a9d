//! gRPC over an HTTP/2 stream: the message framing and the status trailers.
//!
//! A message is a 1-byte compressed flag, a 4-byte big-endian length and the protobuf bytes.
//! [`Decoder`] cuts messages out of DATA chunks as they arrive (a message may span chunks, a
//! chunk may hold several), refusing messages over the size limit before buffering them, and
//! inflating compressed ones ([`Encoding`]: `grpc-encoding` gzip or deflate, the inflated size
//! bounded by the same limit). A request in an encoding we do not read is UNIMPLEMENTED, and
//! every response head announces what we read (`grpc-accept-encoding`); our own messages go
//! out uncompressed, which a server may always choose. [`timeout`] reads the call's deadline
//! (`grpc-timeout`). A call ends with trailers carrying
//! `grpc-status` and, on failure, a percent-encoded `grpc-message`; a call that fails before
//! any message goes out is a *trailers-only* response (one HEADERS frame with end of stream).
//! The status code of an [`Error`] is [`crate::error::Kind::grpc_code`].

use std::io::Read;
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use flate2::read::{GzDecoder, ZlibDecoder};
use h2::server::SendResponse;
use h2::SendStream;
use http::{HeaderMap, HeaderValue};

use crate::error::{Error, Kind};
use crate::h2::body;

/// Length of a message's prefix.
pub const PREFIX: usize = 5;

/// Whether a request is a gRPC call (`content-type: application/grpc` or `application/grpc+…`).
pub fn is_grpc(headers: &HeaderMap) -> bool {
    headers.get(http::header::CONTENT_TYPE).is_some_and(|v| {
        let v = v.as_bytes();
        v.len() >= 16
            && v[..16].eq_ignore_ascii_case(b"application/grpc")
            && matches!(v.get(16), None | Some(b'+' | b';'))
    })
}

/// The message encodings we read, as `grpc-accept-encoding` lists them.
pub const ACCEPT_ENCODING: &str = "identity,deflate,gzip";

/// How a call's compressed messages are encoded (`grpc-encoding`). gRPC's `deflate` is the
/// zlib format (RFC 1950), `gzip` RFC 1952.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Encoding {
    Identity,
    Gzip,
    Deflate,
}

impl Encoding {
    /// The request's `grpc-encoding`; one we do not read is UNIMPLEMENTED, naming the ones we do.
    pub fn of(headers: &HeaderMap) -> Result<Encoding, Error> {
        let Some(v) = headers.get("grpc-encoding") else { return Ok(Encoding::Identity) };
        let v = v.as_bytes();
        if v.eq_ignore_ascii_case(b"identity") {
            Ok(Encoding::Identity)
        } else if v.eq_ignore_ascii_case(b"gzip") {
            Ok(Encoding::Gzip)
        } else if v.eq_ignore_ascii_case(b"deflate") {
            Ok(Encoding::Deflate)
        } else {
            Err(Error::new(
                Kind::NotImplemented,
                format!(
                    "grpc-encoding '{}' is not supported (supported: {ACCEPT_ENCODING})",
                    String::from_utf8_lossy(v)
                ),
            ))
        }
    }

    fn name(self) -> &'static str {
        match self {
            Encoding::Identity => "identity",
            Encoding::Gzip => "gzip",
            Encoding::Deflate => "deflate",
        }
    }

    /// Inflate one message, refusing more than `max` bytes of output.
    fn inflate(self, data: &[u8], max: usize) -> Result<Bytes, Error> {
        let limit = max as u64 + 1;
        let mut out = Vec::with_capacity(data.len().saturating_mul(2).min(max));
        let read = match self {
            Encoding::Gzip => GzDecoder::new(data).take(limit).read_to_end(&mut out),
            Encoding::Deflate => ZlibDecoder::new(data).take(limit).read_to_end(&mut out),
            Encoding::Identity => return Ok(Bytes::copy_from_slice(data)),
        };
        if let Err(e) = read {
            return Err(Error::new(Kind::BadRequest, format!("cannot inflate a {} message: {e}", self.name())));
        }
        if out.len() > max {
            return Err(Error::new(
                Kind::PayloadTooLarge,
                format!("gRPC message inflates to more than the limit of {max} bytes"),
            ));
        }
        Ok(Bytes::from(out))
    }
}

/// The call's deadline from `grpc-timeout` (1 to 8 digits and a unit: H, M, S, m, u, n);
/// `None` without one. A malformed value is INVALID_ARGUMENT.
pub fn timeout(headers: &HeaderMap) -> Result<Option<Duration>, Error> {
    let Some(v) = headers.get("grpc-timeout") else { return Ok(None) };
    let v = v.as_bytes();
    let bad = || Error::new(Kind::BadRequest, format!("malformed grpc-timeout '{}'", String::from_utf8_lossy(v)));
    let Some((&unit, digits)) = v.split_last() else { return Err(bad()) };
    if digits.is_empty() || digits.len() > 8 || !digits.iter().all(u8::is_ascii_digit) {
        return Err(bad());
    }
    let n = digits.iter().fold(0u64, |n, d| n * 10 + u64::from(d - b'0'));
    Ok(Some(match unit {
        b'H' => Duration::from_secs(n * 3600),
        b'M' => Duration::from_secs(n * 60),
        b'S' => Duration::from_secs(n),
        b'm' => Duration::from_millis(n),
        b'u' => Duration::from_micros(n),
        b'n' => Duration::from_nanos(n),
        _ => return Err(bad()),
    }))
}

/// When a call that arrived now must be answered by: its `grpc-timeout` from now (`None`
/// without one, or when it is too far off to represent).
pub fn deadline(headers: &HeaderMap) -> Result<Option<Instant>, Error> {
    Ok(timeout(headers)?.and_then(|t| Instant::now().checked_add(t)))
}

/// Resolves at `deadline`; never without one.
pub async fn until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => monoio::time::sleep(d.saturating_duration_since(Instant::now())).await,
        None => std::future::pending().await,
    }
}

/// The status of a call whose deadline passed.
pub fn expired() -> Error {
    Error::new(Kind::RequestTimeout, "Deadline Exceeded (grpc-timeout)")
}

/// Cuts whole messages out of the bytes of a request stream.
pub struct Decoder {
    buf: BytesMut,
    max: usize,
    encoding: Encoding,
}

impl Decoder {
    /// A decoder refusing messages longer than `max` bytes (before and after inflating), reading
    /// compressed messages as `encoding`.
    pub fn new(max: usize, encoding: Encoding) -> Decoder {
        Decoder { buf: BytesMut::new(), max, encoding }
    }

    pub fn push(&mut self, chunk: &[u8]) {
        self.buf.extend_from_slice(chunk);
    }

    /// The next whole message, if one is buffered.
    pub fn next_message(&mut self) -> Result<Option<Bytes>, Error> {
        if self.buf.len() < PREFIX {
            return Ok(None);
        }
        let compressed = self.buf[0];
        let len = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
        match (compressed, self.encoding) {
            (0, _) => {}
            (1, Encoding::Identity) => {
                return Err(Error::new(Kind::Internal, "a compressed gRPC message in a call without grpc-encoding"))
            }
            (1, _) => {}
            (f, _) => return Err(Error::new(Kind::BadRequest, format!("invalid gRPC compressed flag {f}"))),
        }
        if len > self.max {
            return Err(Error::new(
                Kind::PayloadTooLarge,
                format!("gRPC message of {len} bytes exceeds the limit of {} bytes", self.max),
            ));
        }
        if self.buf.len() < PREFIX + len {
            self.buf.reserve(PREFIX + len - self.buf.len());
            return Ok(None);
        }
        self.buf.advance(PREFIX);
        let msg = self.buf.split_to(len).freeze();
        if compressed == 0 {
            return Ok(Some(msg));
        }
        self.encoding.inflate(&msg, self.max).map(Some)
    }

    /// Bytes of an incomplete message left over (at end of stream: a truncated message).
    pub fn pending(&self) -> usize {
        self.buf.len()
    }
}

/// `msg` framed as one gRPC message.
pub fn frame(msg: &impl prost::Message) -> Bytes {
    let len = msg.encoded_len();
    let mut out = BytesMut::with_capacity(PREFIX + len);
    out.put_u8(0);
    out.put_u32(len as u32);
    // Encoding into a buffer with enough capacity cannot fail.
    let _ = msg.encode(&mut out);
    out.freeze()
}

/// Decode one protobuf message; a malformed one is INVALID_ARGUMENT.
pub fn decode<M: prost::Message + Default>(bytes: Bytes) -> Result<M, Error> {
    M::decode(bytes).map_err(|e| Error::new(Kind::BadRequest, format!("malformed protobuf message: {e}")))
}

/// `grpc-message` encoding (gRPC over HTTP/2: percent-encode every byte outside 0x20–0x7E and
/// `%`).
pub fn percent_encode(msg: &str) -> String {
    let mut out = String::with_capacity(msg.len());
    for &b in msg.as_bytes() {
        if (0x20..=0x7e).contains(&b) && b != b'%' {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// The trailers ending a call: `grpc-status` 0 for `None`, the error's code and message
/// otherwise.
pub fn status_trailers(err: Option<&Error>) -> HeaderMap {
    let mut h = HeaderMap::new();
    match err {
        None => {
            h.insert("grpc-status", HeaderValue::from_static("0"));
        }
        Some(e) => {
            h.insert("grpc-status", HeaderValue::from(u16::from(e.kind().grpc_code())));
            if let Ok(v) = HeaderValue::from_str(&percent_encode(e.message())) {
                h.insert("grpc-message", v);
            }
        }
    }
    h
}

fn head(trailers: Option<HeaderMap>) -> http::Response<()> {
    let mut resp = http::Response::new(());
    let h = resp.headers_mut();
    h.insert(http::header::CONTENT_TYPE, HeaderValue::from_static("application/grpc"));
    h.insert("grpc-accept-encoding", HeaderValue::from_static(ACCEPT_ENCODING));
    if let Some(t) = trailers {
        h.extend(t);
    }
    resp
}

/// Fail a call before any message: a trailers-only response.
pub fn fail(mut respond: SendResponse<Bytes>, err: &Error) {
    let _ = respond.send_response(head(Some(status_trailers(Some(err)))), true);
}

/// Answer a unary call: its one message then status OK, or a trailers-only failure.
pub async fn unary(mut respond: SendResponse<Bytes>, result: Result<Bytes, Error>) {
    let framed = match result {
        Ok(f) => f,
        Err(e) => return fail(respond, &e),
    };
    let Ok(mut send) = respond.send_response(head(None), false) else { return };
    if body::send(&mut send, framed, false).await.is_ok() {
        let _ = send.send_trailers(status_trailers(None));
    }
}

/// The sending half of a streaming call, once its response head went out.
pub struct Replies {
    send: SendStream<Bytes>,
}

impl Replies {
    /// Send the response head.
    pub fn start(mut respond: SendResponse<Bytes>) -> Option<Replies> {
        respond.send_response(head(None), false).ok().map(|send| Replies { send })
    }

    /// Send one message; false when the client is gone.
    pub async fn send(&mut self, msg: &impl prost::Message) -> bool {
        body::send(&mut self.send, frame(msg), false).await.is_ok()
    }

    /// End the call with `err`'s status, or OK.
    pub fn finish(mut self, err: Option<&Error>) {
        let _ = self.send.send_trailers(status_trailers(err));
    }

    /// The stream's sending half (to watch for a reset).
    pub fn stream(&mut self) -> &mut SendStream<Bytes> {
        &mut self.send
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decoder_cuts_messages_across_chunks() {
        let msg = crate::kserve::pb::ModelReadyRequest { name: "m".into(), version: String::new() };
        let f = frame(&msg);
        let mut two = f.to_vec();
        two.extend_from_slice(&f);
        let mut d = Decoder::new(1024, Encoding::Identity);
        d.push(&two[..3]);
        assert!(d.next_message().unwrap().is_none());
        d.push(&two[3..]);
        let a: crate::kserve::pb::ModelReadyRequest = decode(d.next_message().unwrap().unwrap()).unwrap();
        assert_eq!(a.name, "m");
        assert!(d.next_message().unwrap().is_some());
        assert!(d.next_message().unwrap().is_none());
        assert_eq!(d.pending(), 0);
    }

    #[test]
    fn decoder_refuses_big_and_unannounced_compression() {
        let mut d = Decoder::new(10, Encoding::Identity);
        d.push(&[0, 0, 0, 0, 11]);
        assert_eq!(d.next_message().unwrap_err().kind(), Kind::PayloadTooLarge);
        // Compressed flag set in a call without grpc-encoding: INTERNAL (gRPC compression spec).
        let mut d = Decoder::new(10, Encoding::Identity);
        d.push(&[1, 0, 0, 0, 1, 0]);
        assert_eq!(d.next_message().unwrap_err().kind().grpc_code(), 13);
        let mut d = Decoder::new(10, Encoding::Gzip);
        d.push(&[2, 0, 0, 0, 1, 0]);
        assert_eq!(d.next_message().unwrap_err().kind(), Kind::BadRequest);
    }

    fn compressed(encoding: Encoding, data: &[u8]) -> Vec<u8> {
        use std::io::Write;
        let z = match encoding {
            Encoding::Gzip => {
                let mut w = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
                w.write_all(data).unwrap();
                w.finish().unwrap()
            }
            Encoding::Deflate => {
                let mut w = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::default());
                w.write_all(data).unwrap();
                w.finish().unwrap()
            }
            Encoding::Identity => data.to_vec(),
        };
        let mut out = vec![1];
        out.extend_from_slice(&(z.len() as u32).to_be_bytes());
        out.extend_from_slice(&z);
        out
    }

    #[test]
    fn decoder_inflates_gzip_and_deflate_within_the_limit() {
        let msg = crate::kserve::pb::ModelReadyRequest { name: "model".repeat(20), version: "1".into() };
        let plain = frame(&msg)[PREFIX..].to_vec();
        for enc in [Encoding::Gzip, Encoding::Deflate] {
            let mut d = Decoder::new(1024, enc);
            let mut both = compressed(enc, &plain);
            both.extend_from_slice(&frame(&msg)); // an uncompressed one in the same call
            d.push(&both);
            for _ in 0..2 {
                let got: crate::kserve::pb::ModelReadyRequest = decode(d.next_message().unwrap().unwrap()).unwrap();
                assert_eq!(got, msg, "{enc:?}");
            }
            // A small message that inflates past the limit is refused.
            let mut d = Decoder::new(1024, enc);
            d.push(&compressed(enc, &[b'x'; 5000]));
            assert_eq!(d.next_message().unwrap_err().kind(), Kind::PayloadTooLarge, "{enc:?}");
            // Bytes that do not inflate are INVALID_ARGUMENT.
            let mut d = Decoder::new(1024, enc);
            d.push(&[1, 0, 0, 0, 4, 1, 2, 3, 4]);
            assert_eq!(d.next_message().unwrap_err().kind(), Kind::BadRequest, "{enc:?}");
        }
    }

    #[test]
    fn encodings_from_headers() {
        let mut h = HeaderMap::new();
        assert_eq!(Encoding::of(&h).unwrap(), Encoding::Identity);
        for (v, e) in [("gzip", Encoding::Gzip), ("deflate", Encoding::Deflate), ("identity", Encoding::Identity)] {
            h.insert("grpc-encoding", HeaderValue::from_static(v));
            assert_eq!(Encoding::of(&h).unwrap(), e);
        }
        h.insert("grpc-encoding", HeaderValue::from_static("snappy"));
        let err = Encoding::of(&h).unwrap_err();
        assert_eq!(err.kind().grpc_code(), 12);
        assert!(err.message().contains("snappy") && err.message().contains(ACCEPT_ENCODING), "{}", err.message());
    }

    #[test]
    fn grpc_timeouts() {
        let mut h = HeaderMap::new();
        assert_eq!(timeout(&h).unwrap(), None);
        for (v, d) in [
            ("1H", Duration::from_secs(3600)),
            ("2M", Duration::from_secs(120)),
            ("3S", Duration::from_secs(3)),
            ("250m", Duration::from_millis(250)),
            ("7u", Duration::from_micros(7)),
            ("99999999n", Duration::from_nanos(99_999_999)),
        ] {
            h.insert("grpc-timeout", HeaderValue::from_static(v));
            assert_eq!(timeout(&h).unwrap(), Some(d), "{v}");
        }
        for bad in ["", "m", "10", "123456789S", "1x", "-1S", "1.5S", " 1S"] {
            h.insert("grpc-timeout", HeaderValue::from_static(bad));
            assert_eq!(timeout(&h).unwrap_err().kind().grpc_code(), 3, "{bad:?}");
        }
        h.insert("grpc-timeout", HeaderValue::from_static("99999999H"));
        assert!(deadline(&h).unwrap().is_some());
    }

    #[test]
    fn malformed_protobuf_is_invalid_argument() {
        let e = decode::<crate::kserve::pb::ModelInferRequest>(Bytes::from_static(&[0x0a, 0xff])).unwrap_err();
        assert_eq!(e.kind().grpc_code(), 3);
    }

    #[test]
    fn messages_are_percent_encoded() {
        assert_eq!(percent_encode("Model 'x' not found"), "Model 'x' not found");
        assert_eq!(percent_encode("50% é\n"), "50%25 %C3%A9%0A");
    }

    #[test]
    fn grpc_content_types() {
        let mut h = HeaderMap::new();
        h.insert("content-type", HeaderValue::from_static("application/grpc"));
        assert!(is_grpc(&h));
        h.insert("content-type", HeaderValue::from_static("application/grpc+proto"));
        assert!(is_grpc(&h));
        h.insert("content-type", HeaderValue::from_static("application/grpcx"));
        assert!(!is_grpc(&h));
        h.insert("content-type", HeaderValue::from_static("application/json"));
        assert!(!is_grpc(&h));
    }
}
