//! `nvext`: Dynamo's request extension object, exactly as 1.6.1 accepts it.
//!
//! Unknown members are rejected while parsing (`deny_unknown_fields`), with serde's message
//! `unknown field `x`, expected one of …`; the order of that list is the declaration order
//! below and is part of the observable behaviour. Sampling knobs such as `ignore_eos` or
//! `top_k` are **not** accepted here in 1.6.1: they are top-level fields.

use std::collections::{BTreeMap, BTreeSet};

use serde::{Deserialize, Deserializer};

/// NVIDIA extensions to the OpenAI request.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct NvExt {
    /// Force greedy sampling.
    #[serde(default)]
    pub greed_sampling: Option<bool>,
    /// Bypass the chat template and tokenize the prompt as is.
    #[serde(default)]
    pub use_raw_prompt: Option<bool>,
    /// Out-of-band requests, e.g. `request_id` or `query_instance_id:…`.
    #[serde(default)]
    pub annotations: Option<Vec<String>>,
    /// Route to this worker instance.
    #[serde(default)]
    pub backend_instance_id: Option<u64>,
    /// Pre-tokenized prompt.
    #[serde(default)]
    pub token_data: Option<Vec<u32>>,
    /// Thinking-token budget (passed through to backends).
    #[serde(default)]
    pub max_thinking_tokens: Option<u32>,
    /// Cache namespace for KV block hashes.
    #[serde(default)]
    pub cache_salt: Option<String>,
    /// Response `nvext` members to fill in (`worker_id`, `timing`, …).
    #[serde(default)]
    pub extra_fields: Option<Vec<String>>,
    /// Where the backend uploads large metadata.
    #[serde(default)]
    pub metadata_upload: Option<MetadataUpload>,
    /// Disaggregated serving: pinned prefill worker.
    #[serde(default)]
    pub prefill_worker_id: Option<u64>,
    /// Disaggregated serving: pinned decode worker.
    #[serde(default)]
    pub decode_worker_id: Option<u64>,
    /// Data-parallel rank of the decode worker.
    #[serde(default)]
    pub dp_rank: Option<u32>,
    /// Data-parallel rank of the prefill worker.
    #[serde(default)]
    pub prefill_dp_rank: Option<u32>,
    /// Caller hints (priority, expected output length, …).
    #[serde(default)]
    pub agent_hints: Option<AgentHints>,
    /// Request timestamp for trace replay.
    #[serde(default)]
    pub request_timestamp_ms: Option<f64>,
    /// Worker taint constraints.
    #[serde(default)]
    pub routing_constraints: Option<RoutingConstraints>,
    /// Router targets.
    #[serde(default)]
    pub router: Option<RouterParams>,
}

impl NvExt {
    /// Whether the annotations ask for GAIE stage-1 query-only mode.
    pub fn has_query_instance_id_annotation(&self) -> bool {
        self.annotations.as_ref().is_some_and(|a| a.iter().any(|s| s.starts_with("query_instance_id:")))
    }

    /// Whether `extra_fields` lists `name`.
    pub fn wants_extra_field(&self, name: &str) -> bool {
        self.extra_fields.as_ref().is_some_and(|f| f.iter().any(|s| s == name))
    }
}

/// `nvext.metadata_upload`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct MetadataUpload {
    /// Destination URL, trimmed, never empty.
    #[serde(deserialize_with = "non_empty_url")]
    pub url: String,
}

fn non_empty_url<'de, D: Deserializer<'de>>(d: D) -> Result<String, D::Error> {
    let url = String::deserialize(d)?;
    let url = url.trim();
    if url.is_empty() {
        return Err(serde::de::Error::custom("metadata_upload.url must not be empty"));
    }
    Ok(url.to_string())
}

/// `nvext.agent_hints`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct AgentHints {
    /// Request priority; higher is more important.
    #[serde(default)]
    pub priority: Option<i32>,
    /// Strict router queue tier.
    #[serde(default)]
    pub strict_priority: Option<u32>,
    /// Expected output sequence length.
    #[serde(default)]
    pub osl: Option<u32>,
    /// Speculatively prefill the next turn.
    #[serde(default)]
    pub speculative_prefill: Option<bool>,
    /// Deprecated alias of `priority` for the router.
    #[serde(default)]
    pub latency_sensitivity: Option<f64>,
}

/// `nvext.routing_constraints`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RoutingConstraints {
    /// Taints a worker must carry.
    #[serde(default)]
    pub required_taints: BTreeSet<String>,
    /// Taints that scale a worker's cost.
    #[serde(default)]
    pub preferred_taints: BTreeMap<String, f32>,
}

/// `nvext.router`.
#[derive(Debug, Clone, PartialEq, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RouterParams {
    /// Target time to first token, ms.
    #[serde(default)]
    pub ttft_target: Option<f64>,
    /// Target inter-token latency, ms.
    #[serde(default)]
    pub itl_target: Option<f64>,
}

/// `DYN_DISABLE_FRONTEND_NVEXT`: what is left of a request's `nvext` on the chat,
/// completions and Responses routes — its `cache_salt` alone, when non-empty (1.6.1's
/// `retain_cache_salt`) — and whether anything else was dropped.
pub fn retain_cache_salt(nvext: Option<NvExt>) -> (Option<NvExt>, bool) {
    let Some(n) = nvext else { return (None, false) };
    let dropped = NvExt { cache_salt: None, ..n.clone() } != NvExt::default();
    let kept = n.cache_salt.filter(|s| !s.is_empty()).map(|s| NvExt { cache_salt: Some(s), ..Default::default() });
    (kept, dropped)
}

/// `body` (a JSON object) with its `nvext` member replaced by `kept` (removed when `None`),
/// the other members in their order: what a worker that takes the request as JSON is sent
/// once the disabled `nvext` fields are dropped. `None` when `body` is not an object.
pub fn rewrite_body_nvext(body: &[u8], kept: Option<&NvExt>) -> Option<Vec<u8>> {
    let mut v: serde_json::Map<String, serde_json::Value> = serde_json::from_slice(body).ok()?;
    match kept.and_then(|n| n.cache_salt.as_deref()) {
        Some(salt) => {
            v.insert("nvext".into(), serde_json::json!({ "cache_salt": salt }));
        }
        None => {
            v.shift_remove("nvext");
        }
    }
    serde_json::to_vec(&v).ok()
}

/// Logged once per process when `DYN_DISABLE_FRONTEND_NVEXT` drops something (1.6.1 logs it
/// for every such request).
pub fn warn_dropped(endpoint: crate::metrics::Endpoint) {
    static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
        crate::log::warn(&format!(
            "{}: request carried nvext fields or routing headers that DYN_DISABLE_FRONTEND_NVEXT \
             disables; dropping them (logged once)",
            endpoint.label()
        ));
    }
}

#[cfg(test)]
mod policy_tests {
    use super::*;

    fn parse(s: &str) -> NvExt {
        serde_json::from_str(s).unwrap()
    }

    #[test]
    fn only_a_non_empty_cache_salt_is_kept() {
        assert_eq!(retain_cache_salt(None), (None, false));
        let salt = parse(r#"{"cache_salt":"t1"}"#);
        assert_eq!(retain_cache_salt(Some(salt.clone())), (Some(salt.clone()), false));
        let both = parse(r#"{"cache_salt":"t1","backend_instance_id":7,"annotations":["a"]}"#);
        assert_eq!(retain_cache_salt(Some(both)), (Some(salt), true));
        assert_eq!(retain_cache_salt(Some(parse(r#"{"cache_salt":""}"#))), (None, false));
        assert_eq!(retain_cache_salt(Some(parse(r#"{"greed_sampling":true}"#))), (None, true));
        assert_eq!(retain_cache_salt(Some(parse("{}"))), (None, false));
    }

    #[test]
    fn the_forwarded_body_keeps_its_order() {
        let body = br#"{"model":"m","nvext":{"annotations":["a"],"cache_salt":"s"},"max_tokens":3}"#;
        let kept = parse(r#"{"cache_salt":"s"}"#);
        let out = rewrite_body_nvext(body, Some(&kept)).unwrap();
        assert_eq!(out, br#"{"model":"m","nvext":{"cache_salt":"s"},"max_tokens":3}"#);
        let out = rewrite_body_nvext(body, None).unwrap();
        assert_eq!(out, br#"{"model":"m","max_tokens":3}"#);
        assert_eq!(rewrite_body_nvext(b"[1]", None), None);
    }
}
