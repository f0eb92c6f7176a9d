//! KV event-plane messages built in tests: worker events and the msgpack envelope, as ZMQ
//! frames or as a NATS body.

use serde::Serialize;
use switchyard::plane::kv_events::{KvCacheEvent, KvCacheEventData, RouterEvent, StoredBlock, StoredEvent};
use switchyard::router::kv::index::Owner;

/// The worker (rank 0) the messages come from.
pub const W: Owner = Owner { worker_id: 0x30f2_aa86_570d_7772, dp_rank: 0 };

/// A stored event of one block `hash` under `parent`, from [`W`].
pub fn stored(id: u64, parent: Option<u64>, hash: u64) -> RouterEvent {
    RouterEvent {
        worker_id: W.worker_id,
        storage_tier: "device".into(),
        residency_domain: Some("worker".into()),
        event: KvCacheEvent {
            event_id: id,
            dp_rank: W.dp_rank,
            data: KvCacheEventData::Stored(StoredEvent {
                parent_hash: parent,
                start_position: None,
                blocks: vec![StoredBlock { block_hash: hash, tokens_hash: hash, mm_extra_info: None }],
            }),
        },
    }
}

/// The msgpack envelope of a `topic` message whose payload is `payload` serialized (named
/// maps): the body of a NATS message, or ZMQ frame 3 without its 5-byte header.
pub fn envelope<T: Serialize + ?Sized>(topic: &str, payload: &T, sequence: u64) -> Vec<u8> {
    let payload = rmp_serde::to_vec_named(payload).unwrap();
    switchyard::ingest::sync::encode_envelope(topic, 77, sequence, 0, &payload)
}

/// The four ZMQ frames (hex, comma-joined) of a `kv-events` message carrying `events`.
pub fn zmq_message(events: &[RouterEvent], sequence: u64) -> String {
    zmq_topic_message("kv-events", events, sequence)
}

/// The four ZMQ frames (hex, comma-joined) of a `topic` message whose payload is `payload`.
pub fn zmq_topic_message<T: Serialize + ?Sized>(topic: &str, payload: &T, sequence: u64) -> String {
    let body = envelope(topic, payload, sequence);
    let mut frame3 = vec![1u8];
    frame3.extend_from_slice(&(body.len() as u32).to_be_bytes());
    frame3.extend_from_slice(&body);
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    [hex(topic.as_bytes()), hex(&77u64.to_be_bytes()), hex(&sequence.to_be_bytes()), hex(&frame3)].join(",")
}
