//! Serde types of what travels inside the two-part messages, and the msgpack / JSON codec.
//!
//! Encoding rules (docs/dynamo/request-plane.md §7.1, verified against the captured `stream1` request body (tests/data/plane/stream1.req.bin) and the copied
//! frames): msgpack **maps keyed by serde field name** (`rmp_serde::to_vec_named`), smallest
//! integer encodings, `f32` sampling floats as msgpack float32, `nil` for `None` on fields
//! that are always serialized, absent keys for skip-if-none fields. Key order is the field
//! order below, which is the order 1.6.1 writes. With `payload_codec: json` the same
//! structures are compact JSON.
//!
//! Decoding is tolerant: unknown keys are ignored and missing keys take their default, since
//! Python workers send only what they yield (`{"token_ids":[603]}`).
//!
//! | type | where | header / body |
//! |---|---|---|
//! | [`RequestControlMessage`] | request payload header | JSON always; `connection_info.info` is a JSON string holding [`TcpStreamInfo`] |
//! | [`PreprocessedRequest`] | request payload body (`model_input = Tokens`) | codec |
//! | the client's OpenAI request object | request payload body (`model_input = Text`) | codec |
//! | [`CallHomeHandshake`] | response stream frame 1 | JSON header |
//! | [`StreamPrologue`] | response stream frame 2 | JSON header |
//! | [`ResponseEnvelope`]`<`[`Annotated`]`<`[`LLMEngineOutput`]`>>` | data frames, `complete_final` | codec body |
//! | [`ControlMessage`] | `"sentinel"` (worker → FE), `"kill"` / `"stop"` (FE → worker) | JSON header |

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use super::PlaneError;

pub use super::preprocessed::*;

/// The request-plane payload codec (`payload_codec`, the worker's `request_plane_codec`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Codec {
    #[default]
    Msgpack,
    Json,
}

impl Codec {
    pub fn as_str(self) -> &'static str {
        match self {
            Codec::Msgpack => "msgpack",
            Codec::Json => "json",
        }
    }

    /// Parse the advertised codec name (`msgpack`, `json`).
    pub fn from_name(name: &str) -> Option<Codec> {
        match name {
            "msgpack" => Some(Codec::Msgpack),
            "json" => Some(Codec::Json),
            _ => None,
        }
    }

    /// Encode a value: msgpack map with field names, or compact JSON.
    pub fn encode<T: Serialize + ?Sized>(self, value: &T) -> Result<Vec<u8>, PlaneError> {
        match self {
            Codec::Msgpack => rmp_serde::to_vec_named(value).map_err(|e| PlaneError::codec("msgpack body", e)),
            Codec::Json => serde_json::to_vec(value).map_err(|e| PlaneError::codec("json body", e)),
        }
    }

    /// Decode a value; the whole input must be consumed.
    pub fn decode<T: DeserializeOwned>(self, bytes: &[u8]) -> Result<T, PlaneError> {
        match self {
            Codec::Msgpack => {
                // The borrowing reader: strings and binaries are read in place, not copied
                // through an intermediate buffer first.
                let mut de = rmp_serde::Deserializer::from_read_ref(bytes);
                let v = T::deserialize(&mut de).map_err(|e| PlaneError::codec("msgpack body", e))?;
                match msgpack_len(bytes) {
                    Some(n) if n == bytes.len() => Ok(v),
                    Some(n) => Err(PlaneError::codec("msgpack body", format!("{} trailing bytes", bytes.len() - n))),
                    None => Err(PlaneError::codec("msgpack body", "truncated value")),
                }
            }
            Codec::Json => serde_json::from_slice(bytes).map_err(|e| PlaneError::codec("json body", e)),
        }
    }
}

/// Length in bytes of the first msgpack value in `b` (`None`: truncated or not msgpack).
/// Walks the structure without decoding it: a count of values still to skip, no recursion.
pub fn msgpack_len(b: &[u8]) -> Option<usize> {
    let mut pos = 0usize;
    let mut pending = 1u64;
    let be = |at: usize, n: usize| -> Option<u64> {
        let s = b.get(at..at + n)?;
        Some(s.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    };
    while pending > 0 {
        pending -= 1;
        let m = *b.get(pos)?;
        pos += 1;
        // (bytes of payload to skip, values that follow)
        let (skip, values): (u64, u64) = match m {
            0x00..=0x7f | 0xe0..=0xff | 0xc0 | 0xc2 | 0xc3 => (0, 0),
            0x80..=0x8f => (0, 2 * u64::from(m & 0x0f)),
            0x90..=0x9f => (0, u64::from(m & 0x0f)),
            0xa0..=0xbf => (u64::from(m & 0x1f), 0),
            0xc4 | 0xd9 => (be(pos, 1)? + 1, 0),
            0xc5 | 0xda => (be(pos, 2)? + 2, 0),
            0xc6 | 0xdb => (be(pos, 4)? + 4, 0),
            0xc7 => (be(pos, 1)? + 2, 0),
            0xc8 => (be(pos, 2)? + 3, 0),
            0xc9 => (be(pos, 4)? + 5, 0),
            0xca | 0xce | 0xd2 => (4, 0),
            0xcb | 0xcf | 0xd3 => (8, 0),
            0xcc | 0xd0 => (1, 0),
            0xcd | 0xd1 => (2, 0),
            0xd4 => (2, 0),
            0xd5 => (3, 0),
            0xd6 => (5, 0),
            0xd7 => (9, 0),
            0xd8 => (17, 0),
            0xdc => (2, be(pos, 2)?),
            0xdd => (4, be(pos, 4)?),
            0xde => (2, 2 * be(pos, 2)?),
            0xdf => (4, 2 * be(pos, 4)?),
            0xc1 => return None,
        };
        pos = pos.checked_add(usize::try_from(skip).ok()?)?;
        if pos > b.len() {
            return None;
        }
        pending = pending.checked_add(values)?;
    }
    Some(pos)
}

// ---------------------------------------------------------------- request control message

/// `request_type` of the control message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RequestType {
    #[default]
    SingleIn,
    ManyIn,
}

/// `response_type` of the control message.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ResponseType {
    SingleOut,
    #[default]
    ManyOut,
}

/// `connection_info`: transport name and a **JSON string** with the transport details.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct ConnectionInfo {
    /// `tcp_server` on 1.6.1.
    pub transport: String,
    /// Double-encoded JSON; for `tcp_server` a [`TcpStreamInfo`].
    pub info: String,
}

impl ConnectionInfo {
    /// `{"transport":"tcp_server","info":"<TcpStreamInfo as JSON>"}`.
    pub fn tcp_server(info: &TcpStreamInfo) -> Result<Self, PlaneError> {
        let info = serde_json::to_string(info).map_err(|e| PlaneError::codec("connection_info.info", e))?;
        Ok(ConnectionInfo { transport: "tcp_server".to_owned(), info })
    }

    /// Decode the inner `info` string.
    pub fn tcp_info(&self) -> Result<TcpStreamInfo, PlaneError> {
        serde_json::from_str(&self.info).map_err(|e| PlaneError::codec("connection_info.info", e))
    }
}

/// `response` (the call-home stream) or `request`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StreamType {
    Request,
    #[default]
    Response,
}

/// The inner JSON of `connection_info.info`: where the worker must call back.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TcpStreamInfo {
    /// Frontend response-stream listener `host:port`.
    pub address: String,
    /// Fresh UUID per request and per attempt; echoed in the handshake.
    pub subject: String,
    /// The request id.
    pub context: String,
    pub stream_type: StreamType,
}

/// The JSON header of a request payload.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct RequestControlMessage {
    /// Request UUID (= `request-id` header = response-stream `context`).
    pub id: String,
    pub request_type: RequestType,
    pub response_type: ResponseType,
    pub payload_codec: Codec,
    pub connection_info: ConnectionInfo,
    /// \[S\] exists, omitted by 1.6.1 (the send timestamp travels in a header instead).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub frontend_send_ts_ns: Option<u64>,
    /// \[S\] for streamed requests; omitted when unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_stream_connection_info: Option<serde_json::Value>,
}

impl RequestControlMessage {
    /// The control message 1.6.1 sends for a unary-in / streaming-out request.
    pub fn single_in_many_out(id: &str, codec: Codec, info: &TcpStreamInfo) -> Result<Self, PlaneError> {
        Ok(RequestControlMessage {
            id: id.to_owned(),
            request_type: RequestType::SingleIn,
            response_type: ResponseType::ManyOut,
            payload_codec: codec,
            connection_info: ConnectionInfo::tcp_server(info)?,
            frontend_send_ts_ns: None,
            request_stream_connection_info: None,
        })
    }

    /// Compact JSON, as on the wire.
    pub fn to_json(&self) -> Result<Vec<u8>, PlaneError> {
        serde_json::to_vec(self).map_err(|e| PlaneError::codec("control message", e))
    }

    pub fn from_json(bytes: &[u8]) -> Result<Self, PlaneError> {
        serde_json::from_slice(bytes).map_err(|e| PlaneError::codec("control message", e))
    }
}

// ---------------------------------------------------------------- response stream payloads

/// Response-stream frame 1 (JSON header): `{"subject":"<uuid>","stream_type":"response"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallHomeHandshake {
    pub subject: String,
    pub stream_type: StreamType,
}

impl CallHomeHandshake {
    /// As serde reads it. The exact text workers send (a subject without escapes, then
    /// `stream_type`) is taken apart directly: serde costs ~1 K instructions for it, and every
    /// request's call-back reads it twice (once to route the socket, once in the decoder).
    pub fn from_json(bytes: &[u8]) -> Result<Self, PlaneError> {
        let quick = bytes.strip_prefix(br#"{"subject":""#).and_then(|rest| {
            let end = rest.iter().position(|&b| b == b'"' || b == b'\\' || b < 0x20)?;
            let stream_type = match &rest[end..] {
                br#"","stream_type":"response"}"# => StreamType::Response,
                br#"","stream_type":"request"}"# => StreamType::Request,
                _ => return None,
            };
            let subject = std::str::from_utf8(&rest[..end]).ok()?.to_owned();
            Some(CallHomeHandshake { subject, stream_type })
        });
        match quick {
            Some(hs) => Ok(hs),
            None => serde_json::from_slice(bytes).map_err(|e| PlaneError::codec("call-home handshake", e)),
        }
    }
}

/// Response-stream frame 2 (JSON header): `{"error":null}` or `{"error":"<text>"}`.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct StreamPrologue {
    #[serde(default)]
    pub error: Option<String>,
}

impl StreamPrologue {
    /// As serde reads it; the usual `{"error":null}` without the parser.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PlaneError> {
        if bytes == br#"{"error":null}"# {
            return Ok(StreamPrologue { error: None });
        }
        serde_json::from_slice(bytes).map_err(|e| PlaneError::codec("stream prologue", e))
    }
}

/// Header-only control words on the response socket, JSON strings: the worker ends with
/// `"sentinel"`; the frontend may send `"kill"` (seen) or `"stop"` (\[S\]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ControlMessage {
    Stop,
    Kill,
    Sentinel,
}

impl ControlMessage {
    /// The JSON header bytes (`"kill"`, ...).
    pub fn as_json(self) -> &'static [u8] {
        match self {
            ControlMessage::Stop => b"\"stop\"",
            ControlMessage::Kill => b"\"kill\"",
            ControlMessage::Sentinel => b"\"sentinel\"",
        }
    }

    /// As serde reads it; the three words as written without the parser.
    pub fn from_json(bytes: &[u8]) -> Result<Self, PlaneError> {
        match bytes {
            b"\"sentinel\"" => Ok(ControlMessage::Sentinel),
            b"\"kill\"" => Ok(ControlMessage::Kill),
            b"\"stop\"" => Ok(ControlMessage::Stop),
            _ => serde_json::from_slice(bytes).map_err(|e| PlaneError::codec("control word", e)),
        }
    }
}

/// Dynamo's `NetworkStreamWrapper`: `{"data": <item>, "complete_final": false}` per item,
/// `{"complete_final": true}` (no `data`) at the end.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ResponseEnvelope<T> {
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
    pub complete_final: bool,
}

fn none<T>() -> Option<T> {
    None
}

impl<T> ResponseEnvelope<T> {
    pub fn item(data: T) -> Self {
        ResponseEnvelope { data: Some(data), complete_final: false }
    }
    pub fn complete_final() -> Self {
        ResponseEnvelope { data: None, complete_final: true }
    }
}

/// `Annotated<T>`: one engine output plus optional SSE-style annotations; an error item is
/// `{"event":"error","error":{...}}`. Every key is skip-if-none.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Annotated<T> {
    #[serde(default = "none", skip_serializing_if = "Option::is_none")]
    pub data: Option<T>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub comment: Option<Vec<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<Box<DynamoError>>,
}

impl<T> Annotated<T> {
    pub fn from_data(data: T) -> Self {
        Annotated { data: Some(data), id: None, event: None, comment: None, error: None }
    }

    /// Whether this is an error item (`event: "error"` or an `error` object).
    pub fn is_error(&self) -> bool {
        self.error.is_some() || self.event.as_deref() == Some("error")
    }
}

/// Dynamo's error object carried by an error item (docs/dynamo/request-plane.md §6.5). `diagnostic` is for
/// operators only and must not reach clients.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct DynamoError {
    /// Legacy class: a name string or `{"Backend": "<sub-kind>"}`.
    pub error_type: serde_json::Value,
    /// Canonical class: `InvalidRequest`, `Unavailable`, `Internal`, ...
    #[serde(rename = "class")]
    pub class: Option<String>,
    /// Catalog key such as `backend.invalid_argument`.
    pub reason: Option<String>,
    pub message: String,
    pub diagnostic: Option<String>,
    /// Client-safe details: `{"type":"message","message":…}` (shown to the client instead of
    /// the class's generic text) or structured limits (`context_length`, …).
    #[serde(alias = "public_details", skip_serializing_if = "Option::is_none")]
    pub public: Option<serde_json::Value>,
}

/// `output_type` of an engine output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputType {
    #[default]
    Text,
    Image,
    Video,
    Audio,
}

/// `finish_reason`: a string, or `{"error": "<msg>"}` (externally tagged).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FinishReason {
    Eos,
    Stop,
    Length,
    #[serde(alias = "abort")]
    Cancelled,
    ContentFilter,
    Error(String),
}

/// One alternative of `top_logprobs`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct TopLogprob {
    pub rank: u32,
    pub token_id: u32,
    /// Null from workers; the frontend fills the text.
    pub token: Option<String>,
    pub logprob: f64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes: Option<Vec<u8>>,
}

/// `completion_usage` (the mocker sends it on the first and the last item).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<PromptTokensDetails>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<serde_json::Value>,
}

/// `prompt_tokens_details`: both keys always serialized by the mocker.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(default)]
pub struct PromptTokensDetails {
    pub audio_tokens: Option<u32>,
    pub cached_tokens: Option<u32>,
}

/// `LLMEngineOutput` (docs/dynamo/request-plane.md §7.3), the `data` of an item for `model_input = Tokens`.
/// The first nine keys are always serialized (the mocker sends them with `nil`); the rest
/// are skip-if-none.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct LLMEngineOutput {
    pub token_ids: Vec<u32>,
    pub tokens: Option<Vec<Option<String>>>,
    pub text: Option<String>,
    pub output_type: OutputType,
    pub cum_log_probs: Option<f64>,
    pub log_probs: Option<Vec<f64>>,
    pub top_logprobs: Option<Vec<Vec<TopLogprob>>>,
    pub finish_reason: Option<FinishReason>,
    pub index: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_usage: Option<CompletionUsage>,
    /// Which stop string / token fired \[S\].
    #[serde(skip_serializing_if = "Option::is_none")]
    pub stop_reason: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub disaggregated_params: Option<serde_json::Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub extra_args: Option<serde_json::Value>,
}
