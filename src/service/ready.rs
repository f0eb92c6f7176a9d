//! `GET /v1/models/{model_id}/ready`: whether one model can serve requests, with the per
//! namespace detail 1.6.1 gives (its worker types, their live workers and needs, the types
//! present and missing). 200 when ready, 503 with the same body when not; an unknown model
//! is 404 (the caller's). Shard thread; reads the Registry snapshot only.

use std::collections::{BTreeMap, BTreeSet};

use serde_json::{json, Value};

use crate::registry::Serving;

/// One pool of the model: its role and live workers.
struct Unit<'a> {
    worker_type: Option<&'a str>,
    live: usize,
    needs: &'a [Vec<String>],
}

/// The readiness body of `model` and its status.
pub fn readiness(model: &str, serving: &Serving) -> (u16, Value) {
    let mut units = vec![Unit {
        worker_type: serving.role.worker_type.as_deref(),
        live: serving.workers.len(),
        needs: &serving.role.needs,
    }];
    if let Some(p) = &serving.prefill {
        units.push(Unit { worker_type: p.role.worker_type.as_deref(), live: p.workers.len(), needs: &p.role.needs });
    }
    let ns = namespace(&units);
    let ready = ns["ready"] == Value::Bool(true);
    let mut body = json!({ "model": model, "ready": ready });
    if !ready {
        body["reason"] = json!("no namespace has all required worker types live");
    }
    body["namespaces"] = json!({ serving.role.namespace.as_str(): ns });
    (if ready { 200 } else { 503 }, body)
}

/// One namespace's readiness, by 1.6.1's rules: a card without a worker type (from before
/// worker types) makes it ready as soon as any worker is live; otherwise every registered
/// type needs a live worker and every live pool one of its `needs` alternatives present.
fn namespace(units: &[Unit]) -> Value {
    let mut present = BTreeSet::new();
    let mut legacy = None::<usize>;
    let any_live = units.iter().any(|u| u.live > 0);
    for u in units {
        match u.worker_type {
            Some(t) if u.live > 0 => {
                present.insert(t);
            }
            Some(_) => {}
            None => *legacy.get_or_insert(0) += u.live,
        }
    }
    let mut missing = BTreeSet::new();
    if legacy.is_none() {
        for u in units {
            let Some(t) = u.worker_type else { continue };
            if !present.contains(t) {
                missing.insert(t);
            }
            if u.live == 0 || u.needs.is_empty() {
                continue;
            }
            if !u.needs.iter().any(|alt| alt.iter().all(|t| present.contains(t.as_str()))) {
                missing.extend(u.needs.iter().flatten().map(String::as_str).filter(|t| !present.contains(t)));
            }
        }
    }
    let ready = any_live && missing.is_empty();
    let reason = match legacy {
        Some(live) if ready => Some(format!(
            "legacy worker(s) present (no worker_type); readiness gating bypassed (ready while {live} worker(s) \
             live) — compat window only"
        )),
        Some(_) => Some("legacy worker(s) present but no live worker".to_string()),
        None if ready => None,
        None => Some(format!("missing worker types: {}", missing.iter().copied().collect::<Vec<_>>().join(", "))),
    };
    let mut types = BTreeMap::new();
    for u in units {
        if let Some(t) = u.worker_type {
            let e = types.entry(t).or_insert_with(|| json!({ "workers": 0, "needs": u.needs }));
            e["workers"] = json!(e["workers"].as_u64().unwrap_or(0) + u.live as u64);
        }
    }
    let mut ns = json!({ "ready": ready });
    if let Some(r) = reason {
        ns["reason"] = json!(r);
    }
    ns["worker_types"] = json!(types);
    ns["present"] = json!(present);
    ns["missing_worker_types"] = json!(missing);
    ns
}

#[cfg(test)]
mod tests {
    use super::*;

    fn unit<'a>(t: Option<&'a str>, live: usize, needs: &'a [Vec<String>]) -> Unit<'a> {
        Unit { worker_type: t, live, needs }
    }

    #[test]
    fn an_aggregated_pool_is_ready_with_a_live_worker() {
        let ns = namespace(&[unit(Some("aggregated"), 1, &[])]);
        assert_eq!(
            serde_json::to_string(&ns).unwrap(),
            r#"{"ready":true,"worker_types":{"aggregated":{"workers":1,"needs":[]}},"present":["aggregated"],"missing_worker_types":[]}"#
        );
    }

    #[test]
    fn decode_workers_wait_for_the_prefill_workers_they_need() {
        let needs = vec![vec!["prefill".to_string()]];
        let ns = namespace(&[unit(Some("decode"), 2, &needs)]);
        assert_eq!(ns["ready"], false);
        assert_eq!(ns["reason"], "missing worker types: prefill");
        assert_eq!(ns["missing_worker_types"], json!(["prefill"]));
        let ns = namespace(&[unit(Some("decode"), 2, &needs), unit(Some("prefill"), 1, &[])]);
        assert_eq!(ns["ready"], true);
        assert_eq!(ns["present"], json!(["decode", "prefill"]));
    }

    #[test]
    fn a_card_without_a_worker_type_is_ready_with_any_live_worker() {
        let ns = namespace(&[unit(None, 3, &[])]);
        assert_eq!(ns["ready"], true);
        assert!(ns["reason"].as_str().unwrap().contains("ready while 3 worker(s) live"));
        assert_eq!(ns["worker_types"], json!({}));
    }
}
