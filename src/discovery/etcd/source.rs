//! [`EtcdSource`]: an [`EtcdView`] as a discovery [`Source`] for the control thread.
//!
//! Liveness is etcd's: a record exists while its writer's lease lives (Dynamo: TTL 30 s,
//! kept alive at half the TTL; a killed worker's keys vanish at lease expiry, a stopping
//! worker deletes them). So every record the view holds is live, and a scan is the view's
//! records run through the shared [`build`].

use std::io;
use std::time::{Duration, SystemTime};

use super::EtcdView;
use crate::config::NamespaceFilter;
use crate::discovery::snapshot::{build, ParseCache, Raw, Snapshot, Source};

/// Watches etcd through an [`EtcdView`].
pub struct EtcdSource {
    view: Option<EtcdView>,
    filter: NamespaceFilter,
    /// Whether the last wait failed (etcd unreachable), so it is logged once per outage.
    failing: bool,
    cache: ParseCache,
}

impl EtcdSource {
    pub fn new(view: EtcdView, filter: NamespaceFilter) -> EtcdSource {
        EtcdSource { view: Some(view), filter, failing: false, cache: ParseCache::default() }
    }
}

impl Source for EtcdSource {
    fn scan(&mut self, now: SystemTime) -> io::Result<Snapshot> {
        let Some(view) = &self.view else { return Ok(Snapshot::default()) };
        let raw = view.records().map(|(bucket, key, bytes)| Raw { bucket, name: key, key, modified: now, bytes });
        Ok(build(raw, &self.filter, Vec::new(), &mut self.cache))
    }

    fn wait(&mut self, max_wait: Duration) {
        let Some(view) = &mut self.view else { return std::thread::sleep(max_wait) };
        match view.wait(max_wait) {
            Ok(_) if self.failing => {
                crate::log::info("etcd is reachable again; discovery resynchronised");
                self.failing = false;
            }
            Ok(_) => {}
            Err(e) if !self.failing => {
                crate::log::warn(&format!("etcd unreachable, serving the last known workers: {e}"));
                self.failing = true;
            }
            Err(_) => {}
        }
    }

    fn shutdown(&mut self) {
        if let Some(view) = self.view.take() {
            let _ = view.shutdown();
        }
    }
}
