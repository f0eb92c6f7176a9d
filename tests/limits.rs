//! Limits that hold under abuse, on an in-process switchyard: slow request heads (slowloris)
//! get 408 at the header-read timeout, connections beyond `--max-connections-per-shard` are
//! closed at once, an HTTP/2 rapid-reset flood (CVE-2023-44487) ends its connection with
//! GOAWAY ENHANCE_YOUR_CALM, a CONTINUATION flood and an oversized header block end theirs;
//! through all of it the shard keeps answering other clients, and each limit is counted in
//! `/metrics` (`switchyard_limit_hits_total`). The abusive clients write raw bytes, so the
//! server sees exactly the frames a hostile client sends. Towards the workers: a worker slow
//! to call back meets `--worker-callback-timeout-secs`, and `--max-output-tokens` caps
//! every answer.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use common::{Client, GET_LIVE, LIVE_BODY};

fn limit_hits(addr: SocketAddr, limit: &str) -> u64 {
    let r = Client::connect(addr).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    let text = String::from_utf8(r.body).unwrap();
    let series = format!("switchyard_limit_hits_total{{limit=\"{limit}\"}} ");
    text.lines().find_map(|l| l.strip_prefix(series.as_str())).unwrap_or_else(|| panic!("no {series}")).parse().unwrap()
}

fn served(addr: SocketAddr) {
    let r = Client::connect(addr).roundtrip(GET_LIVE);
    assert_eq!((r.status, r.body.as_slice()), (200, LIVE_BODY));
}

/// Read until the peer closes (or 20 s pass); what was read.
fn read_to_close(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    loop {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => return got,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
}

#[test]
fn slow_heads_get_408_and_others_are_served() {
    for driver in ["io-uring", "epoll"] {
        let server = common::start(driver, &["--header-read-timeout-secs", "1"], &[]);
        let addr = server.addr;
        // 40 clients that send their head one byte at a time, never finishing it.
        let mut slow: Vec<TcpStream> = (0..40).map(|_| TcpStream::connect(addr).unwrap()).collect();
        let t0 = Instant::now();
        while t0.elapsed() < Duration::from_millis(1500) {
            for s in &mut slow {
                let _ = s.write_all(b"G");
            }
            served(addr);
            std::thread::sleep(Duration::from_millis(100));
        }
        for s in &mut slow {
            let got = read_to_close(s);
            assert!(got.starts_with(b"HTTP/1.1 408 "), "{driver}: {}", String::from_utf8_lossy(&got));
        }
        assert_eq!(limit_hits(addr, "header_read_timeout"), 40, "{driver}");
        served(addr);
        server.shutdown();
    }
}

#[test]
fn connections_beyond_the_shard_limit_are_closed_at_once() {
    let server = common::start("io-uring", &["--shards", "1", "--max-connections-per-shard", "8"], &[]);
    let addr = server.addr;
    // Eight connections, each answered once and kept open.
    let mut held: Vec<Client> = (0..8).map(|_| Client::connect(addr)).collect();
    for c in &mut held {
        assert_eq!(c.roundtrip(GET_LIVE).status, 200);
    }
    // The ninth is closed without an answer.
    let mut extra = TcpStream::connect(addr).unwrap();
    let _ = extra.write_all(GET_LIVE);
    assert!(read_to_close(&mut extra).is_empty(), "a connection over the limit gets no answer");
    // The held ones are still served.
    for c in &mut held {
        assert_eq!(c.roundtrip(GET_LIVE).status, 200);
    }
    // Once one goes, a new one is taken (and the scrape itself needs one).
    held.pop();
    wait_for_a_slot(addr, "one closed");
    held.pop();
    // The scrape needs a free slot too: wait until the server has seen the last close.
    wait_for_a_slot(addr, "the last close");
    std::thread::sleep(Duration::from_millis(100));
    assert!(limit_hits(addr, "connections_per_shard") >= 1);
    server.shutdown();
}

/// Until a new connection is answered (the server has seen a held one close), for up to 5 s.
fn wait_for_a_slot(addr: SocketAddr, after: &str) {
    let t0 = Instant::now();
    loop {
        let mut c = TcpStream::connect(addr).unwrap();
        c.write_all(GET_LIVE).unwrap();
        if !read_to_close_or_answer(&mut c).is_empty() {
            return;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no connection taken after {after}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The first bytes of an answer, or nothing if the server closed first.
fn read_to_close_or_answer(s: &mut TcpStream) -> Vec<u8> {
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut buf = [0u8; 1024];
    match s.read(&mut buf) {
        Ok(n) => buf[..n].to_vec(),
        Err(_) => Vec::new(),
    }
}

/// An HTTP/2 frame.
fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(9 + payload.len());
    f.extend_from_slice(&(payload.len() as u32).to_be_bytes()[1..]);
    f.push(kind);
    f.push(flags);
    f.extend_from_slice(&stream.to_be_bytes());
    f.extend_from_slice(payload);
    f
}

/// `GET /live` as an HPACK block of static-table references and one literal (`:authority`).
const GET_LIVE_BLOCK: &[u8] = b"\x82\x86\x04\x05/live\x01\x01x";

/// A raw HTTP/2 connection after the preface and an empty SETTINGS.
fn raw_h2(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).unwrap();
    s.write_all(switchyard::h2::PREFACE).unwrap();
    s.write_all(&frame(0x4, 0, 0, &[])).unwrap();
    s
}

/// The frames among `bytes` (a server's frames): (type, payload).
fn frames(bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    let mut at = 0;
    while at + 9 <= bytes.len() {
        let len = u32::from_be_bytes([0, bytes[at], bytes[at + 1], bytes[at + 2]]) as usize;
        let end = (at + 9 + len).min(bytes.len());
        out.push((bytes[at + 3], bytes[at + 9..end].to_vec()));
        at += 9 + len;
    }
    out
}

/// The error code of the first GOAWAY among `bytes`.
fn goaway_code(bytes: &[u8]) -> Option<u32> {
    frames(bytes)
        .into_iter()
        .find(|(kind, p)| *kind == 0x7 && p.len() >= 8)
        .map(|(_, p)| u32::from_be_bytes([p[4], p[5], p[6], p[7]]))
}

#[test]
fn a_rapid_reset_flood_ends_its_connection_and_others_are_served() {
    for driver in ["io-uring", "epoll"] {
        let server = common::start(driver, &[], &[]);
        let addr = server.addr;
        let mut s = raw_h2(addr);
        // 2,000 streams, each opened and reset in the same write: the server sees the resets
        // before it could take the streams.
        let mut flood = Vec::new();
        for i in 0..2000u32 {
            let id = 2 * i + 1;
            flood.extend(frame(0x1, 0x5, id, GET_LIVE_BLOCK));
            flood.extend(frame(0x3, 0, id, &8u32.to_be_bytes()));
        }
        let _ = s.write_all(&flood);
        let got = read_to_close(&mut s);
        assert_eq!(goaway_code(&got), Some(0xb), "{driver}: GOAWAY ENHANCE_YOUR_CALM");
        assert_eq!(limit_hits(addr, "h2_enhance_your_calm"), 1, "{driver}");
        served(addr);
        server.shutdown();
    }
}

#[test]
fn header_floods_end_their_connection_and_others_are_served() {
    let server = common::start("io-uring", &["--max-header-bytes", "8192"], &[]);
    let addr = server.addr;
    // A CONTINUATION flood: a HEADERS frame without END_HEADERS, then CONTINUATION frames of
    // header fields that never end (16 MiB offered).
    let mut s = raw_h2(addr);
    s.write_all(&frame(0x1, 0x1, 1, GET_LIVE_BLOCK)).unwrap();
    // A literal field without indexing, new name: "x-flood: " + 1,000 bytes.
    let mut field = vec![0x00, 7];
    field.extend_from_slice(b"x-flood");
    field.extend_from_slice(&[0x7f, 0xe9, 0x06]); // length 1,000 (7-bit prefix integer)
    field.extend(std::iter::repeat_n(b'a', 1000));
    let continuation = frame(0x9, 0, 1, &field.repeat(8));
    let t0 = Instant::now();
    let mut sent = 0usize;
    while sent < 16 << 20 {
        if s.write_all(&continuation).is_err() {
            break;
        }
        sent += continuation.len();
    }
    let got = read_to_close(&mut s);
    assert!(sent < 16 << 20 || goaway_code(&got).is_some(), "the server kept reading {sent} bytes of one header block");
    assert!(t0.elapsed() < Duration::from_secs(20));
    served(addr);
    // An HPACK bomb: one small field indexed once, then referenced over and over, so the
    // decoded list is far larger than what was sent.
    let mut s = raw_h2(addr);
    let mut block = GET_LIVE_BLOCK.to_vec();
    block.extend_from_slice(&[0x40, 7]); // literal with incremental indexing, new name
    block.extend_from_slice(b"x-bomb1");
    block.extend_from_slice(&[0x7f, 0xe9, 0x06]);
    block.extend(std::iter::repeat_n(b'b', 1000));
    block.extend(std::iter::repeat_n(0xbe, 4000)); // index 62: the field just added
    s.write_all(&frame(0x1, 0x5, 1, &block)).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
    let mut got = Vec::new();
    let mut buf = [0u8; 65536];
    let decisive = |got: &[u8]| frames(got).iter().any(|(kind, _)| matches!(kind, 0x1 | 0x3 | 0x7));
    while !decisive(&got) {
        match s.read(&mut buf) {
            Ok(0) | Err(_) => break,
            Ok(n) => got.extend_from_slice(&buf[..n]),
        }
    }
    let frames = frames(&got);
    assert!(
        !frames.iter().any(|(kind, payload)| *kind == 0x1 && payload.first() == Some(&0x88)),
        "an oversized header list is not answered 200"
    );
    assert!(
        frames.iter().any(|(kind, _)| *kind == 0x1 || *kind == 0x3 || *kind == 0x7),
        "the server answers (431), resets the stream or ends the connection: {frames:?}"
    );
    served(addr);
    let hits = limit_hits(addr, "h2_protocol_error") + limit_hits(addr, "h2_enhance_your_calm");
    assert!(hits >= 1, "the floods are counted");
    server.shutdown();
}

mod towards_workers {
    use super::*;
    use common::stack::Stack;
    use switchyard::worker::MockConfig;

    const MODEL: &str = "qwen3-mock";

    fn stack(tag: &str, mock: MockConfig, args: &[&str]) -> Stack {
        let mock = MockConfig { model_name: MODEL.into(), model_dir: Some(common::qwen3_dir()), ..mock };
        Stack::start(tag, mock, args, &[])
    }

    fn chat(addr: SocketAddr, max_tokens: Option<u32>) -> common::Resp {
        let mut body = serde_json::json!({"model": MODEL, "messages": [{"role": "user", "content": "Hi"}]});
        if let Some(n) = max_tokens {
            body["max_tokens"] = n.into();
        }
        let body = body.to_string();
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        Client::connect(addr).roundtrip(req.as_bytes())
    }

    #[test]
    fn a_worker_slow_to_call_back_meets_the_deadline_and_is_counted() {
        let slow = MockConfig { callback_delay: Duration::from_secs(2), output_tokens: 3, ..MockConfig::default() };
        let s = stack("cb-deadline", slow.clone(), &["--worker-callback-timeout-secs", "0.3"]);
        let t0 = Instant::now();
        let r = chat(s.addr(), Some(3));
        // The only worker did not call back in time: nowhere else to go, a clean 503.
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        assert!(t0.elapsed() < Duration::from_secs(2), "answered after {:?}", t0.elapsed());
        assert_eq!(r.json()["error"]["type"], "service_unavailable", "{}", r.json());
        assert_eq!(limit_hits(s.addr(), "worker_callback_timeout"), 1);
        served(s.addr());
        drop(s);
        // 0: wait as long as the worker takes (as Dynamo does).
        let s = stack("cb-forever", slow, &["--worker-callback-timeout-secs", "0"]);
        let r = chat(s.addr(), Some(3));
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["usage"]["completion_tokens"], 3);
        assert_eq!(limit_hits(s.addr(), "worker_callback_timeout"), 0);
    }

    #[test]
    fn max_output_tokens_caps_every_answer_and_counts_the_lowered_requests() {
        let long = MockConfig { output_tokens: 40, fast: true, ..MockConfig::default() };
        let s = stack("output-cap", long.clone(), &["--max-output-tokens", "7"]);
        for (asked, got, capped) in [(None, 7, 1), (Some(100), 7, 2), (Some(5), 5, 2)] {
            let r = chat(s.addr(), asked);
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            let j = r.json();
            assert_eq!(j["usage"]["completion_tokens"], got, "asked {asked:?}: {j}");
            assert_eq!(j["choices"][0]["finish_reason"], "length", "{j}");
            assert_eq!(limit_hits(s.addr(), "max_output_tokens"), capped, "asked {asked:?}");
        }
        drop(s);
        // Without the option, the worker's natural length.
        let s = stack("output-uncapped", long, &[]);
        let j = chat(s.addr(), None).json();
        assert_eq!(j["usage"]["completion_tokens"], 40, "{j}");
        assert_eq!(limit_hits(s.addr(), "max_output_tokens"), 0);
    }
}
