//! Chat messages: roles, content (string or array of parts), tool calls.
//!
//! The public types ([`ChatMessage`], [`MessageContent`], [`ContentPart`](super::ContentPart)) are what the rest of
//! the pipeline reads and what chat templates receive (they serialize back to OpenAI's shape,
//! `None` members omitted). Deserialization follows Dynamo 1.6.1 exactly, through private
//! "wire" types that carry Dynamo's type names, because those names appear in client-visible
//! errors (`expected internally tagged enum Wire`, `data did not match any variant of untagged
//! enum ChatCompletionRequestUserMessageContent`). Which part types a role accepts is Dynamo's:
//!
//! | role | content | part types |
//! |---|---|---|
//! | `system`, `developer` | required (system: optional with Kimi `tools`) | `text` |
//! | `user` | required | `text`, `image_url`, `video_url`, `audio_url`, `input_audio` |
//! | `assistant` | optional, `null` allowed | `text`, `refusal` |
//! | `tool` | required | `text`, `image_url`, `video_url`, `audio_url` |
//! | `function` | optional string | — |
//!
//! Content and its parts live in [`super::content`]. An unknown part type fails the whole
//! request with Dynamo's untagged-enum message; it is not kept.

use serde::de::{Error as _, IgnoredAny};
use serde::{Deserialize, Deserializer, Serialize};
use serde_json::Value;

use super::content::{
    content, opt_content, ChatCompletionRequestAssistantMessageContent, ChatCompletionRequestDeveloperMessageContent,
    ChatCompletionRequestSystemMessageContent, ChatCompletionRequestToolMessageContent,
    ChatCompletionRequestUserMessageContent, MessageContent,
};

/// One chat message, tagged by `role`.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
pub enum ChatMessage {
    /// `developer`.
    Developer(DeveloperMessage),
    /// `system`.
    System(SystemMessage),
    /// `user`.
    User(UserMessage),
    /// `assistant`.
    Assistant(AssistantMessage),
    /// `tool`.
    Tool(ToolMessage),
    /// `function` (deprecated by OpenAI, still accepted).
    Function(FunctionMessage),
}

impl ChatMessage {
    /// The role name as sent on the wire.
    pub fn role(&self) -> &'static str {
        match self {
            ChatMessage::Developer(_) => "developer",
            ChatMessage::System(_) => "system",
            ChatMessage::User(_) => "user",
            ChatMessage::Assistant(_) => "assistant",
            ChatMessage::Tool(_) => "tool",
            ChatMessage::Function(_) => "function",
        }
    }

    /// The message content, if the message has one.
    pub fn content(&self) -> Option<&MessageContent> {
        match self {
            ChatMessage::Developer(m) => Some(&m.content),
            ChatMessage::System(m) => Some(&m.content),
            ChatMessage::User(m) => Some(&m.content),
            ChatMessage::Assistant(m) => m.content.as_ref(),
            ChatMessage::Tool(m) => Some(&m.content),
            ChatMessage::Function(_) => None,
        }
    }
}

impl<'de> Deserialize<'de> for ChatMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        // Dynamo rejects Kimi's `tools` off system messages and `partial` off assistant
        // messages instead of ignoring them; the wrappers below are its construction.
        #[derive(Deserialize)]
        struct ForbidToolsAndPartial<T> {
            tools: Option<IgnoredAny>,
            partial: Option<IgnoredAny>,
            #[serde(flatten)]
            message: T,
        }
        #[derive(Deserialize)]
        struct ForbidTools<T> {
            tools: Option<IgnoredAny>,
            #[serde(flatten)]
            message: T,
        }
        #[derive(Deserialize)]
        struct ForbidPartial<T> {
            partial: Option<IgnoredAny>,
            #[serde(flatten)]
            message: T,
        }
        #[derive(Deserialize)]
        #[serde(tag = "role", rename_all = "lowercase")]
        enum Wire {
            Developer(ForbidToolsAndPartial<DeveloperMessage>),
            System(ForbidPartial<SystemMessage>),
            User(ForbidToolsAndPartial<UserMessage>),
            Assistant(ForbidTools<AssistantMessage>),
            Tool(ForbidToolsAndPartial<ToolMessage>),
            Function(ForbidToolsAndPartial<FunctionMessage>),
        }
        fn forbid<E: serde::de::Error>(
            value: Option<IgnoredAny>,
            field: &str,
            allowed: &str,
            actual: &str,
        ) -> Result<(), E> {
            match value {
                Some(_) => {
                    Err(E::custom(format!("`{field}` is only accepted on {allowed} messages, not on role {actual}")))
                }
                None => Ok(()),
            }
        }

        Ok(match Wire::deserialize(deserializer)? {
            Wire::Developer(w) => {
                forbid(w.tools, "tools", "system", "developer")?;
                forbid(w.partial, "partial", "assistant", "developer")?;
                ChatMessage::Developer(w.message)
            }
            Wire::System(w) => {
                forbid(w.partial, "partial", "assistant", "system")?;
                ChatMessage::System(w.message)
            }
            Wire::User(w) => {
                forbid(w.tools, "tools", "system", "user")?;
                forbid(w.partial, "partial", "assistant", "user")?;
                ChatMessage::User(w.message)
            }
            Wire::Assistant(w) => {
                forbid(w.tools, "tools", "system", "assistant")?;
                ChatMessage::Assistant(w.message)
            }
            Wire::Tool(w) => {
                forbid(w.tools, "tools", "system", "tool")?;
                forbid(w.partial, "partial", "assistant", "tool")?;
                ChatMessage::Tool(w.message)
            }
            Wire::Function(w) => {
                forbid(w.tools, "tools", "system", "function")?;
                forbid(w.partial, "partial", "assistant", "function")?;
                ChatMessage::Function(w.message)
            }
        })
    }
}

/// `developer` message.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct DeveloperMessage {
    /// Text or `text` parts.
    #[serde(deserialize_with = "content::<ChatCompletionRequestDeveloperMessageContent, _>")]
    pub content: MessageContent,
    /// Participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `system` message. `content` may be omitted when Kimi-style `tools` are declared (it then
/// reads as empty text).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct SystemMessage {
    /// Text or `text` parts.
    pub content: MessageContent,
    /// Participant name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Kimi-style tool declarations, kept verbatim for the chat template.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tools: Option<Vec<Value>>,
}

impl<'de> Deserialize<'de> for SystemMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        #[derive(Deserialize)]
        struct Wire {
            content: Option<ChatCompletionRequestSystemMessageContent>,
            name: Option<String>,
            tools: Option<Vec<Value>>,
        }
        let Wire { content, name, tools } = Wire::deserialize(deserializer)?;
        let content = match content {
            Some(c) => c.into(),
            None if tools.as_ref().is_some_and(|t| !t.is_empty()) => MessageContent::Text(String::new()),
            None => {
                return Err(D::Error::custom(
                    "missing field `content`: a system message needs `content` unless it \
                     declares non-empty Kimi-style `tools`",
                ))
            }
        };
        Ok(SystemMessage { content, name, tools })
    }
}

/// `user` message.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct UserMessage {
    /// Text or parts (text, image, video, audio).
    #[serde(deserialize_with = "content::<ChatCompletionRequestUserMessageContent, _>")]
    pub content: MessageContent,
    /// Participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
}

/// `assistant` message (a previous turn).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct AssistantMessage {
    /// Text or `text`/`refusal` parts; absent or `null` with tool calls.
    #[serde(
        default,
        deserialize_with = "opt_content::<ChatCompletionRequestAssistantMessageContent, _>",
        skip_serializing_if = "Option::is_none"
    )]
    pub content: Option<MessageContent>,
    /// Reasoning of that turn; `reasoning` is accepted as an alias.
    #[serde(default, alias = "reasoning", skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<ReasoningContent>,
    /// Refusal text.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Participant name.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Reference to a previous audio response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub audio: Option<ChatCompletionRequestAssistantMessageAudio>,
    /// Tool calls made in that turn.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Vec<ChatCompletionMessageToolCall>>,
    /// Deprecated single function call.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub function_call: Option<FunctionCall>,
    /// Kimi prefill: this turn is an unfinished continuation seed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partial: Option<bool>,
}

/// `tool` message (a tool result).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ToolMessage {
    /// Text or parts (text, image, video, audio).
    #[serde(deserialize_with = "content::<ChatCompletionRequestToolMessageContent, _>")]
    pub content: MessageContent,
    /// The call this answers.
    pub tool_call_id: String,
}

/// `function` message (deprecated).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionMessage {
    /// The function's result.
    pub content: Option<String>,
    /// The function name.
    pub name: String,
}

/// Previous audio response reference.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionRequestAssistantMessageAudio {
    /// Audio response id.
    pub id: String,
}

/// Reasoning of a previous assistant turn: one string, or segments interleaved with tool calls
/// (`segments[i]` precedes `tool_calls[i]`).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum ReasoningContent {
    /// One block.
    Text(String),
    /// Interleaved segments.
    Segments(Vec<String>),
}

/// A tool call in an assistant turn. `type` defaults to `function`.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct ChatCompletionMessageToolCall {
    /// Call id.
    pub id: String,
    /// Always `function`.
    #[serde(default)]
    pub r#type: FunctionType,
    /// Function name and arguments.
    pub function: FunctionCall,
}

/// `"function"`, the only tool type.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum FunctionType {
    /// `function`.
    #[default]
    Function,
}

/// Function name and JSON arguments. `arguments` may arrive as a JSON string or as an object;
/// an object is re-encoded as a compact JSON string (key order kept).
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
pub struct FunctionCall {
    /// Function name.
    pub name: String,
    /// Arguments as a JSON string.
    #[serde(deserialize_with = "arguments")]
    pub arguments: String,
}

fn arguments<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    match Value::deserialize(d)? {
        Value::String(s) => Ok(s),
        v @ Value::Object(_) => Ok(v.to_string()),
        other => Err(D::Error::custom(format!("expected string or object for `arguments`, got {other}"))),
    }
}
