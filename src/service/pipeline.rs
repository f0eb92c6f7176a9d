//! A request's way through the frontend, as named stages called in order by [`run`]:
//!
//! 1. **parse** — deserialize and validate (400), in [`crate::openai`];
//! 2. **resolve** — the model in the shard's Registry snapshot (404), its workers (503);
//!    a `model_input = Text` model leaves here for [`super::passthrough`]; a tensor model
//!    is refused (404: it has no OpenAI surface);
//! 3. **preprocess** — chat template + tokenization with this shard's own tokenizer
//!    ([`crate::tokenize::preprocess`]), then the `PreprocessedRequest` of the wire;
//! 4. **route** — the `--router-mode` choice among the model's usable workers
//!    ([`crate::router`]);
//! 5. **dispatch** — Dynamo's TCP request plane, retried on another worker until one
//!    answers ([`super::dispatch`]);
//! 6. **postprocess** — incremental detokenization and stop handling
//!    ([`crate::tokenize::stop::PostProcessor`]) per worker frame;
//! 7. **respond** — one JSON body, or SSE chunks written as they come
//!    ([`crate::openai::response`]).
//!
//! Dropping the worker's response stream (client gone, stop string matched, max_tokens
//! reached) sends `kill` to the worker. Every failure before the first byte is an error
//! response; after it, an SSE error event followed by `[DONE]`: nothing hangs.

use std::ops::Deref;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use bytes::Bytes;

use super::dispatch::{dispatch, Started};
use super::logprobs::Logprobs;
use super::passthrough;
use super::tracker::{count_rejected, Tracker};
use crate::error::{Error, Kind};
use crate::http1::{Request, Response};
use crate::metrics::Outcome;
use crate::openai::response::{self as body, Meta, Usage};
use crate::openai::{self, completions::Prompt};
use crate::plane::callback::StreamItem;
use crate::plane::payload::{
    FinishReason as WireFinish, OutputOptions, PreprocessedRequest, RoutingHints, SamplingOptions,
    StopConditions as WireStop,
};
use crate::plane::stream::StreamEvent;
use crate::registry::{Serving, TokensModel};
use crate::shard::{local, ShardCtx};
use crate::tokenize::offload;
use crate::tokenize::preprocess::{chat_prompt, PreprocessOptions};
use crate::tokenize::stop::{PostProcessor, StopConditions, WorkerFinish};
use crate::tokenize::Tokenizer;

/// Which API the request came in on.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Api {
    Chat,
    Completions,
}

/// This shard's tokenizer of a model.
struct ShardTokenizer {
    tokenizers: Arc<Vec<Tokenizer>>,
    shard: usize,
}

impl Deref for ShardTokenizer {
    type Target = Tokenizer;
    fn deref(&self) -> &Tokenizer {
        &self.tokenizers[self.shard]
    }
}

/// The prompt before tokenization: text is encoded asynchronously (long texts off the shard).
enum PromptInput {
    /// Rendered chat text (encoded without added special tokens).
    Chat(String),
    /// Completion text (encoded with the tokenizer's own special tokens).
    Text(String),
    Ids(Vec<u32>),
}

/// Everything decided before dispatch.
struct Plan {
    api: Api,
    prompt: Option<PromptInput>,
    model: String,
    serving: Arc<Serving>,
    tokens: TokensModel,
    wire: PreprocessedRequest,
    stop: StopConditions,
    skip_special_tokens: bool,
    stream: bool,
    include_usage: bool,
    /// The client asked for output logprobs.
    logprobs: bool,
    /// The worker the request names (header or `nvext.backend_instance_id`).
    pinned: Option<u64>,
}

/// The worker a request names: the `x-dynamo-worker-instance-id` (or legacy
/// `x-worker-instance-id`) header, which wins, else `nvext.backend_instance_id`.
fn pinned_worker(req: &Request, nvext: Option<u64>) -> Result<Option<u64>, Error> {
    for name in ["x-dynamo-worker-instance-id", "x-worker-instance-id"] {
        if let Some(v) = req.header(name) {
            let text = std::str::from_utf8(v).unwrap_or("").trim();
            return text
                .parse::<u64>()
                .map(Some)
                .map_err(|_| Error::new(Kind::BadRequest, format!("{name}: '{text}' is not a worker instance id")));
        }
    }
    Ok(nvext)
}

/// Run one inference request through every stage.
pub async fn run(ctx: &Rc<ShardCtx>, api: Api, req: &Request) -> Result<Response, Error> {
    let mut plan = match prepare(ctx, api, req) {
        Ok(Prepared::Tokens(plan)) => plan,
        Ok(Prepared::Text(plan)) => return passthrough::run(ctx, plan, req).await,
        Err(e) => {
            count_rejected(ctx, api, req, &e);
            return Err(e);
        }
    };
    let mut track = Tracker::start(ctx, &plan.model, api, plan.stream);
    // Stage 3 (end): tokenization, inline for chat-sized prompts, on the shard's helper
    // thread for long ones.
    let (text, special) = match plan.prompt.take() {
        Some(PromptInput::Chat(t)) => (t, false),
        Some(PromptInput::Text(t)) => (t, true),
        Some(PromptInput::Ids(ids)) => {
            plan.wire.token_ids = ids;
            (String::new(), false)
        }
        None => (String::new(), false),
    };
    if !text.is_empty() || plan.wire.token_ids.is_empty() {
        let tm = plan.tokens.clone();
        let t0 = Instant::now();
        plan.wire.token_ids =
            match offload::encode(&tm.tokenizers[ctx.id], || ctx.offload(&tm.files), text, special).await {
                Ok(ids) => {
                    track.tokenized(t0.elapsed());
                    ids
                }
                Err(e) => {
                    let e = Error::new(Kind::Internal, e);
                    track.fail(&e);
                    return Err(e);
                }
            };
    }
    // Stages 4 and 5: route and dispatch, retried on another worker until one answers.
    let started = match dispatch(ctx, &plan.model, &plan.serving, plan.pinned, &mut plan.wire).await {
        Ok(s) => s,
        Err(e) => {
            track.fail(&e);
            return Err(e);
        }
    };
    let request_id = started.request_id.clone();
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let id = match api {
        Api::Chat => format!("chatcmpl-{request_id}"),
        Api::Completions => format!("cmpl-{request_id}"),
    };
    if plan.stream {
        let (tx, rx) = local::channel::<Bytes>();
        monoio::spawn(stream_answer(plan, started, id, created, tx, ctx.id, track));
        return Ok(Response::stream(200, "text/event-stream", rx).with_header("cache-control", "no-cache"));
    }
    whole_answer(plan, started, id, created, ctx.id, track).await
}

/// What both request types say the same way (their fields have the same names).
struct Common {
    model: String,
    max_tokens: Option<u32>,
    stops: Vec<String>,
    stop_ids: Option<Vec<u32>>,
    ignore_eos: bool,
    min_tokens: Option<u32>,
    skip_special_tokens: bool,
    include_stop_str: bool,
    stream: bool,
    include_usage: bool,
    logprobs: Option<u32>,
    sampling: SamplingOptions,
    nvext_worker: Option<u64>,
}

macro_rules! common {
    ($r:expr) => {
        Common {
            model: $r.model.clone(),
            max_tokens: $r.max_tokens(),
            stops: $r.stop_strings().to_vec(),
            stop_ids: $r.stop_token_ids(),
            ignore_eos: $r.ignore_eos(),
            min_tokens: $r.min_tokens,
            skip_special_tokens: $r.skip_special_tokens(),
            include_stop_str: $r.include_stop_str_in_output(),
            stream: $r.is_streaming(),
            include_usage: $r.include_usage(),
            logprobs: $r.output_logprobs(),
            nvext_worker: $r.nvext.as_ref().and_then(|n| n.backend_instance_id),
            sampling: SamplingOptions {
                temperature: $r.temperature,
                top_p: $r.top_p,
                top_k: $r.top_k,
                min_p: $r.min_p,
                seed: $r.seed,
                presence_penalty: $r.presence_penalty,
                frequency_penalty: $r.frequency_penalty,
                repetition_penalty: $r.repetition_penalty,
                include_stop_str_in_output: $r.include_stop_str_in_output,
                ..Default::default()
            },
        }
    };
}

/// Where the prompt comes from.
enum Source<'a> {
    /// A chat request: rendered with the model's template once the model is resolved.
    Chat(&'a openai::NvCreateChatCompletionRequest),
    /// A completion prompt, as text or ids.
    Ready(PromptInput),
}

/// A resolved request: Tokens models go through every stage, Text models are forwarded.
/// (Moved once, so the size difference does not matter; no box on the Tokens path.)
#[allow(clippy::large_enum_variant)]
enum Prepared {
    Tokens(Plan),
    Text(passthrough::Plan),
}

fn prepare(ctx: &ShardCtx, api: Api, req: &Request) -> Result<Prepared, Error> {
    // Stage 1: parse.
    match api {
        Api::Chat => {
            let r = openai::parse_chat(&req.body)?;
            let c = common!(r);
            finish_plan(ctx, api, c, Source::Chat(&r), req)
        }
        Api::Completions => {
            let r = openai::parse_completion(&req.body)?;
            let prompt = match &r.prompt {
                Prompt::String(text) => PromptInput::Text(text.clone()),
                Prompt::IntegerArray(ids) => PromptInput::Ids(ids.clone()),
                Prompt::StringArray(v) if v.len() == 1 => PromptInput::Text(v[0].clone()),
                Prompt::ArrayOfIntegerArray(v) if v.len() == 1 => PromptInput::Ids(v[0].clone()),
                _ => {
                    return Err(Error::new(
                        Kind::BadRequest,
                        "batched prompts are not supported yet; send one prompt per request",
                    ))
                }
            };
            finish_plan(ctx, api, common!(r), Source::Ready(prompt), req)
        }
    }
}

fn resolve(registry: &crate::registry::Registry, model: &str) -> Result<Arc<Serving>, Error> {
    let serving = registry.serving.get(model).ok_or_else(|| Error::new(Kind::NotFound, "Model not found"))?;
    if serving.workers.is_empty() {
        return Err(Error::new(
            Kind::ServiceUnavailable,
            format!("Model `{model}` is not ready to serve requests yet"),
        ));
    }
    Ok(serving.clone())
}

fn finish_plan(ctx: &ShardCtx, api: Api, c: Common, source: Source<'_>, req: &Request) -> Result<Prepared, Error> {
    let body = &req.body[..];
    let Common {
        model,
        max_tokens,
        stops,
        stop_ids,
        ignore_eos,
        min_tokens,
        skip_special_tokens: skip,
        include_stop_str: incl,
        stream,
        include_usage: usage,
        logprobs,
        sampling,
        nvext_worker,
    } = c;
    // Stage 2: resolve.
    let registry = ctx.registry();
    let serving = resolve(&registry, &model)?;
    if serving.tensor.is_some() {
        // Dynamo 1.6.1 answers 404 too (its OpenAI routes know no tensor model).
        return Err(Error::new(
            Kind::NotFound,
            format!("Model '{model}' is a tensor model: it is served over KServe gRPC only (--kserve-grpc-server)"),
        ));
    }
    let pinned = pinned_worker(req, nvext_worker)?;
    let Some(tokens) = serving.tokens.clone() else {
        return Ok(Prepared::Text(passthrough::Plan { api, model, serving, stream, pinned }));
    };
    // Stage 3: preprocess (the chat template here; tokenization, which may be long, in `run`).
    let prompt = match source {
        Source::Ready(p) => p,
        Source::Chat(chat) => {
            let opts = PreprocessOptions {
                exclude_tools_when_tool_choice_none: ctx.shared.config.exclude_tools_when_tool_choice_none,
                ..PreprocessOptions::default()
            };
            PromptInput::Chat(chat_prompt(chat, body, &tokens.files, opts, None)?)
        }
    };
    let eos = tokens.files.eos_token_ids.clone();
    let wire = PreprocessedRequest {
        model: model.clone(),
        token_ids: Vec::new(),
        stop_conditions: WireStop {
            max_tokens,
            stop: (!stops.is_empty()).then(|| stops.clone()),
            stop_token_ids: stop_ids.clone(),
            stop_token_ids_hidden: (!ignore_eos).then(|| eos.clone()),
            min_tokens,
            ignore_eos: Some(ignore_eos),
            ..Default::default()
        },
        sampling_options: sampling,
        output_options: OutputOptions { logprobs, skip_special_tokens: Some(skip), ..Default::default() },
        eos_token_ids: eos.clone(),
        mdc_sum: serving.mdc_sum.clone(),
        annotations: Vec::new(),
        routing: Some(RoutingHints::default()),
        router_config_override: None,
    };
    let stop = StopConditions {
        stop: stops,
        stop_token_ids: stop_ids.unwrap_or_default(),
        eos_token_ids: eos,
        ignore_eos,
        min_tokens: min_tokens.unwrap_or(0),
        max_tokens,
        include_stop_str_in_output: incl,
    };
    Ok(Prepared::Tokens(Plan {
        api,
        prompt: Some(prompt),
        model,
        serving,
        tokens,
        wire,
        stop,
        skip_special_tokens: skip,
        stream,
        include_usage: usage,
        logprobs: logprobs.is_some(),
        pinned,
    }))
}

fn worker_finish(r: &WireFinish) -> Result<WorkerFinish, Error> {
    Ok(match r {
        WireFinish::Eos => WorkerFinish::Eos,
        WireFinish::Stop => WorkerFinish::Stop,
        WireFinish::Length => WorkerFinish::Length,
        WireFinish::Cancelled => WorkerFinish::Cancelled,
        WireFinish::ContentFilter => WorkerFinish::ContentFilter,
        WireFinish::Error(e) => {
            return Err(Error::new(Kind::Internal, "Internal server error").with_cause(std::io::Error::other(e.clone())))
        }
    })
}

/// What one worker frame did to the answer.
enum Progress {
    /// Text to send (maybe empty), not finished.
    Text(String),
    /// Final text and the OpenAI finish reason.
    Done(String, Option<&'static str>),
}

/// The postprocessing state of one answer.
struct Answer {
    post: PostProcessor<ShardTokenizer>,
    prompt_tokens: u32,
    cached_tokens: Option<u32>,
    track: Tracker,
    /// Output logprobs and the tokenizer naming their tokens, when the client asked.
    logprobs: Option<(Logprobs, ShardTokenizer)>,
}

impl Answer {
    fn new(plan: &Plan, shard: usize, track: Tracker) -> Answer {
        let tok = || ShardTokenizer { tokenizers: plan.tokens.tokenizers.clone(), shard };
        let logprobs = plan.logprobs.then(|| (Logprobs::default(), tok()));
        Answer {
            logprobs,
            post: PostProcessor::new(tok(), plan.skip_special_tokens, plan.stop.clone()),
            prompt_tokens: plan.wire.token_ids.len() as u32,
            cached_tokens: None,
            track,
        }
    }

    /// Feed the next event of the worker's stream.
    fn on_event(&mut self, event: super::dispatch::Event) -> Result<Option<Progress>, Error> {
        match event {
            None | Some(Ok(StreamEvent::CompleteFinal)) | Some(Ok(StreamEvent::Sentinel)) => {
                let step = self.post.on_worker_finish(WorkerFinish::Stop).map_err(internal)?;
                let reason = step.finished.as_ref().and_then(|f| f.openai());
                Ok(Some(Progress::Done(step.text.to_string(), reason.or(Some("stop")))))
            }
            Some(Ok(StreamEvent::Item(StreamItem::Tokens(annotated)))) => {
                if let Some(err) = annotated.error {
                    return Err(Error::new(Kind::Internal, "Internal server error")
                        .with_cause(std::io::Error::other(format!("{err:?}"))));
                }
                let Some(out) = annotated.data else { return Ok(Some(Progress::Text(String::new()))) };
                if let Some(u) = &out.completion_usage {
                    self.prompt_tokens = u.prompt_tokens;
                    if let Some(c) = u.prompt_tokens_details.as_ref().and_then(|d| d.cached_tokens) {
                        self.cached_tokens = Some(c);
                    }
                }
                let arrived = Instant::now();
                self.track.tokens(arrived, out.token_ids.len(), self.prompt_tokens);
                if let Some((lp, tok)) = &mut self.logprobs {
                    lp.add(&out, tok);
                }
                let mut text = String::new();
                let step = self.post.on_tokens(&out.token_ids).map_err(internal)?;
                text.push_str(step.text);
                self.track.detokenized(arrived.elapsed());
                if let Some(f) = step.finished {
                    return Ok(Some(Progress::Done(text, f.openai())));
                }
                if let Some(r) = &out.finish_reason {
                    let step = self.post.on_worker_finish(worker_finish(r)?).map_err(internal)?;
                    text.push_str(step.text);
                    let reason = step.finished.as_ref().and_then(|f| f.openai());
                    return Ok(Some(Progress::Done(text, reason)));
                }
                Ok(Some(Progress::Text(text)))
            }
            Some(Ok(StreamEvent::Item(StreamItem::Json(_) | StreamItem::Tensor(_)))) => {
                Err(internal("a Tokens worker sent another kind of item".into()))
            }
            Some(Ok(_)) => Ok(None),
            Some(Err(e)) => Err(e.into()),
        }
    }

    /// The logprobs received since the last call, rendered for `api`.
    fn take_logprobs(&mut self, api: Api) -> Option<Vec<u8>> {
        self.logprobs.as_mut().and_then(|(lp, _)| lp.take(api))
    }

    fn usage(&self) -> Usage {
        Usage {
            prompt_tokens: self.prompt_tokens,
            completion_tokens: self.post.completion_tokens(),
            // Absent unless the worker reported it (captures `p_lp`, `p_lp2`: no details).
            cached_tokens: self.cached_tokens,
        }
    }
}

fn internal(e: String) -> Error {
    Error::new(Kind::Internal, "Internal server error").with_cause(std::io::Error::other(e))
}

async fn whole_answer(
    plan: Plan,
    mut stream: Started,
    id: String,
    created: u64,
    shard: usize,
    track: Tracker,
) -> Result<Response, Error> {
    let mut answer = Answer::new(&plan, shard, track);
    let mut text = String::new();
    let reason = loop {
        let progress = match answer.on_event(stream.next().await) {
            Ok(p) => p,
            Err(e) => {
                answer.track.fail(&e);
                return Err(e);
            }
        };
        match progress {
            None => {}
            Some(Progress::Text(t)) => text.push_str(&t),
            Some(Progress::Done(t, reason)) => {
                text.push_str(&t);
                break reason;
            }
        }
    };
    drop(stream);
    let usage = answer.usage();
    answer.track.finish(Outcome::Success, Some(&usage));
    let meta = Meta::new(&id, created, &plan.model);
    let lp = answer.take_logprobs(plan.api);
    let mut out = Vec::with_capacity(text.len() + 256 + lp.as_ref().map_or(0, Vec::len));
    match plan.api {
        Api::Chat => body::chat_completion(&mut out, &meta, &text, reason, &usage, lp.as_deref()),
        Api::Completions => body::completion(&mut out, &meta, &text, reason, &usage, lp.as_deref()),
    }
    Ok(Response::json(200, out))
}

async fn stream_answer(
    plan: Plan,
    mut stream: Started,
    id: String,
    created: u64,
    tx: local::Sender<Bytes>,
    shard: usize,
    track: Tracker,
) {
    let mut answer = Answer::new(&plan, shard, track);
    let meta = Meta::new(&id, created, &plan.model);
    let mut first = true;
    // A chunk is its text plus ~170 bytes of JSON around the id and the model name: sized
    // once, so writing a chunk does not grow its buffer step by step.
    let chunk_capacity = 192 + id.len() + plan.model.len();
    loop {
        let event = stream.next().await;
        if tx.is_closed() {
            answer.track.client_gone();
            return; // client gone: dropping `stream` sends `kill`
        }
        let mut out = Vec::with_capacity(chunk_capacity);
        let done = match answer.on_event(event) {
            Err(e) => {
                answer.track.fail_in_stream(&e);
                body::stream_error(&mut out, e.message(), e.kind().openai_type(), e.status());
                out.extend_from_slice(body::DONE);
                let _ = tx.send(out.into());
                return;
            }
            Ok(None) => continue,
            Ok(Some(Progress::Text(t))) => {
                if !t.is_empty() {
                    let lp = answer.take_logprobs(plan.api);
                    chunk(&mut out, plan.api, &meta, Some(&t), first, lp.as_deref());
                    first = false;
                }
                false
            }
            Ok(Some(Progress::Done(t, reason))) => {
                if !t.is_empty() {
                    let lp = answer.take_logprobs(plan.api);
                    chunk(&mut out, plan.api, &meta, Some(&t), first, lp.as_deref());
                    first = false;
                }
                // Logprobs of tokens that produced no text (held back, hidden stop token).
                let lp = answer.take_logprobs(plan.api);
                match plan.api {
                    Api::Chat => body::chat_chunk(&mut out, &meta, None, first, reason, lp.as_deref()),
                    Api::Completions => body::completion_chunk(&mut out, &meta, Some(""), reason, None, lp.as_deref()),
                }
                let usage = answer.usage();
                // Counted before the last bytes go out, so a scrape after `[DONE]` sees it.
                answer.track.finish(Outcome::Success, Some(&usage));
                if plan.include_usage {
                    match plan.api {
                        Api::Chat => body::chat_usage_chunk(&mut out, &meta, &usage),
                        Api::Completions => body::completion_chunk(&mut out, &meta, None, None, Some(&usage), None),
                    }
                }
                out.extend_from_slice(body::DONE);
                true
            }
        };
        if !out.is_empty() && tx.send(out.into()).is_err() {
            answer.track.client_gone();
            return;
        }
        if done {
            return;
        }
    }
}

/// A text chunk, with the logprobs of its tokens when asked for.
fn chunk(out: &mut Vec<u8>, api: Api, meta: &Meta<'_>, text: Option<&str>, first: bool, logprobs: Option<&[u8]>) {
    match api {
        Api::Chat => body::chat_chunk(out, meta, text, first, None, logprobs),
        Api::Completions => body::completion_chunk(out, meta, text, None, None, logprobs),
    }
}
