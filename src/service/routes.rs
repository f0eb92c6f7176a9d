//! The route table: which paths exist, which methods they take, whether they read JSON.
//!
//! Built once per shard at start-up from the configured paths; lookups compare bytes, with
//! prefix routes (`/v1/models/{id}`, unknown Anthropic paths, `/docs/…`).

use crate::config::RoutePaths;
use crate::http1::Method;
use crate::registry::Surfaces;

/// What a route does.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouteId {
    Health,
    Live,
    Metrics,
    Models,
    /// `GET /v1/models/{id}`.
    Model,
    OpenApi,
    ChatCompletions,
    Completions,
    /// `POST /v1/responses`.
    Responses,
    /// `POST /v1/responses/input_tokens`.
    ResponsesInputTokens,
    /// `GET` / `POST /busy_threshold`.
    BusyThreshold,
    /// `POST /v1/messages` (`--enable-anthropic-api`).
    AnthropicMessages,
    /// `POST /v1/messages/count_tokens`.
    AnthropicCountTokens,
    /// Any other path below `/v1/messages/`: a 404 in Anthropic's shape, as 1.6.1.
    AnthropicUnknown,
    /// `GET /v1/models/{model_id}/ready` (served by the `Model` route: listed on its own).
    ModelReady,
    /// `POST /v1/embeddings`, forwarded to an embedding model's workers.
    Embeddings,
    /// Swagger UI: `/docs` and every path below `/docs/` (`swagger`); not in `/openapi.json`.
    Docs,
}

/// One route.
#[derive(Clone, Debug)]
pub struct Route {
    pub id: RouteId,
    pub path: String,
    pub methods: &'static [Method],
    /// A POST's body must be JSON (415 otherwise).
    pub json_body: bool,
    pub summary: &'static str,
    /// The route group it belongs to (1.6.1's endpoint types): while the group is closed
    /// (no model of its kind, see [`crate::registry::Surfaces::next_open`]) the route answers
    /// a bare 404. `None`: always served.
    pub group: Option<Surfaces>,
}

impl Route {
    /// The `Allow` header value, spelled as Dynamo 1.6.1 does (`GET,HEAD`): the route's methods,
    /// plus HEAD wherever GET is allowed.
    pub fn allow_header(&self) -> String {
        let mut names: Vec<&str> = self.methods.iter().map(|m| m.as_str()).collect();
        if self.methods.contains(&Method::Get) && !self.methods.contains(&Method::Head) {
            names.push("HEAD");
        }
        names.join(",")
    }
}

/// The route group of `id`: the kind of model that opens it.
fn group_of(id: RouteId) -> Option<Surfaces> {
    Some(match id {
        RouteId::ChatCompletions => Surfaces::CHAT,
        RouteId::Completions => Surfaces::COMPLETIONS,
        RouteId::Responses | RouteId::ResponsesInputTokens => Surfaces::RESPONSES,
        RouteId::AnthropicMessages | RouteId::AnthropicCountTokens => Surfaces::ANTHROPIC,
        RouteId::Embeddings => Surfaces::EMBEDDING,
        _ => return None,
    })
}

/// Every route a shard serves.
pub struct Routes {
    routes: Vec<Route>,
}

const GET: &[Method] = &[Method::Get];
const POST: &[Method] = &[Method::Post];
const GET_POST: &[Method] = &[Method::Post, Method::Get];

impl Routes {
    pub fn new(paths: &RoutePaths) -> Self {
        let r = |id, path: &str, methods, json_body, summary| Route {
            id,
            path: path.to_string(),
            methods,
            json_body,
            summary,
            group: group_of(id),
        };
        let model_prefix = format!("{}/", paths.models.trim_end_matches('/'));
        let mut routes = Routes {
            routes: vec![
                r(RouteId::Health, &paths.health, GET, false, "Health: status, endpoints and worker instances"),
                r(RouteId::Live, &paths.live, GET, false, "Liveness of the frontend process"),
                r(RouteId::Metrics, &paths.metrics, GET, false, "Prometheus metrics"),
                r(RouteId::Models, &paths.models, GET, false, "List the served models"),
                r(RouteId::Model, &model_prefix, GET, false, "One served model"),
                r(RouteId::OpenApi, "/openapi.json", GET, false, "This OpenAPI document"),
                r(RouteId::ChatCompletions, &paths.chat, POST, true, "OpenAI chat completions"),
                r(RouteId::Completions, &paths.completions, POST, true, "OpenAI completions"),
                r(RouteId::Responses, &paths.responses, POST, true, "Create response"),
                r(
                    RouteId::ResponsesInputTokens,
                    &format!("{}/input_tokens", paths.responses.trim_end_matches('/')),
                    POST,
                    true,
                    "Count the input tokens of a response request",
                ),
                r(
                    RouteId::BusyThreshold,
                    "/busy_threshold",
                    GET_POST,
                    true,
                    "The busy thresholds of every model (GET), or set one's (POST)",
                ),
                r(RouteId::Embeddings, &paths.embeddings, POST, true, "Create embeddings"),
            ],
        };
        if let Some(messages) = &paths.anthropic {
            let messages = messages.trim_end_matches('/');
            routes.routes.extend([
                r(RouteId::AnthropicMessages, messages, POST, true, "Anthropic Messages"),
                r(
                    RouteId::AnthropicCountTokens,
                    &format!("{messages}/count_tokens"),
                    POST,
                    true,
                    "Anthropic Messages: count a request's input tokens",
                ),
                r(RouteId::AnthropicUnknown, &format!("{messages}/"), POST, false, "Unknown Anthropic route"),
            ]);
        }
        // Last, so that a path configured below `/docs/` still reaches its own route.
        routes.routes.push(r(RouteId::Docs, "/docs", GET, false, "Swagger UI"));
        routes
    }

    /// The route for `path` (exact match; `/v1/models/{id}` and `/docs/…` by prefix).
    pub fn find(&self, path: &[u8]) -> Option<&Route> {
        self.routes.iter().find(|r| match r.id {
            RouteId::Model => path.len() > r.path.len() && path.starts_with(r.path.as_bytes()),
            RouteId::AnthropicUnknown => path.starts_with(r.path.as_bytes()),
            RouteId::Docs => {
                path.strip_prefix(r.path.as_bytes()).is_some_and(|rest| rest.is_empty() || rest[0] == b'/')
            }
            _ => path == r.path.as_bytes(),
        })
    }

    pub fn iter(&self) -> impl Iterator<Item = &Route> {
        self.routes.iter()
    }
}
