//! The etcd discovery backend (`--discovery-backend etcd`, `ETCD_ENDPOINTS`): a small
//! blocking client of etcd's v3 gRPC-gateway JSON API, the frontend's live view of the
//! discovery buckets, and the lease a worker registers under.
//!
//! Why not the `etcd-client` crate: its build script needs `protoc`, and it needs tokio.
//! switchyard must build with a plain `cargo run` on a fresh machine, and its process runs
//! monoio shards; a second async runtime would be a second set of threads and a second
//! reactor for a handful of control messages. etcd (≥ 3.4) serves the same API as JSON over
//! HTTP/1.1 on its client port (`/v3/kv/range`, `/v3/kv/put`, `/v3/kv/deleterange`,
//! `/v3/watch`, `/v3/lease/grant|keepalive|revoke`; keys and values base64, int64 fields as
//! strings), so this module speaks that with `std::net::TcpStream`, socket timeouts and an
//! HTTP/1.1 reader of its own ([`wire`]). Everything here blocks: it runs on the control
//! thread (or a thread of its own, like the lease keep-alive), never on a shard.
//!
//! What Dynamo 1.6.1 does, and this module does the same way:
//! * keys are `v1/instances/<ns>/<component>/<endpoint>/<instance hex>`, `v1/mdc/…`,
//!   `v1/event_channels/…` (not percent-encoded); values are the records of
//!   [`records`](super::records);
//! * each process grants one lease (TTL 30 s), renews it every TTL/2 and attaches every key
//!   it writes to it; a worker's instance id is its lease id. A killed worker's keys vanish
//!   when the lease expires; a worker stopping cleanly deletes its keys, then revokes;
//! * a frontend lists each bucket prefix, then watches it from the listing's revision + 1
//!   with previous values; when a watch stream ends (etcd restarted, compaction, error) it
//!   lists again and diffs ([`EtcdView`]).
//!
//! Only `http://` endpoints: TLS is not supported yet.

mod client;
mod lease;
mod source;
mod view;
pub(crate) mod watch;
pub(crate) mod wire;

pub use client::{EtcdClient, Kv, DEFAULT_ENDPOINTS};
pub use lease::{EtcdLease, DEFAULT_LEASE_TTL};
pub use source::EtcdSource;
pub use view::{EtcdView, VIEW_BUCKETS};
pub use watch::{Event, EventKind, Watch};
