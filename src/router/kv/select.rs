//! `--router-mode kv` on one shard: the shard's index replica, its active-sequence
//! bookings, and the choice of a worker for a prompt (docs/dynamo/kv-routing.md §7).
//!
//! For each request: the prompt's local block hashes (§5.2) and their chained sequence
//! hashes (§5.3), the shard's replica brought up to date and asked for each worker's overlap
//! (§6.1), then Dynamo's cost per candidate ([`super::cost`]) from the overlap and this shard's
//! bookings, and the cheapest candidate (among ties the one whose cache holds the fewest
//! blocks, [`super::cost::choose_roomiest`]; `--router-tie-break random`: any, as 1.6.1). The chosen worker is *booked*
//! (§7.3): its active prefill tokens grow by the uncached part of the prompt until the first
//! answer arrives, its active block set takes the prompt's sequence hashes until the answer
//! ends ([`Booking`]).
//!
//! Busy detection (§7.6): with `--active-decode-blocks-threshold F` a worker whose last
//! `kv_metrics` report shows `kv_used_blocks / total_kv_blocks > F` is left out; with
//! `--active-prefill-tokens-threshold N` / `-frac F` one whose booked prefill tokens exceed
//! `N` or `F·max_num_batched_tokens` is too. If every candidate is left out the request gets
//! 529 at once ([`Overloaded`]), as 1.6.1 answers.
//!
//! Bookings are the whole process's ([`super::active`]): every shard routes alone but reads
//! the load every shard booked (a hop through the ingest thread behind) and the cache state
//! of every worker (the index replicas all receive every event), so the process decides as
//! one Dynamo router does.

use std::cell::RefCell;
use std::sync::Arc;

pub use super::active::Booking;
use super::active::{Bookings, KvHit, Upstream};
use super::cost::{
    choose, choose_least_load, choose_roomiest, choose_two_tier, logit, Candidate, CostParams, RequestShape,
};
use super::hash::{local_block_hashes, sequence_hashes, BlockHashOptions};
use super::index::{BlockPair, IndexOp, Owner};
use super::predict::Prediction;
use super::replica::IndexReplica;
use crate::metrics::kv::IngestStats;
use crate::registry::{CardLimits, Pool, Worker};

pub use crate::config::settings::BusyThresholds;
use crate::config::settings::{Selector, Selectors};

impl BusyThresholds {
    /// Whether any threshold is set.
    pub fn any(&self) -> bool {
        self.decode_blocks_frac.is_some() || self.prefill_tokens.is_some() || self.prefill_frac.is_some()
    }

    /// Whether a worker with `used` KV blocks in use (if it reported) and `prefill` booked
    /// prefill tokens is over a threshold, given its card's `limits`.
    pub fn overloaded(&self, used: Option<u64>, prefill: u64, limits: &CardLimits) -> bool {
        let decode = match (self.decode_blocks_frac, used) {
            (Some(f), Some(u)) if limits.total_kv_blocks > 0 => u as f64 / limits.total_kv_blocks as f64 > f,
            _ => false,
        };
        let tokens = self.prefill_tokens.is_some_and(|n| prefill > n);
        let frac = match self.prefill_frac {
            Some(f) if limits.max_num_batched_tokens > 0 => prefill as f64 > f * limits.max_num_batched_tokens as f64,
            _ => false,
        };
        decode || tokens || frac
    }
}

/// What the ingest side hands a shard for `--router-mode kv`.
pub struct KvInstall {
    pub replica: IndexReplica,
    pub ingest: Arc<IngestStats>,
    /// This shard's ring to the ingest thread (bookings for the other shards, predictions).
    pub up: Option<Upstream>,
    /// Booking steps go up to the ingest thread (other shards, workers' prefill marks,
    /// replica sync).
    pub share_bookings: bool,
    /// Approximate mode (`--no-router-kv-events`): predictions are sent up.
    pub approximate: bool,
    /// `--router-predicted-ttl-secs`: predictions are sent up for the side index, and the
    /// overlaps are the larger of the index's and the side index's per worker rank.
    pub predicted: bool,
}

/// What a served indexer answered (`--use-remote-indexer`): per `(worker, dp_rank)` its
/// device match, and the host and disk (with external) blocks that continue it.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Overlaps {
    pub device: Vec<(Owner, u32)>,
    pub lower: Vec<(Owner, u32, u32)>,
}

/// A choice the router would make, not made ([`KvSelector::peek_for`]).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Peek {
    /// Index into the workers asked about.
    pub index: usize,
    pub dp_rank: u32,
    /// The cost's inputs for that rank: its overlap, booked prefill tokens, projected blocks.
    pub candidate: Candidate,
}

/// What [`KvSelector::evaluate`] found: the candidates, their costs, the chosen one, and the
/// prompt's block hashes.
struct Evaluated {
    ranks: smallvec::SmallVec<[(usize, Owner); 16]>,
    cands: smallvec::SmallVec<[Candidate; 16]>,
    logits: smallvec::SmallVec<[f64; 16]>,
    k: usize,
    local: Vec<u64>,
    seq: Vec<u64>,
    block_size: u32,
}

/// Every candidate worker is over a busy threshold.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Overloaded;

/// One shard's kv router state.
pub struct KvSelector {
    replica: RefCell<Option<IndexReplica>>,
    ingest: RefCell<Option<Arc<IngestStats>>>,
    pub(super) bookings: Bookings,
    approximate: std::cell::Cell<bool>,
    predicted: std::cell::Cell<bool>,
    params: CostParams,
    /// Each worker pool's selection (the options' cost function unless
    /// `--router-policy-config` selects an instance).
    selectors: Selectors,
    /// The busy thresholds of the command line, and per model those set at run time
    /// (`POST /busy_threshold`, broadcast to every shard).
    busy: BusyThresholds,
    busy_set: RefCell<std::collections::HashMap<String, BusyThresholds>>,
    queues: super::admit::Queues,
    stats: RefCell<KvStats>,
}

pub use crate::metrics::kv::{ActiveLoad, KvStats};

/// The outcome of a kv choice, for logs and metrics.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Choice {
    pub index: usize,
    /// The data-parallel rank chosen on `workers[index]`.
    pub dp_rank: u32,
    pub overlap_blocks: u32,
    pub logit: f64,
}

impl KvSelector {
    pub fn new(params: CostParams, busy: BusyThresholds) -> KvSelector {
        KvSelector {
            replica: RefCell::new(None),
            ingest: RefCell::new(None),
            bookings: Bookings::default(),
            approximate: std::cell::Cell::new(false),
            predicted: std::cell::Cell::new(false),
            params,
            selectors: Selectors::same(params),
            busy,
            busy_set: RefCell::default(),
            queues: Default::default(),
            stats: RefCell::default(),
        }
    }

    /// With each pool's selection (`worker_selection` of `--router-policy-config`).
    pub fn with_selectors(mut self, selectors: Selectors) -> KvSelector {
        self.selectors = selectors;
        self
    }

    /// The cost parameters of `pool`'s choices (the options' for a selector without them).
    fn cost_params(&self, pool: Pool) -> &CostParams {
        match self.selector(pool) {
            Selector::Cost(p) => p,
            Selector::TwoTier { .. } | Selector::LeastLoad => &self.params,
        }
    }

    /// Whether `pool`'s selector takes the request classifier's worker when it is eligible
    /// (1.6.1: the default cost function exclusively, `thunderagent` first; the two-tier
    /// cost function reads no target).
    pub fn takes_target(&self, pool: Pool) -> bool {
        !matches!(self.selector(pool), Selector::TwoTier { .. })
    }

    fn selector(&self, pool: Pool) -> &Selector {
        match pool {
            Pool::Aggregated => &self.selectors.aggregated,
            Pool::Prefill => &self.selectors.prefill,
            Pool::Decode => &self.selectors.decode,
        }
    }

    /// With the router queue's policy classes (`--router-queue-threshold`,
    /// `--router-policy-config`) and the process's class counts.
    pub fn with_classes(
        mut self,
        profiles: crate::config::classes::ClassProfiles,
        book: Arc<super::queue::ClassBook>,
    ) -> KvSelector {
        self.queues = super::admit::Queues::new(profiles, book);
        self
    }

    pub(super) fn queues(&self) -> &super::admit::Queues {
        &self.queues
    }

    /// The replica's pending index events and loads applied.
    pub(super) fn bring_up_to_date(&self) {
        if let Some(r) = self.replica.borrow_mut().as_mut() {
            self.drain(r);
        }
    }

    /// The most prompt tokens any usable worker rank of `pool` holds (lower tiers at their
    /// weights), as the queue classifies a request by its uncached length.
    pub fn best_cached(
        &self,
        pool: Pool,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        mut rand: impl FnMut() -> u64,
    ) -> u64 {
        let Ok(Some(e)) =
            self.evaluate(BusyThresholds::default(), pool, workers, usable, tokens, limits, None, &mut rand)
        else {
            return 0;
        };
        let p = self.cost_params(pool);
        e.cands.iter().map(|c| Self::cached_tokens(p, c, e.block_size)).max().unwrap_or(0)
    }

    /// Install this shard's index replica (sent once by the event-ingest side).
    pub fn install(&self, kv: KvInstall) {
        *self.replica.borrow_mut() = Some(kv.replica);
        *self.ingest.borrow_mut() = Some(kv.ingest);
        *self.bookings.up.borrow_mut() = kv.up;
        self.bookings.share.set(kv.share_bookings);
        self.approximate.set(kv.approximate);
        self.predicted.set(kv.predicted);
    }

    /// This shard's counters (the replica brought up to date first).
    pub fn stats(&self) -> KvStats {
        let mut index_blocks = 0;
        if let Some(r) = self.replica.borrow_mut().as_mut() {
            self.drain(r);
            index_blocks = r.index().indexed_blocks() as u64;
        }
        let mut st = self.stats.borrow().clone();
        st.index_blocks = index_blocks;
        for (o, a) in self.bookings.table.borrow().iter() {
            let load = ActiveLoad {
                requests: u64::from(a.requests),
                prefill_tokens: a.prefill_tokens,
                blocks: a.weighted_blocks(),
            };
            st.active.insert((o.worker_id, o.dp_rank), load);
        }
        if let Some(i) = self.ingest.borrow().as_ref() {
            st.ingest = i.counts();
        }
        (st.queued, st.queued_total) = self.queues.counts();
        st
    }

    /// `--router-track-output-blocks`.
    pub fn tracks_output(&self) -> bool {
        self.params.track_output_blocks
    }

    /// Whether a replica is installed.
    pub fn ready(&self) -> bool {
        self.replica.borrow().is_some()
    }

    /// Choose among `workers[i]` for `i` in `usable` for the prompt `tokens` of a model
    /// with `limits` (block size, KV blocks), and book the chosen one for the request sent
    /// as `request` (its id's UUID bits). `Ok(None)` when `usable` is empty, [`Overloaded`]
    /// when every usable worker is busy.
    pub fn choose(
        &self,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        request: u128,
        rand: impl FnMut() -> u64,
    ) -> Result<Option<(Choice, Booking)>, Overloaded> {
        self.choose_from(self.busy, Pool::Aggregated, workers, usable, tokens, limits, request, None, rand)
    }

    /// [`KvSelector::choose`] for a request of `model`, with the model's busy thresholds;
    /// `remote`: the overlaps a served indexer answered (`--use-remote-indexer`), used instead
    /// of this shard's index.
    #[allow(clippy::too_many_arguments)]
    pub fn choose_for(
        &self,
        model: &str,
        pool: Pool,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        request: u128,
        remote: Option<&Overlaps>,
        rand: impl FnMut() -> u64,
    ) -> Result<Option<(Choice, Booking)>, Overloaded> {
        self.choose_from(self.busy_for(model), pool, workers, usable, tokens, limits, request, remote, rand)
    }

    /// The busy thresholds of `model`: set at run time, else the command line's.
    pub fn busy_for(&self, model: &str) -> BusyThresholds {
        let set = self.busy_set.borrow();
        if set.is_empty() {
            return self.busy;
        }
        set.get(model).copied().unwrap_or(self.busy)
    }

    /// `model`'s busy thresholds from now on.
    pub fn set_busy(&self, model: String, busy: BusyThresholds) {
        self.busy_set.borrow_mut().insert(model, busy);
    }

    #[allow(clippy::too_many_arguments)]
    fn choose_from(
        &self,
        busy: BusyThresholds,
        pool: Pool,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        request: u128,
        remote: Option<&Overlaps>,
        mut rand: impl FnMut() -> u64,
    ) -> Result<Option<(Choice, Booking)>, Overloaded> {
        let Some(e) = self.evaluate(busy, pool, workers, usable, tokens, limits, remote, &mut rand)? else {
            return Ok(None);
        };
        let Evaluated { ranks, cands, logits, k, local, seq, block_size } = e;
        let (index, owner) = ranks[k];
        let cached = Self::cached_tokens(self.cost_params(pool), &cands[k], block_size).min(tokens.len() as u64);
        let prefill_tokens = tokens.len() as u64 - cached;
        self.predict(owner, &local, &seq, limits.total_kv_blocks);
        // `--no-router-assume-kv-reuse`: the booking's blocks are its own (fresh random
        // identities), never shared with another request's.
        // `--no-router-track-active-blocks`: no blocks booked at all.
        let ids = match (self.params.track_active_blocks, self.params.assume_kv_reuse) {
            (false, _) => Vec::new(),
            (true, true) => seq,
            (true, false) => seq.iter().map(|_| rand()).collect(),
        };
        let queue_depth = self.queues.counts().0 as u32;
        let rate = if tokens.is_empty() { 0.0 } else { cached as f64 / tokens.len() as f64 };
        let booking = self.bookings.book(owner, prefill_tokens, ids, request).with_hit(KvHit { rate, queue_depth });
        let mut st = self.stats.borrow_mut();
        *st.decisions.entry(owner.worker_id).or_insert(0) += 1;
        st.overlap_blocks += u64::from(cands[k].overlap_blocks);
        st.prompt_blocks += local.len() as u64;
        let choice =
            Choice { index, dp_rank: owner.dp_rank, overlap_blocks: cands[k].overlap_blocks, logit: logits[k] };
        Ok(Some((choice, booking)))
    }

    /// The worker rank the router would choose for `tokens` among `workers[i]`, `i` in
    /// `usable`, with its cost's inputs — nothing booked, no busy threshold applied (1.6.1's
    /// advisory peek, as conditional disaggregation asks it). `None` without candidates.
    pub fn peek_for(
        &self,
        pool: Pool,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        mut rand: impl FnMut() -> u64,
    ) -> Option<Peek> {
        let e =
            self.evaluate(BusyThresholds::default(), pool, workers, usable, tokens, limits, None, &mut rand).ok()??;
        let (index, owner) = e.ranks[e.k];
        Some(Peek { index, dp_rank: owner.dp_rank, candidate: e.cands[e.k] })
    }

    /// Every candidate rank's cost for `tokens`, and the one chosen (see [`KvSelector::choose`]).
    #[allow(clippy::too_many_arguments)]
    fn evaluate(
        &self,
        busy: BusyThresholds,
        pool: Pool,
        workers: &[Worker],
        usable: &[usize],
        tokens: &[u32],
        limits: &CardLimits,
        remote: Option<&Overlaps>,
        mut rand: impl FnMut() -> u64,
    ) -> Result<Option<Evaluated>, Overloaded> {
        if usable.is_empty() {
            return Ok(None);
        }
        // The candidates are the usable workers' data-parallel ranks.
        let mut ranks: smallvec::SmallVec<[(usize, Owner); 16]> = usable
            .iter()
            .flat_map(|&i| {
                workers[i].dp_ranks().map(move |r| (i, Owner { worker_id: workers[i].instance_id, dp_rank: r }))
            })
            .collect();
        if busy.any() {
            self.drop_busy(&busy, &mut ranks, limits);
            if ranks.is_empty() {
                return Err(Overloaded);
            }
        }
        let block_size = limits.block_size();
        let local = local_block_hashes(tokens, block_size, &BlockHashOptions::default());
        let seq = sequence_hashes(&local);
        // Per candidate, the blocks its host and disk tiers add past its device match.
        let mut lower = smallvec::SmallVec::<[(u32, u32); 16]>::new();
        let overlaps =
            match (remote, self.replica.borrow_mut().as_mut()) {
                (Some(given), r) => {
                    // Load reports and other routers' bookings still come through the ring.
                    if let Some(r) = r {
                        self.drain(r);
                    }
                    if !given.lower.is_empty() {
                        lower.extend(ranks.iter().map(|&(_, o)| {
                            given.lower.iter().find(|(x, ..)| *x == o).map_or((0, 0), |&(_, h, k)| (h, k))
                        }));
                    }
                    given.device.clone()
                }
                (None, Some(r)) => {
                    self.drain(r);
                    let mut found = r.find_matches(&local);
                    if r.has_lower_tiers() {
                        // From the index's own matches (1.6.1 seeds the lower tiers' walk before
                        // merging the side index's).
                        lower.extend(ranks.iter().map(|&(_, o)| {
                            let device = found.iter().find(|(x, _)| *x == o).map_or(0, |(_, n)| *n as usize);
                            r.lower_tiers(o, &local, &seq, device)
                        }));
                    }
                    if self.predicted.get() {
                        // 1.6.1's merge: per worker rank, the larger of the two overlaps.
                        for (o, n) in r.side_matches(&local) {
                            match found.iter_mut().find(|(x, _)| *x == o) {
                                Some((_, m)) => *m = (*m).max(n),
                                None => found.push((o, n)),
                            }
                        }
                    }
                    found
                }
                (None, None) => Vec::new(),
            };
        let params = self.cost_params(pool);
        let overlap_of = |o: Owner| overlaps.iter().find(|(x, _)| *x == o).map_or(0, |(_, n)| *n);
        let table = self.bookings.table.borrow();
        let min_prefill = ranks.iter().map(|&(_, o)| table.get(o).map_or(0, |a| a.prefill_tokens)).min().unwrap_or(0);
        let shape = RequestShape { isl: tokens.len() as u64, block_size, min_active_prefill_tokens: min_prefill };
        let mut logits = smallvec::SmallVec::<[f64; 16]>::new();
        let mut cands = smallvec::SmallVec::<[Candidate; 16]>::new();
        for (k, &(_, owner)) in ranks.iter().enumerate() {
            let a = table.get(owner);
            let (host_blocks, disk_blocks) = lower.get(k).copied().unwrap_or((0, 0));
            let held = a.map_or(0, |a| a.weighted_blocks());
            let new = match a {
                Some(a) if self.params.assume_kv_reuse => seq.iter().filter(|h| !a.blocks.contains_key(h)).count(),
                _ => seq.len(),
            } as u64;
            let c = Candidate {
                overlap_blocks: overlap_of(owner).min(local.len() as u32),
                active_prefill_tokens: a.map_or(0, |a| a.prefill_tokens),
                decode_blocks: if self.params.track_active_blocks { held + new } else { 0 },
                active_requests: a.map_or(0, |a| a.requests),
                host_blocks,
                disk_blocks,
            };
            logits.push(logit(params, &shape, &c));
            cands.push(c);
        }
        drop(table);
        let k = if let Selector::TwoTier { cache_threshold, balance_abs_threshold, balance_rel_threshold } =
            *self.selector(pool)
        {
            let isl = tokens.len() as u64;
            choose_two_tier(&cands, isl, block_size, cache_threshold, balance_abs_threshold, balance_rel_threshold)
        } else if *self.selector(pool) == Selector::LeastLoad {
            let keys: smallvec::SmallVec<[(u64, u32); 16]> =
                ranks.iter().map(|&(_, o)| (o.worker_id, o.dp_rank)).collect();
            choose_least_load(&cands, &keys, block_size)
        } else if self.params.prefer_room {
            let replica = self.replica.borrow();
            let cached: smallvec::SmallVec<[u64; 16]> =
                ranks.iter().map(|&(_, o)| replica.as_ref().map_or(0, |r| r.index().owner_blocks(o) as u64)).collect();
            choose_roomiest(&logits, &cached, params.temperature, &mut rand)
        } else {
            choose(&logits, params.temperature, &mut rand)
        };
        let Some(k) = k else { return Ok(None) };
        Ok(Some(Evaluated { ranks, cands, logits, k, local, seq, block_size }))
    }

    /// The prompt tokens `c` is taken to have cached, to book the rest as prefill: device
    /// blocks in full, host and disk blocks at their weights `p` gives (1.6.1's effective
    /// overlap, rounded to tokens).
    fn cached_tokens(p: &CostParams, c: &Candidate, block_size: u32) -> u64 {
        if c.host_blocks == 0 && c.disk_blocks == 0 {
            return u64::from(c.overlap_blocks) * u64::from(block_size);
        }
        let blocks = f64::from(c.overlap_blocks)
            + p.host_cache_hit_weight * f64::from(c.host_blocks)
            + p.disk_cache_hit_weight * f64::from(c.disk_blocks);
        (blocks * f64::from(block_size)).round() as u64
    }

    /// Approximate mode: the prompt's full blocks are taken as cached on `owner`, here at
    /// once and on every other shard through the ingest thread.
    fn predict(&self, owner: Owner, local: &[u64], seq: &[u64], capacity: u64) {
        let (approximate, side) = (self.approximate.get(), self.predicted.get());
        if !(approximate || side) || local.is_empty() {
            return;
        }
        let blocks: Arc<[BlockPair]> =
            local.iter().zip(seq).map(|(&l, &s)| BlockPair { block_hash: s, tokens_hash: l }).collect();
        let p = Prediction { owner, blocks, capacity };
        if let Some(r) = self.replica.borrow_mut().as_mut() {
            let op = p.op();
            r.apply(&if approximate { op } else { IndexOp::Side(Box::new(op)) });
        }
        self.bookings.predict(p);
    }

    /// Brings the replica up to date and applies the other shards' booking steps.
    fn drain(&self, r: &mut IndexReplica) {
        self.stats.borrow_mut().index_ops += r.drain(usize::MAX) as u64;
        let mut table = self.bookings.table.borrow_mut();
        for m in r.take_loads() {
            table.apply(m);
        }
    }

    /// Outside `--router-mode kv`: whether `worker` is busy for `model`'s thresholds by what
    /// it reported itself (there are no bookings), as 1.6.1's load monitor decides it. A
    /// rank is busy when its reported KV blocks in use (or decode blocks) exceed
    /// `F · total_kv_blocks`, or its reported prefill tokens exceed a prefill threshold; a
    /// rank that never reported is free; the worker is busy only when all its ranks are.
    pub fn worker_busy(&self, model: &str, worker: &Worker, limits: &CardLimits) -> bool {
        let busy = self.busy_for(model);
        if !busy.any() {
            return false;
        }
        let mut replica = self.replica.borrow_mut();
        let Some(r) = replica.as_mut() else { return false };
        r.drain(usize::MAX);
        worker.dp_ranks().all(|dp_rank| {
            let Some(rep) = r.reported(Owner { worker_id: worker.instance_id, dp_rank }) else { return false };
            let used = rep.kv_used_blocks.max(rep.active_decode_blocks.unwrap_or(0));
            let decode_only = BusyThresholds { prefill_tokens: None, prefill_frac: None, ..busy };
            decode_only.overloaded(Some(used), 0, limits)
                || rep
                    .active_prefill_tokens
                    .is_some_and(|p| BusyThresholds { decode_blocks_frac: None, ..busy }.overloaded(None, p, limits))
        })
    }

    /// Keeps the candidate ranks under every busy threshold.
    fn drop_busy(
        &self,
        busy: &BusyThresholds,
        ranks: &mut smallvec::SmallVec<[(usize, Owner); 16]>,
        limits: &CardLimits,
    ) {
        let mut replica = self.replica.borrow_mut();
        if let Some(r) = replica.as_mut() {
            self.drain(r);
        }
        let table = self.bookings.table.borrow();
        ranks.retain(|&mut (_, owner)| {
            let used = replica.as_ref().and_then(|r| r.used_blocks(owner));
            let prefill = table.get(owner).map_or(0, |a| a.prefill_tokens);
            !busy.overloaded(used, prefill, limits)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::router::kv::index::{BlockPair, IndexOp, Owner};
    use crate::router::kv::replica::channel;

    fn workers(n: usize) -> Vec<Worker> {
        crate::router::test_workers(n, &[])
    }

    const LIMITS: CardLimits = CardLimits {
        context_length: 0,
        kv_cache_block_size: 16,
        max_num_batched_tokens: 1000,
        max_num_seqs: 0,
        total_kv_blocks: 100,
    };

    fn counter() -> impl FnMut() -> u64 {
        let mut n = 7u64;
        move || {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            n
        }
    }

    /// Worker `id` stores the first `blocks` full blocks of `tokens`, as its events say.
    fn store(feed: &mut crate::router::kv::replica::IndexFeed, id: u64, tokens: &[u32], blocks: usize) {
        store_on(feed, Owner { worker_id: id, dp_rank: 0 }, tokens, blocks);
    }

    fn store_on(feed: &mut crate::router::kv::replica::IndexFeed, owner: Owner, tokens: &[u32], blocks: usize) {
        let local = local_block_hashes(tokens, 16, &BlockHashOptions::default());
        let seq = sequence_hashes(&local);
        let pairs: Vec<BlockPair> =
            (0..blocks).map(|i| BlockPair { block_hash: seq[i], tokens_hash: local[i] }).collect();
        feed.publish(IndexOp::Stored { owner, parent_hash: None, blocks: pairs.into() });
    }

    /// A one-shard install: no ring up, nothing shared.
    fn alone(replica: IndexReplica) -> KvInstall {
        KvInstall {
            replica,
            ingest: Arc::default(),
            up: None,
            share_bookings: false,
            approximate: false,
            predicted: false,
        }
    }

    /// Worker `id`'s blocks `from..to` of `tokens` in storage tier `tier` (`None`: device),
    /// under the block before `from`, with the block hashes a mocker gives them.
    fn store_tier(
        feed: &mut crate::router::kv::replica::IndexFeed,
        id: u64,
        tier: Option<crate::router::kv::tier::Tier>,
        tokens: &[u32],
        (from, to): (usize, usize),
    ) {
        let local = local_block_hashes(tokens, 16, &BlockHashOptions::default());
        let seq = sequence_hashes(&local);
        let pairs: Vec<BlockPair> =
            (from..to).map(|i| BlockPair { block_hash: seq[i], tokens_hash: local[i] }).collect();
        let owner = Owner { worker_id: id, dp_rank: 0 };
        let op = IndexOp::Stored { owner, parent_hash: from.checked_sub(1).map(|p| seq[p]), blocks: pairs.into() };
        feed.publish(match tier {
            Some(t) => IndexOp::Lower(t, Box::new(op)),
            None => op,
        });
    }

    #[test]
    fn host_and_disk_blocks_past_the_device_match_are_credited_at_their_weights() {
        // 1.6.1, observed (B = 16, a 256-token prompt A, idle workers): A on host only →
        // logit 20.0 (an empty worker: 32.0), 192 tokens taken as cached; A's first 8 blocks
        // on the GPU and the next 8 on host → 18.0. Worked from the same formula: 5 device,
        // 7 host, 2 disk blocks → 21.25 with 172 cached tokens; a block on the GPU and on
        // host counts once.
        use crate::router::kv::tier::Tier;
        let a: Vec<u32> = (1000..1256).collect();
        type Stores<'a> = &'a [(Option<Tier>, (usize, usize))];
        let cases: [(Stores<'_>, f64, u64); 4] = [
            (&[(Some(Tier::HostPinned), (0, 16))], 20.0, 64),
            (&[(None, (0, 8)), (Some(Tier::HostPinned), (8, 16))], 18.0, 32),
            (&[(None, (0, 5)), (Some(Tier::HostPinned), (5, 12)), (Some(Tier::Disk), (12, 14))], 21.25, 84),
            (&[(None, (0, 16)), (Some(Tier::HostPinned), (0, 16))], 16.0, 0),
        ];
        for (stores, logit, prefill) in cases {
            let w = workers(2);
            let (mut feed, mut replicas) = channel(1, 64);
            let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
            sel.install(alone(replicas.pop().unwrap()));
            for &(tier, range) in stores {
                store_tier(&mut feed, w[1].instance_id, tier, &a, range);
            }
            // A disk copy the host tier does not lead to is not reached.
            store_tier(&mut feed, w[1].instance_id, Some(Tier::Disk), &a, (15, 16));
            let (c, _b) = sel.choose(&w, &[0, 1], &a, &LIMITS, 1, &mut counter()).unwrap().unwrap();
            assert_eq!((c.index, c.logit), (1, logit), "{stores:?}");
            let owner = Owner { worker_id: w[1].instance_id, dp_rank: 0 };
            assert_eq!(sel.bookings.table.borrow().get(owner).unwrap().prefill_tokens, prefill, "{stores:?}");
        }
    }

    #[test]
    fn without_assumed_kv_reuse_a_shared_prompt_counts_once_per_request() {
        let w = workers(1);
        let prompt: Vec<u32> = (1000..1200).collect();
        for (reuse, blocks, logit) in [(true, 12, 12.5 + 12.0), (false, 24, 12.5 + 24.0)] {
            let (_feed, mut replicas) = channel(1, 64);
            let sel = KvSelector::new(
                CostParams { assume_kv_reuse: reuse, ..CostParams::default() },
                BusyThresholds::default(),
            );
            sel.install(alone(replicas.pop().unwrap()));
            let mut rand = counter();
            let (_, mut b1) = sel.choose(&w, &[0], &prompt, &LIMITS, 1, &mut rand).unwrap().unwrap();
            b1.prefill_done();
            // The same prompt again: its 12 blocks join the first request's or come on top.
            let (c, _b2) = sel.choose(&w, &[0], &prompt, &LIMITS, 2, &mut rand).unwrap().unwrap();
            assert_eq!(c.logit, logit, "assume_kv_reuse {reuse}");
            let owner = Owner { worker_id: w[0].instance_id, dp_rank: 0 };
            assert_eq!(sel.bookings.table.borrow().get(owner).unwrap().blocks.len(), blocks, "assume_kv_reuse {reuse}");
        }
    }

    #[test]
    fn predicted_routes_count_as_cached_until_they_expire() {
        // 1.6.1, observed: within the TTL an evicted prompt still scores 16/16, after it 0/16.
        let w = workers(2);
        let prompt: Vec<u32> = (1000..1200).collect();
        let (mut feed, mut replicas) = channel(1, 64);
        let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
        sel.install(KvInstall { predicted: true, ..alone(replicas.pop().unwrap()) });
        let mut rand = counter();
        let (c1, b1) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 1, &mut rand).unwrap().unwrap();
        assert_eq!(c1.overlap_blocks, 0);
        drop(b1);
        let (c2, b2) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 2, &mut rand).unwrap().unwrap();
        assert_eq!((c2.index, c2.overlap_blocks), (c1.index, 12), "the side index's prediction");
        drop(b2);
        // The worker's own events say it holds 3 blocks: the larger overlap counts.
        let owner = Owner { worker_id: w[c1.index].instance_id, dp_rank: 0 };
        let local = local_block_hashes(&prompt, 16, &BlockHashOptions::default());
        let seq = sequence_hashes(&local);
        let pairs: Arc<[BlockPair]> =
            local.iter().zip(&seq).take(3).map(|(&l, &s)| BlockPair { block_hash: s, tokens_hash: l }).collect();
        feed.publish(IndexOp::Stored { owner, parent_hash: None, blocks: pairs });
        // The ingest thread expires the prediction.
        feed.publish(IndexOp::Side(Box::new(IndexOp::Removed { owner, block_hashes: seq.into() })));
        feed.flush();
        let (c3, _b3) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 3, &mut rand).unwrap().unwrap();
        assert_eq!((c3.index, c3.overlap_blocks), (c1.index, 3), "only what the events say is left");
    }

    #[test]
    fn output_blocks_grow_the_decode_term_and_decay_with_the_expected_length() {
        // 1.6.1, observed (B = 16): a 32-token answer L streaming, a fresh 32-token probe's
        // logit = 2 prefill + 2 own blocks + L's blocks. Off: 6 throughout; on: 11 after ~75
        // tokens, 16 after ~150; on with osl 160: 8, then 5.
        let w = workers(1);
        let long: Vec<u32> = (1000..1032).collect();
        let probe: Vec<u32> = (2000..2032).collect();
        for (track, osl, at75, at150) in
            [(false, None, 6.0, 6.0), (true, None, 11.0, 16.0), (true, Some(160), 8.0, 5.0)]
        {
            let (_feed, mut replicas) = channel(1, 64);
            let params = CostParams { track_output_blocks: track, ..CostParams::default() };
            let sel = KvSelector::new(params, BusyThresholds::default());
            sel.install(alone(replicas.pop().unwrap()));
            let mut rand = counter();
            let (_, mut b) = sel.choose(&w, &[0], &long, &LIMITS, 1, &mut rand).unwrap().unwrap();
            b.prefill_done();
            if sel.tracks_output() {
                b.track_output(32, 16, osl);
            }
            let mut probe_logit = |sel: &KvSelector| {
                let (c, _probe_booking) = sel.choose(&w, &[0], &probe, &LIMITS, 9, &mut rand).unwrap().unwrap();
                c.logit
            };
            for _ in 0..75 {
                b.generated(1);
            }
            assert_eq!(probe_logit(&sel), at75, "after 75 tokens, tracking {track}, osl {osl:?}");
            for _ in 75..150 {
                b.generated(1);
            }
            assert_eq!(probe_logit(&sel), at150, "after 150 tokens, tracking {track}, osl {osl:?}");
            drop(b);
            assert!(sel.bookings.table.borrow().is_empty(), "output blocks leave with the booking");
        }
    }

    #[test]
    fn without_active_block_tracking_the_decode_term_is_zero() {
        // 1.6.1, observed: an idle 32-token prompt costs 2 instead of 4 (prefill only).
        let w = workers(1);
        let prompt: Vec<u32> = (1000..1200).collect();
        let (_feed, mut replicas) = channel(1, 64);
        let sel = KvSelector::new(
            CostParams { track_active_blocks: false, ..CostParams::default() },
            BusyThresholds::default(),
        );
        sel.install(alone(replicas.pop().unwrap()));
        let mut rand = counter();
        let (c1, _b1) = sel.choose(&w, &[0], &prompt, &LIMITS, 1, &mut rand).unwrap().unwrap();
        assert_eq!(c1.logit, 12.5, "200 prompt tokens / 16, no decode blocks");
        let owner = Owner { worker_id: w[0].instance_id, dp_rank: 0 };
        assert_eq!(sel.bookings.table.borrow().get(owner).map(|a| (a.blocks.len(), a.prefill_tokens)), Some((0, 200)));
        // A second request sees the first one's prefill tokens, never its blocks.
        let (c2, _b2) = sel.choose(&w, &[0], &prompt, &LIMITS, 2, &mut rand).unwrap().unwrap();
        assert_eq!(c2.logit, 25.0);
    }

    #[test]
    fn cached_prefix_wins_and_bookings_follow_the_answer() {
        let w = workers(2);
        let (mut feed, mut replicas) = channel(1, 64);
        let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
        sel.install(alone(replicas.pop().unwrap()));
        let prompt: Vec<u32> = (1000..1200).collect();
        // Nothing cached, idle: 200/16 + 12 = 24.5 on either; a tie.
        let (c, b) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!((c.overlap_blocks, c.logit), (0, 24.5));
        drop(b);
        // Worker 101 holds 12 blocks: (12.5 − 12) + 12 = 12.5 beats 24.5.
        store(&mut feed, 101, &prompt, 12);
        feed.flush();
        let (c, mut b) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!((c.index, c.overlap_blocks, c.logit), (1, 12, 12.5));
        // While that request prefills (8 uncached tokens booked) a fresh 200-token prompt
        // costs more on 101: (8 + 200)/16 + (12 ∪ 12 new = 24) = 37 vs 24.5 on 100.
        let other: Vec<u32> = (30000..30200).collect();
        let (c2, b2) = sel.choose(&w, &[0, 1], &other, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!((c2.index, c2.logit), (0, 24.5));
        drop(b2);
        b.prefill_done();
        drop(b);
        assert!(sel.bookings.table.borrow().is_empty(), "every booking released");
        let st = sel.stats();
        assert_eq!(st.decisions.values().sum::<u64>(), 3);
        assert_eq!((st.overlap_blocks, st.prompt_blocks, st.index_ops, st.index_blocks), (12, 36, 1, 12));
        assert!(sel.choose(&w, &[], &prompt, &LIMITS, 0, counter()).unwrap().is_none());
    }

    #[test]
    fn a_new_prefix_goes_to_the_emptiest_cache_unless_ties_are_random() {
        let w = workers(3);
        let (mut feed, mut replicas) = channel(1, 64);
        let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
        sel.install(alone(replicas.pop().unwrap()));
        // Workers 100 and 102 hold other prompts (8 and 3 blocks); 101 holds nothing.
        store(&mut feed, 100, &(50_000..50_128).collect::<Vec<u32>>(), 8);
        store(&mut feed, 102, &(60_000..60_048).collect::<Vec<u32>>(), 3);
        feed.flush();
        let fresh: Vec<u32> = (1000..1200).collect();
        let mut rand = counter();
        for _ in 0..20 {
            let (c, _b) = sel.choose(&w, &[0, 1, 2], &fresh, &LIMITS, 0, &mut rand).unwrap().unwrap();
            assert_eq!((c.index, c.logit), (1, 24.5), "the tie goes to the empty cache");
        }
        // Without 101, the one holding fewer blocks.
        let (c, _b) = sel.choose(&w, &[0, 2], &fresh, &LIMITS, 0, &mut rand).unwrap().unwrap();
        assert_eq!(c.index, 2);
        // `--router-tie-break random`: every tied worker is picked now and then.
        let sel =
            KvSelector::new(CostParams { prefer_room: false, ..CostParams::default() }, BusyThresholds::default());
        let (mut feed, mut replicas) = channel(1, 64);
        sel.install(alone(replicas.pop().unwrap()));
        store(&mut feed, 100, &(50_000..50_128).collect::<Vec<u32>>(), 8);
        feed.flush();
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[sel.choose(&w, &[0, 1, 2], &fresh, &LIMITS, 0, &mut rand).unwrap().unwrap().0.index] += 1;
        }
        assert!(seen.iter().all(|&n| n > 50), "{seen:?}");
    }

    #[test]
    fn busy_workers_are_left_out_and_all_busy_is_overloaded() {
        let w = workers(2);
        let (mut feed, mut replicas) = channel(1, 64);
        let busy = BusyThresholds { decode_blocks_frac: Some(0.5), prefill_tokens: None, prefill_frac: Some(0.3) };
        let sel = KvSelector::new(CostParams::default(), busy);
        sel.install(alone(replicas.pop().unwrap()));
        let prompt: Vec<u32> = (0..200).collect();
        // 101 reports 60 of its 100 blocks in use (> 0.5): only 100 is a candidate.
        feed.publish(IndexOp::Usage {
            owner: Owner { worker_id: 101, dp_rank: 0 },
            kv_used_blocks: 60,
            active_decode_blocks: None,
            active_prefill_tokens: None,
        });
        feed.publish(IndexOp::Usage {
            owner: Owner { worker_id: 100, dp_rank: 0 },
            kv_used_blocks: 50,
            active_decode_blocks: None,
            active_prefill_tokens: None,
        });
        for _ in 0..4 {
            let (c, _b) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
            assert_eq!(c.index, 0);
        }
        // 200 booked prefill tokens on 100 is under 0.3 × 1000; a second booking (400) is over.
        let (_, mut b1) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        let (_, mut b2) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!(sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).err(), Some(Overloaded));
        // The prefill is done: 100 is free again.
        b1.prefill_done();
        b2.prefill_done();
        assert!(sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().is_some());
        // A departed worker's report is forgotten; an unreported worker is never busy.
        feed.publish(IndexOp::RemoveWorker { worker_id: 101 });
        let (c, _b) = sel.choose(&w, &[1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!(c.index, 1);
        assert!(!BusyThresholds::default().any());
    }

    #[test]
    fn data_parallel_ranks_are_candidates_of_their_own() {
        let mut w = workers(2);
        w[1].dp_size = 2;
        let (mut feed, mut replicas) = channel(1, 64);
        let sel = KvSelector::new(CostParams::default(), BusyThresholds::default());
        sel.install(alone(replicas.pop().unwrap()));
        let prompt: Vec<u32> = (0..200).collect();
        // Rank 1 of worker 101 holds the prefix; rank 0 holds nothing.
        store_on(&mut feed, Owner { worker_id: 101, dp_rank: 1 }, &prompt, 12);
        let (c, b) = sel.choose(&w, &[0, 1], &prompt, &LIMITS, 0, counter()).unwrap().unwrap();
        assert_eq!((c.index, c.dp_rank, c.overlap_blocks), (1, 1, 12));
        // Its booking loads rank 1 only: a fresh prompt is cheapest on 101's idle rank 0 or
        // on 100 (a tie), never on rank 1.
        let other: Vec<u32> = (9000..9200).collect();
        for _ in 0..8 {
            let (c2, _b2) = sel.choose(&w, &[0, 1], &other, &LIMITS, 0, counter()).unwrap().unwrap();
            assert!(c2.index == 0 || c2.dp_rank == 0, "{c2:?}");
        }
        drop(b);
    }
}
