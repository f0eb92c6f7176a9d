//! KV index: event apply rate on one core, `find_matches` latency for 128-block prompts over
//! ~1 M indexed blocks with 16 / 256 / 1 024 workers (criterion means, plus p50/p99/p99.9
//! from per-call timings in an HDR histogram), and lookup latency on a shard replica while
//! the ingest thread publishes events into its ring at full speed.
//!
//! `cargo bench --bench kv_index -- --quick`

use std::hint::black_box;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use criterion::{BenchmarkId, Criterion, Throughput};
use hdrhistogram::Histogram;
use switchyard::router::kv::hash::{chain_hash, sequence_hashes, SEED};
use switchyard::router::kv::{channel, BlockPair, IndexOp, KvIndex, Owner};

const PROMPT_BLOCKS: usize = 128;
const SHARED_BLOCKS: usize = 32;
const FAMILIES: u64 = 64;
const TARGET_BLOCKS: usize = 1 << 20;
/// Events a shard replica applies before each lookup in the concurrent run.
const DRAIN_BUDGET: usize = 16;

/// xorshift64*: deterministic, dependency-free.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// A 128-block chain: one of 64 shared 32-block "system prompt" prefixes, then a unique
/// tail. Family 0 is the first chain of every worker (a prefix all workers share).
fn chain(rng: &mut Rng, family: u64) -> Vec<u64> {
    let mut local: Vec<u64> = (0..SHARED_BLOCKS as u64).map(|i| family * 1_000_003 + i + 1).collect();
    local.extend((SHARED_BLOCKS..PROMPT_BLOCKS).map(|_| rng.next()));
    local
}

fn stored(owner: Owner, local: &[u64]) -> IndexOp {
    let seq = sequence_hashes(local);
    let blocks: Vec<BlockPair> =
        local.iter().zip(&seq).map(|(&t, &s)| BlockPair { block_hash: s, tokens_hash: t }).collect();
    IndexOp::Stored { owner, parent_hash: None, blocks: blocks.into() }
}

struct Loaded {
    index: KvIndex,
    chains: Vec<Vec<u64>>,
}

/// ~1 M `(owner, block)` bindings spread over `workers` workers.
fn load(workers: u64) -> Loaded {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ workers);
    let per_worker = (TARGET_BLOCKS / PROMPT_BLOCKS).div_ceil(workers as usize);
    let mut index = KvIndex::new();
    let mut chains = Vec::new();
    for w in 0..workers {
        let owner = Owner { worker_id: 0x1000 + w, dp_rank: 0 };
        for c in 0..per_worker {
            let family = if c == 0 { 0 } else { rng.below(FAMILIES) };
            let local = chain(&mut rng, family);
            index.apply(&stored(owner, &local));
            chains.push(local);
        }
    }
    Loaded { index, chains }
}

/// Prompts: a stored chain cut at a random depth and continued with fresh blocks.
fn prompts(l: &Loaded, n: usize) -> Vec<Vec<u64>> {
    let mut rng = Rng(42);
    (0..n)
        .map(|_| {
            let c = &l.chains[rng.below(l.chains.len() as u64) as usize];
            let keep = rng.below(PROMPT_BLOCKS as u64 + 1) as usize;
            let mut p = c[..keep].to_vec();
            p.extend((keep..PROMPT_BLOCKS).map(|_| rng.next()));
            p
        })
        .collect()
}

/// A store/remove cycle of `events` stored events of `blocks` blocks each (each extending
/// its owner's previous one, a new chain every 4th), then the matching removes, leaf first:
/// the index ends as it began. Returns the ops and the number of events.
fn churn(events: usize, blocks: usize, owners: u64) -> (Vec<IndexOp>, usize) {
    let mut rng = Rng(7);
    let mut ops = Vec::new();
    let mut removes = Vec::new();
    let mut tips: Vec<Option<u64>> = vec![None; owners as usize];
    for e in 0..events {
        let w = e as u64 % owners;
        let owner = Owner { worker_id: 0x9000 + w, dp_rank: (w % 2) as u32 };
        let parent_hash = tips[w as usize];
        let mut prev = parent_hash;
        let pairs: Vec<BlockPair> = (0..blocks)
            .map(|_| {
                let t = rng.next();
                let h = prev.map_or(t, |p| chain_hash(p, t, SEED));
                prev = Some(h);
                BlockPair { block_hash: h, tokens_hash: t }
            })
            .collect();
        tips[w as usize] = if e % 4 == 3 { None } else { prev };
        let hashes: Vec<u64> = pairs.iter().rev().map(|b| b.block_hash).collect();
        ops.push(IndexOp::Stored { owner, parent_hash, blocks: pairs.into() });
        removes.push(IndexOp::Removed { owner, block_hashes: hashes.into() });
    }
    removes.reverse();
    ops.extend(removes);
    let n = ops.len();
    (ops, n)
}

/// Churn applied on top of `ix` (a loaded index, so the tables are cache-cold as in
/// production).
fn bench_apply(c: &mut Criterion, ix: &mut KvIndex) {
    let mut g = c.benchmark_group("kv_index_apply");
    for blocks in [1usize, 16] {
        let (ops, events) = churn(8192, blocks, 64);
        let block_ops = 2 * 8192 * blocks;
        let base = ix.indexed_blocks();
        g.throughput(Throughput::Elements(events as u64));
        g.bench_function(BenchmarkId::new("events", format!("{blocks}-block events")), |b| {
            b.iter(|| {
                for op in &ops {
                    ix.apply(op);
                }
            })
        });
        assert_eq!(ix.indexed_blocks(), base, "the churn cycle leaves the index as it was");
        eprintln!("  ({blocks}-block events: {block_ops} block operations per iteration)");
    }
    g.finish();
}

fn bench_lookup(c: &mut Criterion, loaded: &[(u64, Loaded)]) {
    let mut g = c.benchmark_group("kv_index_find_matches_128");
    for (workers, l) in loaded {
        let ps = prompts(l, 4096);
        let mut i = 0;
        let mut out = Vec::new();
        g.bench_function(BenchmarkId::from_parameter(format!("{workers} workers")), |b| {
            b.iter(|| {
                l.index.find_matches_into(black_box(&ps[i % ps.len()]), &mut out);
                i += 1;
                black_box(out.len())
            })
        });
    }
    g.finish();
}

fn hist() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 10_000_000_000, 3).expect("histogram bounds")
}

fn report(name: &str, h: &Histogram<u64>) {
    println!(
        "{name}: n={} p50={} ns p99={} ns p99.9={} ns max={} ns mean={:.0} ns",
        h.len(),
        h.value_at_quantile(0.50),
        h.value_at_quantile(0.99),
        h.value_at_quantile(0.999),
        h.max(),
        h.mean()
    );
}

fn percentiles(loaded: &[(u64, Loaded)]) {
    for (workers, l) in loaded {
        let ps = prompts(l, 4096);
        let mut h = hist();
        let mut out = Vec::new();
        let mut matched = 0usize;
        for round in 0..50 {
            for p in &ps {
                let t = Instant::now();
                l.index.find_matches_into(black_box(p), &mut out);
                let ns = t.elapsed().as_nanos() as u64;
                if round > 0 {
                    h.record(ns.max(1)).expect("in range");
                }
                matched += out.len();
            }
        }
        report(&format!("find_matches 128 blocks, {workers} workers"), &h);
        println!(
            "  indexed blocks {} nodes {} owners {} memory {:.1} MiB = {:.0} bytes/indexed block, avg owners matched {:.1}",
            l.index.indexed_blocks(),
            l.index.nodes(),
            l.index.owners(),
            l.index.memory_bytes() as f64 / (1 << 20) as f64,
            l.index.memory_bytes() as f64 / l.index.indexed_blocks() as f64,
            matched as f64 / (50 * ps.len()) as f64
        );
    }
}

/// One shard replica (this thread) answering lookups while the ingest thread publishes
/// churn events into its ring as fast as the ring takes them.
fn concurrent(workers: u64) {
    let l = load(workers);
    let ps = prompts(&l, 4096);
    let (mut feed, mut reps) = channel(1, 1 << 16);
    let mut rep = reps.pop().expect("one replica");
    // The replica is loaded with the same ~1 M blocks through its ring, as in production.
    let owners_chains = l.chains.len() / workers as usize;
    for (n, c) in l.chains.iter().enumerate() {
        let owner = Owner { worker_id: 0x1000 + (n / owners_chains) as u64, dp_rank: 0 };
        feed.publish(stored(owner, c));
        if n % 1024 == 0 {
            rep.drain(usize::MAX);
            feed.flush();
        }
    }
    while feed.flush() > 0 || rep.pending() > 0 {
        rep.drain(usize::MAX);
    }
    drop(l);
    let (ops, _) = churn(8192, 16, 64);
    let stop = Arc::new(AtomicBool::new(false));
    let stop2 = stop.clone();
    let writer = std::thread::spawn(move || {
        let mut published = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            for op in &ops {
                feed.publish(op.clone());
                published += 1;
                while feed.backlog() > 0 {
                    if stop2.load(Ordering::Relaxed) {
                        return published;
                    }
                    std::hint::spin_loop();
                    feed.flush();
                }
            }
        }
        published
    });
    let mut lookup = hist();
    let mut with_drain = hist();
    let mut applied = 0u64;
    let start = Instant::now();
    let mut i = 0;
    let mut out = Vec::new();
    while start.elapsed() < Duration::from_secs(3) {
        let t0 = Instant::now();
        applied += rep.drain(DRAIN_BUDGET) as u64;
        let t1 = Instant::now();
        rep.index().find_matches_into(black_box(&ps[i % ps.len()]), &mut out);
        let t2 = Instant::now();
        lookup.record(((t2 - t1).as_nanos() as u64).max(1)).expect("in range");
        with_drain.record(((t2 - t0).as_nanos() as u64).max(1)).expect("in range");
        i += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let published = writer.join().expect("writer");
    report(&format!("concurrent: lookup only, {workers} workers"), &lookup);
    report(&format!("concurrent: drain(≤{DRAIN_BUDGET} events) + lookup, {workers} workers"), &with_drain);
    println!(
        "  replica applied {:.0} K events/s ({:.1} M block ops/s) while answering {:.0} K lookups/s; writer published {published}",
        applied as f64 / secs / 1e3,
        applied as f64 * 16.0 / secs / 1e6,
        i as f64 / secs / 1e3
    );
}

/// The alternative not taken, for comparison: one index shared behind a `RwLock`, written
/// per event by the ingest thread at full speed while this thread looks up.
fn shared_rwlock(workers: u64) {
    let l = load(workers);
    let ps = prompts(&l, 4096);
    let ix = Arc::new(RwLock::new(l.index));
    let (ops, _) = churn(8192, 16, 64);
    let stop = Arc::new(AtomicBool::new(false));
    let (ix2, stop2) = (ix.clone(), stop.clone());
    let writer = std::thread::spawn(move || {
        let mut applied = 0u64;
        while !stop2.load(Ordering::Relaxed) {
            for op in &ops {
                ix2.write().expect("not poisoned").apply(op);
                applied += 1;
            }
        }
        applied
    });
    let mut lookup = hist();
    let start = Instant::now();
    let mut i = 0;
    let mut out = Vec::new();
    while start.elapsed() < Duration::from_secs(3) {
        let t = Instant::now();
        ix.read().expect("not poisoned").find_matches_into(black_box(&ps[i % ps.len()]), &mut out);
        lookup.record((t.elapsed().as_nanos() as u64).max(1)).expect("in range");
        i += 1;
    }
    let secs = start.elapsed().as_secs_f64();
    stop.store(true, Ordering::Relaxed);
    let applied = writer.join().expect("writer");
    report(&format!("shared RwLock index: lock + lookup, {workers} workers"), &lookup);
    println!(
        "  writer applied {:.0} K events/s while the reader answered {:.0} K lookups/s",
        applied as f64 / secs / 1e3,
        i as f64 / secs / 1e3
    );
}

fn main() {
    let mut c = Criterion::default().configure_from_args();
    let mut base = load(16).index;
    bench_apply(&mut c, &mut base);
    drop(base);
    let loaded: Vec<(u64, Loaded)> = [16, 256, 1024].into_iter().map(|w| (w, load(w))).collect();
    bench_lookup(&mut c, &loaded);
    c.final_summary();
    percentiles(&loaded);
    drop(loaded);
    concurrent(256);
    shared_rwlock(256);
}
