//! Dynamo's per-request metrics of one request, recorded as the pipeline runs: started and
//! inflight when the model is resolved, TTFT / ISL at the first token frame, ITL after, the
//! outcome, duration, OSL and cached tokens at the end (`cancelled` when dropped first).

use std::rc::Rc;
use std::time::Instant;

use super::pipeline::Api;
use crate::error::{Error, Kind};
use crate::http1::Request;
use crate::metrics::{Endpoint, Outcome};
use crate::openai::response::Usage;
use crate::shard::ShardCtx;

/// The model label of requests whose model is missing or unknown, as Dynamo.
const UNKNOWN_MODEL: &str = "unknown_model";

/// Dynamo's per-request metrics of one request: `requests_started_total` and the inflight
/// gauge at creation, token timings as frames arrive, `requests_total` and the duration at
/// [`Tracker::finish`] (or, if the request is dropped first, as `cancelled`).
pub(super) struct Tracker {
    ctx: Rc<ShardCtx>,
    /// The model's index in the shard's metrics table (interned once per request).
    model: usize,
    endpoint: Endpoint,
    stream: bool,
    start: Instant,
    last_token: Option<Instant>,
    finished: bool,
}

impl Tracker {
    pub(super) fn start(ctx: &Rc<ShardCtx>, model: &str, api: Api, stream: bool) -> Tracker {
        let endpoint = match api {
            Api::Chat => Endpoint::ChatCompletions,
            Api::Completions => Endpoint::Completions,
        };
        let index = ctx.metrics.model_index(model);
        ctx.metrics.with_model(index, |m| m.start(endpoint, stream));
        Tracker {
            ctx: ctx.clone(),
            model: index,
            endpoint,
            stream,
            start: Instant::now(),
            last_token: None,
            finished: false,
        }
    }

    /// A worker frame carried `n` tokens: TTFT (and ISL) on the first, ITL after.
    pub(super) fn tokens(&mut self, n: usize, prompt_tokens: u32) {
        if n == 0 {
            return;
        }
        let now = Instant::now();
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
        self.ctx.metrics.with_model(self.model, |m| {
            m.finish(self.endpoint, self.stream, outcome, secs);
            if let Some(u) = usage {
                m.osl.observe(f64::from(u.completion_tokens));
                if let Some(c) = u.cached_tokens {
                    m.cached.observe(f64::from(c));
                }
            }
        });
    }

    pub(super) fn fail(&mut self, e: &Error) {
        self.finish(outcome(e.kind()), None);
    }
}

impl Drop for Tracker {
    fn drop(&mut self) {
        self.finish(Outcome::Cancelled, None);
    }
}

/// The `error_type` of a failed request.
fn outcome(kind: Kind) -> Outcome {
    match kind {
        Kind::BadRequest | Kind::NotImplemented | Kind::PayloadTooLarge | Kind::UnsupportedMediaType => {
            Outcome::Validation
        }
        Kind::NotFound => Outcome::NotFound,
        Kind::Overloaded => Outcome::Overload,
        _ => Outcome::Internal,
    }
}

/// Count a request that failed before it had a plan (validation, unknown model, no workers),
/// labelled with its model if that is served, else `unknown_model`, as Dynamo.
pub(super) fn count_rejected(ctx: &Rc<ShardCtx>, api: Api, req: &Request, e: &Error) {
    #[derive(serde::Deserialize)]
    struct Peek {
        model: Option<String>,
        stream: Option<bool>,
    }
    let peek = serde_json::from_slice::<Peek>(&req.body).ok();
    let stream = peek.as_ref().and_then(|p| p.stream).unwrap_or(false);
    let model = peek.and_then(|p| p.model).filter(|m| ctx.registry().serving.contains_key(m.as_str()));
    let mut track = Tracker::start(ctx, model.as_deref().unwrap_or(UNKNOWN_MODEL), api, stream);
    track.fail(e);
}
