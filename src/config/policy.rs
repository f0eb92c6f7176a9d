//! `--router-policy-config FILE` (`DYN_ROUTER_POLICY_CONFIG`): the YAML file Dynamo 1.6.1
//! reads at start-up for router settings, policy classes and worker-selection instances
//! (docs/dynamo/router-policy-config.md). Read once, at start-up, before validation.
//!
//! Built here:
//! * `router:` — a subset of the router options by their `dest` names; a value set there
//!   wins over the command line and the environment (1.6.1: "explicit YAML settings win").
//!   Read in every router mode, as 1.6.1's argument checks read it.
//! * `worker_selection:` (kv mode) — instances of `dynamo-default-cost-fn`, whose parameters
//!   are the cost options, and the `aggregated` selection naming one: its parameters replace
//!   those options.
//!
//! Refused by name: policy classes and their queues (`default_policy_family`,
//! `uncached_isl_buckets`, `policy_classes`, `models`), `request_classifier`, the other
//! linked selector types (`dynamo-two-tier-cost-fn`, `thunderagent`), instances selected for
//! the `prefill`, `decode` or `encode` pools, and a non-zero `shared_cache_multiplier`.

use serde_json::{Map, Value as Json};

use super::flags::{self, Kind};
use super::parse::{Parsed, Source, Value};
use super::{invalid, text, ConfigError};

/// The settings a `router:` section may hold (1.6.1's list).
const ROUTER_SETTINGS: [&str; 20] = [
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    "use_kv_events",
    "router_replica_sync",
    "router_track_active_blocks",
    "router_track_output_blocks",
    "router_assume_kv_reuse",
    "router_track_prefill_tokens",
    "router_tracking_hash",
    "router_tracking_key_file",
    "router_tracking_key_id",
    "router_prefill_load_model",
    "router_ttl_secs",
    "router_approximate_cache_policy",
    "router_event_threads",
    "use_remote_indexer",
    "serve_indexer",
    "enable_session_prefix_index",
    "shared_cache_type",
    "router_predicted_ttl_secs",
];

const TOP_LEVEL: [&str; 7] = [
    "router",
    "default_policy_family",
    "policy_classes",
    "uncached_isl_buckets",
    "models",
    "worker_selection",
    "request_classifier",
];

const LINKED_TYPES: [&str; 3] = ["dynamo-default-cost-fn", "dynamo-two-tier-cost-fn", "thunderagent"];

/// `dynamo-default-cost-fn`'s parameters, and the option each one sets.
const COST_PARAMETERS: [(&str, &str); 8] = [
    ("overlap_score_credit", "overlap_score_credit"),
    ("overlap_score_credit_decay", "overlap_score_credit_decay"),
    ("prefill_load_scale", "prefill_load_scale"),
    ("decode_active_request_weight", "decode_active_request_weight"),
    ("host_cache_hit_weight", "host_cache_hit_weight"),
    ("disk_cache_hit_weight", "disk_cache_hit_weight"),
    ("shared_cache_multiplier", ""),
    ("router_temperature", "router_temperature"),
];

fn unbuilt(what: &str) -> ConfigError {
    invalid(format!(
        "--router-policy-config: {what} not implemented in this switchyard build \
         (refusing to ignore it silently)"
    ))
}

/// Reads the file `--router-policy-config` names (if any) and applies it to `p`.
pub(super) fn apply(p: &mut Parsed) -> Result<(), ConfigError> {
    let Some(path) = text(p, "router_policy_config").map(str::to_string) else { return Ok(()) };
    let body = std::fs::read_to_string(&path).map_err(|e| invalid(format!("--router-policy-config {path}: {e}")))?;
    let doc = crate::util::yaml::parse(&body).map_err(|e| invalid(format!("--router-policy-config {path}: {e}")))?;
    let Json::Object(doc) = doc else { return Err(invalid("--router-policy-config must contain a YAML mapping")) };
    if let Some(k) = doc.keys().find(|k| !TOP_LEVEL.contains(&k.as_str())) {
        return Err(invalid(format!(
            "invalid router policy config: unknown field `{k}`, expected one of {}",
            TOP_LEVEL.map(|t| format!("`{t}`")).join(", ")
        )));
    }
    if doc.is_empty() {
        return Err(invalid(
            "router policy config must define router settings, a root profile, at least one model profile, \
             worker_selection, or request_classifier",
        ));
    }
    match doc.get("router") {
        None | Some(Json::Null) => {}
        Some(Json::Object(settings)) => router_settings(p, settings)?,
        Some(_) => return Err(invalid("router must contain a YAML mapping")),
    }
    for key in ["default_policy_family", "uncached_isl_buckets", "policy_classes", "models"] {
        if doc.contains_key(key) {
            return Err(unbuilt(
                "policy classes and their queues (default_policy_family, uncached_isl_buckets, policy_classes, \
                 models) are",
            ));
        }
    }
    if doc.contains_key("request_classifier") {
        return Err(unbuilt("request_classifier is"));
    }
    if text(p, "router_mode") == Some("kv") {
        if let Some(ws) = doc.get("worker_selection") {
            worker_selection(p, ws)?;
        }
    }
    Ok(())
}

/// Sets `dest` to `v` in `p`, as if given on the command line.
fn set(p: &mut Parsed, dest: &str, v: Value) {
    if let Some(slot) = p.values.iter_mut().find(|(f, _, _)| f.dest == dest) {
        slot.1 = v;
        slot.2 = Source::Cli;
    }
}

/// A YAML value as the value of a `kind` option; `Err` names what was expected.
fn convert(kind: Kind, choices: &[&str], v: &Json) -> Result<Value, String> {
    match (kind, v) {
        (Kind::Bool, Json::Bool(b)) => Ok(Value::Bool(*b)),
        (Kind::Int | Kind::NullableInt, Json::Number(n)) if n.is_i64() => Ok(Value::Int(n.as_i64().unwrap_or(0))),
        (Kind::Float | Kind::NullableFloat, Json::Number(n)) => Ok(Value::Float(n.as_f64().unwrap_or(0.0))),
        (Kind::NullableFloat | Kind::NullableInt | Kind::Str, Json::Null) => Ok(Value::Null),
        (Kind::Str, Json::String(s)) => Ok(Value::Str(s.clone())),
        (Kind::Choice, Json::String(s)) if choices.contains(&s.as_str()) => Ok(Value::Str(s.clone())),
        (Kind::Choice, _) => Err(format!("one of {choices:?}")),
        (Kind::Bool, _) => Err("bool".into()),
        (Kind::Int | Kind::NullableInt, _) => Err("int".into()),
        (Kind::Float | Kind::NullableFloat, _) => Err("float".into()),
        _ => Err("str".into()),
    }
}

fn router_settings(p: &mut Parsed, settings: &Map<String, Json>) -> Result<(), ConfigError> {
    let mut unknown: Vec<&str> = settings.keys().map(String::as_str).filter(|k| !ROUTER_SETTINGS.contains(k)).collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        let list: Vec<String> = unknown.iter().map(|k| format!("'{k}'")).collect();
        return Err(invalid(format!("unknown router setting(s): [{}]", list.join(", "))));
    }
    for (name, v) in settings {
        let flag = flags::by_dest(name).ok_or_else(|| unbuilt(&format!("router setting {name} is")))?;
        let value = convert(flag.kind, flag.choices, v).map_err(|expected| {
            invalid(format!("invalid router settings: Expected `{expected}`, got `{v}` - at `$.{name}`"))
        })?;
        set(p, name, value);
    }
    Ok(())
}

fn worker_selection(p: &mut Parsed, ws: &Json) -> Result<(), ConfigError> {
    let bad = |why: String| invalid(format!("invalid router policy config: {why}"));
    let Json::Object(ws) = ws else { return Err(bad("worker_selection must be a mapping".into())) };
    let empty = Map::new();
    let mut instances: Vec<(&str, &Map<String, Json>)> = Vec::new();
    for inst in ws.get("instances").and_then(Json::as_array).into_iter().flatten() {
        let name = inst["name"].as_str().ok_or_else(|| bad("a worker_selection instance has no name".into()))?;
        if name == "default" {
            return Err(invalid(
                "invalid router policy config: worker_selection instance name 'default' is reserved for \
                 Dynamo's built-in selector",
            ));
        }
        let kind = inst["type"].as_str().unwrap_or("");
        if !LINKED_TYPES.contains(&kind) {
            return Err(invalid(format!(
                "unknown worker-selection policy type \"{kind}\"; linked policy types: {}",
                LINKED_TYPES.join(", ")
            )));
        }
        if kind != "dynamo-default-cost-fn" {
            return Err(unbuilt(&format!("worker-selection policy type \"{kind}\" is")));
        }
        let params = match &inst["parameters"] {
            Json::Null => &empty,
            Json::Object(m) => m,
            other => return Err(bad(format!("parameters of {name} must be a mapping, got {other}"))),
        };
        let invalid_params =
            |why: String| invalid(format!("invalid parameters for worker-selection policy type \"{kind}\": {why}"));
        for (k, v) in params {
            if !COST_PARAMETERS.iter().any(|(n, _)| n == k) {
                let expected: Vec<String> = COST_PARAMETERS.iter().map(|(n, _)| format!("`{n}`")).collect();
                return Err(invalid_params(format!("unknown field `{k}`, expected one of {}", expected.join(", "))));
            }
            if !v.is_number() {
                let shown = match v {
                    Json::String(s) => format!("string \"{s}\""),
                    other => other.to_string(),
                };
                return Err(invalid_params(format!("invalid type: {shown}, expected f64")));
            }
        }
        instances.push((name, params));
    }
    for pool in ["prefill", "decode", "encode"] {
        if let Some(name) = ws.get(pool).and_then(Json::as_str).filter(|n| *n != "default") {
            return Err(unbuilt(&format!("worker_selection.{pool} (an instance for one pool, here {name:?}) is")));
        }
    }
    let Some(chosen) = ws.get("aggregated").and_then(Json::as_str).filter(|n| *n != "default") else {
        return Ok(());
    };
    let (_, params) = instances
        .iter()
        .find(|(n, _)| *n == chosen)
        .ok_or_else(|| bad(format!("worker_selection.aggregated names no instance {chosen:?}")))?;
    for (name, dest) in COST_PARAMETERS {
        let Some(v) = params.get(name).and_then(Json::as_f64) else { continue };
        if dest.is_empty() {
            if v != 0.0 {
                return Err(unbuilt("shared_cache_multiplier (a shared KV cache tier) is"));
            }
            continue;
        }
        set(p, dest, Value::Float(v));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::super::{load, Config};

    fn with(yaml: &str, args: &[&str]) -> Result<Config, String> {
        let path = std::env::temp_dir().join(format!("switchyard-policy-{}-{}.yaml", std::process::id(), yaml.len()));
        std::fs::write(&path, yaml).unwrap();
        let mut a: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        a.extend(["--router-policy-config".to_string(), path.to_str().unwrap().to_string()]);
        let r = load(&a, &|_| None).map(|(_, c, _)| c.expect("run")).map_err(|e| e.message);
        std::fs::remove_file(&path).unwrap();
        r
    }

    const KV: &[&str] = &["--router-mode", "kv"];

    #[test]
    fn router_settings_win_over_the_command_line() {
        let c = with(
            "router:\n  host_cache_hit_weight: 0.5\n  router_track_output_blocks: true\n",
            &["--router-mode", "kv", "--router-host-cache-hit-weight", "0.9"],
        )
        .unwrap();
        assert_eq!(c.kv_cost.host_cache_hit_weight, 0.5);
        assert!(c.kv_cost.track_output_blocks);
        // The settings then meet the usual checks, with 1.6.1's messages.
        assert_eq!(
            with("router:\n  router_event_threads: 0\n", KV).unwrap_err(),
            "router_event_threads must be at least 1"
        );
        assert_eq!(
            with("router:\n  bogus_setting: 1\n  another: 2\n", KV).unwrap_err(),
            "unknown router setting(s): ['another', 'bogus_setting']"
        );
        assert!(with("router:\n  router_event_threads: many\n", KV)
            .unwrap_err()
            .starts_with("invalid router settings:"));
        assert_eq!(with("router: 3\n", KV).unwrap_err(), "router must contain a YAML mapping");
        assert_eq!(with("- a\n", KV).unwrap_err(), "--router-policy-config must contain a YAML mapping");
        assert!(with("{}\n", KV).unwrap_err().starts_with("router policy config must define router settings"));
        assert!(with("routers: {}\n", KV).unwrap_err().contains("unknown field `routers`"));
    }

    #[test]
    fn the_default_cost_function_sets_the_cost_options() {
        let ws = |params: &str, pool: &str| {
            format!("worker_selection:\n  {pool}: mine\n  instances:\n  - name: mine\n    type: dynamo-default-cost-fn\n    parameters: {params}\n")
        };
        let c = with(&ws("{prefill_load_scale: 2.0, router_temperature: 0.5}", "aggregated"), KV).unwrap();
        assert_eq!((c.kv_cost.prefill_load_scale, c.kv_cost.temperature), (2.0, 0.5));
        // 1.6.1's words for what it refuses.
        let e = with(&ws("{bogus_param: 1}", "aggregated"), KV).unwrap_err();
        assert!(
            e.starts_with(
                "invalid parameters for worker-selection policy type \"dynamo-default-cost-fn\": unknown field `bogus_param`"
            ),
            "{e}"
        );
        let e = with(&ws("{router_temperature: hot}", "aggregated"), KV).unwrap_err();
        assert!(e.ends_with("invalid type: string \"hot\", expected f64"), "{e}");
        let e = with(&ws("{}", "aggregated").replace("name: mine", "name: default"), KV).unwrap_err();
        assert!(e.contains("'default' is reserved"), "{e}");
        let e = with(&ws("{}", "aggregated").replace("dynamo-default-cost-fn", "mypolicy"), KV).unwrap_err();
        assert_eq!(
            e,
            "unknown worker-selection policy type \"mypolicy\"; linked policy types: dynamo-default-cost-fn, \
             dynamo-two-tier-cost-fn, thunderagent"
        );
        // Refused by name.
        for (yaml, what) in [
            (ws("{}", "aggregated").replace("dynamo-default-cost-fn", "thunderagent"), "thunderagent"),
            (ws("{}", "prefill"), "worker_selection.prefill"),
            (ws("{shared_cache_multiplier: 1.0}", "aggregated"), "shared_cache_multiplier"),
            ("models: {m: {}}\n".to_string(), "policy classes"),
            ("request_classifier: {type: x}\n".to_string(), "request_classifier"),
        ] {
            let e = with(&yaml, KV).unwrap_err();
            assert!(e.contains(what) && e.contains("not implemented"), "{e}");
        }
        // Outside kv mode the router is not built: its selection is not read.
        with(&ws("{bogus_param: 1}", "aggregated"), &[]).unwrap();
        assert!(with("router: {}\n", &[]).is_ok());
        let e = load(&["--router-policy-config".into(), "/nonexistent/policy.yaml".into()], &|_| None).unwrap_err();
        assert!(e.message.contains("/nonexistent/policy.yaml"), "{}", e.message);
    }
}
