//! Calls forced by `tool_choice`: `"required"` makes the model write a JSON list of
//! `{"name": …, "parameters": {…}}` objects, a named tool makes it write that tool's
//! arguments object (guided decoding holds it to the schema, see `openai::guided`). The
//! arguments are put out piece by piece as they come, as 1.6.1 streams them: a call's first
//! piece carries its name. Runs on the shard thread of the request, one per choice.

/// A piece of a forced call.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Piece {
    /// Call `index` begins: its name and the first piece of its arguments.
    Start { index: u32, name: String, args: String },
    /// More of call `index`'s arguments.
    Args { index: u32, args: String },
    /// Call `index`'s arguments are complete.
    End { index: u32 },
    /// Text that is no call: a named tool's answer that does not open a JSON object (1.6.1
    /// answers it as content).
    Text(String),
}

/// Whether a named tool's answer is its arguments: a JSON object (1.6.1 makes no call of
/// anything else).
pub fn is_arguments(text: &str) -> bool {
    serde_json::from_str::<serde_json::Value>(text).is_ok_and(|v| v.is_object())
}

/// One choice's forced calls.
#[derive(Debug)]
pub struct Forced {
    /// The named tool; `None` for `"required"`.
    named: Option<String>,
    /// `"required"`: text not placed yet (before a call's arguments begin).
    buf: String,
    /// `"required"`: inside a call's arguments value, how deep, and its string state.
    value: Option<Value>,
    /// `"required"`: the name of the call whose arguments begin with the next piece.
    starting: Option<String>,
    calls: u32,
    /// A named tool's answer that does not open an object: text, not a call.
    text: bool,
}

#[derive(Clone, Copy, Debug, Default)]
struct Value {
    depth: u32,
    in_str: bool,
    escaped: bool,
}

impl Forced {
    /// `named`: the tool `tool_choice` names, or `None` for `"required"`.
    pub fn new(named: Option<String>) -> Forced {
        Forced { named, buf: String::new(), value: None, starting: None, calls: 0, text: false }
    }

    /// The next piece of the model's text (its content), as call pieces.
    pub fn push(&mut self, text: &str, out: &mut Vec<Piece>) {
        if text.is_empty() {
            return;
        }
        if let Some(name) = &self.named {
            if self.text {
                out.push(Piece::Text(text.to_string()));
            } else if self.calls > 0 {
                out.push(Piece::Args { index: 0, args: text.to_string() });
            } else {
                // Whether the answer opens an object shows at its first non-space character.
                self.buf.push_str(text);
                let Some(first) = self.buf.trim_start().chars().next() else { return };
                let held = std::mem::take(&mut self.buf);
                if first == '{' {
                    out.push(Piece::Start { index: 0, name: name.clone(), args: held });
                    self.calls = 1;
                } else {
                    out.push(Piece::Text(held));
                    self.text = true;
                }
            }
            return;
        }
        let mut rest = text;
        while !rest.is_empty() {
            if let Some(v) = self.value.as_mut() {
                // Inside the arguments: up to where the value closes.
                let mut end = None;
                for (i, b) in rest.bytes().enumerate() {
                    if v.in_str {
                        match (v.escaped, b) {
                            (true, _) => v.escaped = false,
                            (false, b'\\') => v.escaped = true,
                            (false, b'"') => v.in_str = false,
                            _ => {}
                        }
                        continue;
                    }
                    match b {
                        b'"' => v.in_str = true,
                        b'{' | b'[' => v.depth += 1,
                        b'}' | b']' => {
                            v.depth = v.depth.saturating_sub(1);
                            if v.depth == 0 {
                                end = Some(i + 1);
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                let n = end.unwrap_or(rest.len());
                let index = self.calls - 1;
                let args = rest[..n].to_string();
                out.push(match self.starting.take() {
                    Some(name) => Piece::Start { index, name, args },
                    None => Piece::Args { index, args },
                });
                rest = &rest[n..];
                if end.is_some() {
                    self.value = None;
                    out.push(Piece::End { index });
                }
                continue;
            }
            self.buf.push_str(rest);
            rest = "";
            // A call's name, then its arguments key: the value starts there.
            let Some((name, at)) = next_call(&self.buf) else { break };
            let tail = self.buf.split_off(at);
            self.buf.clear();
            self.value = Some(Value::default());
            self.starting = Some(name);
            self.calls += 1;
            self.push(&tail, out);
        }
    }

    /// The end of the text: a named tool's call is complete.
    pub fn finish(&mut self, out: &mut Vec<Piece>) {
        if self.named.is_some() && self.calls > 0 {
            out.push(Piece::End { index: 0 });
        } else if self.named.is_some() && !self.buf.is_empty() {
            out.push(Piece::Text(std::mem::take(&mut self.buf)));
        }
    }

    /// The text not placed in any call (a `"required"` answer that made none keeps it).
    pub fn unplaced(&mut self) -> String {
        std::mem::take(&mut self.buf)
    }

    /// How many calls began.
    pub fn calls(&self) -> u32 {
        self.calls
    }
}

/// In `buf` (text before a call's arguments): the call's name and where its arguments value
/// starts, once both are there.
fn next_call(buf: &str) -> Option<(String, usize)> {
    let obj = buf.find('{')?;
    let s = &buf[obj..];
    let name_key = s.find("\"name\"")?;
    let after = s[name_key + 6..].trim_start().strip_prefix(':')?.trim_start();
    let name_start = s.len() - after.len();
    let name_json = &s[name_start..];
    let name_end = super::tools::scan_string_end(name_json)?;
    let name: String = serde_json::from_str(&name_json[..name_end]).ok()?;
    let rest = &s[name_start + name_end..];
    let key = ["\"parameters\"", "\"arguments\""].iter().filter_map(|k| rest.find(k).map(|at| (at, k.len()))).min()?;
    let after_key = &rest[key.0 + key.1..];
    let value = after_key.trim_start().strip_prefix(':')?;
    let lead = value.len() - value.trim_start().len();
    if value.len() == lead {
        return None;
    }
    let at = buf.len() - value.len() + lead;
    Some((name, at))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(named: Option<&str>, pieces: &[&str]) -> Vec<(String, String)> {
        let mut f = Forced::new(named.map(str::to_string));
        let mut out = Vec::new();
        for p in pieces {
            f.push(p, &mut out);
        }
        let mut calls: Vec<(String, String)> = Vec::new();
        for p in out {
            match p {
                Piece::Start { name, args, .. } => calls.push((name, args)),
                Piece::Args { index, args } => calls[index as usize].1.push_str(&args),
                Piece::End { .. } | Piece::Text(_) => {}
            }
        }
        calls
    }

    #[test]
    fn required_lists_stream_their_arguments() {
        let text = r#"[{"name": "get_weather", "parameters": {"location": "Paris", "x": "}"}}, {"name": "search", "parameters": {}}]"#;
        let want = vec![
            ("get_weather".to_string(), r#"{"location": "Paris", "x": "}"}"#.to_string()),
            ("search".to_string(), "{}".to_string()),
        ];
        assert_eq!(run(None, &[text]), want);
        for (at, _) in text.char_indices() {
            assert_eq!(run(None, &[&text[..at], &text[at..]]), want, "cut at {at}");
        }
        let chars: Vec<String> = text.chars().map(String::from).collect();
        let chars: Vec<&str> = chars.iter().map(String::as_str).collect();
        assert_eq!(run(None, &chars), want);
    }

    #[test]
    fn a_named_tool_streams_all_the_text() {
        assert_eq!(run(Some("f"), &["{\"a\"", ": 1}"]), vec![("f".to_string(), "{\"a\": 1}".to_string())]);
    }

    #[test]
    fn a_parse_of_forced_calls_gives_each_call_when_it_closes() {
        use crate::parsers::{Out, Parse, Parsers, Spec};
        let text = r#"<think>hm</think>[{"name": "f", "parameters": {"a": 1}}, {"name": "g", "parameters": {}}]"#;
        let spec = Spec {
            parsers: Parsers { reasoning: crate::parsers::reasoning::format_of("qwen3"), tools: None },
            forced: Some(None),
        };
        let mut parse = Parse::of(&spec);
        let mut out = Out::default();
        let mut after_first = usize::MAX;
        for (i, ch) in text.char_indices() {
            parse.push(&text[i..i + ch.len_utf8()], &mut out);
            if out.calls.len() == 1 && after_first == usize::MAX {
                after_first = i;
            }
        }
        parse.finish(&mut out);
        assert_eq!(out.reasoning, "hm");
        assert_eq!(out.content, "");
        let calls: Vec<(&str, &str)> = out.calls.iter().map(|c| (c.name.as_str(), c.arguments.as_str())).collect();
        assert_eq!(calls, vec![("f", r#"{"a": 1}"#), ("g", "{}")]);
        // The first call came out as soon as its arguments closed, before the second began.
        assert!(after_first < text.find("\"g\"").unwrap(), "{after_first}");
        let named = Spec { parsers: Parsers::default(), forced: Some(Some("f".into())) };
        let mut parse = Parse::of(&named);
        let mut out = Out::default();
        parse.push("{\"a\"", &mut out);
        parse.push(": 2}", &mut out);
        assert!(out.calls.is_empty());
        parse.finish(&mut out);
        assert_eq!((out.calls[0].name.as_str(), out.calls[0].arguments.as_str()), ("f", r#"{"a": 2}"#));
        // A named tool's answer that is not an object is text, as 1.6.1 answers it.
        for text in [" Hello world", "{oops"] {
            let mut parse = Parse::of(&named);
            let mut out = Out::default();
            parse.push(text, &mut out);
            parse.finish(&mut out);
            assert_eq!((out.content.as_str(), out.calls.len()), (text, 0));
        }
        // A "required" answer that wrote no call keeps its text.
        let mut parse = Parse::of(&Spec { parsers: Parsers::default(), forced: Some(None) });
        let mut out = Out::default();
        parse.push("no calls here", &mut out);
        parse.finish(&mut out);
        assert_eq!((out.content.as_str(), out.calls.len()), ("no calls here", 0));
    }
}
