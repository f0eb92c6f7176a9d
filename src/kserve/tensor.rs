//! Inference on tensor models (`model_input = Tensor`): a `ModelInferRequest` goes to a
//! worker as `NvCreateTensorRequest` over the request plane ([`super::tensor_in`]), and each
//! `NvCreateTensorResponse` the worker streams back becomes a `ModelInferResponse`.
//!
//! * Outputs: one per worker tensor, with its name, type, shape and parameters; the values
//!   typed (`contents`) when the request was typed, in `raw_output_contents` when it was raw
//!   (as Dynamo answers), and raw for every output when one of them is FP16 / BF16, which
//!   have no typed field. The worker's response parameters are passed on; the response `id`
//!   is the worker's, else the request's.
//! * Unary `ModelInfer` takes exactly one worker response: none or a second one is INTERNAL
//!   (`No response received`, `Multiple responses in non-streaming mode`, as in Dynamo).
//! * `ModelStreamInfer`: every worker response is a stream response. With
//!   `triton_enable_empty_final_response` each carries `triton_final_response = false` and an
//!   empty response with `true` follows the last (Dynamo 1.6.1 adds neither).
//! * A worker's error item becomes a status by its class (`InvalidRequest`:
//!   INVALID_ARGUMENT, `Unavailable` and the overload classes: UNAVAILABLE, others:
//!   INTERNAL) with the message `<class>: <message>` (1.6.1 answers INTERNAL for all);
//!   request-plane failures are UNAVAILABLE. Routing, retries before the first response and
//!   the worker's error classes are the inference core's ([`crate::infer`]), as for every
//!   model.
//! * Metrics: a valid request is counted with `endpoint="tensor"` (`request_type` unary or
//!   stream), as Dynamo counts it; requests refused before that are not.

use super::pb::infer_parameter::ParameterChoice;
use super::pb::model_infer_response::InferOutputTensor;
use super::pb::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use super::tensor_meta::kserve_name;
use crate::error::{Error, Kind};
use crate::infer::resolve::{resolve, ModelKind};
use crate::infer::{Event, Generation, InferRequest, Input};
use crate::metrics::Endpoint;
use crate::plane::tensor::{DataType, ParamValue, Params, Tensor, TensorData, TensorResponse};
use crate::shard::ShardCtx;
use std::rc::Rc;

/// A tensor request a worker has started answering.
pub struct Call {
    /// The client's model name and request id.
    pub model: String,
    pub id: String,
    /// The request's data came raw: answer raw.
    pub raw: bool,
    /// `triton_enable_empty_final_response` was asked for.
    pub empty_final: bool,
    /// The driver's events; dropped before its end, the request counts as cancelled.
    gen: Option<Generation>,
    /// The worker's stream is over.
    done: bool,
}

/// Whether `model` is a tensor model of the shard's snapshot.
pub fn is_tensor(ctx: &ShardCtx, model: &str) -> bool {
    ctx.registry().serving.get(model).is_some_and(|s| s.tensor.is_some())
}

/// Check and send a request for a tensor model (known to the caller to be one); `stream`:
/// it came on ModelStreamInfer.
pub async fn start(ctx: &Rc<ShardCtx>, req: ModelInferRequest, stream: bool) -> Result<Call, Error> {
    let name = req.model_name.clone();
    let resolved = resolve(&ctx.registry(), &name)?;
    let ModelKind::Tensor(model) = resolved.kind() else {
        return Err(Error::new(Kind::Internal, format!("model '{name}' is not a tensor model")));
    };
    let empty_final = matches!(
        req.parameters.get("triton_enable_empty_final_response").and_then(|p| p.parameter_choice.as_ref()),
        Some(ParameterChoice::BoolParam(true))
    );
    let id = req.id.clone();
    let converted = super::tensor_in::convert(req, &name, model)?;
    // As Dynamo, a request is counted once it is valid (the driver counts from here).
    let mut ireq = InferRequest::new(Endpoint::Tensor, name.clone(), Input::Tensor(Box::new(converted.wire)));
    ireq.stream = stream;
    let gen = crate::infer::run_resolved(ctx, resolved, &mut ireq).await?;
    Ok(Call { model: name, id, raw: converted.raw, empty_final, gen: Some(gen), done: false })
}

impl Call {
    /// The next worker response, converted; `None` once the worker's stream is complete.
    pub async fn next(&mut self) -> Option<Result<ModelInferResponse, Error>> {
        while !self.done {
            let gen = self.gen.as_mut()?;
            match gen.next().await {
                Some(Event::Tensor(t)) => match response(*t, self.raw, &self.model, &self.id) {
                    Ok(r) => return Some(Ok(r)),
                    Err(e) => return Some(Err(self.fail(e))),
                },
                Some(Event::Error(e)) => {
                    self.done = true;
                    return Some(Err(with_worker_message(e)));
                }
                // The generation stays, so a unary call can still fail it.
                Some(Event::Done(_)) | None => self.done = true,
                Some(_) => {}
            }
        }
        None
    }

    /// End the request with an error found here (the driver counts it).
    fn fail(&mut self, e: Error) -> Error {
        self.done = true;
        if let Some(gen) = self.gen.take() {
            gen.fail(&e);
        }
        e
    }

    /// The one response of a unary call.
    pub async fn whole(mut self) -> Result<ModelInferResponse, Error> {
        let first = match self.next().await {
            Some(r) => r?,
            None => return Err(self.fail(Error::new(Kind::Internal, "No response received"))),
        };
        match self.next().await {
            None => Ok(first),
            Some(Err(e)) => Err(e),
            Some(Ok(_)) => Err(self.fail(Error::new(Kind::Internal, "Multiple responses in non-streaming mode"))),
        }
    }
}

/// A worker's error as KServe answers it: the status of its class, and the worker's own
/// message after its class (`InvalidRequest: ValueError: …`; 1.6.1 answers INTERNAL with
/// the bare message for every class).
fn with_worker_message(e: Error) -> Error {
    match crate::infer::choice::worker_fault(&e) {
        Some(f) => Error::new(e.kind(), f.to_string()),
        None => e,
    }
}

/// A KServe parameter of a Dynamo one.
pub fn kserve_param(v: &ParamValue) -> InferParameter {
    let choice = match v {
        ParamValue::Bool(b) => ParameterChoice::BoolParam(*b),
        ParamValue::Int64(i) => ParameterChoice::Int64Param(*i),
        ParamValue::Uint64(u) => ParameterChoice::Uint64Param(*u),
        ParamValue::Double(d) => ParameterChoice::DoubleParam(*d),
        ParamValue::String(s) => ParameterChoice::StringParam(s.clone()),
    };
    InferParameter { parameter_choice: Some(choice) }
}

fn kserve_params(p: &Params) -> std::collections::HashMap<String, InferParameter> {
    p.iter().map(|(k, v)| (k.clone(), kserve_param(v))).collect()
}

/// Convert one worker response; `raw`: the request was raw. A tensor whose data does not
/// match its metadata is the worker's fault (INTERNAL).
pub fn response(resp: TensorResponse, raw: bool, model: &str, id: &str) -> Result<ModelInferResponse, Error> {
    for t in &resp.tensors {
        t.check().map_err(|e| Error::new(Kind::Internal, format!("Invalid NvCreateTensorResponse: {e}")))?;
    }
    let raw =
        raw || resp.tensors.iter().any(|t| matches!(t.metadata.data_type, DataType::Float16 | DataType::BFloat16));
    let mut out = ModelInferResponse {
        model_name: if resp.model.is_empty() { model.to_string() } else { resp.model },
        model_version: "1".to_string(),
        id: resp.id.unwrap_or_else(|| id.to_string()),
        parameters: kserve_params(&resp.parameters),
        outputs: Vec::with_capacity(resp.tensors.len()),
        raw_output_contents: Vec::new(),
    };
    for t in resp.tensors {
        let Tensor { metadata, data } = t;
        let mut o = InferOutputTensor {
            name: metadata.name,
            datatype: kserve_name(metadata.data_type).to_string(),
            shape: metadata.shape,
            parameters: kserve_params(&metadata.parameters),
            contents: None,
        };
        if raw {
            out.raw_output_contents.push(raw_bytes(&data));
        } else {
            o.contents = Some(typed(data));
        }
        out.outputs.push(o);
    }
    Ok(out)
}

/// Typed contents (FP16 / BF16 never come here).
fn typed(data: TensorData) -> InferTensorContents {
    let mut c = InferTensorContents::default();
    match data {
        TensorData::Bool(v) => c.bool_contents = v,
        TensorData::Uint8(v) => c.uint_contents = v.into_iter().map(u32::from).collect(),
        TensorData::Uint16(v) | TensorData::Float16(v) | TensorData::BFloat16(v) => {
            c.uint_contents = v.into_iter().map(u32::from).collect()
        }
        TensorData::Uint32(v) => c.uint_contents = v,
        TensorData::Uint64(v) => c.uint64_contents = v,
        TensorData::Int8(v) => c.int_contents = v.into_iter().map(i32::from).collect(),
        TensorData::Int16(v) => c.int_contents = v.into_iter().map(i32::from).collect(),
        TensorData::Int32(v) => c.int_contents = v,
        TensorData::Int64(v) => c.int64_contents = v,
        TensorData::Float32(v) => c.fp32_contents = v,
        TensorData::Float64(v) => c.fp64_contents = v,
        TensorData::Bytes(v) => c.bytes_contents = v.into_iter().map(|b| b.0).collect(),
    }
    c
}

/// The raw layout: little-endian elements; BYTES elements length-prefixed.
fn raw_bytes(data: &TensorData) -> Vec<u8> {
    fn le<T: Copy, const N: usize>(v: &[T], f: fn(T) -> [u8; N]) -> Vec<u8> {
        v.iter().flat_map(|&x| f(x)).collect()
    }
    match data {
        TensorData::Bool(v) => v.iter().map(|&b| u8::from(b)).collect(),
        TensorData::Uint8(v) => v.clone(),
        TensorData::Int8(v) => v.iter().map(|&x| x as u8).collect(),
        TensorData::Uint16(v) | TensorData::Float16(v) | TensorData::BFloat16(v) => le(v, u16::to_le_bytes),
        TensorData::Int16(v) => le(v, i16::to_le_bytes),
        TensorData::Uint32(v) => le(v, u32::to_le_bytes),
        TensorData::Int32(v) => le(v, i32::to_le_bytes),
        TensorData::Float32(v) => le(v, f32::to_le_bytes),
        TensorData::Uint64(v) => le(v, u64::to_le_bytes),
        TensorData::Int64(v) => le(v, i64::to_le_bytes),
        TensorData::Float64(v) => le(v, f64::to_le_bytes),
        TensorData::Bytes(v) => {
            let mut out = Vec::with_capacity(v.iter().map(|b| 4 + b.0.len()).sum());
            for b in v {
                out.extend_from_slice(&(b.0.len() as u32).to_le_bytes());
                out.extend_from_slice(&b.0);
            }
            out
        }
    }
}

/// An empty stream response carrying only `triton_final_response = true`.
pub fn empty_final(model: &str, id: &str) -> ModelInferResponse {
    let mut r = ModelInferResponse {
        model_name: model.to_string(),
        model_version: "1".to_string(),
        id: id.to_string(),
        ..Default::default()
    };
    r.parameters.insert(
        "triton_final_response".to_string(),
        InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
    );
    r
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::tensor::{ByteString, TensorMetadata};

    fn tensor(name: &str, data: TensorData, shape: Vec<i64>) -> Tensor {
        Tensor {
            metadata: TensorMetadata {
                name: name.into(),
                data_type: data.data_type(),
                shape,
                parameters: Params::new(),
            },
            data,
        }
    }

    #[test]
    fn typed_and_raw_outputs() {
        let resp = TensorResponse {
            id: None,
            model: "echo".into(),
            tensors: vec![
                tensor("A", TensorData::Int32(vec![1, 2, 3]), vec![3]),
                tensor("B", TensorData::Bytes(vec![ByteString(b"x".to_vec()), ByteString(b"yz".to_vec())]), vec![2]),
                tensor("C", TensorData::Int8(vec![-3]), vec![1]),
            ],
            parameters: [("p".to_string(), ParamValue::Int64(5))].into_iter().collect(),
        };
        let typed = response(resp.clone(), false, "echo", "rid").unwrap();
        assert_eq!(typed.id, "rid");
        assert!(typed.raw_output_contents.is_empty());
        assert_eq!(typed.outputs[0].contents.as_ref().unwrap().int_contents, vec![1, 2, 3]);
        assert_eq!(typed.outputs[1].datatype, "BYTES");
        assert_eq!(typed.outputs[2].contents.as_ref().unwrap().int_contents, vec![-3]);
        assert!(matches!(typed.parameters["p"].parameter_choice, Some(ParameterChoice::Int64Param(5))));
        let raw = response(resp, true, "echo", "").unwrap();
        assert!(raw.outputs.iter().all(|o| o.contents.is_none()));
        assert_eq!(raw.raw_output_contents[0], [1i32.to_le_bytes(), 2i32.to_le_bytes(), 3i32.to_le_bytes()].concat());
        assert_eq!(raw.raw_output_contents[1], b"\x01\0\0\0x\x02\0\0\0yz".to_vec());
        assert_eq!(raw.raw_output_contents[2], vec![0xfd]);
    }

    #[test]
    fn half_floats_are_always_raw() {
        let resp = TensorResponse {
            tensors: vec![
                tensor("H", TensorData::Float16(vec![0x3e00]), vec![1]),
                tensor("I", TensorData::Int32(vec![1]), vec![1]),
            ],
            ..Default::default()
        };
        let r = response(resp, false, "m", "").unwrap();
        assert_eq!(r.model_name, "m");
        assert_eq!(r.raw_output_contents, vec![vec![0x00, 0x3e], 1i32.to_le_bytes().to_vec()]);
        assert_eq!(r.outputs[0].datatype, "FP16");
    }

    #[test]
    fn inconsistent_worker_tensors_are_internal() {
        let resp =
            TensorResponse { tensors: vec![tensor("A", TensorData::Int32(vec![1]), vec![2])], ..Default::default() };
        let e = response(resp, false, "m", "").unwrap_err();
        assert_eq!(e.kind(), Kind::Internal);
        assert!(e.message().contains("Invalid NvCreateTensorResponse"));
    }
}
