//! [`EtcdView`]: the frontend's live copy of the discovery buckets.

use std::collections::BTreeMap;
use std::io;
use std::os::fd::AsRawFd;
use std::time::{Duration, Instant};

use super::{EtcdClient, EtcdLease, EventKind, Watch, DEFAULT_LEASE_TTL};
use crate::discovery::records::{BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC};

/// The buckets a frontend watches, in the order Dynamo lists them at start.
pub const VIEW_BUCKETS: [&str; 4] = [BUCKET_MDC, BUCKET_INSTANCES, BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES];

/// Pause between attempts to re-list a bucket while etcd does not answer.
const RESYNC_RETRY: Duration = Duration::from_millis(500);
/// Bound on one read of a stream that `poll` reported readable.
const READY_READ: Duration = Duration::from_millis(100);

/// The records of [`VIEW_BUCKETS`], kept current by one watch per bucket.
///
/// Keys are stored without their `v1/<bucket>/` prefix (as the file backend decodes them):
/// `("v1/instances", "dynamo/backend/generate/6a6ca1fffe9d3106")`.
pub struct EtcdView {
    client: EtcdClient,
    records: BTreeMap<(&'static str, String), Vec<u8>>,
    /// One per bucket of [`VIEW_BUCKETS`]; `None` after the stream was lost, until a resync.
    watches: [Option<Watch>; 4],
    /// The frontend's own lease (it registers nothing under it, as Dynamo's frontend).
    lease: EtcdLease,
}

impl EtcdView {
    /// Connects to `endpoints` (`ETCD_ENDPOINTS` syntax), grants the frontend's lease, lists
    /// each bucket and watches it from the revision after the listing.
    pub fn start(endpoints: &str) -> io::Result<EtcdView> {
        let client = EtcdClient::new(endpoints)?;
        let lease = EtcdLease::grant(&client, DEFAULT_LEASE_TTL)?;
        let mut view = EtcdView { client, records: BTreeMap::new(), watches: [None, None, None, None], lease };
        for i in 0..VIEW_BUCKETS.len() {
            view.resync(i)?;
        }
        Ok(view)
    }

    /// Every live record: (bucket, key without the bucket prefix, value), in key order.
    pub fn records(&self) -> impl Iterator<Item = (&'static str, &str, &[u8])> {
        self.records.iter().map(|((bucket, key), value)| (*bucket, key.as_str(), value.as_slice()))
    }

    /// The value of one record.
    pub fn get(&self, bucket: &str, key: &str) -> Option<&[u8]> {
        let bucket = VIEW_BUCKETS.into_iter().find(|b| *b == bucket)?;
        self.records.get(&(bucket, key.to_string())).map(Vec::as_slice)
    }

    /// The frontend's lease id.
    pub fn lease_id(&self) -> i64 {
        self.lease.id()
    }

    pub fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// Ends the view and revokes the frontend's lease (a clean shutdown). Merely dropping
    /// the view stops the keep-alive and leaves the lease to expire.
    pub fn shutdown(self) -> io::Result<()> {
        self.lease.revoke()
    }

    /// Waits up to `max_wait` for changes and applies them; `Ok(true)` as soon as a record
    /// was added, changed or removed. A lost watch is replaced by a re-list (diffed against
    /// what is held) and a new watch. While etcd cannot be reached the records are kept as
    /// they were and retried; an error is returned only when `max_wait` ends with a bucket
    /// still not re-listed.
    pub fn wait(&mut self, max_wait: Duration) -> io::Result<bool> {
        let deadline = Instant::now() + max_wait;
        let mut changed = false;
        loop {
            let mut failure = None;
            for i in 0..VIEW_BUCKETS.len() {
                if self.watches[i].is_none() {
                    match self.resync(i) {
                        Ok(c) => changed |= c,
                        Err(e) => failure = Some(e),
                    }
                }
                if let Some(w) = &mut self.watches[i] {
                    match w.take_events() {
                        Ok(events) => changed |= self.apply(i, events),
                        Err(e) => self.lose(i, &e),
                    }
                }
            }
            if changed {
                return Ok(true);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if let Some(e) = failure {
                if left.is_zero() {
                    return Err(e);
                }
                std::thread::sleep(left.min(RESYNC_RETRY));
                continue;
            }
            if self.watches.iter().any(Option::is_none) {
                continue;
            }
            if left.is_zero() {
                return Ok(false);
            }
            for i in self.readable(left)? {
                if let Some(w) = &mut self.watches[i] {
                    if let Err(e) = w.read_once(READY_READ) {
                        self.lose(i, &e);
                    }
                }
            }
        }
    }

    /// Indices of the watches with bytes to read (or a closed connection), waiting up to
    /// `timeout`.
    fn readable(&self, timeout: Duration) -> io::Result<Vec<usize>> {
        let mut fds: Vec<libc::pollfd> = self
            .watches
            .iter()
            .flatten()
            .map(|w| libc::pollfd { fd: w.as_raw_fd(), events: libc::POLLIN, revents: 0 })
            .collect();
        let ms = timeout.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: `fds` is a live, initialised array of `fds.len()` pollfd structs, and every
        // fd in it belongs to a socket owned by `self.watches`, open for the whole call.
        let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, ms) };
        if n < 0 {
            let e = io::Error::last_os_error();
            return if e.kind() == io::ErrorKind::Interrupted { Ok(Vec::new()) } else { Err(e) };
        }
        let ready = |fd| fds.iter().any(|p| p.fd == fd && p.revents != 0);
        Ok((0..VIEW_BUCKETS.len())
            .filter(|&i| self.watches[i].as_ref().is_some_and(|w| ready(w.as_raw_fd())))
            .collect())
    }

    /// Drops the watch of bucket `i`; the next [`EtcdView::wait`] re-lists it.
    fn lose(&mut self, i: usize, e: &io::Error) {
        crate::log::warn(&format!("{e}; re-listing {}", VIEW_BUCKETS[i]));
        self.watches[i] = None;
    }

    /// Lists bucket `i`, replaces its records (true if any differed) and watches it again.
    fn resync(&mut self, i: usize) -> io::Result<bool> {
        let bucket = VIEW_BUCKETS[i];
        let prefix = format!("{bucket}/");
        let (kvs, revision) = self.client.range_prefix(&prefix)?;
        let mut fresh: BTreeMap<(&'static str, String), Vec<u8>> = kvs
            .into_iter()
            .filter_map(|kv| Some(((bucket, kv.key.strip_prefix(&prefix)?.to_string()), kv.value)))
            .collect();
        let changed = !self.records.iter().filter(|((b, _), _)| *b == bucket).eq(fresh.iter());
        self.records.retain(|(b, _), _| *b != bucket);
        self.records.append(&mut fresh);
        self.watches[i] = Some(self.client.watch_prefix(&prefix, revision + 1)?);
        Ok(changed)
    }

    /// Applies the events of bucket `i`'s watch; true if a record changed.
    fn apply(&mut self, i: usize, events: Vec<super::Event>) -> bool {
        let bucket = VIEW_BUCKETS[i];
        let prefix = format!("{bucket}/");
        let mut changed = false;
        for ev in events {
            let Some(key) = ev.key.strip_prefix(&prefix) else { continue };
            let slot = (bucket, key.to_string());
            changed |= match ev.kind {
                EventKind::Put => self.records.insert(slot, ev.value.clone()).is_none_or(|old| old != ev.value),
                EventKind::Delete => self.records.remove(&slot).is_some(),
            };
        }
        changed
    }
}
