//! Two switchyard processes with `--router-mode kv --router-replica-sync` over the same two
//! mock workers (file discovery): each registers its `active_sequences_events` channel,
//! subscribes to the other's, and counts the other's bookings as load — a long request
//! held through one steers the other's routing away from that worker — until it ends.
//! Stopped cleanly, each deletes its record.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use switchyard::worker::{MockConfig, MockWorker};

struct Frontend {
    child: Child,
    addr: SocketAddr,
    log: Arc<Mutex<Vec<String>>>,
}

impl Drop for Frontend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn spawn(root: &std::path::Path) -> Frontend {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2"])
        .args(["--router-mode", "kv", "--router-replica-sync", "--discovery-backend", "file"])
        .env("DYN_FILE_KV", root)
        .env("DYN_EVENT_PLANE_HOST", "127.0.0.1")
        .env("DYN_TCP_RESPONSE_STREAM_HOST", "127.0.0.1");
    let (child, addr, lines) = common::spawn_listening(cmd);
    let log = Arc::new(Mutex::new(Vec::new()));
    let log2 = log.clone();
    std::thread::spawn(move || {
        for l in lines.map_while(Result::ok) {
            log2.lock().unwrap().push(l);
        }
    });
    Frontend { child, addr, log }
}

fn get(addr: SocketAddr, path: &str) -> String {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(s, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").unwrap();
    let mut out = String::new();
    let _ = s.read_to_string(&mut out);
    out
}

/// Opens a streamed completion of `prompt` (token ids) and returns once its first chunk
/// arrived; the request stays in flight while the stream is held.
fn open_stream(addr: SocketAddr, prompt: &[u32], max_tokens: u32) -> BufReader<TcpStream> {
    let body = serde_json::json!({"model": "qwen3", "prompt": prompt, "max_tokens": max_tokens, "stream": true});
    let close = if max_tokens == 1 { "Connection: close\r\n" } else { "" };
    let body = body.to_string();
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        s,
        "POST /v1/completions HTTP/1.1\r\nHost: x\r\n{close}Content-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(s);
    let mut line = String::new();
    loop {
        line.clear();
        assert!(r.read_line(&mut line).unwrap() > 0, "the stream ended before its first chunk");
        if line.starts_with("data: {") {
            return r;
        }
        assert!(!line.starts_with("HTTP/1.1 ") || line.contains(" 200 "), "{line}");
    }
}

/// The value of the metric line starting with `prefix` (0 when absent).
fn metric(text: &str, prefix: &str) -> u64 {
    text.lines().find(|l| l.starts_with(prefix)).and_then(|l| l.split_whitespace().last()?.parse().ok()).unwrap_or(0)
}

fn wait(what: &str, secs: u64, mut cond: impl FnMut() -> bool) {
    let t0 = Instant::now();
    while !cond() {
        assert!(t0.elapsed() < Duration::from_secs(secs), "timed out: {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn decisions(addr: SocketAddr, worker: u64) -> u64 {
    metric(&get(addr, "/metrics"), &format!("switchyard_kv_router_decisions_total{{worker_id=\"{worker}\"}}"))
}

#[test]
fn two_routers_see_each_others_bookings() {
    let root = std::env::temp_dir().join(format!("sy-replica-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&root);
    let worker = || {
        let w = MockWorker::start(MockConfig {
            ttft: Duration::ZERO,
            itl: Duration::from_millis(20),
            output_tokens: 5000,
            model_name: "qwen3".into(),
            model_dir: Some(common::qwen3_dir()),
            ..MockConfig::default()
        })
        .unwrap();
        w.register_file(&root).unwrap();
        w
    };
    let workers = [worker(), worker()];
    let ids = [workers[0].instance_id(), workers[1].instance_id()];
    let (a, b) = (spawn(&root), spawn(&root));
    let channels = root.join("v1/event_channels");
    wait("both routers registered their channel", 20, || std::fs::read_dir(&channels).map_or(0, |d| d.count()) == 2);
    for f in [&a, &b] {
        wait("the model is served", 30, || get(f.addr, "/v1/models").contains("\"qwen3\""));
        wait("subscribed to the other router", 20, || {
            f.log
                .lock()
                .unwrap()
                .iter()
                .any(|l| l.contains("kv events: subscribed") && l.contains("active_sequences_events"))
        });
    }
    // A long request through A (3 full blocks of 64 tokens).
    let long: Vec<u32> = (1000..1200).collect();
    let held = open_stream(a.addr, &long, 2000);
    let busy = *ids.iter().find(|&&w| decisions(a.addr, w) == 1).expect("A routed it");
    let idle = *ids.iter().find(|&&w| w != busy).unwrap();
    let active = |f: &Frontend, w: u64| {
        let m = get(f.addr, "/metrics");
        let lbl = format!("{{worker_id=\"{w}\",dp_rank=\"0\"}}");
        (
            metric(&m, &format!("switchyard_kv_router_active_requests{lbl}")),
            metric(&m, &format!("switchyard_kv_router_active_blocks{lbl}")),
            metric(&m, "switchyard_kv_router_remote_bookings "),
        )
    };
    wait("B holds A's booking", 10, || active(&b, busy) == (1, 3, 1));
    // B routes other prompts of the same length: the worker A loaded costs more every time
    // (without the shared booking both workers would tie, a coin flip each).
    for i in 0..4u32 {
        let prompt: Vec<u32> = (20_000 + i * 1000..20_200 + i * 1000).collect();
        let mut r = open_stream(b.addr, &prompt, 1);
        let mut rest = String::new();
        let _ = r.read_to_string(&mut rest);
        // Its own booking is gone before the next decision (else it would weigh on it).
        wait("B's own request freed", 10, || active(&b, idle).0 == 0);
    }
    assert_eq!((decisions(b.addr, idle), decisions(b.addr, busy)), (4, 0), "B avoided the worker A loaded");
    // A's request ends: B frees it.
    drop(held);
    wait("B freed A's booking", 10, || active(&b, busy) == (0, 0, 0));
    // And the other way round.
    let held = open_stream(b.addr, &long, 2000);
    wait("A holds B's booking", 10, || active(&a, busy).2 == 1);
    drop(held);
    wait("A freed B's booking", 10, || active(&a, busy).2 == 0);
    // A clean stop deletes each router's record.
    for f in [&a, &b] {
        // SAFETY: kill(2) with the pid of a child we own.
        assert_eq!(unsafe { libc::kill(f.child.id() as i32, libc::SIGTERM) }, 0);
    }
    wait("the routers' records are gone", 20, || std::fs::read_dir(&channels).map_or(0, |d| d.count()) == 0);
    drop(workers);
    let _ = std::fs::remove_dir_all(&root);
}
