//! KServe v2 gRPC messages built in tests: the text model's input tensors and requests.

use std::collections::HashMap;

use switchyard::kserve::pb::infer_parameter::ParameterChoice;
use switchyard::kserve::pb::model_infer_request::InferInputTensor;
use switchyard::kserve::pb::*;

/// The model the in-tree mock workers of these tests serve.
pub const MOCK_MODEL: &str = "qwen3-mock";

/// The `text_input` tensor holding `text`.
pub fn text_input(text: &str) -> InferInputTensor {
    InferInputTensor {
        name: "text_input".into(),
        datatype: "BYTES".into(),
        shape: vec![1],
        contents: Some(InferTensorContents { bytes_contents: vec![text.as_bytes().to_vec()], ..Default::default() }),
        ..Default::default()
    }
}

/// The `streaming` tensor.
pub fn streaming_input(on: bool) -> InferInputTensor {
    InferInputTensor {
        name: "streaming".into(),
        datatype: "BOOL".into(),
        shape: vec![1],
        contents: Some(InferTensorContents { bool_contents: vec![on], ..Default::default() }),
        ..Default::default()
    }
}

/// An int64 request parameter.
pub fn int_param(v: i64) -> InferParameter {
    InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(v)) }
}

/// A request for [`MOCK_MODEL`] with `inputs` and `max_tokens`.
pub fn infer_request(id: &str, inputs: Vec<InferInputTensor>, max_tokens: i64) -> ModelInferRequest {
    ModelInferRequest {
        model_name: MOCK_MODEL.into(),
        id: id.into(),
        inputs,
        parameters: HashMap::from([("max_tokens".to_string(), int_param(max_tokens))]),
        ..Default::default()
    }
}
