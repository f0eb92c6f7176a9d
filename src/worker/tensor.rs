//! The mock worker's tensor mode (`model_input = Tensor`, `model_type = TensorBased`): an
//! echo model.
//!
//! Its card declares ([`echo_config`]) inputs `INPUT0` (INT32, `[-1]`) and `INPUT1` (BYTES,
//! `[-1]`) and outputs `OUTPUT0` / `OUTPUT1` of the same types, unless
//! [`super::MockConfig::tensor_config`] gives another `tensor_model_config` (e.g. with a
//! `triton_model_config`). Each request is answered by [`answer`]:
//!
//! * every input tensor comes back unchanged under its name with `INPUT` replaced by
//!   `OUTPUT`; the response carries the request's `id`, `model` and `parameters`;
//! * request parameter `repeat` (int64 n): n identical responses instead of one;
//! * request parameter `fail`: an error item (class `InvalidRequest`, as a Python handler
//!   raising `ValueError` produces; a string value names another class, e.g. `Unavailable`),
//!   then the normal end of the stream;
//! * request parameter `delay_ms` (int64): that long before every response (checks of
//!   cancellation: a stream closed by the frontend is noticed at the next write).
//!
//! The stream is the one of every request: handshake, prologue, items, `complete_final`,
//! sentinel (docs/dynamo/request-plane.md §6.2).

use std::io::{self, Write};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::{Counters, Shared};
use crate::plane::payload::DynamoError;
use crate::plane::tensor::{ParamValue, TensorRequest, TensorResponse};
use crate::plane::{
    encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue, Annotated,
    CallHomeHandshake, Codec, ControlMessage, StreamPrologue, StreamType, TcpStreamInfo,
};

/// The echo model's `tensor_model_config`.
pub fn echo_config(name: &str) -> Value {
    json!({
        "name": name,
        "inputs": [
            {"name": "INPUT0", "data_type": "Int32", "shape": [-1]},
            {"name": "INPUT1", "data_type": "Bytes", "shape": [-1]}
        ],
        "outputs": [
            {"name": "OUTPUT0", "data_type": "Int32", "shape": [-1]},
            {"name": "OUTPUT1", "data_type": "Bytes", "shape": [-1]}
        ]
    })
}

/// What a request gets: its responses, or the class and message of an error item; and the
/// delay before each item.
pub(crate) struct Answer {
    pub(crate) items: Result<Vec<TensorResponse>, (String, String)>,
    pub(crate) delay: Duration,
}

/// The echo of `req` (see the module docs).
pub(crate) fn answer(req: TensorRequest) -> Answer {
    let int = |k: &str| match req.parameters.get(k) {
        Some(ParamValue::Int64(n)) => Some(*n),
        Some(ParamValue::Uint64(n)) => i64::try_from(*n).ok(),
        _ => None,
    };
    let delay = Duration::from_millis(int("delay_ms").unwrap_or(0).clamp(0, 60_000) as u64);
    match req.parameters.get("fail") {
        Some(ParamValue::String(class)) => {
            return Answer { items: Err((class.clone(), format!("echo: asked to fail as {class}"))), delay };
        }
        Some(_) => {
            return Answer { items: Err(("InvalidRequest".into(), "ValueError: echo: asked to fail".into())), delay };
        }
        None => {}
    }
    let repeat = int("repeat").unwrap_or(1).clamp(0, 1000) as usize;
    let tensors = req
        .tensors
        .into_iter()
        .map(|mut t| {
            t.metadata.name = t.metadata.name.replace("INPUT", "OUTPUT");
            t
        })
        .collect();
    let one = TensorResponse { id: req.id, model: req.model, tensors, parameters: req.parameters };
    Answer { items: Ok(vec![one; repeat]), delay }
}

/// Answer a decoded request on its own thread.
pub(crate) fn start(shared: &Arc<Shared>, info: TcpStreamInfo, codec: Codec, req: TensorRequest) -> Result<(), String> {
    let answer = answer(req);
    let s = Arc::clone(shared);
    s.active_streams.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("mock-worker-tensor".into()).spawn(move || {
        let c = &s.counters;
        match write(&s, &info, codec, answer) {
            Ok(true) => Counters::bump(&c.completed),
            Ok(false) => Counters::bump(&c.killed),
            Err(e) => {
                Counters::bump(&c.stream_errors);
                crate::log::warn(&format!("mock worker: tensor stream failed: {e}"));
            }
        }
        s.active_streams.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = spawned {
        shared.active_streams.fetch_sub(1, Ordering::SeqCst);
        return Err(format!("cannot spawn a stream thread: {e}"));
    }
    Ok(())
}

/// Write the whole stream; false when the frontend went away (or the worker stops) first.
fn write(shared: &Shared, info: &TcpStreamInfo, codec: Codec, answer: Answer) -> io::Result<bool> {
    let sock = super::serve::dial(shared, &info.address)?;
    let mut conn = &sock;
    let mut out = Vec::with_capacity(1024);
    let hs = CallHomeHandshake { subject: info.subject.clone(), stream_type: StreamType::Response };
    encode_handshake(&mut out, &hs).map_err(io::Error::other)?;
    encode_prologue(&mut out, &StreamPrologue { error: None }).map_err(io::Error::other)?;
    conn.write_all(&out)?;
    let items = match answer.items {
        Ok(items) => items.into_iter().map(Annotated::from_data).collect(),
        Err((class, message)) => vec![Annotated {
            data: None,
            id: None,
            event: Some("error".into()),
            comment: None,
            error: Some(Box::new(DynamoError {
                error_type: json!({"Backend": "InvalidArgument"}),
                class: Some(class),
                reason: Some("backend.invalid_argument".into()),
                message: message.clone(),
                diagnostic: Some(message),
                public: None,
            })),
        }],
    };
    for item in items {
        if !answer.delay.is_zero() {
            std::thread::sleep(answer.delay);
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            return Ok(false);
        }
        out.clear();
        encode_item(&mut out, codec, &item).map_err(io::Error::other)?;
        if conn.write_all(&out).is_err() {
            return Ok(false);
        }
    }
    out.clear();
    encode_complete_final(&mut out, codec).map_err(io::Error::other)?;
    encode_control(&mut out, ControlMessage::Sentinel);
    conn.write_all(&out)?;
    Ok(true)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::tensor::{Params, Tensor, TensorData, TensorMetadata};

    fn request(params: Params) -> TensorRequest {
        TensorRequest {
            id: Some("r".into()),
            model: "echo".into(),
            tensors: vec![Tensor {
                metadata: TensorMetadata {
                    name: "INPUT0".into(),
                    data_type: crate::plane::tensor::DataType::Int32,
                    shape: vec![1],
                    parameters: Params::new(),
                },
                data: TensorData::Int32(vec![4]),
            }],
            parameters: params,
            outputs: Vec::new(),
        }
    }

    #[test]
    fn echo_renames_and_repeats() {
        let a = answer(request(Params::new()));
        let items = a.items.unwrap();
        assert_eq!(items.len(), 1);
        assert_eq!(items[0].tensors[0].metadata.name, "OUTPUT0");
        assert_eq!(items[0].id.as_deref(), Some("r"));
        let a = answer(request([("repeat".to_string(), ParamValue::Int64(3))].into_iter().collect()));
        assert_eq!(a.items.unwrap().len(), 3);
        let a = answer(request([("fail".to_string(), ParamValue::Bool(true))].into_iter().collect()));
        assert!(a.items.unwrap_err().1.contains("asked to fail"));
    }
}
