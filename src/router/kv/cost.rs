//! The cost ("logit", lower is better) `--router-mode kv` gives each candidate worker, and
//! the choice among candidates — Dynamo 1.6.1's formula (docs/dynamo/kv-routing.md §7.2, §7.4).
//!
//! ```text
//! raw_prefill_blocks = (A + ISL) / B            A: the worker's active prefill tokens
//! credit             = overlap_score_credit · decay_factor
//! overlap_credit     = credit·O + host_weight·H + disk_weight·K
//! prefill_cost       = prefill_load_scale · max(0, raw_prefill_blocks − overlap_credit)
//! decode_cost        = |active blocks(w) ∪ full blocks(request)|   (distinct sequence hashes)
//! request_cost       = decode_active_request_weight · N             N: active requests
//! logit              = prefill_cost + decode_cost + request_cost
//! ```
//! `decay_factor = 1 / (1 + decay · excess)` with `excess = max(0, A − min A over the
//! candidates) / B / request_blocks` (1 when decay is 0, the default, or prefill tokens are
//! not tracked). Without prefill tracking the prefill term vanishes and the cache-hot decode
//! form `max(0, decode_cost − overlap_credit) + request_cost` applies.
//!
//! The inputs are plain numbers: the caller owns the index (overlaps) and the load tracker
//! (active prefill tokens, the union size, request counts). Pure arithmetic, no allocation.

pub use crate::config::settings::CostParams;

/// What the router knows about one candidate `(worker, dp_rank)` for one request.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct Candidate {
    /// Device-tier overlap: consecutive cached blocks from the prompt's start.
    pub overlap_blocks: u32,
    /// Host-pinned and disk tier overlaps (0 without lower tiers).
    pub host_blocks: u32,
    pub disk_blocks: u32,
    /// Active prefill tokens booked on the worker.
    pub active_prefill_tokens: u64,
    /// `|active blocks ∪ the request's full blocks|`.
    pub decode_blocks: u64,
    /// Active requests booked on the worker.
    pub active_requests: u32,
}

/// The request's side of the cost.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct RequestShape {
    /// Prompt tokens after templating.
    pub isl: u64,
    pub block_size: u32,
    /// Smallest active prefill token count over the candidates (for the decay).
    pub min_active_prefill_tokens: u64,
}

impl RequestShape {
    /// `ceil(ISL / B)`, at least 1.
    pub fn request_blocks(&self) -> u64 {
        self.isl.div_ceil(u64::from(self.block_size.max(1))).max(1)
    }
}

/// The candidate's logit.
pub fn logit(p: &CostParams, r: &RequestShape, c: &Candidate) -> f64 {
    let b = f64::from(r.block_size.max(1));
    let decay = if p.overlap_credit_decay == 0.0 || !p.track_prefill_tokens {
        1.0
    } else {
        let excess =
            c.active_prefill_tokens.saturating_sub(r.min_active_prefill_tokens) as f64 / b / r.request_blocks() as f64;
        1.0 / (1.0 + p.overlap_credit_decay * excess)
    };
    let overlap_credit = p.overlap_credit * decay * f64::from(c.overlap_blocks)
        + p.host_cache_hit_weight * f64::from(c.host_blocks)
        + p.disk_cache_hit_weight * f64::from(c.disk_blocks);
    let decode = c.decode_blocks as f64;
    let requests = p.decode_active_request_weight * f64::from(c.active_requests);
    if !p.track_prefill_tokens {
        if p.overlap_credit > 0.0 {
            return (decode - overlap_credit).max(0.0) + requests;
        }
        return decode + requests;
    }
    let raw_prefill = (c.active_prefill_tokens + r.isl) as f64 / b;
    p.prefill_load_scale * (raw_prefill - overlap_credit).max(0.0) + decode + requests
}

/// Index of the chosen logit. Temperature 0: the minimum, exact ties broken uniformly by
/// `rand` (a fresh uniform `u64` per call). Temperature `t > 0`: costs are range-normalised
/// and one is sampled with weight `exp(−(c − c_min) / ((c_max − c_min)·t))`.
/// `None` for no candidates.
pub fn choose(logits: &[f64], temperature: f64, mut rand: impl FnMut() -> u64) -> Option<usize> {
    let (min, max) = range(logits)?;
    if temperature <= 0.0 || min == max {
        return uniform_among(logits.len(), |i| logits[i] == min, rand);
    }
    let span = (max - min) * temperature;
    let weights = logits.iter().map(|&c| (-(c - min) / span).exp());
    let total: f64 = weights.clone().sum();
    let mut x = unit(rand()) * total;
    for (i, w) in weights.enumerate() {
        if x < w {
            return Some(i);
        }
        x -= w;
    }
    Some(logits.len() - 1)
}

/// [`choose`], except that at temperature 0 an exact tie goes to the row with the fewest
/// `cached` blocks (ties of that at random).
///
/// Why, over 1.6.1's uniform pick: a tie at the minimum almost always means a prompt no
/// candidate has cached (a new prefix family) on equally loaded workers. Placing it where the
/// cache is emptiest spreads families evenly over the workers' KV capacity, so fewer of them
/// evict each other; a random pick piles several onto one worker now and then (20 families
/// on 4 workers: the fullest one gets 7 or more in about three draws of four), which then
/// thrash. On the interop prefix workload this is the difference between the routers'
/// cached-token ratios (perf/RESULTS.md). The cost itself is untouched: the choice is always
/// one 1.6.1 could have made.
pub fn choose_roomiest(logits: &[f64], cached: &[u64], temperature: f64, rand: impl FnMut() -> u64) -> Option<usize> {
    let (min, max) = range(logits)?;
    if (temperature > 0.0 && min != max) || logits.len() != cached.len() {
        return choose(logits, temperature, rand);
    }
    let least = (0..logits.len()).filter(|&i| logits[i] == min).map(|i| cached[i]).min()?;
    uniform_among(logits.len(), |i| logits[i] == min && cached[i] == least, rand)
}

/// The smallest and largest logit; `None` for no candidates.
fn range(logits: &[f64]) -> Option<(f64, f64)> {
    (!logits.is_empty())
        .then(|| logits.iter().fold((f64::INFINITY, f64::NEG_INFINITY), |(lo, hi), &c| (lo.min(c), hi.max(c))))
}

/// A uniformly random row among `0..n` for which `pick` holds (reservoir sampling, one
/// `rand` per such row).
fn uniform_among(n: usize, pick: impl Fn(usize) -> bool, mut rand: impl FnMut() -> u64) -> Option<usize> {
    let mut chosen = None;
    let mut seen = 0u64;
    for i in (0..n).filter(|&i| pick(i)) {
        seen += 1;
        if unit(rand()) * (seen as f64) < 1.0 {
            chosen = Some(i);
        }
    }
    chosen
}

/// A uniform `u64` as a uniform `f64` in `[0, 1)`.
fn unit(x: u64) -> f64 {
    (x >> 11) as f64 / (1u64 << 53) as f64
}

/// `dynamo-two-tier-cost-fn`'s pick among `cands` for a prompt of `isl` tokens: when the
/// active requests are unbalanced (the spread over `balance_abs_threshold` and the most over
/// `balance_rel_threshold` × the least), the least loaded; else, when the best device overlap
/// covers more than `cache_threshold` of the prompt's blocks (a partial last block counted),
/// the least loaded of those holding it; else the least loaded. Ties: the first candidate.
pub fn choose_two_tier(
    cands: &[Candidate],
    isl: u64,
    block_size: u32,
    cache_threshold: f64,
    balance_abs_threshold: u64,
    balance_rel_threshold: f64,
) -> Option<usize> {
    let least = |keep: &dyn Fn(&Candidate) -> bool| {
        cands.iter().enumerate().filter(|(_, c)| keep(c)).min_by_key(|(_, c)| c.active_requests).map(|(i, _)| i)
    };
    let min = cands.iter().map(|c| c.active_requests).min()?;
    let max = cands.iter().map(|c| c.active_requests).max()?;
    if u64::from(max - min) > balance_abs_threshold && f64::from(max) > balance_rel_threshold * f64::from(min) {
        return least(&|_| true);
    }
    let best = cands.iter().map(|c| c.overlap_blocks).max()?;
    let blocks = isl.div_ceil(u64::from(block_size.max(1)));
    let ratio = if blocks == 0 { 0.0 } else { f64::from(best) / blocks as f64 };
    if ratio > cache_threshold {
        return least(&|c| c.overlap_blocks == best);
    }
    least(&|_| true)
}

/// `thunderagent`'s worker selection (1.6.1, without its classifier's preferred worker): the
/// candidate with the least booked prefill tokens plus potential decode blocks × block
/// size, ties to the lowest `(worker id, rank)` in `keys`.
pub fn choose_least_load(cands: &[Candidate], keys: &[(u64, u32)], block_size: u32) -> Option<usize> {
    let load = |c: &Candidate| c.active_prefill_tokens + c.decode_blocks * u64::from(block_size);
    (0..cands.len()).min_by_key(|&k| (load(&cands[k]), keys[k]))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(isl: u64, b: u32) -> RequestShape {
        RequestShape { isl, block_size: b, min_active_prefill_tokens: 0 }
    }

    /// The decisions Dynamo 1.6.1 logged (docs/dynamo/kv-routing.md §7.2 table, `kv-routing-decisions.log`).
    #[test]
    fn reproduces_the_logged_decisions() {
        let p = CostParams::default();
        let c = |o: u32, a: u64, d: u64| Candidate {
            overlap_blocks: o,
            active_prefill_tokens: a,
            decode_blocks: d,
            ..Default::default()
        };
        // Block 64: 200 tokens, idle, nothing cached → 200/64 + 3.
        assert_eq!(logit(&p, &shape(200, 64), &c(0, 0, 3)), 6.125);
        // Block 16 runs.
        assert_eq!(logit(&p, &shape(200, 16), &c(0, 0, 12)), 24.5);
        assert_eq!(logit(&p, &shape(200, 16), &c(12, 0, 12)), 12.5, "12/13 overlap");
        assert_eq!(logit(&p, &shape(264, 16), &c(3, 0, 16)), 29.5, "3/17 after eviction");
        assert_eq!(logit(&p, &shape(200, 16), &c(0, 0, 24)), 36.5, "B would have cost this on W1");
        assert_eq!(logit(&p, &shape(264, 16), &c(12, 0, 16)), 20.5, "C: 12 ∪ 16 = 16");
        assert_eq!(logit(&p, &shape(200, 16), &c(12, 0, 12)), 12.5, "E shares all blocks with A");
        assert_eq!(logit(&p, &shape(8000, 16), &c(0, 0, 500)), 1000.0, "P");
        assert_eq!(logit(&p, &shape(100, 16), &c(0, 8000, 506)), 1012.25, "Q while P prefills");
        assert_eq!(logit(&p, &shape(100, 16), &c(0, 0, 506)), 512.25, "R after P's prefill");
    }

    #[test]
    fn decay_untracked_prefill_and_weights() {
        let r = RequestShape { isl: 160, block_size: 16, min_active_prefill_tokens: 0 };
        let busy =
            Candidate { overlap_blocks: 10, active_prefill_tokens: 160, decode_blocks: 10, ..Default::default() };
        let p = CostParams { overlap_credit_decay: 1.0, ..CostParams::default() };
        // excess = 160/16/10 = 1 → credit halves: (20 − 5) + 10.
        assert_eq!(logit(&p, &r, &busy), 25.0);
        let p = CostParams { track_prefill_tokens: false, ..CostParams::default() };
        assert_eq!(logit(&p, &r, &busy), 0.0, "cache-hot decode form: max(0, 10 − 10)");
        let p = CostParams { decode_active_request_weight: 2.0, ..CostParams::default() };
        let c =
            Candidate { host_blocks: 4, disk_blocks: 4, decode_blocks: 10, active_requests: 3, ..Default::default() };
        // (10 − 0.75·4 − 0.25·4) + 10 + 2·3.
        assert_eq!(logit(&p, &r, &c), 22.0);
        assert_eq!(RequestShape { isl: 0, block_size: 16, min_active_prefill_tokens: 0 }.request_blocks(), 1);
    }

    #[test]
    fn choice_minimum_ties_and_temperature() {
        let mut n = 0u64;
        let mut counter = || {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            n
        };
        assert_eq!(choose(&[], 0.0, &mut counter), None);
        assert_eq!(choose(&[3.0, 1.0, 2.0], 0.0, &mut counter), Some(1));
        let mut seen = [0; 3];
        for _ in 0..600 {
            seen[choose(&[1.0, 5.0, 1.0], 0.0, &mut counter).unwrap()] += 1;
        }
        assert!(seen[1] == 0 && seen[0] > 200 && seen[2] > 200, "ties split evenly: {seen:?}");
        let mut seen = [0; 2];
        for _ in 0..2000 {
            seen[choose(&[0.0, 1.0], 1.0, &mut counter).unwrap()] += 1;
        }
        // Weights 1 and e^-1: the cheaper one about 73 % of the time.
        assert!((1300..1620).contains(&seen[0]), "{seen:?}");
    }

    #[test]
    fn ties_go_to_the_emptiest_cache() {
        let mut n = 0u64;
        let mut counter = || {
            n = n.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
            n
        };
        assert_eq!(choose_roomiest(&[], &[], 0.0, &mut counter), None);
        // The cheapest wins whatever its cache holds.
        assert_eq!(choose_roomiest(&[3.0, 1.0, 2.0], &[0, 90, 0], 0.0, &mut counter), Some(1));
        // Among the tied cheapest, the emptiest cache; a fuller cheap row never wins.
        for _ in 0..50 {
            assert_eq!(choose_roomiest(&[1.0, 1.0, 1.0, 0.5], &[10, 3, 7, 40], 0.0, &mut counter), Some(3));
            assert_eq!(choose_roomiest(&[1.0, 1.0, 1.0, 2.0], &[10, 3, 7, 0], 0.0, &mut counter), Some(1));
        }
        // Equal caches too: uniform among them.
        let mut seen = [0; 3];
        for _ in 0..600 {
            seen[choose_roomiest(&[1.0, 1.0, 1.0], &[4, 9, 4], 0.0, &mut counter).unwrap()] += 1;
        }
        assert!(seen[1] == 0 && seen[0] > 200 && seen[2] > 200, "{seen:?}");
        // A positive temperature samples as `choose` does (the cache counts play no part).
        let mut seen = [0; 2];
        for _ in 0..2000 {
            seen[choose_roomiest(&[0.0, 1.0], &[50, 0], 1.0, &mut counter).unwrap()] += 1;
        }
        assert!((1300..1620).contains(&seen[0]), "{seen:?}");
    }

    #[test]
    fn least_load_adds_prefill_tokens_to_decode_blocks_and_ignores_the_cache() {
        let c = |prefill: u64, decode: u64, overlap: u32| Candidate {
            active_prefill_tokens: prefill,
            decode_blocks: decode,
            overlap_blocks: overlap,
            ..Default::default()
        };
        let keys = [(9, 0), (3, 1), (3, 0)];
        // 100 + 2×16 = 132 against 0 + 10×16 = 160 and 150 + 0: the first, cache or not.
        assert_eq!(choose_least_load(&[c(100, 2, 0), c(0, 10, 50), c(150, 0, 0)], &keys, 16), Some(0));
        // Equal loads: the lowest (worker id, rank).
        assert_eq!(choose_least_load(&[c(16, 0, 0), c(0, 1, 0), c(16, 0, 9)], &keys, 16), Some(2));
        assert_eq!(choose_least_load(&[], &[], 16), None);
    }

    #[test]
    fn two_tier_balances_then_follows_the_cache_then_balances() {
        let c = |overlap: u32, active: u32| Candidate {
            overlap_blocks: overlap,
            active_requests: active,
            ..Candidate::default()
        };
        let pick = |cands: &[Candidate], isl: u64| choose_two_tier(cands, isl, 16, 0.5, 32, 1.1);
        // Balanced load, the best overlap covers 6 of 8 blocks: the least loaded holding it.
        assert_eq!(pick(&[c(0, 0), c(6, 5), c(6, 3)], 128), Some(2));
        // Half or less (4 of 8, and 4 of 9 with a partial last block): the least loaded.
        assert_eq!(pick(&[c(0, 1), c(4, 0)], 128), Some(1));
        assert_eq!(pick(&[c(0, 0), c(4, 2)], 129), Some(0));
        // Unbalanced past both thresholds (40 > 32 and 41 > 1.1 × 1): the least loaded, cache or not.
        assert_eq!(pick(&[c(8, 41), c(0, 1)], 128), Some(1));
        // A spread over 32 but within 1.1×: the cache tier decides.
        assert_eq!(pick(&[c(8, 400), c(0, 366)], 128), Some(0));
        // Ties: the first candidate.
        assert_eq!(pick(&[c(0, 2), c(0, 2)], 128), Some(0));
        assert_eq!(pick(&[], 128), None);
    }
}
