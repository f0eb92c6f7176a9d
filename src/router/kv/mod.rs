//! KV-cache-aware routing building blocks: block hashing ([`hash`]), decoding of worker KV
//! events ([`events`]), the block index ([`index`]) and its per-shard replicas fed by
//! lock-free rings from the event-ingest thread ([`replica`]), and Dynamo's cost and choice
//! among candidates ([`cost`]); the event-ingest thread ([`ingest`]) and the per-shard
//! selection with active-sequence bookings ([`select`]) that make `--router-mode kv`;
//! event order and loss recovery per worker rank ([`streams`], [`recovery`]); the
//! `active_sequences_events` topic ([`sync`]): workers' prefill marks and, with
//! `--router-replica-sync`, bookings shared with other routers ([`peers`]).

pub mod active;
pub mod cost;
pub mod events;
pub mod hash;
pub mod index;
pub mod ingest;
mod links;
pub mod peers;
pub mod predict;
pub mod queue;
pub mod recovery;
pub mod replica;
pub mod select;
pub mod streams;
pub mod sync;

pub use index::{BlockPair, IndexOp, IndexStats, KvIndex, Owner};
pub use replica::{channel, IndexFeed, IndexReplica};
