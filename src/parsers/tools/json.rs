//! The JSON family (default, hermes, qwen25, llama3_json, mistral, phi4, jamba,
//! nemotron_deci): `{"name": …, "arguments" | "parameters": {…}}` objects, or lists of them,
//! inside the family's markers, or bare.

use std::collections::HashMap;

use serde_json::value::RawValue;
use serde_json::Value;

use super::scan::{is_name, json_end, prefix_of_any};
use super::{Call, Open, Step};

/// One JSON parser's markers and habits.
#[derive(Debug, PartialEq, Eq)]
pub struct Json {
    pub starts: &'static [&'static str],
    /// Markers that close a call; `""` lets the end of the text close it.
    pub ends: &'static [&'static str],
    /// Whitespace before a call is dropped from the content.
    pub trim_before: bool,
    /// A call whose closing marker never came is still a call when its JSON is complete.
    pub recover_unclosed: bool,
}

pub static DEFAULT: Json = Json {
    starts: &["<TOOLCALL>", "<|python_tag|>"],
    ends: &["</TOOLCALL>", ""],
    trim_before: false,
    recover_unclosed: true,
};
pub static HERMES: Json =
    Json { starts: &["<tool_call>"], ends: &["</tool_call>"], trim_before: false, recover_unclosed: true };
pub static QWEN25: Json =
    Json { starts: &["<tool_call>"], ends: &["</tool_call>"], trim_before: false, recover_unclosed: false };
pub static LLAMA3: Json = Json { starts: &["<|python_tag|>"], ends: &[""], trim_before: false, recover_unclosed: true };
pub static MISTRAL: Json =
    Json { starts: &["[TOOL_CALLS]"], ends: &["[/TOOL_CALLS]", ""], trim_before: false, recover_unclosed: true };
pub static PHI4: Json = Json { starts: &["functools"], ends: &[""], trim_before: false, recover_unclosed: true };
pub static JAMBA: Json =
    Json { starts: &["<tool_calls>"], ends: &["</tool_calls>"], trim_before: true, recover_unclosed: true };
pub static NEMOTRON_DECI: Json =
    Json { starts: &["<TOOLCALL>"], ends: &["</TOOLCALL>"], trim_before: false, recover_unclosed: true };
/// GLM-4.7's JSON calls inside `<tool_call>` (its own form is [`super::xml::glm47`]).
pub static GLM_JSON: Json =
    Json { starts: &["<tool_call>"], ends: &["</tool_call>"], trim_before: false, recover_unclosed: false };

/// Whether `s` (held from what opened the jail) is a complete call.
pub fn complete(j: &Json, s: &str, open: Open, eof: bool) -> Step {
    let marker = match open {
        Open::Bare => {
            return match json_end(s) {
                None if eof => Step::Fail { len: s.len() },
                None => Step::Need,
                Some(n) => match calls_of(&s[..n], true) {
                    Some(calls) => Step::Calls { len: n, calls },
                    None => Step::Fail { len: n },
                },
            };
        }
        Open::Marker(m) => m,
    };
    let open_end = j.ends.contains(&"");
    let ends: Vec<&str> = j.ends.iter().copied().filter(|e| !e.is_empty()).collect();
    let body = &s[marker.len()..];
    let lead = body.len() - body.trim_start().len();
    let b = &body[lead..];
    // Where the closing marker is, for text that is not the JSON the marker promised.
    // Text that is not the promised JSON: with an open end the marker alone is content (what
    // follows is read again); else the text up to the closing marker, once it shows.
    let not_a_call = || match super::scan::first_of(body, &ends) {
        _ if open_end => Step::Fail { len: marker.len() },
        Some((at, e)) => Step::Fail { len: marker.len() + at + e.len() },
        None if eof => Step::Fail { len: s.len() },
        None => Step::Need,
    };
    if b.is_empty() {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    }
    if !b.starts_with(['{', '[']) {
        if marker == "[TOOL_CALLS]" {
            return mistral_args(s, marker.len() + lead, eof).unwrap_or_else(not_a_call);
        }
        return not_a_call();
    }
    let Some(n) = json_end(b) else {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    };
    let calls = calls_of(&b[..n], false);
    let json_to = marker.len() + lead + n;
    let tail = &s[json_to..];
    let gap = tail.len() - tail.trim_start().len();
    let t = &tail[gap..];
    let done = |len: usize| match calls.clone() {
        Some(calls) => Step::Calls { len, calls },
        None => Step::Fail { len },
    };
    if let Some(e) = ends.iter().find(|e| t.starts_with(**e)) {
        return done(json_to + gap + e.len());
    }
    if t.is_empty() || prefix_of_any(t, &ends) {
        return match () {
            _ if !eof => Step::Need,
            _ if open_end || j.recover_unclosed => done(s.len()),
            _ => Step::Fail { len: s.len() },
        };
    }
    if open_end {
        return done(json_to);
    }
    not_a_call()
}

/// Mistral's newer form, `[TOOL_CALLS]name[ARGS]{…}` (repeated for parallel calls), read from
/// byte `at` of `s`; `None` when the text is not in that form.
fn mistral_args(s: &str, at: usize, eof: bool) -> Option<Step> {
    const ARGS: &str = "[ARGS]";
    let rest = &s[at..];
    let Some(sep) = rest.find(ARGS) else {
        let name_so_far = rest.bytes().all(|b| b.is_ascii_alphanumeric() || b"_-.[ARGS".contains(&b));
        return (name_so_far && !eof).then_some(Step::Need);
    };
    let name = &rest[..sep];
    if !is_name(name) {
        return None;
    }
    let json = &rest[sep + ARGS.len()..];
    let lead = json.len() - json.trim_start().len();
    if !json[lead..].starts_with('{') {
        return (json[lead..].is_empty() && !eof).then_some(Step::Need);
    }
    let Some(n) = json_end(&json[lead..]) else {
        return Some(if eof { Step::Fail { len: s.len() } } else { Step::Need });
    };
    let args = &json[lead..lead + n];
    serde_json::from_str::<Value>(args).ok()?.as_object()?;
    let len = at + sep + ARGS.len() + lead + n;
    Some(Step::Calls { len, calls: vec![Call { name: name.to_string(), arguments: args.to_string() }] })
}

/// The calls a JSON value makes: an object with a name (and, bare, its arguments), or a
/// non-empty list of such objects. Arguments keep the model's own text.
pub fn calls_of(json: &str, bare: bool) -> Option<Vec<Call>> {
    type Fields<'a> = HashMap<String, &'a RawValue>;
    if json.starts_with('[') {
        let items: Vec<Fields<'_>> = serde_json::from_str(json).ok()?;
        if items.is_empty() {
            return None;
        }
        return items.iter().map(|f| call_of(f, bare)).collect();
    }
    let fields: Fields<'_> = serde_json::from_str(json).ok()?;
    Some(vec![call_of(&fields, bare)?])
}

fn call_of(o: &HashMap<String, &RawValue>, bare: bool) -> Option<Call> {
    let name: String = serde_json::from_str(o.get("name")?.get()).ok()?;
    if !is_name(&name) {
        return None;
    }
    let args = o.get("arguments").or_else(|| o.get("parameters")).map(|a| a.get());
    let arguments = match args {
        Some(a) if a.starts_with('{') => a.to_string(),
        Some(a) if a.starts_with('"') => {
            let text: String = serde_json::from_str(a).ok()?;
            match serde_json::from_str::<Value>(&text).ok()? {
                Value::Object(_) => text.trim().to_string(),
                _ => return None,
            }
        }
        None if !bare => "{}".to_string(),
        _ => return None,
    };
    Some(Call { name, arguments })
}
