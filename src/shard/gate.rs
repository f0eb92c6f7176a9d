//! A shard's shutdown gate (the Seastar "gate" idea, shard-local and lock-free).
//!
//! Every connection holds a [`GateGuard`] while it lives. When the shard is told to stop it
//! closes the gate: idle connections wake from [`Gate::closed`] and leave, busy ones finish the
//! request in hand and leave, and the shard waits on [`Gate::drained`] until none are left or
//! the grace period ends. Everything here is `!Send`: one gate per shard thread.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

#[derive(Default)]
struct Inner {
    closed: Cell<bool>,
    open_guards: Cell<usize>,
    closed_waiters: Waiters,
    drained_waiters: Waiters,
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

/// Held by each live connection; dropping it may complete [`Gate::drained`].
pub struct GateGuard(Gate);

impl Gate {
    pub fn new() -> Self {
        Gate::default()
    }

    /// Register a live connection.
    pub fn enter(&self) -> GateGuard {
        self.0.open_guards.set(self.0.open_guards.get() + 1);
        GateGuard(self.clone())
    }

    /// Number of live connections.
    pub fn open(&self) -> usize {
        self.0.open_guards.get()
    }

    pub fn is_closed(&self) -> bool {
        self.0.closed.get()
    }

    /// Stop: wake every connection waiting in [`Gate::closed`].
    pub fn close(&self) {
        self.0.closed.set(true);
        self.0.closed_waiters.wake_all();
        self.wake_drained_if_empty();
    }

    /// Completes once [`Gate::close`] has been called.
    pub fn closed(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Closed, slot: None }
    }

    /// Completes once the gate is closed and every guard is gone.
    pub fn drained(&self) -> impl Future<Output = ()> + '_ {
        WaitFor { gate: self, until: Until::Drained, slot: None }
    }

    fn wake_drained_if_empty(&self) {
        if self.0.closed.get() && self.0.open_guards.get() == 0 {
            self.0.drained_waiters.wake_all();
        }
    }
}

impl Drop for GateGuard {
    fn drop(&mut self) {
        let inner = &self.0 .0;
        inner.open_guards.set(inner.open_guards.get() - 1);
        self.0.wake_drained_if_empty();
    }
}

#[derive(Clone, Copy)]
enum Until {
    Closed,
    Drained,
}

struct WaitFor<'a> {
    gate: &'a Gate,
    until: Until,
    slot: Option<usize>,
}

impl WaitFor<'_> {
    fn waiters(&self) -> &Waiters {
        match self.until {
            Until::Closed => &self.gate.0.closed_waiters,
            Until::Drained => &self.gate.0.drained_waiters,
        }
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
        let inner = &this.gate.0;
        let ready = match this.until {
            Until::Closed => inner.closed.get(),
            Until::Drained => inner.closed.get() && inner.open_guards.get() == 0,
        };
        if ready {
            return Poll::Ready(());
        }
        let mut slot = this.slot;
        this.waiters().register(&mut slot, cx.waker());
        this.slot = slot;
        Poll::Pending
    }
}
