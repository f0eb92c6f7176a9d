//! Python's text forms of JSON-like values, as chat templates see them under transformers:
//! `json.dumps` (the `tojson` filter) and `repr`/`str` (what `{{ value }}` prints).
//!
//! Both matter for byte-exact prompts: tool schemas go through `tojson` with Python's default
//! separators (`", "` and `": "`), and a template that prints a dict or a boolean directly gets
//! Python's `{'a': True}`, not JSON.

use serde_json::Value;
use std::fmt::Write;

/// Python `repr(float)`: shortest round-trip digits, `1.0` for integral values, exponent form
/// (`1e-05`, `1e+16`) outside `1e-4 <= |x| < 1e16`.
pub fn float_repr(f: f64) -> String {
    if f.is_nan() {
        return "NaN".into();
    }
    if f.is_infinite() {
        return if f > 0.0 { "Infinity".into() } else { "-Infinity".into() };
    }
    if f == 0.0 {
        return if f.is_sign_negative() { "-0.0".into() } else { "0.0".into() };
    }
    // `{:e}` gives the shortest round-trip digits as d.ddde±x.
    let sci = format!("{f:e}");
    let (mantissa, exp) = sci.split_once('e').unwrap_or((&sci, "0"));
    let exp: i32 = exp.parse().unwrap_or(0);
    let (neg, mantissa) = match mantissa.strip_prefix('-') {
        Some(m) => (true, m),
        None => (false, mantissa),
    };
    let digits: String = mantissa.chars().filter(|c| *c != '.').collect();
    let mut out = String::new();
    if neg {
        out.push('-');
    }
    if (-4..16).contains(&exp) {
        if exp < 0 {
            out.push_str("0.");
            for _ in 0..(-exp - 1) {
                out.push('0');
            }
            out.push_str(&digits);
        } else {
            let point = exp as usize + 1;
            if digits.len() <= point {
                out.push_str(&digits);
                for _ in digits.len()..point {
                    out.push('0');
                }
                out.push_str(".0");
            } else {
                out.push_str(&digits[..point]);
                out.push('.');
                out.push_str(&digits[point..]);
            }
        }
    } else {
        out.push_str(&digits[..1]);
        if digits.len() > 1 {
            out.push('.');
            out.push_str(&digits[1..]);
        }
        let _ = write!(out, "e{}{:02}", if exp < 0 { '-' } else { '+' }, exp.abs());
    }
    out
}

fn number(out: &mut String, n: &serde_json::Number) {
    if n.is_f64() {
        out.push_str(&float_repr(n.as_f64().unwrap_or(0.0)));
    } else {
        let _ = write!(out, "{n}");
    }
}

/// A JSON string literal as `json.dumps(..., ensure_ascii=False)` writes it.
fn json_string(out: &mut String, s: &str, ensure_ascii: bool) {
    out.push('"');
    for c in s.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            '\u{8}' => out.push_str("\\b"),
            '\u{c}' => out.push_str("\\f"),
            c if (c as u32) < 0x20 => {
                let _ = write!(out, "\\u{:04x}", c as u32);
            }
            c if ensure_ascii && (c as u32) > 0x7e => {
                let mut buf = [0u16; 2];
                for unit in c.encode_utf16(&mut buf) {
                    let _ = write!(out, "\\u{unit:04x}");
                }
            }
            c => out.push(c),
        }
    }
    out.push('"');
}

/// Options of Python's `json.dumps` that templates use.
#[derive(Clone, Debug, Default)]
pub struct DumpOptions {
    pub indent: Option<String>,
    /// (item separator, key separator); defaults depend on `indent` as in Python.
    pub separators: Option<(String, String)>,
    pub sort_keys: bool,
    pub ensure_ascii: bool,
}

/// `json.dumps(value, **opts)`.
pub fn dumps(value: &Value, opts: &DumpOptions) -> String {
    let (item_sep, key_sep) = match &opts.separators {
        Some((i, k)) => (i.clone(), k.clone()),
        None if opts.indent.is_some() => (",".to_string(), ": ".to_string()),
        None => (", ".to_string(), ": ".to_string()),
    };
    let mut out = String::new();
    dump_into(&mut out, value, opts, &item_sep, &key_sep, 0);
    out
}

fn newline_indent(out: &mut String, indent: &Option<String>, level: usize) {
    if let Some(ind) = indent {
        out.push('\n');
        for _ in 0..level {
            out.push_str(ind);
        }
    }
}

fn dump_into(out: &mut String, v: &Value, opts: &DumpOptions, item_sep: &str, key_sep: &str, level: usize) {
    match v {
        Value::Null => out.push_str("null"),
        Value::Bool(b) => out.push_str(if *b { "true" } else { "false" }),
        Value::Number(n) => number(out, n),
        Value::String(s) => json_string(out, s, opts.ensure_ascii),
        Value::Array(a) if a.is_empty() => out.push_str("[]"),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline_indent(out, &opts.indent, level + 1);
                dump_into(out, item, opts, item_sep, key_sep, level + 1);
            }
            newline_indent(out, &opts.indent, level);
            out.push(']');
        }
        Value::Object(o) if o.is_empty() => out.push_str("{}"),
        Value::Object(o) => {
            out.push('{');
            let mut entries: Vec<(&String, &Value)> = o.iter().collect();
            if opts.sort_keys {
                entries.sort_by(|a, b| a.0.cmp(b.0));
            }
            for (i, (k, item)) in entries.into_iter().enumerate() {
                if i > 0 {
                    out.push_str(item_sep);
                }
                newline_indent(out, &opts.indent, level + 1);
                json_string(out, k, opts.ensure_ascii);
                out.push_str(key_sep);
                dump_into(out, item, opts, item_sep, key_sep, level + 1);
            }
            newline_indent(out, &opts.indent, level);
            out.push('}');
        }
    }
}

/// Python `repr(str)`: single quotes unless the text has `'` and no `"`.
pub fn str_repr(out: &mut String, s: &str) {
    let quote = if s.contains('\'') && !s.contains('"') { '"' } else { '\'' };
    out.push(quote);
    for c in s.chars() {
        match c {
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            '\t' => out.push_str("\\t"),
            c if c == quote => {
                out.push('\\');
                out.push(c);
            }
            c if (c as u32) < 0x20 || c as u32 == 0x7f => {
                let _ = write!(out, "\\x{:02x}", c as u32);
            }
            c => out.push(c),
        }
    }
    out.push(quote);
}

/// Python `repr` of a JSON-like value (`None`, `True`, `{'a': [1, 2.0]}`).
pub fn repr(out: &mut String, v: &Value) {
    match v {
        Value::Null => out.push_str("None"),
        Value::Bool(b) => out.push_str(if *b { "True" } else { "False" }),
        Value::Number(n) => number(out, n),
        Value::String(s) => str_repr(out, s),
        Value::Array(a) => {
            out.push('[');
            for (i, item) in a.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                repr(out, item);
            }
            out.push(']');
        }
        Value::Object(o) => {
            out.push('{');
            for (i, (k, item)) in o.iter().enumerate() {
                if i > 0 {
                    out.push_str(", ");
                }
                str_repr(out, k);
                out.push_str(": ");
                repr(out, item);
            }
            out.push('}');
        }
    }
}

/// Python `str()`: strings as they are, everything else as `repr`.
pub fn to_str(out: &mut String, v: &Value) {
    match v {
        Value::String(s) => out.push_str(s),
        other => repr(out, other),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn floats_like_python() {
        for (f, want) in [
            (1.0, "1.0"),
            (0.5, "0.5"),
            (1e-5, "1e-05"),
            (0.0001, "0.0001"),
            (1e16, "1e+16"),
            (123456789.0, "123456789.0"),
            (-2.5, "-2.5"),
            (0.1 + 0.2, "0.30000000000000004"),
            (1.5e300, "1.5e+300"),
        ] {
            assert_eq!(float_repr(f), want, "{f}");
        }
    }

    #[test]
    fn dumps_like_python() {
        let v = json!({"name": "get_weather", "params": {"type": "object", "required": ["city"], "n": 1.0}, "ok": true, "x": null});
        assert_eq!(
            dumps(&v, &DumpOptions::default()),
            r#"{"name": "get_weather", "params": {"type": "object", "required": ["city"], "n": 1.0}, "ok": true, "x": null}"#
        );
        let indented = dumps(
            &json!({"a": [1, {}], "b": "é<>&"}),
            &DumpOptions { indent: Some("  ".into()), ..Default::default() },
        );
        assert_eq!(indented, "{\n  \"a\": [\n    1,\n    {}\n  ],\n  \"b\": \"é<>&\"\n}");
        assert_eq!(
            dumps(&json!("é\u{1}"), &DumpOptions { ensure_ascii: true, ..Default::default() }),
            r#""\u00e9\u0001""#
        );
    }

    #[test]
    fn repr_like_python() {
        let mut s = String::new();
        repr(&mut s, &json!({"a": true, "b": [1, 2.0, null], "c": "it's"}));
        assert_eq!(s, r#"{'a': True, 'b': [1, 2.0, None], 'c': "it's"}"#);
    }
}
