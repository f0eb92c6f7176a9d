//! `GET` and `POST /busy_threshold`, as 1.6.1 serves them: the busy thresholds of every
//! discovered model, and a model's set at run time. Runs on the shard that took the request;
//! a change is applied here at once and sent to every other shard's inbox
//! ([`crate::shard::ShardMsg::Busy`]), so no lock is shared on the request path.
//!
//! A POST with only `model` is a query (200 with the current values, for any name); with a
//! value it merges the values given into the model's (a `null` is "not given": nothing can
//! be cleared, as in 1.6.1). The kv router enforces them with its bookings; the other modes
//! with the workers' own load reports, which switchyard follows only when started with a
//! threshold — without one, setting a threshold there is refused (501) rather than
//! accepted and ignored.

use std::rc::Rc;

use serde::Deserialize;

use crate::config::settings::{BusyThresholds, RouterMode};
use crate::http1::{Method, Request, Response};
use crate::shard::{ShardCtx, ShardMsg};

#[derive(Deserialize)]
struct Post {
    model: String,
    active_decode_blocks_threshold: Option<f64>,
    active_prefill_tokens_threshold: Option<u64>,
    active_prefill_tokens_threshold_frac: Option<f64>,
}

pub fn handle(ctx: &Rc<ShardCtx>, req: &Request) -> Response {
    if req.head.method != Method::Post {
        return list(ctx);
    }
    let post: Post = match serde_json::from_slice(&req.body) {
        Ok(p) => p,
        Err(e) if e.classify() == serde_json::error::Category::Data => {
            return error(422, format!("Failed to deserialize the JSON body into the target type: {e}"));
        }
        Err(e) => {
            let text = format!("Failed to parse the request body as JSON: {e}");
            return Response::text(400, "text/plain; charset=utf-8", text);
        }
    };
    if let Some(f) = post.active_decode_blocks_threshold {
        if !(0.0..=1.0).contains(&f) {
            return error(400, format!("active_decode_blocks_threshold must be between 0.0 and 1.0, got {f}"));
        }
    }
    if let Some(f) = post.active_prefill_tokens_threshold_frac {
        if !(f.is_finite() && f >= 0.0) {
            return error(
                400,
                format!(
                    "active_prefill_tokens_threshold_frac must be a finite value greater than or equal to 0.0, got {f}"
                ),
            );
        }
    }
    let mut busy = ctx.kv.busy_for(&post.model);
    let setting = post.active_decode_blocks_threshold.is_some()
        || post.active_prefill_tokens_threshold.is_some()
        || post.active_prefill_tokens_threshold_frac.is_some();
    if setting {
        if !discovered(ctx).contains(&post.model) {
            return error(
                404,
                format!("Model '{}' not found. Thresholds can only be set for discovered models.", post.model),
            );
        }
        if ctx.shared.config.router_mode != RouterMode::Kv && !ctx.kv.ready() {
            return error(
                501,
                "outside --router-mode kv, switchyard watches the workers' load only when started with a busy \
                 threshold (e.g. --active-decode-blocks-threshold 1.0, which never fires)"
                    .into(),
            );
        }
        busy.decode_blocks_frac = post.active_decode_blocks_threshold.or(busy.decode_blocks_frac);
        busy.prefill_tokens = post.active_prefill_tokens_threshold.or(busy.prefill_tokens);
        busy.prefill_frac = post.active_prefill_tokens_threshold_frac.or(busy.prefill_frac);
        ctx.kv.set_busy(post.model.clone(), busy);
        for (i, inbox) in ctx.shared.inboxes.iter().enumerate() {
            if i != ctx.id {
                let _ = inbox.send(ShardMsg::Busy(post.model.clone(), busy));
            }
        }
    }
    let body = entry(&post.model, &busy);
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}

/// `{"thresholds": [...]}`: every discovered model, unset values `null`.
fn list(ctx: &Rc<ShardCtx>) -> Response {
    let thresholds: Vec<serde_json::Value> = discovered(ctx).iter().map(|m| entry(m, &ctx.kv.busy_for(m))).collect();
    let body = serde_json::json!({ "thresholds": thresholds });
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}

/// The served models, by primary name.
fn discovered(ctx: &Rc<ShardCtx>) -> Vec<String> {
    let registry = ctx.registry();
    let mut names: Vec<String> = registry.serving.values().map(|s| s.name.clone()).collect();
    names.sort();
    names.dedup();
    names
}

fn entry(model: &str, b: &BusyThresholds) -> serde_json::Value {
    serde_json::json!({
        "model": model,
        "active_decode_blocks_threshold": b.decode_blocks_frac,
        "active_prefill_tokens_threshold": b.prefill_tokens,
        "active_prefill_tokens_threshold_frac": b.prefill_frac,
    })
}

fn error(status: u16, text: String) -> Response {
    Response::json(status, serde_json::to_vec(&serde_json::json!({ "error": text })).unwrap_or_default())
}
