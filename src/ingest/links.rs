//! The ingest thread's sockets: one ZMQ [`Sub`] per discovered publisher endpoint
//! (connected, and reconnected every second while it does not answer), the NATS connection
//! for workers on `--event-plane nats`, and the wait on all of them together with the
//! shards' wake descriptor and the replica-sync publisher ([`poll`]).

use std::collections::{BTreeSet, HashMap};
use std::os::fd::AsRawFd;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use super::peers::SyncOut;
use super::{IngestStats, MAX_FRAME};
use crate::ingest::nats;
use crate::ingest::zmq::{Message, Sub};
use crate::router::kv::active::Wake;

pub(super) struct Link {
    pub topic: &'static [u8],
    /// The publisher id discovery names (for `active_sequences_events`).
    pub publisher: u64,
    pub sub: Option<Sub>,
    pub next_try: Instant,
}

pub(super) fn connect(links: &mut HashMap<String, Link>, stats: &IngestStats) {
    let now = Instant::now();
    for (ep, link) in links.iter_mut().filter(|(_, l)| l.sub.is_none() && l.next_try <= now) {
        match Sub::connect(ep, &[link.topic], Duration::from_secs(1), MAX_FRAME) {
            Ok(sub) => {
                crate::log::info(&format!("kv events: subscribed to {ep} ({})", String::from_utf8_lossy(link.topic)));
                stats.connected.fetch_add(1, Ordering::Relaxed);
                link.sub = Some(sub);
            }
            Err(e) => {
                crate::log::warn(&format!("kv events: cannot subscribe to {ep}: {e}"));
                link.next_try = now + Duration::from_secs(1);
            }
        }
    }
}

/// The NATS side: one connection to `NATS_SERVER` subscribed to every wanted subject
/// (reconnected with the new list when discovery changes it; a message lost meanwhile is a
/// gap the recovery fills).
pub(super) struct NatsLink {
    pub url: String,
    /// TLS for a `tls://` server.
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
    pub subjects: BTreeSet<String>,
    pub sub: Option<nats::Sub>,
    pub next_try: Instant,
}

impl NatsLink {
    pub(super) fn connect(&mut self, stats: &IngestStats) {
        if self.subjects.is_empty() || self.sub.is_some() || self.next_try > Instant::now() {
            return;
        }
        let subjects: Vec<&str> = self.subjects.iter().map(String::as_str).collect();
        match nats::Sub::connect_tls(&self.url, &subjects, Duration::from_secs(1), MAX_FRAME, self.tls.as_ref()) {
            Ok(sub) => {
                crate::log::info(&format!("kv events: subscribed to {} subjects on {}", subjects.len(), self.url));
                stats.connected.fetch_add(1, Ordering::Relaxed);
                self.sub = Some(sub);
            }
            Err(e) => {
                crate::log::warn(&format!("kv events: cannot subscribe on NATS {}: {e}", self.url));
                self.next_try = Instant::now() + Duration::from_secs(1);
            }
        }
    }
}

/// The sockets the ingest thread waits on.
pub(super) struct Sockets<'a> {
    pub links: &'a mut HashMap<String, Link>,
    pub nats: &'a mut NatsLink,
    pub publisher: Option<&'a mut SyncOut>,
}

/// Waits (≤ `wait_ms`) for readable publishers or word from the shards (`wake`), and collects
/// the publishers' whole messages.
pub(super) fn poll(
    sockets: Sockets<'_>,
    wake: Option<&Wake>,
    out: &mut Vec<Message>,
    nats_out: &mut Vec<nats::NatsMsg>,
    wait_ms: i32,
) {
    let Sockets { links, nats, publisher } = sockets;
    let mut fds: Vec<libc::pollfd> = Vec::new();
    let mut keys: Vec<Option<String>> = Vec::new();
    if let Some(w) = wake {
        // First, and given no key: readable means "the shards sent something".
        fds.push(libc::pollfd { fd: w.fd(), events: libc::POLLIN, revents: 0 });
    }
    for (ep, link) in links.iter() {
        if let Some(sub) = &link.sub {
            fds.push(libc::pollfd { fd: sub.stream().as_raw_fd(), events: libc::POLLIN, revents: 0 });
            keys.push(Some(ep.clone()));
        }
    }
    if let Some(sub) = &nats.sub {
        fds.push(libc::pollfd { fd: sub.stream().as_raw_fd(), events: libc::POLLIN, revents: 0 });
        keys.push(None);
    }
    if let Some(p) = publisher {
        // Last, and given no keys: readiness only ends the wait; `Peers::flush` serves them.
        p.socket.poll_fds(&mut fds);
    }
    if fds.is_empty() {
        std::thread::sleep(Duration::from_millis(wait_ms as u64));
        return;
    }
    // SAFETY: `fds` is a valid array of `fds.len()` pollfd structs for the call's duration.
    let n = unsafe { libc::poll(fds.as_mut_ptr(), fds.len() as libc::nfds_t, wait_ms) };
    if n <= 0 {
        return;
    }
    let mut fds = &fds[..];
    if let Some(w) = wake {
        if fds[0].revents != 0 {
            w.clear();
        }
        fds = &fds[1..];
    }
    for (fd, key) in fds.iter().zip(keys) {
        if fd.revents == 0 {
            continue;
        }
        let Some(ep) = key else {
            if let Some(Err(e)) = nats.sub.as_mut().map(|s| s.drain(nats_out)) {
                crate::log::warn(&format!("kv events: NATS {} lost ({e}); reconnecting", nats.url));
                nats.sub = None;
                nats.next_try = Instant::now() + Duration::from_secs(1);
            }
            continue;
        };
        let Some(link) = links.get_mut(&ep) else { continue };
        let Some(sub) = link.sub.as_mut() else { continue };
        if let Err(e) = sub.drain(out) {
            crate::log::warn(&format!("kv events: publisher {ep} lost ({e}); reconnecting"));
            link.sub = None;
            link.next_try = Instant::now() + Duration::from_secs(1);
        }
    }
}
