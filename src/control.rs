//! The control thread: discovery → Registry snapshots → every shard.
//!
//! Runs off the shards because everything here blocks: scanning the discovery store, reading
//! model files, building tokenizers (hundreds of milliseconds each). For each change it builds
//! an immutable [`Registry`] and hands the same `Arc` to every shard through its inbox; a shard
//! swaps its snapshot between requests.
//!
//! Serving data per model ([`Serving`]): the parsed model files, one tokenizer instance *per
//! shard* (shard `i` only ever touches `tokenizers[i]`, so no instance is shared between
//! threads), and the workers that serve it. `model_input = Text` models need neither files nor
//! tokenizer (the request is forwarded as sent); `model_input = Tensor` models carry their
//! decoded `tensor_model_config` instead. Model files are read from the paths the card
//! names, verified against their checksums — in shared storage, or downloaded from the
//! worker's URLs ([`crate::discovery::cardfiles`]).

use std::collections::{BTreeSet, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::config::Config;
use crate::discovery::announce::Scope;
use crate::discovery::cardfiles::{default_cache, model_dir};
use crate::discovery::etcd::{EtcdSource, EtcdView};
use crate::discovery::file::{FileStore, InotifyWake};
use crate::discovery::mem::MemStore;
use crate::discovery::records::{Codec as CardCodec, ModelInput};
use crate::discovery::records::{EventChannelRecord, EventTransport};
use crate::discovery::{watch, Snapshot, Source};
use crate::ingest::recovery::Target;
use crate::ingest::Publishers;
use crate::plane::payload::Codec;
use crate::registry::{CardLimits, Registry, Serving, TokensModel, Worker};
use crate::shard::Server;
use crate::tokenize::ModelFiles;

/// Everything the control thread keeps between snapshots.
struct Builder {
    shards: usize,
    /// Loaded model directories, by directory.
    files: HashMap<PathBuf, Arc<ModelFiles>>,
    /// Per-shard tokenizers, by directory (built once).
    tokenizers: HashMap<PathBuf, Arc<Vec<crate::tokenize::Tokenizer>>>,
    /// Where card files served over HTTP are downloaded.
    cache: PathBuf,
    /// Verified model directories by card checksum (`mdc_sum`, which covers every file's
    /// checksum): a card is verified (and its files fetched) once, not on every rebuild.
    dirs: HashMap<String, PathBuf>,
}

impl Builder {
    /// The card's verified local directory, from `dirs` when this card was seen before.
    fn model_dir(&mut self, card: &crate::discovery::records::ModelCard) -> Result<PathBuf, String> {
        let sum = card.mdc_sum();
        if let Some(dir) = self.dirs.get(&sum) {
            return Ok(dir.clone());
        }
        let dir = model_dir(card, &self.cache)?;
        self.dirs.insert(sum, dir.clone());
        Ok(dir)
    }

    fn load(&mut self, dir: &Path) -> Result<(Arc<ModelFiles>, Arc<Vec<crate::tokenize::Tokenizer>>), String> {
        if let (Some(f), Some(t)) = (self.files.get(dir), self.tokenizers.get(dir)) {
            return Ok((f.clone(), t.clone()));
        }
        let started = std::time::Instant::now();
        let files = Arc::new(ModelFiles::load(dir).map_err(|e| e.to_string())?);
        let toks: Vec<_> = (0..self.shards).map(|_| files.tokenizer()).collect::<Result<_, _>>()?;
        let toks = Arc::new(toks);
        // Loading parses tens of megabytes of JSON; give what it freed back to the system
        // rather than keep it in this thread's heap for the process's life.
        crate::util::release_free_memory();
        crate::log::info(&format!(
            "model files {}: loaded in {:.1} ms ({} tokenizer instances)",
            dir.display(),
            started.elapsed().as_secs_f64() * 1e3,
            toks.len()
        ));
        self.files.insert(dir.to_path_buf(), files.clone());
        self.tokenizers.insert(dir.to_path_buf(), toks.clone());
        Ok((files, toks))
    }

    /// Add serving data for every model the snapshot serves.
    fn add_serving(&mut self, registry: &mut Registry, snap: &Snapshot) {
        for served in &snap.served {
            let Some(tcp) = served.endpoint.tcp() else { continue };
            let Some(addr) = resolve(&tcp.addr) else {
                crate::log::warn(&format!("model {}: cannot resolve worker address {}", served.model, tcp.addr));
                continue;
            };
            let codec = match served.endpoint.codec() {
                Some(CardCodec::Json) => Codec::Json,
                _ => Codec::Msgpack,
            };
            let worker = Worker {
                addr,
                path: tcp.path.clone(),
                codec,
                instance_id: served.endpoint.instance_id,
                cpu: served.endpoint.device_type.as_deref() == Some("cpu"),
                dp_start: served.card.runtime_config.data_parallel_start_rank.unwrap_or(0),
                dp_size: served.card.runtime_config.data_parallel_size.unwrap_or(1).max(1),
            };
            if let Some(existing) = registry.serving.get_mut(&served.model) {
                Arc::make_mut(existing).workers.push(worker);
                continue;
            }
            let input = served.card.model_input;
            let mut tensor = None;
            let tokens = match input {
                ModelInput::Tokens => match self.model_dir(&served.card).and_then(|dir| self.load(&dir)) {
                    Ok((files, tokenizers)) => Some(TokensModel { files, tokenizers }),
                    Err(e) => {
                        crate::log::error(&format!("model {}: not served: {e}", served.model));
                        continue;
                    }
                },
                // Forwarded as the client sent it: no files, no tokenizer.
                ModelInput::Text => None,
                // Tensors in and out, described by the card's `tensor_model_config`.
                ModelInput::Tensor => {
                    match crate::kserve::tensor_meta::load(served.card.extra.get("tensor_model_config")) {
                        Ok(t) => {
                            tensor = Some(Arc::new(t));
                            None
                        }
                        Err(e) => {
                            crate::log::error(&format!("model {}: not served: {e}", served.model));
                            continue;
                        }
                    }
                }
                ModelInput::Unknown => {
                    crate::log::error(&format!(
                        "model {}: not served: only Tokens, Text and Tensor models are supported",
                        served.model
                    ));
                    continue;
                }
            };
            let card = &served.card;
            let limits = CardLimits {
                context_length: card.effective_context_length(),
                kv_cache_block_size: card.kv_cache_block_size.map_or(0, u64::from),
                max_num_batched_tokens: card.runtime_config.max_num_batched_tokens.unwrap_or(0),
                max_num_seqs: card.runtime_config.max_num_seqs.unwrap_or(0),
                total_kv_blocks: card.runtime_config.total_kv_blocks.unwrap_or(0),
            };
            let serving = Serving { tokens, tensor, workers: vec![worker], mdc_sum: Some(card.mdc_sum()), limits };
            registry.serving.insert(served.model.clone(), Arc::new(serving));
        }
        // Only models that can be served are listed.
        registry.models.retain(|m| registry.serving.contains_key(&m.name));
    }
}

/// The `kv-events` and `kv_metrics` publishers (ZMQ endpoints, NATS subjects), the recovery
/// targets and the live workers of a snapshot.
fn kv_publishers(snap: &Snapshot) -> Publishers {
    let (mut endpoints, mut load_endpoints, mut nats_subjects) = (BTreeSet::new(), BTreeSet::new(), BTreeSet::new());
    let mut active_endpoints = std::collections::BTreeMap::new();
    for c in snap.event_channels.iter().filter_map(|c| EventChannelRecord::parse(&c.raw).ok()) {
        let zmq = match (&c.transport, c.topic.as_str()) {
            (EventTransport::Zmq { endpoint }, "kv-events") => Some((&mut endpoints, endpoint.clone())),
            (EventTransport::Zmq { endpoint }, "kv_metrics") => Some((&mut load_endpoints, endpoint.clone())),
            (EventTransport::Zmq { endpoint }, "active_sequences_events") => {
                active_endpoints.insert(endpoint.clone(), c.instance_id);
                None
            }
            (EventTransport::Nats { .. }, "kv-events" | "kv_metrics" | "active_sequences_events") => {
                nats_subjects.extend(c.nats_subject());
                None
            }
            _ => None,
        };
        if let Some((set, endpoint)) = zmq {
            set.insert(endpoint);
        }
    }
    let workers = snap.instances.iter().map(|e| e.record.instance_id).collect();
    let sources = snap.event_sources.iter().filter_map(|e| Target::from_event_source(&e.raw)).collect();
    Publishers { endpoints, load_endpoints, active_endpoints, nats_subjects, workers, sources }
}

fn resolve(addr: &str) -> Option<SocketAddr> {
    addr.to_socket_addrs().ok()?.next()
}

/// Where the control thread discovers workers.
pub enum Backend {
    /// `--discovery-backend file`: the `DYN_FILE_KV` directory.
    File(PathBuf),
    /// `--discovery-backend mem`: the in-process store.
    Mem(MemStore),
    /// `--discovery-backend etcd`: a view already connected (so start-up fails early when
    /// etcd cannot be reached).
    Etcd(Box<EtcdView>),
}

/// Handle to the control thread.
pub struct Control {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Control {
    /// Start watching `backend` on a new control thread, publishing to `server`'s shards.
    pub fn start(cfg: &Config, server: &Server, backend: Backend) -> std::io::Result<Control> {
        Control::start_with_kv(cfg, server, backend, None)
    }

    /// [`Control::start`], also telling the KV event-ingest thread (`kv`) which `kv-events`
    /// publishers and workers discovery lists, on every change.
    pub fn start_with_kv(
        cfg: &Config,
        server: &Server,
        backend: Backend,
        kv: Option<flume::Sender<Publishers>>,
    ) -> std::io::Result<Control> {
        Control::start_announcing(cfg, server, backend, kv, None)
    }

    /// [`Control::start_with_kv`], also telling `announce` which endpoints are served (the
    /// scopes of this process's own event channel records, `--router-replica-sync`).
    pub fn start_announcing(
        cfg: &Config,
        server: &Server,
        backend: Backend,
        kv: Option<flume::Sender<Publishers>>,
        announce: Option<flume::Sender<BTreeSet<Scope>>>,
    ) -> std::io::Result<Control> {
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = server.publisher();
        let filter = cfg.namespace_filter();
        let shards = server.drivers.len();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("control".into()).spawn(move || {
            let mut source: Box<dyn Source> = match backend {
                Backend::File(root) => {
                    let wake = InotifyWake::new(&root);
                    Box::new(FileStore::new(root, filter).with_wake(wake))
                }
                Backend::Mem(store) => Box::new(store.source(filter)),
                Backend::Etcd(view) => Box::new(EtcdSource::new(*view, filter)),
            };
            let mut builder = Builder {
                shards,
                files: HashMap::new(),
                tokenizers: HashMap::new(),
                cache: default_cache(),
                dirs: HashMap::new(),
            };
            watch(
                source.as_mut(),
                &stop2,
                |mut registry, snap| {
                    if let Some(kv) = &kv {
                        let _ = kv.send(kv_publishers(snap));
                    }
                    if let Some(a) = &announce {
                        let scopes = snap.served.iter().map(|s| {
                            let e = &s.endpoint;
                            (e.namespace.clone(), e.component.clone(), e.endpoint.clone())
                        });
                        let _ = a.send(scopes.collect());
                    }
                    builder.add_serving(&mut registry, snap);
                    publisher(Arc::new(registry));
                },
                |e| crate::log::warn(&format!("discovery scan failed: {e}")),
            );
        })?;
        Ok(Control { stop, thread: Some(thread) })
    }

    /// Stop the control thread and wait for it.
    pub fn stop(mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
    }
}
