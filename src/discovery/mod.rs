//! Discovery: which workers exist and which models they serve.
//!
//! * [`records`]: the record JSON Dynamo 1.6.1 writes (endpoint instances, model cards,
//!   event channels) and the file-name key encoding; shared by every backend.
//! * [`cardfiles`]: the files a card names — verified in shared storage, or downloaded from
//!   the worker's URLs into a cache.
//! * [`checksum`]: card file checksums (`blake3:<hex>`) and the card's `mdc_sum`.
//! * [`snapshot`]: what every backend produces — parsed, filtered, joined live records
//!   ([`Snapshot`]) → [`Registry`](crate::registry::Registry) — and the loop [`watch`] the
//!   control thread runs over any [`Source`].
//! * [`file`]: the file backend (`DYN_FILE_KV`: mtime liveness, inotify + rescan), and
//!   [`wake`], what wakes its watch and names the files that changed.
//! * [`etcd`]: the etcd backend (`ETCD_ENDPOINTS`, leases): a blocking client of etcd's JSON
//!   gateway, the frontend's [`etcd::EtcdView`] (also a [`Source`]) and the worker's
//!   [`etcd::EtcdLease`].
//! * [`kube`]: the Kubernetes backend (`kubernetes`): workers' `DynamoWorkerMetadata`
//!   objects joined with their pods' readiness, listed and watched on threads of its own.
//! * [`mem`]: the in-process backend (`mem`), for workers embedded in this process.
//!
//! Runs on the control thread (blocking I/O); shards only see the Registry it publishes.

pub mod announce;
pub mod card;
pub mod cardfiles;
pub mod checksum;
pub mod etcd;
pub mod file;
pub mod filewrite;
pub mod kube;
pub mod mem;
pub mod records;
pub mod snapshot;
pub mod wake;

pub use file::{FileStore, InotifyWake, PeriodicWake, WakeSource};
pub use records::{EndpointRecord, ModelCard, ModelInput, ModelRecord, ModelType};
pub use snapshot::{watch, Catalog, ServedInstance, Snapshot, Source};
