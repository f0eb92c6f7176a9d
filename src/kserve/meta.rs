//! The KServe v2 health and metadata calls, answered from the shard's Registry snapshot.
//!
//! A completions-backed model is described as Dynamo's KServe frontend describes one:
//! platform and backend `dynamo`, version `1`, inputs `text_input` (BYTES `[1]`) and optional
//! `streaming` (BOOL `[1]`), outputs `text_output` and `finish_reason` (BYTES `[-1]`). A
//! tensor model by what its card declares ([`super::tensor_meta`]).

use super::pb::model_metadata_response::TensorMetadata;
use super::pb::repository_index_response::ModelIndex;
use super::pb::{
    DataType, ModelConfig, ModelConfigRequest, ModelConfigResponse, ModelInput, ModelMetadataRequest,
    ModelMetadataResponse, ModelOutput, ModelReadyRequest, ModelReadyResponse, RepositoryIndexRequest,
    RepositoryIndexResponse, ServerMetadataResponse,
};
use crate::error::{Error, Kind};
use crate::registry::Registry;

/// NOT_FOUND unless `name` is served (listed, with or without workers right now) in
/// `version` (every model has the one version "1"; empty asks for the latest).
pub fn known(registry: &Registry, name: &str, version: &str) -> Result<(), Error> {
    if !registry.serving.contains_key(name) {
        return Err(Error::new(Kind::NotFound, format!("Model '{name}' not found")));
    }
    match version {
        "" | "1" => Ok(()),
        v => Err(Error::new(Kind::NotFound, format!("Model '{name}' has no version '{v}' (only '1')"))),
    }
}

fn ready(registry: &Registry, name: &str) -> bool {
    registry.serving.get(name).is_some_and(|s| s.ready())
}

pub fn model_ready(registry: &Registry, req: ModelReadyRequest) -> Result<ModelReadyResponse, Error> {
    let version_ok = matches!(req.version.as_str(), "" | "1");
    Ok(ModelReadyResponse { ready: version_ok && ready(registry, &req.name) })
}

pub fn server_metadata() -> ServerMetadataResponse {
    ServerMetadataResponse {
        name: "switchyard".to_string(),
        version: env!("CARGO_PKG_VERSION").to_string(),
        extensions: vec!["model_configuration".to_string()],
    }
}

fn tensor(name: &str, datatype: &str, shape: i64) -> TensorMetadata {
    TensorMetadata { name: name.to_string(), datatype: datatype.to_string(), shape: vec![shape] }
}

/// The tensor description of `name`, when it is a tensor model.
fn tensor_model(registry: &Registry, name: &str) -> Option<std::sync::Arc<crate::registry::TensorModel>> {
    registry.serving.get(name).and_then(|s| s.tensor.clone())
}

pub fn model_metadata(registry: &Registry, req: ModelMetadataRequest) -> Result<ModelMetadataResponse, Error> {
    known(registry, &req.name, &req.version)?;
    if let Some(t) = tensor_model(registry, &req.name) {
        return Ok(super::tensor_meta::model_metadata(req.name, &t));
    }
    Ok(ModelMetadataResponse {
        name: req.name,
        versions: vec!["1".to_string()],
        platform: "dynamo".to_string(),
        inputs: vec![tensor("text_input", "BYTES", 1), tensor("streaming", "BOOL", 1)],
        outputs: vec![tensor("text_output", "BYTES", -1), tensor("finish_reason", "BYTES", -1)],
    })
}

pub fn model_config(registry: &Registry, req: ModelConfigRequest) -> Result<ModelConfigResponse, Error> {
    known(registry, &req.name, &req.version)?;
    if let Some(t) = tensor_model(registry, &req.name) {
        return Ok(ModelConfigResponse { config: Some(super::tensor_meta::model_config(req.name, &t)) });
    }
    let input = |name: &str, ty: DataType, optional: bool| ModelInput {
        name: name.to_string(),
        data_type: ty as i32,
        dims: vec![1],
        optional,
        ..Default::default()
    };
    let output = |name: &str| ModelOutput {
        name: name.to_string(),
        data_type: DataType::TypeString as i32,
        dims: vec![-1],
        ..Default::default()
    };
    Ok(ModelConfigResponse {
        config: Some(ModelConfig {
            name: req.name,
            platform: "dynamo".to_string(),
            backend: "dynamo".to_string(),
            input: vec![input("text_input", DataType::TypeString, false), input("streaming", DataType::TypeBool, true)],
            output: vec![output("text_output"), output("finish_reason")],
            ..Default::default()
        }),
    })
}

/// Every served model; with `ready`, only those a worker serves right now.
pub fn repository_index(registry: &Registry, req: RepositoryIndexRequest) -> RepositoryIndexResponse {
    let models = registry
        .serving
        .keys()
        .filter_map(|name| {
            let up = ready(registry, name);
            (up || !req.ready).then(|| ModelIndex {
                name: name.clone(),
                version: "1".to_string(),
                state: if up { "READY" } else { "UNAVAILABLE" }.to_string(),
                reason: if up { String::new() } else { "no worker serves it right now".to_string() },
            })
        })
        .collect();
    RepositoryIndexResponse { models }
}
