//! Inference on completions-backed models: a `ModelInferRequest` becomes the completions
//! request Dynamo's KServe frontend builds, the driver runs it, and its events come back as
//! `ModelInferResponse`s.
//!
//! Inputs (Dynamo's KServe frontend): `text_input` (BYTES, shape `[1]` or `[1, 1]`) is the
//! prompt; `streaming` (or `stream`; BOOL, shape `[1]`) asks for one response per generated
//! piece. Data comes either typed (`contents`) or raw (`raw_input_contents`, one entry per
//! input in input order; BYTES elements as a 4-byte little-endian length and the bytes); a
//! request must use one or the other for all of its inputs. Request `parameters` are forwarded
//! as the completions fields of the same name (see [`PARAMS`]); Triton's own parameters
//! (`triton_*`, sequence and priority controls) are accepted and not forwarded; any other name
//! is INVALID_ARGUMENT, so a misspelt `max_tokens` is not silently ignored.
//!
//! Outputs: `text_output` and `finish_reason`, BYTES of shape `[1]`, typed when the request
//! was typed and in `raw_output_contents` when it was raw (as Triton answers; tritonclient
//! sends BYTES raw, and its reader of typed BYTES fails under NumPy 2). The completions request
//! goes to the inference core like any other ([`crate::infer`]); its events become the
//! responses here, and its errors keep their kind up to the gRPC status.

use std::collections::HashMap;
use std::rc::Rc;

use bytes::Bytes;
use serde_json::{Map, Value};

use super::pb::infer_parameter::ParameterChoice;
use super::pb::model_infer_response::InferOutputTensor;
use super::pb::{InferParameter, InferTensorContents, ModelInferRequest, ModelInferResponse};
use crate::error::{Error, Kind};
use crate::infer::{Event, Generation};
use crate::metrics::Endpoint;
use crate::openai::answer::finish_reason;
use crate::openai::to_infer;
use crate::shard::ShardCtx;

/// Forwarded request parameters and the JSON type each must have.
pub const PARAMS: &[(&str, ParamType)] = &[
    ("max_tokens", ParamType::Int),
    ("min_tokens", ParamType::Int),
    ("top_k", ParamType::Int),
    ("seed", ParamType::Int),
    ("n", ParamType::Int),
    ("temperature", ParamType::Float),
    ("top_p", ParamType::Float),
    ("min_p", ParamType::Float),
    ("frequency_penalty", ParamType::Float),
    ("presence_penalty", ParamType::Float),
    ("repetition_penalty", ParamType::Float),
    ("stop", ParamType::Str),
    ("ignore_eos", ParamType::Bool),
    ("skip_special_tokens", ParamType::Bool),
    ("include_stop_str_in_output", ParamType::Bool),
];

/// Triton request parameters that are accepted and not forwarded (besides `triton_*`).
const TRITON_PARAMS: &[&str] = &["sequence_id", "sequence_start", "sequence_end", "priority", "timeout"];

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ParamType {
    Int,
    Float,
    Str,
    Bool,
}

/// A parsed inference request.
#[derive(Debug, Default)]
pub struct TextRequest {
    pub id: String,
    pub model: String,
    pub stream: bool,
    /// `triton_enable_empty_final_response`: end a stream with an empty response that carries
    /// `triton_final_response = true`.
    pub empty_final: bool,
    /// The inputs came as `raw_input_contents`: answer with `raw_output_contents`.
    pub raw: bool,
    /// The completions request body.
    pub body: Bytes,
}

fn invalid(msg: impl Into<String>) -> Error {
    Error::new(Kind::BadRequest, msg.into())
}

/// The elements of a raw BYTES tensor: each a 4-byte little-endian length then the bytes.
pub fn raw_bytes_elements(mut raw: &[u8]) -> Result<Vec<&[u8]>, Error> {
    let mut out = Vec::new();
    while !raw.is_empty() {
        if raw.len() < 4 {
            return Err(invalid("raw BYTES input is truncated: an element length needs 4 bytes"));
        }
        let n = u32::from_le_bytes([raw[0], raw[1], raw[2], raw[3]]) as usize;
        if raw.len() - 4 < n {
            return Err(invalid(format!("raw BYTES element of {n} bytes is longer than its input")));
        }
        out.push(&raw[4..4 + n]);
        raw = &raw[4 + n..];
    }
    Ok(out)
}

/// Whether a request's data is raw; `raw_input_contents`, when used, must hold every input.
pub fn raw_layout(req: &ModelInferRequest) -> Result<bool, Error> {
    let raw = !req.raw_input_contents.is_empty();
    if raw && req.raw_input_contents.len() != req.inputs.len() {
        return Err(invalid(format!(
            "`raw_input_contents` must be used for all inputs: {} raw entries for {} inputs",
            req.raw_input_contents.len(),
            req.inputs.len()
        )));
    }
    Ok(raw)
}

/// Check and convert a request.
pub fn parse(req: &ModelInferRequest) -> Result<TextRequest, Error> {
    let raw = raw_layout(req)?;
    let mut prompt: Option<String> = None;
    let mut stream: Option<bool> = None;
    for (i, input) in req.inputs.iter().enumerate() {
        if raw && input.contents.is_some() {
            return Err(invalid(format!(
                "input '{}' has `contents` while the request uses `raw_input_contents`; mixing them is not allowed",
                input.name
            )));
        }
        let raw_data = req.raw_input_contents.get(i).map(Vec::as_slice);
        match input.name.as_str() {
            "text_input" => {
                if prompt.is_some() {
                    return Err(invalid("input 'text_input' is given twice"));
                }
                if input.datatype != "BYTES" {
                    return Err(invalid(format!(
                        "Expected 'text_input' to be of type BYTES for string input, got {:?}",
                        input.datatype
                    )));
                }
                if input.shape != [1] && input.shape != [1, 1] {
                    return Err(invalid(format!("Expected 'text_input' to have shape [1], got {:?}", input.shape)));
                }
                let elements: Vec<&[u8]> = match (&input.contents, raw_data) {
                    (Some(c), _) => c.bytes_contents.iter().map(Vec::as_slice).collect(),
                    (None, Some(r)) => raw_bytes_elements(r)?,
                    (None, None) => return Err(invalid("input 'text_input' has no data")),
                };
                let [one] = elements[..] else {
                    return Err(invalid(format!(
                        "'text_input' must contain exactly one element, got {}",
                        elements.len()
                    )));
                };
                let text = std::str::from_utf8(one).map_err(|_| invalid("'text_input' is not valid UTF-8"))?;
                prompt = Some(text.to_string());
            }
            "streaming" | "stream" => {
                if stream.is_some() {
                    return Err(invalid("input 'streaming' is given twice"));
                }
                if input.datatype != "BOOL" {
                    return Err(invalid(format!(
                        "Expected '{}' to be of type BOOL, got {:?}",
                        input.name, input.datatype
                    )));
                }
                if input.shape != [1] {
                    return Err(invalid(format!("Expected '{}' to have shape [1], got {:?}", input.name, input.shape)));
                }
                let values: Vec<bool> = match (&input.contents, raw_data) {
                    (Some(c), _) => c.bool_contents.clone(),
                    (None, Some(r)) => r.iter().map(|&b| b != 0).collect(),
                    (None, None) => return Err(invalid(format!("input '{}' has no data", input.name))),
                };
                let [one] = values[..] else {
                    return Err(invalid(format!(
                        "'{}' must contain exactly one element, got {}",
                        input.name,
                        values.len()
                    )));
                };
                stream = Some(one);
            }
            other => {
                return Err(invalid(format!(
                    "Invalid input name: {other}, supported inputs are 'text_input', 'streaming'"
                )))
            }
        }
    }
    let prompt = prompt.ok_or_else(|| invalid("Missing required input: 'text_input'"))?;
    let stream = stream.unwrap_or(false);
    let mut body = Map::new();
    body.insert("model".into(), Value::String(req.model_name.clone()));
    body.insert("prompt".into(), Value::String(prompt));
    body.insert("stream".into(), Value::Bool(stream));
    let empty_final = forward_params(&req.parameters, &mut body)?;
    Ok(TextRequest {
        id: req.id.clone(),
        model: req.model_name.clone(),
        stream,
        empty_final,
        raw,
        body: Bytes::from(serde_json::to_vec(&Value::Object(body)).unwrap_or_default()),
    })
}

/// Put the forwarded parameters into `body`; returns `triton_enable_empty_final_response`.
fn forward_params(params: &HashMap<String, InferParameter>, body: &mut Map<String, Value>) -> Result<bool, Error> {
    let mut empty_final = false;
    // Sorted, so the body (and any error) does not depend on the map's order.
    let mut names: Vec<&String> = params.keys().collect();
    names.sort();
    for name in names {
        let choice = params[name].parameter_choice.as_ref();
        if name == "triton_enable_empty_final_response" {
            empty_final = matches!(choice, Some(ParameterChoice::BoolParam(true)));
            continue;
        }
        if name.starts_with("triton_") || TRITON_PARAMS.contains(&name.as_str()) {
            continue;
        }
        let Some((_, ty)) = PARAMS.iter().find(|(n, _)| n == name) else {
            let known: Vec<&str> = PARAMS.iter().map(|(n, _)| *n).collect();
            return Err(invalid(format!("unsupported parameter '{name}'; supported: {}", known.join(", "))));
        };
        let value = match (ty, choice) {
            (ParamType::Int, Some(ParameterChoice::Int64Param(v))) => Value::from(*v),
            (ParamType::Int, Some(ParameterChoice::Uint64Param(v))) => Value::from(*v),
            (ParamType::Float, Some(ParameterChoice::DoubleParam(v))) => serde_json::Number::from_f64(*v)
                .map(Value::Number)
                .ok_or_else(|| invalid(format!("parameter '{name}' is not a finite number")))?,
            (ParamType::Float, Some(ParameterChoice::Int64Param(v))) => Value::from(*v as f64),
            (ParamType::Float, Some(ParameterChoice::Uint64Param(v))) => Value::from(*v as f64),
            (ParamType::Str, Some(ParameterChoice::StringParam(v))) => Value::String(v.clone()),
            (ParamType::Bool, Some(ParameterChoice::BoolParam(v))) => Value::Bool(*v),
            (ty, _) => return Err(invalid(format!("parameter '{name}' must be of type {ty:?}"))),
        };
        body.insert(name.clone(), value);
    }
    Ok(empty_final)
}

/// One piece of an answer: text and the finish reason (empty until the last piece).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Piece {
    pub text: String,
    pub finish: String,
}

/// Start a request on the driver: its body is the completions request Dynamo's KServe
/// frontend builds, validated as `/v1/completions` validates it (a refusal is counted as
/// that endpoint counts it); its tokens are charged to `key`.
pub async fn start(ctx: &Rc<ShardCtx>, r: &TextRequest, key: crate::infer::ApiKey) -> Result<Pieces, Error> {
    let parsed = crate::openai::parse_completion(&r.body).and_then(|c| to_infer::completion(c, &r.body));
    let mut req = match parsed {
        Ok((req, _)) => req,
        Err(e) => {
            crate::infer::rejected(ctx, Endpoint::Completions, Some(&r.model), r.stream, &e);
            return Err(e);
        }
    };
    // One `text_output` per response: one choice.
    req.choices = 1;
    req.key = key;
    Ok(Pieces { gen: crate::infer::run(ctx, &mut req).await?, done: false })
}

/// The pieces of an answer, read from the driver's events: each text delta, then the finish
/// (an empty text with the reason).
pub struct Pieces {
    gen: Generation,
    done: bool,
}

impl Pieces {
    /// The next piece; `None` when the answer is complete. An error is the last item.
    pub async fn next(&mut self) -> Option<Result<Piece, Error>> {
        while !self.done {
            match self.gen.next().await {
                Some(Event::Delta(d)) => return Some(Ok(Piece { text: d.text.into(), finish: String::new() })),
                Some(Event::Finish { reason, .. }) => {
                    return Some(Ok(Piece { text: String::new(), finish: finish_reason(reason).to_string() }))
                }
                Some(Event::Chunk(v)) => {
                    if let Some(p) = piece(&v) {
                        return Some(Ok(p));
                    }
                }
                Some(Event::Annotation { .. }) => {}
                Some(Event::Done(_)) | None => self.done = true,
                Some(Event::Error(e)) => {
                    self.done = true;
                    return Some(Err(e));
                }
                Some(Event::Tensor(_)) => {
                    self.done = true;
                    return Some(Err(Error::internal("a tensor response for a text request")));
                }
            }
        }
        None
    }

    /// The whole answer: every piece's text, and the finish reason.
    pub async fn whole(mut self) -> Result<Piece, Error> {
        let mut all = Piece::default();
        while let Some(p) = self.next().await {
            let p = p?;
            all.text.push_str(&p.text);
            if !p.finish.is_empty() {
                all.finish = p.finish;
            }
        }
        Ok(all)
    }
}

/// The first choice of a completion chunk a `model_input = Text` worker sent.
fn piece(v: &Value) -> Option<Piece> {
    let choice = v["choices"].get(0)?;
    Some(Piece {
        text: choice["text"].as_str().unwrap_or("").to_string(),
        finish: choice["finish_reason"].as_str().unwrap_or("").to_string(),
    })
}

/// A BYTES output tensor of one element (its data typed, or left to `raw_output_contents`).
fn bytes_output(name: &str, value: &str, typed: bool) -> InferOutputTensor {
    InferOutputTensor {
        name: name.to_string(),
        datatype: "BYTES".to_string(),
        shape: vec![1],
        contents: typed
            .then(|| InferTensorContents { bytes_contents: vec![value.as_bytes().to_vec()], ..Default::default() }),
        ..Default::default()
    }
}

/// One BYTES element in the raw layout: 4-byte little-endian length, then the bytes.
pub fn raw_bytes_element(value: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(4 + value.len());
    out.extend_from_slice(&(value.len() as u32).to_le_bytes());
    out.extend_from_slice(value);
    out
}

/// The response carrying `piece`; `final_flag` sets `triton_final_response` (streams).
pub fn response(r: &TextRequest, piece: Option<&Piece>, final_flag: Option<bool>) -> ModelInferResponse {
    let mut resp = ModelInferResponse {
        model_name: r.model.clone(),
        model_version: "1".to_string(),
        id: r.id.clone(),
        ..Default::default()
    };
    if let Some(p) = piece {
        let typed = !r.raw;
        resp.outputs =
            vec![bytes_output("text_output", &p.text, typed), bytes_output("finish_reason", &p.finish, typed)];
        if r.raw {
            resp.raw_output_contents =
                vec![raw_bytes_element(p.text.as_bytes()), raw_bytes_element(p.finish.as_bytes())];
        }
    }
    if let Some(f) = final_flag {
        resp.parameters.insert(
            "triton_final_response".to_string(),
            InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(f)) },
        );
    }
    resp
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn raw_bytes_round_trip() {
        let mut raw = raw_bytes_element(b"hello");
        raw.extend_from_slice(&raw_bytes_element(b""));
        assert_eq!(raw_bytes_elements(&raw).unwrap(), vec![&b"hello"[..], &b""[..]]);
        assert!(raw_bytes_elements(&[5, 0, 0, 0, b'x']).is_err());
        assert!(raw_bytes_elements(&[1, 0]).is_err());
    }

    #[test]
    fn outputs_follow_the_request_layout() {
        let piece = Piece { text: "hi".into(), finish: "stop".into() };
        let typed = response(&TextRequest { raw: false, ..Default::default() }, Some(&piece), None);
        assert!(typed.raw_output_contents.is_empty());
        assert_eq!(typed.outputs[0].contents.as_ref().unwrap().bytes_contents, vec![b"hi".to_vec()]);
        let raw = response(&TextRequest { raw: true, ..Default::default() }, Some(&piece), Some(true));
        assert!(raw.outputs.iter().all(|o| o.contents.is_none()));
        assert_eq!(raw.raw_output_contents, vec![b"\x02\0\0\0hi".to_vec(), b"\x04\0\0\0stop".to_vec()]);
        assert!(matches!(
            raw.parameters["triton_final_response"].parameter_choice,
            Some(ParameterChoice::BoolParam(true))
        ));
    }
}
