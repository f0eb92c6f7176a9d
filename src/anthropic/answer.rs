//! A [`Generation`]'s events as an Anthropic message: the content blocks (thinking, text,
//! tool use) cut out of the model's text by its parsers ([`crate::parsers::Parse`]), the
//! stop reason and the usage; and the whole (non-streamed) answer's body
//! (docs/dynamo/anthropic-messages.md §3). Runs in the request's task on its shard.
//!
//! Blocks keep the order the model wrote them in (1.6.1 moves tool calls in front of the text
//! of whole answers; its streams, and Anthropic, keep the order).

use serde_json::{json, Map, Value};

use crate::error::{Error, Kind};
use crate::infer::{Event, Finish, Generation, Usage};
use crate::parsers::{Call, Out, Parse, Spec};

/// What the answer says besides its blocks.
pub(super) struct Meta {
    /// `msg_` + 32 hex digits.
    pub id: String,
    /// The request's `model`, echoed.
    pub model: String,
    /// The request's `stop_sequences` (a finish by one of them names it).
    pub stops: Vec<String>,
}

/// `msg_` / `toolu_` + a fresh UUID's 32 hex digits.
pub(super) fn new_id(prefix: &str) -> String {
    format!("{prefix}{:032x}", crate::util::new_uuid())
}

/// How the choice ended.
#[derive(Default)]
pub(super) struct Ending {
    pub finish: Option<Finish>,
    /// The index of the stop sequence that ended it.
    pub stop: Option<u32>,
    pub tool_calls: bool,
}

impl Ending {
    /// `stop_reason` and `stop_sequence`.
    pub fn reason<'a>(&self, meta: &'a Meta) -> (&'static str, Option<&'a str>) {
        if self.tool_calls {
            return ("tool_use", None);
        }
        if let Some(s) = self.stop.and_then(|i| meta.stops.get(i as usize)) {
            return ("stop_sequence", Some(s.as_str()));
        }
        match self.finish {
            Some(Finish::Length) => ("max_tokens", None),
            _ => ("end_turn", None),
        }
    }
}

/// The `usage` object: the prompt's tokens less the cached ones, the answer's tokens,
/// `cache_creation_input_tokens: 0`, and `cache_read_input_tokens` when the worker reported
/// cached tokens.
pub(super) fn usage_json(u: &Usage) -> Value {
    let cached = u.cached_tokens.unwrap_or(0);
    let mut o = Map::new();
    o.insert("input_tokens".into(), json!(u.prompt_tokens.saturating_sub(cached)));
    o.insert("output_tokens".into(), json!(u.completion_tokens));
    o.insert("cache_creation_input_tokens".into(), json!(0));
    if let Some(c) = u.cached_tokens {
        o.insert("cache_read_input_tokens".into(), json!(c));
    }
    Value::Object(o)
}

/// A call's `input`: its arguments (compact JSON object text) as an object.
pub(super) fn call_input(c: &Call) -> Value {
    match serde_json::from_str::<Value>(&c.arguments) {
        Ok(v @ Value::Object(_)) => v,
        _ => Value::Object(Map::new()),
    }
}

/// What one event of the generation means to an Anthropic answer.
pub(super) enum Step {
    /// Text parsed into `out` (possibly nothing yet).
    Parsed,
    /// The choice ended: `out` holds what its parsers held back.
    Finished {
        finish: Finish,
        stop: Option<u32>,
    },
    /// The answer is complete (`out` may still hold the end of a Text worker's text).
    Done(Usage),
    Failed(Error),
}

/// The generation's events read for an Anthropic answer: one choice, its text through the
/// model's parsers. A Text model's chunks are read for their text, finish and usage.
pub(super) struct Reader {
    parse: Parse,
    /// Usage a Text worker reported in its chunks.
    chunk_usage: Option<Usage>,
    chunk_finish: Option<Finish>,
    finished: bool,
}

impl Reader {
    pub fn new(parsers: Spec) -> Reader {
        Reader { parse: Parse::of(&parsers), chunk_usage: None, chunk_finish: None, finished: false }
    }

    /// Take one event (`None`: the generation ended) into `out`.
    pub fn step(&mut self, event: Option<Event>, out: &mut Out) -> Step {
        match event {
            Some(Event::Delta(d)) if d.choice == 0 => {
                self.parse.push(d.text.as_str(), out);
                Step::Parsed
            }
            Some(Event::Delta(_)) | Some(Event::Annotation { .. }) => Step::Parsed,
            Some(Event::Finish { choice: 0, reason, stop, .. }) => self.finish(out, reason, stop),
            Some(Event::Finish { .. }) => Step::Parsed,
            Some(Event::Chunk(v)) => self.chunk(&v, out),
            Some(Event::Done(usage)) => {
                if !self.finished {
                    // A Text worker's stream ended without a finish reason.
                    self.parse.finish(out);
                    self.finished = true;
                }
                Step::Done(self.chunk_usage.unwrap_or(usage))
            }
            Some(Event::Error(e)) => Step::Failed(e),
            Some(Event::Tensor(_)) => Step::Failed(Error::internal("a tensor response on the Anthropic route")),
            None => Step::Failed(Error::internal("the generation ended without an answer")),
        }
    }

    fn finish(&mut self, out: &mut Out, finish: Finish, stop: Option<u32>) -> Step {
        if self.finished {
            return Step::Parsed;
        }
        self.finished = true;
        self.parse.finish(out);
        Step::Finished { finish, stop }
    }

    /// A Text worker's OpenAI chat chunk: its first choice's text (and reasoning), finish
    /// reason and usage.
    fn chunk(&mut self, v: &Value, out: &mut Out) -> Step {
        if let Some(u) = v.get("usage").filter(|u| u.is_object()) {
            let n = |k: &str| u.get(k).and_then(Value::as_u64).unwrap_or(0) as u32;
            let cached = u.pointer("/prompt_tokens_details/cached_tokens").and_then(Value::as_u64).map(|c| c as u32);
            self.chunk_usage = Some(Usage {
                prompt_tokens: n("prompt_tokens"),
                completion_tokens: n("completion_tokens"),
                cached_tokens: cached,
            });
        }
        let Some(c) = v.pointer("/choices/0") else { return Step::Parsed };
        if let Some(r) = c.pointer("/delta/reasoning_content").and_then(Value::as_str) {
            out.reasoning.push_str(r);
        }
        if let Some(t) = c.pointer("/delta/content").and_then(Value::as_str) {
            self.parse.push(t, out);
        }
        match c.get("finish_reason").and_then(Value::as_str) {
            Some("length") => self.chunk_finish = Some(Finish::Length),
            Some(_) => self.chunk_finish = Some(Finish::Stop),
            None => return Step::Parsed,
        }
        let finish = self.chunk_finish.unwrap_or(Finish::Stop);
        self.finish(out, finish, None)
    }
}

/// One content block of a whole answer.
enum Block {
    Thinking(String),
    Text(String),
    ToolUse(Call),
}

/// Add what `out` holds to `blocks`, in order: reasoning, text, calls (a piece's reasoning
/// comes before its content, and a call after the text before it).
fn take(blocks: &mut Vec<Block>, out: &mut Out) {
    if !out.reasoning.is_empty() {
        match blocks.last_mut() {
            Some(Block::Thinking(t)) => t.push_str(&out.reasoning),
            _ => blocks.push(Block::Thinking(std::mem::take(&mut out.reasoning))),
        }
    }
    if !out.content.is_empty() {
        match blocks.last_mut() {
            Some(Block::Text(t)) => t.push_str(&out.content),
            _ => blocks.push(Block::Text(std::mem::take(&mut out.content))),
        }
    }
    blocks.extend(out.calls.drain(..).map(Block::ToolUse));
    out.clear();
}

/// The whole answer, once the generation is done.
pub(super) async fn whole(meta: &Meta, mut gen: Generation, parsers: Spec) -> Result<Vec<u8>, Error> {
    let mut reader = Reader::new(parsers);
    let mut out = Out::default();
    let mut blocks = Vec::new();
    let mut ending = Ending::default();
    let usage = loop {
        let event = gen.next().await;
        match reader.step(event, &mut out) {
            Step::Parsed => {}
            Step::Finished { finish, stop } => {
                ending.finish = Some(finish);
                ending.stop = stop;
            }
            Step::Done(u) => {
                take(&mut blocks, &mut out);
                break u;
            }
            Step::Failed(e) => return Err(e),
        }
        if !out.is_empty() {
            take(&mut blocks, &mut out);
        }
    };
    drop(gen);
    ending.tool_calls = blocks.iter().any(|b| matches!(b, Block::ToolUse(_)));
    let content: Vec<Value> = blocks
        .iter()
        .map(|b| match b {
            Block::Thinking(t) => json!({"type": "thinking", "thinking": t, "signature": ""}),
            Block::Text(t) => json!({"type": "text", "text": t}),
            Block::ToolUse(c) => {
                json!({"type": "tool_use", "id": new_id("toolu_"), "name": c.name, "input": call_input(c)})
            }
        })
        .collect();
    let (reason, sequence) = ending.reason(meta);
    let body = json!({
        "id": meta.id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": meta.model,
        "stop_reason": reason,
        "stop_sequence": sequence,
        "usage": usage_json(&usage),
    });
    serde_json::to_vec(&body).map_err(|e| Error::new(Kind::Internal, e.to_string()))
}
