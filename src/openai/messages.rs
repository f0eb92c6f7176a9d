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
//!
//! The exact deserializer buffers each message (role tag) and again each wrapper (flattened
//! fields) — ~3.5 K instructions for a plain `{"role": "user", "content": "…"}`. A request is
//! first parsed in an attempt whose errors are thrown away (the flat parse in
//! [`super::chat`]); inside it ([`with_quick_messages`]) a message of role `user` or
//! `system` with string `content`, an optional `name` and nothing else is built directly;
//! every other message is replayed from its buffered entries through the exact deserializer,
//! so the two accept the same messages with the same values (a property test below).

use std::cell::Cell;

use serde::de::{Error as _, IgnoredAny, MapAccess, Visitor};
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

thread_local! {
    /// Set while [`with_quick_messages`] runs.
    static QUICK: Cell<bool> = const { Cell::new(false) };
}

/// Run `parse` with plain messages built directly (see the module docs). Only for parse
/// attempts whose errors are discarded: a message the quick path hands to the exact one is
/// replayed from a buffer, so its error text loses the position in the body.
pub(crate) fn with_quick_messages<T>(parse: impl FnOnce() -> T) -> T {
    struct Restore(bool);
    impl Drop for Restore {
        fn drop(&mut self) {
            QUICK.with(|q| q.set(self.0));
        }
    }
    let _restore = Restore(QUICK.with(|q| q.replace(true)));
    parse()
}

impl<'de> Deserialize<'de> for ChatMessage {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if QUICK.with(Cell::get) {
            deserializer.deserialize_map(QuickMessage)
        } else {
            exact(deserializer)
        }
    }
}

/// A message key, known ones without allocating.
enum Key {
    Role,
    Content,
    Name,
    Other(String),
}

impl<'de> Deserialize<'de> for Key {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct KeyVisitor;
        impl Visitor<'_> for KeyVisitor {
            type Value = Key;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a message field name")
            }
            fn visit_str<E: serde::de::Error>(self, v: &str) -> Result<Key, E> {
                Ok(match v {
                    "role" => Key::Role,
                    "content" => Key::Content,
                    "name" => Key::Name,
                    _ => Key::Other(v.to_owned()),
                })
            }
        }
        deserializer.deserialize_identifier(KeyVisitor)
    }
}

/// The quick path: plain `user` / `system` messages directly, the rest through [`exact`].
struct QuickMessage;

enum Role {
    User,
    System,
}

impl<'de> Visitor<'de> for QuickMessage {
    type Value = ChatMessage;

    fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("a chat message object")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<ChatMessage, A::Error> {
        let (mut role, mut content, mut name) = (None, None, None);
        let mut rest: Vec<(String, Value)> = Vec::new();
        while let Some(key) = map.next_key::<Key>()? {
            let value: Value = map.next_value()?;
            let (slot, field) = match key {
                Key::Role => (&mut role, "role"),
                Key::Content => (&mut content, "content"),
                Key::Name => (&mut name, "name"),
                Key::Other(k) => {
                    rest.push((k, value));
                    continue;
                }
            };
            if slot.is_some() {
                rest.push((field.to_owned(), value)); // given twice: the exact path rejects it
            } else {
                *slot = Some(value);
            }
        }
        let plain_name = matches!(name, None | Some(Value::Null | Value::String(_)));
        let plain_role = match role.as_ref().and_then(Value::as_str) {
            Some("user") => Some(Role::User),
            Some("system") => Some(Role::System),
            _ => None,
        };
        if let (true, true, Some(r)) = (rest.is_empty(), plain_name, plain_role) {
            if let Some(Value::String(text)) = content {
                let name = match name {
                    Some(Value::String(n)) => Some(n),
                    _ => None,
                };
                let content = MessageContent::Text(text);
                return Ok(match r {
                    Role::User => ChatMessage::User(UserMessage { content, name }),
                    Role::System => ChatMessage::System(SystemMessage { content, name, tools: None }),
                });
            }
        }
        let known = [("role", role), ("content", content), ("name", name)];
        rest.extend(known.into_iter().filter_map(|(k, v)| Some((k.to_owned(), v?))));
        exact(serde::de::value::MapDeserializer::<_, serde_json::Error>::new(rest.into_iter()))
            .map_err(A::Error::custom)
    }
}

/// Dynamo's deserialization of a message, errors included.
fn exact<'de, D: Deserializer<'de>>(deserializer: D) -> Result<ChatMessage, D::Error> {
    {
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

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn both(text: &str) -> (Result<ChatMessage, String>, Result<ChatMessage, String>) {
        let quick = with_quick_messages(|| serde_json::from_str::<ChatMessage>(text)).map_err(|e| e.to_string());
        let exact = serde_json::from_str::<ChatMessage>(text).map_err(|e| e.to_string());
        (quick, exact)
    }

    #[test]
    fn plain_messages_take_the_quick_path_and_equal_the_exact_ones() {
        for text in [
            r#"{"role":"user","content":"hi"}"#,
            r#"{"content":"s\u00fc","role":"system","name":null}"#,
            r#"{"role":"user","content":"x","name":"bob"}"#,
        ] {
            let (quick, exact) = both(text);
            assert_eq!(quick.unwrap(), exact.unwrap(), "{text}");
        }
        // Everything else is replayed through the exact path: same values, and rejected alike.
        for text in [
            r#"{"role":"assistant","content":"a"}"#,
            r#"{"role":"user","content":[{"type":"text","text":"t"}]}"#,
            r#"{"role":"system","content":"s","tools":[{"x":1}]}"#,
            r#"{"role":"tool","content":"r","tool_call_id":"c"}"#,
        ] {
            let (quick, exact) = both(text);
            assert_eq!(quick.unwrap(), exact.unwrap(), "{text}");
        }
        for text in [
            r#"{"role":"user","content":"a","content":"b"}"#,
            r#"{"role":"user","content":"a","partial":true}"#,
            r#"{"role":"user","content":"a","name":5}"#,
            r#"{"role":"wizard","content":"a"}"#,
            r#"{"content":"a"}"#,
            r#"{"role":"user"}"#,
            r#"["user","a"]"#,
        ] {
            let (quick, exact) = both(text);
            assert!(quick.is_err() && exact.is_err(), "{text}: {quick:?} / {exact:?}");
        }
    }

    fn entry() -> impl Strategy<Value = (String, Value)> {
        let key = prop::sample::select(vec!["role", "role", "content", "content", "name", "tools", "partial", "x"]);
        let value = prop_oneof![
            prop::sample::select(vec!["user", "system", "assistant", "developer", "tool", "function", "other"])
                .prop_map(|r| Value::String(r.into())),
            "\\PC{0,8}".prop_map(Value::String),
            Just(Value::Null),
            Just(Value::from(3)),
            Just(serde_json::json!([{"type": "text", "text": "t"}])),
            Just(serde_json::json!([{"type": "function", "function": {"name": "f"}}])),
            Just(Value::Bool(true)),
        ];
        (key.prop_map(String::from), value)
    }

    proptest! {
        #[test]
        fn quick_and_exact_accept_the_same_messages_with_the_same_values(
            plain in prop::option::of((prop::sample::select(vec!["user", "system"]), "\\PC{0,8}")),
            extra in prop::collection::vec(entry(), 0..4),
        ) {
            // Mostly near the quick path's shape: a plain message plus a few random entries.
            let mut entries: Vec<(String, Value)> = plain
                .map(|(role, text)| vec![("role".into(), Value::from(role)), ("content".into(), Value::from(text))])
                .unwrap_or_default();
            entries.extend(extra);
            // Written by hand so a key may appear twice, as in a client's body.
            let fields: Vec<String> = entries
                .iter()
                .map(|(k, v)| format!("{}:{}", serde_json::to_string(k).unwrap(), v))
                .collect();
            let text = format!("{{{}}}", fields.join(","));
            match both(&text) {
                (Ok(quick), Ok(exact)) => prop_assert_eq!(quick, exact, "{}", text),
                (Err(_), Err(_)) => {}
                (quick, exact) => prop_assert!(false, "{}: quick {:?}, exact {:?}", text, quick, exact),
            }
        }
    }
}
