//! KV-cache-aware routing, as a shard runs it: block hashing ([`hash`]), the block index
//! ([`index`]) and its per-shard replica fed by a lock-free ring from the event-ingest
//! thread ([`replica`]), Dynamo's cost and choice among candidates ([`cost`]), the per-shard
//! selection with active-sequence bookings ([`select`], [`active`]) and queue ([`queue`],
//! [`admit`]),
//! and the approximate mode's predictions ([`predict`]). The event-ingest thread that feeds
//! the replicas is [`crate::ingest`]; the KV event messages it decodes are
//! [`crate::plane::kv_events`].

pub mod active;
pub mod admit;
pub mod cost;
pub mod hash;
pub mod index;
pub mod predict;
pub mod queue;
pub mod replica;
pub mod select;
pub mod tier;

pub use index::{BlockPair, IndexOp, IndexStats, KvIndex, Owner};
pub use replica::{channel, IndexFeed, IndexReplica};
