//! Decoding of the `kv-events` topic (spec §3.1, §4.1): the ZMQ frame-3 header, the msgpack
//! `EventEnvelope`, and its payload — a batch of `RouterEvent`s carrying `stored`, `removed`
//! and `cleared` KV-cache events — into plain Rust types. No socket work lives here.
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
    rmp_serde::from_slice(body).map_err(|e| DecodeError::Msgpack(e.to_string()))
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

/// A worker rank's `kv_metrics` report (spec: KV routing §8).
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
pub struct KvMetrics {
    pub worker_id: u64,
    #[serde(default)]
    pub dp_rank: u32,
    /// KV blocks in use; `None` if the worker left it out.
    #[serde(default)]
    pub kv_used_blocks: Option<u64>,
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
}
