//! Busy thresholds outside `--router-mode kv`: the workers' own `kv_metrics` reports (from a
//! real libzmq publisher) leave busy workers out of round-robin, and when every worker is
//! busy the request gets the overload answer; `POST /busy_threshold` changes it at run time.
//! Session affinity on top: a session stays on its worker, and when that worker is busy,
//! `hard` mode refuses and `soft` mode moves the session.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::kv_msg::zmq_topic_message;
use common::zmq_pub::{publish, Publisher};
use common::{Client, TempDir};
use switchyard::control::{Backend, Control};
use switchyard::ingest::Ingest;
use switchyard::shard::Server;
use switchyard::worker::{MockConfig, MockWorker};

#[derive(serde::Serialize)]
struct Load {
    worker_id: u64,
    dp_rank: u32,
    active_decode_blocks: Option<u64>,
    active_prefill_tokens: Option<u64>,
    kv_used_blocks: Option<u64>,
}

/// A kv_metrics publisher repeating `(worker, kv_used_blocks)` reports, and its discovery
/// record in `store`.
fn load_publisher(store: &std::path::Path, loads: &[(u64, u64)]) -> Publisher {
    let msgs: Vec<String> = loads
        .iter()
        .map(|&(worker_id, used)| {
            let load = Load {
                worker_id,
                dp_rank: 0,
                active_decode_blocks: None,
                active_prefill_tokens: None,
                kv_used_blocks: Some(used),
            };
            zmq_topic_message("kv_metrics", &load, 0)
        })
        .collect();
    let p = publish(&msgs);
    let record = serde_json::json!({
        "type": "EventChannel",
        "scope": {"kind": "endpoint", "endpoint": {"namespace": "dynamo", "component": "backend", "name": "generate"}},
        "topic": "kv_metrics", "instance_id": 4242,
        "transport": {"kind": "Zmq", "config": {"endpoint": p.endpoint()}},
    });
    let dir = store.join("v1/event_channels");
    std::fs::create_dir_all(&dir).unwrap();
    std::fs::write(
        dir.join("namespace%2Fdynamo%2Fcomponent%2Fbackend%2Fendpoint%2Fgenerate%2Ftopic%2Fkv%5Fmetrics%2F1092"),
        record.to_string(),
    )
    .unwrap();
    p
}

fn worker(store: &std::path::Path) -> MockWorker {
    let w = MockWorker::start(MockConfig {
        model_name: "qwen3-mock".into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    })
    .unwrap();
    w.register_file(store).unwrap();
    w
}

/// A frontend as `switchyard` starts one outside kv mode with a busy threshold: the ingest
/// thread follows the load reports only.
fn frontend(store: &std::path::Path, args: &[&str]) -> (Server, Control, Ingest) {
    let mut all = vec!["--discovery-backend", "file"];
    all.extend_from_slice(args);
    let cfg = Arc::new(common::config(&all, &[]));
    assert!(cfg.kv_busy.any());
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let (ingest, installs) = Ingest::start_for(server.drivers.len(), None, None).unwrap();
    server.install_kv(installs);
    let control =
        Control::start_with_kv(&cfg, &server, Backend::File(store.to_path_buf()), Some(ingest.sender())).unwrap();
    (server, control, ingest)
}

fn chat(addr: std::net::SocketAddr) -> common::Resp {
    chat_with(addr, "")
}

/// A chat whose head also carries `headers` (each line ending in CRLF).
fn chat_with(addr: std::net::SocketAddr, headers: &str) -> common::Resp {
    let body = r#"{"model":"qwen3-mock","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}"#;
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr).roundtrip(req.as_bytes())
}

fn post_threshold(addr: std::net::SocketAddr, body: &str) -> common::Resp {
    let req = format!(
        "POST /busy_threshold HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr).roundtrip(req.as_bytes())
}

/// Until `f` holds (60 s: loading the model files alone takes ~10 s on a loaded 2-core
/// machine), else the test fails saying `what`.
fn wait(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < Duration::from_secs(60), "{what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn round_robin_leaves_busy_workers_out_and_refuses_when_all_are_busy() {
    let store = TempDir::new("busy-rr");
    let (a, b) = (worker(&store.0), worker(&store.0));
    // Of 16 384 KV blocks, A reports 16 000 in use (98 %), B 6 000 (37 %).
    let _load = load_publisher(&store.0, &[(a.instance_id(), 16_000), (b.instance_id(), 6_000)]);
    let (server, _control, _ingest) =
        frontend(&store.0, &["--router-mode", "round-robin", "--active-decode-blocks-threshold", "0.5"]);
    let addr = server.addr;
    wait("the model is listed", || {
        Client::connect(addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n").json()["data"][0]["id"] == "qwen3-mock"
    });
    // Both workers discovered and A's report read: every request goes to B.
    wait("A's load report is read", || {
        let before = a.received().len();
        chat(addr).status == 200 && a.received().len() == before && {
            (0..6).all(|_| chat(addr).status == 200) && a.received().len() == before
        }
    });
    let (a0, b0) = (a.received().len(), b.received().len());
    for _ in 0..10 {
        assert_eq!(chat(addr).status, 200);
    }
    assert_eq!(a.received().len(), a0, "the busy worker got no request");
    assert_eq!(b.received().len(), b0 + 10);

    // A threshold set at run time under B's load too: every worker busy, the overload answer.
    let r = post_threshold(addr, r#"{"model":"qwen3-mock","active_decode_blocks_threshold":0.3}"#);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    std::thread::sleep(Duration::from_millis(100)); // the other shard's inbox
    for _ in 0..4 {
        let r = chat(addr);
        assert_eq!(r.status, 529, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(
            r.json(),
            serde_json::json!({"message": "Service temporarily overloaded", "type": "Overloaded", "code": 529})
        );
        assert_eq!(r.header("retry-after"), Some("1"));
    }
    assert_eq!(b.received().len(), b0 + 10, "a refused request reaches no worker");
    let metrics = String::from_utf8(Client::connect(addr).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n").body).unwrap();
    assert!(
        metrics
            .contains("dynamo_frontend_model_rejection_total{endpoint=\"chat_completions\",model=\"qwen3-mock\"} 4\n"),
        "{metrics}"
    );
    // A worker pinned by the request is sent it, busy or not.
    assert_eq!(chat_with(addr, &format!("x-dynamo-worker-instance-id: {}\r\n", a.instance_id())).status, 200);
    server.shutdown();
}

#[test]
fn outside_kv_without_a_start_up_threshold_setting_one_is_refused_not_ignored() {
    let store = TempDir::new("busy-none");
    let _w = worker(&store.0);
    let cfg = Arc::new(common::config(&["--discovery-backend", "file", "--router-mode", "random"], &[]));
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let _control = Control::start(&cfg, &server, Backend::File(store.0.clone())).unwrap();
    let addr = server.addr;
    wait("the model is listed", || {
        Client::connect(addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n").json()["data"][0]["id"] == "qwen3-mock"
    });
    let r = post_threshold(addr, r#"{"model":"qwen3-mock","active_decode_blocks_threshold":0.3}"#);
    assert_eq!(r.status, 501);
    assert!(String::from_utf8_lossy(&r.body).contains("--active-decode-blocks-threshold 1.0"));
    // A query still answers.
    assert_eq!(post_threshold(addr, r#"{"model":"qwen3-mock"}"#).status, 200);
    server.shutdown();
}

/// Which of `workers` received the request sent by `f` (exactly one must have).
fn served_by(workers: &[&MockWorker], f: impl FnOnce() -> common::Resp) -> usize {
    let before: Vec<usize> = workers.iter().map(|w| w.received().len()).collect();
    let r = f();
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let got: Vec<usize> = (0..workers.len()).filter(|&i| workers[i].received().len() > before[i]).collect();
    assert_eq!(got.len(), 1, "one worker got it");
    got[0]
}

#[test]
fn a_session_stays_on_its_worker_and_a_busy_one_refuses_it_in_hard_mode_and_moves_it_in_soft() {
    let store = TempDir::new("sessions");
    let (a, b) = (worker(&store.0), worker(&store.0));
    let ws = [&a, &b];
    let load = load_publisher(&store.0, &[(a.instance_id(), 0), (b.instance_id(), 0)]);
    let start = |mode: &str| {
        let args = ["--router-mode", "round-robin", "--active-decode-blocks-threshold", "0.5"];
        let args =
            [&args[..], &["--router-session-affinity-ttl-secs", "60", "--router-session-affinity-mode", mode]].concat();
        let f = frontend(&store.0, &args);
        let addr = f.0.addr;
        wait("the model is listed", || {
            Client::connect(addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n").json()["data"][0]["id"] == "qwen3-mock"
        });
        wait("both workers are served", || {
            let seen: std::collections::BTreeSet<usize> = (0..4).map(|_| served_by(&ws, || chat(addr))).collect();
            seen.len() == 2
        });
        f
    };
    let (hard, soft) = (start("hard"), start("soft"));
    // Without a session, round-robin alternates; each session stays where it began, on both
    // shards (fresh connections), whichever header names it.
    for (addr, header) in
        [(hard.0.addr, "x-dynamo-session-id: s1"), (hard.0.addr, "thread-id: s2"), (soft.0.addr, "x-session-id: s3")]
    {
        let h = format!("{header}\r\n");
        let first = served_by(&ws, || chat_with(addr, &h));
        for _ in 0..6 {
            assert_eq!(served_by(&ws, || chat_with(addr, &h)), first, "{header}");
        }
    }
    // A session that began pinned to A is bound to A.
    let pin_a = format!("x-dynamo-worker-instance-id: {}\r\n", a.instance_id());
    for f in [&hard, &soft] {
        assert_eq!(served_by(&ws, || chat_with(f.0.addr, &format!("x-dynamo-session-id: busy\r\n{pin_a}"))), 0);
        assert_eq!(served_by(&ws, || chat_with(f.0.addr, "x-dynamo-session-id: busy\r\n")), 0);
        // Named elsewhere than its binding: refused.
        let pin_b = format!("x-dynamo-worker-instance-id: {}\r\n", b.instance_id());
        let r = chat_with(f.0.addr, &format!("x-dynamo-session-id: busy\r\n{pin_b}"));
        assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    }
    // Now A reports itself busy.
    drop(load);
    let _load = load_publisher(&store.0, &[(a.instance_id(), 16_000), (b.instance_id(), 0)]);
    for f in [&hard, &soft] {
        let addr = f.0.addr;
        wait("A's new report is read", || (0..4).all(|_| served_by(&ws, || chat(addr)) == 1));
    }
    let r = chat_with(hard.0.addr, "x-dynamo-session-id: busy\r\n");
    assert_eq!(r.status, 529, "hard: the bound worker is busy, so the session is refused");
    assert_eq!(r.json()["message"], "Service temporarily overloaded");
    assert_eq!(served_by(&ws, || chat_with(soft.0.addr, "x-dynamo-session-id: busy\r\n")), 1, "soft: moved to B");
    assert_eq!(served_by(&ws, || chat_with(soft.0.addr, "x-dynamo-session-id: busy\r\n")), 1, "and stays there");
    // An over-long session id is a client error.
    let long = format!("x-dynamo-session-id: {}\r\n", "x".repeat(257));
    assert_eq!(chat_with(hard.0.addr, &long).status, 400);
    hard.0.shutdown();
    soft.0.shutdown();
}
