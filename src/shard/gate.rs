//! A shard's shutdown gate (the Seastar "gate" idea, shard-local and lock-free).
//!
//! Two phases. Every request in flight holds a [`GateGuard`] and every connection a
//! [`ConnGuard`]. [`Gate::close`] starts the drain: the accept loop wakes from
//! [`Gate::closed`] and stops accepting, requests in flight finish, and the shard waits on
//! [`Gate::drained`] until none is left or the grace period ends. [`Gate::finish`] then tells
//! every connection to close ([`Gate::finished`]) and the shard waits on [`Gate::empty`].
//! Everything here is `!Send`: one gate per shard thread.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Inner {
    closed: Cell<bool>,
    finished: Cell<bool>,
    requests: Cell<usize>,
    conns: Cell<usize>,
    waiters: [Waiters; 4],
}

/// Wakers of pending waits; a wait removes its slot when dropped, so connections that come
/// and go leave nothing behind.
#[derive(Default)]
struct Waiters {
    slots: RefCell<Vec<Option<Waker>>>,
    free: RefCell<Vec<usize>>,
}

impl Waiters {
    fn register(&self, slot: &mut Option<usize>, waker: &Waker) {
        let mut slots = self.slots.borrow_mut();
        match *slot {
            Some(i) => match &mut slots[i] {
                Some(w) if w.will_wake(waker) => {}
                entry => *entry = Some(waker.clone()),
            },
            None => {
                let i = match self.free.borrow_mut().pop() {
                    Some(i) => {
                        slots[i] = Some(waker.clone());
                        i
                    }
                    None => {
                        slots.push(Some(waker.clone()));
                        slots.len() - 1
                    }
                };
                *slot = Some(i);
            }
        }
    }

    fn remove(&self, slot: usize) {
        self.slots.borrow_mut()[slot] = None;
        self.free.borrow_mut().push(slot);
    }

    fn wake_all(&self) {
        let wakers: Vec<Waker> = self.slots.borrow_mut().iter_mut().filter_map(Option::take).collect();
        for w in wakers {
            w.wake();
        }
    }
}

/// Shard-local shutdown gate; cheap to clone.
#[derive(Clone, Default)]
pub struct Gate(Rc<Inner>);

/// Held by each request in flight; dropping it may complete [`Gate::drained`].
pub struct GateGuard(Gate);

/// Held by each open connection; dropping it may complete [`Gate::empty`].
pub struct ConnGuard(Gate);

#[derive(Clone, Copy)]
enum Until {
    Closed = 0,
    Drained = 1,
    Finished = 2,
    Empty = 3,
}

impl Gate {
    pub fn new() -> Self {
        Gate::default()
    }

    /// Register a request in flight.
    pub fn enter(&self) -> GateGuard {
        self.0.requests.set(self.0.requests.get() + 1);
        GateGuard(self.clone())
    }

    /// Register an open connection.
    pub fn connection(&self) -> ConnGuard {
        self.0.conns.set(self.0.conns.get() + 1);
        ConnGuard(self.clone())
    }

    /// Number of requests in flight.
    pub fn in_flight(&self) -> usize {
        self.0.requests.get()
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.get()
    }

    /// Whether [`Gate::finish`] has been called.
    pub fn is_finished(&self) -> bool {
        self.0.finished.get()
    }

    /// Start draining: stop accepting, finish what is in flight.
    pub fn close(&self) {
        self.0.closed.set(true);
        self.check();
    }

    /// End the drain: every connection closes.
    pub fn finish(&self) {
        self.0.closed.set(true);
        self.0.finished.set(true);
        self.check();
    }

    /// Completes once [`Gate::close`] has been called.
    pub fn closed(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Closed, slot: None }
    }

    /// Completes once the gate is closed and no request is in flight.
    pub fn drained(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Drained, slot: None }
    }

    /// Completes once [`Gate::finish`] has been called.
    pub fn finished(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Finished, slot: None }
    }

    /// Completes once the gate is finished and no connection is open.
    pub fn empty(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Empty, slot: None }
    }

    fn ready(&self, until: Until) -> bool {
        let i = &self.0;
        match until {
            Until::Closed => i.closed.get(),
            Until::Drained => i.closed.get() && i.requests.get() == 0,
            Until::Finished => i.finished.get(),
            Until::Empty => i.finished.get() && i.conns.get() == 0,
        }
    }

    /// Wake the waits whose condition now holds.
    fn check(&self) {
        for until in [Until::Closed, Until::Drained, Until::Finished, Until::Empty] {
            if self.ready(until) {
                self.0.waiters[until as usize].wake_all();
            }
        }
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        let inner = &self.0 .0;
        inner.requests.set(inner.requests.get() - 1);
        self.0.check();
    }
}

impl Drop for ConnGuard {
    fn drop(&mut self) {
        let inner = &self.0 .0;
        inner.conns.set(inner.conns.get() - 1);
        self.0.check();
    }
}

struct WaitFor<'a> {
    gate: &'a Gate,
    until: Until,
    slot: Option<usize>,
}

impl WaitFor<'_> {
    fn waiters(&self) -> &Waiters {
        &self.gate.0.waiters[self.until as usize]
    }
}

impl Drop for WaitFor<'_> {
    fn drop(&mut self) {
        if let Some(i) = self.slot.take() {
            self.waiters().remove(i);
        }
    }
}

impl Future for WaitFor<'_> {
    type Output = ();
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        if this.gate.ready(this.until) {
            return Poll::Ready(());
        }
        let mut slot = this.slot;
        this.waiters().register(&mut slot, cx.waker());
        this.slot = slot;
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;
    use std::task::Wake;

    struct Flag(std::sync::atomic::AtomicBool);
    impl Wake for Flag {
        fn wake(self: Arc<Self>) {
            self.0.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    fn poll_once<F: Future>(f: Pin<&mut F>, flag: &Arc<Flag>) -> bool {
        let waker = Waker::from(flag.clone());
        f.poll(&mut Context::from_waker(&waker)).is_ready()
    }

    #[test]
    fn drain_then_finish() {
        let gate = Gate::new();
        let conn = gate.connection();
        let req = gate.enter();
        let flag = Arc::new(Flag(Default::default()));
        let mut drained = std::pin::pin!(gate.drained());
        assert!(!poll_once(drained.as_mut(), &flag));
        gate.close();
        assert!(!poll_once(drained.as_mut(), &flag), "a request is still in flight");
        drop(req);
        assert!(flag.0.load(std::sync::atomic::Ordering::SeqCst), "the last request wakes the drain");
        assert!(poll_once(drained.as_mut(), &flag));
        let mut empty = std::pin::pin!(gate.empty());
        gate.finish();
        assert!(!poll_once(empty.as_mut(), &flag));
        drop(conn);
        assert!(poll_once(empty.as_mut(), &flag));
        assert_eq!(gate.0.waiters.iter().map(|w| w.slots.borrow().iter().flatten().count()).sum::<usize>(), 0);
    }
}
