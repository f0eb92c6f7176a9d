//! Arrival times of the open loop, and the small seeded generator everything random in the
//! bench draws from (prompt words, families, arrivals), so a run is reproducible by `--seed`.
//!
//! A Poisson process of rate `R` has independent exponential gaps with mean `1/R`: each gap
//! is `-ln(1 - u) / R` for `u` uniform in `[0, 1)`. Arrivals are offsets from the start of
//! the measured phase; a request is due at its offset whether or not earlier ones finished
//! (that is what makes the loop open).

use std::time::Duration;

/// splitmix64: tiny, fast, and good enough for load shapes and word choice.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// A generator for sub-stream `n` of `seed` (one per prompt, per family, …).
    pub fn stream(seed: u64, n: u64) -> Rng {
        let mut r = Rng(seed ^ n.wrapping_mul(0xD1B5_4A32_D192_ED03));
        r.next_u64();
        r
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// Uniform in `[0, 1)` (53 random bits).
    pub fn next_f64(&mut self) -> f64 {
        (self.next_u64() >> 11) as f64 / (1u64 << 53) as f64
    }

    /// Uniform in `0..n` (`n > 0`).
    pub fn below(&mut self, n: usize) -> usize {
        (self.next_u64() % n as u64) as usize
    }
}

/// Poisson arrivals at `rate` per second.
#[derive(Clone, Debug)]
pub struct Poisson {
    rng: Rng,
    rate: f64,
    at: Duration,
}

impl Poisson {
    /// `rate` must be finite and positive (the CLI checks it).
    pub fn new(rate: f64, seed: u64) -> Poisson {
        Poisson { rng: Rng::stream(seed, u64::MAX), rate, at: Duration::ZERO }
    }

    /// The offset of the next arrival from the start.
    pub fn next_arrival(&mut self) -> Duration {
        let gap = -(1.0 - self.rng.next_f64()).ln() / self.rate;
        self.at += Duration::from_secs_f64(gap);
        self.at
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn poisson_mean_rate_and_spread_for_a_fixed_seed() {
        for (rate, seed) in [(50.0, 1u64), (1000.0, 7), (3.5, 42)] {
            let mut p = Poisson::new(rate, seed);
            let n = 20_000;
            let mut gaps = Vec::with_capacity(n);
            let mut last = Duration::ZERO;
            for _ in 0..n {
                let t = p.next_arrival();
                assert!(t >= last, "arrivals go forward");
                gaps.push((t - last).as_secs_f64());
                last = t;
            }
            let measured = n as f64 / last.as_secs_f64();
            assert!((measured / rate - 1.0).abs() < 0.03, "rate {rate}: measured {measured}");
            // Exponential gaps: standard deviation equals the mean (coefficient of variation 1),
            // which tells Poisson arrivals from evenly spaced ones.
            let mean = gaps.iter().sum::<f64>() / n as f64;
            let var = gaps.iter().map(|g| (g - mean).powi(2)).sum::<f64>() / n as f64;
            let cv = var.sqrt() / mean;
            assert!((cv - 1.0).abs() < 0.05, "rate {rate}: coefficient of variation {cv}");
        }
    }

    #[test]
    fn same_seed_same_schedule_other_seed_other_schedule() {
        let take = |seed| {
            let mut p = Poisson::new(10.0, seed);
            (0..100).map(|_| p.next_arrival()).collect::<Vec<_>>()
        };
        assert_eq!(take(3), take(3));
        assert_ne!(take(3), take(4));
    }

    #[test]
    fn rng_streams_differ_and_below_stays_in_range() {
        let a: Vec<u64> = (0..4).map(|i| Rng::stream(9, i).next_u64()).collect();
        let mut b = a.clone();
        b.sort_unstable();
        b.dedup();
        assert_eq!(a.len(), b.len());
        let mut r = Rng::new(5);
        assert!((0..1000).all(|_| r.below(7) < 7));
        assert!((0..1000).map(|_| r.next_f64()).all(|x| (0.0..1.0).contains(&x)));
    }
}
