//! What `--discovery-backend kubernetes` knows of the cluster, and the join that turns it into
//! discovery records: a pure state machine fed with the objects the list/watch threads see
//! ([`super::api`]), unit-tested here. Runs on the control thread.
//!
//! Dynamo 1.6.1's rules (docs/dynamo/kubernetes-discovery.md):
//! * **Readiness** (pod mode): each `EndpointSlice` endpoint with `conditions.ready == true`
//!   (absent = false) and a `targetRef` naming a pod (`name` and `uid` both non-empty) says
//!   "pod `name` with uid `uid` is ready". Container mode reads `Pod`s instead: every
//!   container whose status is ready is a target named `<pod>-<container>` (the container
//!   `main`: the pod's own name).
//! * **Metadata**: the `DynamoWorkerMetadata` named after the target holds, in `spec.data`,
//!   the same records the etcd and file backends store one by one (`endpoints`,
//!   `model_cards`, `event_channels`, `event_sources`, each a map of key → record).
//! * **The join**: a target's records are live only while it is ready **and** its metadata's
//!   `ownerReferences` name a `Pod` with the ready target's uid. A target reported ready with
//!   two different uids (two slices disagreeing) is left out. A metadata object whose
//!   `spec.data` is missing or does not parse keeps its last valid data while its own uid
//!   and owner uid stay the same.

use std::collections::{BTreeMap, HashMap};

use serde_json::Value;

use crate::discovery::records::{BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC};

/// The kinds of object followed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Kind {
    /// `discovery.k8s.io/v1` `EndpointSlice` (pod mode's readiness).
    Slices,
    /// `v1` `Pod` (container mode's readiness).
    Pods,
    /// `nvidia.com/v1alpha1` `DynamoWorkerMetadata`.
    Metadata,
}

/// One change seen by a list/watch thread.
#[derive(Clone, Debug, PartialEq)]
pub enum Change {
    /// A complete listing: every object of the kind (the previous ones are forgotten).
    Listed(Kind, Vec<Value>),
    /// An object added or modified.
    Upsert(Kind, Value),
    /// An object deleted.
    Deleted(Kind, Value),
}

/// `spec.data`'s maps and the discovery bucket each one's records belong to.
const DATA_BUCKETS: [(&str, &str); 4] = [
    ("endpoints", BUCKET_INSTANCES),
    ("model_cards", BUCKET_MDC),
    ("event_channels", BUCKET_EVENT_CHANNELS),
    ("event_sources", BUCKET_EVENT_SOURCES),
];

#[derive(Debug, Default)]
struct Metadata {
    uid: String,
    owner_uid: Option<String>,
    /// Records by bucket and key, serialised; `None` until a valid `spec.data` was seen.
    records: Option<Vec<(&'static str, String, Vec<u8>)>>,
}

/// The cluster as far as discovery cares (see the module doc).
#[derive(Debug, Default)]
pub struct KubeState {
    /// Per readiness object (`namespace/name` of a slice or pod): its ready `(target, pod uid)`s.
    ready: HashMap<String, Vec<(String, String)>>,
    metadata: HashMap<String, Metadata>,
    /// Kinds whose first listing has arrived.
    listed: Vec<Kind>,
}

fn name_of(obj: &Value) -> String {
    let m = &obj["metadata"];
    format!("{}/{}", m["namespace"].as_str().unwrap_or(""), m["name"].as_str().unwrap_or(""))
}

fn text(v: &Value) -> Option<&str> {
    v.as_str().filter(|s| !s.is_empty())
}

/// The ready targets of an `EndpointSlice`.
fn slice_ready(slice: &Value) -> Vec<(String, String)> {
    let mut out = Vec::new();
    for ep in slice["endpoints"].as_array().into_iter().flatten() {
        if ep["conditions"]["ready"].as_bool() != Some(true) {
            continue;
        }
        let target = &ep["targetRef"];
        match (text(&target["name"]), text(&target["uid"])) {
            (Some(name), Some(uid)) => out.push((name.to_string(), uid.to_string())),
            (Some(name), None) => {
                crate::log::warn(&format!("kubernetes discovery: endpoint of pod {name} has no targetRef.uid; skipped"))
            }
            _ => {}
        }
    }
    out
}

/// The ready targets of a `Pod` (container mode).
fn pod_ready(pod: &Value) -> Vec<(String, String)> {
    let (Some(pod_name), Some(uid)) = (text(&pod["metadata"]["name"]), text(&pod["metadata"]["uid"])) else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for c in pod["status"]["containerStatuses"].as_array().into_iter().flatten() {
        if c["ready"].as_bool() != Some(true) {
            continue;
        }
        let Some(container) = text(&c["name"]) else { continue };
        out.push((target_name(pod_name, Some(container)), uid.to_string()));
    }
    out
}

/// The name of the metadata object of a pod's (or one of its containers') target.
pub fn target_name(pod: &str, container: Option<&str>) -> String {
    match container {
        None | Some("main") => pod.to_string(),
        Some(c) => format!("{pod}-{c}"),
    }
}

/// The records of a metadata object's `spec.data`; `None` when it is missing or not maps.
fn data_records(cr: &str, data: &Value) -> Option<Vec<(&'static str, String, Vec<u8>)>> {
    let data = data.as_object()?;
    let mut out = Vec::new();
    for (field, bucket) in DATA_BUCKETS {
        let Some(map) = data.get(field) else { continue };
        for (key, record) in map.as_object()? {
            out.push((bucket, format!("{cr}/{key}"), serde_json::to_vec(record).ok()?));
        }
    }
    Some(out)
}

impl KubeState {
    /// Applies one change.
    pub fn apply(&mut self, change: Change) {
        match change {
            Change::Listed(kind, objects) => {
                match kind {
                    Kind::Metadata => {
                        let mut old = std::mem::take(&mut self.metadata);
                        for obj in &objects {
                            let prev = old.remove(obj["metadata"]["name"].as_str().unwrap_or(""));
                            self.upsert_metadata(obj, prev);
                        }
                    }
                    Kind::Slices | Kind::Pods => {
                        self.ready.clear();
                        for obj in &objects {
                            self.upsert_ready(kind, obj);
                        }
                    }
                }
                if !self.listed.contains(&kind) {
                    self.listed.push(kind);
                }
            }
            Change::Upsert(Kind::Metadata, obj) => {
                let prev = self.metadata.remove(obj["metadata"]["name"].as_str().unwrap_or(""));
                self.upsert_metadata(&obj, prev);
            }
            Change::Upsert(kind, obj) => self.upsert_ready(kind, &obj),
            Change::Deleted(Kind::Metadata, obj) => {
                self.metadata.remove(obj["metadata"]["name"].as_str().unwrap_or(""));
            }
            Change::Deleted(_, obj) => {
                self.ready.remove(&name_of(&obj));
            }
        }
    }

    /// Whether the first listing of every kind in `kinds` has arrived (1.6.1 answers no
    /// discovery question before that).
    pub fn synced(&self, kinds: &[Kind]) -> bool {
        kinds.iter().all(|k| self.listed.contains(k))
    }

    fn upsert_ready(&mut self, kind: Kind, obj: &Value) {
        let targets = if kind == Kind::Pods { pod_ready(obj) } else { slice_ready(obj) };
        self.ready.insert(name_of(obj), targets);
    }

    fn upsert_metadata(&mut self, obj: &Value, prev: Option<Metadata>) {
        let Some(name) = text(&obj["metadata"]["name"]) else { return };
        let uid = obj["metadata"]["uid"].as_str().unwrap_or("").to_string();
        let owner_uid = obj["metadata"]["ownerReferences"]
            .as_array()
            .into_iter()
            .flatten()
            .find(|o| o["kind"].as_str() == Some("Pod"))
            .and_then(|o| text(&o["uid"]))
            .map(str::to_string);
        let mut records = data_records(name, &obj["spec"]["data"]);
        if records.is_none() {
            match prev {
                Some(prev) if prev.uid == uid && prev.owner_uid == owner_uid => {
                    crate::log::warn(&format!(
                        "kubernetes discovery: DynamoWorkerMetadata {name} has no valid spec.data; keeping its last"
                    ));
                    records = prev.records;
                }
                _ => crate::log::warn(&format!(
                    "kubernetes discovery: DynamoWorkerMetadata {name} has no valid spec.data; ignored"
                )),
            }
        }
        self.metadata.insert(name.to_string(), Metadata { uid, owner_uid, records });
    }

    /// Every live record: `(bucket, key, value)`, keys `<target>/<key in spec.data>`.
    pub fn records(&self) -> Vec<(&'static str, &str, &[u8])> {
        // Each target's uid, or None where readiness sources disagree.
        let mut targets: BTreeMap<&str, Option<&str>> = BTreeMap::new();
        for (target, uid) in self.ready.values().flatten() {
            targets
                .entry(target.as_str())
                .and_modify(|seen| {
                    if *seen != Some(uid.as_str()) {
                        *seen = None;
                    }
                })
                .or_insert(Some(uid.as_str()));
        }
        let mut out = Vec::new();
        for (target, uid) in targets {
            let Some(uid) = uid else {
                crate::log::warn(&format!(
                    "kubernetes discovery: pod {target} is ready under two uids; excluded until they agree"
                ));
                continue;
            };
            let Some(m) = self.metadata.get(target) else { continue };
            if m.owner_uid.as_deref() != Some(uid) {
                continue;
            }
            for (bucket, key, bytes) in m.records.iter().flatten() {
                out.push((*bucket, key.as_str(), bytes.as_slice()));
            }
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn slice(name: &str, endpoints: Value) -> Value {
        json!({"metadata": {"name": name, "namespace": "dynamo"}, "addressType": "IPv4", "endpoints": endpoints})
    }

    fn ready(pod: &str, uid: &str, is: bool) -> Value {
        json!({"addresses": ["10.0.0.1"], "conditions": {"ready": is}, "targetRef": {"kind": "Pod", "name": pod, "uid": uid}})
    }

    fn dwm(pod: &str, uid: &str, data: Value) -> Value {
        json!({
            "metadata": {"name": pod, "namespace": "dynamo", "uid": format!("cr-{pod}"),
                         "ownerReferences": [{"apiVersion": "v1", "kind": "Pod", "name": pod, "uid": uid}]},
            "spec": {"data": data}
        })
    }

    fn data(id: &str) -> Value {
        json!({
            "endpoints": {format!("dynamo/backend/generate/{id}"): {"type": "Endpoint", "instance_id": 1}},
            "model_cards": {format!("dynamo/backend/generate/{id}"): {"type": "Model"}},
            "event_channels": {}
        })
    }

    fn keys(s: &KubeState) -> Vec<String> {
        s.records().iter().map(|(b, k, _)| format!("{b} {k}")).collect()
    }

    #[test]
    fn a_target_is_live_while_ready_and_owned_by_the_ready_pod() {
        let mut s = KubeState::default();
        assert!(!s.synced(&[Kind::Slices, Kind::Metadata]));
        s.apply(Change::Listed(Kind::Slices, vec![slice("frontend", json!([ready("w0", "u0", true)]))]));
        assert!(!s.synced(&[Kind::Slices, Kind::Metadata]), "metadata not listed yet");
        s.apply(Change::Listed(Kind::Metadata, vec![dwm("w0", "u0", data("a"))]));
        assert!(s.synced(&[Kind::Slices, Kind::Metadata]));
        assert_eq!(keys(&s), ["v1/instances w0/dynamo/backend/generate/a", "v1/mdc w0/dynamo/backend/generate/a"]);
        let (_, _, bytes) = s.records()[0];
        assert_eq!(serde_json::from_slice::<Value>(bytes).unwrap()["type"], "Endpoint");
        // Not ready: gone; ready again: back.
        s.apply(Change::Upsert(Kind::Slices, slice("frontend", json!([ready("w0", "u0", false)]))));
        assert!(keys(&s).is_empty());
        s.apply(Change::Upsert(Kind::Slices, slice("frontend", json!([ready("w0", "u0", true)]))));
        assert_eq!(keys(&s).len(), 2);
        // A pod of the same name with another uid (restarted) is not the owner.
        s.apply(Change::Upsert(Kind::Slices, slice("frontend", json!([ready("w0", "u1", true)]))));
        assert!(keys(&s).is_empty());
        s.apply(Change::Upsert(Kind::Metadata, dwm("w0", "u1", data("b"))));
        assert_eq!(keys(&s)[0], "v1/instances w0/dynamo/backend/generate/b");
        s.apply(Change::Deleted(Kind::Metadata, dwm("w0", "u1", json!(null))));
        assert!(keys(&s).is_empty());
    }

    #[test]
    fn disagreeing_slices_exclude_a_target_and_bad_data_keeps_the_last() {
        let mut s = KubeState::default();
        s.apply(Change::Listed(
            Kind::Slices,
            vec![slice("a", json!([ready("w0", "u0", true)])), slice("b", json!([ready("w0", "u9", true)]))],
        ));
        s.apply(Change::Listed(Kind::Metadata, vec![dwm("w0", "u0", data("a"))]));
        assert!(keys(&s).is_empty(), "two uids for one pod");
        s.apply(Change::Deleted(Kind::Slices, slice("b", json!([]))));
        assert_eq!(keys(&s).len(), 2);
        // spec.data broken: the last valid data stays (same object, same owner)...
        s.apply(Change::Upsert(Kind::Metadata, dwm("w0", "u0", json!("garbage"))));
        assert_eq!(keys(&s).len(), 2);
        // ... but not across a new owner.
        s.apply(Change::Upsert(Kind::Metadata, dwm("w0", "u5", json!(null))));
        assert!(keys(&s).is_empty());
        // An endpoint without a uid is skipped; a missing ready condition is not ready.
        let no_uid = json!({"addresses": ["x"], "conditions": {"ready": true}, "targetRef": {"name": "w0"}});
        let no_cond = json!({"addresses": ["x"], "targetRef": {"name": "w0", "uid": "u0"}});
        s.apply(Change::Listed(Kind::Slices, vec![slice("a", json!([no_uid, no_cond]))]));
        s.apply(Change::Upsert(Kind::Metadata, dwm("w0", "u0", data("a"))));
        assert!(keys(&s).is_empty());
    }

    #[test]
    fn container_mode_targets_are_ready_containers() {
        let mut s = KubeState::default();
        let pod = json!({
            "metadata": {"name": "p", "namespace": "dynamo", "uid": "pu"},
            "status": {"containerStatuses": [{"name": "main", "ready": true}, {"name": "side", "ready": true},
                                             {"name": "slow", "ready": false}]}
        });
        s.apply(Change::Listed(Kind::Pods, vec![pod]));
        s.apply(Change::Listed(
            Kind::Metadata,
            vec![dwm("p", "pu", data("a")), dwm("p-side", "pu", data("b")), dwm("p-slow", "pu", data("c"))],
        ));
        let k = keys(&s);
        assert_eq!(k.len(), 4, "{k:?}");
        assert!(k.iter().all(|k| !k.contains("p-slow")), "{k:?}");
        assert_eq!(target_name("p", Some("x")), "p-x");
    }
}
