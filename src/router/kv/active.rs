//! Active-sequence tracking (docs/dynamo/kv-routing.md §7.3) across every shard of the process.
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
    /// Sequence hash → requests holding it (with `--router-track-output-blocks`, also the
    /// requests' output blocks, under random hashes of their own).
    pub blocks: HashMap<u64, u32>,
    pub requests: u32,
    /// Blocks whose weight an expected output length decayed below 1 (1.6.1's fractional
    /// output tracking), and `Σ (1 − weight)` over them.
    weights: HashMap<u64, f64>,
    discount: f64,
}

impl Active {
    /// The booked blocks as the decode term counts them: `round(Σ weights)`.
    pub fn weighted_blocks(&self) -> u64 {
        if self.weights.is_empty() {
            return self.blocks.len() as u64;
        }
        (self.blocks.len() as f64 - self.discount).round().max(0.0) as u64
    }

    fn set_weight(&mut self, hash: u64, w: f64) {
        let old = self.weights.get(&hash).copied().unwrap_or(1.0);
        self.discount += old - w;
        if w >= 1.0 {
            self.weights.remove(&hash);
        } else {
            self.weights.insert(hash, w);
        }
        if self.weights.is_empty() {
            self.discount = 0.0;
        }
    }

    /// One request fewer holds `hash`; the last one takes it (and its weight) away.
    fn release(&mut self, hash: u64) {
        if let Some(n) = self.blocks.get_mut(&hash) {
            *n -= 1;
            if *n == 0 {
                self.blocks.remove(&hash);
                self.set_weight(hash, 1.0);
            }
        }
    }
}

/// A booking event of one shard (or of another router), for the shards.
#[derive(Clone, Debug, PartialEq)]
pub struct LoadMsg {
    /// The shard that booked (its replicas skip their own messages, except
    /// [`LoadOp::PrefillMarked`]); [`REMOTE_ORIGIN`] for another router's bookings.
    pub origin: u16,
    /// The booking's number on that shard (or the ingest thread's for remote ones).
    pub key: u64,
    pub op: LoadOp,
}

/// The origin of bookings made by other routers (`--router-replica-sync`).
pub const REMOTE_ORIGIN: u16 = u16::MAX;

#[derive(Clone, Debug, PartialEq)]
pub enum LoadOp {
    /// `request`: the request id the worker was sent (a UUID's bits), by which the worker's
    /// prefill-complete mark names the booking.
    Add {
        worker: Owner,
        prefill_tokens: u64,
        blocks: Arc<[u64]>,
        request: u128,
    },
    /// The booking shard saw its first answer.
    PrefillDone,
    /// The worker said its prefill is done: every shard applies it, the booking one too.
    PrefillMarked,
    /// `--router-track-output-blocks`: the answer grew by these output blocks; `decay`
    /// (with an expected output length): the weight the request's output blocks and its
    /// prompt's exclusive tail now have. Not shared with other routers, as in 1.6.1.
    Output {
        blocks: Arc<[u64]>,
        decay: Option<f64>,
    },
    Free,
}

/// What a shard sends to the ingest thread.
#[derive(Clone, Debug, PartialEq)]
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

/// One shard's view of every booking in the process (and, with replica sync, of the other
/// routers' bookings).
#[derive(Debug, Default)]
pub struct ActiveTable {
    workers: HashMap<Owner, Active>,
    /// Every booking by (origin, key), to apply its later steps.
    held: HashMap<(u16, u64), Held>,
}

#[derive(Debug)]
struct Held {
    worker: Owner,
    prefill_tokens: u64,
    blocks: Arc<[u64]>,
    /// Its output blocks (`--router-track-output-blocks`).
    output: Vec<u64>,
}

impl ActiveTable {
    pub fn get(&self, worker: Owner) -> Option<&Active> {
        self.workers.get(&worker)
    }

    pub fn is_empty(&self) -> bool {
        self.workers.is_empty()
    }

    /// Every worker rank with bookings.
    pub fn iter(&self) -> impl Iterator<Item = (&Owner, &Active)> {
        self.workers.iter()
    }

    /// Bookings held (this process's and other routers').
    pub fn bookings(&self) -> usize {
        self.held.len()
    }

    /// Books `id` (a second Add of the same id is ignored).
    fn add(&mut self, id: (u16, u64), worker: Owner, prefill_tokens: u64, blocks: Arc<[u64]>) {
        if self.held.contains_key(&id) {
            return;
        }
        let a = self.workers.entry(worker).or_default();
        a.prefill_tokens += prefill_tokens;
        a.requests += 1;
        for h in blocks.iter() {
            *a.blocks.entry(*h).or_insert(0) += 1;
        }
        self.held.insert(id, Held { worker, prefill_tokens, blocks, output: Vec::new() });
    }

    /// Ends `id`'s prefill; false when it had none left (or is not held).
    fn prefill_done(&mut self, id: (u16, u64)) -> bool {
        let Some(h) = self.held.get_mut(&id) else { return false };
        if h.prefill_tokens == 0 {
            return false;
        }
        if let Some(a) = self.workers.get_mut(&h.worker) {
            a.prefill_tokens = a.prefill_tokens.saturating_sub(h.prefill_tokens);
        }
        h.prefill_tokens = 0;
        true
    }

    /// `id`'s answer grew by `blocks`; with `decay`, its output blocks and the tail of its
    /// prompt no other booking shares weigh `decay` from now on (1.6.1: the walk from the
    /// prompt's end stops at the first block another request holds too).
    fn output(&mut self, id: (u16, u64), blocks: &[u64], decay: Option<f64>) {
        let Some(h) = self.held.get_mut(&id) else { return };
        let Some(a) = self.workers.get_mut(&h.worker) else { return };
        for &b in blocks {
            *a.blocks.entry(b).or_insert(0) += 1;
            h.output.push(b);
        }
        let Some(d) = decay else { return };
        for &b in &h.output {
            a.set_weight(b, d);
        }
        for &b in h.blocks.iter().rev() {
            if a.blocks.get(&b) != Some(&1) {
                break;
            }
            a.set_weight(b, d);
        }
    }

    fn free(&mut self, id: (u16, u64)) {
        let Some(h) = self.held.remove(&id) else { return };
        let Some(a) = self.workers.get_mut(&h.worker) else { return };
        a.prefill_tokens = a.prefill_tokens.saturating_sub(h.prefill_tokens);
        a.requests = a.requests.saturating_sub(1);
        for b in h.blocks.iter().chain(&h.output) {
            a.release(*b);
        }
        if a.requests == 0 && a.blocks.is_empty() && a.prefill_tokens == 0 {
            self.workers.remove(&h.worker);
        }
    }

    /// A booking step from another shard, the ingest thread or another router.
    pub fn apply(&mut self, msg: LoadMsg) {
        let id = (msg.origin, msg.key);
        match msg.op {
            LoadOp::Add { worker, prefill_tokens, blocks, .. } => self.add(id, worker, prefill_tokens, blocks),
            LoadOp::PrefillDone | LoadOp::PrefillMarked => {
                self.prefill_done(id);
            }
            LoadOp::Output { blocks, decay } => self.output(id, &blocks, decay),
            LoadOp::Free => self.free(id),
        }
    }
}

/// A shard's bookings and its link to the ingest thread (the other shards, the workers'
/// prefill marks, the other routers).
#[derive(Default)]
pub struct Bookings {
    pub table: Rc<RefCell<ActiveTable>>,
    pub up: Rc<RefCell<Option<Upstream>>>,
    /// Whether booking steps are sent up.
    pub share: std::cell::Cell<bool>,
    next_key: std::cell::Cell<u64>,
}

impl Bookings {
    /// Books `prefill_tokens` and `blocks` on `worker` for the request the worker is sent
    /// as `request`, here and (through the ingest thread) everywhere else.
    pub fn book(&self, worker: Owner, prefill_tokens: u64, blocks: Vec<u64>, request: u128) -> Booking {
        let blocks: Arc<[u64]> = blocks.into();
        let key = self.next_key.get();
        self.next_key.set(key + 1);
        let origin = self.up.borrow().as_ref().map_or(0, |u| u.origin);
        let id = (origin, key);
        self.table.borrow_mut().add(id, worker, prefill_tokens, blocks.clone());
        let sent = self.share.get()
            && send(&self.up, key, || LoadOp::Add { worker, prefill_tokens, blocks, request }).is_some();
        Booking { table: self.table.clone(), up: self.up.clone(), id, sent, output: None, hit: None }
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
    /// (origin shard, key) in every table.
    id: (u16, u64),
    /// The ingest thread was told.
    sent: bool,
    /// `--router-track-output-blocks`: how far the answer has grown.
    output: Option<OutputTrack>,
    /// What the router saw when it chose: [`KvHit`].
    hit: Option<KvHit>,
}

/// The router's view of a request it booked, as 1.6.1 reports it in `nvext.timing`.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct KvHit {
    /// Prompt tokens taken as cached on the chosen worker over the prompt's tokens.
    pub rate: f64,
    /// Requests waiting in the router queue at the decision.
    pub queue_depth: u32,
}

/// An answer's growth in blocks (1.6.1's output-block tracking).
#[derive(Debug)]
struct OutputTrack {
    isl: u64,
    block_size: u64,
    /// Tokens generated so far.
    generated: u64,
    /// `ceil((isl + generated) / block_size)` when the last block was added.
    total: u64,
    /// `nvext.agent_hints.osl`: the expected output length, for the decay.
    expected: Option<u64>,
}

impl Booking {
    /// What the router saw when it chose (see [`KvHit`]).
    pub fn hit(&self) -> Option<KvHit> {
        self.hit
    }

    pub(super) fn with_hit(mut self, hit: KvHit) -> Booking {
        self.hit = Some(hit);
        self
    }

    /// Count the answer's output blocks from now on (`--router-track-output-blocks`): a
    /// prompt of `isl` tokens, blocks of `block_size`, `expected` output tokens if the
    /// request said.
    pub fn track_output(&mut self, isl: u64, block_size: u32, expected: Option<u32>) {
        let block_size = u64::from(block_size.max(1));
        let total = isl.div_ceil(block_size);
        self.output = Some(OutputTrack { isl, block_size, generated: 0, total, expected: expected.map(u64::from) });
    }

    /// The worker sent `n` more tokens: a block is added each time the answer crosses a
    /// block boundary (`ceil((isl + generated) / B)` grows), each under a random hash of its
    /// own; with an expected length, the request's blocks then weigh
    /// `max(0, 1 − generated / expected)`.
    pub fn generated(&mut self, n: usize) {
        let Some(t) = self.output.as_mut() else { return };
        t.generated += n as u64;
        let total = (t.isl + t.generated).div_ceil(t.block_size);
        if total <= t.total {
            return;
        }
        let blocks: Arc<[u64]> = (t.total..total).map(|_| crate::util::new_uuid() as u64).collect();
        t.total = total;
        let decay = t.expected.map(|e| (1.0 - t.generated as f64 / e.max(1) as f64).max(0.0));
        self.table.borrow_mut().output(self.id, &blocks, decay);
        if self.sent {
            send(&self.up, self.id.1, || LoadOp::Output { blocks, decay });
        }
    }

    /// The worker's first answer arrived: the prompt's prefill is done (unless the worker's
    /// own mark said so first).
    pub fn prefill_done(&mut self) {
        if self.table.borrow_mut().prefill_done(self.id) && self.sent {
            send(&self.up, self.id.1, || LoadOp::PrefillDone);
        }
    }
}

impl Drop for Booking {
    fn drop(&mut self) {
        self.table.borrow_mut().free(self.id);
        if self.sent {
            send(&self.up, self.id.1, || LoadOp::Free);
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
        let mut b1 = a.book(W7, 100, vec![1, 2, 3], 1);
        let b2 = a.book(W7, 50, vec![1, 2], 2);
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
    fn output_blocks_reach_the_other_shards_and_leave_with_the_booking() {
        let (mut ups, (mut downs, _wake)) = channel(1, 64).unwrap();
        let a = Bookings::default();
        *a.up.borrow_mut() = Some(ups.remove(0));
        a.share.set(true);
        let other = RefCell::new(ActiveTable::default());
        let deliver = |downs: &mut Vec<rtrb::Consumer<Up>>| {
            while let Ok(Up::Load(m)) = downs[0].pop() {
                other.borrow_mut().apply(m);
            }
        };
        let mut b = a.book(W7, 32, vec![1, 2], 1);
        b.track_output(32, 16, Some(160));
        b.generated(1); // ceil(33 / 16) = 3 > 2: one output block, weight 1 - 1/160
        deliver(&mut downs);
        for t in [&a.table, &other] {
            let t = t.borrow();
            let w = t.get(W7).unwrap();
            assert_eq!((w.blocks.len(), w.weighted_blocks()), (3, 3), "3 × 0.99375 rounds to 3");
        }
        b.generated(96); // 129 tokens: 9 blocks, all weighing 1 - 97/160 = 0.39375
        deliver(&mut downs);
        assert_eq!(other.borrow().get(W7).map(|w| w.weighted_blocks()), Some(4), "9 × 0.39375 = 3.54");
        drop(b);
        deliver(&mut downs);
        assert!(other.borrow().is_empty() && a.table.borrow().is_empty());
    }

    #[test]
    fn a_single_shard_books_locally_only() {
        let a = Bookings::default();
        let mut b = a.book(W1, 10, vec![5], 3);
        assert_eq!(a.table.borrow().get(W1).map(|x| x.prefill_tokens), Some(10));
        b.prefill_done();
        assert_eq!(a.table.borrow().get(W1).map(|x| x.prefill_tokens), Some(0));
        drop(b);
        assert!(a.table.borrow().is_empty());
    }
}
