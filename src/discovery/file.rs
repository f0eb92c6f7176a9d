//! The file discovery backend (`--discovery-backend file`, `DYN_FILE_KV`; spec §3).
//!
//! [`FileStore::scan`] reads the store once: it lists the buckets `v1/instances`, `v1/mdc`,
//! `v1/event_channels` and `v1/event_sources`, skips writers' `.tmp_*` files, decodes file names and drops
//! records whose mtime is older than the TTL (the store's only liveness signal), then hands
//! the rest to [`snapshot::build`](super::snapshot::build) like every backend. Between scans
//! the store waits on a [`WakeSource`]: [`InotifyWake`] (what the control thread uses) wakes
//! as soon as a bucket changes and still rescans periodically for TTL expiry, which produces
//! no file event; [`PeriodicWake`] only sleeps.
//!
//! Blocking I/O throughout: this runs on the control thread, never on a shard.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::records::{
    decode_file_name, is_temp_file, BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC,
};
use super::snapshot::{build, skip, Catalog, ParseCache, Raw, Skipped, Snapshot, Source};
use crate::config::NamespaceFilter;
use crate::registry::Registry;

pub use super::snapshot::namespace_matches;

/// Dynamo's record TTL: a record whose mtime is older than this is dead (spec §3.4).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default rescan period of [`PeriodicWake`].
pub const DEFAULT_RESCAN: Duration = Duration::from_millis(200);
/// Files larger than this are not records (cards are a few KiB).
const MAX_RECORD_BYTES: u64 = 8 << 20;
/// The buckets a frontend reads.
const BUCKETS: [&str; 4] = [BUCKET_INSTANCES, BUCKET_MDC, BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES];

/// Reader of one `DYN_FILE_KV` directory.
pub struct FileStore {
    root: PathBuf,
    ttl: Duration,
    filter: NamespaceFilter,
    catalog: Catalog,
    wake: Box<dyn WakeSource + Send>,
    cache: std::cell::RefCell<ParseCache>,
}

impl FileStore {
    /// A store at `root` (the `DYN_FILE_KV` directory) with the default 10 s TTL, rescanned
    /// every [`DEFAULT_RESCAN`] when watched.
    pub fn new(root: impl Into<PathBuf>, filter: NamespaceFilter) -> FileStore {
        FileStore {
            root: root.into(),
            ttl: DEFAULT_TTL,
            filter,
            catalog: Catalog::default(),
            wake: Box::new(PeriodicWake::default()),
            cache: Default::default(),
        }
    }

    pub fn with_ttl(mut self, ttl: Duration) -> FileStore {
        self.ttl = ttl;
        self
    }

    /// Waits on `wake` between scans when watched.
    pub fn with_wake(mut self, wake: impl WakeSource + Send + 'static) -> FileStore {
        self.wake = Box::new(wake);
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    pub fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Reads the store as of `now`. A missing root or bucket reads as empty (workers create
    /// the directories when they first register). Only an unreadable existing bucket
    /// directory is an error.
    pub fn scan(&self, now: SystemTime) -> io::Result<Snapshot> {
        let (files, skipped) = self.read_all(now)?;
        Ok(build(raws(&files), &self.filter, skipped, &mut self.cache.borrow_mut()))
    }

    /// [`FileStore::scan`], or `None` when the live files and their bytes are exactly those
    /// of the previous scan (only mtimes moved: keep-alive touches). The control thread
    /// rescans every second; this keeps an idle rescan to reading the files.
    pub fn scan_changed(&self, now: SystemTime) -> io::Result<Option<Snapshot>> {
        let (files, skipped) = self.read_all(now)?;
        let mut cache = self.cache.borrow_mut();
        if skipped.is_empty() && cache.unchanged(raws(&files)) {
            return Ok(None);
        }
        Ok(Some(build(raws(&files), &self.filter, skipped, &mut cache)))
    }

    fn read_all(&self, now: SystemTime) -> io::Result<(Vec<Listed>, Vec<Skipped>)> {
        let mut skipped = Vec::new();
        let mut files = Vec::new();
        for bucket in BUCKETS {
            files.extend(self.read_bucket(bucket, now, &mut skipped)?);
        }
        Ok((files, skipped))
    }

    /// Lists one bucket: (bucket, file name, decoded key, mtime, content) of each live file.
    fn read_bucket(
        &self,
        bucket: &'static str,
        now: SystemTime,
        skipped: &mut Vec<Skipped>,
    ) -> io::Result<Vec<Listed>> {
        let dir = self.root.join(bucket);
        let listing = match fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(e),
        };
        let mut out = Vec::new();
        for dirent in listing {
            // A file removed while listing is not an error; skip it.
            let Ok(dirent) = dirent else { continue };
            let Ok(file_name) = dirent.file_name().into_string() else {
                skipped.push(skip(bucket, &dirent.file_name().to_string_lossy(), "name is not UTF-8".into()));
                continue;
            };
            if is_temp_file(&file_name) {
                continue;
            }
            let Some(key) = decode_file_name(&file_name) else {
                skipped.push(skip(bucket, &file_name, "malformed percent-encoding".into()));
                continue;
            };
            // Follow symlinks like a plain open would; a vanished file is skipped silently.
            let Ok(meta) = fs::metadata(dirent.path()) else { continue };
            if !meta.is_file() {
                skipped.push(skip(bucket, &file_name, "not a regular file".into()));
                continue;
            }
            let Ok(modified) = meta.modified() else { continue };
            if is_expired(modified, now, self.ttl) {
                continue;
            }
            if meta.len() > MAX_RECORD_BYTES {
                skipped.push(skip(bucket, &file_name, format!("{} bytes is too large for a record", meta.len())));
                continue;
            }
            let Ok(bytes) = fs::read(dirent.path()) else { continue };
            out.push((bucket, file_name, key, modified, bytes));
        }
        Ok(out)
    }

    /// The Registry of `snap` as of `now` (see [`Catalog::registry`]).
    pub fn registry(&mut self, snap: &Snapshot, now: SystemTime) -> Registry {
        self.catalog.registry(snap, now)
    }
}

/// One listed file: (bucket, file name, decoded key, mtime, content).
type Listed = (&'static str, String, String, SystemTime, Vec<u8>);

/// The listed files as [`Raw`] records.
fn raws<'a>(files: &'a [Listed]) -> impl Iterator<Item = Raw<'a>> + Clone + 'a {
    files.iter().map(|(bucket, name, key, modified, bytes)| Raw { bucket, name, key, modified: *modified, bytes })
}

impl Source for FileStore {
    fn scan(&mut self, now: SystemTime) -> io::Result<Snapshot> {
        FileStore::scan(self, now)
    }

    fn scan_changed(&mut self, now: SystemTime) -> io::Result<Option<Snapshot>> {
        FileStore::scan_changed(self, now)
    }

    fn wait(&mut self, max_wait: Duration) {
        self.wake.wait(max_wait);
    }
}

/// True when a record last touched at `modified` is dead at `now`. A future mtime (clock
/// skew between writers) counts as fresh.
pub fn is_expired(modified: SystemTime, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(modified).is_ok_and(|age| age > ttl)
}

// ---------------------------------------------------------------------------------------------
// Waking
// ---------------------------------------------------------------------------------------------

/// What wakes the watch loop for a rescan.
pub trait WakeSource {
    /// Blocks until the next rescan is due, at most `max_wait`.
    fn wait(&mut self, max_wait: Duration);
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
/// (inotify), and at least every `rescan` (TTL expiry produces no event; Dynamo re-lists on
/// its ~3.3 s sweep). A keep-alive touch that sets only the mtime is reported by
/// the kernel as a modification and costs one rescan that finds nothing new. Directories
/// that do not exist yet are watched once they appear. Falls back to plain sleeping when
/// inotify is unavailable.
pub struct InotifyWake {
    fd: Option<std::os::fd::OwnedFd>,
    dirs: Vec<PathBuf>,
    rescan: Duration,
    last: std::time::Instant,
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
        let mut dirs = vec![root.to_path_buf(), root.join("v1")];
        dirs.extend(BUCKETS.iter().map(|b| root.join(b)));
        InotifyWake { fd, dirs, rescan: INOTIFY_RESCAN, last: std::time::Instant::now() }
    }

    /// Rescans at least every `rescan` without events (default [`INOTIFY_RESCAN`]).
    pub fn with_rescan(mut self, rescan: Duration) -> InotifyWake {
        self.rescan = rescan;
        self
    }

    /// (Re-)adds the watches; adding an existing watch is a no-op for the kernel.
    fn add_watches(&self, fd: i32) {
        use std::os::unix::ffi::OsStrExt;
        let mask = libc::IN_MODIFY
            | libc::IN_CLOSE_WRITE
            | libc::IN_MOVED_FROM
            | libc::IN_MOVED_TO
            | libc::IN_CREATE
            | libc::IN_DELETE
            | libc::IN_DELETE_SELF
            | libc::IN_MOVE_SELF;
        for dir in &self.dirs {
            let Ok(c) = std::ffi::CString::new(dir.as_os_str().as_bytes()) else { continue };
            // SAFETY: `c` is a valid NUL-terminated path that outlives the call.
            unsafe { libc::inotify_add_watch(fd, c.as_ptr(), mask) };
        }
    }

    /// Reads and discards every queued event.
    fn drain(fd: i32) {
        let mut buf = [0u8; 4096];
        loop {
            // SAFETY: `buf` is writable for its whole length.
            let n = unsafe { libc::read(fd, buf.as_mut_ptr().cast(), buf.len()) };
            if n <= 0 {
                break;
            }
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
            Self::drain(fd);
            self.last = std::time::Instant::now();
        } else if self.last.elapsed() >= self.rescan {
            self.last = std::time::Instant::now();
        }
    }
}
