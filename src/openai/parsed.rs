//! A streamed chat answer whose model has a reasoning parser: each delta's text split into
//! reasoning and content ([`crate::parsers::reasoning`]) and written as 1.6.1 writes it — a
//! role-only chunk first, then chunks carrying `content` and/or the reasoning member, and
//! nothing for a delta whose text is held back (a marker not yet whole). Runs in the
//! answer's task on the shard.

use smallvec::SmallVec;

use super::answer::{render_logprobs, Api};
use super::response::{self as body, Meta};
use crate::infer::{Delta, TokenLogprob};
use crate::parsers::reasoning::{Format, Split};

/// The splits of a stream's choices, and the text of the delta at hand.
#[derive(Default)]
pub(super) struct Parsed {
    choices: SmallVec<[Choice; 1]>,
    reasoning: String,
    content: String,
}

struct Choice {
    split: Split,
    /// Logprobs of deltas that put nothing out yet: they go with the next chunk.
    pending: Vec<TokenLogprob>,
}

/// Choice `index` of `choices`, made (with a split of `format`) when it is new.
fn choice(choices: &mut SmallVec<[Choice; 1]>, index: u32, format: Format) -> &mut Choice {
    let i = index as usize;
    while choices.len() <= i {
        choices.push(Choice { split: Split::new(format), pending: Vec::new() });
    }
    &mut choices[i]
}

impl Parsed {
    /// Write the chunks of delta `d` into `out` (a role-only chunk first when `first`).
    pub(super) fn delta(
        &mut self,
        out: &mut Vec<u8>,
        meta: &Meta<'_>,
        format: Format,
        field: &str,
        first: bool,
        d: Delta,
    ) {
        if first {
            body::chat_chunk_at(out, meta, d.choice, None, true, None, None);
        }
        let Parsed { choices, reasoning, content } = self;
        reasoning.clear();
        content.clear();
        let c = choice(choices, d.choice, format);
        c.split.push(&d.text, reasoning, content);
        c.pending.extend(d.logprobs);
        if !reasoning.is_empty() || !content.is_empty() {
            write(out, meta, d.choice, content, field, reasoning, &mut c.pending);
        }
    }

    /// The end of choice `index`: what its split held back, as one more chunk.
    pub(super) fn flush(&mut self, out: &mut Vec<u8>, meta: &Meta<'_>, field: &str, index: u32) {
        let Some(c) = self.choices.get_mut(index as usize) else { return };
        let (mut reasoning, mut content) = (String::new(), String::new());
        c.split.finish(&mut reasoning, &mut content);
        if !reasoning.is_empty() || !content.is_empty() {
            write(out, meta, index, &content, field, &reasoning, &mut c.pending);
        }
    }
}

fn write(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    index: u32,
    content: &str,
    field: &str,
    reasoning: &str,
    pending: &mut Vec<TokenLogprob>,
) {
    let logprobs = render_logprobs(Api::Chat, pending);
    pending.clear();
    body::chat_pieces_chunk_at(out, meta, index, content, (field, reasoning), logprobs.as_deref());
}
