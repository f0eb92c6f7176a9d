//! The Registry: an immutable snapshot of what is served — models, their worker instances
//! and the endpoints those instances expose.
//!
//! Built off the shard threads and handed to every shard as an `Arc<Registry>`; a shard swaps
//! its snapshot between requests, and a request in flight keeps the snapshot it started with.
//! Shards only read it. Until a discovery backend publishes one, the snapshot is empty.

/// One served model, as `/v1/models` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    pub name: String,
    /// Unix seconds when the model was first seen.
    pub created: u64,
    /// Context window from the model card (0 when unknown, as Dynamo reports it).
    pub context_window: u64,
}

/// What the frontend can serve right now.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    pub models: Vec<ModelEntry>,
    /// `dyn://namespace.component.endpoint` of every live endpoint, for `/health`.
    pub endpoints: Vec<String>,
    /// The endpoint records of live instances, as discovery stores them, for `/health`.
    pub instances: Vec<serde_json::Value>,
}

impl Registry {
    pub fn model(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }
}
