//! The streamed Anthropic answer (docs/dynamo/anthropic-messages.md §4): named SSE events
//! `message_start`, `ping`, then per content block `content_block_start`,
//! `content_block_delta` (`thinking_delta`, `text_delta`, `input_json_delta`) and
//! `content_block_stop`, then `message_delta` (stop reason, usage) and `message_stop`. There
//! is no `data: [DONE]`: an Anthropic stream ends with `message_stop`.
//!
//! `message_start`'s `input_tokens` is the templated prompt's token count as sent to the
//! worker. A failure after the stream started is an `event: error` with Anthropic's error
//! object, and the stream ends. When the stream has been quiet for the keep-alive interval a
//! `ping` event is sent. The client going away (the receiver dropped) drops the generation,
//! which cancels its worker. Runs in its own task on the request's shard.

use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use super::answer::{call_input, new_id, usage_json, Ending, Meta, Reader, Step};
use crate::error::Error;
use crate::infer::{Generation, Usage};
use crate::openai::answer::{next_or_quiet, Next, Quiet};
use crate::parsers::{Out, Spec};
use crate::shard::local;

/// The ping Anthropic sends after `message_start` and now and then; also the keep-alive.
const PING: &[u8] = b"event: ping\ndata: {\"type\":\"ping\"}\n\n";

/// Write one named event.
fn event(out: &mut Vec<u8>, name: &str, data: &Value) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\ndata: ");
    // Writing a `Value` into a Vec cannot fail.
    let _ = serde_json::to_writer(&mut *out, data);
    out.extend_from_slice(b"\n\n");
}

/// An error event (Anthropic's error object).
pub(super) fn error_event(out: &mut Vec<u8>, e: &Error) {
    out.extend_from_slice(b"event: error\ndata: ");
    out.extend_from_slice(&e.to_anthropic_body());
    out.extend_from_slice(b"\n\n");
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Open {
    Thinking,
    Text,
}

/// The blocks written so far.
struct Blocks {
    /// The block open now and its index.
    open: Option<(Open, u32)>,
    next: u32,
}

impl Blocks {
    fn close(&mut self, out: &mut Vec<u8>) {
        if let Some((_, index)) = self.open.take() {
            event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
        }
    }

    /// The index of an open block of `kind` (opened now when another is open, or none).
    fn ensure(&mut self, out: &mut Vec<u8>, kind: Open) -> u32 {
        if let Some((k, i)) = self.open {
            if k == kind {
                return i;
            }
        }
        self.close(out);
        let index = self.next;
        self.next += 1;
        let block = match kind {
            Open::Thinking => json!({"type": "thinking", "thinking": "", "signature": ""}),
            Open::Text => json!({"type": "text", "text": ""}),
        };
        event(
            out,
            "content_block_start",
            &json!({"type": "content_block_start", "index": index, "content_block": block}),
        );
        self.open = Some((kind, index));
        index
    }

    /// Write what `out_parsed` holds: a reasoning delta, a text delta, whole tool calls.
    fn write(&mut self, out: &mut Vec<u8>, parsed: &mut Out, usage: &Value) -> bool {
        let mut calls = false;
        if !parsed.reasoning.is_empty() {
            let index = self.ensure(out, Open::Thinking);
            let delta = json!({"type": "thinking_delta", "thinking": parsed.reasoning});
            event(out, "content_block_delta", &delta_event(index, delta, usage));
        }
        if !parsed.content.is_empty() {
            let index = self.ensure(out, Open::Text);
            let delta = json!({"type": "text_delta", "text": parsed.content});
            event(out, "content_block_delta", &delta_event(index, delta, usage));
        }
        for call in parsed.calls.drain(..) {
            calls = true;
            self.close(out);
            let index = self.next;
            self.next += 1;
            let block = json!({"type": "tool_use", "id": new_id("toolu_"), "name": call.name, "input": {}});
            event(
                out,
                "content_block_start",
                &json!({"type": "content_block_start", "index": index, "content_block": block}),
            );
            let input = call_input(&call).to_string();
            let delta = json!({"type": "input_json_delta", "partial_json": input});
            event(out, "content_block_delta", &delta_event(index, delta, usage));
            event(out, "content_block_stop", &json!({"type": "content_block_stop", "index": index}));
        }
        parsed.clear();
        calls
    }
}

fn delta_event(index: u32, delta: Value, usage: &Value) -> Value {
    json!({"type": "content_block_delta", "index": index, "delta": delta, "usage": usage})
}

/// The running usage 1.6.1 puts on every delta: the prompt's and the answer's tokens so far.
fn running_usage(gen: &Generation) -> Value {
    let so_far = gen.usage_so_far();
    let prompt = if so_far.prompt_tokens > 0 { so_far.prompt_tokens } else { gen.prompt_sent() };
    let mut u =
        usage_json(&Usage { prompt_tokens: prompt, completion_tokens: so_far.completion_tokens, cached_tokens: None });
    u["total_tokens"] = json!(prompt + so_far.completion_tokens);
    u
}

/// The first events: `message_start` (an empty message with the prompt's tokens) and `ping`.
fn start(out: &mut Vec<u8>, meta: &Meta, gen: &Generation) {
    let usage = json!({"input_tokens": gen.prompt_sent(), "output_tokens": 0, "cache_creation_input_tokens": 0});
    let message = json!({
        "id": meta.id, "type": "message", "role": "assistant", "content": [], "model": meta.model,
        "stop_reason": null, "stop_sequence": null, "usage": usage,
    });
    event(out, "message_start", &json!({"type": "message_start", "message": message}));
    out.extend_from_slice(PING);
}

/// Write the generation's events to `tx` until it ends or the client leaves; with
/// `keep_alive`, a `ping` whenever the stream has been quiet that long.
pub(super) async fn stream(
    meta: Meta,
    mut gen: Generation,
    parsers: Spec,
    tx: local::Sender<Bytes>,
    keep_alive: Option<Duration>,
) {
    let mut quiet = Quiet::new(keep_alive);
    let mut out = Vec::with_capacity(512);
    start(&mut out, &meta, &gen);
    if tx.send(std::mem::take(&mut out).into()).is_err() {
        return;
    }
    let mut reader = Reader::new(parsers);
    let mut parsed = Out::default();
    let mut blocks = Blocks { open: None, next: 0 };
    let mut ending = Ending::default();
    loop {
        let next = next_or_quiet(&mut gen, &tx, &mut quiet).await;
        let next = match next {
            Next::Gone => return, // dropping the generation counts the client gone and cancels it
            Next::Quiet => {
                if tx.send(Bytes::from_static(PING)).is_err() {
                    return;
                }
                continue;
            }
            Next::Event(next) => next,
        };
        let step = reader.step(next, &mut parsed);
        let end = match step {
            Step::Parsed => None,
            Step::Finished { finish, stop } => {
                ending.finish = Some(finish);
                ending.stop = stop;
                None
            }
            Step::Done(usage) => Some(Ok(usage)),
            Step::Failed(e) => Some(Err(e)),
        };
        if !parsed.is_empty() {
            let usage = running_usage(&gen);
            ending.tool_calls |= blocks.write(&mut out, &mut parsed, &usage);
        }
        match end {
            None => {}
            Some(Ok(usage)) => {
                blocks.close(&mut out);
                let (reason, sequence) = ending.reason(&meta);
                let delta = json!({"stop_reason": reason, "stop_sequence": sequence});
                event(
                    &mut out,
                    "message_delta",
                    &json!({"type": "message_delta", "delta": delta, "usage": usage_json(&usage)}),
                );
                event(&mut out, "message_stop", &json!({"type": "message_stop"}));
                let _ = tx.send(out.into());
                return;
            }
            Some(Err(e)) => {
                error_event(&mut out, &e);
                let _ = tx.send(out.into());
                return;
            }
        }
        if !gen.ready() && !out.is_empty() {
            // Copied out at its size (one allocation; the buffer is kept for the next).
            let full = Bytes::copy_from_slice(&out);
            out.clear();
            if tx.send(full).is_err() {
                return;
            }
        }
    }
}
