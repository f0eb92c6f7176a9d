//! Approximate mode (`--no-router-kv-events`, docs/dynamo/kv-routing.md §6.3): without KV events the
//! router predicts the cache from its own decisions. Every routed prompt's full blocks are
//! taken as cached on the chosen worker until `--router-ttl-secs` (default 120 s) pass
//! without that worker being routed the same prefix again.
//!
//! How the prediction reaches every shard: the deciding shard applies it to its own replica
//! at once (the next request on that shard sees it) and sends it up its ring to the ingest
//! thread ([`super::active::Upstream`]); the ingest thread re-publishes it to every replica
//! through the same feed as KV events, and owns the expiry ([`Expiry`]), publishing a
//! `Removed` op when a block's time is up.
//!
//! Expiry keeps one entry per `(owner, block)` with its last touch; a prompt always touches
//! every block of its chain from the root, so a block never outlives its parent and `Removed`
//! always takes whole tails. With `--router-approximate-cache-policy lru` a rank instead
//! holds at most its advertised `total_kv_blocks`, the least recently touched blocks (leaves
//! before their parents) leaving first.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::index::{BlockPair, IndexOp, Owner};

/// One routing decision's prediction: `blocks` (a chain from the root) cached on `owner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prediction {
    pub owner: Owner,
    pub blocks: Arc<[BlockPair]>,
    /// The worker's `total_kv_blocks` (0: not advertised), the bound of the LRU policy.
    pub capacity: u64,
}

impl Prediction {
    /// The index op that records it.
    pub fn op(&self) -> IndexOp {
        IndexOp::Stored { owner: self.owner, parent_hash: None, blocks: self.blocks.clone() }
    }
}

pub use crate::config::settings::CachePolicy;

/// When predicted blocks leave.
#[derive(Debug)]
pub struct Expiry {
    ttl: Duration,
    policy: CachePolicy,
    /// Last touch per `(owner, block_hash)`: when, and its number (unique per touch).
    touched: HashMap<(Owner, u64), (Instant, u64)>,
    /// TTL: touches in time order; stale ones (touched again since) are skipped when popped.
    queue: VecDeque<(Instant, Owner, u64)>,
    /// LRU: per owner, touches in order (a chain's leaf before its root, so ties evict
    /// leaves first) and the number of live blocks.
    lru: HashMap<Owner, (VecDeque<(u64, u64)>, u64)>,
    next: u64,
}

impl Expiry {
    pub fn new(ttl: Duration, policy: CachePolicy) -> Expiry {
        Expiry { ttl, policy, touched: HashMap::new(), queue: VecDeque::new(), lru: HashMap::new(), next: 0 }
    }

    /// Records `p` as touched at `now`; under LRU, appends the `Removed` op of what no
    /// longer fits.
    pub fn touch(&mut self, p: &Prediction, now: Instant, out: &mut Vec<IndexOp>) {
        let lru = self.policy == CachePolicy::Lru && p.capacity > 0;
        for b in p.blocks.iter().rev() {
            let n = self.next;
            self.next += 1;
            let fresh = self.touched.insert((p.owner, b.block_hash), (now, n)).is_none();
            if lru {
                let (order, live) = self.lru.entry(p.owner).or_default();
                order.push_back((n, b.block_hash));
                *live += u64::from(fresh);
            } else {
                self.queue.push_back((now, p.owner, b.block_hash));
            }
        }
        if lru {
            self.evict(p.owner, p.capacity, out);
        }
    }

    fn evict(&mut self, owner: Owner, capacity: u64, out: &mut Vec<IndexOp>) {
        let Some((order, live)) = self.lru.get_mut(&owner) else { return };
        let mut gone = Vec::new();
        while *live > capacity {
            let Some((n, hash)) = order.pop_front() else { break };
            if self.touched.get(&(owner, hash)).is_some_and(|t| t.1 == n) {
                self.touched.remove(&(owner, hash));
                *live -= 1;
                gone.push(hash);
            }
        }
        if !gone.is_empty() {
            out.push(IndexOp::Removed { owner, block_hashes: gone.into() });
        }
    }

    /// Appends a `Removed` op per owner for the blocks whose time is up at `now`.
    pub fn expire(&mut self, now: Instant, out: &mut Vec<IndexOp>) {
        let mut gone: HashMap<Owner, Vec<u64>> = HashMap::new();
        while let Some(&(at, owner, hash)) = self.queue.front() {
            if at + self.ttl > now {
                break;
            }
            self.queue.pop_front();
            if self.touched.get(&(owner, hash)).is_some_and(|t| t.0 == at) {
                self.touched.remove(&(owner, hash));
                gone.entry(owner).or_default().push(hash);
            }
        }
        for (owner, hashes) in gone {
            out.push(IndexOp::Removed { owner, block_hashes: hashes.into() });
        }
    }

    /// Forgets every block of `worker_id` (its blocks are purged by the caller).
    pub fn remove_worker(&mut self, worker_id: u64) {
        self.touched.retain(|(o, _), _| o.worker_id != worker_id);
        self.lru.retain(|o, _| o.worker_id != worker_id);
    }

    /// Blocks currently predicted.
    pub fn len(&self) -> usize {
        self.touched.len()
    }

    pub fn is_empty(&self) -> bool {
        self.touched.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chain(owner: Owner, hashes: &[u64]) -> Prediction {
        let blocks = hashes.iter().map(|&h| BlockPair { block_hash: h, tokens_hash: h + 1000 }).collect();
        Prediction { owner, blocks, capacity: 3 }
    }

    fn removed(out: &[IndexOp]) -> Vec<u64> {
        let mut v: Vec<u64> = out
            .iter()
            .flat_map(|op| match op {
                IndexOp::Removed { block_hashes, .. } => block_hashes.to_vec(),
                _ => Vec::new(),
            })
            .collect();
        v.sort_unstable();
        v
    }

    #[test]
    fn blocks_expire_after_the_ttl_unless_touched_again() {
        let w = Owner { worker_id: 1, dp_rank: 0 };
        let mut e = Expiry::new(Duration::from_secs(10), CachePolicy::Ttl);
        let t0 = Instant::now();
        e.touch(&chain(w, &[1, 2, 3]), t0, &mut Vec::new());
        // The shared prefix is routed again later; its tail is not.
        e.touch(&chain(w, &[1, 2]), t0 + Duration::from_secs(5), &mut Vec::new());
        let mut out = Vec::new();
        e.expire(t0 + Duration::from_secs(9), &mut out);
        assert!(out.is_empty());
        e.expire(t0 + Duration::from_secs(10), &mut out);
        assert_eq!(removed(&out), [3]);
        out.clear();
        e.expire(t0 + Duration::from_secs(15), &mut out);
        assert_eq!(removed(&out), [1, 2]);
        assert!(e.is_empty());
    }

    #[test]
    fn a_departed_worker_is_forgotten() {
        let (a, b) = (Owner { worker_id: 1, dp_rank: 0 }, Owner { worker_id: 2, dp_rank: 0 });
        let mut e = Expiry::new(Duration::from_secs(1), CachePolicy::Ttl);
        let t0 = Instant::now();
        e.touch(&chain(a, &[1]), t0, &mut Vec::new());
        e.touch(&chain(b, &[1]), t0, &mut Vec::new());
        e.remove_worker(1);
        assert_eq!(e.len(), 1);
        let mut out = Vec::new();
        e.expire(t0 + Duration::from_secs(1), &mut out);
        assert_eq!(out, [IndexOp::Removed { owner: b, block_hashes: vec![1].into() }]);
    }

    #[test]
    fn lru_keeps_each_rank_within_its_blocks_leaves_first() {
        let w = Owner { worker_id: 1, dp_rank: 0 };
        let mut e = Expiry::new(Duration::from_secs(10), CachePolicy::Lru);
        let t0 = Instant::now();
        let mut out = Vec::new();
        e.touch(&chain(w, &[1, 2, 3]), t0, &mut out);
        assert!(out.is_empty(), "3 blocks fit a capacity of 3");
        // The shared root is touched again with a new tail: the old leaf 3 goes, then 2.
        e.touch(&chain(w, &[1, 4]), t0, &mut out);
        assert_eq!(removed(&out), [3]);
        out.clear();
        e.touch(&chain(w, &[1, 4, 5]), t0, &mut out);
        assert_eq!(removed(&out), [2]);
        // No TTL under LRU.
        out.clear();
        e.expire(t0 + Duration::from_secs(60), &mut out);
        assert!(out.is_empty());
        assert_eq!(e.len(), 3);
        // A rank that advertises no size falls back to the TTL.
        let unsized_rank = Prediction { capacity: 0, ..chain(Owner { worker_id: 2, dp_rank: 0 }, &[7]) };
        e.touch(&unsized_rank, t0, &mut out);
        e.expire(t0 + Duration::from_secs(10), &mut out);
        assert_eq!(removed(&out), [7]);
    }
}
