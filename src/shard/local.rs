//! A shard-local unbounded channel: `Rc` + `RefCell`, no atomics, no locks, `!Send`.
//!
//! Used where two tasks of the same shard hand values to each other, e.g. a request's pipeline
//! producing the chunks of a streamed response while the connection task writes them. The
//! receiver learns when every sender is gone (`recv` → `None`); a sender learns when the
//! receiver is gone (`send` → `Err`, `is_closed`, or woken by `closed` while it waits for
//! something to send), which is how a client disconnect reaches the pipeline (and from there
//! the worker, as a `kill`) even while the worker is quiet.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};

use smallvec::SmallVec;

struct Shared<T> {
    queue: VecDeque<T>,
    waker: Option<Waker>,
    senders: usize,
    receiver_alive: bool,
    /// Senders waiting for the receiver to go ([`Sender::poll_closed`]).
    closed_wakers: SmallVec<[Waker; 1]>,
}

/// The sending half; cheap to clone.
pub struct Sender<T>(Rc<RefCell<Shared<T>>>, std::cell::Cell<bool>);

/// The receiving half.
pub struct Receiver<T>(Rc<RefCell<Shared<T>>>);

/// A new channel.
pub fn channel<T>() -> (Sender<T>, Receiver<T>) {
    let shared = Rc::new(RefCell::new(Shared {
        queue: VecDeque::new(),
        waker: None,
        senders: 1,
        receiver_alive: true,
        closed_wakers: SmallVec::new(),
    }));
    (Sender(shared.clone(), std::cell::Cell::new(false)), Receiver(shared))
}

impl<T> Sender<T> {
    /// Queue `value`; gives it back when the receiver is gone.
    pub fn send(&self, value: T) -> Result<(), T> {
        let mut s = self.0.borrow_mut();
        if !s.receiver_alive {
            return Err(value);
        }
        s.queue.push_back(value);
        if let Some(w) = s.waker.take() {
            w.wake();
        }
        Ok(())
    }

    /// Whether the receiver is gone (nobody will read what is sent).
    pub fn is_closed(&self) -> bool {
        !self.0.borrow().receiver_alive
    }

    /// Ready once the receiver is gone; `Pending` registers the task to be woken then. A
    /// sender registers once (the first task that polls it is the one woken: each sender
    /// belongs to one task), so a producer waiting for every token pays a flag check.
    pub fn poll_closed(&self, cx: &mut Context<'_>) -> Poll<()> {
        if self.1.get() {
            return if self.is_closed() { Poll::Ready(()) } else { Poll::Pending };
        }
        let mut s = self.0.borrow_mut();
        if !s.receiver_alive {
            return Poll::Ready(());
        }
        s.closed_wakers.push(cx.waker().clone());
        self.1.set(true);
        Poll::Pending
    }

    /// Resolves once the receiver is gone.
    pub async fn closed(&self) {
        poll_fn(|cx| self.poll_closed(cx)).await
    }

    /// `poll` (the producer's next value) unless the receiver is gone: `Ready(None)` then,
    /// whether or not `poll` was ready.
    pub fn poll_unless_closed<R>(
        &self,
        cx: &mut Context<'_>,
        poll: impl FnOnce(&mut Context<'_>) -> Poll<R>,
    ) -> Poll<Option<R>> {
        match poll(cx) {
            Poll::Ready(_) if self.is_closed() => Poll::Ready(None),
            Poll::Ready(r) => Poll::Ready(Some(r)),
            Poll::Pending => self.poll_closed(cx).map(|()| None),
        }
    }
}

impl<T> Clone for Sender<T> {
    fn clone(&self) -> Self {
        self.0.borrow_mut().senders += 1;
        Sender(self.0.clone(), std::cell::Cell::new(false))
    }
}

impl<T> Drop for Sender<T> {
    fn drop(&mut self) {
        let mut s = self.0.borrow_mut();
        s.senders -= 1;
        if s.senders == 0 {
            if let Some(w) = s.waker.take() {
                w.wake();
            }
        }
    }
}

impl<T> Receiver<T> {
    /// The next value; `None` once the queue is empty and every sender is gone.
    pub async fn recv(&mut self) -> Option<T> {
        poll_fn(|cx| self.poll_recv(cx)).await
    }

    /// [`Self::recv`] as a poll: `Pending` registers the task to be woken by the next send.
    pub fn poll_recv(&mut self, cx: &mut Context<'_>) -> Poll<Option<T>> {
        let mut s = self.0.borrow_mut();
        if let Some(v) = s.queue.pop_front() {
            return Poll::Ready(Some(v));
        }
        if s.senders == 0 {
            return Poll::Ready(None);
        }
        if !s.waker.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
            s.waker = Some(cx.waker().clone());
        }
        Poll::Pending
    }

    /// A value already queued, without waiting.
    pub fn try_recv(&mut self) -> Option<T> {
        self.0.borrow_mut().queue.pop_front()
    }

    /// Whether [`Self::recv`] would answer `None` now: nothing queued and every sender gone.
    pub fn is_finished(&self) -> bool {
        let s = self.0.borrow();
        s.queue.is_empty() && s.senders == 0
    }
}

impl<T> Drop for Receiver<T> {
    fn drop(&mut self) {
        let mut s = self.0.borrow_mut();
        s.receiver_alive = false;
        s.queue.clear();
        for w in s.closed_wakers.drain(..) {
            w.wake();
        }
    }
}

impl<T> std::fmt::Debug for Receiver<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("local::Receiver")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_then_end_and_closed_detection() {
        let (tx, mut rx) = channel::<u32>();
        let tx2 = tx.clone();
        tx.send(1).unwrap();
        tx2.send(2).unwrap();
        drop(tx);
        assert!(!rx.is_finished(), "values queued and a sender left");
        drop(tx2);
        assert!(!rx.is_finished(), "values still queued");
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().build().unwrap();
        let got = rt.block_on(async move {
            let mut v = Vec::new();
            while let Some(x) = rx.recv().await {
                v.push(x);
            }
            v
        });
        assert_eq!(got, vec![1, 2]);
        let (tx, mut rx) = channel::<u32>();
        tx.send(7).unwrap();
        assert_eq!(rx.try_recv(), Some(7));
        assert!(!rx.is_finished(), "a sender is still there");
        drop(tx);
        assert!(rx.is_finished());
        let (tx, rx) = channel::<u32>();
        drop(rx);
        assert!(tx.is_closed());
        assert_eq!(tx.send(3), Err(3));
    }

    #[test]
    fn a_waiting_sender_is_woken_when_the_receiver_goes() {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build().unwrap();
        rt.block_on(async {
            let (tx, rx) = channel::<u32>();
            let tx2 = tx.clone();
            let waiting = monoio::spawn(async move {
                // Waits for a value that never comes: the receiver's end wakes it.
                poll_fn(|cx| tx2.poll_unless_closed(cx, |_| Poll::<u32>::Pending)).await
            });
            let also = monoio::spawn(async move { tx.closed().await });
            monoio::time::sleep(std::time::Duration::from_millis(5)).await;
            drop(rx);
            assert_eq!(waiting.await, None);
            also.await;
        });
    }
}
