//! Semantic validation of parsed requests, in Dynamo 1.6.1's order and with its messages.
//!
//! Dynamo checks a chat request in two layers, and so do we:
//!
//! 1. the HTTP handler: deprecated `function_call` / `functions` (501), empty `messages`,
//!    `stream_options` without `stream` (400);
//! 2. `ValidateRequest::validate`: unsupported top-level parameters first, then each field in
//!    a fixed order (model, penalties, logit bias, token limits, `n`, …), then cross-field
//!    checks. The first failure wins.
//!
//! Every message carries Dynamo's `Validation: ` prefix. Ranges are checked on the parsed
//! `f32` values and printed with Rust's `Display`, as Dynamo does (`got 5`, `got -0.5`).
//! Completions skip layer 1 except the `stream_options` check (see `validate/completion.rs`).
//! `top_p` must be in (0, 1]: Dynamo 1.6.1 was observed rejecting `0`, unlike the inclusive
//! range in the sources we could read.
//!
//! Not checked here, as in Dynamo at this stage: whether the model exists (404 after
//! validation, by the caller), prompt length against the context window.

use serde_json::{Map, Value};

use super::chat::{thinking_mode, NvCreateChatCompletionRequest};
use super::chat_params::{ChatCompletionTool, ChatCompletionToolChoiceOption, ResponseFormat};
use super::common::Stop;
use super::messages::ChatMessage;
use super::nvext::NvExt;
use super::ParseOptions;
use crate::error::{Error, Kind};

mod completion;
pub(crate) use completion::completion;

/// The prefix of every semantic validation message.
pub const VALIDATION_PREFIX: &str = "Validation: ";

/// Passthrough extras accepted at top level although not declared by the request types.
pub const PASSTHROUGH_EXTRA_FIELDS: &[&str] =
    &["cache_salt", "stop_token_ids", "detokenize", "allowed_token_ids", "bad_words_token_ids", "logprob_token_ids"];

/// Maximum number of stop sequences (or stop token ids).
pub const MAX_STOP_SEQUENCES: usize = 32;
/// Maximum number of tools.
pub const MAX_TOOLS: usize = 1536;
/// Maximum function name length, bytes.
pub const MAX_FUNCTION_NAME_LENGTH: usize = 96;
/// Maximum `n`, and maximum batch × `n` for completions.
pub const MAX_N: u8 = 128;

/// Most output tokens a request may ask for (`max_tokens`, `max_completion_tokens`).
pub const MAX_OUTPUT_TOKENS: u32 = 1_048_576;

type Check = Result<(), String>;

fn bad_request(msg: String) -> Error {
    Error::new(Kind::BadRequest, format!("{VALIDATION_PREFIX}{msg}"))
}

/// Validates a chat request (both layers). `unknown` are the unsupported top-level names in
/// request order.
pub(crate) fn chat(req: &NvCreateChatCompletionRequest, unknown: &[String], opts: &ParseOptions) -> Result<(), Error> {
    // Layer 1: the handler.
    if req.function_call.is_some() {
        return Err(Error::new(
            Kind::NotImplemented,
            "Validation: `function_call` is deprecated. Please migrate to use `tool_choice` instead.",
        ));
    }
    if req.functions.is_some() {
        return Err(Error::new(
            Kind::NotImplemented,
            "Validation: `functions` is deprecated. Please migrate to use `tools` instead.",
        ));
    }
    if req.messages.is_empty() {
        return Err(bad_request("The 'messages' field cannot be empty. At least one message is required.".into()));
    }
    stream_options(req.stream, req.stream_options.is_some()).map_err(bad_request)?;
    // Layer 2: ValidateRequest.
    chat_fields(req, unknown, opts).map_err(bad_request)
}

fn chat_fields(req: &NvCreateChatCompletionRequest, unknown: &[String], opts: &ParseOptions) -> Check {
    unsupported(unknown, opts, req.passthrough_extras())?;
    if let Some(args) = &req.chat_template_args {
        if args.contains_key("chat_template") {
            return Err("`chat_template` is not supported inside `chat_template_args`".into());
        }
    }
    messages(&req.messages)?;
    model(&req.model)?;
    range("Frequency penalty", req.frequency_penalty, -2.0, 2.0)?;
    logit_bias(req.logit_bias.as_ref())?;
    if let Some(v) = req.top_logprobs {
        if v > 20 {
            return Err(format!("Top_logprobs must be between 0 and 20, got {v}"));
        }
    }
    max_tokens("Max tokens", req.max_tokens)?;
    max_tokens("Max completion tokens", req.max_completion_tokens)?;
    n(req.n)?;
    completion_token_ids(usize::from(req.n.unwrap_or(1)), req.nvext.as_ref())?;
    range("Presence penalty", req.presence_penalty, -2.0, 2.0)?;
    response_format(req.response_format.as_ref())?;
    stop(req.stop.as_ref())?;
    range("Temperature", req.temperature, 0.0, 2.0)?;
    top_p(req.top_p)?;
    tools(req.tools.as_deref())?;
    tool_choice(req)?;
    user(req.user.as_deref())?;
    common(req.repetition_penalty, req.min_p, req.top_k)?;
    n_with_temperature(req.n, req.temperature)?;
    if req.continue_final_message == Some(true) && req.add_generation_prompt.unwrap_or(true) {
        return Err("Cannot set both `continue_final_message` and `add_generation_prompt` to True.".into());
    }
    if let Some(t) = &req.thinking {
        thinking_mode(t).map_err(str::to_string)?;
    }
    Ok(())
}

fn stream_options(stream: Option<bool>, has_options: bool) -> Check {
    if !stream.unwrap_or(false) && has_options {
        return Err("The 'stream_options' field is only allowed when 'stream' is set to true.".into());
    }
    Ok(())
}

/// Unsupported names, then the types of the passthrough extras (in Dynamo's order:
/// `cache_salt`, `stop_token_ids`, `detokenize`, `allowed_token_ids`, `bad_words_token_ids`,
/// `logprob_token_ids`).
pub(crate) fn unsupported(unknown: &[String], opts: &ParseOptions, extras: [&Option<Value>; 6]) -> Check {
    if !unknown.is_empty() && !opts.ignore_unsupported_fields {
        let list: Vec<String> = unknown.iter().map(|k| format!("`{k}`")).collect();
        return Err(format!("Unsupported parameter(s): {}", list.join(", ")));
    }
    let [cache_salt, stop_ids, detokenize, allowed, bad_words, logprob_ids] = extras;
    if cache_salt.as_ref().is_some_and(|v| !v.is_string()) {
        return Err("`cache_salt` must be a string".into());
    }
    if stop_ids.as_ref().is_some_and(|v| !is_token_ids(v)) {
        return Err("`stop_token_ids` must be an array of token IDs".into());
    }
    if detokenize.as_ref().is_some_and(|v| !v.is_boolean()) {
        return Err("`detokenize` must be a boolean".into());
    }
    if allowed.as_ref().is_some_and(|v| !is_token_ids(v)) {
        return Err("`allowed_token_ids` must be an array of token IDs".into());
    }
    let arrays_ok = |v: &Value| v.as_array().is_some_and(|a| a.iter().all(is_token_ids));
    if bad_words.as_ref().is_some_and(|v| !arrays_ok(v)) {
        return Err("`bad_words_token_ids` must be an array of token ID arrays".into());
    }
    if logprob_ids.as_ref().is_some_and(|v| !is_token_ids(v)) {
        return Err("`logprob_token_ids` must be an array of token IDs".into());
    }
    Ok(())
}

/// An array of `u32` values (what `serde_json::from_value::<Vec<u32>>` accepts).
fn is_token_ids(v: &Value) -> bool {
    v.as_array().is_some_and(|a| a.iter().all(|x| x.as_u64().is_some_and(|n| u32::try_from(n).is_ok())))
}

fn messages(messages: &[ChatMessage]) -> Check {
    if messages.is_empty() {
        return Err("Messages array cannot be empty".into());
    }
    for (i, m) in messages.iter().enumerate() {
        let ChatMessage::Assistant(a) = m else { continue };
        for (j, call) in a.tool_calls.iter().flatten().enumerate() {
            let args = &call.function.arguments;
            if args.trim().is_empty() {
                continue;
            }
            let field = format!("`messages[{i}].tool_calls[{j}].function.arguments`");
            match serde_json::from_str::<Value>(args) {
                Ok(v) if v.is_object() => {}
                Ok(_) => return Err(format!("{field} must be a valid JSON object string")),
                Err(e) => return Err(format!("{field} must be a valid JSON object string: {e}")),
            }
        }
    }
    Ok(())
}

fn model(model: &str) -> Check {
    if model.trim().is_empty() {
        return Err("Model cannot be empty".into());
    }
    Ok(())
}

/// `{what} must be between {min} and {max}, got {v}` for values outside `[min, max]`.
fn range(what: &str, value: Option<f32>, min: f32, max: f32) -> Check {
    match value {
        Some(v) if !(min..=max).contains(&v) => Err(format!("{what} must be between {min} and {max}, got {v}")),
        _ => Ok(()),
    }
}

/// `top_p` in (0, 1]: Dynamo 1.6.1 was observed rejecting `0` with this message.
fn top_p(value: Option<f32>) -> Check {
    match value {
        Some(p) if p <= 0.0 || p > 1.0 => Err(format!("Top_p must be between 0 and 1, got {p}")),
        _ => Ok(()),
    }
}

fn logit_bias(bias: Option<&Map<String, Value>>) -> Check {
    for (token, value) in bias.into_iter().flatten() {
        let Some(b) = value.as_f64() else {
            return Err(format!("Logit bias value for token '{token}' must be a number, got {value:?}"));
        };
        let b = b as f32;
        if !(-100.0..=100.0).contains(&b) {
            return Err(format!("Logit bias for token '{token}' must be between -100 and 100, got {b}"));
        }
    }
    Ok(())
}

fn max_tokens(what: &str, value: Option<u32>) -> Check {
    match value {
        Some(0) => Err(format!("{what} must be greater than 0, got 0")),
        Some(v) if v > MAX_OUTPUT_TOKENS => Err(format!("{what} must not exceed {MAX_OUTPUT_TOKENS}, got {v}")),
        _ => Ok(()),
    }
}

fn n(n: Option<u8>) -> Check {
    match n {
        Some(v) if !(1..=MAX_N).contains(&v) => Err(format!("n must be between 1 and {MAX_N}, got {v}")),
        _ => Ok(()),
    }
}

fn completion_token_ids(choices: usize, nvext: Option<&NvExt>) -> Check {
    if choices > 1 && nvext.is_some_and(|x| x.wants_extra_field("completion_token_ids")) {
        return Err("`nvext.extra_fields=[\"completion_token_ids\"]` requires exactly one generated choice".into());
    }
    Ok(())
}

fn response_format(format: Option<&ResponseFormat>) -> Check {
    let Some(ResponseFormat::JsonSchema { json_schema }) = format else { return Ok(()) };
    if json_schema.name.is_empty() {
        return Err("`response_format.json_schema.name` cannot be empty".into());
    }
    let kind = match &json_schema.schema {
        Value::Null => {
            return Err("`response_format.json_schema.schema` is required when `response_format.type` is \
                        `json_schema`"
                .into())
        }
        Value::Object(_) => return Ok(()),
        Value::Array(_) => "array",
        Value::String(_) => "string",
        Value::Number(_) => "number",
        Value::Bool(_) => "boolean",
    };
    Err(format!("`response_format.json_schema.schema` must be a JSON object, got {kind}"))
}

fn stop(stop: Option<&Stop>) -> Check {
    match stop {
        None => Ok(()),
        Some(Stop::String(s)) if s.is_empty() => Err("Stop sequence cannot be empty".into()),
        Some(Stop::String(_)) => Ok(()),
        Some(Stop::StringArray(v)) => {
            if v.is_empty() {
                return Err("Stop sequences array cannot be empty".into());
            }
            if v.len() > MAX_STOP_SEQUENCES {
                return Err(format!("Maximum of {MAX_STOP_SEQUENCES} stop sequences allowed, got {}", v.len()));
            }
            match v.iter().position(String::is_empty) {
                Some(i) => Err(format!("Stop sequence at index {i} cannot be empty")),
                None => Ok(()),
            }
        }
        Some(Stop::TokenIdArray(v)) => {
            if v.is_empty() {
                return Err("Stop token IDs array cannot be empty".into());
            }
            if v.len() > MAX_STOP_SEQUENCES {
                return Err(format!("Maximum of {MAX_STOP_SEQUENCES} stop token IDs allowed, got {}", v.len()));
            }
            Ok(())
        }
    }
}

fn tools(tools: Option<&[ChatCompletionTool]>) -> Check {
    let Some(tools) = tools else { return Ok(()) };
    if tools.len() > MAX_TOOLS {
        return Err(format!("Maximum of {MAX_TOOLS} tools are supported, got {}", tools.len()));
    }
    for (i, tool) in tools.iter().enumerate() {
        let name = &tool.function.name;
        if name.len() > MAX_FUNCTION_NAME_LENGTH {
            return Err(format!(
                "Function name at index {i} exceeds {MAX_FUNCTION_NAME_LENGTH} character limit, \
                 got {} characters",
                name.len()
            ));
        }
        if name.trim().is_empty() {
            return Err(format!("Function name at index {i} cannot be empty"));
        }
        if !name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_' || b == b'-') {
            return Err(format!(
                "Function at index {i} has an invalid name: \"{name}\". Only a-z, A-Z, 0-9, \
                 underscores, and dashes are allowed."
            ));
        }
        super::strict::check_function(name, tool.function.strict, tool.function.parameters.as_ref())?;
    }
    Ok(())
}

/// Named or required `tool_choice` must refer to declared tools: top-level `tools` or
/// Kimi-style tools declared on system messages.
fn tool_choice(req: &NvCreateChatCompletionRequest) -> Check {
    let system_tools = || {
        req.messages.iter().filter_map(|m| match m {
            ChatMessage::System(s) => s.tools.as_deref(),
            _ => None,
        })
    };
    match &req.tool_choice {
        Some(ChatCompletionToolChoiceOption::Required) => {
            let top = req.tools.as_ref().is_some_and(|t| !t.is_empty());
            if !top && system_tools().all(|t| t.is_empty()) {
                return Err("tool_choice is \"required\" but tools is empty".into());
            }
            Ok(())
        }
        Some(ChatCompletionToolChoiceOption::Named(named)) => {
            let want = named.function.name.as_str();
            let in_top = req.tools.iter().flatten().any(|t| t.function.name == want);
            let in_system = system_tools().flatten().any(|t| {
                let name = t
                    .get("function")
                    .and_then(Value::as_object)
                    .and_then(|f| f.get("name"))
                    .or_else(|| t.get("name"))
                    .and_then(Value::as_str);
                name == Some(want)
            });
            if in_top || in_system {
                Ok(())
            } else {
                Err(format!("tool named \"{want}\" in tool_choice is not present in tools"))
            }
        }
        _ => Ok(()),
    }
}

fn user(user: Option<&str>) -> Check {
    if user.is_some_and(|u| u.trim().is_empty()) {
        return Err("User ID cannot be empty".into());
    }
    Ok(())
}

/// `CommonExt` checks: repetition penalty in (0, 2], min_p in [0, 1], top_k ≥ -1.
fn common(repetition_penalty: Option<f32>, min_p: Option<f32>, top_k: Option<i32>) -> Check {
    if let Some(p) = repetition_penalty {
        if p <= 0.0 || p > 2.0 {
            return Err(format!("Repetition penalty must be between 0 and 2, got {p}"));
        }
    }
    range("Min_p", min_p, 0.0, 1.0)?;
    if top_k.is_some_and(|k| k < -1) {
        return Err("Top_k must be null or greater than or equal to -1".into());
    }
    Ok(())
}

fn n_with_temperature(n: Option<u8>, temperature: Option<f32>) -> Check {
    if let Some(n) = n.filter(|n| *n > 1) {
        let t = temperature.unwrap_or(1.0);
        if t == 0.0 {
            return Err(format!(
                "When n > 1, temperature must be greater than 0 to ensure diverse outputs. \
                 Got n={n}, temperature={t}"
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn range_messages_use_f32_display() {
        assert_eq!(
            range("Temperature", Some(5.0), 0.0, 2.0),
            Err("Temperature must be between 0 and 2, got 5".to_string())
        );
        assert_eq!(
            range("Temperature", Some(-0.5), 0.0, 2.0),
            Err("Temperature must be between 0 and 2, got -0.5".to_string())
        );
        assert_eq!(top_p(Some(1.0)), Ok(()));
        assert_eq!(top_p(Some(0.0)), Err("Top_p must be between 0 and 1, got 0".to_string()));
    }
}
