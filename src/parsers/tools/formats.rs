//! The families with grammars of their own: pythonic lists, DeepSeek V3 / V3.1, Kimi K2,
//! Gemma 4.

use serde_json::{Map, Number, Value};

use super::scan::{is_name, python_end};
use super::{Call, Step};

pub const DS_CALLS_BEGIN: &str = "<｜tool▁calls▁begin｜>";
const DS_CALLS_END: &str = "<｜tool▁calls▁end｜>";
const DS_CALL_BEGIN: &str = "<｜tool▁call▁begin｜>";
const DS_CALL_END: &str = "<｜tool▁call▁end｜>";
const DS_SEP: &str = "<｜tool▁sep｜>";

pub const KIMI_STARTS: &[&str] = &["<|tool_calls_section_begin|>", "<|tool_call_section_begin|>", KIMI_CALL];
const KIMI_ENDS: &[&str] = &["<|tool_calls_section_end|>", "<|tool_call_section_end|>"];
const KIMI_CALL: &str = "<|tool_call_begin|>";
const KIMI_ARGS: &str = "<|tool_call_argument_begin|>";
const KIMI_CALL_END: &str = "<|tool_call_end|>";

pub const GEMMA_BEGIN: &str = "<|tool_call>";
const GEMMA_END: &str = "<tool_call|>";
const GEMMA_QUOTE: &str = "<|\"|>";

/// The text up to `end` after `marker`: `Ok((inner, len))`, or the step to take while it is
/// not there.
fn until<'a>(s: &'a str, marker: &str, end: &str, eof: bool) -> Result<(&'a str, usize), Step> {
    let body = &s[marker.len()..];
    match body.find(end) {
        Some(at) => Ok((&body[..at], marker.len() + at + end.len())),
        None if eof => Err(Step::Fail { len: s.len() }),
        None => Err(Step::Need),
    }
}

fn done(calls: Option<Vec<Call>>, len: usize) -> Step {
    match calls.filter(|c| !c.is_empty()) {
        Some(calls) => Step::Calls { len, calls },
        None => Step::Fail { len },
    }
}

/// JSON object text, as the model wrote it.
fn object(json: &str) -> Option<String> {
    match serde_json::from_str::<Value>(json.trim()).ok()? {
        Value::Object(_) => Some(json.trim().to_string()),
        _ => None,
    }
}

/// DeepSeek V3 (`v31` false) or V3.1: a section of calls.
pub fn deepseek(s: &str, eof: bool, v31: bool) -> Step {
    let (mut inner, len) = match until(s, DS_CALLS_BEGIN, DS_CALLS_END, eof) {
        Ok(x) => x,
        Err(step) => return step,
    };
    let mut calls = Vec::new();
    let parsed = (|| {
        loop {
            inner = inner.trim_start();
            if inner.is_empty() {
                return Some(());
            }
            let c = inner.strip_prefix(DS_CALL_BEGIN)?;
            let (call, rest) = c.split_once(DS_CALL_END)?;
            inner = rest;
            let (head, tail) = call.split_once(DS_SEP)?;
            let (name, args) = if v31 {
                (head.trim(), object(tail)?)
            } else {
                // `function<｜tool▁sep｜>name\n```json\n{…}\n````
                let (name, fenced) = tail.split_once("```json")?;
                let json = fenced.trim_end().strip_suffix("```")?;
                (name.trim(), object(json)?)
            };
            if !is_name(name) {
                return None;
            }
            calls.push(Call { name: name.to_string(), arguments: args });
        }
    })();
    done(parsed.map(|()| calls), len)
}

/// Kimi K2: a section of `functions.name:i` calls, or one call without its section.
pub fn kimi(s: &str, marker: &str, eof: bool) -> Step {
    if marker == KIMI_CALL {
        return match until(s, KIMI_CALL, KIMI_CALL_END, eof) {
            Ok((inner, len)) => done(kimi_call(inner).map(|c| vec![c]), len),
            Err(step) => step,
        };
    }
    let body = &s[marker.len()..];
    let Some((at, end)) = super::scan::first_of(body, KIMI_ENDS) else {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    };
    let len = marker.len() + at + end.len();
    let mut inner = &body[..at];
    let mut calls = Vec::new();
    let parsed = (|| loop {
        inner = inner.trim_start();
        if inner.is_empty() {
            return Some(());
        }
        let c = inner.strip_prefix(KIMI_CALL)?;
        let (call, rest) = c.split_once(KIMI_CALL_END)?;
        calls.push(kimi_call(call)?);
        inner = rest;
    })();
    done(parsed.map(|()| calls), len)
}

fn kimi_call(call: &str) -> Option<Call> {
    let (id, args) = call.split_once(KIMI_ARGS)?;
    let id = id.trim();
    let id = id.strip_prefix("functions.").unwrap_or(id);
    let name = id.rsplit_once(':').filter(|(_, i)| i.bytes().all(|b| b.is_ascii_digit())).map_or(id, |(n, _)| n);
    is_name(name).then_some(())?;
    Some(Call { name: name.to_string(), arguments: object(args)? })
}

/// Gemma 4: `<|tool_call>call:name{…}<tool_call|>`, its values in Gemma's own notation.
pub fn gemma(s: &str, eof: bool) -> Step {
    let (inner, len) = match until(s, GEMMA_BEGIN, GEMMA_END, eof) {
        Ok(x) => x,
        Err(step) => return step,
    };
    let call = (|| {
        let rest = inner.trim().strip_prefix("call:")?;
        let brace = rest.find('{')?;
        let name = rest[..brace].trim();
        let mut p = Cursor { s: &rest[brace..] };
        let args = p.gemma_value()?;
        if !p.s.trim().is_empty() || !args.is_object() || !is_name(name) {
            return None;
        }
        Some(Call { name: name.to_string(), arguments: args.to_string() })
    })();
    done(call.map(|c| vec![c]), len)
}

/// A bare word as a JSON value: numbers, booleans, null (and Python's spellings).
fn scalar(word: &str) -> Option<Value> {
    match word {
        "true" | "True" => Some(Value::Bool(true)),
        "false" | "False" => Some(Value::Bool(false)),
        "null" | "None" => Some(Value::Null),
        _ => match serde_json::from_str::<Value>(word) {
            Ok(v @ Value::Number(_)) => Some(v),
            _ => None,
        },
    }
}

/// Pythonic: `[name(key=value, …), …]`, values Python literals.
pub fn pythonic(s: &str, eof: bool) -> Step {
    let Some(n) = python_end(s) else {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    };
    let mut p = Cursor { s: &s[1..n - 1] };
    let mut calls = Vec::new();
    let parsed = (|| loop {
        p.ws();
        if p.s.is_empty() {
            return Some(());
        }
        let open = p.s.find('(')?;
        let name = p.s[..open].trim();
        if !is_name(name) || name.contains(['.', ':', '/']) {
            return None;
        }
        p.s = &p.s[open + 1..];
        let mut args = Map::new();
        if !p.eat(")") {
            loop {
                p.ws();
                let eq = p.s.find('=')?;
                let key = p.s[..eq].trim();
                if !is_name(key) {
                    return None;
                }
                p.s = &p.s[eq + 1..];
                args.insert(key.to_string(), p.py_value()?);
                if p.eat(")") {
                    break;
                }
                if !p.eat(",") {
                    return None;
                }
            }
        }
        calls.push(Call { name: name.to_string(), arguments: Value::Object(args).to_string() });
        if !p.eat(",") {
            p.ws();
            return p.s.is_empty().then_some(());
        }
    })();
    done(parsed.map(|()| calls), n)
}

/// A reader of the literals in a call's text: Gemma's values (bare keys, strings between
/// `<|"|>`, JSON-like otherwise) and Python's.
struct Cursor<'a> {
    s: &'a str,
}

impl Cursor<'_> {
    fn ws(&mut self) {
        self.s = self.s.trim_start();
    }

    fn eat(&mut self, t: &str) -> bool {
        self.ws();
        match self.s.strip_prefix(t) {
            Some(r) => {
                self.s = r;
                true
            }
            None => false,
        }
    }

    // Gemma's values.

    fn gemma_value(&mut self) -> Option<Value> {
        self.ws();
        if self.eat("{") {
            let mut map = Map::new();
            if self.eat("}") {
                return Some(Value::Object(map));
            }
            loop {
                let key = self.gemma_key()?;
                if !self.eat(":") {
                    return None;
                }
                map.insert(key, self.gemma_value()?);
                if self.eat("}") {
                    return Some(Value::Object(map));
                }
                if !self.eat(",") {
                    return None;
                }
            }
        }
        if self.eat("[") {
            let mut items = Vec::new();
            if self.eat("]") {
                return Some(Value::Array(items));
            }
            loop {
                items.push(self.gemma_value()?);
                if self.eat("]") {
                    return Some(Value::Array(items));
                }
                if !self.eat(",") {
                    return None;
                }
            }
        }
        if self.eat(GEMMA_QUOTE) {
            let end = self.s.find(GEMMA_QUOTE)?;
            let v = Value::String(self.s[..end].to_string());
            self.s = &self.s[end + GEMMA_QUOTE.len()..];
            return Some(v);
        }
        let end = self.s.find([',', '}', ']']).unwrap_or(self.s.len());
        let word = self.s[..end].trim();
        self.s = &self.s[end..];
        scalar(word)
    }

    fn gemma_key(&mut self) -> Option<String> {
        self.ws();
        if self.eat(GEMMA_QUOTE) {
            let end = self.s.find(GEMMA_QUOTE)?;
            let k = self.s[..end].to_string();
            self.s = &self.s[end + GEMMA_QUOTE.len()..];
            return Some(k);
        }
        let end = self.s.find(':')?;
        let k = self.s[..end].trim();
        self.s = &self.s[end..];
        (!k.is_empty()).then(|| k.to_string())
    }

    // Python's literals.

    fn py_value(&mut self) -> Option<Value> {
        self.ws();
        let first = self.s.chars().next()?;
        match first {
            '\'' | '"' => self.py_string(first).map(Value::String),
            '[' | '(' => {
                let close = if first == '[' { "]" } else { ")" };
                self.s = &self.s[1..];
                let mut items = Vec::new();
                while !self.eat(close) {
                    items.push(self.py_value()?);
                    if !self.eat(",") && !self.s.trim_start().starts_with(close) {
                        return None;
                    }
                }
                Some(Value::Array(items))
            }
            '{' => {
                self.s = &self.s[1..];
                let mut map = Map::new();
                while !self.eat("}") {
                    let key = match self.py_value()? {
                        Value::String(k) => k,
                        other => other.to_string(),
                    };
                    if !self.eat(":") {
                        return None;
                    }
                    map.insert(key, self.py_value()?);
                    if !self.eat(",") && !self.s.trim_start().starts_with('}') {
                        return None;
                    }
                }
                Some(Value::Object(map))
            }
            _ => {
                let end = self.s.find([',', ')', ']', '}', ':']).unwrap_or(self.s.len());
                let word = self.s[..end].trim();
                self.s = &self.s[end..];
                scalar(word).or_else(|| word.parse::<f64>().ok().and_then(Number::from_f64).map(Value::Number))
            }
        }
    }

    fn py_string(&mut self, quote: char) -> Option<String> {
        let mut out = String::new();
        let mut chars = self.s[1..].char_indices();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    let (_, e) = chars.next()?;
                    out.push(match e {
                        'n' => '\n',
                        't' => '\t',
                        'r' => '\r',
                        other => other,
                    });
                }
                c if c == quote => {
                    self.s = &self.s[1 + i + c.len_utf8()..];
                    return Some(out);
                }
                c => out.push(c),
            }
        }
        None
    }
}
