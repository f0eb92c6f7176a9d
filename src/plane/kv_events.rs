//! Decoding of the `kv-events` topic (docs/dynamo/kv-routing.md §3.1, §4.1): the ZMQ frame-3 header, the msgpack
//! `EventEnvelope`, and its payload — a batch of `RouterEvent`s carrying `stored`, `removed`
//! and `cleared` KV-cache events — into plain Rust types. No socket work lives here.
//!
//! Both event planes carry the same envelope: ZMQ as frame 3 behind a 5-byte header
//! ([`decode_message`]), NATS as the bare message body ([`decode_nats_message`], facts in
//! [`crate::ingest::nats`]).
//!
//! Decoding follows the advice of §4.1: any msgpack integer width is accepted, unknown map
//! keys are ignored, `dp_rank` defaults to 0, and `cleared` may be a bare string (unit
//! variant) or a one-entry map.

use std::fmt;

use serde::{Deserialize, Serialize};

/// The topic of KV cache events.
pub const KV_EVENTS_TOPIC: &str = "kv-events";

/// Why a frame or payload could not be decoded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum DecodeError {
    /// A multipart message did not have 4 frames.
    FrameCount(usize),
    /// Frame 1 or 2 was not 8 bytes long.
    FrameLength { frame: usize, len: usize },
    /// Frame 3 was shorter than its 5-byte header.
    ShortHeader(usize),
    /// Frame 3 had a version byte other than 1.
    Version(u8),
    /// Frame 3's declared length did not match the bytes that follow the header.
    Length { declared: u32, actual: usize },
    /// The msgpack body did not decode.
    Msgpack(String),
    /// A NATS message's subject does not end in the topic its envelope names.
    Subject { subject: String, topic: String },
}

impl fmt::Display for DecodeError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            DecodeError::FrameCount(n) => write!(f, "expected 4 frames, got {n}"),
            DecodeError::FrameLength { frame, len } => {
                write!(f, "frame {frame} must be 8 bytes, got {len}")
            }
            DecodeError::ShortHeader(n) => write!(f, "frame 3 is {n} bytes, shorter than its header"),
            DecodeError::Version(v) => write!(f, "unsupported event frame version {v}"),
            DecodeError::Length { declared, actual } => {
                write!(f, "event frame declares {declared} bytes, carries {actual}")
            }
            DecodeError::Msgpack(e) => write!(f, "msgpack: {e}"),
            DecodeError::Subject { subject, topic } => {
                write!(f, "subject {subject:?} does not end in the envelope's topic {topic:?}")
            }
        }
    }
}

impl std::error::Error for DecodeError {}

/// The msgpack envelope of every event-plane message; `payload` borrows from the frame.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct EventEnvelope<'a> {
    pub publisher_id: u64,
    pub sequence: u64,
    /// Unix milliseconds.
    pub published_at: u64,
    pub topic: String,
    #[serde(borrow)]
    pub payload: &'a [u8],
}

/// One decoded event-plane message: the values of frames 0–2 and the envelope of frame 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EventMessage<'a> {
    pub topic: &'a [u8],
    /// Frame 1 (u64 big-endian).
    pub publisher_id: u64,
    /// Frame 2 (u64 big-endian).
    pub sequence: u64,
    pub envelope: EventEnvelope<'a>,
}

/// A KV event as published by a worker (`RouterEvent`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RouterEvent {
    pub worker_id: u64,
    /// `device`, `host_pinned`, `disk`, `external`; absent in old publishers (= `device`).
    #[serde(default = "device")]
    pub storage_tier: String,
    /// `worker` or `cache_owner`; absent in legacy publishers.
    #[serde(default)]
    pub residency_domain: Option<String>,
    pub event: KvCacheEvent,
}

fn device() -> String {
    "device".to_string()
}

/// The event proper, numbered per `(worker_id, dp_rank)` stream from 1.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct KvCacheEvent {
    pub event_id: u64,
    pub data: KvCacheEventData,
    #[serde(default)]
    pub dp_rank: u32,
}

/// What happened to the worker's cache.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum KvCacheEventData {
    Stored(StoredEvent),
    Removed(RemovedEvent),
    /// Every block of this `(worker_id, dp_rank)` is gone.
    Cleared,
}

/// A run of blocks stored under `parent_hash` (`None` = at the root).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredEvent {
    /// The `block_hash` of the block before `blocks[0]`.
    #[serde(default)]
    pub parent_hash: Option<u64>,
    #[serde(default)]
    pub start_position: Option<u32>,
    pub blocks: Vec<StoredBlock>,
}

/// One stored block: `block_hash` is the worker's (sequence) identity of the block,
/// `tokens_hash` the local hash the index is walked with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredBlock {
    pub block_hash: u64,
    pub tokens_hash: u64,
    #[serde(default)]
    pub mm_extra_info: Option<MmExtraInfo>,
}

/// Multimodal objects that overlap a block.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmExtraInfo {
    pub mm_objects: Vec<MmObject>,
}

/// One multimodal object: its hash and the token ranges it covers.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct MmObject {
    pub mm_hash: u64,
    #[serde(default)]
    pub offsets: Vec<(u64, u64)>,
}

/// Blocks evicted, by `block_hash`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RemovedEvent {
    pub block_hashes: Vec<u64>,
}

fn be_u64(frame: usize, b: &[u8]) -> Result<u64, DecodeError> {
    let arr: [u8; 8] = b.try_into().map_err(|_| DecodeError::FrameLength { frame, len: b.len() })?;
    Ok(u64::from_be_bytes(arr))
}

/// Decodes frame 3 of an event-plane message: version byte 1, u32 BE length, envelope.
pub fn decode_envelope(frame3: &[u8]) -> Result<EventEnvelope<'_>, DecodeError> {
    if frame3.len() < 5 {
        return Err(DecodeError::ShortHeader(frame3.len()));
    }
    if frame3[0] != 1 {
        return Err(DecodeError::Version(frame3[0]));
    }
    let declared = u32::from_be_bytes([frame3[1], frame3[2], frame3[3], frame3[4]]);
    let body = &frame3[5..];
    if body.len() != declared as usize {
        return Err(DecodeError::Length { declared, actual: body.len() });
    }
    envelope(body)
}

/// The msgpack `EventEnvelope` itself.
fn envelope(body: &[u8]) -> Result<EventEnvelope<'_>, DecodeError> {
    rmp_serde::from_slice(body).map_err(|e| DecodeError::Msgpack(e.to_string()))
}

/// Decodes a NATS event-plane message: `body` is the bare msgpack envelope (no frame
/// header), `subject` is `<subject prefix>.<topic>`. The result looks like a ZMQ message's:
/// `topic` is the subject's last token (checked against the envelope's `topic`) and the
/// publisher id and sequence, which NATS does not carry outside the body, are the envelope's.
pub fn decode_nats_message<'a>(subject: &'a [u8], body: &'a [u8]) -> Result<EventMessage<'a>, DecodeError> {
    let envelope = envelope(body)?;
    let topic = subject.rsplit(|&b| b == b'.').next().unwrap_or(subject);
    if topic != envelope.topic.as_bytes() {
        return Err(DecodeError::Subject {
            subject: String::from_utf8_lossy(subject).into_owned(),
            topic: envelope.topic.clone(),
        });
    }
    Ok(EventMessage { topic, publisher_id: envelope.publisher_id, sequence: envelope.sequence, envelope })
}

/// Decodes a whole 4-frame event-plane message (topic, publisher id, sequence, envelope).
pub fn decode_message<'a>(frames: &[&'a [u8]]) -> Result<EventMessage<'a>, DecodeError> {
    let &[topic, pubid, seq, body] = frames else {
        return Err(DecodeError::FrameCount(frames.len()));
    };
    Ok(EventMessage {
        topic,
        publisher_id: be_u64(1, pubid)?,
        sequence: be_u64(2, seq)?,
        envelope: decode_envelope(body)?,
    })
}

/// A worker rank's `kv_metrics` report (docs/dynamo/kv-routing.md §8).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KvMetrics {
    pub worker_id: u64,
    #[serde(default)]
    pub dp_rank: u32,
    /// KV blocks in use; `None` if the worker left it out.
    #[serde(default)]
    pub kv_used_blocks: Option<u64>,
    /// Blocks of the sequences it is decoding, if it reports them (the mocker does not).
    #[serde(default)]
    pub active_decode_blocks: Option<u64>,
    /// Prompt tokens waiting for or in prefill, if it reports them (the mocker does not).
    #[serde(default)]
    pub active_prefill_tokens: Option<u64>,
}

/// Decodes a `kv_metrics` payload (a msgpack map; other keys are ignored).
pub fn decode_kv_metrics(payload: &[u8]) -> Result<KvMetrics, DecodeError> {
    rmp_serde::from_slice(payload).map_err(|e| DecodeError::Msgpack(e.to_string()))
}

/// Decodes a `kv-events` payload: a msgpack array of [`RouterEvent`].
pub fn decode_kv_events(payload: &[u8]) -> Result<Vec<RouterEvent>, DecodeError> {
    rmp_serde::from_slice(payload).map_err(|e| DecodeError::Msgpack(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cleared_as_bare_string_and_as_map() {
        #[derive(Serialize)]
        struct Ev<'a> {
            event_id: u8,
            data: &'a str,
        }
        #[derive(Serialize)]
        struct Re<'a> {
            worker_id: u64,
            event: Ev<'a>,
        }
        let bytes =
            rmp_serde::to_vec_named(&[Re { worker_id: 7, event: Ev { event_id: 3, data: "cleared" } }]).unwrap();
        let evs = decode_kv_events(&bytes).unwrap();
        assert_eq!(evs[0].event.data, KvCacheEventData::Cleared);
        assert_eq!(evs[0].event.dp_rank, 0);
        assert_eq!(evs[0].storage_tier, "device");
        assert_eq!(evs[0].residency_domain, None);
    }

    #[test]
    fn frame_errors() {
        assert_eq!(decode_envelope(&[1, 0]).unwrap_err(), DecodeError::ShortHeader(2));
        assert_eq!(decode_envelope(&[2, 0, 0, 0, 0]).unwrap_err(), DecodeError::Version(2));
        assert_eq!(
            decode_envelope(&[1, 0, 0, 0, 3, 0x80]).unwrap_err(),
            DecodeError::Length { declared: 3, actual: 1 }
        );
        let f: &[u8] = &[];
        assert_eq!(decode_message(&[f, f]).unwrap_err(), DecodeError::FrameCount(2));
        assert_eq!(
            decode_message(&[f, &[0; 7], &[0; 8], f]).unwrap_err(),
            DecodeError::FrameLength { frame: 1, len: 7 }
        );
    }

    /// The captured NATS messages of a real 1.6.1 mocker (tests/data/nats/messages.json):
    /// every one decodes as an envelope whose topic ends its subject, and the two
    /// `kv-events` bodies decode into the events the worker stored.
    #[test]
    fn captured_nats_messages() {
        let text = include_str!("../../tests/data/nats/messages.json");
        let msgs: Vec<serde_json::Value> = serde_json::from_str(text).unwrap();
        let unhex = |s: &str| -> Vec<u8> {
            s.as_bytes()
                .chunks(2)
                .map(|p| crate::util::hex_digit(p[0]).unwrap() << 4 | crate::util::hex_digit(p[1]).unwrap())
                .collect()
        };
        let mut kv = Vec::new();
        for m in &msgs {
            let subject = m["subject"].as_str().unwrap();
            let body = unhex(m["payload_hex"].as_str().unwrap());
            let msg = decode_nats_message(subject.as_bytes(), &body).unwrap();
            assert!(subject.starts_with("namespace.dynamo.component.backend.endpoint.generate."));
            assert_eq!(msg.topic, msg.envelope.topic.as_bytes());
            assert_eq!(msg.publisher_id, msg.envelope.publisher_id);
            if msg.topic == KV_EVENTS_TOPIC.as_bytes() {
                kv.push((msg.sequence, decode_kv_events(msg.envelope.payload).unwrap()));
            }
        }
        assert_eq!(kv.len(), 2);
        let worker = 17934233584095408132;
        let stored = |evs: &[RouterEvent]| -> Vec<(u64, u64)> {
            assert_eq!(evs.len(), 1);
            assert_eq!((evs[0].worker_id, evs[0].event.dp_rank), (worker, 0));
            assert_eq!(evs[0].residency_domain.as_deref(), Some("worker"));
            let KvCacheEventData::Stored(s) = &evs[0].event.data else { panic!("not stored: {:?}", evs[0]) };
            assert_eq!(s.parent_hash, None);
            s.blocks.iter().map(|b| (b.block_hash, b.tokens_hash)).collect()
        };
        assert_eq!((kv[0].0, kv[0].1[0].event.event_id), (0, 1));
        assert_eq!(
            stored(&kv[0].1),
            [(10823191264391160519, 10823191264391160519), (4102179227871607950, 1219978239041041138)]
        );
        assert_eq!((kv[1].0, kv[1].1[0].event.event_id), (1, 2));
        let second = stored(&kv[1].1);
        assert_eq!(second.len(), 6);
        assert_eq!(second[0], (13738416445109219417, 13738416445109219417));
        assert_eq!(second[5], (13096970395958926655, 16171681741107564338));

        // The same body under another topic's subject, and a body that is not msgpack.
        let body = unhex(msgs[1]["payload_hex"].as_str().unwrap());
        assert!(matches!(
            decode_nats_message(b"namespace.dynamo.component.backend.endpoint.generate.kv_metrics", &body),
            Err(DecodeError::Subject { .. })
        ));
        assert!(matches!(decode_nats_message(b"a.kv-events", b"\xc1"), Err(DecodeError::Msgpack(_))));
    }
}
