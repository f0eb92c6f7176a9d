//! From a validated OpenAI request to the prompt text and its token ids.
//!
//! Chat: the messages and tools exactly as the client sent them (the raw JSON, so key order —
//! which templates print through `tojson` — is the client's, as with transformers; the typed
//! request would re-serialize in struct order), the tools — left out when
//! `tool_choice` is `none` and `--exclude-tools-when-tool-choice-none` is on, as Dynamo does —
//! and the template arguments (`chat_template_args` / `chat_template_kwargs`, `thinking`,
//! `reasoning_effort`) go through the model's chat template; the text is then encoded without
//! added special tokens. `add_generation_prompt` is on unless the conversation ends with an
//! assistant message (the client wants that message continued); a request may set it, and
//! `continue_final_message`, in its template arguments.
//!
//! A conversation of `system` and `user` messages with string content, for a template
//! [`super::native`] recognises, is rendered natively from the typed request: neither the
//! second parse of the body nor the template engine runs (same text, see that module).
//!
//! Completions: a string prompt is encoded with the tokenizer's own special tokens (a BOS
//! where the model adds one); token-id prompts are taken as they are.

use serde_json::{Map, Value};

use super::model::ModelFiles;
use super::native::{Role, Turn};
use super::template::RenderArgs;
use super::tokenizer::Tokenizer;
use crate::error::{Error, Kind};
use crate::openai::chat::NvCreateChatCompletionRequest;
use crate::openai::chat_params::ChatCompletionToolChoiceOption;
use crate::openai::content::MessageContent;
use crate::openai::messages::ChatMessage;

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

/// The parts of the body the template sees, as raw JSON in the client's key order.
#[derive(serde::Deserialize)]
struct TemplateInputs {
    messages: Vec<Value>,
    #[serde(default)]
    tools: Option<Value>,
}

/// Render the chat request's prompt with the model's template. `body` is the request body
/// `req` was parsed from.
pub fn chat_prompt(
    req: &NvCreateChatCompletionRequest,
    body: &[u8],
    model: &ModelFiles,
    opts: PreprocessOptions,
    now: Option<u64>,
) -> Result<String, Error> {
    let drop_tools = opts.exclude_tools_when_tool_choice_none
        && matches!(req.tool_choice, Some(ChatCompletionToolChoiceOption::None));
    let args = TemplateArgs::of(req);
    if opts.native_templates {
        if let Some(prompt) = native_prompt(req, model, drop_tools, &args) {
            return Ok(prompt);
        }
    }
    let inputs: TemplateInputs = serde_json::from_slice(body)
        .map_err(|e| Error::new(Kind::Internal, format!("request body changed after validation: {e}")))?;
    let messages = inputs.messages;
    let tools = match (inputs.tools, drop_tools) {
        (Some(Value::Array(t)), false) if !t.is_empty() => Some(Value::Array(t)),
        _ => None,
    };
    let last_is_assistant = messages.last().and_then(|m| m.get("role")).and_then(Value::as_str) == Some("assistant");
    let template = model
        .template(tools.is_some())
        .ok_or_else(|| bad("this model has no chat template; use /v1/completions with a raw prompt"))?;
    template
        .render(&RenderArgs {
            messages: &messages,
            tools: tools.as_ref(),
            documents: args.documents.as_ref(),
            add_generation_prompt: args.add_generation_prompt.unwrap_or(!last_is_assistant),
            continue_final_message: args.continue_final_message,
            special_tokens: &model.special_tokens,
            extra: Some(&args.extra),
            now,
        })
        .map_err(|e| bad(format!("chat template error: {e}")))
}

/// The request's template arguments, with the three the preprocessor itself reads taken out.
struct TemplateArgs {
    /// The rest, handed to the template.
    extra: Map<String, Value>,
    /// Set by the request; else on unless the conversation ends with an assistant message.
    add_generation_prompt: Option<bool>,
    continue_final_message: bool,
    documents: Option<Value>,
}

impl TemplateArgs {
    fn of(req: &NvCreateChatCompletionRequest) -> TemplateArgs {
        let mut extra = req.template_args();
        let add_generation_prompt = match extra.remove("add_generation_prompt") {
            Some(Value::Bool(b)) => Some(b),
            _ => None,
        };
        let continue_final_message = matches!(extra.remove("continue_final_message"), Some(Value::Bool(true)));
        let documents = extra.remove("documents").filter(|d| !d.is_null());
        TemplateArgs { extra, add_generation_prompt, continue_final_message, documents }
    }
}

/// The prompt written by the model's native renderer, when it has one and the request is in
/// the subset it covers (see [`super::native`]); `None` sends the request to the engine.
fn native_prompt(
    req: &NvCreateChatCompletionRequest,
    model: &ModelFiles,
    drop_tools: bool,
    args: &TemplateArgs,
) -> Option<String> {
    if args.continue_final_message || (!drop_tools && req.tools.as_ref().is_some_and(|t| !t.is_empty())) {
        return None;
    }
    let native = model.template(false)?.native()?;
    fn turn(m: &ChatMessage) -> Option<Turn<'_>> {
        match m {
            ChatMessage::System(s) if s.tools.is_none() => match &s.content {
                MessageContent::Text(t) => Some(Turn { role: Role::System, content: t }),
                MessageContent::Parts(_) => None,
            },
            ChatMessage::User(u) => match &u.content {
                MessageContent::Text(t) => Some(Turn { role: Role::User, content: t }),
                MessageContent::Parts(_) => None,
            },
            _ => None,
        }
    }
    if !req.messages.iter().all(|m| turn(m).is_some()) {
        return None;
    }
    // The conversation ends with a user or system message: a generation prompt by default.
    let add_generation_prompt = args.add_generation_prompt.unwrap_or(true);
    native.render(req.messages.iter().filter_map(turn), add_generation_prompt, &args.extra)
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
