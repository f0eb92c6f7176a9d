//! Request migration against in-tree mock workers: the worker answering a request is stopped
//! mid-answer (its connections cut, as a SIGKILL cuts them) and, with `--migration-limit`,
//! the answer continues on the other worker — which is sent the prompt plus the tokens
//! generated so far and `max_tokens` reduced by their count — while the client sees one
//! well-formed answer; without it, a clean error. `--migration-max-seq-len` stops migrating.

mod common;

use std::time::{Duration, Instant};

use common::stack::Stack;
use common::Client;
use switchyard::tokenize::ModelFiles;
use switchyard::worker::{MockConfig, MockWorker};

const MODEL: &str = "qwen3-mock";
const ANSWER: &str = "Hello world! The quick brown fox jumps over the lazy dog. One two three four five six.";

/// Two workers of the same model, 80 ms per token; the frontend takes `args`.
fn two_workers(tag: &str, args: &[&str]) -> (Stack, Vec<u32>) {
    let dir = common::qwen3_dir();
    let script = ModelFiles::load(&dir).unwrap().tokenizer().unwrap().encode(ANSWER).unwrap();
    let mock = MockConfig {
        ttft: Duration::from_millis(10),
        itl: Duration::from_millis(80),
        script: Some(script.clone()),
        model_name: MODEL.into(),
        model_dir: Some(dir),
        ..MockConfig::default()
    };
    let s = Stack::start_many(&format!("migrate-{tag}"), vec![mock.clone(), mock], args, &[]);
    let t0 = Instant::now();
    loop {
        let h = Client::connect(s.addr()).roundtrip(b"GET /health HTTP/1.1\r\n\r\n");
        if h.json()["instances"].as_array().is_some_and(|i| i.len() == 2) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "both workers never appeared");
        std::thread::sleep(Duration::from_millis(50));
    }
    std::thread::sleep(Duration::from_millis(300));
    (s, script)
}

/// Sends `body` to `path` on a new connection, to be answered by [`read_all`].
fn send(addr: std::net::SocketAddr, path: &str, body: &serde_json::Value) -> Client {
    let body = body.to_string();
    let mut c = Client::connect(addr);
    c.stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    c.send(
        format!(
            "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
    c
}

/// The status and the body of the answer.
fn read_all(mut c: Client) -> (u16, String) {
    let r = c.read_response();
    (r.status, String::from_utf8(r.body).unwrap())
}

/// The worker of `s` that got the first request, once it has produced a few tokens; it is
/// then stopped (every connection cut). Returns which one it was (0: `worker`, 1: `others[0]`).
fn kill_the_busy_worker(s: &mut Stack) -> usize {
    let t0 = Instant::now();
    let busy = loop {
        if s.worker.stats().frames > 0 {
            break 0;
        }
        if s.others[0].stats().frames > 0 {
            break 1;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "no worker got the request");
        std::thread::sleep(Duration::from_millis(2));
    };
    // ~3 tokens at 80 ms each.
    std::thread::sleep(Duration::from_millis(260));
    let w: &mut MockWorker = if busy == 0 { &mut s.worker } else { &mut s.others[0] };
    w.stop();
    busy
}

fn scrape(s: &Stack) -> String {
    String::from_utf8(Client::connect(s.addr()).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n").body).unwrap()
}

/// What the surviving worker was sent against what the dead one was: the same request id,
/// the prompt plus the `k` tokens generated, `max_tokens` reduced by `k`. Returns `k`.
fn check_resend(s: &Stack, busy: usize, script: &[u32], max_tokens: u32) -> usize {
    let (dead, alive) = if busy == 0 { (&s.worker, &s.others[0]) } else { (&s.others[0], &s.worker) };
    let first = dead.received();
    let second = alive.received();
    assert_eq!((first.len(), second.len()), (1, 1), "{first:?} {second:?}");
    let (a, b) = (&first[0], &second[0]);
    assert_eq!(a.request_id, b.request_id, "the resend keeps the request id");
    let k = b.token_ids.len() - a.token_ids.len();
    assert!(k >= 1 && k < max_tokens as usize, "{k} tokens before the migration");
    assert_eq!(&b.token_ids[..a.token_ids.len()], &a.token_ids[..], "the prompt comes first");
    assert_eq!(&b.token_ids[a.token_ids.len()..], &script[..k], "then the tokens generated");
    assert_eq!(b.max_tokens, Some(max_tokens - k as u32));
    k
}

/// Streaming chat and a non-streaming completion, each moved mid-answer to the other worker:
/// one well-formed answer, the text of both workers in order, `max_tokens` in all.
#[test]
fn an_answer_moves_to_another_worker_when_its_worker_dies() {
    let tokenizer = ModelFiles::load(common::qwen3_dir()).unwrap().tokenizer().unwrap();
    for stream in [true, false] {
        let (mut s, script) = two_workers(&format!("ok-{stream}"), &["--migration-limit", "3"]);
        let body = serde_json::json!({"model": MODEL, "prompt": "Tell me", "max_tokens": 10, "stream": stream,
                                      "stream_options": {"include_usage": true}});
        let body =
            if stream { body } else { serde_json::json!({"model": MODEL, "prompt": "Tell me", "max_tokens": 10}) };
        let conn = send(s.addr(), "/v1/completions", &body);
        let busy = kill_the_busy_worker(&mut s);
        let (status, text) = read_all(conn);
        assert_eq!(status, 200, "{text}");
        let k = check_resend(&s, busy, &script, 10);
        let want = tokenizer.decode(&[&script[..k], &script[..10 - k]].concat(), true).unwrap();
        let (got, finish, usage) = if stream {
            let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
            assert_eq!(events.last(), Some(&"data: [DONE]"), "{text}");
            assert!(!text.contains("\"error\""), "{text}");
            let chunks: Vec<serde_json::Value> =
                events[..events.len() - 1].iter().map(|e| serde_json::from_str(&e[6..]).unwrap()).collect();
            let got: String = chunks.iter().filter_map(|c| c["choices"][0]["text"].as_str()).collect();
            let finish = chunks.iter().find_map(|c| c["choices"][0]["finish_reason"].as_str()).unwrap().to_string();
            (got, finish, chunks.last().unwrap()["usage"].clone())
        } else {
            let v: serde_json::Value = serde_json::from_str(&text).unwrap();
            let c = &v["choices"][0];
            (
                c["text"].as_str().unwrap().to_string(),
                c["finish_reason"].as_str().unwrap().to_string(),
                v["usage"].clone(),
            )
        };
        assert_eq!(got, want);
        assert_eq!(finish, "length");
        // The prompt counted once (not with the tokens generated before the move).
        assert_eq!(usage["completion_tokens"], 10, "{usage}");
        assert_eq!(usage["prompt_tokens"], tokenizer.encode("Tell me").unwrap().len(), "{usage}");
        let metrics = scrape(&s);
        assert!(
            metrics.contains(&format!(
                "dynamo_frontend_model_migration_total{{migration_type=\"ongoing_request\",model=\"{MODEL}\"}} 1\n"
            )),
            "{metrics}"
        );
        assert!(
            metrics.contains(&format!(
                "dynamo_frontend_model_migration_duration_seconds_count{{migration_type=\"ongoing_request\",model=\"{MODEL}\",outcome=\"success\"}} 1\n"
            )),
            "{metrics}"
        );
    }
}

/// Without migration the client gets a clean error (an SSE error event and `[DONE]`; 503 for
/// a whole answer), and the next request is served by the surviving worker. With a
/// `--migration-max-seq-len` the sequence outgrows, the same.
#[test]
fn without_migration_the_client_gets_a_clean_error_and_the_next_request_is_served() {
    for (tag, args) in [("off", vec![]), ("seq-len", vec!["--migration-limit", "3", "--migration-max-seq-len", "4"])] {
        for stream in [true, false] {
            let (mut s, _) = two_workers(&format!("{tag}-{stream}"), &args);
            let body = serde_json::json!({"model": MODEL, "prompt": "Tell me", "max_tokens": 10, "stream": stream});
            let conn = send(s.addr(), "/v1/completions", &body);
            kill_the_busy_worker(&mut s);
            let (status, text) = read_all(conn);
            if stream {
                assert_eq!(status, 200);
                let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
                let n = events.len();
                assert_eq!(events[n - 1], "data: [DONE]", "{text}");
                assert_eq!(
                    events[n - 2],
                    r#"data: {"error":{"message":"Service temporarily unavailable","type":"service_unavailable","code":503}}"#
                );
            } else {
                assert_eq!(status, 503, "{text}");
            }
            let next = send(
                s.addr(),
                "/v1/completions",
                &serde_json::json!({"model": MODEL, "prompt": "Hi", "max_tokens": 2}),
            );
            let (status, text) = read_all(next);
            assert_eq!(status, 200, "{tag}: {text}");
            if tag == "seq-len" {
                let metrics = scrape(&s);
                assert!(
                    metrics.contains(
                        "dynamo_frontend_model_migration_max_seq_len_exceeded_total{model=\"qwen3-mock\"} 1\n"
                    ),
                    "{metrics}"
                );
                // The move that could not happen is timed as a failure.
                assert!(
                    metrics.contains("dynamo_frontend_model_migration_duration_seconds_count{migration_type=\"ongoing_request\",model=\"qwen3-mock\",outcome=\"failure\"} 1\n"),
                    "{metrics}"
                );
            }
        }
    }
}
