//! Pure, I/O-free wire codecs of Dynamo 1.6.1's TCP request plane and response stream.
//!
//! Nothing here touches a socket or an executor: every decoder takes the bytes read so far
//! and answers with a frame, [`Decoded::Incomplete`] ("read more", a normal outcome) or a
//! [`PlaneError`]; every encoder appends to a `Vec<u8>`. The socket layer owns connections,
//! FIFO ack pairing, the subject table and deadlines.
//!
//! | module | owns |
//! |---|---|
//! | [`frame`] | request frame (u16 path, u16 JSON headers, u32 payload), two-part message (u64 header_len, u64 body_len, u64 checksum), u32 ack frame |
//! | [`nats`] | the core NATS client protocol: server URLs, `CONNECT`, the units a server sends (the NATS request and event planes run on it) |
//! | [`payload`] | serde types: `RequestControlMessage`, `PreprocessedRequest`, `LLMEngineOutput`, `Annotated`, the `{data, complete_final}` envelope, handshake / prologue / `kill` `stop` `sentinel`; msgpack / JSON [`Codec`] |
//! | [`indexer`] | serde types of the served KV indexer's `kv_indexer_query`: the query and its tiered scores |
//! | [`itemdec`] | a hand-written msgpack decoder of the Tokens item envelope (the per-token frame), falling back to serde for anything it does not fully understand |
//! | [`preprocessed`] | `PreprocessedRequest` and its parts (stop conditions, sampling, guided decoding, output options, routing hints), re-exported by [`payload`] |
//! | [`reqenc`] | the msgpack `PreprocessedRequest` body written by hand around its token-id arrays (byte-identical to the derived encoding) |
//! | [`stream`] | the response-stream sequence: handshake, prologue, data..., `complete_final`, sentinel; `kill` / `stop` going the other way |
//! | [`tensor`] | serde types of tensor models: `NvCreateTensorRequest` / `NvCreateTensorResponse` and the card's `tensor_model_config` |
//!
//! Facts are in docs/dynamo/request-plane.md (sections 5, 6, 7) and were
//! checked against the loopback captures of real 1.6.1 processes; the bytes used by the tests
//! are copied under `tests/data/plane/` (see its README).
//!
//! Errors are [`PlaneError`]; it converts into the crate [`Error`](crate::Error) as a worker
//! fault (503, retry allowed) because on the frontend every malformed byte came from a worker.

pub mod frame;
pub mod indexer;
pub mod itemdec;
pub mod kv_events;
pub mod nats;
pub mod payload;
pub mod preprocessed;
pub mod reqenc;
pub mod stream;
pub mod tensor;

use std::fmt;

pub use frame::{
    encode_ack, encode_request_frame, encode_two_part, Ack, AckDecoder, RequestFrame, RequestFrameDecoder,
    RequestFrameRef, TwoPart, TwoPartDecoder, TwoPartKind, TwoPartRef, TWO_PART_PRELUDE_LEN,
};
pub use payload::{
    Annotated, CallHomeHandshake, Codec, CompletionUsage, ConnectionInfo, ControlMessage, DynamoError, FinishReason,
    LLMEngineOutput, OutputOptions, OutputType, PreprocessedRequest, PromptTokensDetails, RequestControlMessage,
    RequestType, ResponseEnvelope, ResponseType, RoutingHints, SamplingOptions, StopConditions, StreamPrologue,
    StreamType, TcpStreamInfo, TopLogprob,
};
pub use stream::{
    encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue, ResponseStreamDecoder,
    StreamEvent,
};

/// `DYN_TCP_MAX_MESSAGE_SIZE` default: 32 MiB (\[S\] in docs/dynamo/request-plane.md, appendix A).
pub const DEFAULT_MAX_MESSAGE_SIZE: usize = 32 * 1024 * 1024;

/// Result of feeding bytes to a decoder: a whole frame, or "need more bytes".
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Decoded<T> {
    /// One complete frame (its bytes have been consumed from the buffer).
    Frame(T),
    /// Not enough bytes yet; `need` is a lower bound on the total buffered length required
    /// before the decoder can make progress (useful for `reserve`). Nothing was consumed.
    Incomplete { need: usize },
}

impl<T> Decoded<T> {
    /// The same result with the frame converted by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> Decoded<U> {
        match self {
            Decoded::Frame(t) => Decoded::Frame(f(t)),
            Decoded::Incomplete { need } => Decoded::Incomplete { need },
        }
    }

    /// The frame, if complete.
    pub fn frame(self) -> Option<T> {
        match self {
            Decoded::Frame(t) => Some(t),
            Decoded::Incomplete { .. } => None,
        }
    }

    /// Whether more bytes are needed.
    pub fn is_incomplete(&self) -> bool {
        matches!(self, Decoded::Incomplete { .. })
    }
}

/// A codec failure. "Need more bytes" is never an error (see [`Decoded::Incomplete`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum PlaneError {
    /// A declared length exceeds the configured maximum (`DYN_TCP_MAX_MESSAGE_SIZE`).
    TooLarge { what: &'static str, len: u64, max: u64 },
    /// Bytes that cannot be a frame of this kind (bad UTF-8, bad JSON headers, length mismatch).
    Malformed { what: &'static str, detail: String },
    /// A payload that the codec (msgpack / JSON) could not encode or decode.
    Codec { what: &'static str, detail: String },
    /// A well-formed frame in the wrong place of the response-stream sequence.
    Protocol(String),
}

impl PlaneError {
    pub(crate) fn malformed(what: &'static str, detail: impl fmt::Display) -> Self {
        PlaneError::Malformed { what, detail: detail.to_string() }
    }
    pub(crate) fn codec(what: &'static str, detail: impl fmt::Display) -> Self {
        PlaneError::Codec { what, detail: detail.to_string() }
    }
}

impl fmt::Display for PlaneError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            PlaneError::TooLarge { what, len, max } => write!(f, "{what}: {len} bytes exceeds the limit of {max}"),
            PlaneError::Malformed { what, detail } => write!(f, "malformed {what}: {detail}"),
            PlaneError::Codec { what, detail } => write!(f, "cannot code {what}: {detail}"),
            PlaneError::Protocol(detail) => write!(f, "response stream protocol error: {detail}"),
        }
    }
}

impl std::error::Error for PlaneError {}

impl From<PlaneError> for crate::Error {
    fn from(e: PlaneError) -> Self {
        crate::Error::new(crate::Kind::ServiceUnavailable, "Service temporarily unavailable")
            .with_side(crate::Side::Worker)
            .with_cause(e)
    }
}
