//! The response stream ("call-home") as a pure state machine, plus its encoders.
//!
//! For each request the worker opens a new TCP connection to the frontend's listener and
//! writes two-part messages (docs/dynamo/request-plane.md §6.2, checked against `req1`, `stream1`, `p_*`,
//! `ptext1`, `p_json`, `cancel1`, `migrate1`, `deadworker`):
//!
//! | # | kind | content |
//! |---|---|---|
//! | 1 | header only, JSON | handshake `{"subject":"<uuid>","stream_type":"response"}` |
//! | 2 | header only, JSON | prologue `{"error":null}` (or `{"error":"<text>"}`) |
//! | 3..n | body only, codec | `{"data":<Annotated>,"complete_final":false}` |
//! | n+1 | body only, codec | `{"complete_final":true}` |
//! | n+2 | header only, JSON | `"sentinel"` |
//!
//! The frontend writes nothing unless it cancels: then one header-only `"kill"` (or
//! `"stop"`) frame; the worker stops without `complete_final` or sentinel. A sentinel
//! before `complete_final` is what 1.6.1 turns into a 503, so it is a [`PlaneError::Protocol`]
//! here; so are `kill`/`stop` from the worker and any byte after the sentinel. A socket that
//! closes before [`StreamEvent::Sentinel`] is the socket layer's "stream ended before
//! generation completed".

use bytes::BytesMut;
use serde::de::DeserializeOwned;
use serde::Serialize;

use super::frame::{encode_two_part, TwoPartDecoder, TwoPartKind};
use super::payload::{
    Annotated, CallHomeHandshake, Codec, ControlMessage, LLMEngineOutput, ResponseEnvelope, StreamPrologue,
};
use super::{Decoded, PlaneError};

/// One step of a response stream.
#[derive(Clone, Debug, PartialEq)]
pub enum StreamEvent<T> {
    Handshake(CallHomeHandshake),
    Prologue(StreamPrologue),
    /// The `data` of one `{"data":..,"complete_final":false}` frame (an `Annotated<..>`).
    Item(T),
    /// `{"complete_final":true}`: the engine finished normally.
    CompleteFinal,
    /// `"sentinel"`: last frame; the frontend closes the socket.
    Sentinel,
}

impl<T> StreamEvent<T> {
    /// The same event with an item converted by `f`.
    pub fn map<U>(self, f: impl FnOnce(T) -> U) -> StreamEvent<U> {
        match self {
            StreamEvent::Handshake(h) => StreamEvent::Handshake(h),
            StreamEvent::Prologue(p) => StreamEvent::Prologue(p),
            StreamEvent::Item(t) => StreamEvent::Item(f(t)),
            StreamEvent::CompleteFinal => StreamEvent::CompleteFinal,
            StreamEvent::Sentinel => StreamEvent::Sentinel,
        }
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum State {
    Handshake,
    Prologue,
    Items,
    /// `complete_final` seen; only the sentinel may follow.
    Final,
    Done,
}

/// Incremental decoder of the worker → frontend direction of a response socket.
#[derive(Clone, Debug)]
pub struct ResponseStreamDecoder {
    codec: Codec,
    frames: TwoPartDecoder,
    state: State,
    /// An item frame that also carried `complete_final: true`: report `CompleteFinal` next.
    pending_final: bool,
}

impl ResponseStreamDecoder {
    /// `codec` is the request's `payload_codec` (the worker answers in it).
    pub fn new(codec: Codec, max_message_size: usize) -> Self {
        ResponseStreamDecoder {
            codec,
            frames: TwoPartDecoder::new(max_message_size),
            state: State::Handshake,
            pending_final: false,
        }
    }

    /// Whether `complete_final` has been seen (the stream ended normally, even if the
    /// sentinel is still missing).
    pub fn complete_final_seen(&self) -> bool {
        matches!(self.state, State::Final | State::Done) || self.pending_final
    }

    /// Whether the sentinel has been seen.
    pub fn is_done(&self) -> bool {
        self.state == State::Done
    }

    /// Take the next event off `buf`. `T` is the item type, e.g.
    /// `Annotated<LLMEngineOutput>` for Tokens models or `Annotated<serde_json::Value>`.
    pub fn decode<T: DeserializeOwned + 'static>(
        &mut self,
        buf: &mut BytesMut,
    ) -> Result<Decoded<StreamEvent<T>>, PlaneError> {
        if self.pending_final {
            self.pending_final = false;
            self.state = State::Final;
            return Ok(Decoded::Frame(StreamEvent::CompleteFinal));
        }
        if self.state == State::Done {
            if buf.is_empty() {
                return Ok(Decoded::Incomplete { need: 1 });
            }
            return Err(PlaneError::Protocol(format!("{} bytes after the sentinel", buf.len())));
        }
        let frame = match self.frames.decode(buf)? {
            Decoded::Frame(f) => f,
            Decoded::Incomplete { need } => return Ok(Decoded::Incomplete { need }),
        };
        let kind = frame.kind();
        match (self.state, kind) {
            (State::Handshake, TwoPartKind::Control) => {
                let hs = CallHomeHandshake::from_json(&frame.header)?;
                self.state = State::Prologue;
                Ok(Decoded::Frame(StreamEvent::Handshake(hs)))
            }
            (State::Prologue, TwoPartKind::Control) => {
                let p = StreamPrologue::from_json(&frame.header)?;
                self.state = State::Items;
                Ok(Decoded::Frame(StreamEvent::Prologue(p)))
            }
            (State::Items, TwoPartKind::Data) => {
                let env: ResponseEnvelope<T> = match fast_envelope(self.codec, &frame.body) {
                    Some(env) => env,
                    None => self.codec.decode(&frame.body)?,
                };
                match (env.data, env.complete_final) {
                    (Some(item), final_) => {
                        self.pending_final = final_;
                        Ok(Decoded::Frame(StreamEvent::Item(item)))
                    }
                    (None, true) => {
                        self.state = State::Final;
                        Ok(Decoded::Frame(StreamEvent::CompleteFinal))
                    }
                    (None, false) => Err(PlaneError::Protocol("data frame without data or complete_final".into())),
                }
            }
            (State::Items | State::Final, TwoPartKind::Control) => match ControlMessage::from_json(&frame.header)? {
                ControlMessage::Sentinel if self.state == State::Final => {
                    self.state = State::Done;
                    Ok(Decoded::Frame(StreamEvent::Sentinel))
                }
                ControlMessage::Sentinel => Err(PlaneError::Protocol("sentinel before complete_final".into())),
                other => Err(PlaneError::Protocol(format!("{other:?} control word sent by the worker"))),
            },
            (state, kind) => Err(PlaneError::Protocol(format!("unexpected {kind:?} frame in state {state:?}"))),
        }
    }
}

/// A Tokens item envelope through [`super::itemdec`] when `T` is [`Item`] and the codec
/// msgpack; `None`: decode with serde.
fn fast_envelope<T: 'static>(codec: Codec, body: &[u8]) -> Option<ResponseEnvelope<T>> {
    if codec != Codec::Msgpack || std::any::TypeId::of::<T>() != std::any::TypeId::of::<Item>() {
        return None;
    }
    let mut env = super::itemdec::envelope(body);
    // `T` is `Item` (checked above): this downcast always succeeds.
    (&mut env as &mut dyn std::any::Any).downcast_mut::<Option<ResponseEnvelope<T>>>()?.take()
}

// ---------------------------------------------------------------- encoders

/// Append the handshake frame (worker side; used by tests and mock workers).
pub fn encode_handshake(out: &mut Vec<u8>, hs: &CallHomeHandshake) -> Result<(), PlaneError> {
    let header = serde_json::to_vec(hs).map_err(|e| PlaneError::codec("call-home handshake", e))?;
    encode_two_part(out, &header, b"");
    Ok(())
}

/// Append the prologue frame.
pub fn encode_prologue(out: &mut Vec<u8>, p: &StreamPrologue) -> Result<(), PlaneError> {
    let header = serde_json::to_vec(p).map_err(|e| PlaneError::codec("stream prologue", e))?;
    encode_two_part(out, &header, b"");
    Ok(())
}

/// Append one item frame `{"data":item,"complete_final":false}`.
pub fn encode_item<T: Serialize>(out: &mut Vec<u8>, codec: Codec, item: &T) -> Result<(), PlaneError> {
    let body = codec.encode(&ResponseEnvelope { data: Some(item), complete_final: false })?;
    encode_two_part(out, b"", &body);
    Ok(())
}

/// Append the `{"complete_final":true}` frame.
pub fn encode_complete_final(out: &mut Vec<u8>, codec: Codec) -> Result<(), PlaneError> {
    let body = codec.encode(&ResponseEnvelope::<()>::complete_final())?;
    encode_two_part(out, b"", &body);
    Ok(())
}

/// Append a header-only control word: `"sentinel"` (worker), `"kill"` / `"stop"` (frontend).
pub fn encode_control(out: &mut Vec<u8>, word: ControlMessage) {
    encode_two_part(out, word.as_json(), b"");
}

/// Item type of a `model_input = Tokens` stream.
pub type Item = Annotated<Box<LLMEngineOutput>>;
/// Item type of a `model_input = Text` stream: OpenAI chunk objects, kept as JSON.
pub type JsonItem = Annotated<serde_json::Value>;
/// Item type of a `model_input = Tensor` stream.
pub type TensorItem = Annotated<super::tensor::TensorResponse>;

/// How a stream's items are decoded, chosen when the subject is registered.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ItemMode {
    /// [`Item`]s (`LLMEngineOutput`).
    #[default]
    Tokens,
    /// [`JsonItem`]s (whatever the worker sends as `data`).
    Json,
    /// [`TensorItem`]s (`NvCreateTensorResponse`).
    Tensor,
    /// The envelope's `data` as it is, not an `Annotated` item (a served indexer's answer).
    Raw,
}

/// One decoded item, in the mode of its stream. Not boxed: Tokens items are the hot path and
/// were this size before; a JSON item is only ever smaller.
#[derive(Clone, Debug, PartialEq)]
#[allow(clippy::large_enum_variant)]
pub enum StreamItem {
    Tokens(Item),
    Json(JsonItem),
    Tensor(TensorItem),
    Raw(serde_json::Value),
}

impl StreamItem {
    /// The Tokens item, `None` for a JSON one.
    pub fn into_tokens(self) -> Option<Item> {
        match self {
            StreamItem::Tokens(i) => Some(i),
            StreamItem::Json(_) | StreamItem::Tensor(_) | StreamItem::Raw(_) => None,
        }
    }
}
