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
