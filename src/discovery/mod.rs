//! Discovery: which workers exist and which models they serve.
//!
//! * [`records`]: the record JSON Dynamo 1.6.1 writes (endpoint instances, model cards,
//!   event channels) and the file-name key encoding; shared by every backend.
//! * [`checksum`]: card file checksums (`blake3:<hex>`) and the card's `mdc_sum`.
//! * [`file`]: the file backend (`DYN_FILE_KV`): scan → [`file::Snapshot`] →
//!   [`Registry`](crate::registry::Registry), and the rescan loop [`file::watch`].
//! * [`etcd`]: the etcd backend (`ETCD_ENDPOINTS`): a blocking client of etcd's JSON
//!   gateway, the frontend's [`etcd::EtcdView`] and the worker's [`etcd::EtcdLease`].
//!
//! Runs on the control thread (blocking I/O); shards only see the Registry it publishes.

pub mod checksum;
pub mod etcd;
pub mod file;
pub mod records;

pub use file::{watch, FileStore, PeriodicWake, ServedInstance, Snapshot, WakeSource};
pub use records::{EndpointRecord, ModelCard, ModelInput, ModelRecord, ModelType};
