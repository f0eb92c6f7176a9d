//! Admission through the kv router's queue ([`super::queue`]) on one shard: a request's
//! class from its model's profile, the header's class name and its uncached prompt length;
//! the class's limits; the wait while its class is busy or others wait first.
//!
//! Runs on a shard thread, before the worker is chosen.

use std::cell::RefCell;
use std::rc::Rc;
use std::sync::Arc;

use super::queue::{ClassBook, Partition, Policy, PolicyClass, Refusal, RECHECK};
use super::select::KvSelector;
use crate::config::classes::ClassProfiles;
use crate::registry::{CardLimits, Pool, Worker};

/// A shard's queues: the profiles, the process's class counts, and this shard's partitions
/// (made on first use per model and pool).
#[derive(Debug, Default)]
pub struct Queues {
    pub profiles: ClassProfiles,
    pub book: Arc<ClassBook>,
    partitions: RefCell<Vec<(String, Pool, Rc<Partition>)>>,
}

impl Queues {
    pub fn new(profiles: ClassProfiles, book: Arc<ClassBook>) -> Queues {
        Queues { profiles, book, partitions: RefCell::default() }
    }

    fn partition(&self, model: &str, pool: Pool) -> Rc<Partition> {
        let mut parts = self.partitions.borrow_mut();
        if let Some((.., p)) = parts.iter().find(|(m, p, _)| m == model && *p == pool) {
            return p.clone();
        }
        let profile = self.profiles.for_model(model).clone();
        let p = Rc::new(Partition::new(profile, &self.book, model, pool));
        parts.push((model.to_string(), pool, p.clone()));
        p
    }

    /// Requests parked on this shard now, and ever.
    pub fn counts(&self) -> (u64, u64) {
        let parts = self.partitions.borrow();
        parts.iter().fold((0, 0), |(n, t), (.., p)| (n + p.len() as u64, t + p.parked_total.get()))
    }
}

/// Who a request is, for its class.
#[derive(Clone, Copy, Debug)]
pub struct Asking<'a> {
    pub model: &'a str,
    pub pool: Pool,
    /// The class (or family) its `x-dynamo-meta-policy-class` header names.
    pub class: Option<&'a str>,
}

impl KvSelector {
    /// Admits a request of `tokens` for `workers[i]`, `i` in `usable`: at once when nothing
    /// waits and its class is not busy; refused when its class's queue is at a limit;
    /// otherwise parked until deficit round robin lets it go.
    #[allow(clippy::too_many_arguments)]
    pub async fn wait_for_room(
        &self,
        asking: Asking<'_>,
        workers: &[Worker],
        usable: &[usize],
        limits: &CardLimits,
        tokens: &[u32],
        rand: impl FnMut() -> u64,
    ) -> Result<(), Refusal> {
        let q = self.queues();
        let profile = q.profiles.for_model(asking.model);
        if profile.synthetic && !profile.queues() {
            return Ok(());
        }
        let isl = tokens.len() as u64;
        // The cached length: for the bucket when the profile has several, else only once the
        // request waits (its cost and the waiting totals).
        let mut rand = rand;
        let mut best_cached = || self.best_cached(asking.pool, workers, usable, tokens, limits, &mut rand).min(isl);
        let early = profile.buckets_by_cache().then(&mut best_cached);
        let class = profile.class_of(asking.class, isl - early.unwrap_or(0));
        let part = q.partition(asking.model, asking.pool);
        part.received(class);
        let busy = |c: &PolicyClass| c.queues() && self.all_prefill_busy(c, workers, usable, limits);
        let c = &profile.classes[class];
        // A request goes at once when its class is not busy and nothing waits — or, for a
        // class with a limit of 0 (it never waits), whatever waits in other classes; else it
        // waits or is refused (1.6.1's admission order).
        let never_queues = c.limits.contains(&Some(0));
        if !busy(c) && (never_queues || part.is_empty()) {
            return Ok(());
        }
        if let Some(r) = part.refusal(class, workers.len() as u64) {
            return Err(r);
        }
        let cached = match early {
            Some(c) => c,
            None if !profile.synthetic || c.policy == Policy::Wspt => best_cached(),
            None => 0,
        };
        let ticket = part.park(class, isl, cached);
        loop {
            part.release_next(&|c| !busy(c));
            if ticket.released() {
                return Ok(());
            }
            monoio::time::sleep(RECHECK).await;
        }
    }

    /// Whether every usable worker rank has more booked prefill tokens than `class` allows
    /// (false without usable workers).
    fn all_prefill_busy(&self, class: &PolicyClass, workers: &[Worker], usable: &[usize], limits: &CardLimits) -> bool {
        if usable.is_empty() {
            return false;
        }
        self.bring_up_to_date();
        let table = self.bookings.table.borrow();
        usable.iter().all(|&i| {
            let w = &workers[i];
            w.dp_ranks().all(|r| {
                let owner = super::index::Owner { worker_id: w.instance_id, dp_rank: r };
                let active = table.get(owner).map_or(0, |a| a.prefill_tokens);
                class.busy(active, limits.max_num_batched_tokens)
            })
        })
    }
}
