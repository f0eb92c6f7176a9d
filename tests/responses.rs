//! The OpenAI Responses API end to end: file discovery finds the in-tree mock worker (real
//! Qwen3 tokenizer files) answering with the text a prompt scripts between `[[echo]]` and
//! `[[/echo]]`; `/v1/responses` requests go HTTP → Responses → chat request → template →
//! tokenizer → worker → parsers → response object or SSE events.

mod common;

use std::time::{Duration, Instant};

use common::Client;
use serde_json::{json, Value};
use switchyard::control::{Backend, Control};
use switchyard::shard::Server;
use switchyard::worker::echo::EchoSplit;
use switchyard::worker::{MockConfig, MockWorker};

struct Setup {
    server: Option<Server>,
    control: Option<Control>,
    worker: MockWorker,
    store: std::path::PathBuf,
}

impl Drop for Setup {
    fn drop(&mut self) {
        common::stack::stop_all(self.control.take(), self.server.take(), &mut self.worker);
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// A frontend and an echoing worker registered with `tools` / `reasoning` parsers.
fn setup(tag: &str, tools: Option<&str>, reasoning: Option<&str>) -> Setup {
    let dir = common::qwen3_dir();
    let store = std::env::temp_dir().join(format!("sy-responses-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&store);
    std::fs::create_dir_all(&store).unwrap();
    let worker = MockWorker::start(MockConfig {
        fast: true,
        echo: Some(EchoSplit::Token),
        tool_call_parser: tools.map(Into::into),
        reasoning_parser: reasoning.map(Into::into),
        model_name: "qwen3-mock".into(),
        model_dir: Some(dir),
        ..MockConfig::default()
    })
    .unwrap();
    worker.register_file(&store).unwrap();
    let cfg = std::sync::Arc::new(common::config(&["--discovery-backend", "file"], &[]));
    let server = switchyard::service::start(cfg.clone()).unwrap();
    let control = Control::start(&cfg, &server, Backend::File(store.clone())).unwrap();
    let s = Setup { server: Some(server), control: Some(control), worker, store };
    wait_model(&s);
    s
}

/// Until every shard lists the model (8 fresh connections in a row), ≤ 20 s.
fn wait_model(s: &Setup) {
    let t0 = Instant::now();
    let mut streak = 0;
    while streak < 8 {
        let r = Client::connect(addr(s)).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n");
        let listed = r.json()["data"].as_array().is_some_and(|d| !d.is_empty());
        streak = if listed { streak + 1 } else { 0 };
        assert!(t0.elapsed() < Duration::from_secs(90), "the model never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn addr(s: &Setup) -> std::net::SocketAddr {
    s.server.as_ref().unwrap().addr
}

fn post_raw(s: &Setup, path: &str, body: &str) -> common::Resp {
    let req = format!(
        "POST {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr(s)).roundtrip(req.as_bytes())
}

fn post(s: &Setup, body: &Value) -> common::Resp {
    post_raw(s, "/v1/responses", &body.to_string())
}

/// The events of a streamed answer: (event name, data), checking the framing.
fn events(r: &common::Resp) -> Vec<(String, Value)> {
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-type"), Some("text/event-stream"));
    let text = String::from_utf8(r.body.clone()).unwrap();
    assert!(!text.contains("[DONE]"), "{text}");
    let out: Vec<(String, Value)> = text
        .split("\n\n")
        .filter(|e| !e.is_empty() && !e.starts_with(':'))
        .map(|e| {
            let (head, data) = e.split_once("\ndata: ").unwrap_or_else(|| panic!("{e}"));
            let name = head.strip_prefix("event: ").unwrap().to_string();
            let v: Value = serde_json::from_str(data).unwrap();
            assert_eq!(v["type"], name.as_str());
            (name, v)
        })
        .collect();
    for (i, (_, v)) in out.iter().enumerate() {
        assert_eq!(v["sequence_number"], i as u64, "{text}");
    }
    out
}

fn names(ev: &[(String, Value)]) -> Vec<&str> {
    ev.iter().map(|(n, _)| n.as_str()).collect()
}

/// The number of tokens of `messages` through the model's template: what the chat route
/// counts as the prompt for the same conversation.
fn templated(s: &Setup, messages: Value) -> u64 {
    let body = json!({"model": "qwen3-mock", "messages": messages, "max_tokens": 1});
    let v = post_raw(s, "/v1/chat/completions", &body.to_string()).json();
    v["usage"]["prompt_tokens"].as_u64().unwrap_or_else(|| panic!("{v}"))
}

fn is_id(v: &Value, prefix: &str) -> bool {
    v.as_str().is_some_and(|s| {
        s.len() == prefix.len() + 32
            && s.starts_with(prefix)
            && s[prefix.len()..].bytes().all(|b| b.is_ascii_hexdigit())
    })
}

#[test]
fn text_whole_and_streamed() {
    let s = setup("text", None, None);
    let input = "Say [[echo]]Hello there.[[/echo]]";
    let r = post(
        &s,
        &json!({"model": "qwen3-mock", "input": input, "instructions": "Be brief.",
        "metadata": {"k": "v"}, "temperature": 0.5}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["object"], "response");
    assert_eq!(v["status"], "completed");
    assert!(is_id(&v["id"], "resp_"), "{v}");
    assert_eq!(v["model"], "qwen3-mock");
    assert_eq!(v["instructions"], "Be brief.");
    assert_eq!(v["metadata"], json!({"k": "v"}));
    assert_eq!(v["temperature"], 0.5);
    assert_eq!(v["store"], false);
    assert_eq!(v["tool_choice"], "auto");
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{v}");
    assert_eq!(out[0]["type"], "message");
    assert!(is_id(&out[0]["id"], "msg_"));
    assert_eq!(out[0]["status"], "completed");
    assert_eq!(
        out[0]["content"][0],
        json!({"type": "output_text", "annotations": [], "logprobs": [], "text": "Hello there."})
    );
    let u = &v["usage"];
    let prompt = templated(&s, json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": input}]));
    assert_eq!(u["input_tokens"], prompt, "{v}");
    let out_tokens = u["output_tokens"].as_u64().unwrap();
    assert!(out_tokens > 0);
    assert_eq!(u["total_tokens"], prompt + out_tokens);
    assert_eq!(u["input_tokens_details"]["cached_tokens"], 0);
    assert_eq!(u["output_tokens_details"]["reasoning_tokens"], 0);

    // The same as a list of items, streamed.
    let r = post(
        &s,
        &json!({"model": "qwen3-mock", "stream": true,
        "input": [{"role": "user", "content": [{"type": "input_text", "text": input}]}]}),
    );
    let ev = events(&r);
    let n = names(&ev);
    assert_eq!(
        &n[..4],
        ["response.created", "response.in_progress", "response.output_item.added", "response.content_part.added"]
    );
    assert_eq!(
        &n[n.len() - 4..],
        ["response.output_text.done", "response.content_part.done", "response.output_item.done", "response.completed"]
    );
    assert!(n[4..n.len() - 4].iter().all(|e| *e == "response.output_text.delta"), "{n:?}");
    let text: String = ev.iter().filter_map(|(_, v)| v["delta"].as_str()).collect();
    assert_eq!(text, "Hello there.");
    let created = &ev[0].1["response"];
    assert_eq!(created["status"], "in_progress");
    assert_eq!(created["usage"], Value::Null);
    let done = &ev.last().unwrap().1["response"];
    assert_eq!(done["id"], created["id"]);
    assert_eq!(done["status"], "completed");
    assert_eq!(done["output"][0]["content"][0]["text"], "Hello there.");
    assert!(done["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // Cut by max_output_tokens.
    let v = post(&s, &json!({"model": "qwen3-mock", "input": input, "max_output_tokens": 1})).json();
    assert_eq!(v["status"], "incomplete", "{v}");
    assert_eq!(v["incomplete_details"], json!({"reason": "max_output_tokens"}));
    assert_eq!(v["completed_at"], Value::Null);
    assert_eq!(v["output"][0]["status"], "incomplete");
    let ev = events(&post(&s, &json!({"model": "qwen3-mock", "input": input, "max_output_tokens": 1, "stream": true})));
    assert_eq!(ev.last().unwrap().0, "response.incomplete");
}

#[test]
fn reasoning_comes_back_as_a_reasoning_item() {
    let s = setup("reasoning", None, Some("qwen3"));
    let input = "[[echo]]<think>ab</think>cd[[/echo]]";
    let v = post(&s, &json!({"model": "qwen3-mock", "input": input})).json();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 2, "{v}");
    assert_eq!(out[0]["type"], "reasoning");
    assert_eq!(out[0]["content"][0], json!({"type": "reasoning_text", "text": "ab"}));
    assert_eq!(out[1]["content"][0]["text"], "cd");
    assert_eq!(v["usage"]["output_tokens_details"]["reasoning_tokens"], 2, "{v}");
    let ev = events(&post(&s, &json!({"model": "qwen3-mock", "input": input, "stream": true})));
    let thought: String = ev
        .iter()
        .filter(|(n, _)| n == "response.reasoning_text.delta")
        .filter_map(|(_, v)| v["delta"].as_str())
        .collect();
    assert_eq!(thought, "ab");
    let text: String =
        ev.iter().filter(|(n, _)| n == "response.output_text.delta").filter_map(|(_, v)| v["delta"].as_str()).collect();
    assert_eq!(text, "cd");
    assert_eq!(ev.last().unwrap().1["response"]["output"][0]["type"], "reasoning");
}

#[test]
fn input_tokens_counts_the_templated_prompt() {
    let s = setup("count", None, None);
    let body = json!({"model": "qwen3-mock", "instructions": "Be brief.", "input": "Say hello"});
    let r = post_raw(&s, "/v1/responses/input_tokens", &body.to_string());
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let want =
        templated(&s, json!([{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hello"}]));
    assert_eq!(r.json(), json!({"object": "response.input_tokens", "input_tokens": want}));
    // What a generation reports for the same request.
    let v = post(&s, &body).json();
    assert_eq!(v["usage"]["input_tokens"], want);
    let r = post_raw(&s, "/v1/responses/input_tokens", r#"{"model":"qwen3-mock"}"#);
    assert_eq!(r.json()["input_tokens"], 0);
    assert_eq!(post_raw(&s, "/v1/responses/input_tokens", "{bad").status, 400);
}

#[test]
fn errors_have_dynamos_shape_and_status() {
    let s = setup("errors", None, None);
    let check = |body: &str, status: u16, message: &str| {
        let r = post_raw(&s, "/v1/responses", body);
        assert_eq!(r.status, status, "{body}: {}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert!(v["message"].as_str().unwrap().contains(message), "{body}: {v}");
        assert_eq!(v["code"], status);
        assert!(v["type"].is_string());
    };
    check("{bad json", 400, "Failed to deserialize the JSON body into the target type: key must be a string");
    check(r#"{"model":"qwen3-mock"}"#, 400, "missing field `input`");
    check(r#"{"input":"hi"}"#, 400, "Model cannot be empty");
    check(r#"{"model":"nope","input":"hi"}"#, 404, "Model not found");
    check(r#"{"model":"nope","input":"hi","stream":true}"#, 404, "Model not found");
    check(r#"{"model":"qwen3-mock","input":42}"#, 400, "input must be a string or an array of input items");
    check(r#"{"model":"qwen3-mock","input":[]}"#, 400, "Messages array cannot be empty");
    check(r#"{"model":"qwen3-mock","input":[{"role":"wizard","content":"x"}]}"#, 400, "untagged enum InputItemWire");
    check(r#"{"model":"qwen3-mock","input":"x","max_output_tokens":0}"#, 400, "Max tokens must be greater than 0");
    check(r#"{"model":"qwen3-mock","input":"x","temperature":5}"#, 400, "Temperature must be between 0 and 2");
    check(
        r#"{"model":"qwen3-mock","input":"x","tools":[{"type":"web_search"}]}"#,
        400,
        "Unsupported Responses tools type 'web_search'",
    );
    check(
        r#"{"model":"qwen3-mock","input":[{"role":"user","content":"u"},{"type":"function_call","call_id":"c","name":"f","arguments":"{nope"}]}"#,
        400,
        "must be a valid JSON object string",
    );
    for field in [
        r#""previous_response_id":"resp_1""#,
        r#""background":true"#,
        r#""max_tool_calls":2"#,
        r#""prompt":{"id":"p"}"#,
    ] {
        let body = format!(r#"{{"model":"qwen3-mock","input":"x",{field},"stream":true}}"#);
        check(&body, 501, "is not supported.");
    }
    let r = post_raw(&s, "/v1/responses", r#"{"model":"qwen3-mock","input":"hi","bogus":1}"#);
    assert_eq!(r.status, 200);
    let r = Client::connect(addr(&s)).roundtrip(b"GET /v1/responses HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    let r = Client::connect(addr(&s)).roundtrip(b"GET /openapi.json HTTP/1.1\r\n\r\n");
    let paths = &r.json()["paths"];
    assert!(paths["/v1/responses"]["post"].is_object(), "{paths}");
    assert!(paths["/v1/responses/input_tokens"]["post"].is_object(), "{paths}");
}

#[test]
fn a_codex_shaped_tool_loop() {
    let s = setup("tools", Some("hermes"), Some("qwen3"));
    let tools = json!([{"type": "function", "name": "get_weather", "description": "Get the weather",
        "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]);
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
    let ask = format!("Weather in Paris? [[echo]]{call}[[/echo]]");
    let v = post(&s, &json!({"model": "qwen3-mock", "input": ask, "tools": tools})).json();
    let out = v["output"].as_array().unwrap();
    let fc = out.iter().find(|o| o["type"] == "function_call").unwrap_or_else(|| panic!("no function call: {v}"));
    assert_eq!(fc["name"], "get_weather");
    assert_eq!(serde_json::from_str::<Value>(fc["arguments"].as_str().unwrap()).unwrap(), json!({"location": "Paris"}));
    assert!(is_id(&fc["id"], "fc_"));
    assert!(fc["call_id"].as_str().unwrap().starts_with("call-"));
    assert_eq!(fc["status"], "completed");
    assert_eq!(v["tools"][0]["strict"], true);
    // Streamed: the call's events.
    let ev = events(&post(&s, &json!({"model": "qwen3-mock", "input": ask, "tools": tools, "stream": true})));
    let n = names(&ev);
    assert!(n.contains(&"response.function_call_arguments.delta"), "{n:?}");
    assert!(n.contains(&"response.function_call_arguments.done"), "{n:?}");
    assert_eq!(ev.last().unwrap().1["response"]["output"][0]["type"], "function_call");
    // The next turn: the call and its output go back.
    let items = json!([
        {"role": "user", "content": ask},
        {"type": "function_call", "call_id": fc["call_id"], "name": "get_weather", "arguments": fc["arguments"], "id": fc["id"], "status": "completed"},
        {"type": "function_call_output", "call_id": fc["call_id"], "output": "[[echo]]It is sunny.[[/echo]]"},
    ]);
    let v = post(&s, &json!({"model": "qwen3-mock", "input": items, "tools": tools})).json();
    let out = v["output"].as_array().unwrap();
    assert_eq!(out.len(), 1, "{v}");
    assert_eq!(out[0]["content"][0]["text"], "It is sunny.");
    assert_eq!(v["status"], "completed");
    // tool_choice "required" (the model held to a list of calls) and a named function (to
    // the arguments): a function_call item, whole and streamed.
    for (choice, script) in [
        (json!("required"), r#"[{"name": "get_weather", "parameters": {"location": "Paris"}}]"#),
        (json!({"type": "function", "name": "get_weather"}), r#"{"location": "Paris"}"#),
    ] {
        let body = json!({"model": "qwen3-mock", "input": format!("[[echo]]{script}[[/echo]]"), "tools": tools, "tool_choice": choice});
        let v = post(&s, &body).json();
        let out = v["output"].as_array().unwrap();
        assert_eq!(out.len(), 1, "{choice}: {v}");
        assert_eq!((&out[0]["type"], &out[0]["name"]), (&json!("function_call"), &json!("get_weather")), "{v}");
        let args = serde_json::from_str::<Value>(out[0]["arguments"].as_str().unwrap()).unwrap();
        assert_eq!(args, json!({"location": "Paris"}), "{choice}");
        let mut streamed = body.clone();
        streamed["stream"] = json!(true);
        let ev = events(&post(&s, &streamed));
        assert_eq!(ev.last().unwrap().1["response"]["output"][0]["type"], "function_call", "{choice}");
    }
}
