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
/// that keep working while requests in flight finish (`/metrics`, `/openapi.json`, `/docs`).
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
        | RouteId::ModelReady
        | RouteId::Embeddings
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
        RouteId::Metrics | RouteId::OpenApi | RouteId::BusyThreshold | RouteId::Docs => None,
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

/// One model by id (the rest of the path after `/v1/models/`, slashes and all), by 1.6.1's
/// precedence: a model of that exact name (503 while it cannot serve); else, for `X/ready`,
/// the readiness of model `X`; else 404 `Model not found`.
pub fn model(ctx: &ShardCtx, id: &[u8]) -> Result<Response, Error> {
    let reg = ctx.registry();
    // The id as 1.6.1's router hands it over: percent-decoded, one leading slash dropped
    // (`/v1/models//m` is model `m`).
    let decoded = crate::util::percent_decode(id).unwrap_or_default();
    let id = decoded.strip_prefix('/').unwrap_or(&decoded);
    if reg.serving.contains_key(id) {
        return match reg.model(id) {
            Some(m) => Ok(Response::json(200, serde_json::to_vec(&model_json(m)).unwrap_or_default())),
            None => Err(crate::infer::resolve::not_ready(id)),
        };
    }
    if let Some(serving) = id.strip_suffix("/ready").and_then(|base| reg.serving.get(base).map(|s| (base, s))) {
        let (status, body) = super::ready::readiness(serving.0, serving.1);
        return Ok(Response::json(status, serde_json::to_vec(&body).unwrap_or_default()));
    }
    Err(crate::infer::resolve::model_not_found())
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
    // 1.6.1 lists neither the document itself, nor the catch-all of unknown Anthropic routes, nor
    // Swagger UI.
    let listed = routes
        .iter()
        .filter(|r| !matches!(r.id, RouteId::AnthropicUnknown | RouteId::OpenApi | RouteId::Docs))
        .flat_map(|r| {
            // The model route is listed as 1.6.1 lists it: the retrieval (ids may hold slashes)
            // and the readiness sub-resource it also serves.
            let ready =
                (r.id == RouteId::Model).then(|| (format!("{}{{model_id}}/ready", r.path), RouteId::ModelReady));
            let path = if r.id == RouteId::Model { format!("{}{{*model_id}}", r.path) } else { r.path.clone() };
            std::iter::once((path, r.id)).chain(ready).map(move |(path, id)| (path, id, r))
        });
    for (path, id, r) in listed {
        let mut ops = serde_json::Map::new();
        for m in r.methods {
            let summary = if id == RouteId::ModelReady { "Whether one model can serve requests" } else { r.summary };
            let mut op = serde_json::json!({
                "summary": summary,
                "operationId": format!("{}_{}", m.as_str().to_ascii_lowercase(),
                    path.trim_matches('/').replace(['/', '.', '{', '}', '*'], "_")),
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
            if matches!(id, RouteId::Model | RouteId::ModelReady) {
                op["parameters"] = serde_json::json!([{
                    "name": "model_id", "in": "path", "required": true, "schema": { "type": "string" }
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
