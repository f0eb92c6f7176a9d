//! The drain's end over HTTP/2: a frontend shut down (as on SIGTERM) with a 1 s grace period
//! while an SSE stream over h2c and a KServe `ModelStreamInfer` call are being answered by a
//! slow worker. At the deadline the SSE stream ends with an error event and `[DONE]` and a
//! clean END_STREAM, the gRPC call with status UNAVAILABLE; both worker requests are
//! cancelled.

mod common;

use std::time::{Duration, Instant};

use common::h2c;
use common::kserve_msg::{infer_request, streaming_input, text_input};
use common::stack::Stack;
use switchyard::kserve::pb::*;
use switchyard::worker::MockConfig;

const MODEL: &str = "qwen3-mock";

fn stream_request() -> ModelInferRequest {
    infer_request("s", vec![text_input("Tell me"), streaming_input(true)], 500)
}

#[test]
fn h2_streams_end_cleanly_when_the_grace_period_ends() {
    let mock = MockConfig {
        itl: Duration::from_millis(20),
        output_tokens: 1000,
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    let args = ["--kserve-grpc-server", "--grpc-metrics-port", "0"];
    let mut s = Stack::start("drain-h2", mock, &args, &[("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", "1")]);
    let rt = h2c::runtime();
    let (sse, grpc) = rt.block_on(async {
        let mut c = h2c::connect(s.addr()).await;
        let body = serde_json::json!({"model": MODEL, "prompt": "Tell me", "stream": true, "max_tokens": 500});
        let req = http::Request::post("http://localhost/v1/completions")
            .header("content-type", "application/json")
            .body(())
            .unwrap();
        let mut ready = c.clone().ready().await.unwrap();
        let (resp, mut send) = ready.send_request(req, false).unwrap();
        send.send_data(bytes::Bytes::from(body.to_string()), true).unwrap();
        let resp = resp.await.unwrap();
        assert_eq!(resp.status(), 200);
        let (st, _) = h2c::Stream::open(&mut c, "ModelStreamInfer").await;
        (resp.into_body(), st)
    });
    let mut st = grpc;
    rt.block_on(async { st.send(&stream_request()) });
    std::thread::sleep(Duration::from_millis(200));
    let t0 = Instant::now();
    let stop = std::thread::spawn(move || {
        s.shutdown_server();
        s
    });
    let (text, trailers) = rt.block_on(async {
        let mut sse = sse;
        let mut text = Vec::new();
        while let Some(chunk) = tokio::time::timeout(Duration::from_secs(10), sse.data()).await.expect("data in time") {
            let chunk = chunk.expect("a clean stream (no reset)");
            let _ = sse.flow_control().release_capacity(chunk.len());
            text.extend_from_slice(&chunk);
        }
        (String::from_utf8(text).unwrap(), st.trailers().await)
    });
    let took = t0.elapsed();
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(4), "ended after {took:?}");
    let cut = "data: {\"error\":{\"message\":\"Service is shutting down\",\"type\":\"service_unavailable\",\"code\":503}}\n\ndata: [DONE]\n\n";
    assert!(text.starts_with("data: {"), "{text}");
    assert!(text.ends_with(cut), "{text}");
    assert_eq!(trailers["grpc-status"], "14", "{trailers:?}");
    let s = stop.join().unwrap();
    let t0 = Instant::now();
    while s.worker.stats().killed < 2 {
        assert!(t0.elapsed() < Duration::from_secs(3), "worker requests not cancelled: {:?}", s.worker.stats());
        std::thread::sleep(Duration::from_millis(10));
    }
}
