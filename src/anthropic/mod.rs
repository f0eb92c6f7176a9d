//! The Anthropic Messages adapter (`--enable-anthropic-api`): `POST /v1/messages` and
//! `POST /v1/messages/count_tokens` bodies in, Anthropic answers out
//! (docs/dynamo/anthropic-messages.md). Runs on the shard that took the request.
//!
//! 1. parse and check the body, and make it an OpenAI chat request ([`request`]);
//! 2. validate that with the chat route's rules ([`crate::openai::parse_chat`]) and run it
//!    ([`crate::openai::serve::run_chat`]), which gives the generation and the model's parsers;
//! 3. render the events through the parsers as one message ([`answer`]) or as Anthropic's
//!    SSE events ([`stream`]).
//!
//! `count_tokens` templates and tokenizes the same chat request without a worker. Every
//! failure is an [`Error`]; the service writes it in Anthropic's shape
//! ([`Error::to_anthropic_body`]). HTTP is not known here.
//!
//! Where switchyard differs from 1.6.1 on purpose: no `data: [DONE]` after the events; a
//! `ping` after `message_start` (and as the keep-alive); `message_start`'s `input_tokens` and
//! `count_tokens` count the templated prompt's tokens (1.6.1 estimates a third of the raw
//! request's characters); blocks of a whole answer keep the model's order; an assistant turn
//! of tool calls only is accepted; `message_delta` carries `stop_sequence: null`.

pub mod answer;
pub mod request;
pub mod stream;

use std::rc::Rc;

use bytes::Bytes;

use crate::error::{Error, Kind};
use crate::infer::Caller;
use crate::metrics::Endpoint;
use crate::shard::{local, ShardCtx};

/// An Anthropic answer.
pub enum Answer {
    /// One JSON body.
    Json(Vec<u8>),
    /// SSE events, written as they come.
    Stream(local::Receiver<Bytes>),
}

/// What a stream cut by the drain ends with.
pub const SHUTTING_DOWN: &[u8] = b"event: error\ndata: {\"type\":\"error\",\"error\":{\"type\":\"overloaded_error\",\"message\":\"Service is shutting down\"}}\n\n";

/// The message of an unknown model, as 1.6.1 words it.
fn not_found(model: &str, e: Error) -> Error {
    match e.kind() {
        Kind::NotFound => Error::new(Kind::NotFound, format!("Model '{model}' not found")),
        _ => e,
    }
}

/// Answer one `/v1/messages` request; `session`: the session its headers name (Claude Code's
/// `x-claude-code-session-id` among them), with session affinity on.
pub async fn messages(ctx: &Rc<ShardCtx>, body: &Bytes, caller: Caller) -> Result<Answer, Error> {
    let config = &ctx.shared.config;
    let parsed = request::parse(body);
    let (model, stream) = match &parsed {
        Ok(r) => (Some(r.model.clone()), r.stream),
        Err(_) => (None, false),
    };
    let chat = parsed.and_then(|mut r| {
        if !config.nvext_enabled {
            let (kept, dropped) = request::retain_cache_salt(r.nvext.take())?;
            if dropped {
                crate::openai::nvext::warn_dropped(Endpoint::AnthropicMessages);
            }
            r.nvext = kept;
        }
        let json = Bytes::from(request::to_chat(&r, config.strip_anthropic_preamble, false)?);
        let chat = crate::openai::parse_chat(&json)?;
        Ok((r, chat, json))
    });
    let (r, chat, json) = match chat {
        Ok(x) => x,
        Err(e) => {
            crate::infer::rejected(ctx, Endpoint::AnthropicMessages, model.as_deref(), stream, &e);
            return Err(e);
        }
    };
    let run = crate::openai::serve::run_chat(ctx, chat, &json, Endpoint::AnthropicMessages, caller)
        .await
        .map_err(|e| not_found(&r.model, e))?;
    let meta = answer::Meta { id: answer::new_id("msg_"), model: r.model, stops: r.stop_sequences.unwrap_or_default() };
    if run.stream {
        let (tx, rx) = local::channel::<Bytes>();
        monoio::spawn(stream::stream(meta, run.gen, run.parsers, tx, config.sse_keep_alive));
        return Ok(Answer::Stream(rx));
    }
    answer::whole(&meta, run.gen, run.parsers).await.map(Answer::Json)
}

/// Answer one `/v1/messages/count_tokens` request: `{"input_tokens":N}`, N the templated
/// prompt's tokens. For a model whose workers take text (the frontend has no tokenizer for
/// it) N is 1.6.1's estimate: a third of the request's characters.
pub async fn count_tokens(ctx: &Rc<ShardCtx>, body: &Bytes) -> Result<Vec<u8>, Error> {
    let strip = ctx.shared.config.strip_anthropic_preamble;
    let r = request::parse(body)?;
    let json = Bytes::from(request::to_chat(&r, strip, true)?);
    let chat = crate::openai::parse_chat(&json)?;
    let n = match crate::openai::serve::count_chat(ctx, chat, &json).await.map_err(|e| not_found(&r.model, e))? {
        Some(n) => n,
        None => estimate(&r, strip),
    };
    Ok(format!("{{\"input_tokens\":{n}}}").into_bytes())
}

/// 1.6.1's estimate of a request's tokens: a third of its characters (system, per message a
/// role overhead and its blocks, tools), at least 1 when there are any.
pub fn estimate(r: &request::MessagesRequest, strip: bool) -> u32 {
    use request::{Content, Role};
    use serde_json::Value;
    let mut chars = r.system.as_ref().map_or(0, |s| request::system_text(s, strip).chars().count());
    for m in &r.messages {
        chars += match m.role {
            Role::User => 4,
            Role::Assistant => 9,
            Role::System => 6,
        };
        let blocks = match &m.content {
            Content::Text(s) => {
                chars += s.chars().count();
                continue;
            }
            Content::Blocks(b) => b,
        };
        for b in blocks {
            let s = |k: &str| b.get(k).and_then(Value::as_str).map_or(0, |t| t.chars().count());
            chars += match b.get("type").and_then(Value::as_str) {
                Some("text") => s("text"),
                Some("thinking") => s("thinking"),
                Some("image") => 256,
                Some("tool_use") => s("name") + b.get("input").map_or(0, |i| i.to_string().chars().count()),
                Some("tool_result") => match b.get("content") {
                    Some(Value::String(t)) => t.chars().count(),
                    Some(Value::Array(parts)) => parts
                        .iter()
                        .filter_map(|p| p.get("text").and_then(Value::as_str))
                        .map(|t| t.chars().count())
                        .sum(),
                    _ => 0,
                },
                _ => b.to_string().chars().count(),
            };
        }
    }
    for t in r.tools.iter().flatten() {
        let s = |k: &str| t.get(k).and_then(Value::as_str).map_or(0, |v| v.chars().count());
        chars += s("name") + s("description") + t.get("input_schema").map_or(0, |v| v.to_string().chars().count());
    }
    match chars {
        0 => 0,
        n => ((n / 3).max(1)) as u32,
    }
}
