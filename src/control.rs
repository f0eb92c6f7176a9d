//! The control thread: discovery → Registry snapshots → every shard.
//!
//! Runs off the shards because everything here blocks: scanning the discovery store, reading
//! model files, building tokenizers (hundreds of milliseconds each). For each change it builds
//! an immutable [`Registry`] and hands the same `Arc` to every shard through its inbox; a shard
//! swaps its snapshot between requests.
//!
//! Serving data per model ([`Serving`]): the parsed model files, one tokenizer instance *per
//! shard* (shard `i` only ever touches `tokenizers[i]`, so no instance is shared between
//! shards; the tokenizer helper threads share shard 0's), and the workers that serve it. `model_input = Text` models need neither files nor
//! tokenizer (the request is forwarded as sent); `model_input = Tensor` models carry their
//! decoded `tensor_model_config` instead. Model files are read from the paths the card
//! names, verified against their checksums — in shared storage, or downloaded from the
//! worker's URLs ([`crate::discovery::cardfiles`]); the card's chat template file, when it
//! names one, replaces the directory's template. Each alias of a model gets a `serving`
//! entry sharing the model's `Arc` (whose `name` is the primary name).
//!
//! What cannot be served is counted per snapshot in [`Registry::skipped`] (by bucket: records
//! discovery skipped, cards whose model cannot be loaded, instances that cannot be reached)
//! and logged once, when it first appears; discovery rebuilds the Registry on every change,
//! and a problem that stays is not logged again.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::sync::atomic::AtomicBool;
use std::sync::Arc;

use crate::config::Config;
use crate::discovery::announce::Scope;
use crate::discovery::cardfiles::{default_cache, model_dir, CardFiles};
use crate::discovery::etcd::{EtcdSource, EtcdView};
use crate::discovery::file::{FileStore, InotifyWake};
use crate::discovery::mem::MemStore;
use crate::discovery::records::{Codec as CardCodec, ModelInput, BUCKETS, BUCKET_INSTANCES, BUCKET_MDC};
use crate::discovery::records::{EndpointRecord, EventChannelRecord, EventTransport};
use crate::discovery::{watch, ServedInstance, Snapshot, Source};
use crate::ingest::recovery::Target;
use crate::ingest::Publishers;
use crate::plane::payload::Codec;
use crate::registry::{CardLimits, Pool, Registry, Role, Serving, Surfaces, TokensModel, Worker};
use crate::shard::Server;
use crate::tokenize::backend::TokenizerChoice;
use crate::tokenize::ModelFiles;

/// Everything the control thread keeps between snapshots.
struct Builder {
    shards: usize,
    /// Loaded model files, by directory and chat template file.
    files: HashMap<CardFiles, Arc<ModelFiles>>,
    /// Per-shard tokenizers, by directory (built once).
    tokenizers: HashMap<PathBuf, Arc<Vec<crate::tokenize::Tokenizer>>>,
    /// Where card files served over HTTP are downloaded.
    cache: PathBuf,
    /// `--model-path`: where a card's files are looked for by name when the worker's paths
    /// are not on this host.
    overlay: Option<PathBuf>,
    /// Verified card files by card checksum (`mdc_sum`, which covers every file's
    /// checksum): a card is verified (and its files fetched) once, not on every rebuild.
    dirs: HashMap<String, CardFiles>,
    /// What the last snapshot skipped or refused (bucket or topic, name, reason), each logged
    /// when it first appeared.
    reported: BTreeSet<(&'static str, String, String)>,
    /// `--router-min-initial-workers`: a model is served once it has had this many workers
    /// at the same time (and from then on with any number).
    min_workers: usize,
    /// Models that reached `min_workers`.
    started: std::collections::HashSet<String>,
    /// `--request-plane nats`: workers are reached through their `nats_tcp` subjects (and
    /// those on the TCP plane are not served), else through their `tcp` addresses.
    nats_plane: bool,
    /// `--use-remote-indexer`: each pool learns its served indexers.
    remote_indexer: bool,
    /// `--tokenizer`, `--tokenizer-fallback`: what encodes prompts.
    tokenizer: TokenizerChoice,
}

/// Where alias conflicts are reported (logged, not counted as skipped records).
const ALIASES: &str = "aliases";

impl Builder {
    /// The card's verified local files, from `dirs` when this card was seen before.
    fn model_dir(&mut self, card: &crate::discovery::records::ModelCard) -> Result<CardFiles, String> {
        let sum = card.mdc_sum();
        if let Some(dir) = self.dirs.get(&sum) {
            return Ok(dir.clone());
        }
        let dir = model_dir(card, &self.cache, self.overlay.as_deref())?;
        self.dirs.insert(sum, dir.clone());
        Ok(dir)
    }

    /// The files and per-shard tokenizers of `at`, loaded the first time (for `model`, the
    /// name the log line about its encoder gives).
    fn load(
        &mut self,
        at: &CardFiles,
        model: &str,
    ) -> Result<(Arc<ModelFiles>, Arc<Vec<crate::tokenize::Tokenizer>>), String> {
        if let (Some(f), Some(t)) = (self.files.get(at), self.tokenizers.get(&at.dir)) {
            return Ok((f.clone(), t.clone()));
        }
        let started = std::time::Instant::now();
        // Loading parses tens of megabytes of JSON, and building a tokenizer takes about six
        // times its file's size for a moment: freed memory goes back to the system at once
        // meanwhile (it would add to the peak), and what is left free after, too.
        let (files, toks) = crate::util::alloc::purging_at_once(|| self.build(at))?;
        let template = match &at.template {
            Some(t) => format!(", chat template {}", t.path.display()),
            None => String::new(),
        };
        crate::log::info(&format!(
            "model files {}{template}: loaded in {:.1} ms ({} tokenizer instances)",
            at.dir.display(),
            started.elapsed().as_secs_f64() * 1e3,
            toks.len()
        ));
        if !self.tokenizers.contains_key(&at.dir) {
            files.encoding.log(model);
        }
        self.files.insert(at.clone(), files.clone());
        self.tokenizers.insert(at.dir.clone(), toks.clone());
        Ok((files, toks))
    }

    /// Read `at` and build its tokenizers (one per shard, side by side, the first shared with
    /// the helper threads), or take the directory's tokenizers built for another template.
    fn build(&self, at: &CardFiles) -> Result<(Arc<ModelFiles>, Arc<Vec<crate::tokenize::Tokenizer>>), String> {
        let (files, toks) = match self.tokenizers.get(&at.dir) {
            Some(t) => {
                // The directory's tokenizers exist already (another template): drop the
                // instance loading built.
                let files = ModelFiles::load_with(&at.dir, at.template.as_ref()).map_err(|e| e.to_string())?;
                drop(files.tokenizer());
                (files, t.clone())
            }
            None => {
                let (files, built) =
                    ModelFiles::load_instances_choosing(&at.dir, at.template.as_ref(), self.shards, self.tokenizer)
                        .map_err(|e| e.to_string())?;
                (files, Arc::new(built))
            }
        };
        if let Some(first) = toks.first() {
            files.share_with_helpers(first);
        }
        Ok((Arc::new(files), toks))
    }

    /// The serving data of the model `served` names (its first worker aside).
    fn serving(&mut self, served: &ServedInstance) -> Result<Serving, String> {
        let card = &served.card;
        let mut tensor = None;
        let tokens = match card.model_input {
            ModelInput::Tokens => {
                let (files, tokenizers) = self.model_dir(card).and_then(|at| self.load(&at, &served.model))?;
                Some(TokensModel { files, tokenizers })
            }
            // Forwarded as the client sent it: no files, no tokenizer.
            ModelInput::Text => None,
            // Tensors in and out, described by the card's `tensor_model_config`.
            ModelInput::Tensor => {
                tensor = Some(Arc::new(crate::kserve::tensor_meta::load(card.extra.get("tensor_model_config"))?));
                None
            }
            ModelInput::Unknown => return Err("only Tokens, Text and Tensor models are supported".into()),
        };
        let limits = CardLimits {
            context_length: card.effective_context_length(),
            kv_cache_block_size: card.kv_cache_block_size.map_or(0, u64::from),
            max_num_batched_tokens: card.runtime_config.max_num_batched_tokens.unwrap_or(0),
            max_num_seqs: card.runtime_config.max_num_seqs.unwrap_or(0),
            total_kv_blocks: card.runtime_config.total_kv_blocks.unwrap_or(0),
        };
        let reasoning = match (&tokens, card.runtime_config.reasoning_parser.as_deref()) {
            (Some(_), Some(name)) if !name.is_empty() => Some(reasoning_format(&served.model, name)),
            _ => None,
        };
        let tools = match (&tokens, card.runtime_config.tool_call_parser.as_deref()) {
            (Some(_), Some(name)) if !name.is_empty() => tool_format(&served.model, name),
            _ => None,
        };
        Ok(Serving {
            name: served.model.clone(),
            tokens,
            tensor,
            workers: Vec::new(),
            mdc_sum: Some(card.mdc_sum()),
            limits,
            reasoning,
            tools,
            prefill: None,
            pool: Pool::of_worker_type(card.worker_type.as_deref()),
            needs_prefill: needs(card, "prefill"),
            remote_indexers: Vec::new(),
            surfaces: Surfaces::of_model_type(card.model_type.flags.iter().map(String::as_str)),
            role: Arc::new(Role {
                namespace: served.endpoint.namespace.clone(),
                worker_type: card.worker_type.clone(),
                needs: card
                    .needs
                    .iter()
                    .filter_map(|alt| alt.as_array())
                    .map(|alt| alt.iter().filter_map(|t| t.as_str().map(str::to_string)).collect())
                    .collect(),
            }),
        })
    }

    /// Add serving data for every model the snapshot serves (and its aliases), count what
    /// was skipped, and log what was not skipped before.
    fn add_serving(&mut self, registry: &mut Registry, snap: &Snapshot) {
        let mut problems: BTreeSet<(&'static str, String, String)> =
            snap.skipped.iter().map(|s| (s.bucket, s.file_name.clone(), s.reason.clone())).collect();
        // Cards that failed in this pass, by checksum: their other instances fail alike.
        let mut failed: HashMap<String, String> = HashMap::new();
        // The prefill workers of each model (disaggregated serving), by model name.
        let mut prefill: BTreeMap<String, Arc<Serving>> = BTreeMap::new();
        // The component of each pool (model, prefill?), for its served indexers.
        let mut components: BTreeMap<(String, bool), (String, String)> = BTreeMap::new();
        for served in &snap.served {
            let reached = match reach(&served.endpoint, self.nats_plane) {
                Ok(w) => w,
                Err(why) => {
                    problems.insert((BUCKET_INSTANCES, served.key.clone(), format!("model {}: {why}", served.model)));
                    continue;
                }
            };
            let worker = Worker {
                cpu: served.endpoint.device_type.as_deref() == Some("cpu"),
                dp_start: served.card.runtime_config.data_parallel_start_rank.unwrap_or(0),
                dp_size: served.card.runtime_config.data_parallel_size.unwrap_or(1).max(1),
                bootstrap: bootstrap_of(&served.card),
                ..reached
            };
            // Prefill workers serve no request of their own: they are kept apart and joined
            // to their model's decode workers below.
            let is_prefill = served.card.worker_type.as_deref() == Some("prefill");
            let e = &served.endpoint;
            components.entry((served.model.clone(), is_prefill)).or_insert((e.namespace.clone(), e.component.clone()));
            let pool = if is_prefill { &mut prefill } else { &mut registry.serving };
            if let Some(existing) = pool.get_mut(&served.model) {
                Arc::make_mut(existing).workers.push(worker);
                continue;
            }
            let sum = served.card.mdc_sum();
            let result = match failed.get(&sum) {
                Some(e) => Err(e.clone()),
                None => self.serving(served),
            };
            match result {
                Ok(mut serving) => {
                    serving.workers.push(worker);
                    pool.insert(served.model.clone(), Arc::new(serving));
                }
                Err(e) => {
                    let why = format!("model {}: not served: {e}", served.model);
                    problems.insert((BUCKET_MDC, served.key.clone(), why));
                    failed.insert(sum, e);
                }
            }
        }
        if self.remote_indexer {
            self.add_indexers(snap, &components, &mut registry.serving, &mut prefill);
        }
        join_prefill(&mut registry.serving, prefill, &mut problems);
        if self.min_workers > 1 {
            let (min, started) = (self.min_workers, &mut self.started);
            registry.serving.retain(|name, s| {
                if s.workers.len() >= min {
                    started.insert(name.clone());
                }
                started.contains(name)
            });
        }
        for (alias, primary) in &snap.aliases {
            if let Some(serving) = registry.serving.get(primary).cloned() {
                registry.serving.insert(alias.clone(), serving);
            }
        }
        // Only models that can be served are listed.
        registry.models.retain(|m| registry.serving.get(&m.name).is_some_and(|s| s.ready()));
        registry.skipped = BUCKETS.iter().map(|&b| (b, 0)).collect();
        for (bucket, _, _) in &problems {
            *registry.skipped.entry(bucket).or_insert(0) += 1;
        }
        problems.extend(snap.alias_conflicts.iter().map(|c| (ALIASES, String::new(), c.clone())));
        for line in self.report(problems) {
            crate::log::warn(&line);
        }
    }

    /// `--use-remote-indexer`: each pool's served indexers, the `kv_indexer_query` instances
    /// under its workers' namespace and component.
    fn add_indexers(
        &self,
        snap: &Snapshot,
        components: &BTreeMap<(String, bool), (String, String)>,
        serving: &mut BTreeMap<String, Arc<Serving>>,
        prefill: &mut BTreeMap<String, Arc<Serving>>,
    ) {
        let mut by_component: BTreeMap<(&str, &str), Vec<Worker>> = BTreeMap::new();
        for e in snap.instances.iter().map(|e| &e.record) {
            if e.endpoint != crate::plane::indexer::KV_INDEXER_QUERY_ENDPOINT {
                continue;
            }
            let Ok(w) = reach(e, self.nats_plane) else { continue };
            by_component.entry((e.namespace.as_str(), e.component.as_str())).or_default().push(w);
        }
        for ((model, is_prefill), (ns, component)) in components {
            let pool = if *is_prefill { &mut *prefill } else { &mut *serving };
            if let Some(s) = pool.get_mut(model) {
                Arc::make_mut(s).remote_indexers =
                    by_component.get(&(ns.as_str(), component.as_str())).cloned().unwrap_or_default();
            }
        }
    }

    /// The log lines of the problems that were not in the previous snapshot's; `problems`
    /// becomes the set to compare the next snapshot's with.
    fn report(&mut self, problems: BTreeSet<(&'static str, String, String)>) -> Vec<String> {
        let lines = problems
            .difference(&self.reported)
            .map(|(bucket, name, reason)| match *bucket {
                ALIASES => format!("discovery: {reason}"),
                _ => format!("discovery: skipped {bucket} record {name}: {reason}"),
            })
            .collect();
        self.reported = problems;
        lines
    }
}

/// Disaggregated serving: each model's prefill workers join its serving data (a model with
/// prefill workers and no other worker is not served: 1.6.1 answers it 404).
fn join_prefill(
    serving: &mut BTreeMap<String, Arc<Serving>>,
    prefill: BTreeMap<String, Arc<Serving>>,
    problems: &mut BTreeSet<(&'static str, String, String)>,
) {
    for (model, pool) in prefill {
        match serving.get_mut(&model) {
            Some(s) if s.tokens.is_some() => Arc::make_mut(s).prefill = Some(pool),
            Some(_) => {
                let why = format!("model {model}: prefill workers of a model that is not tokenized here: not used");
                problems.insert((BUCKET_MDC, model, why));
            }
            None => {}
        }
    }
}

/// Whether a card's `needs` (a list of alternatives, each a list of worker types) names
/// `kind`.
fn needs(card: &crate::discovery::records::ModelCard, kind: &str) -> bool {
    card.needs.iter().any(|alt| match alt {
        serde_json::Value::Array(types) => types.iter().any(|t| t.as_str() == Some(kind)),
        serde_json::Value::String(t) => t == kind,
        _ => false,
    })
}

/// A prefill worker's rendezvous for the KV hand-off: its card's
/// `runtime_config.disaggregated_endpoint` `{bootstrap_host, bootstrap_port}`.
fn bootstrap_of(card: &crate::discovery::records::ModelCard) -> Option<Arc<crate::registry::Bootstrap>> {
    let ep = card.runtime_config.extra.get("disaggregated_endpoint")?;
    let host = ep.get("bootstrap_host")?.as_str()?.to_owned();
    let port = u16::try_from(ep.get("bootstrap_port")?.as_u64()?).ok()?;
    Some(Arc::new(crate::registry::Bootstrap { host, port }))
}

/// The `kv-events` and `kv_metrics` publishers (ZMQ endpoints, NATS subjects), the recovery
/// targets and the live workers of a snapshot; with `load_only` (another router mode than
/// kv, watching worker load for the busy thresholds) only the `kv_metrics` publishers.
/// With `remote_index` (`--use-remote-indexer`) no `kv-events` publishers or recovery
/// targets: the served indexer follows the workers' KV events, this process does not (their
/// load reports and prefill marks it still follows).
pub(crate) fn kv_publishers(snap: &Snapshot, load_only: bool, remote_index: bool) -> Publishers {
    let mut p = all_publishers(snap);
    if remote_index && !load_only {
        p.endpoints.clear();
        p.sources.clear();
        p.nats_subjects.retain(|s| !s.ends_with(".kv-events"));
    }
    if load_only {
        p.endpoints.clear();
        p.active_endpoints.clear();
        p.sources.clear();
        p.nats_subjects.retain(|s| s.ends_with(".kv_metrics"));
    }
    p
}

fn all_publishers(snap: &Snapshot) -> Publishers {
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

/// An endpoint instance as this frontend reaches it on its request plane: its TCP address
/// and endpoint path, or (`nats_plane`) its NATS subject, and its codec; one rank, on a GPU,
/// no rendezvous (what a model card says of a worker is the caller's to add).
fn reach(e: &EndpointRecord, nats_plane: bool) -> Result<Worker, String> {
    let (addr, path, nats_subject) = match (e.tcp(), e.nats_tcp(), nats_plane) {
        (Some(tcp), _, false) => match resolve(&tcp.addr) {
            Some(addr) => (addr, tcp.path, None),
            None => return Err(format!("cannot resolve worker address {}", tcp.addr)),
        },
        (_, Some(subject), true) => match crate::plane::nats::check_publish_subject(subject) {
            Ok(()) => (SocketAddr::from(([0, 0, 0, 0], 0)), String::new(), Some(subject.to_owned())),
            Err(e) => return Err(format!("bad NATS subject: {e}")),
        },
        (_, None, true) => return Err("not on the NATS request plane (this frontend runs --request-plane nats)".into()),
        (None, Some(_), false) => {
            return Err("on the NATS request plane (start the frontend with --request-plane nats)".into())
        }
        (None, None, false) => return Err("not on the TCP request plane".into()),
    };
    let codec = match e.codec() {
        Some(CardCodec::Json) => Codec::Json,
        _ => Codec::Msgpack,
    };
    Ok(Worker {
        addr,
        path,
        nats_subject,
        codec,
        instance_id: e.instance_id,
        cpu: false,
        dp_start: 0,
        dp_size: 1,
        bootstrap: None,
    })
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
    /// `--discovery-backend kubernetes`: the cluster and pod found at start-up.
    Kube(Box<crate::discovery::kube::KubeSettings>),
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
        Control::start_announcing(cfg, server, backend, kv, None, Vec::new())
    }

    /// [`Control::start_with_kv`], also telling `announce` which endpoints are served (the
    /// scopes of this process's own records: `--router-replica-sync`, `--serve-indexer`),
    /// and sending each of `taps` every registry once the shards have been handed it (the
    /// served indexer's, the `--interactive` terminal's).
    pub fn start_announcing(
        cfg: &Config,
        server: &Server,
        backend: Backend,
        kv: Option<flume::Sender<Publishers>>,
        announce: Option<flume::Sender<BTreeSet<Scope>>>,
        taps: Vec<flume::Sender<Arc<Registry>>>,
    ) -> std::io::Result<Control> {
        let stop = Arc::new(AtomicBool::new(false));
        let publisher = server.publisher();
        let filter = cfg.namespace_filter();
        let shards = server.drivers.len();
        let min_workers = cfg.min_initial_workers;
        let nats_plane = cfg.request_plane_nats.is_some();
        let remote_indexer = cfg.use_remote_indexer;
        let tokenizer = cfg.tokenizer;
        let overlay = cfg.model_overlay.clone();
        let load_only = cfg.router_mode != crate::config::settings::RouterMode::Kv;
        let anthropic = cfg.paths.anthropic.is_some();
        let stop2 = stop.clone();
        let thread = std::thread::Builder::new().name("control".into()).spawn(move || {
            let mut source: Box<dyn Source> = match backend {
                Backend::File(root) => {
                    let wake = InotifyWake::new(&root);
                    Box::new(FileStore::new(root, filter).with_wake(wake))
                }
                Backend::Mem(store) => Box::new(store.source(filter)),
                Backend::Etcd(view) => Box::new(EtcdSource::new(*view, filter)),
                Backend::Kube(settings) => match crate::discovery::kube::KubeSource::start(*settings, filter) {
                    Ok(source) => Box::new(source),
                    Err(e) => {
                        crate::log::error(&format!("kubernetes discovery: cannot start its threads: {e}"));
                        return;
                    }
                },
            };
            let mut builder = Builder {
                shards,
                files: HashMap::new(),
                tokenizers: HashMap::new(),
                cache: default_cache(),
                overlay,
                dirs: HashMap::new(),
                reported: BTreeSet::new(),
                min_workers,
                started: Default::default(),
                nats_plane,
                remote_indexer,
                tokenizer,
            };
            // The route groups open, and the surfaces the last registry's models declared.
            let (mut open, mut present) = (Surfaces::initially_open(anthropic), Surfaces::NONE);
            watch(
                source.as_mut(),
                &stop2,
                |mut registry, snap| {
                    if let Some(kv) = &kv {
                        let _ = kv.send(kv_publishers(snap, load_only, remote_indexer));
                    }
                    if let Some(a) = &announce {
                        let scopes = snap.served.iter().map(|s| {
                            let e = &s.endpoint;
                            (e.namespace.clone(), e.component.clone(), e.endpoint.clone())
                        });
                        let _ = a.send(scopes.collect());
                    }
                    builder.add_serving(&mut registry, snap);
                    let now = registry.present();
                    open = Surfaces::next_open(open, present, now, anthropic);
                    present = now;
                    registry.open = Some(open);
                    let registry = Arc::new(registry);
                    // Shards first: whoever a tap tells sends its requests after this
                    // registry in every inbox.
                    publisher(registry.clone());
                    for t in &taps {
                        let _ = t.send(registry.clone());
                    }
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

/// The reasoning format of parser `name` (a model's card), case-insensitive as 1.6.1 reads it;
/// a name 1.6.1 does not know falls back to `basic` (`<think>` tags), with a warning, as there.
fn reasoning_format(model: &str, name: &str) -> crate::parsers::reasoning::Format {
    use crate::parsers::reasoning::format_of;
    format_of(&name.to_ascii_lowercase()).unwrap_or_else(|| {
        crate::log::warn(&format!("model {model}: unknown reasoning parser {name:?}, using basic (<think> tags)"));
        format_of("basic").expect("basic is a reasoning parser")
    })
}

/// The tool-call format of parser `name` (a model's card); a name 1.6.1 does not know parses
/// no calls, with a warning.
fn tool_format(model: &str, name: &str) -> Option<crate::parsers::tools::Format> {
    let format = crate::parsers::tools::format_of(&name.to_ascii_lowercase());
    if format.is_none() {
        crate::log::warn(&format!("model {model}: unknown tool call parser {name:?}, no tool calls are parsed"));
    }
    format
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::NamespaceFilter;
    use crate::discovery::snapshot::{build, Catalog, ParseCache, Raw};
    use std::time::SystemTime;

    fn builder() -> Builder {
        Builder {
            shards: 1,
            files: HashMap::new(),
            tokenizers: HashMap::new(),
            cache: std::env::temp_dir().join("switchyard-control-unit-cache"),
            overlay: None,
            dirs: HashMap::new(),
            reported: BTreeSet::new(),
            min_workers: 0,
            started: Default::default(),
            nats_plane: false,
            remote_indexer: false,
            tokenizer: TokenizerChoice::default(),
        }
    }

    /// A card record of `name` for instance `id` (a Text model: no files to load).
    fn card(name: &str, id: u64, input: &str, aliases: &[&str]) -> (String, Vec<u8>) {
        let v = serde_json::json!({
            "type": "Model", "namespace": "dynamo", "component": "c", "endpoint": "generate", "instance_id": id,
            "card_json": {"display_name": name, "model_type": "Chat | Completions", "model_input": input,
                "context_length": 7, "aliases": aliases},
        });
        (format!("dynamo/c/generate/{id:x}"), serde_json::to_vec(&v).unwrap())
    }

    fn endpoint(id: u64) -> (String, Vec<u8>) {
        let v = serde_json::json!({
            "type": "Endpoint", "namespace": "dynamo", "component": "c", "endpoint": "generate", "instance_id": id,
            "transport": {"tcp": format!("127.0.0.1:1/{id:x}/dynamo/c/generate")},
        });
        (format!("dynamo/c/generate/{id:x}"), serde_json::to_vec(&v).unwrap())
    }

    fn snapshot(records: &[(&'static str, &(String, Vec<u8>))]) -> Snapshot {
        let raws = records.iter().map(|(bucket, (key, bytes))| Raw {
            bucket,
            name: key,
            key,
            modified: SystemTime::now(),
            bytes,
        });
        build(raws, &NamespaceFilter::Any, Vec::new(), &mut ParseCache::default())
    }

    #[test]
    fn served_indexers_under_the_workers_component_are_the_models_remote_indexers() {
        let (c1, e1) = (card("m", 1, "Text", &[]), endpoint(1));
        let indexer = |id: u64, component: &str| {
            let v = serde_json::json!({
                "type": "Endpoint", "namespace": "dynamo", "component": component, "endpoint": "kv_indexer_query",
                "instance_id": id, "transport": {"tcp": format!("127.0.0.1:9/{id:x}/dynamo/{component}/kv_indexer_query")},
            });
            (format!("dynamo/{component}/kv_indexer_query/{id:x}"), serde_json::to_vec(&v).unwrap())
        };
        let (ours, other) = (indexer(7, "c"), indexer(8, "elsewhere"));
        let records =
            [(BUCKET_MDC, &c1), (BUCKET_INSTANCES, &e1), (BUCKET_INSTANCES, &ours), (BUCKET_INSTANCES, &other)];
        let snap = snapshot(&records);
        for (remote, expected) in [(true, vec![7u64]), (false, vec![])] {
            let mut registry = Catalog::default().registry(&snap, SystemTime::now());
            Builder { remote_indexer: remote, ..builder() }.add_serving(&mut registry, &snap);
            let s = &registry.serving["m"];
            assert_eq!(s.workers.len(), 1, "an indexer is no worker");
            let ids: Vec<u64> = s.remote_indexers.iter().map(|w| w.instance_id).collect();
            assert_eq!(ids, expected);
            if remote {
                assert_eq!(s.remote_indexers[0].path, "7/dynamo/c/kv_indexer_query");
            }
        }
        // Following no KV events of its own: load reports and prefill marks only.
        let p = kv_publishers(&snap, false, true);
        assert!(p.endpoints.is_empty() && p.sources.is_empty());
    }

    #[test]
    fn aliases_share_the_primary_serving_data() {
        let (c1, e1, e2) = (card("m", 1, "Text", &["a1", "a2"]), endpoint(1), endpoint(2));
        let c2 = card("m", 2, "Text", &["a1", "a2"]);
        let snap = snapshot(&[(BUCKET_MDC, &c1), (BUCKET_MDC, &c2), (BUCKET_INSTANCES, &e1), (BUCKET_INSTANCES, &e2)]);
        let mut registry = Catalog::default().registry(&snap, SystemTime::now());
        builder().add_serving(&mut registry, &snap);
        let names: Vec<&str> = registry.models.iter().map(|m| m.name.as_str()).collect();
        assert_eq!(names, ["a1", "a2", "m"]);
        assert!(registry.models.iter().all(|m| m.context_window == 7 && m.created == registry.models[0].created));
        let primary = &registry.serving["m"];
        assert_eq!((primary.name.as_str(), primary.workers.len()), ("m", 2));
        for alias in ["a1", "a2"] {
            assert!(Arc::ptr_eq(&registry.serving[alias], primary), "{alias}");
        }
        assert_eq!(registry.aliases.get("a1").map(String::as_str), Some("m"));
        assert!(registry.skipped.values().all(|&n| n == 0), "{:?}", registry.skipped);
    }

    /// A card of model `m` for instance `id` with a worker type and its needs, in its own
    /// component (as the mocker registers prefill workers).
    fn typed_card(id: u64, worker_type: &str, needs: &str, extra: serde_json::Value) -> (String, Vec<u8>) {
        let v = serde_json::json!({
            "type": "Model", "namespace": "dynamo", "component": "c", "endpoint": "generate", "instance_id": id,
            "card_json": {"display_name": "m", "model_type": "Chat | Completions", "model_input": "Text",
                "worker_type": worker_type, "needs": [[needs]], "runtime_config": extra},
        });
        (format!("dynamo/c/generate/{id:x}"), serde_json::to_vec(&v).unwrap())
    }

    #[test]
    fn decode_workers_wait_for_prefill_workers_and_prefill_workers_serve_nothing_alone() {
        let boot =
            serde_json::json!({"disaggregated_endpoint": {"bootstrap_host": "10.0.0.9", "bootstrap_port": 7001}});
        let decode = typed_card(1, "decode", "prefill", serde_json::json!({}));
        let prefill = typed_card(2, "prefill", "decode", boot);
        let (e1, e2) = (endpoint(1), endpoint(2));
        let build_with = |records: &[(&'static str, &(String, Vec<u8>))]| {
            let snap = snapshot(records);
            let mut registry = Catalog::default().registry(&snap, SystemTime::now());
            builder().add_serving(&mut registry, &snap);
            registry
        };
        // Decode workers alone: known (503 "not ready", as 1.6.1), not listed.
        let r = build_with(&[(BUCKET_MDC, &decode), (BUCKET_INSTANCES, &e1)]);
        assert!(r.models.is_empty(), "{:?}", r.models);
        let s = &r.serving["m"];
        assert!(s.needs_prefill && s.prefill.is_none() && !s.ready(), "{s:?}");
        // Prefill workers alone: unknown (404, as 1.6.1).
        let r = build_with(&[(BUCKET_MDC, &prefill), (BUCKET_INSTANCES, &e2)]);
        assert!(r.models.is_empty() && r.serving.is_empty(), "{:?}", r.serving.keys());
        // Both: the prefill worker never serves a request of its own. (A Text model's
        // prefill workers are not used: only a tokenized request is handed off.)
        let r = build_with(&[
            (BUCKET_MDC, &decode),
            (BUCKET_MDC, &prefill),
            (BUCKET_INSTANCES, &e1),
            (BUCKET_INSTANCES, &e2),
        ]);
        let ids: Vec<u64> = r.serving["m"].workers.iter().map(|w| w.instance_id).collect();
        assert_eq!(ids, [1]);
        assert_eq!(r.skipped.get(BUCKET_MDC), Some(&1), "{:?}", r.skipped);
    }

    #[test]
    fn a_prefill_card_names_its_rendezvous_and_its_needs() {
        let parse = |v: serde_json::Value| -> crate::discovery::records::ModelCard {
            serde_json::from_value(serde_json::json!({"display_name": "m", "model_type": "", "runtime_config": v["rc"], "needs": v["needs"]})).unwrap()
        };
        let c = parse(
            serde_json::json!({"rc": {"disaggregated_endpoint": {"bootstrap_host": "h", "bootstrap_port": 9}}, "needs": [["decode"]]}),
        );
        assert_eq!(bootstrap_of(&c).as_deref(), Some(&crate::registry::Bootstrap { host: "h".into(), port: 9 }));
        assert!(needs(&c, "decode") && !needs(&c, "prefill"));
        let c = parse(
            serde_json::json!({"rc": {"disaggregated_endpoint": {"bootstrap_host": "h", "bootstrap_port": 70000}}, "needs": []}),
        );
        assert_eq!(bootstrap_of(&c), None, "a port out of range is no rendezvous");
        assert!(!needs(&c, "decode"));
        let c = parse(serde_json::json!({"rc": {}, "needs": [["encode"], ["prefill", "encode"]]}));
        assert_eq!(bootstrap_of(&c), None);
        assert!(needs(&c, "prefill"));
    }

    #[test]
    fn problems_are_counted_each_snapshot_and_reported_once() {
        let bad = ("dynamo/c/generate/9".to_string(), b"{not json".to_vec());
        let unknown = card("u", 3, "Audio", &[]);
        let (good, e1, e3) = (card("m", 1, "Text", &["u"]), endpoint(1), endpoint(3));
        let records = [
            (BUCKET_MDC, &bad),
            (BUCKET_MDC, &unknown),
            (BUCKET_MDC, &good),
            (BUCKET_INSTANCES, &e1),
            (BUCKET_INSTANCES, &e3),
        ];
        let snap = snapshot(&records);
        let mut b = builder();
        let mut registry = Catalog::default().registry(&snap, SystemTime::now());
        b.add_serving(&mut registry, &snap);
        // The unparseable record and the card of an unknown input kind.
        assert_eq!(registry.skipped.get(BUCKET_MDC), Some(&2));
        assert_eq!(registry.skipped.get(BUCKET_INSTANCES), Some(&0));
        assert_eq!(registry.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["m"]);
        // Reported lines: the two records and the alias that is another model's name.
        assert_eq!(b.reported.len(), 3, "{:?}", b.reported);
        // A rebuild of the same problems logs nothing new, and still counts them.
        let mut again = Catalog::default().registry(&snap, SystemTime::now());
        let before = b.reported.clone();
        b.add_serving(&mut again, &snap);
        assert_eq!(again.skipped.get(BUCKET_MDC), Some(&2));
        assert_eq!(b.reported, before);
        assert!(b.report(before.clone()).is_empty());
        // Gone, then back: reported again.
        assert!(b.report(BTreeSet::new()).is_empty());
        let lines = b.report(before);
        assert_eq!(lines.len(), 3, "{lines:?}");
        assert!(lines.iter().any(|l| l.starts_with("discovery: skipped v1/mdc record dynamo/c/generate/9: not JSON")));
        assert!(lines.iter().any(|l| l.contains("model u: not served: only Tokens, Text and Tensor")));
        assert!(lines.iter().any(|l| l.contains("alias \"u\" of model m is a model's own name")), "{lines:?}");
    }

    #[test]
    fn workers_are_reached_on_the_frontend_request_plane() {
        let nats_endpoint = |id: u64| {
            let v = serde_json::json!({
                "type": "Endpoint", "namespace": "dynamo", "component": "c", "endpoint": "generate", "instance_id": id,
                "transport": {"nats_tcp": format!("dynamo_c.generate-{id:x}")},
            });
            (format!("dynamo/c/generate/{id:x}"), serde_json::to_vec(&v).unwrap())
        };
        let (c1, c2) = (card("m", 1, "Text", &[]), card("m", 2, "Text", &[]));
        let (tcp, nats) = (endpoint(1), nats_endpoint(2));
        let snap =
            snapshot(&[(BUCKET_MDC, &c1), (BUCKET_MDC, &c2), (BUCKET_INSTANCES, &tcp), (BUCKET_INSTANCES, &nats)]);
        for nats_plane in [false, true] {
            let mut b = Builder { nats_plane, ..builder() };
            let mut registry = Catalog::default().registry(&snap, SystemTime::now());
            b.add_serving(&mut registry, &snap);
            let workers = &registry.serving["m"].workers;
            assert_eq!(workers.len(), 1, "nats_plane {nats_plane}: {workers:?}");
            let (w, other) = if nats_plane { (2, "not on the NATS") } else { (1, "on the NATS request plane") };
            assert_eq!(workers[0].instance_id, w);
            assert_eq!(workers[0].nats_subject.as_deref(), nats_plane.then_some("dynamo_c.generate-2"));
            assert_eq!(registry.skipped.get(BUCKET_INSTANCES), Some(&1));
            assert!(b.reported.iter().any(|(_, _, why)| why.contains(other)), "{:?}", b.reported);
        }
    }
}
