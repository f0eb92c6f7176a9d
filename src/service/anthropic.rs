//! The Anthropic Messages routes (`--enable-anthropic-api`): the body handed to the adapter
//! ([`crate::anthropic`]), its answer (or error, in Anthropic's shape) made an HTTP response.
//! The adapter and the driver count the failures of `/v1/messages` in the metrics.

use std::rc::Rc;

use super::routes::RouteId;
use crate::anthropic::{self, Answer};
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::shard::ShardCtx;

/// An error in Anthropic's shape, with its status (`retry-after` on an overload).
pub fn error(e: &Error) -> Response {
    let resp = Response::json(e.status(), e.to_anthropic_body());
    match e.kind() {
        Kind::Overloaded | Kind::ServiceUnavailable => resp.with_header("retry-after", "1"),
        _ => resp,
    }
}

/// Serve one request of an Anthropic route; errors are already rendered.
pub async fn handle(ctx: &Rc<ShardCtx>, route: RouteId, req: &Request, key: super::inference::Key) -> Response {
    match route {
        RouteId::AnthropicMessages => {
            match anthropic::messages(ctx, &req.body, super::inference::caller(ctx, req, key)).await {
                Ok(Answer::Json(body)) => Response::json(200, body),
                Ok(Answer::Stream(rx)) => Response::stream(200, "text/event-stream", rx)
                    .with_header("cache-control", "no-cache")
                    .with_cut(anthropic::SHUTTING_DOWN),
                Err(e) => error(&e),
            }
        }
        RouteId::AnthropicCountTokens => match anthropic::count_tokens(ctx, &req.body).await {
            Ok(body) => Response::json(200, body),
            Err(e) => {
                crate::infer::tracker::count_failure(&ctx.metrics, e.kind());
                error(&e)
            }
        },
        _ => error(&Error::new(Kind::NotFound, "Route not found")),
    }
}
