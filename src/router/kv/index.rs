//! The KV block index: a radix tree over local block hashes recording which
//! `(worker_id, dp_rank)` owners hold which prefixes (docs/dynamo/kv-routing.md §6.1), and `find_matches`, the
//! per-owner count of consecutive prompt blocks held from block 0.
//!
//! # Semantics
//! * Each owner has a lookup `block_hash → node` (the worker's sequence hash of the block).
//!   `stored` resolves `parent_hash` **in that owner's lookup** (`None` = the root); an
//!   unknown parent drops the whole store (counted in [`IndexStats::stores_dropped`]).
//! * `removed` unbinds the named block hashes of the owner (unknown ones are counted and
//!   skipped, the rest of the event still applies); `cleared` drops everything of one owner,
//!   [`KvIndex::remove_worker`] everything of every dp rank of a worker.
//! * An owner *holds* a node while at least one of its block hashes is bound to it.
//!   `find_matches` counts, per owner, the nodes held consecutively from the root along the
//!   prompt's path; a removed middle block stops the count even if deeper blocks stay bound.
//!   Divergence from 1.6.1's tree, on purpose: when a node loses its last owner, 1.6.1 also
//!   cuts its children off the tree, so an owner that later re-stores that middle block does
//!   not regain the deeper blocks it still has; here it does (it still holds them).
//!
//! # Layout and cost
//! Nodes live in an arena (`Vec<Node>`, freed slots reused) and are found by one flat hash
//! map keyed by the **sequence hash of their path** (§5.3 chaining over the local hashes,
//! computed by the index itself — never the worker's opaque `block_hash`). A prompt's
//! node at every depth is therefore known before the walk, so `find_matches` probes 16
//! depths at a time with independent loads whose cache misses overlap, instead of chasing
//! one dependent pointer per block: on a 1 M-block index the walk is memory-latency
//! bound, and this cut it about fourfold (perf/RESULTS.md). Two different paths with
//! equal 64-bit sequence hashes would share a node (about 2⁻²⁵ for a 1 M-node index, the
//! same order as the local-hash collisions every Dynamo router already accepts).
//!
//! Owners are interned to dense `u32` ids. Each node keeps its owners sorted with a
//! reference count and an XOR *fingerprint* of the owner set: the walk only intersects the
//! surviving owner set with a node's when the fingerprints or sizes differ, so a prefix
//! shared by 1 024 workers costs one compare per block, not 1 024. (Two different sets of
//! equal size have equal fingerprints with probability 2⁻⁶⁴.) A node with no owner and no
//! child is freed at once, so memory tracks the workers' caches: see
//! [`KvIndex::memory_bytes`].
//!
//! The index is single-threaded by design; how shards read it while the ingest thread
//! writes is the business of [`super::replica`].

use std::sync::Arc;

use smallvec::SmallVec;

use super::hash::{chain_hash, SEED};
use crate::plane::kv_events::{KvCacheEventData, RouterEvent};

/// A cache owner: one data-parallel rank of one worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Owner {
    pub worker_id: u64,
    pub dp_rank: u32,
}

/// One stored block: the worker's identity for it and the local hash it is matched by.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BlockPair {
    pub block_hash: u64,
    pub tokens_hash: u64,
}

/// One change to the index. Cloning is cheap (the block lists are shared), so one op can be
/// sent to every replica.
#[derive(Clone, Debug, PartialEq)]
pub enum IndexOp {
    Stored {
        owner: Owner,
        parent_hash: Option<u64>,
        blocks: Arc<[BlockPair]>,
    },
    Removed {
        owner: Owner,
        block_hashes: Arc<[u64]>,
    },
    Cleared {
        owner: Owner,
    },
    RemoveWorker {
        worker_id: u64,
    },
    /// A worker rank's `kv_metrics` report: KV blocks in use. Not an index change; the
    /// replicas keep the latest value per owner for busy detection.
    Usage {
        owner: Owner,
        kv_used_blocks: u64,
        /// The report's `active_decode_blocks` and `active_prefill_tokens`, when given
        /// (read outside `--router-mode kv`, where no bookings exist).
        active_decode_blocks: Option<u64>,
        active_prefill_tokens: Option<u64>,
    },
    /// A booking step of one shard, for the others' active-sequence tables (not an index
    /// change either).
    Load(super::active::LoadMsg),
    /// `--router-predicted-ttl-secs`: a change to the replicas' predict-on-route side index
    /// (what routing decisions predict, kept apart from what the workers' events say).
    Side(Box<IndexOp>),
    /// A `Stored` or `Removed` of a storage tier below the GPU (host memory, disk,
    /// external), for the replicas' [`super::tier::TierIndex`] of that tier. A lower tier's
    /// `cleared` is a plain [`IndexOp::Cleared`]: it empties every tier, as in 1.6.1.
    Lower(super::tier::Tier, Box<IndexOp>),
}

impl IndexOp {
    /// The index op of a worker's KV event (the caller picks the storage tier).
    pub fn from_event(ev: &RouterEvent) -> IndexOp {
        let owner = Owner { worker_id: ev.worker_id, dp_rank: ev.event.dp_rank };
        match &ev.event.data {
            KvCacheEventData::Stored(s) => IndexOp::Stored {
                owner,
                parent_hash: s.parent_hash,
                blocks: s
                    .blocks
                    .iter()
                    .map(|b| BlockPair { block_hash: b.block_hash, tokens_hash: b.tokens_hash })
                    .collect(),
            },
            KvCacheEventData::Removed(r) => IndexOp::Removed { owner, block_hashes: r.block_hashes.as_slice().into() },
            KvCacheEventData::Cleared => IndexOp::Cleared { owner },
        }
    }
}

/// Counters of events the index could not apply in full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IndexStats {
    /// `stored` events dropped because their parent was unknown for the owner.
    pub stores_dropped: u64,
    /// `removed` block hashes that were not bound for the owner.
    pub removes_unknown: u64,
}

/// Keys are already well-mixed 64-bit hashes: the unkeyed multiplicative hasher suffices.
type Map<K, V> = crate::util::FastMap<K, V>;

const ROOT: u32 = 0;

#[derive(Clone, Debug, Default)]
struct Node {
    /// The sequence hash (§5.3) of the local hashes on the path to this node.
    prefix: u64,
    /// The worker's block hash of the store that made the node (where a lower tier's
    /// continuation of this prefix is anchored, [`KvIndex::block_hash_at`]).
    ext: u64,
    parent: u32,
    children: u32,
    /// XOR of [`owner_mix`] over `owners`.
    fp: u64,
    /// `(owner id, number of the owner's block hashes bound here)`, sorted by owner id.
    owners: SmallVec<[(u32, u32); 2]>,
}

#[derive(Debug)]
struct OwnerSlot {
    lookup: Map<u64, u32>,
}

/// The fingerprint contribution of an owner id (splitmix64 finaliser).
#[inline]
fn owner_mix(id: u32) -> u64 {
    let mut z = u64::from(id).wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The radix index (see the module doc).
#[derive(Debug)]
pub struct KvIndex {
    nodes: Vec<Node>,
    free_nodes: Vec<u32>,
    /// Nodes by the sequence hash of their path.
    by_prefix: Map<u64, u32>,
    owner_ids: Map<Owner, u32>,
    slots: Vec<Option<OwnerSlot>>,
    /// The owner of each id, dense (16 bytes each) for the walk's result building.
    owner_of: Vec<Owner>,
    free_owners: Vec<u32>,
    blocks: usize,
    stats: IndexStats,
}

impl Default for KvIndex {
    fn default() -> Self {
        Self::new()
    }
}

impl KvIndex {
    pub fn new() -> KvIndex {
        KvIndex {
            nodes: vec![Node::default()],
            free_nodes: Vec::new(),
            by_prefix: Map::default(),
            owner_ids: Map::default(),
            slots: Vec::new(),
            owner_of: Vec::new(),
            free_owners: Vec::new(),
            blocks: 0,
            stats: IndexStats::default(),
        }
    }

    /// Applies one op.
    pub fn apply(&mut self, op: &IndexOp) {
        match op {
            IndexOp::Stored { owner, parent_hash, blocks } => self.store(*owner, *parent_hash, blocks),
            IndexOp::Removed { owner, block_hashes } => self.remove(*owner, block_hashes),
            IndexOp::Cleared { owner } => self.clear(*owner),
            IndexOp::RemoveWorker { worker_id } => self.remove_worker(*worker_id),
            IndexOp::Usage { .. } | IndexOp::Load(_) | IndexOp::Side(_) | IndexOp::Lower(..) => {}
        }
    }

    /// `stored`: binds `blocks` as a chain under `parent_hash` (`None` = root) for `owner`.
    pub fn store(&mut self, owner: Owner, parent_hash: Option<u64>, blocks: &[BlockPair]) {
        let mut cur = match parent_hash {
            None => ROOT,
            Some(p) => match self.owner_ids.get(&owner).and_then(|&id| self.slot(id).lookup.get(&p)) {
                Some(&n) => n,
                None => {
                    self.stats.stores_dropped += 1;
                    return;
                }
            },
        };
        let id = self.intern(owner);
        for b in blocks {
            let child = self.child_or_insert(cur, b);
            let previous = self.slot_mut(id).lookup.insert(b.block_hash, child);
            match previous {
                Some(old) if old == child => {}
                Some(old) => {
                    self.add_ref(child, id);
                    self.release(old, id);
                }
                None => {
                    self.blocks += 1;
                    self.add_ref(child, id);
                }
            }
            cur = child;
        }
    }

    /// `removed`: unbinds each named block hash of `owner`.
    pub fn remove(&mut self, owner: Owner, block_hashes: &[u64]) {
        let Some(&id) = self.owner_ids.get(&owner) else {
            self.stats.removes_unknown += block_hashes.len() as u64;
            return;
        };
        for h in block_hashes {
            match self.slot_mut(id).lookup.remove(h) {
                Some(node) => {
                    self.blocks -= 1;
                    self.release(node, id);
                }
                None => self.stats.removes_unknown += 1,
            }
        }
    }

    /// `cleared`: drops every block of `owner` (one dp rank).
    pub fn clear(&mut self, owner: Owner) {
        let Some(id) = self.owner_ids.remove(&owner) else { return };
        let slot = self.slots[id as usize].take().expect("interned owner has a slot");
        self.blocks -= slot.lookup.len();
        for (_, node) in slot.lookup {
            self.release(node, id);
        }
        self.free_owners.push(id);
    }

    /// Drops every block of every dp rank of `worker_id`.
    pub fn remove_worker(&mut self, worker_id: u64) {
        let owners: Vec<Owner> = self.owner_ids.keys().filter(|o| o.worker_id == worker_id).copied().collect();
        for o in owners {
            self.clear(o);
        }
    }

    /// Blocks `owner` holds (0 for an owner with none).
    pub fn owner_blocks(&self, owner: Owner) -> usize {
        self.owner_ids.get(&owner).map_or(0, |&id| self.slot(id).lookup.len())
    }

    /// Per owner, the number of consecutive blocks of `local_hashes` it holds from block 0;
    /// owners holding none are left out. Order is unspecified.
    pub fn find_matches(&self, local_hashes: &[u64]) -> Vec<(Owner, u32)> {
        let mut out = Vec::new();
        self.find_matches_into(local_hashes, &mut out);
        out
    }

    /// [`KvIndex::find_matches`] into a caller-owned vector (cleared first).
    pub fn find_matches_into(&self, local_hashes: &[u64], out: &mut Vec<(Owner, u32)>) {
        let mut walk = Walk::new(out);
        let mut prefix = [0u64; CHUNK];
        let mut prev: Option<u64> = None;
        for chunk in local_hashes.chunks(CHUNK) {
            for (p, &h) in prefix.iter_mut().zip(chunk) {
                let s = prev.map_or(h, |q| chain_hash(q, h, SEED));
                *p = s;
                prev = Some(s);
            }
            if !self.walk_chunk(&prefix[..chunk.len()], &mut walk) {
                break;
            }
        }
        walk.finish(self);
    }

    /// [`KvIndex::find_matches_into`] for a caller that already has the request's
    /// sequence hashes (§5.3, [`super::hash::sequence_hashes`] of the local hashes).
    pub fn find_matches_by_sequence(&self, sequence_hashes: &[u64], out: &mut Vec<(Owner, u32)>) {
        let mut walk = Walk::new(out);
        for chunk in sequence_hashes.chunks(CHUNK) {
            if !self.walk_chunk(chunk, &mut walk) {
                break;
            }
        }
        walk.finish(self);
    }

    /// Advances `walk` over up to [`CHUNK`] depths; false once the walk is over. The node
    /// probes of a chunk do not depend on each other, so their cache misses overlap.
    fn walk_chunk(&self, prefixes: &[u64], walk: &mut Walk<'_>) -> bool {
        let mut ids = [u32::MAX; CHUNK];
        for (id, p) in ids.iter_mut().zip(prefixes) {
            if let Some(&n) = self.by_prefix.get(p) {
                *id = n;
            }
        }
        let mut heads = [(0u64, 0usize); CHUNK];
        for (head, &id) in heads.iter_mut().zip(&ids[..prefixes.len()]) {
            if id != u32::MAX {
                let n = &self.nodes[id as usize];
                *head = (n.fp, n.owners.len());
            }
        }
        for (&id, &(fp, len)) in ids[..prefixes.len()].iter().zip(&heads) {
            if id == u32::MAX || !walk.step(self, id, fp, len) {
                return false;
            }
        }
        true
    }

    /// The worker's block hash of the node at the end of the path whose sequence hash is
    /// `sequence_hash` (that of the first store that made it; Dynamo's mockers and engines
    /// that hash alike give every owner the same).
    pub fn block_hash_at(&self, sequence_hash: u64) -> Option<u64> {
        self.by_prefix.get(&sequence_hash).map(|&n| self.nodes[n as usize].ext)
    }

    /// The number of `(owner, block)` bindings (what the workers' caches hold in total).
    pub fn indexed_blocks(&self) -> usize {
        self.blocks
    }

    /// The number of tree nodes in use (distinct prefixes), the root excluded.
    pub fn nodes(&self) -> usize {
        self.nodes.len() - 1 - self.free_nodes.len()
    }

    /// The number of owners with at least one event applied and not cleared since.
    pub fn owners(&self) -> usize {
        self.owner_ids.len()
    }

    pub fn stats(&self) -> IndexStats {
        self.stats
    }

    /// Heap bytes held by the index (capacities, hash-table control bytes included).
    pub fn memory_bytes(&self) -> usize {
        use std::mem::size_of;
        fn table<K, V>(cap: usize) -> usize {
            // hashbrown: one slot of (K, V) plus one control byte per bucket, buckets =
            // capacity · 8/7 rounded up to a power of two (approximated as ·8/7 here).
            cap * 8 / 7 * (size_of::<(K, V)>() + 1)
        }
        let spilled: usize = self
            .nodes
            .iter()
            .filter(|n| n.owners.spilled())
            .map(|n| n.owners.capacity() * size_of::<(u32, u32)>())
            .sum();
        let lookups: usize = self.slots.iter().flatten().map(|s| table::<u64, u32>(s.lookup.capacity())).sum();
        self.nodes.capacity() * size_of::<Node>()
            + spilled
            + table::<u64, u32>(self.by_prefix.capacity())
            + lookups
            + table::<Owner, u32>(self.owner_ids.capacity())
            + self.slots.capacity() * size_of::<Option<OwnerSlot>>()
    }

    fn slot(&self, id: u32) -> &OwnerSlot {
        self.slots[id as usize].as_ref().expect("live owner id")
    }

    fn slot_mut(&mut self, id: u32) -> &mut OwnerSlot {
        self.slots[id as usize].as_mut().expect("live owner id")
    }

    fn intern(&mut self, owner: Owner) -> u32 {
        if let Some(&id) = self.owner_ids.get(&owner) {
            return id;
        }
        let slot = Some(OwnerSlot { lookup: Map::default() });
        let id = alloc(&mut self.slots, &mut self.free_owners, slot);
        if self.owner_of.len() <= id as usize {
            self.owner_of.resize(id as usize + 1, owner);
        }
        self.owner_of[id as usize] = owner;
        self.owner_ids.insert(owner, id);
        id
    }

    fn child_or_insert(&mut self, parent: u32, block: &BlockPair) -> u32 {
        let local_hash = block.tokens_hash;
        let prefix =
            if parent == ROOT { local_hash } else { chain_hash(self.nodes[parent as usize].prefix, local_hash, SEED) };
        if let Some(&c) = self.by_prefix.get(&prefix) {
            return c;
        }
        let node = Node { prefix, ext: block.block_hash, parent, ..Node::default() };
        let id = alloc(&mut self.nodes, &mut self.free_nodes, node);
        self.by_prefix.insert(prefix, id);
        self.nodes[parent as usize].children += 1;
        id
    }

    fn add_ref(&mut self, node: u32, owner: u32) {
        let n = &mut self.nodes[node as usize];
        match n.owners.binary_search_by_key(&owner, |&(o, _)| o) {
            Ok(i) => n.owners[i].1 += 1,
            Err(i) => {
                n.owners.insert(i, (owner, 1));
                n.fp ^= owner_mix(owner);
            }
        }
    }

    fn release(&mut self, node: u32, owner: u32) {
        let n = &mut self.nodes[node as usize];
        let Ok(i) = n.owners.binary_search_by_key(&owner, |&(o, _)| o) else { return };
        n.owners[i].1 -= 1;
        if n.owners[i].1 == 0 {
            n.owners.remove(i);
            n.fp ^= owner_mix(owner);
            self.collect(node);
        }
    }

    /// Frees `node` and then its ancestors while they have neither owner nor child.
    fn collect(&mut self, mut node: u32) {
        while node != ROOT {
            let n = &self.nodes[node as usize];
            if !n.owners.is_empty() || n.children != 0 {
                return;
            }
            let (parent, prefix) = (n.parent, n.prefix);
            self.by_prefix.remove(&prefix);
            self.nodes[node as usize] = Node::default();
            self.free_nodes.push(node);
            self.nodes[parent as usize].children -= 1;
            node = parent;
        }
    }
}

/// Prompt blocks probed together by `find_matches`.
const CHUNK: usize = 16;

/// The state of a `find_matches` walk: owners holding every node so far, and their
/// fingerprint.
struct Walk<'o> {
    out: &'o mut Vec<(Owner, u32)>,
    alive: SmallVec<[u32; 16]>,
    next: SmallVec<[u32; 16]>,
    fp: u64,
    depth: u32,
}

impl<'o> Walk<'o> {
    fn new(out: &'o mut Vec<(Owner, u32)>) -> Walk<'o> {
        out.clear();
        Walk { out, alive: SmallVec::new(), next: SmallVec::new(), fp: 0, depth: 0 }
    }

    /// Moves one block deeper, to node `id` (fingerprint `fp`, `len` owners); false when
    /// no owner is left.
    fn step(&mut self, ix: &KvIndex, id: u32, fp: u64, len: usize) -> bool {
        let node = &ix.nodes[id as usize];
        if self.depth == 0 {
            self.alive.extend(node.owners.iter().map(|&(o, _)| o));
            self.fp = fp;
        } else if fp != self.fp || len != self.alive.len() {
            // Owners of `alive` missing here stop at `depth`.
            self.next.clear();
            let owners = &node.owners;
            let (owner_of, depth) = (&ix.owner_of, self.depth);
            let emit = |out: &mut Vec<(Owner, u32)>, run: &[u32]| {
                out.extend(run.iter().map(|&o| (owner_of[o as usize], depth)));
            };
            // Find the survivors by binary search when the node has few owners (a shared
            // prefix ends), else by a sorted merge; emit the rest in runs.
            let mut from = 0;
            if owners.len() * 8 < self.alive.len() {
                for &(o, _) in owners.iter() {
                    if let Ok(at) = self.alive[from..].binary_search(&o) {
                        emit(self.out, &self.alive[from..from + at]);
                        self.next.push(o);
                        from += at + 1;
                    }
                }
            } else {
                let mut j = 0;
                for (i, &o) in self.alive.iter().enumerate() {
                    while j < owners.len() && owners[j].0 < o {
                        j += 1;
                    }
                    if j < owners.len() && owners[j].0 == o {
                        emit(self.out, &self.alive[from..i]);
                        self.next.push(o);
                        from = i + 1;
                    }
                }
            }
            emit(self.out, &self.alive[from..]);
            // Usually every owner of the node survives (its owners ⊆ alive): reuse its
            // fingerprint; otherwise fold the (fewer) survivors.
            self.fp = if self.next.len() == owners.len() {
                fp
            } else {
                self.next.iter().fold(0, |acc, &o| acc ^ owner_mix(o))
            };
            std::mem::swap(&mut self.alive, &mut self.next);
        }
        if self.alive.is_empty() {
            return false;
        }
        self.depth += 1;
        true
    }

    fn finish(self, ix: &KvIndex) {
        let depth = self.depth;
        self.out.extend(self.alive.iter().map(|&o| (ix.owner_of[o as usize], depth)));
    }
}

/// Puts `item` in a free slot of `arena` (or a new one) and returns its index.
fn alloc<T>(arena: &mut Vec<T>, free: &mut Vec<u32>, item: T) -> u32 {
    match free.pop() {
        Some(id) => {
            arena[id as usize] = item;
            id
        }
        None => {
            arena.push(item);
            (arena.len() - 1) as u32
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner { worker_id: 1, dp_rank: 0 };
    const B: Owner = Owner { worker_id: 2, dp_rank: 0 };

    fn chain(n: u64, base: u64) -> Vec<BlockPair> {
        (0..n).map(|i| BlockPair { block_hash: base + i, tokens_hash: 100 + i }).collect()
    }

    fn sorted(mut v: Vec<(Owner, u32)>) -> Vec<(Owner, u32)> {
        v.sort();
        v
    }

    #[test]
    fn store_match_remove_clear() {
        let mut ix = KvIndex::new();
        ix.store(A, None, &chain(4, 10));
        ix.store(B, None, &chain(2, 20));
        let q = [100, 101, 102, 103, 104];
        assert_eq!(sorted(ix.find_matches(&q)), [(A, 4), (B, 2)]);
        assert_eq!(ix.find_matches(&[101]), []);
        // extend B under its last block
        ix.store(B, Some(21), &[BlockPair { block_hash: 22, tokens_hash: 102 }]);
        assert_eq!(sorted(ix.find_matches(&q)), [(A, 4), (B, 3)]);
        // unknown parent: dropped
        ix.store(B, Some(99), &chain(1, 30));
        assert_eq!(ix.stats().stores_dropped, 1);
        // middle block removed: A stops at 1
        ix.remove(A, &[11]);
        assert_eq!(sorted(ix.find_matches(&q)), [(A, 1), (B, 3)]);
        ix.clear(B);
        assert_eq!(ix.find_matches(&q), [(A, 1)]);
        assert_eq!(ix.indexed_blocks(), 3);
        ix.remove_worker(1);
        assert_eq!(ix.find_matches(&q), []);
        assert_eq!(ix.indexed_blocks(), 0);
        assert_eq!(ix.nodes(), 0);
        assert_eq!(ix.owners(), 0);
    }
}
