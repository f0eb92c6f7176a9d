//! A chat request's prompt counted without running it: the model's chat template applied and
//! the text tokenized as [`super::preprocess`] does for a request it sends, on the shard, no
//! worker contacted (the Anthropic adapter's `count_tokens`).

use std::rc::Rc;

use super::request::{InferRequest, Input};
use super::resolve::{resolve, ModelKind};
use crate::error::{Error, Kind};
use crate::shard::ShardCtx;
use crate::tokenize::offload;
use crate::tokenize::preprocess::{chat_prompt, PreprocessOptions};

/// The token count of `req`'s templated prompt; `None` when the model's workers take text
/// (the frontend has no tokenizer for it). Unknown model: 404.
pub async fn prompt_tokens(ctx: &Rc<ShardCtx>, req: &InferRequest) -> Result<Option<u32>, Error> {
    let resolved = resolve(&ctx.registry(), &req.model).or_else(|e| match e.kind() {
        // Counting needs the model's files, not a live worker.
        Kind::ServiceUnavailable => {
            ctx.registry().serving.get(req.model.as_str()).map(|s| super::Resolved { serving: s.clone() }).ok_or(e)
        }
        _ => Err(e),
    })?;
    let tokens = match resolved.kind() {
        ModelKind::Tokens(t) => t,
        ModelKind::Text => return Ok(None),
        ModelKind::Tensor(_) => {
            return Err(Error::new(Kind::NotFound, format!("Model '{}' is a tensor model", req.model)));
        }
    };
    let Input::Chat(chat) = &req.input else {
        return Err(Error::internal("count_tokens of a request without a conversation"));
    };
    let opts = PreprocessOptions {
        exclude_tools_when_tool_choice_none: ctx.shared.config.exclude_tools_when_tool_choice_none,
        ..PreprocessOptions::default()
    };
    let text = chat_prompt(chat, &tokens.files, opts, None)?;
    let tokenizer = &tokens.tokenizers[ctx.id];
    let ids = match offload::encode_short(tokenizer, &text, false) {
        Some(ids) => ids,
        None => match ctx.offload(&tokens.files) {
            Ok(helper) => helper.encode_with(text, false).await,
            Err(e) => Err(e),
        },
    };
    let ids = ids.map_err(Error::internal)?;
    Ok(Some(ids.len() as u32))
}
