//! In-process registration of a mock worker (`--discovery-backend mem`): the same two
//! records as every backend, put in a [`MemStore`] and deleted when the worker stops.

use std::io;

use super::register::Registered;
use super::MockWorker;
use crate::discovery::mem::MemStore;
use crate::discovery::records::{BUCKET_INSTANCES, BUCKET_MDC};

/// A live in-process registration.
pub(crate) struct MemRegistered {
    store: MemStore,
    key: String,
}

impl MemRegistered {
    /// Deletes the instance record, then the card.
    pub(crate) fn remove(self) {
        self.store.delete(BUCKET_INSTANCES, &self.key);
        self.store.delete(BUCKET_MDC, &self.key);
    }
}

impl MockWorker {
    /// Registers this worker in the in-process `store`: card first, then the instance record.
    /// [`MockWorker::stop`] deletes them.
    pub fn register_mem(&self, store: &MemStore) -> io::Result<()> {
        let records = self.worker_records()?;
        store.put(BUCKET_MDC, &records.key, records.card);
        store.put(BUCKET_INSTANCES, &records.key, records.instance);
        let reg = MemRegistered { store: store.clone(), key: records.key };
        self.registrations.lock().unwrap_or_else(|e| e.into_inner()).push(Registered::Mem(reg));
        Ok(())
    }
}
