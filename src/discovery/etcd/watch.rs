//! [`Watch`]: one `/v3/watch` stream, a long-lived chunked response carrying one JSON object
//! `{"result": {...}}` per line.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use serde_json::Value;

use super::client::Kv;
use super::wire::{self, int64, Response};

/// What happened to a key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EventKind {
    Put,
    Delete,
}

/// One change seen by a [`Watch`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Event {
    pub kind: EventKind,
    pub key: String,
    /// The new value of a put; empty for a delete.
    pub value: Vec<u8>,
    pub mod_revision: i64,
    /// The value before the change, when etcd still had it.
    pub prev_value: Option<Vec<u8>>,
}

/// A watch of one key prefix. Any end of the stream (closed connection, cancellation,
/// compaction, an error message) is an error: the caller re-lists and watches again.
pub struct Watch {
    resp: Response,
    prefix: String,
    /// Decoded body bytes before the next newline.
    line: Vec<u8>,
}

fn lost(prefix: &str, why: impl std::fmt::Display) -> io::Error {
    io::Error::new(io::ErrorKind::ConnectionAborted, format!("etcd watch of {prefix:?} lost: {why}"))
}

impl Watch {
    /// Takes over a `/v3/watch` response and waits (up to `timeout`) for etcd to confirm the
    /// watch is created.
    pub(crate) fn open(resp: Response, prefix: &str, timeout: Duration) -> io::Result<Watch> {
        if !(200..300).contains(&resp.status) {
            return Err(lost(prefix, format!("HTTP {}", resp.status)));
        }
        let mut w = Watch { resp, prefix: prefix.to_string(), line: Vec::new() };
        let deadline = Instant::now() + timeout;
        loop {
            // Events may not precede the confirmation; anything else is read and judged.
            if let Some(result) = w.next_result()? {
                if result.get("created").and_then(Value::as_bool) == Some(true) {
                    return Ok(w);
                }
                continue;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::Error::new(io::ErrorKind::TimedOut, format!("etcd watch of {prefix:?}: not created")));
            }
            w.read_once(left)?;
        }
    }

    /// The watched prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The events that arrive within `timeout` (at least one batch, or none when the time
    /// is up).
    pub fn next_events(&mut self, timeout: Duration) -> io::Result<Vec<Event>> {
        let deadline = Instant::now() + timeout;
        loop {
            let events = self.take_events()?;
            if !events.is_empty() {
                return Ok(events);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Ok(events);
            }
            self.read_once(left)?;
        }
    }

    /// Reads what arrives within `timeout` (nothing when the time is up) and decodes it.
    pub(crate) fn read_once(&mut self, timeout: Duration) -> io::Result<()> {
        wire::set_timeouts(self.resp.stream(), timeout)?;
        match self.resp.read_more() {
            Ok(true) => Ok(()),
            Ok(false) => Err(lost(&self.prefix, "stream closed")),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => Ok(()),
            Err(e) => Err(lost(&self.prefix, e)),
        }
    }

    /// The events of every complete message received so far.
    pub(crate) fn take_events(&mut self) -> io::Result<Vec<Event>> {
        let mut events = Vec::new();
        while let Some(result) = self.next_result()? {
            events.extend(result_events(&result)?);
        }
        Ok(events)
    }

    /// The next complete message's `result`; messages that end the watch are errors.
    fn next_result(&mut self) -> io::Result<Option<Value>> {
        loop {
            let body = &mut self.resp.body;
            let Some(nl) = body.iter().position(|&b| b == b'\n') else {
                self.line.append(body);
                if self.resp.done {
                    return Err(lost(&self.prefix, "stream ended"));
                }
                return Ok(None);
            };
            self.line.extend(body.drain(..=nl));
            let line = std::mem::take(&mut self.line);
            if let Some(result) = line_result(&line, &self.prefix)? {
                return Ok(Some(result));
            }
        }
    }
}

/// One line of a watch stream: its `result`, `None` for a blank line; a message that ends
/// the watch (an error, a cancellation) is an error.
pub(crate) fn line_result(line: &[u8], prefix: &str) -> io::Result<Option<Value>> {
    if line.iter().all(u8::is_ascii_whitespace) {
        return Ok(None);
    }
    let mut msg: Value = serde_json::from_slice(line).map_err(|e| lost(prefix, e))?;
    if let Some(err) = msg.get("error").filter(|e| !e.is_null()) {
        return Err(lost(prefix, err));
    }
    let result = msg.get_mut("result").map(Value::take).unwrap_or_default();
    if result.get("canceled").and_then(Value::as_bool) == Some(true) {
        let compacted = int64(&result, "compact_revision")?;
        let reason = result.get("cancel_reason").and_then(Value::as_str).unwrap_or("");
        return Err(lost(prefix, format!("canceled (compact revision {compacted}) {reason}")));
    }
    Ok(Some(result))
}

/// The events of one watch `result`.
pub(crate) fn result_events(result: &Value) -> io::Result<Vec<Event>> {
    result.get("events").and_then(Value::as_array).map_or(&[][..], Vec::as_slice).iter().map(parse_event).collect()
}

impl AsRawFd for Watch {
    fn as_raw_fd(&self) -> RawFd {
        self.resp.stream().as_raw_fd()
    }
}

fn parse_event(ev: &Value) -> io::Result<Event> {
    let kv = Kv::from_json(ev.get("kv").unwrap_or(&Value::Null))?;
    let kind = match ev.get("type").and_then(Value::as_str) {
        None | Some("PUT") => EventKind::Put,
        Some("DELETE") => EventKind::Delete,
        Some(other) => {
            return Err(io::Error::new(io::ErrorKind::InvalidData, format!("unknown etcd event type {other}")))
        }
    };
    let prev_value = match ev.get("prev_kv") {
        Some(prev) if !prev.is_null() => Some(Kv::from_json(prev)?.value),
        _ => None,
    };
    Ok(Event { kind, key: kv.key, value: kv.value, mod_revision: kv.mod_revision, prev_value })
}
