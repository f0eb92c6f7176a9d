//! Per-`(worker, dp_rank)` event order and recovery decisions of the ingest thread (spec: KV
//! routing §4.2–4.3), as a pure state machine: events and recovery answers go in, index ops
//! and recovery queries come out. No sockets, no clock of its own — the ingest thread owns
//! those — so every rule is unit-tested here.
//!
//! The rules, per owner (a worker's DP rank; its events are numbered from 1):
//! * A source with a recovery target is restored in full (`TreeDump`) when it is first
//!   discovered, as 1.6.1 does at start-up and for every new worker.
//! * A live event with `event_id == cursor + 1` is applied; older ones are duplicates and
//!   dropped; a jump is a gap: the event is held and the missing range is asked for. An
//!   event numbered 1 after a higher cursor means the publisher started over (its worker
//!   restarted): that is answered with a full restore.
//! * While a query is in flight every live event of the owner is held; after the answer the
//!   held events are replayed through the same rules, so an answer and the live stream
//!   overlap harmlessly (ids already covered are duplicates). A `cleared` event is ordered
//!   like any other, which makes it the barrier 1.6.1 describes.
//! * `TreeDump` replaces the owner's blocks (`Cleared`, then the dump's stores) and sets the
//!   cursor to its `last_event_id` (never to the ids inside the dump). `Events` applies what
//!   lies beyond the cursor. `TooNew` / `InvalidRange` (or an `Events` answer that still
//!   leaves a hole) fall back to a full restore. `Error`, `TreeDumpFailed` and transport
//!   failures are retried with back-off (200 ms doubling, 8 attempts); after the last one the
//!   held events are applied as they are, the loss is counted, and the next gap tries again.
//! * Owners without a recovery target (no `v1/event_sources` record) keep the plain rules:
//!   gaps are counted and the stream goes on.
//! * One event id sequence spans every storage tier of an owner. `device` events change the
//!   index; `host_pinned`, `disk` and `external` stores and removals go to that tier's index
//!   ([`IndexOp::Lower`]); any tier's `cleared` empties them all.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use super::recovery::Answer;
use crate::plane::kv_events::RouterEvent;
use crate::router::kv::index::{IndexOp, Owner};
use crate::router::kv::tier::Tier;

/// Attempts per recovery before its held events are applied as they are.
pub const MAX_ATTEMPTS: u32 = 8;
/// First retry delay; doubles per attempt.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(200);
/// Held events per owner beyond which the oldest are dropped (a full restore follows).
pub const MAX_HELD: usize = 1 << 20;

/// What to ask a worker for: `None` = the whole tree, else `start..=end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Want {
    pub owner: Owner,
    pub range: Option<(u64, u64)>,
}

/// Output of the state machine.
#[derive(Clone, Debug, PartialEq)]
pub enum Out {
    Op(IndexOp),
    Query(Want),
}

/// Counters (exported by the ingest thread).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Counts {
    pub applied: u64,
    pub duplicates: u64,
    pub gaps: u64,
    pub restores: u64,
    pub recovered: u64,
    pub failed_attempts: u64,
    pub given_up: u64,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Recovery {
    Idle,
    InFlight(Option<(u64, u64)>),
    /// Retry `want` at `at`.
    Waiting(Option<(u64, u64)>, Instant),
}

#[derive(Debug)]
struct Stream {
    cursor: Option<u64>,
    recoverable: bool,
    recovery: Recovery,
    attempts: u32,
    held: Vec<RouterEvent>,
}

impl Stream {
    fn new(recoverable: bool) -> Stream {
        Stream { cursor: None, recoverable, recovery: Recovery::Idle, attempts: 0, held: Vec::new() }
    }
}

/// The state of every owner seen.
#[derive(Debug, Default)]
pub struct Streams {
    map: HashMap<Owner, Stream>,
    pub counts: Counts,
}

impl Streams {
    /// A `(worker, dp_rank)` source with a recovery target was discovered: restore it in full.
    pub fn source_added(&mut self, owner: Owner, out: &mut Vec<Out>) {
        let s = self.map.entry(owner).or_insert_with(|| Stream::new(true));
        if s.recoverable && s.recovery != Recovery::Idle {
            return;
        }
        s.recoverable = true;
        s.recovery = Recovery::InFlight(None);
        s.attempts = 0;
        self.counts.restores += 1;
        out.push(Out::Query(Want { owner, range: None }));
    }

    /// Forget every owner of `worker_id` (its blocks are purged by the caller).
    pub fn remove_worker(&mut self, worker_id: u64) {
        self.map.retain(|o, _| o.worker_id != worker_id);
    }

    /// Owners currently waiting for an answer or a retry.
    pub fn recovering(&self) -> usize {
        self.map.values().filter(|s| s.recovery != Recovery::Idle).count()
    }

    /// The owner's cursor (last event id applied).
    pub fn cursor(&self, owner: Owner) -> Option<u64> {
        self.map.get(&owner).and_then(|s| s.cursor)
    }

    /// A live event from the event plane.
    pub fn event(&mut self, ev: RouterEvent, out: &mut Vec<Out>) {
        let owner = Owner { worker_id: ev.worker_id, dp_rank: ev.event.dp_rank };
        let s = self.map.entry(owner).or_insert_with(|| Stream::new(false));
        if s.recovery != Recovery::Idle {
            if s.held.len() >= MAX_HELD {
                s.held.drain(..s.held.len() / 2);
            }
            s.held.push(ev);
            return;
        }
        advance(owner, s, ev, &mut self.counts, out);
    }

    /// The worker's answer to the query for `owner`, or why there is none; `now` schedules
    /// retries.
    pub fn reply(&mut self, owner: Owner, reply: Result<Answer, String>, now: Instant, out: &mut Vec<Out>) {
        let Some(s) = self.map.get_mut(&owner) else { return };
        let Recovery::InFlight(asked) = s.recovery else { return };
        match reply {
            Ok(Answer::TreeDump { events, last_event_id, .. }) => {
                out.push(Out::Op(IndexOp::Cleared { owner }));
                for ev in &events {
                    push_op(owner, ev, out);
                }
                s.cursor = Some(last_event_id);
                self.counts.recovered += 1;
                finish(owner, s, &mut self.counts, out);
            }
            Ok(Answer::Events { mut events, last_event_id }) => {
                events.sort_by_key(|e| e.event.event_id);
                let first_needed = s.cursor.map_or(1, |c| c + 1);
                let starts = events.iter().find(|e| e.event.event_id >= first_needed).map(|e| e.event.event_id);
                if starts.is_some_and(|id| id > first_needed) || (starts.is_none() && last_event_id >= first_needed) {
                    // The answer does not close the hole: restore in full.
                    s.recovery = Recovery::InFlight(None);
                    self.counts.restores += 1;
                    out.push(Out::Query(Want { owner, range: None }));
                    return;
                }
                for ev in events.into_iter().filter(|e| e.event.event_id >= first_needed) {
                    push_op(owner, &ev, out);
                    s.cursor = Some(ev.event.event_id);
                }
                self.counts.recovered += 1;
                finish(owner, s, &mut self.counts, out);
            }
            Ok(why @ (Answer::TooNew { .. } | Answer::InvalidRange { .. })) if asked.is_some() => {
                crate::log::info(&format!(
                    "kv events: worker {:x} rank {} cannot serve {asked:?} ({why:?}); restoring in full",
                    owner.worker_id, owner.dp_rank
                ));
                s.recovery = Recovery::InFlight(None);
                self.counts.restores += 1;
                out.push(Out::Query(Want { owner, range: None }));
            }
            failed => {
                let why = match failed {
                    Ok(Answer::Error(e)) => e,
                    Ok(Answer::TreeDumpFailed { message, .. }) => format!("tree dump failed: {message}"),
                    Ok(other) => format!("{other:?}"),
                    Err(e) => e,
                };
                self.counts.failed_attempts += 1;
                s.attempts += 1;
                if s.attempts >= MAX_ATTEMPTS {
                    crate::log::warn(&format!(
                        "kv events: recovery of worker {:x} rank {} failed {} times ({why}); going on without it",
                        owner.worker_id, owner.dp_rank, s.attempts
                    ));
                    self.counts.given_up += 1;
                    s.cursor = None;
                    finish(owner, s, &mut self.counts, out);
                } else {
                    let delay = FIRST_BACKOFF * (1 << (s.attempts - 1));
                    crate::log::warn(&format!(
                        "kv events: recovery of worker {:x} rank {} failed ({why}); retrying in {delay:?}",
                        owner.worker_id, owner.dp_rank
                    ));
                    s.recovery = Recovery::Waiting(asked, now + delay);
                }
            }
        }
    }

    /// Re-sends the queries whose back-off has passed.
    pub fn tick(&mut self, now: Instant, out: &mut Vec<Out>) {
        for (owner, s) in self.map.iter_mut() {
            if let Recovery::Waiting(range, at) = s.recovery {
                if at <= now {
                    s.recovery = Recovery::InFlight(range);
                    out.push(Out::Query(Want { owner: *owner, range }));
                }
            }
        }
    }
}

fn push_op(owner: Owner, ev: &RouterEvent, out: &mut Vec<Out>) {
    let tier = match (ev.storage_tier.as_str(), Tier::parse(&ev.storage_tier)) {
        ("device", _) => None,
        (_, Some(t)) => Some(t),
        (_, None) => {
            static WARNED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
            if !WARNED.swap(true, std::sync::atomic::Ordering::Relaxed) {
                crate::log::warn(&format!(
                    "kv events: storage tier {:?} is none of device, host_pinned, disk, external; \
                     its events are not indexed (said once)",
                    ev.storage_tier
                ));
            }
            return;
        }
    };
    let mut op = IndexOp::from_event(ev);
    // A dump's events are the owner's, whatever ids they carry.
    match &mut op {
        IndexOp::Stored { owner: o, .. } | IndexOp::Removed { owner: o, .. } | IndexOp::Cleared { owner: o } => {
            *o = owner
        }
        IndexOp::RemoveWorker { .. }
        | IndexOp::Usage { .. }
        | IndexOp::Load(_)
        | IndexOp::Side(_)
        | IndexOp::Lower(..) => {}
    }
    // A lower tier's stores and removals go to that tier; its `cleared` empties them all.
    if let (Some(t), false) = (tier, matches!(op, IndexOp::Cleared { .. })) {
        op = IndexOp::Lower(t, Box::new(op));
    }
    out.push(Out::Op(op));
}

/// Applies one live event under the ordering rules.
fn advance(owner: Owner, s: &mut Stream, ev: RouterEvent, counts: &mut Counts, out: &mut Vec<Out>) {
    let id = ev.event.event_id;
    match s.cursor {
        Some(c) if id == 1 && c > 1 && s.recoverable => {
            crate::log::info(&format!(
                "kv events: worker {:x} rank {} numbers from 1 again after {c}; restoring in full",
                owner.worker_id, owner.dp_rank
            ));
            counts.restores += 1;
            s.held.push(ev);
            s.recovery = Recovery::InFlight(None);
            s.attempts = 0;
            out.push(Out::Query(Want { owner, range: None }));
        }
        Some(c) if id == 1 && c > 1 => {
            out.push(Out::Op(IndexOp::Cleared { owner }));
            push_op(owner, &ev, out);
            s.cursor = Some(id);
            counts.applied += 1;
        }
        Some(c) if id <= c => counts.duplicates += 1,
        Some(c) if id > c + 1 => {
            counts.gaps += 1;
            crate::log::warn(&format!(
                "kv events: gap for worker {:x} rank {}: event {id} after {c}{}",
                owner.worker_id,
                owner.dp_rank,
                if s.recoverable { "; asking the worker" } else { " (no recovery target)" }
            ));
            if s.recoverable {
                s.held.push(ev);
                s.recovery = Recovery::InFlight(Some((c + 1, id - 1)));
                s.attempts = 0;
                out.push(Out::Query(Want { owner, range: Some((c + 1, id - 1)) }));
            } else {
                push_op(owner, &ev, out);
                s.cursor = Some(id);
                counts.applied += 1;
            }
        }
        _ => {
            push_op(owner, &ev, out);
            s.cursor = Some(id);
            counts.applied += 1;
        }
    }
}

/// Ends a recovery and replays the held events (which may start the next one).
fn finish(owner: Owner, s: &mut Stream, counts: &mut Counts, out: &mut Vec<Out>) {
    s.recovery = Recovery::Idle;
    s.attempts = 0;
    let mut held = std::mem::take(&mut s.held);
    held.sort_by_key(|e| e.event.event_id);
    for ev in held {
        if s.recovery != Recovery::Idle {
            s.held.push(ev);
        } else if s.cursor.is_none() {
            // After giving up: take the stream as it comes.
            push_op(owner, &ev, out);
            s.cursor = Some(ev.event.event_id);
            counts.applied += 1;
        } else {
            advance(owner, s, ev, counts, out);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::kv_events::{KvCacheEvent, KvCacheEventData, StoredBlock, StoredEvent};

    const W: Owner = Owner { worker_id: 7, dp_rank: 0 };

    fn dump(events: Vec<RouterEvent>, last_event_id: u64) -> Result<Answer, String> {
        Ok(Answer::TreeDump { events, last_event_id, reset_scope: None })
    }

    fn range(events: Vec<RouterEvent>, last_event_id: u64) -> Result<Answer, String> {
        Ok(Answer::Events { events, last_event_id })
    }

    fn stored(id: u64, hash: u64) -> RouterEvent {
        RouterEvent {
            worker_id: W.worker_id,
            storage_tier: "device".into(),
            residency_domain: None,
            event: KvCacheEvent {
                event_id: id,
                dp_rank: 0,
                data: KvCacheEventData::Stored(StoredEvent {
                    parent_hash: None,
                    start_position: None,
                    blocks: vec![StoredBlock { block_hash: hash, tokens_hash: hash, mm_extra_info: None }],
                }),
            },
        }
    }

    /// The block hashes stored by the ops in `out` (Cleared as 0).
    fn ops(out: &[Out]) -> Vec<u64> {
        out.iter()
            .filter_map(|o| match o {
                Out::Op(IndexOp::Stored { blocks, .. }) => Some(blocks[0].block_hash),
                Out::Op(IndexOp::Cleared { .. }) => Some(0),
                _ => None,
            })
            .collect()
    }

    fn queries(out: &[Out]) -> Vec<Option<(u64, u64)>> {
        out.iter().filter_map(|o| if let Out::Query(w) = o { Some(w.range) } else { None }).collect()
    }

    #[test]
    fn lower_tier_events_go_to_their_tier_and_share_the_id_sequence() {
        use crate::router::kv::tier::Tier;
        let mut st = Streams::default();
        let mut out = Vec::new();
        let tiered = |id: u64, tier: &str, data: Option<KvCacheEventData>| {
            let mut ev = stored(id, 100 + id);
            ev.storage_tier = tier.into();
            if let Some(d) = data {
                ev.event.data = d;
            }
            ev
        };
        st.event(stored(1, 11), &mut out);
        st.event(tiered(2, "host_pinned", None), &mut out);
        st.event(tiered(3, "disk", None), &mut out);
        st.event(tiered(4, "CPU_PINNED", None), &mut out);
        st.event(tiered(5, "host_pinned", Some(KvCacheEventData::Cleared)), &mut out);
        assert_eq!(st.cursor(W), Some(5), "every tier advances the one cursor");
        assert_eq!(st.counts.gaps, 0);
        let kinds: Vec<String> = out
            .iter()
            .map(|o| match o {
                Out::Op(IndexOp::Stored { .. }) => "device".to_string(),
                Out::Op(IndexOp::Lower(t, op)) if matches!(**op, IndexOp::Stored { .. }) => format!("{t:?}"),
                Out::Op(IndexOp::Cleared { owner }) if *owner == W => "cleared".to_string(),
                other => format!("{other:?}"),
            })
            .collect();
        assert_eq!(kinds, ["device", "HostPinned", "Disk", "cleared"], "an unknown tier is not indexed");
        assert_eq!(format!("{:?}", Tier::External), "External");
    }

    #[test]
    fn in_order_events_apply_and_duplicates_drop() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        for id in [1, 2, 2, 3, 1] {
            st.event(stored(id, 100 + id), &mut out);
        }
        // A 1 after 3 without a recovery target: the publisher started over, so the owner's
        // blocks are reset (0) before it is applied.
        assert_eq!(ops(&out), [101, 102, 103, 0, 101]);
        assert_eq!(st.counts.duplicates, 1, "a repeated 2 is a duplicate");
        assert_eq!(st.counts.applied, 4);
        assert_eq!(st.cursor(W), Some(1));
    }

    #[test]
    fn a_new_source_is_restored_in_full_and_live_events_wait_for_the_dump() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        st.source_added(W, &mut out);
        assert_eq!(queries(&out), [None]);
        out.clear();
        st.event(stored(5, 105), &mut out);
        st.event(stored(6, 106), &mut out);
        assert!(out.is_empty(), "held while the dump is in flight");
        let tree = vec![stored(1, 101), stored(2, 102)];
        st.reply(W, dump(tree, 5), Instant::now(), &mut out);
        // Reset, the dump, then only the held event past the dump's cursor.
        assert_eq!(ops(&out), [0, 101, 102, 106]);
        assert_eq!(st.cursor(W), Some(6));
        assert_eq!(st.counts.duplicates, 1);
        assert_eq!(st.counts.recovered, 1);
    }

    #[test]
    fn a_gap_asks_for_the_range_and_replays_after_the_answer() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        st.source_added(W, &mut out);
        st.reply(W, dump(vec![], 0), Instant::now(), &mut out);
        out.clear();
        st.event(stored(1, 101), &mut out);
        st.event(stored(4, 104), &mut out);
        st.event(stored(5, 105), &mut out);
        assert_eq!(ops(&out), [101]);
        assert_eq!(queries(&out), [Some((2, 3))]);
        assert_eq!(st.counts.gaps, 1);
        out.clear();
        // 1.6.1 answers with everything from the start through its newest.
        let evs = vec![stored(2, 102), stored(3, 103), stored(4, 104)];
        st.reply(W, range(evs, 4), Instant::now(), &mut out);
        assert_eq!(ops(&out), [102, 103, 104, 105]);
        assert_eq!(st.cursor(W), Some(5));
        assert_eq!(st.recovering(), 0);
    }

    #[test]
    fn an_answer_that_leaves_a_hole_or_cannot_serve_falls_back_to_a_dump() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        st.source_added(W, &mut out);
        st.reply(W, dump(vec![stored(1, 101)], 1), Instant::now(), &mut out);
        st.event(stored(5, 105), &mut out);
        out.clear();
        st.reply(W, range(vec![stored(4, 104)], 4), Instant::now(), &mut out);
        assert_eq!(queries(&out), [None], "events 2..3 are missing from the answer");
        out.clear();
        st.reply(W, dump(vec![stored(9, 109)], 4), Instant::now(), &mut out);
        assert_eq!(ops(&out), [0, 109, 105]);
        // TooNew on a range → dump.
        st.event(stored(8, 108), &mut out);
        out.clear();
        st.reply(
            W,
            Ok(Answer::TooNew { requested_start: Some(6), requested_end: Some(7), newest_available: 3 }),
            Instant::now(),
            &mut out,
        );
        assert_eq!(queries(&out), [None]);
    }

    #[test]
    fn failures_back_off_then_give_up_and_go_on() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        let t0 = Instant::now();
        st.source_added(W, &mut out);
        st.event(stored(3, 103), &mut out);
        out.clear();
        let mut now = t0;
        for attempt in 1..MAX_ATTEMPTS {
            st.reply(W, Err("refused".into()), now, &mut out);
            st.tick(now, &mut out);
            assert!(queries(&out).is_empty(), "no retry before the back-off");
            now += FIRST_BACKOFF * (1 << (attempt - 1));
            st.tick(now, &mut out);
            assert_eq!(queries(&out), [None], "retry {attempt}");
            out.clear();
        }
        st.reply(W, Err("refused".into()), now, &mut out);
        assert_eq!(st.counts.given_up, 1);
        assert_eq!(st.counts.failed_attempts, u64::from(MAX_ATTEMPTS));
        assert_eq!(ops(&out), [103], "the held event is applied after giving up");
        assert_eq!(st.recovering(), 0);
        // The next gap tries again.
        out.clear();
        st.event(stored(9, 109), &mut out);
        assert_eq!(queries(&out), [Some((4, 8))]);
    }

    #[test]
    fn a_restarted_publisher_is_restored_and_a_departed_worker_forgotten() {
        let mut st = Streams::default();
        let mut out = Vec::new();
        st.source_added(W, &mut out);
        st.reply(W, dump(vec![], 0), Instant::now(), &mut out);
        for id in 1..=3 {
            st.event(stored(id, 100 + id), &mut out);
        }
        out.clear();
        st.event(stored(1, 201), &mut out);
        assert_eq!(queries(&out), [None]);
        out.clear();
        st.reply(W, dump(vec![stored(1, 201)], 1), Instant::now(), &mut out);
        assert_eq!(ops(&out), [0, 201]);
        st.remove_worker(W.worker_id);
        assert_eq!(st.cursor(W), None);
        // A late answer for a departed worker is ignored.
        out.clear();
        st.reply(W, dump(vec![stored(1, 1)], 1), Instant::now(), &mut out);
        assert!(out.is_empty());
    }
}
