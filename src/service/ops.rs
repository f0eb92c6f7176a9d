//! Operational routes: `/health`, `/live`, `/v1/models`, `/v1/models/{id}`, `/metrics` and
//! `/openapi.json`, with the bodies Dynamo 1.6.1 sends.

use std::time::Duration;

use super::routes::{RouteId, Routes};
use crate::error::{Error, Kind};
use crate::http1::Response;
use crate::metrics;
use crate::shard::{ShardCtx, ShardMsg};

/// `{"status":"healthy","endpoints":[...],"instances":[...]}`.
pub fn health(ctx: &ShardCtx) -> Response {
    let reg = ctx.registry();
    let body = serde_json::json!({
        "status": "healthy",
        "endpoints": reg.endpoints,
        "instances": reg.instances,
    });
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}

/// What a draining frontend answers instead (Dynamo 1.6.1's shapes), or `None` for routes
/// that keep working while requests in flight finish (`/metrics`, `/openapi.json`).
pub fn draining(route: RouteId) -> Option<Response> {
    match route {
        RouteId::Health => Some(Response::json_static(
            503,
            br#"{"status":"not_ready","stage":"draining","message":"Service is not ready"}"#,
        )),
        RouteId::Live => {
            Some(Response::json_static(503, br#"{"status":"shutting_down","message":"Service is shutting down"}"#))
        }
        RouteId::Models
        | RouteId::Model
        | RouteId::ChatCompletions
        | RouteId::Completions
        | RouteId::Responses
        | RouteId::ResponsesInputTokens => {
            Some(Response::error(&Error::new(Kind::ServiceUnavailable, "Service is not ready")))
        }
        RouteId::AnthropicMessages | RouteId::AnthropicCountTokens | RouteId::AnthropicUnknown => {
            let e = Error::new(Kind::ServiceUnavailable, "Service is not ready");
            Some(Response::json(503, e.to_anthropic_body()))
        }
        RouteId::Metrics | RouteId::OpenApi | RouteId::BusyThreshold => None,
    }
}

/// `{"status":"live","message":"Service is live"}`.
pub fn live() -> Response {
    Response::json_static(200, br#"{"status":"live","message":"Service is live"}"#)
}

fn model_json(m: &crate::registry::ModelEntry) -> serde_json::Value {
    serde_json::json!({
        "id": m.name,
        "object": "model",
        "created": m.created,
        "owned_by": "nvidia",
        "context_window": m.context_window,
    })
}

/// `{"object":"list","data":[...]}`.
pub fn models(ctx: &ShardCtx) -> Response {
    let reg = ctx.registry();
    let data: Vec<serde_json::Value> = reg.models.iter().map(model_json).collect();
    let body = serde_json::json!({ "object": "list", "data": data });
    Response::json(200, serde_json::to_vec(&body).unwrap_or_default())
}

/// One model by id (the rest of the path after `/v1/models/`), or 404 `Model not found`.
pub fn model(ctx: &ShardCtx, id: &[u8]) -> Result<Response, Error> {
    let reg = ctx.registry();
    let id = std::str::from_utf8(id).unwrap_or("");
    match reg.model(id) {
        Some(m) => Ok(Response::json(200, serde_json::to_vec(&model_json(m)).unwrap_or_default())),
        None => Err(Error::new(Kind::NotFound, "Model not found")),
    }
}

/// How long a scrape waits for the other shards.
const SCRAPE_WAIT: Duration = Duration::from_secs(2);

/// Ask every other shard for its snapshot, merge with ours, render.
pub async fn metrics(ctx: &ShardCtx, keys: Option<&crate::auth::Keys>) -> Response {
    let shared = &ctx.shared;
    let mut merged = ctx.metrics.snapshot();
    merged.kv = ctx.kv.stats();
    let (tx, rx) = flume::bounded(shared.inboxes.len());
    let mut asked = 0;
    for (i, inbox) in shared.inboxes.iter().enumerate() {
        if i != ctx.id && inbox.send(ShardMsg::Snapshot(tx.clone())).is_ok() {
            asked += 1;
        }
    }
    drop(tx);
    for _ in 0..asked {
        let got = monoio::select! {
            r = rx.recv_async() => r.ok(),
            _ = monoio::time::sleep(SCRAPE_WAIT) => None,
        };
        match got {
            Some(s) => merged.merge(&s),
            None => break,
        }
    }
    let uptime = shared.started.elapsed().as_secs_f64();
    let registry = ctx.registry();
    let migration_limit = u64::from(shared.config.migration_limit);
    // One sample per model, under its primary name (aliases share its serving data).
    let served: Vec<_> = registry
        .serving
        .iter()
        .filter(|(name, s)| **name == s.name)
        .map(|(name, s)| metrics::ServedModel { name, ready: s.ready(), migration_limit, limits: s.limits })
        .collect();
    let skipped: Vec<(&str, u64)> = registry.skipped.iter().map(|(b, n)| (*b, *n)).collect();
    let discovery = metrics::Discovery { skipped: &skipped };
    let prefix = &shared.config.metrics_prefix;
    let mut text = metrics::render(prefix, &merged, &served, &discovery, uptime, shared.inboxes.len());
    metrics::kv::render_classes(&mut text, prefix, &shared.class_book.rows());
    if let Some(keys) = keys {
        keys.render(&mut text);
    }
    Response::text(200, "text/plain; version=0.0.4; charset=utf-8", text)
}

/// An OpenAPI 3.1 document of the routes this frontend serves.
pub fn openapi(routes: &Routes) -> Response {
    let mut paths = serde_json::Map::new();
    for r in routes.iter().filter(|r| r.id != RouteId::AnthropicUnknown) {
        let path = if r.id == RouteId::Model { format!("{}{{model}}", r.path) } else { r.path.clone() };
        let mut ops = serde_json::Map::new();
        for m in r.methods {
            let mut op = serde_json::json!({
                "summary": r.summary,
                "operationId": format!("{}_{}", m.as_str().to_ascii_lowercase(),
                    path.trim_matches('/').replace(['/', '.', '{', '}'], "_")),
                "responses": {
                    "200": { "description": "Successful response" },
                    "400": { "description": "Bad request - invalid input" },
                    "404": { "description": "Not found" },
                    "500": { "description": "Internal server error" }
                }
            });
            if r.json_body {
                op["requestBody"] = serde_json::json!({
                    "required": true,
                    "content": { "application/json": { "schema": { "type": "object" } } }
                });
            }
            if r.id == RouteId::Responses {
                op["requestBody"]["content"]["application/json"]["example"] =
                    serde_json::json!({"model": "Qwen/Qwen3-0.6B", "input": "What is the capital of France?"});
            }
            if r.id == RouteId::Model {
                op["parameters"] = serde_json::json!([{
                    "name": "model", "in": "path", "required": true, "schema": { "type": "string" }
                }]);
            }
            ops.insert(m.as_str().to_ascii_lowercase(), op);
        }
        paths.insert(path, serde_json::Value::Object(ops));
    }
    let doc = serde_json::json!({
        "openapi": "3.1.0",
        "info": {
            "title": "switchyard OpenAI-compatible frontend",
            "description": "OpenAI-compatible HTTP API served by switchyard.",
            "license": { "name": "Apache-2.0" },
            "version": env!("CARGO_PKG_VERSION"),
        },
        "servers": [{ "url": "/", "description": "Current server" }],
        "paths": paths,
    });
    Response::json(200, serde_json::to_vec(&doc).unwrap_or_default())
}
