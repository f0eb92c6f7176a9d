//! The shard's service over HTTP/2: every stream is either a gRPC call (handed to
//! [`crate::kserve`]) or an HTTP request answered by the very same [`Frontend`] as HTTP/1.1.
//!
//! An HTTP request over h2 is turned into the one request type the routes take
//! ([`Request::synthetic`]: same limits, same parser), answered by [`Frontend`]'s
//! [`Service::call`], and its [`Response`] is written back as HTTP/2: a whole body as DATA
//! within flow control, a streamed one (SSE) one DATA frame per produced chunk. A stream the
//! client resets (RST_STREAM), before its answer is ready or while it streams, drops the call
//! or the producer's receiver, which cancels the worker request as a closed HTTP/1.1
//! connection does.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};
use h2::server::SendResponse;
use h2::RecvStream;

use super::Frontend;
use crate::h2::body::{self, ReadError};
use crate::http1::{Body, Request, Response, Service};

impl crate::h2::Handler for Frontend {
    async fn stream(self: Rc<Self>, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>) {
        // A stream counts as a request in flight for the shard's drain.
        let _in_flight = self.ctx.gate.enter();
        let draining = self.ctx.gate.is_closed();
        if crate::kserve::grpc::is_grpc(req.headers()) {
            // API keys (when on) guard the inference calls, which are charged with their
            // tokens; health and metadata stay open, as the HTTP routes of the same kind.
            let path = req.uri().path();
            let mut key = None;
            if path.ends_with("/ModelInfer") || path.ends_with("/ModelStreamInfer") {
                match self.admit(|name| req.headers().get(name).map(|v| v.as_bytes())) {
                    Ok(k) => key = k,
                    Err(refusal) => {
                        crate::infer::tracker::count_failure(&self.ctx.metrics, refusal.error.kind());
                        crate::kserve::grpc::fail(respond, &refusal.error);
                        return;
                    }
                }
            }
            crate::kserve::serve(&self.ctx, req, respond, key).await;
            return;
        }
        let (parts, mut recv) = req.into_parts();
        let limits = self.ctx.conn.limits;
        let resp = match body::read_all(&mut recv, limits.max_body_bytes).await {
            Ok(_) if crate::h2::trailers::malformed(&parts.extensions) => {
                // Malformed (RFC 9113 §8.1): pseudo-header fields in the trailers.
                let mut respond = respond;
                respond.send_reset(h2::Reason::PROTOCOL_ERROR);
                return;
            }
            Ok(bytes) => match to_request(&parts, bytes, &limits) {
                Ok(mut r) => {
                    r.arrived_draining = draining;
                    // A stream reset (or its connection lost) while the answer is made drops
                    // the call, which cancels the request at its worker.
                    monoio::select! {
                        resp = self.call(r) => resp,
                        _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => return,
                        _ = self.ctx.gate.finished() => Response::error(&crate::error::Error::shutting_down()),
                    }
                }
                Err(e) => Response::error(&e),
            },
            Err(ReadError::TooLarge) => {
                self.ctx.metrics.edge(crate::metrics::Edge::BodyTooLarge);
                Response::error(&crate::http1::request::body_too_large(&limits))
            }
            Err(ReadError::Stream(_)) => return,
        };
        send_response(respond, resp, parts.method == http::Method::HEAD, &self.ctx).await;
    }
}

/// The routes' request type from an HTTP/2 request head and its body.
fn to_request(
    parts: &http::request::Parts,
    body: Bytes,
    limits: &crate::http1::Limits,
) -> Result<Request, crate::Error> {
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let headers = parts.headers.iter().map(|(n, v)| (n.as_str(), v.as_bytes()));
    let req = Request::synthetic(parts.method.as_str(), target, headers, body, limits)?;
    Ok(req)
}

/// Write `resp` on the stream: head, then the body within flow control.
async fn send_response(
    mut respond: SendResponse<Bytes>,
    mut resp: Response,
    head_only: bool,
    ctx: &crate::shard::ShardCtx,
) {
    let date = &ctx.date;
    let chunks = resp.take_stream();
    let mut head = http::Response::builder().status(resp.status);
    if let Some(ct) = resp.content_type {
        head = head.header(http::header::CONTENT_TYPE, ct);
    }
    for (name, value) in &resp.headers {
        if *name != "connection" {
            head = head.header(*name, value.as_str());
        }
    }
    if chunks.is_none() {
        head = head.header(http::header::CONTENT_LENGTH, resp.body.len());
    }
    head = date.with(|d| head.header(http::header::DATE, d));
    let head = match head.body(()) {
        Ok(h) => h,
        // A header value HTTP/2 cannot carry: answer 500 rather than drop the stream.
        Err(_) => http::Response::builder().status(500).body(()).unwrap_or_default(),
    };
    let whole = match std::mem::replace(&mut resp.body, Body::Empty) {
        Body::Empty | Body::Stream(_) => Bytes::new(),
        Body::Static(b) => Bytes::from_static(b),
        Body::Bytes(b) => b,
    };
    let end = chunks.is_none() && (whole.is_empty() || head_only);
    let Ok(mut send) = respond.send_response(head, end) else { return };
    if end {
        return;
    }
    let Some(mut chunks) = chunks else {
        let _ = body::send(&mut send, whole, true).await;
        return;
    };
    let finished = ctx.gate.finished();
    let mut finished = std::pin::pin!(finished);
    loop {
        let next = monoio::select! {
            c = chunks.recv() => c,
            _ = body::reset(&mut send) => return,
            _ = &mut finished => {
                // The drain is over: what is made goes out, then the body's clean end.
                let mut rest = BytesMut::new();
                while let Some(more) = chunks.try_recv() {
                    rest.extend_from_slice(&more);
                }
                if let Some(cut) = resp.cut {
                    rest.extend_from_slice(cut);
                }
                let _ = body::send(&mut send, rest.freeze(), true).await;
                return;
            },
        };
        let Some(first) = next else {
            let _ = send.send_data(Bytes::new(), true);
            return;
        };
        // Whatever else is already queued goes out in the same DATA frame.
        let data = match chunks.try_recv() {
            None => first,
            Some(more) => {
                let mut joined = BytesMut::from(&first[..]);
                joined.extend_from_slice(&more);
                while let Some(more) = chunks.try_recv() {
                    joined.extend_from_slice(&more);
                }
                joined.freeze()
            }
        };
        if head_only {
            continue;
        }
        if body::send(&mut send, data, false).await.is_err() {
            return;
        }
    }
}
