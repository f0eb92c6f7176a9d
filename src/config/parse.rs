//! Command line and environment → one value per option, the way Dynamo's argparse does it.
//!
//! Precedence: command line, then the option's environment variable, then the default.
//! Spellings: `--name value`, `--name=value`, `--x` / `--no-x` for booleans, aliases, and
//! unambiguous prefixes of long names (argparse's `allow_abbrev`). A bad value is a usage
//! error (exit 2, like argparse); leftover arguments are "Unknown arguments specified"
//! (exit 1, like `dynamo.frontend`). Environment values are checked just as strictly; Dynamo
//! would crash with a traceback on most of them.

use std::fmt;

use super::flags::{self, Default, Flag, Kind};

/// A resolved option value.
#[derive(Clone, Debug, PartialEq)]
pub enum Value {
    Null,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(String),
    List(Vec<String>),
}

impl Value {
    /// The value a default stands for.
    pub fn from_default(d: Default) -> Value {
        match d {
            Default::None | Default::Suppressed => Value::Null,
            Default::Bool(b) => Value::Bool(b),
            Default::Int(i) => Value::Int(i),
            Default::Float(f) => Value::Float(f),
            Default::Str(s) => Value::Str(s.to_string()),
            Default::EmptyList => Value::List(Vec::new()),
        }
    }

    pub fn to_json(&self) -> serde_json::Value {
        match self {
            Value::Null => serde_json::Value::Null,
            Value::Bool(b) => (*b).into(),
            Value::Int(i) => (*i).into(),
            Value::Float(f) => (*f).into(),
            Value::Str(s) => s.clone().into(),
            Value::List(l) => l.clone().into(),
        }
    }

    pub fn as_str(&self) -> Option<&str> {
        match self {
            Value::Str(s) => Some(s),
            _ => None,
        }
    }
}

/// Python's `str()` of a value, as Dynamo's help prints defaults.
pub fn python_str(d: Default) -> String {
    match d {
        Default::None => "None".into(),
        Default::Bool(true) => "True".into(),
        Default::Bool(false) => "False".into(),
        Default::Int(i) => i.to_string(),
        Default::Float(f) if f.fract() == 0.0 && f.abs() < 1e16 => format!("{f:.1}"),
        Default::Float(f) => f.to_string(),
        Default::Str(s) => s.to_string(),
        Default::EmptyList => "[]".into(),
        Default::Suppressed => "==SUPPRESS==".into(),
    }
}

/// Where a value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Source {
    Default,
    Env,
    Cli,
}

/// What the command line asks for.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Action {
    Run,
    Help,
    Version,
}

/// The outcome of parsing: one value per option, in table order.
#[derive(Clone, Debug)]
pub struct Parsed {
    pub action: Action,
    pub values: Vec<(&'static Flag, Value, Source)>,
    /// Options that Dynamo accepts but ignores with a warning (e.g. `--admission-control`).
    pub warnings: Vec<String>,
}

impl Parsed {
    pub fn get(&self, dest: &str) -> &Value {
        self.values
            .iter()
            .find(|(f, _, _)| f.dest == dest)
            .map(|(_, v, _)| v)
            .unwrap_or_else(|| panic!("no option with dest {dest}"))
    }
    pub fn source(&self, dest: &str) -> Source {
        self.values.iter().find(|(f, _, _)| f.dest == dest).map(|(_, _, s)| *s).unwrap_or(Source::Default)
    }
}

/// A command line or environment that cannot be used.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UsageError {
    pub message: String,
    /// 2 for argparse-style usage errors, 1 for unknown arguments.
    pub exit_code: i32,
}

impl fmt::Display for UsageError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.message)
    }
}

fn usage(message: String) -> UsageError {
    UsageError { message, exit_code: 2 }
}

enum Matched {
    Positive(&'static Flag),
    Negative(&'static Flag),
}

/// Find the option a command-line word names: exact spelling first, then a unique prefix.
fn lookup(word: &str) -> Result<Option<Matched>, UsageError> {
    for f in flags::all() {
        if f.names.contains(&word) {
            return Ok(Some(Matched::Positive(f)));
        }
        if f.negations.contains(&word) {
            return Ok(Some(Matched::Negative(f)));
        }
    }
    if !word.starts_with("--") || word.len() < 3 {
        return Ok(None);
    }
    let mut hits: Vec<(&'static str, Matched)> = Vec::new();
    for f in flags::all() {
        for n in f.names.iter().filter(|n| n.starts_with(word)) {
            hits.push((n, Matched::Positive(f)));
        }
        for n in f.negations.iter().filter(|n| n.starts_with(word)) {
            hits.push((n, Matched::Negative(f)));
        }
    }
    match hits.len() {
        0 => Ok(None),
        1 => Ok(hits.pop().map(|(_, m)| m)),
        _ => {
            let names: Vec<&str> = hits.iter().map(|(n, _)| *n).collect();
            Err(usage(format!("ambiguous option: {word} could match {}", names.join(", "))))
        }
    }
}

/// Convert one textual value for `f`; `from_env` relaxes booleans the way Dynamo does.
pub fn convert(f: &Flag, raw: &str, from_env: bool) -> Result<Value, UsageError> {
    let what = if from_env {
        format!("environment variable {}", f.env.unwrap_or("?"))
    } else {
        format!("argument {}", f.names.join("/"))
    };
    let invalid = |ty: &str| usage(format!("{what}: invalid {ty} value: '{raw}'"));
    let check_choice = |v: &str| -> Result<(), UsageError> {
        if f.choices.is_empty() || f.choices.contains(&v) {
            return Ok(());
        }
        let list: Vec<String> = f.choices.iter().map(|c| format!("'{c}'")).collect();
        Err(usage(format!("{what}: invalid choice: '{v}' (choose from {})", list.join(", "))))
    };
    Ok(match f.kind {
        Kind::Bool => {
            let t = raw.trim().to_ascii_lowercase();
            if f.dest == "tokenizer_fallback" {
                // Dynamo parses this one strictly.
                match t.as_str() {
                    "1" | "true" | "on" | "yes" => Value::Bool(true),
                    "" | "0" | "false" | "off" | "no" => Value::Bool(false),
                    _ => return Err(invalid("boolean")),
                }
            } else {
                Value::Bool(matches!(t.as_str(), "true" | "1" | "yes" | "on"))
            }
        }
        Kind::Str => Value::Str(raw.to_string()),
        Kind::Choice | Kind::Ignored => {
            // `--router-prefill-load-model aic` is Dynamo's alias of `ais`.
            let v = if f.dest == "router_prefill_load_model" && raw == "aic" { "ais" } else { raw };
            check_choice(v)?;
            Value::Str(v.to_string())
        }
        Kind::Int => Value::Int(parse_int(raw).ok_or_else(|| invalid("int"))?),
        Kind::Float => Value::Float(parse_float(raw).ok_or_else(|| invalid("float"))?),
        Kind::NullableInt if raw.is_empty() || raw == "None" => Value::Null,
        Kind::NullableInt => Value::Int(parse_int(raw).ok_or_else(|| invalid("nullable_int"))?),
        Kind::NullableFloat if raw.is_empty() || raw == "None" => Value::Null,
        Kind::NullableFloat => Value::Float(parse_float(raw).ok_or_else(|| invalid("nullable_float"))?),
        Kind::List if from_env => Value::List(raw.split_whitespace().map(str::to_string).collect()),
        Kind::List => Value::List(vec![raw.to_string()]),
        Kind::Version => Value::Null,
    })
}

/// Python `int()`: optional sign, digits, underscores between digits, surrounding space.
fn parse_int(raw: &str) -> Option<i64> {
    let t = raw.trim();
    if t.is_empty() || t.starts_with('_') || t.ends_with('_') || t.contains("__") {
        return None;
    }
    t.replace('_', "").parse().ok()
}

/// Python `float()`: decimal or exponent notation, inf/nan spellings, surrounding space.
fn parse_float(raw: &str) -> Option<f64> {
    let t = raw.trim();
    if t.is_empty() {
        return None;
    }
    let lower = t.to_ascii_lowercase();
    let body = lower.trim_start_matches(['+', '-']);
    if matches!(body, "inf" | "infinity" | "nan") {
        return lower.parse().ok().or(Some(if lower.starts_with('-') { f64::NEG_INFINITY } else { f64::INFINITY }));
    }
    if !t.bytes().all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-')) {
        return None;
    }
    t.parse().ok()
}

/// Parse `args` (without the program name) with `env` as the environment.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<Parsed, UsageError> {
    let mut values: Vec<(&'static Flag, Value, Source)> = Vec::new();
    let mut warnings = Vec::new();
    for f in flags::all() {
        let from_env = match f.env.and_then(env) {
            Some(raw) if f.kind != Kind::Version => Some(convert(f, &raw, true)?),
            _ => None,
        };
        match from_env {
            Some(v) => values.push((f, v, Source::Env)),
            None => values.push((f, Value::from_default(f.default), Source::Default)),
        }
    }
    let mut action = Action::Run;
    let mut cli_lists: Vec<(&'static str, Vec<String>)> = Vec::new();
    let mut unknown: Vec<String> = Vec::new();
    let mut i = 0;
    while i < args.len() {
        let arg = &args[i];
        i += 1;
        if arg == "-h" || arg == "--help" {
            action = Action::Help;
            continue;
        }
        if !arg.starts_with('-') || arg == "-" || arg == "--" {
            unknown.push(arg.clone());
            continue;
        }
        let (word, inline) = match arg.split_once('=') {
            Some((w, v)) if w.starts_with("--") => (w, Some(v.to_string())),
            _ => (arg.as_str(), None),
        };
        let Some(m) = lookup(word)? else {
            unknown.push(arg.clone());
            continue;
        };
        let (f, negative) = match m {
            Matched::Positive(f) => (f, false),
            Matched::Negative(f) => (f, true),
        };
        match f.kind {
            Kind::Version => {
                if action == Action::Run {
                    action = Action::Version;
                }
                continue;
            }
            Kind::Bool => {
                if inline.is_some() {
                    return Err(usage(format!(
                        "argument {}: ignored explicit argument '{}'",
                        word,
                        inline.unwrap_or_default()
                    )));
                }
                set(&mut values, f, Value::Bool(!negative));
                continue;
            }
            _ => {}
        }
        let raw = match inline {
            Some(v) => v,
            None => match args.get(i) {
                Some(v) if !v.starts_with("--") => {
                    i += 1;
                    v.clone()
                }
                _ => return Err(usage(format!("argument {}: expected one argument", f.names.join("/")))),
            },
        };
        let v = convert(f, &raw, false)?;
        match f.kind {
            Kind::Ignored => {
                warnings.push(format!("{word} is no longer supported and is ignored (as in dynamo.frontend 1.6.1)"))
            }
            Kind::List => match cli_lists.iter_mut().find(|(d, _)| *d == f.dest) {
                Some((_, l)) => l.push(raw),
                None => cli_lists.push((f.dest, vec![raw])),
            },
            _ => set(&mut values, f, v),
        }
    }
    for (dest, list) in cli_lists {
        if let Some(f) = flags::by_dest(dest) {
            set(&mut values, f, Value::List(list));
        }
    }
    if action == Action::Run && !unknown.is_empty() {
        let list: Vec<String> = unknown.iter().map(|u| format!("'{u}'")).collect();
        return Err(UsageError {
            message: format!("Unknown arguments specified: [{}]", list.join(", ")),
            exit_code: 1,
        });
    }
    Ok(Parsed { action, values, warnings })
}

fn set(values: &mut [(&'static Flag, Value, Source)], f: &'static Flag, v: Value) {
    if let Some(slot) = values.iter_mut().find(|(g, _, _)| g.dest == f.dest) {
        slot.1 = v;
        slot.2 = Source::Cli;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn p(args: &[&str], env: &[(&str, &str)]) -> Result<Parsed, UsageError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        parse(&args, &move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
    }

    #[test]
    fn cli_beats_env_beats_default() {
        assert_eq!(p(&[], &[]).unwrap().get("http_port"), &Value::Int(8000));
        assert_eq!(p(&[], &[("DYN_HTTP_PORT", "9000")]).unwrap().get("http_port"), &Value::Int(9000));
        let both = p(&["--http-port", "9100"], &[("DYN_HTTP_PORT", "9000")]).unwrap();
        assert_eq!(both.get("http_port"), &Value::Int(9100));
        assert_eq!(both.source("http_port"), Source::Cli);
    }

    #[test]
    fn spellings() {
        assert_eq!(p(&["--http-port=81"], &[]).unwrap().get("http_port"), &Value::Int(81));
        assert_eq!(p(&["--no-kv-events"], &[]).unwrap().get("use_kv_events"), &Value::Bool(false));
        assert_eq!(p(&["--no-router-kv-events"], &[]).unwrap().get("use_kv_events"), &Value::Bool(false));
        assert_eq!(p(&["-i"], &[]).unwrap().get("interactive"), &Value::Bool(true));
        assert_eq!(p(&["--aic-tp-size", "4"], &[]).unwrap().get("ais_tp_size"), &Value::Int(4));
        assert_eq!(p(&["--http-p", "82"], &[]).unwrap().get("http_port"), &Value::Int(82));
        assert!(p(&["--router-t", "x"], &[]).is_err(), "ambiguous prefix must fail");
        assert_eq!(
            p(&["--router-prefill-load-model", "aic"], &[]).unwrap().get("router_prefill_load_model"),
            &Value::Str("ais".into())
        );
    }

    #[test]
    fn errors() {
        let e = p(&["--http-port", "abc"], &[]).unwrap_err();
        assert_eq!(e.exit_code, 2);
        assert!(e.message.contains("invalid int value: 'abc'"), "{}", e.message);
        let e = p(&["--router-mode", "bogus"], &[]).unwrap_err();
        assert!(e.message.contains("invalid choice: 'bogus'"), "{}", e.message);
        let e = p(&["--what"], &[]).unwrap_err();
        assert_eq!(e.exit_code, 1);
        assert!(e.message.contains("Unknown arguments specified: ['--what']"));
        assert!(p(&["--http-port"], &[]).is_err());
        assert!(p(&[], &[("DYN_HTTP_PORT", "x")]).is_err());
        assert!(p(&[], &[("DYN_ROUTER_MODE", "bogus")]).is_err());
    }

    #[test]
    fn env_kinds() {
        assert_eq!(p(&[], &[("DYN_KSERVE_GRPC_SERVER", "yes")]).unwrap().get("kserve_grpc_server"), &Value::Bool(true));
        assert_eq!(
            p(&[], &[("DYN_KSERVE_GRPC_SERVER", "nah")]).unwrap().get("kserve_grpc_server"),
            &Value::Bool(false)
        );
        assert!(p(&[], &[("DYN_TOKENIZER_FALLBACK", "nah")]).is_err());
        assert_eq!(
            p(&[], &[("DYN_ACTIVE_DECODE_BLOCKS_THRESHOLD", "None")]).unwrap().get("active_decode_blocks_threshold"),
            &Value::Null
        );
        assert_eq!(
            p(&[], &[("DYN_FRONTEND_ROUTE_EXTENSIONS", "a.b  c.d")]).unwrap().get("frontend_route_extensions"),
            &Value::List(vec!["a.b".into(), "c.d".into()])
        );
        let l = p(&["--frontend-route-extension", "x", "--frontend-route-extension", "y"], &[]).unwrap();
        assert_eq!(l.get("frontend_route_extensions"), &Value::List(vec!["x".into(), "y".into()]));
    }

    #[test]
    fn python_defaults() {
        assert_eq!(python_str(Default::Float(1.0)), "1.0");
        assert_eq!(python_str(Default::Float(0.75)), "0.75");
        assert_eq!(python_str(Default::Bool(true)), "True");
        assert_eq!(python_str(Default::EmptyList), "[]");
    }
}
