//! The file discovery backend (`--discovery-backend file`, `DYN_FILE_KV`; docs/dynamo/request-plane.md §3).
//!
//! [`FileStore::scan`] reads the store once: it lists the buckets `v1/instances`, `v1/mdc`,
//! `v1/event_channels` and `v1/event_sources`, skips writers' `.tmp_*` files, decodes file names and drops
//! records whose mtime is older than the TTL (the store's only liveness signal), then hands
//! the rest to [`snapshot::build`](super::snapshot::build) like every backend. Between scans
//! the store waits on a [`WakeSource`] (see [`super::wake`]). When the wake source reports
//! which files changed, a scan reads only those; it lists the buckets (and stats every file
//! for the TTL) only when a named file is new or different, when the first listed record's
//! TTL is due, or every [`FULL_SWEEP`] — and then reads only the files whose inode or size
//! moved, taking the others from the previous scan.
//!
//! Blocking I/O throughout: this runs on the control thread, never on a shard.

use std::collections::HashMap;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use super::records::{
    decode_file_name, is_temp_file, BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC,
};
use super::snapshot::{build, skip, Catalog, ParseCache, Raw, Skipped, Snapshot, Source};
pub use super::wake::{Changed, InotifyWake, PeriodicWake, WakeSource, INOTIFY_RESCAN};
use crate::config::NamespaceFilter;
use crate::registry::Registry;

pub use super::snapshot::namespace_matches;

/// Dynamo's record TTL: a record whose mtime is older than this is dead (docs/dynamo/request-plane.md §3.4).
pub const DEFAULT_TTL: Duration = Duration::from_secs(10);
/// Default rescan period of [`PeriodicWake`].
pub const DEFAULT_RESCAN: Duration = Duration::from_millis(200);
/// The longest a watched store goes without listing its buckets when no record expires
/// sooner: a net for changes no event named (a write through a hard link from outside).
pub const FULL_SWEEP: Duration = Duration::from_secs(5);
/// The store directory without `DYN_FILE_KV`: `dynamo_store_kv` in the temp directory,
/// `tmpdir` (`$TMPDIR`) or else `/tmp`, as Dynamo 1.6.1 frontends and workers both use it.
pub fn default_root(tmpdir: Option<PathBuf>) -> PathBuf {
    tmpdir.unwrap_or_else(|| PathBuf::from("/tmp")).join("dynamo_store_kv")
}

/// Files larger than this are not records (cards are a few KiB).
const MAX_RECORD_BYTES: u64 = 8 << 20;
/// The buckets a frontend reads.
pub(super) const BUCKETS: [&str; 4] = [BUCKET_INSTANCES, BUCKET_MDC, BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES];

/// Reader of one `DYN_FILE_KV` directory.
pub struct FileStore {
    root: PathBuf,
    ttl: Duration,
    filter: NamespaceFilter,
    catalog: Catalog,
    wake: Box<dyn WakeSource + Send>,
    cache: std::cell::RefCell<ParseCache>,
    /// What the wake source reported since the last scan; `None`: no wait since, read all.
    changed: std::cell::RefCell<Option<Changed>>,
    /// The records of the last scan, by inode.
    files: std::cell::RefCell<HashMap<u64, CachedFile>>,
    /// When the buckets were last listed.
    last_full: std::cell::Cell<std::time::Instant>,
    /// When the first record of the last listing expires unless touched (mtime + TTL).
    next_expiry: std::cell::Cell<Option<SystemTime>>,
}

/// A record as last read.
struct CachedFile {
    bucket: &'static str,
    name: Arc<str>,
    len: u64,
    key: Arc<str>,
    bytes: Arc<[u8]>,
}

impl CachedFile {
    /// Whether this is the record now at `bucket`/`name` with `len` bytes (the inode having
    /// matched already).
    fn is(&self, bucket: &str, name: &str, len: u64) -> bool {
        (self.bucket, &*self.name, self.len) == (bucket, name, len)
    }
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
            changed: Default::default(),
            files: Default::default(),
            last_full: std::cell::Cell::new(std::time::Instant::now()),
            next_expiry: std::cell::Cell::new(None),
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
    /// of the previous scan (only mtimes moved: keep-alive touches). Between full sweeps, a
    /// wake whose named files are unchanged answers `None` without listing anything.
    pub fn scan_changed(&self, now: SystemTime) -> io::Result<Option<Snapshot>> {
        if self.named_files_unchanged(now) {
            return Ok(None);
        }
        let (files, skipped) = self.read_all(now)?;
        let mut cache = self.cache.borrow_mut();
        if skipped.is_empty() && cache.unchanged(raws(&files)) {
            return Ok(None);
        }
        Ok(Some(build(raws(&files), &self.filter, skipped, &mut cache)))
    }

    /// True when the wake source named the files that changed (possibly none: the watch
    /// loop wakes every half second to check for stop), each is still live and holds the
    /// bytes the last scan read, no record of the last listing has reached its TTL, and that
    /// listing is less than [`FULL_SWEEP`] old. Then nothing needs listing: Dynamo workers
    /// rewrite their event-channel records unchanged every few seconds, and each rewrite
    /// wakes the watch. (Expiry is the only change no event reports; a record touched since
    /// the listing only expires later than the listing says, so at worst it is listed early.)
    fn named_files_unchanged(&self, now: SystemTime) -> bool {
        use std::os::unix::fs::MetadataExt;
        let mut changed = self.changed.borrow_mut();
        let Some(Changed::Names(names)) = &*changed else { return false };
        if self.last_full.get().elapsed() >= FULL_SWEEP || self.next_expiry.get().is_some_and(|t| now >= t) {
            return false;
        }
        let files = self.files.borrow();
        let same = names.iter().all(|(bucket, name)| {
            if is_temp_file(name) {
                return true;
            }
            let path = self.root.join(bucket).join(name);
            let Ok(meta) = fs::metadata(&path) else { return false };
            let live = meta.modified().is_ok_and(|m| !is_expired(m, now, self.ttl));
            live && files
                .get(&meta.ino())
                .is_some_and(|c| c.is(bucket, name, meta.len()) && fs::read(&path).is_ok_and(|b| *b == *c.bytes))
        });
        if same {
            *changed = None;
        }
        same
    }

    fn read_all(&self, now: SystemTime) -> io::Result<(Vec<Listed>, Vec<Skipped>)> {
        self.last_full.set(std::time::Instant::now());
        let changed = self.changed.borrow_mut().take().unwrap_or(Changed::All);
        let mut previous = std::mem::take(&mut *self.files.borrow_mut());
        let mut skipped = Vec::new();
        let mut files = Vec::new();
        for bucket in BUCKETS {
            self.read_bucket(bucket, now, &changed, &mut previous, &mut files, &mut skipped)?;
        }
        self.next_expiry.set(files.iter().map(|l| l.modified + self.ttl).min());
        *self.files.borrow_mut() = files
            .iter()
            .filter_map(|l| {
                let (ino, len) = l.cached?;
                let (bucket, name, key, bytes) = (l.bucket, l.name.clone(), l.key.clone(), l.bytes.clone());
                Some((ino, CachedFile { bucket, name, len, key, bytes }))
            })
            .collect();
        Ok((files, skipped))
    }

    /// Lists one bucket into `out`: each live file with its decoded key, mtime and content
    /// (from `previous` when `changed` does not name it and its inode and size are the same).
    fn read_bucket(
        &self,
        bucket: &'static str,
        now: SystemTime,
        changed: &Changed,
        previous: &mut HashMap<u64, CachedFile>,
        out: &mut Vec<Listed>,
        skipped: &mut Vec<Skipped>,
    ) -> io::Result<()> {
        use std::os::unix::fs::MetadataExt;
        let dir = self.root.join(bucket);
        let listing = match fs::read_dir(&dir) {
            Ok(l) => l,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
            Err(e) => return Err(e),
        };
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
            // Follow symlinks like a plain open would (and never take them from the cache);
            // a vanished file is skipped silently.
            let symlink = dirent.file_type().is_ok_and(|t| t.is_symlink());
            let meta = if symlink { fs::metadata(dirent.path()) } else { dirent.metadata() };
            let Ok(meta) = meta else { continue };
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
            let id = (meta.ino(), meta.len());
            let cached = match previous.remove(&id.0) {
                Some(c) if !symlink && c.is(bucket, &file_name, id.1) && !changed.touches(bucket, &file_name) => {
                    Some(c)
                }
                _ => None,
            };
            let (name, key, bytes) = match cached {
                Some(c) => (c.name, c.key, c.bytes),
                None => {
                    let Some(key) = decode_file_name(&file_name) else {
                        skipped.push(skip(bucket, &file_name, "malformed percent-encoding".into()));
                        continue;
                    };
                    let Ok(bytes) = fs::read(dirent.path()) else { continue };
                    (file_name.into(), key.into(), bytes.into())
                }
            };
            let cached = (!symlink).then_some(id);
            out.push(Listed { bucket, name, key, modified, bytes, cached });
        }
        Ok(())
    }

    /// The Registry of `snap` as of `now` (see [`Catalog::registry`]).
    pub fn registry(&mut self, snap: &Snapshot, now: SystemTime) -> Registry {
        self.catalog.registry(snap, now)
    }
}

/// One listed file.
struct Listed {
    bucket: &'static str,
    name: Arc<str>,
    key: Arc<str>,
    modified: SystemTime,
    bytes: Arc<[u8]>,
    /// (inode, size) when the next scan may take it from the cache.
    cached: Option<(u64, u64)>,
}

/// The listed files as [`Raw`] records.
fn raws(files: &[Listed]) -> impl Iterator<Item = Raw<'_>> + Clone + '_ {
    files.iter().map(|l| Raw { bucket: l.bucket, name: &l.name, key: &l.key, modified: l.modified, bytes: &l.bytes })
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
        let now = self.wake.take_changed();
        let changed = self.changed.get_mut();
        match changed {
            Some(c) => c.merge(now),
            None => *changed = Some(now),
        }
    }
}

/// True when a record last touched at `modified` is dead at `now`. A future mtime (clock
/// skew between writers) counts as fresh.
pub fn is_expired(modified: SystemTime, now: SystemTime, ttl: Duration) -> bool {
    now.duration_since(modified).is_ok_and(|age| age > ttl)
}
