//! KV routing building blocks: the index against a naive reference model under random event
//! streams (property test), the captured hash vectors, and captured KV event payloads.

#[path = "kv/events.rs"]
mod events;
#[path = "kv/vectors.rs"]
mod vectors;

use std::collections::{BTreeMap, HashMap, HashSet};

use proptest::prelude::*;
use switchyard::router::kv::hash::sequence_hashes;
use switchyard::router::kv::{channel, BlockPair, IndexOp, KvIndex, Owner};

/// The reference: per owner, `block_hash → path of local hashes from the root`.
#[derive(Default)]
struct Model {
    owners: HashMap<Owner, HashMap<u64, Vec<u64>>>,
    dropped: u64,
}

impl Model {
    fn apply(&mut self, op: &IndexOp) {
        match op {
            IndexOp::Stored { owner, parent_hash, blocks } => {
                let mut path = match parent_hash {
                    None => Vec::new(),
                    Some(p) => match self.owners.get(owner).and_then(|m| m.get(p)) {
                        Some(path) => path.clone(),
                        None => {
                            self.dropped += 1;
                            return;
                        }
                    },
                };
                let m = self.owners.entry(*owner).or_default();
                for b in blocks.iter() {
                    path.push(b.tokens_hash);
                    m.insert(b.block_hash, path.clone());
                }
            }
            IndexOp::Removed { owner, block_hashes } => {
                if let Some(m) = self.owners.get_mut(owner) {
                    for h in block_hashes.iter() {
                        m.remove(h);
                    }
                }
            }
            IndexOp::Cleared { owner } => {
                self.owners.remove(owner);
            }
            IndexOp::RemoveWorker { worker_id } => self.owners.retain(|o, _| o.worker_id != *worker_id),
            IndexOp::Usage { .. } | IndexOp::Load(_) | IndexOp::Side(_) | IndexOp::Lower(..) => {}
        }
    }

    fn find_matches(&self, q: &[u64]) -> Vec<(Owner, u32)> {
        let mut out = Vec::new();
        for (owner, m) in &self.owners {
            let held: HashSet<&[u64]> = m.values().map(Vec::as_slice).collect();
            let score = (1..=q.len()).take_while(|&k| held.contains(&q[..k])).count() as u32;
            if score > 0 {
                out.push((*owner, score));
            }
        }
        out.sort();
        out
    }

    fn blocks(&self) -> usize {
        self.owners.values().map(HashMap::len).sum()
    }

    /// Distinct prefixes of every held path (what the tree must keep, and no more).
    fn prefixes(&self) -> usize {
        let mut set: HashSet<&[u64]> = HashSet::new();
        for m in self.owners.values() {
            for p in m.values() {
                for k in 1..=p.len() {
                    set.insert(&p[..k]);
                }
            }
        }
        set.len()
    }

    fn paths(&self) -> Vec<Vec<u64>> {
        let mut v: Vec<Vec<u64>> = self.owners.values().flat_map(|m| m.values().cloned()).collect();
        v.sort();
        v.dedup();
        v
    }
}

const TOKENS: u64 = 4;

fn owner() -> impl Strategy<Value = Owner> {
    (0u64..6, 0u32..2).prop_map(|(w, r)| Owner { worker_id: w, dp_rank: r })
}

/// `block_hash` either from a tiny space (collisions, re-binds, unknown removes) or, when
/// `consistent`, derived from the path as real workers do.
fn path_hash(parent: Option<u64>, tokens_hash: u64) -> u64 {
    let p = parent.unwrap_or(0x5eed);
    p.wrapping_mul(0x9e37_79b9_7f4a_7c15).rotate_left(17) ^ tokens_hash.wrapping_add(1)
}

fn op(consistent: bool) -> impl Strategy<Value = IndexOp> {
    let parent = (proptest::option::weighted(0.6, 0u64..40), proptest::collection::vec(0..TOKENS, 1..4));
    let blocks = proptest::collection::vec((0u64..40, 0..TOKENS), 0..6);
    let stored = (owner(), parent, blocks).prop_map(move |(owner, (small, path), raw)| {
        // consistent: the parent is the hash of a short path the owner may have stored
        let parent = match small {
            Some(_) if consistent => path.iter().fold(None, |prev, &t| Some(path_hash(prev, t))),
            other => other,
        };
        let mut prev = parent;
        let blocks: Vec<BlockPair> = raw
            .into_iter()
            .map(|(bh, th)| {
                let block_hash = if consistent { path_hash(prev, th) } else { bh };
                prev = Some(block_hash);
                BlockPair { block_hash, tokens_hash: th }
            })
            .collect();
        IndexOp::Stored { owner, parent_hash: parent, blocks: blocks.into() }
    });
    prop_oneof![
        6 => stored,
        3 => (owner(), proptest::collection::vec((0u64..40, proptest::collection::vec(0..TOKENS, 1..5)), 0..4))
            .prop_map(move |(owner, h)| {
                let hashes: Vec<u64> = h
                    .into_iter()
                    .map(|(small, path)| {
                        if consistent {
                            path.iter().fold(0x5eed_u64, |prev, &t| path_hash(Some(prev), t))
                        } else {
                            small
                        }
                    })
                    .collect();
                IndexOp::Removed { owner, block_hashes: hashes.into() }
            }),
        1 => owner().prop_map(|owner| IndexOp::Cleared { owner }),
        1 => (0u64..6).prop_map(|worker_id| IndexOp::RemoveWorker { worker_id }),
    ]
}

fn stream() -> impl Strategy<Value = (Vec<IndexOp>, Vec<Vec<u64>>)> {
    any::<bool>().prop_flat_map(|consistent| {
        (
            proptest::collection::vec(op(consistent), 0..120),
            proptest::collection::vec(proptest::collection::vec(0..TOKENS, 0..8), 0..20),
        )
    })
}

fn sorted(mut v: Vec<(Owner, u32)>) -> Vec<(Owner, u32)> {
    v.sort();
    v
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 400, ..ProptestConfig::default() })]

    #[test]
    fn index_matches_reference((ops, prompts) in stream()) {
        let mut ix = KvIndex::new();
        let mut model = Model::default();
        let (mut feed, mut replicas) = channel(1, 3);
        for (i, op) in ops.iter().enumerate() {
            ix.apply(op);
            model.apply(op);
            feed.publish(op.clone());
            if i % 5 == 0 {
                replicas[0].drain(2);
                feed.flush();
            }
            prop_assert_eq!(ix.indexed_blocks(), model.blocks());
            prop_assert_eq!(ix.nodes(), model.prefixes());
            prop_assert_eq!(ix.stats().stores_dropped, model.dropped);
            if i % 10 == 9 {
                for p in model.paths().iter().take(8) {
                    prop_assert_eq!(sorted(ix.find_matches(p)), model.find_matches(p));
                }
            }
        }
        // random prompts, every held path, and held paths extended by one block
        let mut queries = prompts.clone();
        for p in model.paths() {
            let mut longer = p.clone();
            longer.push(p.len() as u64 % TOKENS);
            queries.push(p);
            queries.push(longer);
        }
        while feed.flush() > 0 {
            replicas[0].drain(usize::MAX);
        }
        for q in &queries {
            let expected = model.find_matches(q);
            prop_assert_eq!(sorted(ix.find_matches(q)), expected.clone());
            prop_assert_eq!(sorted(replicas[0].find_matches(q)), expected.clone());
            let mut by_seq = Vec::new();
            ix.find_matches_by_sequence(&sequence_hashes(q), &mut by_seq);
            prop_assert_eq!(sorted(by_seq), expected);
        }
    }
}

/// Many owners sharing long prefixes: the fingerprint shortcut and the merge must agree
/// with the reference when owners drop out at different depths.
#[test]
fn many_owners_dropping_at_every_depth() {
    let mut ix = KvIndex::new();
    let mut model = Model::default();
    let path: Vec<u64> = (0..64).map(|i| 1000 + i).collect();
    for w in 0..300u64 {
        let owner = Owner { worker_id: w, dp_rank: (w % 3) as u32 };
        let len = 1 + (w * 7 % 64) as usize;
        let blocks: Vec<BlockPair> =
            path[..len].iter().enumerate().map(|(i, &t)| BlockPair { block_hash: i as u64, tokens_hash: t }).collect();
        let op = IndexOp::Stored { owner, parent_hash: None, blocks: blocks.into() };
        ix.apply(&op);
        model.apply(&op);
        if w % 5 == 0 && len > 3 {
            let op = IndexOp::Removed { owner, block_hashes: vec![(len / 2) as u64].into() };
            ix.apply(&op);
            model.apply(&op);
        }
    }
    let mut by_score: BTreeMap<u32, usize> = BTreeMap::new();
    let got = sorted(ix.find_matches(&path));
    for (_, s) in &got {
        *by_score.entry(*s).or_default() += 1;
    }
    assert_eq!(got, model.find_matches(&path));
    assert!(by_score.len() > 30, "scores spread over many depths: {by_score:?}");
}
