//! `POST /v1/chat/completions` request: [`NvCreateChatCompletionRequest`], its parsing, and the
//! accessors the pipeline reads (effective token limit, stop strings, streaming, template
//! arguments, guided decoding…).
//!
//! Accepted top-level fields are exactly Dynamo 1.6.1's: OpenAI's chat request (including
//! Kimi's `prompt_cache_key`, vLLM's `mm_processor_kwargs`), Dynamo's `CommonExt` (`ignore_eos`,
//! `min_tokens`, `top_k`, `min_p`, `repetition_penalty`, `include_stop_str_in_output`,
//! `guided_*`, `skip_special_tokens`, `prompt_logprobs`), the direct extensions (`nvext`,
//! `chat_template_args` alias `chat_template_kwargs`, `thinking`, `thinking_token_budget`,
//! `media_io_kwargs`, `return_tokens_as_token_ids`) and the passthrough extras (`cache_salt`,
//! `stop_token_ids`, `detokenize`, `allowed_token_ids`, `bad_words_token_ids`). Anything else
//! is `Validation: Unsupported parameter(s): …`. See `shape.rs` for why the struct is
//! declared through a macro.

use std::borrow::Cow;

use serde_json::{Map, Value};

use super::chat_params::{
    ChatCompletionAudio, ChatCompletionFunctionCall, ChatCompletionFunctions, ChatCompletionTool,
    ChatCompletionToolChoiceOption, PredictionContent, ReasoningEffort, ResponseFormat, ResponseModalities,
    ServiceTier, WebSearchOptions,
};
use super::common::{starts_with_object, ChatCompletionStreamOptions, Stop};
use super::messages::{with_quick_messages, ChatMessage};
use super::nvext::NvExt;
use super::{deserialize_error, validate, ParseOptions};
use crate::error::Error;

common_ext_fields!(request_types! {
    /// A chat completion request as Dynamo 1.6.1 accepts it, all fields at top level.
    ///
    /// Build it with [`super::parse_chat`]; a value obtained that way has passed Dynamo's
    /// validation. Fields keep the client's values (no defaults applied); use the accessor
    /// methods for effective values.
    flat NvCreateChatCompletionRequest;
    shape mod dynamo_shape;
    inner {
        /// The conversation (never empty after validation).
        messages: Vec<ChatMessage>,
        /// Served model name.
        model: String,
        /// vLLM multimodal processor options, passed through.
        mm_processor_kwargs: Option<Value>,
        /// OpenAI `store` (ignored).
        store: Option<bool>,
        /// Reasoning effort; also folded into the template arguments.
        reasoning_effort: Option<ReasoningEffort>,
        /// Free-form metadata.
        metadata: Option<Value>,
        /// -2..=2.
        frequency_penalty: Option<f32>,
        /// Token id (as string) to bias in -100..=100; values are raw JSON as in Dynamo.
        logit_bias: Option<Map<String, Value>>,
        /// Return log probabilities of output tokens.
        logprobs: Option<bool>,
        /// 0..=20 alternatives per position.
        top_logprobs: Option<u8>,
        /// Deprecated token limit; see [`NvCreateChatCompletionRequest::max_tokens`].
        max_tokens: Option<u32>,
        /// Token limit, preferred over `max_tokens`.
        max_completion_tokens: Option<u32>,
        /// Number of choices, 1..=128.
        n: Option<u8>,
        /// Output modalities.
        modalities: Option<Vec<ResponseModalities>>,
        /// Predicted output.
        prediction: Option<PredictionContent>,
        /// Audio output parameters.
        audio: Option<ChatCompletionAudio>,
        /// -2..=2.
        presence_penalty: Option<f32>,
        /// Structured output; see [`NvCreateChatCompletionRequest::guided_json`].
        response_format: Option<ResponseFormat>,
        /// Sampling seed.
        seed: Option<i64>,
        /// OpenAI service tier (ignored).
        service_tier: Option<ServiceTier>,
        /// Stop strings or stop token ids.
        stop: Option<Stop>,
        /// Stream the answer as server-sent events.
        #[serde(default)]
        stream: Option<bool>,
        /// Streaming options (only with `stream: true`).
        stream_options: Option<ChatCompletionStreamOptions>,
        /// 0..=2.
        temperature: Option<f32>,
        /// 0..=1.
        top_p: Option<f32>,
        /// Functions the model may call.
        tools: Option<Vec<ChatCompletionTool>>,
        /// Tool selection.
        tool_choice: Option<ChatCompletionToolChoiceOption>,
        /// Allow several tool calls in one turn.
        parallel_tool_calls: Option<bool>,
        /// End-user id; must not be blank.
        user: Option<String>,
        /// Prompt-cache affinity key (accepted, unused).
        prompt_cache_key: Option<String>,
        /// Deprecated; rejected with 501.
        function_call: Option<ChatCompletionFunctionCall>,
        /// Deprecated; rejected with 501.
        functions: Option<Vec<ChatCompletionFunctions>>,
        /// Web search options (accepted, unused).
        web_search_options: Option<WebSearchOptions>,
    }
    direct {
        /// NVIDIA extensions.
        nvext: Option<NvExt>,
        /// Extra variables for the chat template; `chat_template_kwargs` is an alias.
        #[serde(default, alias = "chat_template_kwargs")]
        chat_template_args: Option<Map<String, Value>>,
        /// OpenAI-style thinking control (`true`/`false` or `{"type": …}`).
        #[serde(default)]
        thinking: Option<Value>,
        /// Thinking token budget, forwarded to the backend.
        #[serde(default)]
        thinking_token_budget: Option<u32>,
        /// Media decoding parameters, passed through opaque.
        #[serde(default)]
        media_io_kwargs: Option<Value>,
        /// Report logprob tokens as `token_id:<id>`.
        #[serde(default)]
        return_tokens_as_token_ids: Option<bool>,
    }
    passthrough {
        /// Top-level cache salt (must be a string).
        cache_salt,
        /// Extra stop token ids (array of token ids).
        stop_token_ids,
        /// Backend detokenization switch (boolean).
        detokenize,
        /// Allowed token ids (array of token ids).
        allowed_token_ids,
        /// Banned token sequences (array of arrays of token ids).
        bad_words_token_ids,
        /// Token ids whose logprobs are reported (array of token ids).
        logprob_token_ids,
    }
});

impl NvCreateChatCompletionRequest {
    /// Parses and validates a chat request body (Dynamo's order; see [`super`]). Boxed: the
    /// request is ~2 KB, and each move on its way through the pipeline was a `memcpy`.
    pub fn from_json(body: &[u8], opts: &ParseOptions) -> Result<Box<Self>, Error> {
        let (req, unknown) = decode(body)?;
        validate::chat(&req, &unknown, opts)?;
        Ok(req)
    }

    /// Effective output token limit: `max_completion_tokens`, else `max_tokens`.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_completion_tokens.or(self.max_tokens)
    }

    shared_accessors!();

    /// Number of top log probabilities per output token: `top_logprobs` (1 if unset) when
    /// `logprobs` is true, otherwise none.
    pub fn output_logprobs(&self) -> Option<u32> {
        match self.logprobs {
            Some(true) => Some(self.top_logprobs.map_or(1, u32::from)),
            _ => None,
        }
    }

    /// Guided-decoding JSON schema: `guided_json`, else derived from `response_format`
    /// (`json_object` → `{"type":"object"}`, `json_schema` → its schema).
    pub fn guided_json(&self) -> Option<Cow<'_, Value>> {
        if let Some(v) = &self.guided_json {
            return Some(Cow::Borrowed(v));
        }
        match &self.response_format {
            Some(ResponseFormat::JsonObject) => {
                let mut m = Map::new();
                m.insert("type".into(), Value::String("object".into()));
                Some(Cow::Owned(Value::Object(m)))
            }
            Some(ResponseFormat::JsonSchema { json_schema }) => {
                (!json_schema.schema.is_null()).then_some(Cow::Borrowed(&json_schema.schema))
            }
            _ => None,
        }
    }

    /// Variables for the chat template: `chat_template_args` with the reasoning controls
    /// (`thinking`, `reasoning_effort`, and the thinking switches inside the arguments)
    /// resolved into every dialect templates read, as Dynamo 1.6.1 resolves them: a decision
    /// is written as `thinking`, `enable_thinking` and `thinking_mode` alike; `adaptive`
    /// leaves the choice to the model (no switch survives).
    pub fn template_args(&self) -> Map<String, Value> {
        if self.chat_template_args.is_none() && self.thinking.is_none() && self.reasoning_effort.is_none() {
            return Map::new();
        }
        let mut args = self.chat_template_args.clone().unwrap_or_default();
        let mode = self.thinking.as_ref().and_then(|t| thinking_mode(t).ok());
        // An explicit top-level grade wins, else the one inside the arguments.
        let effort = match self.reasoning_effort {
            Some(e) => Some(Value::String(e.as_str().into())),
            None => args.get("reasoning_effort").filter(|e| !e.is_null()).cloned(),
        };
        let controlled = ["thinking", "enable_thinking", "thinking_mode"].iter().any(|k| args.contains_key(*k));
        if mode.is_none() && effort.is_none() && !controlled {
            return args;
        }
        match mode {
            Some(ThinkingMode::Enabled) => set_thinking(&mut args, true),
            Some(ThinkingMode::Disabled) => set_thinking(&mut args, false),
            Some(ThinkingMode::Adaptive) => {
                args.remove("thinking");
                args.remove("enable_thinking");
                args.insert("thinking_mode".into(), Value::String("adaptive".into()));
            }
            None => {}
        }
        let nested = args.get("thinking_mode").and_then(Value::as_str).map(str::to_ascii_lowercase);
        let decided = ["thinking", "enable_thinking"]
            .iter()
            .find_map(|k| args.get(*k).and_then(Value::as_bool))
            .or_else(|| match nested.as_deref() {
                Some("adaptive") => None,
                Some("enabled") => Some(true),
                Some("disabled") => Some(false),
                _ => effort.as_ref().and_then(Value::as_str).map(|e| e != "none"),
            });
        if let Some(on) = decided {
            set_thinking(&mut args, on);
        }
        if let Some(effort) = effort {
            args.insert("reasoning_effort".into(), effort);
        }
        args
    }
}

/// A thinking decision, stated in every dialect.
fn set_thinking(args: &mut Map<String, Value>, on: bool) {
    args.insert("thinking".into(), Value::Bool(on));
    args.insert("enable_thinking".into(), Value::Bool(on));
    args.insert("thinking_mode".into(), Value::String(if on { "enabled" } else { "disabled" }.into()));
}

/// Shape of the `thinking` field.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum ThinkingMode {
    Enabled,
    Disabled,
    Adaptive,
}

/// Reads `thinking` as Dynamo does; the error texts are Dynamo's.
pub(crate) fn thinking_mode(value: &Value) -> Result<ThinkingMode, &'static str> {
    if let Some(b) = value.as_bool() {
        return Ok(if b { ThinkingMode::Enabled } else { ThinkingMode::Disabled });
    }
    let Some(obj) = value.as_object() else {
        return Err("`thinking` must be a boolean or an object with `type` set to `enabled`, \
                    `disabled`, or `adaptive`");
    };
    match obj.get("type").and_then(Value::as_str) {
        Some("enabled") => Ok(ThinkingMode::Enabled),
        Some("disabled") => Ok(ThinkingMode::Disabled),
        Some("adaptive") => Ok(ThinkingMode::Adaptive),
        _ => Err("`thinking.type` must be `enabled`, `disabled`, or `adaptive`"),
    }
}

/// Stop token ids from `stop` (integers) or the passthrough `stop_token_ids`.
pub(crate) fn stop_token_ids(stop: Option<&Stop>, extra: Option<&Value>) -> Option<Vec<u32>> {
    if let Some(ids) = stop.and_then(Stop::token_ids) {
        return Some(ids.to_vec());
    }
    let ids = extra?.as_array()?;
    ids.iter().map(|v| v.as_u64().and_then(|x| u32::try_from(x).ok())).collect()
}

/// Deserializes the body: the flat struct in one pass, or Dynamo's shape when that fails
/// (exact serde error, or the request plus its unsupported field names).
fn decode(body: &[u8]) -> Result<(Box<NvCreateChatCompletionRequest>, Vec<String>), Error> {
    if starts_with_object(body) {
        // This attempt's errors are discarded (the parse below reports them), so plain
        // messages may take the quick path. Text checked once here lets the parser skip
        // checking each string; a body that is not UTF-8 fails below with the parser's error.
        let flat = with_quick_messages(|| match std::str::from_utf8(body) {
            Ok(text) => serde_json::from_str::<Box<NvCreateChatCompletionRequest>>(text),
            Err(_) => serde_json::from_slice::<Box<NvCreateChatCompletionRequest>>(body),
        });
        if let Ok(req) = flat {
            return Ok((req, Vec::new()));
        }
    }
    serde_json::from_slice::<dynamo_shape::NvCreateChatCompletionRequest>(body)
        .map(|shaped| {
            let (req, unknown) = shaped.into_flat();
            (Box::new(req), unknown)
        })
        .map_err(|e| deserialize_error(&e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn thinking_modes() {
        assert_eq!(thinking_mode(&Value::Bool(true)), Ok(ThinkingMode::Enabled));
        assert!(thinking_mode(&Value::from(3)).is_err());
        let obj: Value = serde_json::from_str(r#"{"type":"adaptive"}"#).unwrap_or(Value::Null);
        assert_eq!(thinking_mode(&obj), Ok(ThinkingMode::Adaptive));
    }

    #[test]
    fn passthrough_names_are_dynamos() {
        use crate::openai::completions::dynamo_shape::NvCreateCompletionRequest as Completion;
        use crate::openai::validate::PASSTHROUGH_EXTRA_FIELDS;
        assert_eq!(dynamo_shape::NvCreateChatCompletionRequest::PASSTHROUGH, PASSTHROUGH_EXTRA_FIELDS);
        assert_eq!(Completion::PASSTHROUGH, PASSTHROUGH_EXTRA_FIELDS);
    }
}
