//! Request parsing and validation against Dynamo 1.6.1's recorded answers.
//!
//! Each `recorded_*` test is one case recorded from the real Dynamo 1.6.1 frontend
//! (`cases/<group>/<name>` in the observation notes). The recordings kept the request's
//! Content-Length but not its bytes; the bodies below were rebuilt to that exact length and
//! agree with every column number Dynamo printed. Expected messages are copied verbatim.
//! Cases whose Dynamo answer is 404 (unknown model) or 200 must parse and validate here: the
//! 404 comes from the model lookup that follows validation. 413 cases are the HTTP layer's.
//!
//! After them: behaviour taken from Dynamo's source where nothing was recorded, the
//! equivalence of the fast and the error path, and never-panic property tests.

#![recursion_limit = "256"]

use proptest::prelude::*;
use serde_json::{json, Value};
use switchyard::error::{Error, Kind};
use switchyard::openai::{
    check_content_type, parse_chat, parse_chat_with, parse_completion, ChatMessage, ContentPart, MessageContent,
    NvCreateChatCompletionRequest, NvCreateCompletionRequest, ParseOptions, Prompt,
};

/// The recorded base chat body (90 bytes).
const CHAT: &str = r#"{"model":"/work/observe/qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":5}"#;

/// `CHAT` with `extra` inserted before the closing brace.
fn chat_with(extra: &str) -> String {
    format!("{},{extra}}}", &CHAT[..CHAT.len() - 1])
}

fn ok_chat(body: &str, len: usize) -> NvCreateChatCompletionRequest {
    assert_eq!(body.len(), len, "rebuilt body must have the recorded Content-Length");
    match parse_chat(body.as_bytes()) {
        Ok(r) => *r,
        Err(e) => panic!("expected success for {body}: {e}"),
    }
}

fn ok_completion(body: &str, len: usize) -> NvCreateCompletionRequest {
    assert_eq!(body.len(), len, "rebuilt body must have the recorded Content-Length");
    match parse_completion(body.as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("expected success for {body}: {e}"),
    }
}

fn check_err<T: std::fmt::Debug>(res: Result<T, Error>, status: u16, message: &str) {
    match res {
        Ok(v) => panic!("expected {status} {message:?}, got {v:?}"),
        Err(e) => {
            assert_eq!(e.message(), message);
            assert_eq!(e.status(), status, "{message}");
        }
    }
}

fn err_chat(body: &str, len: usize, message: &str) {
    assert_eq!(body.len(), len, "rebuilt body must have the recorded Content-Length");
    check_err(parse_chat(body.as_bytes()), 400, message);
}

fn err_completion(body: &str, len: usize, message: &str) {
    assert_eq!(body.len(), len, "rebuilt body must have the recorded Content-Length");
    check_err(parse_completion(body.as_bytes()), 400, message);
}

const CT_415: &str = "Expected request with Content-Type application/json";

/// A chat body of exactly `len` bytes carrying an unknown `pad` string.
fn padded_chat(len: usize) -> String {
    let head = chat_with(r#""pad":""#);
    let pad = len - head.len() - 2;
    let mut s = String::with_capacity(len);
    s.push_str(&head);
    s.extend(std::iter::repeat_n('x', pad));
    s.push_str("\"}");
    s
}

// ---------------------------------------------------------------- cases/model: chat_*

#[test]
fn recorded_chat_ok() {
    let r = ok_chat(CHAT, 90);
    assert_eq!(r.model, "/work/observe/qwen3");
    assert_eq!(r.max_tokens(), Some(5));
    assert!(!r.is_streaming());
}

#[test]
fn recorded_chat_text_plain() {
    check_err(check_content_type(Some(b"text/plain")), 415, CT_415);
}

#[test]
fn recorded_chat_no_ct() {
    check_err(check_content_type(None), 415, CT_415);
}

#[test]
fn recorded_chat_form_ct() {
    check_err(check_content_type(Some(b"application/x-www-form-urlencoded")), 415, CT_415);
}

#[test]
fn recorded_chat_json_charset() {
    assert!(check_content_type(Some(b"application/json; charset=utf-8")).is_ok());
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_vnd_json() {
    assert!(check_content_type(Some(b"application/vnd.api+json")).is_ok());
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_invalid_json() {
    err_chat(
        r#"{"model":"#,
        9,
        "Failed to deserialize the JSON body into the target type: EOF while parsing a value at line 1 column 9",
    );
}

#[test]
fn recorded_chat_invalid_json2() {
    err_chat(
        r#"{"model":"x",}"#,
        14,
        "Failed to deserialize the JSON body into the target type: trailing comma at line 1 column 14",
    );
}

#[test]
fn recorded_chat_empty_body() {
    err_chat(
        "",
        0,
        "Failed to deserialize the JSON body into the target type: EOF while parsing a value at line 1 column 0",
    );
}

#[test]
fn recorded_chat_array() {
    err_chat(
        "[1,2]",
        5,
        "Failed to deserialize the JSON body into the target type: invalid type: sequence, expected struct NvCreateChatCompletionRequest at line 1 column 0",
    );
}

#[test]
fn recorded_chat_string() {
    err_chat(
        r#""hello""#,
        7,
        "Failed to deserialize the JSON body into the target type: invalid type: string \"hello\", expected struct NvCreateChatCompletionRequest at line 1 column 7",
    );
}

#[test]
fn recorded_chat_missing_messages() {
    err_chat(
        r#"{"model":"/work/observe/qwen3"}"#,
        31,
        "Failed to deserialize the JSON body into the target type: missing field `messages` at line 1 column 31",
    );
}

#[test]
fn recorded_chat_missing_model() {
    err_chat(
        r#"{"messages":[{"role":"user","content":"hi"}]}"#,
        45,
        "Failed to deserialize the JSON body into the target type: missing field `model` at line 1 column 45",
    );
}

#[test]
fn recorded_chat_unknown_model() {
    // Dynamo: 404 "Model not found", from the lookup after validation.
    let r = ok_chat(r#"{"model":"nope","messages":[{"role":"user","content":"hi"}]}"#, 60);
    assert_eq!(r.model, "nope");
}

#[test]
fn recorded_chat_unknown_field() {
    err_chat(&chat_with(r#""foo":1"#), 98, "Validation: Unsupported parameter(s): `foo`");
}

#[test]
fn recorded_chat_max_tokens_neg() {
    err_chat(
        &CHAT.replace(r#""max_tokens":5"#, r#""max_tokens":-1"#),
        91,
        "Failed to deserialize the JSON body into the target type: invalid value: integer `-1`, expected u32 at line 1 column 91",
    );
}

#[test]
fn recorded_chat_max_tokens_zero() {
    err_chat(
        &CHAT.replace(r#""max_tokens":5"#, r#""max_tokens":0"#),
        90,
        "Validation: Max tokens must be greater than 0, got 0",
    );
}

#[test]
fn recorded_chat_temperature_5() {
    err_chat(&chat_with(r#""temperature":5"#), 106, "Validation: Temperature must be between 0 and 2, got 5");
}

#[test]
fn recorded_chat_n_2() {
    assert_eq!(ok_chat(&chat_with(r#""n":2"#), 96).choices(), 2);
}

#[test]
fn recorded_chat_messages_empty() {
    err_chat(
        r#"{"model":"/work/observe/qwen3","messages":[],"max_tokens":5}"#,
        60,
        "Validation: The 'messages' field cannot be empty. At least one message is required.",
    );
}

#[test]
fn recorded_chat_two_unknown() {
    err_chat(&chat_with(r#""zzz":1,"foo":1"#), 106, "Validation: Unsupported parameter(s): `zzz`, `foo`");
}

#[test]
fn recorded_chat_temperature_neg() {
    err_chat(&chat_with(r#""temperature":-0.5"#), 109, "Validation: Temperature must be between 0 and 2, got -0.5");
}

#[test]
fn recorded_chat_temperature_2() {
    assert_eq!(ok_chat(&chat_with(r#""temperature":2"#), 106).temperature, Some(2.0));
}

#[test]
fn recorded_chat_top_p_2() {
    err_chat(&chat_with(r#""top_p":2"#), 100, "Validation: Top_p must be between 0 and 1, got 2");
}

#[test]
fn recorded_chat_top_p_0() {
    // Dynamo 1.6.1 rejects 0: its top_p range is (0, 1], unlike the [0, 1] of newer sources.
    err_chat(&chat_with(r#""top_p":0"#), 100, "Validation: Top_p must be between 0 and 1, got 0");
}

#[test]
fn recorded_chat_freq_pen_3() {
    err_chat(
        &chat_with(r#""frequency_penalty":3"#),
        112,
        "Validation: Frequency penalty must be between -2 and 2, got 3",
    );
}

#[test]
fn recorded_chat_pres_pen_neg3() {
    err_chat(
        &chat_with(r#""presence_penalty":-3"#),
        112,
        "Validation: Presence penalty must be between -2 and 2, got -3",
    );
}

#[test]
fn recorded_chat_n_0() {
    err_chat(&chat_with(r#""n":0"#), 96, "Validation: n must be between 1 and 128, got 0");
}

#[test]
fn recorded_chat_n_200() {
    err_chat(&chat_with(r#""n":200"#), 98, "Validation: n must be between 1 and 128, got 200");
}

#[test]
fn recorded_chat_top_logprobs_30() {
    err_chat(
        &chat_with(r#""logprobs":true,"top_logprobs":30"#),
        124,
        "Validation: Top_logprobs must be between 0 and 20, got 30",
    );
}

#[test]
fn recorded_chat_stop_5() {
    let r = ok_chat(&chat_with(r#""stop":["a","b","c","d","e"]"#), 119);
    assert_eq!(r.stop_strings(), ["a", "b", "c", "d", "e"]);
}

#[test]
fn recorded_chat_max_tokens_str() {
    err_chat(
        &CHAT.replace(r#""max_tokens":5"#, r#""max_tokens":"5""#),
        92,
        "Failed to deserialize the JSON body into the target type: invalid type: string \"5\", expected u32 at line 1 column 92",
    );
}

#[test]
fn recorded_chat_stream_str() {
    err_chat(
        &chat_with(r#""stream":"yes""#),
        105,
        "Failed to deserialize the JSON body into the target type: invalid type: string \"yes\", expected a boolean at line 1 column 105",
    );
}

#[test]
fn recorded_chat_model_empty() {
    err_chat(&CHAT.replace("/work/observe/qwen3", ""), 71, "Validation: Model cannot be empty");
}

#[test]
fn recorded_chat_role_bogus() {
    err_chat(
        &CHAT.replace(r#""role":"user""#, r#""role":"bogus""#),
        91,
        "Failed to deserialize the JSON body into the target type: unknown variant `bogus`, expected one of `developer`, `system`, `user`, `assistant`, `tool`, `function` at line 1 column 91",
    );
}

#[test]
fn recorded_chat_no_content() {
    err_chat(
        r#"{"model":"/work/observe/qwen3","messages":[{"role":"user"}],"max_tokens":5}"#,
        75,
        "Failed to deserialize the JSON body into the target type: missing field `content` at line 1 column 75",
    );
}

#[test]
fn recorded_chat_msg_not_obj() {
    err_chat(
        r#"{"model":"/work/observe/qwen3","messages":["hi"],"max_tokens":5}"#,
        64,
        "Failed to deserialize the JSON body into the target type: invalid type: string \"hi\", expected internally tagged enum Wire at line 1 column 64",
    );
}

#[test]
fn recorded_chat_max_completion_tokens() {
    let r = ok_chat(&CHAT.replace(r#""max_tokens":5"#, r#""max_completion_tokens":2"#), 101);
    assert_eq!(r.max_tokens(), Some(2));
}

#[test]
fn recorded_chat_seed_neg() {
    assert_eq!(ok_chat(&chat_with(r#""seed":-1"#), 100).seed, Some(-1));
}

#[test]
fn recorded_chat_logit_bias() {
    err_chat(
        &chat_with(r#""logit_bias":{"1":200}"#),
        113,
        "Validation: Logit bias for token '1' must be between -100 and 100, got 200",
    );
}

#[test]
fn recorded_chat_null_model() {
    err_chat(
        r#"{"model":null,"messages":[{"role":"user","content":"hi"}]}"#,
        58,
        "Failed to deserialize the JSON body into the target type: invalid type: null, expected a string at line 1 column 58",
    );
}

#[test]
fn recorded_chat_user_field() {
    assert_eq!(ok_chat(&chat_with(r#""user":"u1""#), 102).user.as_deref(), Some("u1"));
}

#[test]
fn recorded_chat_nvext() {
    err_chat(
        &chat_with(r#""nvext":{"ignore_eos":true}"#),
        118,
        "Failed to deserialize the JSON body into the target type: unknown field `ignore_eos`, expected one of `greed_sampling`, `use_raw_prompt`, `annotations`, `backend_instance_id`, `token_data`, `max_thinking_tokens`, `cache_salt`, `extra_fields`, `metadata_upload`, `prefill_worker_id`, `decode_worker_id`, `dp_rank`, `prefill_dp_rank`, `agent_hints`, `request_timestamp_ms`, `routing_constraints`, `router` at line 1 column 111",
    );
}

#[test]
fn recorded_chat_stream() {
    let r = ok_chat(&chat_with(r#""stream":true"#), 104);
    assert!(r.is_streaming());
    assert!(!r.include_usage());
}

#[test]
fn recorded_chat_stream_usage() {
    let r = ok_chat(&chat_with(r#""stream":true,"stream_options":{"include_usage":true}"#), 144);
    assert!(r.is_streaming() && r.include_usage());
}

#[test]
fn recorded_chat_chunked_req() {
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_expect100() {
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_2mb_default_limit() {
    err_chat(&padded_chat(2_097_261), 2_097_261, "Validation: Unsupported parameter(s): `pad`");
}

#[test]
fn recorded_chat_45mb_exact() {
    err_chat(&padded_chat(47_185_920), 47_185_920, "Validation: Unsupported parameter(s): `pad`");
}

#[test]
fn recorded_chat_x_request_id() {
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_x_request_id_400() {
    err_chat(
        r#"{"model":"/work/observe/qwen3","messages":[]}"#,
        45,
        "Validation: The 'messages' field cannot be empty. At least one message is required.",
    );
}

#[test]
fn recorded_chat_x_request_id_404() {
    ok_chat(r#"{"model":"nope","messages":[{"role":"user","content":"hi"}]}"#, 60);
}

#[test]
fn recorded_chat_x_request_id_stream() {
    ok_chat(&chat_with(r#""stream":true"#), 104);
}

#[test]
fn recorded_chat_x_dynamo_request_id() {
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_chat_x_dynamo_request_id_bad() {
    ok_chat(CHAT, 90);
}

#[test]
fn recorded_text_plain_x_request_id() {
    check_err(check_content_type(Some(b"text/plain")), 415, CT_415);
}

// ---------------------------------------------------------------- cases/model: comp_*

#[test]
fn recorded_comp_ok() {
    let r = ok_completion(r#"{"model":"/work/observe/qwen3","prompt":"Hello","max_tokens":4}"#, 63);
    assert_eq!(r.prompt, Prompt::String("Hello".into()));
    assert_eq!(r.max_tokens(), Some(4));
}

#[test]
fn recorded_comp_missing_prompt() {
    err_completion(
        r#"{"model":"/work/observe/qwen3","max_tokens":5}"#,
        46,
        "Failed to deserialize the JSON body into the target type: missing field `prompt` at line 1 column 46",
    );
}

#[test]
fn recorded_comp_unknown_model() {
    ok_completion(r#"{"model":"nope","prompt":"Hello"}"#, 33);
}

#[test]
fn recorded_comp_missing_model() {
    err_completion(
        r#"{"prompt":"Hello"}"#,
        18,
        "Failed to deserialize the JSON body into the target type: missing field `model` at line 1 column 18",
    );
}

#[test]
fn recorded_comp_unknown_field() {
    err_completion(
        r#"{"model":"/work/observe/qwen3","prompt":"Hello","foo":1}"#,
        56,
        "Validation: Unsupported parameter(s): `foo`",
    );
}

#[test]
fn recorded_comp_text_plain() {
    check_err(check_content_type(Some(b"text/plain")), 415, CT_415);
}

#[test]
fn recorded_comp_invalid_json() {
    err_completion(
        "{",
        1,
        "Failed to deserialize the JSON body into the target type: EOF while parsing an object at line 1 column 1",
    );
}

#[test]
fn recorded_comp_empty_prompt() {
    err_completion(
        r#"{"model":"/work/observe/qwen3","prompt":"","max_tokens":5}"#,
        58,
        "Validation: Prompt string cannot be empty",
    );
}

#[test]
fn recorded_comp_prompt_array() {
    let r = ok_completion(r#"{"model":"/work/observe/qwen3","prompt":["a","b"],"max_tokens":2}"#, 65);
    assert_eq!(r.prompt.batch_size(), 2);
}

#[test]
fn recorded_comp_prompt_tokens() {
    let r = ok_completion(r#"{"model":"/work/observe/qwen3","prompt":[1,2,3],"max_tokens":2}"#, 63);
    assert_eq!(r.prompt, Prompt::IntegerArray(vec![1, 2, 3]));
}

#[test]
fn recorded_comp_temperature_5() {
    err_completion(
        r#"{"model":"/work/observe/qwen3","prompt":"hi","temperature":5}"#,
        61,
        "Validation: Temperature must be between 0 and 2, got 5",
    );
}

#[test]
fn recorded_comp_max_tokens_neg() {
    err_completion(
        r#"{"model":"/work/observe/qwen3","prompt":"hi","max_tokens":-1}"#,
        61,
        "Failed to deserialize the JSON body into the target type: invalid value: integer `-1`, expected u32 at line 1 column 61",
    );
}

#[test]
fn recorded_comp_stream() {
    let r = ok_completion(r#"{"model":"/work/observe/qwen3","prompt":"Hello","max_tokens":4,"stream":true}"#, 77);
    assert!(r.is_streaming());
}

#[test]
fn recorded_comp_x_request_id() {
    ok_completion(r#"{"model":"/work/observe/qwen3","prompt":"hi","max_tokens":5}"#, 60);
}

// ---------------------------------------------------------------- other groups

#[test]
fn recorded_bodylimit1mb_chat_09mb() {
    err_chat(&padded_chat(943_827), 943_827, "Validation: Unsupported parameter(s): `pad`");
}

#[test]
fn recorded_bodylimit1mb_chat_1mb_exact() {
    err_chat(&padded_chat(1_048_576), 1_048_576, "Validation: Unsupported parameter(s): `pad`");
}

#[test]
fn recorded_model2_chat_qwen3() {
    ok_chat(&CHAT.replace("/work/observe/qwen3", "qwen3"), 76);
}

#[test]
fn recorded_clean_chat_nonstream() {
    ok_chat(&CHAT.replace(r#""hi""#, r#""Hello there""#), 99);
}

#[test]
fn recorded_clean_chat_stream() {
    let body = CHAT.replace(r#""hi""#, r#""Hello there""#);
    let body = format!("{},\"stream\":true}}", &body[..body.len() - 1]);
    assert!(ok_chat(&body, 113).is_streaming());
}

#[test]
fn recorded_pathoverride_post_cmp_new() {
    ok_completion(r#"{"model":"/work/observe/qwen3","prompt":"hi","max_tokens":5}"#, 60);
}

// ---------------------------------------------------------------- not recorded: Dynamo's source

fn chat_err(body: &Value, status: u16, message: &str) {
    check_err(parse_chat(body.to_string().as_bytes()), status, message);
}

fn base() -> Value {
    json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
}

fn base_with(key: &str, value: Value) -> Value {
    let mut b = base();
    b[key] = value;
    b
}

#[test]
fn deprecated_function_call_is_501() {
    chat_err(
        &base_with("function_call", json!("auto")),
        501,
        "Validation: `function_call` is deprecated. Please migrate to use `tool_choice` instead.",
    );
    chat_err(
        &base_with("functions", json!([{"name": "f", "parameters": {}}])),
        501,
        "Validation: `functions` is deprecated. Please migrate to use `tools` instead.",
    );
}

#[test]
fn stream_options_need_stream() {
    chat_err(
        &base_with("stream_options", json!({"include_usage": true})),
        400,
        "Validation: The 'stream_options' field is only allowed when 'stream' is set to true.",
    );
    let body = json!({"model": "m", "prompt": "x", "stream_options": {"include_usage": null}});
    check_err(
        parse_completion(body.to_string().as_bytes()),
        400,
        "Validation: The 'stream_options' field is only allowed when 'stream' is set to true.",
    );
}

#[test]
fn handler_checks_come_before_unsupported_fields_which_come_before_ranges() {
    let empty = json!({"model": "m", "messages": [], "foo": 1});
    chat_err(&empty, 400, "Validation: The 'messages' field cannot be empty. At least one message is required.");
    let mut both = base_with("temperature", json!(5));
    both["foo"] = json!(1);
    chat_err(&both, 400, "Validation: Unsupported parameter(s): `foo`");
    // Deserialization errors come before everything.
    let mut bad = base_with("max_tokens", json!(-1));
    bad["messages"] = json!([]);
    let text = bad.to_string();
    let msg = format!(
        "Failed to deserialize the JSON body into the target type: invalid value: integer `-1`, expected u32 at line 1 column {}",
        text.len()
    );
    check_err(parse_chat(text.as_bytes()), 400, &msg);
}

#[test]
fn first_range_error_follows_dynamo_order() {
    // frequency_penalty is checked before temperature, whatever the key order.
    let mut b = base_with("temperature", json!(9));
    b["frequency_penalty"] = json!(9);
    chat_err(&b, 400, "Validation: Frequency penalty must be between -2 and 2, got 9");
    let b = base_with("temperature", json!(0.1));
    assert!(parse_chat(b.to_string().as_bytes()).is_ok());
}

#[test]
fn passthrough_extras_are_type_checked() {
    let ok = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}],
        "cache_salt": "s", "stop_token_ids": [1, 2], "detokenize": false,
        "allowed_token_ids": [3], "bad_words_token_ids": [[4, 5]]});
    let r = match parse_chat(ok.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.cache_salt(), Some("s"));
    assert_eq!(r.stop_token_ids(), Some(vec![1, 2]));
    chat_err(&base_with("cache_salt", json!(5)), 400, "Validation: `cache_salt` must be a string");
    chat_err(
        &base_with("stop_token_ids", json!("bad")),
        400,
        "Validation: `stop_token_ids` must be an array of token IDs",
    );
    chat_err(&base_with("detokenize", json!(null)), 400, "Validation: `detokenize` must be a boolean");
    chat_err(
        &base_with("bad_words_token_ids", json!([1])),
        400,
        "Validation: `bad_words_token_ids` must be an array of token ID arrays",
    );
}

#[test]
fn ignore_unsupported_fields_option() {
    let opts = ParseOptions { ignore_unsupported_fields: true };
    let b = base_with("foo", json!({"x": 1}));
    assert!(parse_chat_with(b.to_string().as_bytes(), &opts).is_ok());
    let b = base_with("cache_salt", json!(1));
    check_err(parse_chat_with(b.to_string().as_bytes(), &opts), 400, "Validation: `cache_salt` must be a string");
}

#[test]
fn messages_of_every_role_and_content_shape() {
    let body = json!({"model": "m", "messages": [
        {"role": "developer", "content": [{"type": "text", "text": "d"}]},
        {"role": "system", "content": "s", "name": "n"},
        {"role": "user", "content": [
            {"type": "text", "text": "look"},
            {"type": "image_url", "image_url": {"url": "https://x.test/a.png", "detail": "low"}},
            {"type": "image_url", "image_url": {"url": ""}, "uuid": "cache-key"},
            {"type": "video_url", "video_url": {"url": "data:video/mp4;base64,AAAA"}},
            {"type": "audio_url", "audio_url": {"url": "file:///a.wav"}},
            {"type": "input_audio", "input_audio": {"data": "AAAA", "format": "wav"}}
        ]},
        {"role": "assistant", "content": null, "reasoning": "thought",
         "tool_calls": [{"id": "c1", "function": {"name": "f", "arguments": {"b": 1, "a": 2}}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "r"}]},
        {"role": "assistant", "content": [{"type": "refusal", "refusal": "no"}], "partial": true},
        {"role": "function", "name": "f", "content": null}
    ]});
    let r = match parse_chat(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.messages.len(), 7);
    let roles: Vec<&str> = r.messages.iter().map(ChatMessage::role).collect();
    assert_eq!(roles, ["developer", "system", "user", "assistant", "tool", "assistant", "function"]);
    let ChatMessage::User(u) = &r.messages[2] else { panic!("user") };
    let MessageContent::Parts(parts) = &u.content else { panic!("parts") };
    assert_eq!(parts.len(), 6);
    let ContentPart::ImageUrl(empty) = &parts[2] else { panic!("image") };
    assert!(empty.image_url.is_none(), "{{\"url\":\"\"}} means absent");
    let ChatMessage::Assistant(a) = &r.messages[3] else { panic!("assistant") };
    assert!(a.content.is_none());
    assert!(a.reasoning_content.is_some(), "`reasoning` is an alias");
    let args = &a.tool_calls.as_ref().map(|c| c[0].function.arguments.clone());
    assert_eq!(args.as_deref(), Some(r#"{"b":1,"a":2}"#), "object arguments keep key order");
    // Serializing back gives OpenAI's shape, for the chat template.
    let back = serde_json::to_value(&r.messages[2]).unwrap_or(Value::Null);
    assert_eq!(back["role"], "user");
    assert_eq!(back["content"][1]["type"], "image_url");
}

#[test]
fn content_rules_per_role() {
    let unknown_part = json!({"model": "m", "messages": [{"role": "user",
        "content": [{"type": "file", "file": {}}]}]})
    .to_string();
    check_err(
        parse_chat(unknown_part.as_bytes()),
        400,
        &format!("Failed to deserialize the JSON body into the target type: data did not match any variant of untagged enum ChatCompletionRequestUserMessageContent at line 1 column {}", unknown_part.len()),
    );
    let bad_url = json!({"model": "m", "messages": [{"role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "no scheme"}}]}]})
    .to_string();
    assert!(parse_chat(bad_url.as_bytes()).is_err());
    let system_image = json!({"model": "m", "messages": [{"role": "system",
        "content": [{"type": "image_url", "image_url": {"url": "https://x.test/a"}}]}]})
    .to_string();
    check_err(
        parse_chat(system_image.as_bytes()),
        400,
        &format!("Failed to deserialize the JSON body into the target type: data did not match any variant of untagged enum ChatCompletionRequestSystemMessageContent at line 1 column {}", system_image.len()),
    );
    let partial_user = json!({"model": "m", "messages": [{"role": "user", "content": "x",
        "partial": true}]})
    .to_string();
    check_err(
        parse_chat(partial_user.as_bytes()),
        400,
        &format!("Failed to deserialize the JSON body into the target type: `partial` is only accepted on assistant messages, not on role user at line 1 column {}", partial_user.len()),
    );
    let system_no_content = json!({"model": "m", "messages": [{"role": "system"}]}).to_string();
    check_err(
        parse_chat(system_no_content.as_bytes()),
        400,
        &format!("Failed to deserialize the JSON body into the target type: missing field `content`: a system message needs `content` unless it declares non-empty Kimi-style `tools` at line 1 column {}", system_no_content.len()),
    );
    let kimi = json!({"model": "m", "messages": [{"role": "system",
        "tools": [{"type": "function", "function": {"name": "t"}}]},
        {"role": "user", "content": "x"}],
        "tool_choice": {"type": "function", "function": {"name": "t"}}});
    assert!(parse_chat(kimi.to_string().as_bytes()).is_ok());
}

#[test]
fn tool_call_arguments_must_be_json_objects() {
    let b = json!({"model": "m", "messages": [
        {"role": "assistant", "tool_calls": [{"id": "1", "type": "function",
            "function": {"name": "f", "arguments": "[1]"}}]},
        {"role": "assistant", "tool_calls": [{"id": "2",
            "function": {"name": "f", "arguments": "{oops"}}]}]});
    chat_err(&b, 400, "Validation: `messages[0].tool_calls[0].function.arguments` must be a valid JSON object string");
    let b = json!({"model": "m", "messages": [{"role": "assistant", "tool_calls": [{"id": "2",
        "function": {"name": "f", "arguments": "{oops"}}]}]});
    chat_err(
        &b,
        400,
        "Validation: `messages[0].tool_calls[0].function.arguments` must be a valid JSON object string: key must be a string at line 1 column 2",
    );
}

#[test]
fn tools_and_tool_choice() {
    let schema =
        r#"{"type":"object","properties":{"zeta":{"type":"string"},"alpha":{"type":"integer"}},"required":["zeta"]}"#;
    let body = format!(
        r#"{{"model":"m","messages":[{{"role":"user","content":"hi"}}],"tools":[{{"type":"function","function":{{"name":"get_weather","parameters":{schema}}}}}],"tool_choice":"required","parallel_tool_calls":false}}"#
    );
    let r = match parse_chat(body.as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    let params = r.tools.as_ref().and_then(|t| t[0].function.parameters.as_ref());
    assert_eq!(params.map(Value::to_string).as_deref(), Some(schema), "schema key order is kept");
    chat_err(
        &base_with("tool_choice", json!("required")),
        400,
        "Validation: tool_choice is \"required\" but tools is empty",
    );
    let mut b = base_with("tools", json!([{"type": "function", "function": {"name": "a"}}]));
    b["tool_choice"] = json!({"type": "function", "function": {"name": "b"}});
    chat_err(&b, 400, "Validation: tool named \"b\" in tool_choice is not present in tools");
    chat_err(
        &base_with("tools", json!([{"type": "function", "function": {"name": "a b"}}])),
        400,
        "Validation: Function at index 0 has an invalid name: \"a b\". Only a-z, A-Z, 0-9, underscores, and dashes are allowed.",
    );
}

#[test]
fn response_format_and_guided_json() {
    let r = parse_chat(base_with("response_format", json!({"type": "json_object"})).to_string().as_bytes());
    assert_eq!(r.ok().and_then(|r| r.guided_json().map(|v| v.into_owned())), Some(json!({"type": "object"})));
    chat_err(
        &base_with("response_format", json!({"type": "json_schema", "json_schema": {"name": "x", "schema": null}})),
        400,
        "Validation: `response_format.json_schema.schema` is required when `response_format.type` is `json_schema`",
    );
    // As the 1.6.1 binary answers it: a missing schema fails the parse itself.
    let missing = parse_chat(
        base_with("response_format", json!({"type": "json_schema", "json_schema": {"name": "x"}}))
            .to_string()
            .as_bytes(),
    )
    .unwrap_err();
    assert!(missing
        .message()
        .starts_with("Failed to deserialize the JSON body into the target type: missing field `schema`"));
    chat_err(
        &base_with("response_format", json!({"type": "json_schema", "json_schema": {"name": "x", "schema": [1]}})),
        400,
        "Validation: `response_format.json_schema.schema` must be a JSON object, got array",
    );
}

#[test]
fn stop_rules() {
    chat_err(&base_with("stop", json!("")), 400, "Validation: Stop sequence cannot be empty");
    chat_err(&base_with("stop", json!([])), 400, "Validation: Stop sequences array cannot be empty");
    chat_err(&base_with("stop", json!(["a", ""])), 400, "Validation: Stop sequence at index 1 cannot be empty");
    let r = parse_chat(base_with("stop", json!([576])).to_string().as_bytes());
    assert_eq!(r.ok().and_then(|r| r.stop_token_ids()), Some(vec![576]));
    let r = parse_chat(base_with("stop", json!("END")).to_string().as_bytes());
    assert_eq!(r.ok().map(|r| r.stop_strings().to_vec()), Some(vec!["END".to_string()]));
}

#[test]
fn common_ext_rules_and_accessors() {
    chat_err(
        &base_with("repetition_penalty", json!(0)),
        400,
        "Validation: Repetition penalty must be between 0 and 2, got 0",
    );
    chat_err(&base_with("min_p", json!(1.5)), 400, "Validation: Min_p must be between 0 and 1, got 1.5");
    chat_err(&base_with("top_k", json!(-2)), 400, "Validation: Top_k must be null or greater than or equal to -1");
    let mut b = base_with("n", json!(2));
    b["temperature"] = json!(0);
    chat_err(
        &b,
        400,
        "Validation: When n > 1, temperature must be greater than 0 to ensure diverse outputs. Got n=2, temperature=0",
    );
    let r = match parse_chat(base().to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert!(r.skip_special_tokens(), "defaults to true");
    assert!(!r.include_stop_str_in_output() && !r.ignore_eos());
    assert_eq!(r.output_logprobs(), None);
    let mut b = base_with("ignore_eos", json!(true));
    b["min_tokens"] = json!(3);
    b["skip_special_tokens"] = json!(false);
    b["logprobs"] = json!(true);
    let r = match parse_chat(b.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert!(r.ignore_eos() && !r.skip_special_tokens());
    assert_eq!((r.min_tokens, r.output_logprobs()), (Some(3), Some(1)));
}

#[test]
fn template_args_fold_thinking_and_effort() {
    let mut b = base_with("chat_template_kwargs", json!({"enable_thinking": false, "x": 1}));
    b["reasoning_effort"] = json!("high");
    b["thinking"] = json!({"type": "enabled"});
    let r = match parse_chat(b.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    // The top-level `thinking` decides, and the decision is written in every dialect
    // (the nested `enable_thinking: false` is overruled), as Dynamo 1.6.1 resolves it.
    let args = Value::Object(r.template_args());
    assert_eq!(
        args,
        json!({"enable_thinking": true, "x": 1, "thinking": true,
        "thinking_mode": "enabled", "reasoning_effort": "high"})
    );
    chat_err(
        &base_with("chat_template_args", json!({"chat_template": "x"})),
        400,
        "Validation: `chat_template` is not supported inside `chat_template_args`",
    );
    chat_err(
        &base_with("thinking", json!("yes")),
        400,
        "Validation: `thinking` must be a boolean or an object with `type` set to `enabled`, `disabled`, or `adaptive`",
    );
}

#[test]
fn nvext_members_and_in_place_errors() {
    let b = base_with(
        "nvext",
        json!({"greed_sampling": true, "annotations": ["request_id"],
        "backend_instance_id": 7, "cache_salt": "s", "agent_hints": {"priority": 1, "osl": 10},
        "routing_constraints": {"required_taints": ["gpu"], "preferred_taints": {"x": 0.5}},
        "router": {"ttft_target": 100.0}}),
    );
    let r = match parse_chat(b.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("{e}"),
    };
    assert_eq!(r.nvext.as_ref().and_then(|n| n.backend_instance_id), Some(7));
    assert_eq!(r.cache_salt(), Some("s"));
    // A type error inside nvext is reported where it happens, not at the end of the body.
    let body = r#"{"nvext":{"backend_instance_id":"x"},"model":"m","messages":[]}"#;
    check_err(
        parse_chat(body.as_bytes()),
        400,
        "Failed to deserialize the JSON body into the target type: invalid type: string \"x\", expected u64 at line 1 column 35",
    );
}

#[test]
fn completion_rules() {
    let c = |v: Value| parse_completion(v.to_string().as_bytes());
    check_err(c(json!({"model": "m", "prompt": []})), 400, "Validation: Prompt string array cannot be empty");
    check_err(
        c(json!({"model": "m", "prompt": [[1], []]})),
        400,
        "Validation: Prompt integer array at index 1 cannot be empty",
    );
    check_err(
        c(json!({"model": "m", "prompt": "x", "logprobs": 6})),
        400,
        "Validation: Logprobs must be between 0 and 5, got 6",
    );
    check_err(
        c(json!({"model": "m", "prompt": "x", "n": 3, "best_of": 2})),
        400,
        "Validation: Best_of must be greater than or equal to n, got best_of=2 and n=3",
    );
    check_err(
        c(json!({"model": "m", "prompt": ["a", "b", "c"], "n": 100})),
        400,
        "Validation: Total choices (batch_size × n = 3 × 100 = 300) exceeds maximum of 128",
    );
    check_err(
        c(json!({"model": "m", "prompt": "x", "prompt_embeds": "!!"})),
        400,
        "Validation: prompt_embeds must be valid base64-encoded data",
    );
    check_err(
        c(json!({"model": "m", "prompt": "x", "prompt_embeds": "AAAA"})),
        400,
        "Validation: prompt_embeds decoded data must be at least 100 bytes, got 3 bytes",
    );
    let echo = r#"{"model":"m","prompt":"x","echo":1}"#;
    check_err(
        parse_completion(echo.as_bytes()),
        400,
        "Failed to deserialize the JSON body into the target type: invalid type: integer `1`, expected echo parameter to be a boolean (true or false) or null at line 1 column 35",
    );
    let r = c(json!({"model": "m", "prompt": "x", "echo": true, "no_stop_trim": true, "metadata": {"k": 1}}));
    assert_eq!(r.ok().and_then(|r| r.prompt_logprobs()), Some(1));
}

// ---------------------------------------------------------------- fast path == error path

fn kitchen_sink_chat() -> Value {
    json!({
        "model": "m",
        "messages": [{"role": "system", "content": "s"}, {"role": "user", "content": "u"}],
        "mm_processor_kwargs": {"a": 1}, "store": false, "reasoning_effort": "low",
        "metadata": {"k": "v"}, "frequency_penalty": 0.5, "logit_bias": {"5": -1},
        "logprobs": true, "top_logprobs": 3, "max_tokens": 10, "max_completion_tokens": 8,
        "n": 1, "modalities": ["text"],
        "prediction": {"type": "content", "content": "p"},
        "audio": {"voice": "verse", "format": "wav"}, "presence_penalty": -0.5,
        "response_format": {"type": "json_schema", "json_schema": {"name": "n", "schema": {"b": 1, "a": 2}}},
        "seed": 42, "service_tier": "auto", "stop": ["x"], "stream": true,
        "stream_options": {"include_usage": true, "continuous_usage_stats": null},
        "temperature": 0.7, "top_p": 0.9,
        "tools": [{"type": "function", "function": {"name": "t", "description": "d",
            "parameters": {"type": "object", "additionalProperties": false}, "strict": true}}],
        "tool_choice": {"type": "function", "function": {"name": "t"}},
        "parallel_tool_calls": true, "user": "u1", "prompt_cache_key": "k",
        "web_search_options": {"search_context_size": "low",
            "user_location": {"type": "approximate", "approximate": {"city": "c"}}},
        "ignore_eos": false, "min_tokens": 1, "top_k": 5, "min_p": 0.1,
        "repetition_penalty": 1.1, "include_stop_str_in_output": true,
        "guided_json": null, "guided_regex": "a+", "guided_grammar": "g",
        "guided_choice": ["a"], "guided_decoding_backend": "xgrammar",
        "guided_whitespace_pattern": " ", "skip_special_tokens": false, "prompt_logprobs": 2,
        "nvext": {"extra_fields": ["timing"]}, "chat_template_args": {"enable_thinking": true},
        "thinking": false, "thinking_token_budget": 100, "media_io_kwargs": {"video": {}},
        "return_tokens_as_token_ids": true, "cache_salt": "salt", "stop_token_ids": [1],
        "detokenize": true, "allowed_token_ids": [1, 2], "bad_words_token_ids": [[3]]
    })
}

fn kitchen_sink_completion() -> Value {
    json!({
        "model": "m", "prompt": [[1, 2], [3]], "suffix": "s", "max_tokens": 3,
        "temperature": 1, "top_p": 1, "n": 2, "stream": true,
        "stream_options": {"include_usage": true}, "logprobs": 2, "echo": false,
        "stop": "x", "presence_penalty": 0, "frequency_penalty": 0, "best_of": 2,
        "logit_bias": {"1": 1}, "user": "u", "seed": 1,
        "ignore_eos": true, "min_tokens": 1, "top_k": -1, "min_p": 0, "repetition_penalty": 2,
        "include_stop_str_in_output": false, "guided_json": {"type": "object"},
        "guided_regex": null, "guided_grammar": null, "guided_choice": null,
        "guided_decoding_backend": null, "guided_whitespace_pattern": null,
        "skip_special_tokens": true, "prompt_logprobs": 0,
        "nvext": {"use_raw_prompt": true}, "metadata": [1], "no_stop_trim": true,
        "return_tokens_as_token_ids": false, "cache_salt": "c", "stop_token_ids": [],
        "detokenize": false, "allowed_token_ids": [], "bad_words_token_ids": []
    })
}

#[test]
fn every_chat_field_parses_the_same_on_both_paths() {
    let body = kitchen_sink_chat();
    let fast = match parse_chat(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("kitchen sink must be valid: {e}"),
    };
    let mut with_unknown = body.clone();
    with_unknown["zz_unknown"] = json!(1);
    let text = with_unknown.to_string();
    check_err(parse_chat(text.as_bytes()), 400, "Validation: Unsupported parameter(s): `zz_unknown`");
    let opts = ParseOptions { ignore_unsupported_fields: true };
    let slow = match parse_chat_with(text.as_bytes(), &opts) {
        Ok(r) => r,
        Err(e) => panic!("error path must accept the same fields: {e}"),
    };
    assert_eq!(fast, slow);
    assert_eq!(fast.max_tokens(), Some(8));
}

#[test]
fn every_completion_field_parses_the_same_on_both_paths() {
    let body = kitchen_sink_completion();
    let fast = match parse_completion(body.to_string().as_bytes()) {
        Ok(r) => r,
        Err(e) => panic!("kitchen sink must be valid: {e}"),
    };
    let mut with_unknown = body.clone();
    with_unknown["zz_unknown"] = json!(null);
    let text = with_unknown.to_string();
    let opts = ParseOptions { ignore_unsupported_fields: true };
    let slow = switchyard::openai::parse_completion_with(text.as_bytes(), &opts);
    assert_eq!(slow.ok(), Some(fast));
}

#[test]
fn duplicate_keys_are_rejected_like_dynamo() {
    let body = r#"{"model":"m","model":"n","messages":[{"role":"user","content":"hi"}]}"#;
    check_err(
        parse_chat(body.as_bytes()),
        400,
        &format!(
            "Failed to deserialize the JSON body into the target type: duplicate field `model` at line 1 column {}",
            body.len()
        ),
    );
}

// ---------------------------------------------------------------- never panic

const KEYS: &[&str] = &[
    "model",
    "messages",
    "prompt",
    "max_tokens",
    "max_completion_tokens",
    "temperature",
    "top_p",
    "n",
    "stream",
    "stream_options",
    "stop",
    "logit_bias",
    "logprobs",
    "top_logprobs",
    "tools",
    "tool_choice",
    "response_format",
    "nvext",
    "chat_template_args",
    "thinking",
    "echo",
    "best_of",
    "suffix",
    "prompt_embeds",
    "user",
    "seed",
    "ignore_eos",
    "min_tokens",
    "top_k",
    "min_p",
    "repetition_penalty",
    "guided_json",
    "cache_salt",
    "stop_token_ids",
    "bad_words_token_ids",
    "role",
    "content",
    "type",
    "text",
    "image_url",
    "url",
    "function",
    "name",
    "arguments",
    "tool_calls",
    "partial",
    "reasoning_effort",
    "audio",
    "prediction",
    "functions",
    "function_call",
    "metadata",
    "zzz",
];

fn arb_json() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        (0u32..300).prop_map(Value::from),
        (-1e6f64..1e6).prop_map(Value::from),
        "[a-z_ ]{0,6}".prop_map(Value::String),
        prop::sample::select(vec![
            "user",
            "assistant",
            "system",
            "tool",
            "text",
            "function",
            "json_schema",
            "auto",
            "required",
            "https://x.test/a",
            ""
        ])
        .prop_map(Value::from),
    ];
    leaf.prop_recursive(4, 40, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..5).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6)
                .prop_map(|kv| { Value::Object(kv.into_iter().map(|(k, v)| (k.to_string(), v)).collect()) }),
        ]
    })
}

fn arb_body() -> impl Strategy<Value = Value> {
    let msg = json!({"role": "user", "content": "hi"});
    (prop::collection::vec((prop::sample::select(KEYS), arb_json()), 0..8), any::<bool>()).prop_map(
        move |(kv, seed_valid)| {
            let mut m = serde_json::Map::new();
            if seed_valid {
                m.insert("model".into(), json!("m"));
                m.insert("messages".into(), json!([msg.clone()]));
                m.insert("prompt".into(), json!("p"));
            }
            for (k, v) in kv {
                m.insert(k.to_string(), v);
            }
            Value::Object(m)
        },
    )
}

fn assert_sane(res: Result<impl std::fmt::Debug, Error>) {
    if let Err(e) = res {
        let m = e.message();
        assert!(
            m.starts_with("Failed to deserialize the JSON body into the target type: ")
                || m.starts_with("Validation: "),
            "unexpected message {m:?}"
        );
        match e.kind() {
            Kind::BadRequest => {}
            Kind::NotImplemented => assert!(m.contains("deprecated")),
            k => panic!("unexpected kind {k:?}"),
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn random_bytes_never_panic(bytes in prop::collection::vec(any::<u8>(), 0..256)) {
        assert_sane(parse_chat(&bytes));
        assert_sane(parse_completion(&bytes));
    }

    #[test]
    fn random_objects_never_panic(body in arb_body()) {
        let text = body.to_string();
        assert_sane(parse_chat(text.as_bytes()));
        assert_sane(parse_completion(text.as_bytes()));
    }

    #[test]
    fn garbled_valid_bodies_never_panic(
        which in any::<bool>(),
        cut in any::<prop::sample::Index>(),
        pos in any::<prop::sample::Index>(),
        byte in any::<u8>(),
        insert in "[\\[\\]{}\",:0-9a-z\\\\ ]{0,4}",
    ) {
        let base = if which { kitchen_sink_chat() } else { kitchen_sink_completion() }.to_string();
        let mut bytes = base.into_bytes();
        let p = pos.index(bytes.len());
        bytes[p] = byte;
        let p = pos.index(bytes.len());
        bytes.splice(p..p, insert.bytes());
        assert_sane(parse_chat(&bytes));
        assert_sane(parse_completion(&bytes));
        let c = cut.index(bytes.len() + 1);
        assert_sane(parse_chat(&bytes[..c]));
        assert_sane(parse_completion(&bytes[..c]));
    }
}

#[test]
fn valid_bodies_take_the_single_pass_path() {
    // The public flat struct deserializes valid requests directly (the hot path); only
    // failing bodies are re-parsed through Dynamo's layout.
    assert!(serde_json::from_value::<NvCreateChatCompletionRequest>(kitchen_sink_chat()).is_ok());
    assert!(serde_json::from_value::<NvCreateCompletionRequest>(kitchen_sink_completion()).is_ok());
    assert!(serde_json::from_str::<NvCreateChatCompletionRequest>(CHAT).is_ok());
}

#[test]
fn deep_nesting_is_bounded_by_serde_json_on_a_2mib_stack() {
    let run = || {
        for depth in [100usize, 126, 127, 128, 200, 10_000] {
            let nest = format!("{}{}", "[".repeat(depth), "]".repeat(depth));
            for body in [
                chat_with(&format!(r#""metadata":{nest}"#)),
                CHAT.replace(r#""hi""#, &nest),
                chat_with(&format!(r#""tools":[{{"type":"function","function":{{"name":"f","parameters":{nest}}}}}]"#)),
                chat_with(&format!(r#""nvext":{{"annotations":{nest}}}"#)),
                format!(r#"{{"model":"m","prompt":{nest}}}"#),
            ] {
                assert_sane(parse_chat(body.as_bytes()));
                assert_sane(parse_completion(body.as_bytes()));
            }
        }
    };
    let handle = std::thread::Builder::new().stack_size(2 << 20).spawn(run);
    assert!(handle.map(|h| h.join().is_ok()).unwrap_or(false));
}
