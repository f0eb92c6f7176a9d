//! `POST /v1/completions` request: [`NvCreateCompletionRequest`], its prompt shapes, parsing and
//! accessors.
//!
//! Accepted top-level fields are Dynamo 1.6.1's: OpenAI's completion request plus
//! `prompt_embeds`, Dynamo's `CommonExt` (as for chat), the direct extensions (`nvext`,
//! `metadata`, `no_stop_trim`, `return_tokens_as_token_ids`) and the passthrough extras
//! (`cache_salt`, `stop_token_ids`, `detokenize`, `allowed_token_ids`, `bad_words_token_ids`).

use serde::{Deserialize, Deserializer, Serialize};
use serde_json::{Map, Value};

use super::common::{starts_with_object, ChatCompletionStreamOptions, Stop};
use super::nvext::NvExt;
use super::{deserialize_error, validate, ParseOptions};
use crate::error::Error;

/// `prompt`: a string, strings (a batch), token ids, or token-id arrays (a batch).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Prompt {
    /// One text prompt.
    String(String),
    /// A batch of text prompts (an empty array lands here).
    StringArray(Vec<String>),
    /// One tokenized prompt.
    IntegerArray(Vec<u32>),
    /// A batch of tokenized prompts.
    ArrayOfIntegerArray(Vec<Vec<u32>>),
}

impl Prompt {
    /// Number of prompts in the batch (1 for a single prompt).
    pub fn batch_size(&self) -> usize {
        match self {
            Prompt::String(_) | Prompt::IntegerArray(_) => 1,
            Prompt::StringArray(v) => v.len(),
            Prompt::ArrayOfIntegerArray(v) => v.len(),
        }
    }
}

common_ext_fields!(request_types! {
    /// A completion request as Dynamo 1.6.1 accepts it, all fields at top level.
    ///
    /// Build it with [`super::parse_completion`]; a value obtained that way has passed
    /// Dynamo's validation.
    flat NvCreateCompletionRequest;
    shape mod dynamo_shape;
    inner {
        /// Served model name.
        model: String,
        /// The prompt(s).
        prompt: Prompt,
        /// Base64 `torch.save` tensor of prompt embeddings; when set, `prompt` is not checked.
        prompt_embeds: Option<String>,
        /// Text after the completion (at most 10000 bytes).
        suffix: Option<String>,
        /// Output token limit (> 0).
        max_tokens: Option<u32>,
        /// 0..=2.
        temperature: Option<f32>,
        /// 0..=1.
        top_p: Option<f32>,
        /// Choices per prompt, 1..=128 (batch × n ≤ 128).
        n: Option<u8>,
        /// Stream as server-sent events.
        stream: Option<bool>,
        /// Streaming options (only with `stream: true`).
        stream_options: Option<ChatCompletionStreamOptions>,
        /// Log probabilities of the top 0..=5 tokens.
        logprobs: Option<u8>,
        /// Echo the prompt; strictly a boolean or `null`.
        #[serde(default, deserialize_with = "echo_bool")]
        echo: Option<bool>,
        /// Stop strings or stop token ids.
        stop: Option<Stop>,
        /// -2..=2.
        presence_penalty: Option<f32>,
        /// -2..=2.
        frequency_penalty: Option<f32>,
        /// Candidates per prompt, 0..=20 and ≥ n.
        best_of: Option<u8>,
        /// Token id (as string) to bias in -100..=100.
        logit_bias: Option<Map<String, Value>>,
        /// End-user id; must not be blank.
        user: Option<String>,
        /// Sampling seed.
        seed: Option<i64>,
    }
    direct {
        /// NVIDIA extensions.
        nvext: Option<NvExt>,
        /// Free-form metadata.
        metadata: Option<Value>,
        /// Keep matched stop strings and stop/EOS tokens in the text.
        #[serde(default)]
        no_stop_trim: Option<bool>,
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

const ECHO_EXPECTED: &str = "echo parameter to be a boolean (true or false) or null";

/// Dynamo's strict `echo`: a boolean or `null`, nothing else.
fn echo_bool<'de, D: Deserializer<'de>>(d: D) -> Result<Option<bool>, D::Error> {
    use serde::de::{Error, Unexpected, Visitor};
    use std::fmt;

    struct Outer;
    struct Inner;
    impl<'de> Visitor<'de> for Inner {
        type Value = Option<bool>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(ECHO_EXPECTED)
        }
        fn visit_bool<E: Error>(self, v: bool) -> Result<Self::Value, E> {
            Ok(Some(v))
        }
        fn visit_str<E: Error>(self, v: &str) -> Result<Self::Value, E> {
            Err(E::invalid_type(Unexpected::Str(v), &ECHO_EXPECTED))
        }
    }
    impl<'de> Visitor<'de> for Outer {
        type Value = Option<bool>;
        fn expecting(&self, f: &mut fmt::Formatter) -> fmt::Result {
            f.write_str(ECHO_EXPECTED)
        }
        fn visit_some<D: Deserializer<'de>>(self, d: D) -> Result<Self::Value, D::Error> {
            d.deserialize_any(Inner)
        }
        fn visit_none<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
        fn visit_unit<E: Error>(self) -> Result<Self::Value, E> {
            Ok(None)
        }
    }
    d.deserialize_option(Outer)
}

impl NvCreateCompletionRequest {
    /// Parses and validates a completion request body (Dynamo's order; see [`super`]).
    pub fn from_json(body: &[u8], opts: &ParseOptions) -> Result<Self, Error> {
        let (req, unknown) = decode(body)?;
        validate::completion(&req, &unknown, opts)?;
        Ok(req)
    }

    /// Output token limit.
    pub fn max_tokens(&self) -> Option<u32> {
        self.max_tokens
    }

    shared_accessors!();

    /// Whether matched stop strings and stop/EOS tokens stay in the raw text (default `false`).
    pub fn no_stop_trim(&self) -> bool {
        self.no_stop_trim.unwrap_or(false)
    }

    /// Number of top log probabilities per output token.
    pub fn output_logprobs(&self) -> Option<u32> {
        self.logprobs.map(u32::from)
    }

    /// Prompt log probabilities: `prompt_logprobs`, else 1 when `echo` is true.
    pub fn prompt_logprobs(&self) -> Option<u32> {
        self.prompt_logprobs.or(if self.echo == Some(true) { Some(1) } else { None })
    }

    /// Whether `nvext.use_raw_prompt` is set.
    pub fn use_raw_prompt(&self) -> bool {
        self.nvext.as_ref().and_then(|n| n.use_raw_prompt).unwrap_or(false)
    }
}

/// Deserializes the body: the flat struct in one pass, or Dynamo's shape when that fails.
fn decode(body: &[u8]) -> Result<(NvCreateCompletionRequest, Vec<String>), Error> {
    if starts_with_object(body) {
        if let Ok(req) = serde_json::from_slice::<NvCreateCompletionRequest>(body) {
            return Ok((req, Vec::new()));
        }
    }
    serde_json::from_slice::<dynamo_shape::NvCreateCompletionRequest>(body)
        .map(dynamo_shape::NvCreateCompletionRequest::into_flat)
        .map_err(|e| deserialize_error(&e))
}
