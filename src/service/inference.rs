//! The OpenAI inference routes (`/v1/chat/completions`, `/v1/completions`).
//!
//! Checks run in Dynamo 1.6.1's order: content type (415, by the route table), the body limit
//! (413, by `http1`), deserialization and validation (400 / 501, by [`crate::openai`]), then
//! the model lookup in the shard's Registry snapshot (404 `Model not found`); the rest of the
//! way is [`super::pipeline`].

use std::rc::Rc;

use super::pipeline::{self, Api};
use super::routes::RouteId;
use crate::error::Error;
use crate::http1::{Request, Response};
use crate::shard::ShardCtx;

/// Serve one inference request.
pub async fn handle(ctx: &Rc<ShardCtx>, route: RouteId, req: &Request) -> Result<Response, Error> {
    let api = match route {
        RouteId::Completions => Api::Completions,
        _ => Api::Chat,
    };
    pipeline::run(ctx, api, req).await
}
