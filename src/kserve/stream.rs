//! `ModelStreamInfer`: a bidirectional stream of inference requests and their responses.
//!
//! Requests are answered one after the other in arrival order. A request that cannot be
//! served (malformed protobuf, unknown model, bad inputs, a worker failure) gets a response
//! whose `error_message` says why, and the stream stays open for the next one. With
//! `streaming` set, every generated piece is its own response; the last one (the one with a
//! finish reason) carries `triton_final_response = true` unless the client asked for an
//! empty final response (`triton_enable_empty_final_response`), which then follows it.
//! Only a framing failure (oversized or compressed message) ends the call, with its status:
//! the rest of the byte stream cannot be trusted after it.

use std::rc::Rc;

use bytes::Bytes;
use h2::server::SendResponse;
use h2::RecvStream;

use super::grpc::{decode, Decoder, Replies};
use super::infer::{self, Answer, TextRequest};
use super::pb::{ModelInferRequest, ModelStreamInferResponse};
use crate::error::{Error, Kind};
use crate::h2::body;
use crate::shard::ShardCtx;

/// Serve one `ModelStreamInfer` call; `max` bounds each request message.
pub async fn serve(ctx: &Rc<ShardCtx>, mut recv: RecvStream, respond: SendResponse<Bytes>, max: usize) {
    let Some(mut out) = Replies::start(respond) else { return };
    let mut decoder = Decoder::new(max);
    loop {
        match decoder.next_message() {
            Ok(Some(msg)) => {
                if !one(ctx, msg, &mut out).await {
                    return;
                }
                continue;
            }
            Ok(None) => {}
            Err(e) => return out.finish(Some(&e)),
        }
        match body::next_data(&mut recv).await {
            Some(Ok(chunk)) => decoder.push(&chunk),
            // Reset by the client, or the connection is gone.
            Some(Err(_)) => return,
            None => {
                let truncated = (decoder.pending() > 0)
                    .then(|| Error::new(Kind::BadRequest, "the request stream ended inside a message"));
                return out.finish(truncated.as_ref());
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

/// Answer one request message; false when the client is gone.
async fn one(ctx: &Rc<ShardCtx>, msg: Bytes, out: &mut Replies) -> bool {
    let parsed = decode::<ModelInferRequest>(msg).and_then(|req| {
        super::meta::known(&ctx.registry(), &req.model_name)?;
        infer::parse(&req)
    });
    let r = match parsed {
        Ok(r) => r,
        Err(e) => return out.send(&error_reply(&e)).await,
    };
    match infer::run(ctx, &r).await {
        Err(e) => out.send(&error_reply(&e)).await,
        Ok(Answer::Whole(piece)) => {
            if !out.send(&reply(&r, Some(&piece), !r.empty_final)).await {
                return false;
            }
            !r.empty_final || out.send(&reply(&r, None, true)).await
        }
        Ok(Answer::Stream(mut pieces)) => {
            let mut finished = false;
            loop {
                let next = monoio::select! {
                    p = pieces.next() => p,
                    // Dropping `pieces` cancels the worker's request.
                    _ = body::reset(out.stream()) => return false,
                };
                let sent = match next {
                    None => break,
                    Some(Ok(piece)) => {
                        finished = !piece.finish.is_empty();
                        out.send(&reply(&r, Some(&piece), finished && !r.empty_final)).await
                    }
                    Some(Err(e)) => {
                        finished = true;
                        out.send(&error_reply(&e)).await
                    }
                };
                if !sent {
                    return false;
                }
            }
            match (finished, r.empty_final) {
                (true, false) => true,
                _ => out.send(&reply(&r, None, true)).await,
            }
        }
    }
}
