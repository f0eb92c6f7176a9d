//! `request_classifier:` of `--router-policy-config` (kv mode): the request classifier the
//! kv router runs before its queue. 1.6.1 links one type, `thunderagent` (session-aware
//! admission for agent workloads, built in `router::thunder`); its parameters are read and
//! checked here with 1.6.1's rules and messages. Read once, at start-up.
//!
//! Outside kv mode 1.6.1 ignores the section without reading it; switchyard ignores it too,
//! with a warning.

use serde_json::Value as Json;

use super::{invalid, ConfigError};

/// `thunderagent`'s parameters (1.6.1's names and defaults).
#[derive(Clone, Debug, PartialEq, serde::Deserialize)]
#[serde(default, deny_unknown_fields)]
pub struct ThunderConfig {
    /// A worker whose programs use more than this share of its KV capacity pauses programs.
    pub pause_threshold: f64,
    /// … until they use at most this share.
    pub pause_target: f64,
    /// Paused programs resume while use stays under `pause_threshold − resume_hysteresis`.
    pub resume_hysteresis: f64,
    /// A program paused this long is resumed whatever the use.
    pub resume_timeout_seconds: f64,
    /// A program idle between turns this long is forgotten.
    pub session_retention_seconds: f64,
    /// How often the scheduler pauses, resumes and forgets programs.
    pub scheduler_interval_seconds: f64,
    /// An idle program's context counts this much (1 = fully).
    pub acting_token_weight: f64,
    /// Half-life of an idle program's context when choosing where a timed-out one resumes.
    pub acting_decay_tau_seconds: f64,
    /// Tokens added to every program's charge.
    pub buffer_per_program: usize,
    /// Most requests (and programs) tracked at once.
    pub max_tracked_requests: usize,
}

impl Default for ThunderConfig {
    fn default() -> Self {
        ThunderConfig {
            pause_threshold: 0.95,
            pause_target: 0.80,
            resume_hysteresis: 0.10,
            resume_timeout_seconds: 1800.0,
            session_retention_seconds: 1800.0,
            scheduler_interval_seconds: 5.0,
            acting_token_weight: 1.0,
            acting_decay_tau_seconds: 1.0,
            buffer_per_program: 100,
            max_tracked_requests: 10_000,
        }
    }
}

impl ThunderConfig {
    /// 1.6.1's checks, in its order; the message is 1.6.1's.
    pub fn validate(&self) -> Result<(), &'static str> {
        let fraction = |v: f64| v.is_finite() && (0.0..=1.0).contains(&v);
        let duration = |v: f64| std::time::Duration::try_from_secs_f64(v).is_ok_and(|d| !d.is_zero());
        let positive = |v: f64| v.is_finite() && v > 0.0;
        if !fraction(self.pause_threshold) {
            return Err("pause_threshold must be in [0, 1]");
        }
        if !fraction(self.pause_target) {
            return Err("pause_target must be in [0, 1]");
        }
        if self.pause_target > self.pause_threshold {
            return Err("pause_target must not exceed pause_threshold");
        }
        if !fraction(self.resume_hysteresis) {
            return Err("resume_hysteresis must be in [0, 1]");
        }
        if self.resume_hysteresis > self.pause_threshold {
            return Err("resume_hysteresis must not exceed pause_threshold");
        }
        if !duration(self.resume_timeout_seconds) {
            return Err("resume_timeout_seconds must be positive");
        }
        if !duration(self.session_retention_seconds) {
            return Err("session_retention_seconds must be positive");
        }
        if !duration(self.scheduler_interval_seconds) {
            return Err("scheduler_interval_seconds must be positive");
        }
        if !positive(self.acting_token_weight) {
            return Err("acting_token_weight must be finite and positive");
        }
        if !positive(self.acting_decay_tau_seconds) {
            return Err("acting_decay_tau_seconds must be finite and positive");
        }
        if self.max_tracked_requests == 0 {
            return Err("max_tracked_requests must be positive");
        }
        Ok(())
    }
}

/// The classifier types this build links (1.6.1's wheel links the same one).
const LINKED: [&str; 1] = ["thunderagent"];

/// The `request_classifier` section `section` (kv mode), with 1.6.1's messages.
pub(super) fn read(section: &Json) -> Result<ThunderConfig, ConfigError> {
    let Json::Object(map) = section else {
        let got = match section {
            Json::String(s) => format!("string {s:?}"),
            Json::Null => "unit value".into(),
            Json::Bool(b) => format!("boolean `{b}`"),
            Json::Number(n) => format!("integer `{n}`"),
            _ => "sequence".into(),
        };
        return Err(invalid(format!(
            "request_classifier: invalid type: {got}, expected struct RawRequestClassifierConfig"
        )));
    };
    if let Some(k) = map.keys().find(|k| *k != "type" && *k != "parameters") {
        return Err(invalid(format!("request_classifier: unknown field `{k}`, expected `type` or `parameters`")));
    }
    let Some(kind) = map.get("type") else {
        return Err(invalid("request_classifier: missing field `type`"));
    };
    let Json::String(kind) = kind else {
        return Err(invalid("request_classifier: invalid type for `type`, expected a string"));
    };
    if kind.is_empty() || !kind.chars().all(|c| c.is_ascii_alphanumeric() || "_.-".contains(c)) {
        return Err(invalid(format!(
            "invalid router policy config: request_classifier classifier type name {kind:?} must match [A-Za-z0-9_.-]+"
        )));
    }
    if kind == "default" {
        return Err(invalid(
            "invalid router policy config: request_classifier type 'default' is reserved; omit request_classifier \
             to use Dynamo's pass-through classifier",
        ));
    }
    let parameters = match map.get("parameters") {
        None => Json::Object(Default::default()),
        Some(p @ Json::Object(_)) => p.clone(),
        Some(_) => {
            return Err(invalid("invalid router policy config: request_classifier parameters must be a YAML mapping"))
        }
    };
    if !LINKED.contains(&kind.as_str()) {
        return Err(invalid(format!(
            "unknown request-classifier type {kind:?}; linked classifier types: {}",
            LINKED.join(", ")
        )));
    }
    let bad = |m: String| invalid(format!("invalid parameters for request-classifier type {kind:?}: {m}"));
    let config: ThunderConfig = serde_json::from_value(parameters).map_err(|e| bad(e.to_string()))?;
    config.validate().map_err(|m| bad(format!("invalid ThunderAgent configuration: {m}")))?;
    Ok(config)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read_yaml(text: &str) -> Result<ThunderConfig, String> {
        let doc = crate::util::yaml::parse(text).unwrap();
        read(&doc["request_classifier"]).map_err(|e| e.message)
    }

    #[test]
    fn defaults_and_parameters() {
        assert_eq!(read_yaml("request_classifier: {type: thunderagent}\n").unwrap(), ThunderConfig::default());
        let c = read_yaml(
            "request_classifier:\n  type: thunderagent\n  parameters: {pause_threshold: 0.5, pause_target: 0.25, \
             resume_hysteresis: 0.05, scheduler_interval_seconds: 0.5, buffer_per_program: 16}\n",
        )
        .unwrap();
        assert_eq!((c.pause_threshold, c.pause_target, c.buffer_per_program), (0.5, 0.25, 16));
        assert_eq!(c.scheduler_interval_seconds, 0.5);
        assert_eq!(c.max_tracked_requests, 10_000);
        // 1.6.1 takes a fraction of a second for the timeouts too.
        assert!(
            read_yaml("request_classifier: {type: thunderagent, parameters: {resume_timeout_seconds: 0.5}}").is_ok()
        );
    }

    #[test]
    fn refusals_with_1_6_1_messages() {
        let cases = [
            ("{type: default}", "request_classifier type 'default' is reserved; omit request_classifier to use Dynamo's pass-through classifier"),
            ("{type: \"a b\"}", "request_classifier classifier type name \"a b\" must match [A-Za-z0-9_.-]+"),
            ("{parameters: {}}", "request_classifier: missing field `type`"),
            ("{type: thunderagent, parameters: [1]}", "request_classifier parameters must be a YAML mapping"),
            ("{type: thunderagent, parameters: null}", "request_classifier parameters must be a YAML mapping"),
            ("{type: thunderagent, extra: 1}", "request_classifier: unknown field `extra`, expected `type` or `parameters`"),
            ("thunderagent", "request_classifier: invalid type: string \"thunderagent\", expected struct RawRequestClassifierConfig"),
            ("{type: other}", "unknown request-classifier type \"other\"; linked classifier types: thunderagent"),
            ("{type: thunderagent, parameters: {pause_threshold: 1.5}}", "invalid parameters for request-classifier type \"thunderagent\": invalid ThunderAgent configuration: pause_threshold must be in [0, 1]"),
            ("{type: thunderagent, parameters: {pause_target: 0.99}}", "invalid ThunderAgent configuration: pause_target must not exceed pause_threshold"),
            ("{type: thunderagent, parameters: {resume_hysteresis: 0.96}}", "invalid ThunderAgent configuration: resume_hysteresis must not exceed pause_threshold"),
            ("{type: thunderagent, parameters: {scheduler_interval_seconds: 0}}", "invalid ThunderAgent configuration: scheduler_interval_seconds must be positive"),
            ("{type: thunderagent, parameters: {acting_decay_tau_seconds: -1}}", "invalid ThunderAgent configuration: acting_decay_tau_seconds must be finite and positive"),
            ("{type: thunderagent, parameters: {acting_token_weight: 0}}", "invalid ThunderAgent configuration: acting_token_weight must be finite and positive"),
            // JSON has no infinity: the YAML reader keeps `.inf` a string (1.6.1 reads a float
            // and refuses it as not finite); refused either way.
            ("{type: thunderagent, parameters: {acting_token_weight: .inf}}", "invalid parameters for request-classifier type \"thunderagent\""),
            ("{type: thunderagent, parameters: {max_tracked_requests: 0}}", "invalid ThunderAgent configuration: max_tracked_requests must be positive"),
            ("{type: thunderagent, parameters: {buffer_per_program: -1}}", "invalid parameters for request-classifier type \"thunderagent\": invalid value: integer `-1`, expected usize"),
            ("{type: thunderagent, parameters: {pause_threshold: x}}", "invalid type: string \"x\", expected f64"),
            ("{type: thunderagent, parameters: {bogus: 1}}", "unknown field `bogus`, expected one of `pause_threshold`, `pause_target`, `resume_hysteresis`, `resume_timeout_seconds`, `session_retention_seconds`, `scheduler_interval_seconds`, `acting_token_weight`, `acting_decay_tau_seconds`, `buffer_per_program`, `max_tracked_requests`"),
        ];
        for (section, want) in cases {
            let e = read_yaml(&format!("request_classifier: {section}\n")).unwrap_err();
            assert!(e.contains(want), "{section}: {e}");
        }
    }
}
