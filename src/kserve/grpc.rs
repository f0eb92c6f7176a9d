//! gRPC over an HTTP/2 stream: the message framing and the status trailers.
//!
//! A message is a 1-byte compressed flag, a 4-byte big-endian length and the protobuf bytes.
//! [`Decoder`] cuts messages out of DATA chunks as they arrive (a message may span chunks, a
//! chunk may hold several), refusing compressed messages (we announce no `grpc-encoding`) and
//! messages over the size limit before buffering them. A call ends with trailers carrying
//! `grpc-status` and, on failure, a percent-encoded `grpc-message`; a call that fails before
//! any message goes out is a *trailers-only* response (one HEADERS frame with end of stream).
//! The status code of an [`Error`] is [`crate::error::Kind::grpc_code`].

use bytes::{Buf, BufMut, Bytes, BytesMut};
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

/// Cuts whole messages out of the bytes of a request stream.
pub struct Decoder {
    buf: BytesMut,
    max: usize,
}

impl Decoder {
    /// A decoder refusing messages longer than `max` bytes.
    pub fn new(max: usize) -> Decoder {
        Decoder { buf: BytesMut::new(), max }
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
        if compressed != 0 {
            return Err(Error::new(Kind::NotImplemented, "compressed gRPC messages are not supported"));
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
        Ok(Some(self.buf.split_to(len).freeze()))
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
        let mut d = Decoder::new(1024);
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
    fn decoder_refuses_big_and_compressed() {
        let mut d = Decoder::new(10);
        d.push(&[0, 0, 0, 0, 11]);
        assert_eq!(d.next_message().unwrap_err().kind(), Kind::PayloadTooLarge);
        let mut d = Decoder::new(10);
        d.push(&[1, 0, 0, 0, 1, 0]);
        assert_eq!(d.next_message().unwrap_err().kind(), Kind::NotImplemented);
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
