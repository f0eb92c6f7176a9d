//! Stop conditions over a stream of generated tokens: stop strings (with hold-back), stop
//! token ids, the model's hidden EOS ids, `ignore_eos`, `min_tokens`, `max_tokens`.
//!
//! [`PostProcessor`] is what a request's response loop drives: it owns a
//! [`Detokenizer`] and a [`StopStrings`] matcher, takes the token
//! ids of each worker frame ([`PostProcessor::on_tokens`]) and the worker's own end of stream
//! ([`PostProcessor::on_worker_finish`]), and returns the text delta to send, whether (and why)
//! the sequence is finished, and how many ids count as generated.
//!
//! # Rules, per generated token (in order)
//!
//! 1. Past `max_tokens` nothing more is taken: ids after the `max_tokens`-th are not counted.
//! 2. The token counts as generated (usage counts every id up to and including the one that
//!    stops). Stop conditions are honoured from the `min_tokens`-th token on (vLLM: a token
//!    whose count is `>= min_tokens`); before that EOS and stop ids are ordinary tokens and stop
//!    strings do not fire (a stop string that *ends* in honoured text fires, even if it started
//!    earlier).
//! 3. A hidden EOS id (the model's `eos_token_ids`, dropped by `ignore_eos`) ends the sequence
//!    with [`FinishReason::Eos`]; its text is never sent, whatever `skip_special_tokens` says.
//! 4. A request `stop_token_ids` id ends it with [`FinishReason::StopToken`]; its text is sent
//!    only with `include_stop_str_in_output` (vLLM's rule). EOS wins when an id is both.
//! 5. Otherwise the token's text goes through the detokenizer, then the stop-string matcher: a
//!    completed stop string ends the sequence with [`FinishReason::StopString`], the text cut
//!    before it (or after it with `include_stop_str_in_output`); anything after is dropped.
//! 6. The `max_tokens`-th token ends it with [`FinishReason::Length`] unless 3–5 did.
//!
//! Every end flushes: the detokenizer's held bytes (an unfinished character becomes U+FFFD, as
//! a one-shot decode gives) and then text held by the matcher, which did not turn into a stop
//! string and is released in order. When the end is ours (not the worker's), the caller must
//! cancel the worker ([`FinishReason::cancels_worker`]).
//!
//! # Stop-string hold-back
//!
//! Text that could be the start of a stop string is held until it either completes one or can
//! no longer do so. The matcher runs one KMP automaton per stop string over the bytes of the
//! text (stop strings are few and short; this is O(1) amortized per byte and string, with no
//! rescanning); each automaton's state is the length of the longest suffix of the text so far
//! that is a prefix of its string. The held text is exactly the longest such suffix over all
//! strings; everything before it can never be part of a match and is released. The first
//! match to *complete* wins (the earliest end; between strings ending at the same byte, the
//! longer one) — so the result does not depend on how the text was split into tokens or
//! frames. Stop strings are valid UTF-8, so matches and held suffixes always start on character
//! boundaries. Empty stop strings are ignored.

use std::ops::Deref;

use super::detok::Detokenizer;
use super::tokenizer::Tokenizer;

/// Why a sequence ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FinishReason {
    /// One of the model's hidden EOS ids (generation_config `eos_token_id`).
    Eos(u32),
    /// One of the request's `stop_token_ids`.
    StopToken(u32),
    /// The request's stop string with this index in [`StopConditions::stop`] completed.
    StopString(usize),
    /// `max_tokens` tokens were generated (counted here, whatever the worker does).
    Length,
    /// The worker ended the stream and said why.
    Worker(WorkerFinish),
}

/// A worker's `finish_reason` in an `LLMEngineOutput` frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WorkerFinish {
    Eos,
    Stop,
    Length,
    Cancelled,
    ContentFilter,
    Error,
}

impl WorkerFinish {
    /// Dynamo's wire names: `eos`, `stop`, `length`, `cancelled`, `content_filter`, `error`.
    pub fn from_wire(name: &str) -> Option<WorkerFinish> {
        Some(match name {
            "eos" => WorkerFinish::Eos,
            "stop" => WorkerFinish::Stop,
            "length" => WorkerFinish::Length,
            "cancelled" => WorkerFinish::Cancelled,
            "content_filter" => WorkerFinish::ContentFilter,
            "error" => WorkerFinish::Error,
            _ => return None,
        })
    }
}

impl FinishReason {
    /// The OpenAI `finish_reason`: `stop`, `length` or `content_filter`; `None` for a worker
    /// error, which the caller reports as an error rather than a finish. A cancelled stream
    /// maps to `stop` (as Dynamo does).
    pub fn openai(&self) -> Option<&'static str> {
        match self {
            FinishReason::Eos(_) | FinishReason::StopToken(_) | FinishReason::StopString(_) => Some("stop"),
            FinishReason::Length => Some("length"),
            FinishReason::Worker(w) => match w {
                WorkerFinish::Eos | WorkerFinish::Stop | WorkerFinish::Cancelled => Some("stop"),
                WorkerFinish::Length => Some("length"),
                WorkerFinish::ContentFilter => Some("content_filter"),
                WorkerFinish::Error => None,
            },
        }
    }

    /// Whether the frontend decided the end, so the worker is still generating and must be
    /// sent `kill` (unless the frame that ended it also carried the worker's own finish).
    pub fn cancels_worker(&self) -> bool {
        !matches!(self, FinishReason::Worker(_))
    }
}

/// One KMP automaton: a stop string, its failure table and the current state.
#[derive(Debug, Clone)]
struct Pattern {
    bytes: Box<[u8]>,
    /// `fail[i]`: length of the longest proper border of `bytes[..=i]`.
    fail: Box<[u32]>,
    /// Length of the longest suffix of the text so far that is a prefix of `bytes`.
    state: usize,
    /// Index in the request's list.
    index: usize,
}

impl Pattern {
    fn new(s: &str, index: usize) -> Pattern {
        let b = s.as_bytes();
        let mut fail = vec![0u32; b.len()];
        let mut k = 0usize;
        for i in 1..b.len() {
            while k > 0 && b[i] != b[k] {
                k = fail[k - 1] as usize;
            }
            if b[i] == b[k] {
                k += 1;
            }
            fail[i] = k as u32;
        }
        Pattern { bytes: b.into(), fail: fail.into(), state: 0, index }
    }

    /// Advance by one byte; true when the whole string just matched (the state then falls back
    /// to its longest border, so overlapping occurrences are still seen).
    #[inline]
    fn step(&mut self, c: u8) -> bool {
        let mut q = self.state;
        while q > 0 && self.bytes[q] != c {
            q = self.fail[q - 1] as usize;
        }
        if self.bytes[q] == c {
            q += 1;
        }
        if q == self.bytes.len() {
            self.state = self.fail[q - 1] as usize;
            true
        } else {
            self.state = q;
            false
        }
    }
}

/// Stop-string matcher with hold-back of possible partial matches (see the module docs).
#[derive(Debug, Clone, Default)]
pub struct StopStrings {
    patterns: Vec<Pattern>,
    /// Text not yet released: the longest suffix that is a prefix of some stop string.
    held: String,
}

impl StopStrings {
    /// A matcher for these stop strings (empty ones are ignored; indices refer to `stops`).
    pub fn new<S: AsRef<str>>(stops: &[S]) -> StopStrings {
        let patterns: Vec<Pattern> = stops
            .iter()
            .enumerate()
            .filter(|(_, s)| !s.as_ref().is_empty())
            .map(|(i, s)| Pattern::new(s.as_ref(), i))
            .collect();
        let longest = patterns.iter().map(|p| p.bytes.len()).max().unwrap_or(0);
        StopStrings { patterns, held: String::with_capacity(if longest > 0 { longest + 32 } else { 0 }) }
    }

    /// No (non-empty) stop strings: text passes straight through.
    pub fn is_empty(&self) -> bool {
        self.patterns.is_empty()
    }

    /// The text held back right now.
    pub fn held(&self) -> &str {
        &self.held
    }

    /// Feed the next text. What can no longer be part of a match is appended to `out`. With
    /// `armed`, a stop string completing inside `text` ends the stream: `out` gets the text up
    /// to its start (up to its end with `include_stop`), the rest is dropped, and its index is
    /// returned. Without `armed`, completed stop strings are ordinary text.
    pub fn push(&mut self, text: &str, armed: bool, include_stop: bool, out: &mut String) -> Option<usize> {
        if self.patterns.is_empty() {
            out.push_str(text);
            return None;
        }
        // Positions are in `held + text`; `text` is only copied into `held` for what stays held.
        let base = self.held.len();
        for (i, &c) in text.as_bytes().iter().enumerate() {
            // Among strings completing at this byte, the longest (earliest start) wins.
            let mut best: Option<(usize, usize)> = None;
            for p in self.patterns.iter_mut() {
                if p.step(c) && armed && best.is_none_or(|(_, len)| p.bytes.len() > len) {
                    best = Some((p.index, p.bytes.len()));
                }
            }
            if let Some((index, len)) = best {
                let end = base + i + 1;
                self.release(text, if include_stop { end } else { end - len }, out);
                self.reset();
                return Some(index);
            }
        }
        let keep = self.patterns.iter().map(|p| p.state).max().unwrap_or(0);
        let upto = base + text.len() - keep;
        self.release(text, upto, out);
        self.held.push_str(&text[(upto.max(base) - base)..]);
        None
    }

    /// Move `(held + text)[..upto]` to `out`, leaving in `held` what of it was held.
    fn release(&mut self, text: &str, upto: usize, out: &mut String) {
        let base = self.held.len();
        if upto <= base {
            out.push_str(&self.held[..upto]);
            self.held.drain(..upto);
        } else {
            out.push_str(&self.held);
            out.push_str(&text[..upto - base]);
            self.held.clear();
        }
    }

    /// Release everything held (the stream ended without completing a match).
    pub fn flush(&mut self, out: &mut String) {
        out.push_str(&self.held);
        self.reset();
    }

    /// Drop held text and matcher states.
    pub fn reset(&mut self) {
        self.held.clear();
        for p in &mut self.patterns {
            p.state = 0;
        }
    }
}

/// The request's stop conditions, as the preprocessor resolved them.
#[derive(Debug, Clone, Default)]
pub struct StopConditions {
    /// Stop strings (OpenAI allows 4, Dynamo accepted 5; not limited here).
    pub stop: Vec<String>,
    /// The request's `stop_token_ids`.
    pub stop_token_ids: Vec<u32>,
    /// The model's EOS ids (Dynamo's `stop_token_ids_hidden`), from [`super::ModelFiles`].
    pub eos_token_ids: Vec<u32>,
    /// Do not stop on `eos_token_ids` (explicit stop ids and stop strings still apply).
    pub ignore_eos: bool,
    /// Stop conditions are honoured from the `min_tokens`-th generated token on.
    pub min_tokens: u32,
    /// End with [`FinishReason::Length`] after this many generated tokens.
    pub max_tokens: Option<u32>,
    /// Send the matched stop string (and a stop id's text) before ending.
    pub include_stop_str_in_output: bool,
}

/// What one call produced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Step<'a> {
    /// Text to send now (may be empty).
    pub text: &'a str,
    /// Set on the one call that ended the sequence.
    pub finished: Option<FinishReason>,
    /// Ids of this call counted as generated tokens (up to and including a stopping one).
    pub tokens_counted: usize,
}

/// Streaming post-processing of one generated sequence: detokenization and stop conditions.
///
/// After the sequence has finished every call returns an empty [`Step`] with no finish.
pub struct PostProcessor<T> {
    detok: Detokenizer<T>,
    stops: StopStrings,
    stop_strings: Vec<String>,
    stop_token_ids: Vec<u32>,
    /// Empty with `ignore_eos`.
    eos_token_ids: Vec<u32>,
    include_stop: bool,
    min_tokens: u32,
    max_tokens: Option<u32>,
    generated: u32,
    finished: Option<FinishReason>,
    out: String,
}

impl<T: Deref<Target = Tokenizer>> PostProcessor<T> {
    /// A post-processor decoding with `tokenizer` (see [`Detokenizer::new`]).
    pub fn new(tokenizer: T, skip_special_tokens: bool, cond: StopConditions) -> Self {
        Self::with_detokenizer(Detokenizer::new(tokenizer, skip_special_tokens), cond)
    }

    /// A post-processor over a prepared detokenizer (e.g.
    /// [`Detokenizer::with_prompt_context`]).
    pub fn with_detokenizer(detok: Detokenizer<T>, cond: StopConditions) -> Self {
        PostProcessor {
            detok,
            stops: StopStrings::new(&cond.stop),
            stop_strings: cond.stop,
            stop_token_ids: cond.stop_token_ids,
            eos_token_ids: if cond.ignore_eos { Vec::new() } else { cond.eos_token_ids },
            include_stop: cond.include_stop_str_in_output,
            min_tokens: cond.min_tokens,
            max_tokens: cond.max_tokens,
            generated: 0,
            finished: None,
            out: String::with_capacity(64),
        }
    }

    /// Generated tokens counted so far (the usage's `completion_tokens`).
    pub fn completion_tokens(&self) -> u32 {
        self.generated
    }

    /// Why the sequence ended, once it has.
    pub fn finish_reason(&self) -> Option<FinishReason> {
        self.finished
    }

    /// The stop string a [`FinishReason::StopString`] refers to.
    pub fn stop_string(&self, index: usize) -> Option<&str> {
        self.stop_strings.get(index).map(String::as_str)
    }

    /// Text held back right now (partial stop-string match), for diagnostics.
    pub fn held_text(&self) -> &str {
        self.stops.held()
    }

    /// The token ids of one worker frame.
    pub fn on_tokens(&mut self, ids: &[u32]) -> Result<Step<'_>, String> {
        self.out.clear();
        if self.finished.is_some() {
            return Ok(Step { text: &self.out, finished: None, tokens_counted: 0 });
        }
        let start = self.generated;
        let per_token = !self.stops.is_empty();
        let mut i = 0;
        while i < ids.len() {
            let room = match self.max_tokens {
                Some(max) if self.generated >= max => {
                    self.end(FinishReason::Length)?;
                    break;
                }
                Some(max) => (max - self.generated) as usize,
                None => usize::MAX,
            };
            // A run of ordinary ids (one at a time when stop strings need per-token arming),
            // then possibly the stopping id that ends it.
            let limit = ids.len().min(i.saturating_add(room));
            let mut j = i;
            let mut stopper = None;
            while j < limit {
                let count = self.generated + (j - i) as u32 + 1;
                if count >= self.min_tokens && self.is_stop_id(ids[j]) {
                    stopper = Some(ids[j]);
                    break;
                }
                j += 1;
                if per_token {
                    break;
                }
            }
            if j > i {
                self.generated += (j - i) as u32;
                let armed = self.generated >= self.min_tokens;
                if self.emit(&ids[i..j], armed)? {
                    break;
                }
                i = j;
            }
            if let Some(id) = stopper {
                self.generated += 1;
                if self.eos_token_ids.contains(&id) {
                    self.end(FinishReason::Eos(id))?;
                } else if !self.include_stop || !self.emit(&[id], true)? {
                    self.end(FinishReason::StopToken(id))?;
                }
                break;
            }
            if self.max_tokens == Some(self.generated) {
                self.end(FinishReason::Length)?;
                break;
            }
        }
        let finished = self.finished;
        Ok(Step { text: &self.out, finished, tokens_counted: (self.generated - start) as usize })
    }

    /// The worker ended the stream (a frame with `finish_reason`, after its ids were given to
    /// [`Self::on_tokens`]): flush what is held and finish with the worker's reason (or with a
    /// stop string the flushed text completes).
    pub fn on_worker_finish(&mut self, reason: WorkerFinish) -> Result<Step<'_>, String> {
        self.out.clear();
        if self.finished.is_some() {
            return Ok(Step { text: &self.out, finished: None, tokens_counted: 0 });
        }
        self.end(FinishReason::Worker(reason))?;
        Ok(Step { text: &self.out, finished: self.finished, tokens_counted: 0 })
    }

    fn is_stop_id(&self, id: u32) -> bool {
        self.eos_token_ids.contains(&id) || self.stop_token_ids.contains(&id)
    }

    /// Decode `ids` and pass their text through the stop strings into `out`; true if a stop
    /// string completed (the sequence is then finished).
    fn emit(&mut self, ids: &[u32], armed: bool) -> Result<bool, String> {
        let text = self.detok.push(ids)?;
        match self.stops.push(text, armed, self.include_stop, &mut self.out) {
            Some(index) => {
                self.finished = Some(FinishReason::StopString(index));
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Finish with `reason`: flush the detokenizer through the stop strings (which may still
    /// complete one), then release the held text.
    fn end(&mut self, reason: FinishReason) -> Result<(), String> {
        let tail = self.detok.finish()?;
        let armed = self.generated >= self.min_tokens;
        if let Some(index) = self.stops.push(tail, armed, self.include_stop, &mut self.out) {
            self.finished = Some(FinishReason::StopString(index));
            return Ok(());
        }
        self.stops.flush(&mut self.out);
        self.finished = Some(reason);
        Ok(())
    }
}

impl<T> std::fmt::Debug for PostProcessor<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostProcessor")
            .field("detok", &self.detok)
            .field("stops", &self.stops)
            .field("generated", &self.generated)
            .field("finished", &self.finished)
            .finish()
    }
}
