//! `--router-conditional-disagg` and `--router-conditional-disagg-config JSON`: when a request
//! of a disaggregated model may skip its prefill leg (docs/dynamo/disaggregated.md §4), parsed
//! and checked with Dynamo 1.6.1's messages and exit codes. Read at start-up.

use serde_json::Value as Json;

use super::parse::{Parsed, Source};
use super::{boolean, float, text, ConfigError};

const FLAG: &str = "--router-conditional-disagg-config";
const KEYS: [&str; 5] =
    ["policy", "eff_isl_threshold", "eff_isl_ratio_threshold", "prefill_busy_threshold", "decode_busy_threshold"];

/// Which requests skip the prefill leg.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    /// Little left to prefill after the decode worker's cache.
    IslBounding,
    /// The prefill worker is busy.
    PrefillLoad,
    /// Either.
    IslOrLoad,
}

/// The settings of conditional disaggregation (on when present in the config).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct ConditionalDisagg {
    pub policy: Policy,
    /// Skip when fewer than this many prompt tokens are left to prefill...
    pub eff_isl_threshold: u64,
    /// ... and they are less than this share of the prompt.
    pub eff_isl_ratio_threshold: f64,
    /// A prefill worker is busy above this share of its `max_num_batched_tokens` booked.
    pub prefill_busy_threshold: Option<f64>,
    /// A skip is vetoed when the decode worker's projected blocks exceed this share of its
    /// KV blocks.
    pub decode_busy_threshold: Option<f64>,
}

impl Default for ConditionalDisagg {
    fn default() -> Self {
        ConditionalDisagg {
            policy: Policy::IslBounding,
            eff_isl_threshold: 2048,
            eff_isl_ratio_threshold: 0.7,
            prefill_busy_threshold: None,
            decode_busy_threshold: None,
        }
    }
}

impl ConditionalDisagg {
    /// Whether the policy skips the prefill leg, given the ISL rule's answer (`isl`) and a way
    /// to ask whether the prefill router's choice is busy (asked only when the policy needs it).
    pub fn skips(&self, isl: bool, prefill_busy: impl FnOnce() -> bool) -> bool {
        match self.policy {
            Policy::IslBounding => isl,
            Policy::PrefillLoad => prefill_busy(),
            Policy::IslOrLoad => isl || prefill_busy(),
        }
    }

    /// Whether a request of `isl` prompt tokens with `overlap_tokens` cached on the decode
    /// worker qualifies under the ISL rule (both comparisons strict: a fresh prompt never does).
    pub fn isl_allows(&self, isl: u64, overlap_tokens: u64) -> bool {
        let eff = isl.saturating_sub(overlap_tokens);
        eff < self.eff_isl_threshold && (eff as f64) < self.eff_isl_ratio_threshold * isl.max(1) as f64
    }
}

/// The config JSON's type checks (1.6.1's argument type function): the message on failure.
fn typed(text: &str) -> Result<ConditionalDisagg, String> {
    let v: Json = serde_json::from_str(text).map_err(|_| format!("{FLAG} must be a JSON object"))?;
    let Json::Object(m) = v else { return Err(format!("{FLAG} must be a JSON object")) };
    let mut unknown: Vec<&str> = m.keys().map(String::as_str).filter(|k| !KEYS.contains(k)).collect();
    if !unknown.is_empty() {
        unknown.sort_unstable();
        return Err(format!("{FLAG} has unknown field(s): {}", unknown.join(", ")));
    }
    let mut c = ConditionalDisagg::default();
    let number = |k: &str, v: &Json, nullable: bool| match v {
        Json::Number(n) => Ok(n.as_f64()),
        Json::Null if nullable => Ok(None),
        _ => Err(format!("{FLAG} {k} must be a number")),
    };
    for (k, v) in &m {
        match k.as_str() {
            "policy" => {
                let name = v.as_str().ok_or_else(|| format!("{FLAG} policy must be a string"))?;
                c.policy = match name {
                    "isl_bounding" => Policy::IslBounding,
                    "prefill_load" => Policy::PrefillLoad,
                    "isl_or_load" => Policy::IslOrLoad,
                    _ => {
                        return Err(format!(
                            "\u{0}{FLAG} policy must be one of 'isl_bounding', 'prefill_load', 'isl_or_load'"
                        ))
                    }
                };
            }
            "eff_isl_threshold" => match v.as_i64() {
                Some(n) if !v.is_f64() && n < 0 => return Err(format!("\u{0}{FLAG} eff_isl_threshold must be >= 0")),
                Some(n) if !v.is_f64() => c.eff_isl_threshold = n as u64,
                _ => return Err(format!("{FLAG} eff_isl_threshold must be an integer")),
            },
            "eff_isl_ratio_threshold" => {
                let r = number(k, v, false)?.unwrap_or(f64::NAN);
                if !(0.0..=1.0).contains(&r) {
                    return Err(format!("\u{0}{FLAG} eff_isl_ratio_threshold must be in [0.0, 1.0]"));
                }
                c.eff_isl_ratio_threshold = r;
            }
            "prefill_busy_threshold" | "decode_busy_threshold" => {
                let t = number(k, v, true)?;
                if t.is_some_and(|t| t < 0.0) {
                    return Err(format!("\u{0}{FLAG} {k} must be >= 0"));
                }
                if k == "prefill_busy_threshold" {
                    c.prefill_busy_threshold = t;
                } else {
                    c.decode_busy_threshold = t;
                }
            }
            _ => unreachable!("keys were checked"),
        }
    }
    Ok(c)
}

/// The conditional disaggregation `p` asks for (`None`: off), or the error 1.6.1 gives.
/// Type errors exit 2 (`argument --router-conditional-disagg-config: …`) when the option
/// was given, 1 when its variable was; value errors exit 1.
pub(super) fn settings(p: &Parsed) -> Result<Option<ConditionalDisagg>, ConfigError> {
    let from_env = p.values.iter().any(|(f, _, s)| f.dest == "conditional_disagg_config" && *s == Source::Env);
    let fail = |message: String| ConfigError { message, exit_code: 1 };
    // In 1.6.1's order: type errors (argument parsing), the config without the option, a load
    // policy without its threshold, the values, then the router mode.
    let (mut config, value_error) = match text(p, "conditional_disagg_config").map(typed) {
        None => (ConditionalDisagg::default(), None),
        Some(Ok(c)) => (c, None),
        Some(Err(m)) => match m.strip_prefix('\u{0}') {
            Some(m) => (partial_policy(p), Some(m.to_string())),
            None if from_env => return Err(fail(m)),
            None => return Err(ConfigError { message: format!("argument {FLAG}: {m}"), exit_code: 2 }),
        },
    };
    let enabled = boolean(p, "conditional_disagg_enabled");
    if text(p, "conditional_disagg_config").is_some() && !enabled {
        return Err(fail(format!("{FLAG} requires --router-conditional-disagg")));
    }
    if !enabled {
        return match value_error {
            Some(m) => Err(fail(m)),
            None => Ok(None),
        };
    }
    if matches!(config.policy, Policy::PrefillLoad | Policy::IslOrLoad) && config.prefill_busy_threshold.is_none() {
        match float(p, "router_queue_threshold") {
            Some(t) => config.prefill_busy_threshold = Some(t),
            None => {
                let name = if config.policy == Policy::PrefillLoad { "prefill_load" } else { "isl_or_load" };
                return Err(ConfigError {
                    message: format!(
                        "conditional_disagg policy='{name}' needs prefill_busy_threshold, but neither \
                         prefill_busy_threshold nor --router-queue-threshold is set"
                    ),
                    exit_code: 1,
                });
            }
        }
    }
    if let Some(m) = value_error {
        return Err(fail(m));
    }
    if text(p, "router_mode") != Some("kv") && !boolean(p, "load_aware") {
        return Err(fail("--router-conditional-disagg requires --router-mode=kv".into()));
    }
    if !boolean(p, "use_kv_events") {
        return Err(fail("--router-conditional-disagg requires --router-kv-events".into()));
    }
    Ok(Some(config))
}

/// The policy a config with a value error names, if it names a valid one (the load-threshold
/// check, which 1.6.1 makes before the value checks, needs it).
fn partial_policy(p: &Parsed) -> ConditionalDisagg {
    let policy = text(p, "conditional_disagg_config")
        .and_then(|t| serde_json::from_str::<Json>(t).ok())
        .and_then(|v| v["policy"].as_str().map(str::to_string));
    let policy = match policy.as_deref() {
        Some("prefill_load") => Policy::PrefillLoad,
        Some("isl_or_load") => Policy::IslOrLoad,
        _ => Policy::IslBounding,
    };
    ConditionalDisagg { policy, ..ConditionalDisagg::default() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_isl_rule_is_1_6_1s() {
        // Observed on 1.6.1 (B 16; overlap in whole blocks): prompt, cached tokens → skipped?
        let c = ConditionalDisagg::default();
        for (isl, cached, skip) in [
            (1000, 0, false),
            (1000, 992, true),
            (5500, 2992, false),
            (520, 320, true),
            (1120, 320, false),
            (1020, 320, true),
            (4112, 2064, false),
            (4111, 2064, true),
            (9, 0, false),
        ] {
            assert_eq!(c.isl_allows(isl, cached), skip, "{isl} with {cached} cached");
        }
        let wide = ConditionalDisagg { eff_isl_threshold: 100_000, eff_isl_ratio_threshold: 1.0, ..c };
        assert!(!wide.isl_allows(3000, 0), "a fresh prompt never");
        assert!(wide.isl_allows(5500, 2992));
        assert!(!ConditionalDisagg { eff_isl_threshold: 0, ..c }.isl_allows(3000, 2992));
    }

    #[test]
    fn config_errors_are_1_6_1s() {
        let t = |s: &str| typed(s).map_err(|m| m.trim_start_matches('\u{0}').to_string());
        assert_eq!(t(r#"{"bogus":1,"alpha":2}"#).unwrap_err(), format!("{FLAG} has unknown field(s): alpha, bogus"));
        assert_eq!(t("nope").unwrap_err(), format!("{FLAG} must be a JSON object"));
        assert_eq!(t("[1]").unwrap_err(), format!("{FLAG} must be a JSON object"));
        assert_eq!(
            t(r#"{"eff_isl_ratio_threshold":"0.5"}"#).unwrap_err(),
            format!("{FLAG} eff_isl_ratio_threshold must be a number")
        );
        assert_eq!(
            t(r#"{"eff_isl_ratio_threshold":null}"#).unwrap_err(),
            format!("{FLAG} eff_isl_ratio_threshold must be a number")
        );
        assert_eq!(
            t(r#"{"eff_isl_threshold":1.5}"#).unwrap_err(),
            format!("{FLAG} eff_isl_threshold must be an integer")
        );
        assert_eq!(
            t(r#"{"eff_isl_threshold":true}"#).unwrap_err(),
            format!("{FLAG} eff_isl_threshold must be an integer")
        );
        assert_eq!(t(r#"{"policy":3}"#).unwrap_err(), format!("{FLAG} policy must be a string"));
        assert_eq!(
            t(r#"{"policy":"always"}"#).unwrap_err(),
            format!("{FLAG} policy must be one of 'isl_bounding', 'prefill_load', 'isl_or_load'")
        );
        assert_eq!(t(r#"{"eff_isl_threshold":-1}"#).unwrap_err(), format!("{FLAG} eff_isl_threshold must be >= 0"));
        assert_eq!(
            t(r#"{"eff_isl_ratio_threshold":1.01}"#).unwrap_err(),
            format!("{FLAG} eff_isl_ratio_threshold must be in [0.0, 1.0]")
        );
        assert_eq!(
            t(r#"{"decode_busy_threshold":-0.5}"#).unwrap_err(),
            format!("{FLAG} decode_busy_threshold must be >= 0")
        );
        let c = t(r#"{"policy":"isl_or_load","prefill_busy_threshold":null,"decode_busy_threshold":1,"eff_isl_threshold":10}"#)
            .unwrap();
        assert_eq!(
            c,
            ConditionalDisagg {
                policy: Policy::IslOrLoad,
                eff_isl_threshold: 10,
                decode_busy_threshold: Some(1.0),
                ..ConditionalDisagg::default()
            }
        );
        assert_eq!(t("{}").unwrap(), ConditionalDisagg::default());
    }
}
