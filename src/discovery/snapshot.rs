//! What every discovery backend produces: a [`Snapshot`] of the live records, and the
//! [`Registry`] built from it.
//!
//! Backends differ only in where records live and how liveness is decided (file mtimes,
//! etcd leases, in-process owners). Each hands [`build`] the raw records it considers live —
//! bucket, decoded key, bytes — and gets the same parsing, namespace filtering and
//! card-to-instance join ([`ServedInstance`]). [`Catalog`] turns snapshots into Registries
//! (keeping each model's `created` while it stays served), and [`watch`] is the loop the
//! control thread runs over any [`Source`].
//!
//! Blocking; runs on the control thread, never on a shard.

use std::collections::{BTreeMap, BTreeSet};
use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::records::{
    parse_record, EndpointId, EndpointRecord, ModelCard, ModelRecord, Record, BUCKET_EVENT_CHANNELS,
    BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC,
};
use crate::config::NamespaceFilter;
use crate::registry::{ModelEntry, Registry};

/// True when `namespace` passes the filter.
pub fn namespace_matches(filter: &NamespaceFilter, namespace: &str) -> bool {
    match filter {
        NamespaceFilter::Any => true,
        NamespaceFilter::Exact(ns) => ns == namespace,
        NamespaceFilter::Prefix(p) => namespace.starts_with(p.as_str()),
    }
}

/// One live record read from a bucket.
#[derive(Clone, Debug, PartialEq)]
pub struct Entry<T> {
    /// The decoded key, e.g. `dynamo/backend/generate/2aed21ef7e3e48b7`.
    pub key: String,
    pub modified: SystemTime,
    pub record: T,
    /// The record exactly as stored (key order kept).
    pub raw: Value,
}

/// A record that was skipped, and why (temporaries and expired records are skipped
/// silently). Ordered by bucket, then name.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Skipped {
    pub bucket: &'static str,
    pub file_name: String,
    pub reason: String,
}

/// An instance that receives traffic: an endpoint record plus a model card with the same
/// namespace, component, endpoint and instance id (docs/dynamo/request-plane.md §3.8).
#[derive(Clone, Debug, PartialEq)]
pub struct ServedInstance {
    /// The card's `display_name`.
    pub model: String,
    /// The card's key, e.g. `dynamo/backend/generate/2aed21ef7e3e48b7`.
    pub key: String,
    pub endpoint: EndpointRecord,
    pub card: ModelCard,
}

/// The live content of the store at one moment, after TTL and namespace filtering.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// Live endpoint records, sorted by key. Includes records without a card (`/health` lists
    /// them), which receive no traffic.
    pub instances: Vec<Entry<EndpointRecord>>,
    /// Live model cards, sorted by key. Includes cards without an instance (not served).
    pub cards: Vec<Entry<ModelRecord>>,
    /// Live event-plane channels, sorted by key (kept as JSON; read by the event plane).
    pub event_channels: Vec<Entry<Value>>,
    /// Live KV-event sources, sorted by key (kept as JSON; read by the event plane).
    pub event_sources: Vec<Entry<Value>>,
    /// Instances with both records, sorted by (model, endpoint, instance id).
    pub served: Vec<ServedInstance>,
    /// Files that are not records (not JSON, wrong type, bad name), sorted; expired records
    /// are not listed here.
    pub skipped: Vec<Skipped>,
    /// Alias → primary model name: the `aliases` of each served model's first card, except
    /// names already taken (see [`aliases`]).
    pub aliases: BTreeMap<String, String>,
    /// Aliases that could not be claimed, and why, sorted.
    pub alias_conflicts: Vec<String>,
}

impl Snapshot {
    /// True when both snapshots hold the same live records and skip the same ones. Ignores
    /// mtimes (keep-alive touches every ~3.3 s change them).
    pub fn same_content(&self, other: &Snapshot) -> bool {
        fn same<T>(a: &[Entry<T>], b: &[Entry<T>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.key == y.key && x.raw == y.raw)
        }
        same(&self.instances, &other.instances)
            && same(&self.cards, &other.cards)
            && same(&self.event_channels, &other.event_channels)
            && same(&self.event_sources, &other.event_sources)
            && self.skipped == other.skipped
    }

    /// Names of the models that have at least one served instance, sorted.
    pub fn model_names(&self) -> Vec<String> {
        let names: BTreeSet<&str> = self.served.iter().map(|s| s.model.as_str()).collect();
        names.into_iter().map(str::to_string).collect()
    }
}

/// One record a backend considers live, before parsing.
#[derive(Clone, Copy, Debug)]
pub struct Raw<'a> {
    /// `v1/instances`, `v1/mdc` or `v1/event_channels`.
    pub bucket: &'static str,
    /// How the backend names it (file name, etcd key), for [`Skipped`].
    pub name: &'a str,
    /// The decoded key, e.g. `dynamo/backend/generate/2aed21ef7e3e48b7`.
    pub key: &'a str,
    /// Last write or keep-alive (backends without mtimes pass the time they read it).
    pub modified: SystemTime,
    pub bytes: &'a [u8],
}

/// Parses, filters and joins raw records into a [`Snapshot`]. `skipped` carries what the
/// backend already refused (unreadable names and the like).
pub fn build<'a>(
    records: impl IntoIterator<Item = Raw<'a>>,
    filter: &NamespaceFilter,
    skipped: Vec<Skipped>,
    cache: &mut ParseCache,
) -> Snapshot {
    let mut snap = Snapshot { skipped, ..Snapshot::default() };
    cache.generation += 1;
    let generation = cache.generation;
    for r in records {
        let slot = cache.parsed.entry((r.bucket, r.key.to_string())).or_insert_with(|| Parsed {
            bytes: Vec::new(),
            record: Err(String::new()),
            seen: 0,
        });
        if slot.bytes != r.bytes || slot.seen == 0 {
            slot.bytes = r.bytes.to_vec();
            slot.record = parse_record(r.bytes);
        }
        slot.seen = generation;
        let parsed = match &slot.record {
            Ok(p) => p.clone(),
            Err(e) => {
                snap.skipped.push(skip(r.bucket, r.name, e.clone()));
                continue;
            }
        };
        let (key, modified) = (r.key.to_string(), r.modified);
        match (r.bucket, parsed) {
            (BUCKET_INSTANCES, (Record::Endpoint(record), raw)) => {
                if namespace_matches(filter, &record.namespace) {
                    snap.instances.push(Entry { key, modified, record: *record, raw });
                }
            }
            (BUCKET_MDC, (Record::Model(record), raw)) => {
                if namespace_matches(filter, &record.namespace) {
                    snap.cards.push(Entry { key, modified, record: *record, raw });
                }
            }
            (BUCKET_EVENT_CHANNELS, (Record::EventChannel(record), raw)) => {
                if scoped_in(filter, &raw) {
                    snap.event_channels.push(Entry { key, modified, record, raw });
                }
            }
            (BUCKET_EVENT_SOURCES, (Record::EventSource(record), raw)) => {
                if scoped_in(filter, &raw) {
                    snap.event_sources.push(Entry { key, modified, record, raw });
                }
            }
            (bucket, _) => {
                let want = match bucket {
                    BUCKET_INSTANCES => "not an Endpoint record",
                    BUCKET_MDC => "not a Model record",
                    BUCKET_EVENT_SOURCES => "not an EventSource record",
                    _ => "not an EventChannel record",
                };
                snap.skipped.push(skip(bucket, r.name, want.into()));
            }
        }
    }
    snap.instances.sort_by(|a, b| a.key.cmp(&b.key));
    snap.cards.sort_by(|a, b| a.key.cmp(&b.key));
    snap.event_channels.sort_by(|a, b| a.key.cmp(&b.key));
    snap.event_sources.sort_by(|a, b| a.key.cmp(&b.key));
    snap.served = join(&snap.instances, &snap.cards);
    snap.skipped.sort();
    (snap.aliases, snap.alias_conflicts) = aliases(&snap.served);
    cache.parsed.retain(|_, p| p.seen == generation);
    snap
}

/// The aliases of the served models: alias → primary, and the aliases refused. Each model's
/// first served instance speaks for it (as for its context window). As in Dynamo 1.6.1, a
/// name is held by one model only: an alias that is some model's primary name is refused,
/// and so is one another model claimed first (models taken in name order).
pub fn aliases(served: &[ServedInstance]) -> (BTreeMap<String, String>, Vec<String>) {
    let mut first: BTreeMap<&str, &ServedInstance> = BTreeMap::new();
    for s in served {
        first.entry(s.model.as_str()).or_insert(s);
    }
    let mut map: BTreeMap<String, String> = BTreeMap::new();
    let mut conflicts = Vec::new();
    for (primary, s) in &first {
        for alias in &s.card.aliases {
            if first.contains_key(alias.as_str()) {
                conflicts.push(format!("alias {alias:?} of model {primary} is a model's own name: ignored"));
                continue;
            }
            match map.get(alias) {
                Some(owner) if owner != primary => conflicts
                    .push(format!("alias {alias:?} of model {primary} is already an alias of model {owner}: ignored")),
                Some(_) => {}
                None => {
                    map.insert(alias.clone(), primary.to_string());
                }
            }
        }
    }
    conflicts.sort();
    conflicts.dedup();
    (map, conflicts)
}

/// One record's bytes and what they parsed to.
#[derive(Debug)]
struct Parsed {
    bytes: Vec<u8>,
    record: Result<(Record, Value), String>,
    /// The [`build`] generation that last saw it.
    seen: u64,
}

/// Parsed records by (bucket, key), so a rescan parses only records whose bytes changed (the
/// file backend lists its buckets when a record's TTL is due, every few seconds, and on
/// events its cache cannot answer).
#[derive(Debug, Default)]
pub struct ParseCache {
    parsed: std::collections::HashMap<(&'static str, String), Parsed>,
    generation: u64,
}

impl ParseCache {
    /// True when `records` are exactly the records the last [`build`] saw, with the same
    /// bytes (mtimes aside): building again would give the same content. False before the
    /// first build.
    pub fn unchanged<'a>(&self, records: impl IntoIterator<Item = Raw<'a>>) -> bool {
        if self.generation == 0 {
            return false;
        }
        let mut n = 0;
        for r in records {
            n += 1;
            let hit = self
                .parsed
                .get(&(r.bucket, r.key.to_string()))
                .is_some_and(|p| p.seen == self.generation && p.bytes == r.bytes);
            if !hit {
                return false;
            }
        }
        n == self.parsed.len()
    }
}

/// Whether an event record's scope (`scope.endpoint.namespace`, when present) passes the
/// namespace filter.
fn scoped_in(filter: &NamespaceFilter, raw: &Value) -> bool {
    let ns = raw.pointer("/scope/endpoint/namespace").and_then(Value::as_str);
    ns.is_none_or(|ns| namespace_matches(filter, ns))
}

pub(crate) fn skip(bucket: &'static str, name: &str, reason: String) -> Skipped {
    Skipped { bucket, file_name: name.to_string(), reason }
}

/// Pairs each card with the endpoint record of the same (namespace, component, endpoint,
/// instance id). Joining on the instance id alone would wrongly serve a worker's other
/// endpoints (e.g. `worker_kv_query_source_*`), which share its instance id.
fn join(instances: &[Entry<EndpointRecord>], cards: &[Entry<ModelRecord>]) -> Vec<ServedInstance> {
    let by_id: BTreeMap<(EndpointId, u64), &EndpointRecord> =
        instances.iter().map(|e| ((e.record.id(), e.record.instance_id), &e.record)).collect();
    let mut served: Vec<ServedInstance> = cards
        .iter()
        .filter_map(|c| {
            let ep = by_id.get(&(c.record.id(), c.record.instance_id))?;
            Some(ServedInstance {
                model: c.record.card_json.display_name.clone(),
                key: c.key.clone(),
                endpoint: (*ep).clone(),
                card: c.record.card_json.clone(),
            })
        })
        .collect();
    served.sort_by(|a, b| {
        (&a.model, a.endpoint.id(), a.endpoint.instance_id).cmp(&(&b.model, b.endpoint.id(), b.endpoint.instance_id))
    });
    served
}

/// Turns snapshots into Registries, remembering when each model was first served.
#[derive(Clone, Debug, Default)]
pub struct Catalog {
    /// Unix seconds each currently served model was first seen (its `/v1/models` `created`).
    first_seen: BTreeMap<String, u64>,
}

impl Catalog {
    /// Builds the Registry shards serve from, as of `now`:
    /// * `models`: one per `display_name` with a served instance, and one per alias of those
    ///   ([`Snapshot::aliases`]), sorted by name; `created` is when this catalog first saw the
    ///   model served (kept while it stays served), and `context_window` the card's top-level
    ///   `context_length` (first served instance wins); an alias has its model's.
    /// * `aliases`: the snapshot's alias → primary map.
    /// * `endpoints`: `dyn://ns.component.endpoint` of every live endpoint record, sorted,
    ///   without duplicates.
    /// * `instances`: every live endpoint record as stored, sorted by key.
    pub fn registry(&mut self, snap: &Snapshot, now: SystemTime) -> Registry {
        let now_secs = now.duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
        let mut models: BTreeMap<&str, u64> = BTreeMap::new();
        for s in &snap.served {
            models.entry(s.model.as_str()).or_insert_with(|| s.card.context_window());
        }
        self.first_seen.retain(|name, _| models.contains_key(name.as_str()));
        let mut models: Vec<ModelEntry> = models
            .into_iter()
            .map(|(name, context_window)| {
                let created = *self.first_seen.entry(name.to_string()).or_insert(now_secs);
                ModelEntry { name: name.to_string(), created, context_window }
            })
            .collect();
        for (alias, primary) in &snap.aliases {
            if let Some(m) = models.iter().find(|m| m.name == *primary) {
                models.push(ModelEntry { name: alias.clone(), ..m.clone() });
            }
        }
        models.sort_by(|a, b| a.name.cmp(&b.name));
        let endpoints: BTreeSet<String> = snap.instances.iter().map(|e| e.record.id().dyn_url()).collect();
        Registry {
            models,
            endpoints: endpoints.into_iter().collect(),
            instances: snap.instances.iter().map(|e| e.raw.clone()).collect(),
            aliases: snap.aliases.clone(),
            ..Registry::default()
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Watching
// ---------------------------------------------------------------------------------------------

/// A discovery backend the control thread can watch.
pub trait Source {
    /// The live records as of `now`. An error keeps the previous state.
    fn scan(&mut self, now: SystemTime) -> io::Result<Snapshot>;
    /// [`Source::scan`], or `None` when the source knows nothing changed since its last scan.
    fn scan_changed(&mut self, now: SystemTime) -> io::Result<Option<Snapshot>> {
        self.scan(now).map(Some)
    }
    /// Blocks until a change may have happened, at most `max_wait`.
    fn wait(&mut self, max_wait: Duration);
    /// Ends the watch cleanly (e.g. revokes a lease); called once when `watch` returns.
    fn shutdown(&mut self) {}
}

/// Longest single wait, so `stop` is noticed promptly whatever the source does.
const MAX_WAIT: Duration = Duration::from_millis(500);

/// Watches `source` until `stop` is set, calling `on_change` with the new Registry and the
/// snapshot it came from: once after the first scan, then whenever the live records change
/// (a record added, removed, rewritten or expired). Scan errors go to `on_error` and keep
/// the previous state. Blocking; meant for the control thread.
pub fn watch(
    source: &mut dyn Source,
    stop: &AtomicBool,
    mut on_change: impl FnMut(Registry, &Snapshot),
    mut on_error: impl FnMut(&io::Error),
) {
    let mut catalog = Catalog::default();
    let mut last: Option<Snapshot> = None;
    while !stop.load(Ordering::Acquire) {
        let now = SystemTime::now();
        match source.scan_changed(now) {
            Ok(None) => {}
            Ok(Some(snap)) => {
                if last.as_ref().is_none_or(|l| !l.same_content(&snap)) {
                    let registry = catalog.registry(&snap, now);
                    on_change(registry, &snap);
                    last = Some(snap);
                }
            }
            Err(e) => on_error(&e),
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        source.wait(MAX_WAIT);
    }
    source.shutdown();
}
