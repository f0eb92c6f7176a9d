//! Dynamo's per-request metrics of one request, recorded as the driver runs: started,
//! inflight and active when the request is taken, the tokenize time, TTFT / ISL at the first
//! token frame, ITL after, the outcome, duration, OSL, cached tokens and the summed detokenize
//! time at the end (`cancelled` when dropped first), active until the tracker is dropped with
//! the end of the response. A failure is also counted in `failures_total` ([`count_failure`])
//! here, once: adapters and the HTTP service never count a failure of an inference request.
//!
//! Owned by the request's [`super::Generation`]: its end (done, error, or dropped) is the
//! tracker's one exit.

use std::rc::Rc;
use std::time::{Duration, Instant};

use super::Usage;
use crate::error::{Error, Kind};
use crate::metrics::{Endpoint, Failure, Outcome, ShardMetrics, TokenizerOp};
use crate::shard::ShardCtx;

/// The model label of requests whose model is missing or unknown, as Dynamo.
const UNKNOWN_MODEL: &str = "unknown_model";

/// Dynamo's per-request metrics of one request: `requests_started_total` and the inflight
/// gauge at creation, token timings as frames arrive, `requests_total` and the duration at
/// [`Tracker::finish`] (or, if the request is dropped first, as `cancelled`).
pub struct Tracker {
    ctx: Rc<ShardCtx>,
    /// The model's index in the shard's metrics table (interned once per request).
    model: usize,
    endpoint: Endpoint,
    stream: bool,
    start: Instant,
    last_token: Option<Instant>,
    /// Time spent in incremental detokenization so far.
    detokenize: Duration,
    finished: bool,
    /// The API key to charge the request's tokens to.
    key: Option<std::sync::Arc<crate::auth::Key>>,
}

impl Tracker {
    pub(super) fn start(ctx: &Rc<ShardCtx>, model: &str, endpoint: Endpoint, stream: bool) -> Tracker {
        let index = ctx.metrics.model_index(model);
        ctx.metrics.with_model(index, |m| m.start(endpoint, stream));
        Tracker {
            ctx: ctx.clone(),
            model: index,
            endpoint,
            stream,
            start: Instant::now(),
            last_token: None,
            detokenize: Duration::ZERO,
            finished: false,
            key: None,
        }
    }

    /// Charge the request's tokens to `key` when it ends with its usage.
    pub(super) fn charging(mut self, key: Option<std::sync::Arc<crate::auth::Key>>) -> Tracker {
        self.key = key;
        self
    }

    /// When the request was taken.
    pub(super) fn started(&self) -> Instant {
        self.start
    }

    /// The prompt took `took` to encode.
    pub(super) fn tokenized(&self, took: Duration) {
        self.ctx.metrics.tokenizer_latency(TokenizerOp::Tokenize, millis(took));
    }

    /// Decoding one worker frame took `took`; the sum is observed once, at the end.
    pub(super) fn detokenized(&mut self, took: Duration) {
        self.detokenize += took;
    }

    /// A worker frame that arrived at `now` carried `n` tokens: TTFT (and ISL) on the first,
    /// ITL after.
    pub(super) fn tokens(&mut self, now: Instant, n: usize, prompt_tokens: u32) {
        if n == 0 {
            return;
        }
        let last = self.last_token.replace(now);
        self.ctx.metrics.with_model(self.model, |m| {
            match last {
                None => {
                    m.ttft.observe((now - self.start).as_secs_f64());
                    m.isl.observe(f64::from(prompt_tokens));
                }
                Some(t) => m.itl.observe_n((now - t).as_secs_f64() / n as f64, n as u64),
            }
            m.output_tokens += n as u64;
        });
    }

    /// The request ended; `usage` on success. Only the first call counts.
    pub(super) fn finish(&mut self, outcome: Outcome, usage: Option<&Usage>) {
        if std::mem::replace(&mut self.finished, true) {
            return;
        }
        let secs = self.start.elapsed().as_secs_f64();
        if self.last_token.is_some() || outcome == Outcome::Success {
            self.ctx.metrics.tokenizer_latency(TokenizerOp::Detokenize, millis(self.detokenize));
        }
        self.ctx.metrics.with_model(self.model, |m| {
            m.finish(self.endpoint, self.stream, outcome, secs);
            if let (Some(u), Some(k)) = (usage, &self.key) {
                k.charge(u64::from(u.prompt_tokens) + u64::from(u.completion_tokens));
            }
            if let Some(u) = usage {
                m.osl.observe(f64::from(u.completion_tokens));
                if let Some(c) = u.cached_tokens {
                    m.cached.observe(f64::from(c));
                }
            }
        });
    }

    /// The request failed: its outcome, and `failures_total`.
    pub(super) fn fail(&mut self, e: &Error) {
        if !self.finished {
            count_failure(&self.ctx.metrics, e.kind());
        }
        self.finish(outcome(e.kind()), None);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        // Dropped before its outcome: nobody is waiting for the answer any more (the client
        // closed, reset its stream or cancelled its call).
        if !self.finished {
            self.ctx.metrics.client_disconnected();
        }
        self.finish(Outcome::Cancelled, None);
        self.ctx.metrics.with_model(self.model, |m| m.end());
    }
}

fn millis(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Count a request that ended in error `kind` in `failures_total`.
pub fn count_failure(metrics: &ShardMetrics, kind: Kind) {
    metrics.failure(match kind {
        Kind::BadRequest
        | Kind::RequestTimeout
        | Kind::ExpectationFailed
        | Kind::HeadersTooLarge
        | Kind::VersionNotSupported
        | Kind::Unauthorized
        | Kind::Forbidden
        | Kind::Conflict => Failure::InvalidRequest,
        Kind::TooManyRequests => Failure::Overloaded,
        Kind::GatewayTimeout => Failure::Unavailable,
        Kind::ClientClosed | Kind::BadGateway => Failure::Internal,
        Kind::MethodNotAllowed => Failure::MethodNotAllowed,
        Kind::PayloadTooLarge => Failure::TooLarge,
        Kind::NotFound => Failure::NotFound,
        Kind::UnsupportedMediaType => Failure::UnsupportedMedia,
        Kind::NotImplemented => Failure::Unsupported,
        Kind::ServiceUnavailable => Failure::Unavailable,
        Kind::Overloaded => Failure::Overloaded,
        Kind::Internal => Failure::Internal,
    });
}

/// The `error_type` of a failed request.
fn outcome(kind: Kind) -> Outcome {
    match kind {
        Kind::BadRequest
        | Kind::NotImplemented
        | Kind::PayloadTooLarge
        | Kind::UnsupportedMediaType
        | Kind::Unauthorized
        | Kind::Forbidden
        | Kind::Conflict => Outcome::Validation,
        Kind::NotFound => Outcome::NotFound,
        Kind::Overloaded | Kind::TooManyRequests => Outcome::Overload,
        Kind::ClientClosed => Outcome::Cancelled,
        _ => Outcome::Internal,
    }
}

/// Count a request that failed before it had a plan (validation, unknown model, no workers),
/// labelled with its model if that is served, else `unknown_model`, as Dynamo.
pub(super) fn rejected(ctx: &Rc<ShardCtx>, endpoint: Endpoint, model: Option<&str>, stream: bool, e: &Error) {
    let served = model.filter(|m| ctx.registry().serving.contains_key(*m));
    let mut track = Tracker::start(ctx, served.unwrap_or(UNKNOWN_MODEL), endpoint, stream);
    track.fail(e);
}
