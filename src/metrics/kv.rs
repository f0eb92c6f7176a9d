//! The kv router's counters: what each shard's selection counts ([`KvStats`]) and what the
//! event-ingest thread counts ([`IngestStats`], atomics the shards read at a scrape),
//! merged over shards and rendered by [`super::render`].

use std::sync::atomic::{AtomicU64, Ordering};

/// Counters the ingest thread keeps and the shards read (for `/metrics`), shared as an
/// `Arc` beside the rings.
#[derive(Debug, Default)]
pub struct IngestStats {
    /// Events applied in order (live or replayed after a recovery).
    pub events: AtomicU64,
    pub duplicates: AtomicU64,
    pub gaps: AtomicU64,
    pub malformed: AtomicU64,
    pub connected: AtomicU64,
    /// Full restores asked for (new sources, restarted publishers, unservable ranges).
    pub restores: AtomicU64,
    /// Recoveries (range or full) answered and applied.
    pub recovered: AtomicU64,
    pub recovery_failures: AtomicU64,
    /// Recoveries abandoned after every attempt failed.
    pub recovery_given_up: AtomicU64,
    /// `active_sequences_events` events received from workers and other routers.
    pub active_events: AtomicU64,
    /// Workers' prefill-complete marks matched to a booking of this process.
    pub prefill_marks: AtomicU64,
    /// Other routers' bookings held now (replica sync).
    pub remote_bookings: AtomicU64,
    /// Events this process published (replica sync), and messages dropped for slow
    /// subscribers.
    pub active_published: AtomicU64,
    pub active_dropped: AtomicU64,
}

/// A copy of [`IngestStats`] at one moment.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct IngestCounts {
    pub events: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub malformed: u64,
    pub restores: u64,
    pub recovered: u64,
    pub recovery_failures: u64,
    pub recovery_given_up: u64,
    pub active_events: u64,
    pub prefill_marks: u64,
    pub remote_bookings: u64,
    pub active_published: u64,
    pub active_dropped: u64,
}

impl IngestStats {
    /// The counters now.
    pub fn counts(&self) -> IngestCounts {
        let r = |a: &AtomicU64| a.load(Ordering::Relaxed);
        IngestCounts {
            events: r(&self.events),
            duplicates: r(&self.duplicates),
            gaps: r(&self.gaps),
            malformed: r(&self.malformed),
            restores: r(&self.restores),
            recovered: r(&self.recovered),
            recovery_failures: r(&self.recovery_failures),
            recovery_given_up: r(&self.recovery_given_up),
            active_events: r(&self.active_events),
            prefill_marks: r(&self.prefill_marks),
            remote_bookings: r(&self.remote_bookings),
            active_published: r(&self.active_published),
            active_dropped: r(&self.active_dropped),
        }
    }
}

/// Counters of the kv router on one shard (or merged over shards), for `/metrics`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct KvStats {
    /// Requests routed, by worker instance id.
    pub decisions: std::collections::BTreeMap<u64, u64>,
    /// Σ over decisions of the chosen worker's cached prefix, in blocks.
    pub overlap_blocks: u64,
    /// Σ over decisions of the prompt's full blocks.
    pub prompt_blocks: u64,
    /// Index ops applied to the replica (each shard applies every op; merged: the largest).
    pub index_ops: u64,
    /// Blocks in the replica now (merged: the largest).
    pub index_blocks: u64,
    /// The event-ingest thread's counters (one thread: every shard reports the same).
    pub ingest: IngestCounts,
    /// Router queue: requests parked now, and ever.
    pub queued: u64,
    pub queued_total: u64,
    /// Bookings now by worker rank (this process's and, with replica sync, other routers'):
    /// requests, prefill tokens, distinct blocks. Every shard sees the whole picture
    /// (merged: the largest values).
    pub active: std::collections::BTreeMap<(u64, u32), ActiveLoad>,
}

/// The booked load of one worker rank.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ActiveLoad {
    pub requests: u64,
    pub prefill_tokens: u64,
    pub blocks: u64,
}

impl KvStats {
    /// Add `other` (another shard's) into `self`.
    pub fn merge(&mut self, other: &KvStats) {
        for (w, n) in &other.decisions {
            *self.decisions.entry(*w).or_insert(0) += n;
        }
        self.overlap_blocks += other.overlap_blocks;
        self.prompt_blocks += other.prompt_blocks;
        self.queued += other.queued;
        self.queued_total += other.queued_total;
        self.index_ops = self.index_ops.max(other.index_ops);
        self.index_blocks = self.index_blocks.max(other.index_blocks);
        if other.ingest.events >= self.ingest.events {
            self.ingest = other.ingest;
        }
        for (w, a) in &other.active {
            let m = self.active.entry(*w).or_default();
            m.requests = m.requests.max(a.requests);
            m.prefill_tokens = m.prefill_tokens.max(a.prefill_tokens);
            m.blocks = m.blocks.max(a.blocks);
        }
    }
}

/// One policy class of one model's worker pool, as the kv router's queue counts it
/// (process-wide).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClassRow {
    pub model: String,
    pub pool: crate::registry::Pool,
    pub class: String,
    /// Waiting now: requests, their prompt tokens, their cached-token estimates.
    pub pending: [u64; 3],
    /// Requests classified into the class.
    pub received: u64,
    /// Requests refused at the request, prompt-token and cached-token limits.
    pub refused: [u64; 3],
}

/// Dynamo 1.6.1's per-class router queue families (`{prefix}_router_queue_*`,
/// `{prefix}_router_admission_*`), labelled `model`, `worker_type` and `policy_class`; an
/// aggregated pool is labelled `decode`, as 1.6.1's decode router serves it.
pub fn render_classes(out: &mut String, prefix: &str, rows: &[ClassRow]) {
    use std::fmt::Write;
    if rows.is_empty() {
        return;
    }
    // 1.6.1's label order (alphabetical): model, policy_class, [reason,] worker_type.
    let labels = |r: &ClassRow, reason: &str| {
        let kind = match r.pool {
            crate::registry::Pool::Prefill => "prefill",
            _ => "decode",
        };
        let reason = if reason.is_empty() { String::new() } else { format!("reason=\"{reason}\",") };
        format!(
            "model=\"{}\",policy_class=\"{}\",{reason}worker_type=\"{kind}\"",
            super::families::escape(&r.model),
            super::families::escape(&r.class)
        )
    };
    let mut family = |name: &str, kind: &str, help: &str, value: &dyn Fn(&ClassRow) -> Vec<(&'static str, u64)>| {
        let _ = write!(out, "# HELP {prefix}_{name} {help}\n# TYPE {prefix}_{name} {kind}\n");
        for r in rows {
            for (reason, v) in value(r) {
                let _ = writeln!(out, "{prefix}_{name}{{{}}} {v}", labels(r, reason));
            }
        }
    };
    family(
        "router_admission_received_total",
        "counter",
        "Total attempts received by router admission; includes retries and excludes advisory probes",
        &|r| vec![("", r.received)],
    );
    family(
        "router_admission_rejected_total",
        "counter",
        "Total router admission rejections by deadline reason",
        &|_| vec![("due_time_passed", 0), ("predicted_miss", 0)],
    );
    family(
        "router_queue_backpressure_total",
        "counter",
        "Total number of router scheduler queue backpressure rejections",
        &|r| {
            vec![
                ("cached_token_limit", r.refused[2]),
                ("raw_isl_token_limit", r.refused[1]),
                ("request_limit", r.refused[0]),
            ]
        },
    );
    family(
        "router_queue_pending_cached_tokens",
        "gauge",
        "Estimated cached tokens for requests pending in the router scheduler queue",
        &|r| vec![("", r.pending[2])],
    );
    family(
        "router_queue_pending_isl_tokens",
        "gauge",
        "Sum of isl_tokens for requests pending in the router scheduler queue",
        &|r| vec![("", r.pending[1])],
    );
    family(
        "router_queue_pending_requests",
        "gauge",
        "Number of requests pending in the router scheduler queue",
        &|r| vec![("", r.pending[0])],
    );
}
