//! The OpenAI inference routes (`/v1/chat/completions`, `/v1/completions`).
//!
//! The body must be a JSON object naming a `model`; a malformed body is a 400 in Dynamo's
//! words ("Failed to deserialize the JSON body into the target type: …"). The model is then
//! looked up in the shard's Registry snapshot; a model that is not served is a 404
//! `Model not found`.

use super::routes::RouteId;
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::shard::ShardCtx;

fn deserialize_error(detail: impl std::fmt::Display) -> Error {
    Error::new(Kind::BadRequest, format!("Failed to deserialize the JSON body into the target type: {detail}"))
}

/// Validate the envelope and resolve the model.
pub fn handle(ctx: &ShardCtx, _route: RouteId, req: &Request) -> Result<Response, Error> {
    let value: serde_json::Value = serde_json::from_slice(&req.body).map_err(deserialize_error)?;
    let Some(obj) = value.as_object() else {
        return Err(deserialize_error("invalid type: expected a JSON object"));
    };
    let model = match obj.get("model") {
        Some(serde_json::Value::String(m)) => m,
        Some(_) => return Err(deserialize_error("invalid type for field `model`: expected a string")),
        None => return Err(deserialize_error("missing field `model`")),
    };
    let registry = ctx.registry();
    if registry.model(model).is_none() {
        return Err(Error::new(Kind::NotFound, "Model not found"));
    }
    Err(Error::new(Kind::ServiceUnavailable, format!("Model `{model}` is not ready to serve requests yet")))
}
