//! What wakes the file store's watch loop, and what it says changed.
//!
//! [`InotifyWake`] (what the control thread uses) wakes as soon as a record file in a bucket
//! is created, written, moved or removed, and at least every [`INOTIFY_RESCAN`] (TTL expiry
//! produces no event; the store then lists its buckets only when a listed record's TTL is
//! due or [`super::file::FULL_SWEEP`] has passed). It also keeps the names the kernel reported, so the store re-reads
//! only those files ([`Changed::Names`]) and takes every other record from its cache when the
//! file's inode and size are unchanged. That matters with real Dynamo workers: each rewrites
//! its event-channel records every ~3.3 s, which wakes the watch a few times a second; reading
//! every record on each wake cost ~90 K instructions a time (a ~20 % share of a small request
//! at 10 requests/s). [`PeriodicWake`] knows nothing and asks for a full read every time.
//!
//! A full read ([`Changed::All`]) is asked for whenever a name could have been missed: the
//! first scan, a queue overflow, a directory created or removed, a watch added or lost.
//!
//! Blocking calls throughout: this runs on the control thread, never on a shard.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::file::{BUCKETS, DEFAULT_RESCAN};

/// What may have changed in the store since the last scan.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Changed {
    /// Anything: read every record.
    All,
    /// Only these records (bucket, file name) were written, moved or removed; other cached
    /// records are current if their inode and size are unchanged. A handful at a time: a
    /// list, searched in order.
    Names(Vec<(&'static str, String)>),
}

impl Changed {
    /// Nothing reported yet.
    pub fn none() -> Changed {
        Changed::Names(Vec::new())
    }

    /// Whether the cached copy of `bucket`/`name` may be stale.
    pub fn touches(&self, bucket: &'static str, name: &str) -> bool {
        match self {
            Changed::All => true,
            Changed::Names(n) => n.iter().any(|(b, m)| *b == bucket && m == name),
        }
    }

    /// Adds what `other` reports.
    pub fn merge(&mut self, other: Changed) {
        match (&mut *self, other) {
            (Changed::All, _) => {}
            (_, Changed::All) => *self = Changed::All,
            (Changed::Names(a), Changed::Names(b)) => b.into_iter().for_each(|n| Self::add(a, n)),
        }
    }

    fn add(names: &mut Vec<(&'static str, String)>, name: (&'static str, String)) {
        if !names.contains(&name) {
            names.push(name);
        }
    }
}

/// What wakes the watch loop for a rescan.
pub trait WakeSource {
    /// Blocks until the next rescan is due, at most `max_wait`.
    fn wait(&mut self, max_wait: Duration);

    /// What changed since the last call (by default: anything).
    fn take_changed(&mut self) -> Changed {
        Changed::All
    }
}

/// Rescans every `interval`.
#[derive(Clone, Copy, Debug)]
pub struct PeriodicWake {
    pub interval: Duration,
}

impl Default for PeriodicWake {
    fn default() -> Self {
        PeriodicWake { interval: DEFAULT_RESCAN }
    }
}

impl WakeSource for PeriodicWake {
    fn wait(&mut self, max_wait: Duration) {
        std::thread::sleep(self.interval.min(max_wait));
    }
}

/// Wakes as soon as a record file in a bucket is created, written, moved or removed
/// (inotify), and at least every `rescan`. A keep-alive touch that sets only the mtime
/// raises no event here. Directories that do not exist yet are watched once they appear.
/// Falls back to plain sleeping (and full reads) when inotify is unavailable.
pub struct InotifyWake {
    fd: Option<std::os::fd::OwnedFd>,
    /// Watched directories and, for the bucket directories, their bucket.
    dirs: Vec<(PathBuf, Option<&'static str>)>,
    /// Watch descriptor of each directory in `dirs` once watched.
    wds: Vec<Option<i32>>,
    rescan: Duration,
    last: Instant,
    changed: Changed,
}

/// Rescan period of [`InotifyWake`] without events.
pub const INOTIFY_RESCAN: Duration = Duration::from_secs(1);

impl InotifyWake {
    /// Watches the buckets under `root` (and `root`, `root/v1` for buckets created later).
    pub fn new(root: &Path) -> InotifyWake {
        use std::os::fd::FromRawFd;
        // SAFETY: plain syscall without pointers; the result is checked before use.
        let fd = unsafe { libc::inotify_init1(libc::IN_NONBLOCK | libc::IN_CLOEXEC) };
        let fd = (fd >= 0).then(|| {
            // SAFETY: `fd` is a fresh descriptor this struct now owns alone.
            unsafe { std::os::fd::OwnedFd::from_raw_fd(fd) }
        });
        if fd.is_none() {
            crate::log::warn("inotify is unavailable; discovery falls back to periodic rescans");
        }
        let mut dirs = vec![(root.to_path_buf(), None), (root.join("v1"), None)];
        dirs.extend(BUCKETS.iter().map(|b| (root.join(b), Some(*b))));
        let wds = vec![None; dirs.len()];
        InotifyWake { fd, dirs, wds, rescan: INOTIFY_RESCAN, last: Instant::now(), changed: Changed::All }
    }

    /// Rescans at least every `rescan` without events (default [`INOTIFY_RESCAN`]).
    pub fn with_rescan(mut self, rescan: Duration) -> InotifyWake {
        self.rescan = rescan;
        self
    }

    /// Adds the watches not in place (directories that did not exist, or were removed). A
    /// new watch asks for a full read: files written before it may have raised no event.
    fn add_watches(&mut self, fd: i32) {
        use std::os::unix::ffi::OsStrExt;
        let mask = libc::IN_MODIFY
            | libc::IN_CLOSE_WRITE
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_CREATE
            | libc::IN_DELETE
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF;
        for ((dir, _), known) in self.dirs.iter().zip(self.wds.iter_mut()).filter(|(_, k)| k.is_none()) {
            let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { continue };
            // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
            let wd = unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) };
            if wd >= 0 {
                self.changed = Changed::All;
                *known = Some(wd);
            }
        }
    }

    /// Reads every queued event into `changed`.
    fn drain(&mut self, fd: i32) {
        const HEADER: usize = std::mem::size_of::<libc::inotify_event>();
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
            let mut at = 0;
            while at + HEADER <= n as usize {
                // SAFETY: the kernel wrote a whole `inotify_event` header at `at` (checked
                // against `n` above); `read_unaligned` copies it out without alignment needs.
                let ev: libc::inotify_event = unsafe { std::ptr::read_unaligned(buf.as_ptr().add(at).cast()) };
                let name_end = (at + HEADER + ev.len as usize).min(n as usize);
                let name = &buf[at + HEADER..name_end];
                let name = &name[..name.iter().position(|&b| b == 0).unwrap_or(name.len())];
                self.note(ev.wd, ev.mask, name);
                at = name_end;
            }
        }
    }

    /// Records one event: a named file in a bucket, or something that needs a full read.
    fn note(&mut self, wd: i32, mask: u32, name: &[u8]) {
        let watched = self.wds.iter().position(|w| *w == Some(wd));
        if mask & libc::IN_IGNORED != 0 {
            // The watch is gone (its directory was removed): add it again when it reappears.
            if let Some(i) = watched {
                self.wds[i] = None;
            }
        }
        let bucket = watched.and_then(|i| self.dirs[i].1);
        let self_event = mask & (libc::IN_Q_OVERFLOW | libc::IN_IGNORED | libc::IN_DELETE_SELF | libc::IN_MOVE_SELF);
        match (bucket, std::str::from_utf8(name)) {
            (Some(bucket), Ok(name)) if self_event == 0 && !name.is_empty() && mask & libc::IN_ISDIR == 0 => {
                if let Changed::Names(n) = &mut self.changed {
                    Changed::add(n, (bucket, name.to_string()));
                }
            }
            _ => self.changed = Changed::All,
        }
    }
}

impl WakeSource for InotifyWake {
    fn wait(&mut self, max_wait: Duration) {
        use std::os::fd::AsRawFd;
        let Some(fd) = self.fd.as_ref().map(AsRawFd::as_raw_fd) else {
            std::thread::sleep(DEFAULT_RESCAN.min(max_wait));
            return;
        };
        self.add_watches(fd);
        let due = self.rescan.saturating_sub(self.last.elapsed());
        let timeout = due.min(max_wait);
        let mut pfd = libc::pollfd { fd, events: libc::POLLIN, revents: 0 };
        // SAFETY: one valid pollfd for the duration of the call.
        let ready = unsafe { libc::poll(&mut pfd, 1, timeout.as_millis() as i32) };
        if ready > 0 {
            // Writers create a temporary, write it and rename it: let the burst settle so
            // one rescan sees the finished record.
            std::thread::sleep(Duration::from_millis(5));
            self.drain(fd);
            self.last = Instant::now();
        } else if self.last.elapsed() >= self.rescan {
            self.last = Instant::now();
        }
    }

    fn take_changed(&mut self) -> Changed {
        if self.fd.is_none() {
            return Changed::All;
        }
        std::mem::replace(&mut self.changed, Changed::none())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merging_keeps_all_and_unions_names() {
        let mut c = Changed::none();
        c.merge(Changed::Names(vec![("v1/mdc", "a".to_string())]));
        c.merge(Changed::Names(vec![("v1/instances", "b".to_string()), ("v1/mdc", "a".to_string())]));
        assert_eq!(c, Changed::Names(vec![("v1/mdc", "a".to_string()), ("v1/instances", "b".to_string())]));
        assert!(c.touches("v1/mdc", "a") && c.touches("v1/instances", "b"));
        assert!(!c.touches("v1/mdc", "b"));
        c.merge(Changed::All);
        c.merge(Changed::none());
        assert_eq!(c, Changed::All);
        assert!(c.touches("v1/mdc", "anything"));
    }
}
