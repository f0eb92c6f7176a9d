//! Typed reads of the parsed options (`int`, `float`, `boolean`, `text`, seconds, numeric
//! variables) shared by the configuration's modules, and the kv router's cost parameters
//! built from them. Runs at start-up, on the main thread.

use std::time::Duration;

use super::parse::{Parsed, Value};
use super::{flags, invalid, settings, ConfigError};

pub(super) fn int(p: &Parsed, dest: &str) -> Option<i64> {
    match p.get(dest) {
        Value::Int(i) => Some(*i),
        _ => None,
    }
}
pub(super) fn float(p: &Parsed, dest: &str) -> Option<f64> {
    match p.get(dest) {
        Value::Float(f) => Some(*f),
        Value::Int(i) => Some(*i as f64),
        _ => None,
    }
}
pub(super) fn boolean(p: &Parsed, dest: &str) -> bool {
    matches!(p.get(dest), Value::Bool(true))
}
pub(super) fn text<'a>(p: &'a Parsed, dest: &str) -> Option<&'a str> {
    p.get(dest).as_str().filter(|s| !s.is_empty())
}

pub(super) fn env_number<T: std::str::FromStr>(
    env: &dyn Fn(&str) -> Option<String>,
    var: &str,
    default: T,
) -> Result<T, ConfigError> {
    match env(var) {
        None => Ok(default),
        Some(v) => v.trim().parse().map_err(|_| invalid(format!("{var}: invalid value '{v}'"))),
    }
}

pub(super) fn secs(p: &Parsed, dest: &str) -> Result<Duration, ConfigError> {
    let s = float(p, dest).unwrap_or(0.0);
    if !(s.is_finite() && s > 0.0) {
        return Err(invalid(format!("--{} must be a positive number of seconds", dest.replace('_', "-"))));
    }
    Ok(Duration::from_secs_f64(s))
}

/// The kv router's cost parameters; the deprecated `--router-kv-overlap-score-weight` sets
/// the prefill load scale, as 1.6.1 maps it.
pub(super) fn kv_cost(p: &Parsed) -> Result<settings::CostParams, ConfigError> {
    let d = settings::CostParams::default();
    let number = |dest: &str, default: f64| -> Result<f64, ConfigError> {
        let v = float(p, dest).unwrap_or(default);
        if !(v.is_finite() && v >= 0.0) {
            return Err(invalid(format!("{} must be a finite number >= 0, got {v}", flag_name(dest))));
        }
        Ok(v)
    };
    let scale = match float(p, "overlap_score_weight") {
        Some(_) => number("overlap_score_weight", d.prefill_load_scale)?,
        None => number("prefill_load_scale", d.prefill_load_scale)?,
    };
    Ok(settings::CostParams {
        overlap_credit: number("overlap_score_credit", d.overlap_credit)?,
        overlap_credit_decay: number("overlap_score_credit_decay", d.overlap_credit_decay)?,
        prefill_load_scale: scale,
        decode_active_request_weight: number("decode_active_request_weight", d.decode_active_request_weight)?,
        temperature: number("router_temperature", d.temperature)?,
        track_prefill_tokens: boolean(p, "router_track_prefill_tokens"),
        track_active_blocks: boolean(p, "router_track_active_blocks"),
        track_output_blocks: boolean(p, "router_track_output_blocks"),
        assume_kv_reuse: boolean(p, "router_assume_kv_reuse"),
        prefer_room: text(p, "router_tie_break") != Some("random"),
        host_cache_hit_weight: float(p, "host_cache_hit_weight").unwrap_or(d.host_cache_hit_weight),
        disk_cache_hit_weight: float(p, "disk_cache_hit_weight").unwrap_or(d.disk_cache_hit_weight),
    })
}

pub(super) fn flag_name(dest: &str) -> String {
    flags::by_dest(dest).map_or_else(|| format!("--{}", dest.replace('_', "-")), |f| f.primary().to_string())
}
