//! The bytes of every token of a byte-level BPE tokenizer (Qwen, Llama-3, DeepSeek, gpt-oss),
//! for the streaming detokenizer ([`super::detok`]).
//!
//! For these tokenizers `decode(ids)` is the concatenation of each id's bytes (an added
//! token's text, nothing for a special token when `skip_special_tokens`), read as UTF-8 with
//! invalid sequences replaced. With the bytes of every id in one table, a generated token
//! costs an append and a UTF-8 check instead of a window decode (an allocation, a copy of the
//! window's bytes, and the text compared again). Built once per model off the shard threads
//! (~30 ms, ~1.6 MB for a 150 K vocabulary) and shared read-only by every instance of it.
//!
//! The table is checked against the tokenizer's own `decode`, id by id and on id streams, in
//! `tests/detok.rs`; ids past its end (never seen in a real vocabulary) are read the slow
//! way, with the same result.

use tokenizers::pipeline::{PipelineModel, PipelineTokenizer};
use tokenizers::utils::byte_level::char_to_byte;

/// Consecutive absent ids after which the scan of a vocabulary stops.
const GAP: u32 = 4096;

/// Per id: where its bytes are in `bytes` and what kind of token it is.
#[derive(Clone, Copy)]
struct Entry {
    start: u32,
    len: u16,
    kind: Kind,
}

#[derive(Clone, Copy, PartialEq)]
enum Kind {
    Absent,
    Plain,
    Special,
}

/// The table (see the module docs).
pub struct TokenBytes {
    entries: Vec<Entry>,
    bytes: Vec<u8>,
}

impl std::fmt::Debug for TokenBytes {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TokenBytes").field("ids", &self.entries.len()).field("bytes", &self.bytes.len()).finish()
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
        let mut table = TokenBytes { entries: Vec::new(), bytes: Vec::new() };
        let mut misses = 0;
        let mut id = 0u32;
        while misses < GAP || added_max.is_some_and(|m| id <= m) {
            let entry = match lookup(t, id) {
                Some((kind, text)) => {
                    misses = 0;
                    let start = table.bytes.len() as u32;
                    text.append_to(&mut table.bytes)?;
                    let len = u16::try_from(table.bytes.len() - start as usize).ok()?;
                    Entry { start, len, kind }
                }
                None => {
                    misses += 1;
                    Entry { start: 0, len: 0, kind: Kind::Absent }
                }
            };
            table.entries.push(entry);
            id += 1;
        }
        while table.entries.last().is_some_and(|e| e.kind == Kind::Absent) {
            table.entries.pop();
        }
        table.entries.shrink_to_fit();
        table.bytes.shrink_to_fit();
        Some(table)
    }

    /// Append the bytes `decode` gives `id` to `out`. `t` is the tokenizer the table was built
    /// from (read for ids past the table's end).
    #[inline]
    pub fn append(&self, t: &PipelineTokenizer, id: u32, skip_special_tokens: bool, out: &mut Vec<u8>) {
        let Some(e) = self.entries.get(id as usize) else {
            if let Some((kind, text)) = lookup(t, id) {
                if kind == Kind::Plain || !skip_special_tokens {
                    let _ = text.append_to(out);
                }
            }
            return;
        };
        if e.kind == Kind::Plain || (e.kind == Kind::Special && !skip_special_tokens) {
            out.extend_from_slice(&self.bytes[e.start as usize..e.start as usize + e.len as usize]);
        }
    }

    /// Ids in the table.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
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
