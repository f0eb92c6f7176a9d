//! KServe v2 gRPC (`inference.GRPCInferenceService`, with Triton's extensions) on the shard's
//! HTTP/2 connections.
//!
//! * [`pb`]: the protobuf messages, generated from `proto/` (Triton's public .proto files);
//! * [`grpc`]: message framing, status trailers, unary and streaming replies;
//! * [`meta`]: ServerLive/Ready, ModelReady, ServerMetadata, ModelMetadata, ModelConfig,
//!   RepositoryIndex, from the shard's Registry snapshot;
//! * [`infer`]: ModelInfer on completions-backed models, through the inference core as
//!   `/v1/completions` requests;
//! * [`tensor`], [`tensor_in`], [`tensor_meta`]: tensor models (`model_input = Tensor`):
//!   requests sent to the worker as tensors, its tensors answered, metadata from the card's
//!   `tensor_model_config`;
//! * [`stream`]: `ModelStreamInfer`, a bidirectional stream of requests.
//!
//! Called by the service's HTTP/2 handler for every stream whose content type is
//! `application/grpc`. Answers with `--kserve-grpc-server` only; without it every call is
//! UNIMPLEMENTED. Errors are gRPC statuses ([`crate::error::Kind::grpc_code`]); nothing here
//! closes the connection, which other streams share.
//!
//! A call's `grpc-timeout` bounds it: when the deadline passes before the answer is ready the
//! call ends with DEADLINE_EXCEEDED and its work is dropped, which cancels the worker request.
//! Compressed requests (`grpc-encoding` gzip or deflate) are read, see [`grpc::Encoding`].

pub mod grpc;
pub mod infer;
pub mod meta;
pub mod pb;
pub mod stream;
pub mod tensor;
pub mod tensor_in;
pub mod tensor_meta;

use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;

use crate::error::{Error, Kind};
use crate::h2::body;
use crate::infer::ApiKey;
use crate::shard::ShardCtx;
use grpc::{decode, frame, Decoder, Encoding};

/// The path prefix of the service's methods.
pub const SERVICE: &str = "/inference.GRPCInferenceService/";

/// Serve one gRPC call, admitted with `key`.
pub async fn serve(ctx: &Rc<ShardCtx>, req: http::Request<RecvStream>, mut respond: SendResponse<Bytes>, key: ApiKey) {
    let (parts, mut recv) = req.into_parts();
    if !ctx.shared.config.kserve_grpc {
        let e = Error::new(Kind::NotImplemented, "the KServe gRPC service is off (start with --kserve-grpc-server)");
        return grpc::fail(respond, &e);
    }
    let path = parts.uri.path();
    let method = match path.strip_prefix(SERVICE) {
        Some(m) if parts.method == http::Method::POST => m,
        _ => return grpc::fail(respond, &Error::new(Kind::NotImplemented, format!("unknown method {path}"))),
    };
    let call = match (Encoding::of(&parts.headers), grpc::deadline(&parts.headers)) {
        (Ok(encoding), Ok(deadline)) => Call { max: ctx.conn.limits.max_body_bytes, encoding, deadline },
        (Err(e), _) | (_, Err(e)) => return grpc::fail(respond, &e),
    };
    if method == "ModelStreamInfer" {
        return stream::serve(ctx, recv, respond, call, key).await;
    }
    // Pseudo-header fields in the request's trailers make it malformed (RFC 9113 §8.1).
    let malformed = || crate::h2::trailers::malformed(&parts.extensions);
    let answer = async {
        let msg = read_one(&mut recv, &call).await?;
        if malformed() {
            return Err(None);
        }
        Ok::<_, Option<Error>>(unary(ctx, method, msg, key).await)
    };
    let result = monoio::select! {
        r = answer => r,
        _ = grpc::until(call.deadline) => Err(Some(grpc::expired())),
        // A cancelled call (RST_STREAM) drops the answer: the request is cancelled at its worker.
        _ = std::future::poll_fn(|cx| respond.poll_reset(cx)) => Err(None),
        _ = ctx.gate.finished() => Err(Some(Error::shutting_down())),
    };
    match result {
        Ok(result) => grpc::unary(respond, result).await,
        Err(Some(e)) => grpc::fail(respond, &e),
        Err(None) if malformed() => {
            respond.send_reset(h2::Reason::PROTOCOL_ERROR);
        }
        Err(None) => {}
    }
}

/// How one call reads its request messages, and when it must be answered by.
#[derive(Clone, Copy, Debug)]
pub struct Call {
    /// Most bytes of one message (compressed or inflated).
    pub max: usize,
    pub encoding: Encoding,
    /// From `grpc-timeout`.
    pub deadline: Option<Instant>,
}

/// The one message of a unary call. `Err(None)`: the client reset the stream.
async fn read_one(recv: &mut RecvStream, call: &Call) -> Result<Bytes, Option<Error>> {
    let mut decoder = Decoder::new(call.max, call.encoding);
    let mut msg = None;
    loop {
        while let Some(m) = decoder.next_message()? {
            if msg.replace(m).is_some() {
                return Err(Some(Error::new(Kind::BadRequest, "a unary call carries exactly one message")));
            }
        }
        match body::next_data(recv).await {
            Some(Ok(chunk)) => decoder.push(&chunk),
            Some(Err(_)) => return Err(None),
            None if decoder.pending() > 0 => {
                return Err(Some(Error::new(Kind::BadRequest, "the request ended inside a gRPC message")))
            }
            None => {
                return msg.ok_or_else(|| Some(Error::new(Kind::BadRequest, "the call carries no request message")))
            }
        }
    }
}

/// Decode the request of a unary method, answer it, frame the reply.
async fn unary(ctx: &Rc<ShardCtx>, method: &str, msg: Bytes, key: ApiKey) -> Result<Bytes, Error> {
    let registry = ctx.registry();
    match method {
        "ServerLive" => decode::<pb::ServerLiveRequest>(msg).map(|_| frame(&pb::ServerLiveResponse { live: true })),
        "ServerReady" => decode::<pb::ServerReadyRequest>(msg)
            .map(|_| frame(&pb::ServerReadyResponse { ready: !ctx.gate.is_closed() })),
        "ModelReady" => meta::model_ready(&registry, decode(msg)?).map(|r| frame(&r)),
        "ServerMetadata" => decode::<pb::ServerMetadataRequest>(msg).map(|_| frame(&meta::server_metadata())),
        "ModelMetadata" => meta::model_metadata(&registry, decode(msg)?).map(|r| frame(&r)),
        "ModelConfig" => meta::model_config(&registry, decode(msg)?).map(|r| frame(&r)),
        "RepositoryIndex" => Ok(frame(&meta::repository_index(&registry, decode(msg)?))),
        "ModelInfer" => model_infer(ctx, decode(msg)?, key).await.map(|r| frame(&r)),
        other => Err(Error::new(Kind::NotImplemented, format!("method {other} is not implemented"))),
    }
}

/// Unary ModelInfer: one whole answer (`streaming` is refused here, as in Dynamo).
async fn model_infer(
    ctx: &Rc<ShardCtx>,
    req: pb::ModelInferRequest,
    key: ApiKey,
) -> Result<pb::ModelInferResponse, Error> {
    meta::known(&ctx.registry(), &req.model_name, &req.model_version)?;
    if tensor::is_tensor(ctx, &req.model_name) {
        return tensor::start(ctx, req, false).await?.whole().await;
    }
    let r = infer::parse(&req)?;
    if r.stream {
        return Err(Error::new(Kind::BadRequest, "Streaming is not supported for this endpoint"));
    }
    let piece = infer::start(ctx, &r, key).await?.whole().await?;
    Ok(infer::response(&r, Some(&piece), None))
}
