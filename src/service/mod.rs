//! The HTTP service of a shard: the route table and the dispatch of each request.
//!
//! [`Frontend`] implements [`crate::http1::Service`]. For every request it:
//! 1. finds the route by exact path (query ignored; `DYN_HTTP_SVC_*_PATH` overrides applied at
//!    start-up) → 404 `Route not found: METHOD /path` when there is none;
//! 2. checks the method → 405 with `Allow` listing what the route takes (HEAD follows GET);
//! 3. on JSON routes checks `Content-Type` → 415 unless it is `application/json` (or `+json`);
//! 4. runs the route's handler ([`ops`] for health, live, models, metrics and the OpenAPI
//!    document; [`inference`] for the OpenAI routes, whose failures the driver counts;
//!    [`anthropic`] for the Anthropic Messages routes, which answer errors in Anthropic's
//!    shape; [`swagger`] for Swagger UI at `/docs`, which answers its own methods and misses);
//! 5. records the status in the shard's metrics, and any other error in `failures_total`.
//!
//! Over HTTP/2 the same service answers every stream ([`h2`]); gRPC calls go to
//! [`crate::kserve`].
//!
//! Everything here runs on one shard thread and owns no locks (but the once-per-process
//! inflation of Swagger UI's rarely asked files, [`swagger`]). What crosses threads is the
//! scrape of other shards' metrics (through their inboxes) and the `Arc<Registry>` snapshot.

pub mod anthropic;
mod busy;
mod h2;
pub mod inference;
pub mod ops;
mod ready;
pub mod routes;
mod swagger;

use std::rc::Rc;
use std::sync::Arc;

use crate::error::{Error, Kind};
use crate::http1::{Method, Request, Response, Service};
use crate::infer::tracker;
use crate::shard::ShardCtx;
use routes::{RouteId, Routes};

/// Start the shards, each serving the HTTP/1.1, HTTP/2 and gRPC routes of this module.
///
/// The request plane's TLS (`--tcp-tls-*`) is read and set up here, before any shard starts,
/// so a certificate that cannot be used stops start-up; every shard's request plane takes it.
pub fn start(config: std::sync::Arc<crate::config::Config>) -> std::io::Result<crate::shard::Server> {
    // API keys and the request plane's TLS: read before anything starts, so a bad file stops
    // the start.
    let keys = match &config.api_keys_file {
        Some(path) => Some(Arc::new(crate::auth::Keys::load(path).map_err(std::io::Error::other)?)),
        None => None,
    };
    crate::tls::plane::install(&config.plane_tls)
        .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("request-plane TLS: {e}")))?;
    crate::shard::Server::start(config, move |ctx| Rc::new(Frontend::new(ctx, keys.clone())))
}

/// The per-shard HTTP service.
pub struct Frontend {
    ctx: Rc<ShardCtx>,
    routes: Rc<Routes>,
    /// The API keys inference requests need (`--api-keys-file`); `None`: no keys.
    keys: Option<Arc<crate::auth::Keys>>,
}

impl Frontend {
    pub fn new(ctx: Rc<ShardCtx>, keys: Option<Arc<crate::auth::Keys>>) -> Self {
        let routes = Rc::new(Routes::new(&ctx.shared.config.paths));
        Frontend { ctx, routes, keys }
    }

    /// Admit a request of an inference route by its API key (when keys are on): the key, or
    /// the refusal (401, or 429 with the seconds until the window turns).
    fn admit<'a>(&self, header: impl Fn(&str) -> Option<&'a [u8]>) -> Result<inference::Key, crate::auth::Refusal> {
        match &self.keys {
            None => Ok(None),
            Some(keys) => keys.admit(header).map(Some),
        }
    }

    async fn dispatch(&self, req: &Request) -> Result<Response, Error> {
        let path = req.path();
        let Some(route) = self.routes.find(path) else {
            return Err(Error::new(
                Kind::NotFound,
                format!("Route not found: {} {}", method_name(req), String::from_utf8_lossy(path)),
            ));
        };
        if route.id == RouteId::AnthropicUnknown {
            let e = Error::new(
                Kind::NotFound,
                format!("Route not found: {} {}", method_name(req), String::from_utf8_lossy(path)),
            );
            tracker::count_failure(&self.ctx.metrics, e.kind());
            return Ok(anthropic::error(&e));
        }
        let method = req.head.method;
        if route.id == RouteId::Docs {
            // Swagger UI's files answer their own methods and misses (bodiless, as 1.6.1's).
            return Ok(swagger::serve(method, path));
        }
        let allowed =
            route.methods.contains(&method) || (method == Method::Head && route.methods.contains(&Method::Get));
        if !allowed {
            let allow = route.allow_header();
            let e = Error::new(
                Kind::MethodNotAllowed,
                format!(
                    "Method {} not allowed on {}; allowed: {allow}",
                    method_name(req),
                    String::from_utf8_lossy(path)
                ),
            );
            tracker::count_failure(&self.ctx.metrics, e.kind());
            return Ok(Response::error(&e).with_header("allow", allow));
        }
        if let Some(group) = route.group {
            // 1.6.1 answers a route of a closed group with a bare 404 (no body).
            let anthropic = self.ctx.shared.config.paths.anthropic.is_some();
            if !self.ctx.with_registry(|r| r.open(anthropic).contains(group)) {
                return Ok(Response::new(404));
            }
        }
        if route.json_body && req.head.method == Method::Post && !is_json(req.content_type()) {
            let e = Error::new(Kind::UnsupportedMediaType, "Expected request with Content-Type application/json");
            if matches!(route.id, RouteId::AnthropicMessages | RouteId::AnthropicCountTokens) {
                tracker::count_failure(&self.ctx.metrics, e.kind());
                return Ok(anthropic::error(&e));
            }
            return Err(e);
        }
        if req.arrived_draining {
            if let Some(resp) = ops::draining(route.id) {
                return Ok(resp);
            }
        }
        let key = match route.id {
            RouteId::ChatCompletions
            | RouteId::Completions
            | RouteId::Embeddings
            | RouteId::Responses
            | RouteId::ResponsesInputTokens
            | RouteId::AnthropicMessages
            | RouteId::AnthropicCountTokens => match self.admit(|name| req.header(name)) {
                Ok(key) => key,
                Err(refusal) => {
                    tracker::count_failure(&self.ctx.metrics, refusal.error.kind());
                    let resp = match route.id {
                        RouteId::AnthropicMessages | RouteId::AnthropicCountTokens => anthropic::error(&refusal.error),
                        _ => Response::error(&refusal.error),
                    };
                    return Ok(match refusal.retry_after {
                        Some(s) => resp.with_header("retry-after", s.to_string()),
                        None => resp,
                    });
                }
            },
            _ => None,
        };
        match route.id {
            RouteId::Health => Ok(ops::health(&self.ctx)),
            RouteId::Live => Ok(ops::live()),
            RouteId::Models => Ok(ops::models(&self.ctx)),
            RouteId::Model | RouteId::ModelReady => ops::model(&self.ctx, &path[route.path.len()..]),
            RouteId::Metrics => Ok(ops::metrics(&self.ctx, self.keys.as_deref()).await),
            RouteId::OpenApi => Ok(ops::openapi(&self.routes)),
            RouteId::ChatCompletions | RouteId::Completions => {
                Ok(inference::handle(&self.ctx, route.id, req, key).await)
            }
            RouteId::Responses => Ok(inference::responses(&self.ctx, req, key).await),
            RouteId::ResponsesInputTokens => Ok(inference::input_tokens(&self.ctx, req).await),
            RouteId::BusyThreshold => Ok(busy::handle(&self.ctx, req)),
            RouteId::Docs => Ok(swagger::serve(method, path)),
            RouteId::AnthropicMessages | RouteId::AnthropicCountTokens | RouteId::AnthropicUnknown => {
                Ok(anthropic::handle(&self.ctx, route.id, req, key).await)
            }
            RouteId::Embeddings => Ok(inference::surface(&self.ctx, route.id, req, key).await),
        }
    }
}

impl Service for Frontend {
    async fn call(&self, req: Request) -> Response {
        let resp = match self.dispatch(&req).await {
            Ok(r) => r,
            Err(e) => {
                tracker::count_failure(&self.ctx.metrics, e.kind());
                Response::error(&e)
            }
        };
        let resp = echo_request_id(&req, resp);
        self.ctx.metrics.http_response(resp.status);
        resp
    }
}

/// `x-request-id` from the client comes back on the response, as Dynamo does.
fn echo_request_id(req: &Request, resp: Response) -> Response {
    match req.header("x-request-id").and_then(|v| std::str::from_utf8(v).ok()) {
        Some(id) if !id.is_empty() && id.len() <= 256 => resp.with_header("x-request-id", id),
        _ => resp,
    }
}

fn method_name(req: &Request) -> String {
    match req.head.method {
        Method::Other => {
            // The method token is the start of the request line.
            let line = &req.head_bytes[..];
            let end = line.iter().position(|&b| b == b' ').unwrap_or(0);
            String::from_utf8_lossy(&line[..end]).into_owned()
        }
        m => m.as_str().to_string(),
    }
}

/// `application/json`, or any `+json` media type, parameters ignored.
pub fn is_json(content_type: Option<&[u8]>) -> bool {
    let Some(ct) = content_type else { return false };
    let essence = ct.split(|&b| b == b';').next().unwrap_or(&[]);
    let essence = essence.trim_ascii();
    essence.eq_ignore_ascii_case(b"application/json")
        || (essence.len() > 5 && essence[essence.len() - 5..].eq_ignore_ascii_case(b"+json"))
}

#[cfg(test)]
mod tests {
    use super::is_json;

    #[test]
    fn json_media_types() {
        assert!(is_json(Some(b"application/json")));
        assert!(is_json(Some(b"Application/JSON; charset=utf-8")));
        assert!(is_json(Some(b"application/vnd.api+json")));
        assert!(!is_json(Some(b"text/plain")));
        assert!(!is_json(Some(b"application/x-www-form-urlencoded")));
        assert!(!is_json(None));
    }
}
