//! Policy classes of the kv router's queue (docs/dynamo/router-policy-config.md §policy
//! classes): the root profile (`default_policy_family`, `uncached_isl_buckets`,
//! `policy_classes`) and per-model profiles (`models:`) of `--router-policy-config`, checked
//! with Dynamo 1.6.1's rules and messages, and the synthetic one-class profile
//! `--router-queue-threshold` / `--router-queue-policy` make when a model has none.
//!
//! A profile maps a request to one of its classes: the class name a request asks for
//! (header `x-dynamo-meta-policy-class`) when it names an *explicit* class; otherwise the
//! family it names (the default family when it names none, or none known) and the bucket of
//! its uncached prompt length (the last bucket whose `min_tokens` is at most that length).
//! Read at start-up on the main thread; shards hold the profiles behind an `Arc`.

use std::sync::Arc;

use serde_json::{Map, Value as Json};

use super::settings::{Policy, QueueConfig};
use super::{invalid, ConfigError};

/// `max_num_batched_tokens` of a worker that advertises none, for a class's busy test.
pub const DEFAULT_MAX_BATCHED_TOKENS: u64 = 10_000_000;

/// Which per-worker queue limit a request met.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LimitKind {
    Requests,
    RawIslTokens,
    CachedTokens,
}

impl LimitKind {
    pub const ALL: [LimitKind; 3] = [LimitKind::Requests, LimitKind::RawIslTokens, LimitKind::CachedTokens];

    /// The name in a refusal's `details.limit_kind`.
    pub fn name(self) -> &'static str {
        match self {
            LimitKind::Requests => "requests",
            LimitKind::RawIslTokens => "raw_isl_tokens",
            LimitKind::CachedTokens => "cached_tokens",
        }
    }

    /// The `reason` label of `dynamo_frontend_router_queue_backpressure_total`.
    pub fn reason(self) -> &'static str {
        match self {
            LimitKind::Requests => "request_limit",
            LimitKind::RawIslTokens => "raw_isl_token_limit",
            LimitKind::CachedTokens => "cached_token_limit",
        }
    }
}

/// One class: how its requests wait and when.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyClass {
    pub name: String,
    pub policy: Policy,
    /// Deficit-round-robin credit per round, in uncached prompt tokens.
    pub quantum: u64,
    /// Busy while a worker's booked prefill tokens exceed this …
    pub busy_tokens: Option<u64>,
    /// … or this multiple of its `max_num_batched_tokens`.
    pub busy_frac: Option<f64>,
    /// Per-worker limits of what may wait, indexed as [`LimitKind::ALL`].
    pub limits: [Option<u64>; 3],
}

impl PolicyClass {
    /// Whether the class waits at all (a busy threshold is set).
    pub fn queues(&self) -> bool {
        self.busy_tokens.is_some() || self.busy_frac.is_some()
    }

    /// A worker with `active` booked prefill tokens is busy for this class.
    pub fn busy(&self, active: u64, max_batched: u64) -> bool {
        let max_batched = if max_batched == 0 { DEFAULT_MAX_BATCHED_TOKENS } else { max_batched };
        self.busy_tokens.is_some_and(|t| active > t)
            || self.busy_frac.is_some_and(|f| active as f64 > f * max_batched as f64)
    }
}

/// The classes one model's requests are sorted into.
#[derive(Clone, Debug, PartialEq)]
pub struct PolicyProfile {
    /// In the file's order: the round-robin order between classes.
    pub classes: Vec<PolicyClass>,
    /// Lower bounds of the uncached-prompt buckets, ascending from 0.
    pub bucket_min: Vec<u64>,
    pub families: Vec<String>,
    pub default_family: usize,
    /// The class of family `f` and bucket `b`: `table[f * buckets + b]`.
    pub table: Vec<usize>,
    /// Classes named directly (no family).
    pub explicit: Vec<usize>,
    /// The one class `--router-queue-threshold` makes; names asked for are not read.
    pub synthetic: bool,
}

impl PolicyProfile {
    /// The profile of a model the file gives none: one class `default`.
    pub fn synthetic(queue: Option<QueueConfig>) -> PolicyProfile {
        PolicyProfile {
            classes: vec![PolicyClass {
                name: "default".into(),
                policy: queue.map_or(Policy::Fcfs, |q| q.policy),
                quantum: 1,
                busy_tokens: None,
                busy_frac: queue.map(|q| q.threshold_frac),
                limits: [None; 3],
            }],
            bucket_min: vec![0],
            families: Vec::new(),
            default_family: 0,
            table: vec![0],
            explicit: Vec::new(),
            synthetic: true,
        }
    }

    /// The class of a request that asks for `requested` and has `uncached` prompt tokens
    /// no worker holds. Unknown names fall back to the default family, as 1.6.1's do.
    pub fn class_of(&self, requested: Option<&str>, uncached: u64) -> usize {
        if self.synthetic {
            return 0;
        }
        if let Some(name) = requested {
            if let Some(&c) = self.explicit.iter().find(|&&c| self.classes[c].name == name) {
                return c;
            }
        }
        let family = requested.and_then(|n| self.families.iter().position(|f| f == n)).unwrap_or(self.default_family);
        let bucket = self.bucket_min.partition_point(|&m| m <= uncached).saturating_sub(1);
        self.table[family * self.bucket_min.len() + bucket]
    }

    /// Whether choosing a class needs the request's uncached length (more than one bucket).
    pub fn buckets_by_cache(&self) -> bool {
        self.bucket_min.len() > 1
    }

    /// Whether some class waits (else every request goes at once and no limit applies).
    pub fn queues(&self) -> bool {
        self.classes.iter().any(PolicyClass::queues)
    }
}

/// Every model's profile: the file's per-model ones, its root one, else the synthetic one.
#[derive(Clone, Debug)]
pub struct ClassProfiles {
    pub models: Vec<(String, Arc<PolicyProfile>)>,
    pub root: Option<Arc<PolicyProfile>>,
    pub fallback: Arc<PolicyProfile>,
}

impl Default for ClassProfiles {
    fn default() -> Self {
        ClassProfiles { models: Vec::new(), root: None, fallback: Arc::new(PolicyProfile::synthetic(None)) }
    }
}

impl ClassProfiles {
    /// `model`'s profile: its own entry under `models:` (exact name), else the root one,
    /// else the synthetic one.
    pub fn for_model(&self, model: &str) -> &Arc<PolicyProfile> {
        self.models.iter().find(|(m, _)| m == model).map(|(_, p)| p).or(self.root.as_ref()).unwrap_or(&self.fallback)
    }
}

/// The profiles of a `--router-policy-config` document (already checked to be a mapping);
/// `queue` is what `--router-queue-threshold` and `--router-queue-policy` give.
pub(super) fn read(doc: &Map<String, Json>, queue: Option<QueueConfig>) -> Result<ClassProfiles, ConfigError> {
    let bad = |why: String| invalid(format!("router_policy_config: invalid router policy config: {why}"));
    let mut out = ClassProfiles { fallback: Arc::new(PolicyProfile::synthetic(queue)), ..ClassProfiles::default() };
    let root_keys = ["default_policy_family", "uncached_isl_buckets", "policy_classes"];
    let present = root_keys.iter().filter(|k| doc.get(**k).is_some_and(|v| !v.is_null())).count();
    if present != 0 && present != root_keys.len() {
        return Err(bad("root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes \
                        when any root profile field is present"
            .into()));
    }
    if present == root_keys.len() {
        out.root = Some(Arc::new(profile("root", doc).map_err(bad)?));
    }
    match doc.get("models") {
        None | Some(Json::Null) => {}
        Some(Json::Object(models)) => {
            for (name, p) in models {
                if name.is_empty() {
                    return Err(bad("model profile name must not be empty".into()));
                }
                let loc = format!("model {name:?}");
                let Json::Object(p) = p else { return Err(bad(format!("{loc}: a profile must be a mapping"))) };
                if let Some(k) = p.keys().find(|k| !root_keys.contains(&k.as_str())) {
                    return Err(bad(format!("{loc}: unknown field `{k}`, expected one of {}", fields(&root_keys))));
                }
                if let Some(k) = root_keys.iter().find(|k| p.get(**k).is_none_or(Json::is_null)) {
                    return Err(bad(format!("{loc}: missing field `{k}`")));
                }
                out.models.push((name.clone(), Arc::new(profile(&loc, p).map_err(bad)?)));
            }
        }
        Some(_) => return Err(bad("models must be a mapping of model names to profiles".into())),
    }
    Ok(out)
}

fn fields(names: &[&str]) -> String {
    names.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ")
}

const CLASS_FIELDS: [&str; 10] = [
    "name",
    "policy_family",
    "cache_bucket",
    "queue_policy",
    "quantum",
    "prefill_busy_threshold",
    "prefill_busy_threshold_frac",
    "request_queue_limit_per_worker",
    "raw_isl_token_queue_limit_per_worker",
    "cached_token_queue_limit_per_worker",
];

fn identifier(loc: &str, kind: &str, v: &str) -> Result<(), String> {
    let ok = !v.is_empty() && v.bytes().all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'.' | b'-'));
    if ok {
        Ok(())
    } else {
        Err(format!("{loc} {kind} name {v:?} must match [A-Za-z0-9_.-]+"))
    }
}

fn string<'a>(at: &str, v: &'a Json) -> Result<&'a str, String> {
    v.as_str().ok_or_else(|| format!("{at}: invalid type: {}, expected a string", kind_of(v)))
}

fn unsigned(at: &str, v: &Json) -> Result<u64, String> {
    v.as_u64().ok_or_else(|| format!("{at}: invalid type: {}, expected u64", kind_of(v)))
}

fn kind_of(v: &Json) -> String {
    match v {
        Json::Null => "unit value".into(),
        Json::Bool(b) => format!("boolean `{b}`"),
        Json::Number(n) if n.is_f64() => format!("floating point `{n}`"),
        Json::Number(n) => format!("integer `{n}`"),
        Json::String(s) => format!("string {s:?}"),
        Json::Array(_) => "sequence".into(),
        Json::Object(_) => "map".into(),
    }
}

/// One profile, checked as 1.6.1 checks it (`loc`: `root` or `model "name"`).
fn profile(loc: &str, p: &Map<String, Json>) -> Result<PolicyProfile, String> {
    // Buckets.
    let Some(Json::Array(raw_buckets)) = p.get("uncached_isl_buckets") else {
        return Err(format!("{loc}: uncached_isl_buckets: invalid type, expected a sequence"));
    };
    if raw_buckets.is_empty() {
        return Err(format!("{loc} uncached_isl_buckets must not be empty"));
    }
    let mut buckets: Vec<(u64, &str)> = Vec::new();
    for (i, b) in raw_buckets.iter().enumerate() {
        let at = format!("{loc}: uncached_isl_buckets[{i}]");
        let Json::Object(b) = b else { return Err(format!("{at}: invalid type: {}, expected a mapping", kind_of(b))) };
        if let Some(k) = b.keys().find(|k| !["min_tokens", "bucket"].contains(&k.as_str())) {
            return Err(format!("{at}: unknown field `{k}`, expected `min_tokens` or `bucket`"));
        }
        let min = unsigned(&format!("{at}.min_tokens"), b.get("min_tokens").unwrap_or(&Json::Null))?;
        let name = string(&format!("{at}.bucket"), b.get("bucket").unwrap_or(&Json::Null))?;
        identifier(loc, "cache bucket", name)?;
        buckets.push((min, name));
    }
    if buckets[0].0 != 0 {
        return Err(format!("{loc} uncached_isl_buckets must start at min_tokens 0"));
    }
    if buckets.windows(2).any(|w| w[1].0 <= w[0].0) {
        return Err(format!("{loc} uncached_isl_buckets min_tokens must be strictly increasing"));
    }
    for (i, (_, b)) in buckets.iter().enumerate() {
        if buckets[..i].iter().any(|(_, o)| o == b) {
            return Err(format!("{loc} contains duplicate cache bucket {b:?}"));
        }
    }
    // Classes.
    let Some(Json::Array(raw_classes)) = p.get("policy_classes") else {
        return Err(format!("{loc}: policy_classes: invalid type, expected a sequence"));
    };
    if raw_classes.is_empty() {
        return Err(format!("{loc} policy_classes must not be empty"));
    }
    let mut classes = Vec::new();
    let mut binding: Vec<Option<(&str, &str)>> = Vec::new();
    for (i, c) in raw_classes.iter().enumerate() {
        let at = format!("{loc}: policy_classes[{i}]");
        let Json::Object(c) = c else { return Err(format!("{at}: invalid type: {}, expected a mapping", kind_of(c))) };
        if let Some(k) = c.keys().find(|k| !CLASS_FIELDS.contains(&k.as_str())) {
            return Err(format!("{at}: unknown field `{k}`, expected one of {}", fields(&CLASS_FIELDS)));
        }
        let field = |k: &str| c.get(k).filter(|v| !v.is_null());
        let name = string(&format!("{at}.name"), field("name").unwrap_or(&Json::Null))?;
        identifier(loc, "policy class", name)?;
        if classes.iter().any(|c: &PolicyClass| c.name == name) {
            return Err(format!("{loc} contains duplicate policy class {name:?}"));
        }
        let quantum = match field("quantum") {
            None => return Err(format!("{at}: missing field `quantum`")),
            Some(v) => unsigned(&format!("{at}.quantum"), v)?,
        };
        if quantum == 0 {
            return Err(format!("{loc} policy class {name:?} quantum must be greater than zero"));
        }
        let policy = match field("queue_policy").map(|v| string(&format!("{at}.queue_policy"), v)).transpose()? {
            None | Some("fcfs") => Policy::Fcfs,
            Some("wspt") => Policy::Wspt,
            Some("lcfs") => return Err(format!("{loc} policy class {name:?} queue_policy must be fcfs or wspt")),
            Some(other) => {
                return Err(format!(
                    "{at}.queue_policy: unknown variant `{other}`, expected one of `fcfs`, `lcfs`, `wspt`"
                ))
            }
        };
        let busy_frac = match field("prefill_busy_threshold_frac") {
            None => None,
            Some(v) => {
                let f = v.as_f64().ok_or_else(|| {
                    format!("{at}.prefill_busy_threshold_frac: invalid type: {}, expected f64", kind_of(v))
                })?;
                if !f.is_finite() || f < 0.0 {
                    return Err(format!(
                        "{loc} policy class {name:?} prefill_busy_threshold_frac must be finite and non-negative"
                    ));
                }
                Some(f)
            }
        };
        let opt = |k: &str| field(k).map(|v| unsigned(&format!("{at}.{k}"), v)).transpose();
        let family = field("policy_family").map(|v| string(&format!("{at}.policy_family"), v)).transpose()?;
        let bucket = field("cache_bucket").map(|v| string(&format!("{at}.cache_bucket"), v)).transpose()?;
        match (family, bucket) {
            (Some(f), Some(b)) => {
                identifier(loc, "policy family", f)?;
                identifier(loc, "cache bucket", b)?;
                if !buckets.iter().any(|(_, n)| *n == b) {
                    return Err(format!("{loc} policy class {name:?} references unknown cache bucket {b:?}"));
                }
                binding.push(Some((f, b)));
            }
            (None, None) => binding.push(None),
            _ => {
                return Err(format!(
                    "{loc} policy class {name:?} must specify both policy_family and cache_bucket or neither for an explicit class"
                ))
            }
        }
        classes.push(PolicyClass {
            name: name.to_string(),
            policy,
            quantum,
            busy_tokens: opt("prefill_busy_threshold")?,
            busy_frac,
            limits: [
                opt("request_queue_limit_per_worker")?,
                opt("raw_isl_token_queue_limit_per_worker")?,
                opt("cached_token_queue_limit_per_worker")?,
            ],
        });
    }
    let mut families: Vec<String> = Vec::new();
    for (f, _) in binding.iter().flatten() {
        if !families.iter().any(|x| x == f) {
            families.push(f.to_string());
        }
    }
    let default_name =
        string(&format!("{loc}: default_policy_family"), p.get("default_policy_family").unwrap_or(&Json::Null))?;
    identifier(loc, "policy family", default_name)?;
    let default_family = families
        .iter()
        .position(|f| f == default_name)
        .ok_or_else(|| format!("{loc} default_policy_family {default_name:?} does not name a configured family"))?;
    let explicit: Vec<usize> = (0..classes.len()).filter(|&i| binding[i].is_none()).collect();
    if let Some(&c) = explicit.iter().find(|&&c| families.contains(&classes[c].name)) {
        return Err(format!("{loc} explicit policy class {:?} collides with a policy family", classes[c].name));
    }
    let mut table = Vec::with_capacity(families.len() * buckets.len());
    for f in &families {
        for (_, b) in &buckets {
            let mut hits = (0..classes.len()).filter(|&i| binding[i] == Some((f.as_str(), *b)));
            let Some(first) = hits.next() else {
                return Err(format!("{loc} is missing a policy class for family {f:?} and bucket {b:?}"));
            };
            if hits.next().is_some() {
                return Err(format!("{loc} contains duplicate policy classes for family {f:?} and bucket {b:?}"));
            }
            table.push(first);
        }
    }
    Ok(PolicyProfile {
        classes,
        bucket_min: buckets.iter().map(|(m, _)| *m).collect(),
        families,
        default_family,
        table,
        explicit,
        synthetic: false,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn doc(yaml: &str) -> Map<String, Json> {
        match crate::util::yaml::parse(yaml).unwrap() {
            Json::Object(m) => m,
            other => panic!("{other:?}"),
        }
    }

    const SAMPLE: &str = "\
default_policy_family: standard
uncached_isl_buckets: [{min_tokens: 0, bucket: cached}, {min_tokens: 3072, bucket: uncached}]
policy_classes:
  - {name: cached, policy_family: standard, cache_bucket: cached, queue_policy: wspt, quantum: 2048,
     prefill_busy_threshold_frac: 16.0, request_queue_limit_per_worker: 1024}
  - {name: uncached, policy_family: standard, cache_bucket: uncached, quantum: 512,
     prefill_busy_threshold_frac: 16.0, raw_isl_token_queue_limit_per_worker: 1048576}
  - {name: latency_cached, policy_family: latency, cache_bucket: cached, queue_policy: wspt, quantum: 4096}
  - {name: latency_uncached, policy_family: latency, cache_bucket: uncached, queue_policy: wspt, quantum: 1024}
  - {name: custom_priority, queue_policy: wspt, quantum: 4096, prefill_busy_threshold: 100}
models:
  big/model:
    default_policy_family: only
    uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
    policy_classes: [{name: one, policy_family: only, cache_bucket: all, quantum: 1}]
";

    #[test]
    fn classifies_by_explicit_name_family_and_uncached_bucket() {
        let profiles = read(&doc(SAMPLE), None).unwrap();
        let root = profiles.for_model("any");
        let name =
            |requested: Option<&str>, uncached: u64| root.classes[root.class_of(requested, uncached)].name.clone();
        assert_eq!(name(None, 0), "cached");
        assert_eq!(name(None, 3071), "cached");
        assert_eq!(name(None, 3072), "uncached", "a bucket's lower bound is inclusive");
        assert_eq!(name(Some("latency"), 5000), "latency_uncached");
        assert_eq!(name(Some("custom_priority"), 5000), "custom_priority", "an explicit class ignores the bucket");
        assert_eq!(name(Some("cached"), 5000), "uncached", "a family-bound class name is an unknown name");
        assert_eq!(name(Some("nope"), 10), "cached");
        assert_eq!(root.classes[1].limits, [None, Some(1_048_576), None]);
        assert!(root.classes[4].queues() && !root.classes[2].queues());
        assert!(root.classes[4].busy(101, 0) && !root.classes[4].busy(100, 0));
        assert!(root.classes[0].busy(16 * 100 + 1, 100) && !root.classes[0].busy(16 * 100, 100));
        let big = profiles.for_model("big/model");
        assert_eq!((big.classes.len(), big.classes[0].name.as_str()), (1, "one"));
        assert!(!big.buckets_by_cache() && root.buckets_by_cache());
        // No profile in the file: the options' one class.
        let q = QueueConfig { threshold_frac: 0.5, policy: Policy::Wspt };
        let none = read(&doc("router: {}"), Some(q)).unwrap();
        let p = none.for_model("m");
        assert!(p.synthetic && none.root.is_none() && none.models.is_empty());
        assert_eq!(
            (p.classes[0].name.as_str(), p.classes[0].busy_frac, p.classes[0].policy),
            ("default", Some(0.5), Policy::Wspt)
        );
        assert_eq!(p.class_of(Some("latency"), 9), 0);
    }

    #[test]
    fn refuses_what_1_6_1_refuses_with_its_messages() {
        let cases: &[(&str, &str)] = &[
            ("default_policy_family: a\n", "root profile must specify default_policy_family, uncached_isl_buckets, and policy_classes"),
            ("default_policy_family: a\nuncached_isl_buckets: []\npolicy_classes: [{name: x, quantum: 1}]\n", "root uncached_isl_buckets must not be empty"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 5, bucket: b}]\npolicy_classes: [{name: x, quantum: 1}]\n", "root uncached_isl_buckets must start at min_tokens 0"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 0, bucket: c}]\npolicy_classes: [{name: x, quantum: 1}]\n", "min_tokens must be strictly increasing"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: []\n", "root policy_classes must not be empty"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 0}]\n", "root policy class \"x\" quantum must be greater than zero"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b}]\n", "missing field `quantum`"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1, queue_policy: lcfs}]\n", "root policy class \"x\" queue_policy must be fcfs or wspt"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: z, quantum: 1}]\n", "root policy class \"x\" references unknown cache bucket \"z\""),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, quantum: 1}]\n", "must specify both policy_family and cache_bucket or neither for an explicit class"),
            ("default_policy_family: zz\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1}]\n", "root default_policy_family \"zz\" does not name a configured family"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}, {min_tokens: 9, bucket: c}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1}]\n", "root is missing a policy class for family \"a\" and bucket \"c\""),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1}, {name: y, policy_family: a, cache_bucket: b, quantum: 1}]\n", "duplicate policy classes for family \"a\" and bucket \"b\""),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1}, {name: x, quantum: 1}]\n", "root contains duplicate policy class \"x\""),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1}, {name: a, quantum: 1}]\n", "root explicit policy class \"a\" collides with a policy family"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: 'x y', policy_family: a, cache_bucket: b, quantum: 1}]\n", "root policy class name \"x y\" must match [A-Za-z0-9_.-]+"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1, prefill_busy_threshold_frac: -1}]\n", "prefill_busy_threshold_frac must be finite and non-negative"),
            ("default_policy_family: a\nuncached_isl_buckets: [{min_tokens: 0, bucket: b}]\npolicy_classes: [{name: x, policy_family: a, cache_bucket: b, quantum: 1, busy_worker_ratio: 0.5}]\n", "unknown field `busy_worker_ratio`"),
            ("models: {m: {default_policy_family: a}}\n", "model \"m\": missing field `uncached_isl_buckets`"),
            ("models: {'': {}}\n", "model profile name must not be empty"),
        ];
        for (yaml, want) in cases {
            let e = read(&doc(yaml), None).unwrap_err().message;
            assert!(e.contains(want), "{yaml}: {e}");
            assert!(e.contains("invalid router policy config"), "{e}");
        }
    }
}
