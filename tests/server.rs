//! The HTTP server over real sockets, once with io_uring and once with epoll: keep-alive,
//! 1,000 sequential requests, 200 concurrent connections, pipelining, limits, timeouts, bad
//! input, and a drain on shutdown.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use common::{start, Client, GET_LIVE, LIVE_BODY};

fn keep_alive_reuse(driver: &str) {
    let s = start(driver, &[], &[]);
    let mut c = Client::connect(s.addr);
    for _ in 0..3 {
        let r = c.roundtrip(GET_LIVE);
        assert_eq!(r.status, 200);
        assert_eq!(r.body, LIVE_BODY);
        assert_eq!(r.header("content-type"), Some("application/json"));
        assert!(r.header("connection").is_none());
    }
    // Connection: close is honoured after the response.
    let r = c.roundtrip(b"GET /live HTTP/1.1\r\nConnection: close\r\n\r\n");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(c.closed());
    s.shutdown();
}

fn thousand_sequential(driver: &str) {
    let s = start(driver, &[], &[]);
    let mut c = Client::connect(s.addr);
    for i in 0..1000 {
        let r = c.roundtrip(GET_LIVE);
        assert_eq!(r.status, 200, "request {i}");
        assert_eq!(r.body, LIVE_BODY);
    }
    s.shutdown();
}

fn two_hundred_concurrent(driver: &str) {
    let s = start(driver, &[], &[]);
    let addr = s.addr;
    // Open all 200 first, then use them, so they really are concurrent.
    let mut clients: Vec<Client> = (0..200).map(|_| Client::connect(addr)).collect();
    let handles: Vec<_> = clients
        .drain(..)
        .map(|mut c| {
            std::thread::spawn(move || {
                for _ in 0..5 {
                    let r = c.roundtrip(GET_LIVE);
                    assert_eq!(r.status, 200);
                }
                c
            })
        })
        .collect();
    let clients: Vec<Client> = handles.into_iter().map(|h| h.join().expect("client thread")).collect();
    // Per-shard counters, merged by the scrape: every one of the 1,000 responses is there.
    let mut m = Client::connect(addr);
    let text = String::from_utf8(m.roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n").body).unwrap();
    assert!(text.contains("switchyard_http_responses_total{code=\"200\"} 1000\n"), "{text}");
    assert!(text.contains("switchyard_shards{state=\"answered\"} 2\n"), "{text}");
    assert!(text.contains("switchyard_http_connections_open 201\n"), "{text}");
    drop(clients);
    s.shutdown();
}

fn pipelined_in_order(driver: &str) {
    let s = start(driver, &[], &[]);
    let mut c = Client::connect(s.addr);
    let mut batch = Vec::new();
    batch.extend_from_slice(GET_LIVE);
    batch.extend_from_slice(b"GET /nope HTTP/1.1\r\n\r\n");
    batch.extend_from_slice(b"HEAD /live HTTP/1.1\r\n\r\n");
    batch.extend_from_slice(b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n20\r\n{\"model\":\"m\",\"input\":\"hi there\"}\r\n0\r\n\r\n");
    batch.extend_from_slice(b"GET /v1/models HTTP/1.1\r\n\r\n");
    c.send(&batch);
    let r = c.read_response();
    assert_eq!((r.status, r.body.as_slice()), (200, LIVE_BODY));
    let r = c.read_response();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "Route not found: GET /nope");
    let r = c.read_response_opts(true);
    assert_eq!((r.status, r.header("content-length")), (200, Some("45")));
    let r = c.read_response();
    assert_eq!((r.status, r.json()["message"].as_str()), (404, Some("Model not found")));
    let r = c.read_response();
    assert_eq!(r.json(), serde_json::json!({"object": "list", "data": []}));
    s.shutdown();
}

/// Send a body far over the limit while reading: the client must get the whole 413.
fn body_over_limit_gets_413(driver: &str) {
    let s = start(driver, &[], &[("DYN_HTTP_BODY_LIMIT_MB", "1")]);
    let body = vec![b'x'; 2 * 1024 * 1024];
    let mut c = Client::connect(s.addr);
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut writer = c.stream.try_clone().unwrap();
    let sender = std::thread::spawn(move || {
        let _ = writer.write_all(head.as_bytes());
        let _ = writer.write_all(&body);
    });
    let r = c.read_response();
    assert_eq!(r.status, 413);
    assert_eq!(r.json()["code"], 413);
    assert_eq!(r.json()["error"]["code"], 413);
    assert_eq!(r.header("connection"), Some("close"));
    sender.join().unwrap();
    assert!(c.closed());
    // The shard still serves others.
    assert_eq!(Client::connect(s.addr).roundtrip(GET_LIVE).status, 200);
    s.shutdown();
}

fn expect_continue_and_chunked(driver: &str) {
    let s = start(driver, &[], &[]);
    let mut c = Client::connect(s.addr);
    // (The embeddings route is open before any model is seen, as in 1.6.1.)
    c.send(b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: application/json\r\nExpect: 100-continue\r\nContent-Length: 26\r\n\r\n");
    let interim = c.read_response();
    assert_eq!(interim.status, 100);
    c.send(b"{\"model\":\"m\",\"input\":\"hi\"}");
    let r = c.read_response();
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["message"], "Model not found");
    // Chunked body split across writes.
    c.send(b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n4\r\n{\"mo");
    std::thread::sleep(Duration::from_millis(20));
    c.send(b"\r\n16\r\ndel\":\"m\",\"input\":\"hi\"}\r\n0\r\n\r\n");
    assert_eq!(c.read_response().json()["message"], "Model not found");
    s.shutdown();
}

fn statuses_and_error_shapes(driver: &str) {
    let s = start(driver, &[], &[]);
    let mut c = Client::connect(s.addr);
    let r = c.roundtrip(b"POST /live HTTP/1.1\r\nContent-Length: 0\r\n\r\n");
    assert_eq!((r.status, r.header("allow")), (405, Some("GET,HEAD")));
    let r = c.roundtrip(b"GET /v1/chat/completions HTTP/1.1\r\n\r\n");
    assert_eq!((r.status, r.header("allow")), (405, Some("POST")));
    // No chat or completions model was ever seen: those routes answer a bare 404, as 1.6.1's.
    for path in ["/v1/chat/completions", "/v1/completions"] {
        let head = format!("POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}");
        let r = c.roundtrip(head.as_bytes());
        assert_eq!((r.status, r.body.len()), (404, 0), "{path}");
    }
    let r = c.roundtrip(b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}");
    assert_eq!(r.status, 415);
    assert_eq!(r.json()["message"], "Expected request with Content-Type application/json");
    assert_eq!(r.json()["type"], "Unsupported Media Type");
    let r = c.roundtrip(
        b"POST /v1/embeddings HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 9\r\n\r\n{\"model\":",
    );
    assert_eq!(r.status, 400);
    let msg = r.json()["message"].as_str().unwrap().to_string();
    assert!(msg.starts_with("Failed to deserialize the JSON body into the target type: EOF while parsing"), "{msg}");
    assert_eq!(r.json()["error"]["type"], "invalid_request_error");
    let r = c.roundtrip(b"GET /health?x=1 HTTP/1.1\r\nX-Request-Id: abc-123\r\n\r\n");
    assert_eq!(r.json(), serde_json::json!({"status": "healthy", "endpoints": [], "instances": []}));
    assert_eq!(r.header("x-request-id"), Some("abc-123"));
    let r = c.roundtrip(b"GET /v1/models/some-model HTTP/1.1\r\n\r\n");
    assert_eq!((r.status, r.json()["message"].as_str()), (404, Some("Model not found")));
    let r = c.roundtrip(b"GET /openapi.json HTTP/1.1\r\n\r\n");
    let doc = r.json();
    assert_eq!(doc["openapi"], "3.1.0");
    for p in ["/health", "/live", "/metrics", "/v1/models", "/v1/chat/completions", "/v1/completions"] {
        assert!(doc["paths"][p].is_object(), "openapi lacks {p}");
    }
    // Smuggling shape: 400 and the connection closes.
    let r = c.roundtrip(
        b"POST /v1/completions HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
    );
    assert_eq!(r.status, 400);
    assert!(c.closed());
    // Too many headers: 431.
    let mut many = b"GET /live HTTP/1.1\r\n".to_vec();
    for i in 0..150 {
        many.extend_from_slice(format!("X-{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(Client::connect(s.addr).roundtrip(&many).status, 431);
    // Garbage: 400, and other connections are unaffected.
    assert_eq!(Client::connect(s.addr).roundtrip(b"\x16\x03\x01\x00\xa5garbage\r\n\r\n").status, 400);
    assert_eq!(Client::connect(s.addr).roundtrip(GET_LIVE).status, 200);
    s.shutdown();
}

fn timeouts(driver: &str) {
    let s = start(driver, &["--header-read-timeout-secs", "0.3", "--idle-timeout-secs", "0.5"], &[]);
    let mut c = Client::connect(s.addr);
    c.send(b"GET /live HTTP/1.1\r\nHost:");
    let t0 = Instant::now();
    let r = c.read_response();
    assert_eq!(r.status, 408);
    assert!(t0.elapsed() < Duration::from_secs(3));
    assert!(c.closed());
    let mut c = Client::connect(s.addr);
    assert_eq!(c.roundtrip(GET_LIVE).status, 200);
    let t0 = Instant::now();
    assert!(c.closed(), "idle connection is closed");
    assert!(t0.elapsed() >= Duration::from_millis(300) && t0.elapsed() < Duration::from_secs(3));
    s.shutdown();
}

/// An upload still in progress when shutdown starts is answered; idle connections close.
/// One shard, so both connections see the same drain (each shard drains on its own).
fn shutdown_drains(driver: &str) {
    let s = start(driver, &["--shards", "1"], &[("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", "5")]);
    let mut idle = Client::connect(s.addr);
    assert_eq!(idle.roundtrip(GET_LIVE).status, 200);
    let mut busy = Client::connect(s.addr);
    busy.send(b"POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"mod");
    let mut writer = busy.stream.try_clone().unwrap();
    let finisher = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(400));
        writer.write_all(b"el\":\"m\",\"prompt\":\"hi\"}").unwrap();
    });
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    let stopper = std::thread::spawn(move || {
        s.shutdown();
        t0.elapsed()
    });
    std::thread::sleep(Duration::from_millis(100));
    // While draining: an open connection is told the service is going away.
    let r = idle.roundtrip(b"GET /health HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 503);
    assert_eq!(
        r.json(),
        serde_json::json!({"status": "not_ready", "stage": "draining", "message": "Service is not ready"})
    );
    assert_eq!(r.header("connection"), Some("close"));
    let addr = idle.stream.peer_addr().unwrap();
    let took = stopper.join().unwrap();
    finisher.join().unwrap();
    let r = busy.read_response();
    assert_eq!(r.status, 404, "the in-flight request got its answer");
    assert_eq!(r.header("connection"), Some("close"));
    assert!(took >= Duration::from_millis(250), "shutdown waited for the request ({took:?})");
    assert!(took < Duration::from_secs(4), "shutdown did not wait for the grace period ({took:?})");
    let mut rest = Vec::new();
    let _ = std::io::Read::read_to_end(&mut idle.stream, &mut rest);
    assert!(rest.is_empty(), "nothing more after the close");
    assert!(TcpStream::connect(addr).is_err(), "no longer accepting");
}

macro_rules! both_drivers {
    ($($name:ident),* $(,)?) => {
        mod io_uring { $( #[test] fn $name() { super::$name("io-uring") } )* }
        mod epoll { $( #[test] fn $name() { super::$name("epoll") } )* }
    };
}

both_drivers!(
    keep_alive_reuse,
    thousand_sequential,
    two_hundred_concurrent,
    pipelined_in_order,
    body_over_limit_gets_413,
    expect_continue_and_chunked,
    statuses_and_error_shapes,
    timeouts,
    shutdown_drains,
);
