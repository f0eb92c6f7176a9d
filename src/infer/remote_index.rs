//! `--use-remote-indexer` (docs/dynamo/remote-indexer.md): the kv router scores workers with
//! a served indexer's answer instead of a local index. Per routing decision the prompt's
//! local block hashes go to one of the `kv_indexer_query` instances registered under the
//! workers' component (a `dynamo.frontend --serve-indexer`, or a switchyard one, see
//! [`crate::indexer`]); its `TieredScores` become the overlaps the cost is computed with.
//! Runs on the shard, as part of the request's dispatch, over the shard's request plane.
//!
//! As in 1.6.1, a failed query fails the request (no silent fall-back to "nothing cached"):
//! the client gets 1.6.1's 500 and the log says why.

use std::rc::Rc;
use std::time::Duration;

use crate::error::{Error, Kind};
use crate::plane::indexer::{IndexerQueryRequest, IndexerQueryResponse, TieredScores, WorkerWithDpRank};
use crate::plane::stream::{ItemMode, StreamEvent, StreamItem};
use crate::registry::Serving;
use crate::router::kv::hash::{local_block_hashes, BlockHashOptions};
use crate::router::kv::index::Owner;
use crate::router::kv::select::Overlaps;
use crate::router::kv::tier::Tier;
use crate::shard::ShardCtx;
use crate::transport::client::{RequestBody, Route};

/// Longest wait for a served indexer's answer when `--worker-callback-timeout` sets none.
const ANSWER_WITHIN: Duration = Duration::from_secs(10);

/// The query as a request-plane body.
#[derive(serde::Serialize)]
#[serde(transparent)]
struct Query(IndexerQueryRequest);

impl RequestBody for Query {
    const ITEMS: ItemMode = ItemMode::Raw;
}

/// What the client is told when the query fails (1.6.1's body for a routing failure).
fn failed(why: &str) -> Error {
    crate::log::warn(&format!("remote indexer query failed: {why}"));
    Error::new(Kind::Internal, "Failed to generate completions")
}

/// The `(worker, dp_rank)` overlaps of `tokens` for `serving`'s workers, from a served
/// indexer; each query counted in `switchyard_remote_indexer_queries_total`.
pub async fn overlaps(ctx: &Rc<ShardCtx>, serving: &Serving, tokens: &[u32]) -> Result<Overlaps, Error> {
    let asked = ask(ctx, serving, tokens).await;
    if let Ok(None) = asked {
        return Ok(Overlaps::default());
    }
    let index = ctx.metrics.model_index(&serving.name);
    ctx.metrics.with_model(index, |m| m.remote_index[usize::from(asked.is_err())] += 1);
    asked.map(Option::unwrap_or_default)
}

/// The query and its answer; `Ok(None)` when nothing was asked (no whole block).
async fn ask(ctx: &Rc<ShardCtx>, serving: &Serving, tokens: &[u32]) -> Result<Option<Overlaps>, Error> {
    let block_hashes = local_block_hashes(tokens, serving.limits.block_size(), &BlockHashOptions::default());
    if block_hashes.is_empty() {
        // Not one whole block: nothing can match, and 1.6.1 asks nothing.
        return Ok(None);
    }
    let n = serving.remote_indexers.len();
    if n == 0 {
        return Err(failed(&format!("no kv_indexer_query instance serves model {}", serving.name)));
    }
    let at = &serving.remote_indexers[(ctx.router.next_u64() % n as u64) as usize];
    let query = Query(IndexerQueryRequest { model_name: serving.name.clone(), block_hashes, device_only: false });
    let route = match &at.nats_subject {
        Some(subject) => Route::Nats { subject },
        None => Route::Tcp { addr: at.addr, path: &at.path },
    };
    let id = crate::util::format_uuid(crate::util::new_uuid());
    let within = ctx.shared.config.worker_callback_timeout.unwrap_or(ANSWER_WITHIN).min(ANSWER_WITHIN);
    let mut stream = ctx
        .plane
        .generate_to(route, at.codec, &query, &id, within)
        .await
        .map_err(|e| failed(&format!("indexer {:x}: {e}", at.instance_id)))?;
    let mut answer = None;
    let read = async {
        while let Some(ev) = stream.next().await {
            match ev {
                Ok(StreamEvent::Item(StreamItem::Raw(v))) if answer.is_none() => answer = Some(v),
                Ok(StreamEvent::CompleteFinal | StreamEvent::Sentinel) => break,
                Ok(_) => {}
                Err(e) => return Err(e),
            }
        }
        Ok(())
    };
    let ended = monoio::select! {
        r = read => r.map_err(|e| e.to_string()),
        _ = monoio::time::sleep(within) => Err(format!("no answer within {within:?}")),
    };
    if let Err(e) = ended {
        if answer.is_none() {
            return Err(failed(&format!("indexer {:x}: {e}", at.instance_id)));
        }
    }
    let Some(v) = answer else { return Err(failed("Remote indexer returned empty response")) };
    match serde_json::from_value::<IndexerQueryResponse>(v) {
        Ok(IndexerQueryResponse::TieredScores(t)) => Ok(Some(tiered(t))),
        Ok(IndexerQueryResponse::Error(msg)) => Err(failed(&format!("Remote indexer error: {msg}"))),
        Err(e) => Err(failed(&format!("indexer {:x}: an answer that does not decode: {e}", at.instance_id))),
    }
}

/// A served indexer's answer as the kv router takes it: device matches, and per owner the
/// host blocks and the disk and external ones (unknown tier names are left out).
fn tiered(t: TieredScores) -> Overlaps {
    let owner = |w: WorkerWithDpRank| Owner { worker_id: w.worker_id, dp_rank: w.dp_rank };
    let device = t.device.scores.into_iter().map(|(w, n)| (owner(w), n)).collect();
    let mut lower: Vec<(Owner, u32, u32)> = Vec::new();
    for (tier, hits) in t.lower_tier {
        let host = match Tier::parse(&tier) {
            Some(Tier::HostPinned) => true,
            Some(Tier::Disk | Tier::External) => false,
            None => continue,
        };
        for (w, n) in hits.hits {
            let (o, n) = (owner(w), u32::try_from(n).unwrap_or(u32::MAX));
            let at = match lower.iter().position(|(x, ..)| *x == o) {
                Some(at) => at,
                None => {
                    lower.push((o, 0, 0));
                    lower.len() - 1
                }
            };
            if host {
                lower[at].1 += n;
            } else {
                lower[at].2 += n;
            }
        }
    }
    Overlaps { device, lower }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::indexer::{LowerTierHits, OverlapScores};

    #[test]
    fn lower_tiers_of_an_answer_add_up_per_owner() {
        let w = |id| WorkerWithDpRank { worker_id: id, dp_rank: 0 };
        let o = |id| Owner { worker_id: id, dp_rank: 0 };
        let hits = |v: Vec<(WorkerWithDpRank, usize)>| LowerTierHits { hits: v };
        let t = TieredScores {
            device: OverlapScores { scores: vec![(w(1), 3)], frequencies: vec![] },
            lower_tier: vec![
                ("host_pinned".into(), hits(vec![(w(1), 2), (w(2), 5)])),
                ("disk".into(), hits(vec![(w(1), 1)])),
                ("external".into(), hits(vec![(w(1), 4)])),
                ("tape".into(), hits(vec![(w(3), 9)])),
            ],
        };
        assert_eq!(tiered(t), Overlaps { device: vec![(o(1), 3)], lower: vec![(o(1), 2, 5), (o(2), 5, 0)] });
    }
}
