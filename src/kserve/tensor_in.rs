//! A KServe `ModelInferRequest` for a tensor model becomes the worker's request body
//! ([`TensorRequest`], Dynamo's `NvCreateTensorRequest`).
//!
//! Each input becomes a tensor of the same name, type and shape. Its data comes typed
//! (`contents`: the field of its type, e.g. `int_contents` for INT8/INT16/INT32) or raw
//! (`raw_input_contents`, one entry per input in input order: little-endian elements, BYTES
//! elements as a 4-byte little-endian length then the bytes); a request uses one or the other
//! for all of its inputs. FP16 and BF16 have no typed field and come raw only. Request,
//! input and requested-output `parameters` are forwarded with their types.
//!
//! Refused with INVALID_ARGUMENT, naming the input: an unknown `datatype`, no data, a data
//! size that does not match the shape (or a negative dimension), typed values out of their
//! type's range (Dynamo 1.6.1 truncates them), raw and typed data mixed (1.6.1 answers such a
//! request by resetting the stream). When the model declares its inputs (card
//! `tensor_model_config`, or its Triton config) a request must also match them: known names,
//! the declared type, the declared rank and every fixed dimension, a batch of at most
//! `max_batch_size`, every non-optional Triton input present. 1.6.1 does not check these and
//! leaves them to the worker; here a bad request never reaches a worker. A model that
//! declares nothing gets every well-formed request.

use std::collections::HashMap;

use super::pb::infer_parameter::ParameterChoice;
use super::pb::model_infer_request::InferInputTensor;
use super::pb::{InferParameter, InferTensorContents, ModelInferRequest};
use super::tensor_meta::{declared_inputs, from_kserve_name, kserve_name, Declared};
use crate::error::{Error, Kind};
use crate::plane::tensor::{
    element_count, ByteString, DataType, ParamValue, Params, RequestedOutput, Tensor, TensorData, TensorMetadata,
    TensorRequest,
};
use crate::registry::TensorModel;

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(Kind::BadRequest, msg.into())
}

/// A converted request and whether its data came raw (then the answer is raw too).
#[derive(Debug)]
pub struct Converted {
    pub wire: TensorRequest,
    pub raw: bool,
}

/// Convert KServe parameters (a parameter without a value is refused).
pub fn params(from: HashMap<String, InferParameter>) -> Result<Params, Error> {
    from.into_iter()
        .map(|(k, v)| {
            let value = match v.parameter_choice {
                Some(ParameterChoice::BoolParam(b)) => ParamValue::Bool(b),
                Some(ParameterChoice::Int64Param(i)) => ParamValue::Int64(i),
                Some(ParameterChoice::Uint64Param(u)) => ParamValue::Uint64(u),
                Some(ParameterChoice::DoubleParam(d)) => ParamValue::Double(d),
                Some(ParameterChoice::StringParam(s)) => ParamValue::String(s),
                None => return Err(invalid(format!("Parameter '{k}' has no value"))),
            };
            Ok((k, value))
        })
        .collect()
}

/// Check and convert a request for `model` (named `name`).
pub fn convert(req: ModelInferRequest, name: &str, model: &TensorModel) -> Result<Converted, Error> {
    let raw = super::infer::raw_layout(&req)?;
    let mut raws = req.raw_input_contents.into_iter();
    let mut tensors = Vec::with_capacity(req.inputs.len());
    for input in req.inputs {
        let raw_data = raws.next();
        tensors.push(input_tensor(input, raw_data)?);
    }
    let outputs = req
        .outputs
        .into_iter()
        .map(|o| Ok(RequestedOutput { name: o.name, parameters: params(o.parameters)? }))
        .collect::<Result<Vec<_>, Error>>()?;
    check_declared(&tensors, &outputs, name, model)?;
    let wire = TensorRequest {
        id: (!req.id.is_empty()).then_some(req.id),
        model: req.model_name,
        tensors,
        parameters: params(req.parameters)?,
        outputs,
    };
    Ok(Converted { wire, raw })
}

fn input_tensor(input: InferInputTensor, raw: Option<Vec<u8>>) -> Result<Tensor, Error> {
    let name = input.name;
    let data_type = from_kserve_name(&input.datatype).ok_or_else(|| {
        let known: Vec<&str> = DataType::ALL.iter().map(|&t| kserve_name(t)).collect();
        invalid(format!("input '{name}': invalid datatype '{}'; expected one of {}", input.datatype, known.join(", ")))
    })?;
    let count = element_count(&input.shape).map_err(|e| invalid(format!("input '{name}': {e}")))?;
    let data = match (input.contents, raw) {
        (Some(_), Some(_)) => {
            return Err(invalid(format!(
                "input '{name}' has `contents` while the request uses `raw_input_contents`; mixing them is not allowed"
            )))
        }
        (Some(c), None) => typed(c, data_type, &name)?,
        (None, Some(r)) => from_raw(&r, data_type, count, &name)?,
        (None, None) => return Err(invalid(format!("input '{name}' has no data"))),
    };
    let tensor = Tensor {
        metadata: TensorMetadata { name, data_type, shape: input.shape, parameters: params(input.parameters)? },
        data,
    };
    tensor.check().map_err(invalid)?;
    Ok(tensor)
}

/// Narrow typed values to their element type, refusing any that do not fit.
fn narrow<S: Copy + std::fmt::Display, T: TryFrom<S>>(v: Vec<S>, ty: DataType, name: &str) -> Result<Vec<T>, Error> {
    v.into_iter()
        .map(|x| {
            T::try_from(x).map_err(|_| invalid(format!("input '{name}': value {x} does not fit {}", kserve_name(ty))))
        })
        .collect()
}

fn typed(c: InferTensorContents, ty: DataType, name: &str) -> Result<TensorData, Error> {
    Ok(match ty {
        DataType::Bool => TensorData::Bool(c.bool_contents),
        DataType::Uint8 => TensorData::Uint8(narrow(c.uint_contents, ty, name)?),
        DataType::Uint16 => TensorData::Uint16(narrow(c.uint_contents, ty, name)?),
        DataType::Uint32 => TensorData::Uint32(c.uint_contents),
        DataType::Uint64 => TensorData::Uint64(c.uint64_contents),
        DataType::Int8 => TensorData::Int8(narrow(c.int_contents, ty, name)?),
        DataType::Int16 => TensorData::Int16(narrow(c.int_contents, ty, name)?),
        DataType::Int32 => TensorData::Int32(c.int_contents),
        DataType::Int64 => TensorData::Int64(c.int64_contents),
        DataType::Float32 => TensorData::Float32(c.fp32_contents),
        DataType::Float64 => TensorData::Float64(c.fp64_contents),
        DataType::Bytes => TensorData::Bytes(c.bytes_contents.into_iter().map(ByteString).collect()),
        DataType::Float16 | DataType::BFloat16 => {
            return Err(invalid(format!(
                "input '{name}': {} data has no typed contents field; send it in `raw_input_contents`",
                kserve_name(ty)
            )))
        }
    })
}

/// Little-endian elements of `N` bytes each.
fn le<const N: usize, T>(raw: &[u8], f: fn([u8; N]) -> T) -> Vec<T> {
    raw.chunks_exact(N).map(|c| f(c.try_into().unwrap_or([0; N]))).collect()
}

fn from_raw(raw: &[u8], ty: DataType, count: usize, name: &str) -> Result<TensorData, Error> {
    if ty == DataType::Bytes {
        let elements = super::infer::raw_bytes_elements(raw).map_err(|e| invalid(format!("input '{name}': {e}")))?;
        if elements.len() != count {
            return Err(invalid(format!(
                "input '{name}': raw data holds {} BYTES elements, its shape implies {count}",
                elements.len()
            )));
        }
        return Ok(TensorData::Bytes(elements.into_iter().map(|e| ByteString(e.to_vec())).collect()));
    }
    let size = ty.size();
    if raw.len() % size != 0 || raw.len() / size != count {
        return Err(invalid(format!(
            "input '{name}': raw data of {} bytes does not hold the {count} {} elements its shape implies ({} bytes)",
            raw.len(),
            kserve_name(ty),
            count.saturating_mul(size)
        )));
    }
    Ok(match ty {
        DataType::Bool => TensorData::Bool(raw.iter().map(|&b| b != 0).collect()),
        DataType::Uint8 => TensorData::Uint8(raw.to_vec()),
        DataType::Int8 => TensorData::Int8(raw.iter().map(|&b| b as i8).collect()),
        DataType::Uint16 => TensorData::Uint16(le(raw, u16::from_le_bytes)),
        DataType::Float16 => TensorData::Float16(le(raw, u16::from_le_bytes)),
        DataType::BFloat16 => TensorData::BFloat16(le(raw, u16::from_le_bytes)),
        DataType::Int16 => TensorData::Int16(le(raw, i16::from_le_bytes)),
        DataType::Uint32 => TensorData::Uint32(le(raw, u32::from_le_bytes)),
        DataType::Int32 => TensorData::Int32(le(raw, i32::from_le_bytes)),
        DataType::Float32 => TensorData::Float32(le(raw, f32::from_le_bytes)),
        DataType::Uint64 => TensorData::Uint64(le(raw, u64::from_le_bytes)),
        DataType::Int64 => TensorData::Int64(le(raw, i64::from_le_bytes)),
        DataType::Float64 => TensorData::Float64(le(raw, f64::from_le_bytes)),
        DataType::Bytes => unreachable!("handled above"),
    })
}

fn shape_text(s: &[i64]) -> String {
    let dims: Vec<String> = s.iter().map(i64::to_string).collect();
    format!("[{}]", dims.join(","))
}

/// The request against what the model declares (nothing to check when it declares nothing).
fn check_declared(
    tensors: &[Tensor],
    outputs: &[RequestedOutput],
    name: &str,
    model: &TensorModel,
) -> Result<(), Error> {
    let (declared, batch) = declared_inputs(model);
    if !declared.is_empty() {
        for t in tensors {
            let m = &t.metadata;
            if tensors.iter().filter(|o| o.metadata.name == m.name).count() > 1 {
                return Err(invalid(format!("input '{}' is given more than once", m.name)));
            }
            let Some(d) = declared.iter().find(|d| d.name == m.name) else {
                let names: Vec<&str> = declared.iter().map(|d| d.name.as_str()).collect();
                return Err(invalid(format!(
                    "unexpected inference input '{}' for model '{name}'; its inputs are: {}",
                    m.name,
                    names.join(", ")
                )));
            };
            check_one(m, d, batch, name)?;
        }
        if let Some(missing) =
            declared.iter().find(|d| !d.optional && !tensors.iter().any(|t| t.metadata.name == d.name))
        {
            return Err(invalid(format!("model '{name}' requires input '{}', which the request lacks", missing.name)));
        }
    }
    let declared_outputs: Vec<&str> = match &model.triton {
        Some(t) => t.outputs.iter().map(|o| o.name.as_str()).collect(),
        None => model.config.outputs.iter().map(|o| o.name.as_str()).collect(),
    };
    if !declared_outputs.is_empty() {
        if let Some(o) = outputs.iter().find(|o| !declared_outputs.contains(&o.name.as_str())) {
            return Err(invalid(format!(
                "unexpected inference output '{}' for model '{name}'; its outputs are: {}",
                o.name,
                declared_outputs.join(", ")
            )));
        }
    }
    Ok(())
}

fn check_one(m: &TensorMetadata, d: &Declared, batch: Option<i64>, model: &str) -> Result<(), Error> {
    if m.data_type != d.data_type {
        return Err(invalid(format!(
            "inference input '{}' data-type is '{}', but model '{model}' expects '{}'",
            m.name,
            kserve_name(m.data_type),
            kserve_name(d.data_type)
        )));
    }
    let fits =
        m.shape.len() == d.shape.len() && m.shape.iter().zip(&d.shape).all(|(&got, &want)| want < 0 || got == want);
    if !fits {
        return Err(invalid(format!(
            "unexpected shape for input '{}' for model '{model}'. Expected {}, got {}",
            m.name,
            shape_text(&d.shape),
            shape_text(&m.shape)
        )));
    }
    if let (Some(max), Some(&b)) = (batch, m.shape.first()) {
        if b < 1 || b > max {
            return Err(invalid(format!(
                "inference request batch-size {b} for input '{}' is outside 1..={max}, the batch sizes model '{model}' takes",
                m.name
            )));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn model(v: serde_json::Value) -> TensorModel {
        super::super::tensor_meta::load(Some(&v)).unwrap()
    }

    fn echo() -> TensorModel {
        model(serde_json::json!({"name": "echo",
            "inputs": [{"name": "INPUT0", "data_type": "Int32", "shape": [-1]},
                       {"name": "INPUT1", "data_type": "Bytes", "shape": [-1]}],
            "outputs": [{"name": "OUTPUT0", "data_type": "Int32", "shape": [-1]}]}))
    }

    fn input(name: &str, datatype: &str, shape: Vec<i64>, contents: Option<InferTensorContents>) -> InferInputTensor {
        InferInputTensor { name: name.into(), datatype: datatype.into(), shape, parameters: HashMap::new(), contents }
    }

    fn ints(v: Vec<i32>) -> Option<InferTensorContents> {
        Some(InferTensorContents { int_contents: v, ..Default::default() })
    }

    fn request(inputs: Vec<InferInputTensor>, raw: Vec<Vec<u8>>) -> ModelInferRequest {
        ModelInferRequest { model_name: "echo".into(), inputs, raw_input_contents: raw, ..Default::default() }
    }

    fn err(r: ModelInferRequest, m: &TensorModel) -> String {
        let e = convert(r, "echo", m).unwrap_err();
        assert_eq!(e.kind(), Kind::BadRequest);
        e.message().to_string()
    }

    #[test]
    fn typed_and_raw_inputs() {
        let r = request(vec![input("INPUT0", "INT32", vec![3], ints(vec![1, -2, 3]))], vec![]);
        let c = convert(r, "echo", &echo()).unwrap();
        assert!(!c.raw);
        assert_eq!(c.wire.id, None);
        assert_eq!(c.wire.tensors[0].data, TensorData::Int32(vec![1, -2, 3]));
        let mut raw = super::super::infer::raw_bytes_element(b"x");
        raw.extend(super::super::infer::raw_bytes_element(b"yz"));
        let r = request(
            vec![input("INPUT0", "INT32", vec![2], None), input("INPUT1", "BYTES", vec![2], None)],
            vec![[7i32.to_le_bytes(), (-1i32).to_le_bytes()].concat(), raw],
        );
        let c = convert(r, "echo", &echo()).unwrap();
        assert!(c.raw);
        assert_eq!(c.wire.tensors[0].data, TensorData::Int32(vec![7, -1]));
        assert_eq!(
            c.wire.tensors[1].data,
            TensorData::Bytes(vec![ByteString(b"x".to_vec()), ByteString(b"yz".to_vec())])
        );
    }

    #[test]
    fn every_raw_type_decodes() {
        let free = TensorModel { config: Default::default(), triton: None };
        let cases: Vec<(&str, Vec<u8>, TensorData)> = vec![
            ("BOOL", vec![1, 0], TensorData::Bool(vec![true, false])),
            ("UINT8", vec![255, 1], TensorData::Uint8(vec![255, 1])),
            ("INT8", vec![255, 1], TensorData::Int8(vec![-1, 1])),
            ("UINT16", vec![1, 0, 0, 1], TensorData::Uint16(vec![1, 256])),
            ("FP16", vec![0, 0x3e, 0, 0xc0], TensorData::Float16(vec![0x3e00, 0xc000])),
            ("BF16", vec![0xc0, 0x3f, 0, 0], TensorData::BFloat16(vec![0x3fc0, 0])),
            ("FP32", [1.5f32.to_le_bytes(), 2.0f32.to_le_bytes()].concat(), TensorData::Float32(vec![1.5, 2.0])),
            ("FP64", [0.25f64.to_le_bytes(), 1f64.to_le_bytes()].concat(), TensorData::Float64(vec![0.25, 1.0])),
            ("INT64", [(-7i64).to_le_bytes(), 8i64.to_le_bytes()].concat(), TensorData::Int64(vec![-7, 8])),
            ("UINT64", [7u64.to_le_bytes(), 8u64.to_le_bytes()].concat(), TensorData::Uint64(vec![7, 8])),
        ];
        for (ty, raw, want) in cases {
            let r = request(vec![input("X", ty, vec![2], None)], vec![raw]);
            assert_eq!(convert(r, "m", &free).unwrap().wire.tensors[0].data, want, "{ty}");
        }
    }

    #[test]
    fn malformed_inputs_are_invalid_argument() {
        let free = TensorModel { config: Default::default(), triton: None };
        let e = err(request(vec![input("A", "FLOAT", vec![1], ints(vec![1]))], vec![]), &free);
        assert!(e.contains("invalid datatype 'FLOAT'"), "{e}");
        let e = err(request(vec![input("A", "INT32", vec![2], ints(vec![1]))], vec![]), &free);
        assert!(e.contains("implies 2 elements but data has 1"), "{e}");
        let e = err(request(vec![input("A", "INT32", vec![-1], ints(vec![1]))], vec![]), &free);
        assert!(e.contains("negative dimension"), "{e}");
        let e = err(request(vec![input("A", "INT32", vec![1], None)], vec![vec![0, 0, 0]]), &free);
        assert!(e.contains("raw data of 3 bytes"), "{e}");
        let e = err(request(vec![input("A", "INT32", vec![1], None)], vec![]), &free);
        assert!(e.contains("input 'A' has no data"), "{e}");
        let e = err(
            request(
                vec![input("A", "INT32", vec![1], None), input("B", "INT32", vec![1], ints(vec![1]))],
                vec![vec![0; 4]],
            ),
            &free,
        );
        assert!(e.contains("must be used for all inputs"), "{e}");
        let u8s = Some(InferTensorContents { uint_contents: vec![300], ..Default::default() });
        let e = err(request(vec![input("A", "UINT8", vec![1], u8s)], vec![]), &free);
        assert!(e.contains("value 300 does not fit UINT8"), "{e}");
        let e = err(request(vec![input("A", "FP16", vec![1], Some(Default::default()))], vec![]), &free);
        assert!(e.contains("raw_input_contents"), "{e}");
        let e = err(
            request(vec![input("A", "BYTES", vec![2], None)], vec![super::super::infer::raw_bytes_element(b"a")]),
            &free,
        );
        assert!(e.contains("holds 1 BYTES elements, its shape implies 2"), "{e}");
    }

    #[test]
    fn declared_inputs_are_enforced() {
        let m = echo();
        let e = err(request(vec![input("NOPE", "INT32", vec![1], ints(vec![1]))], vec![]), &m);
        assert!(e.contains("unexpected inference input 'NOPE'"), "{e}");
        let fp = Some(InferTensorContents { fp32_contents: vec![1.0], ..Default::default() });
        let e = err(request(vec![input("INPUT0", "FP32", vec![1], fp)], vec![]), &m);
        assert!(e.contains("data-type is 'FP32', but model 'echo' expects 'INT32'"), "{e}");
        let e = err(request(vec![input("INPUT0", "INT32", vec![1, 1], ints(vec![1]))], vec![]), &m);
        assert!(e.contains("Expected [-1], got [1,1]"), "{e}");
        let mut r = request(vec![input("INPUT0", "INT32", vec![1], ints(vec![1]))], vec![]);
        r.outputs.push(super::super::pb::model_infer_request::InferRequestedOutputTensor {
            name: "NOPE".into(),
            ..Default::default()
        });
        assert!(err(r, &m).contains("unexpected inference output 'NOPE'"));
        // Declared tensors are not required.
        assert!(convert(request(vec![], vec![]), "echo", &m).is_ok());
    }

    #[test]
    fn triton_batching_is_enforced() {
        use prost::Message;
        let tc = super::super::pb::ModelConfig {
            max_batch_size: 2,
            input: vec![super::super::pb::ModelInput {
                name: "IN".into(),
                data_type: super::super::pb::DataType::TypeInt32 as i32,
                dims: vec![2],
                ..Default::default()
            }],
            ..Default::default()
        };
        let bytes: Vec<serde_json::Value> = tc.encode_to_vec().into_iter().map(Into::into).collect();
        let m = model(serde_json::json!({"triton_model_config": bytes}));
        assert!(convert(request(vec![input("IN", "INT32", vec![1, 2], ints(vec![1, 2]))], vec![]), "tc", &m).is_ok());
        let e = err(request(vec![input("IN", "INT32", vec![2], ints(vec![1, 2]))], vec![]), &m);
        assert!(e.contains("Expected [-1,2], got [2]"), "{e}");
        let e = err(request(vec![input("IN", "INT32", vec![3, 2], ints(vec![0; 6]))], vec![]), &m);
        assert!(e.contains("batch-size 3"), "{e}");
        let e = err(request(vec![], vec![]), &m);
        assert!(e.contains("requires input 'IN'"), "{e}");
    }

    #[test]
    fn parameters_keep_their_types() {
        let mut r = request(vec![input("INPUT0", "INT32", vec![1], ints(vec![1]))], vec![]);
        r.id = "abc".into();
        r.parameters.insert("n".into(), InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(5)) });
        r.parameters
            .insert("s".into(), InferParameter { parameter_choice: Some(ParameterChoice::StringParam("x".into())) });
        let c = convert(r, "echo", &echo()).unwrap();
        assert_eq!(c.wire.id.as_deref(), Some("abc"));
        assert_eq!(c.wire.parameters["n"], ParamValue::Int64(5));
        assert_eq!(c.wire.parameters["s"], ParamValue::String("x".into()));
        let mut r = request(vec![], vec![]);
        r.parameters.insert("empty".into(), InferParameter { parameter_choice: None });
        assert!(err(r, &echo()).contains("Parameter 'empty' has no value"));
    }
}
