//! The lower KV storage tiers (host-pinned memory, disk, external): which owners hold which
//! blocks off the GPU, and how far each owner's copy continues a prompt past its device-tier
//! match (docs/dynamo/kv-routing.md §6.5). Runs wherever its [`super::replica::IndexReplica`]
//! does (a shard thread, or the served indexer's thread).
//!
//! Not a radix tree, because a lower tier's stores hang off parents the tier does not hold:
//! an engine offloads block 8 onwards while blocks 0–7 stay on the GPU only, and its event
//! names block 7 as the parent. So a tier is a map of **edges** `(parent block hash, local
//! hash) → child block hash` with the owners holding each, keyed by the engines' own block
//! identities (which do not depend on the tier a block sits in):
//! * `stored` walks its blocks from the event's parent (an unknown parent is fine — the edge
//!   is keyed by it); a block the owner already holds under another edge, or an edge whose
//!   child is another block (the first writer keeps it), ends the store there.
//! * `removed` takes the owner off the named blocks' edges (unknown hashes are ignored);
//!   `cleared` takes it off all of them; an edge without owners goes.
//! * [`TierIndex::extend`] continues one owner from a position and anchor (its last matched
//!   block hash, `None` at the root) while the tier holds the next edge for it.
//!
//! An owner's continuation across tiers (device, then host, then disk, then external) is
//! [`super::replica::IndexReplica::lower_tiers`].

use smallvec::SmallVec;

use super::index::{BlockPair, Owner};

/// A storage tier below the GPU, in the order a continuation visits them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Tier {
    HostPinned = 0,
    Disk = 1,
    External = 2,
}

impl Tier {
    pub const ALL: [Tier; 3] = [Tier::HostPinned, Tier::Disk, Tier::External];

    /// The name events and served indexers give the tier.
    pub fn name(self) -> &'static str {
        match self {
            Tier::HostPinned => "host_pinned",
            Tier::Disk => "disk",
            Tier::External => "external",
        }
    }

    /// The lower tier an event's `storage_tier` names (`None` for `device` and for names no
    /// publisher uses).
    pub fn parse(name: &str) -> Option<Tier> {
        match name {
            "host_pinned" => Some(Tier::HostPinned),
            "disk" => Some(Tier::Disk),
            "external" => Some(Tier::External),
            _ => None,
        }
    }
}

type Map<K, V> = crate::util::FastMap<K, V>;

/// `(parent block hash, local hash)`.
type EdgeKey = (Option<u64>, u64);

#[derive(Debug)]
struct Edge {
    child: u64,
    /// Interned owner ids, unsorted (an edge rarely has more than a few).
    owners: SmallVec<[u32; 2]>,
}

/// One lower tier's blocks (see the module doc).
#[derive(Debug, Default)]
pub struct TierIndex {
    edges: Map<EdgeKey, Edge>,
    owner_ids: Map<Owner, u32>,
    /// Per owner id: its block hashes and the edge each sits on.
    owned: Vec<Map<u64, EdgeKey>>,
    free: Vec<u32>,
}

impl TierIndex {
    /// `stored`: `blocks` as a chain under `parent` (`None` = the prompt's start).
    pub fn store(&mut self, owner: Owner, parent: Option<u64>, blocks: &[BlockPair]) {
        let id = self.intern(owner);
        let mut parent = parent;
        for b in blocks {
            let key = (parent, b.tokens_hash);
            if self.owned[id as usize].get(&b.block_hash).is_some_and(|k| *k != key) {
                break;
            }
            let edge = self.edges.entry(key).or_insert_with(|| Edge { child: b.block_hash, owners: SmallVec::new() });
            if edge.child != b.block_hash {
                break;
            }
            if !edge.owners.contains(&id) {
                edge.owners.push(id);
            }
            self.owned[id as usize].insert(b.block_hash, key);
            parent = Some(b.block_hash);
        }
    }

    /// `removed`: `owner` no longer holds these blocks in this tier.
    pub fn remove(&mut self, owner: Owner, block_hashes: &[u64]) {
        let Some(&id) = self.owner_ids.get(&owner) else { return };
        for h in block_hashes {
            if let Some(key) = self.owned[id as usize].remove(h) {
                self.unlink(key, id);
            }
        }
    }

    /// `cleared`: every block of `owner` in this tier.
    pub fn clear(&mut self, owner: Owner) {
        let Some(id) = self.owner_ids.remove(&owner) else { return };
        let owned = std::mem::take(&mut self.owned[id as usize]);
        for key in owned.into_values() {
            self.unlink(key, id);
        }
        self.free.push(id);
    }

    /// Every dp rank of `worker_id`.
    pub fn remove_worker(&mut self, worker_id: u64) {
        let gone: SmallVec<[Owner; 4]> = self.owner_ids.keys().filter(|o| o.worker_id == worker_id).copied().collect();
        for o in gone {
            self.clear(o);
        }
    }

    /// From `pos` (blocks of `local` already matched) and `anchor` (the block hash at
    /// `pos − 1`, `None` at 0), how far `owner`'s copy in this tier continues: the new
    /// position and anchor (unchanged when it holds not even the next block).
    pub fn extend(&self, owner: Owner, local: &[u64], pos: usize, anchor: Option<u64>) -> (usize, Option<u64>) {
        let Some(&id) = self.owner_ids.get(&owner) else { return (pos, anchor) };
        let (mut pos, mut anchor) = (pos, anchor);
        while let Some(&h) = local.get(pos) {
            match self.edges.get(&(anchor, h)) {
                Some(e) if e.owners.contains(&id) => {
                    anchor = Some(e.child);
                    pos += 1;
                }
                _ => break,
            }
        }
        (pos, anchor)
    }

    /// The owners with blocks here.
    pub fn owners(&self) -> impl Iterator<Item = Owner> + '_ {
        self.owner_ids.keys().copied()
    }

    /// Blocks held, over all owners.
    pub fn blocks(&self) -> usize {
        self.owned.iter().map(Map::len).sum()
    }

    fn unlink(&mut self, key: EdgeKey, id: u32) {
        if let Some(e) = self.edges.get_mut(&key) {
            e.owners.retain(|o| *o != id);
            if e.owners.is_empty() {
                self.edges.remove(&key);
            }
        }
    }

    fn intern(&mut self, owner: Owner) -> u32 {
        if let Some(&id) = self.owner_ids.get(&owner) {
            return id;
        }
        let id = self.free.pop().unwrap_or_else(|| {
            self.owned.push(Map::default());
            (self.owned.len() - 1) as u32
        });
        self.owner_ids.insert(owner, id);
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const A: Owner = Owner { worker_id: 1, dp_rank: 0 };
    const A1: Owner = Owner { worker_id: 1, dp_rank: 1 };
    const B: Owner = Owner { worker_id: 2, dp_rank: 0 };

    /// Blocks `from..to` of a prompt whose local hashes are `100 + i` and whose block hashes
    /// are `base + i`.
    fn run(base: u64, from: u64, to: u64) -> Vec<BlockPair> {
        (from..to).map(|i| BlockPair { block_hash: base + i, tokens_hash: 100 + i }).collect()
    }

    fn parent(base: u64, from: u64) -> Option<u64> {
        from.checked_sub(1).map(|p| base + p)
    }

    const LOCAL: [u64; 8] = [100, 101, 102, 103, 104, 105, 106, 107];

    #[test]
    fn a_store_under_a_parent_the_tier_lacks_continues_from_that_parent() {
        let mut t = TierIndex::default();
        // Blocks 4..8 offloaded; 0..4 live on the GPU only.
        t.store(A, parent(10, 4), &run(10, 4, 8));
        assert_eq!(t.extend(A, &LOCAL, 0, None), (0, None), "no root edge");
        assert_eq!(t.extend(A, &LOCAL, 4, Some(13)), (8, Some(17)));
        assert_eq!(t.extend(A, &LOCAL, 3, Some(12)), (3, Some(12)), "block 3 is not in the tier");
        assert_eq!(t.extend(B, &LOCAL, 4, Some(13)), (4, Some(13)), "B holds nothing");
        // A prompt with a different parent at 4 does not continue.
        assert_eq!(t.extend(A, &LOCAL, 4, Some(99)), (4, Some(99)));
    }

    #[test]
    fn branches_are_told_apart_by_their_parent_and_the_first_writer_keeps_an_edge() {
        let mut t = TierIndex::default();
        t.store(A, None, &run(10, 0, 4));
        // B stores the same local hashes with other block hashes at the root: its first
        // edge belongs to A's block, so the store stops there.
        t.store(B, None, &run(50, 0, 4));
        assert_eq!(t.extend(A, &LOCAL, 0, None), (4, Some(13)));
        assert_eq!(t.extend(B, &LOCAL, 0, None), (0, None));
        // B with A's hashes joins A's edges.
        t.store(B, None, &run(10, 0, 2));
        assert_eq!(t.extend(B, &LOCAL, 0, None), (2, Some(11)));
        // A block the owner holds under another edge ends the store.
        t.store(A, Some(77), &run(10, 0, 3));
        assert_eq!(t.extend(A, &LOCAL, 0, Some(77)), (0, Some(77)));
        assert_eq!(t.blocks(), 6);
    }

    #[test]
    fn removes_clears_and_departures_are_per_rank() {
        let mut t = TierIndex::default();
        t.store(A, None, &run(10, 0, 4));
        t.store(A1, None, &run(10, 0, 4));
        t.store(B, None, &run(10, 0, 4));
        t.remove(A, &[12, 999]);
        assert_eq!(t.extend(A, &LOCAL, 0, None), (2, Some(11)), "a removed middle block stops the walk");
        assert_eq!(t.extend(A1, &LOCAL, 0, None), (4, Some(13)));
        t.clear(B);
        assert_eq!(t.extend(B, &LOCAL, 0, None), (0, None));
        assert_eq!(t.extend(A1, &LOCAL, 0, None), (4, Some(13)), "edges shared with B stay");
        t.remove_worker(1);
        assert_eq!(t.blocks(), 0);
        assert!(t.edges.is_empty(), "no edge outlives its owners");
        // Ids are reused.
        t.store(B, None, &run(10, 0, 1));
        assert_eq!(t.owned.len(), 3);
        assert_eq!(t.extend(B, &LOCAL, 0, None), (1, Some(10)));
    }

    #[test]
    fn tier_names_are_those_of_the_events() {
        for t in Tier::ALL {
            assert_eq!(Tier::parse(t.name()), Some(t));
        }
        assert_eq!(Tier::parse("host_pinned"), Some(Tier::HostPinned));
        assert_eq!(Tier::parse("device"), None);
        assert_eq!(Tier::parse("CPU_PINNED"), None);
    }
}
