//! The file store's writing side: how a participant publishes its records in
//! `DYN_FILE_KV` and keeps them alive (docs/dynamo/request-plane.md §3.3–3.4). Used by
//! everything of switchyard that registers itself there (replica-sync channels, the in-tree
//! mock worker); the frontend's reading side is [`super::file`].
//!
//! Blocking file I/O; called from the control side and from the mock worker's threads.

use std::fs;
use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

/// Writes `bytes` under `dir/<key>`: `.tmp_<16 hex>` created exclusively, hard-linked to the
/// key (create-if-absent), temporary unlinked (docs/dynamo/request-plane.md §3.3). An existing file of the same key
/// (a previous registration of this instance id) is replaced by rename.
pub fn publish(dir: &Path, key: &str, bytes: &[u8]) -> io::Result<PathBuf> {
    fs::create_dir_all(dir)?;
    let tmp = dir.join(format!("{}{:016x}", crate::discovery::records::TEMP_PREFIX, crate::util::random_u64()));
    let target = dir.join(key);
    let written = fs::OpenOptions::new().write(true).create_new(true).open(&tmp).and_then(|mut f| {
        f.write_all(bytes)?;
        f.sync_data()
    });
    if let Err(e) = written {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    let linked = match fs::hard_link(&tmp, &target) {
        Ok(()) => fs::remove_file(&tmp),
        Err(e) if e.kind() == io::ErrorKind::AlreadyExists => fs::rename(&tmp, &target),
        Err(e) => Err(e),
    };
    if let Err(e) = linked {
        let _ = fs::remove_file(&tmp);
        return Err(e);
    }
    Ok(target)
}

/// Sets a file's mtime to now (the keep-alive).
pub fn touch(path: &Path) -> io::Result<()> {
    fs::OpenOptions::new().write(true).open(path)?.set_modified(SystemTime::now())
}
