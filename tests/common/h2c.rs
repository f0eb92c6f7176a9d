//! A raw HTTP/2 (prior-knowledge h2c) client for tests: gRPC calls, bidirectional gRPC
//! streams and plain HTTP requests, on a current-thread tokio runtime.

use std::net::SocketAddr;
use std::time::Duration;

use bytes::{Buf, BufMut, Bytes, BytesMut};
use h2::client::SendRequest;
use h2::{RecvStream, SendStream};

/// Everything a call got back.
#[derive(Debug, Default)]
pub struct Reply {
    pub status: u16,
    pub headers: http::HeaderMap,
    pub body: Vec<u8>,
    pub trailers: Option<http::HeaderMap>,
}

impl Reply {
    /// `grpc-status`, from the trailers or (trailers-only) the head.
    pub fn grpc_status(&self) -> Option<u8> {
        let v =
            self.trailers.as_ref().and_then(|t| t.get("grpc-status")).or_else(|| self.headers.get("grpc-status"))?;
        v.to_str().ok()?.parse().ok()
    }
    pub fn grpc_message(&self) -> String {
        let v = self.trailers.as_ref().and_then(|t| t.get("grpc-message")).or_else(|| self.headers.get("grpc-message"));
        v.and_then(|v| v.to_str().ok()).unwrap_or("").to_string()
    }
    /// The gRPC messages of the body.
    pub fn messages(&self) -> Vec<Bytes> {
        let mut b = Bytes::from(self.body.clone());
        let mut out = Vec::new();
        while b.len() >= 5 {
            assert_eq!(b[0], 0, "compressed message");
            let n = u32::from_be_bytes([b[1], b[2], b[3], b[4]]) as usize;
            b.advance(5);
            out.push(b.split_to(n));
        }
        assert!(b.is_empty(), "trailing bytes after the last message");
        out
    }
    pub fn decode<M: prost::Message + Default>(&self) -> M {
        let msgs = self.messages();
        assert_eq!(msgs.len(), 1, "{} messages, status {:?} {}", msgs.len(), self.grpc_status(), self.grpc_message());
        M::decode(msgs[0].clone()).expect("a valid message")
    }
}

/// A gRPC message frame.
pub fn frame(msg: &impl prost::Message) -> Vec<u8> {
    let mut out = BytesMut::new();
    out.put_u8(0);
    out.put_u32(msg.encoded_len() as u32);
    msg.encode(&mut out).unwrap();
    out.to_vec()
}

pub fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap()
}

/// Open an h2c connection (its driver runs on the current runtime).
pub async fn connect(addr: SocketAddr) -> SendRequest<Bytes> {
    let tcp = tokio::net::TcpStream::connect(addr).await.expect("connect");
    tcp.set_nodelay(true).unwrap();
    let (send, conn) = h2::client::handshake(tcp).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    send
}

/// One request: head, whole body, then read everything back (10 s at most).
pub async fn request(
    client: &mut SendRequest<Bytes>,
    method: &str,
    path: &str,
    content_type: &str,
    body: Vec<u8>,
) -> Reply {
    let mut headers = Vec::new();
    if !content_type.is_empty() {
        headers.push(("content-type", content_type));
    }
    if content_type.starts_with("application/grpc") {
        headers.push(("te", "trailers"));
    }
    request_with(client, method, path, &headers, body).await
}

/// As [`request`], with the request headers given.
pub async fn request_with(
    client: &mut SendRequest<Bytes>,
    method: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: Vec<u8>,
) -> Reply {
    let fut = async {
        let mut c = client.clone().ready().await.expect("ready");
        let mut req = http::Request::builder().method(method).uri(format!("http://localhost{path}"));
        for (k, v) in headers {
            req = req.header(*k, *v);
        }
        let (resp, mut send) = c.send_request(req.body(()).unwrap(), body.is_empty()).expect("send");
        if !body.is_empty() {
            send.send_data(Bytes::from(body), true).expect("data");
        }
        read_reply(resp.await.expect("response head")).await
    };
    tokio::time::timeout(Duration::from_secs(10), fut).await.expect("reply within 10 s")
}

async fn read_reply(resp: http::Response<RecvStream>) -> Reply {
    let (parts, mut recv) = resp.into_parts();
    let mut body = Vec::new();
    while let Some(chunk) = recv.data().await {
        let chunk = chunk.expect("data");
        let _ = recv.flow_control().release_capacity(chunk.len());
        body.extend_from_slice(&chunk);
    }
    let trailers = recv.trailers().await.expect("trailers");
    Reply { status: parts.status.as_u16(), headers: parts.headers, body, trailers }
}

/// A unary gRPC call of `/inference.GRPCInferenceService/{method}`.
pub async fn unary(client: &mut SendRequest<Bytes>, method: &str, msg: &impl prost::Message) -> Reply {
    raw_call(client, method, frame(msg)).await
}

/// A gRPC call with a body given byte for byte.
pub async fn raw_call(client: &mut SendRequest<Bytes>, method: &str, body: Vec<u8>) -> Reply {
    let path = format!("/inference.GRPCInferenceService/{method}");
    request(client, "POST", &path, "application/grpc", body).await
}

/// A gRPC call with extra request headers (`grpc-timeout`, `grpc-encoding`, ...).
pub async fn call_with(client: &mut SendRequest<Bytes>, method: &str, extra: &[(&str, &str)], body: Vec<u8>) -> Reply {
    let path = format!("/inference.GRPCInferenceService/{method}");
    let mut headers = vec![("content-type", "application/grpc"), ("te", "trailers")];
    headers.extend_from_slice(extra);
    request_with(client, "POST", &path, &headers, body).await
}

/// An open bidirectional call.
pub struct Stream {
    send: SendStream<Bytes>,
    recv: RecvStream,
    buf: BytesMut,
}

impl Stream {
    pub async fn open(client: &mut SendRequest<Bytes>, method: &str) -> (Stream, http::HeaderMap) {
        Stream::open_with(client, method, &[]).await
    }

    /// As [`Stream::open`], with extra request headers.
    pub async fn open_with(
        client: &mut SendRequest<Bytes>,
        method: &str,
        extra: &[(&str, &str)],
    ) -> (Stream, http::HeaderMap) {
        let mut c = client.clone().ready().await.expect("ready");
        let mut req = http::Request::builder()
            .method("POST")
            .uri(format!("http://localhost/inference.GRPCInferenceService/{method}"))
            .header("content-type", "application/grpc")
            .header("te", "trailers");
        for (k, v) in extra {
            req = req.header(*k, *v);
        }
        let req = req.body(()).unwrap();
        let (resp, send) = c.send_request(req, false).expect("send");
        let resp = tokio::time::timeout(Duration::from_secs(10), resp).await.expect("head in time").expect("head");
        let (parts, recv) = resp.into_parts();
        (Stream { send, recv, buf: BytesMut::new() }, parts.headers)
    }

    pub fn send_raw(&mut self, bytes: Vec<u8>) {
        self.send.send_data(Bytes::from(bytes), false).expect("send");
    }

    pub fn send(&mut self, msg: &impl prost::Message) {
        self.send_raw(frame(msg));
    }

    /// The next message; `None` at the end of the response stream (10 s at most).
    pub async fn next<M: prost::Message + Default>(&mut self) -> Option<M> {
        loop {
            if self.buf.len() >= 5 {
                let n = u32::from_be_bytes([self.buf[1], self.buf[2], self.buf[3], self.buf[4]]) as usize;
                if self.buf.len() >= 5 + n {
                    self.buf.advance(5);
                    return Some(M::decode(self.buf.split_to(n)).expect("a valid message"));
                }
            }
            let chunk = tokio::time::timeout(Duration::from_secs(10), self.recv.data()).await.expect("data in time")?;
            let chunk = chunk.expect("data");
            let _ = self.recv.flow_control().release_capacity(chunk.len());
            self.buf.extend_from_slice(&chunk);
        }
    }

    /// Close our side and read the trailers.
    pub async fn finish(mut self) -> http::HeaderMap {
        self.send.send_data(Bytes::new(), true).expect("end");
        while let Some(c) = self.recv.data().await {
            let _ = c;
        }
        self.recv.trailers().await.expect("trailers").expect("trailers present")
    }

    /// Read what is left of the response (without closing our side) and its trailers.
    pub async fn trailers(mut self) -> http::HeaderMap {
        let rest = async {
            while let Some(c) = self.recv.data().await {
                let _ = c;
            }
            self.recv.trailers().await.expect("trailers").expect("trailers present")
        };
        tokio::time::timeout(Duration::from_secs(10), rest).await.expect("trailers in time")
    }
}
