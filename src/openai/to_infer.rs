//! The OpenAI requests as the driver's [`InferRequest`]: every field Dynamo 1.6.1 forwards to
//! a worker lands where 1.6.1 puts it (compared with what 1.6.1 sends to the same recording
//! worker by `scripts/interop_fidelity.sh`); the fields the frontend itself uses (stream,
//! `n`, `echo`, logprobs, the pinned worker, annotations it answers) become the driver's own
//! options.
//!
//! | request field | where |
//! |---|---|
//! | `max_completion_tokens` (chat, wins) / `max_tokens`, `min_tokens`, `stop` (strings, or token ids), `stop_token_ids`, `ignore_eos` | stop conditions; `ignore_eos` drops the stops and the model's EOS ids |
//! | `thinking_token_budget` (chat, wins) / `nvext.max_thinking_tokens` | `stop_conditions.max_thinking_tokens` |
//! | `temperature`, `top_p` (both dropped by `nvext.greed_sampling`), `top_k` (`0` → `-1`), `min_p`, `seed`, penalties, `include_stop_str_in_output`, `best_of` (completions) | sampling options |
//! | `guided_*`, `response_format`, `tool_choice` | `sampling_options.guided_decoding` ([`super::guided`]) |
//! | `logprobs` / `top_logprobs`, `prompt_logprobs` (completions `echo` → 1), `skip_special_tokens`, `return_tokens_as_token_ids`, `no_stop_trim` | output options |
//! | `nvext.annotations` | `annotations` |
//! | `nvext` worker ids and ranks, `agent_hints`, `routing_constraints`, `cache_salt` | `routing` |
//! | `nvext.extra_fields` / `metadata_upload` / `token_data` / `cache_salt`; `detokenize`, `allowed_token_ids`, `bad_words_token_ids`, `logprob_token_ids` | `extra_args` |
//! | `nvext.router`, `nvext.request_timestamp_ms`, `mm_processor_kwargs`, `media_io_kwargs` | top-level keys of the same names |
//! | `nvext.token_data` | the prompt's token ids (no template, no tokenizer) |
//!
//! Where switchyard differs from 1.6.1 on purpose: `n` samples are `n` worker requests (each
//! with its own seed, see [`crate::infer::generation`]) rather than one request with `n` a
//! worker may ignore, and completions `echo` also puts the prompt in front of the text.
//! Accepted and forwarded nowhere, as in 1.6.1: `user`, `logit_bias` (validated), `store`,
//! `metadata`, `service_tier`, `prediction`, `audio`, `modalities`, `web_search_options`,
//! `prompt_cache_key`, `parallel_tool_calls` (but for the `required` schema), completions
//! `suffix`, `nvext.use_raw_prompt`.

use bytes::Bytes;
use serde_json::{Map, Value};
use smallvec::SmallVec;

use super::chat::NvCreateChatCompletionRequest;
use super::completions::{NvCreateCompletionRequest, Prompt as OpenAiPrompt};
use super::content::MessageContent;
use super::messages::ChatMessage;
use super::nvext::{AgentHints, NvExt};
use crate::error::Error;
use crate::infer::{ChatInput, InferRequest, Input, PlainRole, PlainTurn, Prompt, Stops};
use crate::metrics::Endpoint;
use crate::plane::payload::{OutputOptions, RoutingHints, SamplingOptions};

/// Fill the options both request types spell the same way.
macro_rules! common {
    ($r:expr, $req:expr) => {{
        let r = $r;
        let req: &mut InferRequest = $req;
        let ignore_eos = r.ignore_eos == Some(true);
        req.stops = Stops {
            max_tokens: r.max_tokens(),
            min_tokens: r.min_tokens,
            // `ignore_eos` sends (and enforces) no stop at all, as 1.6.1.
            strings: if ignore_eos { Vec::new() } else { r.stop_strings().to_vec() },
            token_ids: if ignore_eos { None } else { r.stop_token_ids() },
            ignore_eos: r.ignore_eos,
            include_stop_str: r.include_stop_str_in_output(),
            skip_special_tokens: r.skip_special_tokens(),
        };
        let greedy = r.nvext.as_ref().and_then(|n| n.greed_sampling) == Some(true);
        req.sampling = SamplingOptions {
            temperature: if greedy { None } else { r.temperature },
            top_p: if greedy { None } else { r.top_p },
            top_k: r.top_k.map(|k| if k == 0 { -1 } else { k }),
            min_p: r.min_p,
            seed: r.seed,
            presence_penalty: r.presence_penalty,
            frequency_penalty: r.frequency_penalty,
            repetition_penalty: r.repetition_penalty,
            include_stop_str_in_output: r.include_stop_str_in_output,
            ..Default::default()
        };
        req.output = OutputOptions {
            logprobs: r.output_logprobs(),
            prompt_logprobs: r.prompt_logprobs,
            skip_special_tokens: r.skip_special_tokens,
            return_tokens_as_token_ids: r.return_tokens_as_token_ids,
            ..Default::default()
        };
        req.logprobs = r.output_logprobs().is_some();
        req.stream = r.is_streaming();
        req.choices = r.choices();
        req.routing = routing(r.nvext.as_ref(), r.cache_salt());
        req.extra_args = extra_args(
            r.nvext.as_ref(),
            r.cache_salt(),
            [
                ("detokenize", &r.detokenize),
                ("allowed_token_ids", &r.allowed_token_ids),
                ("bad_words_token_ids", &r.bad_words_token_ids),
                ("logprob_token_ids", &r.logprob_token_ids),
            ],
        )
        .map(Box::new);
        if let Some(nvext) = &r.nvext {
            req.pinned = nvext.backend_instance_id;
            if let Some(a) = &nvext.annotations {
                req.annotations = a.clone();
            }
            req.max_thinking_tokens = nvext.max_thinking_tokens;
            req.router = nvext.router.as_ref().map(|p| {
                let mut m = Map::new();
                let mut put = |k: &str, v: Option<f64>| {
                    if let Some(v) = v {
                        m.insert(k.into(), Value::from(v));
                    }
                };
                put("ttft_target", p.ttft_target);
                put("itl_target", p.itl_target);
                Box::new(Value::Object(m))
            });
            req.request_timestamp_ms = nvext.request_timestamp_ms;
            if let Some(ids) = &nvext.token_data {
                // The client tokenized the prompt itself.
                req.input = Input::Prompts(smallvec::smallvec![Prompt::Ids(ids.clone())]);
            }
        }
    }};
}

/// What an OpenAI answer carries besides the driver's events.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Extras {
    /// `stream_options.include_usage`: a stream ends with a usage chunk.
    pub include_usage: bool,
    /// `stream_options.continuous_usage_stats`: every chunk carries the usage so far.
    pub continuous_usage: bool,
    /// `nvext.worker_id` on the answer (asked by `nvext.extra_fields: ["worker_id"]` or the
    /// `query_instance_id:` annotation).
    pub worker_id: bool,
    /// `nvext.timing` on the answer's last chunk (`nvext.extra_fields: ["timing"]`).
    pub timing: bool,
}

macro_rules! extras {
    ($r:expr) => {{
        let r = $r;
        let nvext = r.nvext.as_ref();
        let field = |name: &str| nvext.is_some_and(|n| n.wants_extra_field(name));
        Extras {
            include_usage: r.include_usage(),
            continuous_usage: r.continuous_usage_stats(),
            worker_id: field("worker_id") || nvext.is_some_and(NvExt::has_query_instance_id_annotation),
            timing: field("timing"),
        }
    }};
}

/// A parsed chat request (`body` is what it was parsed from: the template reads its
/// messages from there, in the client's key order), and what its answer carries besides.
pub fn chat(mut r: Box<NvCreateChatCompletionRequest>, body: &Bytes) -> Result<(InferRequest, Extras), Error> {
    let guided = super::guided::chat(&r)?;
    let chat = chat_input(&mut r, body.clone());
    let mut req = InferRequest::new(Endpoint::ChatCompletions, std::mem::take(&mut r.model), Input::Chat(chat));
    common!(&*r, &mut req);
    req.sampling.n = None;
    req.sampling.guided_decoding = guided.map(Box::new);
    if let Some(budget) = r.thinking_token_budget {
        req.max_thinking_tokens = Some(budget);
    }
    req.mm_processor_kwargs = r.mm_processor_kwargs.take().map(Box::new);
    req.media_io_kwargs = r.media_io_kwargs.take().map(Box::new);
    req.forward = Some(body.clone());
    Ok((req, extras!(&*r)))
}

/// The conversation of a chat request for the template; `json` is the body it was parsed
/// from. Moves the message strings out of `r`.
pub fn chat_input(r: &mut NvCreateChatCompletionRequest, json: Bytes) -> ChatInput {
    ChatInput {
        json,
        plain: plain_turns(&mut r.messages),
        tools: r.tools.as_ref().is_some_and(|t| !t.is_empty()),
        tool_choice_none: matches!(r.tool_choice, Some(super::chat_params::ChatCompletionToolChoiceOption::None)),
        args: r.template_args(),
        add_generation_prompt: r.add_generation_prompt,
        continue_final_message: r.continue_final_message == Some(true),
    }
}

/// [`chat_input`] of a copy of `r` (for callers that keep the request).
pub fn chat_input_of(r: &NvCreateChatCompletionRequest, body: &[u8]) -> ChatInput {
    chat_input(&mut r.clone(), Bytes::copy_from_slice(body))
}

/// The conversation as plain turns when every message is a system, developer or user message
/// with string content (the strings are moved out: the request is not read again).
fn plain_turns(messages: &mut [ChatMessage]) -> Option<Vec<PlainTurn>> {
    let plain = |m: &ChatMessage| match m {
        ChatMessage::System(s) => s.tools.is_none() && matches!(s.content, MessageContent::Text(_)),
        ChatMessage::User(u) => matches!(u.content, MessageContent::Text(_)),
        ChatMessage::Developer(d) => matches!(d.content, MessageContent::Text(_)),
        _ => false,
    };
    if !messages.iter().all(plain) {
        return None;
    }
    let take = |c: &mut MessageContent| match c {
        MessageContent::Text(t) => std::mem::take(t),
        MessageContent::Parts(_) => String::new(),
    };
    let turns = messages
        .iter_mut()
        .filter_map(|m| match m {
            ChatMessage::System(s) => Some(PlainTurn { role: PlainRole::System, content: take(&mut s.content) }),
            ChatMessage::Developer(d) => Some(PlainTurn { role: PlainRole::Developer, content: take(&mut d.content) }),
            ChatMessage::User(u) => Some(PlainTurn { role: PlainRole::User, content: take(&mut u.content) }),
            _ => None,
        })
        .collect();
    Some(turns)
}

/// A parsed completion request, and what its answer carries besides.
pub fn completion(mut r: NvCreateCompletionRequest, body: &Bytes) -> Result<(InferRequest, Extras), Error> {
    let guided = super::guided::completion(&r)?;
    let prompts: SmallVec<[Prompt; 1]> = match std::mem::replace(&mut r.prompt, OpenAiPrompt::StringArray(Vec::new())) {
        OpenAiPrompt::String(text) => smallvec::smallvec![Prompt::Text(text)],
        OpenAiPrompt::IntegerArray(ids) => smallvec::smallvec![Prompt::Ids(ids)],
        OpenAiPrompt::StringArray(v) => v.into_iter().map(Prompt::Text).collect(),
        OpenAiPrompt::ArrayOfIntegerArray(v) => v.into_iter().map(Prompt::Ids).collect(),
    };
    let mut req = InferRequest::new(Endpoint::Completions, std::mem::take(&mut r.model), Input::Prompts(prompts));
    common!(&r, &mut req);
    req.sampling.n = None;
    req.sampling.best_of = r.best_of;
    req.sampling.guided_decoding = guided.map(Box::new);
    req.output.prompt_logprobs = r.prompt_logprobs();
    req.output.no_stop_trim = r.no_stop_trim;
    req.echo = r.echo == Some(true);
    req.forward = Some(body.clone());
    Ok((req, extras!(&r)))
}

/// The routing hints 1.6.1 sends: from `nvext` when the request has one (worker ids and
/// ranks, agent hints, taint constraints), and the cache salt either way.
fn routing(nvext: Option<&NvExt>, cache_salt: Option<&str>) -> RoutingHints {
    let cache_salt = cache_salt.map(str::to_string);
    let Some(n) = nvext else {
        return RoutingHints { cache_salt, ..Default::default() };
    };
    let hints = n.agent_hints.as_ref();
    let (priority_jump, strict_priority, priority) = priorities(hints);
    RoutingHints {
        backend_instance_id: n.backend_instance_id,
        prefill_worker_id: n.prefill_worker_id,
        decode_worker_id: n.decode_worker_id,
        dp_rank: n.dp_rank,
        prefill_dp_rank: n.prefill_dp_rank,
        expected_output_tokens: hints.and_then(|h| h.osl),
        cache_salt,
        priority_jump,
        strict_priority,
        priority,
        routing_constraints: n.routing_constraints.as_ref().map(|c| {
            let mut m = Map::new();
            if !c.required_taints.is_empty() {
                m.insert("required_taints".into(), c.required_taints.iter().cloned().collect::<Vec<_>>().into());
            }
            if !c.preferred_taints.is_empty() {
                let p: Map<String, Value> =
                    c.preferred_taints.iter().map(|(k, v)| (k.clone(), Value::from(f64::from(*v)))).collect();
                m.insert("preferred_taints".into(), Value::Object(p));
            }
            Value::Object(m)
        }),
        ..Default::default()
    }
}

/// `(priority_jump, strict_priority, priority)` of the agent hints: the jump is the priority
/// (negative ones count as 0), else the deprecated `latency_sensitivity`.
fn priorities(hints: Option<&AgentHints>) -> (Option<f64>, Option<u32>, Option<i32>) {
    let jump = hints.and_then(|h| h.priority.map(|p| f64::from(p.max(0))).or(h.latency_sensitivity));
    (jump, hints.and_then(|h| h.strict_priority), hints.and_then(|h| h.priority))
}

/// `extra_args`: what 1.6.1 forwards for the backend outside the typed groups, each member
/// only when set (`None` when nothing is).
fn extra_args(nvext: Option<&NvExt>, cache_salt: Option<&str>, sampling: [(&str, &Option<Value>); 4]) -> Option<Value> {
    let from_nvext =
        nvext.is_some_and(|n| n.extra_fields.is_some() || n.metadata_upload.is_some() || n.token_data.is_some());
    if !from_nvext && cache_salt.is_none() && sampling.iter().all(|(_, v)| v.as_ref().is_none_or(Value::is_null)) {
        return None;
    }
    let mut nv = Map::new();
    if let Some(n) = nvext {
        if let Some(f) = &n.extra_fields {
            nv.insert("extra_fields".into(), f.clone().into());
        }
        if let Some(u) = &n.metadata_upload {
            nv.insert("metadata_upload".into(), serde_json::json!({"url": u.url}));
        }
        if n.token_data.is_some() {
            nv.insert("token_in".into(), Value::Bool(true));
        }
    }
    if let Some(salt) = cache_salt {
        nv.insert("cache_salt".into(), salt.into());
    }
    let mut so = Map::new();
    for (name, value) in sampling {
        if let Some(v) = value.as_ref().filter(|v| !v.is_null()) {
            so.insert(name.into(), v.clone());
        }
    }
    let mut out = Map::new();
    if !nv.is_empty() {
        out.insert("nvext".into(), Value::Object(nv));
    }
    if !so.is_empty() {
        out.insert("sampling_options".into(), Value::Object(so));
    }
    (!out.is_empty()).then_some(Value::Object(out))
}
