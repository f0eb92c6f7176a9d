//! The KV block index: a radix tree over local block hashes recording which
//! `(worker_id, dp_rank)` owners hold which prefixes (spec §6.1), and `find_matches`, the
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
//! Nodes live in an arena (`Vec<Node>`, 48 bytes each, freed slots reused); edges are one
//! flat hash map `(parent, local_hash) → child`, so a walk is one probe per block; owners are
//! interned to dense `u32` ids. Each node keeps its owners sorted with a reference count and
//! an XOR *fingerprint* of the owner set: `find_matches` only intersects the surviving owner
//! set with a node's when the fingerprints or sizes differ, so a walk over a prefix shared by
//! 1 024 workers costs one compare per block, not 1 024. (Two different sets of equal size
//! have equal fingerprints with probability 2⁻⁶⁴.) A node with no owner and no child is freed
//! at once, so memory tracks the workers' caches: see [`KvIndex::memory_bytes`].
//!
//! The index is single-threaded by design; how shards read it while the ingest thread
//! writes is the business of [`super::replica`].

use std::collections::HashMap;
use std::hash::{BuildHasherDefault, Hasher};
use std::sync::Arc;

use smallvec::SmallVec;

use super::events::{KvCacheEventData, RouterEvent};

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
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum IndexOp {
    Stored { owner: Owner, parent_hash: Option<u64>, blocks: Arc<[BlockPair]> },
    Removed { owner: Owner, block_hashes: Arc<[u64]> },
    Cleared { owner: Owner },
    RemoveWorker { worker_id: u64 },
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

/// Fx-style multiplicative hasher: keys are already well-mixed 64-bit hashes.
#[derive(Default, Clone, Copy)]
pub struct MixHasher(u64);

impl Hasher for MixHasher {
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        for &b in bytes {
            self.write_u64(u64::from(b));
        }
    }
    #[inline]
    fn write_u32(&mut self, i: u32) {
        self.write_u64(u64::from(i));
    }
    #[inline]
    fn write_u64(&mut self, i: u64) {
        self.0 = (self.0.rotate_left(5) ^ i).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

type Map<K, V> = HashMap<K, V, BuildHasherDefault<MixHasher>>;

const ROOT: u32 = 0;

#[derive(Clone, Debug, Default)]
struct Node {
    local_hash: u64,
    parent: u32,
    children: u32,
    /// XOR of [`owner_mix`] over `owners`.
    fp: u64,
    /// `(owner id, number of the owner's block hashes bound here)`, sorted by owner id.
    owners: SmallVec<[(u32, u32); 2]>,
}

#[derive(Debug)]
struct OwnerSlot {
    owner: Owner,
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
    edges: Map<(u32, u64), u32>,
    owner_ids: HashMap<Owner, u32>,
    slots: Vec<Option<OwnerSlot>>,
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
            edges: Map::default(),
            owner_ids: HashMap::new(),
            slots: Vec::new(),
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
            let child = self.child_or_insert(cur, b.tokens_hash);
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

    /// Per owner, the number of consecutive blocks of `local_hashes` it holds from block 0;
    /// owners holding none are left out. Order is unspecified.
    pub fn find_matches(&self, local_hashes: &[u64]) -> Vec<(Owner, u32)> {
        let mut out = Vec::new();
        self.find_matches_into(local_hashes, &mut out);
        out
    }

    /// [`KvIndex::find_matches`] into a caller-owned vector (cleared first).
    pub fn find_matches_into(&self, local_hashes: &[u64], out: &mut Vec<(Owner, u32)>) {
        out.clear();
        let Some((&first, rest)) = local_hashes.split_first() else { return };
        let Some(&n0) = self.edges.get(&(ROOT, first)) else { return };
        let node = &self.nodes[n0 as usize];
        let mut alive: SmallVec<[u32; 16]> = node.owners.iter().map(|&(o, _)| o).collect();
        let mut alive_fp = node.fp;
        let mut prev = n0;
        let mut depth = 1u32;
        let mut next: SmallVec<[u32; 16]> = SmallVec::new();
        for &h in rest {
            if alive.is_empty() {
                break;
            }
            let Some(&n) = self.edges.get(&(prev, h)) else { break };
            let node = &self.nodes[n as usize];
            if node.fp != alive_fp || node.owners.len() != alive.len() {
                // Sorted merge: owners of `alive` missing here stop at `depth`.
                next.clear();
                let mut j = 0;
                for &o in &alive {
                    while j < node.owners.len() && node.owners[j].0 < o {
                        j += 1;
                    }
                    if j < node.owners.len() && node.owners[j].0 == o {
                        next.push(o);
                    } else {
                        alive_fp ^= owner_mix(o);
                        out.push((self.slot(o).owner, depth));
                    }
                }
                std::mem::swap(&mut alive, &mut next);
                if alive.is_empty() {
                    break;
                }
            }
            prev = n;
            depth += 1;
        }
        out.extend(alive.iter().map(|&o| (self.slot(o).owner, depth)));
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
            + table::<(u32, u64), u32>(self.edges.capacity())
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
        let slot = Some(OwnerSlot { owner, lookup: Map::default() });
        let id = alloc(&mut self.slots, &mut self.free_owners, slot);
        self.owner_ids.insert(owner, id);
        id
    }

    fn child_or_insert(&mut self, parent: u32, local_hash: u64) -> u32 {
        if let Some(&c) = self.edges.get(&(parent, local_hash)) {
            return c;
        }
        let node = Node { local_hash, parent, ..Node::default() };
        let id = alloc(&mut self.nodes, &mut self.free_nodes, node);
        self.edges.insert((parent, local_hash), id);
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
            let (parent, local_hash) = (n.parent, n.local_hash);
            self.edges.remove(&(parent, local_hash));
            self.nodes[node as usize] = Node::default();
            self.free_nodes.push(node);
            self.nodes[parent as usize].children -= 1;
            node = parent;
        }
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
