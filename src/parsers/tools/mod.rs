//! Tool-call parsers: calls cut out of a model's content by the markers of its family, as
//! 1.6.1 cuts them (docs/dynamo/parsers.md §4–6). Runs on the shard thread of the request,
//! one [`Jail`] per choice.

use super::{Call, Out};

/// How a family writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// No calls read from text: the content comes back unchanged.
    Passthrough,
}

/// The format of a tool-call parser name, as 1.6.1 names them; `None` for a name 1.6.1 does
/// not accept.
pub fn format_of(name: &str) -> Option<Format> {
    let _ = name;
    None
}

/// One choice's tool calls, fed its content piece by piece.
#[derive(Debug)]
pub struct Jail {
    format: Format,
}

impl Jail {
    pub fn new(format: Format) -> Jail {
        Jail { format }
    }

    pub fn push(&mut self, text: &str, out: &mut Out) {
        let _: &Vec<Call> = &out.calls;
        match self.format {
            Format::Passthrough => out.content.push_str(text),
        }
    }

    pub fn finish(&mut self, out: &mut Out) {
        let _ = out;
    }
}
