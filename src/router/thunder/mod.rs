//! `request_classifier: {type: thunderagent}` (`--router-policy-config`, kv mode):
//! session-aware admission for agent workloads, as 1.6.1 runs it before the kv router's
//! queue. The rules are in [`state`]; this module runs them.
//!
//! Threads: one `thunderagent` thread owns every model's [`state::State`] (1.6.1 keeps one
//! per routed model behind a lock; here no shard touches it). Each shard sends on a lane
//! of its own (a channel only that shard and the thread use, so shards share no lock);
//! the control thread sends each new registry on one more lane (the workers' capacities:
//! `total_kv_blocks × kv_cache_block_size` of the model's card, for every rank of its
//! workers). A turn that waits holds a one-shot reply channel; a shard's running turn
//! writes its live context into an atomic the thread reads ([`state::Progress`]).
//!
//! Only requests naming a session (`x-dynamo-session-id`, `x-claude-code-session-id`
//! [+ `x-claude-code-agent-id`], `thread-id`, `x-session-id`; `x-dynamo-session-final`
//! marks the last turn) meet the classifier; others go straight on, as in 1.6.1.

pub mod state;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::classifier::ThunderConfig;
use crate::registry::Registry;
use state::{Capacities, Progress, Rank, State, Turn};

enum Msg {
    Ask { model: String, turn: Turn, reply: flume::Sender<Result<Option<Rank>, String>> },
    Cancel { model: String, id: u128, reg: u64 },
    Sent { model: String, id: u128, worker: Rank },
    Finished { model: String, id: u128, completed: bool, context: Option<usize> },
    Registry(Arc<Registry>),
}

/// The classifier: the shards' lanes to its thread.
pub struct Classifier {
    lanes: Vec<flume::Sender<Msg>>,
}

/// What a request asks of the classifier.
pub struct Ask<'a> {
    pub id: u128,
    /// Tells this registration from another one of the same id (any value unlikely to repeat).
    pub reg: u64,
    pub session: &'a str,
    pub last: bool,
    pub input_tokens: usize,
    pub pinned: Option<Rank>,
}

impl Classifier {
    /// Start the thread, with a lane for each of `shards` shards and one for registries.
    pub fn start(cfg: ThunderConfig, shards: usize) -> std::io::Result<Classifier> {
        let (lanes, inboxes): (Vec<_>, Vec<_>) = (0..=shards).map(|_| flume::unbounded::<Msg>()).unzip();
        crate::log::info(&format!(
            "ThunderAgent admission enabled (scheduler_interval_seconds={}, resume_timeout_seconds={}, \
             max_tracked_requests={})",
            cfg.scheduler_interval_seconds, cfg.resume_timeout_seconds, cfg.max_tracked_requests
        ));
        std::thread::Builder::new().name("thunderagent".into()).spawn(move || run(cfg, inboxes))?;
        Ok(Classifier { lanes })
    }

    /// The control thread's new registry (the workers and their capacities).
    pub fn registry(&self, registry: Arc<Registry>) {
        if let Some(lane) = self.lanes.last() {
            let _ = lane.send(Msg::Registry(registry));
        }
    }

    /// Ask for a turn of `model` to go, from shard `shard`; resolves when the classifier
    /// lets it go (with the worker it prefers), or refuses it. Dropping the future before
    /// then takes the turn back.
    pub async fn ask(&self, shard: usize, model: &str, ask: Ask<'_>) -> Result<Grant, String> {
        let lane = self.lanes[shard % (self.lanes.len() - 1)].clone();
        let progress: Progress = Arc::new(AtomicUsize::new(ask.input_tokens));
        let (reply, answer) = flume::bounded(1);
        let turn = Turn {
            id: ask.id,
            reg: ask.reg,
            session: ask.session.to_string(),
            input_tokens: ask.input_tokens,
            progress: progress.clone(),
            last: ask.last,
            pinned: ask.pinned,
        };
        let model = model.to_string();
        lane.send(Msg::Ask { model: model.clone(), turn, reply })
            .map_err(|_| "the ThunderAgent classifier has stopped".to_string())?;
        let answer = {
            let mut waiting = Waiting { lane: &lane, model: &model, id: ask.id, reg: ask.reg, armed: true };
            let answer = answer.recv_async().await;
            waiting.armed = false;
            answer
        };
        match answer {
            Ok(Ok(target)) => {
                Ok(Grant { lane, model, id: ask.id, progress, target, prompt: ask.input_tokens, done: false })
            }
            Ok(Err(refused)) => Err(refused),
            Err(_) => {
                Err(format!("request {:?} ended while classification was pending", crate::util::format_uuid(ask.id)))
            }
        }
    }
}

/// A waiting turn; dropped while armed (its caller left), it is taken back.
struct Waiting<'a> {
    lane: &'a flume::Sender<Msg>,
    model: &'a str,
    id: u128,
    reg: u64,
    armed: bool,
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        if self.armed {
            let _ = self.lane.send(Msg::Cancel { model: self.model.to_string(), id: self.id, reg: self.reg });
        }
    }
}

/// A turn the classifier let go. Its end is told with [`Grant::end`]; dropped before, the
/// turn counts as aborted (the program goes back to where it was).
pub struct Grant {
    lane: flume::Sender<Msg>,
    model: String,
    id: u128,
    progress: Progress,
    target: Option<Rank>,
    prompt: usize,
    done: bool,
}

impl Grant {
    /// The worker rank the classifier prefers (the router takes it when it is eligible).
    pub fn target(&self) -> Option<Rank> {
        self.target
    }

    /// The turn was sent to `worker`.
    pub fn sent(&self, worker: Rank) {
        let _ = self.lane.send(Msg::Sent { model: self.model.clone(), id: self.id, worker });
    }

    /// The worker sent `n` more tokens: the turn's live context grows.
    pub fn generated(&self, n: usize) {
        self.progress.fetch_add(n, Ordering::Relaxed);
    }

    /// The answer ended: `ok` when it completed (the program then waits for its next turn
    /// with the whole context charged), else as aborted.
    pub fn end(&mut self, ok: bool) {
        if std::mem::replace(&mut self.done, true) {
            return;
        }
        let context = ok.then(|| self.progress.load(Ordering::Relaxed).max(self.prompt));
        let _ = self.lane.send(Msg::Finished { model: self.model.clone(), id: self.id, completed: ok, context });
    }
}

impl Drop for Grant {
    fn drop(&mut self) {
        self.end(false);
    }
}

/// The thread: messages from the lanes, and every scheduler interval a reconcile of each
/// model with programs. Ends when every lane is closed.
fn run(cfg: ThunderConfig, inboxes: Vec<flume::Receiver<Msg>>) {
    let interval = Duration::from_secs_f64(cfg.scheduler_interval_seconds);
    let mut models: HashMap<String, State> = HashMap::new();
    let mut waiting: HashMap<u64, flume::Sender<Result<Option<Rank>, String>>> = HashMap::new();
    let mut registry: Option<Arc<Registry>> = None;
    let mut caps: HashMap<String, Capacities> = HashMap::new();
    let mut version = 0u64;
    let mut next_tick: Option<Instant> = None;
    loop {
        let busy = models.values().any(State::needs_reconcile);
        let msg = {
            let mut sel = flume::Selector::new();
            for rx in &inboxes {
                sel = sel.recv(rx, |m| m);
            }
            match (busy, next_tick) {
                // Timed out: the scheduler's turn.
                (true, Some(t)) => sel.wait_deadline(t).ok(),
                _ => Some(sel.wait()),
            }
        };
        let now = Instant::now();
        match msg {
            Some(Err(_)) => return,
            Some(Ok(Msg::Registry(r))) => {
                registry = Some(r);
                caps.clear();
                version += 1;
            }
            Some(Ok(m)) => {
                let model = match &m {
                    Msg::Ask { model, .. }
                    | Msg::Cancel { model, .. }
                    | Msg::Sent { model, .. }
                    | Msg::Finished { model, .. } => model.clone(),
                    Msg::Registry(_) => String::new(),
                };
                let c = caps.entry(model.clone()).or_insert_with(|| capacities(registry.as_deref(), &model, version));
                let st = models.entry(model).or_insert_with(|| State::new(cfg.clone()));
                match m {
                    Msg::Ask { turn, reply, .. } => {
                        let reg = turn.reg;
                        match st.register(turn, c, now) {
                            Ok(()) => {
                                waiting.insert(reg, reply);
                            }
                            Err(e) => {
                                let _ = reply.send(Err(e.to_string()));
                            }
                        }
                    }
                    Msg::Cancel { id, reg, .. } => {
                        waiting.remove(&reg);
                        st.cancel(id, reg, c, now);
                    }
                    Msg::Sent { id, worker, .. } => st.sent(id, worker),
                    Msg::Finished { id, completed, context, .. } => st.finished(id, completed, context, c, now),
                    Msg::Registry(_) => {}
                }
                next_tick.get_or_insert(now + interval);
            }
            None => {}
        }
        if next_tick.is_some_and(|t| now >= t) {
            for (model, st) in models.iter_mut().filter(|(_, s)| s.needs_reconcile()) {
                let c = caps.entry(model.clone()).or_insert_with(|| capacities(registry.as_deref(), model, version));
                let done = st.reconcile(c, now);
                if done.forced > 0 {
                    let (_, _, waiting, _) = st.counts();
                    crate::log::warn(&format!(
                        "ThunderAgent deferral timeout forced program resumes (model {model}: forced_resumes={}, \
                         waiting_requests={waiting})",
                        done.forced
                    ));
                }
            }
            next_tick = Some(now + interval);
        }
        for st in models.values_mut() {
            for (reg, target) in st.released.drain(..) {
                if let Some(reply) = waiting.remove(&reg) {
                    let _ = reply.send(Ok(target));
                }
            }
        }
    }
}

/// The capacities of `model`'s workers in `registry` (none known before the first registry:
/// the classifier then lets turns go as they come, as 1.6.1 does before the cards arrive).
fn capacities(registry: Option<&Registry>, model: &str, version: u64) -> Capacities {
    let Some(serving) = registry.and_then(|r| r.serving.get(model)) else {
        return Capacities { id: version, ..Default::default() };
    };
    let per_rank = serving.limits.total_kv_blocks.saturating_mul(u64::from(serving.limits.block_size()));
    let ranks: Vec<Rank> = serving.workers.iter().flat_map(|w| w.dp_ranks().map(move |r| (w.instance_id, r))).collect();
    let caps = match serving.limits.total_kv_blocks {
        0 => Vec::new(),
        _ => ranks.iter().map(|r| (*r, usize::try_from(per_rank).unwrap_or(usize::MAX))).collect(),
    };
    Capacities { id: version, caps, live: Some(ranks.into_iter().collect()) }
}
