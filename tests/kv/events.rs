//! KV event decoding against captured 1.6.1 traffic (tests/data/kv/), and the captured
//! event streams replayed into the index.

use std::collections::BTreeMap;

use serde_json::Value;
use switchyard::plane::kv_events::{decode_envelope, decode_kv_events, decode_message, RouterEvent};
use switchyard::router::kv::hash::{local_block_hashes, BlockHashOptions};
use switchyard::router::kv::{IndexOp, KvIndex, Owner};

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

fn check_envelope(payload: &[u8], env: &Value) -> Vec<RouterEvent> {
    assert_eq!(payload.len() as u64, env["payload_len"].as_u64().unwrap());
    let events = decode_kv_events(payload).unwrap();
    assert_eq!(serde_json::to_value(&events).unwrap(), env["payload_decoded"]);
    events
}

#[test]
fn zmq_frame_samples() {
    let text = std::fs::read_to_string("tests/data/kv/kv-zmq-frames-sample.json").unwrap();
    let samples: BTreeMap<String, Value> = serde_json::from_str(&text).unwrap();
    assert_eq!(samples.len(), 3);
    for (topic, s) in &samples {
        let f: Vec<Vec<u8>> =
            ["frame0_topic_hex", "frame1_publisher_id_be_hex", "frame2_sequence_be_hex", "frame3_hex"]
                .iter()
                .map(|k| unhex(s[*k].as_str().unwrap()))
                .collect();
        let frames: Vec<&[u8]> = f.iter().map(Vec::as_slice).collect();
        let msg = decode_message(&frames).unwrap();
        let env = &s["decoded_envelope"];
        assert_eq!(msg.topic, topic.as_bytes());
        assert_eq!(msg.publisher_id, env["publisher_id"].as_u64().unwrap());
        assert_eq!(msg.sequence, env["sequence"].as_u64().unwrap());
        assert_eq!(msg.envelope.publisher_id, msg.publisher_id);
        assert_eq!(msg.envelope.sequence, msg.sequence);
        assert_eq!(msg.envelope.published_at, env["published_at"].as_u64().unwrap());
        assert_eq!(msg.envelope.topic, *topic);
        assert_eq!(msg.envelope.payload.len() as u64, env["payload_len"].as_u64().unwrap());
        if topic == "kv-events" {
            check_envelope(msg.envelope.payload, env);
        }
    }
}

/// Every captured kv-events message: `(run, events)`, decoded from the raw frame 3 where the
/// capture has it, else from the decoded JSON re-encoded as compact msgpack.
fn captured() -> Vec<(String, Vec<RouterEvent>)> {
    let text = std::fs::read_to_string("tests/data/kv/kv-events-decoded.jsonl").unwrap();
    let mut out = Vec::new();
    let mut raw = 0;
    for line in text.lines() {
        let m: Value = serde_json::from_str(line).unwrap();
        let env = &m["envelope"];
        let events = if let Some(hex) = m.get("frame3_hex").and_then(Value::as_str) {
            raw += 1;
            let frame = unhex(hex);
            assert_eq!(unhex(m["frame3_header_hex"].as_str().unwrap()), frame[..5]);
            let e = decode_envelope(&frame).unwrap();
            assert_eq!(e.publisher_id, env["publisher_id"].as_u64().unwrap());
            assert_eq!(e.sequence, env["sequence"].as_u64().unwrap());
            assert_eq!(e.topic, "kv-events");
            check_envelope(e.payload, env)
        } else {
            let bytes = rmp_serde::to_vec_named(&env["payload_decoded"]).unwrap();
            let events = decode_kv_events(&bytes).unwrap();
            assert_eq!(serde_json::to_value(&events).unwrap(), env["payload_decoded"]);
            events
        };
        out.push((m["run"].as_str().unwrap().to_string(), events));
    }
    assert_eq!(out.len(), 111);
    assert_eq!(raw, 94);
    out
}

#[test]
fn captured_kv_events_decode_and_replay() {
    let mut runs: BTreeMap<String, KvIndex> = BTreeMap::new();
    let mut last_id: BTreeMap<(u64, u32), u64> = BTreeMap::new();
    let mut kinds = [0usize; 3];
    let mut gaps = Vec::new();
    for (run, events) in captured() {
        let ix = runs.entry(run).or_default();
        for ev in &events {
            // event ids rise per (worker, dp_rank) stream from 1; the capture missed two
            let key = (ev.worker_id, ev.event.dp_rank);
            let prev = last_id.insert(key, ev.event.event_id).unwrap_or(0);
            assert!(ev.event.event_id > prev, "{key:?}");
            if ev.event.event_id != prev + 1 {
                gaps.push((key, prev + 1));
            }
            let op = IndexOp::from_event(ev);
            kinds[match op {
                IndexOp::Stored { .. } => 0,
                IndexOp::Removed { .. } => 1,
                _ => 2,
            }] += 1;
            ix.apply(&op);
        }
    }
    assert_eq!(kinds, [93, 21, 0]);
    assert_eq!(gaps, [((6784793825022420204, 0), 1), ((9238439524412213207, 0), 35)]);
    let stats: Vec<(&str, u64, u64)> =
        runs.iter().map(|(run, ix)| (run.as_str(), ix.stats().stores_dropped, ix.stats().removes_unknown)).collect();
    // The capture missed event 1 of one mocker (its root store), so each of its 21 later
    // stores names an unknown parent and is dropped, as in Dynamo.
    assert_eq!(
        stats,
        [("run1-block64", 0, 0), ("run2-block16-64blocks-eviction", 0, 0), ("run3-block16-4096blocks", 21, 0)]
    );
    // run 1: one mocker stored the three 64-token blocks of 1000..1199
    let toks: Vec<u32> = (1000..1200).collect();
    let q = local_block_hashes(&toks, 64, &BlockHashOptions::default());
    let m = runs["run1-block64"].find_matches(&q);
    assert_eq!(m, [(Owner { worker_id: 8547803059854482920, dp_rank: 0 }, 3)]);
}
