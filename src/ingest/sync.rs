//! The `active_sequences_events` topic (docs/dynamo/kv-routing.md §7.3, §7.8): what routers publish
//! about their bookings (`AddRequest`, `MarkPrefillCompleted`, `Free`, each with the
//! publishing router's `router_id`) and what workers publish when a request's prefill is
//! done (`MarkPrefillCompleted` with `router_id` = the worker id). Decoding and encoding of
//! the payload, and of a whole four-frame ZMQ message; no socket work lives here.
//!
//! Decoding is lenient the way [`crate::plane::kv_events`] is: any msgpack integer width, unknown keys
//! ignored, `expected_prefill_duration` of any shape (1.6.1 sends nil). Encoding writes
//! exactly the named-map shape 1.6.1 writes (checked against captured bytes in the tests).

use serde::de::IgnoredAny;
use serde::{Deserialize, Serialize};

use crate::plane::kv_events::DecodeError;
use crate::router::kv::index::Owner;

/// The topic name.
pub const ACTIVE_SEQUENCES_TOPIC: &str = "active_sequences_events";

/// Most events in one published message, and the longest a pending event waits (§7.8).
pub const BATCH_MAX: usize = 256;
pub const BATCH_WINDOW: std::time::Duration = std::time::Duration::from_millis(1);

/// The `worker` of an event.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WorkerRef {
    pub worker_id: u64,
    #[serde(default)]
    pub dp_rank: u32,
}

impl From<WorkerRef> for Owner {
    fn from(w: WorkerRef) -> Owner {
        Owner { worker_id: w.worker_id, dp_rank: w.dp_rank }
    }
}

/// One received event.
#[derive(Clone, Debug, Deserialize)]
pub struct ActiveEvent {
    pub request_id: String,
    pub worker: WorkerRef,
    pub data: ActiveData,
    pub router_id: u64,
    #[serde(default)]
    pub lora_name: Option<String>,
}

/// What happened to the request.
#[derive(Clone, Debug, Deserialize)]
pub enum ActiveData {
    AddRequest(AddRequest),
    MarkPrefillCompleted,
    Free,
}

/// A booking: the prompt's sequence hashes and its uncached prefill tokens.
#[derive(Clone, Debug, Deserialize)]
pub struct AddRequest {
    pub token_sequence: Option<Vec<u64>>,
    #[serde(default = "yes")]
    pub track_prefill_tokens: bool,
    #[serde(default)]
    pub expected_output_tokens: Option<u64>,
    #[serde(default)]
    pub prefill_load_hint: Option<PrefillLoadHint>,
}

fn yes() -> bool {
    true
}

#[derive(Clone, Debug, Deserialize)]
pub struct PrefillLoadHint {
    pub initial_effective_prefill_tokens: u64,
    /// Any shape (1.6.1 sends nil); not used.
    #[serde(default, rename = "expected_prefill_duration")]
    _duration: Option<IgnoredAny>,
}

impl AddRequest {
    /// The prefill tokens the booking holds until its prefill completes.
    pub fn prefill_tokens(&self) -> u64 {
        match (&self.prefill_load_hint, self.track_prefill_tokens) {
            (Some(h), true) => h.initial_effective_prefill_tokens,
            _ => 0,
        }
    }
}

#[derive(Deserialize)]
struct Payload {
    events: Vec<ActiveEvent>,
}

/// The events of one `active_sequences_events` payload.
pub fn decode_active(payload: &[u8]) -> Result<Vec<ActiveEvent>, DecodeError> {
    rmp_serde::from_slice::<Payload>(payload).map(|p| p.events).map_err(|e| DecodeError::Msgpack(e.to_string()))
}

/// What this router publishes about one of its bookings.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OutData {
    Add { token_sequence: std::sync::Arc<[u64]>, prefill_tokens: u64 },
    PrefillDone,
    Free,
}

/// One event this router publishes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct OutEvent {
    pub request_id: u128,
    pub worker: Owner,
    pub data: OutData,
}

#[derive(Serialize)]
struct OutPayload<'a> {
    events: Vec<OutWire<'a>>,
}

#[derive(Serialize)]
struct OutWire<'a> {
    request_id: String,
    worker: WorkerRef,
    data: OutWireData<'a>,
    router_id: u64,
    lora_name: Option<()>,
}

#[derive(Serialize)]
enum OutWireData<'a> {
    AddRequest {
        token_sequence: &'a [u64],
        track_prefill_tokens: bool,
        expected_output_tokens: Option<()>,
        prefill_load_hint: Hint,
    },
    MarkPrefillCompleted,
    Free,
}

#[derive(Serialize)]
struct Hint {
    initial_effective_prefill_tokens: u64,
    expected_prefill_duration: Option<()>,
}

/// The payload of one message carrying `events` from router `router_id`.
pub fn encode_active(events: &[OutEvent], router_id: u64) -> Vec<u8> {
    let events = events
        .iter()
        .map(|e| OutWire {
            request_id: crate::util::format_uuid(e.request_id),
            worker: WorkerRef { worker_id: e.worker.worker_id, dp_rank: e.worker.dp_rank },
            data: match &e.data {
                OutData::Add { token_sequence, prefill_tokens } => OutWireData::AddRequest {
                    token_sequence,
                    track_prefill_tokens: true,
                    expected_output_tokens: None,
                    prefill_load_hint: Hint {
                        initial_effective_prefill_tokens: *prefill_tokens,
                        expected_prefill_duration: None,
                    },
                },
                OutData::PrefillDone => OutWireData::MarkPrefillCompleted,
                OutData::Free => OutWireData::Free,
            },
            router_id,
            lora_name: None,
        })
        .collect();
    rmp_serde::to_vec_named(&OutPayload { events }).expect("plain data always serializes")
}

struct Bin<'a>(&'a [u8]);

impl Serialize for Bin<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_bytes(self.0)
    }
}

#[derive(Serialize)]
struct Envelope<'a> {
    publisher_id: u64,
    sequence: u64,
    published_at: u64,
    topic: &'a str,
    payload: Bin<'a>,
}

/// The msgpack envelope of an event-plane message (a NATS body; ZMQ frame 3 without its
/// header).
pub fn encode_envelope(topic: &str, publisher_id: u64, sequence: u64, published_at: u64, payload: &[u8]) -> Vec<u8> {
    let env = Envelope { publisher_id, sequence, published_at, topic, payload: Bin(payload) };
    rmp_serde::to_vec_named(&env).expect("plain data always serializes")
}

/// The four frames of an event-plane message (§3.1): topic, publisher id and sequence
/// (u64 big-endian), and the versioned, length-prefixed msgpack envelope.
pub fn encode_message(
    topic: &str,
    publisher_id: u64,
    sequence: u64,
    published_at: u64,
    payload: &[u8],
) -> [Vec<u8>; 4] {
    let body = encode_envelope(topic, publisher_id, sequence, published_at, payload);
    let mut f3 = Vec::with_capacity(body.len() + 5);
    f3.push(1);
    f3.extend_from_slice(&(body.len() as u32).to_be_bytes());
    f3.extend_from_slice(&body);
    [topic.as_bytes().to_vec(), publisher_id.to_be_bytes().to_vec(), sequence.to_be_bytes().to_vec(), f3]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn malformed_payloads_are_errors() {
        assert!(decode_active(b"\xc0").is_err());
        assert!(decode_active(b"\x81\xa6events\x91\xa4Free").is_err());
        assert!(decode_active(b"\x81\xa6events\x91\xc0").is_err());
        assert!(decode_active(b"\x81\xa6events\x90").unwrap().is_empty());
    }

    #[test]
    fn add_request_prefill_tokens_follow_the_hint_and_the_flag() {
        let add = |track, hint: Option<u64>| AddRequest {
            token_sequence: Some(vec![1]),
            track_prefill_tokens: track,
            expected_output_tokens: None,
            prefill_load_hint: hint.map(|n| PrefillLoadHint { initial_effective_prefill_tokens: n, _duration: None }),
        };
        assert_eq!(add(true, Some(200)).prefill_tokens(), 200);
        assert_eq!(add(false, Some(200)).prefill_tokens(), 0);
        assert_eq!(add(true, None).prefill_tokens(), 0);
    }
}
