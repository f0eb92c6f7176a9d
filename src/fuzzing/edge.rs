//! Targets of the bytes a client sends to the listener: HTTP/1.1 requests, an HTTP/2
//! connection's frames (the trailers watch), and KServe gRPC request streams.

use bytes::{Bytes, BytesMut};

use super::{check_json_error, control_byte, pieces};
use crate::error::Kind;
use crate::h2::trailers::{has_pseudo, Watch};
use crate::http1::parse::{parse_head, Limits};
use crate::http1::request::{Assembler, Request, Step};
use crate::kserve::grpc::{decode, frame, status_trailers, Decoder, Encoding};
use crate::kserve::{infer, pb, tensor_in};

/// Limits small enough that a fuzzer reaches them.
const LIMITS: Limits = Limits { max_headers: 16, max_head_bytes: 2048, max_body_bytes: 8192 };

/// What a connection made of its bytes: the requests, then the error that closed it.
#[derive(Debug, PartialEq)]
struct Outcome {
    requests: Vec<(Vec<u8>, Bytes)>,
    error: Option<Kind>,
}

/// The requests an [`Assembler`] cuts from `data` arriving `step` bytes at a time.
fn assemble(data: &[u8], step: usize) -> Outcome {
    let mut asm = Assembler::new(LIMITS);
    let mut buf = BytesMut::new();
    let mut out = Outcome { requests: Vec::new(), error: None };
    for piece in pieces(data, step) {
        buf.extend_from_slice(piece);
        loop {
            match asm.next(&mut buf) {
                Ok(Step::Ready(req)) => {
                    check_request(&req);
                    out.requests.push((req.path().to_vec(), req.body.clone()));
                }
                Ok(Step::NeedMore { .. }) => break,
                Err(e) => {
                    check_json_error(&e);
                    out.error = Some(e.kind());
                    return out;
                }
            }
        }
    }
    out
}

/// Every span of a request resolves inside its head, and its body keeps to the limit.
fn check_request(req: &Request) {
    let _ = req.path();
    for (name, value) in &req.head.headers {
        let _ = (name.get(&req.head_bytes), value.get(&req.head_bytes));
    }
    if let Some(q) = req.head.query {
        let _ = q.get(&req.head_bytes);
    }
    let _ = req.content_type();
    assert!(req.body.len() <= LIMITS.max_body_bytes, "body of {} bytes", req.body.len());
    assert!(req.head_bytes.len() <= LIMITS.max_head_bytes, "head of {} bytes", req.head_bytes.len());
}

/// HTTP/1.1: the first byte picks how the rest arrives (in pieces of 1–63 bytes, or whole);
/// the requests and the closing error must be the same as when it arrives whole. The rest is
/// also parsed as one head alone, and, split at its first two newlines into a method, a
/// target and header lines, made a request the way HTTP/2 streams become one.
pub fn http1(data: &[u8]) {
    let (ctl, rest) = control_byte(data);
    let whole = assemble(rest, 0);
    let split = assemble(rest, usize::from(ctl % 64));
    assert_eq!(whole, split, "split into pieces of {}", ctl % 64);
    if let Ok(Some(head)) = parse_head(rest, &LIMITS) {
        assert!(head.head_len <= rest.len());
    }
    let text = String::from_utf8_lossy(rest);
    let mut lines = text.split('\n');
    let (method, target) = (lines.next().unwrap_or(""), lines.next().unwrap_or(""));
    let headers: Vec<(&str, &[u8])> = lines.filter_map(|l| l.split_once(':')).map(|(n, v)| (n, v.as_bytes())).collect();
    match Request::synthetic(method, target, headers, Bytes::from_static(b"{}"), &LIMITS) {
        Ok(req) => check_request(&req),
        Err(e) => check_json_error(&e),
    }
}

/// The flags the watch sets, by stream, for `data` fed `step` bytes at a time.
fn watched(data: &[u8], step: usize) -> Vec<bool> {
    let (mut watch, marker) = Watch::new();
    let early = marker.accept(1);
    for piece in pieces(data, step) {
        watch.feed(piece);
    }
    let mut flags = vec![early.is_set()];
    flags.extend((2..12).map(|id| marker.accept(id).is_set()));
    flags
}

/// The HTTP/2 trailers watch: a client's bytes (connection preface first) in pieces the first
/// byte picks; the streams it flags must not depend on the split. The bytes are also read as
/// one header block.
pub fn h2_trailers(data: &[u8]) {
    let (ctl, rest) = control_byte(data);
    assert_eq!(watched(rest, 0), watched(rest, usize::from(ctl % 32)), "split into pieces of {}", ctl % 32);
    let _ = has_pseudo(rest);
}

/// The most bytes one fuzzed gRPC message may have (the server's is the body limit).
const MAX_MESSAGE: usize = 64 * 1024;

/// KServe gRPC: the first byte picks the call's `grpc-encoding` and how the stream's bytes
/// arrive; each whole message is decoded as a `ModelInferRequest` and converted as a
/// completions model's request (then validated as `/v1/completions` validates it) and as a
/// tensor model's, for a model that declares nothing and one that declares its tensors. A
/// refusal is a gRPC status; a converted request answers with a response that frames.
pub fn kserve_grpc(data: &[u8]) {
    let (ctl, rest) = control_byte(data);
    let encoding = match ctl % 3 {
        0 => Encoding::Identity,
        1 => Encoding::Gzip,
        _ => Encoding::Deflate,
    };
    let mut decoder = Decoder::new(MAX_MESSAGE, encoding);
    for piece in pieces(rest, usize::from(ctl / 3 % 32)) {
        decoder.push(piece);
        loop {
            match decoder.next_message() {
                Ok(Some(msg)) => infer_request(msg),
                Ok(None) => break,
                Err(e) => return check_trailers(&e),
            }
        }
    }
}

/// One message of a ModelInfer or ModelStreamInfer call, as the server reads it.
fn infer_request(msg: Bytes) {
    let _ = decode::<pb::ModelMetadataRequest>(msg.clone());
    let req = match decode::<pb::ModelInferRequest>(msg) {
        Ok(r) => r,
        Err(e) => return check_status(&e),
    };
    match infer::parse(&req) {
        Ok(text) => {
            match crate::openai::parse_completion(&text.body)
                .and_then(|c| crate::openai::to_infer::completion(c, &text.body))
            {
                Ok(_) => {}
                Err(e) => check_status(&e),
            }
            let piece = infer::Piece { text: "x".into(), finish: "stop".into() };
            let _ = frame(&infer::response(&text, Some(&piece), Some(true)));
        }
        Err(e) => check_status(&e),
    }
    for model in models() {
        match tensor_in::convert(req.clone(), "m", &model) {
            Ok(c) => {
                let json = serde_json::to_vec(&c.wire).expect("a tensor request serializes");
                assert!(!json.is_empty());
            }
            Err(e) => check_status(&e),
        }
    }
}

/// A model that declares nothing, and one that declares two inputs (one of a fixed
/// dimension) and an output.
fn models() -> [crate::registry::TensorModel; 2] {
    let declared = serde_json::json!({"name": "m", "outputs": [{"name": "y", "data_type": "Float32", "shape": [-1]}],
        "inputs": [{"name": "x", "data_type": "Float32", "shape": [2, -1]}, {"name": "INPUT1", "data_type": "Bytes", "shape": [-1]}]});
    let load = |v: Option<&serde_json::Value>| crate::kserve::tensor_meta::load(v).expect("a valid config");
    [load(None), load(Some(&declared))]
}

/// A refused gRPC message: a client error whose status trailers can be written.
fn check_status(e: &crate::Error) {
    check_json_error(e);
    check_trailers(e);
}

/// Status trailers with a failing `grpc-status` (a framing error may be INTERNAL: gRPC's
/// status for a compressed message in a call without an encoding).
fn check_trailers(e: &crate::Error) {
    let trailers = status_trailers(Some(e));
    assert!(trailers.get("grpc-status").is_some_and(|v| v != "0"), "{trailers:?}");
}
