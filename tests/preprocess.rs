//! OpenAI request → prompt → token ids, end to end on the real Qwen3 files; and model
//! directories that cannot be served fail at load with a clear error, never a panic.

use serde_json::{json, Value};
use switchyard::openai::parse_chat;
use switchyard::openai::to_infer::chat_input_of;
use switchyard::tokenize::preprocess::{chat_prompt, encode_prompt, PreprocessOptions};
use switchyard::tokenize::ModelFiles;

fn models() -> std::path::PathBuf {
    match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => d.into(),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/switchyard-models"),
    }
}

fn qwen3() -> ModelFiles {
    let dir = models().join("qwen3");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "run `bash scripts/fetch-models.sh` first (missing {})",
        dir.display()
    );
    ModelFiles::load(dir).unwrap()
}

fn expected(id: &str) -> (String, Vec<u32>) {
    let all: Vec<Value> = serde_json::from_str(include_str!("corpus/expected/qwen3.json")).unwrap();
    let e = all.iter().find(|e| e["id"] == id).unwrap();
    let ids = e["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
    (e["prompt"].as_str().unwrap().to_string(), ids)
}

fn conversation(id: &str) -> Value {
    let all: Vec<Value> = serde_json::from_str(include_str!("corpus/conversations.json")).unwrap();
    all.into_iter().find(|c| c["id"] == id).unwrap()
}

/// Where Dynamo 1.6.1's request path differs from a plain `apply_chat_template`, switchyard
/// renders as 1.6.1 does: tools re-serialized in OpenAI's member order (`name`,
/// `description`, `parameters`) with a missing description as `""`, and a generation prompt
/// by default even after a final assistant message (vLLM's default).
#[test]
fn requests_render_like_dynamo() {
    let model = qwen3();
    let render = |body: Value| {
        let body = body.to_string();
        let req = parse_chat(body.as_bytes()).unwrap_or_else(|e| panic!("{e}"));
        chat_prompt(&chat_input_of(&req, body.as_bytes()), &model, PreprocessOptions::default(), None).unwrap()
    };
    let conv = conversation("tools_defined_no_calls");
    let prompt = render(json!({"model": "qwen3", "messages": conv["messages"], "tools": conv["tools"]}));
    let (want, _) = expected("tools_defined_no_calls");
    // The corpus (transformers) keeps the client's order: `parameters` before `description`.
    assert_ne!(prompt, want);
    assert!(prompt.contains(r#"{"name": "search_flights", "description": "Search for flights"#), "{prompt}");
    let bare = json!([{"type": "function", "function": {"name": "ping"}}]);
    let prompt = render(json!({"model": "qwen3", "messages": [{"role": "user", "content": "hi"}], "tools": bare}));
    assert!(prompt.contains(r#"{"type": "function", "function": {"name": "ping", "description": ""}}"#), "{prompt}");
    let conv = conversation("basic_ends_with_assistant");
    let prompt = render(json!({"model": "qwen3", "messages": conv["messages"]}));
    assert!(prompt.ends_with("<|im_end|>\n<|im_start|>assistant\n"), "{prompt}");
    let prompt = render(json!({"model": "qwen3", "messages": conv["messages"], "add_generation_prompt": false}));
    let (want, _) = expected("basic_ends_with_assistant");
    assert_eq!(prompt, want);
}

/// A request carrying a corpus conversation renders and tokenizes like transformers (where
/// Dynamo 1.6.1 renders as transformers does: see `requests_render_like_dynamo` for where it
/// does not).
#[test]
fn requests_render_like_transformers() {
    let model = qwen3();
    let tok = model.tokenizer().unwrap();
    for id in ["basic_system_user", "multi_turn_3", "unicode_cjk"] {
        let conv = conversation(id);
        let mut body = json!({"model": "qwen3", "messages": conv["messages"]});
        if let Some(t) = conv.get("tools") {
            body["tools"] = t.clone();
        }
        let body = body.to_string();
        let req = parse_chat(body.as_bytes()).unwrap_or_else(|e| panic!("{id}: {e}"));
        let prompt = chat_prompt(
            &chat_input_of(&req, body.as_bytes()),
            &model,
            PreprocessOptions::default(),
            Some(1_721_952_000),
        )
        .unwrap();
        let (want_prompt, want_ids) = expected(id);
        assert_eq!(prompt, want_prompt, "{id}");
        assert_eq!(encode_prompt(&tok, &prompt).unwrap(), want_ids, "{id}");
    }
}

#[test]
fn tool_choice_none_leaves_tools_out_and_kwargs_reach_the_template() {
    let model = qwen3();
    let tools = json!([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {}}}}]);
    let base = json!({"model": "q", "messages": [{"role": "user", "content": "hi"}], "tools": tools});
    let with_body = base.to_string();
    let with = parse_chat(with_body.as_bytes()).unwrap();
    let mut none = base.clone();
    none["tool_choice"] = json!("none");
    let none_body = none.to_string();
    let none = parse_chat(none_body.as_bytes()).unwrap();
    let p_with =
        chat_prompt(&chat_input_of(&with, with_body.as_bytes()), &model, PreprocessOptions::default(), None).unwrap();
    let p_none =
        chat_prompt(&chat_input_of(&none, none_body.as_bytes()), &model, PreprocessOptions::default(), None).unwrap();
    assert!(p_with.contains("get_weather") && !p_none.contains("get_weather"));
    let keep = PreprocessOptions { exclude_tools_when_tool_choice_none: false, ..PreprocessOptions::default() };
    assert!(chat_prompt(&chat_input_of(&none, none_body.as_bytes()), &model, keep, None)
        .unwrap()
        .contains("get_weather"));

    let mut thinking = json!({"model": "q", "messages": [{"role": "user", "content": "hi"}]});
    thinking["chat_template_kwargs"] = json!({"enable_thinking": false});
    let body = thinking.to_string();
    let req = parse_chat(body.as_bytes()).unwrap();
    let prompt =
        chat_prompt(&chat_input_of(&req, body.as_bytes()), &model, PreprocessOptions::default(), None).unwrap();
    assert!(prompt.ends_with("<think>\n\n</think>\n\n"), "{prompt:?}");
}

fn scratch_dir(tag: &str) -> std::path::PathBuf {
    let d = std::env::temp_dir().join(format!("sy-model-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn broken_model_directories_fail_at_load_with_the_file_named() {
    let src = models().join("qwen3");
    assert!(src.is_dir(), "run `bash scripts/fetch-models.sh` first");
    let missing = scratch_dir("missing");
    let e = ModelFiles::load(&missing).unwrap_err();
    assert!(e.to_string().contains("tokenizer.json"), "{e}");

    let garbled = scratch_dir("garbled");
    std::fs::write(garbled.join("tokenizer.json"), b"{\"model\": {\"type\": \"BPE\", ").unwrap();
    let e = ModelFiles::load(&garbled).unwrap_err();
    assert!(e.to_string().contains("tokenizer.json"), "{e}");

    let bad_template = scratch_dir("template");
    std::fs::copy(src.join("tokenizer.json"), bad_template.join("tokenizer.json")).unwrap();
    std::fs::write(bad_template.join("chat_template.jinja"), "{% for m in messages %}{{ m.content }").unwrap();
    let e = ModelFiles::load(&bad_template).unwrap_err();
    assert!(e.to_string().contains("chat template"), "{e}");

    let bad_config = scratch_dir("config");
    std::fs::copy(src.join("tokenizer.json"), bad_config.join("tokenizer.json")).unwrap();
    std::fs::write(bad_config.join("config.json"), "{not json").unwrap();
    let e = ModelFiles::load(&bad_config).unwrap_err();
    assert!(e.to_string().contains("config.json"), "{e}");
    for d in [missing, garbled, bad_template, bad_config] {
        let _ = std::fs::remove_dir_all(d);
    }
}

#[test]
fn a_template_that_raises_is_a_400_for_that_request() {
    let src = models().join("qwen3");
    let dir = scratch_dir("raises");
    std::fs::copy(src.join("tokenizer.json"), dir.join("tokenizer.json")).unwrap();
    std::fs::write(
        dir.join("chat_template.jinja"),
        "{% if messages[0].role != 'system' %}{{ raise_exception('System message required') }}{% endif %}ok",
    )
    .unwrap();
    let model = ModelFiles::load(&dir).unwrap();
    let body = br#"{"model":"q","messages":[{"role":"user","content":"hi"}]}"#;
    let req = parse_chat(body).unwrap();
    let e = chat_prompt(&chat_input_of(&req, body), &model, PreprocessOptions::default(), None).unwrap_err();
    assert_eq!(e.status(), 400);
    assert!(e.message().contains("System message required"), "{}", e.message());
    let _ = std::fs::remove_dir_all(dir);
}
