//! KServe v2 gRPC and HTTP/2 end to end: a real switchyard with `--kserve-grpc-server`, file
//! discovery and the in-tree mock worker (real Qwen3 tokenizer files), driven by a raw h2c
//! client: health, metadata, config, repository index, unary and streaming inference, the
//! gRPC statuses of bad requests, and the OpenAI routes (SSE) over the same HTTP/2 port.

mod common;

use std::time::{Duration, Instant};

use common::h2c::{self, Reply};
use common::kserve_msg::{infer_request, int_param, streaming_input, text_input};
use common::Client;
use switchyard::kserve::pb::infer_parameter::ParameterChoice;
use switchyard::kserve::pb::model_infer_request::InferInputTensor;
use switchyard::kserve::pb::*;
use switchyard::tokenize::ModelFiles;
use switchyard::worker::MockConfig;

const ANSWER: &str = "Hello world! The quick brown fox jumps over the lazy dog.";
const MODEL: &str = "qwen3-mock";

type Setup = common::stack::Stack;

/// A two-shard frontend with `args`/`env` and one fast mock worker, once the model is listed.
fn setup(tag: &str, args: &[&str], env: &[(&str, &str)]) -> Setup {
    setup_with(tag, args, env, MockConfig { fast: true, ..MockConfig::default() })
}

/// As [`setup`], with the worker configured by `mock` (its script, name and files set here).
fn setup_with(tag: &str, args: &[&str], env: &[(&str, &str)], mock: MockConfig) -> Setup {
    let dir = common::qwen3_dir();
    let script = ModelFiles::load(&dir).unwrap().tokenizer().unwrap().encode(ANSWER).unwrap();
    let mock = MockConfig { script: Some(script), model_name: MODEL.into(), model_dir: Some(dir), ..mock };
    common::stack::Stack::start(&format!("grpc-{tag}"), mock, args, env)
}

const GRPC_ARGS: &[&str] = &["--kserve-grpc-server", "--grpc-metrics-port", "0"];

fn grpc_setup(tag: &str) -> Setup {
    setup(tag, GRPC_ARGS, &[])
}

/// gRPC on, and a worker that takes 30 ms per token (answers last long enough to overlap or
/// to be cut).
fn slow_grpc_setup(tag: &str) -> Setup {
    let slow = MockConfig { itl: Duration::from_millis(30), ttft: Duration::from_millis(10), ..MockConfig::default() };
    setup_with(tag, GRPC_ARGS, &[], slow)
}

/// The value of a one-element BYTES output, typed or raw (4-byte little-endian length + bytes).
fn output(resp: &ModelInferResponse, name: &str) -> String {
    let i = resp.outputs.iter().position(|o| o.name == name).unwrap_or_else(|| panic!("no output {name}: {resp:?}"));
    let t = &resp.outputs[i];
    assert_eq!(t.datatype, "BYTES");
    if resp.raw_output_contents.is_empty() {
        let c = t.contents.as_ref().expect("typed contents");
        assert_eq!(c.bytes_contents.len(), 1);
        return String::from_utf8(c.bytes_contents[0].clone()).unwrap();
    }
    assert!(t.contents.is_none(), "typed and raw at once");
    let raw = &resp.raw_output_contents[i];
    let n = u32::from_le_bytes(raw[..4].try_into().unwrap()) as usize;
    assert_eq!(raw.len(), 4 + n, "one element");
    String::from_utf8(raw[4..].to_vec()).unwrap()
}

fn final_flag(resp: &ModelInferResponse) -> Option<bool> {
    match resp.parameters.get("triton_final_response")?.parameter_choice {
        Some(ParameterChoice::BoolParam(b)) => Some(b),
        _ => None,
    }
}

/// The completion text of `/v1/completions` over HTTP/1.1 for the same prompt and limit.
fn http1_completion(addr: std::net::SocketAddr, prompt: &str, max_tokens: u32) -> (String, String) {
    let body = serde_json::json!({"model": MODEL, "prompt": prompt, "max_tokens": max_tokens}).to_string();
    let req = format!(
        "POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    let v = Client::connect(addr).roundtrip(req.as_bytes()).json();
    (
        v["choices"][0]["text"].as_str().unwrap().to_string(),
        v["choices"][0]["finish_reason"].as_str().unwrap().to_string(),
    )
}

#[test]
fn health_metadata_config_and_index() {
    let s = grpc_setup("meta");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let r = h2c::unary(&mut c, "ServerLive", &ServerLiveRequest {}).await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["content-type"], "application/grpc");
        assert_eq!(r.grpc_status(), Some(0));
        assert!(r.decode::<ServerLiveResponse>().live);
        assert!(h2c::unary(&mut c, "ServerReady", &ServerReadyRequest {}).await.decode::<ServerReadyResponse>().ready);

        let ready = |name: &str| ModelReadyRequest { name: name.into(), version: String::new() };
        assert!(h2c::unary(&mut c, "ModelReady", &ready(MODEL)).await.decode::<ModelReadyResponse>().ready);
        assert!(!h2c::unary(&mut c, "ModelReady", &ready("nope")).await.decode::<ModelReadyResponse>().ready);

        let m: ServerMetadataResponse = h2c::unary(&mut c, "ServerMetadata", &ServerMetadataRequest {}).await.decode();
        assert_eq!(m.name, "switchyard");
        assert!(!m.version.is_empty());

        let req = ModelMetadataRequest { name: MODEL.into(), version: String::new() };
        let m: ModelMetadataResponse = h2c::unary(&mut c, "ModelMetadata", &req).await.decode();
        assert_eq!(
            (m.name.as_str(), m.platform.as_str(), m.versions.clone()),
            (MODEL, "dynamo", vec!["1".to_string()])
        );
        let shape = |t: &[model_metadata_response::TensorMetadata]| {
            t.iter().map(|t| (t.name.clone(), t.datatype.clone(), t.shape.clone())).collect::<Vec<_>>()
        };
        assert_eq!(
            shape(&m.inputs),
            vec![("text_input".into(), "BYTES".into(), vec![1]), ("streaming".into(), "BOOL".into(), vec![1])]
        );
        assert_eq!(
            shape(&m.outputs),
            vec![("text_output".into(), "BYTES".into(), vec![-1]), ("finish_reason".into(), "BYTES".into(), vec![-1])]
        );
        let missing =
            h2c::unary(&mut c, "ModelMetadata", &ModelMetadataRequest { name: "nope".into(), version: String::new() })
                .await;
        assert_eq!(missing.grpc_status(), Some(5), "NOT_FOUND");
        assert_eq!(missing.grpc_message(), "Model 'nope' not found");
        assert!(missing.body.is_empty(), "trailers-only");

        let cfg: ModelConfigResponse =
            h2c::unary(&mut c, "ModelConfig", &ModelConfigRequest { name: MODEL.into(), version: String::new() })
                .await
                .decode();
        let cfg = cfg.config.unwrap();
        assert_eq!((cfg.name.as_str(), cfg.platform.as_str(), cfg.backend.as_str()), (MODEL, "dynamo", "dynamo"));
        assert_eq!(cfg.input.len(), 2);
        assert_eq!(cfg.input[0].data_type, DataType::TypeString as i32);
        assert!(cfg.input[1].optional);
        assert_eq!(cfg.output[1].name, "finish_reason");
        let missing =
            h2c::unary(&mut c, "ModelConfig", &ModelConfigRequest { name: "x".into(), version: String::new() }).await;
        assert_eq!(missing.grpc_status(), Some(5));

        let idx: RepositoryIndexResponse = h2c::unary(
            &mut c,
            "RepositoryIndex",
            &RepositoryIndexRequest { repository_name: String::new(), ready: true },
        )
        .await
        .decode();
        assert_eq!(idx.models.len(), 1);
        assert_eq!((idx.models[0].name.as_str(), idx.models[0].state.as_str()), (MODEL, "READY"));

        let unknown = h2c::unary(&mut c, "ModelStatistics", &ServerLiveRequest {}).await;
        assert_eq!(unknown.grpc_status(), Some(12), "UNIMPLEMENTED");
    });
    // The ops routes are also served on --grpc-metrics-port.
    let metrics = s.server().metrics_addr.expect("metrics port bound");
    assert_eq!(Client::connect(metrics).roundtrip(common::GET_LIVE).status, 200);
}

#[test]
fn unary_infer_forwards_max_tokens() {
    let s = grpc_setup("unary");
    let (want_text, want_reason) = http1_completion(s.addr(), "Tell me", 3);
    assert_eq!(want_reason, "length");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let r = h2c::unary(&mut c, "ModelInfer", &infer_request("req-1", vec![text_input("Tell me")], 3)).await;
        assert_eq!(r.grpc_status(), Some(0), "{}", r.grpc_message());
        let resp: ModelInferResponse = r.decode();
        assert_eq!((resp.id.as_str(), resp.model_name.as_str(), resp.model_version.as_str()), ("req-1", MODEL, "1"));
        assert_eq!(output(&resp, "text_output"), want_text);
        assert_eq!(output(&resp, "finish_reason"), "length");

        // Without max_tokens the whole script comes back.
        let mut whole = infer_request("req-2", vec![text_input("Tell me")], 0);
        whole.parameters.clear();
        let resp: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &whole).await.decode();
        assert_eq!(output(&resp, "text_output"), ANSWER);
        assert_eq!(output(&resp, "finish_reason"), "stop");

        // The same request with raw_input_contents (4-byte little-endian length + bytes).
        let mut raw = infer_request("req-3", vec![text_input("Tell me")], 3);
        raw.inputs[0].contents = None;
        let mut bytes = (7u32).to_le_bytes().to_vec();
        bytes.extend_from_slice(b"Tell me");
        raw.raw_input_contents = vec![bytes];
        let resp: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &raw).await.decode();
        assert_eq!(resp.raw_output_contents.len(), 2, "a raw request gets raw outputs");
        assert_eq!(output(&resp, "text_output"), want_text);
        assert_eq!(output(&resp, "finish_reason"), "length");
    });
}

/// Send `req` as ModelInfer and return (grpc-status, grpc-message).
async fn status_of(c: &mut h2::client::SendRequest<bytes::Bytes>, req: &ModelInferRequest) -> (Option<u8>, String) {
    let r: Reply = h2c::unary(c, "ModelInfer", req).await;
    (r.grpc_status(), r.grpc_message())
}

#[test]
fn bad_requests_get_grpc_statuses_and_the_connection_keeps_serving() {
    let s = setup("bad", GRPC_ARGS, &[("DYN_HTTP_BODY_LIMIT_MB", "1")]);
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let mut unknown = infer_request("u", vec![text_input("hi")], 2);
        unknown.model_name = "nope".into();
        assert_eq!(status_of(&mut c, &unknown).await, (Some(5), "Model 'nope' not found".into()));

        let bad_name = infer_request("b", vec![InferInputTensor { name: "prompt".into(), ..text_input("hi") }], 2);
        let (code, msg) = status_of(&mut c, &bad_name).await;
        assert_eq!(code, Some(3));
        assert!(msg.contains("Invalid input name: prompt"), "{msg}");

        let bad_type = infer_request("t", vec![InferInputTensor { datatype: "INT32".into(), ..text_input("hi") }], 2);
        assert_eq!(status_of(&mut c, &bad_type).await.0, Some(3));
        let bad_shape = infer_request("s", vec![InferInputTensor { shape: vec![2], ..text_input("hi") }], 2);
        assert_eq!(status_of(&mut c, &bad_shape).await.0, Some(3));
        assert_eq!(
            status_of(&mut c, &infer_request("m", vec![], 2)).await,
            (Some(3), "Missing required input: 'text_input'".into())
        );

        let mut mixed = infer_request("x", vec![text_input("hi"), streaming_input(false)], 2);
        mixed.raw_input_contents = vec![b"\x02\x00\x00\x00hi".to_vec(), vec![0]];
        let (code, msg) = status_of(&mut c, &mixed).await;
        assert_eq!(code, Some(3));
        assert!(msg.contains("mixing"), "{msg}");

        let mut typo = infer_request("p", vec![text_input("hi")], 2);
        typo.parameters.insert("max_token".into(), int_param(2));
        let (code, msg) = status_of(&mut c, &typo).await;
        assert_eq!(code, Some(3));
        assert!(msg.contains("unsupported parameter 'max_token'"), "{msg}");

        let mut wrong = infer_request("w", vec![text_input("hi")], 2);
        wrong.parameters.insert(
            "temperature".into(),
            InferParameter { parameter_choice: Some(ParameterChoice::StringParam("hot".into())) },
        );
        assert_eq!(status_of(&mut c, &wrong).await.0, Some(3));

        // A validation error of the completions request keeps its message.
        let zero = infer_request("z", vec![text_input("hi")], 0);
        assert_eq!(status_of(&mut c, &zero).await.0, Some(3));

        let streaming = infer_request("st", vec![text_input("hi"), streaming_input(true)], 2);
        assert_eq!(
            status_of(&mut c, &streaming).await,
            (Some(3), "Streaming is not supported for this endpoint".into())
        );

        // Malformed protobuf: a length-delimited field that runs past the message.
        let r = h2c::raw_call(&mut c, "ModelInfer", vec![0, 0, 0, 0, 2, 0x0a, 0x7f]).await;
        assert_eq!(r.grpc_status(), Some(3), "{}", r.grpc_message());
        assert!(r.grpc_message().starts_with("malformed protobuf message"));
        // A message over the limit (1 MiB): RESOURCE_EXHAUSTED.
        let mut big = vec![0, 0, 0x20, 0, 0];
        big.resize(5 + 2 * 1024 * 1024, 0);
        assert_eq!(h2c::raw_call(&mut c, "ModelInfer", big).await.grpc_status(), Some(8));
        // Truncated framing, and an empty call.
        assert_eq!(h2c::raw_call(&mut c, "ServerLive", vec![0, 0, 0, 0, 9, 1]).await.grpc_status(), Some(3));
        assert_eq!(h2c::raw_call(&mut c, "ServerLive", vec![]).await.grpc_status(), Some(3));

        // The same connection still answers.
        let ok = h2c::unary(&mut c, "ModelInfer", &infer_request("ok", vec![text_input("hi")], 2)).await;
        assert_eq!(ok.grpc_status(), Some(0), "{}", ok.grpc_message());
    });
}

#[test]
fn stream_infer_survives_a_bad_request() {
    let s = grpc_setup("stream");
    let (want_text, _) = http1_completion(s.addr(), "Tell me", 4);
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let (mut st, head) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        assert_eq!(head["content-type"], "application/grpc");

        // 1: streamed pieces, the last one final.
        st.send(&infer_request("one", vec![text_input("Tell me"), streaming_input(true)], 4));
        let mut text = String::new();
        let mut n = 0;
        loop {
            let r: ModelStreamInferResponse = st.next().await.expect("a response");
            assert_eq!(r.error_message, "");
            let resp = r.infer_response.unwrap();
            assert_eq!(resp.id, "one");
            n += 1;
            text.push_str(&output(&resp, "text_output"));
            if final_flag(&resp) == Some(true) {
                assert_eq!(output(&resp, "finish_reason"), "length");
                break;
            }
            assert_eq!(output(&resp, "finish_reason"), "");
        }
        assert!(n >= 2, "streamed in pieces ({n})");
        assert_eq!(text, want_text);

        // 2: a bad request answers with error_message; 3: malformed bytes likewise.
        st.send(&infer_request("two", vec![InferInputTensor { name: "bogus".into(), ..text_input("x") }], 4));
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        assert!(r.error_message.contains("Invalid input name: bogus"), "{}", r.error_message);
        assert!(r.infer_response.is_none());
        st.send_raw(vec![0, 0, 0, 0, 2, 0x0a, 0x7f]);
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        assert!(r.error_message.starts_with("malformed protobuf"), "{}", r.error_message);

        // 4: the stream is still open; a whole answer with an empty final response after it.
        let mut four = infer_request("four", vec![text_input("Tell me")], 4);
        four.parameters.insert(
            "triton_enable_empty_final_response".into(),
            InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
        );
        st.send(&four);
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        let resp = r.infer_response.unwrap();
        assert_eq!(output(&resp, "text_output"), want_text);
        assert_eq!(final_flag(&resp), Some(false));
        let r: ModelStreamInferResponse = st.next().await.unwrap();
        let resp = r.infer_response.unwrap();
        assert!(resp.outputs.is_empty());
        assert_eq!(final_flag(&resp), Some(true));

        let trailers = st.finish().await;
        assert_eq!(trailers["grpc-status"], "0");
    });
}

#[test]
fn openai_routes_over_h2c() {
    let s = setup("openai", &[], &[]);
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let live = h2c::request(&mut c, "GET", "/live", "", vec![]).await;
        assert_eq!(live.status, 200);
        assert_eq!(live.body, common::LIVE_BODY);

        let body = serde_json::json!({
            "model": MODEL, "messages": [{"role": "user", "content": "Hello"}], "stream": true, "max_tokens": 5
        });
        let r = h2c::request(&mut c, "POST", "/v1/chat/completions", "application/json", body.to_string().into_bytes())
            .await;
        assert_eq!(r.status, 200);
        assert_eq!(r.headers["content-type"], "text/event-stream");
        let text = String::from_utf8(r.body).unwrap();
        let events: Vec<&str> = text.split("\n\n").filter(|e| !e.is_empty()).collect();
        assert_eq!(*events.last().unwrap(), "data: [DONE]");
        let mut content = String::new();
        for e in &events[..events.len() - 1] {
            let v: serde_json::Value = serde_json::from_str(e.strip_prefix("data: ").unwrap()).unwrap();
            content.push_str(v["choices"][0]["delta"]["content"].as_str().unwrap_or(""));
        }
        assert!(!content.is_empty() && ANSWER.starts_with(&content), "{content:?}");

        // Errors keep their HTTP shape; gRPC is off without --kserve-grpc-server.
        let r = h2c::request(&mut c, "POST", "/v1/completions", "application/json", b"{".to_vec()).await;
        assert_eq!(r.status, 400);
        let r = h2c::unary(&mut c, "ServerLive", &ServerLiveRequest {}).await;
        assert_eq!(r.grpc_status(), Some(12));
    });
    // HTTP/1.1 on the same port.
    assert_eq!(Client::connect(s.addr()).roundtrip(common::GET_LIVE).status, 200);

    // An invalid frame (DATA on stream 0) is a connection error: GOAWAY with PROTOCOL_ERROR
    // (RFC 9113 §6.1), then the close; the shard keeps serving others.
    let mut raw = Client::connect(s.addr());
    let mut bad = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    bad.extend_from_slice(&[0, 0, 0, 4, 0, 0, 0, 0, 0]); // empty SETTINGS
    bad.extend_from_slice(&[0, 0, 1, 0, 0, 0, 0, 0, 0, b'x']); // DATA, stream 0
    raw.send(&bad);
    let got = read_to_close(&mut raw);
    let goaway = frames(&got).into_iter().find(|(ty, _)| *ty == 7).expect("a GOAWAY frame");
    assert_eq!(u32::from_be_bytes(goaway.1[4..8].try_into().unwrap()), 1, "PROTOCOL_ERROR");
    assert_eq!(Client::connect(s.addr()).roundtrip(common::GET_LIVE).status, 200);

    // A preface that begins as HTTP/2's and then goes wrong is a connection error too (RFC
    // 9113 §3.4): a GOAWAY PROTOCOL_ERROR, not an HTTP/1.1 answer, then the close.
    let mut raw = Client::connect(s.addr());
    raw.send(b"PRI * HTTP/2.0\r\n\r\nXX\r\n\r\n");
    let got = frames(&read_to_close(&mut raw));
    assert_eq!(got.len(), 1, "{got:?}");
    assert_eq!(got[0].0, 7, "{got:?}");
    assert_eq!(u32::from_be_bytes(got[0].1[4..8].try_into().unwrap()), 1, "PROTOCOL_ERROR");

    // A pseudo-header field in a request's trailers makes the request malformed (RFC 9113
    // §8.1): RST_STREAM PROTOCOL_ERROR on that stream, while a clean request with trailers on
    // the same connection is answered.
    let lit = |name: &str, value: &str| -> Vec<u8> {
        [&[0u8, name.len() as u8][..], name.as_bytes(), &[value.len() as u8], value.as_bytes()].concat()
    };
    let frame = |kind: u8, flags: u8, stream: u32, payload: &[u8]| -> Vec<u8> {
        let n = payload.len();
        [&[(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags][..], &stream.to_be_bytes(), payload].concat()
    };
    let head =
        [lit(":method", "POST"), lit(":scheme", "http"), lit(":path", "/v1/completions"), lit(":authority", "x")]
            .concat();
    let mut raw = Client::connect(s.addr());
    raw.stream.set_read_timeout(Some(std::time::Duration::from_secs(10))).unwrap();
    let mut out = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n".to_vec();
    out.extend(frame(4, 0, 0, &[]));
    for (stream, trailer) in [(1u32, lit(":method", "POST")), (3, lit("x-check", "ok"))] {
        out.extend(frame(1, 0x4, stream, &head));
        out.extend(frame(0, 0, stream, b"{"));
        out.extend(frame(1, 0x4 | 0x1, stream, &trailer));
    }
    raw.send(&out);
    let (mut reset, mut answered) = (None, false);
    let mut got = Vec::new();
    let mut tmp = [0u8; 4096];
    while reset.is_none() || !answered {
        let n = std::io::Read::read(&mut raw.stream, &mut tmp).expect("frames before the timeout");
        assert!(n > 0, "closed early: {:?}", frames(&got));
        got.extend_from_slice(&tmp[..n]);
        let mut rest = &got[..];
        while rest.len() >= 9 {
            let len = u32::from_be_bytes([0, rest[0], rest[1], rest[2]]) as usize;
            if rest.len() < 9 + len {
                break;
            }
            let stream = u32::from_be_bytes(rest[5..9].try_into().unwrap());
            match (rest[3], stream) {
                (3, 1) => reset = Some(u32::from_be_bytes(rest[9..13].try_into().unwrap())),
                (1, 3) => answered = true,
                (3, 3) => panic!("the clean request was reset"),
                _ => {}
            }
            rest = &rest[9 + len..];
        }
    }
    assert_eq!(reset, Some(1), "RST_STREAM PROTOCOL_ERROR on the malformed stream");
}

/// Everything the server sends until it closes.
fn read_to_close(raw: &mut Client) -> Vec<u8> {
    let mut got = Vec::new();
    let mut tmp = [0u8; 4096];
    while let Ok(n) = std::io::Read::read(&mut raw.stream, &mut tmp) {
        if n == 0 {
            break;
        }
        got.extend_from_slice(&tmp[..n]);
    }
    got
}

/// (type, payload) of every HTTP/2 frame in `bytes`.
fn frames(mut bytes: &[u8]) -> Vec<(u8, Vec<u8>)> {
    let mut out = Vec::new();
    while bytes.len() >= 9 {
        let len = u32::from_be_bytes([0, bytes[0], bytes[1], bytes[2]]) as usize;
        let end = (9 + len).min(bytes.len());
        out.push((bytes[3], bytes[9..end].to_vec()));
        bytes = &bytes[end..];
    }
    out
}

#[test]
fn rst_stream_mid_answer_cancels_the_worker_request() {
    let s = slow_grpc_setup("rst");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        // SSE over h2: reset after the first DATA frame.
        let body = serde_json::json!({"model": MODEL, "prompt": "Tell me", "stream": true, "max_tokens": 12});
        let req = http::Request::post("http://localhost/v1/completions")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let mut ready = c.clone().ready().await.unwrap();
        let (resp, mut send) = ready.send_request(req, false).unwrap();
        send.send_data(bytes::Bytes::from(body.to_string()), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let mut recv = resp.into_body();
        let first = recv.data().await.expect("a first event").unwrap();
        assert!(first.starts_with(b"data: "));
        send.send_reset(h2::Reason::CANCEL);

        // ModelStreamInfer: reset mid-answer as well.
        let (mut st, _) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        st.send(&infer_request("r", vec![text_input("Tell me"), streaming_input(true)], 12));
        let first: ModelStreamInferResponse = st.next().await.expect("a first piece");
        assert_eq!(first.infer_response.unwrap().id, "r");
        drop(st); // dropping both halves resets the stream

        let t0 = Instant::now();
        while s.worker.stats().killed < 2 {
            assert!(
                t0.elapsed() < Duration::from_secs(5),
                "the worker requests were not cancelled: {:?}",
                s.worker.stats().killed
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        // The connection and the shard keep serving.
        let live = h2c::request(&mut c, "GET", "/live", "", vec![]).await;
        assert_eq!(live.status, 200);
        let r = h2c::unary(&mut c, "ServerLive", &ServerLiveRequest {}).await;
        assert_eq!(r.grpc_status(), Some(0));
    });
}

#[test]
fn stream_requests_run_concurrently() {
    let s = slow_grpc_setup("concurrent");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let (mut st, _) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        st.send(&infer_request("a", vec![text_input("Tell me"), streaming_input(true)], 10));
        st.send(&infer_request("b", vec![text_input("Tell me"), streaming_input(true)], 10));
        // Request `b` starts answering before `a` has finished: they run side by side.
        let mut order = Vec::new();
        let mut finals = 0;
        while finals < 2 {
            let r: ModelStreamInferResponse = st.next().await.expect("a response");
            let resp = r.infer_response.unwrap_or_else(|| panic!("error: {}", r.error_message));
            let last = final_flag(&resp) == Some(true);
            finals += last as usize;
            order.push((resp.id, last));
        }
        let a_final = order.iter().position(|(id, last)| id == "a" && *last).unwrap();
        let b_first = order.iter().position(|(id, _)| id == "b").unwrap();
        assert!(b_first < a_final, "requests were answered one after the other: {order:?}");
        assert_eq!(st.finish().await["grpc-status"], "0");

        // A version other than "1" is not served.
        let req = ModelMetadataRequest { name: MODEL.into(), version: "2".into() };
        assert_eq!(h2c::unary(&mut c, "ModelMetadata", &req).await.grpc_status(), Some(5));
        let mut v2 = infer_request("v", vec![text_input("hi")], 2);
        v2.model_version = "2".into();
        assert_eq!(status_of(&mut c, &v2).await.0, Some(5));
    });
}

#[test]
fn grpc_timeout_ends_calls_with_deadline_exceeded_and_cancels_the_worker() {
    let s = slow_grpc_setup("deadline");
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        // 40 tokens at 30 ms each (no natural end) take over a second; the deadline is 300 ms.
        let long_request = |id: &str, inputs| {
            let mut r = infer_request(id, inputs, 40);
            r.parameters.insert(
                "ignore_eos".into(),
                InferParameter { parameter_choice: Some(ParameterChoice::BoolParam(true)) },
            );
            r
        };
        let long = h2c::frame(&long_request("d", vec![text_input("Tell me")]));
        let t0 = Instant::now();
        let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-timeout", "300m")], long.clone()).await;
        let took = t0.elapsed();
        assert_eq!(r.grpc_status(), Some(4), "{}", r.grpc_message());
        assert!(r.grpc_message().contains("Deadline"), "{}", r.grpc_message());
        assert!(took >= Duration::from_millis(290) && took < Duration::from_millis(1000), "answered after {took:?}");

        // ModelStreamInfer: pieces come until the deadline, then the call ends with status 4.
        let (mut st, _) = h2c::Stream::open_with(&mut c, "ModelStreamInfer", &[("grpc-timeout", "400m")]).await;
        st.send(&long_request("s", vec![text_input("Tell me"), streaming_input(true)]));
        let first: ModelStreamInferResponse = st.next().await.expect("a first piece");
        assert_eq!(first.infer_response.expect("a piece").id, "s");
        let trailers = st.trailers().await;
        assert_eq!(trailers["grpc-status"], "4", "{trailers:?}");

        // Both worker requests were cancelled.
        let t0 = Instant::now();
        while s.worker.stats().killed < 2 {
            assert!(t0.elapsed() < Duration::from_secs(5), "worker requests not cancelled: {:?}", s.worker.stats());
            tokio::time::sleep(Duration::from_millis(20)).await;
        }

        // A deadline far enough away changes nothing; a malformed one is INVALID_ARGUMENT.
        let short = h2c::frame(&infer_request("ok", vec![text_input("Tell me")], 2));
        let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-timeout", "20S")], short.clone()).await;
        assert_eq!(r.grpc_status(), Some(0), "{}", r.grpc_message());
        for bad in ["soon", "1.5S", "123456789m"] {
            let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-timeout", bad)], short.clone()).await;
            assert_eq!(r.grpc_status(), Some(3), "{bad}: {}", r.grpc_message());
            assert!(r.grpc_message().contains("grpc-timeout"), "{}", r.grpc_message());
        }
    });
}

/// `msg` framed as one gRPC message compressed as `encoding` ("gzip" or "deflate").
fn compressed_frame(msg: &impl prost::Message, encoding: &str) -> Vec<u8> {
    use flate2::read::{GzEncoder, ZlibEncoder};
    use std::io::Read;
    let plain = msg.encode_to_vec();
    let level = flate2::Compression::default();
    let mut z = Vec::new();
    let read = match encoding {
        "gzip" => GzEncoder::new(&plain[..], level).read_to_end(&mut z),
        _ => ZlibEncoder::new(&plain[..], level).read_to_end(&mut z),
    };
    read.expect("compressed");
    [&[1u8][..], &(z.len() as u32).to_be_bytes(), &z].concat()
}

#[test]
fn compressed_requests_are_read_and_unknown_encodings_are_unimplemented() {
    let s = setup("compress", GRPC_ARGS, &[("DYN_HTTP_BODY_LIMIT_MB", "1")]);
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let req = infer_request("z", vec![text_input("Tell me")], 3);
        let plain: ModelInferResponse = h2c::unary(&mut c, "ModelInfer", &req).await.decode();
        for enc in ["gzip", "deflate"] {
            let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-encoding", enc)], compressed_frame(&req, enc)).await;
            assert_eq!(r.grpc_status(), Some(0), "{enc}: {}", r.grpc_message());
            assert_eq!(r.headers["grpc-accept-encoding"], "identity,deflate,gzip");
            let resp: ModelInferResponse = r.decode();
            assert_eq!(output(&resp, "text_output"), output(&plain, "text_output"), "{enc}");

            // Compressed requests on a stream, beside an uncompressed one.
            let (mut st, head) = h2c::Stream::open_with(&mut c, "ModelStreamInfer", &[("grpc-encoding", enc)]).await;
            assert_eq!(head["grpc-accept-encoding"], "identity,deflate,gzip");
            st.send_raw(compressed_frame(&infer_request("a", vec![text_input("Tell me")], 3), enc));
            st.send(&infer_request("b", vec![text_input("Tell me")], 3));
            let mut ids = Vec::new();
            for _ in 0..2 {
                let r: ModelStreamInferResponse = st.next().await.expect("a response");
                let resp = r.infer_response.unwrap_or_else(|| panic!("error: {}", r.error_message));
                assert_eq!(output(&resp, "text_output"), output(&plain, "text_output"));
                ids.push(resp.id);
            }
            ids.sort();
            assert_eq!(ids, ["a", "b"]);
            assert_eq!(st.finish().await["grpc-status"], "0");
        }
        // `identity` is the same as no encoding.
        let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-encoding", "identity")], h2c::frame(&req)).await;
        assert_eq!(r.grpc_status(), Some(0), "{}", r.grpc_message());

        // An encoding we do not read: UNIMPLEMENTED, naming it and the ones we read; the
        // advertised list does not contain it.
        let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-encoding", "snappy")], h2c::frame(&req)).await;
        assert_eq!(r.grpc_status(), Some(12), "{}", r.grpc_message());
        assert!(r.grpc_message().contains("snappy") && r.grpc_message().contains("gzip"), "{}", r.grpc_message());
        assert_eq!(r.headers["grpc-accept-encoding"], "identity,deflate,gzip");
        let (_, head) = h2c::Stream::open_with(&mut c, "ModelStreamInfer", &[("grpc-encoding", "br")]).await;
        assert_eq!(head["grpc-status"], "12", "a trailers-only answer: {head:?}");

        // The compressed flag without grpc-encoding is INTERNAL; bytes that do not inflate are
        // INVALID_ARGUMENT; a message inflating past the body limit is RESOURCE_EXHAUSTED.
        let r = h2c::raw_call(&mut c, "ModelInfer", compressed_frame(&req, "gzip")).await;
        assert_eq!(r.grpc_status(), Some(13), "{}", r.grpc_message());
        let r = h2c::call_with(&mut c, "ModelInfer", &[("grpc-encoding", "gzip")], vec![1, 0, 0, 0, 3, 1, 2, 3]).await;
        assert_eq!(r.grpc_status(), Some(3), "{}", r.grpc_message());
        let mut huge = infer_request("h", vec![text_input("Tell me")], 3);
        huge.id = "x".repeat(3 * 1024 * 1024);
        let r =
            h2c::call_with(&mut c, "ModelInfer", &[("grpc-encoding", "gzip")], compressed_frame(&huge, "gzip")).await;
        assert!(r.body.is_empty());
        assert_eq!(r.grpc_status(), Some(8), "{}", r.grpc_message());
    });
}
