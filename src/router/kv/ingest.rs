//! The event-ingest thread: subscribes to every worker's `kv-events` publisher, decodes the
//! events and feeds every shard's index replica (spec: KV routing §3.1, §4).
//!
//! The control thread tells it, on every discovery change, which publishers exist (the
//! `kv-events` event channels' ZMQ endpoints) and which workers are alive ([`Publishers`]).
//! It connects a [`Sub`] to each new endpoint (retrying every second while one does not
//! answer), drops the ones that left, and turns a worker's disappearance into a
//! `RemoveWorker` op. Then it polls its sockets, decodes each four-frame message
//! ([`decode_message`], [`decode_kv_events`]), applies device-tier events in order and
//! publishes them to the replicas through [`IndexFeed`] (never blocking on a slow shard).
//!
//! Each `(worker, dp_rank)` stream numbers its events from 1; a jump is counted and logged as
//! a gap. Recovery (asking the worker's `worker_kv_query_source_*` endpoint for the missing
//! range or a tree dump, §4.3) is not built yet: a gap leaves the index as the events left it
//! until later events or the worker's removal correct it. Malformed messages are counted and
//! skipped; a publisher that goes away is reconnected while discovery still lists it.

use std::collections::{BTreeSet, HashMap};
use std::os::fd::AsRawFd;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::events::{decode_kv_events, decode_message};
use super::index::{IndexOp, Owner};
use super::replica::IndexFeed;
use crate::plane::zmq::{Message, Sub};

/// What discovery says the ingest thread should follow.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Publishers {
    /// ZMQ endpoints (`tcp://host:port`) of the `kv-events` publishers.
    pub endpoints: BTreeSet<String>,
    /// Instance ids of the live workers.
    pub workers: BTreeSet<u64>,
}

/// Counters of the ingest thread, readable from anywhere.
#[derive(Debug, Default)]
pub struct IngestStats {
    pub events: AtomicU64,
    pub gaps: AtomicU64,
    pub malformed: AtomicU64,
    pub connected: AtomicU64,
}

/// Handle to the running ingest thread.
pub struct Ingest {
    tx: flume::Sender<Publishers>,
    stop: Arc<AtomicBool>,
    pub stats: Arc<IngestStats>,
    thread: Option<std::thread::JoinHandle<()>>,
}

/// Largest frame accepted from a publisher.
const MAX_FRAME: usize = 64 << 20;
const TOPIC: &[u8] = b"kv-events";

struct Link {
    sub: Option<Sub>,
    next_try: Instant,
}

impl Ingest {
    /// Start the thread feeding `feed`.
    pub fn start(mut feed: IndexFeed) -> std::io::Result<Ingest> {
        let (tx, rx) = flume::unbounded::<Publishers>();
        let stop = Arc::new(AtomicBool::new(false));
        let stats = Arc::new(IngestStats::default());
        let (stop2, stats2) = (stop.clone(), stats.clone());
        let thread = std::thread::Builder::new().name("kv-ingest".into()).spawn(move || {
            let mut links: HashMap<String, Link> = HashMap::new();
            let mut workers: BTreeSet<u64> = BTreeSet::new();
            let mut last_id: HashMap<Owner, u64> = HashMap::new();
            let mut batch: Vec<Message> = Vec::new();
            while !stop2.load(Ordering::Acquire) {
                while let Ok(p) = rx.try_recv() {
                    links.retain(|ep, _| p.endpoints.contains(ep));
                    for ep in &p.endpoints {
                        links.entry(ep.clone()).or_insert(Link { sub: None, next_try: Instant::now() });
                    }
                    for gone in workers.difference(&p.workers) {
                        feed.publish(IndexOp::RemoveWorker { worker_id: *gone });
                        last_id.retain(|o, _| o.worker_id != *gone);
                    }
                    workers = p.workers;
                }
                connect(&mut links, &stats2);
                poll(&mut links, &mut batch);
                for m in batch.drain(..) {
                    apply(&m, &mut feed, &mut last_id, &stats2);
                }
                feed.flush();
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

fn connect(links: &mut HashMap<String, Link>, stats: &IngestStats) {
    let now = Instant::now();
    for (ep, link) in links.iter_mut().filter(|(_, l)| l.sub.is_none() && l.next_try <= now) {
        match Sub::connect(ep, &[TOPIC], Duration::from_secs(1), MAX_FRAME) {
            Ok(sub) => {
                crate::log::info(&format!("kv events: subscribed to {ep}"));
                stats.connected.fetch_add(1, Ordering::Relaxed);
                link.sub = Some(sub);
            }
            Err(e) => {
                crate::log::warn(&format!("kv events: cannot subscribe to {ep}: {e}"));
                link.next_try = now + Duration::from_secs(1);
            }
        }
    }
}

/// Waits (≤ 50 ms) for readable publishers and collects their whole messages.
fn poll(links: &mut HashMap<String, Link>, out: &mut Vec<Message>) {
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut keys: Vec<String> = Vec::new();
    for (ep, link) in links.iter() {
        if let Some(sub) = &link.sub {
            fds.push(libc::pollfd { fd: sub.stream().as_raw_fd(), events: libc::POLLIN, revents: 0 });
            keys.push(ep.clone());
        }
    }
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(50));
        return;
    }
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, 50) };
    if n <= 0 {
        return;
    }
    for (fd, ep) in fds.iter().zip(keys) {
        if fd.revents == 0 {
            continue;
        }
        let Some(link) = links.get_mut(&ep) else { continue };
        let Some(sub) = link.sub.as_mut() else { continue };
        if let Err(e) = sub.drain(out) {
            crate::log::warn(&format!("kv events: publisher {ep} lost ({e}); reconnecting"));
            link.sub = None;
            link.next_try = Instant::now() + Duration::from_secs(1);
        }
    }
}

fn apply(m: &Message, feed: &mut IndexFeed, last_id: &mut HashMap<Owner, u64>, stats: &IngestStats) {
    let frames: smallvec::SmallVec<[&[u8]; 4]> = m.iter().map(Vec::as_slice).collect();
    let events = match decode_message(&frames).and_then(|msg| decode_kv_events(msg.envelope.payload)) {
        Ok(e) => e,
        Err(e) => {
            stats.malformed.fetch_add(1, Ordering::Relaxed);
            crate::log::warn(&format!("kv events: undecodable message skipped: {e}"));
            return;
        }
    };
    for ev in &events {
        if ev.storage_tier != "device" {
            continue;
        }
        let owner = Owner { worker_id: ev.worker_id, dp_rank: ev.event.dp_rank };
        let id = ev.event.event_id;
        if let Some(prev) = last_id.insert(owner, id) {
            if id != prev + 1 {
                stats.gaps.fetch_add(1, Ordering::Relaxed);
                crate::log::warn(&format!(
                    "kv events: gap for worker {:x} rank {}: event {id} after {prev}",
                    owner.worker_id, owner.dp_rank
                ));
            }
        }
        stats.events.fetch_add(1, Ordering::Relaxed);
        feed.publish(IndexOp::from_event(ev));
    }
}
