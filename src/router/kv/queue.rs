//! The kv router's queue (docs/dynamo/kv-routing.md §7.7): with `--router-queue-threshold F` a worker
//! is *prefill-busy* while the prefill tokens booked on it exceed `F·max_num_batched_tokens`;
//! when every candidate is, a request is parked instead of routed, and parked requests go
//! as capacity frees — in arrival order (`--router-queue-policy fcfs`) or shortest prompt
//! first (`wspt`: weighted shortest processing time with equal weights; ties in arrival
//! order).
//!
//! The queue is per shard and every shard reads the process's bookings (see
//! [`super::active`]), so a shard parks while the whole process keeps the workers busy. A
//! parked request re-checks every [`RECHECK`] (bookings freed on other shards arrive
//! through the ring and are only seen by a drain) and only the head of the queue may leave;
//! dropping its [`Ticket`] (the client went away) leaves the queue. The overlap is computed
//! when the request leaves, so a long wait routes on the cache as it is then.

use std::cell::{Cell, RefCell};
use std::time::Duration;

/// How often a parked request looks again.
pub const RECHECK: Duration = Duration::from_millis(2);

pub use crate::config::settings::{Policy, QueueConfig};

/// One shard's parked requests.
#[derive(Debug)]
pub struct Queue {
    pub config: QueueConfig,
    /// (ticket, prompt tokens) of each parked request, in arrival order.
    parked: RefCell<Vec<(u64, u64)>>,
    next: Cell<u64>,
    /// Requests ever parked.
    pub parked_total: Cell<u64>,
}

/// A parked request's place; leaves the queue when dropped.
pub struct Ticket<'a> {
    queue: &'a Queue,
    id: u64,
}

impl Queue {
    pub fn new(config: QueueConfig) -> Queue {
        Queue { config, parked: RefCell::new(Vec::new()), next: Cell::new(0), parked_total: Cell::new(0) }
    }

    /// Parks a request of `isl` prompt tokens.
    pub fn park(&self, isl: u64) -> Ticket<'_> {
        let id = self.next.get();
        self.next.set(id + 1);
        self.parked.borrow_mut().push((id, isl));
        self.parked_total.set(self.parked_total.get() + 1);
        Ticket { queue: self, id }
    }

    /// Requests parked now.
    pub fn len(&self) -> usize {
        self.parked.borrow().len()
    }

    pub fn is_empty(&self) -> bool {
        self.parked.borrow().is_empty()
    }

    fn head(&self) -> Option<u64> {
        let parked = self.parked.borrow();
        match self.config.policy {
            Policy::Fcfs => parked.first().map(|p| p.0),
            Policy::Wspt => parked.iter().min_by_key(|(id, isl)| (*isl, *id)).map(|p| p.0),
        }
    }
}

impl Ticket<'_> {
    /// Whether this request is the one the policy lets go next.
    pub fn is_head(&self) -> bool {
        self.queue.head() == Some(self.id)
    }
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        self.queue.parked.borrow_mut().retain(|p| p.0 != self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fcfs_lets_the_oldest_go_and_wspt_the_shortest() {
        let q = Queue::new(QueueConfig { threshold_frac: 0.5, policy: Policy::Fcfs });
        let (a, b) = (q.park(900), q.park(10));
        assert!(a.is_head() && !b.is_head());
        drop(a);
        assert!(b.is_head());
        drop(b);
        assert!(q.is_empty());
        let q = Queue::new(QueueConfig { threshold_frac: 0.5, policy: Policy::Wspt });
        let (a, b, c) = (q.park(900), q.park(10), q.park(10));
        assert!(b.is_head() && !a.is_head() && !c.is_head());
        drop(b);
        assert!(c.is_head(), "equal lengths go in arrival order");
        drop(c);
        assert!(a.is_head());
        assert_eq!((q.len(), q.parked_total.get()), (1, 3));
        assert_eq!(Policy::parse("lcfs"), None);
    }
}
