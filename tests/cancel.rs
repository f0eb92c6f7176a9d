//! A client that goes away cancels its request at every stage, for every protocol: an
//! in-process switchyard in front of the in-tree mock worker, whose counters say whether the
//! frontend told it to stop (`kill`), and the frontend's own metrics say the request ended as
//! cancelled with nothing left in flight.
//!
//! Stages: before the first token (non-streaming over HTTP/1.1 on io_uring and on epoll,
//! streaming), mid-stream while the worker is quiet, HTTP/2 streams reset or whose connection
//! is lost before the answer, a cancelled unary gRPC call, and a request parked in the kv
//! router's queue.

mod common;

use std::io::{BufRead, Write};
use std::time::{Duration, Instant};

use common::stack::Stack;
use common::{h2c, Client};
use switchyard::kserve::pb::infer_parameter::ParameterChoice;
use switchyard::kserve::pb::model_infer_request::InferInputTensor;
use switchyard::kserve::pb::*;
use switchyard::worker::MockConfig;

const MODEL: &str = "qwen3-mock";

/// A frontend (`args`) in front of one mock worker that waits `ttft` before its first token
/// and `itl` between tokens.
fn stack(tag: &str, args: &[&str], ttft: Duration, itl: Duration) -> Stack {
    let mock = MockConfig {
        ttft,
        itl,
        output_tokens: 40,
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..MockConfig::default()
    };
    Stack::start(&format!("cancel-{tag}"), mock, args, &[])
}

fn scrape(s: &Stack) -> String {
    let r = Client::connect(s.addr()).roundtrip(b"GET /metrics HTTP/1.1\r\n\r\n");
    assert_eq!(r.status, 200);
    String::from_utf8(r.body).unwrap()
}

/// The value of the sample `name{labels}` (0 when absent).
fn sample(text: &str, series: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(series).and_then(|v| v.strip_prefix(' ')))
        .map_or(0.0, |v| v.parse().unwrap())
}

fn cancelled_series(endpoint: &str, request_type: &str) -> String {
    format!(
        "dynamo_frontend_requests_total{{endpoint=\"{endpoint}\",error_type=\"cancelled\",model=\"{MODEL}\",\
         request_type=\"{request_type}\",status=\"error\"}}"
    )
}

/// Waits (≤ `within`) until the worker has had `n` requests, in all.
fn wait_requests(s: &Stack, n: u64) {
    let t0 = Instant::now();
    while s.worker.stats().frames < n {
        assert!(t0.elapsed() < Duration::from_secs(10), "the worker never got request {n}: {:?}", s.worker.stats());
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until the worker was told to stop `n` requests in all, within `within` of now, then
/// checks the frontend holds nothing in flight and counted `cancelled` as `series` says.
fn assert_cancelled(s: &Stack, n: u64, within: Duration, series: &[(String, f64)]) {
    let t0 = Instant::now();
    while s.worker.stats().killed < n {
        assert!(
            t0.elapsed() < within,
            "the worker was not told to stop request {n} within {within:?}: {:?}",
            s.worker.stats()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    let t0 = Instant::now();
    loop {
        let text = scrape(s);
        let inflight = sample(&text, &format!("dynamo_frontend_inflight_requests{{model=\"{MODEL}\"}}"));
        let active = sample(&text, &format!("dynamo_frontend_active_requests{{model=\"{MODEL}\"}}"));
        let counted = series.iter().all(|(name, v)| sample(&text, name) == *v);
        if inflight == 0.0 && active == 0.0 && counted {
            break;
        }
        assert!(t0.elapsed() < Duration::from_secs(5), "want {series:?}, nothing in flight:\n{text}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Sends `body` to `path` on a new connection; the connection is returned to read or drop.
fn send(addr: std::net::SocketAddr, path: &str, body: &serde_json::Value) -> std::io::BufReader<std::net::TcpStream> {
    let body = body.to_string();
    let mut c = std::net::TcpStream::connect(addr).unwrap();
    c.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    write!(c, "POST {path} HTTP/1.1\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        .unwrap();
    std::io::BufReader::new(c)
}

fn chat(stream: bool) -> serde_json::Value {
    serde_json::json!({"model": MODEL, "stream": stream, "max_tokens": 30,
                       "messages": [{"role": "user", "content": "Tell me a story"}]})
}

/// HTTP/1.1, on each I/O driver. A worker slow to its first token (8 s): a non-streaming
/// request and a streamed one whose clients close before it. A worker quick to its first
/// token but slow after (3 s between tokens): a non-streaming request closed after tokens
/// were made (its answer not yet written), a streamed one closed mid-stream while the worker
/// is quiet (nothing is written that could fail). Each is killed at the worker within a
/// second or two, long before it would have ended, and counted cancelled; the next request is
/// answered.
#[test]
fn http1_clients_that_leave_cancel_their_requests() {
    for driver in ["io-uring", "epoll"] {
        let args = ["--io-driver", driver];
        let s = stack(&format!("h1-ttft-{driver}"), &args, Duration::from_secs(8), Duration::ZERO);
        let c = send(s.addr(), "/v1/chat/completions", &chat(false));
        wait_requests(&s, 1);
        drop(c);
        let unary = cancelled_series("chat_completions", "unary");
        assert_cancelled(&s, 1, Duration::from_secs(2), &[(unary.clone(), 1.0)]);
        let c =
            send(s.addr(), "/v1/completions", &serde_json::json!({"model": MODEL, "prompt": "Tell", "stream": true}));
        wait_requests(&s, 2);
        drop(c);
        let streamed = cancelled_series("completions", "stream");
        assert_cancelled(&s, 2, Duration::from_secs(2), &[(unary, 1.0), (streamed, 1.0)]);
        drop(s);

        let s = stack(&format!("h1-itl-{driver}"), &args, Duration::ZERO, Duration::from_secs(3));
        let c = send(s.addr(), "/v1/chat/completions", &chat(false));
        wait_requests(&s, 1);
        std::thread::sleep(Duration::from_millis(100));
        drop(c);
        let unary = cancelled_series("chat_completions", "unary");
        assert_cancelled(&s, 1, Duration::from_secs(2), &[(unary.clone(), 1.0)]);
        let mut c = send(s.addr(), "/v1/chat/completions", &chat(true));
        let mut line = String::new();
        while !line.starts_with("data: ") {
            line.clear();
            assert!(c.read_line(&mut line).unwrap() > 0, "the stream ended before its first event");
        }
        drop(c);
        let streamed = cancelled_series("chat_completions", "stream");
        assert_cancelled(&s, 2, Duration::from_secs(3), &[(unary, 1.0), (streamed, 1.0)]);
        let text = scrape(&s);
        assert_eq!(sample(&text, "dynamo_frontend_disconnected_clients"), 2.0, "{text}");
        for rt in ["unary", "stream"] {
            let series = format!(
                "dynamo_frontend_model_cancellation_total{{endpoint=\"chat_completions\",model=\"{MODEL}\",request_type=\"{rt}\"}}"
            );
            assert_eq!(sample(&text, &series), 1.0, "{text}");
        }

        // The next request is answered (its first token at once, its second 3 s later).
        let mut one = chat(false);
        one["max_tokens"] = 1.into();
        let r = send(s.addr(), "/v1/chat/completions", &one);
        let status = r.lines().next().unwrap().unwrap();
        assert!(status.starts_with("HTTP/1.1 200"), "{driver}: {status}");
    }
}

fn infer_request(id: &str, max_tokens: i64) -> ModelInferRequest {
    let text = InferInputTensor {
        name: "text_input".into(),
        datatype: "BYTES".into(),
        shape: vec![1],
        contents: Some(InferTensorContents { bytes_contents: vec![b"Tell me".to_vec()], ..Default::default() }),
        ..Default::default()
    };
    let max = InferParameter { parameter_choice: Some(ParameterChoice::Int64Param(max_tokens)) };
    ModelInferRequest {
        model_name: MODEL.into(),
        id: id.into(),
        inputs: vec![text],
        parameters: [("max_tokens".to_string(), max)].into(),
        ..Default::default()
    }
}

/// Lets the client's connection task send what was queued (the checks that follow block the
/// runtime's one thread).
async fn flush() {
    tokio::time::sleep(Duration::from_millis(20)).await;
}

/// HTTP/2 (h2c) and gRPC, the worker 8 s from its first token: a non-streaming OpenAI request
/// whose stream the client resets, one whose whole connection the client drops, and a unary
/// KServe `ModelInfer` call the client cancels. Each is killed at the worker at once.
#[test]
fn h2_resets_lost_connections_and_cancelled_grpc_calls_cancel_their_requests() {
    let args = ["--kserve-grpc-server", "--grpc-metrics-port", "0"];
    let s = stack("h2", &args, Duration::from_secs(8), Duration::ZERO);
    let rt = h2c::runtime();
    rt.block_on(async {
        let post = |c: &mut h2::client::SendRequest<bytes::Bytes>| {
            let req = http::Request::post("http://localhost/v1/chat/completions")
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (resp, mut send) = c.send_request(req, false).unwrap();
            send.send_data(bytes::Bytes::from(chat(false).to_string()), true).unwrap();
            (resp, send)
        };
        // RST_STREAM before the answer.
        let mut c = h2c::connect(s.addr()).await.ready().await.unwrap();
        let (resp, mut send) = post(&mut c);
        while s.worker.stats().frames < 1 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        send.send_reset(h2::Reason::CANCEL);
        drop(resp);
        flush().await;
        let unary = cancelled_series("chat_completions", "unary");
        assert_cancelled(&s, 1, Duration::from_millis(500), &[(unary.clone(), 1.0)]);

        // The whole connection dropped before the answer.
        let tcp = tokio::net::TcpStream::connect(s.addr()).await.unwrap();
        let (c2, conn) = h2::client::handshake(tcp).await.unwrap();
        let driver = tokio::spawn(async move {
            let _ = conn.await;
        });
        let mut c2 = c2.ready().await.unwrap();
        let (resp, send) = post(&mut c2);
        while s.worker.stats().frames < 2 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        driver.abort(); // drops the connection: its socket closes
        drop((resp, send, c2));
        flush().await;
        assert_cancelled(&s, 2, Duration::from_millis(500), &[(unary.clone(), 2.0)]);

        // A unary gRPC call cancelled (RST_STREAM CANCEL, as a client library cancels).
        let req = http::Request::post("http://localhost/inference.GRPCInferenceService/ModelInfer")
            .header("content-type", "application/grpc")
            .header("te", "trailers")
            .body(())
            .unwrap();
        let (resp, mut send) = c.send_request(req, false).unwrap();
        send.send_data(bytes::Bytes::from(h2c::frame(&infer_request("g", 20))), true).unwrap();
        while s.worker.stats().frames < 3 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        send.send_reset(h2::Reason::CANCEL);
        drop(resp);
        flush().await;
        assert_cancelled(&s, 3, Duration::from_millis(500), &[(unary, 2.0)]);

        // The first connection still serves.
        let live = h2c::request(&mut c, "GET", "/live", "", vec![]).await;
        assert_eq!(live.status, 200);
    });
}
