//! ThunderAgent's program state for one model: which sessions ("programs") hold how much of
//! which worker's KV capacity, which turn of each may go, which wait or are paused. Pure and
//! single-threaded: the classifier thread ([`super`]) owns one per model and passes the time
//! in; what a call lets go is left in [`State::released`] for the thread to answer.
//!
//! The rules are 1.6.1's `thunderagent` request classifier (docs/dynamo/router-policy-config.md):
//! * a session's turns go one at a time, in arrival order; a final turn
//!   (`x-dynamo-session-final: true`) ends the program and goes to its worker;
//! * a program is charged to its worker: its live context while a turn runs (*reasoning*),
//!   its last context × `acting_token_weight` between turns (*acting*), plus
//!   `buffer_per_program`; a worker's capacity is its card's `total_kv_blocks × block_size`;
//! * a turn of a program with a live worker goes there; a new program waits while any
//!   program is paused, else goes to the least-used worker with room for its prompt and the
//!   buffer, else it is paused (deferred);
//! * every scheduler interval ([`State::reconcile`]): idle programs past their retention are
//!   forgotten, paused ones resume greedily under `pause_threshold − resume_hysteresis`, ones
//!   paused past `resume_timeout_seconds` are forced back, and a worker over
//!   `pause_threshold` pauses acting programs (smallest first) down to `pause_target`,
//!   then marks reasoning ones to pause when their turn ends.

use std::cmp::Reverse;
use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::classifier::ThunderConfig;

/// A worker's data-parallel rank: (instance id, rank).
pub type Rank = (u64, u32);

/// A turn's live context (prompt and generated tokens), written by the shard running it.
pub type Progress = Arc<AtomicUsize>;

/// What the workers of a model can hold, as the classifier sees them.
#[derive(Debug, Default)]
pub struct Capacities {
    /// Changes whenever the workers do (removed workers are looked for once per id).
    pub id: u64,
    /// Each rank's capacity in tokens (ranks whose card gives no `total_kv_blocks` are absent).
    pub caps: Vec<(Rank, usize)>,
    /// Every rank discovery lists (`None`: not known, all are taken as live).
    pub live: Option<HashSet<Rank>>,
}

impl Capacities {
    fn is_live(&self, r: Rank) -> bool {
        self.live.as_ref().is_none_or(|l| l.contains(&r))
    }
    fn has_usable(&self) -> bool {
        self.caps.iter().any(|(r, _)| self.is_live(*r))
    }
    fn has_live_worker(&self) -> bool {
        self.live.as_ref().is_none_or(|l| !l.is_empty())
    }
    fn capacity(&self, r: Rank) -> Option<usize> {
        self.caps.iter().find(|(w, _)| *w == r).map(|(_, c)| *c)
    }
}

/// Why a request is refused (1.6.1's messages).
#[derive(Debug, PartialEq, Eq)]
pub enum Refused {
    Duplicate(String),
    RequestLimit(usize),
    ProgramLimit(usize),
}

impl std::fmt::Display for Refused {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Refused::Duplicate(id) => write!(f, "request {id:?} is already active in the ThunderAgent classifier"),
            Refused::RequestLimit(n) => {
                write!(f, "ThunderAgent is already tracking its configured limit of {n} requests")
            }
            Refused::ProgramLimit(n) => {
                write!(f, "ThunderAgent is already tracking its configured limit of {n} programs")
            }
        }
    }
}

/// A turn asking to go.
pub struct Turn {
    pub id: u128,
    /// Names this registration (an id used again is another registration).
    pub reg: u64,
    pub session: String,
    pub input_tokens: usize,
    pub progress: Progress,
    pub last: bool,
    pub pinned: Option<Rank>,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Status {
    Reasoning,
    Acting,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Life {
    Active,
    Paused,
}

#[derive(Clone, Debug)]
struct Program {
    status: Status,
    life: Life,
    worker: Option<Rank>,
    tokens: usize,
    progress: Option<Progress>,
    steps: usize,
    marked: bool,
    acting_since: Option<Instant>,
    deferred_since: Option<Instant>,
}

impl Program {
    fn new(input_tokens: usize) -> Program {
        Program {
            status: Status::Reasoning,
            life: Life::Active,
            worker: None,
            tokens: input_tokens,
            progress: None,
            steps: 1,
            marked: false,
            acting_since: None,
            deferred_since: None,
        }
    }

    /// The live context while a turn runs, else the last one.
    fn current(&self) -> usize {
        self.progress.as_ref().map_or(self.tokens, |p| p.load(Ordering::Relaxed))
    }
}

struct Req {
    session: String,
    input_tokens: usize,
    progress: Progress,
    last: bool,
    pinned: Option<Rank>,
    released: bool,
    prior: Option<Program>,
    began: bool,
    target: Option<Rank>,
    reg: u64,
}

#[derive(Clone, Copy)]
struct Waiting {
    id: u128,
    reg: u64,
}

impl Waiting {
    fn is_waiting(&self, requests: &HashMap<u128, Req>) -> bool {
        requests.get(&self.id).is_some_and(|r| !r.released && r.reg == self.reg)
    }
}

#[derive(Default)]
struct Session {
    current: Option<u128>,
    waiting: VecDeque<Waiting>,
    stale: usize,
}

/// One model's programs and waiting turns.
pub struct State {
    cfg: ThunderConfig,
    programs: HashMap<String, Program>,
    paused: HashSet<String>,
    marked: usize,
    usage: HashMap<Rank, usize>,
    requests: HashMap<u128, Req>,
    sessions: HashMap<String, Session>,
    arrivals: VecDeque<Waiting>,
    waiting_arrivals: HashSet<u128>,
    next_expiry: Option<Instant>,
    caps_id: Option<u64>,
    /// Registrations let go since the owner last drained this, with their worker target.
    pub released: Vec<(u64, Option<Rank>)>,
}

fn scale(tokens: usize, factor: f64) -> usize {
    ((tokens as f64) * factor).clamp(0.0, usize::MAX as f64) as usize
}

mod reconcile;
pub use reconcile::Reconciled;

impl State {
    pub fn new(cfg: ThunderConfig) -> State {
        State {
            cfg,
            programs: HashMap::new(),
            paused: HashSet::new(),
            marked: 0,
            usage: HashMap::new(),
            requests: HashMap::new(),
            sessions: HashMap::new(),
            arrivals: VecDeque::new(),
            waiting_arrivals: HashSet::new(),
            next_expiry: None,
            caps_id: None,
            released: Vec::new(),
        }
    }

    /// Whether the scheduler has anything to look after.
    pub fn needs_reconcile(&self) -> bool {
        !self.programs.is_empty()
    }

    /// (programs, paused programs, waiting turns, tracked requests).
    pub fn counts(&self) -> (usize, usize, usize, usize) {
        (self.programs.len(), self.paused.len(), self.waiting_arrivals.len(), self.requests.len())
    }

    /// A turn asks to go: it goes at once (in [`State::released`]) or waits.
    pub fn register(&mut self, t: Turn, caps: &Capacities, now: Instant) -> Result<(), Refused> {
        if self.requests.contains_key(&t.id) {
            return Err(Refused::Duplicate(crate::util::format_uuid(t.id)));
        }
        if self.requests.len() >= self.cfg.max_tracked_requests {
            return Err(Refused::RequestLimit(self.cfg.max_tracked_requests));
        }
        self.refresh_usage();
        self.expire_retained(now);
        if !t.last {
            self.ensure_program_room(&t.session)?;
        }
        self.clear_removed(caps);
        let waiting = Waiting { id: t.id, reg: t.reg };
        self.sessions.entry(t.session.clone()).or_default().waiting.push_back(waiting);
        self.arrivals.push_back(waiting);
        self.waiting_arrivals.insert(t.id);
        self.requests.insert(
            t.id,
            Req {
                session: t.session,
                input_tokens: t.input_tokens,
                progress: t.progress,
                last: t.last,
                pinned: t.pinned,
                released: false,
                prior: None,
                began: false,
                target: None,
                reg: t.reg,
            },
        );
        self.admit(t.id, caps, now);
        self.compact_arrivals();
        Ok(())
    }

    /// The turn was sent to `worker`.
    pub fn sent(&mut self, id: u128, worker: Rank) {
        self.refresh_usage();
        let Some(r) = self.requests.get(&id) else { return };
        if !r.released {
            return;
        }
        let session = r.session.clone();
        self.set_worker(&session, Some(worker));
    }

    /// The turn ended: answered (`completed`, with its context when known), or not.
    pub fn finished(&mut self, id: u128, completed: bool, context: Option<usize>, caps: &Capacities, now: Instant) {
        self.refresh_usage();
        self.finish(id, completed, context, caps, now);
    }

    /// A waiting turn's caller left (registration `reg` only: the id may be reused).
    pub fn cancel(&mut self, id: u128, reg: u64, caps: &Capacities, now: Instant) {
        if self.requests.get(&id).is_none_or(|r| r.reg != reg) {
            return;
        }
        self.refresh_usage();
        self.finish(id, false, None, caps, now);
    }

    fn ensure_program_room(&mut self, session: &str) -> Result<(), Refused> {
        if self.programs.contains_key(session) || self.programs.len() < self.cfg.max_tracked_requests {
            return Ok(());
        }
        let evicted = self
            .programs
            .iter()
            .filter(|(s, _)| !self.sessions.contains_key(s.as_str()))
            .min_by_key(|(_, p)| p.acting_since)
            .map(|(s, _)| s.clone());
        let Some(evicted) = evicted else { return Err(Refused::ProgramLimit(self.cfg.max_tracked_requests)) };
        self.remove_program(&evicted);
        Ok(())
    }

    fn charge(&self, p: &Program) -> Option<(Rank, usize)> {
        if p.life != Life::Active {
            return None;
        }
        let w = p.worker?;
        let tokens = match p.status {
            Status::Acting => scale(p.current(), self.cfg.acting_token_weight),
            Status::Reasoning => p.current(),
        };
        Some((w, tokens.saturating_add(self.cfg.buffer_per_program)))
    }

    fn subtract(&mut self, c: Option<(Rank, usize)>) {
        let Some((w, n)) = c else { return };
        let Some(used) = self.usage.get_mut(&w) else { return };
        *used = used.saturating_sub(n);
        if *used == 0 {
            self.usage.remove(&w);
        }
    }

    fn add(&mut self, c: Option<(Rank, usize)>) {
        if let Some((w, n)) = c {
            let used = self.usage.entry(w).or_default();
            *used = used.saturating_add(n);
        }
    }

    fn refresh_usage(&mut self) {
        let mut usage = HashMap::<Rank, usize>::new();
        for p in self.programs.values() {
            if let Some((w, n)) = self.charge(p) {
                let u = usage.entry(w).or_default();
                *u = u.saturating_add(n);
            }
        }
        self.usage = usage;
    }

    fn update<R>(&mut self, session: &str, f: impl FnOnce(&mut Program) -> R) -> Option<R> {
        let p = self.programs.get(session)?;
        let before = self.charge(p);
        self.marked -= usize::from(p.marked);
        self.subtract(before);
        let out = f(self.programs.get_mut(session)?);
        let p = self.programs.get(session)?;
        let (after, paused, marked) = (self.charge(p), p.life == Life::Paused, p.marked);
        self.marked += usize::from(marked);
        self.add(after);
        if paused {
            self.paused.insert(session.to_owned());
        } else {
            self.paused.remove(session);
        }
        Some(out)
    }

    fn insert_program(&mut self, session: String, p: Program) {
        let c = self.charge(&p);
        let paused = p.life == Life::Paused;
        self.marked += usize::from(p.marked);
        self.programs.insert(session.clone(), p);
        self.add(c);
        if paused {
            self.paused.insert(session);
        }
    }

    fn remove_program(&mut self, session: &str) -> Option<Program> {
        let p = self.programs.remove(session)?;
        self.marked -= usize::from(p.marked);
        let c = self.charge(&p);
        self.subtract(c);
        self.paused.remove(session);
        Some(p)
    }

    fn admit_fronts(&mut self, caps: &Capacities, now: Instant) -> bool {
        let fronts: Vec<u128> = self
            .arrivals
            .iter()
            .filter_map(|w| {
                let r = self.requests.get(&w.id)?;
                (!r.released && r.reg == w.reg && self.is_front_and_idle(w.id, r)).then_some(w.id)
            })
            .collect();
        let mut changed = false;
        for id in fronts {
            changed |= self.admit(id, caps, now);
        }
        changed
    }

    fn admit(&mut self, id: u128, caps: &Capacities, now: Instant) -> bool {
        let Some(r) = self.requests.get(&id) else { return false };
        if r.released || !self.is_front_and_idle(id, r) {
            return false;
        }
        if r.last {
            return self.begin_last(id);
        }
        if !self.begin(id) {
            return false;
        }
        let Some(r) = self.requests.get(&id) else { return false };
        let (session, input_tokens, pinned, was_new) = (r.session.clone(), r.input_tokens, r.pinned, r.prior.is_none());
        let Some(p) = self.programs.get(&session) else { return false };
        let (life, assigned) = (p.life, p.worker);
        if life == Life::Paused {
            return self.defer(&session, now);
        }
        // A hard pin must have room on its worker before the turn goes (a worker whose card
        // is unknown cannot be sized: the router checks the pin).
        if let Some(pin) = pinned.filter(|p| caps.is_live(*p)) {
            if let Some(capacity) = caps.capacity(pin) {
                let used = self.usage.get(&pin).copied().unwrap_or(0);
                let own = (assigned == Some(pin)).then(|| self.charge(p)).flatten().map_or(0, |(_, n)| n);
                let projected = used.saturating_sub(own).saturating_add(self.buffered(&session));
                if projected > capacity {
                    return self.defer(&session, now);
                }
            }
        }
        if !caps.has_usable() {
            return self.release(id, assigned.filter(|w| caps.is_live(*w)));
        }
        let mut changed = false;
        if let Some(w) = assigned {
            if caps.is_live(w) {
                return self.release(id, Some(w));
            }
            self.set_worker(&session, None);
            changed = true;
        }
        if was_new && !self.paused.is_empty() {
            return self.defer(&session, now) || changed;
        }
        let required = input_tokens.saturating_add(self.cfg.buffer_per_program);
        let chosen = caps
            .caps
            .iter()
            .filter(|(w, _)| caps.is_live(*w))
            .filter_map(|(w, capacity)| {
                let used = self.usage.get(w).copied().unwrap_or(0);
                capacity.checked_sub(used).is_some_and(|left| left >= required).then_some((*w, used))
            })
            .min_by_key(|(w, used)| (*used, *w))
            .map(|(w, _)| w);
        match chosen {
            Some(w) => self.release(id, Some(w)) || changed,
            None => self.defer(&session, now) || changed,
        }
    }

    fn begin_last(&mut self, id: u128) -> bool {
        let Some(r) = self.requests.get(&id) else { return false };
        if r.began {
            return false;
        }
        let session = r.session.clone();
        let assigned = self.programs.get(&session).and_then(|p| p.worker);
        self.remove_program(&session);
        if let Some(r) = self.requests.get_mut(&id) {
            r.prior = None;
            r.began = true;
        }
        self.release(id, assigned)
    }

    fn begin(&mut self, id: u128) -> bool {
        let Some(r) = self.requests.get(&id) else { return false };
        if r.began {
            return true;
        }
        let (session, input_tokens, progress) = (r.session.clone(), r.input_tokens, r.progress.clone());
        let prior = self.programs.get(&session).cloned();
        if prior.is_some() {
            self.update(&session, |p| {
                p.status = Status::Reasoning;
                if input_tokens > 0 {
                    p.tokens = input_tokens;
                }
                p.progress = Some(progress);
                p.steps = p.steps.saturating_add(1);
                p.acting_since = None;
            });
        } else {
            let mut p = Program::new(input_tokens);
            p.progress = Some(progress);
            self.insert_program(session, p);
        }
        if let Some(r) = self.requests.get_mut(&id) {
            r.prior = prior;
            r.began = true;
        }
        true
    }

    fn defer(&mut self, session: &str, now: Instant) -> bool {
        let Some(p) = self.programs.get(session) else { return false };
        let changed = p.life != Life::Paused || p.deferred_since.is_none() || p.worker.is_some();
        self.update(session, |p| {
            p.life = Life::Paused;
            p.deferred_since.get_or_insert(now);
            p.worker = None;
        });
        changed
    }

    fn release(&mut self, id: u128, worker: Option<Rank>) -> bool {
        let Some(r) = self.requests.get(&id) else { return false };
        if r.released || !r.began || !self.is_front_and_idle(id, r) {
            return false;
        }
        let (session, last, pinned) = (r.session.clone(), r.last, r.pinned);
        let assigned = self.programs.get(&session).and_then(|p| p.worker);
        if !last && !self.programs.contains_key(&session) {
            return false;
        }
        // The target is advisory; a hard pin is where the router sends it: charge that.
        let target = pinned.or(worker).or(assigned);
        if self.sessions.get(&session).and_then(|s| s.waiting.front()).map(|w| w.id) != Some(id) {
            return false;
        }
        if !last {
            self.update(&session, |p| {
                p.life = Life::Active;
                p.deferred_since = None;
                p.worker = target;
            });
        }
        let Some(s) = self.sessions.get_mut(&session) else { return false };
        s.waiting.pop_front();
        s.current = Some(id);
        let Some(r) = self.requests.get_mut(&id) else { return false };
        r.released = true;
        r.target = target;
        let reg = r.reg;
        self.waiting_arrivals.remove(&id);
        self.released.push((reg, target));
        true
    }

    fn buffered(&self, session: &str) -> usize {
        self.programs[session].current().saturating_add(self.cfg.buffer_per_program)
    }

    fn finish(&mut self, id: u128, completed: bool, context: Option<usize>, caps: &Capacities, now: Instant) {
        let Some(r) = self.requests.remove(&id) else { return };
        let was_waiting = self.waiting_arrivals.remove(&id);
        if let Some(s) = self.sessions.get_mut(&r.session) {
            if s.current == Some(id) {
                s.current = None;
            } else if was_waiting {
                s.stale = s.stale.saturating_add(1);
            }
        }
        self.compact_session(&r.session);
        if r.last && r.began {
            self.remove_program(&r.session);
        } else if completed && r.released {
            let tokens = context.unwrap_or_else(|| r.progress.load(Ordering::Relaxed));
            let pause = self
                .update(&r.session, |p| {
                    p.status = Status::Acting;
                    p.tokens = tokens;
                    p.progress = None;
                    p.acting_since = Some(now);
                    p.deferred_since = None;
                    std::mem::take(&mut p.marked)
                })
                .unwrap_or(false);
            if pause {
                self.pause_acting(&r.session);
            }
        } else if r.began {
            match r.prior {
                Some(prior) => {
                    self.remove_program(&r.session);
                    self.insert_program(r.session.clone(), prior);
                }
                None => {
                    self.remove_program(&r.session);
                }
            }
        }
        if let Some(next) = self.idle_front(&r.session) {
            self.admit(next, caps, now);
        }
        if self.sessions.get(&r.session).is_some_and(|s| s.current.is_none() && s.waiting.is_empty()) {
            self.sessions.remove(&r.session);
        }
        self.schedule_expiry(&r.session);
        self.compact_arrivals();
    }

    fn compact_session(&mut self, session: &str) {
        let Some(s) = self.sessions.get_mut(session) else { return };
        while s.waiting.front().is_some_and(|w| !w.is_waiting(&self.requests)) {
            s.waiting.pop_front();
            s.stale = s.stale.saturating_sub(1);
        }
        if s.stale >= 8 && s.stale.saturating_mul(2) >= s.waiting.len() {
            s.waiting.retain(|w| w.is_waiting(&self.requests));
            s.stale = 0;
        }
    }

    fn set_worker(&mut self, session: &str, w: Option<Rank>) {
        self.update(session, |p| p.worker = w);
    }

    fn is_front_and_idle(&self, id: u128, r: &Req) -> bool {
        self.sessions
            .get(&r.session)
            .is_some_and(|s| s.current.is_none() && s.waiting.front().is_some_and(|w| w.id == id && w.reg == r.reg))
    }

    /// The first waiting turn of `session` when none of its turns is running.
    fn idle_front(&self, session: &str) -> Option<u128> {
        self.sessions.get(session).filter(|s| s.current.is_none()).and_then(|s| s.waiting.front()).map(|w| w.id)
    }

    fn waiting_pin(&self, session: &str) -> Option<Rank> {
        let id = self.sessions.get(session)?.waiting.front()?.id;
        self.requests.get(&id).filter(|r| !r.released).and_then(|r| r.pinned)
    }

    fn compact_arrivals(&mut self) {
        let kept = self.waiting_arrivals.len();
        if self.arrivals.len() <= kept.saturating_mul(2).saturating_add(256) {
            return;
        }
        let requests = &self.requests;
        self.arrivals.retain(|w| w.is_waiting(requests));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cfg(f: impl FnOnce(&mut ThunderConfig)) -> ThunderConfig {
        let mut c = ThunderConfig::default();
        f(&mut c);
        c
    }

    fn caps(id: u64, workers: &[(u64, usize)]) -> Capacities {
        Capacities {
            id,
            caps: workers.iter().map(|(w, c)| ((*w, 0), *c)).collect(),
            live: Some(workers.iter().map(|(w, _)| (*w, 0)).collect()),
        }
    }

    fn turn(id: u128, session: &str, tokens: usize) -> Turn {
        Turn {
            id,
            reg: id as u64 + 1000,
            session: session.into(),
            input_tokens: tokens,
            progress: Arc::new(AtomicUsize::new(tokens)),
            last: false,
            pinned: None,
        }
    }

    /// The registrations let go since the last call, with their targets.
    fn drain(s: &mut State) -> Vec<(u64, Option<u64>)> {
        s.released.drain(..).map(|(reg, t)| (reg, t.map(|(w, _)| w))).collect()
    }

    #[test]
    fn a_sessions_turns_go_one_at_a_time_and_stay_on_its_worker() {
        let (mut s, now) = (State::new(cfg(|_| {})), Instant::now());
        let c = caps(1, &[(1, 10_000), (2, 10_000)]);
        s.register(turn(1, "a", 500), &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1001, Some(1))], "the least-used worker (lowest id on a tie)");
        s.sent(1, (1, 0));
        // Another session goes to the other, now less used, worker.
        s.register(turn(2, "b", 100), &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1002, Some(2))]);
        // The session's next turn waits for the first to end, then goes where it ran.
        s.register(turn(3, "a", 700), &c, now).unwrap();
        assert!(drain(&mut s).is_empty());
        assert_eq!(s.counts(), (2, 0, 1, 3));
        s.finished(1, true, Some(650), &c, now);
        assert_eq!(drain(&mut s), [(1003, Some(1))]);
        // A last turn ends the program and goes to its worker; nothing is left of it after.
        s.finished(3, true, None, &c, now);
        let mut last = turn(4, "a", 800);
        last.last = true;
        s.register(last, &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1004, Some(1))]);
        s.finished(4, true, None, &c, now);
        assert_eq!(s.counts(), (1, 0, 0, 1), "only b's program and turn are left");
    }

    #[test]
    fn without_capacities_turns_go_untargeted() {
        let (mut s, now) = (State::new(cfg(|_| {})), Instant::now());
        s.register(turn(1, "a", 500), &Capacities::default(), now).unwrap();
        assert_eq!(drain(&mut s), [(1001, None)]);
    }

    #[test]
    fn no_room_pauses_a_new_program_and_new_programs_wait_behind_a_paused_one() {
        let (mut s, now) = (State::new(cfg(|c| c.buffer_per_program = 100)), Instant::now());
        let c = caps(1, &[(1, 1_000)]);
        s.register(turn(1, "big", 950), &c, now).unwrap();
        assert!(drain(&mut s).is_empty(), "950 + 100 does not fit in 1000");
        // A small new program would fit, but a paused program is ahead of it.
        s.register(turn(2, "small", 10), &c, now).unwrap();
        assert!(drain(&mut s).is_empty());
        assert_eq!(s.counts(), (2, 2, 2, 2));
        // The caller of the big one leaves: the small one goes at the next pass.
        s.cancel(1, 1001, &c, now);
        assert_eq!(s.counts(), (1, 1, 1, 1));
        s.reconcile(&c, now);
        assert_eq!(drain(&mut s), [(1002, Some(1))]);
    }

    #[test]
    fn a_turn_that_fails_leaves_the_program_as_it_was() {
        let (mut s, now) = (State::new(cfg(|c| c.buffer_per_program = 0)), Instant::now());
        let c = caps(1, &[(1, 1_000), (2, 1_000)]);
        s.register(turn(1, "a", 300), &c, now).unwrap();
        s.sent(1, (1, 0));
        s.finished(1, true, Some(400), &c, now);
        drain(&mut s);
        // Turn 2 grows the program to 900, then fails: the program is back at 400 idle on
        // worker 1, and a new program goes to the emptier worker 2.
        s.register(turn(2, "a", 900), &c, now).unwrap();
        s.sent(2, (1, 0));
        s.finished(2, false, None, &c, now);
        assert_eq!(s.usage.get(&(1, 0)), Some(&400));
        s.register(turn(3, "b", 550), &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1002, Some(1)), (1003, Some(2))]);
        // A first turn that fails leaves no program behind.
        s.register(turn(4, "c", 10), &c, now).unwrap();
        s.finished(4, false, None, &c, now);
        assert!(!s.programs.contains_key("c"));
    }

    #[test]
    fn live_progress_counts_against_the_worker() {
        let (mut s, now) = (State::new(cfg(|c| c.buffer_per_program = 0)), Instant::now());
        let c = caps(1, &[(1, 1_000)]);
        let t = turn(1, "a", 100);
        let progress = t.progress.clone();
        s.register(t, &c, now).unwrap();
        drain(&mut s);
        progress.store(950, Ordering::Relaxed);
        s.register(turn(2, "b", 100), &c, now).unwrap();
        assert!(drain(&mut s).is_empty(), "950 of 1000 used: 100 more does not fit");
    }

    #[test]
    fn over_the_threshold_idle_programs_pause_smallest_first_and_resume_with_room() {
        let (mut s, now) = (
            State::new(cfg(|c| {
                c.buffer_per_program = 0;
                c.pause_threshold = 0.9;
                c.pause_target = 0.5;
                c.resume_hysteresis = 0.1;
            })),
            Instant::now(),
        );
        let c = caps(1, &[(1, 1_000)]);
        for (id, session, tokens) in [(1, "x", 200), (2, "y", 300), (3, "z", 450)] {
            s.register(turn(id, session, tokens), &c, now).unwrap();
            s.sent(id, (1, 0));
            s.finished(id, true, None, &c, now);
        }
        assert_eq!(drain(&mut s).len(), 3);
        assert_eq!(s.usage.get(&(1, 0)), Some(&950));
        // 950 > 900: idle programs pause, smallest first, until at most 500 is used: x (200)
        // and y (300) go; z (450) stays.
        let r = s.reconcile(&c, now);
        assert!(r.changed);
        assert_eq!(
            (s.programs["x"].life, s.programs["y"].life, s.programs["z"].life),
            (Life::Paused, Life::Paused, Life::Active)
        );
        // y's next turn waits while y is paused.
        s.register(turn(4, "y", 320), &c, now).unwrap();
        assert!(drain(&mut s).is_empty());
        // z ends: room under 0.9 − 0.1 = 800 for both; the waiting turn goes with y's resume.
        s.register(turn(5, "z", 450), &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1005, Some(1))]);
        let mut last = turn(6, "z", 450);
        last.last = true;
        s.finished(5, true, None, &c, now);
        s.register(last, &c, now).unwrap();
        s.finished(6, true, None, &c, now);
        drain(&mut s);
        s.reconcile(&c, now);
        assert_eq!(drain(&mut s), [(1004, Some(1))]);
        assert_eq!((s.programs["x"].life, s.programs["y"].life), (Life::Active, Life::Active));
    }

    #[test]
    fn greedy_resume_packs_the_largest_first() {
        // 1.6.1's example: paused programs of 1, 100 and 201 tokens (buffer 100) on two
        // workers of 301: the largest fills worker 1, the others share worker 2.
        let (mut s, now) = (
            State::new(cfg(|c| {
                c.pause_threshold = 1.0;
                c.resume_hysteresis = 0.0;
            })),
            Instant::now(),
        );
        let none = caps(1, &[(1, 50), (2, 50)]);
        for (id, session, tokens) in [(1, "small", 1), (2, "medium", 100), (3, "large", 201)] {
            s.register(turn(id, session, tokens), &none, now).unwrap();
        }
        assert!(drain(&mut s).is_empty());
        let room = caps(2, &[(1, 301), (2, 301)]);
        assert!(s.reconcile(&room, now).changed);
        let mut got = drain(&mut s);
        got.sort();
        assert_eq!(got, [(1001, Some(2)), (1002, Some(2)), (1003, Some(1))]);
    }

    #[test]
    fn a_program_paused_past_the_timeout_is_forced_back() {
        let (mut s, now) = (State::new(cfg(|c| c.resume_timeout_seconds = 10.0)), Instant::now());
        let c = caps(1, &[(1, 500), (2, 400)]);
        s.register(turn(1, "huge", 5_000), &c, now).unwrap();
        assert!(drain(&mut s).is_empty());
        assert_eq!(s.reconcile(&c, now + Duration::from_secs(5)).forced, 0);
        let r = s.reconcile(&c, now + Duration::from_secs(10));
        assert_eq!(r.forced, 1);
        assert_eq!(drain(&mut s), [(1001, Some(1))], "the worker with the most headroom");
    }

    #[test]
    fn idle_programs_are_forgotten_after_the_retention() {
        let (mut s, now) = (State::new(cfg(|c| c.session_retention_seconds = 60.0)), Instant::now());
        let c = caps(1, &[(1, 10_000)]);
        s.register(turn(1, "a", 10), &c, now).unwrap();
        s.finished(1, true, None, &c, now);
        s.reconcile(&c, now + Duration::from_secs(59));
        assert!(s.programs.contains_key("a"));
        s.reconcile(&c, now + Duration::from_secs(60));
        assert!(s.programs.is_empty() && !s.needs_reconcile());
    }

    #[test]
    fn limits_and_duplicates_are_refused_with_1_6_1_messages() {
        let (mut s, now) = (State::new(cfg(|c| c.max_tracked_requests = 2)), Instant::now());
        let c = caps(1, &[(1, 100_000)]);
        s.register(turn(1, "a", 10), &c, now).unwrap();
        let e = s.register(turn(1, "b", 10), &c, now).unwrap_err();
        assert_eq!(
            e.to_string(),
            "request \"00000000-0000-0000-0000-000000000001\" is already active in the ThunderAgent classifier"
        );
        s.register(turn(2, "b", 10), &c, now).unwrap();
        let e = s.register(turn(3, "c", 10), &c, now).unwrap_err();
        assert_eq!(e.to_string(), "ThunderAgent is already tracking its configured limit of 2 requests");
        // Both programs are idle after their turns: a third session evicts the oldest idle one.
        s.finished(1, true, None, &c, now);
        s.finished(2, true, None, &c, now + Duration::from_secs(1));
        s.register(turn(3, "c", 10), &c, now).unwrap();
        assert!(!s.programs.contains_key("a") && s.programs.contains_key("b"));
        // The request limit counts waiting and running turns alike.
        s.register(turn(4, "b", 10), &c, now).unwrap();
        s.finished(3, true, None, &c, now);
        let mut st = State::new(cfg(|c| c.max_tracked_requests = 1));
        st.register(turn(5, "p", 1), &c, now).unwrap();
        st.finished(5, true, None, &c, now);
        st.register(turn(6, "p", 1), &c, now).unwrap();
        let e = st.register(turn(7, "q", 1), &c, now).unwrap_err();
        assert_eq!(e.to_string(), "ThunderAgent is already tracking its configured limit of 1 requests");
    }

    #[test]
    fn a_removed_worker_loses_its_programs() {
        let (mut s, now) = (State::new(cfg(|_| {})), Instant::now());
        s.register(turn(1, "a", 10), &caps(1, &[(1, 10_000), (2, 10_000)]), now).unwrap();
        s.finished(1, true, None, &caps(1, &[(1, 10_000), (2, 10_000)]), now);
        assert_eq!(drain(&mut s), [(1001, Some(1))]);
        // Worker 1 leaves: the next turn of a goes to a worker that is there.
        let c = caps(2, &[(2, 10_000)]);
        s.register(turn(2, "a", 10), &c, now).unwrap();
        assert_eq!(drain(&mut s), [(1002, Some(2))]);
    }
}
