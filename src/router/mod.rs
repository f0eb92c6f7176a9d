//! Worker selection for the non-KV router modes, per shard.
//!
//! | mode | choice |
//! |---|---|
//! | `round-robin` (default) | `workers[counter mod n]`, counter per shard |
//! | `random` | uniform |
//! | `power-of-two` | two distinct random workers, the one with fewer requests in flight (tie → first) |
//! | `least-loaded` | the worker with the fewest requests in flight (first on ties) |
//! | `device-aware-weighted` | CPU workers are chosen while their in-flight count is below `non_cpu_in_flight · cpu_count / (ratio · non_cpu_count)` (ratio `DYN_ENCODER_CUDA_TO_CPU_RATIO`, default 8); least-loaded inside the chosen group |
//! | `direct` | the request names the worker (`x-dynamo-worker-instance-id` / `x-worker-instance-id` header, or `nvext.backend_instance_id`); without a name, an error |
//!
//! A named worker pins the request in every mode, as in Dynamo. A worker that failed on the
//! request path (refused connect, lost connection, stream cut before the first token, no
//! call-back) is *inhibited* — skipped by every mode — for `DYN_RUNTIME_INHIBITED_DURATION_SECS`
//! (default 5 s), as 1.6.1 does (docs/dynamo/request-plane.md §9.1); the request is retried on another worker.
//! 1.6.1 inhibits a worker for the whole process, so an inhibition is also told to the other
//! shards (the hook set with [`Router::on_inhibit`]; they apply it with [`Router::inhibit_here`]). Only
//! a pinned request still goes to an inhibited worker (it asked for that one). When every
//! worker is inhibited or already tried, [`Router::pick`] returns `None` and the caller
//! answers 503. "In flight" is counted by
//! this shard's router (incremented on dispatch, decremented when the answer ends): each shard
//! is one router, as each Dynamo frontend process is one — no counter is shared between cores.

pub mod kv;
pub mod session;
pub mod thunder;

use crate::util::FastMap;
use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use smallvec::SmallVec;

use crate::error::{Error, Kind};
use crate::registry::Worker;

pub use crate::config::settings::RouterMode as Mode;

/// One shard's router state.
pub struct Router {
    mode: Mode,
    counter: Cell<usize>,
    rng: Cell<u64>,
    in_flight: Rc<RefCell<FastMap<u64, u32>>>,
    cpu_ratio: f64,
    /// Inhibited workers and until when.
    inhibited: RefCell<FastMap<u64, Instant>>,
    inhibit_for: Duration,
    /// Tells the other shards of an inhibition (set by the shard).
    tell: Option<Tell<(u64, Instant)>>,
}

/// A hook that passes a change made on one shard to the others (set by the shard).
pub type Tell<T> = Box<dyn Fn(T)>;

/// `DYN_RUNTIME_INHIBITED_DURATION_SECS`' default.
pub const DEFAULT_INHIBIT: Duration = Duration::from_secs(5);

/// Counts a request against its worker until dropped.
pub struct InFlight {
    table: Rc<RefCell<FastMap<u64, u32>>>,
    id: u64,
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut t = self.table.borrow_mut();
        if let Some(n) = t.get_mut(&self.id) {
            *n = n.saturating_sub(1);
            if *n == 0 {
                t.remove(&self.id);
            }
        }
    }
}

impl Router {
    pub fn new(mode: Mode, seed: u64) -> Router {
        let cpu_ratio = std::env::var("DYN_ENCODER_CUDA_TO_CPU_RATIO")
            .ok()
            .and_then(|v| v.parse::<f64>().ok())
            .filter(|r| *r > 0.0)
            .unwrap_or(8.0);
        let inhibit_for = std::env::var("DYN_RUNTIME_INHIBITED_DURATION_SECS")
            .ok()
            .and_then(|v| v.trim().parse::<f64>().ok())
            .filter(|s| s.is_finite() && *s >= 0.0)
            .map_or(DEFAULT_INHIBIT, Duration::from_secs_f64);
        Router {
            inhibited: RefCell::new(FastMap::default()),
            inhibit_for,
            tell: None,
            mode,
            counter: Cell::new(0),
            rng: Cell::new(seed | 1),
            in_flight: Rc::new(RefCell::new(FastMap::default())),
            cpu_ratio,
        }
    }

    fn random(&self, n: usize) -> usize {
        // xorshift64*: plenty for spreading load, no shared state.
        (self.next_u64() >> 33) as usize % n
    }

    /// Requests in flight to `id` from this shard.
    pub fn load(&self, id: u64) -> u32 {
        self.in_flight.borrow().get(&id).copied().unwrap_or(0)
    }

    fn least_loaded(&self, workers: &[Worker], cands: impl Iterator<Item = usize>) -> Option<usize> {
        let mut best: Option<(usize, u32)> = None;
        for i in cands {
            let l = self.load(workers[i].instance_id);
            if best.is_none_or(|(_, b)| l < b) {
                best = Some((i, l));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Every inhibition made here is also passed to `tell` (for the other shards).
    pub fn on_inhibit(mut self, tell: Tell<(u64, Instant)>) -> Router {
        self.tell = Some(tell);
        self
    }

    /// Skip worker `id` for the inhibition period (it just failed on the request path), on
    /// this shard and, through the hook, on the others.
    pub fn inhibit(&self, id: u64) {
        let until = Instant::now() + self.inhibit_for;
        self.inhibit_here(id, until);
        if let Some(tell) = &self.tell {
            tell((id, until));
        }
    }

    /// Skip worker `id` until `until` on this shard only (another shard saw it fail).
    pub fn inhibit_here(&self, id: u64, until: Instant) {
        let mut t = self.inhibited.borrow_mut();
        let e = t.entry(id).or_insert(until);
        *e = (*e).max(until);
    }

    /// Whether worker `id` is inhibited now (expired entries are dropped).
    pub fn is_inhibited(&self, id: u64) -> bool {
        let mut t = self.inhibited.borrow_mut();
        match t.get(&id) {
            Some(until) if *until > Instant::now() => true,
            Some(_) => {
                t.remove(&id);
                false
            }
            None => false,
        }
    }

    /// This shard's mode.
    pub fn mode(&self) -> Mode {
        self.mode
    }

    /// A fresh pseudo-random `u64` (shard-local generator).
    pub fn next_u64(&self) -> u64 {
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// Indices of the workers a request may go to now: not inhibited, not already `tried`.
    pub fn usable(&self, workers: &[Worker], tried: &[u64]) -> SmallVec<[usize; 16]> {
        if tried.is_empty() && self.inhibited.borrow().is_empty() {
            return (0..workers.len()).collect();
        }
        (0..workers.len())
            .filter(|&i| {
                let id = workers[i].instance_id;
                !tried.contains(&id) && !self.is_inhibited(id)
            })
            .collect()
    }

    /// Choose a worker index for a request; `pinned` is the instance the request names, if
    /// any, and `tried` the workers this request already failed on. `Ok(None)`: no worker
    /// is usable now (all inhibited or tried).
    pub fn pick(&self, workers: &[Worker], pinned: Option<u64>, tried: &[u64]) -> Result<Option<usize>, Error> {
        if let Some(id) = pinned {
            return match workers.iter().position(|w| w.instance_id == id) {
                Some(_) if tried.contains(&id) => Ok(None),
                Some(i) => Ok(Some(i)),
                None => Err(Error::new(Kind::BadRequest, format!("worker instance {id} does not serve this model"))),
            };
        }
        if self.mode == Mode::Direct {
            return Err(Error::new(
                Kind::BadRequest,
                "router mode direct: name the worker with the x-dynamo-worker-instance-id header or nvext.backend_instance_id",
            ));
        }
        let cands = self.usable(workers, tried);
        let n = cands.len();
        if n == 0 {
            return Ok(None);
        }
        Ok(Some(match self.mode {
            Mode::RoundRobin | Mode::Kv => {
                let c = self.counter.get();
                self.counter.set(c.wrapping_add(1));
                cands[c % n]
            }
            Mode::Random => cands[self.random(n)],
            Mode::PowerOfTwo if n == 1 => cands[0],
            Mode::PowerOfTwo => {
                let a = self.random(n);
                let mut b = self.random(n - 1);
                if b >= a {
                    b += 1;
                }
                let (a, b) = (cands[a], cands[b]);
                if self.load(workers[b].instance_id) < self.load(workers[a].instance_id) {
                    b
                } else {
                    a
                }
            }
            Mode::LeastLoaded => self.least_loaded(workers, cands.iter().copied()).unwrap_or(cands[0]),
            Mode::DeviceAwareWeighted => {
                let (cpu, gpu): (SmallVec<[usize; 16]>, SmallVec<[usize; 16]>) =
                    cands.iter().copied().partition(|&i| workers[i].cpu);
                let load = |g: &[usize]| -> u32 { g.iter().map(|&i| self.load(workers[i].instance_id)).sum() };
                let use_cpu = gpu.is_empty()
                    || (!cpu.is_empty()
                        && f64::from(load(&cpu))
                            < f64::from(load(&gpu)) * cpu.len() as f64 / (self.cpu_ratio * gpu.len() as f64));
                let group = if use_cpu { cpu } else { gpu };
                self.least_loaded(workers, group.into_iter()).unwrap_or(cands[0])
            }
            Mode::Direct => unreachable!("handled above"),
        }))
    }

    /// Count a dispatched request against worker `id` until the returned guard drops.
    pub fn dispatch(&self, id: u64) -> InFlight {
        *self.in_flight.borrow_mut().entry(id).or_insert(0) += 1;
        InFlight { table: self.in_flight.clone(), id }
    }
}

/// `n` workers with instance ids 100, 101, …; the indices in `cpu` run on CPU.
#[cfg(test)]
pub(crate) fn test_workers(n: usize, cpu: &[usize]) -> Vec<Worker> {
    (0..n)
        .map(|i| Worker {
            addr: "127.0.0.1:1".parse().unwrap(),
            path: String::new(),
            nats_subject: None,
            codec: crate::plane::payload::Codec::Msgpack,
            instance_id: 100 + i as u64,
            cpu: cpu.contains(&i),
            dp_start: 0,
            dp_size: 1,
            bootstrap: None,
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize, cpu: &[usize]) -> Vec<Worker> {
        test_workers(n, cpu)
    }

    #[test]
    fn round_robin_random_and_pinning() {
        let w = workers(3, &[]);
        let r = Router::new(Mode::RoundRobin, 7);
        let picks: Vec<usize> = (0..6).map(|_| r.pick(&w, None, &[]).unwrap().unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(r.pick(&w, Some(102), &[]).unwrap().unwrap(), 2);
        assert_eq!(r.pick(&w, Some(999), &[]).unwrap_err().status(), 400);
        let r = Router::new(Mode::Random, 7);
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[r.pick(&w, None, &[]).unwrap().unwrap()] += 1;
        }
        assert!(seen.iter().all(|&c| c > 60), "{seen:?}");
        assert_eq!(Router::new(Mode::Direct, 1).pick(&w, None, &[]).unwrap_err().status(), 400);
    }

    #[test]
    fn load_aware_modes_follow_in_flight_counts() {
        let w = workers(3, &[]);
        let r = Router::new(Mode::LeastLoaded, 7);
        let _a = r.dispatch(100);
        let b = r.dispatch(101);
        assert_eq!(r.pick(&w, None, &[]).unwrap().unwrap(), 2);
        let _c = r.dispatch(102);
        let _d = r.dispatch(102);
        drop(b);
        assert_eq!(r.pick(&w, None, &[]).unwrap().unwrap(), 1, "the guard's drop released worker 101");
        let r = Router::new(Mode::PowerOfTwo, 9);
        let _busy: Vec<_> = (0..5).map(|_| r.dispatch(100)).collect();
        for _ in 0..50 {
            assert_ne!(r.pick(&w, None, &[]).unwrap().unwrap(), 0, "of any two, the idle one wins");
        }
    }

    #[test]
    fn inhibited_and_tried_workers_are_skipped() {
        let w = workers(3, &[]);
        for mode in [Mode::RoundRobin, Mode::Random, Mode::PowerOfTwo, Mode::LeastLoaded, Mode::DeviceAwareWeighted] {
            let r = Router::new(mode, 5);
            r.inhibit(101);
            for _ in 0..30 {
                let i = r.pick(&w, None, &[100]).unwrap().unwrap();
                assert_eq!(w[i].instance_id, 102, "{mode:?}");
            }
            assert_eq!(r.pick(&w, None, &[100, 102]).unwrap(), None, "{mode:?}: nothing usable");
            // A pinned request still reaches an inhibited worker, once.
            assert_eq!(r.pick(&w, Some(101), &[]).unwrap(), Some(1));
            assert_eq!(r.pick(&w, Some(101), &[101]).unwrap(), None);
        }
        let mut r = Router::new(Mode::RoundRobin, 5);
        r.inhibit_for = Duration::ZERO;
        r.inhibit(100);
        assert!(!r.is_inhibited(100), "the inhibition expires");
    }

    #[test]
    fn an_inhibition_is_told_to_the_other_shards_and_applied_there() {
        let told = Rc::new(RefCell::new(Vec::new()));
        let sink = told.clone();
        let here = Router::new(Mode::RoundRobin, 5).on_inhibit(Box::new(move |told| sink.borrow_mut().push(told)));
        here.inhibit(101);
        assert!(here.is_inhibited(101));
        let (id, until) = told.borrow()[0];
        assert_eq!(id, 101);
        let there = Router::new(Mode::RoundRobin, 6);
        there.inhibit_here(id, until);
        let w = workers(2, &[]);
        for _ in 0..10 {
            assert_eq!(there.pick(&w, None, &[]).unwrap(), Some(0), "the other shard skips it too");
        }
        there.inhibit_here(id, Instant::now());
        assert!(there.is_inhibited(101), "an earlier deadline never shortens one");
    }

    #[test]
    fn device_aware_weighted_keeps_cpu_workers_light() {
        let w = workers(3, &[2]);
        let r = Router::new(Mode::DeviceAwareWeighted, 3);
        // No load anywhere: 0 < 0 is false, so a GPU worker is chosen.
        assert!(r.pick(&w, None, &[]).unwrap().unwrap() < 2);
        // GPU in-flight 16 over 2 workers, ratio 8: CPU threshold 16·1/(8·2) = 1.
        let _g: Vec<_> = (0..8).map(|_| r.dispatch(100)).chain((0..8).map(|_| r.dispatch(101))).collect();
        assert_eq!(r.pick(&w, None, &[]).unwrap().unwrap(), 2);
        let _c = r.dispatch(102);
        assert!(r.pick(&w, None, &[]).unwrap().unwrap() < 2, "the CPU group reached its share");
    }
}
