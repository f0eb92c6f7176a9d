//! The in-process discovery backend (`--discovery-backend mem`).
//!
//! A [`MemStore`] is a map of records (bucket, key → bytes) shared by the frontend and the
//! workers embedded in the same process (the embedded default, tests). Liveness is
//! ownership: a worker deletes its records when it stops, and nothing outlives the process.
//! Writers bump a version and notify; the control thread's [`MemSource`] sleeps on it, so a
//! change reaches the shards without polling.

use std::collections::BTreeMap;
use std::io;
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime};

use super::snapshot::{build, ParseCache, Raw, Snapshot, Source};
use crate::config::NamespaceFilter;

#[derive(Default)]
struct State {
    records: BTreeMap<(&'static str, String), Vec<u8>>,
    version: u64,
}

/// A shared in-process record store. Cloning shares it.
#[derive(Clone, Default)]
pub struct MemStore {
    inner: Arc<(Mutex<State>, Condvar)>,
}

impl MemStore {
    pub fn new() -> MemStore {
        MemStore::default()
    }

    fn update(&self, f: impl FnOnce(&mut State)) {
        let (lock, cond) = &*self.inner;
        let mut s = lock.lock().unwrap_or_else(|p| p.into_inner());
        f(&mut s);
        s.version += 1;
        cond.notify_all();
    }

    /// Writes (or replaces) the record `key` in `bucket` (e.g. `v1/mdc`).
    pub fn put(&self, bucket: &'static str, key: &str, bytes: Vec<u8>) {
        self.update(|s| {
            s.records.insert((bucket, key.to_string()), bytes);
        });
    }

    /// Removes the record `key` from `bucket`, if present.
    pub fn delete(&self, bucket: &'static str, key: &str) {
        self.update(|s| {
            s.records.remove(&(bucket, key.to_string()));
        });
    }

    /// Number of records held.
    pub fn len(&self) -> usize {
        self.inner.0.lock().unwrap_or_else(|p| p.into_inner()).records.len()
    }

    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// A [`Source`] the control thread can watch.
    pub fn source(&self, filter: NamespaceFilter) -> MemSource {
        MemSource { store: self.clone(), filter, seen: None, cache: ParseCache::default() }
    }
}

/// Watches a [`MemStore`].
pub struct MemSource {
    store: MemStore,
    filter: NamespaceFilter,
    /// Version of the last scan.
    seen: Option<u64>,
    cache: ParseCache,
}

impl Source for MemSource {
    fn scan(&mut self, now: SystemTime) -> io::Result<Snapshot> {
        let s = self.store.inner.0.lock().unwrap_or_else(|p| p.into_inner());
        self.seen = Some(s.version);
        let raw = s.records.iter().map(|((bucket, key), bytes)| Raw { bucket, name: key, key, modified: now, bytes });
        Ok(build(raw, &self.filter, Vec::new(), &mut self.cache))
    }

    fn wait(&mut self, max_wait: Duration) {
        let (lock, cond) = &*self.store.inner;
        let s = lock.lock().unwrap_or_else(|p| p.into_inner());
        let seen = self.seen;
        let _ = cond.wait_timeout_while(s, max_wait, |s| Some(s.version) == seen);
    }
}
