//! Every row of Dynamo 1.6.1's option table (docs/dynamo/frontend-options.md, read off
//! `python -m dynamo.frontend` by introspecting its parser) against switchyard's table, its
//! `--help` output and its parser: same spellings, same env var, same default, same choices.

use std::process::Command;

use switchyard::config::flags::{self, Kind};
use switchyard::config::parse::{parse, python_str, Source, Value};

struct Row {
    spellings: Vec<String>,
    env: Option<String>,
    default: String,
    choices: Vec<String>,
}

fn rows() -> Vec<Row> {
    let text = include_str!("../docs/dynamo/frontend-options.md");
    let mut rows = Vec::new();
    for line in text.lines() {
        if !(line.starts_with("| --") || line.starts_with("| -i")) {
            continue;
        }
        let cols: Vec<&str> = line.trim().trim_matches('|').split('|').map(str::trim).collect();
        assert_eq!(cols.len(), 4, "row shape: {line}");
        let unquote = |s: &str| s.trim_matches('\'').to_string();
        rows.push(Row {
            spellings: cols[0].split(" / ").map(str::to_string).collect(),
            env: (!cols[1].is_empty()).then(|| cols[1].to_string()),
            default: unquote(cols[2]),
            choices: if cols[3].is_empty() { vec![] } else { cols[3].split(',').map(str::to_string).collect() },
        });
    }
    rows
}

fn find(spelling: &str) -> &'static flags::Flag {
    flags::DYNAMO_FLAGS
        .iter()
        .find(|f| f.names.contains(&spelling) || f.negations.contains(&spelling))
        .unwrap_or_else(|| panic!("{spelling} is not in switchyard's table"))
}

#[test]
fn table_has_every_dynamo_option_exactly() {
    let rows = rows();
    assert_eq!(rows.len(), 101, "the recorded table lists 101 options");
    assert_eq!(flags::DYNAMO_FLAGS.len(), rows.len(), "one switchyard row per Dynamo option");
    for row in &rows {
        let f = find(&row.spellings[0]);
        let mut ours: Vec<String> = f.names.iter().chain(f.negations.iter()).map(|s| s.to_string()).collect();
        let mut theirs = row.spellings.clone();
        ours.sort();
        theirs.sort();
        assert_eq!(ours, theirs, "spellings of {}", row.spellings[0]);
        assert_eq!(f.env.map(str::to_string), row.env, "env var of {}", row.spellings[0]);
        assert_eq!(python_str(f.default), row.default, "default of {}", row.spellings[0]);
        let choices: Vec<String> = f.choices.iter().map(|s| s.to_string()).collect();
        assert_eq!(choices, row.choices, "choices of {}", row.spellings[0]);
        assert!(!f.extension);
    }
    for f in flags::EXTENSION_FLAGS {
        assert!(f.extension);
        assert!(f.env.is_some_and(|e| e.starts_with("SWITCHYARD_")), "{} needs a SWITCHYARD_ env var", f.primary());
    }
}

#[test]
fn help_shows_every_option_with_env_and_default() {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard")).arg("--help").output().expect("run switchyard --help");
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for row in rows() {
        let f = find(&row.spellings[0]);
        let start = help
            .lines()
            .position(|l| {
                let l = l.trim_start();
                l.starts_with(f.names[0]) && row.spellings.iter().all(|s| l.contains(s.as_str()))
            })
            .unwrap_or_else(|| panic!("--help has no line with all of {:?}", row.spellings));
        if row.spellings[0] == "--version" {
            continue;
        }
        let block: Vec<&str> = help.lines().skip(start + 1).take(3).collect();
        let want = match &row.env {
            Some(env) => format!("env var: {env} | default: {}", row.default),
            None => format!("default: {}", row.default),
        };
        assert!(block.iter().any(|l| l.trim() == want), "--help for {} lacks `{want}`: {block:?}", row.spellings[0]);
        for c in &row.choices {
            assert!(
                help.lines().nth(start).unwrap().contains(c.as_str()),
                "--help for {} lacks choice {c}",
                row.spellings[0]
            );
        }
    }
    for f in flags::EXTENSION_FLAGS {
        assert!(help.contains(f.primary()) && help.contains(f.env.unwrap()));
    }
    assert!(help.contains("[switchyard extension]"));
}

/// A value of the right kind for `f` that differs from its default, and how it parses.
fn sample(f: &flags::Flag) -> Option<(String, Value)> {
    Some(match f.kind {
        Kind::Version | Kind::Ignored => return None,
        Kind::Bool => return None,
        Kind::Choice => {
            let c = f.choices.iter().find(|c| Value::Str(c.to_string()) != Value::from_default(f.default))?;
            (c.to_string(), Value::Str(c.to_string()))
        }
        Kind::Str => ("sample-value".into(), Value::Str("sample-value".into())),
        Kind::Int | Kind::NullableInt => ("7".into(), Value::Int(7)),
        Kind::Float | Kind::NullableFloat => ("0.5".into(), Value::Float(0.5)),
        Kind::List => ("mod.ext".into(), Value::List(vec!["mod.ext".into()])),
    })
}

#[test]
fn parser_takes_every_spelling_and_env_var() {
    let no_env = |_: &str| None;
    for row in rows() {
        let f = find(&row.spellings[0]);
        if f.kind == Kind::Bool {
            let flip = !matches!(Value::from_default(f.default), Value::Bool(true));
            for s in f.names.iter().filter(|s| s.starts_with("--") || **s == "-i") {
                let p = parse(&[s.to_string()], &no_env).unwrap();
                assert_eq!(p.get(f.dest), &Value::Bool(true), "{s}");
            }
            for s in f.negations {
                let p = parse(&[s.to_string()], &no_env).unwrap();
                assert_eq!(p.get(f.dest), &Value::Bool(false), "{s}");
            }
            if let Some(env) = f.env {
                let val = if flip { "true" } else { "false" };
                let p = parse(&[], &|k| (k == env).then(|| val.to_string())).unwrap();
                assert_eq!(p.get(f.dest), &Value::Bool(flip), "{env}={val}");
                assert_eq!(p.source(f.dest), Source::Env);
            }
            continue;
        }
        let Some((text, want)) = sample(f) else { continue };
        for s in f.names {
            let p = parse(&[s.to_string(), text.clone()], &no_env).unwrap();
            assert_eq!(p.get(f.dest), &want, "{s} {text}");
            assert_eq!(p.source(f.dest), Source::Cli);
        }
        if let Some(env) = f.env {
            let p = parse(&[], &|k| (k == env).then(|| text.clone())).unwrap();
            assert_eq!(p.get(f.dest), &want, "{env}={text}");
            // The command line beats the environment (which holds another valid value).
            let other = match f.default {
                _ if !f.choices.is_empty() => f.choices.iter().find(|c| **c != text).unwrap().to_string(),
                flags::Default::Str(s) => s.to_string(),
                flags::Default::Int(i) => i.to_string(),
                flags::Default::Float(x) => x.to_string(),
                _ => text.clone() + "0",
            };
            let p = parse(&[f.names[0].to_string(), text.clone()], &|k| (k == env).then(|| other.clone()));
            assert_eq!(p.unwrap().get(f.dest), &want, "CLI over {env}");
        }
        // Defaults come back untouched when nothing is given.
        let p = parse(&[], &no_env).unwrap();
        assert_eq!(p.get(f.dest), &Value::from_default(f.default));
    }
}

#[test]
fn version_and_dump_config() {
    let out = Command::new(env!("CARGO_BIN_EXE_switchyard")).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), format!("switchyard {}", env!("CARGO_PKG_VERSION")));

    let dir = std::env::temp_dir().join(format!("sy-dump-{}", std::process::id()));
    let file = dir.join("nested/config.json");
    let args: Vec<String> =
        ["--dump-config-to", file.to_str().unwrap(), "--http-port", "8123"].iter().map(|s| s.to_string()).collect();
    let (_, cfg, _) = switchyard::config::load(&args, &|k| (k == "DYN_HTTP_HOST").then(|| "127.0.0.9".into())).unwrap();
    let cfg = cfg.unwrap();
    cfg.write_dump().unwrap();
    let v: serde_json::Value = serde_json::from_slice(&std::fs::read(&file).unwrap()).unwrap();
    assert_eq!(v["config"]["http_port"], 8123);
    assert_eq!(v["config"]["http_host"], "127.0.0.9");
    assert_eq!(v["config"]["router_mode"], "round-robin");
    assert_eq!(v["config"]["use_kv_events"], true);
    assert_eq!(v["config"]["frontend_route_extensions"], serde_json::json!([]));
    let _ = std::fs::remove_dir_all(dir);
}

#[test]
fn startup_validations_exit_non_zero_with_messages() {
    let run = |args: &[&str]| {
        let out =
            Command::new(env!("CARGO_BIN_EXE_switchyard")).args(args).env_remove("DYN_HTTP_PORT").output().unwrap();
        (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
    };
    let (code, err) = run(&["--tls-key-path", "/k.pem"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--tls-cert-path and --tls-key-path must be provided together"), "{err}");
    let (code, err) = run(&["--model-path", "/nonexistent/dir"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("model-path must be a valid directory on disk"), "{err}");
    // A directory without a model in it stops start-up as 1.6.1's local model load does.
    let empty = std::env::temp_dir().join(format!("switchyard-flags-empty-{}", std::process::id()));
    std::fs::create_dir_all(&empty).unwrap();
    let (code, err) = run(&["--model-path", empty.to_str().unwrap()]);
    std::fs::remove_dir_all(&empty).unwrap();
    assert_eq!(code, Some(1));
    assert!(err.contains(&format!("unable to extract config.json from directory {}", empty.display())), "{err}");
    let (code, err) = run(&["--router-mode", "nope"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("invalid choice: 'nope'"), "{err}");
    let (code, err) = run(&["--bogus-flag"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("Unknown arguments specified"), "{err}");
    let (code, err) = run(&["--router-mode", "kv", "--router-host-cache-hit-weight", "2"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("host_cache_hit_weight must be between 0 and 1"), "{err}");
    // Disaggregated serving: what is not built is named (`default` selection is accepted:
    // config's own tests).
    let (code, err) = run(&["--router-prefill-policy", "cache-first"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--router-prefill-policy cache-first"), "{err}");
    let (code, err) = run(&["--router-conditional-disagg"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--router-conditional-disagg requires --router-mode=kv"), "{err}");
    let (code, err) =
        run(&["--router-mode", "kv", "--router-conditional-disagg", "--router-conditional-disagg-config", "[1]"]);
    assert_eq!(code, Some(2));
    assert!(err.contains("--router-conditional-disagg-config must be a JSON object"), "{err}");
    // --router-policy-config: what is not built is named; what is built is checked.
    let policy = std::env::temp_dir().join(format!("switchyard-flags-policy-{}.yaml", std::process::id()));
    std::fs::write(&policy, "request_classifier: {type: thunderagent, parameters: {pause_target: 0.99}}\n").unwrap();
    let (code, err) = run(&["--router-mode", "kv", "--router-policy-config", policy.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(
        err.contains(
            "invalid parameters for request-classifier type \"thunderagent\": invalid ThunderAgent configuration: \
             pause_target must not exceed pause_threshold"
        ),
        "{err}"
    );
    std::fs::write(&policy, "router: {host_cache_hit_weight: 3}\n").unwrap();
    let (code, err) = run(&["--router-mode", "kv", "--router-policy-config", policy.to_str().unwrap()]);
    assert_eq!(code, Some(1));
    assert!(err.contains("host_cache_hit_weight must be between 0 and 1"), "{err}");
    std::fs::remove_file(&policy).unwrap();
    // The served indexer: 1.6.1's own checks, then the combinations not built, by name.
    let (code, err) = run(&["--serve-indexer"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--serve-indexer requires --router-mode=kv"), "{err}");
    let (code, err) = run(&["--router-mode", "kv", "--serve-indexer", "--use-remote-indexer"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--serve-indexer and --use-remote-indexer are mutually exclusive"), "{err}");
    for flag in ["--serve-indexer", "--use-remote-indexer"] {
        let (code, err) = run(&["--router-mode", "kv", flag, "--no-router-kv-events"]);
        assert_eq!(code, Some(1));
        assert!(err.contains(&format!("{flag} with --no-router-kv-events")), "{err}");
    }
    // Router options 1.6.1 checks in kv mode, with its messages; two JetStream options of
    // earlier releases that 1.6.1 does not have.
    let (code, err) = run(&["--router-mode", "kv", "--router-event-threads", "0"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("router_event_threads must be at least 1"), "{err}");
    let (code, err) = run(&["--router-mode", "kv", "--no-router-track-active-blocks", "--router-track-output-blocks"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("router_track_output_blocks requires router_track_active_blocks=true"), "{err}");
    let (code, err) = run(&["--router-mode", "kv", "--no-router-kv-events", "--router-predicted-ttl-secs", "3"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("router_predicted_ttl_secs requires use_kv_events=true"), "{err}");
    let (code, err) = run(&["--router-mode", "kv", "--router-predicted-ttl-secs=-1"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("router_predicted_ttl_secs must be greater than or equal to 0"), "{err}");
    for gone in ["--router-snapshot-threshold", "--router-reset-states"] {
        let (code, err) = run(&[gone, "10"]);
        assert_eq!(code, Some(1));
        assert!(err.contains("Unknown arguments specified"), "{gone}: {err}");
    }
    let (code, err) = run(&["--router-mode", "kv", "--serve-indexer", "--request-plane", "nats"]);
    assert_eq!(code, Some(1));
    assert!(err.contains("--serve-indexer with --request-plane nats"), "{err}");
}
