//! [`Generation`]: a started request's events, and the driver that starts it (`start`).
//!
//! A request becomes one worker request per choice: every prompt (one, or a batch) times the
//! `n` samples asked for. Each is dispatched with its own request id (the sample's seed is
//! the request's `seed + sample`, so `n` samples with a seed differ from each other and stay
//! reproducible); `start` returns once every choice's worker has answered, so a failure
//! before the first token is still an error the adapter can answer with a status.
//!
//! One choice is read in place. Several are read by one task each, which hands its events
//! to the generation through a shard-local channel; the generation yields them in arrival
//! order (each choice's own events in order) and, once every choice finished, the answer's
//! [`Event::Done`]. Dropping the generation drops the channel, and each task drops its worker
//! stream at its next event, which cancels the worker request.
//!
//! The generation owns the request's [`Tracker`]: TTFT, ITL and token counts per worker frame,
//! then the outcome (done, error or cancelled) exactly once.

use std::collections::VecDeque;
use std::rc::Rc;
use std::sync::Arc;
use std::task::{Context, Poll};
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use smallvec::SmallVec;

use super::choice::{Choice, Frame, Inactivity, Mode, ShardTokenizer, TokenState};
use super::disagg::dispatch_tokens;
use super::dispatch::{dispatch, Asked};
use super::migrate::Migration;
use super::preprocess;
use super::request::{AnnotationKind, InferRequest, Input};
use super::resolve::{ModelKind, Resolved};
use super::tracker::Tracker;
use super::{Event, Timing, Usage};
use crate::error::{Error, Kind};
use crate::metrics::Outcome;
use crate::registry::Serving;
use crate::shard::{local, ShardCtx};
use crate::transport::callback::new_uuid;

/// The events of a started request.
pub struct Generation {
    /// The first choice's worker request id (OpenAI adapters make the response id of it).
    request_id: String,
    /// The model served (its primary name is what answers call it, whichever alias the
    /// request used).
    serving: Arc<Serving>,
    /// Events to hand out before reading the workers again (annotations, `Done`).
    queue: VecDeque<Event>,
    source: Source,
    track: Tracker,
    usage: Usage,
    /// Prompts whose tokens `usage` counts already (by prompt index).
    prompts_counted: SmallVec<[bool; 1]>,
    /// Samples per prompt.
    n: u32,
    /// Choices not finished.
    open: usize,
    /// Token ids received so far (all choices) and the prompt's count as last reported.
    generated: u32,
    prompt_tokens: u32,
    /// The first choice's prompt tokens as sent.
    prompt_sent: u32,
    /// The worker answering each choice, by choice index.
    workers: SmallVec<[u64; 1]>,
    /// The kv router's view of the first choice's request.
    kv_hit: Option<crate::router::kv::active::KvHit>,
    /// When the request was taken (and as Unix milliseconds), its worker requests sent, its
    /// first token received, its end.
    received: Instant,
    received_ms: u64,
    sent: Instant,
    first_token: Option<Instant>,
    ended_at: Option<Instant>,
    /// Token counts are ours (a Tokens model); Text and Tensor workers report their own.
    counts_tokens: bool,
    /// [`Event::Done`] was handed out and its success is not recorded yet: the adapter may
    /// still find the answer unusable ([`Generation::fail`]); otherwise the success is
    /// recorded when it reads past `Done` or drops the generation.
    done_pending: bool,
    ended: bool,
}

impl Drop for Generation {
    fn drop(&mut self) {
        self.record_done();
    }
}

enum Source {
    /// A single choice, kept in the vector it came in (no allocation of its own).
    One(Vec<Choice>),
    Many(local::Receiver<(Event, Option<Frame>)>),
}

impl Generation {
    /// The worker request id of the first choice.
    pub fn request_id(&self) -> &str {
        &self.request_id
    }

    /// The model served (shared: an adapter may keep it beyond the generation).
    pub fn serving(&self) -> &Arc<Serving> {
        &self.serving
    }

    /// Unix seconds when the generation started.
    pub fn created(&self) -> u64 {
        self.received_ms / 1000
    }

    /// How many prompts the request had (choices are numbered `prompt * n + sample`).
    pub fn prompts(&self) -> usize {
        self.prompts_counted.len()
    }

    /// Samples per prompt (`n`).
    pub fn samples(&self) -> u32 {
        self.n
    }

    /// The usage so far: the prompt's tokens and the token ids received until now.
    pub fn usage_so_far(&self) -> Usage {
        Usage { prompt_tokens: self.prompt_tokens, completion_tokens: self.generated, cached_tokens: None }
    }

    /// The prompt tokens the frontend sent the first choice's worker (its templated and
    /// tokenized prompt); 0 for a model whose workers take text.
    pub fn prompt_sent(&self) -> u32 {
        self.prompt_sent
    }

    /// The instance id of the worker answering choice `choice`.
    pub fn worker(&self, choice: u32) -> Option<u64> {
        self.workers.get(choice as usize).copied()
    }

    /// When the request's stages happened, as far as they did.
    pub fn timing(&self) -> Timing {
        let ms = |d: std::time::Duration| d.as_secs_f64() * 1e3;
        let now = self.ended_at.unwrap_or_else(Instant::now);
        let first = self.first_token.unwrap_or(now);
        Timing {
            request_received_ms: self.received_ms,
            prefill_wait_time_ms: ms(self.sent - self.received),
            prefill_time_ms: ms(first.saturating_duration_since(self.sent)),
            ttft_ms: ms(first.saturating_duration_since(self.received)),
            total_time_ms: ms(now.saturating_duration_since(self.received)),
            kv: self.kv_hit,
        }
    }

    /// Whether [`Generation::next`] has an event without waiting for a worker (an adapter
    /// writing a stream sends what it has rendered only when nothing more is ready).
    pub fn ready(&self) -> bool {
        !self.queue.is_empty() || matches!(&self.source, Source::One(c) if c[0].has_queued())
    }

    /// The adapter found the answer unusable (a worker response it cannot convert): the
    /// request ends as failed, and its workers are cancelled.
    pub fn fail(mut self, e: &Error) {
        self.ended = true;
        self.done_pending = false;
        self.track.fail(e);
    }

    /// Record the success of a generation whose `Done` was handed out.
    fn record_done(&mut self) {
        if std::mem::take(&mut self.done_pending) {
            let usage = self.counts_tokens.then_some(&self.usage);
            self.track.finish(Outcome::Success, usage);
        }
    }

    /// The next event; `None` after [`Event::Done`] or [`Event::Error`].
    ///
    /// One poll, no nested futures: an event already here (the worker's frames come in
    /// batches, so most are) costs no more than a function call.
    pub async fn next(&mut self) -> Option<Event> {
        std::future::poll_fn(|cx| self.poll_next(cx)).await
    }

    /// [`Self::next`] as a poll.
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Event>> {
        if let Some(e) = self.queue.pop_front() {
            return Poll::Ready(Some(e));
        }
        if self.ended {
            self.record_done();
            return Poll::Ready(None);
        }
        let (event, frame) = match &mut self.source {
            Source::One(c) => {
                let c = &mut c[0];
                let e = std::task::ready!(c.poll_next(cx));
                (e, c.take_frame())
            }
            Source::Many(rx) => match std::task::ready!(rx.poll_recv(cx)) {
                Some((e, f)) => (Some(e), f),
                None => (None, None),
            },
        };
        Poll::Ready(self.on_event(event, frame))
    }

    /// Account for one choice's event (its frame's metrics, finished choices, the end).
    fn on_event(&mut self, event: Option<Event>, frame: Option<Frame>) -> Option<Event> {
        if let Some(f) = frame {
            if f.tokens > 0 && self.first_token.is_none() {
                self.first_token = Some(f.arrived);
            }
            self.generated += f.tokens as u32;
            self.prompt_tokens = f.prompt_tokens;
            self.track.tokens(f.arrived, f.tokens, f.prompt_tokens);
            self.track.detokenized(f.decode);
        }
        match event {
            // Text and tensor choices end with their worker's stream.
            None => Some(self.done()),
            Some(Event::Finish { choice, reason, logprobs, usage, stop }) => {
                self.count(choice, &usage);
                self.open = self.open.saturating_sub(1);
                if self.open == 0 {
                    let done = self.done();
                    self.queue.push_back(done);
                }
                Some(Event::Finish { choice, reason, logprobs, usage, stop })
            }
            Some(Event::Error(e)) => {
                self.ended = true;
                self.track.fail(&e);
                Some(Event::Error(e))
            }
            Some(other) => Some(other),
        }
    }

    /// Add a finished choice's counts: its prompt once per prompt, its completion always.
    fn count(&mut self, choice: u32, u: &Usage) {
        let prompt = (choice / self.n.max(1)) as usize;
        if !std::mem::replace(&mut self.prompts_counted[prompt], true) {
            self.usage.prompt_tokens += u.prompt_tokens;
            if let Some(c) = u.cached_tokens {
                *self.usage.cached_tokens.get_or_insert(0) += c;
            }
        }
        self.usage.completion_tokens += u.completion_tokens;
    }

    /// The end of a successful generation. Its success is recorded once the adapter has
    /// taken it (next read or drop), which an adapter writing a stream does right after
    /// handing over its last bytes, before they reach the socket: a scrape after them sees it.
    fn done(&mut self) -> Event {
        self.ended = true;
        self.ended_at = Some(Instant::now());
        self.done_pending = true;
        Event::Done(self.usage)
    }
}

/// Resolve's result in hand: preprocess, route and dispatch every choice of `req` (a model
/// that did not resolve is counted as refused).
pub(super) async fn start(
    ctx: &Rc<ShardCtx>,
    resolved: Result<Resolved, Error>,
    req: &mut InferRequest,
) -> Result<Generation, Error> {
    let resolved = match resolved {
        Ok(r) => r,
        Err(e) => {
            super::tracker::rejected(ctx, req.endpoint, Some(&req.model), req.stream, &e);
            return Err(e);
        }
    };
    let received_ms = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
    let mut track = Tracker::start(ctx, resolved.model(), req.endpoint, req.stream).charging(req.key.clone());
    let received = track.started();
    if req.model != resolved.model() {
        // An alias: the worker is sent the primary name, as 1.6.1 sends it.
        req.model = resolved.model().to_string();
    }
    let counts_tokens = matches!(resolved.kind(), ModelKind::Tokens(_));
    let mut sent = received;
    match choices(ctx, &resolved, req, &track, &mut sent).await {
        Ok((choices, annotations)) => {
            let n = u32::from(req.choices.max(1));
            let prompts = (choices.len() / n as usize).max(1);
            let times = Times { received, received_ms, sent };
            Ok(Generation::new(resolved.serving, choices, annotations, track, n, prompts, counts_tokens, times))
        }
        Err(e) => {
            track.fail(&e);
            Err(e)
        }
    }
}

/// When a generation was taken (also as Unix milliseconds) and its worker requests sent.
struct Times {
    received: Instant,
    received_ms: u64,
    sent: Instant,
}

impl Generation {
    #[allow(clippy::too_many_arguments)]
    fn new(
        serving: Arc<Serving>,
        choices: Vec<Choice>,
        annotations: VecDeque<Event>,
        track: Tracker,
        n: u32,
        prompts: usize,
        counts_tokens: bool,
        times: Times,
    ) -> Generation {
        let mut choices = choices;
        let request_id = choices.first_mut().map(Choice::take_request_id).unwrap_or_default();
        let prompt_sent = choices.first().map_or(0, Choice::prompt_sent);
        let kv_hit = choices.first().and_then(Choice::kv_hit);
        let mut workers: SmallVec<[u64; 1]> = smallvec::smallvec![0; choices.len()];
        for c in &choices {
            if let Some(w) = workers.get_mut(c.index as usize) {
                *w = c.worker();
            }
        }
        let mut annotations = annotations;
        if let Some(Event::Annotation { kind: AnnotationKind::RequestId, text }) = annotations.front_mut() {
            text.clone_from(&request_id);
        }
        let open = choices.len();
        let source = if choices.len() == 1 {
            Source::One(choices)
        } else {
            let (tx, rx) = local::channel();
            for mut c in choices {
                let tx = tx.clone();
                monoio::spawn(async move {
                    while let Some(e) = c.next().await {
                        let last = matches!(e, Event::Finish { .. } | Event::Error(_));
                        if tx.send((e, c.take_frame())).is_err() || last {
                            return;
                        }
                    }
                });
            }
            Source::Many(rx)
        };
        Generation {
            request_id,
            serving,
            queue: annotations,
            source,
            track,
            usage: Usage::default(),
            prompts_counted: smallvec::smallvec![false; prompts],
            n,
            open,
            counts_tokens,
            done_pending: false,
            ended: false,
            generated: 0,
            prompt_tokens: 0,
            prompt_sent,
            workers,
            kv_hit,
            received: times.received,
            received_ms: times.received_ms,
            sent: times.sent,
            first_token: None,
            ended_at: None,
        }
    }
}

/// Every choice of `req`, started, and the annotation events to yield first.
async fn choices(
    ctx: &Rc<ShardCtx>,
    resolved: &Resolved,
    req: &mut InferRequest,
    track: &Tracker,
    sent: &mut Instant,
) -> Result<(Vec<Choice>, VecDeque<Event>), Error> {
    let model = resolved.model();
    let serving = &resolved.serving;
    let mut annotations = VecDeque::new();
    match resolved.kind() {
        ModelKind::Tensor(_) => {
            let Input::Tensor(wire) = std::mem::replace(&mut req.input, Input::Prompts(SmallVec::new())) else {
                // Dynamo 1.6.1 answers 404 too (its OpenAI routes know no tensor model).
                return Err(Error::new(
                    Kind::NotFound,
                    format!(
                        "Model '{model}' is a tensor model: it is served over KServe gRPC only (--kserve-grpc-server)"
                    ),
                ));
            };
            let mut wire = *wire;
            *sent = Instant::now();
            let started = dispatch(ctx, model, serving, req.asked(), &mut wire, new_uuid()).await?;
            Ok((
                vec![Choice::new(0, started, Mode::Tensors, None, None).with_timeout(Inactivity::of(ctx))],
                annotations,
            ))
        }
        ModelKind::Text => {
            let Some(body) = req.forward.take() else {
                return Err(Error::new(Kind::NotFound, format!("Model '{model}' cannot serve this kind of request")));
            };
            // Already parsed and validated by the adapter; this is the object as sent.
            let mut v = serde_json::from_slice::<serde_json::Value>(&body)
                .map_err(|e| Error::new(Kind::BadRequest, format!("Failed to deserialize the JSON body: {e}")))?;
            *sent = Instant::now();
            let started = dispatch(ctx, model, serving, req.asked(), &mut v, new_uuid()).await?;
            Ok((vec![Choice::new(0, started, Mode::Chunks, None, None).with_timeout(Inactivity::of(ctx))], annotations))
        }
        ModelKind::Tokens(tokens) => {
            let asked = AnnotationKind::asked(&req.annotations);
            let keep_formatted = asked.contains(&AnnotationKind::FormattedPrompt);
            let prepared = preprocess::tokens(ctx, tokens, serving, req, keep_formatted, track).await?;
            for &kind in &asked {
                match kind {
                    // Known once the request is dispatched: `Generation::new` adds it.
                    AnnotationKind::RequestId => {}
                    AnnotationKind::TokenIds => {
                        for p in &prepared.prompts {
                            let text = serde_json::to_string(&p.wire.token_ids).unwrap_or_default();
                            annotations.push_back(Event::Annotation { kind, text });
                        }
                    }
                    AnnotationKind::FormattedPrompt => {
                        if let Some(text) = &prepared.formatted {
                            annotations.push_back(Event::Annotation { kind, text: text.clone() });
                        }
                    }
                }
            }
            if asked.contains(&AnnotationKind::RequestId) {
                annotations.push_front(Event::Annotation { kind: AnnotationKind::RequestId, text: String::new() });
            }
            let n = u32::from(req.choices.max(1));
            *sent = Instant::now();
            let tok = || ShardTokenizer { tokenizers: tokens.tokenizers.clone(), shard: ctx.id };
            let skip = req.stops.skip_special_tokens;
            let state = |prompt_tokens: u32, stop| {
                Mode::Tokens(Box::new(TokenState::new(tok, skip, stop, prompt_tokens, req.logprobs)))
            };
            if prepared.prompts.len() == 1 && n == 1 {
                let mut p = prepared.prompts.into_iter().next().expect("one prompt");
                let prompt_tokens = p.wire.token_ids.len() as u32;
                let started = dispatch_tokens(ctx, model, serving, req.asked(), &mut p.wire, new_uuid()).await?;
                let mut migration = Migration::new(ctx, serving, p.wire, req.pinned.is_some(), started.request);
                if let Some(m) = migration.as_mut() {
                    m.class = req.policy_class.clone();
                }
                // The only choice: it takes the stop conditions rather than a copy.
                let choice = Choice::new(0, started, state(prompt_tokens, prepared.stop), p.echo, migration)
                    .with_timeout(Inactivity::of(ctx));
                return Ok((vec![choice], annotations));
            }
            // Several choices: dispatched side by side, each on its own task.
            let mut pending = Vec::new();
            for (i, p) in prepared.prompts.iter().enumerate() {
                for sample in 0..n {
                    let mut wire = p.wire.clone();
                    if let Some(seed) = wire.sampling_options.seed.as_mut() {
                        *seed = seed.wrapping_add(i64::from(sample));
                    }
                    let index = i as u32 * n + sample;
                    let (ctx, serving, pinned, session, class) =
                        (ctx.clone(), serving.clone(), req.pinned, req.session.clone(), req.policy_class.clone());
                    let handle = monoio::spawn(async move {
                        // Several choices of one turn would wait for each other in the
                        // request classifier (one turn of a session at a time): it is not asked.
                        let asked = Asked { pinned, session: session.as_deref(), class: class.as_deref(), agent: None };
                        let r = dispatch_tokens(&ctx, &serving.name, &serving, asked, &mut wire, new_uuid()).await;
                        (r, wire)
                    });
                    pending.push((index, handle, p.echo.clone()));
                }
            }
            let mut out = Vec::with_capacity(pending.len());
            let mut failed = None;
            for (index, handle, echo) in pending {
                match handle.await {
                    (Ok(started), wire) => {
                        let mode = state(wire.token_ids.len() as u32, prepared.stop.clone());
                        let migration = Migration::new(ctx, serving, wire, req.pinned.is_some(), started.request);
                        out.push(Choice::new(index, started, mode, echo, migration).with_timeout(Inactivity::of(ctx)))
                    }
                    (Err(e), _) => failed = failed.or(Some(e)),
                }
            }
            match failed {
                Some(e) => Err(e),
                None => Ok((out, annotations)),
            }
        }
    }
}
