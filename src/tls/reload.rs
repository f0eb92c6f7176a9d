//! Certificate reloading without dropping connections: a thread of its own that rebuilds the
//! HTTPS configuration when one of its files changes (looked at once a second: modification
//! time, size and inode, so a rewrite in place and an atomic rename or symlink swap are both
//! seen) or when asked to ([`Reloader::reload_now`], which the main thread calls on SIGHUP).
//!
//! A new configuration goes to every shard through `publish` (their inboxes); connections
//! already open keep the configuration they were accepted with, new ones take the new one. A
//! configuration that fails to build (a half-written file, a key that does not match) is
//! logged and the previous one stays in use; the next change is tried again.

use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, SystemTime};

use rustls::ServerConfig;

use super::TlsFiles;

/// How often the files are looked at.
pub const LOOK_EVERY: Duration = Duration::from_secs(1);

/// What identifies a file's content without reading it.
type Stamp = Option<(SystemTime, u64, u64)>;

fn stamp(path: &PathBuf) -> Stamp {
    use std::os::unix::fs::MetadataExt;
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len(), m.ino()))
}

enum Msg {
    Reload,
    Stop,
}

/// The reload thread; stopped when dropped.
pub struct Reloader {
    tx: mpsc::Sender<Msg>,
    thread: Option<JoinHandle<()>>,
}

impl Reloader {
    /// Start watching `files`; every configuration built from them from now on is given to
    /// `publish`.
    pub fn start(files: TlsFiles, publish: impl Fn(Arc<ServerConfig>) + Send + 'static) -> std::io::Result<Reloader> {
        let (tx, rx) = mpsc::channel();
        let thread = std::thread::Builder::new().name("tls-reload".into()).spawn(move || {
            let paths = super::paths(&files);
            let mut seen: Vec<Stamp> = paths.iter().map(stamp).collect();
            loop {
                let asked = match rx.recv_timeout(LOOK_EVERY) {
                    Ok(Msg::Stop) | Err(mpsc::RecvTimeoutError::Disconnected) => return,
                    Ok(Msg::Reload) => true,
                    Err(mpsc::RecvTimeoutError::Timeout) => false,
                };
                let now: Vec<Stamp> = paths.iter().map(stamp).collect();
                if !asked && now == seen {
                    continue;
                }
                seen = now;
                match super::server_config(&files) {
                    Ok(config) => {
                        publish(config);
                        crate::log::info(&format!(
                            "TLS: certificate {} reloaded ({})",
                            files.cert.display(),
                            if asked { "SIGHUP" } else { "file changed" }
                        ));
                    }
                    Err(e) => crate::log::warn(&format!("TLS: reload failed, keeping the previous certificate: {e}")),
                }
            }
        })?;
        Ok(Reloader { tx, thread: Some(thread) })
    }

    /// Rebuild the configuration now (SIGHUP).
    pub fn reload_now(&self) {
        let _ = self.tx.send(Msg::Reload);
    }
}

impl Drop for Reloader {
    fn drop(&mut self) {
        let _ = self.tx.send(Msg::Stop);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}
