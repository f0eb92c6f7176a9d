//! `active_sequences_events` (docs/dynamo/kv-routing.md §7.3, §7.8): the captured Dynamo 1.6.1 bytes
//! decoded and re-encoded byte for byte; a worker's `MarkPrefillCompleted`, sent by a real
//! libzmq PUB socket (Debian `python3-zmq`), ending the matching booking's prefill; this
//! process's bookings published on its own PUB socket and received by a real libzmq SUB.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use common::zmq_pub::publish;
use serde_json::Value;
use switchyard::ingest::peers::SyncOut;
use switchyard::ingest::sync::{decode_active, encode_active, encode_message, ActiveData, OutData, OutEvent};
use switchyard::ingest::zmq_pub::Pub;
use switchyard::ingest::{Ingest, IngestOptions, Publishers};
use switchyard::plane::kv_events::decode_message;
use switchyard::registry::CardLimits;
use switchyard::router::kv::cost::CostParams;
use switchyard::router::kv::select::{BusyThresholds, KvSelector};
use switchyard::util::{format_uuid, parse_uuid};

fn captured() -> Vec<Value> {
    let text = std::fs::read_to_string("tests/data/kv/kv-active-sequences-events.jsonl").unwrap();
    text.lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn unhex(h: &str) -> Vec<u8> {
    (0..h.len()).step_by(2).map(|i| u8::from_str_radix(&h[i..i + 2], 16).unwrap()).collect()
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The event of a captured message as ours: its request id, worker and data.
fn out_event(ev: &Value) -> OutEvent {
    let data = match &ev["data"] {
        Value::String(s) if s == "MarkPrefillCompleted" => OutData::PrefillDone,
        Value::String(s) if s == "Free" => OutData::Free,
        d => {
            let add = &d["AddRequest"];
            OutData::Add {
                token_sequence: add["token_sequence"].as_array().unwrap().iter().map(|h| h.as_u64().unwrap()).collect(),
                prefill_tokens: add["prefill_load_hint"]["initial_effective_prefill_tokens"].as_u64().unwrap(),
            }
        }
    };
    OutEvent {
        request_id: parse_uuid(ev["request_id"].as_str().unwrap()).unwrap(),
        worker: switchyard::router::kv::index::Owner {
            worker_id: ev["worker"]["worker_id"].as_u64().unwrap(),
            dp_rank: ev["worker"]["dp_rank"].as_u64().unwrap() as u32,
        },
        data,
    }
}

#[test]
fn captured_messages_decode_and_a_routers_events_encode_byte_for_byte() {
    let (mut decoded, mut exact, mut adds) = (0, 0, 0);
    for m in captured() {
        let env = &m["envelope"];
        let ev = &env["payload_decoded"]["events"][0];
        let router_id = ev["router_id"].as_u64().unwrap();
        let ours = out_event(ev);
        let payload = encode_active(std::slice::from_ref(&ours), router_id);
        // Our decoder reads our encoding back.
        let back = decode_active(&payload).unwrap();
        assert_eq!(
            (back.len(), back[0].router_id, back[0].request_id.as_str()),
            (1, router_id, ev["request_id"].as_str().unwrap())
        );
        let Some(f3) = m["frame3_hex"].as_str() else {
            // AddRequest lines carry no raw bytes: the encoding has the captured length.
            assert!(matches!(back[0].data, ActiveData::AddRequest(_)));
            assert_eq!(payload.len() as u64, env["payload_len"].as_u64().unwrap());
            adds += 1;
            continue;
        };
        let frames = [
            b"active_sequences_events".to_vec(),
            m["publisher_id_be"].as_u64().unwrap().to_be_bytes().to_vec(),
            m["sequence_be"].as_u64().unwrap().to_be_bytes().to_vec(),
            unhex(f3),
        ];
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let msg = decode_message(&refs).unwrap();
        let events = decode_active(msg.envelope.payload).unwrap();
        assert_eq!(events.len(), 1);
        let e = &events[0];
        assert_eq!(e.request_id, ev["request_id"].as_str().unwrap());
        assert_eq!(e.router_id, router_id);
        assert_eq!(e.worker.worker_id, ev["worker"]["worker_id"].as_u64().unwrap());
        assert_eq!(
            matches!(e.data, ActiveData::MarkPrefillCompleted),
            ev["data"] == "MarkPrefillCompleted",
            "{}",
            ev["data"]
        );
        decoded += 1;
        // Every captured message, worker's or router's, is what our encoder writes.
        let again = encode_message(
            "active_sequences_events",
            env["publisher_id"].as_u64().unwrap(),
            env["sequence"].as_u64().unwrap(),
            env["published_at"].as_u64().unwrap(),
            &payload,
        );
        assert_eq!(hex(&again[3]), f3, "message {} of publisher {}", env["sequence"], env["publisher_id"]);
        assert_eq!(again[..3], frames[..3]);
        exact += 1;
    }
    assert_eq!((decoded, exact, adds), (49, 49, 3));
}

fn wait(what: &str, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(10), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The first captured worker mark (raw bytes): its worker and request id.
const MARK_WORKER: u64 = 8547803059854482920;
const MARK_REQUEST: &str = "81f7d738-ad1a-4287-9832-44f386ce5074";

#[test]
fn a_workers_prefill_mark_ends_that_bookings_prefill_only() {
    let (ingest, mut installs) = Ingest::start_for(1, None, None).unwrap();
    let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
    sel.install(installs.pop().unwrap());
    ingest.update(Publishers { workers: [MARK_WORKER].into(), ..Default::default() });
    let workers = [common::kv_worker(MARK_WORKER)];
    let limits = CardLimits { kv_cache_block_size: 64, ..Default::default() };
    let prompt: Vec<u32> = (1000..1200).collect();
    let marked = parse_uuid(MARK_REQUEST).unwrap();
    let (_, _b1) = sel.choose(&workers, &[0], &prompt, &limits, marked, || 1).unwrap().unwrap();
    let other = parse_uuid("0dbe7b42-0000-4000-8000-000000000001").unwrap();
    let (_, _b2) = sel.choose(&workers, &[0], &prompt, &limits, other, || 1).unwrap().unwrap();
    let load = || sel.stats().active.get(&(MARK_WORKER, 0)).copied().unwrap_or_default();
    assert_eq!((load().requests, load().prefill_tokens), (2, 400));
    // The worker's publisher (the captured message, as the mocker sent it).
    let m = captured()
        .into_iter()
        .find(|m| m["envelope"]["payload_decoded"]["events"][0]["request_id"] == MARK_REQUEST)
        .unwrap();
    let frames = [
        hex(b"active_sequences_events"),
        hex(&m["publisher_id_be"].as_u64().unwrap().to_be_bytes()),
        hex(&0u64.to_be_bytes()),
        m["frame3_hex"].as_str().unwrap().to_string(),
    ];
    let publisher = publish(&[frames.join(",")]);
    ingest.update(Publishers {
        workers: [MARK_WORKER].into(),
        active_endpoints: [(publisher.endpoint(), 1)].into(),
        ..Default::default()
    });
    wait("the mark reached the booking", || load().prefill_tokens == 200);
    // Only the marked booking's prefill ended; both requests are still booked.
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!((load().requests, load().prefill_tokens), (2, 200));
    assert!(ingest.stats.counts().prefill_marks >= 1);
}

const SUBSCRIBER: &str = r#"
import sys, zmq
s = zmq.Context().socket(zmq.SUB)
s.setsockopt(zmq.SUBSCRIBE, b"active_sequences_events")
s.connect(sys.argv[1])
print("ready", flush=True)
for _ in range(int(sys.argv[2])):
    print(",".join(f.hex() for f in s.recv_multipart()), flush=True)
"#;

#[test]
fn bookings_are_published_to_a_libzmq_subscriber() {
    let socket = Pub::bind("127.0.0.1:0".parse().unwrap()).unwrap();
    let endpoint = format!("tcp://{}", socket.local_addr().unwrap());
    let (feed, mut replicas) = switchyard::router::kv::replica::channel(1, 1024);
    let (mut ups, down) = switchyard::router::kv::active::channel(1, 64).unwrap();
    let router_id = 0xfeed_0000_0000_0001;
    let opts = IngestOptions {
        upstream: Some(down),
        sync: Some((SyncOut::new(socket, 77), endpoint.clone())),
        router_id,
        ..IngestOptions::from_env()
    };
    let ingest = Ingest::start_with(feed, opts).unwrap();
    let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
    sel.install(switchyard::router::kv::select::KvInstall {
        replica: replicas.pop().unwrap(),
        ingest: ingest.stats.clone(),
        up: ups.pop(),
        share_bookings: true,
        approximate: false,
        predicted: false,
    });
    let mut sub = Command::new("/usr/bin/python3")
        .args(["-c", SUBSCRIBER, &endpoint, "3"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("python3 with zmq (apt-get install python3-zmq)");
    let mut lines = BufReader::new(sub.stdout.take().unwrap()).lines();
    assert_eq!(lines.next().unwrap().unwrap(), "ready");
    // A slow joiner misses what was sent before its subscription: give it time to subscribe.
    std::thread::sleep(Duration::from_millis(500));
    let workers = [common::kv_worker(7)];
    let limits = CardLimits { kv_cache_block_size: 16, ..Default::default() };
    let prompt: Vec<u32> = (1000..1200).collect();
    let request = parse_uuid("6730b46d-fc92-406c-82f2-81d054d421e7").unwrap();
    let (_, mut booking) = sel.choose(&workers, &[0], &prompt, &limits, request, || 1).unwrap().unwrap();
    booking.prefill_done();
    drop(booking);
    let mut got = Vec::new();
    while got.len() < 3 {
        let line = lines.next().expect("a message").unwrap();
        let frames: Vec<Vec<u8>> = line.split(',').map(unhex).collect();
        let refs: Vec<&[u8]> = frames.iter().map(Vec::as_slice).collect();
        let msg = decode_message(&refs).unwrap();
        assert_eq!(msg.publisher_id, 77);
        for e in decode_active(msg.envelope.payload).unwrap() {
            assert_eq!(
                (e.router_id, e.request_id.as_str(), e.worker.worker_id),
                (router_id, format_uuid(request).as_str(), 7)
            );
            got.push(e.data);
        }
    }
    let _ = sub.kill();
    let _ = sub.wait();
    let ActiveData::AddRequest(add) = &got[0] else { panic!("first {:?}", got[0]) };
    // 200 tokens, block 16: the 12 sequence hashes of 1000..1199 (§5.5 vector, 1.6.1's binding).
    let vectors: Value =
        serde_json::from_str(&std::fs::read_to_string("tests/data/kv/kv-hash-vectors.json").unwrap()).unwrap();
    let v = vectors.as_array().unwrap().iter().find(|v| v["case"] == "tokens 1000..1199, block 16").unwrap();
    let seq: Vec<u64> =
        v["sequence_hashes_public_xxh3_v1"].as_array().unwrap().iter().map(|h| h.as_u64().unwrap()).collect();
    assert_eq!(seq.len(), 12);
    assert_eq!(add.token_sequence.as_deref(), Some(&seq[..]));
    assert_eq!(add.prefill_tokens(), 200);
    assert!(matches!(got[1], ActiveData::MarkPrefillCompleted));
    assert!(matches!(got[2], ActiveData::Free));
    // Counted once sent: the subscriber may read the third message before the count moves.
    let t0 = Instant::now();
    while ingest.stats.counts().active_published < 3 {
        assert!(t0.elapsed() < Duration::from_secs(10), "published {}", ingest.stats.counts().active_published);
        std::thread::sleep(Duration::from_millis(10));
    }
}
