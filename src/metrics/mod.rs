//! Metrics: per-shard collectors, merged only when `/metrics` is scraped.
//!
//! Each shard owns a [`ShardMetrics`] of plain `Cell`s: recording is an add on the shard's
//! own memory, with no atomics and nothing shared between cores. A scrape asks every other
//! shard for a [`Snapshot`] through its inbox (see `shard::ShardMsg::Snapshot`), merges the
//! snapshots, and renders Prometheus text with [`render`]. Names, HELP texts, labels and
//! buckets follow Dynamo 1.6.1 under the configured prefix (`--metrics-prefix`, default
//! `dynamo_frontend`), families sorted by name; switchyard's own families are prefixed
//! `switchyard_` and come after `dynamo_component_uptime_seconds`.
//!
//! Families and what they count here:
//! * per model (see [`families`]): `requests_started_total`, `requests_total`,
//!   `inflight_requests` (model resolved → outcome known), `active_requests` (handler entry →
//!   response complete: for a unary answer, until its body is built; for a stream, until its
//!   last chunk is handed to the connection),
//!   `queued_requests` (always 0: requests are never queued before their handler), the token
//!   and latency histograms; requests for a missing or unknown model are `unknown_model`;
//! * `failures_total{class,reason}`: every request that ends in an error, whether as an error
//!   response or as an error event in a stream already started, by [`Failure`];
//! * `disconnected_clients`: how many clients went away before the end of their answer,
//!   streamed or not (as 1.6.1 counts them), **since start** (Dynamo types it a gauge; it
//!   only ever grows here);
//! * `model_*`: one sample per model of the scraping shard's Registry snapshot ([`ServedModel`]),
//!   under its primary name (not again for each alias);
//! * `switchyard_discovery_records_skipped{bucket}`: records the Registry snapshot's discovery
//!   skipped, by bucket ([`Discovery`]);
//! * `tokenizer_latency_ms{operation}`: `tokenize`, the prompt's encode, once per request that
//!   encodes text; `detokenize`, the sum of a request's incremental decode time, once per
//!   request that produced output (as Dynamo: one observation per request, not per token).
//!
//! Assumptions, where Dynamo 1.6.1 was not observed: the classes of [`Failure`] other than
//! `InvalidRequest`, `NotFound` and `UnsupportedMedia`; `failures_total` renamed by
//! `--metrics-prefix` like the other families of the HTTP service.
//!
//! Called by `http1`'s service (recording) and by the `/metrics` route (rendering). Depends on
//! std and the Registry's plain [`CardLimits`].

pub mod families;
pub mod kv;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write;

use crate::registry::CardLimits;
use families::{block, escape, header, histogram_series, Blocks, Histogram};
pub use families::{Endpoint, ModelStats, Outcome};

/// `tokenizer_latency_ms` buckets, as Dynamo.
pub const TOKENIZER_MS_BUCKETS: &[f64] = &[0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0, 256.0, 512.0];

/// The `class` and `reason` of a failed request (`failures_total`).
///
/// Seen from Dynamo 1.6.1: `InvalidRequest` / `request.invalid` (400), `NotFound` /
/// `request.not_found` (404, route or model), `UnsupportedMedia` / `request.unsupported_media`
/// (415). The others are switchyard's choice, in the same style: a method the route does not
/// take and a body over the limit are `InvalidRequest` with their own reason, a feature not
/// implemented is `Unsupported`, no usable worker (503) is `Unavailable` /
/// `service.unavailable`, every worker busy (529) `Overloaded` / `service.overloaded`, and
/// anything else `Internal` / `internal.error`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Failure {
    Internal,
    InvalidRequest,
    MethodNotAllowed,
    TooLarge,
    NotFound,
    Overloaded,
    Unavailable,
    Unsupported,
    UnsupportedMedia,
}

const FAILURES: usize = 9;
/// `(class, reason)` by [`Failure`], sorted as rendered.
const FAILURE_LABELS: [(&str, &str); FAILURES] = [
    ("Internal", "internal.error"),
    ("InvalidRequest", "request.invalid"),
    ("InvalidRequest", "request.method_not_allowed"),
    ("InvalidRequest", "request.too_large"),
    ("NotFound", "request.not_found"),
    ("Overloaded", "service.overloaded"),
    ("Unavailable", "service.unavailable"),
    ("Unsupported", "request.not_implemented"),
    ("UnsupportedMedia", "request.unsupported_media"),
];

/// The `operation` of `tokenizer_latency_ms`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum TokenizerOp {
    Detokenize,
    Tokenize,
}

const TOKENIZER_OPS: [&str; 2] = ["detokenize", "tokenize"];

/// `tokenizer_latency_ms` by [`TokenizerOp`].
#[derive(Clone, Debug, PartialEq)]
pub struct TokenizerLatency([Histogram; 2]);

impl Default for TokenizerLatency {
    fn default() -> Self {
        TokenizerLatency([Histogram::new(TOKENIZER_MS_BUCKETS), Histogram::new(TOKENIZER_MS_BUCKETS)])
    }
}

/// Events at the server's edge, counted per shard: TLS handshakes
/// (`switchyard_tls_handshakes_total`) and every limit that ended a request or a connection
/// (`switchyard_limit_hits_total`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Edge {
    /// A TLS handshake finished.
    TlsOk,
    /// A TLS handshake failed (no common version or cipher, an untrusted client certificate,
    /// not TLS at all).
    TlsFailed,
    /// A TLS handshake did not finish within the header-read timeout.
    TlsTimedOut,
    /// A connection beyond `--max-connections-per-shard`, closed at once.
    ConnectionLimit,
    /// A request head not complete within the header-read timeout (408; slowloris).
    HeaderTimeout,
    /// A connection closed after the idle timeout.
    IdleTimeout,
    /// A request body over `DYN_HTTP_BODY_LIMIT_MB` (413).
    BodyTooLarge,
    /// A request head over the header count or byte limits (431).
    HeadersTooLarge,
    /// An HTTP/2 client's SETTINGS did not come within the header-read timeout.
    H2HandshakeTimeout,
    /// An HTTP/2 connection ended with GOAWAY ENHANCE_YOUR_CALM (rapid reset, floods).
    H2Calm,
    /// Any other HTTP/2 connection error (a protocol error, an oversized header block).
    H2Error,
    /// A worker acknowledged a request but did not call back within
    /// `--worker-callback-timeout-secs`.
    CallbackTimeout,
    /// A request's `max_tokens` lowered (or set) to `--max-output-tokens`.
    OutputCapped,
}

/// How many [`Edge`] events there are.
pub const EDGES: usize = 13;

/// The `limit` label of each limit among the [`Edge`] events.
pub const LIMITS: [(Edge, &str); 10] = [
    (Edge::ConnectionLimit, "connections_per_shard"),
    (Edge::HeaderTimeout, "header_read_timeout"),
    (Edge::IdleTimeout, "idle_timeout"),
    (Edge::BodyTooLarge, "body_size"),
    (Edge::HeadersTooLarge, "header_size"),
    (Edge::H2HandshakeTimeout, "h2_handshake_timeout"),
    (Edge::H2Calm, "h2_enhance_your_calm"),
    (Edge::H2Error, "h2_protocol_error"),
    (Edge::CallbackTimeout, "worker_callback_timeout"),
    (Edge::OutputCapped, "max_output_tokens"),
];

/// One shard's collectors. `!Sync` by construction: only its shard touches it.
#[derive(Default)]
pub struct ShardMetrics {
    http_responses: RefCell<BTreeMap<u16, u64>>,
    connections_accepted: Cell<u64>,
    connections_open: Cell<i64>,
    disconnected_clients: Cell<u64>,
    failures: [Cell<u64>; FAILURES],
    edge: [Cell<u64>; EDGES],
    tokenizer: RefCell<TokenizerLatency>,
    /// Per-model request families, indexed by [`ShardMetrics::model_index`].
    models: RefCell<Vec<(String, ModelStats)>>,
}

impl ShardMetrics {
    /// The index of `model` in this shard's table, added on first use (the only allocation).
    pub fn model_index(&self, model: &str) -> usize {
        let mut models = self.models.borrow_mut();
        match models.iter().position(|(m, _)| m == model) {
            Some(i) => i,
            None => {
                models.push((model.to_string(), ModelStats::default()));
                models.len() - 1
            }
        }
    }
    /// Update the stats of the model at `index` (from [`ShardMetrics::model_index`]).
    pub fn with_model<R>(&self, index: usize, f: impl FnOnce(&mut ModelStats) -> R) -> R {
        f(&mut self.models.borrow_mut()[index].1)
    }

    /// A migration of a request of the model at `index` (`kind`: 0 a new request, 1 an
    /// answer under way) ended: the request continued elsewhere (`ok`) or could not.
    pub fn migration_ended(&self, index: usize, kind: usize, ok: bool, took: std::time::Duration) {
        self.with_model(index, |m| m.migration_seconds[kind][usize::from(!ok)].observe(took.as_secs_f64()));
    }

    /// One HTTP response with `status` was produced.
    pub fn http_response(&self, status: u16) {
        *self.http_responses.borrow_mut().entry(status).or_insert(0) += 1;
    }
    pub fn connection_opened(&self) {
        self.connections_accepted.set(self.connections_accepted.get() + 1);
        self.connections_open.set(self.connections_open.get() + 1);
    }
    /// Client connections open on this shard now.
    pub fn open_connections(&self) -> i64 {
        self.connections_open.get()
    }
    pub fn connection_closed(&self) {
        self.connections_open.set(self.connections_open.get() - 1);
    }
    /// A client went away before its response was complete.
    pub fn client_disconnected(&self) {
        self.disconnected_clients.set(self.disconnected_clients.get() + 1);
    }
    /// A request ended in an error.
    pub fn failure(&self, f: Failure) {
        let c = &self.failures[f as usize];
        c.set(c.get() + 1);
    }
    /// One event at the edge.
    pub fn edge(&self, e: Edge) {
        let c = &self.edge[e as usize];
        c.set(c.get() + 1);
    }
    /// One `tokenizer_latency_ms` observation.
    pub fn tokenizer_latency(&self, op: TokenizerOp, ms: f64) {
        self.tokenizer.borrow_mut().0[op as usize].observe(ms);
    }

    /// A copy of every value, to send to the scraping shard.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            shards: 1,
            http_responses: self.http_responses.borrow().clone(),
            connections_accepted: self.connections_accepted.get(),
            connections_open: self.connections_open.get(),
            disconnected_clients: self.disconnected_clients.get(),
            failures: self.failures.each_ref().map(Cell::get),
            edge: self.edge.each_ref().map(Cell::get),
            tokenizer: self.tokenizer.borrow().clone(),
            models: self.models.borrow().iter().cloned().collect(),
            kv: Default::default(),
        }
    }
}

/// Values of one shard, or of several merged.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Snapshot {
    /// How many shards this snapshot covers.
    pub shards: usize,
    pub http_responses: BTreeMap<u16, u64>,
    pub connections_accepted: u64,
    pub connections_open: i64,
    pub disconnected_clients: u64,
    /// `failures_total` by [`Failure`].
    pub failures: [u64; FAILURES],
    /// Events at the edge, by [`Edge`].
    pub edge: [u64; EDGES],
    pub tokenizer: TokenizerLatency,
    /// Per-model request families, by model name.
    pub models: BTreeMap<String, ModelStats>,
    /// The kv router's counters (`--router-mode kv`; filled in by the shard).
    pub kv: kv::KvStats,
}

impl Snapshot {
    /// Add `other` into `self`.
    pub fn merge(&mut self, other: &Snapshot) {
        self.shards += other.shards;
        for (status, n) in &other.http_responses {
            *self.http_responses.entry(*status).or_insert(0) += n;
        }
        self.connections_accepted += other.connections_accepted;
        self.connections_open += other.connections_open;
        self.disconnected_clients += other.disconnected_clients;
        for (a, b) in self.failures.iter_mut().zip(&other.failures) {
            *a += b;
        }
        for (a, b) in self.edge.iter_mut().zip(&other.edge) {
            *a += b;
        }
        for (a, b) in self.tokenizer.0.iter_mut().zip(&other.tokenizer.0) {
            a.merge(b);
        }
        self.kv.merge(&other.kv);
        for (model, stats) in &other.models {
            match self.models.get_mut(model) {
                Some(m) => m.merge(stats),
                None => {
                    self.models.insert(model.clone(), stats.clone());
                }
            }
        }
    }
}

/// A model of the Registry snapshot, as the `model_*` gauges show it.
#[derive(Clone, Copy, Debug)]
pub struct ServedModel<'a> {
    pub name: &'a str,
    /// At least one worker can take a request for it.
    pub ready: bool,
    /// The frontend's `--migration-limit`.
    pub migration_limit: u64,
    pub limits: CardLimits,
}

/// What the scraping shard's Registry snapshot says about discovery.
#[derive(Clone, Copy, Debug)]
pub struct Discovery<'a> {
    /// Records skipped in the current snapshot, by bucket (every bucket, 0 for none): files
    /// that are not records, cards whose model cannot be served, unreachable instances.
    pub skipped: &'a [(&'a str, u64)],
}

/// The `model_*` gauges: name, HELP, and the value of a model.
type ModelGauge = (&'static str, &'static str, fn(&ServedModel<'_>) -> u64);

const MODEL_GAUGES: [ModelGauge; 7] = [
    ("model_context_length", "Maximum context length in tokens for a worker serving the model", |m| {
        m.limits.context_length
    }),
    ("model_kv_cache_block_size", "KV cache block size in tokens for a worker serving the model", |m| {
        m.limits.kv_cache_block_size
    }),
    ("model_max_num_batched_tokens", "Maximum number of batched tokens for a worker serving the model", |m| {
        m.limits.max_num_batched_tokens
    }),
    ("model_max_num_seqs", "Maximum number of sequences for a worker serving the model", |m| m.limits.max_num_seqs),
    ("model_migration_limit", "Maximum number of request migrations allowed for the model", |m| m.migration_limit),
    (
        "model_ready",
        "Whether the frontend can route at least one inference request for the model (1 = ready, 0 = not ready)",
        |m| u64::from(m.ready),
    ),
    ("model_total_kv_blocks", "Total KV cache blocks available for a worker serving the model", |m| {
        m.limits.total_kv_blocks
    }),
];

/// The families that are not per-request-per-model: failures, disconnects, tokenizer timings
/// and the served models' card values.
fn render_frontend(blocks: &mut Blocks, prefix: &str, s: &Snapshot, served: &[ServedModel<'_>]) {
    let name = format!("{prefix}_disconnected_clients");
    let out = block(blocks, &name, "gauge", "Number of disconnected clients");
    let _ = writeln!(out, "{name} {}", s.disconnected_clients);

    if s.failures.iter().any(|n| *n > 0) {
        let name = format!("{prefix}_failures_total");
        let out = block(blocks, &name, "counter", "Total number of terminal semantic request failures");
        for ((class, reason), n) in FAILURE_LABELS.iter().zip(&s.failures).filter(|(_, n)| **n > 0) {
            let _ = writeln!(out, "{name}{{class=\"{class}\",reason=\"{reason}\"}} {n}");
        }
    }

    if s.tokenizer.0.iter().any(|h| h.count() > 0) {
        let name = format!("{prefix}_tokenizer_latency_ms");
        let out = block(blocks, &name, "histogram", "Tokenizer latency in milliseconds");
        for (op, h) in TOKENIZER_OPS.iter().zip(&s.tokenizer.0).filter(|(_, h)| h.count() > 0) {
            histogram_series(out, &name, &format!("operation=\"{op}\""), h);
        }
    }

    if !served.is_empty() {
        for (family, help, value) in MODEL_GAUGES {
            let name = format!("{prefix}_{family}");
            let out = block(blocks, &name, "gauge", help);
            for m in served {
                let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(m.name), value(m));
            }
        }
    }
}

/// The kv router's families (only once it routed or indexed something).
fn render_kv(out: &mut String, kv: &kv::KvStats) {
    if kv.decisions.is_empty() && kv.index_ops == 0 {
        return;
    }
    header(out, "switchyard_kv_router_decisions_total", "counter", "Requests routed by the kv router, by worker");
    for (w, n) in &kv.decisions {
        let _ = writeln!(out, "switchyard_kv_router_decisions_total{{worker_id=\"{w}\"}} {n}");
    }
    header(
        out,
        "switchyard_kv_router_overlap_blocks_total",
        "counter",
        "Cached prefix blocks of the chosen workers, summed over decisions",
    );
    let _ = writeln!(out, "switchyard_kv_router_overlap_blocks_total {}", kv.overlap_blocks);
    header(out, "switchyard_kv_router_prompt_blocks_total", "counter", "Full prompt blocks, summed over decisions");
    let _ = writeln!(out, "switchyard_kv_router_prompt_blocks_total {}", kv.prompt_blocks);
    header(out, "switchyard_kv_index_ops_total", "counter", "KV events applied to a shard's index replica");
    let _ = writeln!(out, "switchyard_kv_index_ops_total {}", kv.index_ops);
    header(out, "switchyard_kv_index_blocks", "gauge", "Blocks held in a shard's index replica");
    let _ = writeln!(out, "switchyard_kv_index_blocks {}", kv.index_blocks);
    header(out, "switchyard_kv_router_queued_requests", "gauge", "Requests parked in the router queue now");
    let _ = writeln!(out, "switchyard_kv_router_queued_requests {}", kv.queued);
    header(out, "switchyard_kv_router_queued_total", "counter", "Requests ever parked in the router queue");
    let _ = writeln!(out, "switchyard_kv_router_queued_total {}", kv.queued_total);
    render_active(out, kv);
    let i = &kv.ingest;
    let counters: [(&str, &str, u64); 11] = [
        ("events_total", "KV events taken in order from the event plane or a recovery", i.events),
        ("duplicate_events_total", "KV events dropped as already applied", i.duplicates),
        ("event_gaps_total", "Jumps in a worker rank's event ids", i.gaps),
        ("malformed_messages_total", "Event-plane messages that could not be decoded", i.malformed),
        ("full_restores_total", "Whole-tree restores asked of workers (new sources, restarts)", i.restores),
        ("recoveries_total", "Recovery answers (ranges or whole trees) applied", i.recovered),
        ("recovery_failures_total", "Recovery attempts that failed (retried with back-off)", i.recovery_failures),
        ("recoveries_abandoned_total", "Recoveries given up after every attempt failed", i.recovery_given_up),
        (
            "active_events_total",
            "active_sequences_events events received from workers and other routers",
            i.active_events,
        ),
        ("prefill_marks_total", "Workers' prefill-complete marks matched to this process's bookings", i.prefill_marks),
        ("active_published_total", "Booking events this process published (replica sync)", i.active_published),
    ];
    for (name, help, v) in counters {
        let name = format!("switchyard_kv_ingest_{name}");
        header(out, &name, "counter", help);
        let _ = writeln!(out, "{name} {v}");
    }
}

/// The booked load per worker rank, and the other routers' bookings held (replica sync).
fn render_active(out: &mut String, kv: &kv::KvStats) {
    type Get = fn(&kv::ActiveLoad) -> u64;
    let gauges: [(&str, &str, Get); 3] = [
        ("active_requests", "Requests booked on a worker rank (this router's and its replicas')", |a| a.requests),
        ("active_prefill_tokens", "Booked prefill tokens not yet prefilled on a worker rank", |a| a.prefill_tokens),
        ("active_blocks", "Booked blocks of a worker rank as the decode term counts them (distinct prompt blocks; with output tracking, answers' blocks too)", |a| a.blocks),
    ];
    for (name, help, get) in gauges {
        let name = format!("switchyard_kv_router_{name}");
        header(out, &name, "gauge", help);
        for ((w, r), a) in &kv.active {
            let _ = writeln!(out, "{name}{{worker_id=\"{w}\",dp_rank=\"{r}\"}} {}", get(a));
        }
    }
    header(out, "switchyard_kv_router_remote_bookings", "gauge", "Other routers' bookings held (replica sync)");
    let _ = writeln!(out, "switchyard_kv_router_remote_bookings {}", kv.ingest.remote_bookings);
}

/// Prometheus text exposition (format 0.0.4) of a merged snapshot; `served` lists the models
/// of the scraping shard's Registry snapshot.
pub fn render(
    prefix: &str,
    s: &Snapshot,
    served: &[ServedModel<'_>],
    discovery: &Discovery<'_>,
    uptime_secs: f64,
    shards_total: usize,
) -> String {
    let mut blocks = Blocks::new();
    render_frontend(&mut blocks, prefix, s, served);
    families::render(&mut blocks, prefix, &s.models);
    let mut out = String::with_capacity(4096);
    for text in blocks.values() {
        out.push_str(text);
    }

    header(&mut out, "dynamo_component_uptime_seconds", "gauge", "Total uptime of the DistributedRuntime in seconds");
    let _ = writeln!(out, "dynamo_component_uptime_seconds {uptime_secs}");

    header(
        &mut out,
        "switchyard_discovery_records_skipped",
        "gauge",
        "Discovery records skipped in the current snapshot (not a record, model not servable, instance unreachable), by bucket",
    );
    for (bucket, n) in discovery.skipped {
        let _ = writeln!(out, "switchyard_discovery_records_skipped{{bucket=\"{}\"}} {n}", escape(bucket));
    }

    header(&mut out, "switchyard_http_responses_total", "counter", "HTTP responses by status code");
    for (status, n) in &s.http_responses {
        let _ = writeln!(out, "switchyard_http_responses_total{{code=\"{status}\"}} {n}");
    }
    header(&mut out, "switchyard_http_connections_accepted_total", "counter", "HTTP connections accepted");
    let _ = writeln!(out, "switchyard_http_connections_accepted_total {}", s.connections_accepted);
    header(&mut out, "switchyard_http_connections_open", "gauge", "HTTP connections open now");
    let _ = writeln!(out, "switchyard_http_connections_open {}", s.connections_open);
    header(&mut out, "switchyard_tls_handshakes_total", "counter", "TLS handshakes on the HTTPS port, by result");
    for (e, result) in [(Edge::TlsOk, "ok"), (Edge::TlsFailed, "failed"), (Edge::TlsTimedOut, "timeout")] {
        let _ = writeln!(out, "switchyard_tls_handshakes_total{{result=\"{result}\"}} {}", s.edge[e as usize]);
    }
    header(&mut out, "switchyard_limit_hits_total", "counter", "Requests or connections ended by a limit, by limit");
    for (e, limit) in LIMITS {
        let _ = writeln!(out, "switchyard_limit_hits_total{{limit=\"{limit}\"}} {}", s.edge[e as usize]);
    }
    render_kv(&mut out, &s.kv);
    header(&mut out, "switchyard_shards", "gauge", "Shard threads running, and how many answered this scrape");
    let _ = writeln!(out, "switchyard_shards{{state=\"running\"}} {shards_total}");
    let _ = writeln!(out, "switchyard_shards{{state=\"answered\"}} {}", s.shards);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const NO_DISCOVERY: Discovery<'static> = Discovery { skipped: &[] };

    #[test]
    fn merge_adds_per_status() {
        let a = ShardMetrics::default();
        let b = ShardMetrics::default();
        a.http_response(200);
        a.http_response(200);
        b.http_response(200);
        b.http_response(404);
        a.connection_opened();
        b.connection_opened();
        b.connection_closed();
        let mut s = a.snapshot();
        s.merge(&b.snapshot());
        assert_eq!(s.shards, 2);
        assert_eq!(s.http_responses[&200], 3);
        assert_eq!(s.http_responses[&404], 1);
        assert_eq!((s.connections_accepted, s.connections_open), (2, 1));
        let text = render("dynamo_frontend", &s, &[], &NO_DISCOVERY, 1.5, 2);
        assert!(text.contains("switchyard_http_responses_total{code=\"200\"} 3\n"));
        assert!(text.contains("# TYPE dynamo_frontend_disconnected_clients gauge\n"));
    }

    /// Dynamo 1.6.1's `/metrics`, recorded with one mocker model and a mix of requests.
    const RECORDED: &str = include_str!("../../tests/data/metrics/dynamo-1.6.1-with-model.txt");

    /// A family as text shows it: HELP and TYPE lines, label names of its first sample (no
    /// `le`), and the `le` values of its first histogram series.
    #[derive(Debug, Default)]
    struct Seen {
        help: String,
        kind: String,
        labels: Option<Vec<String>>,
        buckets: Vec<String>,
    }

    fn families(text: &str) -> Vec<(String, Seen)> {
        let mut out: Vec<(String, Seen)> = Vec::new();
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("# HELP ") {
                let name = rest.split(' ').next().unwrap().to_string();
                out.push((name, Seen { help: line.to_string(), ..Seen::default() }));
                continue;
            }
            let (_, seen) = out.last_mut().expect("a sample before any HELP");
            if line.starts_with("# TYPE ") {
                seen.kind = line.to_string();
                continue;
            }
            let (series, labels) = match line.split_once('{') {
                Some((series, rest)) => (series, rest.rsplit_once('}').unwrap().0),
                None => (line.split(' ').next().unwrap(), ""),
            };
            let pairs: Vec<(&str, &str)> = labels
                .split("\",")
                .filter(|p| !p.is_empty())
                .map(|p| p.split_once("=\"").unwrap())
                .map(|(k, v)| (k, v.trim_end_matches('"')))
                .collect();
            let names: Vec<String> = pairs.iter().filter(|(k, _)| *k != "le").map(|(k, _)| k.to_string()).collect();
            let first = seen.labels.get_or_insert_with(|| names.clone()) == &names;
            if series.ends_with("_bucket") && first && seen.buckets.last().map(String::as_str) != Some("+Inf") {
                seen.buckets.push(pairs.iter().find(|(k, _)| *k == "le").unwrap().1.to_string());
            }
        }
        out
    }

    /// Every family in use, as one scrape of a busy frontend serving the recorded model.
    fn busy() -> String {
        let m = ShardMetrics::default();
        for model in ["/work/observe/qwen3", "unknown_model"] {
            let i = m.model_index(model);
            m.with_model(i, |s| {
                s.start(Endpoint::ChatCompletions, true);
                for h in [&mut s.ttft, &mut s.itl, &mut s.isl, &mut s.osl, &mut s.cached] {
                    h.observe(1.0);
                }
                s.output_tokens += 3;
                s.finish(Endpoint::ChatCompletions, true, Outcome::Success, 0.1);
                s.end();
            });
        }
        m.failure(Failure::InvalidRequest);
        m.failure(Failure::NotFound);
        m.failure(Failure::UnsupportedMedia);
        m.tokenizer_latency(TokenizerOp::Tokenize, 0.7);
        m.tokenizer_latency(TokenizerOp::Detokenize, 0.01);
        let limits = CardLimits {
            context_length: 0,
            kv_cache_block_size: 64,
            max_num_batched_tokens: 8192,
            max_num_seqs: 256,
            total_kv_blocks: 16384,
        };
        let served = [ServedModel { name: "/work/observe/qwen3", ready: true, migration_limit: 0, limits }];
        render("dynamo_frontend", &m.snapshot(), &served, &NO_DISCOVERY, 1.0, 1)
    }

    #[test]
    fn families_match_the_dynamo_recording() {
        let recorded: BTreeMap<String, Seen> = families(RECORDED).into_iter().collect();
        let text = busy();
        let ours = families(&text);
        let dynamo: Vec<&str> =
            ours.iter().map(|(n, _)| n.as_str()).filter(|n| n.starts_with("dynamo_frontend_")).collect();
        let mut sorted = dynamo.clone();
        sorted.sort_unstable();
        assert_eq!(dynamo, sorted, "families in name order, as Dynamo");
        for name in [
            "active_requests",
            "cached_tokens",
            "disconnected_clients",
            "failures_total",
            "inflight_requests",
            "input_sequence_tokens",
            "inter_token_latency_seconds",
            "model_context_length",
            "model_kv_cache_block_size",
            "model_max_num_batched_tokens",
            "model_max_num_seqs",
            "model_migration_limit",
            "model_ready",
            "model_total_kv_blocks",
            "output_sequence_tokens",
            "output_tokens_total",
            "queued_requests",
            "request_duration_seconds",
            "requests_started_total",
            "requests_total",
            "time_to_first_token_seconds",
            "tokenizer_latency_ms",
        ] {
            assert!(dynamo.contains(&format!("dynamo_frontend_{name}").as_str()), "{name} not rendered");
        }
        for (name, seen) in &ours {
            if name.starts_with("switchyard_") {
                continue;
            }
            let want = recorded.get(name).unwrap_or_else(|| panic!("{name} is not in the recording"));
            assert_eq!((&seen.help, &seen.kind), (&want.help, &want.kind), "{name}");
            if name.starts_with("dynamo_frontend_") {
                assert_eq!(seen.labels, want.labels, "labels of {name}");
                assert_eq!(seen.buckets, want.buckets, "buckets of {name}");
                assert_eq!(seen.kind.ends_with(" histogram"), !seen.buckets.is_empty(), "{name}");
            }
        }
        // The card values of the recorded mocker, with the recorded samples.
        for line in RECORDED.lines().filter(|l| l.starts_with("dynamo_frontend_model_")) {
            assert!(text.lines().any(|l| l == line), "missing `{line}` in\n{text}");
        }
        for line in RECORDED.lines().filter(|l| l.starts_with("dynamo_frontend_failures_total{")) {
            let series = line.rsplit_once(' ').unwrap().0;
            assert!(text.lines().any(|l| l == format!("{series} 1")), "missing `{series}` in\n{text}");
        }
    }

    #[test]
    fn skipped_records_by_bucket() {
        let m = ShardMetrics::default();
        let skipped = [("v1/instances", 0), ("v1/mdc", 2)];
        let text = render("p", &m.snapshot(), &[], &Discovery { skipped: &skipped }, 0.0, 1);
        assert!(text.contains("# TYPE switchyard_discovery_records_skipped gauge\n"), "{text}");
        assert!(text.contains("switchyard_discovery_records_skipped{bucket=\"v1/instances\"} 0\n"), "{text}");
        assert!(text.contains("switchyard_discovery_records_skipped{bucket=\"v1/mdc\"} 2\n"), "{text}");
        let uptime = text.find("dynamo_component_uptime_seconds 0").unwrap();
        assert!(uptime < text.find("switchyard_discovery_records_skipped{").unwrap(), "after the uptime");
    }

    #[test]
    fn failures_and_tokenizer_appear_once_used() {
        let m = ShardMetrics::default();
        let text = render("p", &m.snapshot(), &[], &NO_DISCOVERY, 0.0, 1);
        assert!(text.contains("p_disconnected_clients 0\n"));
        assert!(!text.contains("p_failures_total") && !text.contains("p_tokenizer_latency_ms"), "{text}");
        assert!(!text.contains("p_model_ready"), "{text}");
        m.failure(Failure::Overloaded);
        m.client_disconnected();
        let other = ShardMetrics::default();
        other.failure(Failure::Overloaded);
        other.tokenizer_latency(TokenizerOp::Detokenize, 600.0);
        let mut s = m.snapshot();
        s.merge(&other.snapshot());
        let text = render("p", &s, &[], &NO_DISCOVERY, 0.0, 2);
        assert!(text.contains("p_failures_total{class=\"Overloaded\",reason=\"service.overloaded\"} 2\n"), "{text}");
        assert!(text.contains("p_disconnected_clients 1\n"));
        assert!(text.contains("p_tokenizer_latency_ms_bucket{operation=\"detokenize\",le=\"512\"} 0\n"), "{text}");
        assert!(text.contains("p_tokenizer_latency_ms_count{operation=\"detokenize\"} 1\n"));
        assert!(!text.contains("operation=\"tokenize\""), "{text}");
        assert!(FAILURE_LABELS.is_sorted(), "rendered in label order");
    }
}
