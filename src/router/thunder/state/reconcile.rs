//! ThunderAgent's periodic pass over one model's programs ([`State::reconcile`], every
//! `scheduler_interval_seconds` while programs exist): idle programs past their retention
//! are forgotten, programs on removed workers lose them, paused programs resume (greedily,
//! under `pause_threshold − resume_hysteresis`) or are forced back after
//! `resume_timeout_seconds`, and workers over `pause_threshold` pause idle programs down to
//! `pause_target`. Runs on the classifier thread, as [`super`] does.

use super::*;

/// What a reconcile did.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Reconciled {
    pub changed: bool,
    pub forced: usize,
}

#[derive(Default, Clone, Copy)]
struct Usage {
    used: usize,
    decayed: usize,
}

fn sort_room(room: &mut [(Rank, usize)]) {
    room.sort_unstable_by_key(|(w, left)| (Reverse(*left), *w));
}

fn reserve(room: &mut Vec<(Rank, usize)>, at: usize, required: usize, buffer: usize) {
    let (w, left) = room[at];
    let after = left - required;
    if after <= buffer {
        room.remove(at);
    } else {
        room[at] = (w, after);
        sort_room(room);
    }
}

impl State {
    /// The scheduler's pass (every `scheduler_interval_seconds` while programs exist).
    pub fn reconcile(&mut self, caps: &Capacities, now: Instant) -> Reconciled {
        self.refresh_usage();
        let mut changed = self.expire_retained(now);
        changed |= self.clear_removed(caps);
        changed |= self.admit_fronts(caps, now);
        let mut usage = self.worker_usage(now);
        changed |= self.greedy_resume(caps, &mut usage, now);
        let forced = self.force_timed_out(caps, &mut usage, now);
        changed |= forced > 0;
        changed |= self.pause_until_safe(caps, &mut usage, now);
        self.compact_arrivals();
        Reconciled { changed, forced }
    }

    fn greedy_resume(&mut self, caps: &Capacities, usage: &mut HashMap<Rank, Usage>, now: Instant) -> bool {
        let ceiling = (self.cfg.pause_threshold - self.cfg.resume_hysteresis).max(0.0);
        let buffer = self.cfg.buffer_per_program;
        let mut room: Vec<(Rank, usize)> = caps
            .caps
            .iter()
            .filter(|(w, _)| caps.is_live(*w))
            .filter_map(|(w, capacity)| {
                let left = scale(*capacity, ceiling).saturating_sub(usage.get(w).map_or(0, |u| u.used));
                (left > buffer).then_some((*w, left))
            })
            .collect();
        sort_room(&mut room);
        if room.is_empty() {
            return false;
        }
        let mut paused: Vec<String> = self.paused.iter().filter(|s| self.programs.contains_key(*s)).cloned().collect();
        paused.sort_unstable_by(|a, b| {
            self.resume_group(a)
                .cmp(&self.resume_group(b))
                .then_with(|| self.programs[a].current().cmp(&self.programs[b].current()))
                .then_with(|| a.cmp(b))
        });
        let total = room.iter().map(|(_, n)| *n).fold(0usize, usize::saturating_add);
        let mut cumulative = 0usize;
        let mut chosen: Vec<(String, usize)> = Vec::new();
        for s in paused {
            let required = self.buffered(&s);
            let pin = self.waiting_pin(&s);
            let pin_fits = pin.is_none_or(|p| room.iter().any(|(w, n)| *w == p && required <= *n));
            if pin_fits && cumulative.saturating_add(required) <= total {
                cumulative = cumulative.saturating_add(required);
                chosen.push((s, required));
            }
        }
        chosen.sort_unstable_by(|(a, _), (b, _)| {
            self.programs[b].current().cmp(&self.programs[a].current()).then_with(|| a.cmp(b))
        });
        let mut packed = room;
        let mut placed: HashMap<String, Rank> = HashMap::with_capacity(chosen.len());
        for (s, required) in &chosen {
            let pin = self.waiting_pin(s);
            let Some(at) = packed.iter().position(|(w, n)| *required <= *n && pin.is_none_or(|p| p == *w)) else {
                continue;
            };
            placed.insert(s.clone(), packed[at].0);
            reserve(&mut packed, at, *required, buffer);
        }
        let mut changed = false;
        for (s, required) in chosen {
            let Some(&w) = placed.get(&s) else { continue };
            if self.resume(&s, Some(w)) {
                let Some(p) = self.programs.get(&s) else { continue };
                let decayed = self.tokens_of(p, true, now);
                let u = usage.entry(w).or_default();
                u.used = u.used.saturating_add(required);
                u.decayed = u.decayed.saturating_add(decayed).saturating_add(buffer);
                changed = true;
            }
        }
        changed
    }

    /// Resume order: programs in the middle of a turn, then new ones, then idle ones.
    fn resume_group(&self, session: &str) -> u8 {
        let p = &self.programs[session];
        match (p.steps <= 1, p.status) {
            (true, _) => 1,
            (false, Status::Reasoning) => 0,
            (false, Status::Acting) => 2,
        }
    }

    fn force_timed_out(&mut self, caps: &Capacities, usage: &mut HashMap<Rank, Usage>, now: Instant) -> usize {
        let timeout = Duration::from_secs_f64(self.cfg.resume_timeout_seconds);
        let timed_out: Vec<String> = self
            .paused
            .iter()
            .filter(|s| {
                self.programs
                    .get(*s)
                    .is_some_and(|p| p.deferred_since.is_some_and(|t| now.saturating_duration_since(t) >= timeout))
            })
            .cloned()
            .collect();
        let mut forced = 0;
        for s in timed_out {
            if !caps.has_live_worker() {
                continue;
            }
            let target = self.waiting_pin(&s).or_else(|| {
                caps.caps
                    .iter()
                    .filter(|(w, _)| caps.is_live(*w))
                    .max_by_key(|(w, c)| (*c as i128 - usage.get(w).map_or(0, |u| u.decayed) as i128, Reverse(*w)))
                    .map(|(w, _)| *w)
            });
            if self.resume(&s, target) {
                if let (Some(w), Some(p)) = (target, self.programs.get(&s)) {
                    let (normal, decayed) = (self.tokens_of(p, false, now), self.tokens_of(p, true, now));
                    let buffer = self.cfg.buffer_per_program;
                    let u = usage.entry(w).or_default();
                    u.used = u.used.saturating_add(normal).saturating_add(buffer);
                    u.decayed = u.decayed.saturating_add(decayed).saturating_add(buffer);
                }
                forced += 1;
            }
        }
        forced
    }

    fn resume(&mut self, session: &str, worker: Option<Rank>) -> bool {
        if self.programs.get(session).is_none_or(|p| p.life != Life::Paused) {
            return false;
        }
        self.update(session, |p| {
            p.life = Life::Active;
            p.deferred_since = None;
            p.worker = worker;
        });
        if let Some(id) = self.idle_front(session) {
            self.release(id, worker);
        }
        true
    }

    fn pause_until_safe(&mut self, caps: &Capacities, usage: &mut HashMap<Rank, Usage>, now: Instant) -> bool {
        let over: HashSet<Rank> = caps
            .caps
            .iter()
            .filter(|(w, c)| usage.get(w).map_or(0, |u| u.used) > scale(*c, self.cfg.pause_threshold))
            .map(|(w, _)| *w)
            .collect();
        if over.is_empty() {
            return false;
        }
        let mut acting: HashMap<Rank, Vec<(usize, String)>> = HashMap::new();
        let mut reasoning: HashMap<Rank, Vec<(usize, String)>> = HashMap::new();
        for (s, p) in &self.programs {
            if p.life != Life::Active || p.marked {
                continue;
            }
            let Some(w) = p.worker.filter(|w| over.contains(w)) else { continue };
            let group = match p.status {
                Status::Acting => &mut acting,
                Status::Reasoning => &mut reasoning,
            };
            group.entry(w).or_default().push((p.current(), s.clone()));
        }
        let mut changed = false;
        let buffer = self.cfg.buffer_per_program;
        for (w, capacity) in caps.caps.iter().filter(|(w, _)| over.contains(w)) {
            let target = scale(*capacity, self.cfg.pause_target);
            let mut idle = acting.remove(w).unwrap_or_default();
            let mut busy = reasoning.remove(w).unwrap_or_default();
            idle.sort_by_key(|(n, _)| *n);
            busy.sort_by_key(|(n, _)| *n);
            for (_, s) in idle {
                if usage.get(w).map_or(0, |u| u.used) <= target {
                    break;
                }
                let Some(p) = self.programs.get(&s) else { continue };
                let (normal, decayed) = (self.tokens_of(p, false, now), self.tokens_of(p, true, now));
                if self.pause_acting(&s) {
                    let u = usage.entry(*w).or_default();
                    u.used = u.used.saturating_sub(normal).saturating_sub(buffer);
                    u.decayed = u.decayed.saturating_sub(decayed).saturating_sub(buffer);
                    changed = true;
                }
            }
            if usage.get(w).map_or(0, |u| u.used) > target {
                for (_, s) in busy {
                    if self.programs.get(&s).is_some_and(|p| !p.marked) {
                        self.update(&s, |p| p.marked = true);
                        changed = true;
                    }
                }
            }
        }
        changed
    }

    pub(super) fn pause_acting(&mut self, session: &str) -> bool {
        if self.programs.get(session).is_none_or(|p| p.life != Life::Active || p.status != Status::Acting) {
            return false;
        }
        self.update(session, |p| {
            p.life = Life::Paused;
            p.worker = None;
        });
        true
    }

    pub(super) fn clear_removed(&mut self, caps: &Capacities) -> bool {
        if self.caps_id == Some(caps.id) {
            return false;
        }
        self.caps_id = Some(caps.id);
        if caps.caps.is_empty() && caps.live.is_none() {
            return false;
        }
        let removed: Vec<String> = self
            .programs
            .iter()
            .filter(|(_, p)| p.worker.is_some_and(|w| !caps.is_live(w)))
            .map(|(s, _)| s.clone())
            .collect();
        for s in &removed {
            self.set_worker(s, None);
        }
        !removed.is_empty()
    }

    pub(super) fn expire_retained(&mut self, now: Instant) -> bool {
        if self.next_expiry.is_none_or(|d| now < d) {
            return false;
        }
        let retention = Duration::from_secs_f64(self.cfg.session_retention_seconds);
        let mut expired = Vec::new();
        let mut next: Option<Instant> = None;
        for (s, p) in &self.programs {
            let busy = self.sessions.get(s).is_some_and(|x| x.current.is_some() || !x.waiting.is_empty());
            let Some(since) = (!busy && p.status == Status::Acting).then_some(p.acting_since).flatten() else {
                continue;
            };
            let deadline = since + retention;
            if now >= deadline {
                expired.push(s.clone());
            } else {
                next = Some(next.map_or(deadline, |n| n.min(deadline)));
            }
        }
        self.next_expiry = next;
        for s in &expired {
            self.remove_program(s);
        }
        !expired.is_empty()
    }

    pub(super) fn schedule_expiry(&mut self, session: &str) {
        if self.sessions.contains_key(session) {
            return;
        }
        let Some(since) =
            self.programs.get(session).filter(|p| p.status == Status::Acting).and_then(|p| p.acting_since)
        else {
            return;
        };
        let deadline = since + Duration::from_secs_f64(self.cfg.session_retention_seconds);
        self.next_expiry = Some(self.next_expiry.map_or(deadline, |n| n.min(deadline)));
    }

    fn worker_usage(&self, now: Instant) -> HashMap<Rank, Usage> {
        let mut usage: HashMap<Rank, Usage> =
            self.usage.iter().map(|(w, used)| (*w, Usage { used: *used, decayed: 0 })).collect();
        for p in self.programs.values() {
            if let (Life::Active, Some(w)) = (p.life, p.worker) {
                let d = self.tokens_of(p, true, now).saturating_add(self.cfg.buffer_per_program);
                let u = usage.entry(w).or_default();
                u.decayed = u.decayed.saturating_add(d);
            }
        }
        usage
    }

    /// A program's tokens: an idle one's weighted (or, `decayed`, halved every
    /// `acting_decay_tau_seconds` of idleness).
    fn tokens_of(&self, p: &Program, decayed: bool, now: Instant) -> usize {
        let total = p.current();
        if p.status != Status::Acting {
            return total;
        }
        let weight = if decayed {
            let idle = p.acting_since.map_or(Duration::ZERO, |t| now.saturating_duration_since(t));
            2f64.powf(-idle.as_secs_f64() / self.cfg.acting_decay_tau_seconds)
        } else {
            self.cfg.acting_token_weight
        };
        scale(total, weight)
    }
}
