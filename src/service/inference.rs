//! The OpenAI inference routes (`/v1/chat/completions`, `/v1/completions`).
//!
//! Checks run in Dynamo 1.6.1's order: content type (415, by the route table), the body limit
//! (413, by `http1`), deserialization and validation (400 / 501, by [`crate::openai`]), then
//! the model lookup in the shard's Registry snapshot (404 `Model not found`).

use super::routes::RouteId;
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::openai;
use crate::shard::ShardCtx;

/// Validate the request and resolve its model.
pub fn handle(ctx: &ShardCtx, route: RouteId, req: &Request) -> Result<Response, Error> {
    let model = match route {
        RouteId::Completions => openai::parse_completion(&req.body)?.model,
        _ => openai::parse_chat(&req.body)?.model,
    };
    let registry = ctx.registry();
    if registry.model(&model).is_none() {
        return Err(Error::new(Kind::NotFound, "Model not found"));
    }
    Err(Error::new(Kind::ServiceUnavailable, format!("Model `{model}` is not ready to serve requests yet")))
}
