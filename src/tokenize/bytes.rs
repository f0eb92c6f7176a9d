//! The bytes of every token of a byte-level BPE tokenizer (Qwen, Llama-3, DeepSeek, gpt-oss),
//! for the streaming detokenizer ([`super::detok`]).
//!
//! For these tokenizers `decode(ids)` is the concatenation of each id's bytes (an added
//! token's text, nothing for a special token when `skip_special_tokens`), read as UTF-8 with
//! invalid sequences replaced. With the bytes of every id in one table, a generated token
//! costs an append and a UTF-8 check instead of a window decode (an allocation, a copy of the
//! window's bytes, and the text compared again). Built once per model off the shard threads
//! and shared read-only by every instance of it: 4 bytes per id plus the tokens' bytes, 1.6 MB
//! for Qwen3's 151,669 ids.
//!
//! The table is checked against the tokenizer's own `decode`, id by id and on id streams, in
//! `tests/detok.rs`; ids past its end (never seen in a real vocabulary) are read the slow
//! way, with the same result.

use tokenizers::pipeline::{PipelineModel, PipelineTokenizer};
use tokenizers::utils::byte_level::char_to_byte;

/// Consecutive absent ids after which the scan of a vocabulary stops.
const GAP: u32 = 4096;

/// A token's kind, in the top two bits of its entry in [`TokenBytes::starts`].
#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Absent = 0,
    Plain = 1,
    Special = 2,
}

const KIND_SHIFT: u32 = 30;
const START_MASK: u32 = (1 << KIND_SHIFT) - 1;

/// The table (see the module docs).
pub struct TokenBytes {
    /// Per id, and one more: where its bytes start in `bytes` (low 30 bits) and its kind (top
    /// two bits); they end where the next id's start. Four bytes per id.
    starts: Vec<u32>,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for TokenBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBytes").field("ids", &self.len()).field("bytes", &self.bytes.len()).finish()
    }
}

impl TokenBytes {
    /// The table of `t`, when its decode is a concatenation of token bytes (a byte-level BPE).
    pub fn build(t: &PipelineTokenizer) -> Option<TokenBytes> {
        let PipelineModel::BPE(bpe) = t.get_model() else { return None };
        if !bpe.is_byte_level() {
            return None;
        }
        let added = t.get_added_vocabulary();
        let added_max = added.get_vocab().values().copied().max();
        let mut table = TokenBytes { starts: Vec::new(), bytes: Vec::new() };
        let mut misses = 0;
        let mut id = 0u32;
        while misses < GAP || added_max.is_some_and(|m| id <= m) {
            let start = u32::try_from(table.bytes.len()).ok().filter(|s| *s <= START_MASK)?;
            let kind = match lookup(t, id) {
                Some((kind, text)) => {
                    misses = 0;
                    text.append_to(&mut table.bytes)?;
                    kind
                }
                None => {
                    misses += 1;
                    Kind::Absent
                }
            };
            table.starts.push(start | (kind as u32) << KIND_SHIFT);
            id += 1;
        }
        while table.starts.last().is_some_and(|e| e >> KIND_SHIFT == Kind::Absent as u32) {
            table.starts.pop();
        }
        // The end of the last id.
        table.starts.push(u32::try_from(table.bytes.len()).ok().filter(|s| *s <= START_MASK)?);
        table.starts.shrink_to_fit();
        table.bytes.shrink_to_fit();
        Some(table)
    }

    /// Append the bytes `decode` gives `id` to `out`. `t` is the tokenizer the table was built
    /// from (read for ids past the table's end).
    #[inline]
    pub fn append(&self, t: &PipelineTokenizer, id: u32, skip_special_tokens: bool, out: &mut Vec<u8>) {
        let i = id as usize;
        let (Some(&entry), Some(&next)) = (self.starts.get(i), self.starts.get(i + 1)) else {
            if let Some((kind, text)) = lookup(t, id) {
                if kind == Kind::Plain || !skip_special_tokens {
                    let _ = text.append_to(out);
                }
            }
            return;
        };
        let kind = entry >> KIND_SHIFT;
        if kind == Kind::Plain as u32 || (kind == Kind::Special as u32 && !skip_special_tokens) {
            out.extend_from_slice(&self.bytes[(entry & START_MASK) as usize..(next & START_MASK) as usize]);
        }
    }

    /// Ids in the table.
    pub fn len(&self) -> usize {
        self.starts.len().saturating_sub(1)
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// A token's text as the decoder sees it: an added token's own text, or a vocabulary entry
/// in byte-level form (one printable character per byte).
enum Text {
    Added(String),
    ByteLevel(String),
}

impl Text {
    /// Append the bytes this text stands for; `None` if a byte-level entry holds a character
    /// that stands for no byte (then the table is not built).
    fn append_to(&self, out: &mut Vec<u8>) -> Option<()> {
        match self {
            Text::Added(s) => out.extend_from_slice(s.as_bytes()),
            Text::ByteLevel(s) => {
                for c in s.chars() {
                    out.push(char_to_byte(c)?);
                }
            }
        }
        Some(())
    }
}

/// Added tokens come first, as in the tokenizer's own decode.
fn lookup(t: &PipelineTokenizer, id: u32) -> Option<(Kind, Text)> {
    let added = t.get_added_vocabulary();
    if let Some(s) = added.simple_id_to_token(id) {
        let kind = if added.is_special_token(&s) { Kind::Special } else { Kind::Plain };
        return Some((kind, Text::Added(s)));
    }
    t.get_model().id_to_token(id).map(|s| (Kind::Plain, Text::ByteLevel(s)))
}
