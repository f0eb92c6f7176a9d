//! What a tensor model declares, and the KServe metadata calls answered from it.
//!
//! A tensor model's card carries `tensor_model_config` ([`TensorModelConfig`]): its inputs
//! and outputs (name, element type, shape with `-1` for any size) and optionally
//! `triton_model_config`, a serialized Triton `ModelConfig` that supersedes them (Dynamo's
//! Triton worker registers empty lists and the Triton config). As Dynamo 1.6.1 answers:
//!
//! * `ModelConfig`: the Triton config as it was registered, when there is one; otherwise
//!   `platform` and `backend` `dynamo` and the declared tensors (`TYPE_*` types, `dims`).
//! * `ModelMetadata`: versions `["1"]`; with a Triton config its `platform` and its tensors
//!   with a leading `-1` batch dimension when `max_batch_size > 0`; otherwise platform
//!   `dynamo` and the declared tensors.
//!
//! [`Declared`] is the input side of the same description, used to check requests.

use serde::Deserialize;

use super::pb::model_metadata_response::TensorMetadata as PbTensorMetadata;
use super::pb::{self, DataType as PbType};
use crate::plane::tensor::{DataType, TensorMetadata, TensorModelConfig};
use crate::registry::{DeclaredTensor, TensorModel, TritonDeclared};

/// The KServe `datatype` string of an element type.
pub const fn kserve_name(t: DataType) -> &'static str {
    match t {
        DataType::Bool => "BOOL",
        DataType::Uint8 => "UINT8",
        DataType::Uint16 => "UINT16",
        DataType::Uint32 => "UINT32",
        DataType::Uint64 => "UINT64",
        DataType::Int8 => "INT8",
        DataType::Int16 => "INT16",
        DataType::Int32 => "INT32",
        DataType::Int64 => "INT64",
        DataType::Float16 => "FP16",
        DataType::BFloat16 => "BF16",
        DataType::Float32 => "FP32",
        DataType::Float64 => "FP64",
        DataType::Bytes => "BYTES",
    }
}

/// The element type a KServe `datatype` string names.
pub fn from_kserve_name(s: &str) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&t| kserve_name(t) == s)
}

/// The Triton `TYPE_*` of an element type.
pub const fn triton_type(t: DataType) -> PbType {
    match t {
        DataType::Bool => PbType::TypeBool,
        DataType::Uint8 => PbType::TypeUint8,
        DataType::Uint16 => PbType::TypeUint16,
        DataType::Uint32 => PbType::TypeUint32,
        DataType::Uint64 => PbType::TypeUint64,
        DataType::Int8 => PbType::TypeInt8,
        DataType::Int16 => PbType::TypeInt16,
        DataType::Int32 => PbType::TypeInt32,
        DataType::Int64 => PbType::TypeInt64,
        DataType::Float16 => PbType::TypeFp16,
        DataType::BFloat16 => PbType::TypeBf16,
        DataType::Float32 => PbType::TypeFp32,
        DataType::Float64 => PbType::TypeFp64,
        DataType::Bytes => PbType::TypeString,
    }
}

/// The element type of a Triton `TYPE_*` value (`None`: invalid or unknown).
pub fn from_triton_type(v: i32) -> Option<DataType> {
    DataType::ALL.into_iter().find(|&t| triton_type(t) as i32 == v)
}

/// Read a card's `tensor_model_config` (absent: a model declaring nothing).
pub fn load(v: Option<&serde_json::Value>) -> Result<TensorModel, String> {
    let config: TensorModelConfig = match v {
        None | Some(serde_json::Value::Null) => TensorModelConfig::default(),
        Some(v) => TensorModelConfig::deserialize(v).map_err(|e| format!("tensor_model_config: {e}"))?,
    };
    let triton = match triton_config(&config) {
        None => None,
        Some(t) => {
            Some(t.map_err(|e| format!("tensor_model_config.triton_model_config is not a Triton ModelConfig: {e}"))?)
        }
    };
    if let Some(t) = &triton {
        for (what, name, ty) in t
            .input
            .iter()
            .map(|i| ("input", &i.name, i.data_type))
            .chain(t.output.iter().map(|o| ("output", &o.name, o.data_type)))
        {
            if from_triton_type(ty).is_none() {
                return Err(format!("triton_model_config: {what} '{name}' has no valid data_type ({ty})"));
            }
        }
    }
    let triton = triton.map(|t| TritonDeclared {
        platform: t.platform,
        max_batch_size: t.max_batch_size,
        inputs: t
            .input
            .into_iter()
            .map(|i| DeclaredTensor { name: i.name, data_type: i.data_type, dims: i.dims, optional: i.optional })
            .collect(),
        outputs: t
            .output
            .into_iter()
            .map(|o| DeclaredTensor { name: o.name, data_type: o.data_type, dims: o.dims, optional: false })
            .collect(),
    });
    Ok(TensorModel { config, triton })
}

/// The card's Triton `ModelConfig`, decoded from its bytes (`None` when it has none).
fn triton_config(config: &TensorModelConfig) -> Option<Result<pb::ModelConfig, prost::DecodeError>> {
    config.triton_model_config.as_ref().map(|bytes| <pb::ModelConfig as prost::Message>::decode(bytes.0.as_slice()))
}

/// One input a model declares, as a client must send it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Declared {
    pub name: String,
    pub data_type: DataType,
    /// Client-facing shape (with the batch dimension of a batching Triton model); `-1`: any.
    pub shape: Vec<i64>,
    /// May be left out of a request.
    pub optional: bool,
}

/// The inputs a model declares, and the largest batch of a batching Triton model. Empty when
/// the model declares none (then requests are passed to the worker unchecked, as Dynamo does).
pub fn declared_inputs(model: &TensorModel) -> (Vec<Declared>, Option<i64>) {
    match &model.triton {
        Some(t) => {
            let batch = (t.max_batch_size > 0).then_some(i64::from(t.max_batch_size));
            let inputs = t
                .inputs
                .iter()
                .filter_map(|i| {
                    Some(Declared {
                        name: i.name.clone(),
                        data_type: from_triton_type(i.data_type)?,
                        shape: batch.map(|_| -1).into_iter().chain(i.dims.iter().copied()).collect(),
                        optional: i.optional,
                    })
                })
                .collect();
            (inputs, batch)
        }
        // The declared tensors say nothing about being required: none is.
        None => {
            let inputs = model
                .config
                .inputs
                .iter()
                .map(|m| Declared {
                    name: m.name.clone(),
                    data_type: m.data_type,
                    shape: m.shape.clone(),
                    optional: true,
                })
                .collect();
            (inputs, None)
        }
    }
}

fn pb_meta(name: &str, data_type: DataType, shape: Vec<i64>) -> PbTensorMetadata {
    PbTensorMetadata { name: name.to_string(), datatype: kserve_name(data_type).to_string(), shape }
}

fn declared_meta(list: &[TensorMetadata]) -> Vec<PbTensorMetadata> {
    list.iter().map(|m| pb_meta(&m.name, m.data_type, m.shape.clone())).collect()
}

/// `ModelMetadata` of a tensor model named `name`.
pub fn model_metadata(name: String, model: &TensorModel) -> pb::ModelMetadataResponse {
    let versions = vec!["1".to_string()];
    match &model.triton {
        Some(t) => {
            let batch = (t.max_batch_size > 0).then_some(-1);
            let shape = |dims: &[i64]| batch.into_iter().chain(dims.iter().copied()).collect::<Vec<i64>>();
            let ty = |v: i32| from_triton_type(v).unwrap_or(DataType::Bytes);
            pb::ModelMetadataResponse {
                name,
                versions,
                platform: t.platform.clone(),
                inputs: t.inputs.iter().map(|i| pb_meta(&i.name, ty(i.data_type), shape(&i.dims))).collect(),
                outputs: t.outputs.iter().map(|o| pb_meta(&o.name, ty(o.data_type), shape(&o.dims))).collect(),
            }
        }
        None => pb::ModelMetadataResponse {
            name,
            versions,
            platform: "dynamo".to_string(),
            inputs: declared_meta(&model.config.inputs),
            outputs: declared_meta(&model.config.outputs),
        },
    }
}

/// `ModelConfig` of a tensor model named `name`.
pub fn model_config(name: String, model: &TensorModel) -> pb::ModelConfig {
    // Checked when the card arrived: it decodes.
    if let Some(Ok(t)) = triton_config(&model.config) {
        return t;
    }
    let c = &model.config;
    // One tensor of the config: name, `TYPE_*`, dims.
    fn each<T>(list: &[TensorMetadata], make: fn(String, i32, Vec<i64>) -> T) -> Vec<T> {
        list.iter().map(|m| make(m.name.clone(), triton_type(m.data_type) as i32, m.shape.clone())).collect()
    }
    pb::ModelConfig {
        name,
        platform: "dynamo".to_string(),
        backend: "dynamo".to_string(),
        input: each(&c.inputs, |name, data_type, dims| pb::ModelInput { name, data_type, dims, ..Default::default() }),
        output: each(&c.outputs, |name, data_type, dims| pb::ModelOutput {
            name,
            data_type,
            dims,
            ..Default::default()
        }),
        ..Default::default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use prost::Message;

    fn triton_bytes() -> Vec<u8> {
        let c = pb::ModelConfig {
            name: "tc".into(),
            backend: "python".into(),
            max_batch_size: 8,
            input: vec![
                pb::ModelInput {
                    name: "IN".into(),
                    data_type: PbType::TypeInt32 as i32,
                    dims: vec![4],
                    ..Default::default()
                },
                pb::ModelInput {
                    name: "OPT".into(),
                    data_type: PbType::TypeString as i32,
                    dims: vec![-1],
                    optional: true,
                    ..Default::default()
                },
            ],
            output: vec![pb::ModelOutput {
                name: "OUT".into(),
                data_type: PbType::TypeFp32 as i32,
                dims: vec![4],
                ..Default::default()
            }],
            ..Default::default()
        };
        c.encode_to_vec()
    }

    #[test]
    fn type_names_round_trip() {
        for t in DataType::ALL {
            assert_eq!(from_kserve_name(kserve_name(t)), Some(t));
            assert_eq!(from_triton_type(triton_type(t) as i32), Some(t));
        }
        assert_eq!(from_kserve_name("FLOAT"), None);
        assert_eq!(from_triton_type(0), None);
    }

    #[test]
    fn declared_config_describes_the_model() {
        let v = serde_json::json!({"name": "echo",
            "inputs": [{"name": "INPUT0", "data_type": "Int32", "shape": [-1]}],
            "outputs": [{"name": "OUTPUT0", "data_type": "Bytes", "shape": [-1, 2]}]});
        let m = load(Some(&v)).unwrap();
        let md = model_metadata("echo".into(), &m);
        assert_eq!(md.platform, "dynamo");
        assert_eq!((md.inputs[0].datatype.as_str(), md.inputs[0].shape.as_slice()), ("INT32", &[-1][..]));
        assert_eq!((md.outputs[0].datatype.as_str(), md.outputs[0].shape.as_slice()), ("BYTES", &[-1, 2][..]));
        let mc = model_config("echo".into(), &m);
        assert_eq!((mc.platform.as_str(), mc.backend.as_str()), ("dynamo", "dynamo"));
        assert_eq!(mc.output[0].data_type, PbType::TypeString as i32);
        let (inputs, batch) = declared_inputs(&m);
        assert_eq!(batch, None);
        assert!(inputs[0].optional);
    }

    #[test]
    fn triton_config_supersedes() {
        let bytes: Vec<serde_json::Value> = triton_bytes().into_iter().map(serde_json::Value::from).collect();
        let v = serde_json::json!({"name": "", "inputs": [], "outputs": [], "triton_model_config": bytes});
        let m = load(Some(&v)).unwrap();
        let mc = model_config("tc".into(), &m);
        assert_eq!((mc.backend.as_str(), mc.max_batch_size, mc.input[0].dims.as_slice()), ("python", 8, &[4][..]));
        let md = model_metadata("tc".into(), &m);
        assert_eq!(md.inputs[0].shape, vec![-1, 4]);
        assert_eq!(md.inputs[1].datatype, "BYTES");
        assert_eq!(md.outputs[0].shape, vec![-1, 4]);
        let (inputs, batch) = declared_inputs(&m);
        assert_eq!(batch, Some(8));
        assert_eq!(
            inputs[0],
            Declared { name: "IN".into(), data_type: DataType::Int32, shape: vec![-1, 4], optional: false }
        );
        assert!(inputs[1].optional);
    }

    #[test]
    fn bad_configs_are_refused() {
        let e = load(Some(&serde_json::json!({"inputs": [{"name": "x", "data_type": "Nope", "shape": []}]})));
        assert!(e.unwrap_err().contains("tensor_model_config"));
        let e = load(Some(&serde_json::json!({"triton_model_config": [255, 255]})));
        assert!(e.unwrap_err().contains("not a Triton ModelConfig"));
        assert!(load(None).unwrap().config.inputs.is_empty());
    }
}
