//! KV-cache-aware routing building blocks: block hashing ([`hash`]), decoding of worker KV
//! events ([`events`]), the block index ([`index`]) and its per-shard replicas fed by
//! lock-free rings from the event-ingest thread ([`replica`]), and Dynamo's cost and choice
//! among candidates ([`cost`]). Active-sequence tracking and the `kv` router mode are not
//! wired in yet.

pub mod cost;
pub mod events;
pub mod hash;
pub mod index;
pub mod replica;

pub use index::{BlockPair, IndexOp, IndexStats, KvIndex, Owner};
pub use replica::{channel, IndexFeed, IndexReplica};
