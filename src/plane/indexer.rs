//! The served KV indexer's wire: the body of a `kv_indexer_query` request and its one answer
//! item (docs/dynamo/remote-indexer.md). A router that serves its index (`--serve-indexer`)
//! registers that endpoint under the workers' own component; a router that uses a remote
//! index (`--use-remote-indexer`) sends it the prompt's block hashes and scores the workers
//! with what comes back.
//!
//! Both are in the control message's `payload_codec` (msgpack from 1.6.1: named maps, pairs
//! as arrays); the answer is an ordinary one-item response stream (handshake, prologue,
//! `{data, complete_final: false}`, `complete_final`, sentinel) whose `data` is the
//! [`IndexerQueryResponse`] itself, not an `Annotated` item.

use serde::{Deserialize, Serialize};

/// The endpoint a served indexer registers under the workers' namespace and component.
pub const KV_INDEXER_QUERY_ENDPOINT: &str = "kv_indexer_query";

/// A query: the prompt's local block hashes (the router's `LocalBlockHash`es, one per whole
/// block), for the workers of `model_name`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IndexerQueryRequest {
    pub model_name: String,
    pub block_hashes: Vec<u64>,
    /// Only the device tier (no host or disk tiers in the answer).
    #[serde(default)]
    pub device_only: bool,
}

/// The answer: the matches of each `(worker, dp_rank)`, or why there are none.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum IndexerQueryResponse {
    TieredScores(TieredScores),
    Error(String),
}

/// Device matches and the lower tiers' extra matches.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TieredScores {
    pub device: OverlapScores,
    /// `(tier, hits)`, the tier named `host_pinned`, `disk` or `external`.
    #[serde(default)]
    pub lower_tier: Vec<(String, LowerTierHits)>,
}

/// How many of the prompt's leading blocks each `(worker, dp_rank)` holds on its device, and
/// how many owners hold each depth.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct OverlapScores {
    pub scores: Vec<(WorkerWithDpRank, u32)>,
    #[serde(default)]
    pub frequencies: Vec<usize>,
}

/// Blocks a lower tier holds beyond the device's match.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct LowerTierHits {
    pub hits: Vec<(WorkerWithDpRank, usize)>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
pub struct WorkerWithDpRank {
    pub worker_id: u64,
    pub dp_rank: u32,
}

impl IndexerQueryResponse {
    /// The answer of a model the server does not index (1.6.1's words).
    pub fn unknown_model(model: &str) -> IndexerQueryResponse {
        IndexerQueryResponse::Error(format!("served indexer model {model} is not registered"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_json_is_externally_tagged_with_pairs_as_arrays() {
        let r = IndexerQueryResponse::TieredScores(TieredScores {
            device: OverlapScores {
                scores: vec![(WorkerWithDpRank { worker_id: 7, dp_rank: 0 }, 3)],
                frequencies: vec![1, 1, 1],
            },
            lower_tier: vec![],
        });
        let j = serde_json::to_string(&r).unwrap();
        assert_eq!(
            j,
            r#"{"TieredScores":{"device":{"scores":[[{"worker_id":7,"dp_rank":0},3]],"frequencies":[1,1,1]},"lower_tier":[]}}"#
        );
        assert_eq!(serde_json::from_str::<IndexerQueryResponse>(&j).unwrap(), r);
        let e: IndexerQueryResponse =
            serde_json::from_str(r#"{"Error":"served indexer model m is not registered"}"#).unwrap();
        assert_eq!(e, IndexerQueryResponse::unknown_model("m"));
        let q: IndexerQueryRequest = serde_json::from_str(r#"{"model_name":"m","block_hashes":[1,2]}"#).unwrap();
        assert!(!q.device_only);
    }
}
