//! Request migration (`--migration-limit`, `--migration-max-seq-len`; docs/dynamo/request-plane.md
//! §9.2): a Tokens choice whose worker dies or drops its stream mid-answer continues on
//! another worker, and its client sees one uninterrupted answer.
//!
//! Runs inside the choice, on the request's shard task. While migration is possible the
//! choice appends every token id it receives to its wire request, so the request to resend
//! is at hand: the prompt plus the tokens generated so far, `max_tokens` and `min_tokens`
//! reduced by their count, everything else (request id, sampling options and seed, stops,
//! annotations) unchanged, as 1.6.1 resends it. The detokenizer and stop conditions carry on
//! across the switch: they belong to the choice, not to the worker.
//!
//! Which failures migrate (1.6.1's migratable reasons): the response stream cut before its
//! final frame (a killed worker, a lost connection), and a worker error item whose type is a
//! disconnect, a connect or response timeout, an engine shutdown, an incomplete stream, an
//! unavailable or overloaded worker. A plain worker error, a cancelled request and a request
//! with guided decoding never migrate. Each resend spends one of the `--migration-limit`
//! migrations; a sequence (prompt + generated) longer than `--migration-max-seq-len` stops
//! migrating. The dead worker is inhibited in this shard's router first.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;

use super::dispatch::{self, Started};
use crate::error::Error;
use crate::plane::payload::PreprocessedRequest;
use crate::plane::stream::StreamEvent;
use crate::registry::Serving;
use crate::shard::ShardCtx;
use crate::transport::callback::StreamItem;
use crate::transport::client::TransportError;

/// A resend in progress: the new worker's start, and the wire request back.
type Resend = Pin<Box<dyn Future<Output = (Result<Started, Error>, Box<PreprocessedRequest>)>>>;

/// What one choice needs to move to another worker.
pub(super) struct Migration {
    ctx: Rc<ShardCtx>,
    serving: Arc<Serving>,
    /// The wire request; its `token_ids` grow with every token received.
    wire: Option<Box<PreprocessedRequest>>,
    /// Migrations left.
    left: u32,
    max_seq_len: Option<u32>,
    /// `max_tokens` and `min_tokens` as the client asked.
    max_tokens: Option<u32>,
    min_tokens: Option<u32>,
    /// Token ids received from every worker so far.
    generated: u32,
    /// The request id, kept on every worker.
    request: u128,
    /// The model's index in the shard's metrics table.
    model: usize,
    resend: Option<Resend>,
    /// Whether the choice moved at least once (the later workers' prompt counts include the
    /// tokens generated before, so the choice keeps the first count).
    pub moved: bool,
    /// When the last move began (for `model_migration_duration_seconds`).
    moved_at: std::time::Instant,
    /// The policy class the request asked for, asked again on the next worker.
    pub class: Option<Rc<str>>,
}

impl Migration {
    /// The migration state of a choice sent as `wire`, or `None` when it cannot migrate.
    pub(super) fn new(
        ctx: &Rc<ShardCtx>,
        serving: &Arc<Serving>,
        wire: Box<PreprocessedRequest>,
        pinned: bool,
        request: u128,
    ) -> Option<Box<Migration>> {
        let cfg = &ctx.shared.config;
        // A request pinned to its worker has nowhere else to go; guided decoding is never
        // migrated (1.6.1).
        if cfg.migration_limit == 0 || pinned || wire.sampling_options.guided_decoding.is_some() {
            return None;
        }
        let mut m = Box::new(Migration {
            ctx: ctx.clone(),
            serving: serving.clone(),
            max_tokens: wire.stop_conditions.max_tokens,
            min_tokens: wire.stop_conditions.min_tokens,
            wire: Some(wire),
            left: cfg.migration_limit,
            max_seq_len: cfg.migration_max_seq_len,
            generated: 0,
            request,
            model: ctx.metrics.model_index(&serving.name),
            resend: None,
            moved: false,
            moved_at: std::time::Instant::now(),
            class: None,
        });
        m.check_length();
        Some(m)
    }

    /// Token ids arrived from the worker.
    pub(super) fn received(&mut self, ids: &[u32]) {
        if self.left == 0 || ids.is_empty() {
            return;
        }
        if let Some(w) = self.wire.as_mut() {
            w.token_ids.extend_from_slice(ids);
        }
        self.generated += ids.len() as u32;
        self.check_length();
    }

    /// `--migration-max-seq-len`: a sequence longer than the bound stops migrating.
    fn check_length(&mut self) {
        let (Some(max), Some(w)) = (self.max_seq_len, self.wire.as_ref()) else { return };
        let len = w.token_ids.len();
        if self.left > 0 && len > max as usize {
            self.left = 0;
            crate::log::warn(&format!("sequence length {len} exceeds --migration-max-seq-len {max}: not migrating"));
            self.ctx.metrics.with_model(self.model, |m| m.migration_max_seq_len_exceeded += 1);
        }
    }

    /// Whether `event` is a failure this choice moves away from: it is then counted, and a
    /// resend to another worker begins if one is left ([`Migration::poll_resend`]).
    pub(super) fn on_failure(&mut self, event: &dispatch::Event, worker: u64) -> bool {
        match migratable(event) {
            Some(reason) => self.migrate(reason, worker),
            None => false,
        }
    }

    /// Worker `worker` failed for `reason` mid-answer: counted, inhibited, and a resend to
    /// another worker begins if one is left. False: the choice ends.
    pub(super) fn migrate(&mut self, reason: &str, worker: u64) -> bool {
        self.ctx.metrics.with_model(self.model, |m| m.migrations[1] += 1);
        self.ctx.router.inhibit(worker);
        if self.left == 0 {
            crate::log::warn(&format!("worker {worker:x} failed mid-answer ({reason}); migration limit reached"));
            self.ctx.metrics.migration_ended(self.model, 1, false, std::time::Duration::ZERO);
            return false;
        }
        let Some(mut wire) = self.wire.take() else {
            self.ctx.metrics.migration_ended(self.model, 1, false, std::time::Duration::ZERO);
            return false;
        };
        self.moved_at = std::time::Instant::now();
        self.left -= 1;
        self.moved = true;
        crate::log::warn(&format!(
            "worker {worker:x} failed mid-answer ({reason}); continuing on another worker after {} tokens",
            self.generated
        ));
        let stop = &mut wire.stop_conditions;
        stop.max_tokens = self.max_tokens.map(|n| n.saturating_sub(self.generated));
        stop.min_tokens = self.min_tokens.map(|n| n.saturating_sub(self.generated));
        let (ctx, serving, request, class) = (self.ctx.clone(), self.serving.clone(), self.request, self.class.clone());
        self.resend = Some(Box::pin(async move {
            let asked = super::dispatch::Asked { class: class.as_deref(), ..Default::default() };
            let started =
                super::disagg::dispatch_tokens(&ctx, &serving.name, &serving, asked, &mut wire, request).await;
            (started, wire)
        }));
        true
    }

    /// The resend begun by [`Migration::on_failure`]: `Ready` with the new worker's start,
    /// or the error that ends the choice.
    pub(super) fn poll_resend(&mut self, cx: &mut std::task::Context<'_>) -> std::task::Poll<Result<Started, Error>> {
        let Some(resend) = self.resend.as_mut() else {
            return std::task::Poll::Ready(Err(Error::internal("no migration in progress")));
        };
        let (started, wire) = std::task::ready!(resend.as_mut().poll(cx));
        self.resend = None;
        self.wire = Some(wire);
        self.ctx.metrics.migration_ended(self.model, 1, started.is_ok(), self.moved_at.elapsed());
        std::task::Poll::Ready(started)
    }

    /// Whether a resend is in progress.
    pub(super) fn resending(&self) -> bool {
        self.resend.is_some()
    }
}

/// 1.6.1's reason for migrating away from a worker after `event`, if it is one.
pub(super) fn migratable(event: &dispatch::Event) -> Option<&'static str> {
    match event {
        Some(Err(TransportError::StreamIncomplete { .. })) => Some("disconnected"),
        Some(Err(TransportError::ConnectionLost { .. })) => Some("disconnected"),
        Some(Err(TransportError::CannotConnect { .. })) => Some("cannot_connect"),
        Some(Ok(StreamEvent::Item(StreamItem::Tokens(a)))) => {
            let e = a.error.as_ref()?;
            let kind = match &e.error_type {
                serde_json::Value::String(s) => s.as_str(),
                serde_json::Value::Object(o) => o.get("Backend").and_then(serde_json::Value::as_str)?,
                _ => return None,
            };
            match kind {
                "Disconnected" => Some("disconnected"),
                "CannotConnect" => Some("cannot_connect"),
                "ConnectionTimeout" => Some("connection_timeout"),
                "ResponseTimeout" => Some("response_timeout"),
                "EngineShutdown" => Some("engine_shutdown"),
                "StreamIncomplete" => Some("stream_incomplete"),
                "WorkerUnavailable" => Some("worker_unavailable"),
                "WorkerOverloaded" => Some("worker_overloaded"),
                _ => None,
            }
        }
        _ => None,
    }
}
