//! Approximate mode (`--no-router-kv-events`, spec: KV routing §6.3): without KV events the
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
//! always takes whole tails.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::index::{BlockPair, IndexOp, Owner};

/// One routing decision's prediction: `blocks` (a chain from the root) cached on `owner`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Prediction {
    pub owner: Owner,
    pub blocks: Arc<[BlockPair]>,
}

impl Prediction {
    /// The index op that records it.
    pub fn op(&self) -> IndexOp {
        IndexOp::Stored { owner: self.owner, parent_hash: None, blocks: self.blocks.clone() }
    }
}

/// The time-to-live of predicted blocks.
#[derive(Debug)]
pub struct Expiry {
    ttl: Duration,
    /// Last touch per `(owner, block_hash)`.
    touched: HashMap<(Owner, u64), Instant>,
    /// Touches in time order; stale ones (touched again since) are skipped when popped.
    queue: VecDeque<(Instant, Owner, u64)>,
}

impl Expiry {
    pub fn new(ttl: Duration) -> Expiry {
        Expiry { ttl, touched: HashMap::new(), queue: VecDeque::new() }
    }

    /// Records `p` as touched at `now`.
    pub fn touch(&mut self, p: &Prediction, now: Instant) {
        for b in p.blocks.iter() {
            self.touched.insert((p.owner, b.block_hash), now);
            self.queue.push_back((now, p.owner, b.block_hash));
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
            if self.touched.get(&(owner, hash)) == Some(&at) {
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
        Prediction { owner, blocks }
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
        let mut e = Expiry::new(Duration::from_secs(10));
        let t0 = Instant::now();
        e.touch(&chain(w, &[1, 2, 3]), t0);
        // The shared prefix is routed again later; its tail is not.
        e.touch(&chain(w, &[1, 2]), t0 + Duration::from_secs(5));
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
        let mut e = Expiry::new(Duration::from_secs(1));
        let t0 = Instant::now();
        e.touch(&chain(a, &[1]), t0);
        e.touch(&chain(b, &[1]), t0);
        e.remove_worker(1);
        assert_eq!(e.len(), 1);
        let mut out = Vec::new();
        e.expire(t0 + Duration::from_secs(1), &mut out);
        assert_eq!(out, [IndexOp::Removed { owner: b, block_hashes: vec![1].into() }]);
    }
}
