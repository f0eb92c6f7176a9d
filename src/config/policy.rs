//! `--router-policy-config FILE` (`DYN_ROUTER_POLICY_CONFIG`): the YAML file Dynamo 1.6.1
//! reads at start-up for router settings, policy classes and worker-selection instances
//! (docs/dynamo/router-policy-config.md). Read once, at start-up, before validation.
//!
//! Built here:
//! * `router:` — a subset of the router options by their `dest` names; a value set there
//!   wins over the command line and the environment (1.6.1: "explicit YAML settings win").
//!   Read in every router mode, as 1.6.1's argument checks read it.
//! * `worker_selection:` (kv mode) — instances of `dynamo-default-cost-fn` (their parameters
//!   replace the cost options of the same names) and `dynamo-two-tier-cost-fn`, and the
//!   instance each pool (aggregated, prefill, decode) selects; `--router-prefill-policy`,
//!   `--router-decode-policy` and `DYN_ROUTER_WORKER_SELECTION_POLICY` name instances too
//!   ([`selectors`]).
//!
//! * policy classes (kv mode): the root profile and `models:`, read by [`super::classes`].
//! * `request_classifier:` (kv mode): `thunderagent`, read by [`super::classifier`].
//!
//! Refused by name: an `encode` selection, and a non-zero `shared_cache_multiplier`.

use serde_json::{Map, Value as Json};

use super::flags::{self, Kind};
use super::parse::{Parsed, Source, Value};
use super::settings::{CostParams, Selector, Selectors};
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

/// What `--router-policy-config` gives beyond its `router:` settings.
#[derive(Default)]
pub(super) struct PolicyFile {
    /// `worker_selection`, for [`selectors`].
    pub selection: WorkerSelection,
    /// Policy classes (kv mode).
    pub classes: super::classes::ClassProfiles,
    /// `request_classifier` (kv mode).
    pub classifier: Option<super::classifier::ThunderConfig>,
}

/// Reads the file `--router-policy-config` names (if any): its `router:` settings are
/// applied to `p`, the rest returned.
pub(super) fn apply(p: &mut Parsed) -> Result<PolicyFile, ConfigError> {
    let Some(path) = text(p, "router_policy_config").map(str::to_string) else {
        return Ok(Default::default());
    };
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
    let kv = text(p, "router_mode") == Some("kv");
    let classifier = match (kv, doc.get("request_classifier")) {
        (true, Some(c)) => Some(super::classifier::read(c)?),
        (false, Some(_)) => {
            p.warnings
                .push("--router-policy-config: request_classifier applies to --router-mode kv only; ignored".into());
            None
        }
        (_, None) => None,
    };
    let classes = match kv {
        true => super::classes::read(&doc, None)?,
        false => super::classes::ClassProfiles::default(),
    };
    if !kv && ["default_policy_family", "policy_classes", "models"].iter().any(|k| doc.contains_key(*k)) {
        p.warnings.push("--router-policy-config: policy classes apply to --router-mode kv only; ignored".into());
    }
    let selection = match (kv, doc.get("worker_selection")) {
        (true, Some(ws)) => worker_selection(ws)?,
        _ => WorkerSelection::default(),
    };
    Ok(PolicyFile { selection, classes, classifier })
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

/// A `worker_selection` instance of the file.
#[derive(Clone, Debug)]
enum Instance {
    /// `dynamo-default-cost-fn`: the options (by `dest`) its parameters set.
    Cost(Vec<(&'static str, f64)>),
    /// `dynamo-two-tier-cost-fn`.
    TwoTier(Selector),
    /// `thunderagent`.
    LeastLoad,
}

/// What the file's `worker_selection` says (kv mode; empty otherwise).
#[derive(Clone, Debug, Default)]
pub(super) struct WorkerSelection {
    instances: Vec<(String, Instance)>,
    /// The file's selections for the aggregated, prefill and decode pools.
    pools: [Option<String>; 3],
}

fn worker_selection(ws: &Json) -> Result<WorkerSelection, ConfigError> {
    let bad = |why: String| invalid(format!("invalid router policy config: {why}"));
    let Json::Object(ws) = ws else { return Err(bad("worker_selection must be a mapping".into())) };
    let empty = Map::new();
    if ws.is_empty() {
        return Err(bad(
            "worker_selection must define an instance or an aggregated, prefill, decode, or encode selection".into(),
        ));
    }
    let mut out = WorkerSelection::default();
    for inst in ws.get("instances").and_then(Json::as_array).into_iter().flatten() {
        let name = inst["name"].as_str().ok_or_else(|| bad("a worker_selection instance has no name".into()))?;
        if name == "default" {
            return Err(invalid(
                "invalid router policy config: worker_selection instance name 'default' is reserved for \
                 Dynamo's built-in selector",
            ));
        }
        if out.instances.iter().any(|(n, _)| n == name) {
            return Err(bad(format!("worker_selection contains duplicate instance \"{name}\"")));
        }
        let kind = inst["type"].as_str().unwrap_or("");
        if !LINKED_TYPES.contains(&kind) {
            return Err(invalid(format!(
                "unknown worker-selection policy type \"{kind}\"; linked policy types: {}",
                LINKED_TYPES.join(", ")
            )));
        }
        let params = match &inst["parameters"] {
            Json::Null => &empty,
            Json::Object(m) => m,
            _ => return Err(bad(format!("worker_selection instance \"{name}\" parameters must be a YAML mapping"))),
        };
        let instance = match kind {
            "dynamo-default-cost-fn" => Instance::Cost(cost_parameters(kind, params)?),
            "dynamo-two-tier-cost-fn" => Instance::TwoTier(two_tier(kind, params)?),
            _ => {
                if let Some(k) = params.keys().next() {
                    return Err(invalid_params(kind, format!("unknown field `{k}`, there are no fields")));
                }
                Instance::LeastLoad
            }
        };
        out.instances.push((name.to_string(), instance));
    }
    if let Some(name) = ws.get("encode").and_then(Json::as_str).filter(|n| !n.trim().is_empty() && *n != "default") {
        return Err(unbuilt(&format!(
            "worker_selection.encode (here {name:?}: multimodal encode workers are not routed by this build) is"
        )));
    }
    for (slot, pool) in out.pools.iter_mut().zip(["aggregated", "prefill", "decode"]) {
        let chosen = ws.get(pool).and_then(Json::as_str).map(str::trim).filter(|n| !n.is_empty());
        if let Some(n) = chosen {
            if n != "default" && !out.instances.iter().any(|(i, _)| i == n) {
                return Err(bad(format!("worker_selection {pool} \"{n}\" does not name a configured instance")));
            }
        }
        *slot = chosen.map(str::to_string);
    }
    Ok(out)
}

/// 1.6.1's message for parameters a selector type does not take.
fn invalid_params(kind: &str, why: String) -> ConfigError {
    invalid(format!("invalid parameters for worker-selection policy type \"{kind}\": {why}"))
}

/// A YAML value shown as serde's messages show it.
fn shown(v: &Json) -> String {
    match v {
        Json::String(s) => format!("string \"{s}\""),
        other => other.to_string(),
    }
}

/// `dynamo-default-cost-fn`'s parameters: each a finite number ≥ 0.
fn cost_parameters(kind: &str, params: &Map<String, Json>) -> Result<Vec<(&'static str, f64)>, ConfigError> {
    let mut set = Vec::new();
    for (k, v) in params {
        let Some(&(name, dest)) = COST_PARAMETERS.iter().find(|(n, _)| n == k) else {
            let expected: Vec<String> = COST_PARAMETERS.iter().map(|(n, _)| format!("`{n}`")).collect();
            return Err(invalid_params(kind, format!("unknown field `{k}`, expected one of {}", expected.join(", "))));
        };
        let Some(x) = v.as_f64() else {
            return Err(invalid_params(kind, format!("invalid type: {}, expected f64", shown(v))));
        };
        if !(x.is_finite() && x >= 0.0) {
            return Err(invalid_params(kind, format!("{name} must be finite and non-negative")));
        }
        if dest.is_empty() {
            if x != 0.0 {
                return Err(unbuilt("shared_cache_multiplier (a shared KV cache tier) is"));
            }
            continue;
        }
        set.push((dest, x));
    }
    Ok(set)
}

/// `dynamo-two-tier-cost-fn`'s parameters, with 1.6.1's defaults and checks.
fn two_tier(kind: &str, params: &Map<String, Json>) -> Result<Selector, ConfigError> {
    const NAMES: [&str; 3] = ["cache_threshold", "balance_abs_threshold", "balance_rel_threshold"];
    let (mut cache, mut abs, mut rel) = (0.5, 32u64, 1.1);
    for (k, v) in params {
        let expected = || NAMES.map(|n| format!("`{n}`")).join(", ");
        match k.as_str() {
            "cache_threshold" | "balance_rel_threshold" => {
                let x = v
                    .as_f64()
                    .ok_or_else(|| invalid_params(kind, format!("invalid type: {}, expected f64", shown(v))))?;
                if k == "cache_threshold" {
                    if !(x.is_finite() && (0.0..=1.0).contains(&x)) {
                        return Err(invalid_params(
                            kind,
                            "cache_threshold must be a finite number between 0.0 and 1.0".into(),
                        ));
                    }
                    cache = x;
                } else {
                    if !(x.is_finite() && x >= 1.0) {
                        return Err(invalid_params(
                            kind,
                            "balance_rel_threshold must be a finite number greater than or equal to 1.0".into(),
                        ));
                    }
                    rel = x;
                }
            }
            "balance_abs_threshold" => {
                abs = v
                    .as_u64()
                    .ok_or_else(|| invalid_params(kind, format!("invalid type: {}, expected usize", shown(v))))?;
            }
            _ => return Err(invalid_params(kind, format!("unknown field `{k}`, expected one of {}", expected()))),
        }
    }
    Ok(Selector::TwoTier { cache_threshold: cache, balance_abs_threshold: abs, balance_rel_threshold: rel })
}

/// Each pool's selector, `cost` (the options' cost parameters) unless a selection names an
/// instance. Which selection counts, as 1.6.1 decides it: for the prefill and decode pools
/// `--router-prefill-policy` / `--router-decode-policy`, then `DYN_ROUTER_WORKER_SELECTION_POLICY`,
/// then the file; for the aggregated pool the variable, then the file. `default` is the
/// options' cost function.
pub(super) fn selectors(
    ws: &WorkerSelection,
    cost: CostParams,
    p: &Parsed,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Selectors, ConfigError> {
    let given = |v: Option<String>| v.map(|s| s.trim().to_string()).filter(|s| !s.is_empty());
    let global = given(env("DYN_ROUTER_WORKER_SELECTION_POLICY"));
    let flag = |dest: &str| given(text(p, dest).map(str::to_string));
    let (prefill_flag, decode_flag) = (flag("router_prefill_policy"), flag("router_decode_policy"));
    if text(p, "router_mode") != Some("kv") {
        for (option, v) in [("--router-prefill-policy", &prefill_flag), ("--router-decode-policy", &decode_flag)] {
            if let Some(name) = v.as_deref().filter(|n| *n != "default") {
                return Err(invalid(format!(
                    "{option} {name}: a worker-selection instance is used by --router-mode kv only; with other \
                     router modes it is not implemented in this switchyard build"
                )));
            }
        }
        return Ok(Selectors::same(cost));
    }
    let resolve = |name: Option<String>| -> Result<Selector, ConfigError> {
        let Some(name) = name.filter(|n| n != "default") else { return Ok(Selector::Cost(cost)) };
        let Some((_, instance)) = ws.instances.iter().find(|(n, _)| *n == name) else {
            let mut names: Vec<&str> = ws.instances.iter().map(|(n, _)| n.as_str()).collect();
            names.sort_unstable();
            let list = if names.is_empty() { "<none>".to_string() } else { names.join(", ") };
            return Err(invalid(format!("unknown worker-selection instance \"{name}\"; configured instances: {list}")));
        };
        Ok(match instance {
            Instance::TwoTier(s) => *s,
            Instance::LeastLoad => Selector::LeastLoad,
            Instance::Cost(set) => {
                let mut c = cost;
                for &(dest, x) in set {
                    match dest {
                        "overlap_score_credit" => c.overlap_credit = x,
                        "overlap_score_credit_decay" => c.overlap_credit_decay = x,
                        "prefill_load_scale" => c.prefill_load_scale = x,
                        "decode_active_request_weight" => c.decode_active_request_weight = x,
                        "host_cache_hit_weight" => c.host_cache_hit_weight = x,
                        "disk_cache_hit_weight" => c.disk_cache_hit_weight = x,
                        _ => c.temperature = x,
                    }
                }
                Selector::Cost(c)
            }
        })
    };
    let [aggregated, prefill, decode] = ws.pools.clone();
    Ok(Selectors {
        aggregated: resolve(global.clone().or(aggregated))?,
        prefill: resolve(prefill_flag.or_else(|| global.clone()).or(prefill))?,
        decode: resolve(decode_flag.or(global).or(decode))?,
    })
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
        use crate::config::settings::Selector;
        let ws = |params: &str, pool: &str| {
            format!("worker_selection:\n  {pool}: mine\n  instances:\n  - name: mine\n    type: dynamo-default-cost-fn\n    parameters: {params}\n")
        };
        let c = with(&ws("{prefill_load_scale: 2.0, router_temperature: 0.5}", "aggregated"), KV).unwrap();
        let Selector::Cost(agg) = c.kv_selectors.aggregated else { panic!("{:?}", c.kv_selectors) };
        assert_eq!((agg.prefill_load_scale, agg.temperature), (2.0, 0.5));
        // The options stay as given; the other pools keep them.
        assert_eq!((c.kv_cost.prefill_load_scale, c.kv_cost.temperature), (1.0, 0.0));
        assert_eq!(c.kv_selectors.prefill, Selector::Cost(c.kv_cost));
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
        let e = with(&ws("{router_temperature: -1}", "aggregated"), KV).unwrap_err();
        assert!(e.ends_with("router_temperature must be finite and non-negative"), "{e}");
        let e = with(&ws("{}", "aggregated").replace("name: mine", "name: default"), KV).unwrap_err();
        assert!(e.contains("'default' is reserved"), "{e}");
        let e = with(&ws("{}", "aggregated").replace("dynamo-default-cost-fn", "mypolicy"), KV).unwrap_err();
        assert_eq!(
            e,
            "unknown worker-selection policy type \"mypolicy\"; linked policy types: dynamo-default-cost-fn, \
             dynamo-two-tier-cost-fn, thunderagent"
        );
        let e = with(&ws("{}", "aggregated").replace("aggregated: mine", "aggregated: theirs"), KV).unwrap_err();
        assert!(e.ends_with("worker_selection aggregated \"theirs\" does not name a configured instance"), "{e}");
        assert!(with("worker_selection: {}\n", KV).unwrap_err().contains("must define an instance"));
        // `thunderagent` takes no parameters.
        let thunder = ws("{}", "aggregated").replace("dynamo-default-cost-fn", "thunderagent");
        assert_eq!(with(&thunder, KV).unwrap().kv_selectors.aggregated, Selector::LeastLoad);
        let e = with(&ws("{x: 1}", "aggregated").replace("dynamo-default-cost-fn", "thunderagent"), KV).unwrap_err();
        assert!(e.ends_with("\"thunderagent\": unknown field `x`, there are no fields"), "{e}");
        // Refused by name.
        for (yaml, what) in [
            (ws("{}", "encode"), "worker_selection.encode"),
            (ws("{shared_cache_multiplier: 1.0}", "aggregated"), "shared_cache_multiplier"),
        ] {
            let e = with(&yaml, KV).unwrap_err();
            assert!(e.contains(what) && e.contains("not implemented"), "{e}");
        }
        let e = with("models: {m: {}}\n", KV).unwrap_err();
        assert!(e.contains("model \"m\": missing field `default_policy_family`"), "{e}");
        // The classifier: read in kv mode, ignored with a warning outside it (1.6.1 ignores it).
        let c = with("request_classifier: {type: thunderagent, parameters: {buffer_per_program: 7}}\n", KV).unwrap();
        assert_eq!(c.kv_classifier.map(|t| t.buffer_per_program), Some(7));
        let e = with("request_classifier: {type: x}\n", KV).unwrap_err();
        assert!(e.contains("unknown request-classifier type \"x\""), "{e}");
        assert!(with("request_classifier: {type: x}\n", &[]).unwrap().kv_classifier.is_none());
        // Outside kv mode the router is not built: its selection is not read.
        with(&ws("{bogus_param: 1}", "aggregated"), &[]).unwrap();
        assert!(with("router: {}\n", &[]).is_ok());
        let e = load(&["--router-policy-config".into(), "/nonexistent/policy.yaml".into()], &|_| None).unwrap_err();
        assert!(e.message.contains("/nonexistent/policy.yaml"), "{}", e.message);
    }

    #[test]
    fn each_pool_selects_its_instance_with_1_6_1s_precedence() {
        use crate::config::settings::Selector;
        let yaml = "worker_selection:\n  prefill: tt\n  decode: cheap\n  instances:\n  \
                    - {name: tt, type: dynamo-two-tier-cost-fn, parameters: {cache_threshold: 0.25}}\n  \
                    - {name: cheap, type: dynamo-default-cost-fn, parameters: {prefill_load_scale: 3.0}}\n";
        let c = with(yaml, KV).unwrap();
        let tt = Selector::TwoTier { cache_threshold: 0.25, balance_abs_threshold: 32, balance_rel_threshold: 1.1 };
        let cheap = Selector::Cost(crate::config::settings::CostParams { prefill_load_scale: 3.0, ..c.kv_cost });
        assert_eq!(
            (c.kv_selectors.aggregated, c.kv_selectors.prefill, c.kv_selectors.decode),
            (Selector::Cost(c.kv_cost), tt, cheap)
        );
        // The options win over the file, `default` included.
        let args = ["--router-mode", "kv", "--router-prefill-policy", "cheap", "--router-decode-policy", "default"];
        let c = with(yaml, &args).unwrap();
        assert_eq!((c.kv_selectors.prefill, c.kv_selectors.decode), (cheap, Selector::Cost(c.kv_cost)));
        // DYN_ROUTER_WORKER_SELECTION_POLICY: every pool without its own option.
        let path = std::env::temp_dir().join(format!("switchyard-policy-env-{}.yaml", std::process::id()));
        std::fs::write(&path, yaml).unwrap();
        let args: Vec<String> = ["--router-mode", "kv", "--router-decode-policy", "tt", "--router-policy-config"]
            .iter()
            .map(|s| s.to_string())
            .chain([path.to_str().unwrap().to_string()])
            .collect();
        let env = |k: &str| (k == "DYN_ROUTER_WORKER_SELECTION_POLICY").then(|| "cheap".to_string());
        let c = load(&args, &env).unwrap().1.unwrap();
        std::fs::remove_file(&path).unwrap();
        assert_eq!((c.kv_selectors.aggregated, c.kv_selectors.prefill, c.kv_selectors.decode), (cheap, cheap, tt));
        // Names that are no instance: 1.6.1's message, with or without a file.
        let e = with(yaml, &["--router-mode", "kv", "--router-prefill-policy", "fast"]).unwrap_err();
        assert_eq!(e, "unknown worker-selection instance \"fast\"; configured instances: cheap, tt");
        let e = load(&["--router-mode".into(), "kv".into(), "--router-decode-policy".into(), "fast".into()], &|_| None)
            .unwrap_err();
        assert_eq!(e.message, "unknown worker-selection instance \"fast\"; configured instances: <none>");
        let e = load(&["--router-prefill-policy".into(), "fast".into()], &|_| None).unwrap_err();
        assert!(e.message.contains("--router-mode kv only"), "{}", e.message);
        assert!(load(&["--router-prefill-policy".into(), "default".into()], &|_| None).is_ok());
        // Two-tier's checks.
        for (params, msg) in [
            ("{cache_threshold: 1.5}", "cache_threshold must be a finite number between 0.0 and 1.0"),
            (
                "{balance_rel_threshold: 0.5}",
                "balance_rel_threshold must be a finite number greater than or equal to 1.0",
            ),
            ("{balance_abs_threshold: -1}", "invalid type: -1, expected usize"),
            ("{weight: 1}", "unknown field `weight`"),
        ] {
            let e = with(&yaml.replace("{cache_threshold: 0.25}", params), KV).unwrap_err();
            assert!(e.contains(msg), "{e}");
        }
    }
}
