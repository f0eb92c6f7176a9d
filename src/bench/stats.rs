//! What a run measured: the outcome classes of a request, the recorder that puts successes
//! into HDR histograms and failures into per-class counts, the [`Report`] written by
//! `--json` (raw histograms included) and read back by `--compare`, and the final table.
//!
//! Metrics, per successful request (failures are counted, never recorded here):
//! * `ttft` — request start to the first SSE event carrying generated text (streaming only);
//! * `itl` — inter-token latency, `(e2e - ttft) / (output_tokens - 1)` (streaming, ≥ 2
//!   tokens; the definition aiperf and genai-perf use);
//! * `e2e` — request start to the end of the answer;
//! * `tps` — the request's output tokens per second, `output_tokens / e2e`;
//! * `output_tokens`, `prompt_tokens` — as the answer's `usage` reports them.
//!
//! "Request start" is the moment the request was written (closed loop) or was due (open
//! loop: a request that waits for a free connection is charged the wait, so an overloaded
//! server cannot hide behind the client's back-pressure).
//!
//! Latencies are recorded in microseconds (3 significant digits) and shown in ms. A raw
//! histogram is exported as its recorded buckets, `[[value, count], …]` in recorded units,
//! which rebuilds the same histogram exactly.

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::time::Duration;

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Why a request failed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FailKind {
    /// The connection could not be opened.
    Connect,
    /// The answer's status was not 200.
    Status(u16),
    /// The stream reported an error (`data: {"error":…}` or `event: error`), or a 200 JSON
    /// body was an error object.
    Stream,
    /// No complete answer within `--timeout`.
    Timeout,
    /// Not valid HTTP, SSE or JSON of the expected shape.
    Malformed,
    /// The server closed or reset the connection before the answer was complete.
    Closed,
}

impl FailKind {
    /// The class name in the summary and the JSON export.
    pub fn class(self) -> String {
        match self {
            FailKind::Connect => "connect".into(),
            FailKind::Status(s) => format!("http_{s}"),
            FailKind::Stream => "stream_error".into(),
            FailKind::Timeout => "timeout".into(),
            FailKind::Malformed => "malformed".into(),
            FailKind::Closed => "closed".into(),
        }
    }
}

/// A failed request: its class and a short description.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Failure {
    pub kind: FailKind,
    pub detail: String,
}

impl Failure {
    pub fn new(kind: FailKind, detail: impl Into<String>) -> Failure {
        Failure { kind, detail: detail.into() }
    }
    pub fn malformed(detail: impl Into<String>) -> Failure {
        Failure::new(FailKind::Malformed, detail)
    }
    pub fn stream(detail: impl Into<String>) -> Failure {
        Failure::new(FailKind::Stream, detail)
    }
}

/// A successful request.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Sample {
    pub e2e: Duration,
    /// Streaming only.
    pub ttft: Option<Duration>,
    pub output_tokens: u32,
    pub prompt_tokens: Option<u32>,
}

/// The metrics, in table order: key, label, unit, scale (recorded units per shown unit).
pub const METRICS: &[(&str, &str, &str, f64)] = &[
    ("ttft", "TTFT", "ms", 1000.0),
    ("itl", "ITL", "ms", 1000.0),
    ("e2e", "E2E latency", "ms", 1000.0),
    ("tps", "output tok/s per request", "tok/s", 1.0),
    ("output_tokens", "output tokens", "tokens", 1.0),
    ("prompt_tokens", "prompt tokens (server)", "tokens", 1.0),
];

/// Keep at most this many failure descriptions.
const MAX_SAMPLES: usize = 8;

fn histogram() -> Histogram<u64> {
    Histogram::new(3).expect("3 significant digits is a valid precision")
}

/// Collects outcomes of one phase.
pub struct Recorder {
    /// One histogram per entry of [`METRICS`], same order.
    hists: Vec<Histogram<u64>>,
    pub ok: u64,
    pub errors: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    pub output_tokens_total: u64,
}

impl Default for Recorder {
    fn default() -> Self {
        Recorder {
            hists: METRICS.iter().map(|_| histogram()).collect(),
            ok: 0,
            errors: BTreeMap::new(),
            error_samples: Vec::new(),
            output_tokens_total: 0,
        }
    }
}

fn micros(d: Duration) -> u64 {
    u64::try_from(d.as_micros()).unwrap_or(u64::MAX)
}

impl Recorder {
    pub fn record(&mut self, outcome: &Result<Sample, Failure>) {
        match outcome {
            Ok(s) => self.success(s),
            Err(f) => self.failure(f),
        }
    }

    fn success(&mut self, s: &Sample) {
        self.ok += 1;
        self.output_tokens_total += u64::from(s.output_tokens);
        let mut put = |i: usize, v: u64| {
            // Histograms created by `new` resize themselves: recording cannot fail.
            let _ = self.hists[i].record(v);
        };
        if let Some(ttft) = s.ttft {
            put(0, micros(ttft));
            if s.output_tokens >= 2 {
                put(1, micros(s.e2e.saturating_sub(ttft)) / u64::from(s.output_tokens - 1));
            }
        }
        put(2, micros(s.e2e));
        let secs = s.e2e.as_secs_f64();
        if secs > 0.0 {
            put(3, (f64::from(s.output_tokens) / secs).round() as u64);
        }
        put(4, u64::from(s.output_tokens));
        if let Some(p) = s.prompt_tokens {
            put(5, u64::from(p));
        }
    }

    fn failure(&mut self, f: &Failure) {
        *self.errors.entry(f.kind.class()).or_default() += 1;
        if self.error_samples.len() < MAX_SAMPLES {
            self.error_samples.push(format!("{}: {}", f.kind.class(), f.detail));
        }
    }

    pub fn failed(&self) -> u64 {
        self.errors.values().sum()
    }

    /// Median end-to-end latency so far, in ms (for the progress line).
    pub fn e2e_p50_ms(&self) -> f64 {
        self.hists[2].value_at_quantile(0.5) as f64 / 1000.0
    }

    /// The exported form of every metric that has values.
    pub fn metrics(&self) -> BTreeMap<String, Metric> {
        METRICS
            .iter()
            .zip(&self.hists)
            .filter(|(_, h)| !h.is_empty())
            .map(|((key, _, unit, scale), h)| (key.to_string(), Metric::of(h, unit, *scale)))
            .collect()
    }
}

/// One metric's summary and raw histogram.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Metric {
    pub unit: String,
    pub count: u64,
    pub mean: f64,
    pub min: f64,
    pub p50: f64,
    pub p90: f64,
    pub p99: f64,
    #[serde(rename = "p99.9")]
    pub p999: f64,
    pub max: f64,
    /// Recorded units per `unit` (1000 for latencies recorded in µs, shown in ms).
    pub scale: f64,
    /// The recorded buckets: `[value, count]` in recorded units.
    pub histogram: Vec<[u64; 2]>,
}

impl Metric {
    fn of(h: &Histogram<u64>, unit: &str, scale: f64) -> Metric {
        let q = |q: f64| h.value_at_quantile(q) as f64 / scale;
        Metric {
            unit: unit.to_string(),
            count: h.len(),
            mean: h.mean() / scale,
            min: h.min() as f64 / scale,
            p50: q(0.5),
            p90: q(0.9),
            p99: q(0.99),
            p999: q(0.999),
            max: h.max() as f64 / scale,
            scale,
            histogram: h.iter_recorded().map(|v| [v.value_iterated_to(), v.count_at_value()]).collect(),
        }
    }

    /// Recompute the summary from the raw histogram (what `--compare` trusts).
    pub fn rebuilt(&self) -> Result<Metric, String> {
        let mut h = histogram();
        for [v, c] in &self.histogram {
            h.record_n(*v, *c).map_err(|e| format!("bad histogram bucket {v}×{c}: {e:?}"))?;
        }
        if !(self.scale.is_finite() && self.scale > 0.0) {
            return Err(format!("bad histogram scale {}", self.scale));
        }
        Ok(Metric::of(&h, &self.unit, self.scale))
    }
}

/// The bench process's own CPU use during the measured phase.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, PartialEq)]
pub struct CpuUse {
    pub user_s: f64,
    pub sys_s: f64,
    /// (user + sys) / requests finished (ok or not).
    pub us_per_request: f64,
    /// (user + sys) / wall time, in % of one core.
    pub percent_of_core: f64,
}

/// Format tag of the JSON export.
pub const FORMAT: &str = "switchyard-bench/1";

/// Everything a run reports; `--json` writes it, `--compare` reads it.
#[derive(Clone, Debug, Serialize, Deserialize, PartialEq)]
pub struct Report {
    pub format: String,
    /// The run's settings (URL, endpoint, load, lengths, seed, …).
    pub config: serde_json::Value,
    pub duration_s: f64,
    pub ok: u64,
    pub failed: u64,
    /// Failed requests by class (`connect`, `http_<status>`, `stream_error`, `timeout`,
    /// `malformed`, `closed`).
    pub errors: BTreeMap<String, u64>,
    pub error_samples: Vec<String>,
    pub requests_per_s: f64,
    pub output_tokens_per_s: f64,
    pub output_tokens_total: u64,
    pub bench_cpu: CpuUse,
    pub io_driver: String,
    pub metrics: BTreeMap<String, Metric>,
}

impl Report {
    pub fn new(config: serde_json::Value, rec: &Recorder, wall: Duration, cpu: CpuUse, io_driver: &str) -> Report {
        let secs = wall.as_secs_f64().max(1e-9);
        Report {
            format: FORMAT.into(),
            config,
            duration_s: wall.as_secs_f64(),
            ok: rec.ok,
            failed: rec.failed(),
            errors: rec.errors.clone(),
            error_samples: rec.error_samples.clone(),
            requests_per_s: rec.ok as f64 / secs,
            output_tokens_per_s: rec.output_tokens_total as f64 / secs,
            output_tokens_total: rec.output_tokens_total,
            bench_cpu: cpu,
            io_driver: io_driver.into(),
            metrics: rec.metrics(),
        }
    }

    /// Read a `--json` export; the metric summaries are recomputed from the raw histograms.
    pub fn load(path: &std::path::Path) -> Result<Report, String> {
        let text = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        let mut r: Report =
            serde_json::from_str(&text).map_err(|e| format!("{}: not a bench report: {e}", path.display()))?;
        if r.format != FORMAT {
            return Err(format!("{}: format {:?}, expected {FORMAT:?}", path.display(), r.format));
        }
        for (k, m) in r.metrics.iter_mut() {
            *m = m.rebuilt().map_err(|e| format!("{}: metric {k}: {e}", path.display()))?;
        }
        Ok(r)
    }

    /// The final table.
    pub fn render(&self) -> String {
        let mut o = String::new();
        let c = &self.config;
        let _ = writeln!(
            o,
            "switchyard bench: {} {} {} against {} ({})",
            c["endpoint"].as_str().unwrap_or("?"),
            if c["stream"].as_bool() == Some(true) { "streaming" } else { "non-streaming" },
            c["load"].as_str().unwrap_or("?"),
            c["url"].as_str().unwrap_or("?"),
            c["model"].as_str().unwrap_or("?"),
        );
        let _ = writeln!(
            o,
            "requests: {} ok, {} failed in {:.2} s — {:.1} req/s, {:.0} output tok/s",
            self.ok, self.failed, self.duration_s, self.requests_per_s, self.output_tokens_per_s
        );
        if !self.errors.is_empty() {
            let list: Vec<String> = self.errors.iter().map(|(k, v)| format!("{k} {v}")).collect();
            let _ = writeln!(o, "errors: {}", list.join(", "));
            for s in &self.error_samples {
                let _ = writeln!(o, "  e.g. {s}");
            }
        }
        let b = &self.bench_cpu;
        let _ = writeln!(
            o,
            "bench client: {:.1} CPU-µs per request ({:.2} s user + {:.2} s sys, {:.0} % of one core, {})",
            b.us_per_request, b.user_s, b.sys_s, b.percent_of_core, self.io_driver
        );
        let _ = writeln!(
            o,
            "{:<34}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}",
            "metric", "count", "mean", "p50", "p90", "p99", "p99.9", "max"
        );
        for (key, label, unit, _) in METRICS {
            if let Some(m) = self.metrics.get(*key) {
                let _ = writeln!(
                    o,
                    "{:<34}{:>8}{:>11}{:>11}{:>11}{:>11}{:>11}{:>11}",
                    format!("{label} ({unit})"),
                    m.count,
                    num(m.mean),
                    num(m.p50),
                    num(m.p90),
                    num(m.p99),
                    num(m.p999),
                    num(m.max)
                );
            }
        }
        o
    }
}

/// A number with about four significant digits.
pub fn num(v: f64) -> String {
    let a = v.abs();
    if a >= 1000.0 || (v.fract() == 0.0 && a < 1e15) {
        format!("{v:.0}")
    } else if a >= 100.0 {
        format!("{v:.1}")
    } else if a >= 1.0 {
        format!("{v:.2}")
    } else {
        format!("{v:.3}")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample(e2e_ms: u64, ttft_ms: u64, tokens: u32) -> Result<Sample, Failure> {
        Ok(Sample {
            e2e: Duration::from_millis(e2e_ms),
            ttft: Some(Duration::from_millis(ttft_ms)),
            output_tokens: tokens,
            prompt_tokens: Some(10),
        })
    }

    #[test]
    fn recorder_metrics_and_failure_classes() {
        let mut r = Recorder::default();
        r.record(&sample(110, 10, 11)); // ITL (110-10)/10 = 10 ms, 100 tok/s
        r.record(&sample(210, 10, 21));
        r.record(&Err(Failure::new(FailKind::Status(404), "no such model")));
        r.record(&Err(Failure::new(FailKind::Timeout, "60 s")));
        r.record(&Err(Failure::new(FailKind::Status(404), "again")));
        assert_eq!((r.ok, r.failed(), r.output_tokens_total), (2, 3, 32));
        assert_eq!(r.errors.get("http_404"), Some(&2));
        assert_eq!(r.errors.get("timeout"), Some(&1));
        let m = r.metrics();
        assert!((m["itl"].p50 - 10.0).abs() < 0.02, "{:?}", m["itl"]);
        assert!((m["ttft"].max - 10.0).abs() < 0.02);
        assert_eq!(m["tps"].max, 100.0);
        assert_eq!((m["output_tokens"].min, m["output_tokens"].max), (11.0, 21.0));
    }

    #[test]
    fn report_round_trips_through_json() {
        let mut r = Recorder::default();
        for i in 1..=1000 {
            r.record(&sample(i, i / 4, 8));
        }
        let rep =
            Report::new(serde_json::json!({"endpoint":"chat"}), &r, Duration::from_secs(2), CpuUse::default(), "epoll");
        assert_eq!(rep.requests_per_s, 500.0);
        let dir = std::env::temp_dir().join(format!("sy-bench-stats-{}.json", std::process::id()));
        std::fs::write(&dir, serde_json::to_string(&rep).unwrap()).unwrap();
        let back = Report::load(&dir).unwrap();
        std::fs::remove_file(&dir).unwrap();
        assert_eq!(back, rep);
        let e2e = &back.metrics["e2e"];
        assert!((e2e.p50 - 500.0).abs() / 500.0 < 0.002, "{}", e2e.p50);
        assert!(rep.render().contains("E2E latency (ms)"));
    }

    #[test]
    fn load_rejects_foreign_files() {
        let p = std::env::temp_dir().join(format!("sy-bench-foreign-{}.json", std::process::id()));
        std::fs::write(&p, r#"{"hello":1}"#).unwrap();
        assert!(Report::load(&p).unwrap_err().contains("not a bench report"));
        std::fs::remove_file(&p).unwrap();
        assert!(Report::load(&p).is_err());
    }
}
