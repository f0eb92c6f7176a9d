//! End to end through switchyard: file discovery finds the in-tree mock worker (registered
//! in Dynamo's file-store format, real Qwen3 tokenizer files), and OpenAI requests go
//! HTTP → validation → chat template → tokenizer → request plane → worker → call-back stream
//! → detokenizer/stop handling → JSON or SSE.

mod common;

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{qwen3_dir, Client};
use switchyard::control::{Backend, Control};
use switchyard::ingest::Ingest;
use switchyard::shard::Server;
use switchyard::tokenize::ModelFiles;
use switchyard::worker::{MockConfig, MockWorker};

const ANSWER: &str = "Hello world! The quick brown fox jumps over the lazy dog.";

struct Setup {
    server: Option<Server>,
    control: Option<Control>,
    worker: MockWorker,
    _store: tempdir::Dir,
    script: Vec<u32>,
}

mod tempdir {
    pub struct Dir(pub std::path::PathBuf);
    impl Drop for Dir {
        fn drop(&mut self) {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

impl Drop for Setup {
    fn drop(&mut self) {
        common::stack::stop_all(self.control.take(), self.server.take(), &mut self.worker);
    }
}

fn setup(tag: &str) -> Setup {
    setup_with(tag, MockConfig { fast: true, ..MockConfig::default() })
}

/// A frontend and one worker configured by `cfg` (its script, name and model directory are
/// set here).
fn setup_with(tag: &str, cfg: MockConfig) -> Setup {
    let dir = common::qwen3_dir();
    let files = ModelFiles::load(&dir).unwrap();
    let script = files.tokenizer().unwrap().encode(ANSWER).unwrap();
    let store = tempdir::Dir(std::env::temp_dir().join(format!("sy-e2e-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&store.0);
    std::fs::create_dir_all(&store.0).unwrap();
    let worker = MockWorker::start(MockConfig {
        script: Some(script.clone()),
        model_name: "qwen3-mock".into(),
        model_dir: Some(dir),
        ..cfg
    })
    .unwrap();
    worker.register_file(&store.0).unwrap();
    let (server, control) = frontend(Backend::File(store.0.clone()));
    Setup { server: Some(server), control: Some(control), worker, _store: store, script }
}

/// The configuration of a two-shard frontend on an ephemeral loopback port, plus `extra`.
fn frontend_config(extra: &[&str]) -> Arc<switchyard::config::Config> {
    Arc::new(common::config(extra, &[]))
}

/// A two-shard frontend watching `backend`, returned once a model is listed.
fn frontend(backend: Backend) -> (Server, Control) {
    let cfg = frontend_config(&["--discovery-backend", "file"]);
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let control = Control::start(&cfg, &server, backend).unwrap();
    assert!(wait_models(server.addr, |ids| !ids.is_empty()), "the model never appeared in /v1/models");
    (server, control)
}

/// Polls `/v1/models` (≤ 20 s) until `want(number of models)` holds on 8 fresh connections
/// in a row (so on every shard: each swaps in the new snapshot on its own); false on timeout.
fn wait_models(addr: std::net::SocketAddr, want: impl Fn(&[&str]) -> bool) -> bool {
    let t0 = Instant::now();
    let mut streak = 0;
    loop {
        let r = Client::connect(addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n");
        let v = r.json();
        let ids: Vec<&str> =
            v["data"].as_array().map_or(vec![], |d| d.iter().filter_map(|m| m["id"].as_str()).collect());
        streak = if want(&ids) { streak + 1 } else { 0 };
        if streak == 8 {
            return true;
        }
        // Loading model files takes seconds; many more on a loaded machine.
        if t0.elapsed() > Duration::from_secs(90) {
            return false;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn post(s: &Setup, path: &str, body: &serde_json::Value) -> common::Resp {
    post_at(s.server.as_ref().unwrap().addr, path, body)
}

/// POST `body` as JSON to `path` on a new connection to `addr`.
fn post_at(addr: std::net::SocketAddr, path: &str, body: &serde_json::Value) -> common::Resp {
    common::post_json(addr, path, body)
}

/// Send a request to `path` (with `headers`, `name: value\r\n` lines) on a new connection and
/// return the connection to read the answer.
fn open_at(
    addr: std::net::SocketAddr,
    path: &str,
    headers: &str,
    body: &serde_json::Value,
) -> std::io::BufReader<std::net::TcpStream> {
    use std::io::Write;
    let body = body.to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        stream,
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    std::io::BufReader::new(stream)
}

/// Send a chat request on a new connection and return the connection to read the answer.
fn open_chat(addr: std::net::SocketAddr, body: &serde_json::Value) -> std::io::BufReader<std::net::TcpStream> {
    open_at(addr, "/v1/chat/completions", "", body)
}

/// Read a chunked SSE body from a raw response and return the `data:` payloads.
fn sse_events(addr: std::net::SocketAddr, body: &serde_json::Value) -> Vec<String> {
    sse_events_at(addr, "/v1/chat/completions", "", body)
}

/// [`sse_events`] for a request to `path`, with `headers` added.
fn sse_events_at(addr: std::net::SocketAddr, path: &str, headers: &str, body: &serde_json::Value) -> Vec<String> {
    use std::io::BufRead;
    let mut r = open_at(addr, path, headers, body);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line == "\r\n" {
            break;
        }
    }
    let raw = common::read_chunked(&mut r);
    let text = String::from_utf8(raw).unwrap();
    text.split("\n\n").filter(|e| !e.is_empty()).map(|e| e.strip_prefix("data: ").unwrap().to_string()).collect()
}

#[test]
fn chat_whole_and_streamed_through_a_worker() {
    let s = setup("chat");
    let msg = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": "Hello there"}]});
    let r = post(&s, "/v1/chat/completions", &msg);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "chat.completion");
    assert_eq!(v["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(v["choices"][0]["message"]["role"], "assistant");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");
    // "Hello there" as one user turn is 10 prompt tokens with Qwen3's template (as 1.6.1 sends).
    assert_eq!(v["usage"]["prompt_tokens"], 10);
    assert_eq!(v["usage"]["completion_tokens"], s.script.len());

    let mut streamed = msg.clone();
    streamed["stream"] = true.into();
    streamed["stream_options"] = serde_json::json!({"include_usage": true});
    let events = sse_events(s.server.as_ref().unwrap().addr, &streamed);
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"));
    let mut text = String::new();
    let mut finish = None;
    let mut usage = None;
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        assert_eq!(v["object"], "chat.completion.chunk");
        if let Some(c) = v["choices"].get(0) {
            text.push_str(c["delta"]["content"].as_str().unwrap_or(""));
            if !c["finish_reason"].is_null() {
                finish = Some(c["finish_reason"].clone());
            }
        } else {
            usage = Some(v["usage"].clone());
        }
    }
    assert_eq!(text, ANSWER);
    assert_eq!(finish, Some("stop".into()));
    assert_eq!(usage.unwrap()["completion_tokens"], s.script.len());
}

#[test]
fn limits_stops_completions_and_errors() {
    let s = setup("limits");
    let r = post(
        &s,
        "/v1/chat/completions",
        &serde_json::json!({"model": "qwen3-mock", "max_tokens": 3, "messages": [{"role": "user", "content": "hi"}]}),
    );
    let v = r.json();
    assert_eq!(v["choices"][0]["finish_reason"], "length");
    assert_eq!(v["usage"]["completion_tokens"], 3);

    let r = post(
        &s,
        "/v1/chat/completions",
        &serde_json::json!({"model": "qwen3-mock", "stop": ["brown"], "messages": [{"role": "user", "content": "hi"}]}),
    );
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], "Hello world! The quick ");
    assert_eq!(v["choices"][0]["finish_reason"], "stop");

    let r = post(&s, "/v1/completions", &serde_json::json!({"model": "qwen3-mock", "prompt": "Once upon a time"}));
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "text_completion");
    assert_eq!(v["choices"][0]["text"], ANSWER);

    let r = post(
        &s,
        "/v1/chat/completions",
        &serde_json::json!({"model": "nope", "messages": [{"role": "user", "content": "hi"}]}),
    );
    assert_eq!((r.status, r.json()["message"].as_str()), (404, Some("Model not found")));
}

/// A prompt far over the inline limit goes through the shard's tokenizer helper thread and
/// must give exactly the ids an inline encode gives.
#[test]
fn long_prompts_are_tokenized_on_the_helper_exactly() {
    use switchyard::openai::to_infer::chat_input_of;
    use switchyard::tokenize::offload::INLINE_MAX_BYTES;
    use switchyard::tokenize::preprocess::{chat_prompt, encode_prompt, PreprocessOptions};
    let s = setup("long");
    let mut content = String::new();
    let mut i = 0u64;
    while content.len() < 4 * INLINE_MAX_BYTES {
        content.push_str(&format!("paragraph {i}: the brown fox {} jumps; 你好 {} ", i * 7919 % 1000, i % 13));
        i += 1;
    }
    let body =
        serde_json::json!({"model": "qwen3-mock", "max_tokens": 2, "messages": [{"role": "user", "content": content}]});
    let files = ModelFiles::load(common::qwen3_dir()).unwrap();
    let text = body.to_string();
    let req = switchyard::openai::parse_chat(text.as_bytes()).unwrap();
    let prompt =
        chat_prompt(&chat_input_of(&req, text.as_bytes()), &files, PreprocessOptions::default(), None).unwrap();
    let want = encode_prompt(&files.tokenizer().unwrap(), &prompt).unwrap().len();
    assert!(prompt.len() > INLINE_MAX_BYTES);
    let r = post(&s, "/v1/chat/completions", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["usage"]["prompt_tokens"], want);
}

#[test]
fn per_request_metric_families() {
    let s = setup("metrics");
    let msg = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": "Hello there"}]});
    let r = post(&s, "/v1/chat/completions", &msg);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let mut streamed = msg.clone();
    streamed["stream"] = true.into();
    assert_eq!(sse_events(s.server.as_ref().unwrap().addr, &streamed).last().map(String::as_str), Some("[DONE]"));
    let mut unknown = msg.clone();
    unknown["model"] = "no-such-model".into();
    assert_eq!(post(&s, "/v1/chat/completions", &unknown).status, 404);

    let r = Client::connect(s.server.as_ref().unwrap().addr).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 200);
    let text = String::from_utf8(r.body).unwrap();
    let n = s.script.len();
    for line in [
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"\",model=\"qwen3-mock\",request_type=\"unary\",status=\"success\"} 1".to_string(),
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"\",model=\"qwen3-mock\",request_type=\"stream\",status=\"success\"} 1".to_string(),
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"not_found\",model=\"unknown_model\",request_type=\"unary\",status=\"error\"} 1".to_string(),
        "dynamo_frontend_requests_started_total{endpoint=\"chat_completions\",model=\"qwen3-mock\",request_type=\"unary\"} 1".to_string(),
        "dynamo_frontend_requests_started_total{endpoint=\"chat_completions\",model=\"qwen3-mock\",request_type=\"stream\"} 1".to_string(),
        "dynamo_frontend_requests_started_total{endpoint=\"chat_completions\",model=\"unknown_model\",request_type=\"unary\"} 1".to_string(),
        format!("dynamo_frontend_output_tokens_total{{model=\"qwen3-mock\"}} {}", 2 * n),
        "dynamo_frontend_time_to_first_token_seconds_count{model=\"qwen3-mock\"} 2".to_string(),
        "dynamo_frontend_inflight_requests{model=\"qwen3-mock\"} 0".to_string(),
        "# TYPE dynamo_frontend_time_to_first_token_seconds histogram".to_string(),
        "dynamo_frontend_time_to_first_token_seconds_bucket{model=\"qwen3-mock\",le=\"+Inf\"} 2".to_string(),
    ] {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
    }
}

fn scrape(s: &Setup) -> String {
    scrape_at(s.server.as_ref().unwrap().addr)
}

fn scrape_at(addr: std::net::SocketAddr) -> String {
    let r = Client::connect(addr).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}

/// The value of the unlabelled sample `name` in a scrape (0 when absent).
fn counter(text: &str, name: &str) -> u64 {
    text.lines()
        .find(|l| l.starts_with(name) && l.as_bytes().get(name.len()) == Some(&b' '))
        .map_or(0, |l| l.split(' ').next_back().unwrap().parse().unwrap())
}

fn assert_lines(text: &str, lines: &[String]) {
    for line in lines {
        assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
    }
}

/// The frontend families besides the per-request ones: failures by class, active / queued
/// requests, a client that leaves mid-stream, the served model's card values, tokenizer
/// timings.
#[test]
fn frontend_metric_families() {
    use std::io::BufRead;
    let s = setup_with(
        "fe-metrics",
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(50), ..MockConfig::default() },
    );
    let addr = s.server.as_ref().unwrap().addr;
    let text = scrape(&s);
    assert!(!text.contains("dynamo_frontend_failures_total"), "no failure yet:\n{text}");
    assert_lines(
        &text,
        &[
            "# TYPE dynamo_frontend_model_ready gauge".into(),
            "dynamo_frontend_model_ready{model=\"qwen3-mock\"} 1".into(),
            "dynamo_frontend_disconnected_clients 0".into(),
        ],
    );

    let msg = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": "Hello there"}]});
    assert_eq!(post(&s, "/v1/chat/completions", &msg).status, 200);
    let mut streamed = msg.clone();
    streamed["stream"] = true.into();
    assert_eq!(sse_events(addr, &streamed).last().map(String::as_str), Some("[DONE]"));
    let mut unknown = msg.clone();
    unknown["model"] = "no-such-model".into();
    assert_eq!(post(&s, "/v1/chat/completions", &unknown).status, 404);
    let mut invalid = msg.clone();
    invalid["temperature"] = (-1.0).into();
    let r = post(&s, "/v1/chat/completions", &invalid);
    assert_eq!(r.status, 400, "{}", String::from_utf8_lossy(&r.body));
    let r = Client::connect(addr)
        .roundtrip(b"POST /v1/chat/completions HTTP/1.1\r\nContent-Type: text/plain\r\nContent-Length: 2\r\n\r\n{}");
    assert_eq!(r.status, 415);

    // A streamed request whose client leaves after the first chunk.
    let mut reader = open_chat(addr, &streamed);
    let mut line = String::new();
    while !line.starts_with("data: ") {
        line.clear();
        assert!(reader.read_line(&mut line).unwrap() > 0, "the stream ended before its first event");
    }
    assert_lines(
        &scrape(&s),
        &[
            "dynamo_frontend_active_requests{model=\"qwen3-mock\"} 1".into(),
            "dynamo_frontend_inflight_requests{model=\"qwen3-mock\"} 1".into(),
        ],
    );
    drop(reader);
    let t0 = Instant::now();
    let text = loop {
        let text = scrape(&s);
        if text.lines().any(|l| l == "dynamo_frontend_active_requests{model=\"qwen3-mock\"} 0") {
            break text;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "the request never ended:\n{text}");
        std::thread::sleep(Duration::from_millis(20));
    };

    let mut want: Vec<String> = [
        "# TYPE dynamo_frontend_failures_total counter",
        "dynamo_frontend_failures_total{class=\"InvalidRequest\",reason=\"request.invalid\"} 1",
        "dynamo_frontend_failures_total{class=\"NotFound\",reason=\"request.not_found\"} 1",
        "dynamo_frontend_failures_total{class=\"UnsupportedMedia\",reason=\"request.unsupported_media\"} 1",
        "# TYPE dynamo_frontend_active_requests gauge",
        "dynamo_frontend_active_requests{model=\"unknown_model\"} 0",
        "# TYPE dynamo_frontend_queued_requests gauge",
        "dynamo_frontend_queued_requests{model=\"qwen3-mock\"} 0",
        "dynamo_frontend_queued_requests{model=\"unknown_model\"} 0",
        "dynamo_frontend_inflight_requests{model=\"qwen3-mock\"} 0",
        "# TYPE dynamo_frontend_disconnected_clients gauge",
        "dynamo_frontend_disconnected_clients 1",
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"cancelled\",model=\"qwen3-mock\",request_type=\"stream\",status=\"error\"} 1",
        "# TYPE dynamo_frontend_tokenizer_latency_ms histogram",
        "dynamo_frontend_tokenizer_latency_ms_count{operation=\"tokenize\"} 3",
        "dynamo_frontend_tokenizer_latency_ms_count{operation=\"detokenize\"} 3",
        "dynamo_frontend_tokenizer_latency_ms_bucket{operation=\"tokenize\",le=\"+Inf\"} 3",
    ]
    .iter()
    .map(|l| l.to_string())
    .collect();
    // The mock worker's card: runtime_config context_length 0, 16384 blocks of 64 tokens, 256
    // sequences, 8192 batched tokens; the frontend's --migration-limit 0.
    for (family, v) in [
        ("context_length", 0),
        ("kv_cache_block_size", 64),
        ("max_num_batched_tokens", 8192),
        ("max_num_seqs", 256),
        ("migration_limit", 0),
        ("ready", 1),
        ("total_kv_blocks", 16384),
    ] {
        want.push(format!("# TYPE dynamo_frontend_model_{family} gauge"));
        want.push(format!("dynamo_frontend_model_{family}{{model=\"qwen3-mock\"}} {v}"));
    }
    assert_lines(&text, &want);
    assert!(!text.contains("model_ready{model=\"unknown_model\"}"), "only served models have card gauges");
}

/// Two workers: round-robin spreads requests over both; a request naming a worker (header
/// or `nvext.backend_instance_id`) goes to that one; an unknown name is a 400.
#[test]
fn round_robin_and_pinned_workers() {
    let s = setup("routing");
    let dir = common::qwen3_dir();
    let second = MockWorker::start(MockConfig {
        fast: true,
        script: Some(s.script.clone()),
        model_name: "qwen3-mock".into(),
        model_dir: Some(dir),
        ..MockConfig::default()
    })
    .unwrap();
    second.register_file(&s._store.0).unwrap();
    wait_instances(&s, 2);
    let msg =
        serde_json::json!({"model": "qwen3-mock", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
    let (a0, b0) = (s.worker.stats().completed, second.stats().completed);
    // Round-robin is per shard; 8 requests on one connection land on one shard.
    let mut c = Client::connect(s.server.as_ref().unwrap().addr);
    let body = msg.to_string();
    for _ in 0..8 {
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(c.roundtrip(req.as_bytes()).status, 200);
    }
    let wait = |w: &MockWorker, n: u64| {
        let t0 = Instant::now();
        while w.stats().completed < n && t0.elapsed() < Duration::from_secs(5) {
            std::thread::sleep(Duration::from_millis(5));
        }
        w.stats().completed
    };
    assert_eq!(wait(&s.worker, a0 + 4) - a0, 4, "round-robin gives each worker half");
    assert_eq!(wait(&second, b0 + 4) - b0, 4);

    let pinned = second.instance_id();
    for _ in 0..3 {
        let req = format!(
            "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nx-worker-instance-id: {pinned}\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        );
        assert_eq!(c.roundtrip(req.as_bytes()).status, 200);
    }
    let mut nv = msg.clone();
    nv["nvext"] = serde_json::json!({"backend_instance_id": pinned});
    assert_eq!(post(&s, "/v1/chat/completions", &nv).status, 200);
    assert_eq!(wait(&second, b0 + 8) - b0, 8, "pinned requests all went to the named worker");
    assert_eq!(s.worker.stats().completed - a0, 4);
    nv["nvext"] = serde_json::json!({"backend_instance_id": 12345});
    assert_eq!(post(&s, "/v1/chat/completions", &nv).status, 400);
}

/// `DYN_DISABLE_FRONTEND_NVEXT`: the worker a request names (header or
/// `nvext.backend_instance_id`) is not read, as in 1.6.1: requests naming one worker are
/// spread over both, and a name no worker has is no error.
#[test]
fn disabled_nvext_ignores_named_workers() {
    let mock = |_| MockConfig {
        fast: true,
        model_name: "qwen3-mock".into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    let s = common::stack::Stack::start_many(
        "nvext-off",
        vec![mock(0), mock(1)],
        &[],
        &[("DYN_DISABLE_FRONTEND_NVEXT", "true")],
    );
    let t0 = Instant::now();
    while s.worker.stats().completed + s.others[0].stats().completed < 8 {
        let n = s.worker.stats().completed + s.others[0].stats().completed;
        assert!(t0.elapsed() < Duration::from_secs(20), "only {n} requests ended");
        let pinned = s.others[0].instance_id();
        let body = serde_json::json!({"model": "qwen3-mock", "max_tokens": 2,
            "messages": [{"role": "user", "content": "hi"}],
            "nvext": {"backend_instance_id": pinned, "annotations": ["a"]}})
        .to_string();
        // One connection, one shard: its round-robin alternates the two workers.
        let mut c = Client::connect(s.addr());
        for header in [format!("x-dynamo-worker-instance-id: {pinned}"), "x-worker-instance-id: 12345".into()] {
            let req = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n{header}\r\nContent-Length: {}\r\n\r\n{body}",
                body.len()
            );
            let r = c.roundtrip(req.as_bytes());
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        }
    }
    assert!(s.worker.stats().completed >= 2, "the worker not named got none of the requests");
    assert!(s.others[0].stats().completed >= 2);
}

/// Waits until `/health` lists `n` instances and every shard has the snapshot.
fn wait_instances(s: &Setup, n: usize) {
    let t0 = Instant::now();
    loop {
        let h = Client::connect(s.server.as_ref().unwrap().addr).roundtrip(b"GET /health HTTP/1.1\r\n\r\n");
        if h.json()["instances"].as_array().is_some_and(|i| i.len() == n) {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(10), "/health never listed {n} instances");
        std::thread::sleep(Duration::from_millis(50));
    }
    // Shards swap snapshots between requests; give the others a moment.
    std::thread::sleep(Duration::from_millis(300));
}

/// Registers, next to `s.worker`, a worker that is dead (its records stay, as after a
/// SIGKILL, but nothing listens at its address). Returns its instance id.
fn register_dead_worker(s: &Setup) -> u64 {
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    register_copy(s, dead_port, 0x5a5a)
}

/// Registers a copy of `s.worker`'s records for a worker listening on `port` (instance id
/// `s.worker`'s xor `salt`), waits until it is served and returns its instance id.
fn register_copy(s: &Setup, port: u16, salt: u64) -> u64 {
    let id = s.worker.instance_id() ^ salt;
    let live = s.worker.instance_id();
    for bucket in ["v1/instances", "v1/mdc"] {
        let dir = s._store.0.join(bucket);
        let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
        let text = std::fs::read_to_string(&file).unwrap();
        let text = text
            .replace(&format!("{live:x}"), &format!("{id:x}"))
            .replace(&live.to_string(), &id.to_string())
            .replace(&s.worker.addr().port().to_string(), &port.to_string());
        let name = file.file_name().unwrap().to_string_lossy().replace(&format!("{live:x}"), &format!("{id:x}"));
        std::fs::write(dir.join(name), text).unwrap();
    }
    wait_instances(s, 2);
    id
}

/// A worker whose records are still live but whose process is gone (SIGKILL within the
/// TTL): every request still succeeds, on the other worker, and the dead one is inhibited.
#[test]
fn dead_worker_is_skipped_and_requests_retried() {
    let s = setup("failover");
    let dead = register_dead_worker(&s);
    let before = s.worker.stats().completed;
    let msg =
        serde_json::json!({"model": "qwen3-mock", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]});
    let mut streamed = msg.clone();
    streamed["stream"] = true.into();
    // Fresh connections spread over both shards; each shard meets the dead worker at most once.
    for _ in 0..6 {
        let r = post(&s, "/v1/chat/completions", &msg);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert_eq!(sse_events(s.server.as_ref().unwrap().addr, &streamed).last().map(String::as_str), Some("[DONE]"));
    }
    let t0 = Instant::now();
    while s.worker.stats().completed < before + 12 && t0.elapsed() < Duration::from_secs(5) {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(s.worker.stats().completed - before, 12, "every request ended on the live worker");
    // Pinned to the dead worker: nothing else may serve it, so a clean 503.
    let mut nv = msg.clone();
    nv["nvext"] = serde_json::json!({"backend_instance_id": dead});
    let r = post(&s, "/v1/chat/completions", &nv);
    assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["error"]["type"], "service_unavailable");
    // Every move to another worker is timed: the first ones continued, the pinned one could not.
    let text = scrape(&s);
    let value = |line: &str| -> u64 {
        text.lines().find_map(|l| l.strip_prefix(line)).map_or(0, |v| v.trim().parse().unwrap())
    };
    let moved = value("dynamo_frontend_model_migration_total{migration_type=\"new_request\",model=\"qwen3-mock\"}");
    let timed = |outcome: &str| {
        value(&format!("dynamo_frontend_model_migration_duration_seconds_count{{migration_type=\"new_request\",model=\"qwen3-mock\",outcome=\"{outcome}\"}}"))
    };
    assert!(moved >= 2, "{text}");
    assert_eq!(timed("failure"), 1, "{text}");
    assert_eq!(timed("success") + timed("failure"), moved, "{text}");
}

/// Only a dead worker: a clean 503 at once, never a hang.
#[test]
fn only_dead_workers_is_a_clean_503() {
    let mut s = setup("alldead");
    register_dead_worker(&s);
    s.worker.stop(); // deletes the live worker's records; the dead one's stay
    wait_instances(&s, 1);
    let msg = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": "hi"}]});
    for _ in 0..3 {
        let r = post(&s, "/v1/chat/completions", &msg);
        assert_eq!(r.status, 503, "{}", String::from_utf8_lossy(&r.body));
        let m = r.json()["message"].as_str().unwrap_or_default().to_string();
        assert!(
            m == "Service temporarily unavailable"
                || m.starts_with("Model `qwen3-mock` is not ready to serve requests yet. The deployment may still"),
            "{m}"
        );
    }
}

/// The worker dies after the first tokens went out: the stream ends with an SSE error event
/// and `[DONE]`, as 1.6.1 ends it without migration.
#[test]
fn worker_death_mid_stream_ends_with_an_error_event() {
    let mut s = setup_with(
        "midstream",
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(100), ..MockConfig::default() },
    );
    let addr = s.server.as_ref().unwrap().addr;
    let msg =
        serde_json::json!({"model": "qwen3-mock", "stream": true, "messages": [{"role": "user", "content": "hi"}]});
    let reader = std::thread::spawn(move || sse_events(addr, &msg));
    // Let a few tokens through, then kill the worker's connections.
    let t0 = Instant::now();
    while s.worker.stats().frames == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(5));
    }
    std::thread::sleep(Duration::from_millis(350));
    s.worker.stop();
    let events = reader.join().unwrap();
    assert_eq!(events.last().map(String::as_str), Some("[DONE]"), "{events:?}");
    let err: serde_json::Value = serde_json::from_str(&events[events.len() - 2]).unwrap();
    assert_eq!(err["error"]["code"], 503, "{events:?}");
    assert_eq!(err["error"]["message"], "Service temporarily unavailable");
    let first: serde_json::Value = serde_json::from_str(&events[0]).unwrap();
    assert_eq!(first["object"], "chat.completion.chunk", "tokens went out before the failure");
}

/// POSTs a one-turn chat for `model` on a fresh connection.
fn chat_hi(addr: std::net::SocketAddr, model: &str) -> common::Resp {
    let body = serde_json::json!({"model": model, "messages": [{"role": "user", "content": "hi"}]}).to_string();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr).roundtrip(req.as_bytes())
}

/// `--discovery-backend etcd` against a real etcd: a worker registered under its lease is
/// served, and leaves `/v1/models` when it stops (deletes its keys, revokes its lease).
#[test]
fn etcd_discovery_serves_a_worker_until_it_stops() {
    use switchyard::discovery::etcd::EtcdView;
    let etcd = common::etcd::Etcd::start();
    let files = ModelFiles::load(common::qwen3_dir()).unwrap();
    let script = files.tokenizer().unwrap().encode(ANSWER).unwrap();
    let cfg = MockConfig {
        fast: true,
        script: Some(script),
        model_name: "qwen3-etcd".into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    let (mut worker, reg) = MockWorker::start_etcd(cfg, &etcd.endpoint()).unwrap();
    assert_eq!(reg.lease_id as u64, worker.instance_id());
    let (server, control) = frontend(Backend::Etcd(Box::new(EtcdView::start(&etcd.endpoint()).unwrap())));
    let r = chat_hi(server.addr, "qwen3-etcd");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["choices"][0]["message"]["content"], ANSWER);
    let h = Client::connect(server.addr).roundtrip(b"GET /health HTTP/1.1\r\n\r\n").json();
    assert_eq!(h["instances"][0]["instance_id"], worker.instance_id());
    worker.stop();
    assert!(wait_models(server.addr, |ids| ids.is_empty()), "the stopped worker's model stayed listed");
    control.stop();
    server.shutdown();
}

/// `--discovery-backend mem`: the embedded workers serve their scripted answer.
#[test]
fn embedded_workers_answer_through_mem_discovery() {
    let cfg = switchyard::config::Embedded { workers: 2, model_path: qwen3_dir(), fast: false };
    let embedded = switchyard::worker::embedded::start(&cfg).unwrap();
    assert_eq!(embedded.model, "qwen3");
    let (server, control) = frontend(Backend::Mem(embedded.store.clone()));
    let r = chat_hi(server.addr, "qwen3");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["choices"][0]["message"]["content"], switchyard::worker::embedded::ANSWER);
    let h = Client::connect(server.addr).roundtrip(b"GET /health HTTP/1.1\r\n\r\n").json();
    assert_eq!(h["instances"].as_array().map(Vec::len), Some(2));
    drop(embedded); // stops and deregisters both workers
    assert!(wait_models(server.addr, |ids| ids.is_empty()), "the embedded model stayed listed");
    control.stop();
    server.shutdown();
}

/// Serves the files of `dir` over HTTP at `/v1/metadata/.../_base/<name>` (as a worker with
/// `DYN_SYSTEM_PORT` does) and counts the requests. `corrupt` serves altered bytes.
fn serve_card_files(dir: PathBuf, corrupt: bool) -> (u16, Arc<std::sync::atomic::AtomicUsize>) {
    use std::io::{BufRead, BufReader, Write};
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(std::sync::atomic::AtomicUsize::new(0));
    let hits2 = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut line = String::new();
            let mut r = BufReader::new(conn.try_clone().unwrap());
            if r.read_line(&mut line).is_err() {
                continue;
            }
            let name = line.split_whitespace().nth(1).unwrap_or("").rsplit('/').next().unwrap_or("").to_string();
            hits2.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            let (status, mut body) = match std::fs::read(dir.join(&name)) {
                Ok(b) => ("200 OK", b),
                Err(_) => ("404 Not Found", Vec::new()),
            };
            if corrupt {
                body.push(b' ');
            }
            let _ = write!(conn, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = conn.write_all(&body);
        }
    });
    (port, hits)
}

/// Rewrites the worker's card: a new display name and every file slot a URL on `port`.
fn card_over_http(s: &Setup, name: &str, port: u16) {
    let dir = s._store.0.join("v1/mdc");
    let file = std::fs::read_dir(&dir).unwrap().next().unwrap().unwrap().path();
    let mut card: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    card["card_json"]["display_name"] = name.into();
    for slot in ["model_info", "tokenizer", "prompt_formatter", "gen_config"] {
        if let Some(kinds) = card["card_json"][slot].as_object_mut() {
            for f in kinds.values_mut() {
                let base = f["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
                f["path"] =
                    format!("http://127.0.0.1:{port}/v1/metadata/dynamo/backend/generate/{name}/_base/{base}").into();
            }
        }
    }
    std::fs::write(&file, serde_json::to_vec(&card).unwrap()).unwrap();
}

/// Card files served by the worker over HTTP are downloaded once, verified, and served
/// from; a file whose checksum does not match keeps the model out.
#[test]
fn card_files_over_http_are_fetched_and_verified() {
    let s = setup("cardurl");
    let addr = s.server.as_ref().unwrap().addr;
    let name = format!("qwen3-url-{}", std::process::id());
    let (port, hits) = serve_card_files(common::qwen3_dir(), false);
    card_over_http(&s, &name, port);
    assert!(wait_models(addr, |ids| ids == [name.as_str()]), "the URL card was not served");
    let r = chat_hi(addr, &name);
    assert_eq!(r.json()["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(hits.load(std::sync::atomic::Ordering::SeqCst), 4, "each of the 4 files fetched once");
    // A corrupted file: the card is refused, its model not listed.
    let bad = format!("qwen3-bad-{}", std::process::id());
    let (port, hits) = serve_card_files(common::qwen3_dir(), true);
    card_over_http(&s, &bad, port);
    let t0 = Instant::now();
    while hits.load(std::sync::atomic::Ordering::SeqCst) == 0 && t0.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(20));
    }
    assert!(wait_models(addr, |ids| ids.is_empty()), "a card with a checksum mismatch was served");
    assert_eq!(chat_hi(addr, &bad).status, 404);
    let cache = switchyard::discovery::cardfiles::default_cache().join("by-slug");
    for n in [&name, &bad] {
        let _ = std::fs::remove_dir_all(cache.join(n));
    }
}

/// What the mock worker sends for the `i`-th token with `n` alternatives (its documented
/// rule: `-(i+1)/8` for the token, then ids 13, 14, … one nat less likely each), rendered
/// the way 1.6.1 renders logprobs with token texts decoded by the frontend.
fn expected_logprobs(s: &Setup, n: u32) -> (serde_json::Value, serde_json::Value) {
    use serde_json::json;
    let tok = ModelFiles::load(common::qwen3_dir()).unwrap().tokenizer().unwrap();
    let text = |id: u32| tok.decode(&[id], false).unwrap();
    let bytes = |t: &str| json!(t.as_bytes());
    let (mut content, mut tokens, mut lps, mut tops) = (vec![], vec![], vec![], vec![]);
    for (i, &id) in s.script.iter().enumerate() {
        let lp = -((i % 64) as f64 + 1.0) / 8.0;
        let alts: Vec<(String, f64)> =
            (0..n).map(|r| (text(if r == 0 { id } else { 12 + r }), lp - f64::from(r))).collect();
        let t = text(id);
        content.push(json!({
            "token": t, "logprob": lp, "token_id": id, "bytes": bytes(&t),
            "top_logprobs": alts.iter().map(|(a, l)| json!({"token": a, "logprob": l, "bytes": bytes(a)})).collect::<Vec<_>>(),
        }));
        let mut map = serde_json::Map::new();
        for (a, l) in &alts {
            map.entry(a.clone()).or_insert(json!(l));
        }
        tops.push(serde_json::Value::Object(map));
        tokens.push(json!(t));
        lps.push(json!(lp));
    }
    let chat = json!({"content": content, "refusal": null});
    let completion = json!({"tokens": tokens, "token_logprobs": lps, "top_logprobs": tops, "text_offset": []});
    (chat, completion)
}

#[test]
fn logprobs_whole_and_streamed() {
    let s = setup("logprobs");
    let addr = s.server.as_ref().unwrap().addr;
    let (want_chat, want_cmpl) = expected_logprobs(&s, 2);
    let chat = serde_json::json!({"model": "qwen3-mock", "logprobs": true, "top_logprobs": 2,
        "messages": [{"role": "user", "content": "Hello there"}]});
    let r = post(&s, "/v1/chat/completions", &chat);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["choices"][0]["message"]["content"], ANSWER);
    assert_eq!(v["choices"][0]["logprobs"], want_chat);
    let raw = String::from_utf8(r.body.clone()).unwrap();
    assert!(
        raw.contains(r#""finish_reason":"stop","logprobs":{"content":[{"token":"Hello","logprob":-0.125,"token_id":"#),
        "{raw}"
    );

    // Streamed: every text chunk carries the logprobs of its tokens, in order.
    let mut streamed = chat.clone();
    streamed["stream"] = true.into();
    let events = sse_events(addr, &streamed);
    let mut content = Vec::new();
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        let c = &v["choices"][0];
        if c["delta"]["content"].is_string() {
            assert!(c["logprobs"]["content"].is_array(), "{e}");
            assert_eq!(c["logprobs"]["refusal"], serde_json::Value::Null);
        }
        if let Some(items) = c["logprobs"]["content"].as_array() {
            content.extend(items.iter().cloned());
        }
    }
    assert_eq!(serde_json::Value::Array(content), want_chat["content"]);

    let cmpl = serde_json::json!({"model": "qwen3-mock", "prompt": "Once upon a time", "logprobs": 2});
    let r = post(&s, "/v1/completions", &cmpl);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["choices"][0]["text"], ANSWER);
    assert_eq!(v["choices"][0]["logprobs"], want_cmpl);
    let raw = String::from_utf8(r.body.clone()).unwrap();
    assert!(raw.contains(r#""index":0,"logprobs":{"tokens":["Hello","#), "{raw}");

    let mut streamed = cmpl.clone();
    streamed["stream"] = true.into();
    let events = sse_events_at(addr, "/v1/completions", "", &streamed);
    let (mut tokens, mut lps, mut tops) = (vec![], vec![], vec![]);
    for e in &events[..events.len() - 1] {
        let v: serde_json::Value = serde_json::from_str(e).unwrap();
        let lp = &v["choices"][0]["logprobs"];
        if v["choices"][0]["text"].as_str().is_some_and(|t| !t.is_empty()) {
            assert_eq!(lp["text_offset"], serde_json::json!([]), "{e}");
        }
        for (key, into) in [("tokens", &mut tokens), ("token_logprobs", &mut lps), ("top_logprobs", &mut tops)] {
            into.extend(lp[key].as_array().into_iter().flatten().cloned());
        }
    }
    assert_eq!(serde_json::Value::Array(tokens), want_cmpl["tokens"]);
    assert_eq!(serde_json::Value::Array(lps), want_cmpl["token_logprobs"]);
    assert_eq!(serde_json::Value::Array(tops), want_cmpl["top_logprobs"]);

    // Not asked: no logprobs from the worker, `null` / absent as before.
    let r = post(&s, "/v1/completions", &serde_json::json!({"model": "qwen3-mock", "prompt": "Once"}));
    assert!(!String::from_utf8_lossy(&r.body).contains("logprobs"));
}

/// A `model_input = Text` worker: the request object goes out as the client sent it (the
/// mock reports its compact JSON length as `prompt_tokens`), the worker's OpenAI chunks come
/// back in Dynamo's shapes with the worker's `id`, `created` and `usage`.
#[test]
fn text_model_requests_are_forwarded_and_relayed() {
    use serde_json::{json, Value};
    let cfg = MockConfig { fast: true, model_input: switchyard::worker::MockInput::Text, ..MockConfig::default() };
    let s = setup_with("text", cfg);
    let addr = s.server.as_ref().unwrap().addr;
    let toks: Vec<String> = s.script.iter().take(3).map(|t| format!(" tok{t}")).collect();
    let usage = |body: &Value| {
        let n = body.to_string().len();
        format!(
            r#"{{"prompt_tokens":{n},"completion_tokens":3,"total_tokens":{},"prompt_tokens_details":{{"audio_tokens":null,"cached_tokens":0}}}}"#,
            n + 3
        )
    };
    let id_created = |first: &str| {
        let v: Value = serde_json::from_str(first).unwrap();
        (v["id"].as_str().unwrap().to_owned(), v["created"].as_u64().unwrap())
    };

    let whole = |path: &str, body: &Value| {
        let r = post(&s, path, body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let raw = String::from_utf8(r.body.clone()).unwrap();
        let (id, created) = id_created(&raw);
        (raw, id, created)
    };

    // Chat, streamed: one event per worker chunk, then [DONE].
    let body = json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": "Hi"}], "max_tokens": 3,
        "stream": true, "temperature": 0.5});
    let events = sse_events(addr, &body);
    let (id, created) = id_created(&events[0]);
    assert!(id.starts_with("chatcmpl-"), "{id}");
    let chunk = |delta: String, finish: &str, tail: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"delta":{delta},"finish_reason":{finish},"logprobs":null}}],"created":{created},"model":"qwen3-mock","object":"chat.completion.chunk"{tail}}}"#
        )
    };
    let want = vec![
        chunk(format!(r#"{{"content":"{}","role":"assistant"}}"#, toks[0]), "null", ""),
        chunk(format!(r#"{{"content":"{}"}}"#, toks[1]), "null", ""),
        chunk(format!(r#"{{"content":"{}"}}"#, toks[2]), "null", ""),
        chunk("{}".into(), r#""length""#, &format!(r#","usage":{}"#, usage(&body))),
        "[DONE]".to_owned(),
    ];
    assert_eq!(events, want);

    // Chat, whole: the chunks folded into one chat.completion.
    let body = json!({"model": "qwen3-mock", "max_tokens": 3, "messages": [{"role": "user", "content": "Hi"}]});
    let (raw, id, created) = whole("/v1/chat/completions", &body);
    assert_eq!(
        raw,
        format!(
            r#"{{"id":"{id}","choices":[{{"index":0,"message":{{"content":"{}","refusal":null,"role":"assistant"}},"finish_reason":"length","logprobs":null}}],"created":{created},"model":"qwen3-mock","object":"chat.completion","usage":{}}}"#,
            toks.concat(),
            usage(&body)
        )
    );

    // Completions, streamed.
    let body = json!({"model": "qwen3-mock", "prompt": "Once upon a time", "max_tokens": 3, "stream": true});
    let events = sse_events_at(addr, "/v1/completions", "", &body);
    let (id, created) = id_created(&events[0]);
    assert!(id.starts_with("cmpl-"), "{id}");
    let chunk = |choice: String, usage: &str| {
        format!(
            r#"{{"id":"{id}","choices":[{choice}],"created":{created},"model":"qwen3-mock","system_fingerprint":null,"object":"text_completion","usage":{usage}}}"#
        )
    };
    let want = vec![
        chunk(format!(r#"{{"text":"{}","index":0}}"#, toks[0]), "null"),
        chunk(format!(r#"{{"text":"{}","index":0}}"#, toks[1]), "null"),
        chunk(format!(r#"{{"text":"{}","index":0}}"#, toks[2]), "null"),
        chunk(r#"{"text":"","index":0,"finish_reason":"length"}"#.into(), &usage(&body)),
        "[DONE]".to_owned(),
    ];
    assert_eq!(events, want);

    // Completions, whole.
    let body = json!({"prompt": "Once upon a time", "model": "qwen3-mock", "max_tokens": 3});
    let (raw, id, created) = whole("/v1/completions", &body);
    assert_eq!(
        raw,
        format!(
            r#"{{"id":"{id}","choices":[{{"text":"{}","index":0,"finish_reason":"length"}}],"created":{created},"model":"qwen3-mock","system_fingerprint":null,"object":"text_completion","usage":{}}}"#,
            toks.concat(),
            usage(&body)
        )
    );

    // Validation still applies before anything is forwarded.
    let r = post(&s, "/v1/completions", &json!({"model": "qwen3-mock", "prompt": ""}));
    assert_eq!(r.status, 400);
}

/// A worker that answers every request with `items` (`Annotated.data` values), as a Python
/// worker yields them; returns its port.
fn replay_worker(items: Vec<serde_json::Value>) -> u16 {
    scripted_worker(items, Ending::Complete)
}

/// How a scripted worker ends its answers.
#[derive(Clone, Copy, PartialEq)]
enum Ending {
    /// `complete_final` and the sentinel, as a worker should.
    Complete,
    /// Bytes that are no frame at all, then the connection held open.
    Garbage,
    /// The connection closed without `complete_final` (a worker that dies).
    Close,
}

/// [`replay_worker`] with the answers ended by `ending`.
fn scripted_worker(items: Vec<serde_json::Value>, ending: Ending) -> u16 {
    use bytes::BytesMut;
    use std::io::{Read, Write};
    use switchyard::plane::*;
    let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = l.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for mut conn in l.incoming().flatten() {
            let items = items.clone();
            std::thread::spawn(move || {
                let (decoder, mut buf, mut chunk) = (RequestFrameDecoder::default(), BytesMut::new(), [0u8; 4096]);
                while let Ok(n @ 1..) = conn.read(&mut chunk) {
                    buf.extend_from_slice(&chunk[..n]);
                    while let Ok(Decoded::Frame(frame)) = decoder.decode(&mut buf) {
                        let mut out = Vec::new();
                        encode_ack(&mut out, &Ack::Accepted);
                        conn.write_all(&out).unwrap();
                        let tp = frame.two_part(DEFAULT_MAX_MESSAGE_SIZE).unwrap();
                        let ctl = RequestControlMessage::from_json(tp.header).unwrap();
                        let info = ctl.connection_info.tcp_info().unwrap();
                        let mut s = Vec::new();
                        let hs = CallHomeHandshake { subject: info.subject, stream_type: StreamType::Response };
                        encode_handshake(&mut s, &hs).unwrap();
                        encode_prologue(&mut s, &StreamPrologue { error: None }).unwrap();
                        for item in &items {
                            encode_item(&mut s, ctl.payload_codec, &Annotated::from_data(item.clone())).unwrap();
                        }
                        match ending {
                            Ending::Complete => {
                                encode_complete_final(&mut s, ctl.payload_codec).unwrap();
                                encode_control(&mut s, ControlMessage::Sentinel);
                            }
                            Ending::Garbage => s.extend_from_slice(&[0xff; 64]),
                            Ending::Close => {}
                        }
                        let mut back = std::net::TcpStream::connect(&info.address).unwrap();
                        back.write_all(&s).unwrap();
                        if ending != Ending::Close {
                            let _ = back.read(&mut chunk); // until the frontend closes
                        }
                    }
                }
            });
        }
    });
    port
}

/// The captured answers of 1.6.1 to a Python worker's logprobs (`p_lp`, `p_lp2`), replayed:
/// same worker frames in, same body out (but for the response id, timestamp and model name).
#[test]
fn logprobs_match_the_captured_dynamo_answers() {
    let s = setup("lpcapture");
    let v: serde_json::Value = serde_json::from_str(include_str!("data/plane/p_lp_logprobs.json")).unwrap();
    let id = register_copy(&s, replay_worker(v["items"].as_array().unwrap().clone()), 0x1717);
    let pinned = |path: &str, body: &serde_json::Value| pinned_post(&s, id, path, body);
    let (raw, id, created) = pinned("/v1/chat/completions", &v["chat_request"]);
    let want = v["chat_body"]
        .as_str()
        .unwrap()
        .replace("chatcmpl-aa6af499-d480-44c9-abe8-2ac4a98342f8", &id)
        .replace("1795295946", &created)
        .replace(r#""model":"probe""#, r#""model":"qwen3-mock""#);
    assert_eq!(raw, want);

    let (raw, _, created) = pinned("/v1/completions", &v["completion_request"]);
    let got: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(got["choices"][0]["text"], "alpha beta");
    assert_eq!(got["choices"][0]["logprobs"]["top_logprobs"][1], serde_json::json!({" beta": -0.5, ".": -1.5}));
    // Same length as 1.6.1's body once the model name and timestamp are accounted for.
    let want_len = v["completion_body_len"].as_u64().unwrap() as usize + "qwen3-mock".len() - "probe".len();
    assert_eq!(raw.len(), want_len + created.len() - 10, "{raw}");
}

/// POST `body` (its model renamed to the served one) pinned to worker `worker`; returns the
/// 200 body with its `id` and `created`.
fn pinned_post(s: &Setup, worker: u64, path: &str, body: &serde_json::Value) -> (String, String, String) {
    let mut body = body.clone();
    body["model"] = "qwen3-mock".into();
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nx-dynamo-worker-instance-id: {worker}\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let r = Client::connect(s.server.as_ref().unwrap().addr).roundtrip(req.as_bytes());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let raw = String::from_utf8(r.body).unwrap();
    let got: serde_json::Value = serde_json::from_str(&raw).unwrap();
    (raw, got["id"].as_str().unwrap().to_owned(), got["created"].to_string())
}

/// The captured answers of 1.6.1 to a Text worker's chunks (`ptext1`, `ptext2`), replayed.
#[test]
fn text_chunks_match_the_captured_dynamo_answers() {
    let cfg = MockConfig { fast: true, model_input: switchyard::worker::MockInput::Text, ..MockConfig::default() };
    let s = setup_with("textcapture", cfg);
    let v: serde_json::Value = serde_json::from_str(include_str!("data/plane/ptext_chunks.json")).unwrap();
    let id = register_copy(&s, replay_worker(v["items"].as_array().unwrap().clone()), 0x2929);
    let mut body = v["stream_request"].clone();
    body["model"] = "qwen3-mock".into();
    let headers = format!("x-dynamo-worker-instance-id: {id}\r\n");
    let events = sse_events_at(s.server.as_ref().unwrap().addr, "/v1/chat/completions", &headers, &body);
    assert_eq!(serde_json::json!(events), v["events"]);

    let (raw, _, _) = pinned_post(&s, id, "/v1/chat/completions", &v["whole_request"]);
    assert_eq!(raw.len(), v["whole_body_len"].as_u64().unwrap() as usize, "{raw}");
    let got: serde_json::Value = serde_json::from_str(&raw).unwrap();
    assert_eq!(got["choices"][0]["message"]["content"], "Hi there!");
    assert_eq!(got["usage"], serde_json::json!({"prompt_tokens": 3, "completion_tokens": 3, "total_tokens": 6}));
}

/// A frontend configured by `cfg` (`--router-mode kv`) with its event-ingest thread, as
/// `main` starts them, watching `backend`.
fn kv_frontend(cfg: &Arc<switchyard::config::Config>, backend: Backend) -> (Server, Control, Ingest) {
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let (ingest, installs, _) =
        Ingest::start_serving(server.drivers.len(), cfg.kv_approximate(), cfg.kv_predicted_ttl, None, false).unwrap();
    server.install_kv(installs);
    let control = Control::start_with_kv(cfg, &server, backend, Some(ingest.sender())).unwrap();
    (server, control, ingest)
}

/// `--router-mode kv --no-router-kv-events`: no KV events at all (the embedded workers
/// publish none); the router predicts the cache from its own decisions, so a repeated prompt
/// finds its blocks on the worker it went to, whichever shard serves it.
#[test]
fn approximate_kv_mode_predicts_the_cache_from_its_own_decisions() {
    let cfg = switchyard::config::Embedded { workers: 3, model_path: qwen3_dir(), fast: true };
    let embedded = switchyard::worker::embedded::start(&cfg).unwrap();
    let fcfg = frontend_config(&["--router-mode", "kv", "--no-router-kv-events", "--router-ttl-secs", "60"]);
    assert_eq!(fcfg.kv_approximate_ttl, Some(Duration::from_secs(60)));
    let (server, control, ingest) = kv_frontend(&fcfg, Backend::Mem(embedded.store.clone()));
    assert!(wait_models(server.addr, |ids| !ids.is_empty()));
    // A prompt of many full blocks, sent on fresh connections (spread over both shards).
    let long: String = (0..120).map(|i| format!("word{i} ")).collect();
    let body = serde_json::json!({"model": "qwen3", "messages": [{"role": "user", "content": long}], "max_tokens": 4});
    let decisions = |text: &str| -> Vec<(String, u64)> {
        text.lines()
            .filter(|l| l.starts_with("switchyard_kv_router_decisions_total{"))
            .map(|l| (l.split('"').nth(1).unwrap().to_string(), l.split(' ').next_back().unwrap().parse().unwrap()))
            .collect()
    };
    for _ in 0..6 {
        let r = post_at(server.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        std::thread::sleep(Duration::from_millis(30));
    }
    let text = scrape_at(server.addr);
    let d = decisions(&text);
    assert_eq!(d.iter().map(|(_, n)| n).sum::<u64>(), 6, "{d:?}");
    assert_eq!(d.len(), 1, "every repeat went to the worker the first one predicted: {d:?}");
    // The first request found nothing; each repeat found all of the prompt's full blocks.
    let (overlap, prompt) = (
        counter(&text, "switchyard_kv_router_overlap_blocks_total"),
        counter(&text, "switchyard_kv_router_prompt_blocks_total"),
    );
    assert!(prompt >= 6 * 4, "a prompt of several blocks: {prompt} blocks over 6 requests");
    assert_eq!(overlap, prompt / 6 * 5, "the repeats found the predicted blocks");
    control.stop();
    server.shutdown();
    drop(ingest);
}

/// `--router-predicted-ttl-secs`: with KV events on (the embedded workers publish none), each
/// decision is remembered in the side index for the TTL: repeats find the prompt on the
/// worker the first went to, whichever shard serves them; once the TTL is over, nothing.
#[test]
fn predicted_ttl_remembers_decisions_for_its_ttl_only() {
    let cfg = switchyard::config::Embedded { workers: 3, model_path: qwen3_dir(), fast: true };
    let embedded = switchyard::worker::embedded::start(&cfg).unwrap();
    let fcfg = frontend_config(&["--router-mode", "kv", "--router-predicted-ttl-secs", "0.5"]);
    assert_eq!(fcfg.kv_predicted_ttl, Some(Duration::from_millis(500)));
    let (server, control, ingest) = kv_frontend(&fcfg, Backend::Mem(embedded.store.clone()));
    assert!(wait_models(server.addr, |ids| !ids.is_empty()));
    let long: String = (0..120).map(|i| format!("word{i} ")).collect();
    let body = serde_json::json!({"model": "qwen3", "messages": [{"role": "user", "content": long}], "max_tokens": 4});
    let send = || {
        let r = post_at(server.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    };
    let counts = || {
        let text = scrape_at(server.addr);
        (
            counter(&text, "switchyard_kv_router_overlap_blocks_total"),
            counter(&text, "switchyard_kv_router_prompt_blocks_total"),
        )
    };
    for _ in 0..4 {
        send();
        std::thread::sleep(Duration::from_millis(30));
    }
    let (overlap, prompt) = counts();
    assert!(prompt >= 4 * 4, "a prompt of several blocks: {prompt} blocks over 4 requests");
    assert_eq!(overlap, prompt / 4 * 3, "the repeats found the predicted blocks");
    // Past the TTL the prediction is gone: the next repeat finds nothing.
    std::thread::sleep(Duration::from_millis(1200));
    send();
    let (after, _) = counts();
    assert_eq!(after, overlap, "nothing found once the TTL is over");
    control.stop();
    server.shutdown();
    drop(ingest);
}

/// `worker_selection` of `--router-policy-config`: an aggregated pool on
/// `dynamo-two-tier-cost-fn` whose cache tier never applies (`cache_threshold: 1.0`) sends
/// every request of an idle deployment to the first least-loaded worker, where the cost
/// function spreads fresh prompts over the emptiest caches.
#[test]
fn a_two_tier_instance_selects_for_the_aggregated_pool() {
    let cfg = switchyard::config::Embedded { workers: 3, model_path: qwen3_dir(), fast: true };
    let embedded = switchyard::worker::embedded::start(&cfg).unwrap();
    let policy = std::env::temp_dir().join(format!("switchyard-two-tier-{}.yaml", std::process::id()));
    std::fs::write(
        &policy,
        "worker_selection:\n  aggregated: tt\n  instances:\n  \
         - {name: tt, type: dynamo-two-tier-cost-fn, parameters: {cache_threshold: 1.0}}\n",
    )
    .unwrap();
    let decisions = |extra: &[&str]| {
        let mut args = vec!["--router-mode", "kv", "--no-router-kv-events", "--router-ttl-secs", "60"];
        args.extend(extra);
        let fcfg = frontend_config(&args);
        let (server, control, ingest) = kv_frontend(&fcfg, Backend::Mem(embedded.store.clone()));
        assert!(wait_models(server.addr, |ids| !ids.is_empty()));
        for i in 0..4 {
            let prompt: String = (0..80).map(|w| format!("prompt{i} word{w} ")).collect();
            let body = serde_json::json!({"model": "qwen3", "messages": [{"role": "user", "content": prompt}], "max_tokens": 2});
            let r = post_at(server.addr, "/v1/chat/completions", &body);
            assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
            // The answer's booking leaves every shard's books (a hop through the ingest
            // thread) before the next request: the deployment is idle again.
            std::thread::sleep(Duration::from_millis(100));
        }
        let text = scrape_at(server.addr);
        let mut per_worker: Vec<u64> = text
            .lines()
            .filter(|l| l.starts_with("switchyard_kv_router_decisions_total{"))
            .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
            .collect();
        per_worker.sort_unstable();
        control.stop();
        server.shutdown();
        drop(ingest);
        per_worker
    };
    let two_tier = decisions(&["--router-policy-config", policy.to_str().unwrap()]);
    assert_eq!(two_tier, [4], "two-tier on an idle deployment: one worker");
    // `thunderagent`: the least booked load, ties to the lowest worker id — one worker too.
    std::fs::write(&policy, "worker_selection:\n  aggregated: ta\n  instances:\n  - {name: ta, type: thunderagent}\n")
        .unwrap();
    let thunder = decisions(&["--router-policy-config", policy.to_str().unwrap()]);
    std::fs::remove_file(&policy).unwrap();
    assert_eq!(thunder, [4], "thunderagent on an idle deployment: one worker");
    let cost = decisions(&[]);
    assert!(cost.len() >= 2 && cost.iter().sum::<u64>() == 4, "the cost function spreads fresh prompts: {cost:?}");
}

/// `--router-track-output-blocks`: answers grow their bookings as they stream, and every
/// block (prompt and output) leaves the books with the answer.
#[test]
fn output_block_tracking_serves_and_leaves_nothing_booked() {
    let cfg = switchyard::config::Embedded { workers: 2, model_path: qwen3_dir(), fast: true };
    let embedded = switchyard::worker::embedded::start(&cfg).unwrap();
    let fcfg = frontend_config(&["--router-mode", "kv", "--router-track-output-blocks"]);
    assert!(fcfg.kv_cost.track_output_blocks);
    let (server, control, ingest) = kv_frontend(&fcfg, Backend::Mem(embedded.store.clone()));
    assert!(wait_models(server.addr, |ids| !ids.is_empty()));
    for osl in [None, Some(20)] {
        let mut body = serde_json::json!({"model": "qwen3", "messages": [{"role": "user", "content": "count"}],
            "max_tokens": 60, "ignore_eos": true, "stream": true});
        if let Some(osl) = osl {
            body["nvext"] = serde_json::json!({"agent_hints": {"osl": osl}});
        }
        let r = post_at(server.addr, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        assert!(String::from_utf8_lossy(&r.body).contains("[DONE]"));
    }
    std::thread::sleep(Duration::from_millis(100));
    let text = scrape_at(server.addr);
    let booked: Vec<&str> =
        text.lines().filter(|l| l.starts_with("switchyard_kv_router_active_blocks{") && !l.ends_with(" 0")).collect();
    assert!(booked.is_empty(), "blocks left booked: {booked:?}");
    control.stop();
    server.shutdown();
    drop(ingest);
}

/// `--router-queue-threshold`: while both workers prefill more than the threshold's share of
/// `max_num_batched_tokens` (8192 on the mock's card), a third request is parked, and goes
/// when one of them answers.
#[test]
fn router_queue_parks_requests_while_every_worker_is_prefill_busy() {
    let dir = qwen3_dir();
    let store = tempdir::Dir(std::env::temp_dir().join(format!("sy-e2e-queue-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&store.0);
    std::fs::create_dir_all(&store.0).unwrap();
    let ttft = Duration::from_millis(1500);
    let start = || {
        let w = MockWorker::start(MockConfig {
            ttft,
            itl: Duration::from_millis(1),
            model_name: "qwen3-mock".into(),
            model_dir: Some(dir.clone()),
            ..MockConfig::default()
        })
        .unwrap();
        w.register_file(&store.0).unwrap();
        w
    };
    let (worker, mut second) = (start(), start());
    let cfg =
        frontend_config(&["--discovery-backend", "file", "--router-mode", "kv", "--router-queue-threshold", "0.1"]);
    let (server, control, ingest) = kv_frontend(&cfg, Backend::File(store.0.clone()));
    assert!(wait_models(server.addr, |ids| !ids.is_empty()));
    let s = Setup { server: Some(server), control: Some(control), worker, _store: store, script: Vec::new() };
    wait_instances(&s, 2);
    let addr = s.server.as_ref().unwrap().addr;
    let chat = move |content: String| {
        std::thread::spawn(move || {
            let body = serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": content}],
                                          "max_tokens": 2});
            let t0 = Instant::now();
            let r = post_at(addr, "/v1/chat/completions", &body);
            (r.status, t0.elapsed())
        })
    };
    // Two prompts of ~1,900 tokens each (> 0.1 × 8192): one per worker, the second steered
    // by the first's booking (given a moment to reach the other shard).
    let long = |tag: &str| (0..500).map(|i| format!("{tag}{i} ")).collect::<String>();
    let a = chat(long("a"));
    std::thread::sleep(Duration::from_millis(100));
    let b = chat(long("b"));
    std::thread::sleep(Duration::from_millis(200));
    let c = chat("a short one".into());
    let (ra, rb, rc) = (a.join().unwrap(), b.join().unwrap(), c.join().unwrap());
    assert_eq!((ra.0, rb.0, rc.0), (200, 200, 200));
    // Parked ~1.2 s until the first long one answered, then its own 1.5 s.
    assert!(rc.1 >= ttft + Duration::from_millis(900), "the third request was not held back: {:?}", rc.1);
    let text = scrape(&s);
    assert!(
        text.contains("switchyard_kv_router_queued_total 1\n"),
        "{}",
        text.lines().filter(|l| l.contains("queued")).collect::<Vec<_>>().join("\n")
    );
    assert!(text.contains("switchyard_kv_router_queued_requests 0\n"));
    drop(s);
    second.stop();
    drop(ingest);
}

/// A kv-mode frontend (`--router-mode kv` plus `args`) in front of one slow worker (`ttft`
/// to its first token), once the model is listed; the event-ingest thread comes with it.
fn kv_setup(tag: &str, ttft: Duration, args: &[&str]) -> (Setup, Ingest) {
    let store = tempdir::Dir(std::env::temp_dir().join(format!("sy-e2e-{tag}-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&store.0);
    std::fs::create_dir_all(&store.0).unwrap();
    let worker = MockWorker::start(MockConfig {
        ttft,
        itl: Duration::from_millis(1),
        model_name: "qwen3-mock".into(),
        model_dir: Some(qwen3_dir()),
        ..MockConfig::default()
    })
    .unwrap();
    worker.register_file(&store.0).unwrap();
    let mut all = vec!["--discovery-backend", "file", "--router-mode", "kv"];
    all.extend_from_slice(args);
    let cfg = frontend_config(&all);
    let (server, control, ingest) = kv_frontend(&cfg, Backend::File(store.0.clone()));
    assert!(wait_models(server.addr, |ids| !ids.is_empty()));
    (Setup { server: Some(server), control: Some(control), worker, _store: store, script: Vec::new() }, ingest)
}

/// A request parked in the router queue whose client leaves is taken out of the queue at
/// once, never reaches a worker, and counts as cancelled.
#[test]
fn a_parked_request_whose_client_leaves_leaves_the_queue() {
    let (s, ingest) = kv_setup("queue-gone", Duration::from_millis(3000), &["--router-queue-threshold", "0.1"]);
    let addr = s.server.as_ref().unwrap().addr;
    let long = (0..500).map(|i| format!("a{i} ")).collect::<String>();
    let body = |content: &str| serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": content}], "max_tokens": 2});
    // The long prompt keeps the only worker prefill-busy for 3 s; the short one is parked.
    let busy = open_chat(addr, &body(&long));
    std::thread::sleep(Duration::from_millis(200));
    let parked = open_chat(addr, &body("a short one"));
    let queued = |text: &str, n: u32| text.contains(&format!("switchyard_kv_router_queued_requests {n}\n"));
    let t0 = Instant::now();
    while !queued(&scrape(&s), 1) {
        assert!(t0.elapsed() < Duration::from_secs(2), "the short request was not parked");
        std::thread::sleep(Duration::from_millis(10));
    }
    drop(parked);
    let t0 = Instant::now();
    let text = loop {
        let text = scrape(&s);
        if queued(&text, 0) {
            break text;
        }
        assert!(t0.elapsed() < Duration::from_millis(1500), "the parked request stayed in the queue:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    };
    assert_lines(&text, &[
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"cancelled\",model=\"qwen3-mock\",request_type=\"unary\",status=\"error\"} 1".into(),
    ]);
    assert_eq!(s.worker.stats().frames, 1, "the parked request reached the worker");
    drop(busy);
    drop(s);
    drop(ingest);
}

/// Policy classes of `--router-policy-config`: a class waits while the worker is busy by its
/// own threshold, at most its per-worker limit of requests (past it, 529 with 1.6.1's
/// `details`); a request whose `x-dynamo-meta-policy-class` header names an explicit class
/// without thresholds goes at once past the backlog, and so does one of a class that may
/// never wait while it is not busy; the per-class families count it all.
#[test]
fn policy_classes_queue_refuse_and_let_an_explicit_class_pass() {
    let policy = std::env::temp_dir().join(format!("sy-e2e-classes-{}.yaml", std::process::id()));
    std::fs::write(
        &policy,
        "default_policy_family: standard\n\
         uncached_isl_buckets: [{min_tokens: 0, bucket: all}]\n\
         policy_classes:\n\
         \x20 - {name: standard, policy_family: standard, cache_bucket: all, quantum: 1, prefill_busy_threshold: 100,\n\
         \x20    request_queue_limit_per_worker: 1}\n\
         \x20 - {name: vip, quantum: 1000}\n\
         \x20 - {name: batch, quantum: 1, prefill_busy_threshold: 100000, request_queue_limit_per_worker: 0}\n",
    )
    .unwrap();
    let (s, ingest) =
        kv_setup("classes", Duration::from_millis(2500), &["--router-policy-config", policy.to_str().unwrap()]);
    std::fs::remove_file(&policy).unwrap();
    let addr = s.server.as_ref().unwrap().addr;
    let body = |content: &str| serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": content}], "max_tokens": 2});
    let long = (0..500).map(|i| format!("a{i} ")).collect::<String>();
    let send = move |headers: &'static str, content: String| {
        std::thread::spawn(move || {
            let body = body(&content).to_string();
            let req = format!(
                "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\n{headers}Content-Length: {}\r\n\r\n{body}",
                body.len()
            );
            Client::connect(addr).roundtrip(req.as_bytes())
        })
    };
    let gauge = |text: &str, class: &str| {
        let key = format!(
            "dynamo_frontend_router_queue_pending_requests{{model=\"qwen3-mock\",policy_class=\"{class}\",worker_type=\"decode\"}} "
        );
        text.lines().find_map(|l| l.strip_prefix(key.as_str())).map(|n| n.parse::<u64>().unwrap())
    };
    // The long prompt books ~1,500 prefill tokens (> 100): the worker is busy for `standard`.
    let busy = send("", long);
    std::thread::sleep(Duration::from_millis(200));
    let parked = send("", "a short one".into());
    let t0 = Instant::now();
    while gauge(&scrape(&s), "standard") != Some(1) {
        assert!(t0.elapsed() < Duration::from_secs(2), "the short request was not parked:\n{}", scrape(&s));
        std::thread::sleep(Duration::from_millis(10));
    }
    // One waits: the limit (1 per worker, one worker) is met.
    let refused = send("", "another short one".into()).join().unwrap();
    assert_eq!(refused.status, 529, "{}", String::from_utf8_lossy(&refused.body));
    assert_eq!(
        refused.json(),
        serde_json::json!({"message": "router policy class \"standard\" queue requests limit reached (current=1, limit=1)",
            "type": "Overloaded", "code": 529,
            "details": {"policy_class": "standard", "limit_kind": "requests", "current": 1, "limit": 1}})
    );
    // `vip` has no threshold: it goes while `standard` still waits.
    let vip = send("X-Dynamo-Meta-Policy-Class: vip\r\n", "a very important one".into());
    let t0 = Instant::now();
    while s.worker.stats().frames < 2 {
        assert!(t0.elapsed() < Duration::from_secs(2), "the vip request did not reach the worker");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(gauge(&scrape(&s), "standard"), Some(1), "the standard request went before the worker freed");
    // `batch` may never wait (limit 0) and is not busy by its threshold: it goes at once,
    // whatever waits in `standard`.
    let batch = send("X-Dynamo-Meta-Policy-Class: batch\r\n", "a batch one".into());
    let t0 = Instant::now();
    while s.worker.stats().frames < 3 {
        assert!(t0.elapsed() < Duration::from_secs(2), "the batch request did not reach the worker");
        std::thread::sleep(Duration::from_millis(10));
    }
    assert_eq!(gauge(&scrape(&s), "standard"), Some(1), "the standard request went before the worker freed");
    for (name, h) in [("busy", busy), ("parked", parked), ("vip", vip), ("batch", batch)] {
        let r = h.join().unwrap();
        assert_eq!(r.status, 200, "{name}: {}", String::from_utf8_lossy(&r.body));
    }
    let text = scrape(&s);
    assert_eq!((gauge(&text, "standard"), gauge(&text, "vip"), gauge(&text, "batch")), (Some(0), Some(0), Some(0)));
    let labels = |class: &str| format!("model=\"qwen3-mock\",policy_class=\"{class}\"");
    let decode = "worker_type=\"decode\"";
    assert_lines(
        &text,
        &[
            format!("dynamo_frontend_router_admission_received_total{{{},{decode}}} 3", labels("standard")),
            format!("dynamo_frontend_router_admission_received_total{{{},{decode}}} 1", labels("vip")),
            format!(
                "dynamo_frontend_router_queue_backpressure_total{{{},reason=\"request_limit\",{decode}}} 1",
                labels("standard")
            ),
            format!("dynamo_frontend_router_queue_pending_isl_tokens{{{},{decode}}} 0", labels("standard")),
        ],
    );
    drop(s);
    drop(ingest);
}

/// `--router-min-initial-workers 2`: with one worker the model is not served (not listed, a
/// request for it is 404); once a second worker is up it is, and it stays served when a
/// worker goes again.
#[test]
fn a_model_is_served_once_its_minimum_of_workers_is_up() {
    let dir = qwen3_dir();
    let store = tempdir::Dir(std::env::temp_dir().join(format!("sy-e2e-min-workers-{}", std::process::id())));
    let _ = std::fs::remove_dir_all(&store.0);
    std::fs::create_dir_all(&store.0).unwrap();
    let root = store.0.clone();
    let start = || {
        let w = MockWorker::start(MockConfig {
            fast: true,
            model_name: "qwen3-mock".into(),
            model_dir: Some(dir.clone()),
            ..MockConfig::default()
        })
        .unwrap();
        w.register_file(&root).unwrap();
        w
    };
    let worker = start();
    let cfg = frontend_config(&["--discovery-backend", "file", "--router-min-initial-workers", "2"]);
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let control = Control::start(&cfg, &server, Backend::File(store.0.clone())).unwrap();
    let addr = server.addr;
    let s = Setup { server: Some(server), control: Some(control), worker, _store: store, script: Vec::new() };
    std::thread::sleep(Duration::from_millis(1500));
    assert!(wait_models(addr, |ids| ids.is_empty()), "listed with one worker");
    assert_eq!(chat_hi(addr, "qwen3-mock").status, 404);
    let mut second = start();
    assert!(wait_models(addr, |ids| ids == ["qwen3-mock"]), "never listed with two workers");
    assert_eq!(chat_hi(addr, "qwen3-mock").status, 200);
    second.stop();
    wait_instances(&s, 1);
    assert!(wait_models(addr, |ids| ids == ["qwen3-mock"]), "no longer listed with one worker");
    assert_eq!(chat_hi(addr, "qwen3-mock").status, 200);
}

/// A request refused because every worker is over its busy threshold gets 1.6.1's 529 body,
/// and `Retry-After`.
#[test]
fn an_overloaded_request_gets_529_and_retry_after() {
    let (s, ingest) = kv_setup("overload", Duration::from_millis(2000), &["--active-prefill-tokens-threshold", "100"]);
    let addr = s.server.as_ref().unwrap().addr;
    let long = (0..500).map(|i| format!("a{i} ")).collect::<String>();
    let body =
        serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": long}], "max_tokens": 2});
    let busy = open_chat(addr, &body);
    std::thread::sleep(Duration::from_millis(300));
    let r = chat_hi(addr, "qwen3-mock");
    assert_eq!(r.status, 529, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(
        r.json(),
        serde_json::json!({"message": "Service temporarily overloaded", "type": "Overloaded", "code": 529})
    );
    assert_eq!(r.header("retry-after"), Some("1"));
    let text = scrape(&s);
    assert_lines(&text, &[
        "dynamo_frontend_model_rejection_total{endpoint=\"chat_completions\",model=\"qwen3-mock\"} 1".into(),
        "dynamo_frontend_requests_total{endpoint=\"chat_completions\",error_type=\"overload\",model=\"qwen3-mock\",request_type=\"unary\",status=\"error\"} 1".into(),
    ]);
    drop(busy);
    drop(s);
    drop(ingest);
}

/// `GET`/`POST /busy_threshold` as 1.6.1 serves them, and a threshold set at run time sheds
/// load at once.
#[test]
fn busy_thresholds_are_read_and_set_at_run_time() {
    let (s, ingest) = kv_setup("busy", Duration::from_millis(2000), &[]);
    let addr = s.server.as_ref().unwrap().addr;
    let post = |body: &str| {
        let req = format!(
            "POST /busy_threshold HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        Client::connect(addr).roundtrip(req.as_bytes())
    };
    let unset = serde_json::json!({"model": "qwen3-mock", "active_decode_blocks_threshold": null,
        "active_prefill_tokens_threshold": null, "active_prefill_tokens_threshold_frac": null});
    let r = Client::connect(addr).roundtrip(b"GET /busy_threshold HTTP/1.1\r\n\r\n");
    assert_eq!((r.status, r.json()), (200, serde_json::json!({"thresholds": [unset.clone()]})));
    assert_eq!(post(r#"{"model":"qwen3-mock"}"#).json(), unset);
    let r = post(r#"{"model":"nosuch","active_decode_blocks_threshold":0.5}"#);
    assert_eq!(r.status, 404);
    assert_eq!(r.json()["error"], "Model 'nosuch' not found. Thresholds can only be set for discovered models.");
    let r = post(r#"{"model":"qwen3-mock","active_decode_blocks_threshold":1.5}"#);
    assert_eq!(
        (r.status, r.json()["error"].as_str().unwrap()),
        (400, "active_decode_blocks_threshold must be between 0.0 and 1.0, got 1.5")
    );
    assert_eq!(post(r#"{"model":"qwen3-mock","active_prefill_tokens_threshold":-5}"#).status, 422);
    assert_eq!(post(r#"{"active_decode_blocks_threshold":0.5}"#).status, 422);
    assert_eq!(post("not json").status, 400);

    // Set on one shard, in force on every shard; merged, never cleared by a null.
    // (The mock worker reports no KV usage, so the prefill bound is the one that bites.)
    let r = post(r#"{"model":"qwen3-mock","active_decode_blocks_threshold":0.0001}"#);
    assert_eq!(r.json()["active_decode_blocks_threshold"], 0.0001);
    let r =
        post(r#"{"model":"qwen3-mock","active_prefill_tokens_threshold":1000,"active_decode_blocks_threshold":null}"#);
    assert_eq!(r.json()["active_decode_blocks_threshold"], 0.0001);
    assert_eq!(r.json()["active_prefill_tokens_threshold"], 1000);
    std::thread::sleep(Duration::from_millis(100));
    for _ in 0..4 {
        let r = Client::connect(addr).roundtrip(b"GET /busy_threshold HTTP/1.1\r\n\r\n");
        assert_eq!(r.json()["thresholds"][0]["active_decode_blocks_threshold"], 0.0001, "every shard has it");
    }
    let long = (0..500).map(|i| format!("a{i} ")).collect::<String>();
    let body =
        serde_json::json!({"model": "qwen3-mock", "messages": [{"role": "user", "content": long}], "max_tokens": 2});
    let busy = open_chat(addr, &body);
    std::thread::sleep(Duration::from_millis(300));
    assert_eq!(chat_hi(addr, "qwen3-mock").status, 529);
    drop(busy);
    drop(s);
    drop(ingest);
}

/// A worker that sends garbage after its first token, and one that closes its stream without
/// its final frame: a streamed answer ends with the 503 error event and `[DONE]`, a whole one
/// with a 5xx status, nothing is left in flight and the next request is served.
#[test]
fn a_worker_that_sends_garbage_or_closes_early_never_hangs_a_client() {
    for (salt, ending) in [(0x1111u64, Ending::Garbage), (0x2222, Ending::Close)] {
        let s = setup(&format!("bad-worker-{salt:x}"));
        let addr = s.server.as_ref().unwrap().addr;
        let port = scripted_worker(vec![serde_json::json!({"token_ids": [9707]})], ending);
        let bad = register_copy(&s, port, salt);
        for stream in [true, false] {
            let body = serde_json::json!({"model": "qwen3-mock", "stream": stream, "max_tokens": 5,
                                          "messages": [{"role": "user", "content": "hi"}]})
            .to_string();
            let req = format!(
                "POST /v1/chat/completions HTTP/1.1\r\ncontent-type: application/json\r\nx-dynamo-worker-instance-id: {bad}\r\ncontent-length: {}\r\n\r\n{body}",
                body.len()
            );
            let r = Client::connect(addr).roundtrip(req.as_bytes());
            let text = String::from_utf8_lossy(&r.body).into_owned();
            if stream {
                assert_eq!(r.status, 200, "{text}");
                assert!(text.ends_with("data: [DONE]\n\n"), "{text}");
                assert!(text.contains(r#"{"error":{"message":"#), "{text}");
            } else {
                assert!(r.status >= 500, "{}: {text}", r.status);
            }
        }
        let t0 = Instant::now();
        while !scrape(&s).contains("dynamo_frontend_inflight_requests{model=\"qwen3-mock\"} 0\n") {
            assert!(t0.elapsed() < Duration::from_secs(5), "requests left in flight");
            std::thread::sleep(Duration::from_millis(20));
        }
        assert_eq!(chat_hi(addr, "qwen3-mock").status, 200, "the next request");
    }
}

/// Echo mode: the worker answers with the text between `[[echo]]` and `[[/echo]]` in the
/// prompt, token by token or character by character, and registers the parser names it was
/// given in its card's `runtime_config`.
#[test]
fn an_echoing_worker_answers_with_the_scripted_text() {
    use switchyard::worker::echo::EchoSplit;
    let script = "Sure. <tool_call>\n{\"name\": \"f\"}\n</tool_call> — ünïcode ✓";
    for split in [EchoSplit::Token, EchoSplit::Char] {
        let s = setup_with(
            &format!("echo-{split:?}"),
            MockConfig {
                fast: true,
                echo: Some(split),
                tool_call_parser: Some("hermes".into()),
                reasoning_parser: Some("qwen3".into()),
                ..MockConfig::default()
            },
        );
        let body = serde_json::json!({"model": "qwen3-mock", "max_tokens": 500,
            "messages": [{"role": "user", "content": format!("Say [[echo]]{script}[[/echo]] please")}]});
        let r = post(&s, "/v1/chat/completions", &body);
        assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["choices"][0]["message"]["content"], script, "{split:?}");
        let n = v["usage"]["completion_tokens"].as_u64().unwrap();
        let chars = script.chars().count() as u64;
        match split {
            EchoSplit::Token => assert!(n < chars, "{n} tokens for {chars} characters"),
            EchoSplit::Char => assert!(n >= chars, "{n} tokens for {chars} characters"),
        }
        let mut cards = String::new();
        for e in std::fs::read_dir(s._store.0.join("v1/mdc")).unwrap() {
            cards.push_str(&std::fs::read_to_string(e.unwrap().path()).unwrap_or_default());
        }
        assert!(cards.contains(r#""tool_call_parser":"hermes""#), "{cards}");
        assert!(cards.contains(r#""reasoning_parser":"qwen3""#), "{cards}");
        let none = post(
            &s,
            "/v1/chat/completions",
            &serde_json::json!({"model": "qwen3-mock",
            "messages": [{"role": "user", "content": "no script"}]}),
        );
        assert_eq!(none.json()["choices"][0]["message"]["content"], switchyard::worker::echo::NO_SCRIPT);
    }
}

/// A model whose card names a reasoning parser: its thinking comes back apart from its
/// answer, whole (`reasoning_content` after `role`, `reasoning_tokens` in the usage) and
/// streamed (a role-only chunk, then reasoning chunks, then content chunks), in 1.6.1's
/// shapes; a marker cut across tokens never shows.
#[test]
fn a_reasoning_parser_splits_thinking_from_the_answer() {
    use switchyard::worker::echo::EchoSplit;
    let s = setup_with(
        "reasoning",
        MockConfig {
            fast: true,
            echo: Some(EchoSplit::Token),
            reasoning_parser: Some("qwen3".into()),
            ..MockConfig::default()
        },
    );
    let addr = s.server.as_ref().unwrap().addr;
    for marker in ["[[echo]]", "[[echo:char]]"] {
        let ask = |stream: bool| {
            serde_json::json!({"model": "qwen3-mock", "stream": stream,
                "messages": [{"role": "user", "content": format!("{marker}<think>ab</think>cd[[/echo]]")}]})
        };
        let v = post(&s, "/v1/chat/completions", &ask(false)).json();
        let msg = &v["choices"][0]["message"];
        assert_eq!(msg["content"], "cd", "{marker}: {v}");
        assert_eq!(msg["reasoning_content"], "ab", "{marker}: {v}");
        let keys: Vec<&str> = msg.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(keys, ["content", "refusal", "role", "reasoning_content"]);
        if marker == "[[echo]]" {
            // <think>, ab and </think> are a token each: two end in reasoning, as 1.6.1 counts.
            assert_eq!(v["usage"]["completion_tokens_details"]["reasoning_tokens"], 2, "{v}");
        }
        let events = sse_events(addr, &ask(true));
        let deltas: Vec<serde_json::Value> = events
            .iter()
            .filter(|e| *e != "[DONE]")
            .map(|e| serde_json::from_str::<serde_json::Value>(e).unwrap()["choices"][0]["delta"].clone())
            .collect();
        assert_eq!(deltas[0], serde_json::json!({"role": "assistant"}), "{marker}: {events:?}");
        let joined = |key: &str| deltas.iter().filter_map(|d| d[key].as_str()).collect::<String>();
        assert_eq!(joined("reasoning_content"), "ab", "{marker}: {events:?}");
        assert_eq!(joined("content"), "cd", "{marker}: {events:?}");
        assert!(!events.iter().any(|e| e.contains("think>")), "{marker}: a marker leaked: {events:?}");
    }
    // An unterminated thought is all reasoning, and the content is null.
    let v = post(
        &s,
        "/v1/chat/completions",
        &serde_json::json!({"model": "qwen3-mock",
        "messages": [{"role": "user", "content": "[[echo]]<think>still going[[/echo]]"}]}),
    )
    .json();
    assert_eq!(v["choices"][0]["message"]["content"], serde_json::Value::Null, "{v}");
    assert_eq!(v["choices"][0]["message"]["reasoning_content"], "still going", "{v}");
}
