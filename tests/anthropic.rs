//! The Anthropic Messages routes end to end (`--enable-anthropic-api`): the in-tree mock
//! worker echoes the text scripted in the prompt (`[[echo]]…[[/echo]]`), so each test says
//! what the model answers and checks the Anthropic answer made of it — whole and streamed,
//! thinking, tool use, stop reasons, usage, `count_tokens`, errors — and that the routes are
//! absent without the flag.

mod common;

use std::time::Duration;

use common::stack::Stack;
use common::Client;
use serde_json::{json, Value};
use switchyard::worker::echo::EchoSplit;
use switchyard::worker::MockConfig;

const MODEL: &str = "qwen3-mock";

fn stack(tag: &str, tools: bool) -> Stack {
    let mock = MockConfig {
        fast: true,
        echo: Some(EchoSplit::Token),
        reasoning_parser: Some("qwen3".into()),
        tool_call_parser: tools.then(|| "hermes".into()),
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    Stack::start(tag, mock, &["--enable-anthropic-api"], &[])
}

fn post_raw(addr: std::net::SocketAddr, path: &str, content_type: &str, body: &str) -> common::Resp {
    let req =
        format!("POST {path} HTTP/1.1\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\n\r\n{body}", body.len());
    Client::connect(addr).roundtrip(req.as_bytes())
}

fn post(addr: std::net::SocketAddr, path: &str, body: &Value) -> common::Resp {
    post_raw(addr, path, "application/json", &body.to_string())
}

/// A user turn asking the model to answer `script`.
fn ask(script: &str) -> Value {
    json!({"model": MODEL, "max_tokens": 200,
        "messages": [{"role": "user", "content": format!("Say [[echo]]{script}[[/echo]]")}]})
}

/// The events of a streamed answer: (name, data).
fn events(addr: std::net::SocketAddr, body: &Value) -> Vec<(String, Value)> {
    use std::io::{BufRead, Write};
    let body = body.to_string();
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    write!(
        stream,
        "POST /v1/messages HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut r = std::io::BufReader::new(stream);
    let mut line = String::new();
    r.read_line(&mut line).unwrap();
    assert!(line.starts_with("HTTP/1.1 200"), "{line}");
    let mut content_type = String::new();
    loop {
        line.clear();
        r.read_line(&mut line).unwrap();
        if line.to_ascii_lowercase().starts_with("content-type:") {
            content_type = line.clone();
        }
        if line == "\r\n" {
            break;
        }
    }
    assert!(content_type.contains("text/event-stream"), "{content_type}");
    let raw = common::read_chunked(&mut r);
    let text = String::from_utf8(raw).unwrap();
    assert!(text.ends_with("\n\n"), "{text}");
    text.split("\n\n")
        .filter(|e| !e.is_empty())
        .map(|e| {
            let (name, data) = e.split_once('\n').unwrap_or_else(|| panic!("an unnamed event: {e:?}"));
            let name = name.strip_prefix("event: ").unwrap_or_else(|| panic!("not a named event: {e:?}"));
            let data = data.strip_prefix("data: ").unwrap();
            (name.to_string(), serde_json::from_str(data).unwrap_or_else(|err| panic!("{err}: {data}")))
        })
        .collect()
}

fn names(ev: &[(String, Value)]) -> Vec<&str> {
    ev.iter().map(|(n, _)| n.as_str()).collect()
}

/// The text of the deltas of `kind` (`text_delta` → `text`, …).
fn joined(ev: &[(String, Value)], kind: &str, key: &str) -> String {
    ev.iter().filter(|(_, d)| d["delta"]["type"] == kind).filter_map(|(_, d)| d["delta"][key].as_str()).collect()
}

fn count(addr: std::net::SocketAddr, body: &Value) -> u64 {
    let r = post(addr, "/v1/messages/count_tokens", body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v.as_object().unwrap().len(), 1, "{v}");
    v["input_tokens"].as_u64().unwrap()
}

#[test]
fn text_and_thinking_whole_and_streamed_with_the_templated_prompt_counted() {
    let s = stack("text", false);
    let addr = s.addr();
    // Whole: a text block, end_turn, the usage of the templated prompt.
    let body = ask("Hello there.");
    let r = post(addr, "/v1/messages", &body);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert!(r.header("content-type").unwrap().starts_with("application/json"));
    let v = r.json();
    let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["id", "type", "role", "content", "model", "stop_reason", "stop_sequence", "usage"], "{v}");
    let id = v["id"].as_str().unwrap();
    assert!(id.starts_with("msg_") && id.len() == 36, "{id}");
    assert_eq!(v["type"], "message");
    assert_eq!(v["model"], MODEL);
    assert_eq!(v["content"], json!([{"type": "text", "text": "Hello there."}]), "{v}");
    assert_eq!((v["stop_reason"].clone(), v["stop_sequence"].clone()), (json!("end_turn"), Value::Null));
    let input = v["usage"]["input_tokens"].as_u64().unwrap();
    assert!(v["usage"]["output_tokens"].as_u64().unwrap() > 0, "{v}");
    assert_eq!(v["usage"]["cache_creation_input_tokens"], 0);
    // count_tokens counts the same templated prompt; so does the chat route.
    assert_eq!(count(addr, &body), input);
    let chat = json!({"model": MODEL, "max_tokens": 200, "messages": body["messages"]});
    let c = post(addr, "/v1/chat/completions", &chat).json();
    assert_eq!(c["usage"]["prompt_tokens"].as_u64(), Some(input), "{c}");
    // A system prompt adds to the count; Claude Code's billing line does not.
    let mut sys = body.clone();
    sys["system"] = json!("You are terse.");
    let with_system = count(addr, &sys);
    assert!(with_system > input);
    sys["system"] = json!([{"type": "text", "text": "x-anthropic-billing-header: cc_version=1; cch=2;"},
        {"type": "text", "text": "You are terse."}]);
    assert_eq!(count(addr, &sys), with_system);

    // Thinking comes out as its own block, before the text.
    let think = ask("<think>ab</think>cd");
    let v = post(addr, "/v1/messages", &think).json();
    assert_eq!(
        v["content"],
        json!([{"type": "thinking", "thinking": "ab", "signature": ""}, {"type": "text", "text": "cd"}]),
        "{v}"
    );

    // Streamed: message_start with the prompt's tokens, ping, a thinking block, a text block,
    // message_delta, message_stop; nothing after it.
    let mut streamed = think.clone();
    streamed["stream"] = json!(true);
    let ev = events(addr, &streamed);
    let n = names(&ev);
    assert_eq!(n[..3], ["message_start", "ping", "content_block_start"], "{n:?}");
    assert_eq!(n[n.len() - 2..], ["message_delta", "message_stop"], "{n:?}");
    let start = &ev[0].1["message"];
    assert_eq!(start["usage"]["input_tokens"].as_u64(), Some(count(addr, &think)), "{start}");
    assert_eq!(start["content"], json!([]));
    assert_eq!(ev[2].1["content_block"], json!({"type": "thinking", "thinking": "", "signature": ""}));
    assert_eq!(joined(&ev, "thinking_delta", "thinking"), "ab");
    assert_eq!(joined(&ev, "text_delta", "text"), "cd");
    let starts: Vec<u64> =
        ev.iter().filter(|(n, _)| n == "content_block_start").map(|(_, d)| d["index"].as_u64().unwrap()).collect();
    let stops: Vec<u64> =
        ev.iter().filter(|(n, _)| n == "content_block_stop").map(|(_, d)| d["index"].as_u64().unwrap()).collect();
    assert_eq!((starts, stops), (vec![0, 1], vec![0, 1]));
    let delta = &ev[ev.len() - 2].1;
    assert_eq!(delta["delta"], json!({"stop_reason": "end_turn", "stop_sequence": null}), "{delta}");
    assert!(delta["usage"]["output_tokens"].as_u64().unwrap() > 0);

    // A stop sequence cuts the text and is named; max_tokens is a max_tokens stop.
    let mut stop = ask("one two three");
    stop["stop_sequences"] = json!(["zzz", " two"]);
    let v = post(addr, "/v1/messages", &stop).json();
    assert_eq!(v["content"][0]["text"], "one", "{v}");
    assert_eq!((v["stop_reason"].clone(), v["stop_sequence"].clone()), (json!("stop_sequence"), json!(" two")));
    stop["stream"] = json!(true);
    let ev = events(addr, &stop);
    assert_eq!(ev[ev.len() - 2].1["delta"], json!({"stop_reason": "stop_sequence", "stop_sequence": " two"}));
    let mut short = ask("one two three four five six");
    short["max_tokens"] = json!(2);
    let v = post(addr, "/v1/messages", &short).json();
    assert_eq!(v["stop_reason"], "max_tokens", "{v}");
    assert_eq!(v["usage"]["output_tokens"], 2, "{v}");
}

#[test]
fn a_tool_loop_as_claude_code_runs_it() {
    let s = stack("tools", true);
    let addr = s.addr();
    let tools = json!([{"name": "get_weather", "description": "Get the weather",
        "input_schema": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]);
    let call = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>";
    let mut first = ask(call);
    first["tools"] = tools.clone();
    let v = post(addr, "/v1/messages", &first).json();
    assert_eq!(v["stop_reason"], "tool_use", "{v}");
    let uses: Vec<&Value> = v["content"].as_array().unwrap().iter().filter(|b| b["type"] == "tool_use").collect();
    assert_eq!(uses.len(), 1, "{v}");
    assert_eq!(uses[0]["name"], "get_weather");
    assert_eq!(uses[0]["input"], json!({"location": "Paris"}));
    let id = uses[0]["id"].as_str().unwrap().to_string();
    assert!(id.starts_with("toolu_"), "{id}");
    assert!(!v["content"].to_string().contains("<tool_call>"), "{v}");

    // Streamed: a tool_use block with the whole input in one input_json_delta.
    let mut streamed = first.clone();
    streamed["stream"] = json!(true);
    let ev = events(addr, &streamed);
    let start = ev.iter().find(|(n, d)| n == "content_block_start" && d["content_block"]["type"] == "tool_use");
    let start = start.unwrap_or_else(|| panic!("no tool_use block: {ev:?}"));
    assert_eq!(start.1["content_block"]["input"], json!({}));
    let input = joined(&ev, "input_json_delta", "partial_json");
    assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"location": "Paris"}));
    assert_eq!(ev[ev.len() - 2].1["delta"]["stop_reason"], "tool_use");

    // The turn after: the assistant's tool_use (no text) and the user's tool_result.
    let second = json!({"model": MODEL, "max_tokens": 200, "tools": tools,
        "messages": [
            first["messages"][0],
            {"role": "assistant", "content": [{"type": "tool_use", "id": id, "name": "get_weather", "input": {"location": "Paris"}}]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": id,
                "content": [{"type": "text", "text": "Sunny, 21C. [[echo]]It is sunny.[[/echo]]"}]}]}]});
    let r = post(addr, "/v1/messages", &second);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    let v = r.json();
    assert_eq!(v["content"], json!([{"type": "text", "text": "It is sunny."}]), "{v}");
    assert_eq!(v["stop_reason"], "end_turn");
    assert!(count(addr, &second) > count(addr, &first));

    // tool_choice "any" (the model held to a list of calls) and a named tool (to the
    // arguments): tool_use blocks, whole and streamed.
    for (choice, script) in [
        (json!({"type": "any"}), r#"[{"name": "get_weather", "parameters": {"location": "Paris"}}]"#),
        (json!({"type": "tool", "name": "get_weather"}), r#"{"location": "Paris"}"#),
    ] {
        let mut forced = ask(script);
        forced["tools"] = tools.clone();
        forced["tool_choice"] = choice.clone();
        let v = post(addr, "/v1/messages", &forced).json();
        assert_eq!(v["stop_reason"], "tool_use", "{choice}: {v}");
        let blocks = v["content"].as_array().unwrap();
        assert_eq!(blocks.len(), 1, "{choice}: {v}");
        assert_eq!((&blocks[0]["type"], &blocks[0]["input"]), (&json!("tool_use"), &json!({"location": "Paris"})));
        forced["stream"] = json!(true);
        let ev = events(addr, &forced);
        let input = joined(&ev, "input_json_delta", "partial_json");
        assert_eq!(serde_json::from_str::<Value>(&input).unwrap(), json!({"location": "Paris"}), "{choice}");
    }
}

#[test]
fn failures_are_anthropic_errors_with_their_status() {
    let s = stack("errors", false);
    let addr = s.addr();
    let check = |r: common::Resp, status: u16, kind: &str, needle: &str| {
        assert_eq!(r.status, status, "{}", String::from_utf8_lossy(&r.body));
        let v = r.json();
        assert_eq!(v["type"], "error", "{v}");
        assert_eq!(v["error"]["type"], kind, "{v}");
        let m = v["error"]["message"].as_str().unwrap();
        assert!(m.contains(needle), "{m:?} lacks {needle:?}");
    };
    check(post_raw(addr, "/v1/messages", "application/json", "{\"model\": "), 400, "invalid_request_error", "JSON");
    check(
        post(addr, "/v1/messages", &json!({"model": MODEL, "messages": [{"role": "user", "content": "x"}]})),
        400,
        "invalid_request_error",
        "max_tokens",
    );
    check(
        post(addr, "/v1/messages", &json!({"model": MODEL, "max_tokens": 5, "messages": []})),
        400,
        "invalid_request_error",
        "messages: field required",
    );
    let mut image = ask("x");
    image["messages"][0]["content"] =
        json!([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]);
    check(post(addr, "/v1/messages", &image), 400, "invalid_request_error", "image");
    let mut tool = ask("x");
    tool["messages"][0]["content"] = json!([{"type": "tool_use", "id": "t", "name": "f", "input": {}}]);
    check(post(addr, "/v1/messages", &tool), 400, "invalid_request_error", "tool_use");
    // A client's tool_use whose input is not an object, and a tool without a schema.
    let mut bad_input = ask("x");
    bad_input["messages"] = json!([{"role": "user", "content": "x"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "t", "name": "f", "input": "{not json"}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "ok"}]}]);
    check(post(addr, "/v1/messages", &bad_input), 400, "invalid_request_error", "input");
    let mut bad_tool = ask("x");
    bad_tool["tools"] = json!([{"name": "f"}]);
    check(post(addr, "/v1/messages", &bad_tool), 400, "invalid_request_error", "input_schema");
    // Unknown fields are ignored, as Anthropic's API ignores them.
    let mut extra = ask("Hi");
    extra["bogus_field"] = json!({"x": 1});
    assert_eq!(post(addr, "/v1/messages", &extra).status, 200);
    let mut hot = ask("x");
    hot["temperature"] = json!(5);
    check(post(addr, "/v1/messages", &hot), 400, "invalid_request_error", "Temperature");
    let mut nope = ask("x");
    nope["model"] = json!("nope");
    check(post(addr, "/v1/messages", &nope), 404, "not_found_error", "Model 'nope' not found");
    nope["stream"] = json!(true);
    check(post(addr, "/v1/messages", &nope), 404, "not_found_error", "Model 'nope' not found");
    check(post(addr, "/v1/messages/count_tokens", &nope), 404, "not_found_error", "nope");
    check(post_raw(addr, "/v1/messages", "text/plain", "{}"), 415, "invalid_request_error", "Content-Type");
    check(post(addr, "/v1/messages/foo", &ask("x")), 404, "not_found_error", "Route not found: POST /v1/messages/foo");
    let r = Client::connect(addr).roundtrip(b"GET /v1/messages HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 405);
    assert_eq!(r.header("allow"), Some("POST"));
    // Listed in the OpenAPI document.
    let doc = Client::connect(addr).roundtrip(b"GET /openapi.json HTTP/1.1\r\n\r\n").json();
    assert!(doc["paths"]["/v1/messages"]["post"].is_object(), "{doc}");
    assert!(doc["paths"]["/v1/messages/count_tokens"]["post"].is_object(), "{doc}");
    // Counted under 1.6.1's endpoint label.
    let m = Client::connect(addr).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    assert!(String::from_utf8_lossy(&m.body).contains("endpoint=\"anthropic_messages\""));
}

#[test]
fn the_routes_need_the_flag_and_move_with_the_path_variable() {
    let off = switchyard::service::start(std::sync::Arc::new(common::config(&[], &[]))).unwrap();
    for path in ["/v1/messages", "/v1/messages/count_tokens"] {
        let r = post(off.addr, path, &ask("x"));
        assert_eq!(r.status, 404);
        assert_eq!(r.json()["message"], format!("Route not found: POST {path}"));
    }
    let doc = Client::connect(off.addr).roundtrip(b"GET /openapi.json HTTP/1.1\r\n\r\n").json();
    assert!(doc["paths"].get("/v1/messages").is_none());
    off.shutdown();

    let env = [("DYN_ENABLE_ANTHROPIC_API", "true"), ("DYN_HTTP_SVC_ANTHROPIC_PATH", "/anthropic/v1/messages")];
    let moved = switchyard::service::start(std::sync::Arc::new(common::config(&[], &env))).unwrap();
    // No model is served: an Anthropic 404 shows the route is there.
    for path in ["/anthropic/v1/messages", "/anthropic/v1/messages/count_tokens"] {
        let r = post(moved.addr, path, &ask("x"));
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["error"]["type"], "not_found_error", "{path}");
    }
    let r = post(moved.addr, "/v1/messages", &ask("x"));
    assert_eq!(r.json()["message"], "Route not found: POST /v1/messages");
    moved.shutdown();
}
