//! Targets of the bytes workers send: a response stream on the TCP request plane (handshake,
//! prologue, msgpack or JSON items, `complete_final`, sentinel) and the KV event plane's
//! ZMTP frames (kv-events, kv_metrics, active sequences, recovery answers).

use std::time::Instant;

use bytes::BytesMut;

use super::{control_byte, pieces};
use crate::ingest::peers::Peers;
use crate::ingest::recovery::Answer;
use crate::ingest::streams::{Out, Streams};
use crate::ingest::zmq::split_frame;
use crate::metrics::kv::IngestStats;
use crate::plane::frame::{AckDecoder, TwoPartKind, TwoPartRef};
use crate::plane::kv_events::{decode_kv_events, decode_kv_metrics, decode_message, decode_nats_message};
use crate::plane::payload::ResponseEnvelope;
use crate::plane::stream::{Item, JsonItem, ResponseStreamDecoder, StreamEvent, TensorItem};
use crate::plane::{Codec, Decoded, PlaneError};
use crate::router::kv::index::{IndexOp, KvIndex, Owner};

/// The largest frame a fuzzed stream may declare (the server's is 32 MiB).
const MAX_MESSAGE: usize = 1 << 20;

/// What a response stream decoded to: each event's debug text, then the error that ended it.
fn events(codec: Codec, mode: u8, data: &[u8], step: usize) -> (Vec<String>, Option<PlaneError>) {
    let mut dec = ResponseStreamDecoder::new(codec, MAX_MESSAGE);
    let mut buf = BytesMut::new();
    let mut seen = Vec::new();
    for piece in pieces(data, step) {
        buf.extend_from_slice(piece);
        loop {
            let next = match mode {
                0 => dec.decode::<Item>(&mut buf).map(|d| d.map(|e| format!("{e:?}"))),
                1 => dec.decode::<JsonItem>(&mut buf).map(|d| d.map(|e| format!("{e:?}"))),
                _ => dec.decode::<TensorItem>(&mut buf).map(|d| {
                    d.map(|e| {
                        if let StreamEvent::Item(item) = &e {
                            tensor_reply(item);
                        }
                        format!("{e:?}")
                    })
                }),
            };
            match next {
                Ok(Decoded::Frame(e)) => seen.push(e),
                Ok(Decoded::Incomplete { .. }) => break,
                Err(e) => return (seen, Some(e)),
            }
        }
    }
    (seen, None)
}

/// A tensor worker's item answered to a KServe client, typed and raw.
fn tensor_reply(item: &TensorItem) {
    if let Some(resp) = &item.data {
        for raw in [false, true] {
            let _ = crate::kserve::tensor::response(resp.clone(), raw, "m", "id");
        }
    }
}

/// A worker's response stream: the first byte picks the codec, the item type (Tokens, JSON,
/// tensor) and the pieces the bytes arrive in; the events and the error must not depend on
/// the pieces. Every data frame's body is also read by the hand-written msgpack decoder of
/// Tokens items, which must agree with serde whenever it answers; and the bytes are read as
/// acknowledgements.
pub fn plane_stream(data: &[u8]) {
    let (ctl, rest) = control_byte(data);
    let codec = if ctl & 1 == 0 { Codec::Msgpack } else { Codec::Json };
    let mode = ctl >> 1 & 3;
    let whole = events(codec, mode, rest, 0);
    let split = events(codec, mode, rest, usize::from(ctl >> 3));
    assert_eq!(whole.0, split.0, "split into pieces of {}", ctl >> 3);
    assert_eq!(whole.1.is_some(), split.1.is_some(), "split into pieces of {}: {whole:?} / {split:?}", ctl >> 3);
    let mut at = rest;
    while let Ok(Decoded::Frame((frame, used))) = TwoPartRef::parse(at, MAX_MESSAGE) {
        if frame.kind() == TwoPartKind::Data {
            fast_path_agrees(frame.body);
        }
        at = &at[used..];
    }
    let _ = AckDecoder::new(MAX_MESSAGE).parse(rest);
}

/// The hand-written Tokens envelope decoder answers only what serde decodes the same.
fn fast_path_agrees(body: &[u8]) {
    if let Some(fast) = crate::plane::itemdec::envelope(body) {
        let serde: Result<ResponseEnvelope<Item>, _> = Codec::Msgpack.decode(body);
        match serde {
            Ok(slow) => assert_eq!(format!("{fast:?}"), format!("{slow:?}"), "fast and serde decoders differ"),
            Err(e) => panic!("the fast decoder read what serde refuses ({e}): {fast:?}"),
        }
    }
}

/// The longest ZMTP frame a fuzzed publisher may send.
const MAX_FRAME: usize = 64 * 1024;

/// The KV event plane: the bytes are a publisher's ZMTP frames (after the handshake), cut
/// into messages as the subscriber cuts them; each message is decoded as the ingest thread
/// decodes it (also as a NATS message: its first frame the subject, its last the body) and
/// its events go through the per-owner order and recovery rules into a KV index, which is
/// then queried with the stored hashes. A message on the topic `answer` is a recovery answer
/// to the first query the rules asked for.
pub fn kv_events(data: &[u8]) {
    let mut at = data;
    let mut parts: Vec<&[u8]> = Vec::new();
    let mut kv = Kv::new();
    while let Ok(Some((flags, body))) = split_frame(at, MAX_FRAME) {
        let frame = &at[body.clone()];
        at = &at[body.end..];
        if flags & crate::ingest::zmq::FLAG_COMMAND != 0 {
            continue;
        }
        parts.push(frame);
        if flags & crate::ingest::zmq::FLAG_MORE == 0 {
            kv.message(&parts);
            parts.clear();
        }
    }
    kv.finish();
}

/// The ingest thread's state for one fuzzed connection.
struct Kv {
    streams: Streams,
    peers: Peers,
    stats: IngestStats,
    index: KvIndex,
    out: Vec<Out>,
    queries: Vec<Owner>,
    hashes: Vec<u64>,
}

impl Kv {
    fn new() -> Kv {
        let mut kv = Kv {
            streams: Streams::default(),
            peers: Peers::new(7, None),
            stats: IngestStats::default(),
            index: KvIndex::new(),
            out: Vec::new(),
            queries: Vec::new(),
            hashes: Vec::new(),
        };
        // One owner with a recovery target: its gaps ask for ranges and dumps.
        kv.streams.source_added(Owner { worker_id: 1, dp_rank: 0 }, &mut kv.out);
        kv.flush();
        kv
    }

    fn message(&mut self, frames: &[&[u8]]) {
        if let [subject, .., body] = frames {
            if let Ok(m) = decode_nats_message(subject, body) {
                let _ = decode_kv_events(m.envelope.payload);
            }
        }
        let Ok(msg) = decode_message(frames) else { return };
        let payload = msg.envelope.payload;
        match msg.topic {
            b"active_sequences_events" => {
                let mut ops = Vec::new();
                self.peers.received(payload, msg.envelope.publisher_id, &self.stats, &mut ops);
            }
            b"kv_metrics" => {
                let _ = decode_kv_metrics(payload);
            }
            b"answer" => {
                let answer: Result<Answer, String> = rmp_serde::from_slice(payload).map_err(|e| e.to_string());
                if let Some(owner) = self.queries.first().copied() {
                    self.queries.remove(0);
                    self.streams.reply(owner, answer, Instant::now(), &mut self.out);
                }
            }
            _ => {
                if let Ok(events) = decode_kv_events(payload) {
                    for ev in events {
                        self.streams.event(ev, &mut self.out);
                    }
                }
            }
        }
        self.flush();
    }

    /// Applies the ops the rules gave out; remembers their queries and stored hashes.
    fn flush(&mut self) {
        for o in self.out.drain(..) {
            match o {
                Out::Op(op) => {
                    if let IndexOp::Stored { blocks, .. } = &op {
                        self.hashes.extend(blocks.iter().map(|b| b.tokens_hash));
                    }
                    self.index.apply(&op);
                }
                Out::Query(want) => self.queries.push(want.owner),
            }
        }
    }

    fn finish(mut self) {
        self.streams.tick(Instant::now() + std::time::Duration::from_secs(3600), &mut self.out);
        self.flush();
        self.hashes.truncate(4096);
        let _ = self.index.find_matches(&self.hashes);
        let mut out = Vec::new();
        self.index.find_matches_by_sequence(&self.hashes, &mut out);
        for worker in [1, 2] {
            self.index.remove_worker(worker);
        }
        let _ = (self.index.indexed_blocks(), self.index.nodes(), self.index.memory_bytes());
    }
}
