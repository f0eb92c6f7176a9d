//! Disaggregated serving (docs/dynamo/disaggregated.md): a request of a model that has
//! prefill workers is prefilled on one of them and decoded on one of its other workers, handed
//! off as Dynamo 1.6.1 hands it off.
//!
//! * The prefill leg is the request with `max_tokens` 1 and `routing.prefill_worker_id` (and
//!   `prefill_dp_rank`), sent under the same request id; it is routed (kv-aware over the
//!   prefill workers' own KV events, retried on another prefill worker, inhibited) like any
//!   request, by [`dispatch`].
//! * When the chosen prefill worker advertises a KV rendezvous (its card's
//!   `runtime_config.disaggregated_endpoint`), both legs carry the same `bootstrap_info`
//!   (`bootstrap_room` random with `room % dp_size == dp_rank`, a fresh `handoff_id`) and the
//!   decode leg goes out as soon as the prefill worker acknowledged its leg; the prefill
//!   answer is read to its end in the background.
//! * Otherwise the prefill answer is read to its end first, and the decode leg carries
//!   `prefill_result: {disaggregated_params, prompt_tokens_details}` from it.
//! * Both ways, the decode leg carries `routing.prefill_worker_id` and the
//!   `router_config_override` 1.6.1 sends with it (no overlap credit, no KV reuse assumed, no
//!   prefill tokens tracked).
//!
//! A prefill leg that fails fails the request (1.6.1 never falls back to decoding without a
//! prefill); one that never started is retried on another prefill worker first. Each leg is
//! counted per model in `switchyard_disaggregated_legs_total`.
//!
//! Runs on a shard thread, between preprocessing and the decode leg's dispatch.

use std::rc::Rc;

use serde_json::{json, Value};

use super::dispatch::{dispatch, Asked, Started};
use crate::error::{Error, Kind};
use crate::plane::payload::{FinishReason, PreprocessedRequest};
use crate::plane::preprocessed::BootstrapInfo;
use crate::plane::stream::ItemMode;
use crate::plane::stream::{StreamEvent, StreamItem};
use crate::registry::Serving;
use crate::shard::ShardCtx;
use crate::transport::client::{RequestBody, Routed};

/// Send `wire` to a worker of `serving` as request `request`: through a prefill worker
/// first when the model has them, else as it is.
pub async fn dispatch_tokens(
    ctx: &Rc<ShardCtx>,
    model: &str,
    serving: &Serving,
    asked: Asked<'_>,
    wire: &mut PreprocessedRequest,
    request: u128,
) -> Result<Started, Error> {
    let Some(pool) = serving.prefill.as_deref() else {
        return dispatch(ctx, model, serving, asked, wire, request).await;
    };
    // A migrated request is prefilled anew: nothing of an earlier hand-off is kept.
    wire.prefill_result = None;
    wire.bootstrap_info = None;
    wire.annotations.retain(|a| a != BYPASS);
    if let Some(r) = wire.routing.as_mut() {
        r.prefill_worker_id = None;
        r.prefill_dp_rank = None;
        r.dp_rank = None;
    }
    if let (None, Some(decode)) = (asked.pinned, skip_prefill(ctx, serving, pool, wire)) {
        // Conditional disaggregation: the decode worker prefills itself; the request is an
        // aggregated one, pinned to the worker the decode router would have chosen.
        wire.annotations.push(BYPASS.to_string());
        wire.router_config_override = None;
        let started = dispatch(ctx, model, serving, Asked { pinned: Some(decode), ..asked }, wire, request).await;
        count(ctx, model, Leg::Bypassed, started.is_ok());
        return started;
    }
    let handoff = prefill(ctx, model, pool, asked.class, wire, request).await;
    count(ctx, model, Leg::Prefill, handoff.is_ok());
    let handoff = handoff?;
    let routing = wire.routing.get_or_insert_with(Default::default);
    routing.prefill_worker_id = Some(handoff.worker);
    match handoff.result {
        Handed::Result(result) => wire.prefill_result = Some(Box::new(result)),
        Handed::Bootstrap(info) => {
            routing.prefill_dp_rank = handoff.rank;
            wire.bootstrap_info = Some(info);
        }
    }
    wire.router_config_override = Some(Box::new(json!({
        "overlap_score_credit": 0.0,
        "prefill_load_scale": null,
        "router_temperature": null,
        "assume_kv_reuse": false,
        "track_prefill_tokens": false,
        "shared_cache_multiplier": null,
    })));
    let started = dispatch(ctx, model, serving, asked, wire, request).await;
    count(ctx, model, Leg::Decode, started.is_ok());
    started
}

/// The annotation a request that skipped its prefill leg carries to its decode worker (1.6.1's).
const BYPASS: &str = "x-bypass-remote-prefill";

/// `--router-conditional-disagg`: the decode worker a request of `serving` should go to
/// without a prefill leg, if the policy says so (docs/dynamo/disaggregated.md §4). Both
/// routers are only asked (nothing booked): the decode router for the worker it would choose
/// and its cached share of the prompt, the prefill router (load policies) for how busy its
/// choice is; a decode worker over `decode_busy_threshold` vetoes the skip.
fn skip_prefill(ctx: &ShardCtx, serving: &Serving, pool: &Serving, wire: &PreprocessedRequest) -> Option<u64> {
    let c = ctx.shared.config.conditional_disagg.as_ref()?;
    if ctx.router.mode() != crate::router::Mode::Kv || !ctx.kv.ready() {
        return None;
    }
    let tokens = wire.token_ids.as_slice();
    let usable = ctx.router.usable(&serving.workers, &[]);
    let decode =
        ctx.kv.peek_for(serving.pool, &serving.workers, &usable, tokens, &serving.limits, || ctx.router.next_u64())?;
    let block_size = u64::from(serving.limits.block_size());
    let overlap = u64::from(decode.candidate.overlap_blocks) * block_size;
    let isl = c.isl_allows(tokens.len() as u64, overlap);
    let load = || {
        let usable = ctx.router.usable(&pool.workers, &[]);
        let threshold = c.prefill_busy_threshold.unwrap_or(f64::INFINITY);
        ctx.kv.peek_for(pool.pool, &pool.workers, &usable, tokens, &pool.limits, || ctx.router.next_u64()).is_some_and(
            |p| p.candidate.active_prefill_tokens as f64 > threshold * pool.limits.max_num_batched_tokens as f64,
        )
    };
    if !c.skips(isl, load) {
        return None;
    }
    if let Some(t) = c.decode_busy_threshold {
        if decode.candidate.decode_blocks as f64 > t * serving.limits.total_kv_blocks as f64 {
            return None;
        }
    }
    Some(serving.workers[decode.index].instance_id)
}

/// How a prefill leg hands the request to its decode leg.
enum Handed {
    /// The prefill worker's answer (`prefill_result`).
    Result(Value),
    /// Both legs meet at the prefill worker's rendezvous (`bootstrap_info`).
    Bootstrap(Box<BootstrapInfo>),
}

struct Handoff {
    /// The prefill worker.
    worker: u64,
    /// Its data-parallel rank, when the router chose one.
    rank: Option<u32>,
    result: Handed,
}

/// The prefill leg on a worker of `pool`.
async fn prefill(
    ctx: &Rc<ShardCtx>,
    model: &str,
    pool: &Serving,
    class: Option<&str>,
    wire: &PreprocessedRequest,
    request: u128,
) -> Result<Handoff, Error> {
    let mut leg =
        PrefillRequest { wire: wire.clone(), room_seed: ctx.router.next_u64(), handoff: crate::util::new_uuid() };
    leg.wire.stop_conditions.max_tokens = Some(1);
    let asked = Asked { class, ..Asked::default() };
    let mut started = dispatch(ctx, model, pool, asked, &mut leg, request).await?;
    let routing = leg.wire.routing.as_ref();
    let worker = started.worker;
    let rank = routing.and_then(|r| r.prefill_dp_rank);
    if let Some(info) = leg.wire.bootstrap_info.take() {
        // The decode leg goes out now; the prefill answer is read (and its worker's count
        // and booking held) until it ends.
        let (ctx, model) = (ctx.clone(), model.to_string());
        monoio::spawn(async move {
            if let Err(e) = read_to_end(&mut started).await {
                crate::log::warn(&format!("model {model}: prefill worker {worker:x} failed after the hand-off: {e}"));
                count(&ctx, &model, Leg::PrefillAfterHandoff, false);
            }
        });
        return Ok(Handoff { worker, rank, result: Handed::Bootstrap(info) });
    }
    let (params, details) = read_to_end(&mut started).await?;
    let Some(params) = params else {
        return Err(Error::new(Kind::BadGateway, "Prefill router output missing disaggregated_params"));
    };
    let result = json!({"disaggregated_params": params, "prompt_tokens_details": details});
    Ok(Handoff { worker, rank, result: Handed::Result(result) })
}

/// Reads a prefill answer to its end: the first `disaggregated_params` it carries and the
/// `prompt_tokens_details` of its usage.
async fn read_to_end(started: &mut Started) -> Result<(Option<Value>, Value), Error> {
    let (mut params, mut details) = (None, Value::Null);
    loop {
        match std::future::poll_fn(|cx| started.poll_next(cx)).await {
            None | Some(Ok(StreamEvent::Sentinel)) => return Ok((params, details)),
            Some(Ok(StreamEvent::Item(StreamItem::Tokens(item)))) => {
                if let Some(e) = &item.error {
                    return Err(super::choice::worker_error(e));
                }
                let Some(out) = item.data else { continue };
                if let Some(FinishReason::Error(e)) = &out.finish_reason {
                    return Err(Error::new(Kind::BadGateway, format!("Prefill router returned error in output: {e}")));
                }
                if params.is_none() {
                    params.clone_from(&out.disaggregated_params);
                }
                if let Some(d) = out.completion_usage.as_ref().and_then(|u| u.prompt_tokens_details.as_ref()) {
                    details = serde_json::to_value(d).unwrap_or(Value::Null);
                }
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(e.into()),
        }
    }
}

/// A prefill leg: the request with `max_tokens` 1, told its prefill worker.
struct PrefillRequest {
    wire: PreprocessedRequest,
    /// Draws the `bootstrap_room`.
    room_seed: u64,
    /// The `handoff_id` (a new UUID).
    handoff: u128,
}

impl serde::Serialize for PrefillRequest {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        self.wire.serialize(s)
    }
}

impl RequestBody for PrefillRequest {
    const ITEMS: ItemMode = ItemMode::Tokens;

    fn prompt_tokens(&self) -> Option<&[u32]> {
        Some(&self.wire.token_ids)
    }

    fn set_dp_rank(&mut self, rank: u32) {
        let r = self.wire.routing.get_or_insert_with(Default::default);
        r.dp_rank = Some(rank);
        r.prefill_dp_rank = Some(rank);
    }

    fn routed(&mut self, to: Routed<'_>) {
        let r = self.wire.routing.get_or_insert_with(Default::default);
        r.prefill_worker_id = Some(to.instance_id);
        self.wire.bootstrap_info = to.bootstrap.map(|(host, port)| {
            let rank = u64::from(r.dp_rank.unwrap_or(0));
            Box::new(BootstrapInfo {
                bootstrap_host: host.to_owned(),
                bootstrap_port: port,
                bootstrap_room: room(self.room_seed, rank, u64::from(to.dp_size.max(1))),
                handoff_id: self.handoff,
            })
        });
    }

    fn waits_for_first_item(&self) -> bool {
        self.wire.bootstrap_info.is_none()
    }

    fn encode_body(&self, codec: crate::plane::payload::Codec) -> Result<Vec<u8>, crate::plane::PlaneError> {
        self.wire.encode_body(codec)
    }
}

/// A `bootstrap_room`: random in `0..=i64::MAX`, with `room % dp_size == rank`.
fn room(seed: u64, rank: u64, dp_size: u64) -> u64 {
    let r = seed & i64::MAX as u64;
    let r = r - r % dp_size + rank % dp_size;
    if r > i64::MAX as u64 {
        r - dp_size
    } else {
        r
    }
}

#[derive(Clone, Copy)]
enum Leg {
    Prefill,
    /// A prefill answer that failed after its decode leg went out (bootstrap hand-off).
    PrefillAfterHandoff,
    Decode,
    /// A decode worker sent the whole request (`--router-conditional-disagg`).
    Bypassed,
}

fn count(ctx: &ShardCtx, model: &str, leg: Leg, ok: bool) {
    let index = ctx.metrics.model_index(model);
    let (row, col) = match leg {
        Leg::Prefill => (0, usize::from(!ok)),
        Leg::PrefillAfterHandoff => (0, 2),
        Leg::Decode => (1, usize::from(!ok)),
        Leg::Bypassed => (2, usize::from(!ok)),
    };
    ctx.metrics.with_model(index, |m| m.disaggregated[row][col] += 1);
}

#[cfg(test)]
mod tests {
    use super::room;

    #[test]
    fn rooms_fall_on_their_rank() {
        for seed in [0, 1, 7, u64::MAX, i64::MAX as u64, 1 << 63, 0x1234_5678_9abc_def0] {
            for dp in 1..=8 {
                for rank in 0..dp {
                    let r = room(seed, rank, dp);
                    assert!(r <= i64::MAX as u64, "{seed} {rank} {dp}");
                    assert_eq!(r % dp, rank, "{seed} {rank} {dp}");
                }
            }
        }
    }
}
