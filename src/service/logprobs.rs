//! Output logprobs of one answer (spec §8.6): the worker's `log_probs` / `top_logprobs` of
//! each token frame, with token texts decoded by this frontend from the token ids, kept until
//! the answer (or the next streamed chunk) renders them in the API's shape.

use crate::openai::logprobs::{self as render, TokenLogprob, TopLogprob};
use crate::plane::payload::LLMEngineOutput;
use crate::tokenize::Tokenizer;

use super::pipeline::Api;

/// Logprobs received and not yet rendered.
#[derive(Default)]
pub(super) struct Logprobs {
    pending: Vec<TokenLogprob>,
}

/// The text of one token id (special tokens included, so no position is blank).
fn token_text(tok: &Tokenizer, id: u32) -> String {
    tok.decode(&[id], false).unwrap_or_default()
}

impl Logprobs {
    /// Keep the logprobs of a worker frame: one entry per token that has a `log_probs` value.
    pub(super) fn add(&mut self, out: &LLMEngineOutput, tok: &Tokenizer) {
        let Some(lps) = &out.log_probs else { return };
        for (i, (&id, &lp)) in out.token_ids.iter().zip(lps).enumerate() {
            let top = out.top_logprobs.as_ref().and_then(|t| t.get(i)).map_or_else(Vec::new, |alts| {
                alts.iter()
                    .map(|a| TopLogprob {
                        token: a.token.clone().unwrap_or_else(|| token_text(tok, a.token_id)),
                        logprob: a.logprob as f32,
                    })
                    .collect()
            });
            self.pending.push(TokenLogprob { token: token_text(tok, id), token_id: id, logprob: lp as f32, top });
        }
    }

    /// Render what is pending in `api`'s shape and forget it; `None` when nothing is.
    pub(super) fn take(&mut self, api: Api) -> Option<Vec<u8>> {
        if self.pending.is_empty() {
            return None;
        }
        let mut out = Vec::with_capacity(128 * self.pending.len());
        match api {
            Api::Chat => render::chat(&mut out, &self.pending),
            Api::Completions => render::completion(&mut out, &self.pending),
        }
        self.pending.clear();
        Some(out)
    }
}
