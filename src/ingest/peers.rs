//! The ingest thread's side of `active_sequences_events` (docs/dynamo/kv-routing.md §7.3, §7.8): the
//! workers' prefill-complete marks and, with `--router-replica-sync`, the bookings of the
//! other routers in, this process's bookings out.
//!
//! The shards never see a request id string: a booking travels as (origin shard, key) plus
//! the bits of the UUID the worker was sent ([`LoadOp::Add`]). [`Peers`] keeps the map from
//! request id to booking, so a worker's `MarkPrefillCompleted` becomes a
//! [`LoadOp::PrefillMarked`] for that booking (checked against the booked worker rank), and
//! another router's `AddRequest` / `MarkPrefillCompleted` / `Free` become booking steps of
//! origin [`REMOTE_ORIGIN`] under a key allocated here. Events carrying our own `router_id`
//! are ignored. When a router's publisher leaves discovery, the bookings it announced are
//! freed (a router that died never sends their `Free`).
//!
//! Publishing ([`SyncOut`]): this process's booking steps, as the shards send them up, are
//! batched (at most [`BATCH_MAX`] events, sent at the latest [`BATCH_WINDOW`] after the first
//! one waited) and written to the [`Pub`] socket the other routers subscribe to.

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::sync::{
    decode_active, encode_active, encode_message, ActiveData, OutData, OutEvent, ACTIVE_SEQUENCES_TOPIC, BATCH_MAX,
    BATCH_WINDOW,
};
use super::IngestStats;
use crate::ingest::zmq_pub::Pub;
use crate::router::kv::active::{LoadMsg, LoadOp, REMOTE_ORIGIN};
use crate::router::kv::index::{IndexOp, Owner};

/// Replica sync's publisher and its endpoint as registered in discovery.
pub type SyncSetup = (SyncOut, String);

/// What replica sync publishes with.
pub struct SyncOut {
    pub socket: Pub,
    /// The envelope's `publisher_id` (also the event channel's `instance_id` in discovery).
    pub publisher_id: u64,
    pub sequence: u64,
    pending: Vec<OutEvent>,
    since: Option<Instant>,
}

impl SyncOut {
    pub fn new(socket: Pub, publisher_id: u64) -> SyncOut {
        SyncOut { socket, publisher_id, sequence: 0, pending: Vec::new(), since: None }
    }
}

struct Local {
    request: u128,
    worker: Owner,
    /// Prefill end already announced.
    prefilled: bool,
}

struct Remote {
    router_id: u64,
    /// The envelope publisher the Add came from.
    publisher: u64,
    key: u64,
}

/// Request ids ↔ bookings, and the replica-sync publisher.
pub struct Peers {
    pub router_id: u64,
    local: HashMap<(u16, u64), Local>,
    by_request: HashMap<u128, (u16, u64)>,
    remote: HashMap<String, Remote>,
    next_key: u64,
    out: Option<SyncOut>,
}

impl Peers {
    pub fn new(router_id: u64, out: Option<SyncOut>) -> Peers {
        Peers { router_id, local: HashMap::new(), by_request: HashMap::new(), remote: HashMap::new(), next_key: 0, out }
    }

    pub fn publisher(&mut self) -> Option<&mut SyncOut> {
        self.out.as_mut()
    }

    /// Other routers' bookings held now.
    pub fn remote_bookings(&self) -> usize {
        self.remote.len()
    }

    /// A booking step of one of our shards (already passed on to the other shards).
    pub fn local_step(&mut self, m: &LoadMsg) {
        let id = (m.origin, m.key);
        let event = match &m.op {
            LoadOp::Add { worker, prefill_tokens, blocks, request } => {
                self.local.insert(id, Local { request: *request, worker: *worker, prefilled: *prefill_tokens == 0 });
                if *request != 0 {
                    self.by_request.insert(*request, id);
                }
                Some((
                    *request,
                    *worker,
                    OutData::Add { token_sequence: blocks.clone(), prefill_tokens: *prefill_tokens },
                ))
            }
            LoadOp::PrefillDone | LoadOp::PrefillMarked => self.prefilled(id),
            // Output blocks stay in this process (1.6.1 has no event for them).
            LoadOp::Output { .. } => None,
            LoadOp::Free => self.local.remove(&id).map(|l| {
                self.by_request.remove(&l.request);
                (l.request, l.worker, OutData::Free)
            }),
        };
        if let Some((request_id, worker, data)) = event {
            self.queue(OutEvent { request_id, worker, data });
        }
    }

    /// The MarkPrefillCompleted to announce for local booking `id`, once.
    fn prefilled(&mut self, id: (u16, u64)) -> Option<(u128, Owner, OutData)> {
        let l = self.local.get_mut(&id)?;
        if l.prefilled {
            return None;
        }
        l.prefilled = true;
        Some((l.request, l.worker, OutData::PrefillDone))
    }

    fn queue(&mut self, e: OutEvent) {
        if let Some(o) = self.out.as_mut() {
            if o.pending.is_empty() {
                o.since = Some(Instant::now());
            }
            o.pending.push(e);
        }
    }

    /// An `active_sequences_events` payload from publisher `publisher`: the booking steps it
    /// means for the shards go to `ops`.
    pub fn received(&mut self, payload: &[u8], publisher: u64, stats: &IngestStats, ops: &mut Vec<IndexOp>) {
        let events = match decode_active(payload) {
            Ok(e) => e,
            Err(e) => {
                stats.malformed.fetch_add(1, Ordering::Relaxed);
                crate::log::warn(&format!("kv events: undecodable active_sequences_events skipped: {e}"));
                return;
            }
        };
        for ev in events {
            if ev.router_id == self.router_id {
                continue;
            }
            stats.active_events.fetch_add(1, Ordering::Relaxed);
            let worker = Owner::from(ev.worker);
            match ev.data {
                ActiveData::MarkPrefillCompleted => {
                    let local = crate::util::parse_uuid(&ev.request_id).and_then(|r| self.by_request.get(&r).copied());
                    if let Some(id) = local {
                        if self.local.get(&id).is_some_and(|l| l.worker == worker) {
                            stats.prefill_marks.fetch_add(1, Ordering::Relaxed);
                            ops.push(load(id, LoadOp::PrefillMarked));
                            if let Some((request_id, worker, data)) = self.prefilled(id) {
                                self.queue(OutEvent { request_id, worker, data });
                            }
                        }
                    } else if let Some(r) = self.remote.get(&ev.request_id) {
                        ops.push(load((REMOTE_ORIGIN, r.key), LoadOp::PrefillDone));
                    }
                }
                ActiveData::AddRequest(add) => {
                    if self.remote.contains_key(&ev.request_id) {
                        continue;
                    }
                    let key = self.next_key;
                    self.next_key += 1;
                    let prefill_tokens = add.prefill_tokens();
                    let blocks = add.token_sequence.unwrap_or_default().into();
                    ops.push(load((REMOTE_ORIGIN, key), LoadOp::Add { worker, prefill_tokens, blocks, request: 0 }));
                    self.remote.insert(ev.request_id, Remote { router_id: ev.router_id, publisher, key });
                }
                ActiveData::Free => {
                    if self.remote.get(&ev.request_id).is_some_and(|r| r.router_id == ev.router_id) {
                        let r = self.remote.remove(&ev.request_id).expect("just seen");
                        ops.push(load((REMOTE_ORIGIN, r.key), LoadOp::Free));
                    }
                }
            }
        }
        stats.remote_bookings.store(self.remote.len() as u64, Ordering::Relaxed);
    }

    /// Publisher `publisher` left discovery: the bookings it announced are freed.
    pub fn publisher_gone(&mut self, publisher: u64, stats: &IngestStats, ops: &mut Vec<IndexOp>) {
        self.remote.retain(|_, r| {
            if r.publisher == publisher {
                ops.push(load((REMOTE_ORIGIN, r.key), LoadOp::Free));
                false
            } else {
                true
            }
        });
        stats.remote_bookings.store(self.remote.len() as u64, Ordering::Relaxed);
    }

    /// Publishes the pending batch when it is full or has waited [`BATCH_WINDOW`]; serves
    /// the subscribers. Returns how long until the pending batch is due (`None`: nothing
    /// waits).
    pub fn flush(&mut self, now: Instant, stats: &IngestStats) -> Option<Duration> {
        let router_id = self.router_id;
        let o = self.out.as_mut()?;
        o.socket.service();
        let since = o.since?;
        if o.pending.len() < BATCH_MAX && now < since + BATCH_WINDOW {
            return Some(since + BATCH_WINDOW - now);
        }
        let published_at =
            std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_millis() as u64);
        let pending = std::mem::take(&mut o.pending);
        for chunk in pending.chunks(BATCH_MAX) {
            let payload = encode_active(chunk, router_id);
            let frames = encode_message(ACTIVE_SEQUENCES_TOPIC, o.publisher_id, o.sequence, published_at, &payload);
            o.sequence += 1;
            o.socket.send(&frames);
            stats.active_published.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        }
        o.pending = pending;
        o.pending.clear();
        o.since = None;
        stats.active_dropped.store(o.socket.dropped, Ordering::Relaxed);
        None
    }
}

fn load(id: (u16, u64), op: LoadOp) -> IndexOp {
    IndexOp::Load(LoadMsg { origin: id.0, key: id.1, op })
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    const W: Owner = Owner { worker_id: 9, dp_rank: 1 };

    fn payload(router_id: u64, request_id: u128, worker: Owner, data: OutData) -> Vec<u8> {
        encode_active(&[OutEvent { request_id, worker, data }], router_id)
    }

    fn ops_of(p: &mut Peers, bytes: &[u8], publisher: u64) -> Vec<(u16, u64, LoadOp)> {
        let mut ops = Vec::new();
        p.received(bytes, publisher, &IngestStats::default(), &mut ops);
        ops.into_iter()
            .map(|op| match op {
                IndexOp::Load(m) => (m.origin, m.key, m.op),
                other => panic!("{other:?}"),
            })
            .collect()
    }

    #[test]
    fn other_routers_bookings_come_and_go_and_our_own_are_ignored() {
        let mut p = Peers::new(1, None);
        let add = || OutData::Add { token_sequence: Arc::from(&[5u64, 6][..]), prefill_tokens: 40 };
        assert!(ops_of(&mut p, &payload(1, 7, W, add()), 50).is_empty(), "our own router id");
        let got = ops_of(&mut p, &payload(2, 7, W, add()), 50);
        let blocks: Arc<[u64]> = Arc::from(&[5u64, 6][..]);
        assert_eq!(got, [(REMOTE_ORIGIN, 0, LoadOp::Add { worker: W, prefill_tokens: 40, blocks, request: 0 })]);
        assert!(ops_of(&mut p, &payload(2, 7, W, add()), 50).is_empty(), "a repeated Add");
        let done = ops_of(&mut p, &payload(2, 7, W, OutData::PrefillDone), 50);
        assert_eq!(done, [(REMOTE_ORIGIN, 0, LoadOp::PrefillDone)]);
        // A Free naming another router does not free it; the publisher leaving does.
        assert!(ops_of(&mut p, &payload(3, 7, W, OutData::Free), 60).is_empty());
        let mut ops = Vec::new();
        p.publisher_gone(60, &IngestStats::default(), &mut ops);
        assert!(ops.is_empty());
        p.publisher_gone(50, &IngestStats::default(), &mut ops);
        assert_eq!(ops.len(), 1);
        assert_eq!(p.remote_bookings(), 0);
        assert!(ops_of(&mut p, &payload(2, 7, W, OutData::Free), 50).is_empty(), "already freed");
        // Garbage is counted and skipped.
        let stats = IngestStats::default();
        let mut ops = Vec::new();
        p.received(b"\x81\xa6events\x91\xc3", 50, &stats, &mut ops);
        assert_eq!((ops.len(), stats.malformed.load(Ordering::Relaxed)), (0, 1));
    }

    #[test]
    fn a_workers_mark_names_a_local_booking_by_request_id_and_worker() {
        let mut p = Peers::new(1, None);
        let blocks: Arc<[u64]> = Arc::from(&[1u64][..]);
        p.local_step(&LoadMsg {
            origin: 3,
            key: 8,
            op: LoadOp::Add { worker: W, prefill_tokens: 16, blocks, request: 42 },
        });
        let other = Owner { worker_id: 10, dp_rank: 1 };
        assert!(ops_of(&mut p, &payload(10, 42, other, OutData::PrefillDone), 5).is_empty(), "another worker");
        assert!(ops_of(&mut p, &payload(9, 43, W, OutData::PrefillDone), 5).is_empty(), "another request");
        assert_eq!(ops_of(&mut p, &payload(9, 42, W, OutData::PrefillDone), 5), [(3, 8, LoadOp::PrefillMarked)]);
        p.local_step(&LoadMsg { origin: 3, key: 8, op: LoadOp::Free });
        assert!(ops_of(&mut p, &payload(9, 42, W, OutData::PrefillDone), 5).is_empty(), "freed");
    }
}
