//! etcd registration of a mock worker, the way a Dynamo 1.6.1 worker registers: one lease
//! (TTL 30 s, renewed every TTL/2) whose id is the worker's instance id; the model card
//! (`v1/mdc/<key>`), then the instance record (`v1/instances/<key>`), both attached to it.
//! Stopping deletes each key, then revokes the lease; a killed worker's keys go when the
//! lease expires.

use std::io;

use super::register::Registered;
use super::{MockConfig, MockWorker};
use crate::discovery::etcd::{EtcdClient, EtcdLease, DEFAULT_LEASE_TTL};
use crate::discovery::records::{BUCKET_INSTANCES, BUCKET_MDC};

/// Where an etcd registration wrote its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EtcdRegistration {
    /// The lease both keys are attached to (= the worker's instance id).
    pub lease_id: i64,
    /// `v1/mdc/<ns>/<component>/<endpoint>/<instance hex>`.
    pub card_key: String,
    /// `v1/instances/<ns>/<component>/<endpoint>/<instance hex>`.
    pub instance_key: String,
}

/// A live etcd registration: its keys and its lease (kept alive until removed).
pub(crate) struct EtcdRegistered {
    reg: EtcdRegistration,
    lease: EtcdLease,
}

impl EtcdRegistered {
    /// Deletes the instance key, then the card key, then revokes the lease (spec: a worker
    /// stopping on SIGTERM).
    pub(crate) fn remove(self) {
        let client = self.lease.client().clone();
        for key in [&self.reg.instance_key, &self.reg.card_key] {
            if let Err(e) = client.delete(key) {
                crate::log::warn(&format!("etcd: deleting {key}: {e}"));
            }
        }
        if let Err(e) = self.lease.revoke() {
            crate::log::warn(&format!("etcd: revoking lease {:x}: {e}", self.reg.lease_id));
        }
    }
}

impl MockWorker {
    /// Starts a worker registered in etcd the Dynamo way: the lease is granted first and
    /// its id becomes the worker's instance id (`cfg.instance_id` is replaced).
    pub fn start_etcd(mut cfg: MockConfig, endpoints: &str) -> io::Result<(MockWorker, EtcdRegistration)> {
        let client = EtcdClient::new(endpoints)?;
        let lease = EtcdLease::grant(&client, DEFAULT_LEASE_TTL)?;
        cfg.instance_id = Some(lease.id() as u64);
        let worker = MockWorker::start(cfg)?;
        let reg = worker.register_with_lease(lease)?;
        Ok((worker, reg))
    }

    /// Registers this running worker in etcd under a lease whose id is its instance id
    /// (granted here with that id, so the instance id must fit an etcd lease id: below
    /// 2^63, not 0). [`MockWorker::stop`] deletes the keys and revokes the lease.
    pub fn register_etcd(&self, endpoints: &str) -> io::Result<EtcdRegistration> {
        let id = i64::try_from(self.instance_id()).ok().filter(|&id| id > 0).ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::InvalidInput,
                format!("instance id {:x} cannot be an etcd lease id", self.instance_id()),
            )
        })?;
        let client = EtcdClient::new(endpoints)?;
        self.register_with_lease(EtcdLease::grant_id(&client, DEFAULT_LEASE_TTL, id)?)
    }

    /// Writes the card, then the instance record, attached to `lease`.
    fn register_with_lease(&self, lease: EtcdLease) -> io::Result<EtcdRegistration> {
        let records = self.worker_records()?;
        let reg = EtcdRegistration {
            lease_id: lease.id(),
            card_key: format!("{BUCKET_MDC}/{}", records.key),
            instance_key: format!("{BUCKET_INSTANCES}/{}", records.key),
        };
        let client = lease.client().clone();
        let written = client
            .put(&reg.card_key, &records.card, Some(lease.id()))
            .and_then(|_| client.put(&reg.instance_key, &records.instance, Some(lease.id())));
        let live = EtcdRegistered { reg: reg.clone(), lease };
        if let Err(e) = written {
            live.remove();
            return Err(e);
        }
        self.registrations.lock().unwrap_or_else(|e| e.into_inner()).push(Registered::Etcd(live));
        Ok(reg)
    }
}
