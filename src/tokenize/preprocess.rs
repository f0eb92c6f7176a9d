//! From a conversation (or a completion prompt) to the prompt text and its token ids.
//!
//! Chat: the messages and tools exactly as the client sent them (the raw JSON of
//! [`ChatInput::json`], so key order — which templates print through `tojson` — is the
//! client's, as with transformers), the tools — left out when `tool_choice` is `none` and
//! `--exclude-tools-when-tool-choice-none` is on, as Dynamo does — and the template arguments go
//! through the model's chat template; the text is then encoded without added special tokens.
//! `add_generation_prompt` is on unless the conversation ends with an assistant message (the
//! client wants that message continued); a request may set it, and `continue_final_message`,
//! in its template arguments.
//!
//! Before the template sees them, messages are put in the form templates expect:
//! [`normalize_message`] (content given as text parts, and the `developer` role for a template
//! that does not know it).
//!
//! A conversation of plain turns ([`ChatInput::plain`]) for a template [`super::native`]
//! recognises is rendered natively: neither the second parse of the JSON nor the template
//! engine runs (same text, see that module).
//!
//! Completions: a string prompt is encoded with the tokenizer's own special tokens (a BOS
//! where the model adds one); token-id prompts are taken as they are.
//!
//! Protocol-free: adapters build [`ChatInput`] from their own request shapes.

use bytes::Bytes;
use serde_json::{Map, Value};

use super::model::ModelFiles;
use super::native::{Role, Turn};
use super::template::{ChatTemplate, RenderArgs};
use super::tokenizer::Tokenizer;
use crate::error::{Error, Kind};

/// A conversation for the chat template.
#[derive(Debug, Clone, Default)]
pub struct ChatInput {
    /// A JSON object whose `messages` (and `tools`) are the conversation as the client wrote
    /// it: the template engine reads them from here, in the client's key order.
    pub json: Bytes,
    /// The conversation as plain turns, when every message is a system, developer or user
    /// message with string content: what a native renderer takes (no second parse).
    pub plain: Option<Vec<PlainTurn>>,
    /// The request carries a non-empty `tools` list.
    pub tools: bool,
    /// `tool_choice` is `none` (tools are then left out, with
    /// `--exclude-tools-when-tool-choice-none`).
    pub tool_choice_none: bool,
    /// Variables for the template (`chat_template_args`, thinking switches, …); an
    /// `add_generation_prompt` among them wins over the request's own.
    pub args: Map<String, Value>,
    /// The request's `add_generation_prompt` (default: on, unless the final message is
    /// continued).
    pub add_generation_prompt: Option<bool>,
    /// The request's `continue_final_message`.
    pub continue_final_message: bool,
}

/// The role of a plain turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PlainRole {
    System,
    Developer,
    User,
}

/// One message of a plain conversation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlainTurn {
    pub role: PlainRole,
    pub content: String,
}

/// Settings of the preprocessor that come from the command line.
#[derive(Clone, Copy, Debug)]
pub struct PreprocessOptions {
    /// `--exclude-tools-when-tool-choice-none` (default true).
    pub exclude_tools_when_tool_choice_none: bool,
    /// Render recognised templates natively where that is exact (not a command-line
    /// setting: on in the server; tests turn it off to compare with the template engine).
    pub native_templates: bool,
}

impl Default for PreprocessOptions {
    fn default() -> Self {
        PreprocessOptions { exclude_tools_when_tool_choice_none: true, native_templates: true }
    }
}

fn bad(msg: impl Into<String>) -> Error {
    Error::new(Kind::BadRequest, msg.into())
}

/// The parts of the JSON the template sees, in the client's key order.
#[derive(serde::Deserialize)]
struct TemplateInputs {
    messages: Vec<Value>,
    #[serde(default)]
    tools: Option<Value>,
}

/// Render the conversation's prompt with the model's template.
pub fn chat_prompt(
    chat: &ChatInput,
    model: &ModelFiles,
    opts: PreprocessOptions,
    now: Option<u64>,
) -> Result<String, Error> {
    let drop_tools = opts.exclude_tools_when_tool_choice_none && chat.tool_choice_none;
    let args = TemplateArgs::of(chat);
    let with_tools = chat.tools && !drop_tools;
    if opts.native_templates {
        if let Some(prompt) = native_prompt(chat, model, with_tools, &args) {
            return Ok(prompt);
        }
    }
    let inputs: TemplateInputs = serde_json::from_slice(&chat.json)
        .map_err(|e| Error::new(Kind::Internal, format!("request body changed after validation: {e}")))?;
    let mut messages = inputs.messages;
    let tools = match (inputs.tools, drop_tools) {
        (Some(Value::Array(t)), false) if !t.is_empty() => {
            Some(Value::Array(t.into_iter().map(normalize_tool).collect()))
        }
        _ => None,
    };
    let template = model
        .template(tools.is_some())
        .ok_or_else(|| bad("this model has no chat template; use /v1/completions with a raw prompt"))?;
    for m in &mut messages {
        normalize_message(m, template);
    }
    template
        .render(&RenderArgs {
            messages: &messages,
            tools: tools.as_ref(),
            documents: args.documents.as_ref(),
            add_generation_prompt: args.add_generation_prompt,
            continue_final_message: args.continue_final_message,
            special_tokens: &model.special_tokens,
            extra: Some(&args.extra),
            now,
        })
        .map_err(|e| bad(format!("chat template error: {e}")))
}

/// Put one message in the form templates expect:
/// * a `developer` message becomes a `system` one when the template does not know the
///   `developer` role (OpenAI's newer name for system instructions; a template that never
///   mentions it would drop the message silently);
/// * content given as an array of parts that are all text becomes one string, the texts
///   joined as Dynamo 1.6.1 joins them, for templates that only handle string content.
pub fn normalize_message(message: &mut Value, template: &ChatTemplate) {
    let Some(obj) = message.as_object_mut() else { return };
    if obj.get("role").and_then(Value::as_str) == Some("developer") && !template.knows_developer_role() {
        obj.insert("role".into(), Value::String("system".into()));
    }
    if let Some(text) = obj.get("content").and_then(text_parts) {
        obj.insert("content".into(), Value::String(text));
    }
}

/// The text of a content array whose parts are all `{"type":"text"}`; `None` otherwise.
fn text_parts(content: &Value) -> Option<String> {
    let parts = content.as_array()?;
    let mut out = String::new();
    for (i, p) in parts.iter().enumerate() {
        if p.get("type").and_then(Value::as_str) != Some("text") {
            return None;
        }
        if i > 0 {
            out.push_str(TEXT_PART_SEPARATOR);
        }
        out.push_str(p.get("text").and_then(Value::as_str)?);
    }
    Some(out)
}

/// What goes between the texts of consecutive text parts.
const TEXT_PART_SEPARATOR: &str = "\n";

/// The request's template arguments, with the three the preprocessor itself reads taken out.
struct TemplateArgs {
    /// The rest, handed to the template.
    extra: Map<String, Value>,
    /// Whether the prompt ends with the assistant's turn header: the template arguments'
    /// value, else the request's, else on unless the final message is continued (as Dynamo
    /// 1.6.1 and vLLM default it).
    add_generation_prompt: bool,
    continue_final_message: bool,
    documents: Option<Value>,
}

impl TemplateArgs {
    fn of(chat: &ChatInput) -> TemplateArgs {
        let mut extra = chat.args.clone();
        let from_args = match extra.remove("add_generation_prompt") {
            Some(Value::Bool(b)) => Some(b),
            _ => None,
        };
        let continue_final_message =
            chat.continue_final_message || matches!(extra.remove("continue_final_message"), Some(Value::Bool(true)));
        let add_generation_prompt = from_args.or(chat.add_generation_prompt).unwrap_or(!continue_final_message);
        let documents = extra.remove("documents").filter(|d| !d.is_null());
        TemplateArgs { extra, add_generation_prompt, continue_final_message, documents }
    }
}

/// A tool as Dynamo 1.6.1 hands it to templates: `{"type", "function": {"name",
/// "description", "parameters", "strict"}}` with the members OpenAI defines (others dropped,
/// `null` ones left out), a `description` that is not a string replaced by `""` (some
/// templates concatenate it), and `parameters` given an object `type` and `properties` when
/// they lack them.
fn normalize_tool(tool: Value) -> Value {
    let Value::Object(mut tool) = tool else { return tool };
    let mut out = Map::new();
    out.insert("type".into(), tool.remove("type").unwrap_or_else(|| Value::String("function".into())));
    let Some(Value::Object(mut f)) = tool.remove("function") else {
        return Value::Object(out);
    };
    let mut function = Map::new();
    for key in ["name", "description", "parameters", "strict"] {
        if let Some(v) = f.remove(key).filter(|v| !v.is_null()) {
            function.insert(key.into(), v);
        }
    }
    if !function.get("description").is_some_and(Value::is_string) {
        function.insert("description".into(), Value::String(String::new()));
    }
    if let Some(Value::Object(p)) = function.get_mut("parameters") {
        if !p.contains_key("type") {
            p.insert("type".into(), Value::String("object".into()));
        }
        if !p.contains_key("properties") {
            p.insert("properties".into(), Value::Object(Map::new()));
        }
    }
    out.insert("function".into(), Value::Object(function));
    Value::Object(out)
}

/// The prompt written by the model's native renderer, when it has one and the conversation is
/// in the subset it covers (see [`super::native`]); `None` sends it to the engine.
fn native_prompt(chat: &ChatInput, model: &ModelFiles, with_tools: bool, args: &TemplateArgs) -> Option<String> {
    if args.continue_final_message || with_tools {
        return None;
    }
    let turns = chat.plain.as_ref()?;
    let template = model.template(false)?;
    let native = template.native()?;
    let developer_is_system = !template.knows_developer_role();
    let turn = |t: &PlainTurn| -> Option<Role> {
        match t.role {
            PlainRole::System => Some(Role::System),
            PlainRole::Developer if developer_is_system => Some(Role::System),
            PlainRole::Developer => None,
            PlainRole::User => Some(Role::User),
        }
    };
    if !turns.iter().all(|t| turn(t).is_some()) {
        return None;
    }
    let turns = turns.iter().filter_map(|t| Some(Turn { role: turn(t)?, content: &t.content }));
    native.render(turns, args.add_generation_prompt, &args.extra)
}

/// Encode a rendered chat prompt (the template already placed BOS where the model wants it).
pub fn encode_prompt(tokenizer: &Tokenizer, prompt: &str) -> Result<Vec<u32>, Error> {
    tokenizer.encode(prompt).map_err(|e| Error::new(Kind::Internal, e))
}

/// Encode a raw completion prompt the way `tokenizer.encode(text)` does (special tokens added).
pub fn encode_completion_text(tokenizer: &Tokenizer, text: &str) -> Result<Vec<u32>, Error> {
    let mut out = Vec::new();
    tokenizer.encode_into(text, true, &mut out).map_err(|e| Error::new(Kind::Internal, e))?;
    Ok(out)
}
