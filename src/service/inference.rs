//! The OpenAI inference routes (`/v1/chat/completions`, `/v1/completions`, `/v1/responses`):
//! the request's body and headers handed to the OpenAI adapter ([`crate::openai::serve`]) or
//! the Responses adapter ([`crate::responses`]), its answer (or error) made an HTTP response.
//!
//! Checks run in Dynamo 1.6.1's order: content type (415, by the route table), the body limit
//! (413, by `http1`), then the adapter's deserialization and validation (400 / 501), the model
//! lookup (404) and the rest of the way. The adapter and the driver count every failure of
//! these routes in the metrics; the service does not count them again.

use std::rc::Rc;

use super::routes::RouteId;
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::openai::serve::{serve, Answer, Api};
use crate::shard::ShardCtx;

/// Serve one inference request; errors are already rendered (and counted).
pub async fn handle(ctx: &Rc<ShardCtx>, route: RouteId, req: &Request, key: Key) -> Response {
    let api = match route {
        RouteId::Completions => Api::Completions,
        _ => Api::Chat,
    };
    match serve(ctx, api, &req.body, pinned_worker(req), caller(ctx, req, key)).await {
        Ok(Answer::Json(body)) => Response::json(200, body),
        Ok(Answer::Stream(rx)) => Response::stream(200, "text/event-stream", rx)
            .with_header("cache-control", "no-cache")
            .with_cut(crate::openai::response::SHUTTING_DOWN),
        Err(e) if e.kind() == Kind::Overloaded => overloaded(ctx, &e),
        Err(e) => Response::error(&e),
    }
}

/// Serve one `/v1/responses` request; errors are already counted by the adapter and driver.
pub async fn responses(ctx: &Rc<ShardCtx>, req: &Request, key: Key) -> Response {
    match crate::responses::serve(ctx, &req.body, caller(ctx, req, key)).await {
        Ok(Answer::Json(body)) => Response::json(200, body),
        Ok(Answer::Stream(rx)) => {
            Response::stream(200, "text/event-stream", rx).with_header("cache-control", "no-cache")
        }
        Err(e) if e.kind() == Kind::Overloaded => overloaded(ctx, &e),
        Err(e) => Response::error(&e),
    }
}

/// Serve one `/v1/responses/input_tokens` request (no worker is called).
pub async fn input_tokens(ctx: &Rc<ShardCtx>, req: &Request) -> Response {
    match crate::responses::input_tokens(ctx, &req.body).await {
        Ok(body) => Response::json(200, body),
        Err(e) => Response::error(&e),
    }
}

/// Serve one request of a route forwarded to workers of another model type (embeddings):
/// the OpenAI adapter's [`crate::openai::surfaces`].
pub async fn surface(ctx: &Rc<ShardCtx>, route: RouteId, req: &Request, key: Key) -> Response {
    use crate::openai::surfaces::{serve, Answer, Surface};
    let surface = match route {
        RouteId::Embeddings => Surface::Embeddings,
        _ => return Response::new(404),
    };
    match serve(ctx, surface, &req.body, caller(ctx, req, key)).await {
        Ok(Answer::Json(body)) => Response::json(200, body),
        Err(e) if e.kind() == Kind::Overloaded => overloaded(ctx, &e),
        Err(e) => Response::error(&e),
    }
}

/// The API key a request was admitted with (`--api-keys-file`).
pub type Key = crate::infer::ApiKey;

/// Who sent `req`: the session its headers name (when session affinity is on), the policy
/// class it asks for, and its `key`.
pub fn caller(ctx: &ShardCtx, req: &Request, key: Key) -> crate::infer::Caller {
    let session = match ctx.sessions.enabled() {
        true => session_id(|name| req.header(name)).map(Rc::from),
        false => None,
    };
    let policy_class = req
        .header(POLICY_CLASS_HEADER)
        .and_then(|v| std::str::from_utf8(v).ok())
        .map(str::trim)
        .filter(|v| !v.is_empty())
        .map(Rc::from);
    // The request classifier reads the session headers whether session affinity is on or not.
    let agent = ctx.shared.classifier.as_ref().and_then(|_| session_id(|name| req.header(name))).map(|id| {
        let last = req.header("x-dynamo-session-final").and_then(|v| std::str::from_utf8(v).ok()).and_then(parse_bool);
        crate::infer::AgentSession { id: Rc::from(id), last: last == Some(true) }
    });
    crate::infer::Caller { session, policy_class, agent, key }
}

/// 1.6.1's reading of a boolean header: `1`, `true`, `on`, `yes` or `0`, `false`, `off`, `no`
/// (any case, trimmed); anything else (or nothing) is no answer.
fn parse_bool(v: &str) -> Option<bool> {
    match v.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "on" | "yes" => Some(true),
        "0" | "false" | "off" | "no" => Some(false),
        _ => None,
    }
}

/// The header naming a request's policy class or family (1.6.1's metadata header
/// `x-dynamo-meta-` with the key `policy-class`); a name no class or family has means the
/// default family.
pub const POLICY_CLASS_HEADER: &str = "x-dynamo-meta-policy-class";

/// An overload refusal: 1.6.1's flat body with the status `DYN_HTTP_OVERLOAD_STATUS_CODE`
/// sets (529 by default), and `Retry-After` (which 1.6.1 does not send) so a client knows it
/// may come back.
fn overloaded(ctx: &ShardCtx, e: &Error) -> Response {
    let status = ctx.shared.config.overload_status;
    let mut body = serde_json::json!({"message": e.message(), "type": "Overloaded", "code": status});
    if let Some(d) = e.details() {
        body["details"] = d.clone();
    }
    Response::json(status, serde_json::to_vec(&body).unwrap_or_default()).with_header("retry-after", "1")
}

/// The worker a request's headers name: `x-dynamo-worker-instance-id` (or the legacy
/// `x-worker-instance-id`); it wins over `nvext.backend_instance_id`.
fn pinned_worker(req: &Request) -> Result<Option<u64>, Error> {
    for name in ["x-dynamo-worker-instance-id", "x-worker-instance-id"] {
        if let Some(v) = req.header(name) {
            let text = std::str::from_utf8(v).unwrap_or("").trim();
            return text
                .parse::<u64>()
                .map(Some)
                .map_err(|_| Error::new(Kind::BadRequest, format!("{name}: '{text}' is not a worker instance id")));
        }
    }
    Ok(None)
}

/// The session a request names, by 1.6.1's headers in its order: `x-dynamo-session-id`;
/// else the first of `x-claude-code-session-id` (with `x-claude-code-agent-id`, that one
/// instead: a sub-agent is a session of its own), `thread-id`, `x-session-id`. Trimmed; an
/// empty value names none.
pub fn session_id<'a>(header: impl Fn(&str) -> Option<&'a [u8]>) -> Option<&'a str> {
    let value =
        |name: &str| header(name).and_then(|v| std::str::from_utf8(v).ok()).map(str::trim).filter(|v| !v.is_empty());
    if let Some(v) = value("x-dynamo-session-id") {
        return Some(v);
    }
    if let Some(v) = value("x-claude-code-session-id") {
        return Some(value("x-claude-code-agent-id").unwrap_or(v));
    }
    value("thread-id").or_else(|| value("x-session-id"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_session_headers_in_1_6_1_order() {
        let id = |hs: &[(&'static str, &'static str)]| {
            let hs = hs.to_vec();
            session_id(move |n| hs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_bytes())).map(str::to_owned)
        };
        assert_eq!(id(&[]), None);
        assert_eq!(id(&[("x-session-id", " c ")]), Some("c".into()));
        assert_eq!(id(&[("x-session-id", "c"), ("thread-id", "d")]), Some("d".into()));
        assert_eq!(id(&[("thread-id", "d"), ("x-claude-code-session-id", "e")]), Some("e".into()));
        assert_eq!(id(&[("x-claude-code-session-id", "e"), ("x-claude-code-agent-id", "sub")]), Some("sub".into()));
        assert_eq!(id(&[("x-claude-code-session-id", "e"), ("x-dynamo-session-id", "a")]), Some("a".into()));
        assert_eq!(id(&[("x-dynamo-session-id", "  "), ("x-session-id", "c")]), Some("c".into()));
    }
}
