//! The structured parameters of a chat request other than messages: tools, `tool_choice`,
//! `response_format`, audio output, predicted output, web search, and the small enums.
//!
//! Shapes and serde names are Dynamo 1.6.1's (async-openai's, as forked by Dynamo), because
//! serde puts them in client-visible errors such as
//! `invalid type: integer `5`, expected internally tagged enum ResponseFormat`.
//! Tool JSON schemas stay `serde_json::Value` with key order preserved, so prompts rendered
//! from them match Hugging Face byte for byte.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// `reasoning_effort`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// `none`.
    None,
    /// `minimal`.
    Minimal,
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
    /// `xhigh`.
    Xhigh,
    /// `max`.
    Max,
}

impl ReasoningEffort {
    /// The wire name.
    pub fn as_str(self) -> &'static str {
        match self {
            ReasoningEffort::None => "none",
            ReasoningEffort::Minimal => "minimal",
            ReasoningEffort::Low => "low",
            ReasoningEffort::Medium => "medium",
            ReasoningEffort::High => "high",
            ReasoningEffort::Xhigh => "xhigh",
            ReasoningEffort::Max => "max",
        }
    }
}

/// `service_tier`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ServiceTier {
    /// `auto`.
    Auto,
    /// `default`.
    Default,
    /// `flex`.
    Flex,
    /// `scale`.
    Scale,
    /// `priority`.
    Priority,
}

/// One of `modalities`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ResponseModalities {
    /// `text`.
    Text,
    /// `audio`.
    Audio,
}

/// `prediction`: `{"type": "content", "content": …}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", content = "content", rename_all = "lowercase")]
pub enum PredictionContent {
    /// Predicted output text.
    Content(PredictionContentContent),
}

/// Predicted output: a string or `{"text": …}` parts.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum PredictionContentContent {
    /// One string.
    Text(String),
    /// Text parts.
    Array(Vec<ChatCompletionRequestMessageContentPartText>),
}

/// `{"text": …}` (a `type` member, if any, is ignored).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionRequestMessageContentPartText {
    /// The text.
    pub text: String,
}

/// `audio`: requested audio output.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionAudio {
    /// Voice name.
    pub voice: ChatCompletionAudioVoice,
    /// Encoding.
    pub format: ChatCompletionAudioFormat,
}

/// Output voice; any string is accepted.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatCompletionAudioVoice {
    /// `alloy`.
    Alloy,
    /// `ash`.
    Ash,
    /// `ballad`.
    Ballad,
    /// `coral`.
    Coral,
    /// `echo`.
    Echo,
    /// `fable`.
    Fable,
    /// `nova`.
    Nova,
    /// `onyx`.
    Onyx,
    /// `sage`.
    Sage,
    /// `shimmer`.
    Shimmer,
    /// Any other name.
    #[serde(untagged)]
    Other(String),
}

/// Output audio encoding.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatCompletionAudioFormat {
    /// `wav`.
    Wav,
    /// `aac`.
    Aac,
    /// `mp3`.
    Mp3,
    /// `flac`.
    Flac,
    /// `opus`.
    Opus,
    /// `pcm16`.
    Pcm16,
}

/// `response_format`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ResponseFormat {
    /// Plain text (no constraint).
    Text,
    /// Any JSON object.
    JsonObject,
    /// JSON following a schema.
    JsonSchema {
        /// The schema and its name.
        json_schema: ResponseFormatJsonSchema,
    },
}

/// `response_format.json_schema`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ResponseFormatJsonSchema {
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// Name.
    pub name: String,
    /// The JSON schema: required (a missing one fails the parse, `null` validation).
    pub schema: Value,
    /// Strict adherence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// One entry of `tools`. `type` is required.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionTool {
    /// Always `function`.
    pub r#type: ChatCompletionToolType,
    /// The function.
    pub function: FunctionObject,
}

/// `"function"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatCompletionToolType {
    /// `function`.
    #[default]
    Function,
}

/// A function the model may call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionObject {
    /// Name (validated: 1..=96 chars of `a-zA-Z0-9_-`).
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON schema of the arguments, key order preserved.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parameters: Option<Value>,
    /// Strict schema adherence.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub strict: Option<bool>,
}

/// `tool_choice`: `none`, `auto`, `required`, or a named function.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ChatCompletionToolChoiceOption {
    /// `none`.
    None,
    /// `auto`.
    Auto,
    /// `required`.
    Required,
    /// `{"type": "function", "function": {"name": …}}`.
    #[serde(untagged)]
    Named(ChatCompletionNamedToolChoice),
}

/// A forced function call.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionNamedToolChoice {
    /// Always `function`.
    pub r#type: ChatCompletionToolType,
    /// The function to call.
    pub function: FunctionName,
}

/// `{"name": …}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionName {
    /// Function name.
    pub name: String,
}

/// Deprecated `function_call` (rejected by validation with 501, as Dynamo does).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub enum ChatCompletionFunctionCall {
    /// `none`.
    #[serde(rename = "none")]
    None,
    /// `auto`.
    #[serde(rename = "auto")]
    Auto,
    /// `{"name": …}`.
    #[serde(untagged)]
    Function {
        /// Function name.
        name: String,
    },
}

/// Deprecated `functions` entry (rejected by validation with 501, as Dynamo does).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionFunctions {
    /// Name.
    pub name: String,
    /// Description.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub description: Option<String>,
    /// JSON schema (required member).
    pub parameters: Value,
}

/// `web_search_options`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct WebSearchOptions {
    /// `low`, `medium` or `high`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub search_context_size: Option<WebSearchContextSize>,
    /// Approximate user location.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub user_location: Option<WebSearchUserLocation>,
}

/// Search context size.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebSearchContextSize {
    /// `low`.
    Low,
    /// `medium`.
    Medium,
    /// `high`.
    High,
}

/// `{"type": "approximate", "approximate": {…}}`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct WebSearchUserLocation {
    /// Always `approximate`.
    pub r#type: WebSearchUserLocationType,
    /// The location.
    pub approximate: WebSearchLocation,
}

/// `"approximate"`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum WebSearchUserLocationType {
    /// `approximate`.
    Approximate,
}

/// Approximate location members.
#[derive(Debug, Clone, PartialEq, Default, Deserialize, Serialize)]
pub struct WebSearchLocation {
    /// ISO country code.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub country: Option<String>,
    /// Region.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// City.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub city: Option<String>,
    /// IANA time zone.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
}
