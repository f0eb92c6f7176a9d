//! A [`Generation`]'s events rendered as OpenAI answers: one JSON body, or SSE events written
//! as they come ([`super::response`] holds the byte shapes).
//!
//! * Tokens models: deltas become text (per choice index), a choice's finish its
//!   `finish_reason`, [`Event::Done`] the usage; a stream ends with the usage chunk (with
//!   `stream_options.include_usage`) and `data: [DONE]`.
//! * Text models: the worker's chunk objects, read into Dynamo's chunk types and written back
//!   in their key order, relayed as SSE events or folded into one answer
//!   ([`super::chunks`]).
//! * Annotations the request asked for come first, as named SSE events.
//!
//! An error before the stream started is the adapter's error return (a status); after, an SSE
//! error event and `[DONE]`. The client going away (the stream's receiver dropped) drops the
//! generation, which cancels its workers.

use std::future::{poll_fn, Future};
use std::io::Write as _;
use std::task::Poll;
use std::time::Duration;

use bytes::Bytes;
use smallvec::SmallVec;

use super::chunks::{ChatAggregate, ChatChunk, CompletionAggregate, CompletionChunk};
use super::logprobs as lp;
use super::parsed::{ChoiceParse, Parsed};
use super::response::{self as body, Meta};
use crate::error::Error;
use crate::infer::{Event, Finish, Generation, TokenLogprob, Usage};
use crate::shard::local;

/// Which API the request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
}

impl Api {
    /// The `endpoint` its requests are counted and logged under.
    pub fn endpoint(self) -> crate::metrics::Endpoint {
        match self {
            Api::Chat => crate::metrics::Endpoint::ChatCompletions,
            Api::Completions => crate::metrics::Endpoint::Completions,
        }
    }
}

/// What the answer looks like, besides its events.
#[derive(Clone, Debug)]
pub struct Shape {
    pub api: Api,
    /// The model served: the answer's `model` is its primary name, whichever alias the
    /// client used.
    pub served: std::sync::Arc<crate::infer::Serving>,
    /// What the answer carries besides its events (usage chunk, `nvext`).
    pub extras: super::to_infer::Extras,
    /// How the text is parsed (chat, with a reasoning parser, tools offered or forced).
    pub parsing: Option<super::parsed::Parsing>,
}

impl Shape {
    /// The `nvext` object of a choice's chunk (or of the whole answer, `choice` 0), when the
    /// request asked for one: `worker_id` (prefill and decode worker are the same one here),
    /// and `timing` on the last chunk.
    #[inline]
    fn nvext(&self, gen: &Generation, choice: u32, last: bool) -> Option<Vec<u8>> {
        let timing = self.extras.timing && last;
        if !self.extras.worker_id && !timing {
            return None;
        }
        let mut out = Vec::with_capacity(160);
        out.push(b'{');
        if self.extras.worker_id {
            let w = gen.worker(choice).unwrap_or(0);
            let _ = write!(out, "\"worker_id\":{{\"prefill_worker_id\":{w},\"decode_worker_id\":{w}}}");
        }
        if timing {
            if self.extras.worker_id {
                out.push(b',');
            }
            let t = gen.timing();
            let _ = write!(
                out,
                "\"timing\":{{\"request_received_ms\":{},\"prefill_wait_time_ms\":{},\"prefill_time_ms\":{},\"ttft_ms\":{},\"total_time_ms\":{}}}",
                t.request_received_ms, t.prefill_wait_time_ms, t.prefill_time_ms, t.ttft_ms, t.total_time_ms
            );
            if let Some(kv) = t.kv {
                // Inside the timing object: before its closing brace.
                out.pop();
                // As serde_json writes a float: `0.0`, not `0`.
                let rate = if kv.rate.fract() == 0.0 { format!("{:.1}", kv.rate) } else { kv.rate.to_string() };
                let _ = write!(out, ",\"kv_hit_rate\":{rate},\"router_queue_depth\":{}}}", kv.queue_depth);
            }
        }
        out.push(b'}');
        Some(out)
    }
}

/// Put `,"nvext":<nvext>` inside the JSON object that ends `out`.
fn append_nvext(out: &mut Vec<u8>, nvext: Option<Vec<u8>>) {
    if let Some(nvext) = nvext {
        append_member(out, b"nvext", |out| out.extend_from_slice(&nvext));
    }
}

/// Put `,"<name>":<value>` inside the JSON object that ends `out` (before its closing brace
/// and, for an SSE event, the blank line), `value` written in place.
fn append_member(out: &mut Vec<u8>, name: &[u8], value: impl FnOnce(&mut Vec<u8>)) {
    let tail = if out.ends_with(b"}\n\n") { 3 } else { 1 };
    let at = out.len() - tail;
    let mut rest = [0u8; 3];
    rest[..tail].copy_from_slice(&out[at..]);
    out.truncate(at);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(name);
    out.extend_from_slice(b"\":");
    value(out);
    out.extend_from_slice(&rest[..tail]);
}

/// The usage so far on a streamed chunk (`stream_options.continuous_usage_stats`): a member
/// of a chat chunk; completions chunks carry it in their `usage`.
#[inline]
fn running_usage(out: &mut Vec<u8>, shape: &Shape, gen: &Generation) {
    if shape.extras.continuous_usage && shape.api == Api::Chat {
        append_member(out, b"usage", |out| body::usage_json(out, &gen.usage_so_far(), false));
    }
}

/// The OpenAI `finish_reason`.
pub fn finish_reason(f: Finish) -> &'static str {
    match f {
        Finish::Stop => "stop",
        Finish::Length => "length",
        Finish::ContentFilter => "content_filter",
    }
}

/// The response id: `chatcmpl-<request id>` or `cmpl-<request id>`.
fn response_id(api: Api, gen: &Generation) -> String {
    let prefix = match api {
        Api::Chat => "chatcmpl-",
        Api::Completions => "cmpl-",
    };
    let mut id = String::with_capacity(prefix.len() + gen.request_id().len());
    id.push_str(prefix);
    id.push_str(gen.request_id());
    id
}

/// The logprobs of `tokens` in `api`'s shape; `None` when there are none.
#[inline]
pub(super) fn render_logprobs(api: Api, tokens: &[TokenLogprob]) -> Option<Vec<u8>> {
    if tokens.is_empty() {
        return None;
    }
    let mut out = Vec::with_capacity(128 * tokens.len());
    match api {
        Api::Chat => lp::chat(&mut out, tokens),
        Api::Completions => lp::completion(&mut out, tokens),
    }
    Some(out)
}

/// One choice of a whole answer, as it accumulates.
#[derive(Default)]
struct Whole {
    text: String,
    finish: Option<Finish>,
    logprobs: Vec<TokenLogprob>,
    /// With parsers: the choice's parse (it keeps the text instead of `text`).
    parse: Option<ChoiceParse>,
}

/// The whole answer, once the generation is done.
pub async fn whole(shape: &Shape, mut gen: Generation) -> Result<Vec<u8>, Error> {
    let mut choices: SmallVec<[Whole; 1]> = SmallVec::new();
    let parsing = shape.parsing.as_ref();
    let at = |choices: &mut SmallVec<[Whole; 1]>, i: u32| -> usize {
        let i = i as usize;
        if choices.len() <= i {
            choices.resize_with(i + 1, || Whole { parse: parsing.map(ChoiceParse::new), ..Whole::default() });
        }
        i
    };
    let (mut chat, mut cmpl) = (ChatAggregate::default(), CompletionAggregate::default());
    let mut relayed = false;
    let usage = loop {
        let event = gen.next().await;
        match event {
            Some(Event::Delta(d)) => {
                let i = at(&mut choices, d.choice);
                let w = &mut choices[i];
                match w.parse.as_mut() {
                    Some(parse) => parse.add(&d.text),
                    None => w.text.push_str(&d.text),
                }
                w.logprobs.extend(d.logprobs);
            }
            Some(Event::Finish { choice, reason, logprobs, .. }) => {
                let i = at(&mut choices, choice);
                let w = &mut choices[i];
                w.finish = Some(reason);
                w.logprobs.extend(logprobs);
            }
            Some(Event::Chunk(v)) => {
                relayed = true;
                let parsed = match shape.api {
                    Api::Chat => serde_json::from_value(v).map(|c| chat.add(c)),
                    Api::Completions => serde_json::from_value(v).map(|c| cmpl.add(c)),
                };
                parsed.map_err(|e| Error::internal(format!("worker chunk: {e}")))?;
            }
            Some(Event::Done(usage)) => break usage,
            Some(Event::Error(e)) => return Err(e),
            Some(Event::Annotation { .. }) => {}
            Some(Event::Tensor(_)) => return Err(Error::internal("a tensor response on an OpenAI route")),
            None => return Err(Error::internal("the generation ended without an answer")),
        }
    };
    if relayed {
        let out = match shape.api {
            Api::Chat => chat.finish().map(|a| serde_json::to_vec(&a)),
            Api::Completions => cmpl.finish().map(|a| serde_json::to_vec(&a)),
        };
        return match out {
            Some(Ok(bytes)) => Ok(bytes),
            Some(Err(e)) => Err(Error::internal(e.to_string())),
            None => Err(Error::internal("the worker's stream ended without a chunk")),
        };
    }
    let id = response_id(shape.api, &gen);
    let created = gen.created();
    let nvext = shape.nvext(&gen, 0, true);
    drop(gen);
    let meta = Meta::new(&id, created, &shape.served.name);
    let field = parsing.map_or("", |p| p.field);
    let reasoning_tokens = parsing
        .filter(|p| p.counts_reasoning())
        .map(|_| choices.iter().filter_map(|c| c.parse.as_ref()).map(|p| p.reasoning_deltas).sum());
    for c in choices.iter_mut() {
        if let Some(p) = c.parse.as_mut() {
            p.finish_whole();
        }
    }
    let counts = parsing.is_some_and(|p| p.counts_reasoning());
    let parts: SmallVec<[body::Choice<'_>; 1]> = choices
        .iter()
        .enumerate()
        .map(|(i, c)| {
            let logprobs = render_logprobs(shape.api, &c.logprobs);
            match c.parse.as_ref() {
                Some(p) => {
                    let (reasoning, text, calls) = p.whole();
                    body::Choice {
                        index: i as u32,
                        text,
                        finish_reason: c.finish.map(|f| p.finish_reason(f)),
                        logprobs,
                        reasoning: (counts || !reasoning.is_empty()).then_some((field, reasoning)),
                        parsed: Some(calls),
                    }
                }
                None => body::Choice {
                    index: i as u32,
                    text: &c.text,
                    finish_reason: c.finish.map(finish_reason),
                    logprobs,
                    reasoning: None,
                    parsed: None,
                },
            }
        })
        .collect();
    let text_len: usize = parts.iter().map(|c| c.text.len()).sum();
    let mut out = Vec::with_capacity(text_len + 256 * parts.len());
    match shape.api {
        Api::Chat => body::chat_completion_choices(&mut out, &meta, &parts, &usage, reasoning_tokens),
        Api::Completions => body::completion_choices(&mut out, &meta, &parts, &usage),
    }
    append_nvext(&mut out, nvext);
    Ok(out)
}

/// A stream's keep-alive clock: it rings when the stream has been quiet for the interval.
pub struct Quiet(Option<(Duration, std::pin::Pin<Box<monoio::time::Sleep>>)>);

impl Quiet {
    /// No clock without an interval (keep-alives off).
    pub fn new(interval: Option<Duration>) -> Quiet {
        Quiet(interval.map(|d| (d, Box::pin(monoio::time::sleep(d)))))
    }
}

/// What a stream's task does next ([`next_or_quiet`]).
pub enum Next {
    /// The client left (its receiver's end wakes the task even while the worker is quiet):
    /// drop the generation, which counts it gone and cancels its workers.
    Gone,
    /// Quiet for the keep-alive interval: send a keep-alive.
    Quiet,
    /// The next event, `None` at the generation's end.
    Event(Option<Event>),
}

/// Wait for the generation's next event, the client leaving, or the keep-alive clock, and
/// restart the clock.
pub async fn next_or_quiet(gen: &mut Generation, tx: &local::Sender<Bytes>, quiet: &mut Quiet) -> Next {
    let next = poll_fn(|cx| match tx.poll_unless_closed(cx, |cx| gen.poll_next(cx)) {
        Poll::Pending => match quiet.0.as_mut() {
            Some((_, sleep)) => sleep.as_mut().poll(cx).map(|()| Next::Quiet),
            None => Poll::Pending,
        },
        Poll::Ready(None) => Poll::Ready(Next::Gone),
        Poll::Ready(Some(e)) => Poll::Ready(Next::Event(e)),
    })
    .await;
    if let Some((after, sleep)) = quiet.0.as_mut() {
        sleep.as_mut().reset(monoio::time::Instant::now() + *after);
    }
    next
}

/// The SSE keep-alive: a comment with no text, as 1.6.1 sends it.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// Write the generation's events to `tx` as SSE events until it ends or the client leaves;
/// with `keep_alive`, a comment ([`KEEP_ALIVE`]) whenever the stream has been quiet that long.
pub async fn stream(shape: Shape, mut gen: Generation, tx: local::Sender<Bytes>, keep_alive: Option<Duration>) {
    // Boxed (and reset after each event) only when keep-alives are asked for.
    let mut quiet = Quiet::new(keep_alive);
    let id = response_id(shape.api, &gen);
    let meta = Meta::new(&id, gen.created(), &shape.served.name);
    // A batch of prompts: each prompt's chunks carry `<id>-<prompt>` (the usage chunk the
    // bare id), as 1.6.1 names them.
    let ids: Vec<String> = match gen.prompts() {
        1 => Vec::new(),
        n => (0..n).map(|p| format!("{id}-{p}")).collect(),
    };
    let metas: Vec<Meta<'_>> = ids.iter().map(|i| Meta::new(i, gen.created(), &shape.served.name)).collect();
    let samples = gen.samples().max(1);
    let meta_of = |choice: u32| metas.get((choice / samples) as usize).unwrap_or(&meta);
    // Per choice: whether its first chunk was sent (chat's first delta carries the role).
    let mut started: SmallVec<[bool; 1]> = SmallVec::new();
    // A chunk is its text plus ~170 bytes of JSON around the id and the model name: sized
    // once, so writing a chunk does not grow its buffer step by step.
    let chunk_capacity = 192 + id.len() + shape.served.name.len();
    let mut out = Vec::with_capacity(chunk_capacity);
    let mut parsed = Parsed::default();
    loop {
        let next = next_or_quiet(&mut gen, &tx, &mut quiet).await;
        let event = match next {
            Next::Gone => return, // dropping the generation counts the client gone and sends `kill`
            Next::Quiet => {
                if tx.send(Bytes::from_static(KEEP_ALIVE)).is_err() {
                    return;
                }
                continue;
            }
            Next::Event(event) => event,
        };
        let end = match event {
            Some(Event::Delta(d)) if shape.parsing.is_some() => {
                let choice = d.choice;
                first_chunk(&mut started, choice);
                let at = out.len();
                if let Some(p) = shape.parsing.as_ref() {
                    let c = parsed.choice(p, choice);
                    c.open(&mut out, meta_of(choice), choice);
                    c.logprobs(d.logprobs);
                    c.delta(&mut out, meta_of(choice), p, choice, &d.text);
                }
                piece_extras(&mut out, at, &shape, &gen, choice);
                false
            }
            Some(Event::Delta(d)) => {
                let first = first_chunk(&mut started, d.choice);
                let lp = render_logprobs(shape.api, &d.logprobs);
                let m = meta_of(d.choice);
                let so_far = shape.extras.continuous_usage.then(|| gen.usage_so_far());
                match shape.api {
                    Api::Chat => {
                        body::chat_chunk_at(&mut out, m, d.choice, Some(d.text.as_str()), first, None, lp.as_deref())
                    }
                    Api::Completions => body::completion_chunk_at(
                        &mut out,
                        m,
                        d.choice,
                        Some(d.text.as_str()),
                        None,
                        so_far.as_ref(),
                        lp.as_deref(),
                    ),
                }
                running_usage(&mut out, &shape, &gen);
                append_nvext(&mut out, shape.nvext(&gen, d.choice, false));
                false
            }
            Some(Event::Finish { choice, reason, logprobs, .. }) => {
                let mut reason_name = finish_reason(reason);
                if let Some(p) = shape.parsing.as_ref() {
                    let at = out.len();
                    let c = parsed.choice(p, choice);
                    c.flush(&mut out, meta_of(choice), p, choice);
                    reason_name = c.finish_reason(reason);
                    piece_extras(&mut out, at, &shape, &gen, choice);
                }
                let first = first_chunk(&mut started, choice);
                let lp = render_logprobs(shape.api, &logprobs);
                let reason = Some(reason_name);
                let m = meta_of(choice);
                let so_far = shape.extras.continuous_usage.then(|| gen.usage_so_far());
                match shape.api {
                    Api::Chat => body::chat_chunk_at(&mut out, m, choice, None, first, reason, lp.as_deref()),
                    Api::Completions => {
                        body::completion_chunk_at(&mut out, m, choice, Some(""), reason, so_far.as_ref(), lp.as_deref())
                    }
                }
                running_usage(&mut out, &shape, &gen);
                append_nvext(&mut out, shape.nvext(&gen, choice, true));
                false
            }
            Some(Event::Done(usage)) => {
                let reasoning_tokens = shape.parsing.as_ref().and_then(|p| parsed.reasoning_tokens(p));
                done(&mut out, &shape, &meta, &usage, reasoning_tokens);
                true
            }
            Some(Event::Chunk(v)) => {
                if let Err(e) = relay(&mut out, shape.api, v) {
                    error(&mut out, &e);
                    true
                } else {
                    false
                }
            }
            Some(Event::Annotation { kind, text }) => {
                annotation(&mut out, kind.name(), &text);
                false
            }
            Some(Event::Error(e)) => {
                error(&mut out, &e);
                true
            }
            Some(Event::Tensor(_)) | None => {
                error(&mut out, &Error::internal("the generation ended without an answer"));
                true
            }
        };
        if end {
            let _ = tx.send(out.into());
            return;
        }
        // Send what is rendered once nothing more is ready (a choice's finish and the usage
        // that follows go out together).
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

/// The running usage and `nvext` of a parsed chunk, when one was written into `out` after `at`
/// (a held-back delta writes none).
fn piece_extras(out: &mut Vec<u8>, at: usize, shape: &Shape, gen: &Generation, choice: u32) {
    if out.len() > at {
        running_usage(out, shape, gen);
        append_nvext(out, shape.nvext(gen, choice, false));
    }
}

/// Whether this is `choice`'s first chunk (and remember that it was sent).
#[inline]
fn first_chunk(started: &mut SmallVec<[bool; 1]>, choice: u32) -> bool {
    let i = choice as usize;
    if started.len() <= i {
        started.resize(i + 1, false);
    }
    !std::mem::replace(&mut started[i], true)
}

/// The end of a Tokens stream: the usage chunk when asked for, then `[DONE]`.
fn done(out: &mut Vec<u8>, shape: &Shape, meta: &Meta<'_>, usage: &Usage, reasoning_tokens: Option<u32>) {
    if shape.extras.include_usage {
        match shape.api {
            Api::Chat => body::chat_usage_chunk_with(out, meta, usage, reasoning_tokens),
            Api::Completions => body::completion_chunk(out, meta, None, None, Some(usage), None),
        }
    }
    out.extend_from_slice(body::DONE);
}

/// An error event, then `[DONE]`.
fn error(out: &mut Vec<u8>, e: &Error) {
    body::stream_error(out, e.message(), e.kind().openai_stream_type(), e.status());
    out.extend_from_slice(body::DONE);
}

/// A Text worker's chunk, in Dynamo's chunk type of `api`.
fn relay(out: &mut Vec<u8>, api: Api, v: serde_json::Value) -> Result<(), Error> {
    let mark = out.len();
    out.extend_from_slice(b"data: ");
    let written = match api {
        Api::Chat => serde_json::from_value::<ChatChunk>(v).and_then(|c| serde_json::to_writer(&mut *out, &c)),
        Api::Completions => {
            serde_json::from_value::<CompletionChunk>(v).and_then(|c| serde_json::to_writer(&mut *out, &c))
        }
    };
    if let Err(e) = written {
        out.truncate(mark);
        return Err(Error::internal(format!("worker chunk: {e}")));
    }
    out.extend_from_slice(b"\n\n");
    Ok(())
}

/// An annotation the request asked for, as 1.6.1 sends it: a named SSE event whose value is
/// a comment line holding a JSON string (`event: token_ids` / `: "[1,2]"`).
fn annotation(out: &mut Vec<u8>, name: &str, text: &str) {
    out.extend_from_slice(b"event: ");
    out.extend_from_slice(name.as_bytes());
    out.extend_from_slice(b"\n: ");
    body::json_string(out, text);
    out.extend_from_slice(b"\n\n");
}
