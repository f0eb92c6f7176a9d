//! `DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS` and `DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS` as 1.6.1
//! uses them, against the in-tree mock worker: a quiet stream carries SSE comments (`:`), and
//! a worker that sends nothing for the timeout ends the answer with 504 (an error event and
//! `[DONE]` once the stream has started) and is told to stop.

mod common;

use std::time::{Duration, Instant};

use common::stack::Stack;
use common::Client;
use switchyard::worker::MockConfig;

const MODEL: &str = "qwen3-mock";

fn stack(tag: &str, ttft: Duration, itl: Duration, env: &[(&str, &str)]) -> Stack {
    let mock = MockConfig {
        ttft,
        itl,
        output_tokens: 6,
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    Stack::start(&format!("hygiene-{tag}"), mock, &[], env)
}

fn post(s: &Stack, body: serde_json::Value) -> common::Resp {
    let body = body.to_string();
    let mut c = Client::connect(s.addr());
    c.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    );
    c.roundtrip(req.as_bytes())
}

/// Keep-alives every 100 ms while the worker is quiet (300 ms between tokens), none while
/// it is not; the answer itself is untouched.
#[test]
fn quiet_streams_carry_keep_alive_comments() {
    let env = [("DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS", "100")];
    let s = stack("keepalive", Duration::ZERO, Duration::from_millis(300), &env);
    let r = post(&s, serde_json::json!({"model": MODEL, "prompt": "Tell me", "stream": true, "max_tokens": 4}));
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).unwrap();
    let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
    let comments = events.iter().filter(|e| **e == ":").count();
    // Three gaps of 300 ms: two or three comments each.
    assert!((5..=10).contains(&comments), "{comments} keep-alives in {text:?}");
    let data: Vec<&&str> = events.iter().filter(|e| e.starts_with("data: ")).collect();
    assert_eq!(data.last().map(|e| **e), Some("data: [DONE]"), "{text}");
    assert_eq!(data.len(), 4 + 1 + 1, "four tokens, the finish, [DONE]: {text}");
    assert!(!text.contains("\"error\""), "{text}");

    // A whole answer never carries them.
    let r = post(&s, serde_json::json!({"model": MODEL, "prompt": "Tell me", "max_tokens": 2}));
    assert_eq!(r.status, 200);
    assert!(r.json()["choices"][0]["text"].is_string());
}

/// A worker that stalls: mid-stream (the first token at once, the next 5 s later) the
/// stream ends 1 s after its last token with the 504 error event and `[DONE]`; before its
/// first token (5 s away) a whole answer is a 504. Both worker requests are told to stop.
#[test]
fn a_stalled_worker_ends_the_answer_with_504() {
    let env = [("DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS", "1")];
    let s = stack("timeout-mid", Duration::ZERO, Duration::from_secs(5), &env);
    let t0 = Instant::now();
    let r = post(&s, serde_json::json!({"model": MODEL, "prompt": "Tell me", "stream": true, "max_tokens": 4}));
    let took = t0.elapsed();
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).unwrap();
    let cut = "data: {\"error\":{\"message\":\"Request deadline exceeded\",\"type\":\"timeout_error\",\"code\":504}}\n\ndata: [DONE]\n\n";
    assert!(text.starts_with("data: {"), "a token came first: {text}");
    assert!(text.ends_with(cut), "{text}");
    assert!(took >= Duration::from_millis(950) && took < Duration::from_secs(3), "ended after {took:?}");
    wait_killed(&s);
    drop(s);

    let s = stack("timeout-first", Duration::from_secs(5), Duration::ZERO, &env);
    let t0 = Instant::now();
    let r = post(&s, serde_json::json!({"model": MODEL, "prompt": "Tell me", "max_tokens": 4}));
    let took = t0.elapsed();
    assert_eq!(r.status, 504, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["message"], "Request deadline exceeded");
    assert!(took >= Duration::from_millis(950) && took < Duration::from_secs(3), "answered after {took:?}");
    wait_killed(&s);
}

fn wait_killed(s: &Stack) {
    let t0 = Instant::now();
    while s.worker.stats().killed < 1 {
        assert!(t0.elapsed() < Duration::from_secs(3), "the worker request was not cancelled: {:?}", s.worker.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}
