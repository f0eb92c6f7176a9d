//! `model_input = Text` models (spec §7.4): the client's OpenAI request object goes to the
//! worker as the client sent it (its keys, its order; nothing added, not even `stream`), and
//! the worker's OpenAI chunk objects come back inside `Annotated.data`. Streamed, each chunk
//! is relayed as an SSE event in Dynamo's chunk shape ([`crate::openai::chunks`]) followed by
//! `data: [DONE]`; otherwise the chunks are folded into one `chat.completion` /
//! `text_completion`. No tokenization, stop strings or usage accounting: the worker's `id`,
//! `created` and `usage` are kept.
//!
//! Routing, retries before the first item and errors are the Tokens path's
//! ([`super::dispatch`]); the request is counted in the per-request metrics like any other.

use std::rc::Rc;
use std::sync::Arc;

use bytes::Bytes;
use serde_json::Value;

use super::dispatch::{dispatch, Event, Started};
use super::pipeline::Api;
use super::tracker::Tracker;
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::metrics::Outcome;
use crate::openai::chunks::{ChatAggregate, ChatChunk, CompletionAggregate, CompletionChunk};
use crate::openai::response as body;
use crate::plane::callback::StreamItem;
use crate::plane::stream::StreamEvent;
use crate::registry::Serving;
use crate::shard::{local, ShardCtx};

/// What the pipeline resolved for a Text model.
pub struct Plan {
    pub api: Api,
    pub model: String,
    pub serving: Arc<Serving>,
    pub stream: bool,
    /// The worker the request names.
    pub pinned: Option<u64>,
}

fn internal(cause: String) -> Error {
    Error::new(Kind::Internal, "Internal server error").with_cause(std::io::Error::other(cause))
}

/// Forward the request and answer with what the worker sends.
pub async fn run(ctx: &Rc<ShardCtx>, plan: Plan, req: &Request) -> Result<Response, Error> {
    let mut track = Tracker::start(ctx, &plan.model, plan.api, plan.stream);
    // Already parsed and validated as the typed request; this is the object as sent.
    let sent = serde_json::from_slice::<Value>(&req.body)
        .map_err(|e| Error::new(Kind::BadRequest, format!("Failed to deserialize the JSON body: {e}")));
    let started = match sent {
        Ok(mut v) => dispatch(ctx, &plan.model, &plan.serving, plan.pinned, &mut v).await,
        Err(e) => Err(e),
    };
    let started = match started {
        Ok(s) => s,
        Err(e) => {
            track.fail(&e);
            return Err(e);
        }
    };
    if plan.stream {
        let (tx, rx) = local::channel::<Bytes>();
        monoio::spawn(relay(plan.api, started, tx, track));
        return Ok(Response::stream(200, "text/event-stream", rx).with_header("cache-control", "no-cache"));
    }
    whole(plan.api, started, track).await
}

/// One worker chunk, in the API's chunk type.
enum Chunk {
    Chat(ChatChunk),
    Completion(CompletionChunk),
}

/// The next chunk of the worker's stream; `Ok(None)` at its end.
async fn next_chunk(api: Api, stream: &mut Started) -> Result<Option<Chunk>, Error> {
    loop {
        let event: Event = stream.next().await;
        let annotated = match event {
            None | Some(Ok(StreamEvent::CompleteFinal | StreamEvent::Sentinel)) => return Ok(None),
            Some(Ok(StreamEvent::Item(StreamItem::Json(a)))) => a,
            Some(Ok(StreamEvent::Item(StreamItem::Tokens(_) | StreamItem::Tensor(_)))) => {
                return Err(internal("a Text worker sent another kind of item".into()))
            }
            Some(Ok(_)) => continue,
            Some(Err(e)) => return Err(e.into()),
        };
        if let Some(err) = annotated.error {
            return Err(internal(format!("{err:?}")));
        }
        let Some(data) = annotated.data else { continue };
        let chunk = match api {
            Api::Chat => serde_json::from_value(data).map(Chunk::Chat),
            Api::Completions => serde_json::from_value(data).map(Chunk::Completion),
        };
        return chunk.map(Some).map_err(|e| internal(format!("worker chunk: {e}")));
    }
}

async fn whole(api: Api, mut stream: Started, mut track: Tracker) -> Result<Response, Error> {
    let (mut chat, mut cmpl) = (ChatAggregate::default(), CompletionAggregate::default());
    loop {
        match next_chunk(api, &mut stream).await {
            Ok(Some(Chunk::Chat(c))) => chat.add(c),
            Ok(Some(Chunk::Completion(c))) => cmpl.add(c),
            Ok(None) => break,
            Err(e) => {
                track.fail(&e);
                return Err(e);
            }
        }
    }
    drop(stream);
    let out = match api {
        Api::Chat => chat.finish().map(|a| serde_json::to_vec(&a)),
        Api::Completions => cmpl.finish().map(|a| serde_json::to_vec(&a)),
    };
    match out {
        Some(Ok(bytes)) => {
            track.finish(Outcome::Success, None);
            Ok(Response::json(200, bytes))
        }
        Some(Err(e)) => Err(internal(e.to_string())),
        None => {
            let e = internal("the worker's stream ended without a chunk".into());
            track.fail(&e);
            Err(e)
        }
    }
}

async fn relay(api: Api, mut stream: Started, tx: local::Sender<Bytes>, mut track: Tracker) {
    loop {
        let next = next_chunk(api, &mut stream).await;
        if tx.is_closed() {
            return; // client gone: dropping `stream` sends `kill`
        }
        let mut out = Vec::with_capacity(256);
        let written = match next {
            Ok(Some(chunk)) => {
                out.extend_from_slice(b"data: ");
                let json = match &chunk {
                    Chunk::Chat(c) => serde_json::to_writer(&mut out, c),
                    Chunk::Completion(c) => serde_json::to_writer(&mut out, c),
                };
                out.extend_from_slice(b"\n\n");
                json.map_err(|e| internal(e.to_string()))
            }
            Ok(None) => {
                track.finish(Outcome::Success, None);
                out.extend_from_slice(body::DONE);
                let _ = tx.send(out.into());
                return;
            }
            Err(e) => Err(e),
        };
        if let Err(e) = written {
            track.fail(&e);
            out.clear();
            body::stream_error(&mut out, e.message(), e.kind().openai_type(), e.status());
            out.extend_from_slice(body::DONE);
            let _ = tx.send(out.into());
            return;
        }
        if tx.send(out.into()).is_err() {
            return;
        }
    }
}
