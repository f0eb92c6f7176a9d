//! The XML-ish families: Qwen3-Coder's and MiniMax-M2's functions with parameters, DeepSeek's
//! DSML blocks, GLM-4.7's key/value pairs.

use serde_json::{Map, Value};

use super::scan::is_name;
use super::{Call, Step};

/// A family of functions with parameters, in an optional wrapper.
#[derive(Debug, PartialEq, Eq)]
pub struct Xml {
    /// The wrapper's markers, then the function's opening (a call may come without the
    /// wrapper).
    pub starts: &'static [&'static str],
    pub wrap_end: &'static str,
    pub func_open: &'static str,
    pub func_close: &'static str,
    pub param_open: &'static str,
    pub param_close: &'static str,
}

pub static QWEN3_CODER: Xml = Xml {
    starts: &["<tool_call>", "<function="],
    wrap_end: "</tool_call>",
    func_open: "<function=",
    func_close: "</function>",
    param_open: "<parameter=",
    param_close: "</parameter>",
};

pub static MINIMAX_M2: Xml = Xml {
    starts: &["<minimax:tool_call>", "<invoke name="],
    wrap_end: "</minimax:tool_call>",
    func_open: "<invoke name=",
    func_close: "</invoke>",
    param_open: "<parameter name=",
    param_close: "</parameter>",
};

pub const DSML_FUNCTION_CALLS: &str = "<｜DSML｜function_calls>";
pub const DSML_TOOL_CALLS: &str = "<｜DSML｜tool_calls>";
pub const DSML_INVOKE: &str = "<｜DSML｜invoke name=";
const DSML_INVOKE_END: &str = "</｜DSML｜invoke>";
const DSML_PARAM: &str = "<｜DSML｜parameter name=";
const DSML_PARAM_END: &str = "</｜DSML｜parameter>";

/// A held call of family `x`, opened by `marker`.
pub fn complete(x: &Xml, s: &str, marker: &str, eof: bool) -> Step {
    if marker == x.func_open {
        // A function without the wrapper: complete at its closing tag.
        return match s.find(x.func_close) {
            Some(at) => {
                let len = at + x.func_close.len();
                match functions(x, &s[..len]) {
                    Some(calls) => Step::Calls { len, calls },
                    None => Step::Fail { len },
                }
            }
            None if eof => Step::Fail { len: s.len() },
            None => Step::Need,
        };
    }
    let body = &s[marker.len()..];
    let (inner, len) = match body.find(x.wrap_end) {
        Some(at) => (&body[..at], marker.len() + at + x.wrap_end.len()),
        None if eof => return Step::Fail { len: s.len() },
        None => return Step::Need,
    };
    match functions(x, inner) {
        Some(calls) => Step::Calls { len, calls },
        None => Step::Fail { len },
    }
}

/// The functions of `s` (nothing else but whitespace around them).
fn functions(x: &Xml, mut s: &str) -> Option<Vec<Call>> {
    let mut calls = Vec::new();
    loop {
        s = s.trim_start();
        if s.is_empty() {
            break;
        }
        let rest = s.strip_prefix(x.func_open)?;
        let (name, rest) = rest.split_once('>')?;
        let name = unquote(name);
        let close = rest.find(x.func_close)?;
        let mut params = &rest[..close];
        s = &rest[close + x.func_close.len()..];
        let mut args = Map::new();
        loop {
            params = params.trim_start();
            if params.is_empty() {
                break;
            }
            let p = params.strip_prefix(x.param_open)?;
            let (key, p) = p.split_once('>')?;
            let end = p.find(x.param_close)?;
            let value = p[..end].strip_prefix('\n').unwrap_or(&p[..end]);
            let value = value.strip_suffix('\n').unwrap_or(value);
            args.insert(unquote(key).to_string(), Value::String(value.to_string()));
            params = &p[end + x.param_close.len()..];
        }
        if !is_name(name) {
            return None;
        }
        calls.push(Call { name: name.to_string(), arguments: Value::Object(args).to_string() });
    }
    (!calls.is_empty()).then_some(calls)
}

fn unquote(s: &str) -> &str {
    let s = s.trim();
    s.strip_prefix('"').and_then(|s| s.strip_suffix('"')).unwrap_or(s)
}

/// DeepSeek's DSML: a block of invokes (`block` names it), or invokes without their block.
pub fn dsml(block: &str, s: &str, marker: &str, eof: bool) -> Step {
    if marker == DSML_INVOKE {
        // Invokes without the block: as many as follow one another; a closing block tag
        // after them goes with them.
        let mut at = 0;
        let mut calls = Vec::new();
        loop {
            let rest = &s[at..];
            let ws = rest.len() - rest.trim_start().len();
            let r = &rest[ws..];
            if r.starts_with(DSML_INVOKE) {
                let Some(end) = r.find(DSML_INVOKE_END) else {
                    return if eof { Step::Fail { len: s.len() } } else { Step::Need };
                };
                let len = end + DSML_INVOKE_END.len();
                match invoke(&r[..len]) {
                    Some(c) => calls.push(c),
                    None => return Step::Fail { len: at + ws + len },
                }
                at += ws + len;
                continue;
            }
            if r.is_empty() || DSML_INVOKE.starts_with(r) || "</｜DSML｜".starts_with(r) {
                if !eof {
                    return Step::Need;
                }
            } else if let Some(close) = r.strip_prefix("</｜DSML｜") {
                match close.find('>') {
                    Some(gt) => at += ws + "</｜DSML｜".len() + gt + 1,
                    None if !eof => return Step::Need,
                    None => {}
                }
            }
            return Step::Calls { len: at, calls };
        }
    }
    let end = format!("</｜DSML｜{block}>");
    let body = &s[marker.len()..];
    let Some(close) = body.find(&end) else {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    };
    let len = marker.len() + close + end.len();
    let mut inner = &body[..close];
    let mut calls = Vec::new();
    loop {
        inner = inner.trim_start();
        if inner.is_empty() {
            break;
        }
        let Some(e) = inner.find(DSML_INVOKE_END).filter(|_| inner.starts_with(DSML_INVOKE)) else {
            return Step::Fail { len };
        };
        let n = e + DSML_INVOKE_END.len();
        match invoke(&inner[..n]) {
            Some(c) => calls.push(c),
            None => return Step::Fail { len },
        }
        inner = &inner[n..];
    }
    if calls.is_empty() {
        Step::Fail { len }
    } else {
        Step::Calls { len, calls }
    }
}

/// One `<｜DSML｜invoke name="f">…</｜DSML｜invoke>`.
fn invoke(s: &str) -> Option<Call> {
    let rest = s.strip_prefix(DSML_INVOKE)?;
    let (name, rest) = rest.split_once('>')?;
    let name = unquote(name);
    let mut params = rest.strip_suffix(DSML_INVOKE_END)?;
    let mut args = Map::new();
    loop {
        params = params.trim_start();
        if params.is_empty() {
            break;
        }
        let p = params.strip_prefix(DSML_PARAM)?;
        let (attrs, p) = p.split_once('>')?;
        let end = p.find(DSML_PARAM_END)?;
        let raw = &p[..end];
        let (key, string) = match attrs.split_once(" string=") {
            Some((k, s)) => (unquote(k), unquote(s) != "false"),
            None => (unquote(attrs), true),
        };
        let value = match string {
            true => Value::String(raw.to_string()),
            false => serde_json::from_str(raw.trim()).unwrap_or_else(|_| Value::String(raw.to_string())),
        };
        args.insert(key.to_string(), value);
        params = &p[end + DSML_PARAM_END.len()..];
    }
    is_name(name).then(|| Call { name: name.to_string(), arguments: Value::Object(args).to_string() })
}

/// GLM-4.7: `<tool_call>name<arg_key>k</arg_key><arg_value>v</arg_value>…</tool_call>`; JSON
/// inside the tags is read as the JSON family reads it.
pub fn glm47(s: &str, eof: bool) -> Step {
    const OPEN: &str = "<tool_call>";
    const CLOSE: &str = "</tool_call>";
    let body = &s[OPEN.len()..];
    if body.trim_start().starts_with(['{', '[']) {
        return super::json::complete(&super::json::GLM_JSON, s, super::Open::Marker(OPEN), eof);
    }
    let Some(close) = body.find(CLOSE) else {
        return if eof { Step::Fail { len: s.len() } } else { Step::Need };
    };
    let len = OPEN.len() + close + CLOSE.len();
    let inner = &body[..close];
    let (name, mut pairs) = match inner.find("<arg_key>") {
        Some(at) => (inner[..at].trim(), &inner[at..]),
        None => (inner.trim(), ""),
    };
    let mut args = Map::new();
    let parsed = (|| loop {
        pairs = pairs.trim_start();
        if pairs.is_empty() {
            return Some(());
        }
        let p = pairs.strip_prefix("<arg_key>")?;
        let (key, p) = p.split_once("</arg_key>")?;
        let p = p.trim_start().strip_prefix("<arg_value>")?;
        let (value, p) = p.split_once("</arg_value>")?;
        let v = match serde_json::from_str::<Value>(value) {
            Ok(v) if !v.is_string() => v,
            _ => Value::String(value.to_string()),
        };
        args.insert(key.trim().to_string(), v);
        pairs = p;
    })();
    match parsed {
        Some(()) if is_name(name) => Step::Calls {
            len,
            calls: vec![Call { name: name.to_string(), arguments: Value::Object(args).to_string() }],
        },
        _ => Step::Fail { len },
    }
}
