//! The OpenAI routes served by workers of other model types (so far embeddings, from workers
//! that take text; docs/dynamo/surfaces.md has the others 1.6.1 serves). Each request is checked, made the
//! object 1.6.1 sends such a worker (its fields in 1.6.1's order, the model's primary name,
//! what 1.6.1 drops dropped), forwarded by the driver, and the worker's response items folded
//! into one answer as 1.6.1 folds them. Shard thread; HTTP is the caller's.

use std::rc::Rc;

use super::embeddings;
use crate::error::{Error, Kind};
use crate::infer::resolve::{model_not_found, resolve_for, ModelKind};
use crate::infer::{Caller, Event, InferRequest, Input};
use crate::metrics::Endpoint;
use crate::shard::ShardCtx;
use bytes::Bytes;

/// A forwarded route.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Surface {
    Embeddings,
}

impl Surface {
    /// The `endpoint` label its requests are counted under.
    pub fn endpoint(self) -> Endpoint {
        match self {
            Surface::Embeddings => Endpoint::Embeddings,
        }
    }
}

/// An answer of a forwarded route.
pub enum Answer {
    /// One JSON body.
    Json(Vec<u8>),
}

/// Answer one request of `surface`.
pub async fn serve(ctx: &Rc<ShardCtx>, surface: Surface, body: &Bytes, caller: Caller) -> Result<Answer, Error> {
    let endpoint = surface.endpoint();
    // Refusals before the worker (bad body, model not found or not ready), counted as 1.6.1
    // counts them.
    let checked = parse_for(surface, body).and_then(|parsed| {
        let resolved = resolve_for(&ctx.registry(), parsed.model(), endpoint)?;
        match resolved.kind() {
            ModelKind::Text => Ok((parsed, resolved)),
            // Token-input embedding models are not served yet: refused as 1.6.1 refuses a
            // model without that surface, never answered wrongly.
            _ => Err(model_not_found()),
        }
    });
    let (mut parsed, resolved) = match checked {
        Ok(checked) => checked,
        Err(e) => {
            super::serve::rejected_body(ctx, endpoint, body, &e);
            return Err(e);
        }
    };
    // The worker and the answer name the model by its primary name.
    parsed.set_model(resolved.model());
    if !ctx.shared.config.nvext_enabled {
        parsed.drop_nvext(endpoint);
    }
    let forward = parsed.to_json()?;
    let mut req = InferRequest::new(endpoint, resolved.model().to_string(), Input::Prompts(Default::default()));
    req.forward = Some(Bytes::from(forward));
    req.set_caller(caller);
    let mut gen = crate::infer::run_resolved(ctx, resolved, &mut req).await?;
    let mut items = Vec::new();
    loop {
        match gen.next().await {
            Some(Event::Chunk(v)) => items.push(v),
            Some(Event::Done(_)) | None => break,
            Some(Event::Error(e)) => return Err(e),
            Some(_) => {}
        }
    }
    match &parsed {
        Parsed::Embeddings(r) => {
            let floats = r.inner.encoding_format != Some(embeddings::EncodingFormat::Base64);
            embeddings::fold(items, floats).map(Answer::Json)
        }
    }
}

/// A parsed request of one surface.
enum Parsed {
    Embeddings(embeddings::NvCreateEmbeddingRequest),
}

impl Parsed {
    fn model(&self) -> &str {
        match self {
            Parsed::Embeddings(r) => &r.inner.model,
        }
    }

    fn set_model(&mut self, name: &str) {
        match self {
            Parsed::Embeddings(r) => r.inner.model = name.to_string(),
        }
    }

    /// `DYN_DISABLE_FRONTEND_NVEXT`: the request's `nvext` dropped whole, as 1.6.1 drops it
    /// on these routes.
    fn drop_nvext(&mut self, endpoint: Endpoint) {
        let dropped = match self {
            Parsed::Embeddings(r) => r.nvext.take().is_some_and(|n| n.annotations.is_some()),
        };
        if dropped {
            super::nvext::warn_dropped(endpoint);
        }
    }

    /// What a Text worker is sent.
    fn to_json(&self) -> Result<Vec<u8>, Error> {
        match self {
            Parsed::Embeddings(r) => serde_json::to_vec(r),
        }
        .map_err(|e| Error::internal(e.to_string()))
    }
}

/// The body as `surface`'s request type.
fn parse_for(surface: Surface, body: &[u8]) -> Result<Parsed, Error> {
    match surface {
        Surface::Embeddings => parse(body).map(Parsed::Embeddings),
    }
}

/// The body as the route's request type, or 1.6.1's 400 with serde's words.
fn parse<T: serde::de::DeserializeOwned>(body: &[u8]) -> Result<T, Error> {
    serde_json::from_slice(body).map_err(|e| {
        Error::new(Kind::BadRequest, format!("Failed to deserialize the JSON body into the target type: {e}"))
    })
}
