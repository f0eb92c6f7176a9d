//! The kv router's queue (docs/dynamo/kv-routing.md §7.7, docs/dynamo/router-policy-config.md
//! §policy classes): each model and worker pool has a *partition* of policy classes
//! ([`crate::config::classes`]); a request joins its class's queue while every usable worker
//! is busy *for that class* (booked prefill tokens over the class's threshold), or while
//! others wait before it. Within a class, requests leave in arrival order (`fcfs`) or
//! shortest uncached prompt first (`wspt`: weighted shortest processing time with equal
//! weights; ties in arrival order); between classes by deficit round robin, each class's
//! quantum and each request's cost counted in uncached prompt tokens (at least 1) — as
//! Dynamo 1.6.1 shares them. Without `--router-policy-config` classes, the one class
//! `--router-queue-threshold` / `--router-queue-policy` make.
//!
//! What may wait is bounded per class by the file's per-worker limits (times the workers of
//! the model's pool): a request that finds its class at a limit is refused
//! ([`Refusal`], 529 with 1.6.1's `details`). Those totals and the class counters are
//! process-wide ([`ClassBook`], atomics a shard reaches once per partition); the queues
//! themselves are per shard and every shard reads the process's bookings (see
//! [`super::active`]), so a shard parks while the whole process keeps the workers busy. A
//! parked request looks again every [`RECHECK`] (bookings freed on other shards arrive
//! through the ring and are only seen by a drain); one request is let go at a time, and the
//! next only once it has left (booked its worker); dropping a [`Ticket`] (the client went
//! away) leaves the queue. The overlap that routes is computed when the request leaves, so
//! a long wait routes on the cache as it is then.
//!
//! Runs on a shard thread.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::sync::{Arc, Mutex};
use std::time::Duration;

pub use crate::config::classes::{LimitKind, PolicyClass, PolicyProfile};
pub use crate::config::settings::Policy;
use crate::registry::Pool;

/// How often a parked request looks again.
pub const RECHECK: Duration = Duration::from_millis(2);

/// Process-wide counts of one class of one model's pool.
#[derive(Debug, Default)]
pub struct ClassCounts {
    /// Waiting now: requests, their prompt tokens, their cached-token estimates.
    pub pending: [AtomicU64; 3],
    /// Requests classified into the class.
    pub received: AtomicU64,
    /// Requests refused at each limit ([`LimitKind::ALL`] order).
    pub refused: [AtomicU64; 3],
}

pub use crate::metrics::kv::ClassRow;

/// The counts of every (model, pool, class) any shard has seen, shared by the shards; a
/// shard takes its entries once, when it first queues for that model and pool.
#[derive(Debug, Default)]
pub struct ClassBook {
    entries: Mutex<Vec<BookEntry>>,
}

/// (model, pool, class name, counts).
type BookEntry = (String, Pool, String, Arc<ClassCounts>);

impl ClassBook {
    fn counts(&self, model: &str, pool: Pool, profile: &PolicyProfile) -> Vec<Arc<ClassCounts>> {
        let mut entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let mut out = Vec::with_capacity(profile.classes.len());
        for c in &profile.classes {
            match entries.iter().find(|(m, p, n, _)| m == model && *p == pool && *n == c.name) {
                Some((.., counts)) => out.push(counts.clone()),
                None => {
                    let counts = Arc::new(ClassCounts::default());
                    entries.push((model.to_string(), pool, c.name.clone(), counts.clone()));
                    out.push(counts);
                }
            }
        }
        out
    }

    /// Every class's counts now (for `/metrics`).
    pub fn rows(&self) -> Vec<ClassRow> {
        let entries = self.entries.lock().unwrap_or_else(|e| e.into_inner());
        let read = |a: &[AtomicU64; 3]| [a[0].load(Relaxed), a[1].load(Relaxed), a[2].load(Relaxed)];
        entries
            .iter()
            .map(|(model, pool, class, c)| ClassRow {
                model: model.clone(),
                pool: *pool,
                class: class.clone(),
                pending: read(&c.pending),
                received: c.received.load(Relaxed),
                refused: read(&c.refused),
            })
            .collect()
    }
}

/// A request its class's limit refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refusal {
    pub class: String,
    pub kind: LimitKind,
    pub current: u64,
    pub limit: u64,
}

impl Refusal {
    /// 1.6.1's message.
    pub fn message(&self) -> String {
        format!(
            "router policy class {:?} queue {} limit reached (current={}, limit={})",
            self.class,
            self.kind.name(),
            self.current,
            self.limit
        )
    }

    /// 1.6.1's `details` object.
    pub fn details(&self) -> serde_json::Value {
        serde_json::json!({
            "policy_class": self.class,
            "limit_kind": self.kind.name(),
            "current": self.current,
            "limit": self.limit,
        })
    }
}

#[derive(Debug)]
struct Entry {
    id: u64,
    /// Uncached prompt tokens, at least 1: the request's cost and processing time.
    cost: u64,
    isl: u64,
    cached: u64,
    released: bool,
}

#[derive(Debug, Default)]
struct ClassQueue {
    entries: Vec<Entry>,
    deficit: u64,
}

/// One model's pool: its classes' queues on this shard.
#[derive(Debug)]
pub struct Partition {
    pub profile: Arc<PolicyProfile>,
    counts: Vec<Arc<ClassCounts>>,
    classes: RefCell<Vec<ClassQueue>>,
    cursor: Cell<usize>,
    carry: Cell<Option<usize>>,
    next: Cell<u64>,
    /// Requests ever parked on this shard.
    pub parked_total: Cell<u64>,
}

/// A parked request's place; leaves the queue when dropped.
pub struct Ticket {
    part: Rc<Partition>,
    class: usize,
    id: u64,
}

impl Partition {
    pub fn new(profile: Arc<PolicyProfile>, book: &ClassBook, model: &str, pool: Pool) -> Partition {
        let counts = book.counts(model, pool, &profile);
        let classes = profile.classes.iter().map(|_| ClassQueue::default()).collect();
        Partition {
            profile,
            counts,
            classes: RefCell::new(classes),
            cursor: Cell::new(0),
            carry: Cell::new(None),
            next: Cell::new(0),
            parked_total: Cell::new(0),
        }
    }

    /// Counts a request of `class` received.
    pub fn received(&self, class: usize) {
        self.counts[class].received.fetch_add(1, Relaxed);
    }

    /// Requests parked on this shard now.
    pub fn len(&self) -> usize {
        self.classes.borrow().iter().map(|c| c.entries.len()).sum()
    }

    pub fn is_empty(&self) -> bool {
        self.classes.borrow().iter().all(|c| c.entries.is_empty())
    }

    /// The limit a request of `class` (`isl` prompt tokens, `cached` of them held) meets, with
    /// `workers` workers in the pool: the first of requests, prompt tokens, cached tokens
    /// whose waiting total already reaches its per-worker limit times `workers`.
    pub fn refusal(&self, class: usize, workers: u64) -> Option<Refusal> {
        let c = &self.profile.classes[class];
        LimitKind::ALL.iter().enumerate().find_map(|(k, &kind)| {
            let limit = c.limits[k]?.saturating_mul(workers);
            let current = self.counts[class].pending[k].load(Relaxed);
            (current >= limit).then(|| {
                self.counts[class].refused[k].fetch_add(1, Relaxed);
                Refusal { class: c.name.clone(), kind, current, limit }
            })
        })
    }

    /// Parks a request of `class`.
    pub fn park(self: &Rc<Self>, class: usize, isl: u64, cached: u64) -> Ticket {
        let id = self.next.get();
        self.next.set(id + 1);
        let cost = isl.saturating_sub(cached).max(1);
        self.classes.borrow_mut()[class].entries.push(Entry { id, cost, isl, cached, released: false });
        for (k, v) in [1, isl, cached].into_iter().enumerate() {
            self.counts[class].pending[k].fetch_add(v, Relaxed);
        }
        self.parked_total.set(self.parked_total.get() + 1);
        Ticket { part: self.clone(), class, id }
    }

    /// The index of class `c`'s next request by its policy (released ones are leaving).
    fn head(&self, q: &ClassQueue, c: usize) -> Option<usize> {
        let waiting = q.entries.iter().enumerate().filter(|(_, e)| !e.released);
        match self.profile.classes[c].policy {
            Policy::Fcfs => waiting.min_by_key(|(_, e)| e.id),
            Policy::Wspt => waiting.min_by_key(|(_, e)| (e.cost, e.id)),
        }
        .map(|(i, _)| i)
    }

    /// Lets the next request go, unless one let go has not left yet: deficit round robin
    /// over the classes whose head may go (`ready`: the class is not busy).
    pub fn release_next(&self, ready: &dyn Fn(&PolicyClass) -> bool) {
        let mut classes = self.classes.borrow_mut();
        if classes.iter().any(|q| q.entries.iter().any(|e| e.released)) {
            return;
        }
        let n = classes.len();
        let mut heads: smallvec::SmallVec<[Option<(usize, u64)>; 8]> = smallvec::SmallVec::new();
        for (c, q) in classes.iter_mut().enumerate() {
            if q.entries.is_empty() {
                q.deficit = 0;
            }
            let head = match ready(&self.profile.classes[c]) {
                true => self.head(q, c).map(|i| (i, q.entries[i].cost)),
                false => None,
            };
            heads.push(head);
        }
        let pick = |classes: &mut Vec<ClassQueue>, c: usize| {
            let (i, cost) = heads[c].expect("a ready head");
            let q = &mut classes[c];
            q.entries[i].released = true;
            q.deficit = q.deficit.saturating_sub(cost);
            let more = q.entries.len() > 1;
            if !more {
                q.deficit = 0;
            }
            self.carry.set((more && q.deficit > 0).then_some(c));
            self.cursor.set((c + 1) % n);
        };
        if let Some(c) = self.carry.take() {
            if heads[c].is_some_and(|(_, cost)| cost <= classes[c].deficit) {
                return pick(&mut classes, c);
            }
        }
        let cursor = self.cursor.get();
        for k in 0..n {
            let c = (cursor + k) % n;
            let Some((_, cost)) = heads[c] else { continue };
            if cost > classes[c].deficit {
                classes[c].deficit += self.profile.classes[c].quantum;
            }
            if cost <= classes[c].deficit {
                return pick(&mut classes, c);
            }
        }
        // Nobody could afford its head after one quantum: as many rounds as the nearest needs.
        let rounds = (0..n)
            .filter_map(|c| {
                let (_, cost) = heads[c]?;
                Some((cost - classes[c].deficit).div_ceil(self.profile.classes[c].quantum))
            })
            .min();
        let Some(rounds) = rounds else { return };
        for c in 0..n {
            if heads[c].is_some() {
                classes[c].deficit += rounds * self.profile.classes[c].quantum;
            }
        }
        if let Some(c) =
            (0..n).map(|k| (cursor + k) % n).find(|&c| heads[c].is_some_and(|(_, cost)| cost <= classes[c].deficit))
        {
            pick(&mut classes, c);
        }
    }
}

impl Ticket {
    /// Whether this request was let go.
    pub fn released(&self) -> bool {
        let classes = self.part.classes.borrow();
        classes[self.class].entries.iter().any(|e| e.id == self.id && e.released)
    }
}

impl Drop for Ticket {
    fn drop(&mut self) {
        let mut classes = self.part.classes.borrow_mut();
        let q = &mut classes[self.class];
        if let Some(i) = q.entries.iter().position(|e| e.id == self.id) {
            let e = q.entries.swap_remove(i);
            for (k, v) in [1, e.isl, e.cached].into_iter().enumerate() {
                self.part.counts[self.class].pending[k].fetch_sub(v, Relaxed);
            }
            if q.entries.is_empty() {
                q.deficit = 0;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn class(name: &str, policy: Policy, quantum: u64) -> PolicyClass {
        PolicyClass { name: name.into(), policy, quantum, busy_tokens: Some(0), busy_frac: None, limits: [None; 3] }
    }

    fn partition(classes: Vec<PolicyClass>) -> Rc<Partition> {
        let mut profile = PolicyProfile::synthetic(None);
        profile.synthetic = false;
        profile.classes = classes;
        Rc::new(Partition::new(Arc::new(profile), &ClassBook::default(), "m", Pool::Aggregated))
    }

    /// Lets requests go one at a time (each leaving before the next), returning their order.
    fn drain(p: &Rc<Partition>, mut tickets: Vec<(&'static str, Ticket)>) -> Vec<&'static str> {
        let mut out = Vec::new();
        while !tickets.is_empty() {
            p.release_next(&|_| true);
            let i = tickets.iter().position(|(_, t)| t.released()).expect("one let go");
            out.push(tickets.remove(i).0);
        }
        out
    }

    #[test]
    fn fcfs_lets_the_oldest_go_and_wspt_the_shortest_uncached() {
        let p = partition(vec![class("a", Policy::Fcfs, 1)]);
        let t = vec![("900", p.park(0, 900, 0)), ("10", p.park(0, 10, 0))];
        assert_eq!(drain(&p, t), ["900", "10"]);
        let p = partition(vec![class("a", Policy::Wspt, 1)]);
        let t = vec![
            ("900", p.park(0, 900, 0)),
            ("10a", p.park(0, 10, 0)),
            ("10b", p.park(0, 10, 0)),
            ("cached", p.park(0, 900, 895)),
        ];
        assert_eq!(drain(&p, t), ["cached", "10a", "10b", "900"], "cost is the uncached length; ties in arrival order");
        assert!(p.is_empty());
        assert_eq!(p.parked_total.get(), 4);
        assert_eq!(Policy::parse("lcfs"), None);
    }

    #[test]
    fn classes_share_by_quantum_in_uncached_tokens() {
        // Equal costs: quanta 1 and 3 give one, three, three, three (1.6.1's own example).
        let p = partition(vec![class("one", Policy::Fcfs, 1), class("three", Policy::Fcfs, 3)]);
        let mut t = Vec::new();
        for _ in 0..4 {
            t.push(("one", p.park(0, 1, 0)));
            t.push(("three", p.park(1, 1, 0)));
        }
        assert_eq!(drain(&p, t)[..8], ["one", "three", "three", "three", "one", "three", "one", "one"]);
        // Costs in tokens: a 100-token request of a class with quantum 10 waits ten rounds
        // while a 10-token class with the same quantum goes each round.
        let p = partition(vec![class("long", Policy::Fcfs, 10), class("short", Policy::Fcfs, 10)]);
        let mut t = vec![("long", p.park(0, 100, 0))];
        for _ in 0..12 {
            t.push(("short", p.park(1, 10, 0)));
        }
        let order = drain(&p, t);
        let at = order.iter().position(|n| *n == "long").unwrap();
        assert!((5..=11).contains(&at), "the long one goes after about ten short ones' worth: {order:?}");
        // A class whose head may not go gets no credit and does not hold up the others.
        let p = partition(vec![class("busy", Policy::Fcfs, 1), class("free", Policy::Fcfs, 1)]);
        let (b, f) = (p.park(0, 5, 0), p.park(1, 5, 0));
        p.release_next(&|c| c.name != "busy");
        assert!(f.released() && !b.released());
        drop(f);
        p.release_next(&|c| c.name != "busy");
        assert!(!b.released(), "still busy");
        p.release_next(&|_| true);
        assert!(b.released());
    }

    #[test]
    fn one_goes_at_a_time_and_limits_count_what_waits() {
        let mut c = class("x", Policy::Fcfs, 1);
        c.limits = [Some(2), None, Some(30)];
        let book = ClassBook::default();
        let mut profile = PolicyProfile::synthetic(None);
        profile.classes = vec![c];
        let p = Rc::new(Partition::new(Arc::new(profile.clone()), &book, "m", Pool::Prefill));
        assert_eq!(p.refusal(0, 1), None);
        let a = p.park(0, 50, 40);
        let b = p.park(0, 50, 40);
        let r = p.refusal(0, 1).expect("two requests wait: the limit of 2 per worker is met");
        assert_eq!((r.kind, r.current, r.limit), (LimitKind::Requests, 2, 2));
        assert_eq!(r.message(), "router policy class \"x\" queue requests limit reached (current=2, limit=2)");
        assert_eq!(
            p.refusal(0, 2).map(|r| r.kind),
            Some(LimitKind::CachedTokens),
            "80 cached tokens wait: 2 × 30 allowed"
        );
        p.release_next(&|_| true);
        p.release_next(&|_| true);
        assert!(a.released() && !b.released(), "the next goes only once the first has left");
        drop(a);
        p.release_next(&|_| true);
        assert!(b.released());
        // Another shard's partition of the same model and pool shares the counts.
        let q = Partition::new(Arc::new(profile), &book, "m", Pool::Prefill);
        assert_eq!(q.refusal(0, 5), None, "one request and 40 cached tokens wait: under 5 × the limits");
        drop(b);
        let rows = book.rows();
        assert_eq!((rows.len(), rows[0].pending, rows[0].refused), (1, [0, 0, 0], [1, 0, 1]));
    }
}
