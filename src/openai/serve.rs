//! The OpenAI adapter: `/v1/chat/completions` and `/v1/completions` bodies in, answers out.
//!
//! 1. parse and validate the body in Dynamo 1.6.1's order ([`super::parse_chat`] /
//!    [`super::parse_completion`]), a refusal counted as 1.6.1 counts it;
//! 2. turn the request into the driver's [`crate::infer::InferRequest`] ([`super::to_infer`]);
//! 3. [`crate::infer::run`] it;
//! 4. render its events ([`super::answer`]): one JSON body, or SSE events on a stream.
//!
//! HTTP is not known here: the caller (the service) turns an [`Answer`] or an error into a
//! response, and gives the worker a request names in its headers.

use std::rc::Rc;

use bytes::Bytes;

pub use super::answer::Api;
use super::answer::{self, Shape};
use super::to_infer;
use crate::error::Error;
use crate::infer::Caller;
use crate::metrics::Endpoint;
use crate::shard::{local, ShardCtx};

/// An OpenAI answer.
pub enum Answer {
    /// One JSON body.
    Json(Vec<u8>),
    /// SSE events, written as they come.
    Stream(local::Receiver<Bytes>),
}

/// Answer one request. `pinned`: the worker the request's headers name (they win over
/// `nvext.backend_instance_id`), or the error of a header that names none; `caller`: the
/// session they name (session affinity on) and the API key.
pub async fn serve(
    ctx: &Rc<ShardCtx>,
    api: Api,
    body: &Bytes,
    pinned: Result<Option<u64>, Error>,
    caller: Caller,
) -> Result<Answer, Error> {
    let mut tool_use = ToolUse::default();
    let nvext_on = ctx.shared.config.nvext_enabled;
    let pinned = match nvext_on {
        true => pinned,
        // DYN_DISABLE_FRONTEND_NVEXT: the routing headers are not read at all.
        false => {
            if !matches!(pinned, Ok(None)) {
                super::nvext::warn_dropped(api.endpoint());
            }
            Ok(None)
        }
    };
    let parsed = match api {
        Api::Chat => super::parse_chat(body).and_then(|mut r| {
            tool_use = ToolUse::of(&r);
            let body = disable_nvext(nvext_on, &mut r.nvext, body, api.endpoint());
            to_infer::chat(r, &body)
        }),
        Api::Completions => super::parse_completion(body).and_then(|mut r| {
            let body = disable_nvext(nvext_on, &mut r.nvext, body, api.endpoint());
            to_infer::completion(r, &body)
        }),
    };
    let (mut req, extras) = match parsed.and_then(|r| pinned.map(|p| (r, p))) {
        Ok(((mut r, extras), p)) => {
            r.set_caller(caller);
            if let Some(id) = p {
                // A worker named by header is both the target and the decode worker.
                r.pinned = Some(id);
                r.routing.backend_instance_id = Some(id);
                r.routing.decode_worker_id = Some(id);
            }
            (r, extras)
        }
        Err(e) => {
            rejected(ctx, api, body, &e);
            return Err(e);
        }
    };
    if let Err(e) = ranks_name_a_worker(&req) {
        rejected(ctx, api, body, &e);
        return Err(e);
    }
    let stream = req.stream;
    let gen = crate::infer::run(ctx, &mut req).await?;
    // Reasoning and tool calls are parsed out of chat answers only, as in 1.6.1.
    let parsing = match api {
        Api::Chat => parsing_of(ctx, gen.serving(), tool_use),
        Api::Completions => None,
    };
    let shape = Shape { api, served: gen.serving().clone(), extras, parsing };
    if stream {
        let (tx, rx) = local::channel::<Bytes>();
        monoio::spawn(answer::stream(shape, gen, tx, ctx.shared.config.sse_keep_alive));
        return Ok(Answer::Stream(rx));
    }
    answer::whole(&shape, gen).await.map(Answer::Json)
}

/// A chat request on its way, for the adapters that answer in another API's shape
/// (Anthropic Messages, OpenAI Responses): they make the chat request, run it here, and
/// render the generation's events themselves through [`crate::parsers::Parse`].
pub struct ChatRun {
    pub gen: crate::infer::Generation,
    /// The model's parsers for this request (tools only when the request offers them and
    /// `tool_choice` is not `none`), and the calls `tool_choice` forces.
    pub parsers: crate::parsers::Spec,
    pub stream: bool,
}

/// Run an already parsed and validated chat request; `body` is the JSON it stands for (what a
/// Text model's worker is sent), `caller` the session its headers name (session affinity
/// on) and its API key. A refusal is counted under `endpoint`.
pub async fn run_chat(
    ctx: &Rc<ShardCtx>,
    r: Box<super::NvCreateChatCompletionRequest>,
    body: &Bytes,
    endpoint: Endpoint,
    caller: Caller,
) -> Result<ChatRun, Error> {
    let tool_use = ToolUse::of(&r);
    let model = r.model.clone();
    let stream = r.stream == Some(true);
    let mut r = r;
    // The Responses route drops the disabled `nvext` fields here, from the chat request it
    // became; the Anthropic route did so before its conversion (which adds fields of its own).
    let body = match endpoint {
        Endpoint::Responses => disable_nvext(ctx.shared.config.nvext_enabled, &mut r.nvext, body, endpoint),
        _ => body.clone(),
    };
    let (mut req, _extras) = match to_infer::chat(r, &body) {
        Ok(x) => x,
        Err(e) => {
            crate::infer::rejected(ctx, endpoint, Some(&model), stream, &e);
            return Err(e);
        }
    };
    req.endpoint = endpoint;
    req.set_caller(caller);
    let stream = req.stream;
    let gen = crate::infer::run(ctx, &mut req).await?;
    let parsers =
        crate::parsers::Spec { parsers: parsers_of(gen.serving(), tool_use.offered), forced: tool_use.forced };
    Ok(ChatRun { gen, parsers, stream })
}

/// `DYN_DISABLE_FRONTEND_NVEXT` (`on` false): `nvext` cut to its non-empty `cache_salt`, and
/// the body a worker taking JSON is sent rewritten to match; otherwise `body` as it is.
fn disable_nvext(on: bool, nvext: &mut Option<super::nvext::NvExt>, body: &Bytes, endpoint: Endpoint) -> Bytes {
    if on || nvext.is_none() {
        return body.clone();
    }
    let (kept, dropped) = super::nvext::retain_cache_salt(nvext.take());
    if dropped {
        super::nvext::warn_dropped(endpoint);
    }
    let rewritten = super::nvext::rewrite_body_nvext(body, kept.as_ref()).map(Bytes::from);
    *nvext = kept;
    rewritten.unwrap_or_else(|| body.clone())
}

/// The token count of an already parsed and validated chat request's templated prompt,
/// counted without a worker; `None` for a model whose workers take text.
pub async fn count_chat(
    ctx: &Rc<ShardCtx>,
    r: Box<super::NvCreateChatCompletionRequest>,
    body: &Bytes,
) -> Result<Option<u32>, Error> {
    let (req, _extras) = to_infer::chat(r, body)?;
    crate::infer::count::prompt_tokens(ctx, &req).await
}

/// What a chat request asks of tool calls.
#[derive(Clone, Debug, Default)]
pub struct ToolUse {
    /// Tools are offered and `tool_choice` is not `none`: calls are parsed.
    pub offered: bool,
    /// `tool_choice` forces calls: `Some(None)` `"required"`, `Some(Some(name))` a named tool.
    pub forced: Option<Option<String>>,
}

impl ToolUse {
    pub fn of(r: &super::NvCreateChatCompletionRequest) -> ToolUse {
        use super::chat_params::ChatCompletionToolChoiceOption as Choice;
        let offered = offers_tools(r);
        let forced = match &r.tool_choice {
            Some(Choice::Required) if offered => Some(None),
            Some(Choice::Named(n)) if offered => Some(Some(n.function.name.clone())),
            _ => None,
        };
        ToolUse { offered, forced }
    }
}

/// How a chat answer from `serving` is parsed; `None` when it is not.
pub fn parsing_of(
    ctx: &ShardCtx,
    serving: &crate::infer::Serving,
    tool_use: ToolUse,
) -> Option<super::parsed::Parsing> {
    let parsers = parsers_of(serving, tool_use.offered);
    if !parsers.any() && tool_use.forced.is_none() {
        return None;
    }
    let c = &ctx.shared.config;
    Some(super::parsed::Parsing {
        parsers,
        forced: tool_use.forced,
        field: c.reasoning_field,
        dispatch_tools: c.streaming_tool_dispatch,
        dispatch_reasoning: c.streaming_reasoning_dispatch,
    })
}

/// Whether a chat request asks for tool calls to be parsed: it offers tools and `tool_choice`
/// is not `none` (1.6.1 parses none otherwise).
pub fn offers_tools(r: &super::NvCreateChatCompletionRequest) -> bool {
    use super::chat_params::ChatCompletionToolChoiceOption as Choice;
    r.tools.as_ref().is_some_and(|t| !t.is_empty()) && !matches!(r.tool_choice, Some(Choice::None))
}

/// The parsers of a chat answer from `serving`.
pub fn parsers_of(serving: &crate::infer::Serving, offers_tools: bool) -> crate::parsers::Parsers {
    crate::parsers::Parsers { reasoning: serving.reasoning, tools: serving.tools.filter(|_| offers_tools) }
}

/// A data-parallel rank (`nvext.dp_rank`, `prefill_dp_rank`) is a rank of a worker the
/// request names; without one it means nothing, and 1.6.1 answers 400 `Invalid request`.
pub fn ranks_name_a_worker(req: &crate::infer::InferRequest) -> Result<(), Error> {
    let r = &req.routing;
    let rank = r.dp_rank.is_some() || r.prefill_dp_rank.is_some();
    let worker = req.pinned.is_some() || r.decode_worker_id.is_some() || r.prefill_worker_id.is_some();
    if rank && !worker {
        return Err(Error::new(crate::error::Kind::BadRequest, "Invalid request"));
    }
    Ok(())
}

/// Count a request refused before it reached the driver, labelled with its model when that
/// is served (as Dynamo).
fn rejected(ctx: &Rc<ShardCtx>, api: Api, body: &[u8], e: &Error) {
    rejected_body(ctx, api.endpoint(), body, e);
}

/// Count a request of `endpoint` refused before it reached the driver, labelled with the model
/// its body names when that is served, and with its `stream` flag.
pub fn rejected_body(ctx: &Rc<ShardCtx>, endpoint: Endpoint, body: &[u8], e: &Error) {
    #[derive(serde::Deserialize)]
    struct Peek {
        model: Option<String>,
        stream: Option<bool>,
    }
    let peek = serde_json::from_slice::<Peek>(body).ok();
    let stream = peek.as_ref().and_then(|p| p.stream).unwrap_or(false);
    crate::infer::rejected(ctx, endpoint, peek.as_ref().and_then(|p| p.model.as_deref()), stream, e);
}
