//! Dynamo 1.6.1's per-request families (`requests_total`, `requests_started_total`,
//! `model_cancellation_total`, `model_rejection_total`, `model_migration_*`, `inflight_requests`, `active_requests`, `queued_requests`, `output_tokens_total` and the
//! latency / length histograms), kept per model in a shard-local table.
//!
//! A request interns its model name once ([`super::ShardMetrics::model_index`]) and records
//! every later event by index: no allocation, no hashing, no atomics on the token path.

use std::collections::BTreeMap;
use std::fmt::Write;

/// `time_to_first_token_seconds` buckets, as Dynamo.
pub const TTFT_BUCKETS: &[f64] =
    &[0.0, 0.0022, 0.0047, 0.01, 0.022, 0.047, 0.1, 0.22, 0.47, 1.0, 2.2, 4.7, 10.0, 22.0, 48.0, 100.0, 220.0, 480.0];
/// `inter_token_latency_seconds` buckets, as Dynamo.
pub const ITL_BUCKETS: &[f64] = &[
    0.0, 0.0018, 0.0033, 0.0059, 0.011, 0.02, 0.035, 0.064, 0.12, 0.21, 0.38, 0.69, 1.2, 2.3, 4.1, 7.4, 13.0, 24.0,
    44.0, 80.0,
];
/// `request_duration_seconds` buckets, as Dynamo.
pub const DURATION_BUCKETS: &[f64] = &[0.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 130.0, 260.0, 510.0];
/// `input_sequence_tokens` and `cached_tokens` buckets, as Dynamo.
pub const ISL_BUCKETS: &[f64] =
    &[0.0, 100.0, 210.0, 430.0, 870.0, 1800.0, 3600.0, 7400.0, 15000.0, 31000.0, 63000.0, 130000.0];
/// `model_migration_duration_seconds` buckets, as 1.6.1 shows them.
pub const MIGRATION_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 20.0, 40.0, 60.0];
/// `output_sequence_tokens` buckets, as Dynamo.
pub const OSL_BUCKETS: &[f64] = &[0.0, 100.0, 210.0, 430.0, 880.0, 1800.0, 3700.0, 7600.0, 16000.0, 32000.0];

/// `migration_type` labels: a request not yet answering (retried elsewhere), an answer under
/// way (migrated).
pub const MIGRATION_TYPES: [&str; 2] = ["new_request", "ongoing_request"];

/// The API a request came in on (`endpoint` label).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    ChatCompletions = 0,
    Completions = 1,
    /// KServe inference on a tensor model.
    Tensor = 2,
    /// Anthropic Messages (`/v1/messages`).
    AnthropicMessages = 3,
    /// OpenAI Responses (`/v1/responses`).
    Responses = 4,
    /// The routes forwarded to workers of other model types.
    Embeddings = 5,
    Classify = 6,
    Rerank = 7,
    Pooling = 8,
    Images = 9,
    Videos = 10,
    Audios = 11,
}

impl Endpoint {
    /// Its `endpoint` label (also the route's name in log lines, as 1.6.1's).
    pub fn label(self) -> &'static str {
        ENDPOINTS[self as usize]
    }
}

const N_ENDPOINTS: usize = 12;
const ENDPOINTS: [&str; N_ENDPOINTS] = [
    "chat_completions",
    "completions",
    "tensor",
    "anthropic_messages",
    "responses",
    "embeddings",
    "classify",
    "rerank",
    "pooling",
    "images",
    "videos",
    "audios",
];
const REQUEST_TYPES: [&str; 2] = ["unary", "stream"];

/// How a request ended (`status` and `error_type` labels).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    Success = 0,
    Validation = 1,
    NotFound = 2,
    Overload = 3,
    Cancelled = 4,
    Internal = 5,
}

const OUTCOMES: usize = 6;
const ERROR_TYPES: [&str; OUTCOMES] = ["", "validation", "not_found", "overload", "cancelled", "internal"];

/// A histogram with fixed upper bounds; counts are per bucket (made cumulative at render).
#[derive(Clone, Debug, PartialEq)]
pub struct Histogram {
    bounds: &'static [f64],
    /// `bounds.len() + 1` counts, the last one for `+Inf`.
    counts: Vec<u64>,
    sum: f64,
    count: u64,
}

impl Histogram {
    pub fn new(bounds: &'static [f64]) -> Histogram {
        Histogram { bounds, counts: vec![0; bounds.len() + 1], sum: 0.0, count: 0 }
    }

    pub fn observe(&mut self, v: f64) {
        self.observe_n(v, 1);
    }

    /// `n` observations of the same value.
    pub fn observe_n(&mut self, v: f64, n: u64) {
        let i = self.bounds.iter().position(|b| v <= *b).unwrap_or(self.bounds.len());
        self.counts[i] += n;
        self.sum += v * n as f64;
        self.count += n;
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub(super) fn merge(&mut self, other: &Histogram) {
        for (a, b) in self.counts.iter_mut().zip(&other.counts) {
            *a += b;
        }
        self.sum += other.sum;
        self.count += other.count;
    }
}

/// Every per-request value of one model.
#[derive(Clone, Debug, PartialEq)]
pub struct ModelStats {
    /// `[endpoint][request_type]`.
    pub started: [[u64; 2]; N_ENDPOINTS],
    /// `[endpoint][request_type][outcome]`.
    pub finished: [[[u64; OUTCOMES]; 2]; N_ENDPOINTS],
    pub inflight: i64,
    /// Requests between the handler's entry and the end of their response.
    pub active: i64,
    pub output_tokens: u64,
    /// Migratable worker failures (`migration_total`), by `migration_type`: a request not
    /// yet answering (retried elsewhere) and an answer under way.
    pub migrations: [u64; 2],
    /// Disaggregated serving's legs, `[prefill, decode, decode without a prefill leg][ok,
    /// failed, failed after the hand-off]` (the last only for prefill legs handed off through a
    /// rendezvous; the third kind: `--router-conditional-disagg` skipped the prefill).
    pub disaggregated: [[u64; 3]; 3],
    /// `--use-remote-indexer`: queries to a served indexer, `[answered, failed]`.
    pub remote_index: [u64; 2],
    /// Requests that stopped migrating for `--migration-max-seq-len`.
    pub migration_max_seq_len_exceeded: u64,
    /// How long each migration took to continue on another worker (or to fail to):
    /// `[migration_type][outcome]`, outcome 0 success, 1 failure.
    pub migration_seconds: [[Histogram; 2]; 2],
    pub ttft: Histogram,
    pub itl: Histogram,
    pub duration: Histogram,
    pub isl: Histogram,
    pub osl: Histogram,
    pub cached: Histogram,
}

impl Default for ModelStats {
    fn default() -> ModelStats {
        ModelStats {
            started: [[0; 2]; N_ENDPOINTS],
            finished: [[[0; OUTCOMES]; 2]; N_ENDPOINTS],
            inflight: 0,
            active: 0,
            output_tokens: 0,
            migrations: [0; 2],
            disaggregated: [[0; 3]; 3],
            remote_index: [0; 2],
            migration_max_seq_len_exceeded: 0,
            migration_seconds: std::array::from_fn(|_| std::array::from_fn(|_| Histogram::new(MIGRATION_BUCKETS))),
            ttft: Histogram::new(TTFT_BUCKETS),
            itl: Histogram::new(ITL_BUCKETS),
            duration: Histogram::new(DURATION_BUCKETS),
            isl: Histogram::new(ISL_BUCKETS),
            osl: Histogram::new(OSL_BUCKETS),
            cached: Histogram::new(ISL_BUCKETS),
        }
    }
}

impl ModelStats {
    pub fn merge(&mut self, o: &ModelStats) {
        for e in 0..N_ENDPOINTS {
            for t in 0..2 {
                self.started[e][t] += o.started[e][t];
                for k in 0..OUTCOMES {
                    self.finished[e][t][k] += o.finished[e][t][k];
                }
            }
        }
        self.inflight += o.inflight;
        self.active += o.active;
        self.output_tokens += o.output_tokens;
        self.migrations[0] += o.migrations[0];
        self.migrations[1] += o.migrations[1];
        for (mine, theirs) in self.disaggregated.iter_mut().flatten().zip(o.disaggregated.iter().flatten()) {
            *mine += theirs;
        }
        self.remote_index[0] += o.remote_index[0];
        self.remote_index[1] += o.remote_index[1];
        self.migration_max_seq_len_exceeded += o.migration_max_seq_len_exceeded;
        for (mine, theirs) in self.migration_seconds.iter_mut().flatten().zip(o.migration_seconds.iter().flatten()) {
            mine.merge(theirs);
        }
        self.ttft.merge(&o.ttft);
        self.itl.merge(&o.itl);
        self.duration.merge(&o.duration);
        self.isl.merge(&o.isl);
        self.osl.merge(&o.osl);
        self.cached.merge(&o.cached);
    }

    pub fn start(&mut self, ep: Endpoint, stream: bool) {
        self.started[ep as usize][stream as usize] += 1;
        self.inflight += 1;
        self.active += 1;
    }

    /// The response of a request counted by [`ModelStats::start`] is complete (or abandoned).
    pub fn end(&mut self) {
        self.active -= 1;
    }

    pub fn finish(&mut self, ep: Endpoint, stream: bool, outcome: Outcome, duration_secs: f64) {
        self.finished[ep as usize][stream as usize][outcome as usize] += 1;
        self.inflight -= 1;
        self.duration.observe(duration_secs);
    }
}

/// A label value with `\`, `"` and newlines escaped.
pub(super) fn escape(v: &str) -> std::borrow::Cow<'_, str> {
    if !v.contains(['\\', '"', '\n']) {
        return v.into();
    }
    v.replace('\\', "\\\\").replace('"', "\\\"").replace('\n', "\\n").into()
}

/// Rendered families by name: the exposition lists them sorted, as Dynamo does.
pub type Blocks = BTreeMap<String, String>;

/// Start family `name` (its `HELP` and `TYPE` lines) and return the text to add samples to.
pub(super) fn block<'a>(blocks: &'a mut Blocks, name: &str, kind: &str, help: &str) -> &'a mut String {
    let out = blocks.entry(name.to_string()).or_default();
    header(out, name, kind, help);
    out
}

/// The `HELP` and `TYPE` lines of family `name`.
pub(super) fn header(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// The samples of one histogram series; `labels` is its label pairs before `le`.
pub(super) fn histogram_series(out: &mut String, name: &str, labels: &str, h: &Histogram) {
    let mut acc = 0;
    for (i, n) in h.counts.iter().enumerate() {
        acc += n;
        match h.bounds.get(i) {
            Some(b) => _ = writeln!(out, "{name}_bucket{{{labels},le=\"{b}\"}} {acc}"),
            None => _ = writeln!(out, "{name}_bucket{{{labels},le=\"+Inf\"}} {acc}"),
        }
    }
    let _ = writeln!(out, "{name}_sum{{{labels}}} {}", h.sum);
    let _ = writeln!(out, "{name}_count{{{labels}}} {}", h.count);
}

fn histogram(
    blocks: &mut Blocks,
    name: &str,
    help: &str,
    models: &BTreeMap<String, ModelStats>,
    get: fn(&ModelStats) -> &Histogram,
) {
    if !models.values().any(|m| get(m).count > 0) {
        return;
    }
    let out = block(blocks, name, "histogram", help);
    for (model, m) in models.iter().filter(|(_, m)| get(m).count > 0) {
        histogram_series(out, name, &format!("model=\"{}\"", escape(model)), get(m));
    }
}

/// A gauge with one sample per model.
fn per_model_gauge(
    blocks: &mut Blocks,
    name: &str,
    help: &str,
    models: &BTreeMap<String, ModelStats>,
    get: fn(&ModelStats) -> i64,
) {
    let out = block(blocks, name, "gauge", help);
    for (model, m) in models {
        let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), get(m));
    }
}

/// The per-model histograms: name after the prefix, HELP, and the series of a model.
type ModelHistogram = (&'static str, &'static str, fn(&ModelStats) -> &Histogram);

const HISTOGRAMS: [ModelHistogram; 6] = [
    ("cached_tokens", "Number of cached tokens (prefix cache hits) per request", |m| &m.cached),
    ("input_sequence_tokens", "Input sequence length in tokens", |m| &m.isl),
    ("inter_token_latency_seconds", "Inter-token latency in seconds", |m| &m.itl),
    ("output_sequence_tokens", "Output sequence length in tokens", |m| &m.osl),
    ("request_duration_seconds", "Duration of LLM requests", |m| &m.duration),
    ("time_to_first_token_seconds", "Time to first token in seconds", |m| &m.ttft),
];

/// The per-model gauges: name after the prefix, HELP, and the value of a model.
type ModelGauge = (&'static str, &'static str, fn(&ModelStats) -> i64);

const GAUGES: [ModelGauge; 3] = [
    (
        "active_requests",
        "Number of requests currently being handled by the frontend, from HTTP handler entry to response completion",
        |m| m.active,
    ),
    ("inflight_requests", "Number of inflight requests", |m| m.inflight),
    // No HTTP queue here: a request is handled as soon as it is read.
    ("queued_requests", "Number of requests in HTTP processing queue", |_| 0),
];

/// Render the per-model families (nothing until a request was seen, as Dynamo).
pub fn render(blocks: &mut Blocks, prefix: &str, models: &BTreeMap<String, ModelStats>) {
    if models.is_empty() {
        return;
    }
    for (family, help, get) in GAUGES {
        per_model_gauge(blocks, &format!("{prefix}_{family}"), help, models, get);
    }
    for (family, help, get) in HISTOGRAMS {
        histogram(blocks, &format!("{prefix}_{family}"), help, models, get);
    }

    let name = format!("{prefix}_output_tokens_total");
    if models.values().any(|m| m.output_tokens > 0) {
        let out = block(blocks, &name, "counter", "Total number of output tokens generated (updates in real-time)");
        for (model, m) in models.iter().filter(|(_, m)| m.output_tokens > 0) {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), m.output_tokens);
        }
    }

    let name = format!("{prefix}_model_migration_total");
    if models.values().any(|m| m.migrations.iter().any(|n| *n > 0)) {
        let out = block(blocks, &name, "counter", "Total number of request migrations due to worker unavailability");
        for (t, kind) in MIGRATION_TYPES.iter().enumerate() {
            for (model, m) in models.iter().filter(|(_, m)| m.migrations[t] > 0) {
                let _ = writeln!(
                    out,
                    "{name}{{migration_type=\"{kind}\",model=\"{}\"}} {}",
                    escape(model),
                    m.migrations[t]
                );
            }
        }
    }
    // switchyard's own family (1.6.1 has no count of disaggregated legs).
    let name = "switchyard_disaggregated_legs_total";
    if models.values().any(|m| m.disaggregated.iter().flatten().any(|n| *n > 0)) {
        let help = "Legs of disaggregated requests sent, by worker type and outcome";
        let out = block(blocks, name, "counter", help);
        for (leg, kind) in ["prefill", "decode", "decode_prefill_skipped"].iter().enumerate() {
            for (k, outcome) in ["ok", "failed", "failed_after_handoff"].iter().enumerate() {
                for (model, m) in models.iter().filter(|(_, m)| m.disaggregated[leg][k] > 0) {
                    let n = m.disaggregated[leg][k];
                    let model = escape(model);
                    let _ =
                        writeln!(out, "{name}{{model=\"{model}\",worker_type=\"{kind}\",outcome=\"{outcome}\"}} {n}");
                }
            }
        }
    }
    // switchyard's own family (1.6.1 counts failures per router and worker component).
    let name = "switchyard_remote_indexer_queries_total";
    if models.values().any(|m| m.remote_index.iter().any(|n| *n > 0)) {
        let help = "Queries to a served KV indexer (--use-remote-indexer), by outcome";
        let out = block(blocks, name, "counter", help);
        for (k, outcome) in ["ok", "failed"].iter().enumerate() {
            for (model, m) in models.iter().filter(|(_, m)| m.remote_index[k] > 0) {
                let _ =
                    writeln!(out, "{name}{{model=\"{}\",outcome=\"{outcome}\"}} {}", escape(model), m.remote_index[k]);
            }
        }
    }
    let name = format!("{prefix}_model_migration_duration_seconds");
    if models.values().any(|m| m.migration_seconds.iter().flatten().any(|h| h.count > 0)) {
        let help = "Time from a worker's failure until the request continued on another worker, or could not";
        let out = block(blocks, &name, "histogram", help);
        for (t, kind) in MIGRATION_TYPES.iter().enumerate() {
            for (model, m) in models {
                for (o, outcome) in ["success", "failure"].iter().enumerate() {
                    let h = &m.migration_seconds[t][o];
                    if h.count > 0 {
                        let labels =
                            format!("migration_type=\"{kind}\",model=\"{}\",outcome=\"{outcome}\"", escape(model));
                        histogram_series(out, &name, &labels, h);
                    }
                }
            }
        }
    }
    let name = format!("{prefix}_model_migration_max_seq_len_exceeded_total");
    if models.values().any(|m| m.migration_max_seq_len_exceeded > 0) {
        let help = "Total number of times migration was disabled by max_seq_len limit";
        let out = block(blocks, &name, "counter", help);
        for (model, m) in models.iter().filter(|(_, m)| m.migration_max_seq_len_exceeded > 0) {
            let _ = writeln!(out, "{name}{{model=\"{}\"}} {}", escape(model), m.migration_max_seq_len_exceeded);
        }
    }

    // Requests refused because every worker was busy (`requests_total{error_type="overload"}`
    // again, by endpoint, under the family 1.6.1 counts them in).
    let overload = Outcome::Overload as usize;
    if models.values().any(|m| m.finished.iter().flatten().any(|t| t[overload] > 0)) {
        let name = format!("{prefix}_model_rejection_total");
        let out = block(blocks, &name, "counter", "Total number of requests rejected due to resource exhaustion");
        for (e, ep) in ENDPOINTS.iter().enumerate() {
            for (model, m) in models {
                let n: u64 = m.finished[e].iter().map(|t| t[overload]).sum();
                if n > 0 {
                    let _ = writeln!(out, "{name}{{endpoint=\"{ep}\",model=\"{}\"}} {n}", escape(model));
                }
            }
        }
    }

    // Requests whose client went away (`requests_total{error_type="cancelled"}` again, under
    // the family 1.6.1 counts them in).
    let cancelled = Outcome::Cancelled as usize;
    if models.values().any(|m| m.finished.iter().flatten().any(|t| t[cancelled] > 0)) {
        let name = format!("{prefix}_model_cancellation_total");
        let out = block(blocks, &name, "counter", "Total number of request cancellations");
        for (e, ep) in ENDPOINTS.iter().enumerate() {
            for (model, m) in models {
                for (t, rt) in REQUEST_TYPES.iter().enumerate() {
                    let n = m.finished[e][t][cancelled];
                    if n > 0 {
                        let _ = writeln!(
                            out,
                            "{name}{{endpoint=\"{ep}\",model=\"{}\",request_type=\"{rt}\"}} {n}",
                            escape(model)
                        );
                    }
                }
            }
        }
    }

    let name = format!("{prefix}_requests_started_total");
    let out = block(blocks, &name, "counter", "Total number of LLM requests accepted by the frontend handler");
    for (e, ep) in ENDPOINTS.iter().enumerate() {
        for (model, m) in models {
            for (t, rt) in REQUEST_TYPES.iter().enumerate() {
                let n = m.started[e][t];
                if n > 0 {
                    let _ = writeln!(
                        out,
                        "{name}{{endpoint=\"{ep}\",model=\"{}\",request_type=\"{rt}\"}} {n}",
                        escape(model)
                    );
                }
            }
        }
    }

    let name = format!("{prefix}_requests_total");
    let out = block(blocks, &name, "counter", "Total number of LLM requests processed");
    for (e, ep) in ENDPOINTS.iter().enumerate() {
        for (k, et) in ERROR_TYPES.iter().enumerate() {
            let status = if k == Outcome::Success as usize { "success" } else { "error" };
            for (model, m) in models {
                for (t, rt) in REQUEST_TYPES.iter().enumerate() {
                    let n = m.finished[e][t][k];
                    if n > 0 {
                        let _ = writeln!(
                            out,
                            "{name}{{endpoint=\"{ep}\",error_type=\"{et}\",model=\"{}\",request_type=\"{rt}\",status=\"{status}\"}} {n}",
                            escape(model)
                        );
                    }
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_is_cumulative_with_inf() {
        let mut models = BTreeMap::new();
        let mut m = ModelStats::default();
        m.start(Endpoint::ChatCompletions, false);
        m.ttft.observe(0.003);
        m.ttft.observe(1000.0);
        m.finish(Endpoint::ChatCompletions, false, Outcome::Success, 0.5);
        models.insert("m\"x".to_string(), m);
        let mut blocks = Blocks::new();
        render(&mut blocks, "p", &models);
        let out: String = blocks.into_values().collect();
        assert!(out.contains("p_time_to_first_token_seconds_bucket{model=\"m\\\"x\",le=\"0.0022\"} 0\n"), "{out}");
        assert!(out.contains("p_time_to_first_token_seconds_bucket{model=\"m\\\"x\",le=\"0.0047\"} 1\n"));
        assert!(out.contains("p_time_to_first_token_seconds_bucket{model=\"m\\\"x\",le=\"480\"} 1\n"));
        assert!(out.contains("p_time_to_first_token_seconds_bucket{model=\"m\\\"x\",le=\"+Inf\"} 2\n"));
        assert!(out.contains("p_time_to_first_token_seconds_count{model=\"m\\\"x\"} 2\n"));
        assert!(out.contains("p_request_duration_seconds_bucket{model=\"m\\\"x\",le=\"2\"} 1\n"));
        assert!(out.contains(
            "p_requests_total{endpoint=\"chat_completions\",error_type=\"\",model=\"m\\\"x\",request_type=\"unary\",status=\"success\"} 1\n"
        ));
        assert!(out.contains("p_inflight_requests{model=\"m\\\"x\"} 0\n"));
    }
}
