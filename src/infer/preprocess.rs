//! Stage preprocess, for `model_input = Tokens` models: the prompt text (a conversation
//! through the model's chat template, or the client's prompts) encoded with this shard's own
//! tokenizer — inline for chat-sized prompts, on the shard's helper thread for long ones —
//! and the wire request every choice of that prompt is sent (docs/dynamo/request-plane.md
//! §7.2): the request's sampling, stop and output options, the model's EOS ids as hidden stop
//! tokens (unless `ignore_eos`), the card checksum, the annotations and routing hints.

use std::rc::Rc;
use std::time::Instant;

use smallvec::SmallVec;

use super::request::{InferRequest, Input, Prompt};
use super::tracker::Tracker;
use crate::error::{Error, Kind};
use crate::plane::payload::{PreprocessedRequest, StopConditions as WireStop};
use crate::registry::{Serving, TokensModel};
use crate::shard::ShardCtx;
use crate::tokenize::offload;
use crate::tokenize::preprocess::{chat_prompt, PreprocessOptions};
use crate::tokenize::stop::StopConditions;

/// One prompt, ready to send.
pub(super) struct PreparedPrompt {
    /// Boxed: a wire request is ~1.2 KB, and the driver's futures hold it across awaits.
    pub wire: Box<PreprocessedRequest>,
    /// The prompt's text, for `echo`.
    pub echo: Option<String>,
}

/// What preprocessing made of a request.
pub(super) struct Prepared {
    pub prompts: SmallVec<[PreparedPrompt; 1]>,
    /// The chat prompt as the template wrote it (kept for the `formatted_prompt` annotation).
    pub formatted: Option<String>,
    /// What the postprocessor enforces.
    pub stop: StopConditions,
}

/// Template and tokenize `req`'s prompts for `tokens`; `keep_formatted`: keep the rendered
/// chat prompt.
pub(super) async fn tokens(
    ctx: &Rc<ShardCtx>,
    tokens: &TokensModel,
    serving: &Serving,
    req: &mut InferRequest,
    keep_formatted: bool,
    track: &Tracker,
) -> Result<Prepared, Error> {
    let files = &tokens.files;
    let tokenizer = &tokens.tokenizers[ctx.id];
    // Chat-sized texts are encoded right here; only long ones wait for the helper thread.
    macro_rules! encode {
        ($text:expr, $special:expr) => {{
            let (text, special): (String, bool) = ($text, $special);
            let t0 = Instant::now();
            let ids = match offload::encode_short(tokenizer, &text, special) {
                Some(ids) => ids,
                None => match ctx.offload(files) {
                    Ok(helper) => helper.encode_with(text, special).await,
                    Err(e) => Err(e),
                },
            };
            track.tokenized(t0.elapsed());
            ids.map_err(Error::internal)?
        }};
    }
    let mut formatted = None;
    let mut inputs: SmallVec<[(Vec<u32>, Option<String>); 1]> = SmallVec::new();
    match std::mem::replace(&mut req.input, Input::Prompts(SmallVec::new())) {
        Input::Chat(chat) => {
            let opts = PreprocessOptions {
                exclude_tools_when_tool_choice_none: ctx.shared.config.exclude_tools_when_tool_choice_none,
                ..PreprocessOptions::default()
            };
            let text = chat_prompt(&chat, files, opts, None)?;
            if keep_formatted {
                formatted = Some(text.clone());
            }
            inputs.push((encode!(text, false), None));
        }
        Input::Prompts(prompts) => {
            for p in prompts {
                inputs.push(match p {
                    Prompt::Text(text) => {
                        let echo = req.echo.then(|| text.clone());
                        (encode!(text, true), echo)
                    }
                    Prompt::Ids(ids) => {
                        let echo = match req.echo {
                            true => Some(tokenizer.decode(&ids, false).map_err(Error::internal)?),
                            false => None,
                        };
                        (ids, echo)
                    }
                });
            }
        }
        Input::Tensor(_) => {
            return Err(Error::new(Kind::NotFound, format!("Model '{}' does not take tensors", req.model)));
        }
    }
    let eos = &files.eos_token_ids;
    if let Some(cap) = ctx.shared.config.max_output_tokens {
        if req.stops.max_tokens.is_none_or(|n| n > cap) {
            req.stops.max_tokens = Some(cap);
            ctx.metrics.edge(crate::metrics::Edge::OutputCapped);
        }
    }
    let s = &req.stops;
    let ignore_eos = s.ignore_eos == Some(true);
    let stop = StopConditions {
        stop: s.strings.clone(),
        stop_token_ids: s.token_ids.clone().unwrap_or_default(),
        eos_token_ids: eos.clone(),
        ignore_eos,
        min_tokens: s.min_tokens.unwrap_or(0),
        max_tokens: s.max_tokens,
        include_stop_str_in_output: s.include_stop_str,
    };
    let mut base = Box::new(PreprocessedRequest {
        model: std::mem::take(&mut req.model),
        token_ids: Vec::new(),
        stop_conditions: WireStop {
            max_tokens: s.max_tokens,
            stop: (!s.strings.is_empty()).then(|| s.strings.clone()),
            stop_token_ids: s.token_ids.clone(),
            stop_token_ids_hidden: (!ignore_eos).then(|| eos.clone()),
            min_tokens: s.min_tokens,
            ignore_eos: s.ignore_eos,
            max_thinking_tokens: req.max_thinking_tokens,
            ..Default::default()
        },
        sampling_options: std::mem::take(&mut req.sampling),
        output_options: std::mem::take(&mut req.output),
        // With `ignore_eos` the worker is told of no EOS id either (as 1.6.1).
        eos_token_ids: if ignore_eos { Vec::new() } else { eos.clone() },
        mdc_sum: serving.mdc_sum.clone(),
        annotations: std::mem::take(&mut req.annotations),
        routing: Some(std::mem::take(&mut req.routing)),
        router_config_override: None,
        prefill_result: None,
        bootstrap_info: None,
        extra_args: req.extra_args.take(),
        router: req.router.take(),
        mm_processor_kwargs: req.mm_processor_kwargs.take(),
        media_io_kwargs: req.media_io_kwargs.take(),
        request_timestamp_ms: req.request_timestamp_ms,
    });
    let mut prompts = SmallVec::with_capacity(inputs.len());
    let mut inputs = inputs.into_iter();
    let last = inputs.next_back();
    for (ids, echo) in inputs {
        let mut wire = base.clone();
        wire.token_ids = ids;
        prompts.push(PreparedPrompt { wire, echo });
    }
    if let Some((ids, echo)) = last {
        base.token_ids = ids;
        prompts.push(PreparedPrompt { wire: base, echo });
    }
    Ok(Prepared { prompts, formatted, stop })
}
