//! Helpers for tests that talk to a real switchyard over real sockets.
#![allow(dead_code)]

pub mod etcd;
pub mod h2c;
pub mod kserve_msg;
pub mod kv_msg;
pub mod nats;
pub mod stack;
pub mod zmq_pub;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::Duration;

use switchyard::shard::Server;

/// A fresh directory under the temp dir, removed when dropped.
pub struct TempDir(pub std::path::PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> TempDir {
        static N: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = N.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let d = std::env::temp_dir().join(format!("switchyard-{tag}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&d);
        std::fs::create_dir_all(&d).unwrap();
        TempDir(d)
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Run a test body on an epoll monoio runtime, and on an io_uring one built as the shards
/// build theirs when the kernel lets one be built.
pub fn on_both_drivers<F: std::future::Future<Output = ()>>(body: impl Fn() -> F) {
    let mut epoll = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build().unwrap();
    epoll.block_on(body());
    // The ring the shards use (deferred completions where the kernel has them).
    match switchyard::util::uring::runtime() {
        Ok((mut uring, _)) => uring.block_on(body()),
        Err(e) => eprintln!("io_uring unavailable, epoll only: {e}"),
    }
}

/// A small Tokens request for the mock worker's model (`max_tokens` as given).
pub fn mock_request(max_tokens: Option<u32>) -> switchyard::plane::PreprocessedRequest {
    switchyard::plane::PreprocessedRequest {
        model: "mock-model".into(),
        token_ids: vec![1, 2, 3],
        stop_conditions: switchyard::plane::StopConditions { max_tokens, ..Default::default() },
        ..Default::default()
    }
}

/// A port on 127.0.0.1 that was free a moment ago.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").and_then(|l| l.local_addr()).expect("a free port").port()
}

/// The directory of a fetched model (`$SWITCHYARD_MODELS/<name>`, default
/// `~/.cache/switchyard-models/<name>`); fails with the command to run when it is missing.
pub fn model_dir(name: &str) -> std::path::PathBuf {
    let base = match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/switchyard-models"),
    };
    let dir = base.join(name);
    assert!(
        dir.join("tokenizer.json").is_file(),
        "run `bash scripts/fetch-models.sh` first ({} missing)",
        dir.display()
    );
    dir
}

/// The Qwen3 model files of `scripts/fetch-models.sh`.
pub fn qwen3_dir() -> std::path::PathBuf {
    model_dir("qwen3")
}

/// A test configuration: 127.0.0.1, an ephemeral port, two unpinned shards, then `args`;
/// `env` stands for the whole environment.
pub fn config(args: &[&str], env: &[(&str, &str)]) -> switchyard::config::Config {
    let mut all: Vec<String> = ["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--no-pin-shards"]
        .iter()
        .map(|s| s.to_string())
        .collect();
    all.extend(args.iter().map(|s| s.to_string()));
    let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
    let (_, cfg, _) =
        switchyard::config::load(&all, &move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .expect("test config is valid");
    cfg.expect("a configuration to run")
}

/// Start an in-process server on 127.0.0.1 with an ephemeral port and the given I/O driver.
pub fn start(driver: &str, args: &[&str], env: &[(&str, &str)]) -> Server {
    let mut all = vec!["--io-driver", driver];
    all.extend_from_slice(args);
    let server = switchyard::service::start(Arc::new(config(&all, env))).expect("server starts");
    let want = if driver == "epoll" { "epoll" } else { "io_uring" };
    assert!(server.drivers.iter().all(|d| d.starts_with(want)), "asked for {driver}, shards run {:?}", server.drivers);
    server
}

/// POST `body` as JSON to `path` on a new connection to `addr`.
pub fn post_json(addr: SocketAddr, path: &str, body: &serde_json::Value) -> Resp {
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr).roundtrip(req.as_bytes())
}

/// One parsed response.
#[derive(Debug)]
pub struct Resp {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Resp {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n.eq_ignore_ascii_case(name)).map(|(_, v)| v.as_str())
    }
    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {}", String::from_utf8_lossy(&self.body)))
    }
}

/// A client connection that reads responses (Content-Length framed or chunked).
pub struct Client {
    pub stream: TcpStream,
    buf: Vec<u8>,
}

impl Client {
    pub fn connect(addr: SocketAddr) -> Client {
        let stream = TcpStream::connect(addr).expect("connect");
        stream.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        stream.set_nodelay(true).unwrap();
        Client { stream, buf: Vec::new() }
    }

    pub fn send(&mut self, bytes: &[u8]) {
        self.stream.write_all(bytes).expect("write");
    }

    fn fill(&mut self) -> usize {
        let mut tmp = [0u8; 16384];
        let n = self.stream.read(&mut tmp).unwrap_or(0);
        self.buf.extend_from_slice(&tmp[..n]);
        n
    }

    /// Read one response; `head_only` for responses to HEAD.
    pub fn read_response_opts(&mut self, head_only: bool) -> Resp {
        let end = loop {
            if let Some(i) = self.buf.windows(4).position(|w| w == b"\r\n\r\n") {
                break i + 4;
            }
            assert!(
                self.fill() > 0,
                "connection closed before a response head: {:?}",
                String::from_utf8_lossy(&self.buf)
            );
        };
        let head = String::from_utf8(self.buf[..end].to_vec()).unwrap();
        let mut lines = head.split("\r\n");
        let status_line = lines.next().unwrap();
        let status: u16 = status_line.split(' ').nth(1).unwrap().parse().unwrap();
        let headers: Vec<(String, String)> = lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let (n, v) = l.split_once(':').unwrap();
                (n.trim().to_string(), v.trim().to_string())
            })
            .collect();
        self.buf.drain(..end);
        let chunked = headers.iter().any(|(n, v)| n.eq_ignore_ascii_case("transfer-encoding") && v == "chunked");
        if chunked && !head_only {
            return Resp { status, headers, body: self.read_chunks() };
        }
        let len: usize = if head_only || status == 100 {
            0
        } else {
            headers
                .iter()
                .find(|(n, _)| n.eq_ignore_ascii_case("content-length"))
                .map(|(_, v)| v.parse().unwrap())
                .unwrap_or(0)
        };
        while self.buf.len() < len {
            assert!(self.fill() > 0, "connection closed inside a body");
        }
        let body = self.buf.drain(..len).collect();
        Resp { status, headers, body }
    }

    /// A chunked body, decoded.
    fn read_chunks(&mut self) -> Vec<u8> {
        let mut body = Vec::new();
        loop {
            let line_end = loop {
                if let Some(i) = self.buf.windows(2).position(|w| w == b"\r\n") {
                    break i;
                }
                assert!(self.fill() > 0, "connection closed inside a chunked body");
            };
            let size = std::str::from_utf8(&self.buf[..line_end]).unwrap().trim().to_string();
            let n = usize::from_str_radix(&size, 16).unwrap();
            while self.buf.len() < line_end + 2 + n + 2 {
                assert!(self.fill() > 0, "connection closed inside a chunk");
            }
            body.extend_from_slice(&self.buf[line_end + 2..line_end + 2 + n]);
            self.buf.drain(..line_end + 2 + n + 2);
            if n == 0 {
                return body;
            }
        }
    }

    pub fn read_response(&mut self) -> Resp {
        self.read_response_opts(false)
    }

    /// Send a request and read its response.
    pub fn roundtrip(&mut self, req: &[u8]) -> Resp {
        self.send(req);
        self.read_response()
    }

    /// True when the server has closed the connection (EOF with nothing left unread).
    pub fn closed(&mut self) -> bool {
        self.buf.is_empty() && self.fill() == 0
    }
}

pub const GET_LIVE: &[u8] = b"GET /live HTTP/1.1\r\nHost: t\r\n\r\n";
pub const LIVE_BODY: &[u8] = br#"{"status":"live","message":"Service is live"}"#;

/// A worker of the kv router's own tests (never dialled): instance `id`, one rank.
pub fn kv_worker(id: u64) -> switchyard::registry::Worker {
    switchyard::registry::Worker {
        addr: "127.0.0.1:1".parse().unwrap(),
        path: format!("{id:x}/dynamo/backend/generate"),
        nats_subject: None,
        codec: Default::default(),
        instance_id: id,
        cpu: false,
        dp_start: 0,
        dp_size: 1,
        bootstrap: None,
    }
}

/// Spawns `cmd` (a switchyard command line) with its stderr piped, and waits for its
/// "listening on http://ADDR" line; returns the child, the address and the rest of stderr.
pub fn spawn_listening(
    mut cmd: std::process::Command,
) -> (std::process::Child, SocketAddr, std::io::Lines<std::io::BufReader<std::process::ChildStderr>>) {
    use std::io::BufRead;
    let mut child = cmd.stderr(std::process::Stdio::piped()).spawn().expect("start switchyard");
    let mut lines = std::io::BufReader::new(child.stderr.take().unwrap()).lines();
    let addr = loop {
        let line = lines.next().expect("switchyard exited before listening").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    (child, addr, lines)
}

/// A chunked HTTP/1.1 body read to its last chunk, after the head.
pub fn read_chunked(r: &mut impl std::io::BufRead) -> Vec<u8> {
    let mut raw = Vec::new();
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        let n = usize::from_str_radix(line.trim(), 16).unwrap();
        let mut chunk = vec![0u8; n + 2];
        r.read_exact(&mut chunk).unwrap();
        if n == 0 {
            return raw;
        }
        raw.extend_from_slice(&chunk[..n]);
    }
}
