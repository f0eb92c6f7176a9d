//! KServe gRPC on tensor models, end to end: a real switchyard with `--kserve-grpc-server`
//! and file discovery in front of the in-tree mock worker in tensor mode (an echo model that
//! returns each `INPUT*` tensor as `OUTPUT*`), driven by a raw h2c client: metadata and config
//! from the card's `tensor_model_config` (and from a `triton_model_config`, which
//! supersedes it), unary inference with typed and raw data, the statuses of bad requests and
//! of a failing worker, ModelStreamInfer with several responses per request and errors that
//! leave the stream open, a reset stream cancelling its worker request, and the OpenAI routes
//! refusing the model.

mod common;

use std::time::{Duration, Instant};

use common::h2c;
use common::Client;
use prost::Message;
use switchyard::kserve::pb::infer_parameter::ParameterChoice;
use switchyard::kserve::pb::model_infer_request::InferInputTensor;
use switchyard::kserve::pb::*;
use switchyard::worker::{MockConfig, MockInput};

type Setup = common::stack::Stack;

/// A two-shard frontend with gRPC on and one tensor mock worker serving `name`.
fn setup(tag: &str, name: &str, tensor_config: Option<serde_json::Value>) -> Setup {
    let mock =
        MockConfig { model_name: name.into(), model_input: MockInput::Tensor, tensor_config, ..MockConfig::default() };
    let args = ["--kserve-grpc-server", "--grpc-metrics-port", "0"];
    common::stack::Stack::start(&format!("tensor-{tag}"), mock, &args, &[])
}

fn ints(name: &str, v: Vec<i32>) -> InferInputTensor {
    InferInputTensor {
        name: name.into(),
        datatype: "INT32".into(),
        shape: vec![v.len().max(1) as i64],
        contents: Some(InferTensorContents { int_contents: v, ..Default::default() }),
        ..Default::default()
    }
}

fn raw_input(name: &str, datatype: &str, shape: Vec<i64>) -> InferInputTensor {
    InferInputTensor { name: name.into(), datatype: datatype.into(), shape, ..Default::default() }
}

fn request(id: &str, inputs: Vec<InferInputTensor>) -> ModelInferRequest {
    ModelInferRequest { model_name: "echo".into(), id: id.into(), inputs, ..Default::default() }
}

fn with_param(mut r: ModelInferRequest, k: &str, v: ParameterChoice) -> ModelInferRequest {
    r.parameters.insert(k.into(), InferParameter { parameter_choice: Some(v) });
    r
}

fn bytes_element(b: &[u8]) -> Vec<u8> {
    let mut out = (b.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(b);
    out
}

/// `/metrics` counts `started` tensor requests of `request_type` for model echo, and the
/// finished ones by (error_type, status, count).
fn assert_counts(s: &Setup, request_type: &str, started: u64, finished: &[(&str, &str, u64)]) {
    let r = Client::connect(s.addr()).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    let text = String::from_utf8_lossy(&r.body).into_owned();
    let m = format!("model=\"echo\",request_type=\"{request_type}\"");
    let mut want = vec![format!("dynamo_frontend_requests_started_total{{endpoint=\"tensor\",{m}}} {started}")];
    for (error_type, status, n) in finished {
        want.push(format!(
            "dynamo_frontend_requests_total{{endpoint=\"tensor\",error_type=\"{error_type}\",{m},status=\"{status}\"}} {n}"
        ));
    }
    for line in want {
        assert!(text.lines().any(|l| l == line), "no `{line}` in\n{text}");
    }
}

#[test]
fn metadata_and_config_come_from_the_card() {
    let s = setup("meta", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let md: ModelMetadataResponse =
            h2c::unary(&mut c, "ModelMetadata", &ModelMetadataRequest { name: "echo".into(), version: String::new() })
                .await
                .decode();
        assert_eq!((md.platform.as_str(), md.versions.as_slice()), ("dynamo", &["1".to_string()][..]));
        let ins: Vec<(&str, &str, &[i64])> =
            md.inputs.iter().map(|t| (t.name.as_str(), t.datatype.as_str(), t.shape.as_slice())).collect();
        assert_eq!(ins, vec![("INPUT0", "INT32", &[-1][..]), ("INPUT1", "BYTES", &[-1][..])]);
        assert_eq!(md.outputs[1].name, "OUTPUT1");
        let cfg: ModelConfigResponse =
            h2c::unary(&mut c, "ModelConfig", &ModelConfigRequest { name: "echo".into(), version: String::new() })
                .await
                .decode();
        let cfg = cfg.config.unwrap();
        assert_eq!((cfg.platform.as_str(), cfg.backend.as_str()), ("dynamo", "dynamo"));
        assert_eq!(cfg.input[1].data_type, DataType::TypeString as i32);
        assert_eq!(cfg.output[0].dims, vec![-1]);
        let ready: ModelReadyResponse =
            h2c::unary(&mut c, "ModelReady", &ModelReadyRequest { name: "echo".into(), version: String::new() })
                .await
                .decode();
        assert!(ready.ready);
    });
}

#[test]
fn triton_model_config_supersedes() {
    let tc = ModelConfig {
        name: "tc".into(),
        backend: "python".into(),
        max_batch_size: 4,
        input: vec![ModelInput {
            name: "INPUT0".into(),
            data_type: DataType::TypeInt32 as i32,
            dims: vec![2],
            ..Default::default()
        }],
        output: vec![ModelOutput {
            name: "OUTPUT0".into(),
            data_type: DataType::TypeInt32 as i32,
            dims: vec![2],
            ..Default::default()
        }],
        ..Default::default()
    };
    let bytes: Vec<serde_json::Value> = tc.encode_to_vec().into_iter().map(Into::into).collect();
    let config = serde_json::json!({"name": "", "inputs": [], "outputs": [], "triton_model_config": bytes});
    let s = setup("triton", "echo", Some(config));
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let cfg: ModelConfigResponse =
            h2c::unary(&mut c, "ModelConfig", &ModelConfigRequest { name: "echo".into(), version: String::new() })
                .await
                .decode();
        assert_eq!(cfg.config.unwrap(), tc);
        let md: ModelMetadataResponse =
            h2c::unary(&mut c, "ModelMetadata", &ModelMetadataRequest { name: "echo".into(), version: String::new() })
                .await
                .decode();
        assert_eq!(md.inputs[0].shape, vec![-1, 2]);
        // The Triton config decides what a request may be: a batch of one [2] row passes,
        // a bare [2] does not.
        let mut ok = request("b", vec![ints("INPUT0", vec![5, 6])]);
        ok.inputs[0].shape = vec![1, 2];
        let r: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &ok).await.decode();
        assert_eq!(r.outputs[0].shape, vec![1, 2]);
        let bad = h2c::unary(&mut c, "ModelInfer", &request("c", vec![ints("INPUT0", vec![5, 6])])).await;
        assert_eq!(bad.grpc_status(), Some(3));
        assert!(bad.grpc_message().contains("Expected [-1,2], got [2]"), "{}", bad.grpc_message());
    });
}

#[test]
fn unary_infer_echoes_typed_and_raw() {
    let s = setup("unary", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let mut typed = request("t1", vec![ints("INPUT0", vec![1, -2, 3])]);
        typed.inputs.push(InferInputTensor {
            name: "INPUT1".into(),
            datatype: "BYTES".into(),
            shape: vec![2],
            contents: Some(InferTensorContents {
                bytes_contents: vec![b"x".to_vec(), b"yz".to_vec()],
                ..Default::default()
            }),
            ..Default::default()
        });
        let typed = with_param(typed, "p", ParameterChoice::StringParam("v".into()));
        let r: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &typed).await.decode();
        assert_eq!((r.model_name.as_str(), r.model_version.as_str(), r.id.as_str()), ("echo", "1", "t1"));
        assert!(r.raw_output_contents.is_empty());
        assert_eq!(r.outputs[0].name, "OUTPUT0");
        assert_eq!(r.outputs[0].contents.as_ref().unwrap().int_contents, vec![1, -2, 3]);
        assert_eq!(r.outputs[1].contents.as_ref().unwrap().bytes_contents, vec![b"x".to_vec(), b"yz".to_vec()]);
        assert!(matches!(r.parameters["p"].parameter_choice, Some(ParameterChoice::StringParam(ref v)) if v == "v"));

        // Raw in, raw out (what tritonclient sends and reads).
        let mut raw = request("", vec![raw_input("INPUT0", "INT32", vec![2]), raw_input("INPUT1", "BYTES", vec![1])]);
        raw.raw_input_contents = vec![[7i32.to_le_bytes(), 8i32.to_le_bytes()].concat(), bytes_element(b"hello")];
        let r: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &raw).await.decode();
        assert!(r.outputs.iter().all(|o| o.contents.is_none()));
        assert_eq!(r.raw_output_contents, raw.raw_input_contents);
        assert_eq!(r.outputs[1].shape, vec![1]);
    });
}

/// A worker's error class decides the gRPC status as it decides the HTTP status of an OpenAI
/// answer (the same error kind all the way), and the worker's message is kept.
#[test]
fn worker_error_classes_keep_their_kind_to_the_grpc_status() {
    let s = setup("classes", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let cases = [
            ("InvalidRequest", 3),
            ("Unauthenticated", 16),
            ("PermissionDenied", 7),
            ("NotFound", 5),
            ("Conflict", 10),
            ("RateLimited", 8),
            ("CapacityExhausted", 14),
            ("Unavailable", 14),
            ("BackendProtocol", 14),
            ("DeadlineExceeded", 4),
            ("NotImplemented", 12),
            ("Cancelled", 1),
            ("SomethingNew", 13),
        ];
        for (class, code) in cases {
            let req = with_param(
                request(class, vec![ints("INPUT0", vec![1])]),
                "fail",
                ParameterChoice::StringParam(class.into()),
            );
            let r = h2c::unary(&mut c, "ModelInfer", &req).await;
            let want = format!("{class}: echo: asked to fail as {class}");
            assert_eq!((r.grpc_status(), r.grpc_message()), (Some(code), want), "class {class}");
        }
        let ok = h2c::unary(&mut c, "ModelInfer", &request("ok", vec![ints("INPUT0", vec![1])])).await;
        assert_eq!(ok.grpc_status(), Some(0), "{}", ok.grpc_message());
    });
}

#[test]
fn bad_requests_and_worker_failures_get_statuses() {
    let s = setup("bad", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let status = |r: h2c::Reply| (r.grpc_status(), r.grpc_message());
        let mut unknown = request("u", vec![ints("INPUT0", vec![1])]);
        unknown.model_name = "nope".into();
        assert_eq!(
            status(h2c::unary(&mut c, "ModelInfer", &unknown).await),
            (Some(5), "Model 'nope' not found".into())
        );
        let cases: Vec<(ModelInferRequest, &str)> = vec![
            (request("n", vec![ints("NOPE", vec![1])]), "unexpected inference input 'NOPE'"),
            (
                request(
                    "t",
                    vec![InferInputTensor {
                        datatype: "FP32".into(),
                        contents: Some(InferTensorContents { fp32_contents: vec![1.0], ..Default::default() }),
                        ..ints("INPUT0", vec![])
                    }],
                ),
                "data-type is 'FP32', but model 'echo' expects 'INT32'",
            ),
            (request("s", vec![InferInputTensor { shape: vec![2], ..ints("INPUT0", vec![1]) }]), "implies 2 elements"),
            (
                request("d", vec![InferInputTensor { datatype: "FLOAT".into(), ..ints("INPUT0", vec![1]) }]),
                "invalid datatype",
            ),
            (request("e", vec![raw_input("INPUT0", "INT32", vec![1])]), "input 'INPUT0' has no data"),
        ];
        for (req, want) in cases {
            let (code, msg) = status(h2c::unary(&mut c, "ModelInfer", &req).await);
            assert_eq!(code, Some(3), "{msg}");
            assert!(msg.contains(want), "{msg} lacks {want}");
        }
        let mut short = request("r", vec![raw_input("INPUT0", "INT32", vec![2])]);
        short.raw_input_contents = vec![vec![0; 4]];
        assert_eq!(status(h2c::unary(&mut c, "ModelInfer", &short).await).0, Some(3));

        // The worker fails: its class decides the status, its message is kept.
        let fail = with_param(request("f", vec![ints("INPUT0", vec![1])]), "fail", ParameterChoice::BoolParam(true));
        let (code, msg) = status(h2c::unary(&mut c, "ModelInfer", &fail).await);
        assert_eq!((code, msg.as_str()), (Some(3), "InvalidRequest: ValueError: echo: asked to fail"));
        // Two responses to a unary call.
        let two = with_param(request("2", vec![ints("INPUT0", vec![1])]), "repeat", ParameterChoice::Int64Param(2));
        let (code, msg) = status(h2c::unary(&mut c, "ModelInfer", &two).await);
        assert_eq!((code, msg.as_str()), (Some(13), "Multiple responses in non-streaming mode"));
        let none = with_param(request("0", vec![ints("INPUT0", vec![1])]), "repeat", ParameterChoice::Int64Param(0));
        assert_eq!(status(h2c::unary(&mut c, "ModelInfer", &none).await), (Some(13), "No response received".into()));

        // The connection still serves.
        let ok = h2c::unary(&mut c, "ModelInfer", &request("ok", vec![ints("INPUT0", vec![1])])).await;
        assert_eq!(ok.grpc_status(), Some(0), "{}", ok.grpc_message());
    });
    // Counted as Dynamo counts them: the valid requests only, with endpoint "tensor".
    assert_counts(&s, "unary", 4, &[("", "success", 1), ("validation", "error", 1), ("internal", "error", 2)]);
}

#[test]
fn stream_infer_on_a_tensor_model() {
    let s = setup("stream", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let (mut st, _) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        // Three responses for one request, in order, each with the request's parameters.
        st.send(&with_param(request("rep", vec![ints("INPUT0", vec![9])]), "repeat", ParameterChoice::Int64Param(3)));
        for _ in 0..3 {
            let r: ModelStreamInferResponse = st.next().await.expect("a response");
            assert_eq!(r.error_message, "");
            let resp = r.infer_response.unwrap();
            assert_eq!(resp.id, "rep");
            assert_eq!(resp.outputs[0].contents.as_ref().unwrap().int_contents, vec![9]);
            assert!(resp.parameters.contains_key("repeat"));
            assert!(!resp.parameters.contains_key("triton_final_response"));
        }
        // A bad request, an unknown model and a failing worker: error_message, stream open.
        st.send(&request("bad", vec![ints("NOPE", vec![1])]));
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        assert!(r.error_message.contains("unexpected inference input 'NOPE'"), "{}", r.error_message);
        let mut unknown = request("u", vec![ints("INPUT0", vec![1])]);
        unknown.model_name = "nope".into();
        st.send(&unknown);
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        assert_eq!(r.error_message, "Model 'nope' not found");
        st.send(&with_param(request("f", vec![ints("INPUT0", vec![1])]), "fail", ParameterChoice::BoolParam(true)));
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        assert_eq!(r.error_message, "InvalidRequest: ValueError: echo: asked to fail");
        // An empty final response when asked for.
        let last = with_param(
            request("last", vec![ints("INPUT0", vec![4])]),
            "triton_enable_empty_final_response",
            ParameterChoice::BoolParam(true),
        );
        st.send(&last);
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        let resp = r.infer_response.unwrap();
        assert_eq!(resp.outputs[0].contents.as_ref().unwrap().int_contents, vec![4]);
        assert!(matches!(
            resp.parameters["triton_final_response"].parameter_choice,
            Some(ParameterChoice::BoolParam(false))
        ));
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        let resp = r.infer_response.unwrap();
        assert!(resp.outputs.is_empty());
        assert!(matches!(
            resp.parameters["triton_final_response"].parameter_choice,
            Some(ParameterChoice::BoolParam(true))
        ));
        let trailers = st.finish().await;
        assert_eq!(trailers["grpc-status"], "0");
    });
    assert_counts(&s, "stream", 3, &[("", "success", 2), ("validation", "error", 1)]);
}

#[test]
fn openai_routes_refuse_a_tensor_model() {
    let s = setup("openai", "echo", None);
    for (path, body) in [
        ("/v1/completions", r#"{"model":"echo","prompt":"hi"}"#),
        ("/v1/chat/completions", r#"{"model":"echo","messages":[{"role":"user","content":"hi"}]}"#),
    ] {
        let req = format!(
            "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
            body.len()
        );
        // A tensor model opens no OpenAI route: with no other model they answer 1.6.1's bare 404.
        let r = Client::connect(s.addr()).roundtrip(req.as_bytes());
        assert_eq!((r.status, r.body.len()), (404, 0), "{path}");
    }
    // Still listed, as Dynamo lists it.
    let r = Client::connect(s.addr()).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n");
    assert_eq!(r.json()["data"][0]["id"], "echo");
}

#[test]
fn a_reset_stream_cancels_the_worker_request() {
    let s = setup("rst", "echo", None);
    h2c::runtime().block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let (mut st, _) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        // 50 responses, 40 ms apart: the request is still running when the client goes.
        let long =
            with_param(request("long", vec![ints("INPUT0", vec![1])]), "repeat", ParameterChoice::Int64Param(50));
        st.send(&with_param(long, "delay_ms", ParameterChoice::Int64Param(40)));
        let first: ModelStreamInferResponse = st.next().await.expect("a first response");
        assert_eq!(first.infer_response.unwrap().id, "long");
        drop(st); // dropping both halves resets the stream
        let t0 = Instant::now();
        while s.worker.stats().killed < 1 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the worker request was not cancelled: {:?}",
                s.worker.stats()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert_eq!(s.worker.stats().completed, 0);
        // The connection still serves.
        let ok = h2c::unary(&mut c, "ModelInfer", &request("ok", vec![ints("INPUT0", vec![1])])).await;
        assert_eq!(ok.grpc_status(), Some(0), "{}", ok.grpc_message());
    });
}
