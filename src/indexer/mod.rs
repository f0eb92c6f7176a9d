//! The served KV indexer (`--serve-indexer`, docs/dynamo/remote-indexer.md): other routers
//! (a `dynamo.frontend --use-remote-indexer`, another switchyard) ask this process which
//! workers hold a prompt's blocks instead of following the workers' KV events themselves.
//!
//! It is an ordinary request-plane endpoint, `kv_indexer_query`, registered under each
//! served component (the record is written by [`crate::discovery::announce`]): a request
//! frame carrying an [`IndexerQueryRequest`] in the control message's codec, an ack, then a
//! call-back to the asker's response-stream listener with one [`IndexerQueryResponse`] item
//! and `complete_final`, as a worker answers.
//!
//! The answers come from an index replica of its own, fed by the event-ingest thread like
//! every shard's ([`crate::router::kv::replica`]), and from the registry snapshots the
//! control thread publishes (which workers serve which model). Nothing here runs on a shard:
//! an acceptor thread keeps the replica drained and the model list current, and each asking
//! connection has a thread that reads its frames and answers them in order. The replica sits
//! behind a mutex these threads share — none of them is on a request's way through a shard.

use std::collections::{HashMap, HashSet};
use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::BytesMut;

pub use crate::plane::indexer::KV_INDEXER_QUERY_ENDPOINT;
use crate::plane::indexer::{
    IndexerQueryRequest, IndexerQueryResponse, LowerTierHits, OverlapScores, TieredScores, WorkerWithDpRank,
};
use crate::plane::{
    encode_ack, encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue, Ack,
    CallHomeHandshake, Codec, ControlMessage, Decoded, RequestControlMessage, RequestFrame, RequestFrameDecoder,
    StreamPrologue, StreamType, DEFAULT_MAX_MESSAGE_SIZE,
};
use crate::registry::Registry;
use crate::router::kv::hash::sequence_hashes;
pub use crate::router::kv::replica::IndexReplica;
use crate::router::kv::tier::Tier;
use crate::router::kv::Owner;

/// How often the acceptor drains the replica and looks for new connections when idle.
const TICK: Duration = Duration::from_millis(20);
/// How long a call-back may take to connect.
const DIAL_TIMEOUT: Duration = Duration::from_secs(5);

/// What the answering threads share.
struct Book {
    replica: IndexReplica,
    /// Model name (and every alias) → the instance ids of its workers (decode and prefill).
    models: HashMap<String, HashSet<u64>>,
}

impl Book {
    fn learn(&mut self, registry: &Registry) {
        self.models = registry
            .serving
            .iter()
            .map(|(name, s)| {
                let mut ids: HashSet<u64> = s.workers.iter().map(|w| w.instance_id).collect();
                if let Some(p) = &s.prefill {
                    ids.extend(p.workers.iter().map(|w| w.instance_id));
                }
                (name.clone(), ids)
            })
            .collect();
    }

    /// The answer to `q`: each of the model's `(worker, dp_rank)`s and how many of the
    /// prompt's leading blocks it holds (only those holding one), by worker id; unless the
    /// asker wants the device only, per lower tier (that has had events) the blocks it adds
    /// to each owner's continuation (only owners it adds to). 1.6.1 sends no depth
    /// frequencies.
    fn answer(&mut self, q: &IndexerQueryRequest) -> IndexerQueryResponse {
        let Some(workers) = self.models.get(&q.model_name) else {
            return IndexerQueryResponse::unknown_model(&q.model_name);
        };
        // The lower tiers continue from the device match by sequence hash: chained once.
        self.replica.drain(usize::MAX);
        let tiered = !q.device_only && self.replica.has_lower_tiers();
        let sequence = if tiered { sequence_hashes(&q.block_hashes) } else { Vec::new() };
        let found = match tiered {
            true => self.replica.find_matches_by_sequence(&sequence),
            false => self.replica.find_matches(&q.block_hashes),
        };
        let rank = |o: Owner| WorkerWithDpRank { worker_id: o.worker_id, dp_rank: o.dp_rank };
        let mut scores: Vec<(WorkerWithDpRank, u32)> = found
            .iter()
            .filter(|(o, n)| *n > 0 && workers.contains(&o.worker_id))
            .map(|&(o, n)| (rank(o), n))
            .collect();
        scores.sort_unstable();
        let mut lower_tier = Vec::new();
        if tiered {
            // Every rank of the model's workers with blocks in a lower tier: one without a
            // device match may still hold the prompt's start there.
            let owners: Vec<Owner> =
                self.replica.tier_owners().into_iter().filter(|o| workers.contains(&o.worker_id)).collect();
            let mut per_tier: [Vec<(WorkerWithDpRank, usize)>; 3] = Default::default();
            for o in owners {
                let device = found.iter().find(|(x, _)| *x == o).map_or(0, |&(_, n)| n as usize);
                let hits = self.replica.tier_hits(o, &q.block_hashes, &sequence, device);
                for (t, n) in hits.into_iter().enumerate() {
                    if n > 0 {
                        per_tier[t].push((rank(o), n as usize));
                    }
                }
            }
            for (t, mut hits) in Tier::ALL.into_iter().zip(per_tier) {
                if !hits.is_empty() {
                    hits.sort_unstable();
                    lower_tier.push((t.name().to_string(), LowerTierHits { hits }));
                }
            }
        }
        IndexerQueryResponse::TieredScores(TieredScores {
            device: OverlapScores { scores, frequencies: Vec::new() },
            lower_tier,
        })
    }
}

/// Counters of the served indexer (`/metrics` is per shard; these are read by tests and logs).
#[derive(Debug, Default)]
pub struct Counters {
    /// Queries answered with scores.
    pub answered: AtomicU64,
    /// Queries answered with an error (unknown model, a body that does not decode).
    pub refused: AtomicU64,
}

/// Handle to the served indexer's threads; dropping it stops them.
pub struct ServedIndexer {
    stop: Arc<AtomicBool>,
    thread: Option<std::thread::JoinHandle<()>>,
    address: String,
    registries: flume::Sender<Arc<Registry>>,
    pub counters: Arc<Counters>,
}

impl ServedIndexer {
    /// Listen on `host:port` (port 0: any) and answer from `replica`.
    pub fn start(replica: IndexReplica, host: &str, port: u16) -> io::Result<ServedIndexer> {
        let listener = TcpListener::bind((host, port))?;
        listener.set_nonblocking(true)?;
        let address = listener.local_addr()?.to_string();
        let (tx, rx) = flume::unbounded::<Arc<Registry>>();
        let stop = Arc::new(AtomicBool::new(false));
        let counters = Arc::new(Counters::default());
        let book = Arc::new(Mutex::new(Book { replica, models: HashMap::new() }));
        let (stop2, counters2) = (stop.clone(), counters.clone());
        let thread = std::thread::Builder::new()
            .name("served-indexer".into())
            .spawn(move || accept_loop(&listener, &book, &rx, &stop2, &counters2))?;
        crate::log::info(&format!("served indexer: answering {KV_INDEXER_QUERY_ENDPOINT} on {address}"));
        Ok(ServedIndexer { stop, thread: Some(thread), address, registries: tx, counters })
    }

    /// `host:port` of the listener (what the discovery record names).
    pub fn address(&self) -> &str {
        &self.address
    }

    /// Where the control thread sends each new registry.
    pub fn registry_sender(&self) -> flume::Sender<Arc<Registry>> {
        self.registries.clone()
    }
}

impl Drop for ServedIndexer {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Release);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn lock(book: &Mutex<Book>) -> std::sync::MutexGuard<'_, Book> {
    book.lock().unwrap_or_else(|e| e.into_inner())
}

fn accept_loop(
    listener: &TcpListener,
    book: &Arc<Mutex<Book>>,
    registries: &flume::Receiver<Arc<Registry>>,
    stop: &Arc<AtomicBool>,
    counters: &Arc<Counters>,
) {
    while !stop.load(Ordering::Acquire) {
        let newest = registries.try_iter().last();
        {
            let mut b = lock(book);
            if let Some(r) = newest {
                b.learn(&r);
            }
            b.replica.drain(usize::MAX);
        }
        match listener.accept() {
            Ok((conn, _)) => {
                let (book, stop, counters) = (book.clone(), stop.clone(), counters.clone());
                let spawned = std::thread::Builder::new()
                    .name("served-indexer-conn".into())
                    .spawn(move || conn_loop(conn, &book, &stop, &counters));
                if let Err(e) = spawned {
                    crate::log::warn(&format!("served indexer: cannot start a connection thread: {e}"));
                }
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => std::thread::sleep(TICK),
            Err(e) => {
                crate::log::warn(&format!("served indexer: accept failed: {e}"));
                std::thread::sleep(TICK);
            }
        }
    }
}

/// Reads request frames, acks each, answers it on its call-back; ends when the asker closes,
/// framing is lost, or the indexer stops.
fn conn_loop(mut conn: TcpStream, book: &Mutex<Book>, stop: &AtomicBool, counters: &Counters) {
    let _ = conn.set_nonblocking(false);
    let _ = conn.set_nodelay(true);
    let _ = conn.set_read_timeout(Some(Duration::from_millis(200)));
    let decoder = RequestFrameDecoder::new(DEFAULT_MAX_MESSAGE_SIZE);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let mut chunk = vec![0u8; 16 * 1024];
    let mut out = Vec::with_capacity(256);
    loop {
        loop {
            out.clear();
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(frame)) => {
                    let ours = frame.path.rsplit('/').next() == Some(KV_INDEXER_QUERY_ENDPOINT);
                    let ack = if ours {
                        Ack::Accepted
                    } else {
                        Ack::Rejected(format!("Server unavailable: unknown endpoint {}", frame.path))
                    };
                    encode_ack(&mut out, &ack);
                    if conn.write_all(&out).is_err() {
                        return;
                    }
                    if ours {
                        if let Err(e) = answer(&frame, book, counters) {
                            crate::log::warn(&format!("served indexer: query not answered: {e}"));
                        }
                    }
                }
                Ok(Decoded::Incomplete { .. }) => break,
                Err(e) => {
                    encode_ack(&mut out, &Ack::Rejected(format!("Read error: {e}")));
                    let _ = conn.write_all(&out);
                    let _ = conn.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {}
            Err(_) => return,
        }
        if stop.load(Ordering::Acquire) {
            return;
        }
    }
}

/// Decodes one query, answers it from the index and sends the answer to the asker's
/// response-stream listener.
fn answer(frame: &RequestFrame, book: &Mutex<Book>, counters: &Counters) -> Result<(), String> {
    let tp = frame.two_part(DEFAULT_MAX_MESSAGE_SIZE).map_err(|e| e.to_string())?;
    let ctrl = RequestControlMessage::from_json(tp.header).map_err(|e| e.to_string())?;
    if ctrl.connection_info.transport != "tcp_server" {
        return Err(format!("unsupported call-back transport {:?}", ctrl.connection_info.transport));
    }
    let info = ctrl.connection_info.tcp_info().map_err(|e| e.to_string())?;
    let codec = ctrl.payload_codec;
    let response = match codec.decode::<IndexerQueryRequest>(tp.body) {
        Ok(q) => lock(book).answer(&q),
        Err(e) => IndexerQueryResponse::Error(format!("invalid indexer query: {e}")),
    };
    let counter = match &response {
        IndexerQueryResponse::TieredScores(_) => &counters.answered,
        IndexerQueryResponse::Error(_) => &counters.refused,
    };
    counter.fetch_add(1, Ordering::Relaxed);
    let bytes = encode_answer(&info.subject, codec, &response).map_err(|e| e.to_string())?;
    let mut sock = dial(&info.address)?;
    sock.write_all(&bytes).map_err(|e| format!("call-back to {}: {e}", info.address))?;
    // The asker closes once it has the sentinel; nothing else comes this way.
    let _ = sock.shutdown(Shutdown::Write);
    Ok(())
}

/// The whole call-back: handshake, prologue, the answer, `complete_final`, sentinel.
fn encode_answer(
    subject: &str,
    codec: Codec,
    response: &IndexerQueryResponse,
) -> Result<Vec<u8>, crate::plane::PlaneError> {
    let mut out = Vec::with_capacity(512);
    encode_handshake(&mut out, &CallHomeHandshake { subject: subject.to_owned(), stream_type: StreamType::Response })?;
    encode_prologue(&mut out, &StreamPrologue { error: None })?;
    encode_item(&mut out, codec, response)?;
    encode_complete_final(&mut out, codec)?;
    encode_control(&mut out, ControlMessage::Sentinel);
    Ok(out)
}

fn dial(address: &str) -> Result<TcpStream, String> {
    let addrs: Vec<SocketAddr> = address.to_socket_addrs().map_err(|e| format!("call-back {address}: {e}"))?.collect();
    let mut last = format!("call-back {address}: no address");
    for a in addrs {
        match TcpStream::connect_timeout(&a, DIAL_TIMEOUT) {
            Ok(s) => {
                let _ = s.set_nodelay(true);
                return Ok(s);
            }
            Err(e) => last = format!("call-back {address}: {e}"),
        }
    }
    Err(last)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::stream::{ResponseStreamDecoder, StreamEvent};
    use crate::router::kv::index::{BlockPair, IndexOp, Owner};

    #[test]
    fn answers_name_the_models_workers_and_their_depths() {
        let (mut feed, mut reps) = crate::router::kv::replica::channel(1, 64);
        let owner = |w| Owner { worker_id: w, dp_rank: 0 };
        let blocks = |n: u64| (0..n).map(|i| BlockPair { block_hash: 100 + i, tokens_hash: i }).collect::<Vec<_>>();
        feed.publish(IndexOp::Stored { owner: owner(7), parent_hash: None, blocks: blocks(3).into() });
        feed.publish(IndexOp::Stored { owner: owner(8), parent_hash: None, blocks: blocks(1).into() });
        feed.publish(IndexOp::Stored { owner: owner(9), parent_hash: None, blocks: blocks(2).into() });
        feed.flush();
        let mut book = Book { replica: reps.remove(0), models: HashMap::new() };
        book.models.insert("m".into(), [7, 8].into());
        let q = IndexerQueryRequest { model_name: "m".into(), block_hashes: vec![0, 1, 2, 3], device_only: false };
        let IndexerQueryResponse::TieredScores(t) = book.answer(&q) else { panic!("scores expected") };
        let w = |id| WorkerWithDpRank { worker_id: id, dp_rank: 0 };
        assert_eq!(t.device.scores, vec![(w(7), 3), (w(8), 1)], "worker 9 serves another model");
        assert_eq!(t.lower_tier, [], "no lower tier has had an event");
        // Worker 8's blocks 1–2 on host, worker 7's block 3 on disk, worker 9's on host.
        let lower = |tier, w, parent, from: u64, to: u64| {
            let blocks: Vec<BlockPair> =
                (from..to).map(|i| BlockPair { block_hash: 100 + i, tokens_hash: i }).collect();
            IndexOp::Lower(
                tier,
                Box::new(IndexOp::Stored { owner: owner(w), parent_hash: parent, blocks: blocks.into() }),
            )
        };
        feed.publish(lower(Tier::HostPinned, 8, Some(100), 1, 3));
        feed.publish(lower(Tier::Disk, 7, Some(102), 3, 4));
        feed.publish(lower(Tier::HostPinned, 9, None, 0, 4));
        feed.flush();
        let IndexerQueryResponse::TieredScores(t) = book.answer(&q) else { panic!("scores expected") };
        let hits = |v: Vec<(WorkerWithDpRank, usize)>| LowerTierHits { hits: v };
        assert_eq!(
            t.lower_tier,
            [("host_pinned".to_string(), hits(vec![(w(8), 2)])), ("disk".to_string(), hits(vec![(w(7), 1)]))]
        );
        let only = IndexerQueryRequest { device_only: true, ..q.clone() };
        let IndexerQueryResponse::TieredScores(t) = book.answer(&only) else { panic!("scores expected") };
        assert_eq!(t.lower_tier, []);
        let q = IndexerQueryRequest { model_name: "other".into(), ..q };
        assert_eq!(book.answer(&q), IndexerQueryResponse::unknown_model("other"));
    }

    #[test]
    fn the_call_back_is_a_worker_shaped_one_item_stream() {
        let r = IndexerQueryResponse::unknown_model("m");
        let mut bytes = BytesMut::from(&encode_answer("s-1", Codec::Msgpack, &r).unwrap()[..]);
        let mut d = ResponseStreamDecoder::new(Codec::Msgpack, DEFAULT_MAX_MESSAGE_SIZE);
        let mut seen = Vec::new();
        while let Ok(Decoded::Frame(ev)) = d.decode::<serde_json::Value>(&mut bytes) {
            seen.push(ev);
        }
        assert!(matches!(seen[0], StreamEvent::Handshake(_)));
        assert!(matches!(seen[1], StreamEvent::Prologue(_)));
        let StreamEvent::Item(v) = &seen[2] else { panic!("an item expected, got {:?}", seen[2]) };
        assert_eq!(v, &serde_json::json!({"Error": "served indexer model m is not registered"}));
        assert!(matches!(seen[3], StreamEvent::CompleteFinal));
        assert!(matches!(seen[4], StreamEvent::Sentinel));
    }
}
