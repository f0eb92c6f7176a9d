//! Tool-call parsers: calls cut out of a model's content by the markers of its family, as
//! 1.6.1 cuts them (docs/dynamo/parsers.md §4–6). Runs on the shard thread of the request,
//! one [`Jail`] per choice.
//!
//! A [`Jail`] releases content as it comes, holding back only a possible start of a marker;
//! from the marker that opens a call it holds everything (the jail) until the call is
//! complete, then puts out the call, or, when the text is not the call its marker promised,
//! the text itself as content. So a call is never half sent, a partial tag never leaks, and
//! no text is lost. The JSON family also takes a bare call (`{"name": …, "arguments": …}`)
//! outside its markers, as 1.6.1 does.

mod formats;
mod harmony;
mod json;
pub(crate) mod scan;

pub(crate) use scan::string_end as scan_string_end;
mod xml;

use super::{Call, Out};
pub use json::Json;
pub use xml::Xml;

/// How a family writes its tool calls.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Format {
    /// No calls read from text: the content comes back unchanged.
    Passthrough,
    /// JSON calls inside markers, or bare.
    Json(&'static Json),
    /// `[name(arg='v', …), …]`.
    Pythonic,
    /// DeepSeek V3: `<｜tool▁call▁begin｜>function<｜tool▁sep｜>name` and a fenced JSON block.
    DeepseekV3,
    /// DeepSeek V3.1: `<｜tool▁call▁begin｜>name<｜tool▁sep｜>{…}`.
    DeepseekV31,
    /// DeepSeek's DSML blocks; the block's name (`function_calls`, `tool_calls`).
    Dsml(&'static str),
    /// XML-ish functions and parameters (Qwen3-Coder, MiniMax-M2).
    Xml(&'static Xml),
    /// GLM-4.7: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value></tool_call>`.
    Glm47,
    /// Kimi K2's sections of `functions.name:i` calls.
    KimiK2,
    /// Gemma 4: `<|tool_call>call:name{k:<|"|>v<|"|>}<tool_call|>`.
    Gemma4,
    /// gpt-oss's Harmony channels: analysis is reasoning, final is content, a commentary
    /// message to `functions.name` is a call.
    Harmony,
}

/// The format of a tool-call parser name, as 1.6.1 names them; `None` for a name 1.6.1 does
/// not accept.
pub fn format_of(name: &str) -> Option<Format> {
    Some(match name {
        "default" => Format::Json(&json::DEFAULT),
        "hermes" => Format::Json(&json::HERMES),
        "qwen25" => Format::Json(&json::QWEN25),
        "llama3_json" => Format::Json(&json::LLAMA3),
        "mistral" => Format::Json(&json::MISTRAL),
        "phi4" => Format::Json(&json::PHI4),
        "jamba" => Format::Json(&json::JAMBA),
        "nemotron_deci" => Format::Json(&json::NEMOTRON_DECI),
        "pythonic" => Format::Pythonic,
        "deepseek_v3" => Format::DeepseekV3,
        "deepseek_v3_1" => Format::DeepseekV31,
        "deepseek_v3_2" => Format::Dsml("function_calls"),
        "deepseek_v4" | "deepseek-v4" | "deepseekv4" => Format::Dsml("tool_calls"),
        "qwen3_coder" | "nemotron_nano" => Format::Xml(&xml::QWEN3_CODER),
        "minimax_m2" => Format::Xml(&xml::MINIMAX_M2),
        "glm47" => Format::Glm47,
        "kimi_k2" => Format::KimiK2,
        "gemma4" | "gemma-4" => Format::Gemma4,
        "harmony" => Format::Harmony,
        // Names 1.6.1 accepts but reads no call with from any text of the corpus
        // (docs/dynamo/parsers.md §4): their content comes back unchanged, as there.
        "glm45" | "qwen3" | "kimi_k25" | "kimi_k3" | "kimi-k3" | "deepseek_v41" | "inkling" | "minimax_m3"
        | "minimax-m3" | "minimax_m3_nom" | "minimax-m3-nom" | "muse" | "muse_glimmer" => Format::Passthrough,
        _ => return None,
    })
}

/// Every tool-call parser name 1.6.1 accepts.
pub const NAMES: [&str; 36] = [
    "deepseek-v4",
    "deepseek_v3",
    "deepseek_v3_1",
    "deepseek_v3_2",
    "deepseek_v4",
    "deepseek_v41",
    "deepseekv4",
    "default",
    "gemma-4",
    "gemma4",
    "glm45",
    "glm47",
    "harmony",
    "hermes",
    "inkling",
    "jamba",
    "kimi-k3",
    "kimi_k2",
    "kimi_k25",
    "kimi_k3",
    "llama3_json",
    "minimax-m3",
    "minimax-m3-nom",
    "minimax_m2",
    "minimax_m3",
    "minimax_m3_nom",
    "mistral",
    "muse",
    "muse_glimmer",
    "nemotron_deci",
    "nemotron_nano",
    "phi4",
    "pythonic",
    "qwen25",
    "qwen3",
    "qwen3_coder",
];

/// What opened the jail.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Open {
    /// One of the format's markers, at the start of the held text.
    Marker(&'static str),
    /// A bare JSON object or list, or a Python list (pythonic).
    Bare,
}

/// What the held text came to.
pub(crate) enum Step {
    /// Not complete yet.
    Need,
    /// `len` bytes made these calls.
    Calls { len: usize, calls: Vec<Call> },
    /// `len` bytes are not a call: they are content.
    Fail { len: usize },
}

impl Format {
    /// The markers that open a call.
    fn starts(&self) -> &'static [&'static str] {
        match self {
            Format::Passthrough | Format::Pythonic | Format::Harmony => &[],
            Format::Json(j) => j.starts,
            Format::DeepseekV3 | Format::DeepseekV31 => &[formats::DS_CALLS_BEGIN],
            Format::Dsml("function_calls") => &[xml::DSML_FUNCTION_CALLS, xml::DSML_INVOKE],
            Format::Dsml(_) => &[xml::DSML_TOOL_CALLS, xml::DSML_INVOKE],
            Format::Xml(x) => x.starts,
            Format::Glm47 => &["<tool_call>"],
            Format::KimiK2 => formats::KIMI_STARTS,
            Format::Gemma4 => &[formats::GEMMA_BEGIN],
        }
    }

    /// Whether whitespace before a call is dropped from the content.
    fn trims_before(&self) -> bool {
        match self {
            Format::Json(j) => j.trim_before,
            Format::Pythonic => true,
            _ => false,
        }
    }

    /// Whether `s`, which starts where the jail opened, is a complete call yet.
    fn complete(&self, s: &str, open: Open, eof: bool) -> Step {
        match (self, open) {
            (Format::Json(j), _) => json::complete(j, s, open, eof),
            (Format::Pythonic, _) => formats::pythonic(s, eof),
            (Format::DeepseekV3, _) => formats::deepseek(s, eof, false),
            (Format::DeepseekV31, _) => formats::deepseek(s, eof, true),
            (Format::Dsml(block), Open::Marker(m)) => xml::dsml(block, s, m, eof),
            (Format::Xml(x), Open::Marker(m)) => xml::complete(x, s, m, eof),
            (Format::Glm47, _) => xml::glm47(s, eof),
            (Format::KimiK2, Open::Marker(m)) => formats::kimi(s, m, eof),
            (Format::Gemma4, _) => formats::gemma(s, eof),
            _ => Step::Fail { len: s.len() },
        }
    }
}

/// One choice's tool calls, fed its content piece by piece.
#[derive(Debug)]
pub struct Jail {
    format: Format,
    /// Text not released yet: a possible marker start, or the jailed call.
    buf: String,
    /// What opened the jail, while a call is held.
    open: Option<Open>,
    /// Whether anything but whitespace was released or called yet (a bare list must open
    /// the answer).
    started: bool,
    /// The last non-whitespace byte released as content (a bare object is not one when it
    /// is an element of a list).
    last: u8,
    /// After a bare call: the whitespace that follows it is dropped.
    skip_ws: bool,
    /// The content released last ends with phi4's `functools` (a list may follow).
    functools: bool,
    /// Formats that trim before a call: trailing whitespace held until what follows shows.
    ws: String,
    harmony: harmony::State,
}

impl Jail {
    pub fn new(format: Format) -> Jail {
        Jail {
            format,
            buf: String::new(),
            open: None,
            started: false,
            last: 0,
            skip_ws: false,
            functools: false,
            ws: String::new(),
            harmony: harmony::State::default(),
        }
    }

    pub fn push(&mut self, text: &str, out: &mut Out) {
        match self.format {
            Format::Passthrough => out.content.push_str(text),
            Format::Harmony => harmony::push(&mut self.harmony, &mut self.buf, text, out, false),
            _ => {
                self.buf.push_str(text);
                self.run(out, false);
            }
        }
    }

    /// The end of the text: a held call completes or comes back as content.
    pub fn finish(&mut self, out: &mut Out) {
        match self.format {
            Format::Passthrough => {}
            Format::Harmony => harmony::push(&mut self.harmony, &mut self.buf, "", out, true),
            _ => {
                self.run(out, true);
                out.content.push_str(&self.ws);
                self.ws.clear();
            }
        }
    }

    fn run(&mut self, out: &mut Out, eof: bool) {
        let buf = std::mem::take(&mut self.buf);
        let mut at = 0;
        while at < buf.len() || (eof && self.open.is_some()) {
            let rest = &buf[at..];
            let Some(open) = self.open else {
                match self.find_start(rest) {
                    Some((pos, open)) => {
                        self.release(&rest[..pos], out);
                        at += pos;
                        self.open = Some(open);
                    }
                    None => {
                        let keep = if eof { 0 } else { self.held(rest) };
                        self.release(&rest[..rest.len() - keep], out);
                        at += rest.len() - keep;
                        break;
                    }
                }
                continue;
            };
            match self.format.complete(rest, open, eof) {
                Step::Need if !eof => break,
                Step::Need => {
                    self.open = None;
                    self.release(rest, out);
                    at = buf.len();
                }
                Step::Calls { len, calls } => {
                    self.open = None;
                    self.ws.clear();
                    self.started = true;
                    self.skip_ws = open == Open::Bare;
                    out.calls.extend(calls);
                    at += len.max(1);
                }
                Step::Fail { len } => {
                    self.open = None;
                    let len = len.clamp(1, rest.len());
                    let len = (len..=rest.len()).find(|&l| rest.is_char_boundary(l)).unwrap_or(rest.len());
                    self.release(&rest[..len], out);
                    at += len;
                }
            }
        }
        self.buf = buf[at.min(buf.len())..].to_string();
    }

    /// Content out, with the whitespace rules of the format.
    fn release(&mut self, mut text: &str, out: &mut Out) {
        if self.skip_ws {
            text = text.trim_start();
            if text.is_empty() {
                return;
            }
            self.skip_ws = false;
        }
        if text.is_empty() {
            return;
        }
        self.functools = text.ends_with("functools");
        if let Some(b) = text.bytes().rev().find(|b| !b.is_ascii_whitespace()) {
            self.last = b;
            self.started = true;
        }
        if self.format.trims_before() {
            let body = text.trim_end();
            if !body.is_empty() {
                out.content.push_str(&self.ws);
                self.ws.clear();
                out.content.push_str(body);
            }
            self.ws.push_str(&text[body.len()..]);
        } else {
            out.content.push_str(text);
        }
    }

    /// Where the next call may start in `s`, and what opens it.
    fn find_start(&self, s: &str) -> Option<(usize, Open)> {
        let marker = scan::first_of(s, self.format.starts()).map(|(at, m)| (at, Open::Marker(m)));
        let bare = match self.format {
            Format::Json(_) => self.bare_json(s),
            Format::Pythonic => s.find('[').map(|at| (at, Open::Bare)),
            _ => None,
        };
        // A bracket that may yet be the start of a marker (`[` of `[TOOL_CALLS]`) waits.
        let bare = bare.filter(|(at, _)| !scan::prefix_of_any(&s[*at..], self.format.starts()));
        match (marker, bare) {
            (Some(m), Some(b)) => Some(if b.0 < m.0 { b } else { m }),
            (m, b) => m.or(b),
        }
    }

    /// A bare JSON call's start: an object that is not an element of a list, a list that
    /// opens the answer, or phi4's `functools[` (whatever the family's own markers).
    fn bare_json(&self, s: &str) -> Option<(usize, Open)> {
        let bytes = s.as_bytes();
        let mut prev = self.last;
        let mut started = self.started;
        for (i, &b) in bytes.iter().enumerate() {
            match b {
                b'{' if prev != b'[' && prev != b',' => return Some((i, Open::Bare)),
                b'[' if !started => return Some((i, Open::Bare)),
                b'[' if s[..i].ends_with("functools") || (i == 0 && self.functools) => return Some((i, Open::Bare)),
                _ => {}
            }
            if !b.is_ascii_whitespace() {
                prev = b;
                started = true;
            }
        }
        None
    }

    /// How much of the end of `s` to hold back: a possible start of a marker.
    fn held(&self, s: &str) -> usize {
        let mut keep = scan::held_tail(s, self.format.starts());
        if matches!(self.format, Format::Json(_)) {
            keep = keep.max(scan::held_tail(s, &["functools["]));
        }
        keep
    }
}

#[cfg(test)]
mod tests;
