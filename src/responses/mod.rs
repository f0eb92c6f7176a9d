//! The OpenAI Responses adapter: `POST /v1/responses` and `POST /v1/responses/input_tokens`
//! answered as Dynamo 1.6.1 answers them (docs/dynamo/responses-api.md), but for its bugs:
//! a stream ends with its terminal event (no `data: [DONE]`), `input_tokens` counts the
//! prompt the model's chat template and tokenizer make (not a bytes/3 estimate), a call-only
//! assistant turn in the input renders, and reasoning comes back as a `reasoning` item.
//!
//! # What it owns
//!
//! | file | owns |
//! |---|---|
//! | `request.rs` | the request body: serde types, 1.6.1's errors and 501 refusals |
//! | `convert.rs` | the request as a chat request (messages, tools, options) |
//! | `object.rs` | the response object: echoed parameters, ids, status, usage, key orders |
//! | `output.rs` | output items from the parsed answer, and their stream events |
//!
//! The way of a request: parse ([`request`]) → the chat request's JSON ([`convert`]) →
//! [`crate::openai::parse_chat`] validates it as any chat body → [`crate::openai::serve::run_chat`]
//! runs it → each delta through the model's [`crate::parsers::Parse`] → [`output::Items`] →
//! one JSON body, or SSE events as they come.
//!
//! Runs on the shard thread of the request; HTTP is not known here (the service makes the
//! [`Answer`] or the error a response). A client that leaves drops the generation, which
//! cancels its worker.

pub mod convert;
pub mod object;
pub mod output;
pub mod request;

use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use serde_json::{json, Value};

use crate::error::{Error, Kind};
use crate::infer::{Caller, Event, Finish, Generation};
use crate::metrics::Endpoint;
use crate::openai::answer::{next_or_quiet, Next, Quiet};
pub use crate::openai::serve::Answer;
use crate::parsers::{Out, Parse, Spec};
use crate::shard::{local, ShardCtx};
use object::{Echo, State, Status};
use output::Items;

/// Answer one `/v1/responses` body; `session`: the session its headers name, with session
/// affinity on.
pub async fn serve(ctx: &Rc<ShardCtx>, body: &Bytes, caller: Caller) -> Result<Answer, Error> {
    let (echo, chat, chat_body) = match prepare(body) {
        Ok(x) => x,
        Err(e) => {
            rejected(ctx, body, &e);
            return Err(e);
        }
    };
    let run = crate::openai::serve::run_chat(ctx, chat, &chat_body, Endpoint::Responses, caller).await?;
    let id = object::new_id("resp_");
    let created = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let answer = Answering { echo, id, created, parsers: run.parsers };
    if run.stream {
        let (tx, rx) = local::channel::<Bytes>();
        monoio::spawn(stream(answer, run.gen, tx, ctx.shared.config.sse_keep_alive));
        return Ok(Answer::Stream(rx));
    }
    whole(answer, run.gen).await.map(Answer::Json)
}

/// The request's echo, and the chat request it stands for (parsed and validated) with its
/// JSON.
pub fn prepare(body: &Bytes) -> Result<(Echo, Box<crate::openai::NvCreateChatCompletionRequest>, Bytes), Error> {
    let r = request::parse(body)?;
    let tools = request::function_tools(r.tools.as_deref().unwrap_or(&[]))?;
    let echo = Echo::of(&r, &tools);
    let chat_json = convert::to_chat(&r, &tools)?;
    let chat_body = Bytes::from(serde_json::to_vec(&chat_json).map_err(|e| Error::internal(e.to_string()))?);
    let chat = crate::openai::parse_chat(&chat_body)?;
    Ok((echo, chat, chat_body))
}

/// Answer one `/v1/responses/input_tokens` body: the number of tokens of the prompt the
/// request would send (the model's chat template and tokenizer; no worker is called).
pub async fn input_tokens(ctx: &Rc<ShardCtx>, body: &Bytes) -> Result<Vec<u8>, Error> {
    let n = match counted(body)? {
        None => 0,
        Some((chat, chat_body)) => {
            let (req, _) = crate::openai::to_infer::chat(chat, &chat_body)?;
            crate::infer::count::prompt_tokens(ctx, &req).await?.ok_or_else(|| {
                Error::new(
                    Kind::BadRequest,
                    format!("Model '{}' is not tokenized by the frontend: its prompt cannot be counted", req.model),
                )
            })?
        }
    };
    Ok(serde_json::to_vec(&json!({"object": "response.input_tokens", "input_tokens": n})).unwrap_or_default())
}

/// The chat request an `input_tokens` body is counted as, with its JSON; `None` for an empty
/// conversation (0 tokens).
pub fn counted(body: &Bytes) -> Result<Option<(Box<crate::openai::NvCreateChatCompletionRequest>, Bytes)>, Error> {
    // `input` may be left out here (an empty conversation).
    let mut v: Value = serde_json::from_slice(body).map_err(|e| crate::openai::deserialize_error(&e))?;
    let Some(o) = v.as_object_mut() else {
        return Err(Error::new(Kind::BadRequest, format!("{}expected an object", crate::openai::DESERIALIZE_PREFIX)));
    };
    if !o.contains_key("input") || o.get("input").is_some_and(Value::is_null) {
        o.insert("input".into(), json!([]));
    }
    // Counting sends nothing: options that only matter to a generation are left out.
    for key in ["stream", "background", "previous_response_id", "max_tool_calls", "prompt", "max_output_tokens"] {
        o.remove(key);
    }
    let empty = o.get("input").is_some_and(|i| i.as_array().is_some_and(Vec::is_empty))
        && o.get("instructions").and_then(Value::as_str).is_none_or(str::is_empty);
    if empty {
        return Ok(None);
    }
    let body = Bytes::from(serde_json::to_vec(&v).map_err(|e| Error::internal(e.to_string()))?);
    let (_, chat, chat_body) = prepare(&body)?;
    Ok(Some((chat, chat_body)))
}

/// Count a body refused before it ran, labelled with its model when that is served.
fn rejected(ctx: &Rc<ShardCtx>, body: &[u8], e: &Error) {
    crate::openai::serve::rejected_body(ctx, Endpoint::Responses, body, e);
}

/// One response on its way.
struct Answering {
    echo: Echo,
    id: String,
    created: u64,
    parsers: Spec,
}

impl Answering {
    fn object(
        &self,
        status: Status,
        output: Vec<Value>,
        usage: Option<Value>,
        error: Option<Value>,
        streamed: bool,
    ) -> Value {
        let st = State { id: &self.id, created_at: self.created, status, output, usage, error };
        object::response(&self.echo, st, streamed)
    }
}

/// The parse of the answer (choice 0) and what it has made.
struct Reading {
    parse: Parse,
    piece: Out,
    items: Items,
    finish: Option<Finish>,
    /// Deltas that left the parse in reasoning (1.6.1's `reasoning_tokens`).
    reasoning_deltas: u32,
}

impl Reading {
    fn new(parsers: &Spec, events: bool) -> Reading {
        Reading {
            parse: Parse::of(parsers),
            piece: Out::default(),
            items: Items::new(events),
            finish: None,
            reasoning_deltas: 0,
        }
    }

    fn text(&mut self, text: &str) {
        self.piece.clear();
        self.parse.push(text, &mut self.piece);
        self.reasoning_deltas += u32::from(self.parse.in_reasoning());
        self.take_piece();
    }

    fn take_piece(&mut self) {
        let piece = std::mem::take(&mut self.piece);
        self.items.reasoning(&piece.reasoning);
        self.items.content(&piece.content);
        for call in &piece.calls {
            self.items.call(call);
        }
        self.piece = piece;
    }

    fn end(&mut self, reason: Finish) {
        self.piece.clear();
        self.parse.finish(&mut self.piece);
        self.take_piece();
        self.finish = Some(reason);
    }

    /// Take one event; `Err` ends the answer as failed, `Ok(Some)` with its usage.
    fn event(&mut self, event: Event) -> Result<Option<crate::infer::Usage>, Error> {
        match event {
            Event::Delta(d) if d.choice == 0 => self.text(&d.text),
            Event::Finish { choice: 0, reason, .. } => self.end(reason),
            Event::Delta(_) | Event::Finish { .. } | Event::Annotation { .. } => {}
            Event::Chunk(v) => self.chunk(&v),
            Event::Done(usage) => {
                if self.finish.is_none() {
                    self.end(Finish::Stop);
                }
                return Ok(Some(usage));
            }
            Event::Error(e) => return Err(e),
            Event::Tensor(_) => return Err(Error::internal("a tensor response on the Responses route")),
        }
        Ok(None)
    }

    /// A chat chunk of a `model_input = Text` worker: its text and finish.
    fn chunk(&mut self, v: &Value) {
        let choice = &v["choices"][0];
        let text = choice["delta"]["content"].as_str().or_else(|| choice["message"]["content"].as_str());
        if let Some(t) = text.filter(|t| !t.is_empty()) {
            self.text(t);
        }
        match choice["finish_reason"].as_str() {
            Some("length") => self.end(Finish::Length),
            Some(_) => self.end(Finish::Stop),
            None => {}
        }
    }

    fn status(&self) -> Status {
        match self.finish {
            Some(Finish::Length) => Status::Incomplete("max_output_tokens"),
            Some(Finish::ContentFilter) => Status::Incomplete("content_filter"),
            _ => Status::Completed,
        }
    }

    fn usage(&self, usage: &crate::infer::Usage) -> Value {
        object::usage(usage, self.reasoning_deltas)
    }
}

/// The whole answer, once the generation is done.
async fn whole(a: Answering, mut gen: Generation) -> Result<Vec<u8>, Error> {
    let mut r = Reading::new(&a.parsers, false);
    let usage = loop {
        let Some(event) = gen.next().await else {
            return Err(Error::internal("the generation ended without an answer"));
        };
        if let Some(usage) = r.event(event)? {
            break usage;
        }
    };
    drop(gen);
    let status = r.status();
    r.items.finish(status == Status::Completed);
    let body = a.object(status, r.items.output(), Some(r.usage(&usage)), None, false);
    serde_json::to_vec(&body).map_err(|e| Error::internal(e.to_string()))
}

/// The SSE keep-alive comment, as the OpenAI routes send it.
const KEEP_ALIVE: &[u8] = b":\n\n";

/// Write the answer's events to `tx` until it ends or the client leaves; with `keep_alive`, a
/// comment whenever the stream has been quiet that long.
async fn stream(a: Answering, mut gen: Generation, tx: local::Sender<Bytes>, keep_alive: Option<Duration>) {
    let mut quiet = Quiet::new(keep_alive);
    let mut r = Reading::new(&a.parsers, true);
    let start = a.object(Status::InProgress, Vec::new(), None, None, true);
    r.items.event("response.created", json!({"response": start}));
    r.items.event("response.in_progress", json!({"response": start}));
    drop(start);
    loop {
        if r.items.pending() && !gen.ready() {
            let out = std::mem::take(&mut r.items.out);
            if tx.send(out.into()).is_err() {
                return;
            }
        }
        let next = next_or_quiet(&mut gen, &tx, &mut quiet).await;
        let event = match next {
            Next::Gone => return, // dropping the generation counts the client gone and cancels it
            Next::Quiet => {
                if tx.send(Bytes::from_static(KEEP_ALIVE)).is_err() {
                    return;
                }
                continue;
            }
            Next::Event(None) => Err(Error::internal("the generation ended without an answer")),
            Next::Event(Some(event)) => r.event(event),
        };
        match event {
            Ok(None) => continue,
            Ok(Some(usage)) => {
                let status = r.status();
                r.items.finish(status == Status::Completed);
                let usage = r.usage(&usage);
                let done = a.object(status, r.items.output(), Some(usage), None, true);
                let name = match status {
                    Status::Completed => "response.completed",
                    _ => "response.incomplete",
                };
                r.items.event(name, json!({"response": done}));
            }
            Err(e) => {
                r.items.finish(false);
                let code = if e.kind() == Kind::BadRequest { "invalid_prompt" } else { "server_error" };
                let error = json!({"code": code, "message": e.message()});
                let failed = a.object(Status::Failed, r.items.output(), None, Some(error), true);
                r.items.event("response.failed", json!({"response": failed}));
            }
        }
        let _ = tx.send(std::mem::take(&mut r.items.out).into());
        return;
    }
}
