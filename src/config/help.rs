//! `--help` text, generated from the option table.
//!
//! Each option shows its spellings, what it does, and `env var: X | default: Y` in the same
//! words Dynamo's help uses, so operators can grep either. switchyard's own options are listed
//! under their own heading and marked as extensions.

use std::fmt::Write;

use super::flags::{self, Flag, Kind};
use super::parse::python_str;

fn metavar(f: &Flag) -> String {
    if f.choices.is_empty() {
        f.dest.to_ascii_uppercase()
    } else {
        format!("{{{}}}", f.choices.join(","))
    }
}

fn write_flag(out: &mut String, f: &Flag) {
    let mut spellings: Vec<String> = Vec::new();
    for n in f.names {
        match f.kind {
            Kind::Bool | Kind::Version => spellings.push((*n).to_string()),
            _ => spellings.push(format!("{n} {}", metavar(f))),
        }
    }
    spellings.extend(f.negations.iter().map(|n| n.to_string()));
    let _ = writeln!(out, "  {}", spellings.join(", "));
    let mut text = f.help.to_string();
    if f.deprecated {
        text.push_str(" (deprecated in Dynamo)");
    }
    if f.extension {
        text.push_str(" [switchyard extension]");
    }
    let _ = writeln!(out, "        {text}");
    if f.kind == Kind::Version {
        return;
    }
    let default = python_str(f.default);
    match f.env {
        Some(env) => {
            let _ = writeln!(out, "        env var: {env} | default: {default}");
        }
        None => {
            let _ = writeln!(out, "        default: {default}");
        }
    }
}

/// The whole help text.
pub fn render() -> String {
    let mut out = String::new();
    out.push_str("usage: switchyard [OPTIONS]\n       switchyard --help | --version\n\n");
    out.push_str(
        "switchyard: thread-per-core LLM inference frontend (HTTP + pre-processor + router),\n\
         a drop-in replacement for `python -m dynamo.frontend` 1.6.1. Every option below takes\n\
         its value from the command line, else from its environment variable, else the default.\n\n",
    );
    out.push_str("Dynamo frontend options:\n");
    for f in flags::DYNAMO_FLAGS {
        write_flag(&mut out, f);
    }
    out.push_str("\nswitchyard extensions (not in dynamo.frontend):\n");
    for f in flags::EXTENSION_FLAGS {
        write_flag(&mut out, f);
    }
    out.push_str("\nEnvironment-only settings (as in Dynamo 1.6.1):\n");
    for (env, default, help) in flags::DYNAMO_ENV_SETTINGS {
        let _ = writeln!(out, "  {env}\n        {help}\n        default: {default}");
    }
    out.push_str(
        "  DYN_HTTP_SVC_{HEALTH,LIVE,METRICS,MODELS,CHAT,CMP}_PATH\n        \
         Override the path of a route (e.g. DYN_HTTP_SVC_HEALTH_PATH=/healthz).\n",
    );
    out
}
