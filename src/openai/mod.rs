//! OpenAI request model and validation, answering exactly as Dynamo 1.6.1 does.
//!
//! # What it owns
//!
//! The typed requests of `POST /v1/chat/completions` ([`NvCreateChatCompletionRequest`]) and
//! `POST /v1/completions` ([`NvCreateCompletionRequest`]), their deserialization from the body
//! bytes, their validation, and the accessors later stages read (effective `max_tokens`, stop
//! strings, streaming flags, template arguments, guided decoding). It does no I/O, knows no
//! models or workers, and depends only on `serde`, `serde_json` and [`crate::error`].
//!
//! # The order of checks (Dynamo's)
//!
//! For a request routed to an enabled chat/completions endpoint:
//!
//! 1. `Content-Type` must be JSON ([`check_content_type`]) → 415
//!    `Expected request with Content-Type application/json` (before the body is read).
//! 2. The body limit (413) — the HTTP layer's job.
//! 3. Deserialization ([`parse_chat`] / [`parse_completion`]) → 400
//!    `Failed to deserialize the JSON body into the target type: <serde_json error>`,
//!    line/column included, exactly as serde_json words it for Dynamo's types.
//! 4. Validation → 400 (501 for deprecated `function_call`/`functions`)
//!    `Validation: <message>`; see [`validate`].
//! 5. Model lookup (404 `Model not found`) — the caller's job, after all of the above.
//!
//! # Layout
//!
//! | file | owns |
//! |---|---|
//! | `shape.rs` | the macro declaring each request twice (fast flat struct, Dynamo's nested shape) |
//! | `chat.rs` | the chat request, its parsing and accessors |
//! | `chat_params.rs` | tools, `tool_choice`, `response_format` and the other chat parameters |
//! | `messages.rs` | chat messages by role, tool calls |
//! | `content.rs` | message content and its parts (text, image, video, audio) |
//! | `completions.rs` | the completion request and `prompt` |
//! | `common.rs` | `stop`, `stream_options`, helpers shared by both |
//! | `nvext.rs` | Dynamo's `nvext` extension |
//! | `chunks.rs` | OpenAI chunks of `model_input = Text` workers, relayed and aggregated |
//! | `logprobs.rs` | output-token log probabilities in chat and completions shapes |
//! | `validate.rs`, `validate/completion.rs` | semantic checks in Dynamo's order |
//!
//! # Cost
//!
//! A valid request is deserialized once, streaming, into the flat struct (no intermediate
//! `serde_json::Value`, no re-serialization). Only a body that fails that parse is parsed again
//! through Dynamo's layout, to produce Dynamo's exact error. Inside, each chat message is
//! buffered once by serde's internally tagged enum (keyed on `role`), exactly as in Dynamo;
//! that buffering is what decides which shapes are accepted, so it is kept.

#[macro_use]
mod shape;

pub mod answer;
pub mod chat;
pub mod chat_params;
pub mod chunks;
pub mod common;
pub mod completions;
pub mod content;
pub mod embeddings;
pub mod guided;
pub mod logprobs;
pub mod messages;
pub mod nvext;
pub mod parsed;
pub mod response;
pub mod serve;
pub mod strict;
pub mod surfaces;
pub mod to_infer;
pub mod validate;

pub use chat::NvCreateChatCompletionRequest;
pub use common::{ChatCompletionStreamOptions, Stop};
pub use completions::{NvCreateCompletionRequest, Prompt};
pub use content::{ContentPart, MessageContent};
pub use messages::ChatMessage;
pub use nvext::NvExt;

use crate::error::{Error, Kind};

/// Options of parsing that come from the environment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ParseOptions {
    /// `DYN_IGNORE_OPENAI_FE_UNSUPPORTED_FIELDS`: drop unknown top-level fields instead of
    /// rejecting them (passthrough extras are still type-checked).
    pub ignore_unsupported_fields: bool,
}

/// The prefix Dynamo puts before every deserialization error.
pub const DESERIALIZE_PREFIX: &str = "Failed to deserialize the JSON body into the target type: ";

/// The 415 message for a missing or non-JSON `Content-Type`.
pub const CONTENT_TYPE_MESSAGE: &str = "Expected request with Content-Type application/json";

/// Parses and validates a `/v1/chat/completions` body with default options.
pub fn parse_chat(body: &[u8]) -> Result<Box<NvCreateChatCompletionRequest>, Error> {
    NvCreateChatCompletionRequest::from_json(body, &ParseOptions::default())
}

/// Parses and validates a `/v1/chat/completions` body.
pub fn parse_chat_with(body: &[u8], opts: &ParseOptions) -> Result<Box<NvCreateChatCompletionRequest>, Error> {
    NvCreateChatCompletionRequest::from_json(body, opts)
}

/// Parses and validates a `/v1/completions` body with default options.
pub fn parse_completion(body: &[u8]) -> Result<NvCreateCompletionRequest, Error> {
    NvCreateCompletionRequest::from_json(body, &ParseOptions::default())
}

/// Parses and validates a `/v1/completions` body.
pub fn parse_completion_with(body: &[u8], opts: &ParseOptions) -> Result<NvCreateCompletionRequest, Error> {
    NvCreateCompletionRequest::from_json(body, opts)
}

/// Checks the `Content-Type` header value the way axum's `Json` extractor does: the media type
/// must be `application/json` or `application/<anything>+json` (case-insensitive, parameters
/// allowed). A missing header fails.
pub fn check_content_type(value: Option<&[u8]>) -> Result<(), Error> {
    if value.is_some_and(is_json_media_type) {
        Ok(())
    } else {
        Err(Error::new(Kind::UnsupportedMediaType, CONTENT_TYPE_MESSAGE))
    }
}

fn is_json_media_type(value: &[u8]) -> bool {
    let Ok(value) = std::str::from_utf8(value) else { return false };
    let mut parts = value.split(';');
    let essence = parts.next().unwrap_or("").trim();
    let Some((ty, sub)) = essence.split_once('/') else { return false };
    let token = |s: &str| !s.is_empty() && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"!#$&-^_.+".contains(&b));
    if !token(ty) || !token(sub) {
        return false;
    }
    // Parameters must be `name=value` (value a token or a quoted string).
    let params_ok = parts.all(|p| {
        let p = p.trim();
        p.is_empty()
            || p.split_once('=').is_some_and(|(n, v)| {
                token(n.trim()) && (token(v) || (v.len() >= 2 && v.starts_with('"') && v.ends_with('"')))
            })
    });
    let sub = sub.to_ascii_lowercase();
    params_ok
        && ty.eq_ignore_ascii_case("application")
        && (sub == "json" || sub.rsplit_once('+').is_some_and(|(_, suffix)| suffix == "json"))
}

/// The 400 error for a body that does not deserialize: Dynamo's prefix and serde_json's text.
pub(crate) fn deserialize_error(e: &serde_json::Error) -> Error {
    Error::new(Kind::BadRequest, format!("{DESERIALIZE_PREFIX}{e}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn content_types() {
        for ok in
            ["application/json", "application/json; charset=utf-8", "Application/JSON", "application/vnd.api+json"]
        {
            assert!(check_content_type(Some(ok.as_bytes())).is_ok(), "{ok}");
        }
        for bad in ["text/plain", "application/x-www-form-urlencoded", "", "json", "application/"] {
            assert!(check_content_type(Some(bad.as_bytes())).is_err(), "{bad}");
        }
        assert!(check_content_type(None).is_err());
    }
}
