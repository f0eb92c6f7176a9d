//! Stages route and dispatch: pick a worker, send the request, and wait for the worker's
//! first answer — retrying on another worker while nothing has reached the client.
//!
//! A worker that fails before its first item (refused connect, connection lost before the
//! ack, no ack, no call-back within the deadline, stream cut or garbled before any item) is
//! inhibited in this shard's router (docs/dynamo/request-plane.md §9.1) and the request goes to the next usable worker, up to
//! [`MAX_ATTEMPTS`] workers. A worker that refuses with an ack (`Server overloaded`) is
//! skipped for this request but not inhibited: it is alive. Once the first item arrived,
//! the worker owns the request (continuing a half-streamed answer elsewhere is migration,
//! `--migration-limit`).
//!
//! Waiting for the first item before answering also means a failure that happens before
//! it is a plain HTTP error status, not a 200 followed by an SSE error event.

use std::rc::Rc;
use std::task::{Context, Poll};
use std::time::Duration;

use smallvec::SmallVec;

use crate::error::{Error, Kind};
use crate::plane::stream::StreamEvent;
use crate::registry::{Serving, Worker};
use crate::router::kv::admit::Asking;
use crate::router::kv::select::{Booking, Overlaps};
use crate::router::session::{AffinityMode, Lease};
use crate::router::thunder::{Ask, Grant};
use crate::router::{InFlight, Mode};
use crate::shard::ShardCtx;
use crate::transport::callback::{ResponseStream, StreamItem};
use crate::transport::client::{RequestBody, Route, Routed, TransportError};

/// Most workers one request is tried on.
pub const MAX_ATTEMPTS: usize = 3;

/// One event of a worker's response stream.
pub type Event = Option<Result<StreamEvent<StreamItem>, TransportError>>;

/// A request a worker has started answering.
pub struct Started {
    /// The request id every worker it is sent to is given (a retry or a migration keeps it).
    pub request: u128,
    /// The subject the worker answers on (also the response id's suffix).
    pub request_id: String,
    /// The instance id of the worker answering.
    pub worker: u64,
    /// Counts the request against its worker until the answer ends (held, never read).
    in_flight: Option<InFlight>,
    /// The kv router's booking of the request on its worker, released with the answer.
    booking: Option<Booking>,
    /// The request's use of its session's binding, released with the answer.
    lease: Option<Lease>,
    /// The request classifier's turn (`request_classifier`), ended with the answer.
    grant: Option<Grant>,
    /// The worker's data-parallel rank it was sent to.
    rank: u32,
    stream: ResponseStream,
    first: Option<Event>,
    ctx: Rc<ShardCtx>,
}

impl Started {
    /// The worker failed: release its count and booking now (the request is about to be
    /// booked elsewhere under the same id).
    pub fn release(&mut self) {
        self.in_flight = None;
        self.booking = None;
        self.lease = None;
    }

    /// The answer ended: its kv booking is released now (the in-flight count stays until
    /// the stream is dropped).
    /// The kv router's view of the request when it chose this worker (kv mode only).
    pub fn kv_hit(&self) -> Option<crate::router::kv::active::KvHit> {
        self.booking.as_ref().and_then(Booking::hit)
    }

    pub fn answered(&mut self) {
        self.booking = None;
    }

    /// The answer ended, completed (`ok`) or not: [`Started::answered`], and the request
    /// classifier's turn ends.
    pub fn ended(&mut self, ok: bool) {
        self.answered();
        if let Some(g) = self.grant.as_mut() {
            g.end(ok);
        }
    }

    /// The request classifier's turn, to carry over to the worker an answer moves to.
    pub fn take_grant(&mut self) -> Option<Grant> {
        self.grant.take()
    }

    /// This answer continues `grant`'s turn (a migration): the classifier learns its worker.
    pub fn continue_grant(&mut self, grant: Option<Grant>) {
        if let Some(g) = &grant {
            g.sent((self.worker, self.rank));
        }
        self.grant = grant;
    }

    /// The worker sent `n` more tokens (`--router-track-output-blocks`; the classifier's
    /// live context).
    pub fn generated(&mut self, n: usize) {
        if let Some(b) = self.booking.as_mut() {
            b.generated(n);
        }
        if let Some(g) = &self.grant {
            g.generated(n);
        }
    }

    /// The worker failed mid-answer: this shard's router leaves it out for a while
    /// (docs/dynamo/request-plane.md §9.1).
    pub fn inhibit(&self) {
        self.ctx.router.inhibit(self.worker);
    }

    /// The next event, beginning with the one dispatch waited for (the worker has connected
    /// by then, so no call-back deadline is left to keep).
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Event> {
        match self.first.take() {
            Some(ev) => Poll::Ready(ev),
            None => self.stream.poll_next(cx),
        }
    }
}

/// What a failed attempt means for the worker; true: try another one. `from_stream`: the
/// error came from the worker's response stream, so a protocol error is the worker's (one
/// in sending is ours: e.g. a request over the size limit, which no worker would take).
fn on_failure(ctx: &ShardCtx, model: &str, worker: &Worker, e: &TransportError, from_stream: bool) -> bool {
    let retry = e.is_retryable()
        || matches!(e, TransportError::AckTimeout { .. } | TransportError::CallbackTimeout { .. })
        || (from_stream && matches!(e, TransportError::Plane(_)));
    if retry && !e.is_overloaded() {
        ctx.router.inhibit(worker.instance_id);
    }
    if matches!(e, TransportError::CallbackTimeout { .. }) {
        ctx.metrics.edge(crate::metrics::Edge::CallbackTimeout);
    }
    if retry {
        // 1.6.1 counts these as migrations of a new request, whatever its migration limit.
        let index = ctx.metrics.model_index(model);
        ctx.metrics.with_model(index, |m| m.migrations[0] += 1);
    }
    crate::log::warn(&format!("worker {:x} failed before answering: {e}", worker.instance_id));
    retry
}

/// A new request's move to another worker after a failure, timed for
/// `model_migration_duration_seconds{migration_type="new_request"}`: it ends when another
/// worker answers, or fails when the next worker fails too or none is left (dropped).
struct Moving<'a> {
    ctx: &'a ShardCtx,
    model: &'a str,
    since: Option<std::time::Instant>,
}

impl Moving<'_> {
    /// A failed attempt is being retried (a move still open failed with it).
    fn began(&mut self) {
        self.end(false);
        self.since = Some(std::time::Instant::now());
    }

    fn end(&mut self, ok: bool) {
        if let Some(t) = self.since.take() {
            let index = self.ctx.metrics.model_index(self.model);
            self.ctx.metrics.migration_ended(index, 0, ok, t.elapsed());
        }
    }
}

impl Drop for Moving<'_> {
    fn drop(&mut self) {
        self.end(false);
    }
}

/// A kv choice: the worker's data-parallel rank and the request's booking.
type KvPick = (u32, Booking);

/// Workers a request prefers: the one its session is bound to, the request classifier's.
#[derive(Clone, Copy)]
struct Prefer {
    bound: Option<u64>,
    target: Option<u64>,
}

/// The next worker to try, and in `--router-mode kv` its data-parallel rank and booking
/// (`tokens`: the prompt, when the frontend tokenized it; `request`: the bits of the request
/// id the worker will be sent, the booking's name in the workers' prefill marks and in
/// replica sync; `prefer`: the worker the request's session is bound to, the classifier's).
#[allow(clippy::too_many_arguments)]
fn pick(
    ctx: &ShardCtx,
    serving: &Serving,
    pinned: Option<u64>,
    tried: &[u64],
    tokens: Option<&[u32]>,
    request: u128,
    prefer: Prefer,
    remote: Option<&Overlaps>,
    book_pinned: bool,
) -> Result<Option<(usize, Option<KvPick>)>, Error> {
    if let (Some(id), None) = (prefer.bound, pinned) {
        if let Some(chosen) = pick_bound(ctx, serving, id, tried, tokens, request, remote)? {
            return Ok(Some(chosen));
        }
    }
    if let (Some(id), None, Some(tokens), true) = (prefer.target, pinned, tokens, ctx.kv.ready()) {
        // The request classifier's worker, when it can take the request (1.6.1's exclusive
        // affinity target: else the usual choice).
        if let Some(i) = usable_index(ctx, serving, id, tried) {
            if let Ok(Some(chosen)) = kv_choose(ctx, serving, &[i], tokens, request, remote) {
                return Ok(Some(chosen));
            }
        }
    }
    if let (Some(tokens), None, Mode::Kv) = (tokens, pinned, ctx.router.mode()) {
        if ctx.kv.ready() {
            let usable = ctx.router.usable(&serving.workers, tried);
            return kv_choose(ctx, serving, &usable, tokens, request, remote).map_err(|_| overloaded());
        }
    }
    if let (Some(tokens), Some(id), Mode::Kv, true, true) =
        (tokens, pinned, ctx.router.mode(), ctx.kv.ready(), book_pinned)
    {
        // A pinned worker is still booked, its rank chosen and its cost computed, as 1.6.1's
        // "Selected pinned worker" (over busy thresholds it is sent unbooked, as before).
        if let Some(i) = usable_index(ctx, serving, id, tried) {
            if let Ok(Some(chosen)) = kv_choose(ctx, serving, &[i], tokens, request, remote) {
                return Ok(Some(chosen));
            }
        }
    }
    if pinned.is_none() && watches_load(ctx) {
        // Another mode with busy thresholds: the workers' own load reports leave the busy
        // ones out; when every usable worker is busy, the request is refused as overload.
        let mut skip: SmallVec<[u64; 16]> = tried.iter().copied().collect();
        let before = skip.len();
        skip.extend(
            serving
                .workers
                .iter()
                .filter(|w| !tried.contains(&w.instance_id) && ctx.kv.worker_busy(&serving.name, w, &serving.limits))
                .map(|w| w.instance_id),
        );
        if skip.len() > before {
            return match ctx.router.pick(&serving.workers, None, &skip)? {
                Some(i) => Ok(Some((i, None))),
                None if !ctx.router.usable(&serving.workers, tried).is_empty() => Err(overloaded()),
                None => Ok(None),
            };
        }
    }
    Ok(ctx.router.pick(&serving.workers, pinned, tried)?.map(|i| (i, None)))
}

/// The session's bound worker `id`, unless it is gone or failed (then `None`: the request is
/// routed as if unbound and the session bound anew). Busy: overload in `hard` mode, `None`
/// in `soft` mode.
fn pick_bound(
    ctx: &ShardCtx,
    serving: &Serving,
    id: u64,
    tried: &[u64],
    tokens: Option<&[u32]>,
    request: u128,
    remote: Option<&Overlaps>,
) -> Result<Option<(usize, Option<KvPick>)>, Error> {
    let Some(i) = usable_index(ctx, serving, id, tried) else { return Ok(None) };
    let hard = ctx.sessions.mode() == AffinityMode::Hard;
    if let (Some(tokens), Mode::Kv, true) = (tokens, ctx.router.mode(), ctx.kv.ready()) {
        return match kv_choose(ctx, serving, &[i], tokens, request, remote) {
            Ok(chosen) => Ok(chosen),
            Err(_) if hard => Err(overloaded()),
            Err(_) => Ok(None),
        };
    }
    if watches_load(ctx) && ctx.kv.worker_busy(&serving.name, &serving.workers[i], &serving.limits) {
        return if hard { Err(overloaded()) } else { Ok(None) };
    }
    Ok(Some((i, None)))
}

/// The kv router's choice among `workers[i]` for `i` in `usable`, booked.
fn kv_choose(
    ctx: &ShardCtx,
    serving: &Serving,
    usable: &[usize],
    tokens: &[u32],
    request: u128,
    remote: Option<&Overlaps>,
) -> Result<Option<(usize, Option<KvPick>)>, crate::router::kv::select::Overloaded> {
    let (name, workers, limits) = (&serving.name, &serving.workers, &serving.limits);
    let chosen = ctx
        .kv
        .choose_for(name, serving.pool, workers, usable, tokens, limits, request, remote, || ctx.router.next_u64())?;
    Ok(chosen.map(|(c, booking)| (c.index, Some((c.dp_rank, booking)))))
}

/// The index of the worker `id` when it can be tried: present, not tried yet, not inhibited.
fn usable_index(ctx: &ShardCtx, serving: &Serving, id: u64, tried: &[u64]) -> Option<usize> {
    let i = serving.workers.iter().position(|w| w.instance_id == id)?;
    (!tried.contains(&id) && !ctx.router.is_inhibited(id)).then_some(i)
}

/// Another router mode than kv, following the workers' load reports (a busy threshold was
/// given at start-up).
fn watches_load(ctx: &ShardCtx) -> bool {
    ctx.router.mode() != Mode::Kv && ctx.kv.ready()
}

/// What a caller asked of routing: a worker (`pinned`), a session, a policy class.
#[derive(Clone, Copy, Debug, Default)]
pub struct Asked<'a> {
    pub pinned: Option<u64>,
    pub session: Option<&'a str>,
    pub class: Option<&'a str>,
    /// The agent session, for the request classifier (`request_classifier`, kv mode).
    pub agent: Option<&'a super::request::AgentSession>,
}

/// Every usable worker is over a busy threshold (1.6.1's words; the status is
/// `DYN_HTTP_OVERLOAD_STATUS_CODE`'s).
fn overloaded() -> Error {
    Error::new(Kind::Overloaded, "Service temporarily overloaded")
}

/// Send `wire` as request `request` (its id on every worker tried) to a worker of `serving`
/// and wait for its first item. In `--router-mode kv`
/// the prompt's token ids (when the frontend tokenized it) choose the worker and its rank,
/// which is written into `wire`.
pub async fn dispatch<B: RequestBody>(
    ctx: &Rc<ShardCtx>,
    model: &str,
    serving: &Serving,
    asked: Asked<'_>,
    wire: &mut B,
    request: u128,
) -> Result<Started, Error> {
    let Asked { pinned, session, class, agent } = asked;
    let request_id = crate::util::format_uuid(request);
    let bound = match session {
        Some(id) => ctx.sessions.bound(id)?,
        None => None,
    };
    if let (Some(b), Some(p), Some(id)) = (bound, pinned, session) {
        if b != p {
            return Err(Error::new(Kind::BadRequest, format!("session {id} is bound to worker {b}, not {p}")));
        }
    }
    let mut tried: smallvec::SmallVec<[u64; MAX_ATTEMPTS]> = smallvec::SmallVec::new();
    let mut last: Option<TransportError> = None;
    let mut moving = Moving { ctx, model, since: None };
    let mut remote = None;
    let grant = match (wire.prompt_tokens(), ctx.router.mode(), ctx.shared.classifier.as_ref(), agent) {
        (Some(tokens), Mode::Kv, Some(c), Some(a)) => {
            let ask = Ask {
                id: request,
                reg: ctx.router.next_u64(),
                session: &a.id,
                last: a.last,
                input_tokens: tokens.len(),
                pinned: pinned.map(|p| (p, wire.dp_rank().unwrap_or(0))),
            };
            let granted = c.ask(ctx.id, model, ask).await;
            Some(granted.map_err(|e| Error::internal(format!("request classifier failed: {e}")))?)
        }
        _ => None,
    };
    let target = grant.as_ref().and_then(Grant::target).map(|(w, _)| w).filter(|_| ctx.kv.takes_target(serving.pool));
    if let (Some(tokens), None, Mode::Kv) = (wire.prompt_tokens(), pinned, ctx.router.mode()) {
        let usable = ctx.router.usable(&serving.workers, &tried);
        let asking = Asking { model, pool: serving.pool, class };
        let rand = || ctx.router.next_u64();
        if let Err(r) = ctx.kv.wait_for_room(asking, &serving.workers, &usable, &serving.limits, tokens, rand).await {
            return Err(Error::new(Kind::Overloaded, r.message()).with_details(r.details()));
        }
        if ctx.shared.config.use_remote_indexer && ctx.kv.ready() {
            remote = Some(super::remote_index::overlaps(ctx, serving, tokens).await?);
        }
    }
    // A pin with a rank of its own keeps that rank: it is sent as named, unbooked (read
    // before the first attempt writes the router's rank into `wire`).
    let book_pinned = wire.dp_rank().is_none();
    while tried.len() < MAX_ATTEMPTS {
        let tokens = wire.prompt_tokens();
        let prefer = Prefer { bound, target };
        let Some((i, kv)) = pick(ctx, serving, pinned, &tried, tokens, request, prefer, remote.as_ref(), book_pinned)?
        else {
            break;
        };
        let rank = kv.as_ref().map_or_else(|| wire.dp_rank().unwrap_or(serving.workers[i].dp_start), |(r, _)| *r);
        let mut booking = kv.map(|(rank, mut booking)| {
            wire.set_dp_rank(rank);
            if let (true, Some(tokens)) = (ctx.kv.tracks_output(), wire.prompt_tokens()) {
                booking.track_output(tokens.len() as u64, serving.limits.block_size(), wire.expected_output_tokens());
            }
            booking
        });
        let worker = serving.workers[i].clone();
        tried.push(worker.instance_id);
        wire.routed(Routed {
            instance_id: worker.instance_id,
            dp_size: worker.dp_size,
            bootstrap: worker.bootstrap.as_deref().map(|b| (b.host.as_str(), b.port)),
        });
        let in_flight = ctx.router.dispatch(worker.instance_id);
        let deadline = ctx.shared.config.worker_callback_timeout.unwrap_or(Duration::MAX);
        let route = match &worker.nats_subject {
            Some(subject) => Route::Nats { subject },
            None => Route::Tcp { addr: worker.addr, path: &worker.path },
        };
        let sent = ctx.plane.generate_to(route, worker.codec, wire, &request_id, deadline).await;
        if let Some(g) = &grant {
            g.sent((worker.instance_id, rank));
        }
        let mut stream = match sent {
            Ok(s) => s,
            Err(e) => {
                if !on_failure(ctx, model, &worker, &e, false) {
                    return Err(e.into());
                }
                moving.began();
                last = Some(e);
                continue;
            }
        };
        let first = if wire.waits_for_first_item() {
            let first_item = async {
                loop {
                    match stream.next().await {
                        Some(Ok(StreamEvent::Handshake(_) | StreamEvent::Prologue(_))) => continue,
                        other => break other,
                    }
                }
            };
            let first = match ctx.shared.config.backend_stream_timeout {
                None => first_item.await,
                Some(after) => monoio::select! {
                    first = first_item => first,
                    _ = monoio::time::sleep(after) => {
                        // DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS: nothing from the worker in time.
                        crate::log::warn(&format!("worker {:x} sent nothing for {after:?}", worker.instance_id));
                        ctx.router.inhibit(worker.instance_id);
                        return Err(super::choice::response_timeout());
                    },
                },
            };
            if let Some(Err(e)) = first {
                if !on_failure(ctx, model, &worker, &e, true) {
                    return Err(e.into());
                }
                moving.began();
                last = Some(e);
                continue;
            }
            if let Some(b) = booking.as_mut() {
                b.prefill_done();
            }
            Some(first)
        } else {
            // Started once acknowledged (a prefill leg whose decode leg must go out at once).
            None
        };
        moving.end(true);
        // A new session is bound here; one whose worker was gone, failed or (soft) busy is
        // bound anew here.
        let lease = session.and_then(|id| ctx.sessions.bind(id, worker.instance_id));
        return Ok(Started {
            request,
            request_id,
            worker: worker.instance_id,
            in_flight: Some(in_flight),
            booking,
            lease,
            grant,
            rank,
            stream,
            first,
            ctx: ctx.clone(),
        });
    }
    Err(match last {
        Some(e) => e.into(),
        None => super::resolve::not_ready(model),
    })
}
