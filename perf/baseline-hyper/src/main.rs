//! Baseline for perf/http_live.sh: tokio current_thread + hyper 1.x, HTTP/1.1 keep-alive,
//! serving the same `GET /live` response as switchyard. Usage: `baseline-hyper PORT`.

use std::convert::Infallible;

use bytes::Bytes;
use http_body_util::Full;
use hyper::body::Incoming;
use hyper::header::{HeaderValue, CONTENT_TYPE};
use hyper::server::conn::http1;
use hyper::service::service_fn;
use hyper::{Method, Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio::net::TcpListener;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const LIVE_BODY: &[u8] = br#"{"status":"live","message":"Service is live"}"#;

async fn handle(req: Request<Incoming>) -> Result<Response<Full<Bytes>>, Infallible> {
    if req.method() == Method::GET && req.uri().path() == "/live" {
        let mut resp = Response::new(Full::new(Bytes::from_static(LIVE_BODY)));
        resp.headers_mut().insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
        Ok(resp)
    } else {
        let mut resp = Response::new(Full::new(Bytes::new()));
        *resp.status_mut() = StatusCode::NOT_FOUND;
        Ok(resp)
    }
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let port: u16 = std::env::args()
        .nth(1)
        .and_then(|p| p.parse().ok())
        .expect("usage: baseline-hyper PORT");
    let listener = TcpListener::bind(("127.0.0.1", port)).await.expect("bind");
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(x) => x,
            Err(_) => continue,
        };
        let _ = stream.set_nodelay(true);
        tokio::spawn(async move {
            let _ = http1::Builder::new()
                .serve_connection(TokioIo::new(stream), service_fn(handle))
                .await;
        });
    }
}
