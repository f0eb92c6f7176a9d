//! Optional API keys (`--api-keys-file`): an in-process switchyard in front of the in-tree
//! mock worker. Inference routes need a key (`Authorization: Bearer` or `x-api-key`); ops
//! routes do not; refusals come in each API's own shape (OpenAI 401/429, Anthropic's
//! `authentication_error` / `rate_limit_error`, gRPC UNAUTHENTICATED); request and token rates
//! hold per key; `/metrics` counts by key label. Without the option nothing is checked.

mod common;

use common::stack::Stack;
use common::{h2c, Client};
use switchyard::kserve::pb::model_infer_request::InferInputTensor;
use switchyard::kserve::pb::*;
use switchyard::worker::MockConfig;

const MODEL: &str = "qwen3-mock";

fn stack(tag: &str, keys: &str, extra: &[&str]) -> (Stack, common::TempDir) {
    let dir = common::TempDir::new(tag);
    let file = dir.0.join("keys");
    std::fs::write(&file, keys).unwrap();
    let file = file.display().to_string();
    let mock = MockConfig {
        output_tokens: 5,
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    let mut args = vec!["--api-keys-file", file.as_str(), "--enable-anthropic-api"];
    args.extend_from_slice(extra);
    (Stack::start(tag, mock, &args, &[]), dir)
}

fn post(s: &Stack, path: &str, headers: &str, body: &serde_json::Value) -> common::Resp {
    let body = body.to_string();
    let req = format!(
        "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\n{headers}content-length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(s.addr()).roundtrip(req.as_bytes())
}

fn chat() -> serde_json::Value {
    serde_json::json!({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]})
}

fn messages() -> serde_json::Value {
    serde_json::json!({"model": MODEL, "max_tokens": 5, "messages": [{"role": "user", "content": "Hi"}]})
}

fn metrics(s: &Stack) -> String {
    String::from_utf8(Client::connect(s.addr()).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n").body).unwrap()
}

#[test]
fn inference_routes_need_a_known_key_and_ops_routes_do_not() {
    let (s, _dir) = stack("keys-auth", "# team keys\nalice sk-alice\nbob sk-bob\n", &["--kserve-grpc-server"]);
    // Ops routes are open: /v1/models lists the model (the stack waited for it without a key).
    for path in ["/health", "/live", "/v1/models", "/metrics"] {
        let r = Client::connect(s.addr()).roundtrip(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes());
        assert_eq!(r.status, 200, "{path}");
    }
    // OpenAI routes: 401 in OpenAI's shape without a key or with an unknown one.
    for headers in ["", "authorization: Bearer sk-nobody\r\n", "authorization: Basic c2stYWxpY2U=\r\n"] {
        for path in ["/v1/chat/completions", "/v1/completions", "/v1/responses"] {
            let body = match path {
                "/v1/completions" => serde_json::json!({"model": MODEL, "prompt": "Hi", "max_tokens": 5}),
                "/v1/responses" => serde_json::json!({"model": MODEL, "input": "Hi", "max_output_tokens": 5}),
                _ => chat(),
            };
            let r = post(&s, path, headers, &body);
            assert_eq!(r.status, 401, "{path} {headers:?}");
            let j = r.json();
            assert_eq!(j["error"]["type"], "authentication_error", "{j}");
            assert!(j["error"]["message"].as_str().unwrap().contains("API key"), "{j}");
        }
    }
    // Either header works.
    assert_eq!(post(&s, "/v1/chat/completions", "authorization: Bearer sk-alice\r\n", &chat()).status, 200);
    assert_eq!(post(&s, "/v1/chat/completions", "x-api-key: sk-bob\r\n", &chat()).status, 200);
    // Anthropic's routes answer in Anthropic's shape.
    let r = post(&s, "/v1/messages", "x-api-key: wrong\r\n", &messages());
    assert_eq!(r.status, 401);
    let j = r.json();
    assert_eq!((j["type"].as_str(), j["error"]["type"].as_str()), (Some("error"), Some("authentication_error")), "{j}");
    let r = post(&s, "/v1/messages", "x-api-key: sk-bob\r\nanthropic-version: 2023-06-01\r\n", &messages());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let r = post(&s, "/v1/messages/count_tokens", "", &messages());
    assert_eq!(r.status, 401);

    // gRPC: inference calls need the key too; server health does not. Their tokens are
    // charged to the key as HTTP requests' are.
    let before = tokens_of(&s, "alice");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let live = h2c::unary(&mut c, "ServerLive", &ServerLiveRequest {}).await;
        assert_eq!(live.grpc_status(), Some(0));
        let infer = ModelInferRequest {
            model_name: MODEL.into(),
            inputs: vec![InferInputTensor {
                name: "text_input".into(),
                datatype: "BYTES".into(),
                shape: vec![1],
                contents: Some(InferTensorContents { bytes_contents: vec![b"Hi".to_vec()], ..Default::default() }),
                ..Default::default()
            }],
            ..Default::default()
        };
        let r = h2c::raw_call(&mut c, "ModelInfer", h2c::frame(&infer)).await;
        assert_eq!(r.grpc_status(), Some(16), "UNAUTHENTICATED: {}", r.grpc_message());
        let r = h2c::call_with(&mut c, "ModelInfer", &[("authorization", "Bearer sk-alice")], h2c::frame(&infer)).await;
        assert_eq!(r.grpc_status(), Some(0), "{}", r.grpc_message());
    });
    // 5 answer tokens and the prompt's.
    let after = tokens_of(&s, "alice");
    assert!(after > before + 5, "alice's tokens: {before} before the gRPC call, {after} after");

    let m = metrics(&s);
    for line in [
        "switchyard_api_key_requests_total{key=\"alice\",result=\"admitted\"} 2",
        "switchyard_api_key_requests_total{key=\"bob\",result=\"admitted\"} 2",
        "switchyard_api_key_rejected_total{reason=\"missing\"}",
    ] {
        assert!(m.contains(line), "{line} in /metrics");
    }
    // Tokens of finished HTTP requests are charged: answers of 5 tokens plus their prompts.
    assert!(before > 5, "alice's tokens: {before}");
}

/// The tokens charged to the key labelled `label` so far.
fn tokens_of(s: &Stack, label: &str) -> u64 {
    let series = format!("switchyard_api_key_tokens_total{{key=\"{label}\"}} ");
    metrics(s).lines().find_map(|l| l.strip_prefix(series.as_str())).map_or(0, |v| v.parse().unwrap())
}

#[test]
fn request_and_token_rates_hold_per_key() {
    let (s, _dir) = stack(
        "keys-rates",
        "few sk-few requests_per_minute=3\nthrifty sk-thrifty tokens_per_minute=1\nfree sk-free\n",
        &[],
    );
    for _ in 0..3 {
        assert_eq!(post(&s, "/v1/chat/completions", "authorization: Bearer sk-few\r\n", &chat()).status, 200);
    }
    let r = post(&s, "/v1/chat/completions", "authorization: Bearer sk-few\r\n", &chat());
    assert_eq!(r.status, 429);
    assert_eq!(r.json()["error"]["type"], "rate_limit_error");
    let retry: u64 = r.header("retry-after").expect("Retry-After").parse().unwrap();
    assert!((1..=60).contains(&retry), "{retry}");
    let r = post(&s, "/v1/messages", "x-api-key: sk-few\r\n", &messages());
    assert_eq!((r.status, r.json()["error"]["type"].as_str()), (429, Some("rate_limit_error")));
    // One request's tokens use the whole token rate: the next is refused.
    assert_eq!(post(&s, "/v1/chat/completions", "x-api-key: sk-thrifty\r\n", &chat()).status, 200);
    let r = post(&s, "/v1/chat/completions", "x-api-key: sk-thrifty\r\n", &chat());
    assert_eq!(r.status, 429);
    assert!(r.json()["error"]["message"].as_str().unwrap().contains("tokens per minute"));
    // Other keys are not affected.
    assert_eq!(post(&s, "/v1/chat/completions", "x-api-key: sk-free\r\n", &chat()).status, 200);
    let m = metrics(&s);
    assert!(m.contains("switchyard_api_key_requests_total{key=\"few\",result=\"rate_limited_requests\"} 2"), "{m}");
    assert!(m.contains("switchyard_api_key_requests_total{key=\"thrifty\",result=\"rate_limited_tokens\"} 1"), "{m}");
}

#[test]
fn a_bad_key_file_stops_the_start() {
    let dir = common::TempDir::new("keys-bad");
    let file = dir.0.join("keys");
    std::fs::write(&file, "alice\n").unwrap();
    let cfg = std::sync::Arc::new(common::config(&["--api-keys-file", file.to_str().unwrap()], &[]));
    let e = switchyard::service::start(cfg).err().expect("refused");
    assert!(e.to_string().contains("line 1: want LABEL KEY"), "{e}");
    let cfg = std::sync::Arc::new(common::config(&[], &[("SWITCHYARD_API_KEYS", "/nonexistent/keys")]));
    let e = switchyard::service::start(cfg).err().expect("refused");
    assert!(e.to_string().contains("cannot read the API key file /nonexistent/keys"), "{e}");
}
