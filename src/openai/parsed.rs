//! Chat answers whose model has parsers ([`crate::parsers`]): each choice's text split into
//! reasoning, content and tool calls, whole or streamed as 1.6.1 writes them.
//!
//! * streamed (auto): a role-only chunk first, then chunks carrying `content` and/or the
//!   reasoning member, and each tool call whole in a chunk of its own
//!   (`{"content":"","tool_calls":[{index,id,type,function}]}`) once it is complete; nothing
//!   for a delta whose text is held back;
//! * forced by `tool_choice` (`"required"` or a named tool): the calls' arguments streamed
//!   piece by piece, the first chunk of a call carrying its id and name (and the role);
//! * `--enable-streaming-reasoning-dispatch`: `event: reasoning_dispatch` with the whole
//!   reasoning once it ends; `--enable-streaming-tool-dispatch`: `event: tool_call_dispatch`
//!   with each call, ahead of its chunk;
//! * a choice with calls finishes with `"tool_calls"`.
//!
//! Runs in the answer's task on the shard.

use smallvec::SmallVec;

use super::answer::{render_logprobs, Api};
use super::response::{self as body, Meta};
use crate::infer::{Finish, TokenLogprob};
use crate::parsers::forced::{is_arguments, Forced, Piece};
use crate::parsers::{Call, Out, Parse, Parsers};

/// How a chat answer is parsed.
#[derive(Clone, Debug)]
pub struct Parsing {
    pub parsers: Parsers,
    /// Calls forced by `tool_choice`: `Some(None)` for `"required"`, `Some(Some(name))` for
    /// a named tool.
    pub forced: Option<Option<String>>,
    /// The reasoning member's name (`--reasoning-field-name`).
    pub field: &'static str,
    pub dispatch_tools: bool,
    pub dispatch_reasoning: bool,
}

impl Parsing {
    /// Whether the usage reports `reasoning_tokens` (the model has a reasoning parser).
    pub fn counts_reasoning(&self) -> bool {
        self.parsers.reasoning.is_some()
    }
}

/// One choice's parse.
pub(super) struct ChoiceParse {
    parse: Parse,
    forced: Option<Forced>,
    /// The forced call is a named tool's.
    named: bool,
    out: Out,
    pieces: Vec<Piece>,
    /// Deltas that left the text in reasoning (1.6.1's `reasoning_tokens`).
    pub reasoning_deltas: u32,
    /// Calls made.
    calls: u32,
    role_sent: bool,
    /// The reasoning so far, for `reasoning_dispatch`; `None` once dispatched.
    reasoning: Option<String>,
    /// Logprobs of deltas that put nothing out yet: they go with the next chunk.
    pending: Vec<TokenLogprob>,
}

impl ChoiceParse {
    pub(super) fn new(p: &Parsing) -> ChoiceParse {
        let mut parsers = p.parsers;
        if p.forced.is_some() {
            parsers.tools = None;
        }
        ChoiceParse {
            parse: Parse::new(parsers),
            forced: p.forced.clone().map(Forced::new),
            named: matches!(p.forced, Some(Some(_))),
            out: Out::default(),
            pieces: Vec::new(),
            reasoning_deltas: 0,
            calls: 0,
            role_sent: false,
            reasoning: p.dispatch_reasoning.then(String::new),
            pending: Vec::new(),
        }
    }

    /// Whole answers: add a delta's text.
    pub(super) fn add(&mut self, text: &str) {
        self.parse.push(text, &mut self.out);
        self.reasoning_deltas += u32::from(self.parse.in_reasoning());
    }

    /// Whole answers: the end of the text.
    pub(super) fn finish_whole(&mut self) {
        self.parse.finish(&mut self.out);
        if let Some(forced) = self.forced.as_mut() {
            let content = std::mem::take(&mut self.out.content);
            forced.push(&content, &mut self.pieces);
            forced.finish(&mut self.pieces);
            let mut calls: Vec<Call> = Vec::new();
            for piece in self.pieces.drain(..) {
                match piece {
                    Piece::Start { name, args, .. } => calls.push(Call { name, arguments: args }),
                    Piece::Args { index, args } => calls[index as usize].arguments.push_str(&args),
                    Piece::End { .. } => {}
                    Piece::Text(t) => self.out.content.push_str(&t),
                }
            }
            // A named tool's answer that is not an object is the model's text, as in 1.6.1.
            if self.named && calls.first().is_some_and(|c| !is_arguments(&c.arguments)) {
                self.out.content = calls.remove(0).arguments;
            }
            match calls.is_empty() {
                true => self.out.content.push_str(&forced.unplaced()),
                false => self.out.calls = calls,
            }
        }
    }

    /// Whole answers, once finished: the reasoning, content and calls.
    pub(super) fn whole(&self) -> (&str, &str, &[Call]) {
        (&self.out.reasoning, &self.out.content, &self.out.calls)
    }

    /// The finish reason: `tool_calls` for a choice that stopped with calls.
    pub(super) fn finish_reason(&self, reason: Finish) -> &'static str {
        match reason {
            Finish::Stop if self.calls > 0 || !self.out.calls.is_empty() => "tool_calls",
            r => super::answer::finish_reason(r),
        }
    }

    /// Streams: the chunks of a delta's text into `w`.
    pub(super) fn delta(&mut self, w: &mut Vec<u8>, meta: &Meta<'_>, p: &Parsing, choice: u32, text: &str) {
        self.out.clear();
        self.parse.push(text, &mut self.out);
        self.reasoning_deltas += u32::from(self.parse.in_reasoning());
        self.write(w, meta, p, choice, false);
    }

    /// Streams: what the parse held back, at the choice's finish.
    pub(super) fn flush(&mut self, w: &mut Vec<u8>, meta: &Meta<'_>, p: &Parsing, choice: u32) {
        self.out.clear();
        self.parse.finish(&mut self.out);
        self.write(w, meta, p, choice, true);
    }

    /// Logprobs of the delta at hand.
    pub(super) fn logprobs(&mut self, lp: Vec<TokenLogprob>) {
        self.pending.extend(lp);
    }

    /// Streams: the role-only chunk a parsed stream opens with (auto mode: 1.6.1 sends it
    /// first; forced calls carry the role in their first chunk).
    pub(super) fn open(&mut self, w: &mut Vec<u8>, meta: &Meta<'_>, choice: u32) {
        if self.forced.is_none() && !self.role_sent {
            self.role_sent = true;
            body::chat_chunk_at(w, meta, choice, None, true, None, None);
        }
    }

    fn write(&mut self, w: &mut Vec<u8>, meta: &Meta<'_>, p: &Parsing, choice: u32, end: bool) {
        let Out { reasoning, content, calls } = &mut self.out;
        if let Some(forced) = self.forced.as_mut() {
            // The model's text is the calls; an answer that made none keeps its text.
            forced.push(content, &mut self.pieces);
            content.clear();
            if end {
                forced.finish(&mut self.pieces);
            }
            for piece in &self.pieces {
                if let Piece::Text(t) = piece {
                    content.push_str(t);
                }
            }
            self.pieces.retain(|p| !matches!(p, Piece::Text(_)));
            if end && forced.calls() == 0 {
                content.push_str(&forced.unplaced());
            }
        }
        if let Some(all) = self.reasoning.as_mut() {
            all.push_str(reasoning);
            let ended =
                end || (reasoning.is_empty() && (!content.is_empty() || !calls.is_empty() || !self.pieces.is_empty()));
            if ended && !all.is_empty() {
                body::reasoning_dispatch(w, choice, p.field, all);
                self.reasoning = None;
            }
        }
        if !reasoning.is_empty() || !content.is_empty() {
            if !self.role_sent {
                self.role_sent = true;
                body::chat_chunk_at(w, meta, choice, None, true, None, None);
            }
            let lp = render_logprobs(Api::Chat, &self.pending);
            self.pending.clear();
            body::chat_pieces_chunk_at(w, meta, choice, content, (p.field, reasoning), lp.as_deref());
        }
        for call in calls.drain(..) {
            let id = body::call_id();
            if p.dispatch_tools {
                body::tool_call_dispatch(w, choice, self.calls, &id, &call.name, &call.arguments);
            }
            let role = !std::mem::replace(&mut self.role_sent, true);
            body::chat_tool_chunk_at(w, meta, choice, self.calls, Some((&id, &call.name)), &call.arguments, role);
            self.calls += 1;
        }
        for piece in self.pieces.drain(..) {
            let (index, start, args) = match piece {
                Piece::Start { index, name, args } => (index, Some(name), args),
                Piece::Args { index, args } => (index, None, args),
                Piece::End { .. } | Piece::Text(_) => continue,
            };
            let role = !std::mem::replace(&mut self.role_sent, true);
            let id = start.as_ref().map(|_| body::call_id());
            let start = id.as_deref().zip(start.as_deref());
            body::chat_tool_chunk_at(w, meta, choice, index, start, &args, role);
            self.calls = self.calls.max(index + 1);
        }
    }
}

/// The choices of a parsed answer, made as they first appear.
#[derive(Default)]
pub(super) struct Parsed {
    pub choices: SmallVec<[ChoiceParse; 1]>,
}

impl Parsed {
    pub(super) fn choice(&mut self, p: &Parsing, index: u32) -> &mut ChoiceParse {
        let i = index as usize;
        while self.choices.len() <= i {
            self.choices.push(ChoiceParse::new(p));
        }
        &mut self.choices[i]
    }

    /// `reasoning_tokens` of the usage, when counted.
    pub(super) fn reasoning_tokens(&self, p: &Parsing) -> Option<u32> {
        p.counts_reasoning().then(|| self.choices.iter().map(|c| c.reasoning_deltas).sum())
    }
}
