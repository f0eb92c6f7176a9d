//! The event-ingest thread against a real libzmq PUB socket (Debian `python3-zmq`) sending a
//! captured Dynamo 1.6.1 `kv-events` message (raw bytes as a mocker published them): subscription, decoding, the shard replica
//! seeing the worker's blocks, and a vanished worker's blocks purged.

mod common;

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use common::zmq_pub::publish;
use serde_json::Value;
use switchyard::ingest::{Ingest, Publishers};
use switchyard::router::kv::index::Owner;
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
    ingest.update(Publishers { endpoints: [endpoint].into(), workers: workers.clone(), ..Default::default() });
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
    ingest.update(Publishers { endpoints: BTreeSet::new(), workers: BTreeSet::new(), ..Default::default() });
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

/// Workers on `--event-plane nats`: their `kv-events` and `kv_metrics` channels are NATS
/// subjects on a real nats-server; events and usage reports reach the replica the same way.
#[test]
fn events_and_usage_reports_over_nats_reach_the_replica() {
    use common::kv_msg::{envelope, stored, W};
    use common::nats::{NatsServer, Publisher as NatsPub};
    let server = NatsServer::start();
    let prefix = "namespace.dynamo.component.backend.endpoint.generate";
    let (events, metrics) = (format!("{prefix}.kv-events"), format!("{prefix}.kv_metrics"));
    let (feed, mut replicas) = channel(1, 1024);
    let mut replica = replicas.pop().unwrap();
    let ingest = Ingest::start_with(
        feed,
        switchyard::ingest::IngestOptions {
            nats_url: server.url(),
            nats_tls: Default::default(),
            upstream: None,
            approximate: None,
            predicted: None,
            sync: None,
            router_id: 1,
        },
    )
    .unwrap();
    ingest.update(Publishers {
        nats_subjects: [events.clone(), metrics.clone()].into(),
        workers: [W.worker_id].into(),
        ..Default::default()
    });
    let mut publisher = NatsPub::connect(server.port()).unwrap();
    #[derive(serde::Serialize)]
    struct Usage {
        worker_id: u64,
        dp_rank: u32,
        active_decode_blocks: Option<u64>,
        active_prefill_tokens: Option<u64>,
        kv_used_blocks: u64,
    }
    let usage = Usage {
        worker_id: W.worker_id,
        dp_rank: 0,
        active_decode_blocks: None,
        active_prefill_tokens: None,
        kv_used_blocks: 25,
    };
    let t0 = Instant::now();
    let mut seq = 0;
    loop {
        // Published until seen: the subscription may not be in place yet.
        publisher.publish(&events, &envelope("kv-events", &[stored(1, None, 11), stored(2, Some(11), 22)], seq));
        publisher.publish(&metrics, &envelope("kv_metrics", &usage, seq));
        publisher.flush().unwrap();
        seq += 1;
        std::thread::sleep(Duration::from_millis(20));
        replica.drain(usize::MAX);
        if replica.find_matches(&[11, 22]) == [(W, 2)] && replica.used_blocks(W) == Some(25) {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "NATS messages never reached the replica: matches {:?}, usage {:?}, ingest {:?}",
            replica.find_matches(&[11, 22]),
            replica.used_blocks(W),
            ingest.stats.counts()
        );
    }
    // A message whose subject and envelope topic disagree is malformed, not applied.
    publisher.publish(&events, &envelope("kv_metrics", &usage, seq));
    publisher.flush().unwrap();
    let t0 = Instant::now();
    while ingest.stats.counts().malformed == 0 {
        assert!(t0.elapsed() < Duration::from_secs(5), "a mislabelled message was not counted as malformed");
        std::thread::sleep(Duration::from_millis(20));
    }
    drop(server);
}

/// Two shards' kv routers share their bookings through the ingest thread: a long prefill
/// booked on one shard's choice steers the other shard away from that worker, and its
/// release lets the other shard use the worker again.
#[test]
fn a_booking_on_one_shard_steers_the_other() {
    use switchyard::registry::CardLimits;
    use switchyard::router::kv::cost::CostParams;
    use switchyard::router::kv::select::{BusyThresholds, KvSelector};
    let (ingest, mut installs) = Ingest::start_for(2, None, None).unwrap();
    let b = KvSelector::new(CostParams::default(), BusyThresholds::default());
    let a = KvSelector::new(CostParams::default(), BusyThresholds::default());
    b.install(installs.pop().unwrap());
    a.install(installs.pop().unwrap());
    ingest.update(Publishers { workers: [1, 2].into(), ..Default::default() });
    let workers = [common::kv_worker(1), common::kv_worker(2)];
    let limits = CardLimits { kv_cache_block_size: 16, ..Default::default() };
    let mut n = 1u64;
    let mut rand = move || {
        n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        n >> 11
    };
    let long: Vec<u32> = (0..4000).collect();
    let (chosen, booking) = a.choose(&workers, &[0, 1], &long, &limits, 1, &mut rand).unwrap().unwrap();
    // Another prompt on the other shard: idle workers tie (random pick); once the booking
    // arrives, the other worker is cheaper every time.
    let short: Vec<u32> = (50_000..50_200).collect();
    let mut b_picks = |count: usize| -> Vec<usize> {
        (0..count)
            .map(|_| b.choose(&workers, &[0, 1], &short, &limits, 2, &mut rand).unwrap().unwrap().0.index)
            .collect()
    };
    let t0 = Instant::now();
    while !b_picks(20).iter().all(|&i| i != chosen.index) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the other shard never saw the booking");
        std::thread::sleep(Duration::from_millis(5));
    }
    drop(booking);
    let t0 = Instant::now();
    while !b_picks(40).contains(&chosen.index) {
        assert!(t0.elapsed() < Duration::from_secs(5), "the other shard never saw the booking released");
        std::thread::sleep(Duration::from_millis(5));
    }
}
