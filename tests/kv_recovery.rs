//! Recovery of lost KV events through a worker's `worker_kv_query_source_*` endpoint, over
//! real sockets: a real libzmq PUB (Debian `python3-zmq`) publishes a worker's events with a
//! hole in their ids, and a request-plane worker speaking the 1.6.1 framing answers the
//! ingest thread's queries (a tree dump when the source is discovered, then the missing
//! range). The shard replica must end up with every block. (The same exchange against real
//! `dynamo.mocker` workers runs in scripts/interop_kv.sh.)

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use common::kv_msg::{stored, zmq_message, W};
use common::zmq_pub::publish;
use serde::Serialize;
use serde_json::Value;
use switchyard::ingest::recovery::Target;
use switchyard::ingest::{Ingest, Publishers};
use switchyard::plane::frame::{encode_ack, Ack, RequestFrameDecoder};
use switchyard::plane::kv_events::RouterEvent;
use switchyard::plane::payload::{
    CallHomeHandshake, Codec, ControlMessage, RequestControlMessage, StreamPrologue, StreamType,
};
use switchyard::plane::stream::{
    encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue,
};
use switchyard::plane::Decoded;
use switchyard::router::kv::replica::channel;

#[derive(Serialize)]
enum Answer {
    Events { events: Vec<RouterEvent>, last_event_id: u64 },
    TreeDump { events: Vec<RouterEvent>, last_event_id: u64, reset_scope: &'static str },
}

/// A worker's recovery endpoint: answers each query with `answer(request body)` and records
/// the request bodies.
fn recovery_worker(answer: fn(&Value) -> Answer) -> (String, Arc<Mutex<Vec<Value>>>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let seen = Arc::new(Mutex::new(Vec::new()));
    let seen2 = seen.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { return };
            let mut buf = BytesMut::new();
            let frame = loop {
                if let Decoded::Frame(f) = RequestFrameDecoder::default().decode(&mut buf).unwrap() {
                    break f;
                }
                let mut chunk = [0u8; 4096];
                let n = conn.read(&mut chunk).unwrap();
                assert!(n > 0, "the frontend closed before a whole request frame");
                buf.extend_from_slice(&chunk[..n]);
            };
            assert!(frame.path.ends_with("/worker_kv_query_source_4d"), "path {}", frame.path);
            let two = frame.two_part(1 << 20).unwrap();
            let control = RequestControlMessage::from_json(two.header).unwrap();
            let body: Value = rmp_serde::from_slice(two.body).unwrap();
            let mut ack = Vec::new();
            encode_ack(&mut ack, &Ack::Accepted);
            conn.write_all(&ack).unwrap();
            let info = control.connection_info.tcp_info().unwrap();
            let mut back = TcpStream::connect(&info.address).unwrap();
            let mut out = Vec::new();
            encode_handshake(&mut out, &CallHomeHandshake { subject: info.subject, stream_type: StreamType::Response })
                .unwrap();
            encode_prologue(&mut out, &StreamPrologue { error: None }).unwrap();
            encode_item(&mut out, Codec::Msgpack, &answer(&body)).unwrap();
            encode_complete_final(&mut out, Codec::Msgpack).unwrap();
            encode_control(&mut out, ControlMessage::Sentinel);
            back.write_all(&out).unwrap();
            seen2.lock().unwrap().push(body);
        }
    });
    (addr, seen)
}

#[test]
fn a_new_source_is_restored_in_full_and_a_gap_is_filled_from_the_worker() {
    // The worker holds the chain 11 → 22 → 33 → 44 (event ids 1..4); the event plane only
    // ever delivers events 1 and 4.
    let (a, b, c, d) = (11, 22, 33, 44);
    let publisher = publish(&[zmq_message(&[stored(1, None, a)], 0), zmq_message(&[stored(4, Some(c), d)], 1)]);
    let (addr, seen) = recovery_worker(|req| {
        if req["start_event_id"].is_null() {
            // The tree as of event 1.
            Answer::TreeDump { events: vec![stored(1, None, 11)], last_event_id: 1, reset_scope: "all" }
        } else {
            // 1.6.1 answers with everything from the start through its newest.
            let evs = vec![stored(2, Some(11), 22), stored(3, Some(22), 33), stored(4, Some(33), 44)];
            Answer::Events { events: evs, last_event_id: 4 }
        }
    });
    let (feed, mut replicas) = channel(1, 1024);
    let mut replica = replicas.pop().unwrap();
    let ingest = Ingest::start(feed).unwrap();
    let target = Target::Tcp { addr, path: format!("{:x}/dynamo/backend/worker_kv_query_source_4d", W.worker_id) };
    ingest.update(Publishers {
        endpoints: [publisher.endpoint()].into(),
        workers: [W.worker_id].into(),
        sources: [(W, target)].into(),
        ..Default::default()
    });
    let chain = [a, b, c, d];
    let t0 = Instant::now();
    loop {
        replica.drain(usize::MAX);
        if replica.find_matches(&chain) == [(W, 4)] {
            break;
        }
        assert!(
            t0.elapsed() < Duration::from_secs(10),
            "the chain never became whole: matches {:?}, ingest {:?}, queries {:?}",
            replica.find_matches(&chain),
            ingest.stats.counts(),
            seen.lock().unwrap()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let queries = seen.lock().unwrap().clone();
    let full = serde_json::json!({"worker_id": W.worker_id, "dp_rank": 0, "start_event_id": null,
                                  "end_event_id": null, "supports_tree_dump_failed": true});
    assert_eq!(queries[0], full, "first a full restore, as 1.6.1 sends on discovery");
    assert_eq!((queries[1]["start_event_id"].as_u64(), queries[1]["end_event_id"].as_u64()), (Some(2), Some(3)));
    // The replica can see the recovered events before the ingest thread counts them: await it.
    let t0 = Instant::now();
    let counts = loop {
        let counts = ingest.stats.counts();
        if (counts.gaps >= 1 && counts.recovered >= 2 && counts.restores >= 1) || t0.elapsed() > Duration::from_secs(5)
        {
            break counts;
        }
        std::thread::sleep(Duration::from_millis(10));
    };
    assert!(counts.gaps >= 1 && counts.recovered >= 2 && counts.restores >= 1, "{counts:?}");
    assert_eq!(counts.recovery_failures, 0);
    assert_eq!(counts.malformed, 0);
}
