//! Targets of the JSON bodies of the inference routes: each body goes the way its route
//! takes it, from the bytes to the validated request the driver would run (the driver's own
//! steps need a model and a worker, and are not fuzzed here). A refusal must be a client
//! error whose body, in the route's own shape, is JSON.

use bytes::Bytes;

use super::check_json_error;
use crate::error::Error;
use crate::openai::{parse_chat, parse_completion, serve::ranks_name_a_worker, to_infer};

/// A chat request on its way to the driver, as `openai::serve` and `run_chat` take it.
fn run_chat(r: Box<crate::openai::NvCreateChatCompletionRequest>, body: &Bytes) -> Result<(), Error> {
    let _ = crate::openai::serve::ToolUse::of(&r);
    let (req, _extras) = to_infer::chat(r, body)?;
    ranks_name_a_worker(&req)
}

/// OpenAI: the bytes as a `/v1/chat/completions` body and as a `/v1/completions` body.
pub fn openai(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    if let Err(e) = parse_chat(&body).and_then(|r| run_chat(r, &body)) {
        check_json_error(&e);
    }
    let completion = parse_completion(&body).and_then(|r| to_infer::completion(r, &body));
    if let Err(e) = completion.and_then(|(req, _)| ranks_name_a_worker(&req)) {
        check_json_error(&e);
    }
}

/// An Anthropic refusal: a client error whose Anthropic-shaped body is JSON.
fn check_anthropic_error(e: &Error) {
    check_json_error(e);
    let body: serde_json::Value = serde_json::from_slice(&e.to_anthropic_body()).expect("an error body is JSON");
    assert_eq!(body["type"], "error", "{body}");
}

/// Anthropic Messages: the bytes as a `/v1/messages` body and as a `count_tokens` body, with
/// and without the billing preamble stripped: parsed, made a chat request, validated as one
/// (and, for counting, the estimate of a text model).
pub fn anthropic(data: &[u8]) {
    use crate::anthropic::request;
    let r = match request::parse(data) {
        Ok(r) => r,
        Err(e) => return check_anthropic_error(&e),
    };
    for (strip, for_count) in [(false, false), (true, false), (false, true), (true, true)] {
        let chat = request::to_chat(&r, strip, for_count).and_then(|json| {
            let json = Bytes::from(json);
            let chat = parse_chat(&json)?;
            run_chat(chat, &json)
        });
        if let Err(e) = chat {
            check_anthropic_error(&e);
        }
        if for_count {
            let _ = crate::anthropic::estimate(&r, strip);
        }
    }
}

/// Responses: the bytes as a `/v1/responses` body (its echo and the chat request it stands
/// for) and as an `input_tokens` body.
pub fn responses(data: &[u8]) {
    let body = Bytes::copy_from_slice(data);
    match crate::responses::prepare(&body) {
        Ok((echo, chat, chat_body)) => {
            use crate::responses::object::{response, State, Status};
            let state = State {
                id: "resp_1",
                created_at: 0,
                status: Status::Completed,
                output: Vec::new(),
                usage: None,
                error: None,
            };
            assert!(response(&echo, state, true).is_object());
            if let Err(e) = run_chat(chat, &chat_body) {
                check_json_error(&e);
            }
        }
        Err(e) => check_json_error(&e),
    }
    match crate::responses::counted(&body) {
        Ok(Some((chat, chat_body))) => {
            if let Err(e) = to_infer::chat(chat, &chat_body) {
                check_json_error(&e);
            }
        }
        Ok(None) => {}
        Err(e) => check_json_error(&e),
    }
}
