//! The event-ingest thread: subscribes to every worker's `kv-events` publisher, decodes the
//! events and feeds every shard's index replica (docs/dynamo/kv-routing.md §3.1, §4).
//!
//! The control thread tells it, on every discovery change, which publishers exist (the
//! `kv-events` event channels' ZMQ endpoints), which `(worker, dp_rank)` sources name a
//! recovery target (`v1/event_sources`) and which workers are alive ([`Publishers`]). It
//! connects a [`zmq::Sub`] to each new endpoint (retrying every second while one does not
//! answer), drops the ones that left, and turns a worker's disappearance into a
//! `RemoveWorker` op. Then it polls its sockets, decodes each four-frame message
//! ([`decode_message`], [`decode_kv_events`]), puts the events in order per owner
//! ([`Streams`]) and publishes the resulting ops to the replicas through [`IndexFeed`]
//! (never blocking on a slow shard).
//!
//! Recovery (§4.3): a newly discovered source is restored in full, and a gap asks the worker
//! for the missing range; [`Streams`] decides, and the queries run on short-lived threads
//! ([`recovery::query`], at most [`MAX_RECOVERIES`] at once) whose answers come back through
//! a channel, so one slow worker never holds up the others' events. Malformed messages are
//! counted and skipped; a publisher that goes away is reconnected while discovery still
//! lists it.
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | this file | the thread: what to follow, the loop, the ops it publishes |
//! | [`links`] | its sockets and the one wait on all of them |
//! | [`zmq`], [`zmq_pub`], [`nats`] | blocking ZMQ `SUB`/`PUB` and core-NATS clients, spoken directly |
//! | [`streams`] | per-`(worker, dp_rank)` order and recovery decisions (pure) |
//! | [`recovery`] | asking a worker for lost events over the request plane |
//! | [`sync`], [`peers`] | `active_sequences_events`: its codec; prefill marks and other routers' bookings |
//!
//! Runs on its own thread; the shards see only the ops it publishes on their rings
//! ([`crate::router::kv::replica`]) and the counters beside them.
//! It also follows every `active_sequences_events` publisher (workers' prefill marks, other
//! routers' bookings) and passes the shards' booking steps to [`Peers`], which matches the
//! marks to bookings and, under `--router-replica-sync`, publishes this process's bookings.
//! The sockets themselves and the wait on them are [`links`].

pub mod links;
pub mod nats;
mod nats_io;
pub mod peers;
pub mod recovery;
pub mod streams;
pub mod sync;
pub mod zmq;
pub mod zmq_pub;

use std::collections::{BTreeMap, BTreeSet, HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use self::links::{connect, poll, Link, NatsLink, Sockets};
use self::peers::{Peers, SyncSetup};
use self::recovery::{Answer, Deadlines, NatsRoute, QueryRequest, Target};
use self::streams::{Out, Streams, Want};
use self::zmq::Message;
use crate::plane::kv_events::{
    decode_kv_events, decode_kv_metrics, decode_message, decode_nats_message, DecodeError, EventMessage,
};
use crate::router::kv::active::{Up, Wake};
use crate::router::kv::index::{IndexOp, Owner};
use crate::router::kv::predict::{CachePolicy, Expiry};
use crate::router::kv::replica::{IndexFeed, IndexReplica};

/// What discovery says the ingest thread should follow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Publishers {
    /// ZMQ endpoints (`tcp://host:port`) of the `kv-events` publishers.
    pub endpoints: BTreeSet<String>,
    /// ZMQ endpoints of the `kv_metrics` publishers (KV blocks in use, for busy detection).
    pub load_endpoints: BTreeSet<String>,
    /// ZMQ endpoints of the `active_sequences_events` publishers (workers' prefill marks,
    /// other routers' bookings), with their publisher ids.
    pub active_endpoints: BTreeMap<String, u64>,
    /// NATS subjects of `kv-events`, `kv_metrics` and `active_sequences_events` channels (workers on `--event-plane
    /// nats`), received from the server `NATS_SERVER` names.
    pub nats_subjects: BTreeSet<String>,
    /// Instance ids of the live workers.
    pub workers: BTreeSet<u64>,
    /// Where each `(worker, dp_rank)` answers recovery queries.
    pub sources: BTreeMap<Owner, Target>,
}

pub use crate::metrics::kv::{IngestCounts, IngestStats};

/// How the ingest thread learns the workers' caches.
pub struct IngestOptions {
    /// The NATS server of workers on `--event-plane nats`.
    pub nats_url: String,
    /// Its TLS (`NATS_TLS_*`; a `tls://` URL asks for TLS too).
    pub nats_tls: crate::tls::plane::NatsTlsFiles,
    /// The shards' rings up to this thread (booking steps, predictions) and their wake fd.
    pub upstream: Option<crate::router::kv::active::Downstream>,
    /// Approximate mode (`--no-router-kv-events`): no subscriptions; the shards' routing
    /// predictions are re-published to every replica and leave after this TTL or by LRU.
    pub approximate: Option<(Duration, CachePolicy)>,
    /// `--router-predicted-ttl-secs`: the shards' routing predictions also go to every
    /// replica's side index ([`IndexOp::Side`]) and leave it after this TTL.
    pub predicted: Option<Duration>,
    /// `--router-replica-sync`: the publisher of this process's bookings, and its endpoint
    /// as registered in discovery (not subscribed to).
    pub sync: Option<SyncSetup>,
    /// This router's id in `active_sequences_events` (its own events are ignored).
    pub router_id: u64,
}

impl IngestOptions {
    /// Event mode, `NATS_SERVER` and `NATS_TLS_*` from the environment (where `config`
    /// exported the `--nats-tls-*` options, as 1.6.1 does).
    pub fn from_env() -> IngestOptions {
        let nats_url = std::env::var("NATS_SERVER").unwrap_or_else(|_| nats::DEFAULT_URL.to_owned());
        let nats_tls = crate::tls::plane::NatsTlsFiles::from_env(&|k| std::env::var(k).ok());
        IngestOptions {
            nats_url,
            nats_tls,
            upstream: None,
            approximate: None,
            predicted: None,
            sync: None,
            router_id: random_id(),
        }
    }
}

/// Handle to the running ingest thread.
pub struct Ingest {
    tx: flume::Sender<Publishers>,
    stop: Arc<AtomicBool>,
    pub stats: Arc<IngestStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Largest frame accepted from a publisher.
pub(super) const MAX_FRAME: usize = 64 << 20;
const KV_EVENTS: &[u8] = b"kv-events";
const KV_METRICS: &[u8] = b"kv_metrics";
const ACTIVE: &[u8] = b"active_sequences_events";
/// Recovery queries in flight at once (1.6.1: 16).
pub const MAX_RECOVERIES: usize = 16;

impl Ingest {
    /// Start the thread feeding `feed` from the workers' events; NATS channels are received
    /// from the server named by `NATS_SERVER` (default `nats://localhost:4222`), as Dynamo's
    /// processes do.
    pub fn start(feed: IndexFeed) -> std::io::Result<Ingest> {
        Ingest::start_with(feed, IngestOptions::from_env())
    }

    /// The ingest thread of a frontend with `shards` shards, and what each shard installs:
    /// event mode, or approximate mode when `approximate` (TTL, policy) is given.
    pub fn start_for(
        shards: usize,
        approximate: Option<(Duration, CachePolicy)>,
        sync: Option<SyncSetup>,
    ) -> std::io::Result<(Ingest, Vec<crate::router::kv::select::KvInstall>)> {
        Ingest::start_serving(shards, approximate, None, sync, false).map(|(i, installs, _)| (i, installs))
    }

    /// [`Ingest::start_for`], with one more index replica when `served` (the served
    /// indexer's, `--serve-indexer`) and the predict-on-route side index when `predicted`
    /// (its TTL, `--router-predicted-ttl-secs`).
    #[allow(clippy::type_complexity)]
    pub fn start_serving(
        shards: usize,
        approximate: Option<(Duration, CachePolicy)>,
        predicted: Option<Duration>,
        sync: Option<SyncSetup>,
        served: bool,
    ) -> std::io::Result<(Ingest, Vec<crate::router::kv::select::KvInstall>, Option<IndexReplica>)> {
        let (feed, mut replicas) = crate::router::kv::replica::channel(shards + usize::from(served), 1 << 16);
        let extra = if served { replicas.pop() } else { None };
        let (ups, downstream) = crate::router::kv::active::channel(shards, 1 << 14)?;
        let opts =
            IngestOptions { upstream: Some(downstream), approximate, predicted, sync, ..IngestOptions::from_env() };
        let ingest = Ingest::start_with(feed, opts)?;
        let installs = replicas
            .into_iter()
            .zip(ups)
            .map(|(replica, up)| crate::router::kv::select::KvInstall {
                replica,
                ingest: ingest.stats.clone(),
                up: Some(up),
                share_bookings: true,
                approximate: approximate.is_some(),
                predicted: predicted.is_some(),
            })
            .collect();
        Ok((ingest, installs, extra))
    }

    /// [`Ingest::start`] with explicit options. A NATS TLS setting that cannot be used (a
    /// file that does not read) fails here, before the thread starts.
    pub fn start_with(feed: IndexFeed, opts: IngestOptions) -> std::io::Result<Ingest> {
        let nats_tls = crate::tls::plane::nats_client(&opts.nats_tls, &opts.nats_url)
            .map_err(|e| std::io::Error::new(std::io::ErrorKind::InvalidInput, format!("NATS TLS: {e}")))?;
        let (tx, rx) = flume::unbounded::<Publishers>();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(IngestStats::default());
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let callback_host = std::env::var("DYN_TCP_RESPONSE_STREAM_HOST").unwrap_or_else(|_| "127.0.0.1".to_owned());
        let thread = std::thread::Builder::new().name("kv-ingest".into()).spawn(move || {
            let mut st = State::new(feed, stats2, callback_host, opts, nats_tls);
            while !stop2.load(Ordering::Acquire) {
                while let Ok(p) = rx.try_recv() {
                    st.discovery(p);
                }
                connect(&mut st.links, &st.stats);
                st.nats.connect(&st.stats);
                let due = st.peers.flush(Instant::now(), &st.stats);
                let wait = due.map_or(50, |d| d.as_millis().clamp(1, 50) as i32);
                let sockets = Sockets { links: &mut st.links, nats: &mut st.nats, publisher: st.peers.publisher() };
                poll(sockets, st.wake.as_deref(), &mut st.batch, &mut st.nats_batch, wait);
                st.step();
            }
        })?;
        Ok(Ingest { tx, stop, stats, thread: Some(thread) })
    }

    /// Tell the thread what discovery now says.
    pub fn update(&self, p: Publishers) {
        let _ = self.tx.send(p);
    }

    /// A sender for [`Ingest::update`] that can move to another thread.
    pub fn sender(&self) -> flume::Sender<Publishers> {
        self.tx.clone()
    }
}

impl Drop for Ingest {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// Everything the ingest thread owns.
struct State {
    feed: IndexFeed,
    stats: Arc<IngestStats>,
    links: HashMap<String, Link>,
    nats: NatsLink,
    nats_batch: Vec<nats::NatsMsg>,
    /// The shards' rings up to this thread, and the descriptor that says they hold something.
    upstream: Vec<rtrb::Consumer<Up>>,
    wake: Option<Arc<Wake>>,
    /// Approximate mode: the expiry of what the shards predicted.
    approx: Option<Expiry>,
    /// `--router-predicted-ttl-secs`: what the side index holds, and when each entry leaves.
    side: Option<Expiry>,
    workers: BTreeSet<u64>,
    sources: BTreeMap<Owner, Target>,
    streams: Streams,
    batch: Vec<Message>,
    out: Vec<Out>,
    /// Queries waiting for a free recovery slot.
    queued: VecDeque<Want>,
    in_flight: usize,
    replies_tx: flume::Sender<(Owner, Result<Answer, String>)>,
    replies: flume::Receiver<(Owner, Result<Answer, String>)>,
    callback_host: String,
    /// Request ids ↔ bookings; replica sync in and out.
    peers: Peers,
    /// Our own `active_sequences_events` endpoint (never subscribed to).
    own_endpoint: Option<String>,
    ops: Vec<IndexOp>,
}

impl State {
    fn new(
        feed: IndexFeed,
        stats: Arc<IngestStats>,
        callback_host: String,
        opts: IngestOptions,
        nats_tls: Option<Arc<rustls::ClientConfig>>,
    ) -> State {
        let (replies_tx, replies) = flume::unbounded();
        let (sync, own_endpoint) = match opts.sync {
            Some((out, ep)) => (Some(out), Some(ep)),
            None => (None, None),
        };
        let (upstream, wake) = match opts.upstream {
            Some((rings, wake)) => (rings, Some(wake)),
            None => (Vec::new(), None),
        };
        State {
            feed,
            stats,
            links: HashMap::new(),
            nats: NatsLink {
                url: opts.nats_url,
                tls: nats_tls,
                subjects: BTreeSet::new(),
                sub: None,
                next_try: Instant::now(),
            },
            nats_batch: Vec::new(),
            upstream,
            wake,
            approx: opts.approximate.map(|(ttl, policy)| Expiry::new(ttl, policy)),
            side: opts.predicted.map(|ttl| Expiry::new(ttl, CachePolicy::Ttl)),
            workers: BTreeSet::new(),
            sources: BTreeMap::new(),
            streams: Streams::default(),
            batch: Vec::new(),
            out: Vec::new(),
            queued: VecDeque::new(),
            in_flight: 0,
            replies_tx,
            replies,
            callback_host,
            peers: Peers::new(opts.router_id, sync),
            own_endpoint,
            ops: Vec::new(),
        }
    }

    fn discovery(&mut self, mut p: Publishers) {
        if let Some(side) = self.side.as_mut() {
            for gone in self.workers.difference(&p.workers) {
                side.remove_worker(*gone);
            }
        }
        if let Some(expiry) = self.approx.as_mut() {
            // No event plane: only the set of workers matters.
            for gone in self.workers.difference(&p.workers) {
                expiry.remove_worker(*gone);
            }
            // No KV events; prefill marks and other routers' bookings still matter.
            let nats_subjects =
                p.nats_subjects.into_iter().filter(|s| s.ends_with(".active_sequences_events")).collect();
            p = Publishers {
                workers: p.workers,
                active_endpoints: p.active_endpoints,
                nats_subjects,
                ..Publishers::default()
            };
        }
        if let Some(own) = &self.own_endpoint {
            p.active_endpoints.remove(own);
        }
        let mut gone = Vec::new();
        self.links.retain(|ep, l| {
            let keep = match l.topic {
                KV_EVENTS => p.endpoints.contains(ep),
                KV_METRICS => p.load_endpoints.contains(ep),
                _ => p.active_endpoints.get(ep) == Some(&l.publisher),
            };
            if !keep && l.topic == ACTIVE {
                gone.push(l.publisher);
            }
            keep
        });
        for publisher in gone {
            self.peers.publisher_gone(publisher, &self.stats, &mut self.ops);
        }
        let wanted = p.endpoints.iter().map(|e| (e, KV_EVENTS, 0));
        let wanted = wanted.chain(p.load_endpoints.iter().map(|e| (e, KV_METRICS, 0)));
        let wanted = wanted.chain(p.active_endpoints.iter().map(|(e, id)| (e, ACTIVE, *id)));
        for (ep, topic, publisher) in wanted {
            self.links.entry(ep.clone()).or_insert(Link { topic, publisher, sub: None, next_try: Instant::now() });
        }
        for op in self.ops.drain(..) {
            self.feed.publish(op);
        }
        for gone in self.workers.difference(&p.workers) {
            self.feed.publish(IndexOp::RemoveWorker { worker_id: *gone });
            self.streams.remove_worker(*gone);
        }
        if p.nats_subjects != self.nats.subjects {
            // Subscribed at connect: a new list means a new connection.
            self.nats.subjects = p.nats_subjects;
            self.nats.sub = None;
            self.nats.next_try = Instant::now();
        }
        self.workers = p.workers;
        for owner in p.sources.keys() {
            if !self.sources.contains_key(owner) && self.workers.contains(&owner.worker_id) {
                self.streams.source_added(*owner, &mut self.out);
            }
        }
        self.sources = p.sources;
        self.sources.retain(|o, _| self.workers.contains(&o.worker_id));
    }

    /// Applies what arrived (events, recovery answers, due retries) and flushes the feed.
    fn step(&mut self) {
        // The shards' booking steps first: a worker's prefill mark read in this same round
        // must find the booking its request id names.
        self.upstream();
        let batch = std::mem::take(&mut self.batch);
        for m in &batch {
            let frames: smallvec::SmallVec<[&[u8]; 4]> = m.iter().map(Vec::as_slice).collect();
            self.message(decode_message(&frames));
        }
        self.batch = batch;
        self.batch.clear();
        let batch = std::mem::take(&mut self.nats_batch);
        for m in &batch {
            self.message(decode_nats_message(m.subject.as_bytes(), &m.payload));
        }
        self.nats_batch = batch;
        self.nats_batch.clear();
        while let Ok((owner, reply)) = self.replies.try_recv() {
            self.in_flight -= 1;
            self.streams.reply(owner, reply, Instant::now(), &mut self.out);
        }
        self.streams.tick(Instant::now(), &mut self.out);
        for o in self.out.drain(..) {
            match o {
                Out::Op(op) => self.feed.publish(op),
                Out::Query(w) => self.queued.push_back(w),
            }
        }
        self.start_queries();
        self.feed.flush();
        let c = self.streams.counts;
        let s = &self.stats;
        if self.approx.is_none() {
            s.events.store(c.applied, Ordering::Relaxed);
        }
        s.duplicates.store(c.duplicates, Ordering::Relaxed);
        s.gaps.store(c.gaps, Ordering::Relaxed);
        s.restores.store(c.restores, Ordering::Relaxed);
        s.recovered.store(c.recovered, Ordering::Relaxed);
        s.recovery_failures.store(c.failed_attempts, Ordering::Relaxed);
        s.recovery_given_up.store(c.given_up, Ordering::Relaxed);
    }

    /// Re-publishes what the shards sent up (booking steps for the other shards,
    /// predictions) and, in approximate mode, expires old predictions.
    fn upstream(&mut self) {
        let now = Instant::now();
        for ring in self.upstream.iter_mut() {
            while let Ok(up) = ring.pop() {
                match up {
                    Up::Load(m) => {
                        self.peers.local_step(&m);
                        self.feed.publish(IndexOp::Load(m));
                    }
                    Up::Predict(p) => {
                        if !self.workers.contains(&p.owner.worker_id) {
                            continue;
                        }
                        let mut evicted = Vec::new();
                        if let Some(expiry) = self.approx.as_mut() {
                            expiry.touch(&p, now, &mut evicted);
                            self.feed.publish(p.op());
                            for op in evicted {
                                self.feed.publish(op);
                            }
                            self.stats.events.fetch_add(1, Ordering::Relaxed);
                        } else if let Some(side) = self.side.as_mut() {
                            side.touch(&p, now, &mut evicted);
                            self.feed.publish(IndexOp::Side(Box::new(p.op())));
                        }
                    }
                }
            }
        }
        if let Some(expiry) = self.approx.as_mut() {
            let mut gone = Vec::new();
            expiry.expire(now, &mut gone);
            for op in gone {
                self.feed.publish(op);
            }
        }
        if let Some(side) = self.side.as_mut() {
            let mut gone = Vec::new();
            side.expire(now, &mut gone);
            for op in gone {
                self.feed.publish(IndexOp::Side(Box::new(op)));
            }
        }
    }

    /// One event-plane message of either transport: KV events or a KV usage report.
    fn message(&mut self, msg: Result<EventMessage<'_>, DecodeError>) {
        let msg = match msg {
            Ok(m) => m,
            Err(e) => return self.malformed("message", &e),
        };
        if msg.topic == ACTIVE {
            self.peers.received(msg.envelope.payload, msg.envelope.publisher_id, &self.stats, &mut self.ops);
            for op in self.ops.drain(..) {
                self.feed.publish(op);
            }
            return;
        }
        if msg.topic == KV_METRICS {
            match decode_kv_metrics(msg.envelope.payload) {
                Ok(m) => self.feed.publish(IndexOp::Usage {
                    owner: Owner { worker_id: m.worker_id, dp_rank: m.dp_rank },
                    kv_used_blocks: m.kv_used_blocks.unwrap_or(0),
                    active_decode_blocks: m.active_decode_blocks,
                    active_prefill_tokens: m.active_prefill_tokens,
                }),
                Err(e) => self.malformed("kv_metrics report", &e),
            }
            return;
        }
        match decode_kv_events(msg.envelope.payload) {
            Ok(events) => {
                for ev in events {
                    self.streams.event(ev, &mut self.out);
                }
            }
            Err(e) => self.malformed("kv-events message", &e),
        }
    }

    fn malformed(&self, what: &str, e: &DecodeError) {
        self.stats.malformed.fetch_add(1, Ordering::Relaxed);
        crate::log::warn(&format!("kv events: undecodable {what} skipped: {e}"));
    }

    fn start_queries(&mut self) {
        while self.in_flight < MAX_RECOVERIES {
            let Some(want) = self.queued.pop_front() else { return };
            let Some(target) = self.sources.get(&want.owner).cloned() else {
                // The source left; its stream was forgotten with the worker.
                continue;
            };
            let req = match want.range {
                None => QueryRequest::full(want.owner),
                Some((start, end)) => QueryRequest::range(want.owner, start, end),
            };
            let tx = self.replies_tx.clone();
            let host = self.callback_host.clone();
            let nats = NatsRoute { url: self.nats.url.clone(), tls: self.nats.tls.clone() };
            let spawned = std::thread::Builder::new().name("kv-recovery".into()).spawn(move || {
                let tls = crate::tls::plane::installed();
                let reply = recovery::query(&target, &req, &host, Deadlines::default(), tls, &nats);
                let _ = tx.send((req_owner(&req), reply));
            });
            match spawned {
                Ok(_) => self.in_flight += 1,
                Err(e) => {
                    // Treated as a failed attempt: retried with back-off.
                    self.streams.reply(want.owner, Err(format!("no thread: {e}")), Instant::now(), &mut self.out);
                }
            }
        }
    }
}

fn req_owner(req: &QueryRequest) -> Owner {
    Owner { worker_id: req.worker_id, dp_rank: req.dp_rank }
}

/// A random 64-bit id (router ids, publisher ids).
pub fn random_id() -> u64 {
    crate::util::random_u64()
}
