//! An Anthropic Messages request (`/v1/messages`, `/v1/messages/count_tokens`): its serde
//! types, its checks, and the OpenAI chat request it becomes (docs/dynamo/anthropic-messages.md
//! §2), built as chat JSON and handed to [`crate::openai::parse_chat`] so that the chat
//! validation and the rest of the chat pipeline apply unchanged. Runs on the request's shard.
//!
//! | Anthropic | chat request |
//! |---|---|
//! | `system` (a string, or text blocks joined with `"\n"`; Claude Code's billing line stripped) | a leading `system` message |
//! | `messages[].content` text blocks | the message's text, concatenated |
//! | assistant `tool_use` blocks | `tool_calls` (`arguments`: the compact JSON of `input`); `content` `""` when the turn has no text |
//! | assistant `thinking` blocks | `reasoning_content` |
//! | user `tool_result` blocks | `tool` messages, in block order among the user's texts |
//! | `tools` | function tools (`input_schema` → `parameters`) |
//! | `tool_choice` auto / any / tool / none | `auto` / `required` / the named function / `none` |
//! | `stop_sequences`, `max_tokens`, `temperature`, `top_p`, `top_k`, `stream` | the same chat fields |
//! | `metadata`, `thinking`, unknown fields | dropped (as 1.6.1) |
//!
//! Images are refused with a 400: this frontend does not forward them to workers yet.

use serde::Deserialize;
use serde_json::{json, Map, Value};

use crate::error::{Error, Kind};

/// The body of `/v1/messages` (and of `count_tokens`, where `max_tokens` is not required).
#[derive(Debug, Deserialize)]
pub struct MessagesRequest {
    pub model: String,
    #[serde(default)]
    pub max_tokens: Option<u32>,
    pub messages: Vec<Message>,
    #[serde(default)]
    pub system: Option<System>,
    #[serde(default)]
    pub stop_sequences: Option<Vec<String>>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub top_k: Option<i32>,
    #[serde(default)]
    pub stream: bool,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoice>,
    /// Accepted, not forwarded.
    #[serde(default)]
    pub metadata: Option<Value>,
    /// Accepted, not forwarded (1.6.1 changes nothing the worker's prompt shows for it).
    #[serde(default)]
    pub thinking: Option<Value>,
    /// Dynamo's extensions, as on the chat route.
    #[serde(default)]
    pub nvext: Option<Value>,
}

/// `system`: a string or text blocks.
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum System {
    Text(String),
    Blocks(Vec<SystemBlock>),
}

#[derive(Debug, Deserialize)]
pub struct SystemBlock {
    pub text: String,
}

#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
}

#[derive(Debug, Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: Content,
}

/// A message's content: a string, or blocks (read one by one, so that an unknown block type
/// gets its own message).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum Content {
    Text(String),
    Blocks(Vec<Value>),
}

/// `tool_choice`.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "lowercase")]
pub enum ToolChoice {
    Auto {},
    Any {},
    Tool {
        #[serde(default)]
        name: Option<String>,
    },
    None {},
}

fn bad(message: impl Into<String>) -> Error {
    Error::new(Kind::BadRequest, message.into())
}

/// Parse a body; a serde failure is a 400 with the path-less serde message, prefixed as
/// 1.6.1 prefixes it.
pub fn parse(body: &[u8]) -> Result<MessagesRequest, Error> {
    serde_json::from_slice::<MessagesRequest>(body).map_err(|e| {
        let prefix = match e.classify() {
            serde_json::error::Category::Syntax | serde_json::error::Category::Eof => {
                "Failed to parse the request body as JSON"
            }
            _ => "Failed to deserialize the JSON body into the target type",
        };
        bad(format!("{prefix}: {e}"))
    })
}

/// The billing preamble Claude Code puts in front of its system prompt.
const PREAMBLE: &str = "x-anthropic-billing-header:";

/// The system prompt's text: blocks joined with `"\n"`; with `strip`, a first line (after
/// leading whitespace) that is the billing preamble is dropped, with the whitespace, when a
/// newline follows it.
pub fn system_text(system: &System, strip: bool) -> String {
    let text = match system {
        System::Text(s) => s.clone(),
        System::Blocks(blocks) => blocks.iter().map(|b| b.text.as_str()).collect::<Vec<_>>().join("\n"),
    };
    if strip {
        let t = text.trim_start();
        if t.starts_with(PREAMBLE) {
            if let Some(i) = t.find('\n') {
                return t[i + 1..].to_string();
            }
        }
    }
    text
}

/// The text of a `text` block (`None`: not a text block).
fn block_type(b: &Value) -> Option<&str> {
    b.get("type").and_then(Value::as_str)
}

fn text_of(b: &Value, at: &str) -> Result<String, Error> {
    b.get("text")
        .and_then(Value::as_str)
        .map(str::to_owned)
        .ok_or_else(|| bad(format!("{at}: a text block needs a string `text`")))
}

fn image_refused(at: &str) -> Error {
    bad(format!("{at}: image content is not supported: this frontend does not forward images to workers"))
}

/// A `tool_result`'s content: a string, or text blocks concatenated.
fn tool_result_text(b: &Value, at: &str) -> Result<String, Error> {
    match b.get("content") {
        None | Some(Value::Null) => Ok(String::new()),
        Some(Value::String(s)) => Ok(s.clone()),
        Some(Value::Array(parts)) => {
            let mut out = String::new();
            for (k, p) in parts.iter().enumerate() {
                let at = format!("{at}.content[{k}]");
                match block_type(p) {
                    Some("text") => out.push_str(&text_of(p, &at)?),
                    Some("image") => return Err(image_refused(&at)),
                    Some(other) => return Err(bad(format!("{at}: content block type \"{other}\" is not supported"))),
                    None => return Err(bad(format!("{at}: a content block needs a `type`"))),
                }
            }
            Ok(out)
        }
        Some(_) => Err(bad(format!("{at}.content: must be a string or an array of text blocks"))),
    }
}

/// The chat messages of the request's `system` and `messages`.
fn chat_messages(r: &MessagesRequest, strip: bool) -> Result<Vec<Value>, Error> {
    let mut out = Vec::with_capacity(r.messages.len() + 1);
    if let Some(system) = &r.system {
        out.push(json!({"role": "system", "content": system_text(system, strip)}));
    }
    for (i, m) in r.messages.iter().enumerate() {
        let role = match m.role {
            Role::User => "user",
            Role::Assistant => "assistant",
            Role::System => "system",
        };
        let blocks = match &m.content {
            Content::Text(s) => {
                out.push(json!({"role": role, "content": s}));
                continue;
            }
            Content::Blocks(b) if b.is_empty() => {
                return Err(bad(format!("messages[{i}].content: must contain at least one content block")));
            }
            Content::Blocks(b) => b,
        };
        match m.role {
            Role::Assistant => out.push(assistant_turn(i, blocks)?),
            Role::User | Role::System => user_turns(i, role, blocks, &mut out)?,
        }
    }
    Ok(out)
}

/// An assistant turn: its texts, thinking and tool calls as one chat message.
fn assistant_turn(i: usize, blocks: &[Value]) -> Result<Value, Error> {
    let (mut text, mut reasoning, mut calls) = (String::new(), String::new(), Vec::new());
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match block_type(b) {
            Some("text") => text.push_str(&text_of(b, &at)?),
            Some("thinking") => {
                reasoning.push_str(b.get("thinking").and_then(Value::as_str).unwrap_or_default());
            }
            Some("redacted_thinking") => {}
            Some("tool_use") => {
                let id = b.get("id").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.id: field required")))?;
                let name =
                    b.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("{at}.name: field required")))?;
                let input = match b.get("input") {
                    None | Some(Value::Null) => Value::Object(Map::new()),
                    Some(v @ Value::Object(_)) => v.clone(),
                    Some(_) => return Err(bad(format!("{at}.input: must be an object"))),
                };
                calls.push(json!({"id": id, "type": "function",
                    "function": {"name": name, "arguments": input.to_string()}}));
            }
            Some("tool_result") => {
                return Err(bad(format!("{at}: a tool_result block belongs in a user message")));
            }
            Some("image") => return Err(image_refused(&at)),
            Some(other) => return Err(bad(format!("{at}: content block type \"{other}\" is not supported"))),
            None => return Err(bad(format!("{at}: a content block needs a `type`"))),
        }
    }
    let mut m = json!({"role": "assistant", "content": text});
    if !reasoning.is_empty() {
        m["reasoning_content"] = Value::String(reasoning);
    }
    if !calls.is_empty() {
        m["tool_calls"] = Value::Array(calls);
    }
    Ok(m)
}

/// A user (or system) turn: its texts as messages of `role`, its tool results as `tool`
/// messages, in block order.
fn user_turns(i: usize, role: &str, blocks: &[Value], out: &mut Vec<Value>) -> Result<(), Error> {
    let mut text: Option<String> = None;
    for (j, b) in blocks.iter().enumerate() {
        let at = format!("messages[{i}].content[{j}]");
        match block_type(b) {
            Some("text") => text.get_or_insert_with(String::new).push_str(&text_of(b, &at)?),
            Some("tool_result") if role == "user" => {
                if let Some(t) = text.take() {
                    out.push(json!({"role": role, "content": t}));
                }
                let id = b
                    .get("tool_use_id")
                    .and_then(Value::as_str)
                    .ok_or_else(|| bad(format!("{at}.tool_use_id: field required")))?;
                out.push(json!({"role": "tool", "tool_call_id": id, "content": tool_result_text(b, &at)?}));
            }
            Some("tool_use") | Some("tool_result") => {
                let kind = block_type(b).unwrap_or_default();
                return Err(bad(format!("{at}: a {kind} block does not belong in a {role} message")));
            }
            Some("thinking") | Some("redacted_thinking") => {}
            Some("image") => return Err(image_refused(&at)),
            Some(other) => return Err(bad(format!("{at}: content block type \"{other}\" is not supported"))),
            None => return Err(bad(format!("{at}: a content block needs a `type`"))),
        }
    }
    if let Some(t) = text {
        out.push(json!({"role": role, "content": t}));
    }
    Ok(())
}

/// The function tools of `tools`, and their names.
fn chat_tools(tools: &[Value]) -> Result<(Vec<Value>, Vec<String>), Error> {
    let mut out = Vec::with_capacity(tools.len());
    let mut names = Vec::with_capacity(tools.len());
    for (i, t) in tools.iter().enumerate() {
        let kind = t.get("type").and_then(Value::as_str);
        if let Some(k) = kind.filter(|k| *k != "custom") {
            return Err(bad(format!("tools[{i}]: server tool type \"{k}\" is not supported")));
        }
        let name =
            t.get("name").and_then(Value::as_str).ok_or_else(|| bad(format!("tools[{i}].name: field required")))?;
        let Some(schema) = t.get("input_schema").filter(|s| s.is_object()) else {
            return Err(bad(format!("tools[{i}].input_schema: field required for client tools")));
        };
        let mut function = Map::new();
        function.insert("name".into(), Value::String(name.to_string()));
        if let Some(d) = t.get("description").and_then(Value::as_str) {
            function.insert("description".into(), Value::String(d.to_string()));
        }
        function.insert("parameters".into(), schema.clone());
        out.push(json!({"type": "function", "function": function}));
        names.push(name.to_string());
    }
    Ok((out, names))
}

/// The chat request (JSON) that stands for `r`. `for_count`: `count_tokens`'s request, which
/// has no `max_tokens` and reads only the conversation and the tools.
pub fn to_chat(r: &MessagesRequest, strip: bool, for_count: bool) -> Result<Vec<u8>, Error> {
    if r.messages.is_empty() {
        return Err(bad("messages: field required"));
    }
    let mut chat = Map::new();
    chat.insert("model".into(), Value::String(r.model.clone()));
    chat.insert("messages".into(), Value::Array(chat_messages(r, strip)?));
    let (tools, names) = match &r.tools {
        Some(t) if !t.is_empty() => chat_tools(t)?,
        _ => (Vec::new(), Vec::new()),
    };
    if !tools.is_empty() {
        chat.insert("tools".into(), Value::Array(tools));
    }
    let choice = match &r.tool_choice {
        None => None,
        Some(ToolChoice::Auto {}) => Some(json!("auto")),
        Some(ToolChoice::Any {}) | Some(ToolChoice::Tool { name: None }) => Some(json!("required")),
        Some(ToolChoice::None {}) => Some(json!("none")),
        Some(ToolChoice::Tool { name: Some(n) }) => {
            if !names.iter().any(|t| t == n) {
                return Err(bad(format!("tool named \"{n}\" in tool_choice is not present in tools")));
            }
            Some(json!({"type": "function", "function": {"name": n}}))
        }
    };
    if let Some(c) = choice {
        if names.is_empty() && c == json!("required") {
            return Err(bad("tool_choice is \"required\" but tools is empty"));
        }
        if !names.is_empty() {
            chat.insert("tool_choice".into(), c);
        }
    }
    if !for_count {
        let max_tokens = r.max_tokens.ok_or_else(|| {
            bad("Failed to deserialize the JSON body into the target type: missing field `max_tokens`")
        })?;
        if max_tokens == 0 {
            return Err(bad("max_tokens: must be greater than 0"));
        }
        chat.insert("max_tokens".into(), json!(max_tokens));
        if let Some(stops) = r.stop_sequences.as_ref().filter(|s| !s.is_empty()) {
            chat.insert("stop".into(), json!(stops));
        }
        if let Some(t) = r.temperature {
            chat.insert("temperature".into(), json!(t));
        }
        if let Some(p) = r.top_p {
            chat.insert("top_p".into(), json!(p));
        }
        if let Some(k) = r.top_k {
            chat.insert("top_k".into(), json!(k));
        }
        if r.stream {
            chat.insert("stream".into(), Value::Bool(true));
        }
        // 1.6.1 asks every worker for the stop reason among the extra fields (also when
        // DYN_DISABLE_FRONTEND_NVEXT cut the client's `nvext` down before, [`retain_cache_salt`]).
        let mut nvext = match &r.nvext {
            Some(Value::Object(o)) => o.clone(),
            Some(Value::Null) | None => Map::new(),
            Some(_) => return Err(bad("Failed to convert request: invalid nvext: expected an object")),
        };
        let fields = nvext.entry("extra_fields").or_insert_with(|| Value::Array(Vec::new()));
        if let Value::Array(f) = fields {
            if !f.iter().any(|v| v == "stop_reason") {
                f.push(Value::String("stop_reason".into()));
            }
        }
        chat.insert("nvext".into(), Value::Object(nvext));
    }
    serde_json::to_vec(&Value::Object(chat)).map_err(|e| Error::internal(e.to_string()))
}

/// `DYN_DISABLE_FRONTEND_NVEXT`: the client's raw `nvext` cut to its `cache_salt` (a
/// non-empty string; `null` or `""` is none), as 1.6.1 cuts an Anthropic request's before
/// converting it; whether anything else was dropped. A `cache_salt` of another type is 1.6.1's
/// refusal.
pub fn retain_cache_salt(nvext: Option<Value>) -> Result<(Option<Value>, bool), Error> {
    let Some(raw) = nvext else { return Ok((None, false)) };
    let Value::Object(mut fields) = raw else { return Ok((None, true)) };
    let dropped = fields.keys().any(|k| k != "cache_salt");
    let kept = match fields.remove("cache_salt") {
        None | Some(Value::Null) => None,
        Some(Value::String(s)) if s.is_empty() => None,
        Some(Value::String(s)) => Some(json!({ "cache_salt": s })),
        Some(_) => return Err(bad("invalid nvext.cache_salt: expected a string or null")),
    };
    Ok((kept, dropped))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Value {
        let r = parse(body.to_string().as_bytes()).unwrap();
        serde_json::from_slice(&to_chat(&r, true, false).unwrap()).unwrap()
    }

    #[test]
    fn the_billing_preamble_goes_only_at_the_start_with_a_newline() {
        let pre = "x-anthropic-billing-header: cc_version=2.1.3; cch=1f2e3;";
        assert_eq!(system_text(&System::Text(format!("{pre}\nYou are terse.")), true), "You are terse.");
        assert_eq!(system_text(&System::Text(format!("  \n{pre}\nYou are terse.")), true), "You are terse.");
        assert_eq!(system_text(&System::Text(format!("  \n{pre}\nT")), false), format!("  \n{pre}\nT"));
        assert_eq!(system_text(&System::Text(pre.into()), true), pre);
        assert_eq!(system_text(&System::Text(format!("A\n{pre}\nB")), true), format!("A\n{pre}\nB"));
        let blocks = System::Blocks(vec![SystemBlock { text: pre.into() }, SystemBlock { text: "T.".into() }]);
        assert_eq!(system_text(&blocks, true), "T.");
    }

    #[test]
    fn a_tool_loop_becomes_tool_calls_and_tool_messages() {
        let v = chat(json!({"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "S"}],
            "messages": [
                {"role": "user", "content": "Weather?"},
                {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "w", "input": {"c": "P"}}]},
                {"role": "user", "content": [{"type": "text", "text": "Before."},
                    {"type": "tool_result", "tool_use_id": "toolu_1", "content": [{"type": "text", "text": "Sun"}]},
                    {"type": "text", "text": "After."}]}],
            "tools": [{"name": "w", "input_schema": {"type": "object"}}],
            "tool_choice": {"type": "any"}, "stop_sequences": ["END"]}));
        let m = &v["messages"];
        assert_eq!(m[0], json!({"role": "system", "content": "S"}));
        assert_eq!(m[2]["content"], "");
        assert_eq!(m[2]["tool_calls"][0]["function"], json!({"name": "w", "arguments": "{\"c\":\"P\"}"}));
        assert_eq!(m[3], json!({"role": "user", "content": "Before."}));
        assert_eq!(m[4], json!({"role": "tool", "tool_call_id": "toolu_1", "content": "Sun"}));
        assert_eq!(m[5], json!({"role": "user", "content": "After."}));
        assert_eq!(v["tool_choice"], "required");
        assert_eq!(v["tools"][0]["function"]["parameters"], json!({"type": "object"}));
        assert_eq!(v["stop"], json!(["END"]));
        assert_eq!(v["nvext"]["extra_fields"], json!(["stop_reason"]));
    }

    #[test]
    fn refusals_name_what_is_wrong() {
        let err = |body: Value| {
            let r = parse(body.to_string().as_bytes());
            r.and_then(|r| to_chat(&r, true, false)).unwrap_err().message().to_string()
        };
        let m =
            |content: Value| json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": content}]});
        assert_eq!(err(json!({"model": "m", "max_tokens": 5, "messages": []})), "messages: field required");
        assert!(err(m(json!([]))).contains("must contain at least one content block"));
        assert!(err(m(json!([{"type": "video"}]))).contains("content block type \"video\" is not supported"));
        assert!(err(m(json!([{"type": "image", "source": {}}]))).contains("image content is not supported"));
        assert!(err(json!({"model": "m", "messages": [{"role": "user", "content": "x"}]})).contains("max_tokens"));
        assert!(err(json!({"model": "m", "max_tokens": 5, "messages": [{"role": "tool", "content": "x"}]}))
            .contains("unknown variant `tool`"));
        let tools = json!({"model": "m", "max_tokens": 5, "messages": [{"role": "user", "content": "x"}],
            "tools": [{"name": "w", "input_schema": {}}], "tool_choice": {"type": "tool", "name": "nope"}});
        assert!(err(tools).contains("tool named \"nope\""));
    }

    #[test]
    fn disabled_nvext_keeps_the_cache_salt() {
        assert_eq!(retain_cache_salt(None).unwrap(), (None, false));
        let (kept, dropped) = retain_cache_salt(Some(json!({"cache_salt": "t", "annotations": ["a"]}))).unwrap();
        assert_eq!((kept, dropped), (Some(json!({"cache_salt": "t"})), true));
        assert_eq!(retain_cache_salt(Some(json!({"cache_salt": ""}))).unwrap(), (None, false));
        assert_eq!(retain_cache_salt(Some(json!("x"))).unwrap(), (None, true));
        assert!(retain_cache_salt(Some(json!({"cache_salt": 3}))).is_err());
    }
}
