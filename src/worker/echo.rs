//! Echo mode of the mock worker: the answer is text the client wrote, so a test can script
//! any model output (a tool call in some model's format, reasoning tags, prose) per request
//! and put the same scripted answer through switchyard and through `python -m
//! dynamo.frontend`. Runs on the worker's connection threads (a test tool, off every shard).
//!
//! The request's prompt ids are decoded (special tokens kept) and the text between the last
//! [`BEGIN`] and the [`END`] after it is the answer. It is tokenized with the model's own
//! tokenizer (special and added tokens such as `<tool_call>` or `<think>` become their single
//! ids, as a model emits them) and each token is sent as its own item, so the frontend sees
//! the text split at every token boundary; [`EchoSplit::Char`] tokenizes each character on
//! its own instead, splitting the text at every character; a script opened with
//! [`BEGIN_CHAR`] is split per character whatever the worker's split. A prompt without a
//! script is answered with [`NO_SCRIPT`], so a test that forgot the markers sees why.

use crate::tokenize::tokenizer::Tokenizer;

/// Where the scripted answer starts in the prompt.
pub const BEGIN: &str = "[[echo]]";
/// Where a script to split per character starts.
pub const BEGIN_CHAR: &str = "[[echo:char]]";
/// Where it ends.
pub const END: &str = "[[/echo]]";

/// The answer to a prompt that scripts none.
pub const NO_SCRIPT: &str = "(echo mode: no [[echo]]…[[/echo]] in the prompt)";

/// How the echoed text is cut into tokens.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EchoSplit {
    /// The tokenizer's own tokens.
    Token,
    /// Every character tokenized on its own.
    Char,
}

impl EchoSplit {
    pub fn parse(s: &str) -> Option<EchoSplit> {
        match s {
            "token" => Some(EchoSplit::Token),
            "char" => Some(EchoSplit::Char),
            _ => None,
        }
    }
}

/// The tokenizer and the split of an echoing worker.
pub(crate) struct Echo {
    pub(crate) tokenizer: Tokenizer,
    pub(crate) split: EchoSplit,
}

impl Echo {
    /// The ids to answer `prompt` with.
    pub(crate) fn answer(&self, prompt: &[u32]) -> Result<Vec<u32>, String> {
        let text = self.tokenizer.decode(prompt, false)?;
        let (script, split) = match scripted(&text) {
            Some((script, true)) => (script, EchoSplit::Char),
            Some((script, false)) => (script, self.split),
            None => (NO_SCRIPT, self.split),
        };
        let mut ids = Vec::new();
        match split {
            EchoSplit::Token => self.tokenizer.encode_into(script, false, &mut ids)?,
            EchoSplit::Char => {
                let mut buf = [0u8; 4];
                for c in script.chars() {
                    self.tokenizer.encode_into(c.encode_utf8(&mut buf), false, &mut ids)?;
                }
            }
        }
        Ok(ids)
    }
}

/// The text between the last [`BEGIN`] or [`BEGIN_CHAR`] of `prompt` and the first [`END`]
/// after it, and whether it was [`BEGIN_CHAR`].
pub fn scripted(prompt: &str) -> Option<(&str, bool)> {
    let plain = prompt.rfind(BEGIN).map(|i| (i + BEGIN.len(), false));
    let char = prompt.rfind(BEGIN_CHAR).map(|i| (i + BEGIN_CHAR.len(), true));
    let (start, per_char) = match (plain, char) {
        (Some(p), Some(c)) => p.max(c),
        (p, c) => p.or(c)?,
    };
    let len = prompt[start..].find(END)?;
    Some((&prompt[start..start + len], per_char))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_marked_text_is_the_script() {
        assert_eq!(scripted("a [[echo]]one[[/echo]] b [[echo]]<tool_call>{}[[/echo]]"), Some(("<tool_call>{}", false)));
        assert_eq!(scripted("[[echo]][[/echo]]"), Some(("", false)));
        assert_eq!(scripted("[[echo]]a[[/echo]] [[echo:char]]b[[/echo]]"), Some(("b", true)));
        assert_eq!(scripted("[[echo:char]]a[[/echo]] [[echo]]b[[/echo]]"), Some(("b", false)));
        assert_eq!(scripted("[[echo]]open"), None);
        assert_eq!(scripted("nothing"), None);
    }
}
