//! The file discovery backend (`--discovery-backend file`, `DYN_FILE_KV`; spec §3).
//!
//! [`FileStore::scan`] reads the store once into a [`Snapshot`]: it lists the buckets
//! `v1/instances`, `v1/mdc` and `v1/event_channels`, skips writers' `.tmp_*` files, decodes
//! file names, parses each record, drops records whose mtime is older than the TTL (the
//! store's only liveness signal), applies the namespace filter and joins model cards to
//! endpoint instances. [`FileStore::registry`] turns a snapshot into the
//! [`Registry`](crate::registry::Registry) shards serve from. [`watch`] rescans on a
//! [`WakeSource`] (periodic for now; an inotify source can implement the same trait) and
//! reports each changed snapshot.
//!
//! Blocking I/O throughout: this runs on the control thread, never on a shard.

use std::collections::{BTreeMap, BTreeSet};
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::Value;

use super::records::{
    decode_file_name, is_temp_file, parse_record, EndpointId, EndpointRecord, ModelCard, ModelRecord, Record,
    BUCKET_EVENT_CHANNELS, BUCKET_INSTANCES, BUCKET_MDC,
};
use crate::config::NamespaceFilter;
use crate::registry::{ModelEntry, Registry};

/// Dynamo's record TTL: a record whose mtime is older than this is dead (spec §3.4).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default rescan period of [`PeriodicWake`].
pub const DEFAULT_RESCAN: Duration = Duration::from_millis(200);
/// Files larger than this are not records (cards are a few KiB).
const MAX_RECORD_BYTES: u64 = 8 << 20;

/// True when `namespace` passes the filter.
pub fn namespace_matches(filter: &NamespaceFilter, namespace: &str) -> bool {
    match filter {
        NamespaceFilter::Any => true,
        NamespaceFilter::Exact(ns) => namespace == ns,
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

/// A file that was skipped, and why (temporaries are skipped silently).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Skipped {
    pub bucket: &'static str,
    pub file_name: String,
    pub reason: String,
}

/// An instance that receives traffic: an endpoint record plus a model card with the same
/// namespace, component, endpoint and instance id (spec §3.8).
#[derive(Clone, Debug, PartialEq)]
pub struct ServedInstance {
    /// The card's `display_name`.
    pub model: String,
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
    /// Live event-plane channels, sorted by key (kept as JSON until the event plane exists).
    pub event_channels: Vec<Entry<Value>>,
    /// Instances with both records, sorted by (model, endpoint, instance id).
    pub served: Vec<ServedInstance>,
    /// Files that are not records (not JSON, wrong type, bad name); expired records are not
    /// listed here.
    pub skipped: Vec<Skipped>,
}

impl Snapshot {
    /// True when both snapshots hold the same live records. Ignores mtimes (keep-alive touches
    /// every ~3.3 s change them) and the skipped list.
    pub fn same_content(&self, other: &Snapshot) -> bool {
        fn same<T>(a: &[Entry<T>], b: &[Entry<T>]) -> bool {
            a.len() == b.len() && a.iter().zip(b).all(|(x, y)| x.key == y.key && x.raw == y.raw)
        }
        same(&self.instances, &other.instances)
            && same(&self.cards, &other.cards)
            && same(&self.event_channels, &other.event_channels)
    }

    /// Names of the models that have at least one served instance, sorted.
    pub fn model_names(&self) -> Vec<String> {
        let names: BTreeSet<&str> = self.served.iter().map(|s| s.model.as_str()).collect();
        names.into_iter().map(str::to_string).collect()
    }
}

/// Reader of one `DYN_FILE_KV` directory.
#[derive(Clone, Debug)]
pub struct FileStore {
    root: PathBuf,
    ttl: Duration,
    filter: NamespaceFilter,
    /// Unix seconds each currently served model was first seen (its `/v1/models` `created`).
    first_seen: BTreeMap<String, u64>,
}

impl FileStore {
    /// A store at `root` (the `DYN_FILE_KV` directory) with the default 10 s TTL.
    pub fn new(root: impl Into<PathBuf>, filter: NamespaceFilter) -> FileStore {
        FileStore { root: root.into(), ttl: DEFAULT_TTL, filter, first_seen: BTreeMap::new() }
    }

    pub fn with_ttl(mut self, ttl: Duration) -> FileStore {
        self.ttl = ttl;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Reads the store as of `now`. A missing root or bucket reads as empty (workers create
    /// the directories when they first register). Only an unreadable existing bucket
    /// directory is an error.
    pub fn scan(&self, now: SystemTime) -> io::Result<Snapshot> {
        let mut snap = Snapshot::default();
        for (bucket, file_name, key, modified, bytes) in self.read_bucket(BUCKET_INSTANCES, now, &mut snap.skipped)? {
            match parse_record(&bytes) {
                Ok((Record::Endpoint(record), raw)) => {
                    if namespace_matches(&self.filter, &record.namespace) {
                        snap.instances.push(Entry { key, modified, record: *record, raw });
                    }
                }
                Ok(_) => snap.skipped.push(skip(bucket, file_name, "not an Endpoint record".into())),
                Err(e) => snap.skipped.push(skip(bucket, file_name, e)),
            }
        }
        for (bucket, file_name, key, modified, bytes) in self.read_bucket(BUCKET_MDC, now, &mut snap.skipped)? {
            match parse_record(&bytes) {
                Ok((Record::Model(record), raw)) => {
                    if namespace_matches(&self.filter, &record.namespace) {
                        snap.cards.push(Entry { key, modified, record: *record, raw });
                    }
                }
                Ok(_) => snap.skipped.push(skip(bucket, file_name, "not a Model record".into())),
                Err(e) => snap.skipped.push(skip(bucket, file_name, e)),
            }
        }
        for (bucket, file_name, key, modified, bytes) in
            self.read_bucket(BUCKET_EVENT_CHANNELS, now, &mut snap.skipped)?
        {
            match parse_record(&bytes) {
                Ok((Record::EventChannel(record), raw)) => {
                    let ns = raw.pointer("/scope/endpoint/namespace").and_then(Value::as_str);
                    if ns.is_none_or(|ns| namespace_matches(&self.filter, ns)) {
                        snap.event_channels.push(Entry { key, modified, record, raw });
                    }
                }
                Ok(_) => snap.skipped.push(skip(bucket, file_name, "not an EventChannel record".into())),
                Err(e) => snap.skipped.push(skip(bucket, file_name, e)),
            }
        }
        snap.instances.sort_by(|a, b| a.key.cmp(&b.key));
        snap.cards.sort_by(|a, b| a.key.cmp(&b.key));
        snap.event_channels.sort_by(|a, b| a.key.cmp(&b.key));
        snap.served = join(&snap.instances, &snap.cards);
        Ok(snap)
    }

    /// Lists one bucket: (bucket, file name, decoded key, mtime, content) of each live file.
    #[allow(clippy::type_complexity)]
    fn read_bucket(
        &self,
        bucket: &'static str,
        now: SystemTime,
        skipped: &mut Vec<Skipped>,
    ) -> io::Result<Vec<(&'static str, String, String, SystemTime, Vec<u8>)>> {
        let dir = self.root.join(bucket);
        let listing = match fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for dirent in listing {
            // A file removed while listing is not an error; skip it.
            let Ok(dirent) = dirent else { continue };
            let Ok(file_name) = dirent.file_name().into_string() else {
                skipped.push(skip(
                    bucket,
                    dirent.file_name().to_string_lossy().into_owned(),
                    "name is not UTF-8".into(),
                ));
                continue;
            };
            if is_temp_file(&file_name) {
                continue;
            }
            let Some(key) = decode_file_name(&file_name) else {
                skipped.push(skip(bucket, file_name, "malformed percent-encoding".into()));
                continue;
            };
            // Follow symlinks like a plain open would; a vanished file is skipped silently.
            let Ok(meta) = fs::metadata(dirent.path()) else { continue };
            if !meta.is_file() {
                skipped.push(skip(bucket, file_name, "not a regular file".into()));
                continue;
            }
            let Ok(modified) = meta.modified() else { continue };
            if is_expired(modified, now, self.ttl) {
                continue;
            }
            if meta.len() > MAX_RECORD_BYTES {
                skipped.push(skip(bucket, file_name, format!("{} bytes is too large for a record", meta.len())));
                continue;
            }
            let Ok(bytes) = fs::read(dirent.path()) else { continue };
            out.push((bucket, file_name, key, modified, bytes));
        }
        Ok(out)
    }

    /// Builds the Registry shards serve from, as of `now`:
    /// * `models`: one per `display_name` with a served instance, sorted by name; `created` is
    ///   when this store first saw the model served (kept while it stays served), and
    ///   `context_window` the card's top-level `context_length` (first card by key wins).
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
        let models = models
            .into_iter()
            .map(|(name, context_window)| {
                let created = *self.first_seen.entry(name.to_string()).or_insert(now_secs);
                ModelEntry { name: name.to_string(), created, context_window }
            })
            .collect();
        let endpoints: BTreeSet<String> = snap.instances.iter().map(|e| e.record.id().dyn_url()).collect();
        Registry {
            models,
            endpoints: endpoints.into_iter().collect(),
            instances: snap.instances.iter().map(|e| e.raw.clone()).collect(),
            serving: Default::default(),
        }
    }
}

/// True when a record last touched at `modified` is dead at `now`. A future mtime (clock
/// skew between writers) counts as fresh.
pub fn is_expired(modified: SystemTime, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(modified).is_ok_and(|age| age > ttl)
}

fn skip(bucket: &'static str, file_name: String, reason: String) -> Skipped {
    Skipped { bucket, file_name, reason }
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

// ---------------------------------------------------------------------------------------------
// Watching
// ---------------------------------------------------------------------------------------------

/// What wakes the watch loop for a rescan. The periodic source sleeps; an inotify source
/// would return as soon as a bucket changes (and still time out for the TTL expiry, which
/// produces no file event).
pub trait WakeSource {
    /// Blocks until the next rescan is due, at most `max_wait`.
    fn wait(&mut self, max_wait: Duration);
}

/// Rescans every `interval`.
#[derive(Clone, Copy, Debug)]
pub struct PeriodicWake {
    pub interval: Duration,
}

impl Default for PeriodicWake {
    fn default() -> Self {
        PeriodicWake { interval: DEFAULT_RESCAN }
    }
}

impl WakeSource for PeriodicWake {
    fn wait(&mut self, max_wait: Duration) {
        std::thread::sleep(self.interval.min(max_wait));
    }
}

/// Longest single wait, so `stop` is noticed promptly whatever the wake source does.
const MAX_WAIT: Duration = Duration::from_millis(500);

/// Rescans `store` until `stop` is set, calling `on_change` with the new Registry and the
/// snapshot it came from: once after the first scan, then whenever the live records change
/// (a record added, removed, rewritten or expired). Scan errors (an unreadable bucket) go to
/// `on_error` and keep the previous state. Blocking; meant for the control thread.
pub fn watch(
    store: &mut FileStore,
    wake: &mut dyn WakeSource,
    stop: &AtomicBool,
    mut on_change: impl FnMut(Registry, &Snapshot),
    mut on_error: impl FnMut(&io::Error),
) {
    let mut last: Option<Snapshot> = None;
    while !stop.load(Ordering::Acquire) {
        let now = SystemTime::now();
        match store.scan(now) {
            Ok(snap) => {
                if last.as_ref().is_none_or(|l| !l.same_content(&snap)) {
                    let registry = store.registry(&snap, now);
                    on_change(registry, &snap);
                    last = Some(snap);
                }
            }
            Err(e) => on_error(&e),
        }
        if stop.load(Ordering::Acquire) {
            break;
        }
        wake.wait(MAX_WAIT);
    }
}
