//! The fuzz targets: what each cargo-fuzz target in `fuzz/` runs on one input, and what
//! `tests/fuzz_corpus.rs` replays for every committed corpus file and crash regression, so
//! the fuzzers and `cargo test` run the very same functions.
//!
//! Each target takes the raw bytes a peer could send and drives them through the same
//! functions the server runs on them, to the internal value (or error) the server would act
//! on. A target returns normally for every input; a panic is a finding. Beyond "no panic"
//! they check what must hold whatever the bytes: a refusal is a client error in the
//! protocol's own shape (a JSON body that parses, a gRPC status), and an incremental decoder
//! decides the same whether the bytes come whole or in pieces.
//!
//! | target | bytes of | see |
//! |---|---|---|
//! | `http1` | HTTP/1.1 requests, chunked bodies | [`edge`] |
//! | `h2_trailers` | an HTTP/2 client's frames | [`edge`] |
//! | `kserve_grpc` | gRPC request streams of KServe `ModelInfer` | [`edge`] |
//! | `openai` | `/v1/chat/completions` and `/v1/completions` bodies | [`apis`] |
//! | `anthropic` | `/v1/messages` and `count_tokens` bodies | [`apis`] |
//! | `responses` | `/v1/responses` and `input_tokens` bodies | [`apis`] |
//! | `plane_stream` | a worker's response stream on the TCP request plane | [`planes`] |
//! | `kv_events` | ZMTP frames of the KV event plane | [`planes`] |
//! | `discovery` | file-store records, etcd watch streams, model cards | [`control`] |
//! | `chat_template` | a chat template and the conversation it renders | [`control`] |
//!
//! Not part of serving: nothing on a shard calls into this module. It runs on the fuzzer's
//! thread, or the test's.

pub mod apis;
pub mod control;
pub mod edge;
pub mod planes;

/// A target: one input in, a panic for a finding.
pub type Target = fn(&[u8]);

/// Every target by name, as `fuzz/fuzz_targets/<name>.rs` and `fuzz/corpus/<name>/` name it.
pub const TARGETS: &[(&str, Target)] = &[
    ("http1", edge::http1),
    ("h2_trailers", edge::h2_trailers),
    ("kserve_grpc", edge::kserve_grpc),
    ("openai", apis::openai),
    ("anthropic", apis::anthropic),
    ("responses", apis::responses),
    ("plane_stream", planes::plane_stream),
    ("kv_events", planes::kv_events),
    ("discovery", control::discovery),
    ("chat_template", control::chat_template),
];

/// The target called `name`.
pub fn target(name: &str) -> Option<Target> {
    TARGETS.iter().find(|(n, _)| *n == name).map(|(_, f)| *f)
}

/// An input's first byte as a control byte (how to split, which mode), and the rest.
pub(crate) fn control_byte(data: &[u8]) -> (u8, &[u8]) {
    match data.split_first() {
        Some((&c, rest)) => (c, rest),
        None => (0, data),
    }
}

/// The pieces `data` arrives in: of `step` bytes each (`0`: all at once).
pub(crate) fn pieces(data: &[u8], step: usize) -> impl Iterator<Item = &[u8]> {
    let step = if step == 0 { data.len().max(1) } else { step };
    data.chunks(step)
}

/// A refusal of what a client sent: a 4xx (or 501, a feature refused; 505, an HTTP version
/// refused) whose OpenAI-shaped body is a JSON object. A 500 would be the server failing on
/// bad input.
pub(crate) fn check_json_error(e: &crate::Error) {
    let status = e.status();
    assert!((400..500).contains(&status) || matches!(status, 501 | 505), "error status {status} for {e:?}");
    let body: serde_json::Value = serde_json::from_slice(&e.to_json_body()).expect("an error body is JSON");
    assert!(body.is_object(), "error body {body}");
}
