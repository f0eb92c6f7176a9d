//! `ModelStreamInfer`: a bidirectional stream of inference requests and their responses.
//!
//! Requests are served concurrently, as Triton serves a decoupled model: each one starts on
//! its own task as soon as its message is complete, and every task hands its responses to
//! the one writer of the stream, which sends them as they come (a request's own responses in
//! order; the `id` of each response names its request). A request that cannot be served
//! (malformed protobuf, unknown model, bad inputs, a worker failure) gets a response whose
//! `error_message` says why, and the stream stays open for the next one. With `streaming`
//! set, every generated piece is its own response; the last one (the one with a finish
//! reason) carries `triton_final_response = true` unless the client asked for an empty final
//! response (`triton_enable_empty_final_response`), which then follows it.
//!
//! A request for a tensor model is answered by [`super::tensor`]: one stream response per
//! worker response, worker parameters passed on.
//!
//! At most [`MAX_IN_FLIGHT`] requests of one stream run at once; past that the stream's
//! messages wait in flow control until one finishes.
//!
//! The call ends with status OK once the client has closed its side and every request is
//! answered. A framing failure (oversized message, one that does not inflate, a message cut
//! by the end of the stream) ends it with another status: the rest of the byte stream cannot
//! be trusted after it. So does the call's deadline (`grpc-timeout`): DEADLINE_EXCEEDED, and
//! every request still running is dropped at once, which cancels its worker request. A
//! client that resets the stream (or goes away) stops the writer; each task notices at once
//! and drops its worker stream, which cancels the request. When the shard's drain ends
//! (the grace period after SIGTERM) the call ends with UNAVAILABLE the same way.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;

use super::grpc::{self, decode, Decoder, Replies};
use super::infer::{self, TextRequest};
use super::pb::{ModelInferRequest, ModelStreamInferResponse};
use super::Call;
use crate::error::{Error, Kind};
use crate::h2::body;
use crate::shard::{local, ShardCtx};

/// Most requests of one stream answered at the same time.
pub const MAX_IN_FLIGHT: usize = 256;

/// Serve one `ModelStreamInfer` call.
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    recv: RecvStream,
    respond: SendResponse<Bytes>,
    call: Call,
    key: crate::infer::ApiKey,
) {
    let Some(mut out) = Replies::start(respond) else { return };
    let (tx, mut rx) = local::channel::<ModelStreamInferResponse>();
    let ending: Rc<RefCell<Option<Error>>> = Rc::default();
    monoio::spawn(read_requests(ctx.clone(), recv, call, key, tx, ending.clone()));
    // One timer for the whole call, not one per message.
    let mut expiry = std::pin::pin!(grpc::until(call.deadline));
    let finished = ctx.gate.finished();
    let mut finished = std::pin::pin!(finished);
    loop {
        let next = monoio::select! {
            m = rx.recv() => m,
            // Dropping `rx` tells every task the client is gone.
            _ = body::reset(out.stream()) => return,
            _ = &mut expiry => {
                *ending.borrow_mut() = Some(grpc::expired());
                break;
            }
            // The drain is over: the call ends with UNAVAILABLE (its requests are dropped).
            _ = &mut finished => {
                *ending.borrow_mut() = Some(Error::shutting_down());
                break;
            }
        };
        match next {
            Some(msg) => {
                if !out.send(&msg).await {
                    return;
                }
            }
            // The client closed its side and every request is answered.
            None => break,
        }
    }
    let err = ending.borrow_mut().take();
    out.finish(err.as_ref());
}

/// Cut request messages off the stream and start a task for each; a framing failure is left
/// in `ending`.
async fn read_requests(
    ctx: Rc<ShardCtx>,
    mut recv: RecvStream,
    call: Call,
    key: crate::infer::ApiKey,
    tx: local::Sender<ModelStreamInferResponse>,
    ending: Rc<RefCell<Option<Error>>>,
) {
    let mut decoder = Decoder::new(call.max, call.encoding);
    let mut expiry = std::pin::pin!(grpc::until(call.deadline));
    // Each task reports its end here, so the reader knows how many are running.
    let (done_tx, mut done_rx) = local::channel::<()>();
    let mut running = 0usize;
    loop {
        while let Some(()) = done_rx.try_recv() {
            running -= 1;
        }
        if running >= MAX_IN_FLIGHT {
            if done_rx.recv().await.is_some() {
                running -= 1;
            }
            continue;
        }
        match decoder.next_message() {
            Ok(Some(msg)) => {
                if tx.is_closed() {
                    return;
                }
                running += 1;
                let (ctx, tx, done, key) = (ctx.clone(), tx.clone(), done_tx.clone(), key.clone());
                monoio::spawn(async move {
                    monoio::select! {
                        _ = one(ctx, msg, tx, key) => {},
                        _ = grpc::until(call.deadline) => {},
                    }
                    let _ = done.send(());
                });
                continue;
            }
            Ok(None) => {}
            Err(e) => {
                *ending.borrow_mut() = Some(e);
                return;
            }
        }
        let next = monoio::select! {
            next = body::next_data(&mut recv) => next,
            _ = &mut expiry => return,
        };
        match next {
            Some(Ok(chunk)) => decoder.push(&chunk),
            // Reset by the client, or the connection is gone.
            Some(Err(_)) => return,
            None => {
                if decoder.pending() > 0 {
                    *ending.borrow_mut() =
                        Some(Error::new(Kind::BadRequest, "the request stream ended inside a message"));
                }
                return;
            }
        }
    }
}

fn error_reply(e: &Error) -> ModelStreamInferResponse {
    ModelStreamInferResponse { error_message: e.message().to_string(), infer_response: None }
}

fn reply(r: &TextRequest, piece: Option<&infer::Piece>, last: bool) -> ModelStreamInferResponse {
    ModelStreamInferResponse {
        error_message: String::new(),
        infer_response: Some(infer::response(r, piece, Some(last))),
    }
}

/// Answer one request message, handing the responses to the writer. Returns when the request
/// is answered or the client is gone (dropping the worker stream then cancels it).
async fn one(ctx: Rc<ShardCtx>, msg: Bytes, tx: local::Sender<ModelStreamInferResponse>, key: crate::infer::ApiKey) {
    let req = match decode::<ModelInferRequest>(msg)
        .and_then(|req| super::meta::known(&ctx.registry(), &req.model_name, &req.model_version).map(|()| req))
    {
        Ok(req) => req,
        Err(e) => {
            let _ = tx.send(error_reply(&e));
            return;
        }
    };
    if super::tensor::is_tensor(&ctx, &req.model_name) {
        return tensor_one(&ctx, req, &tx).await;
    }
    let parsed = infer::parse(&req);
    let r = match parsed {
        Ok(r) => r,
        Err(e) => {
            let _ = tx.send(error_reply(&e));
            return;
        }
    };
    let pieces = match infer::start(&ctx, &r, key).await {
        Ok(p) => p,
        Err(e) => {
            let _ = tx.send(error_reply(&e));
            return;
        }
    };
    if !r.stream {
        match pieces.whole().await {
            Ok(piece) => {
                let _ = tx.send(reply(&r, Some(&piece), !r.empty_final));
                if r.empty_final {
                    let _ = tx.send(reply(&r, None, true));
                }
            }
            Err(e) => {
                let _ = tx.send(error_reply(&e));
            }
        }
        return;
    }
    let mut pieces = pieces;
    let mut finished = false;
    loop {
        // The client may reset the call while the worker is quiet.
        let next = monoio::select! {
            n = pieces.next() => n,
            // Dropping the pieces cancels the request (counted as a client gone).
            _ = tx.closed() => return,
        };
        let Some(next) = next else { break };
        let msg = match next {
            Ok(piece) => {
                finished = !piece.finish.is_empty();
                reply(&r, Some(&piece), finished && !r.empty_final)
            }
            Err(e) => {
                finished = true;
                error_reply(&e)
            }
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
    if !finished || r.empty_final {
        let _ = tx.send(reply(&r, None, true));
    }
}

/// Answer one request for a tensor model: every worker response is a stream response.
async fn tensor_one(ctx: &Rc<ShardCtx>, req: ModelInferRequest, tx: &local::Sender<ModelStreamInferResponse>) {
    let mut call = match super::tensor::start(ctx, req, true).await {
        Ok(c) => c,
        Err(e) => {
            let _ = tx.send(error_reply(&e));
            return;
        }
    };
    while let Some(next) = call.next().await {
        let msg = match next {
            Ok(mut r) => {
                if call.empty_final {
                    r.parameters.insert(
                        "triton_final_response".to_string(),
                        super::pb::InferParameter {
                            parameter_choice: Some(super::pb::infer_parameter::ParameterChoice::BoolParam(false)),
                        },
                    );
                }
                ModelStreamInferResponse { error_message: String::new(), infer_response: Some(r) }
            }
            Err(e) => error_reply(&e),
        };
        if tx.send(msg).is_err() {
            return;
        }
    }
    if call.empty_final {
        let r = super::tensor::empty_final(&call.model, &call.id);
        let _ = tx.send(ModelStreamInferResponse { error_message: String::new(), infer_response: Some(r) });
    }
}
