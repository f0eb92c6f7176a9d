//! Stage 1, resolve: the model a request names, in the shard's Registry snapshot.
//!
//! Unknown: 404 `Model not found`. Known but without a live worker (or a disaggregated model
//! without prefill workers): 503 `Model `x` is not ready to serve requests yet. …` (Dynamo
//! 1.6.1's texts). The one place that looks a model up
//! for inference; adapters that must know the model's kind before building their request
//! (KServe's tensor models) call it first and then [`super::run_resolved`].

use std::sync::Arc;

use crate::error::{Error, Kind};
use crate::registry::{Registry, Serving, TensorModel, TokensModel};

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

/// Find `model` in `registry`, with at least one worker.
pub fn resolve(registry: &Registry, model: &str) -> Result<Resolved, Error> {
    let serving = registry.serving.get(model).ok_or_else(|| Error::new(Kind::NotFound, "Model not found"))?;
    if !serving.ready() {
        return Err(not_ready(model));
    }
    Ok(Resolved { serving: serving.clone() })
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
