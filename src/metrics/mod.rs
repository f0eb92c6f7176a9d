//! Metrics: per-shard collectors, merged only when `/metrics` is scraped.
//!
//! Each shard owns a [`ShardMetrics`] of plain `Cell`s: recording is an add on the shard's
//! own memory, with no atomics and nothing shared between cores. A scrape asks every other
//! shard for a [`Snapshot`] through its inbox (see `shard::ShardMsg::Snapshot`), merges the
//! snapshots, and renders Prometheus text with [`render`]. Names follow Dynamo 1.6.1 under
//! the configured prefix (`--metrics-prefix`, default `dynamo_frontend`); switchyard's own
//! families are prefixed `switchyard_`.
//!
//! Called by `http1`'s service (recording) and by the `/metrics` route (rendering). Depends on
//! nothing but std.

pub mod families;

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::fmt::Write;

pub use families::{Endpoint, ModelStats, Outcome};

/// One shard's collectors. `!Sync` by construction: only its shard touches it.
#[derive(Default)]
pub struct ShardMetrics {
    http_responses: RefCell<BTreeMap<u16, u64>>,
    connections_accepted: Cell<u64>,
    connections_open: Cell<i64>,
    disconnected_clients: Cell<u64>,
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

    /// One HTTP response with `status` was produced.
    pub fn http_response(&self, status: u16) {
        *self.http_responses.borrow_mut().entry(status).or_insert(0) += 1;
    }
    pub fn connection_opened(&self) {
        self.connections_accepted.set(self.connections_accepted.get() + 1);
        self.connections_open.set(self.connections_open.get() + 1);
    }
    pub fn connection_closed(&self) {
        self.connections_open.set(self.connections_open.get() - 1);
    }
    /// A client went away before its response was complete.
    pub fn client_disconnected(&self) {
        self.disconnected_clients.set(self.disconnected_clients.get() + 1);
    }

    /// A copy of every value, to send to the scraping shard.
    pub fn snapshot(&self) -> Snapshot {
        Snapshot {
            shards: 1,
            http_responses: self.http_responses.borrow().clone(),
            connections_accepted: self.connections_accepted.get(),
            connections_open: self.connections_open.get(),
            disconnected_clients: self.disconnected_clients.get(),
            models: self.models.borrow().iter().cloned().collect(),
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
    /// Per-model request families, by model name.
    pub models: BTreeMap<String, ModelStats>,
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

fn family(out: &mut String, name: &str, kind: &str, help: &str) {
    let _ = writeln!(out, "# HELP {name} {help}");
    let _ = writeln!(out, "# TYPE {name} {kind}");
}

/// Prometheus text exposition (format 0.0.4) of a merged snapshot.
pub fn render(prefix: &str, s: &Snapshot, uptime_secs: f64, shards_total: usize) -> String {
    let mut out = String::with_capacity(2048);
    let name = format!("{prefix}_disconnected_clients");
    family(&mut out, &name, "gauge", "Number of disconnected clients");
    let _ = writeln!(out, "{name} {}", s.disconnected_clients);
    families::render(&mut out, prefix, &s.models);

    family(&mut out, "dynamo_component_uptime_seconds", "gauge", "Total uptime of the DistributedRuntime in seconds");
    let _ = writeln!(out, "dynamo_component_uptime_seconds {uptime_secs}");

    family(&mut out, "switchyard_http_responses_total", "counter", "HTTP responses by status code");
    for (status, n) in &s.http_responses {
        let _ = writeln!(out, "switchyard_http_responses_total{{code=\"{status}\"}} {n}");
    }
    family(&mut out, "switchyard_http_connections_accepted_total", "counter", "HTTP connections accepted");
    let _ = writeln!(out, "switchyard_http_connections_accepted_total {}", s.connections_accepted);
    family(&mut out, "switchyard_http_connections_open", "gauge", "HTTP connections open now");
    let _ = writeln!(out, "switchyard_http_connections_open {}", s.connections_open);
    family(&mut out, "switchyard_shards", "gauge", "Shard threads running, and how many answered this scrape");
    let _ = writeln!(out, "switchyard_shards{{state=\"running\"}} {shards_total}");
    let _ = writeln!(out, "switchyard_shards{{state=\"answered\"}} {}", s.shards);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

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
        let text = render("dynamo_frontend", &s, 1.5, 2);
        assert!(text.contains("switchyard_http_responses_total{code=\"200\"} 3\n"));
        assert!(text.contains("# TYPE dynamo_frontend_disconnected_clients gauge\n"));
    }
}
