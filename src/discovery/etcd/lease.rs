//! [`EtcdLease`]: one process's lease, kept alive by a background thread.

use std::io;
use std::sync::mpsc;
use std::thread::JoinHandle;
use std::time::Duration;

use super::EtcdClient;

/// The lease TTL Dynamo processes use, in seconds.
pub const DEFAULT_LEASE_TTL: i64 = 30;

/// Retry period of a keep-alive that failed to reach etcd.
const RETRY: Duration = Duration::from_secs(1);

/// A granted lease and its keep-alive thread (one renewal every TTL/2). Dropping it stops
/// the thread promptly and leaves the lease to expire; [`EtcdLease::revoke`] ends it at once.
pub struct EtcdLease {
    client: EtcdClient,
    id: i64,
    ttl: i64,
    /// Dropping the sender stops the keep-alive thread.
    stop: Option<mpsc::Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl EtcdLease {
    /// Grants a lease of `ttl` seconds (etcd picks the id) and starts keeping it alive.
    pub fn grant(client: &EtcdClient, ttl: i64) -> io::Result<EtcdLease> {
        EtcdLease::grant_id(client, ttl, 0)
    }

    /// Like [`EtcdLease::grant`] with a chosen id (0: etcd picks).
    pub fn grant_id(client: &EtcdClient, ttl: i64, id: i64) -> io::Result<EtcdLease> {
        let id = client.lease_grant_id(ttl, id)?;
        let (tx, rx) = mpsc::channel::<()>();
        let period = Duration::from_millis((ttl.max(1) as u64) * 500);
        let c = client.clone();
        let thread = std::thread::Builder::new().name("etcd-lease".into()).spawn(move || {
            let mut wait = period;
            let mut failing = false;
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(wait) {
                match c.lease_keepalive(id) {
                    Ok(_) => {
                        if failing {
                            crate::log::info(&format!("etcd lease {id:x} renewed again"));
                        }
                        (wait, failing) = (period, false);
                    }
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        crate::log::warn(&format!("etcd lease {id:x} expired; its keys are gone"));
                        return;
                    }
                    Err(e) => {
                        if !failing {
                            crate::log::warn(&format!("etcd lease {id:x} keep-alive failed: {e}"));
                        }
                        (wait, failing) = (RETRY.min(period), true);
                    }
                }
            }
        });
        let thread = match thread {
            Ok(t) => t,
            Err(e) => {
                let _ = client.lease_revoke(id);
                return Err(e);
            }
        };
        Ok(EtcdLease { client: client.clone(), id, ttl, stop: Some(tx), thread: Some(thread) })
    }

    /// The lease id (a Dynamo worker's instance id).
    pub fn id(&self) -> i64 {
        self.id
    }

    /// The granted TTL in seconds.
    pub fn ttl(&self) -> i64 {
        self.ttl
    }

    /// The client the lease was granted through.
    pub fn client(&self) -> &EtcdClient {
        &self.client
    }

    /// Stops the keep-alive thread and revokes the lease (etcd deletes its keys).
    pub fn revoke(mut self) -> io::Result<()> {
        self.stop_keepalive();
        self.client.lease_revoke(self.id)
    }

    fn stop_keepalive(&mut self) {
        self.stop.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for EtcdLease {
    fn drop(&mut self) {
        self.stop_keepalive();
    }
}
