//! Stage 1, resolve: the model a request names, in the shard's Registry snapshot.
//!
//! Unknown: 404 `Model not found`. Known but without a live worker (or a disaggregated model
//! without prefill workers): 503 `Model `x` is not ready to serve requests yet. …` (Dynamo
//! 1.6.1's texts). The one place that looks a model up
//! for inference; adapters that must know the model's kind before building their request
//! (KServe's tensor models) call it first and then [`super::run_resolved`].

use std::sync::Arc;

use crate::error::{Error, Kind};
use crate::metrics::Endpoint;
use crate::registry::{Registry, Serving, Surfaces, TensorModel, TokensModel};

/// What serves a resolved model.
#[derive(Clone, Debug)]
pub struct Resolved {
    pub serving: Arc<Serving>,
}

/// The kind of input a model's workers take.
pub enum ModelKind<'a> {
    /// `model_input = Tokens`: the frontend templates and tokenizes.
    Tokens(&'a TokensModel),
    /// `model_input = Text`: the client's request object is forwarded as is.
    Text,
    /// `model_input = Tensor`: tensors in, tensors out (KServe only).
    Tensor(&'a Arc<TensorModel>),
}

impl Resolved {
    /// The model's primary name, whichever alias the request used (1.6.1 answers with it,
    /// sends it to the worker and labels metrics with it).
    pub fn model(&self) -> &str {
        &self.serving.name
    }

    pub fn kind(&self) -> ModelKind<'_> {
        match (&self.serving.tensor, &self.serving.tokens) {
            (Some(t), _) => ModelKind::Tensor(t),
            (None, Some(t)) => ModelKind::Tokens(t),
            (None, None) => ModelKind::Text,
        }
    }
}

/// The surface a request of `endpoint` needs of its model (`None`: tensor requests, whose
/// adapter checks the model's kind itself).
pub fn surface_of(endpoint: Endpoint) -> Option<Surfaces> {
    Some(match endpoint {
        Endpoint::ChatCompletions | Endpoint::AnthropicMessages | Endpoint::Responses => Surfaces::CHAT,
        Endpoint::Completions => Surfaces::COMPLETIONS,
        Endpoint::Tensor => return None,
        Endpoint::Embeddings => Surfaces::EMBEDDING,
        Endpoint::Classify => Surfaces::CLASSIFY,
        Endpoint::Rerank => Surfaces::RERANK,
        Endpoint::Pooling => Surfaces::POOLING,
        Endpoint::Images => Surfaces::IMAGES,
        Endpoint::Videos => Surfaces::VIDEOS,
        Endpoint::Audios => Surfaces::AUDIOS,
    })
}

/// Find `model` in `registry` for a request of `endpoint`: a model whose card does not
/// declare that surface is not found for it (1.6.1 has no engine of that kind for it).
pub fn resolve_for(registry: &Registry, model: &str, endpoint: Endpoint) -> Result<Resolved, Error> {
    let resolved = resolve(registry, model)?;
    match surface_of(endpoint) {
        Some(s) if !resolved.serving.surfaces.contains(s) => Err(model_not_found()),
        _ => Ok(resolved),
    }
}

/// Find `model` in `registry`, with at least one worker.
pub fn resolve(registry: &Registry, model: &str) -> Result<Resolved, Error> {
    let serving = registry.serving.get(model).ok_or_else(model_not_found)?;
    if !serving.ready() {
        return Err(not_ready(model));
    }
    Ok(Resolved { serving: serving.clone() })
}

/// 1.6.1's answer for a model it does not have (or not for the request's kind).
pub fn model_not_found() -> Error {
    Error::new(Kind::NotFound, "Model not found")
}

/// 1.6.1's answer for a model that is known but cannot be served yet: no live worker, or
/// decode workers waiting for prefill workers.
pub fn not_ready(model: &str) -> Error {
    Error::new(
        Kind::ServiceUnavailable,
        format!(
            "Model `{model}` is not ready to serve requests yet. The deployment may still be starting up or is \
             not fully provisioned. Please retry shortly."
        ),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decode_workers_without_prefill_workers_are_not_ready() {
        let serving = Serving {
            name: "m".into(),
            tokens: None,
            tensor: None,
            workers: crate::router::test_workers(1, &[]),
            mdc_sum: None,
            limits: Default::default(),
            reasoning: None,
            tools: None,
            prefill: None,
            pool: crate::registry::Pool::Decode,
            needs_prefill: true,
            remote_indexers: Vec::new(),
            surfaces: crate::registry::Surfaces::CHAT,
            role: Default::default(),
        };
        let mut registry = Registry::default();
        registry.serving.insert("m".into(), Arc::new(serving));
        let e = resolve(&registry, "m").unwrap_err();
        assert_eq!(e.kind(), Kind::ServiceUnavailable);
        assert_eq!(
            e.message(),
            "Model `m` is not ready to serve requests yet. The deployment may still be starting up or is not \
             fully provisioned. Please retry shortly."
        );
        let mut with_prefill = (*registry.serving["m"]).clone();
        with_prefill.prefill = Some(registry.serving["m"].clone());
        registry.serving.insert("m".into(), Arc::new(with_prefill));
        assert!(resolve(&registry, "m").is_ok());
        assert_eq!(resolve(&registry, "x").unwrap_err().kind(), Kind::NotFound);
    }
}
