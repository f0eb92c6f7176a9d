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
//! A named worker pins the request in every mode, as in Dynamo. "In flight" is counted by
//! this shard's router (incremented on dispatch, decremented when the answer ends): each shard
//! is one router, as each Dynamo frontend process is one — no counter is shared between cores.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;

use crate::error::{Error, Kind};
use crate::registry::Worker;

/// The router modes built so far (`kv` is not one of them yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    RoundRobin,
    Random,
    PowerOfTwo,
    LeastLoaded,
    DeviceAwareWeighted,
    Direct,
}

impl Mode {
    /// The mode of a `--router-mode` value, if built.
    pub fn parse(s: &str) -> Option<Mode> {
        Some(match s {
            "round-robin" => Mode::RoundRobin,
            "random" => Mode::Random,
            "power-of-two" => Mode::PowerOfTwo,
            "least-loaded" => Mode::LeastLoaded,
            "device-aware-weighted" => Mode::DeviceAwareWeighted,
            "direct" => Mode::Direct,
            _ => return None,
        })
    }
}

/// One shard's router state.
pub struct Router {
    mode: Mode,
    counter: Cell<usize>,
    rng: Cell<u64>,
    in_flight: Rc<RefCell<HashMap<u64, u32>>>,
    cpu_ratio: f64,
}

/// Counts a request against its worker until dropped.
pub struct InFlight {
    table: Rc<RefCell<HashMap<u64, u32>>>,
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
        Router {
            mode,
            counter: Cell::new(0),
            rng: Cell::new(seed | 1),
            in_flight: Rc::new(RefCell::new(HashMap::new())),
            cpu_ratio,
        }
    }

    fn random(&self, n: usize) -> usize {
        // xorshift64*: plenty for spreading load, no shared state.
        let mut x = self.rng.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.rng.set(x);
        (x.wrapping_mul(0x2545_F491_4F6C_DD1D) >> 33) as usize % n
    }

    /// Requests in flight to `id` from this shard.
    pub fn load(&self, id: u64) -> u32 {
        self.in_flight.borrow().get(&id).copied().unwrap_or(0)
    }

    fn least_loaded<'a>(&self, workers: impl Iterator<Item = (usize, &'a Worker)>) -> Option<usize> {
        let mut best: Option<(usize, u32)> = None;
        for (i, w) in workers {
            let l = self.load(w.instance_id);
            if best.is_none_or(|(_, b)| l < b) {
                best = Some((i, l));
            }
        }
        best.map(|(i, _)| i)
    }

    /// Choose a worker index; `pinned` is the instance the request names, if any.
    pub fn pick(&self, workers: &[Worker], pinned: Option<u64>) -> Result<usize, Error> {
        if workers.is_empty() {
            return Err(Error::new(Kind::ServiceUnavailable, "no worker is serving this model"));
        }
        if let Some(id) = pinned {
            return workers.iter().position(|w| w.instance_id == id).ok_or_else(|| {
                Error::new(Kind::BadRequest, format!("worker instance {id} does not serve this model"))
            });
        }
        let n = workers.len();
        Ok(match self.mode {
            Mode::RoundRobin => {
                let c = self.counter.get();
                self.counter.set(c.wrapping_add(1));
                c % n
            }
            Mode::Random => self.random(n),
            Mode::PowerOfTwo if n == 1 => 0,
            Mode::PowerOfTwo => {
                let a = self.random(n);
                let mut b = self.random(n - 1);
                if b >= a {
                    b += 1;
                }
                if self.load(workers[b].instance_id) < self.load(workers[a].instance_id) {
                    b
                } else {
                    a
                }
            }
            Mode::LeastLoaded => self.least_loaded(workers.iter().enumerate()).unwrap_or(0),
            Mode::DeviceAwareWeighted => {
                let (cpu, gpu): (Vec<_>, Vec<_>) = workers.iter().enumerate().partition(|(_, w)| w.cpu);
                let cpu_load: u32 = cpu.iter().map(|(_, w)| self.load(w.instance_id)).sum();
                let gpu_load: u32 = gpu.iter().map(|(_, w)| self.load(w.instance_id)).sum();
                let use_cpu = gpu.is_empty()
                    || (!cpu.is_empty()
                        && f64::from(cpu_load)
                            < f64::from(gpu_load) * cpu.len() as f64 / (self.cpu_ratio * gpu.len() as f64));
                let group = if use_cpu { cpu } else { gpu };
                self.least_loaded(group.into_iter()).unwrap_or(0)
            }
            Mode::Direct => {
                return Err(Error::new(
                    Kind::BadRequest,
                    "router mode direct: name the worker with the x-dynamo-worker-instance-id header or nvext.backend_instance_id",
                ))
            }
        })
    }

    /// Count a dispatched request against worker `id` until the returned guard drops.
    pub fn dispatch(&self, id: u64) -> InFlight {
        *self.in_flight.borrow_mut().entry(id).or_insert(0) += 1;
        InFlight { table: self.in_flight.clone(), id }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn workers(n: usize, cpu: &[usize]) -> Vec<Worker> {
        (0..n)
            .map(|i| Worker {
                addr: "127.0.0.1:1".parse().unwrap(),
                path: String::new(),
                codec: crate::plane::payload::Codec::Msgpack,
                instance_id: 100 + i as u64,
                cpu: cpu.contains(&i),
            })
            .collect()
    }

    #[test]
    fn round_robin_random_and_pinning() {
        let w = workers(3, &[]);
        let r = Router::new(Mode::RoundRobin, 7);
        let picks: Vec<usize> = (0..6).map(|_| r.pick(&w, None).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(r.pick(&w, Some(102)).unwrap(), 2);
        assert_eq!(r.pick(&w, Some(999)).unwrap_err().status(), 400);
        let r = Router::new(Mode::Random, 7);
        let mut seen = [0; 3];
        for _ in 0..300 {
            seen[r.pick(&w, None).unwrap()] += 1;
        }
        assert!(seen.iter().all(|&c| c > 60), "{seen:?}");
        assert_eq!(Router::new(Mode::Direct, 1).pick(&w, None).unwrap_err().status(), 400);
    }

    #[test]
    fn load_aware_modes_follow_in_flight_counts() {
        let w = workers(3, &[]);
        let r = Router::new(Mode::LeastLoaded, 7);
        let _a = r.dispatch(100);
        let b = r.dispatch(101);
        assert_eq!(r.pick(&w, None).unwrap(), 2);
        let _c = r.dispatch(102);
        let _d = r.dispatch(102);
        drop(b);
        assert_eq!(r.pick(&w, None).unwrap(), 1, "the guard's drop released worker 101");
        let r = Router::new(Mode::PowerOfTwo, 9);
        let _busy: Vec<_> = (0..5).map(|_| r.dispatch(100)).collect();
        for _ in 0..50 {
            assert_ne!(r.pick(&w, None).unwrap(), 0, "of any two, the idle one wins");
        }
    }

    #[test]
    fn device_aware_weighted_keeps_cpu_workers_light() {
        let w = workers(3, &[2]);
        let r = Router::new(Mode::DeviceAwareWeighted, 3);
        // No load anywhere: 0 < 0 is false, so a GPU worker is chosen.
        assert!(r.pick(&w, None).unwrap() < 2);
        // GPU in-flight 16 over 2 workers, ratio 8: CPU threshold 16·1/(8·2) = 1.
        let _g: Vec<_> = (0..8).map(|_| r.dispatch(100)).chain((0..8).map(|_| r.dispatch(101))).collect();
        assert_eq!(r.pick(&w, None).unwrap(), 2);
        let _c = r.dispatch(102);
        assert!(r.pick(&w, None).unwrap() < 2, "the CPU group reached its share");
    }
}
