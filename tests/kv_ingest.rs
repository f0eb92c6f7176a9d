//! The event-ingest thread against a real libzmq PUB socket (Debian `python3-zmq`) sending a
//! captured Dynamo 1.6.1 `kv-events` message (raw bytes as a mocker published them): subscription, decoding, the shard replica
//! seeing the worker's blocks, and a vanished worker's blocks purged.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::zmq_pub::publish;
use serde_json::Value;
use switchyard::router::kv::index::Owner;
use switchyard::router::kv::ingest::{Ingest, Publishers};
use switchyard::router::kv::replica::channel;

/// The first captured raw kv-events message that stores a chain from the root: its owner,
/// the local hashes (`tokens_hash`) of the stored blocks, and the four frames in hex.
fn first_root_store() -> (Owner, Vec<u64>, Vec<String>) {
    let text = std::fs::read_to_string("tests/data/kv/kv-events-decoded.jsonl").unwrap();
    let m: Value = text
        .lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .find(|m| {
            let stored = &m["envelope"]["payload_decoded"][0]["event"]["data"]["stored"];
            m.get("frame3_hex").is_some() && stored.is_object() && stored["parent_hash"].is_null()
        })
        .expect("a captured root store with raw bytes");
    let ev = &m["envelope"]["payload_decoded"][0];
    let owner = Owner {
        worker_id: ev["worker_id"].as_u64().unwrap(),
        dp_rank: ev["event"]["dp_rank"].as_u64().unwrap_or(0) as u32,
    };
    let local = ev["event"]["data"]["stored"]["blocks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["tokens_hash"].as_u64().unwrap())
        .collect();
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let frames = vec![
        hex(b"kv-events"),
        hex(&m["publisher_id_be"].as_u64().unwrap().to_be_bytes()),
        hex(&m["sequence_be"].as_u64().unwrap().to_be_bytes()),
        m["frame3_hex"].as_str().unwrap().to_string(),
    ];
    (owner, local, frames)
}

#[test]
fn captured_events_reach_the_shard_replica_and_leave_with_the_worker() {
    let (owner, local, frames) = first_root_store();
    let worker = owner.worker_id;
    assert!(!local.is_empty());
    let mut publisher = publish(&[frames.join(",")]);
    let (feed, mut replicas) = channel(1, 1024);
    let mut replica = replicas.pop().unwrap();
    let ingest = Ingest::start(feed).unwrap();
    let endpoint = publisher.endpoint();
    let workers: BTreeSet<u64> = [worker].into();
    ingest.update(Publishers {
        endpoints: [endpoint].into(),
        workers: workers.clone(),
        load_endpoints: BTreeSet::new(),
        sources: Default::default(),
    });
    let t0 = Instant::now();
    loop {
        replica.drain(usize::MAX);
        if replica.find_matches(&local) == [(owner, local.len() as u32)] {
            break;
        }
        let st = &ingest.stats;
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the captured store never reached the replica: matches {:?}, connected {}, events {}, malformed {}",
            replica.find_matches(&local),
            st.connected.load(std::sync::atomic::Ordering::Relaxed),
            st.events.load(std::sync::atomic::Ordering::Relaxed),
            st.malformed.load(std::sync::atomic::Ordering::Relaxed)
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(ingest.stats.events.load(std::sync::atomic::Ordering::Relaxed) >= 1);
    assert_eq!(ingest.stats.malformed.load(std::sync::atomic::Ordering::Relaxed), 0);
    // The worker goes (publisher stopped, discovery no longer lists it): its blocks go too.
    let _ = publisher.0.kill();
    let _ = publisher.0.wait();
    ingest.update(Publishers {
        endpoints: BTreeSet::new(),
        workers: BTreeSet::new(),
        load_endpoints: BTreeSet::new(),
        sources: Default::default(),
    });
    let t0 = Instant::now();
    loop {
        replica.drain(usize::MAX);
        if replica.find_matches(&local).is_empty() {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the removed worker's blocks stayed");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(replica.index().indexed_blocks(), 0);
}
