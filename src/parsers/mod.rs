//! Tool-call and reasoning parsers: a model's answer split into reasoning, content and tool
//! calls, as 1.6.1 splits it for the parser names a worker registers in its card's
//! `runtime_config` (docs/dynamo/parsers.md). Protocol-free: the OpenAI, Anthropic and
//! Responses adapters drive the same [`Parse`], on the shard thread of the request.
//!
//! Parity with 1.6.1 is checked against its recorded answers
//! (`tests/data/parsers/observed-1.6.1.jsonl`, `tests/parsers_observed.rs`).
//!
//! A [`Parse`] is fed a choice's text piece by piece (the worker's deltas) and is
//! split-invariant: however the text is cut, the reasoning, content and calls that come out
//! are the same, because a marker cut across pieces is held back until it is whole and a tool
//! call is held back (jailed) until it is complete. Nothing is lost: text that does not parse
//! as what its markers promised comes back as content.

pub mod forced;
pub mod reasoning;
pub mod tools;

/// One tool call parsed out of a model's answer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Call {
    pub name: String,
    /// The arguments as compact JSON object text (`{}` when the model gave none).
    pub arguments: String,
}

/// What a piece of a choice's text came out as.
#[derive(Debug, Default)]
pub struct Out {
    pub reasoning: String,
    pub content: String,
    /// Calls completed by this piece, in the order the model wrote them.
    pub calls: Vec<Call>,
}

impl Out {
    pub fn clear(&mut self) {
        self.reasoning.clear();
        self.content.clear();
        self.calls.clear();
    }

    pub fn is_empty(&self) -> bool {
        self.reasoning.is_empty() && self.content.is_empty() && self.calls.is_empty()
    }
}

/// A model's parsers for one request: its reasoning format, and its tool-call format when the
/// request offers tools (and `tool_choice` is not `none`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Parsers {
    pub reasoning: Option<reasoning::Format>,
    pub tools: Option<tools::Format>,
}

impl Parsers {
    pub fn any(&self) -> bool {
        self.reasoning.is_some() || self.tools.is_some()
    }
}

/// A request's parsers: the model's, and the calls `tool_choice` forces (`Some(None)`:
/// `"required"`; `Some(Some(name))`: a named tool). Forced calls replace the tool parser.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Spec {
    pub parsers: Parsers,
    pub forced: Option<Option<String>>,
}

/// One choice's parse: reasoning first, then tool calls out of what is content.
#[derive(Debug)]
pub struct Parse {
    reasoning: Option<reasoning::Split>,
    tools: Option<tools::Jail>,
    forced: Option<ForcedCalls>,
    /// Content out of the reasoning split, on its way into the tool jail.
    scratch: String,
}

/// Calls forced by `tool_choice`, assembled whole from their pieces.
#[derive(Debug)]
struct ForcedCalls {
    named: bool,
    forced: forced::Forced,
    pieces: Vec<forced::Piece>,
    open: Vec<Call>,
}

impl ForcedCalls {
    fn take(&mut self, out: &mut Out) {
        for piece in self.pieces.drain(..) {
            match piece {
                forced::Piece::Start { name, args, .. } => self.open.push(Call { name, arguments: args }),
                forced::Piece::Args { args, .. } => {
                    if let Some(c) = self.open.last_mut() {
                        c.arguments.push_str(&args);
                    }
                }
                forced::Piece::End { .. } => match self.open.pop() {
                    // A named tool's answer that is not an object is the model's text.
                    Some(c) if self.named && !forced::is_arguments(&c.arguments) => out.content.push_str(&c.arguments),
                    c => out.calls.extend(c),
                },
                forced::Piece::Text(t) => out.content.push_str(&t),
            }
        }
    }
}

impl Parse {
    pub fn new(p: Parsers) -> Parse {
        Parse {
            reasoning: p.reasoning.map(reasoning::Split::new),
            tools: p.tools.map(tools::Jail::new),
            forced: None,
            scratch: String::new(),
        }
    }

    /// A parse of `spec`: forced calls, when `tool_choice` forces them, instead of the tool
    /// parser.
    pub fn of(spec: &Spec) -> Parse {
        let Some(named) = spec.forced.clone() else { return Parse::new(spec.parsers) };
        let mut parse = Parse::new(Parsers { tools: None, ..spec.parsers });
        parse.forced = Some(ForcedCalls {
            named: named.is_some(),
            forced: forced::Forced::new(named),
            pieces: Vec::new(),
            open: Vec::new(),
        });
        parse
    }

    /// Parse the next piece of text, appending to `out`.
    pub fn push(&mut self, text: &str, out: &mut Out) {
        if let Some(f) = self.forced.as_mut() {
            self.scratch.clear();
            match self.reasoning.as_mut() {
                Some(split) => split.push(text, &mut out.reasoning, &mut self.scratch),
                None => self.scratch.push_str(text),
            }
            f.forced.push(&self.scratch, &mut f.pieces);
            f.take(out);
            return;
        }
        match (&mut self.reasoning, &mut self.tools) {
            (None, None) => out.content.push_str(text),
            (Some(split), None) => split.push(text, &mut out.reasoning, &mut out.content),
            (None, Some(jail)) => jail.push(text, out),
            (Some(split), Some(jail)) => {
                self.scratch.clear();
                split.push(text, &mut out.reasoning, &mut self.scratch);
                if !self.scratch.is_empty() {
                    jail.push(&self.scratch, out);
                }
            }
        }
    }

    /// The end of the choice's text: whatever was held back.
    pub fn finish(&mut self, out: &mut Out) {
        if let Some(f) = self.forced.as_mut() {
            self.scratch.clear();
            if let Some(split) = self.reasoning.as_mut() {
                split.finish(&mut out.reasoning, &mut self.scratch);
            }
            f.forced.push(&self.scratch, &mut f.pieces);
            f.forced.finish(&mut f.pieces);
            f.take(out);
            // A call left open at the end is still the model's; an answer that made none
            // keeps its text.
            out.calls.append(&mut f.open);
            if f.forced.calls() == 0 {
                out.content.push_str(&f.forced.unplaced());
            }
            return;
        }
        if let Some(split) = self.reasoning.as_mut() {
            self.scratch.clear();
            let content = if self.tools.is_some() { &mut self.scratch } else { &mut out.content };
            split.finish(&mut out.reasoning, content);
        }
        if let Some(jail) = self.tools.as_mut() {
            if !self.scratch.is_empty() {
                jail.push(&self.scratch, out);
            }
            jail.finish(out);
        }
    }

    /// Whether the text so far ends inside reasoning.
    pub fn in_reasoning(&self) -> bool {
        self.reasoning.as_ref().is_some_and(reasoning::Split::in_reasoning)
    }
}
