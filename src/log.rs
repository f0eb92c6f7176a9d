//! Minimal logging to stderr: `2026-01-01T00:00:00Z LEVEL message`, one line per event.
//! Log lines are written off the hot path only (start-up, errors, shutdown).

use std::io::Write;
use std::time::{SystemTime, UNIX_EPOCH};

fn line(level: &str, msg: &str) {
    let secs = SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0);
    let (days, t) = (secs / 86_400, secs % 86_400);
    let (y, m, d) = crate::util::date::civil_from_days(days as i64);
    let stamp = format!("{y:04}-{m:02}-{d:02}T{:02}:{:02}:{:02}Z", t / 3600, (t % 3600) / 60, t % 60);
    let _ = writeln!(std::io::stderr().lock(), "{stamp} {level} switchyard: {msg}");
}

pub fn info(msg: &str) {
    line("INFO", msg);
}
pub fn warn(msg: &str) {
    line("WARN", msg);
}
pub fn error(msg: &str) {
    line("ERROR", msg);
}
