//! `request_classifier: {type: thunderagent}` end to end: two in-tree mock workers whose
//! cards give 16 KV blocks of 64 tokens (1,024 tokens each), a kv-mode frontend with the
//! classifier, requests naming sessions by 1.6.1's headers.
//!
//! What is checked: a session's turns go one at a time (the second waits for the first to
//! end); a session's next turn goes to its worker; a new program that fits nowhere waits
//! until a program ends (`x-dynamo-session-final`) and then goes; a request without a session
//! passes meanwhile; a waiting turn whose client leaves never reaches a worker.
//!
//! The Qwen3 model files come from `scripts/fetch-models.sh`.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{qwen3_dir, Client};
use switchyard::control::{Backend, Control};
use switchyard::ingest::Ingest;
use switchyard::shard::Server;
use switchyard::worker::{MockConfig, MockWorker};

struct Stack {
    server: Option<Server>,
    control: Option<Control>,
    _ingest: Ingest,
    workers: Vec<MockWorker>,
    store: std::path::PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        if let Some(c) = self.control.take() {
            c.stop();
        }
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
        for w in &mut self.workers {
            w.stop();
        }
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

fn start(tag: &str) -> Stack {
    let store = std::env::temp_dir().join(format!("sy-thunder-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    std::fs::create_dir_all(&store).unwrap();
    let workers: Vec<MockWorker> = (0..2)
        .map(|_| {
            MockWorker::start(MockConfig {
                ttft: Duration::from_millis(400),
                itl: Duration::from_millis(1),
                output_tokens: 2,
                model_name: "qwen3-mock".into(),
                model_dir: Some(qwen3_dir()),
                total_kv_blocks: 16,
                ..MockConfig::default()
            })
            .unwrap()
        })
        .collect();
    let policy = store.join("policy.yaml");
    std::fs::write(
        &policy,
        "request_classifier:\n  type: thunderagent\n  parameters: {buffer_per_program: 0, scheduler_interval_seconds: 0.2}\n",
    )
    .unwrap();
    let kv = store.join("kv");
    std::fs::create_dir_all(&kv).unwrap();
    for w in &workers {
        w.register_file(&kv).unwrap();
    }
    let cfg = Arc::new(common::config(
        &["--discovery-backend", "file", "--router-mode", "kv", "--router-policy-config", policy.to_str().unwrap()],
        &[],
    ));
    assert!(cfg.kv_classifier.is_some());
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let (ingest, installs, _) =
        Ingest::start_serving(server.drivers.len(), cfg.kv_approximate(), cfg.kv_predicted_ttl, None, false).unwrap();
    server.install_kv(installs);
    let control = Control::start_with_kv(&cfg, &server, Backend::File(kv), Some(ingest.sender())).unwrap();
    let stack = Stack { server: Some(server), control: Some(control), _ingest: ingest, workers, store };
    // Both workers listed on every shard.
    let t0 = Instant::now();
    while !(0..8).all(|_| workers_listed(&stack) == 2) {
        assert!(t0.elapsed() < Duration::from_secs(90), "the two workers never appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
    stack
}

fn workers_listed(s: &Stack) -> usize {
    let r = Client::connect(addr(s)).roundtrip(b"GET /health HTTP/1.1\r\n\r\n");
    r.json()["instances"].as_array().map_or(0, |a| a.len())
}

fn addr(s: &Stack) -> std::net::SocketAddr {
    s.server.as_ref().unwrap().addr
}

/// Frames each worker received.
fn frames(s: &Stack) -> Vec<u64> {
    s.workers.iter().map(|w| w.stats().frames).collect()
}

fn wait_frames(s: &Stack, total: u64, within: Duration, what: &str) -> Vec<u64> {
    let t0 = Instant::now();
    loop {
        let f = frames(s);
        if f.iter().sum::<u64>() >= total {
            return f;
        }
        assert!(t0.elapsed() < within, "{what}: {f:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A chat request with `headers` (each line ending in CRLF), on its own thread.
fn send(s: &Stack, headers: String, content: String) -> std::thread::JoinHandle<common::Resp> {
    let addr = addr(s);
    std::thread::spawn(move || {
        let body = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": content}], "max_tokens": 2})
            .to_string();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
            body.len()
        );
        Client::connect(addr).roundtrip(req.as_bytes())
    })
}

fn session(id: &str) -> String {
    format!("x-dynamo-session-id: {id}\r\n")
}

fn ok(h: std::thread::JoinHandle<common::Resp>, what: &str) -> serde_json::Value {
    let r = h.join().unwrap();
    assert_eq!(r.status, 200, "{what}: {}", String::from_utf8_lossy(&r.body));
    r.json()
}

/// Which worker got the frames between `before` and `after` (exactly one new frame).
fn which(before: &[u64], after: &[u64]) -> usize {
    let grew: Vec<usize> = (0..before.len()).filter(|&i| after[i] > before[i]).collect();
    assert_eq!(grew.len(), 1, "{before:?} -> {after:?}");
    grew[0]
}

#[test]
fn a_sessions_turns_go_one_at_a_time_to_its_worker() {
    let s = start("turns");
    // Two turns of one session at once: the second reaches a worker only after the first
    // answered (400 ms to the first token).
    let t0 = Instant::now();
    let first = send(&s, session("s1"), "first turn".into());
    std::thread::sleep(Duration::from_millis(50));
    let second = send(&s, session("s1"), "second turn".into());
    let f = wait_frames(&s, 1, Duration::from_secs(5), "the first turn");
    std::thread::sleep(Duration::from_millis(200));
    assert_eq!(frames(&s).iter().sum::<u64>(), 1, "the second turn went while the first ran");
    ok(first, "first");
    let g = wait_frames(&s, 2, Duration::from_secs(5), "the second turn");
    ok(second, "second");
    assert!(t0.elapsed() >= Duration::from_millis(800), "two turns in {:?}: they overlapped", t0.elapsed());
    let x = which(&[0, 0], &f);
    assert_eq!(x, which(&f, &g), "the second turn went to another worker");
    // A second session goes to the other, emptier worker; each session's later turns stay
    // on its own worker.
    let before = frames(&s);
    ok(send(&s, session("s2"), "another session".into()), "s2");
    let after = frames(&s);
    let y = which(&before, &after);
    assert_ne!(x, y, "s2 went to s1's worker");
    for turn in 0..3 {
        for (id, want) in [("s1", x), ("s2", y)] {
            let before = frames(&s);
            ok(send(&s, session(id), format!("turn {turn}")), id);
            assert_eq!(which(&before, &frames(&s)), want, "{id} turn {turn} changed worker");
        }
    }
}

#[test]
fn a_program_that_fits_nowhere_waits_until_one_ends() {
    let s = start("defer");
    let big = |tag: &str| (0..190).map(|i| format!("{tag}{i} ")).collect::<String>();
    // Two big programs, one per worker (each prompt between half and all of a worker's 1,024
    // tokens).
    let one = ok(send(&s, session("big1"), big("a")), "big1");
    let tokens = one["usage"]["prompt_tokens"].as_u64().unwrap();
    // More than half a worker (two do not fit on one), less than the 85 % a paused program
    // may resume into.
    assert!((530..860).contains(&tokens), "the big prompt is {tokens} tokens");
    ok(send(&s, session("big2"), big("b")), "big2");
    assert_eq!(frames(&s), [1, 1], "the two big programs share a worker");
    // A third fits on neither while both programs are kept: it waits.
    let third = send(&s, session("big3"), big("c"));
    // A turn whose client leaves while it waits is taken back.
    let mut gone = Client::connect(addr(&s));
    let body = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": big("d")}], "max_tokens": 2})
        .to_string();
    gone.send(
        format!(
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n{}Content-Length: {}\r\n\r\n{body}",
            session("big4"),
            body.len()
        )
        .as_bytes(),
    );
    std::thread::sleep(Duration::from_millis(1000));
    assert_eq!(frames(&s), [1, 1], "a program with no room went");
    drop(gone);
    // A request without a session is not the classifier's: it goes at once.
    ok(send(&s, String::new(), "no session".into()), "no session");
    assert_eq!(frames(&s).iter().sum::<u64>(), 3);
    // big1's last turn ends its program: big3 goes (to big1's worker), big4 never.
    let last = format!("{}x-dynamo-session-final: true\r\n", session("big1"));
    ok(send(&s, last, "bye".into()), "big1's last turn");
    wait_frames(&s, 5, Duration::from_secs(5), "big3 after big1 ended");
    ok(third, "big3");
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(frames(&s).iter().sum::<u64>(), 5, "the turn whose client left reached a worker");
}
