//! The native chat-template renderer (`switchyard::tokenize::native`) gives exactly what the
//! template engine gives: random requests — system and user turns with arbitrary text
//! (template syntax, special-token text, the strings Qwen3's template tests for), template
//! arguments it reads, ignores or must not accept, tools, non-string content, assistant
//! turns — render the same prompt (or fail with the same message) with the native renderer
//! allowed and with it turned off. Needs the real Qwen3 files (`bash scripts/fetch-models.sh`).

use proptest::prelude::*;
use serde_json::{json, Value};
use switchyard::openai::parse_chat;
use switchyard::openai::to_infer::chat_input_of;
use switchyard::tokenize::native::{Native, Role, Turn};
use switchyard::tokenize::preprocess::{chat_prompt, PreprocessOptions};
use switchyard::tokenize::ModelFiles;

fn qwen3() -> &'static ModelFiles {
    static MODEL: std::sync::OnceLock<ModelFiles> = std::sync::OnceLock::new();
    MODEL.get_or_init(load)
}

fn load() -> ModelFiles {
    let dir = match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => std::path::PathBuf::from(d),
        None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/switchyard-models"),
    }
    .join("qwen3");
    assert!(
        dir.join("tokenizer.json").is_file(),
        "run `bash scripts/fetch-models.sh` first (missing {})",
        dir.display()
    );
    ModelFiles::load(dir).unwrap()
}

const ENGINE: PreprocessOptions =
    PreprocessOptions { exclude_tools_when_tool_choice_none: true, native_templates: false };

/// The prompt (or the error text) with and without the native renderer.
fn both(model: &ModelFiles, body: &str) -> Option<(Result<String, String>, Result<String, String>)> {
    let req = parse_chat(body.as_bytes()).ok()?;
    let render =
        |opts| chat_prompt(&chat_input_of(&req, body.as_bytes()), model, opts, Some(0)).map_err(|e| e.to_string());
    Some((render(PreprocessOptions::default()), render(ENGINE)))
}

#[test]
fn qwen3_is_recognised_and_a_plain_conversation_is_rendered_natively() {
    let model = qwen3();
    let template = model.template(false).unwrap();
    assert_eq!(template.native(), Some(Native::Qwen3));
    let turns = [Turn { role: Role::System, content: "Be brief." }, Turn { role: Role::User, content: "Hi" }];
    let got = Native::Qwen3.render(turns.iter().copied(), true, &serde_json::Map::new());
    assert_eq!(
        got.as_deref(),
        Some("<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n")
    );
    // Arguments the template could see some other way are left to the engine.
    let mut shadow = serde_json::Map::new();
    shadow.insert("namespace".into(), json!(1));
    assert_eq!(Native::Qwen3.render(turns.iter().copied(), true, &shadow), None);
    assert_eq!(Native::Qwen3.render([].into_iter(), true, &serde_json::Map::new()), None);
    // A template that differs by one byte is not recognised.
    assert_eq!(Native::recognise("{{ messages }}"), None);
}

#[test]
fn edge_requests_render_the_same_both_ways() {
    let model = qwen3();
    let bodies = [
        r#"{"model":"q","messages":[{"role":"system","content":"s","name":"n"},{"role":"user","content":"u","name":"m"}]}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"chat_template_kwargs":{"add_generation_prompt":false}}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"chat_template_kwargs":{"continue_final_message":true}}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"chat_template_kwargs":{"documents":[{"t":1}]}}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"reasoning_effort":"none"}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"chat_template_args":{"enable_thinking":false}}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"tools":[]}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"<tool_response>r</tool_response>"}]}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"u"}],"tools":[{"type":"function","function":{"name":"f"}}],"tool_choice":"none"}"#,
    ];
    for body in bodies {
        let (native, engine) = both(model, body).unwrap_or_else(|| panic!("rejected at parse: {body}"));
        assert_eq!(native, engine, "{body}");
    }
    // A key given twice never reaches either renderer (the typed parse rejects it), so the
    // typed message the native renderer reads cannot differ from the raw one the engine reads.
    for body in [
        r#"{"model":"q","messages":[{"role":"user","content":"a","content":"b"}]}"#,
        r#"{"model":"q","messages":[{"role":"user","content":"a","role":"system"}]}"#,
    ] {
        assert!(both(model, body).is_none(), "{body}");
    }
}

fn text() -> impl Strategy<Value = String> {
    let pieces = prop::sample::select(vec![
        "<tool_response>",
        "</tool_response>",
        "</think>",
        "<think>",
        "<|im_start|>",
        "<|im_end|>",
        "{{ x }}",
        "{% if %}",
        "\n",
        " ",
        "Hello",
        "ü€😀",
        "\\",
        "\"",
    ]);
    prop_oneof![prop::collection::vec(pieces, 0..6).prop_map(|v| v.concat()), "\\PC{0,24}", Just(String::new()),]
}

fn message() -> impl Strategy<Value = Value> {
    let content = prop_oneof![
        8 => text().prop_map(Value::String),
        1 => text().prop_map(|t| json!([{"type": "text", "text": t}])),
        1 => Just(Value::Null),
    ];
    let role = prop::sample::select(vec!["system", "user", "user", "assistant", "developer", "tool"]);
    (role, content, any::<bool>()).prop_map(|(role, content, named)| {
        let mut m = json!({"role": role, "content": content});
        if named {
            m["name"] = json!("n");
        }
        if role == "tool" {
            m["tool_call_id"] = json!("c1");
        }
        m
    })
}

fn kwargs() -> impl Strategy<Value = Option<Value>> {
    let value = prop::sample::select(vec![json!(true), json!(false), json!(null), json!(0), json!("false")]);
    let key = prop::sample::select(vec![
        "enable_thinking",
        "add_generation_prompt",
        "continue_final_message",
        "thinking",
        "namespace",
        "messages",
        "other",
    ]);
    prop::option::of(prop::collection::btree_map(key, value, 0..3).prop_map(|m| json!(m)))
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]
    #[test]
    fn random_requests_render_the_same_both_ways(
        messages in prop::collection::vec(message(), 1..5),
        kwargs in kwargs(),
        effort in prop::option::of(prop::sample::select(vec!["none", "low", "high"])),
        tools in prop::option::of(prop::sample::select(vec!["none", "auto"])),
    ) {
        let model = qwen3();
        let mut body = json!({"model": "q", "messages": messages});
        if let Some(k) = kwargs {
            body["chat_template_kwargs"] = k;
        }
        if let Some(e) = effort {
            body["reasoning_effort"] = json!(e);
        }
        if let Some(choice) = tools {
            body["tools"] = json!([{"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}}]);
            body["tool_choice"] = json!(choice);
        }
        let body = body.to_string();
        if let Some((native, engine)) = both(model, &body) {
            prop_assert_eq!(native, engine, "{}", body);
        }
    }
}
