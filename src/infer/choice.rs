//! Stage postprocess: one choice's worker stream turned into [`Event`]s.
//!
//! A choice is one worker request (one prompt, one sample) that a worker has started
//! answering. By the model's input kind:
//!
//! * Tokens: each `LLMEngineOutput` frame's token ids go through this shard's incremental
//!   detokenizer and the stop conditions ([`PostProcessor`]); text becomes [`Event::Delta`]
//!   (with the logprobs of its tokens, when asked), and the end — ours (a stop string or
//!   token, EOS, `max_tokens`) or the worker's — becomes [`Event::Finish`] with the choice's
//!   usage. The prompt's token count is the worker's `completion_usage.prompt_tokens` when it
//!   reports one (docs/dynamo/request-plane.md §8.5);
//! * Text: the worker's OpenAI chunk objects, as [`Event::Chunk`];
//! * Tensor: the worker's responses, as [`Event::Tensor`].
//!
//! A worker's error item ends the choice with [`Event::Error`] ([`worker_error`]), unless the
//! failure is one a Tokens choice migrates away from ([`super::migrate`]). Dropping a choice
//! drops its worker stream, which sends the worker `kill` unless the stream is over.

use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use super::dispatch::{self, Started};
use super::logprobs::Logprobs;
use super::migrate::Migration;
use super::{Delta, Event, Finish, Text, Usage};
use crate::error::{Error, Kind};
use crate::plane::payload::{DynamoError, FinishReason as WireFinish};
use crate::plane::stream::StreamEvent;
use crate::tokenize::stop::{FinishReason, PostProcessor, StopConditions, WorkerFinish};
use crate::tokenize::Tokenizer;
use crate::transport::callback::StreamItem;

/// This shard's tokenizer of a model.
pub(super) struct ShardTokenizer {
    pub tokenizers: Arc<Vec<Tokenizer>>,
    pub shard: usize,
}

impl Deref for ShardTokenizer {
    type Target = Tokenizer;
    fn deref(&self) -> &Tokenizer {
        &self.tokenizers[self.shard]
    }
}

/// What one worker frame carried, for the request's metrics.
#[derive(Clone, Copy, Debug)]
pub(super) struct Frame {
    /// Token ids in the frame.
    pub tokens: usize,
    pub arrived: Instant,
    /// The prompt's token count as known when the frame arrived.
    pub prompt_tokens: u32,
    /// Time spent decoding the frame.
    pub decode: Duration,
}

/// How a choice reads its worker's items.
pub(super) enum Mode {
    Tokens(Box<TokenState>),
    Chunks,
    Tensors,
}

/// The postprocessing state of a Tokens choice.
pub(super) struct TokenState {
    post: PostProcessor<ShardTokenizer>,
    /// Output logprobs and the tokenizer naming their tokens, when the client asked.
    logprobs: Option<(Logprobs, ShardTokenizer)>,
    prompt_tokens: u32,
    cached_tokens: Option<u32>,
    /// The prompt count is settled: after a migration the next worker's count includes the
    /// tokens generated before it, which are not prompt.
    prompt_settled: bool,
}

impl TokenState {
    pub(super) fn new(
        tok: impl Fn() -> ShardTokenizer,
        skip_special_tokens: bool,
        stop: StopConditions,
        prompt_tokens: u32,
        logprobs: bool,
    ) -> TokenState {
        TokenState {
            post: PostProcessor::new(tok(), skip_special_tokens, stop),
            logprobs: logprobs.then(|| (Logprobs::default(), tok())),
            prompt_tokens,
            cached_tokens: None,
            prompt_settled: false,
        }
    }

    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.post.completion_tokens(),
            // Absent unless the worker reported it (captures `p_lp`, `p_lp2`: no details).
            cached_tokens: self.cached_tokens,
        }
    }

    fn take_logprobs(&mut self) -> Vec<super::TokenLogprob> {
        self.logprobs.as_mut().map(|(lp, _)| lp.take()).unwrap_or_default()
    }

    /// The events of text `text` and, when `finish` is set, of the choice's end.
    fn emit(&mut self, choice: u32, text: Text, finish: Option<Finish>) -> Step {
        let delta = (!text.is_empty()).then(|| Event::Delta(Delta { choice, text, logprobs: self.take_logprobs() }));
        let Some(reason) = finish else {
            return delta.map_or(Step::Nothing, Step::One);
        };
        let stop = match self.post.finish_reason() {
            Some(FinishReason::StopString(i)) => u32::try_from(i).ok(),
            _ => None,
        };
        let end = Event::Finish { choice, reason, logprobs: self.take_logprobs(), usage: self.usage(), stop };
        match delta {
            Some(d) => Step::Two(d, end),
            None => Step::One(end),
        }
    }

    fn on_event(&mut self, choice: u32, event: dispatch::Event, frame: &mut Option<Frame>) -> Result<Step, Error> {
        match event {
            None | Some(Ok(StreamEvent::CompleteFinal)) | Some(Ok(StreamEvent::Sentinel)) => {
                let step = self.post.on_worker_finish(WorkerFinish::Stop).map_err(Error::internal)?;
                let reason = step.finished.map_or(Finish::Stop, finish);
                let text = Text::from(step.text);
                Ok(self.emit(choice, text, Some(reason)))
            }
            Some(Ok(StreamEvent::Item(StreamItem::Tokens(annotated)))) => {
                if let Some(err) = annotated.error {
                    return Err(worker_error(&err));
                }
                let Some(out) = annotated.data else { return Ok(Step::Nothing) };
                if let Some(u) = out.completion_usage.as_ref().filter(|_| !self.prompt_settled) {
                    self.prompt_tokens = u.prompt_tokens;
                    if let Some(c) = u.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens) {
                        self.cached_tokens = Some(c);
                    }
                }
                let arrived = Instant::now();
                if let Some((lp, tok)) = &mut self.logprobs {
                    lp.add(&out, tok);
                }
                let step = self.post.on_tokens(&out.token_ids).map_err(Error::internal)?;
                let mut text = Text::from(step.text);
                let mut reason = step.finished.map(finish);
                if reason.is_none() {
                    if let Some(r) = &out.finish_reason {
                        let step = self.post.on_worker_finish(worker_finish(r)?).map_err(Error::internal)?;
                        text.push_str(step.text);
                        reason = Some(step.finished.map_or(Finish::Stop, finish));
                    }
                }
                *frame = Some(Frame {
                    tokens: out.token_ids.len(),
                    arrived,
                    prompt_tokens: self.prompt_tokens,
                    decode: arrived.elapsed(),
                });
                Ok(self.emit(choice, text, reason))
            }
            Some(Ok(StreamEvent::Item(StreamItem::Json(_) | StreamItem::Tensor(_) | StreamItem::Raw(_)))) => {
                Err(Error::internal("a Tokens worker sent another kind of item"))
            }
            Some(Ok(_)) => Ok(Step::Nothing),
            Some(Err(e)) => Err(e.into()),
        }
    }
}

/// The driver's word for why a sequence ended (Dynamo's mapping, docs/dynamo/request-plane.md
/// §8.4: a cancelled stream counts as a stop).
fn finish(f: FinishReason) -> Finish {
    match f {
        FinishReason::Eos(_) | FinishReason::StopToken(_) | FinishReason::StopString(_) => Finish::Stop,
        FinishReason::Length => Finish::Length,
        FinishReason::Worker(w) => match w {
            WorkerFinish::Length => Finish::Length,
            WorkerFinish::ContentFilter => Finish::ContentFilter,
            WorkerFinish::Eos | WorkerFinish::Stop | WorkerFinish::Cancelled | WorkerFinish::Error => Finish::Stop,
        },
    }
}

fn worker_finish(r: &WireFinish) -> Result<WorkerFinish, Error> {
    Ok(match r {
        WireFinish::Eos => WorkerFinish::Eos,
        WireFinish::Stop => WorkerFinish::Stop,
        WireFinish::Length => WorkerFinish::Length,
        WireFinish::Cancelled => WorkerFinish::Cancelled,
        WireFinish::ContentFilter => WorkerFinish::ContentFilter,
        WireFinish::Error(e) => return Err(Error::internal(e.clone())),
    })
}

/// A worker's error item, kept as the cause of the [`Error`] it became: its class and its
/// own (diagnostic) message. Clients of the OpenAI routes never see the message unless the
/// worker marked it public; KServe shows `<class>: <message>` ([`worker_fault`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WorkerFault {
    /// The canonical class (`InvalidRequest`, `Unavailable`, …).
    pub class: String,
    pub message: String,
}

impl std::fmt::Display for WorkerFault {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.class, self.message)
    }
}

impl std::error::Error for WorkerFault {}

/// The worker's fault behind `e`, if it is one.
pub fn worker_fault(e: &Error) -> Option<&WorkerFault> {
    std::error::Error::source(e).and_then(|c| c.downcast_ref::<WorkerFault>())
}

/// The canonical class of a worker error: its `class`, else its legacy `error_type` (a name
/// or `{"Backend": name}`), with the legacy names folded as Dynamo 1.6.1 folds them.
fn error_class(e: &DynamoError) -> &str {
    let raw = e.class.as_deref().or_else(|| match &e.error_type {
        serde_json::Value::String(s) => Some(s.as_str()),
        serde_json::Value::Object(o) => o.get("Backend").and_then(serde_json::Value::as_str),
        _ => None,
    });
    match raw.unwrap_or("Internal") {
        "InvalidArgument" => "InvalidRequest",
        "CannotConnect" | "Disconnected" | "WorkerUnavailable" | "EngineShutdown" | "StreamIncomplete" => "Unavailable",
        "ConnectionTimeout" | "ResponseTimeout" => "DeadlineExceeded",
        "ResourceExhausted" | "WorkerOverloaded" => "CapacityExhausted",
        "Unknown" => "Internal",
        other => other,
    }
}

/// The error a worker's error item stands for, answered as Dynamo 1.6.1 answers it: the
/// status and generic text of its class, the worker's own message only where the worker
/// marked it public (`public: {"type": "message", …}`).
pub fn worker_error(e: &DynamoError) -> Error {
    let class = error_class(e);
    let (kind, text) = match class {
        "InvalidRequest" => (Kind::BadRequest, "Invalid request"),
        "Unauthenticated" => (Kind::Unauthorized, "Authentication required"),
        "PermissionDenied" => (Kind::Forbidden, "Permission denied"),
        "NotFound" => (Kind::NotFound, "Resource not found"),
        "Conflict" => (Kind::Conflict, "Request conflict"),
        "PayloadTooLarge" => (Kind::PayloadTooLarge, "Request payload too large"),
        "UnsupportedMedia" => (Kind::UnsupportedMediaType, "Unsupported media type"),
        "RateLimited" => (Kind::TooManyRequests, "Rate limit exceeded"),
        "CapacityExhausted" => (Kind::Overloaded, "Service temporarily overloaded"),
        "Unavailable" => (Kind::ServiceUnavailable, "Service temporarily unavailable"),
        "BackendProtocol" => (Kind::BadGateway, "Bad gateway"),
        "DeadlineExceeded" => (Kind::GatewayTimeout, "Request deadline exceeded"),
        "NotImplemented" => (Kind::NotImplemented, "Operation not implemented"),
        "Cancelled" => (Kind::ClientClosed, "Request cancelled"),
        _ => (Kind::Internal, "Internal server error"),
    };
    let public = e
        .public
        .as_ref()
        .filter(|p| p.get("type").and_then(serde_json::Value::as_str) == Some("message"))
        .and_then(|p| p.get("message"))
        .and_then(serde_json::Value::as_str);
    let message = public.map_or_else(|| text.to_string(), str::to_string);
    let fault = WorkerFault { class: class.to_string(), message: e.message.clone() };
    Error::new(kind, message).with_side(crate::error::Side::Worker).with_cause(fault)
}

/// What one worker event produced.
enum Step {
    Nothing,
    One(Event),
    /// A frame's text and the choice's end.
    Two(Event, Event),
    /// The worker's stream is over (Text and Tensor choices).
    End,
}

/// One worker request being answered.
pub(super) struct Choice {
    pub index: u32,
    started: Started,
    mode: Mode,
    /// An event produced together with the previous one (a frame's text and its finish), or
    /// the echoed prompt before anything else.
    queued: Option<Event>,
    done: bool,
    frame: Option<Frame>,
    /// How to continue on another worker, while that is possible (Tokens choices with
    /// `--migration-limit`).
    migration: Option<Box<Migration>>,
    /// `DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS`: the longest wait for the worker's next item.
    timeout: Option<Box<Inactivity>>,
}

/// The wait for a worker's next item, bounded.
pub(super) struct Inactivity {
    after: Duration,
    sleep: std::pin::Pin<Box<monoio::time::Sleep>>,
    ctx: std::rc::Rc<crate::shard::ShardCtx>,
}

impl Inactivity {
    /// The bound of `ctx`'s configuration, if one is set.
    pub(super) fn of(ctx: &std::rc::Rc<crate::shard::ShardCtx>) -> Option<Box<Inactivity>> {
        let after = ctx.shared.config.backend_stream_timeout?;
        Some(Box::new(Inactivity { after, sleep: Box::pin(monoio::time::sleep(after)), ctx: ctx.clone() }))
    }

    fn restart(&mut self) {
        self.sleep.as_mut().reset(monoio::time::Instant::now() + self.after);
    }
}

/// What a worker that sent nothing for `DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS` gets its client.
pub(super) fn response_timeout() -> Error {
    Error::new(Kind::GatewayTimeout, "Request deadline exceeded")
}

impl Choice {
    pub(super) fn new(
        index: u32,
        started: Started,
        mode: Mode,
        echo: Option<String>,
        migration: Option<Box<Migration>>,
    ) -> Choice {
        let queued = echo
            .filter(|t| !t.is_empty())
            .map(|text| Event::Delta(Delta { choice: index, text: Text::from(text.as_str()), logprobs: Vec::new() }));
        Choice { index, started, mode, queued, done: false, frame: None, migration, timeout: None }
    }

    /// Bound the wait for each of the worker's items (`DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS`).
    pub(super) fn with_timeout(mut self, timeout: Option<Box<Inactivity>>) -> Choice {
        self.timeout = timeout;
        self
    }

    /// Whether an event waits to be handed out without reading the worker.
    pub(super) fn has_queued(&self) -> bool {
        self.queued.is_some()
    }

    /// The worker request id, taken (the generation keeps it; the choice does not need it).
    pub(super) fn take_request_id(&mut self) -> String {
        std::mem::take(&mut self.started.request_id)
    }

    /// The prompt tokens sent (a Tokens choice; 0 otherwise).
    pub(super) fn prompt_sent(&self) -> u32 {
        match &self.mode {
            Mode::Tokens(t) => t.prompt_tokens,
            _ => 0,
        }
    }

    /// The instance id of the worker answering.
    pub(super) fn worker(&self) -> u64 {
        self.started.worker
    }

    /// The kv router's view of the request when it chose the worker (kv mode only).
    pub(super) fn kv_hit(&self) -> Option<crate::router::kv::active::KvHit> {
        self.started.kv_hit()
    }

    /// The next event; `None` once the choice is over. After [`Event::Finish`] or
    /// [`Event::Error`] nothing more comes.
    pub(super) async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`Self::next`] as a poll: the worker's queued frames are read without waiting, and
    /// `Pending` wakes the task when the next one arrives.
    pub(super) fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if let Some(e) = self.queued.take() {
            return Poll::Ready(Some(e));
        }
        if self.done {
            return Poll::Ready(None);
        }
        loop {
            if let Some(m) = self.migration.as_mut().filter(|m| m.resending()) {
                match std::task::ready!(m.poll_resend(cx)) {
                    Ok(started) => {
                        // The classifier's turn goes on with the answer, on its new worker.
                        let grant = self.started.take_grant();
                        self.started = started;
                        self.started.continue_grant(grant);
                        if let Mode::Tokens(t) = &mut self.mode {
                            t.prompt_settled = true;
                        }
                        continue;
                    }
                    Err(e) => {
                        crate::log::warn(&format!("no worker to continue the answer on: {e}"));
                        self.done = true;
                        let e = Error::new(Kind::ServiceUnavailable, "Service temporarily unavailable");
                        return Poll::Ready(Some(Event::Error(e)));
                    }
                }
            }
            let event = match self.started.poll_next(cx) {
                Poll::Ready(event) => {
                    if let Some(t) = self.timeout.as_mut() {
                        t.restart();
                    }
                    event
                }
                Poll::Pending => {
                    let Some(t) = self.timeout.as_mut() else { return Poll::Pending };
                    std::task::ready!(t.sleep.as_mut().poll(cx));
                    // The worker sent nothing for too long: it is set aside for a while, and
                    // the answer continues elsewhere when it may, else ends with 504.
                    let worker = self.started.worker;
                    crate::log::warn(&format!("worker {worker:x} sent nothing for {:?}", t.after));
                    t.ctx.router.inhibit(worker);
                    t.restart();
                    if let Some(m) = self.migration.as_mut() {
                        if m.migrate("response_timeout", worker) {
                            self.started.release();
                            continue;
                        }
                    }
                    self.done = true;
                    return Poll::Ready(Some(Event::Error(response_timeout())));
                }
            };
            if let Some(m) = self.migration.as_mut() {
                if let Some(Ok(StreamEvent::Item(StreamItem::Tokens(a)))) = &event {
                    if let Some(out) = a.data.as_ref().filter(|_| a.error.is_none()) {
                        m.received(&out.token_ids);
                    }
                }
                if m.on_failure(&event, self.started.worker) {
                    self.started.release();
                    continue;
                }
            }
            if matches!(event, Some(Err(_))) {
                // The stream broke (cut, garbled): the next requests avoid the worker for a
                // while (docs/dynamo/request-plane.md §9.1).
                self.started.inhibit();
            }
            if let Some(out) = self.step(event) {
                return Poll::Ready(out);
            }
        }
    }

    /// One event of the worker's stream; `None`: it produced nothing to hand out.
    fn step(&mut self, event: super::dispatch::Event) -> Option<Option<Event>> {
        if let Some(Ok(StreamEvent::Item(StreamItem::Tokens(a)))) = &event {
            if let Some(out) = &a.data {
                self.started.generated(out.token_ids.len());
            }
        }
        let step = match &mut self.mode {
            Mode::Tokens(t) => t.on_event(self.index, event, &mut self.frame),
            Mode::Chunks => chunk(event),
            Mode::Tensors => tensor(event),
        };
        let failed = matches!(step, Err(_) | Ok(Step::One(Event::Error(_))));
        let out = match step {
            Ok(Step::Nothing) => None,
            Ok(Step::One(e)) => {
                self.done = matches!(e, Event::Finish { .. });
                Some(Some(e))
            }
            Ok(Step::Two(a, b)) => {
                self.queued = Some(b);
                self.done = true;
                Some(Some(a))
            }
            Ok(Step::End) => {
                self.done = true;
                Some(None)
            }
            Err(e) => {
                self.done = true;
                Some(Some(Event::Error(e)))
            }
        };
        if self.done {
            // The worker's load leaves the kv router's books (and the other replicas', through
            // replica sync) now, before the adapter hands the end to the client: a client that
            // sends its next request at once must find the worker free on every replica.
            self.started.ended(!failed);
        }
        out
    }

    /// The metrics of the frame the last [`Choice::next`] read, once.
    pub(super) fn take_frame(&mut self) -> Option<Frame> {
        self.frame.take()
    }
}

/// A Text choice's event: the worker's chunk objects.
fn chunk(event: dispatch::Event) -> Result<Step, Error> {
    match event {
        None | Some(Ok(StreamEvent::CompleteFinal | StreamEvent::Sentinel)) => Ok(Step::End),
        Some(Ok(StreamEvent::Item(StreamItem::Json(a)))) => {
            if let Some(err) = a.error {
                return Err(worker_error(&err));
            }
            Ok(a.data.map_or(Step::Nothing, |v| Step::One(Event::Chunk(v))))
        }
        Some(Ok(StreamEvent::Item(StreamItem::Tokens(_) | StreamItem::Tensor(_) | StreamItem::Raw(_)))) => {
            Err(Error::internal("a Text worker sent another kind of item"))
        }
        Some(Ok(_)) => Ok(Step::Nothing),
        Some(Err(e)) => Err(e.into()),
    }
}

/// A Tensor choice's event: the worker's responses.
fn tensor(event: dispatch::Event) -> Result<Step, Error> {
    match event {
        None | Some(Ok(StreamEvent::CompleteFinal | StreamEvent::Sentinel)) => Ok(Step::End),
        Some(Ok(StreamEvent::Item(StreamItem::Tensor(item)))) => {
            if let Some(e) = &item.error {
                return Err(worker_error(e));
            }
            if item.event.as_deref() == Some("error") {
                return Err(Error::new(Kind::Internal, "the worker failed"));
            }
            Ok(item.data.map_or(Step::Nothing, |d| Step::One(Event::Tensor(Box::new(d)))))
        }
        Some(Ok(StreamEvent::Item(_))) => Err(Error::internal("a tensor worker sent another kind of item")),
        Some(Ok(_)) => Ok(Step::Nothing),
        Some(Err(e)) => Err(e.into()),
    }
}
