//! `switchyard bench --compare A.json B.json`: two reports side by side, with B's change
//! relative to A. Percentiles are recomputed from the raw histograms in the files
//! ([`Report::load`]), so a report edited by hand or written by an older build cannot
//! disagree with its own data.

use std::fmt::Write as _;

use super::stats::{num, Report, METRICS};

/// `(b - a) / a` in %, or `-` when `a` is zero.
fn change(a: f64, b: f64) -> String {
    if a == 0.0 {
        return "-".into();
    }
    format!("{:+.1} %", (b - a) * 100.0 / a)
}

fn setting(r: &Report) -> String {
    let c = &r.config;
    format!(
        "{} {} {}, {} in / {} out tokens",
        c["endpoint"].as_str().unwrap_or("?"),
        if c["stream"].as_bool() == Some(true) { "streaming" } else { "non-streaming" },
        c["load"].as_str().unwrap_or("?"),
        c["input_tokens"],
        c["output_tokens"],
    )
}

/// The side-by-side table.
pub fn render(a_name: &str, a: &Report, b_name: &str, b: &Report) -> String {
    let mut o = String::new();
    let _ = writeln!(o, "A: {a_name} — {}", setting(a));
    let _ = writeln!(o, "B: {b_name} — {}", setting(b));
    let row = |o: &mut String, label: &str, x: f64, y: f64| {
        let _ = writeln!(o, "{label:<42}{:>12}{:>12}{:>10}", num(x), num(y), change(x, y));
    };
    let _ = writeln!(o, "{:<42}{:>12}{:>12}{:>10}", "", "A", "B", "B vs A");
    row(&mut o, "requests ok", a.ok as f64, b.ok as f64);
    row(&mut o, "requests failed", a.failed as f64, b.failed as f64);
    row(&mut o, "requests/s", a.requests_per_s, b.requests_per_s);
    row(&mut o, "output tokens/s", a.output_tokens_per_s, b.output_tokens_per_s);
    row(&mut o, "bench CPU-µs per request", a.bench_cpu.us_per_request, b.bench_cpu.us_per_request);
    for (key, label, unit, _) in METRICS {
        let (Some(x), Some(y)) = (a.metrics.get(*key), b.metrics.get(*key)) else { continue };
        for (stat, vx, vy) in [
            ("mean", x.mean, y.mean),
            ("p50", x.p50, y.p50),
            ("p90", x.p90, y.p90),
            ("p99", x.p99, y.p99),
            ("p99.9", x.p999, y.p999),
            ("max", x.max, y.max),
        ] {
            row(&mut o, &format!("{label} {stat} ({unit})"), vx, vy);
        }
    }
    let only = |r: &Report, other: &Report| -> Vec<&str> {
        METRICS
            .iter()
            .filter(|m| r.metrics.contains_key(m.0) && !other.metrics.contains_key(m.0))
            .map(|m| m.1)
            .collect()
    };
    for (name, list) in [("A", only(a, b)), ("B", only(b, a))] {
        if !list.is_empty() {
            let _ = writeln!(o, "only in {name}: {}", list.join(", "));
        }
    }
    o
}

/// Load both files and render the table.
pub fn run(a: &std::path::Path, b: &std::path::Path) -> Result<String, String> {
    let ra = Report::load(a)?;
    let rb = Report::load(b)?;
    Ok(render(&a.display().to_string(), &ra, &b.display().to_string(), &rb))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn change_in_percent() {
        assert_eq!(change(100.0, 110.0), "+10.0 %");
        assert_eq!(change(2.0, 1.0), "-50.0 %");
        assert_eq!(change(0.0, 1.0), "-");
    }
}
