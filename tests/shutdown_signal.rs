//! The real binary under SIGTERM/SIGINT: it drains a request in flight, exits 0, and does not
//! wait past the grace period for a request that never completes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(driver: &str, grace_secs: &str) -> (Child, SocketAddr) {
    spawn_with_store(
        driver,
        grace_secs,
        &std::env::temp_dir().join(format!("sy-shutdown-{}-{driver}", std::process::id())),
    )
}

/// The binary with file discovery on `store`.
fn spawn_with_store(driver: &str, grace_secs: &str, store: &std::path::Path) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--io-driver", driver])
        .args(["--discovery-backend", "file"])
        .env("DYN_FILE_KV", store)
        .env("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", grace_secs)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("switchyard printed its address").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) with the pid of a child we own and a valid signal number.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

fn wait_exit(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "switchyard did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn drains_in_flight_then_exits_zero(driver: &str, sig: i32) {
    let (mut child, addr) = spawn(driver, "5");
    let mut busy = TcpStream::connect(addr).unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    busy.write_all(
        b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 26\r\n\r\n{\"mo",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    signal(&child, sig);
    std::thread::sleep(Duration::from_millis(300));
    busy.write_all(b"del\":\"m\",\"input\":\"hi\"}").unwrap();
    let mut resp = String::new();
    busy.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404 Not Found\r\n"), "{resp}");
    assert!(resp.contains("connection: close\r\n") && resp.ends_with("\"code\":404}}"), "{resp}");
    let (code, took) = wait_exit(&mut child, Duration::from_secs(5));
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(2), "exited as soon as the request was done ({took:?})");
}

fn grace_period_bounds_the_drain(driver: &str) {
    let (mut child, addr) = spawn(driver, "1");
    let mut stuck = TcpStream::connect(addr).unwrap();
    stuck
        .write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    signal(&child, libc::SIGTERM);
    let (code, _) = wait_exit(&mut child, Duration::from_secs(5));
    let took = t0.elapsed();
    assert_eq!(code, Some(0));
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");
}

/// A streamed chat on a new connection; the reader, once its head is read (status 200).
fn open_stream(addr: SocketAddr, max_tokens: u32) -> BufReader<TcpStream> {
    let body = format!(
        r#"{{"model":"qwen3-mock","stream":true,"max_tokens":{max_tokens},"messages":[{{"role":"user","content":"hi"}}]}}"#
    );
    let mut c = TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        c,
        "POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = BufReader::new(c);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    r
}

/// The rest of a chunked SSE answer, decoded, and whether its last chunk came (a clean end).
fn rest_of_stream(mut r: BufReader<TcpStream>) -> (String, bool) {
    let mut line = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let mut body = Vec::new();
    loop {
        line.clear();
        if r.read_line(&mut line).unwrap_or(0) == 0 {
            return (String::from_utf8_lossy(&body).into_owned(), false);
        }
        let n = usize::from_str_radix(line.trim(), 16).unwrap();
        let mut chunk = vec![0u8; n + 2];
        if r.read_exact(&mut chunk).is_err() {
            return (String::from_utf8_lossy(&body).into_owned(), false);
        }
        if n == 0 {
            return (String::from_utf8(body).unwrap(), true);
        }
        body.extend_from_slice(&chunk[..n]);
    }
}

/// SIGTERM with two streams in flight (a worker at 20 ms per token): new requests, on a
/// connection opened during the drain too, get 503 at once; with a grace period longer than
/// the streams they finish (finish reason, `[DONE]`); with a shorter one each ends at the
/// deadline with an error event and `[DONE]` — never a broken transfer — and its worker
/// request is cancelled. The process exits 0 either way.
fn streams_finish_or_end_cleanly(driver: &str) {
    use switchyard::worker::{MockConfig, MockWorker};
    for (grace, tokens, finishes) in [("8", 60u32, true), ("1", 400, false)] {
        let store = std::env::temp_dir().join(format!("sy-shutdown-streams-{}-{driver}-{grace}", std::process::id()));
        let _ = std::fs::remove_dir_all(&store);
        let mut worker = MockWorker::start(MockConfig {
            itl: Duration::from_millis(20),
            output_tokens: 1000,
            model_name: "qwen3-mock".into(),
            model_dir: Some(
                std::path::PathBuf::from(std::env::var("HOME").unwrap()).join(".cache/switchyard-models/qwen3"),
            ),
            ..MockConfig::default()
        })
        .unwrap();
        worker.register_file(&store).unwrap();
        let (mut child, addr) = spawn_with_store(driver, grace, &store);
        let t0 = Instant::now();
        let listed = loop {
            let mut c = TcpStream::connect(addr).unwrap();
            c.write_all(b"GET /v1/models HTTP/1.1\r\nconnection: close\r\n\r\n").unwrap();
            let mut resp = String::new();
            let _ = c.read_to_string(&mut resp);
            if resp.contains("qwen3-mock") {
                break true;
            }
            if t0.elapsed() > Duration::from_secs(90) {
                break false;
            }
            std::thread::sleep(Duration::from_millis(50));
        };
        assert!(listed, "the model never appeared");
        std::thread::sleep(Duration::from_millis(300));
        let streams = [open_stream(addr, tokens), open_stream(addr, tokens)];
        std::thread::sleep(Duration::from_millis(200));
        signal(&child, libc::SIGTERM);
        std::thread::sleep(Duration::from_millis(100));
        // A new connection during the drain: 503 at once.
        let mut c = TcpStream::connect(addr).expect("the listener stays open while draining");
        c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
        let body = r#"{"model":"qwen3-mock","messages":[{"role":"user","content":"hi"}]}"#;
        write!(
            c,
            "POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .unwrap();
        let mut resp = String::new();
        let _ = c.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 503 Service Unavailable\r\n"), "{resp}");
        let mut health = TcpStream::connect(addr).unwrap();
        health.write_all(b"GET /health HTTP/1.1\r\nconnection: close\r\n\r\n").unwrap();
        let mut resp = String::new();
        let _ = health.read_to_string(&mut resp);
        assert!(resp.starts_with("HTTP/1.1 503"), "{resp}");

        for r in streams {
            let (text, clean) = rest_of_stream(r);
            assert!(clean, "{driver} grace {grace}: the transfer was broken: {text}");
            assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
            if finishes {
                assert!(text.contains(r#""finish_reason":"length""#), "{text}");
                assert!(!text.contains(r#""error""#), "{text}");
            } else {
                let cut = "data: {\"error\":{\"message\":\"Service is shutting down\",\"type\":\"service_unavailable\",\"code\":503}}\n\ndata: [DONE]\n\n";
                assert!(text.ends_with(cut), "{text}");
            }
        }
        let (code, _) = wait_exit(&mut child, Duration::from_secs(10));
        assert_eq!(code, Some(0));
        if !finishes {
            let t0 = Instant::now();
            while worker.stats().killed < 2 {
                assert!(t0.elapsed() < Duration::from_secs(3), "worker requests not cancelled: {:?}", worker.stats());
                std::thread::sleep(Duration::from_millis(10));
            }
        }
        worker.stop();
        let _ = std::fs::remove_dir_all(&store);
    }
}

#[test]
fn streams_at_sigterm_io_uring() {
    streams_finish_or_end_cleanly("io-uring");
}
#[test]
fn streams_at_sigterm_epoll() {
    streams_finish_or_end_cleanly("epoll");
}

#[test]
fn sigterm_io_uring() {
    drains_in_flight_then_exits_zero("io-uring", libc::SIGTERM);
}
#[test]
fn sigterm_epoll() {
    drains_in_flight_then_exits_zero("epoll", libc::SIGTERM);
}
#[test]
fn sigint_io_uring() {
    drains_in_flight_then_exits_zero("io-uring", libc::SIGINT);
}
#[test]
fn grace_io_uring() {
    grace_period_bounds_the_drain("io-uring");
}
#[test]
fn grace_epoll() {
    grace_period_bounds_the_drain("epoll");
}
