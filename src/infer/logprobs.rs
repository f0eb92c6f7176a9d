//! Output log probabilities of one choice (docs/dynamo/request-plane.md §8.6): the worker's
//! `log_probs` / `top_logprobs` of each token frame, with token texts decoded by this frontend
//! from the token ids, kept until the next delta (or the choice's end) carries them.

use crate::plane::payload::LLMEngineOutput;
use crate::tokenize::Tokenizer;

/// One alternative at a position.
#[derive(Clone, Debug, PartialEq)]
pub struct TopLogprob {
    pub token: String,
    pub logprob: f32,
}

/// One output token with its log probability and the alternatives the worker reported.
#[derive(Clone, Debug, PartialEq)]
pub struct TokenLogprob {
    pub token: String,
    pub token_id: u32,
    pub logprob: f32,
    pub top: Vec<TopLogprob>,
}

/// Logprobs received and not yet handed out.
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

    /// What is pending, and forget it.
    pub(super) fn take(&mut self) -> Vec<TokenLogprob> {
        std::mem::take(&mut self.pending)
    }
}
