//! The inference core: one protocol-free driver that every protocol adapter calls.
//!
//! An adapter (OpenAI chat and completions, KServe) parses its request into an
//! [`InferRequest`] and calls [`run`]; it gets back a [`Generation`], a stream of typed
//! [`Event`]s it renders in its own shape. Nothing here knows HTTP, JSON bodies of a client
//! protocol, SSE or protobuf.
//!
//! # Stages (called in this order by [`run`])
//!
//! | stage | module | what |
//! |---|---|---|
//! | resolve | [`resolve`] | the model in the shard's Registry snapshot (404), its workers (503), its input kind |
//! | preprocess | [`preprocess`] | chat template and tokenization with this shard's tokenizer → the wire request, one per prompt |
//! | route + dispatch | [`dispatch`] | the `--router-mode` choice, the request plane, retries on another worker until one answers |
//! | (disaggregated) | [`disagg`] | a model with prefill workers: the prefill leg, then the decode leg with its hand-off |
//! | postprocess | [`choice`] | worker frames → events: incremental detokenization, stops, logprobs, usage |
//!
//! [`Generation`] merges the choices of a request (OpenAI `n`, a batch of prompts) into one
//! stream of events and owns the request's [`tracker::Tracker`]: the per-request metrics and
//! the in-flight gauges have one exit path — the generation ends with [`Event::Done`] (a
//! success), with [`Event::Error`] (a failure, with its kind), or is dropped (cancelled).
//!
//! Runs on a shard thread (long prompts are tokenized on the shard's helper thread). Imports
//! the Registry, the router, the request-plane transport and codecs, the tokenizer and the
//! metrics; no adapter and no wire protocol of a client.

pub mod choice;
pub mod count;
pub mod disagg;
pub mod dispatch;
pub mod generation;
pub mod logprobs;
pub mod migrate;
pub mod preprocess;
pub mod remote_index;
pub mod request;
pub mod resolve;
pub mod text;
pub mod tracker;

use std::rc::Rc;

/// The model a generation is served by, as the driver resolved it (adapters name it in answers).
pub use crate::registry::Serving;
pub use choice::{worker_fault, WorkerFault};
pub use generation::Generation;
pub use logprobs::TokenLogprob;
pub use request::{
    AgentSession, AnnotationKind, ApiKey, Caller, ChatInput, InferRequest, Input, PlainRole, PlainTurn, Prompt, Stops,
};
pub use resolve::Resolved;
pub use text::Text;

use crate::error::Error;
use crate::plane::tensor::TensorResponse;
use crate::shard::ShardCtx;

/// Why a choice ended, in no protocol's words.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Finish {
    /// A stop condition (EOS, a stop token or string) or the worker's own stop.
    Stop,
    /// `max_tokens` reached.
    Length,
    /// The worker filtered the content.
    ContentFilter,
}

/// Token counts of an answer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Usage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    /// `cached_tokens` as the worker reported it.
    pub cached_tokens: Option<u32>,
}

/// When a request's stages happened (Dynamo's `nvext.timing`), in milliseconds.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Timing {
    /// Unix time the request was taken.
    pub request_received_ms: u64,
    /// From then until the worker request was sent (template, tokenizer, router).
    pub prefill_wait_time_ms: f64,
    /// From the send until the first token.
    pub prefill_time_ms: f64,
    pub ttft_ms: f64,
    /// From the request until its end.
    pub total_time_ms: f64,
    /// `--router-mode kv`: the router's cached share of the prompt and queue depth.
    pub kv: Option<crate::router::kv::active::KvHit>,
}

/// New text of one choice.
#[derive(Debug, Default)]
pub struct Delta {
    /// The choice's index: `prompt * n + sample`.
    pub choice: u32,
    pub text: Text,
    /// Log probabilities of the tokens received since the last delta of this choice, when
    /// the request asked for them.
    pub logprobs: Vec<TokenLogprob>,
}

/// What a [`Generation`] yields.
#[derive(Debug)]
pub enum Event {
    /// An annotation the request asked for, answered by the driver before any text: its
    /// value as text (token ids as a compact JSON array).
    Annotation { kind: AnnotationKind, text: String },
    /// New text of a choice (never empty).
    Delta(Delta),
    /// A choice ended. `logprobs`: those of tokens that produced no text (held back, a hidden
    /// stop token); `usage`: the choice's own counts; `stop`: the index (in the request's stop
    /// strings) of the stop string that ended it, when one did.
    Finish { choice: u32, reason: Finish, logprobs: Vec<TokenLogprob>, usage: Usage, stop: Option<u32> },
    /// An OpenAI chunk object sent by a `model_input = Text` worker, for the adapter to relay.
    Chunk(serde_json::Value),
    /// A response of a `model_input = Tensor` worker.
    Tensor(Box<TensorResponse>),
    /// Every choice ended; the answer's usage (prompts counted once each, completions
    /// summed). The last event of a successful generation.
    Done(Usage),
    /// The generation failed; the last event.
    Error(Error),
}

/// Run one request through every stage; the generation has started (a worker answered for
/// every choice) when this returns. An error here happened before anything was generated.
///
/// Resolving takes no wait, so it is done here and the returned future is the driver's own
/// (one future fewer for every poll of a request on its way). The request is borrowed: it
/// stays where the adapter built it (~1 KB, not copied into every stage's future); what the
/// worker is sent is taken out of it.
pub fn run<'a>(
    ctx: &'a Rc<ShardCtx>,
    req: &'a mut InferRequest,
) -> impl std::future::Future<Output = Result<Generation, Error>> + 'a {
    let resolved = resolve::resolve_for(&ctx.registry(), &req.model, req.endpoint);
    generation::start(ctx, resolved, req)
}

/// [`run`] for a model the adapter already resolved (it needed the model's kind first).
pub fn run_resolved<'a>(
    ctx: &'a Rc<ShardCtx>,
    resolved: Resolved,
    req: &'a mut InferRequest,
) -> impl std::future::Future<Output = Result<Generation, Error>> + 'a {
    generation::start(ctx, Ok(resolved), req)
}

/// Count a request refused before it became an [`InferRequest`] (a body that does not parse
/// or validate): labelled with its model when that is served, as Dynamo counts it.
pub fn rejected(ctx: &Rc<ShardCtx>, endpoint: crate::metrics::Endpoint, model: Option<&str>, stream: bool, e: &Error) {
    tracker::rejected(ctx, endpoint, model, stream, e);
}
