//! Session affinity (`--router-session-affinity-ttl-secs`, `--router-session-affinity-mode`):
//! the requests of one session go to the worker its first request went to, while the session
//! keeps being used within the TTL (docs/dynamo/failures-and-overload.md, "Session affinity").
//!
//! The session is named by a request header (read by the HTTP side,
//! `service::inference::session_id`). Each shard keeps its own table, and every change made
//! on one shard (a binding, a request that starts or ends using it) is told to the others
//! through their inboxes
//! ([`SessionMsg`], the same hook as an inhibition), so no lock is shared on the request path
//! and a session's requests may arrive on any connection. Bindings carry a version (a
//! per-shard Lamport clock and the shard id): of two shards binding one new session at the
//! same moment, the later version wins everywhere.
//!
//! A binding lives while requests use it (on any shard) and for the TTL after the last one
//! ended; an idle binding past its TTL is replaced by the next request's choice. A bound
//! worker that is gone, or failed (inhibited or already tried), is replaced too, by the
//! worker the request then went to — the session's cache is lost with it (the routing side
//! is [`crate::infer::dispatch`]). When the bound worker is over a busy threshold, `hard`
//! mode refuses the request as overload (1.6.1 answers 529 although another worker is free)
//! and `soft` mode routes it as if unbound and moves the binding to where it ran. At most
//! [`MAX_ENTRIES`] sessions are held; a new one beyond that is refused as overload.
//! Runs on the shard threads.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use crate::error::{Error, Kind};
use crate::util::FastMap;

pub use crate::config::settings::AffinityMode;

/// Sessions held at most (1.6.1's limit).
pub const MAX_ENTRIES: usize = 65_536;
/// Longest session id, in bytes (1.6.1's limit).
pub const MAX_ID_BYTES: usize = 256;

/// Which binding is newer: a higher clock, then a higher shard id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Version {
    pub clock: u64,
    pub shard: u16,
}

/// A change one shard made, for the others.
#[derive(Clone, Debug)]
pub struct SessionMsg {
    pub id: Box<str>,
    pub worker: u64,
    pub version: Version,
    pub change: Change,
}

#[derive(Debug, Clone, Copy, PartialEq)]
pub enum Change {
    /// A request began using the binding (the binding is created or moved if newer).
    Acquired,
    /// A request that used it ended; it stays until then at least.
    Released(Instant),
}

struct Entry {
    worker: u64,
    version: Version,
    /// Requests using it on this shard, and on the others.
    here: u32,
    elsewhere: u32,
    idle_until: Instant,
}

impl Entry {
    fn live(&self, now: Instant) -> bool {
        self.here > 0 || self.elsewhere > 0 || self.idle_until > now
    }
}

struct Inner {
    ttl: Duration,
    shard: u16,
    clock: Cell<u64>,
    table: RefCell<FastMap<Box<str>, Entry>>,
    tell: Option<super::Tell<SessionMsg>>,
}

impl Inner {
    fn tell(&self, id: &str, worker: u64, version: Version, change: Change) {
        if let Some(tell) = &self.tell {
            tell(SessionMsg { id: id.into(), worker, version, change });
        }
    }
}

/// One shard's session table; `None` inside when affinity is off.
#[derive(Default)]
pub struct Sessions {
    inner: Option<Rc<Inner>>,
    mode: AffinityMode,
}

/// A request using its session's binding; the binding's idle TTL starts again when the
/// last one drops.
pub struct Lease {
    inner: Rc<Inner>,
    id: Box<str>,
}

impl Drop for Lease {
    fn drop(&mut self) {
        let until = Instant::now() + self.inner.ttl;
        let mut table = self.inner.table.borrow_mut();
        let Some(e) = table.get_mut(&*self.id) else { return };
        e.here = e.here.saturating_sub(1);
        e.idle_until = e.idle_until.max(until);
        let (worker, version) = (e.worker, e.version);
        drop(table);
        self.inner.tell(&self.id, worker, version, Change::Released(until));
    }
}

impl Sessions {
    /// Affinity with idle `ttl` on shard `shard`; `tell` passes changes to the other shards.
    pub fn new(ttl: Duration, mode: AffinityMode, shard: u16, tell: Option<super::Tell<SessionMsg>>) -> Sessions {
        let inner = Inner { ttl, shard, clock: Cell::new(0), table: RefCell::default(), tell };
        Sessions { inner: Some(Rc::new(inner)), mode }
    }

    /// Whether affinity is on.
    pub fn enabled(&self) -> bool {
        self.inner.is_some()
    }

    pub fn mode(&self) -> AffinityMode {
        self.mode
    }

    /// The worker session `id` is bound to now, if any. Errors: an id over
    /// [`MAX_ID_BYTES`] (400), or a new session when [`MAX_ENTRIES`] are held (overload).
    pub fn bound(&self, id: &str) -> Result<Option<u64>, Error> {
        let Some(inner) = &self.inner else { return Ok(None) };
        if id.len() > MAX_ID_BYTES {
            return Err(Error::new(
                Kind::BadRequest,
                format!("session affinity ID must not exceed {MAX_ID_BYTES} bytes"),
            ));
        }
        let now = Instant::now();
        let mut table = inner.table.borrow_mut();
        match table.get(id) {
            Some(e) if e.live(now) => return Ok(Some(e.worker)),
            Some(_) => return Ok(None),
            None => {}
        }
        if table.len() >= MAX_ENTRIES {
            table.retain(|_, e| e.live(now));
            if table.len() >= MAX_ENTRIES {
                return Err(Error::new(Kind::Overloaded, "session affinity entry limit reached"));
            }
        }
        Ok(None)
    }

    /// The request of session `id` was dispatched to `worker`: it uses the binding until the
    /// lease drops. A new session, an expired one, or one bound elsewhere is (re)bound here.
    pub fn bind(&self, id: &str, worker: u64) -> Option<Lease> {
        let inner = self.inner.as_ref()?;
        let now = Instant::now();
        let mut table = inner.table.borrow_mut();
        let version = match table.get_mut(id) {
            Some(e) if e.worker == worker && e.live(now) => {
                e.here += 1;
                e.version
            }
            other => {
                let clock = inner.clock.get() + 1;
                inner.clock.set(clock);
                let version = Version { clock, shard: inner.shard };
                let (here, elsewhere) = other.map_or((0, 0), |e| (e.here, e.elsewhere));
                let e = Entry { worker, version, here: here + 1, elsewhere, idle_until: now + inner.ttl };
                table.insert(id.into(), e);
                version
            }
        };
        drop(table);
        inner.tell(id, worker, version, Change::Acquired);
        Some(Lease { inner: inner.clone(), id: id.into() })
    }

    /// Apply another shard's change.
    pub fn apply(&self, msg: SessionMsg) {
        let Some(inner) = &self.inner else { return };
        inner.clock.set(inner.clock.get().max(msg.version.clock));
        let mut table = inner.table.borrow_mut();
        let now = Instant::now();
        let e = table.entry(msg.id).or_insert_with(|| Entry {
            worker: msg.worker,
            version: msg.version,
            here: 0,
            elsewhere: 0,
            idle_until: now + inner.ttl,
        });
        if msg.version > e.version {
            e.worker = msg.worker;
            e.version = msg.version;
        }
        match msg.change {
            Change::Acquired => e.elsewhere += 1,
            Change::Released(until) => {
                e.elsewhere = e.elsewhere.saturating_sub(1);
                e.idle_until = e.idle_until.max(until);
            }
        }
    }

    /// Sessions held on this shard (live or not yet purged).
    pub fn len(&self) -> usize {
        self.inner.as_ref().map_or(0, |i| i.table.borrow().len())
    }

    /// Whether no session is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Outbox = Rc<RefCell<Vec<SessionMsg>>>;

    fn shard(id: u16, ttl: Duration) -> (Sessions, Outbox) {
        let out: Outbox = Rc::default();
        let sink = out.clone();
        (Sessions::new(ttl, AffinityMode::Hard, id, Some(Box::new(move |m| sink.borrow_mut().push(m)))), out)
    }

    fn deliver(out: &Outbox, to: &Sessions) {
        for m in out.borrow_mut().drain(..) {
            to.apply(m);
        }
    }

    #[test]
    fn a_binding_is_shared_by_the_shards_and_lives_while_used_and_for_its_ttl() {
        let ttl = Duration::from_millis(200);
        let (a, out_a) = shard(0, ttl);
        let (b, out_b) = shard(1, ttl);
        assert_eq!(a.bound("s").unwrap(), None);
        let lease = a.bind("s", 7).unwrap();
        deliver(&out_a, &b);
        assert_eq!(b.bound("s").unwrap(), Some(7), "the other shard sees the binding");
        // A long request on A keeps it past the TTL on B too.
        std::thread::sleep(ttl + Duration::from_millis(50));
        assert_eq!(b.bound("s").unwrap(), Some(7));
        drop(lease);
        deliver(&out_a, &b);
        assert_eq!(b.bound("s").unwrap(), Some(7), "idle, within its TTL");
        let l2 = b.bind("s", 7).unwrap();
        deliver(&out_b, &a);
        drop(l2);
        deliver(&out_b, &a);
        std::thread::sleep(ttl + Duration::from_millis(50));
        assert_eq!(a.bound("s").unwrap(), None, "idle past its TTL");
        assert_eq!(b.bound("s").unwrap(), None);
    }

    #[test]
    fn the_newer_binding_wins_everywhere() {
        let ttl = Duration::from_secs(60);
        let (a, out_a) = shard(0, ttl);
        let (b, out_b) = shard(1, ttl);
        // Both shards bind the new session at once, to different workers.
        let _la = a.bind("s", 1).unwrap();
        let _lb = b.bind("s", 2).unwrap();
        deliver(&out_a, &b);
        deliver(&out_b, &a);
        assert_eq!(a.bound("s").unwrap(), b.bound("s").unwrap(), "one binding wins on both");
        // A rebinding (its worker gone, or busy in soft mode) is newer still, everywhere.
        let _l = b.bind("s", 3).unwrap();
        deliver(&out_b, &a);
        assert_eq!(a.bound("s").unwrap(), Some(3));
    }

    #[test]
    fn limits_and_off() {
        let (a, _) = shard(0, Duration::from_secs(1));
        let long = "x".repeat(MAX_ID_BYTES + 1);
        assert_eq!(a.bound(&long).unwrap_err().status(), 400);
        assert!(a.bound(&"x".repeat(MAX_ID_BYTES)).is_ok());
        let off = Sessions::default();
        assert!(!off.enabled());
        assert!(off.bind("s", 1).is_none());
        assert_eq!(off.bound("s").unwrap(), None);
    }
}
