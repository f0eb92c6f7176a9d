//! Active-sequence tracking (spec: KV routing §7.3) across every shard of the process.
//!
//! A routed request is *booked* on its worker: its uncached prompt tokens count as active
//! prefill until the first answer, its prompt's sequence hashes join the worker's active
//! block multiset and its request count until the answer ends ([`Booking`], released on
//! drop). The cost of the next decision reads these totals.
//!
//! Each shard routes on its own, but the load it books is the whole process's: a booking is
//! applied to the deciding shard's own [`ActiveTable`] at once and sent, as a [`LoadMsg`],
//! up the shard's SPSC ring to the ingest thread ([`Upstream`]), which re-publishes it to
//! every replica ring; every other shard applies it to its table on its next drain. So all
//! shards see one load picture, as one Dynamo router does (the alternative, per-shard
//! bookings, let two shards both pick the same idle worker for a burst of long prefills).
//! The hop costs no lock: two SPSC rings and one `eventfd` write that wakes the ingest
//! thread. Messages that find the ring full wait in the shard's backlog, in order, and go
//! first on the next send: a lost `Free` would leave a phantom booking behind. The price is
//! the hop's delay: two decisions on different shards closer together than it (tens of
//! microseconds to a millisecond) do not see each other's booking.

use std::cell::RefCell;
use std::collections::{HashMap, VecDeque};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::rc::Rc;
use std::sync::Arc;

use super::index::Owner;
use super::predict::Prediction;

/// What this process booked on one worker rank.
#[derive(Debug, Default)]
pub struct Active {
    pub prefill_tokens: u64,
    /// Sequence hash → requests holding it.
    pub blocks: HashMap<u64, u32>,
    pub requests: u32,
}

/// A booking event of one shard, for the others.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoadMsg {
    /// The shard that booked (its replicas skip their own messages).
    pub origin: u16,
    /// The booking's number on that shard.
    pub key: u64,
    pub op: LoadOp,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LoadOp {
    Add { worker: Owner, prefill_tokens: u64, blocks: Arc<[u64]> },
    PrefillDone,
    Free,
}

/// What a shard sends to the ingest thread.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Up {
    /// Approximate mode: a routing decision's predicted blocks.
    Predict(Prediction),
    Load(LoadMsg),
}

/// Wakes the ingest thread when a shard has sent something (an `eventfd`).
#[derive(Debug)]
pub struct Wake(OwnedFd);

impl Wake {
    pub fn new() -> std::io::Result<Wake> {
        // SAFETY: eventfd takes no pointers; a non-negative result is a new descriptor we own.
        let fd = unsafe { libc::eventfd(0, libc::EFD_NONBLOCK | libc::EFD_CLOEXEC) };
        if fd < 0 {
            return Err(std::io::Error::last_os_error());
        }
        // SAFETY: `fd` was just created and is owned by nothing else.
        Ok(Wake(unsafe { OwnedFd::from_raw_fd(fd) }))
    }

    /// Makes the descriptor readable (never blocks).
    pub fn wake(&self) {
        let one: u64 = 1;
        // SAFETY: writes 8 bytes from a live u64 to our own non-blocking eventfd.
        let _ = unsafe { libc::write(self.0.as_raw_fd(), (&one as *const u64).cast(), 8) };
    }

    /// Clears it (the ingest side, after it was readable).
    pub fn clear(&self) {
        let mut n: u64 = 0;
        // SAFETY: reads 8 bytes into a live u64 from our own non-blocking eventfd.
        let _ = unsafe { libc::read(self.0.as_raw_fd(), (&mut n as *mut u64).cast(), 8) };
    }

    pub fn fd(&self) -> i32 {
        self.0.as_raw_fd()
    }
}

/// A shard's side of its ring to the ingest thread.
pub struct Upstream {
    ring: rtrb::Producer<Up>,
    backlog: VecDeque<Up>,
    wake: Arc<Wake>,
    pub origin: u16,
}

impl Upstream {
    pub fn new(ring: rtrb::Producer<Up>, wake: Arc<Wake>, origin: u16) -> Upstream {
        Upstream { ring, backlog: VecDeque::new(), wake, origin }
    }

    /// Sends `up` (after anything still waiting) and wakes the ingest thread.
    pub fn send(&mut self, up: Up) {
        self.backlog.push_back(up);
        while let Some(u) = self.backlog.pop_front() {
            if let Err(rtrb::PushError::Full(u)) = self.ring.push(u) {
                self.backlog.push_front(u);
                break;
            }
        }
        self.wake.wake();
    }

    /// Messages waiting for room in the ring.
    pub fn backlog(&self) -> usize {
        self.backlog.len()
    }
}

/// The ingest thread's ends of the shards' rings, and their shared wake descriptor.
pub type Downstream = (Vec<rtrb::Consumer<Up>>, Arc<Wake>);

/// `shards` rings: the shards' ends, and the ingest thread's.
pub fn channel(shards: usize, capacity: usize) -> std::io::Result<(Vec<Upstream>, Downstream)> {
    let wake = Arc::new(Wake::new()?);
    let mut ups = Vec::with_capacity(shards);
    let mut downs = Vec::with_capacity(shards);
    for i in 0..shards {
        let (p, c) = rtrb::RingBuffer::new(capacity);
        ups.push(Upstream::new(p, wake.clone(), i as u16));
        downs.push(c);
    }
    Ok((ups, (downs, wake)))
}

/// One shard's view of every booking in the process.
#[derive(Debug, Default)]
pub struct ActiveTable {
    workers: HashMap<Owner, Active>,
    /// Other shards' bookings by (origin, key), to apply their later steps.
    remote: HashMap<(u16, u64), Held>,
}

#[derive(Debug)]
struct Held {
    worker: Owner,
    prefill_tokens: u64,
    blocks: Arc<[u64]>,
}

impl ActiveTable {
    pub fn get(&self, worker: Owner) -> Option<&Active> {
        self.workers.get(&worker)
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    fn add(&mut self, worker: Owner, prefill_tokens: u64, blocks: &[u64]) {
        let a = self.workers.entry(worker).or_default();
        a.prefill_tokens += prefill_tokens;
        a.requests += 1;
        for h in blocks {
            *a.blocks.entry(*h).or_insert(0) += 1;
        }
    }

    fn prefill_done(&mut self, worker: Owner, prefill_tokens: u64) {
        if let Some(a) = self.workers.get_mut(&worker) {
            a.prefill_tokens = a.prefill_tokens.saturating_sub(prefill_tokens);
        }
    }

    fn free(&mut self, worker: Owner, prefill_tokens: u64, blocks: &[u64]) {
        let Some(a) = self.workers.get_mut(&worker) else { return };
        a.prefill_tokens = a.prefill_tokens.saturating_sub(prefill_tokens);
        a.requests = a.requests.saturating_sub(1);
        for h in blocks {
            if let Some(n) = a.blocks.get_mut(h) {
                *n -= 1;
                if *n == 0 {
                    a.blocks.remove(h);
                }
            }
        }
        if a.requests == 0 && a.blocks.is_empty() && a.prefill_tokens == 0 {
            self.workers.remove(&worker);
        }
    }

    /// Another shard's booking step.
    pub fn apply(&mut self, msg: LoadMsg) {
        let id = (msg.origin, msg.key);
        match msg.op {
            LoadOp::Add { worker, prefill_tokens, blocks } => {
                self.add(worker, prefill_tokens, &blocks);
                self.remote.insert(id, Held { worker, prefill_tokens, blocks });
            }
            LoadOp::PrefillDone => {
                if let Some(h) = self.remote.get_mut(&id) {
                    let (w, p) = (h.worker, h.prefill_tokens);
                    h.prefill_tokens = 0;
                    self.prefill_done(w, p);
                }
            }
            LoadOp::Free => {
                if let Some(h) = self.remote.remove(&id) {
                    self.free(h.worker, h.prefill_tokens, &h.blocks);
                }
            }
        }
    }
}

/// A shard's bookings and its link to the other shards.
#[derive(Default)]
pub struct Bookings {
    pub table: Rc<RefCell<ActiveTable>>,
    pub up: Rc<RefCell<Option<Upstream>>>,
    /// Whether other shards exist to tell.
    pub share: std::cell::Cell<bool>,
    next_key: std::cell::Cell<u64>,
}

impl Bookings {
    /// Books `prefill_tokens` and `blocks` on `worker` here and on every other shard.
    pub fn book(&self, worker: Owner, prefill_tokens: u64, blocks: Vec<u64>) -> Booking {
        let blocks: Arc<[u64]> = blocks.into();
        self.table.borrow_mut().add(worker, prefill_tokens, &blocks);
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        let origin = if self.share.get() {
            send(&self.up, key, || LoadOp::Add { worker, prefill_tokens, blocks: blocks.clone() })
        } else {
            None
        };
        Booking { table: self.table.clone(), up: self.up.clone(), origin, key, worker, prefill_tokens, blocks }
    }

    /// Approximate mode: tells the ingest thread what this decision predicts.
    pub fn predict(&self, p: Prediction) {
        if let Some(u) = self.up.borrow_mut().as_mut() {
            u.send(Up::Predict(p));
        }
    }
}

fn send(up: &RefCell<Option<Upstream>>, key: u64, op: impl FnOnce() -> LoadOp) -> Option<u16> {
    let mut up = up.borrow_mut();
    let u = up.as_mut()?;
    let origin = u.origin;
    u.send(Up::Load(LoadMsg { origin, key, op: op() }));
    Some(origin)
}

/// A request's hold on its worker's load; released on drop (answer ended or abandoned).
pub struct Booking {
    table: Rc<RefCell<ActiveTable>>,
    up: Rc<RefCell<Option<Upstream>>>,
    /// `Some` when the other shards were told.
    origin: Option<u16>,
    key: u64,
    worker: Owner,
    prefill_tokens: u64,
    blocks: Arc<[u64]>,
}

impl Booking {
    /// The worker's first answer arrived: the prompt's prefill is done.
    pub fn prefill_done(&mut self) {
        if self.prefill_tokens == 0 {
            return;
        }
        self.table.borrow_mut().prefill_done(self.worker, self.prefill_tokens);
        self.prefill_tokens = 0;
        if self.origin.is_some() {
            send(&self.up, self.key, || LoadOp::PrefillDone);
        }
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.table.borrow_mut().free(self.worker, self.prefill_tokens, &self.blocks);
        if self.origin.is_some() {
            send(&self.up, self.key, || LoadOp::Free);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const W7: Owner = Owner { worker_id: 7, dp_rank: 1 };
    const W1: Owner = Owner { worker_id: 1, dp_rank: 0 };

    #[test]
    fn bookings_reach_the_other_shards_tables_and_leave_them() {
        let (mut ups, (mut downs, _wake)) = channel(2, 2).unwrap();
        let a = Bookings::default();
        *a.up.borrow_mut() = Some(ups.remove(0));
        a.share.set(true);
        let other = RefCell::new(ActiveTable::default());
        let deliver = |downs: &mut Vec<rtrb::Consumer<Up>>| {
            while let Ok(Up::Load(m)) = downs[0].pop() {
                other.borrow_mut().apply(m);
            }
        };
        let mut b1 = a.book(W7, 100, vec![1, 2, 3]);
        let b2 = a.book(W7, 50, vec![1, 2]);
        // The ring holds 2: the third message waits in the backlog.
        b1.prefill_done();
        assert_eq!(a.up.borrow().as_ref().unwrap().backlog(), 1);
        deliver(&mut downs);
        assert_eq!(other.borrow().get(W7).map(|x| (x.prefill_tokens, x.requests, x.blocks.len())), Some((150, 2, 3)));
        drop(b2); // sends the backlog (b1's prefill done) first, then b2's Free
        deliver(&mut downs);
        assert_eq!(other.borrow().get(W7).map(|x| (x.prefill_tokens, x.requests, x.blocks.len())), Some((0, 1, 3)));
        drop(b1);
        deliver(&mut downs);
        assert!(other.borrow().is_empty());
        assert!(a.table.borrow().is_empty());
    }

    #[test]
    fn a_single_shard_books_locally_only() {
        let a = Bookings::default();
        let mut b = a.book(W1, 10, vec![5]);
        assert_eq!(a.table.borrow().get(W1).map(|x| x.prefill_tokens), Some(10));
        b.prefill_done();
        assert_eq!(a.table.borrow().get(W1).map(|x| x.prefill_tokens), Some(0));
        drop(b);
        assert!(a.table.borrow().is_empty());
    }
}
