//! Types shared by the chat and completions requests: `stop`, `stream_options`, and the small
//! serde helpers that reproduce Dynamo's accepted shapes.
//!
//! Rust type names here and in the sibling modules are Dynamo's on purpose: serde prints the
//! Rust type name in errors clients receive (e.g. `data did not match any variant of untagged
//! enum Stop`, `expected struct ChatCompletionStreamOptions`).

use serde::{Deserialize, Deserializer, Serialize};

/// `stop`: one string, several strings, or (Dynamo extension) token ids.
#[derive(Debug, Clone, PartialEq, Deserialize, Serialize)]
#[serde(untagged)]
pub enum Stop {
    /// `"stop": "END"`.
    String(String),
    /// `"stop": ["a", "b"]` (an empty array lands here).
    StringArray(Vec<String>),
    /// `"stop": [576]`: stop on these token ids.
    TokenIdArray(Vec<u32>),
}

impl Stop {
    /// The stop strings (none for a token-id stop).
    pub fn strings(&self) -> &[String] {
        match self {
            Stop::String(s) => std::slice::from_ref(s),
            Stop::StringArray(v) => v,
            Stop::TokenIdArray(_) => &[],
        }
    }

    /// The stop token ids, if `stop` was given as integers.
    pub fn token_ids(&self) -> Option<&[u32]> {
        match self {
            Stop::TokenIdArray(v) => Some(v),
            _ => None,
        }
    }
}

/// `stream_options`. `null` members count as `false`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Deserialize, Serialize)]
pub struct ChatCompletionStreamOptions {
    /// Send a final chunk with token usage.
    #[serde(default, deserialize_with = "null_as_false")]
    pub include_usage: bool,
    /// Send usage in every chunk.
    #[serde(default, deserialize_with = "null_as_false")]
    pub continuous_usage_stats: bool,
}

fn null_as_false<'de, D: Deserializer<'de>>(d: D) -> Result<bool, D::Error> {
    Option::<bool>::deserialize(d).map(Option::unwrap_or_default)
}

/// Returns `true` when the first non-whitespace byte opens a JSON object, i.e. when the flat
/// fast path may be tried (a derived struct would also accept a JSON array, Dynamo does not).
pub(crate) fn starts_with_object(body: &[u8]) -> bool {
    body.iter().find(|b| !matches!(b, b' ' | b'\n' | b'\r' | b'\t')).is_some_and(|b| *b == b'{')
}
