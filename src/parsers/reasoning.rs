//! Reasoning parsers: the model's thinking split from its answer, by the markers of its
//! family, as 1.6.1 splits it (docs/dynamo/parsers.md §3). Protocol-free; runs on the shard
//! thread of the request, one [`Split`] per choice.
//!
//! A [`Split`] is fed the choice's text piece by piece and gives back reasoning and content.
//! It is split-invariant: a marker cut across two pieces is held back until it is whole (or
//! cannot be), so any split of a text yields the same reasoning and content as the text in one
//! piece. 1.6.1 agrees with this on the token split a real engine produces; split per
//! character it stops seeing markers that are single tokens of the model's vocabulary.

/// How a family marks reasoning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// Text between `start` and `end` is reasoning. `forced`: the answer begins in reasoning
    /// (text before the first `end` is reasoning even without a `start`). Outside reasoning
    /// a stray `end` is dropped; inside, a repeated `start` is dropped.
    Tags { start: &'static str, end: &'static str, forced: bool },
    /// No split: the whole text is content (families whose markers are not text in the
    /// model's vocabulary, and those whose markers 1.6.1 does not read from text).
    Passthrough,
    /// No split, and the content starts with `<think>` (minimax_append_think: the client
    /// reads the thinking inline).
    PrependThink,
}

const THINK: Format = Format::Tags { start: "<think>", end: "</think>", forced: false };
const THINK_FORCED: Format = Format::Tags { start: "<think>", end: "</think>", forced: true };

/// The format of a reasoning parser name, as 1.6.1 names them; `None` for a name 1.6.1 does
/// not accept.
pub fn format_of(name: &str) -> Option<Format> {
    Some(match name {
        "basic" | "qwen3" | "qwen3_coder" | "glm45" | "glm47" | "nemotron_deci" | "kimi_k2" | "gpt_oss"
        | "deepseek_v4" | "deepseek-v4" | "deepseekv4" | "deepseek_v41" => THINK,
        "deepseek_r1" | "deepseek_v3_2" | "nemotron_nano" | "step3" | "nemotron3" | "nemotron_v3" | "kimi_k25"
        | "minimax_m2" => THINK_FORCED,
        "kimi" => Format::Tags { start: "◁think▷", end: "◁/think▷", forced: false },
        "minimax_append_think" => Format::PrependThink,
        // 1.6.1 loses every text with inkling and minimax_m3 (docs/dynamo/parsers.md §5);
        // here the text comes back as content.
        "deepseek_v3" | "deepseek_v3_1" | "gemma4" | "gemma-4" | "kimi_k3" | "kimi-k3" | "mistral" | "granite"
        | "muse" | "muse_glimmer" | "inkling" | "minimax_m3" | "minimax-m3" => Format::Passthrough,
        _ => return None,
    })
}

/// One choice's reasoning split, fed piece by piece.
#[derive(Debug)]
pub struct Split {
    format: Format,
    in_reasoning: bool,
    /// Text held back: a possible start of a marker at the end of what came so far.
    held: String,
    /// Whether anything was put out yet ([`Format::PrependThink`] puts `<think>` first).
    started: bool,
}

impl Split {
    pub fn new(format: Format) -> Split {
        let in_reasoning = matches!(format, Format::Tags { forced: true, .. });
        Split { format, in_reasoning, held: String::new(), started: false }
    }

    /// Whether the text so far ends inside reasoning.
    pub fn in_reasoning(&self) -> bool {
        self.in_reasoning
    }

    /// Split `text`, appending to `reasoning` and `content`.
    pub fn push(&mut self, text: &str, reasoning: &mut String, content: &mut String) {
        match self.format {
            Format::Passthrough => content.push_str(text),
            Format::PrependThink => {
                if !self.started {
                    self.started = true;
                    content.push_str("<think>");
                }
                content.push_str(text);
            }
            Format::Tags { start, end, .. } => {
                if self.held.is_empty() {
                    self.scan(text, start, end, reasoning, content);
                } else {
                    let mut joined = std::mem::take(&mut self.held);
                    joined.push_str(text);
                    self.scan(&joined, start, end, reasoning, content);
                }
            }
        }
    }

    /// The end of the choice's text: what was held back is put out as it stands.
    pub fn finish(&mut self, reasoning: &mut String, content: &mut String) {
        let held = std::mem::take(&mut self.held);
        if self.in_reasoning {
            reasoning.push_str(&held);
        } else {
            content.push_str(&held);
        }
    }

    fn scan(&mut self, mut text: &str, start: &str, end: &str, reasoning: &mut String, content: &mut String) {
        loop {
            // Inside reasoning both markers end or are dropped; outside, `start` opens and a
            // stray `end` is dropped. Whichever comes first decides.
            let s = text.find(start);
            let e = text.find(end);
            let (at, len, opens) = match (s, e) {
                (Some(s), Some(e)) if s < e => (s, start.len(), true),
                (_, Some(e)) => (e, end.len(), false),
                (Some(s), None) => (s, start.len(), true),
                (None, None) => break,
            };
            let out = if self.in_reasoning { &mut *reasoning } else { &mut *content };
            out.push_str(&text[..at]);
            if opens {
                self.in_reasoning = true;
            } else if self.in_reasoning {
                self.in_reasoning = false;
            }
            text = &text[at + len..];
        }
        // Hold back the longest tail that could begin a marker.
        let keep = partial_tail(text, start).max(partial_tail(text, end));
        let (now, later) = text.split_at(text.len() - keep);
        let out = if self.in_reasoning { reasoning } else { content };
        out.push_str(now);
        self.held.push_str(later);
    }
}

/// The length of the longest tail of `text` that is a proper prefix of `marker`.
pub(crate) fn partial_tail(text: &str, marker: &str) -> usize {
    let max = marker.len().saturating_sub(1).min(text.len());
    (1..=max)
        .rev()
        .find(|&n| text.is_char_boundary(text.len() - n) && marker.starts_with(&text[text.len() - n..]))
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn whole(name: &str, text: &str) -> (String, String) {
        let mut s = Split::new(format_of(name).unwrap());
        let (mut r, mut c) = (String::new(), String::new());
        s.push(text, &mut r, &mut c);
        s.finish(&mut r, &mut c);
        (r, c)
    }

    #[test]
    fn every_split_of_a_text_gives_the_same_answer() {
        let texts = [
            "<think>ab</think>cd",
            "x</think>y<think>z",
            "Write <think> and </think> here",
            "◁think▷a◁/think▷b",
            "<thi",
        ];
        for name in ["qwen3", "deepseek_r1", "kimi", "minimax_append_think", "mistral"] {
            for text in texts {
                let want = whole(name, text);
                for (at, _) in text.char_indices() {
                    let mut s = Split::new(format_of(name).unwrap());
                    let (mut r, mut c) = (String::new(), String::new());
                    s.push(&text[..at], &mut r, &mut c);
                    s.push(&text[at..], &mut r, &mut c);
                    s.finish(&mut r, &mut c);
                    assert_eq!((r, c), want, "{name} {text:?} cut at {at}");
                }
                // And one character at a time.
                let mut s = Split::new(format_of(name).unwrap());
                let (mut r, mut c) = (String::new(), String::new());
                for ch in text.chars() {
                    s.push(ch.encode_utf8(&mut [0; 4]), &mut r, &mut c);
                }
                s.finish(&mut r, &mut c);
                assert_eq!((r, c), want, "{name} {text:?} per character");
            }
        }
    }

    #[test]
    fn the_families() {
        assert_eq!(whole("qwen3", "Two</think>Four"), ("".into(), "TwoFour".into()));
        assert_eq!(whole("deepseek_r1", "Two</think>Four"), ("Two".into(), "Four".into()));
        assert_eq!(whole("qwen3", "<think>open"), ("open".into(), "".into()));
        assert_eq!(whole("minimax_append_think", "a"), ("".into(), "<think>a".into()));
        assert_eq!(whole("kimi", "<think>a</think>b"), ("".into(), "<think>a</think>b".into()));
        assert!(format_of("no-such-parser").is_none());
    }
}
