//! The Kubernetes discovery backend (`--discovery-backend kubernetes`), reading what Dynamo
//! 1.6.1's workers write (docs/dynamo/kubernetes-discovery.md): each worker pod's
//! `DynamoWorkerMetadata` object (group `nvidia.com/v1alpha1`) carries the records the etcd
//! and file backends hold one by one, and the pod's readiness comes from the
//! `EndpointSlice`s labelled `nvidia.com/dynamo-discovery-enabled=true` (or, with
//! `DYN_KUBE_DISCOVERY_MODE=container`, from the `Pod`s themselves). Both are listed and
//! watched in the pod's namespace.
//!
//! * [`config`]: the cluster (kubeconfig or service account) and this pod's identity;
//! * [`api`]: requests and the list/watch threads (one per followed kind);
//! * [`state`]: the join of readiness and metadata into live records.
//!
//! [`KubeSource`] is the control thread's [`Source`]: it applies the threads' changes and
//! hands the joined records to the shared [`build`]. Until every kind has been listed once it
//! reports no records, as 1.6.1 answers no discovery question before its first sync.

pub mod api;
pub mod config;
pub mod state;

use std::io;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crate::config::NamespaceFilter;
use crate::discovery::snapshot::{build, ParseCache, Raw, Snapshot, Source};
pub use config::{Cluster, Mode, PodInfo};
use state::{Change, Kind, KubeState};

/// What the frontend follows, found from the environment (see [`config`]).
#[derive(Clone, Debug)]
pub struct KubeSettings {
    pub cluster: Cluster,
    pub pod: PodInfo,
    pub mode: Mode,
    /// `CONTAINER_NAME` (container mode).
    pub container: Option<String>,
}

impl KubeSettings {
    /// From the process environment; an error says what is missing, in 1.6.1's words.
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> Result<KubeSettings, String> {
        let mode = Mode::from_env(env)?;
        let container = env("CONTAINER_NAME").filter(|c| !c.is_empty());
        if mode == Mode::Container && container.is_none() {
            return Err("CONTAINER_NAME is required when DYN_KUBE_DISCOVERY_MODE=container".into());
        }
        let pod = PodInfo::from_env(env)?;
        let cluster = Cluster::from_env(env)?;
        Ok(KubeSettings { cluster, pod, mode, container: container.filter(|_| mode == Mode::Container) })
    }

    /// Container mode: deletes a metadata object an earlier process of this container left
    /// under its name, as 1.6.1 does at start-up (none there is fine; any other failure is an
    /// error: 1.6.1 will not start with stale discovery state either). Nothing in pod mode.
    pub fn clear_stale_metadata(&self) -> io::Result<()> {
        if self.mode != Mode::Container {
            return Ok(());
        }
        let path = format!("{}/{}?", api::Collection::of(Kind::Metadata, &self.pod.namespace).path, self.target());
        match api::request(&self.cluster, "DELETE", &path, Some(("application/json", b"{}")))?.read_to_end()? {
            (404, _) => crate::log::info(&format!("kubernetes discovery: no stale CR to delete: {}", self.target())),
            (s, _) if (200..300).contains(&s) => {
                crate::log::info(&format!("kubernetes discovery: deleted stale CR: {}", self.target()))
            }
            (s, body) => {
                return Err(io::Error::other(format!(
                    "failed to clear stale CR '{}' (HTTP {s} {}); cannot start with stale discovery state",
                    self.target(),
                    String::from_utf8_lossy(&body)
                )))
            }
        }
        Ok(())
    }

    /// The name of this process's own metadata object.
    pub fn target(&self) -> String {
        state::target_name(&self.pod.name, self.container.as_deref())
    }
}

/// The kinds followed in `mode`.
fn kinds(mode: Mode) -> [Kind; 2] {
    match mode {
        Mode::Pod => [Kind::Slices, Kind::Metadata],
        Mode::Container => [Kind::Pods, Kind::Metadata],
    }
}

/// Kubernetes discovery as a [`Source`].
pub struct KubeSource {
    rx: flume::Receiver<Change>,
    state: KubeState,
    kinds: [Kind; 2],
    filter: NamespaceFilter,
    cache: ParseCache,
    stop: Arc<AtomicBool>,
    threads: Vec<std::thread::JoinHandle<()>>,
    /// A change was applied since the last scan.
    changed: bool,
}

impl KubeSource {
    /// Starts the list/watch threads.
    pub fn start(settings: KubeSettings, filter: NamespaceFilter) -> io::Result<KubeSource> {
        let kinds = kinds(settings.mode);
        let collections = kinds.iter().map(|&k| api::Collection::of(k, &settings.pod.namespace)).collect();
        let (tx, rx) = flume::unbounded();
        let stop = Arc::new(AtomicBool::new(false));
        let threads = api::start(settings.cluster, collections, tx, stop.clone())?;
        Ok(KubeSource {
            rx,
            state: KubeState::default(),
            kinds,
            filter,
            cache: ParseCache::default(),
            stop,
            threads,
            changed: true,
        })
    }

    fn apply_pending(&mut self) {
        for change in self.rx.try_iter() {
            self.state.apply(change);
            self.changed = true;
        }
    }
}

impl Source for KubeSource {
    fn scan(&mut self, now: SystemTime) -> io::Result<Snapshot> {
        self.apply_pending();
        self.changed = false;
        if !self.state.synced(&self.kinds) {
            return Ok(Snapshot::default());
        }
        let records = self.state.records();
        let raw = records.iter().map(|&(bucket, key, bytes)| Raw { bucket, name: key, key, modified: now, bytes });
        Ok(build(raw, &self.filter, Vec::new(), &mut self.cache))
    }

    fn scan_changed(&mut self, now: SystemTime) -> io::Result<Option<Snapshot>> {
        self.apply_pending();
        if !self.changed {
            return Ok(None);
        }
        self.scan(now).map(Some)
    }

    fn wait(&mut self, max_wait: Duration) {
        if let Ok(change) = self.rx.recv_timeout(max_wait) {
            self.state.apply(change);
            self.changed = true;
        }
    }

    fn shutdown(&mut self) {
        self.stop.store(true, Ordering::Release);
        for t in self.threads.drain(..) {
            let _ = t.join();
        }
    }
}

impl Drop for KubeSource {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
    }
}
