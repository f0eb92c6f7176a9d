//! Reading answers: an incremental server-sent-events parser, the per-stream tracker that
//! turns OpenAI chunks into token timings, and the check of a whole (non-streamed) answer.
//!
//! SSE (WHATWG HTML §9.2): lines end with LF or CRLF; `data:` lines accumulate (joined by
//! LF), an empty line dispatches the event, `:` starts a comment, `event:` names the event,
//! `id:`/`retry:` are ignored. A bare CR as line end is not accepted (no OpenAI-compatible
//! server sends it). Stricter than a browser, because a benchmark must not count garbage as a
//! success: an unknown field, a line over 16 MiB, bytes after the last event, an event after
//! `[DONE]`, a payload that is not JSON, or a chunk with neither `choices`, `usage` nor
//! `error` are all malformed.
//!
//! An error event — `event: error`, or a JSON payload with a top-level `error` (Dynamo and
//! switchyard send `data: {"error":{…}}` when a stream fails after its 200 head) — fails the
//! request as a stream error.
//!
//! Parsing chunks borrows from the buffer and skips every member but `choices[].delta.content`
//! / `choices[].text` / `reasoning_content`, `usage` and `error`: the client must stay far
//! cheaper per token than the server it measures.

use std::borrow::Cow;
use std::time::Instant;

use serde::Deserialize;

use super::stats::Failure;

/// Longest line accepted.
const MAX_LINE: usize = 16 << 20;

/// One dispatched event.
#[derive(Debug, PartialEq, Eq)]
pub struct Event<'a> {
    /// `event: error` was set.
    pub error: bool,
    pub data: &'a [u8],
}

/// Incremental SSE parser: feed bytes as they arrive, get events through a callback.
#[derive(Debug, Default)]
pub struct SseParser {
    /// A line not yet ended.
    line: Vec<u8>,
    data: Vec<u8>,
    has_data: bool,
    error_event: bool,
}

impl SseParser {
    /// Parse `bytes`, calling `on_event` for each complete event; stops at the first error
    /// (the parser's or the callback's).
    pub fn feed(
        &mut self,
        mut bytes: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        while let Some(nl) = memchr::memchr(b'\n', bytes) {
            if self.line.is_empty() {
                self.line_done(&bytes[..nl], on_event)?;
            } else {
                let mut line = std::mem::take(&mut self.line);
                line.extend_from_slice(&bytes[..nl]);
                let r = self.line_done(&line, on_event);
                line.clear();
                self.line = line;
                r?;
            }
            bytes = &bytes[nl + 1..];
        }
        if self.line.len() + bytes.len() > MAX_LINE {
            return Err(Failure::malformed("an SSE line longer than 16 MiB"));
        }
        self.line.extend_from_slice(bytes);
        Ok(())
    }

    /// The body ended: anything left over is a truncated event.
    pub fn finish(&self) -> Result<(), Failure> {
        if !self.line.is_empty() || self.has_data {
            return Err(Failure::malformed("the SSE body ended inside an event"));
        }
        Ok(())
    }

    fn line_done(
        &mut self,
        line: &[u8],
        on_event: &mut dyn FnMut(Event<'_>) -> Result<(), Failure>,
    ) -> Result<(), Failure> {
        let line = line.strip_suffix(b"\r").unwrap_or(line);
        if line.is_empty() {
            let had = std::mem::take(&mut self.has_data);
            let error = std::mem::take(&mut self.error_event);
            if had {
                let r = on_event(Event { error, data: &self.data });
                self.data.clear();
                return r;
            }
            return Ok(());
        }
        if line.len() > MAX_LINE {
            return Err(Failure::malformed("an SSE line longer than 16 MiB"));
        }
        if line[0] == b':' {
            return Ok(());
        }
        let (field, value) = match memchr::memchr(b':', line) {
            Some(i) => {
                let v = &line[i + 1..];
                (&line[..i], v.strip_prefix(b" ").unwrap_or(v))
            }
            None => (line, &[][..]),
        };
        match field {
            b"data" => {
                if self.has_data {
                    self.data.push(b'\n');
                }
                self.data.extend_from_slice(value);
                self.has_data = true;
            }
            b"event" => self.error_event = value == b"error",
            b"id" | b"retry" => {}
            other => {
                let shown = String::from_utf8_lossy(&other[..other.len().min(40)]).into_owned();
                return Err(Failure::malformed(format!("not an SSE line: {shown:?}")));
            }
        }
        Ok(())
    }
}

/// Token counts an answer reports.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct Usage {
    #[serde(default)]
    pub prompt_tokens: Option<u32>,
    pub completion_tokens: u32,
}

#[derive(Deserialize)]
struct Chunk {
    #[serde(default)]
    choices: Option<Choices>,
    #[serde(default)]
    usage: Option<Usage>,
    #[serde(default)]
    error: Option<serde_json::Value>,
}

#[derive(Deserialize)]
struct Choice<'a> {
    #[serde(default, borrow)]
    delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    text: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    message: Option<Delta<'a>>,
}

#[derive(Deserialize)]
struct Delta<'a> {
    #[serde(default, borrow)]
    content: Option<Cow<'a, str>>,
    #[serde(default, borrow)]
    reasoning_content: Option<Cow<'a, str>>,
}

/// A `choices` array, read without collecting it: how many, and whether any carries text.
#[derive(Default)]
struct Choices {
    len: usize,
    text: bool,
}

impl<'de> Deserialize<'de> for Choices {
    fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Choices, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Choices;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("an array of choices")
            }
            fn visit_seq<A: serde::de::SeqAccess<'de>>(self, mut seq: A) -> Result<Choices, A::Error> {
                let mut c = Choices::default();
                while let Some(choice) = seq.next_element::<Choice<'de>>()? {
                    c.len += 1;
                    c.text |= choice.has_text();
                }
                Ok(c)
            }
        }
        d.deserialize_seq(Visit)
    }
}

fn nonempty(s: &Option<Cow<'_, str>>) -> bool {
    s.as_deref().is_some_and(|s| !s.is_empty())
}

impl Choice<'_> {
    /// Whether this choice carries generated text.
    fn has_text(&self) -> bool {
        let d =
            |d: &Option<Delta<'_>>| d.as_ref().is_some_and(|d| nonempty(&d.content) || nonempty(&d.reasoning_content));
        nonempty(&self.text) || d(&self.delta) || d(&self.message)
    }
}

/// The message of an error payload, shortened.
fn error_text(v: &serde_json::Value) -> String {
    let msg = v.get("message").and_then(|m| m.as_str()).map_or_else(|| v.to_string(), str::to_string);
    msg.chars().take(200).collect()
}

fn parse_chunk(data: &[u8]) -> Result<Chunk, Failure> {
    let chunk: Chunk = serde_json::from_slice(data).map_err(|e| Failure::malformed(format!("not JSON: {e}")))?;
    if let Some(e) = &chunk.error {
        return Err(Failure::stream(error_text(e)));
    }
    if chunk.choices.is_none() && chunk.usage.is_none() {
        return Err(Failure::malformed("a chunk with neither choices nor usage"));
    }
    Ok(chunk)
}

/// What one streamed answer has shown so far.
#[derive(Debug, Default)]
pub struct StreamTracker {
    /// `data: [DONE]` arrived.
    pub done: bool,
    /// Arrival of the first event carrying generated text.
    pub first_token: Option<Instant>,
    /// Events carrying generated text.
    pub token_events: u32,
    /// The last `usage` seen (`stream_options.include_usage`).
    pub usage: Option<Usage>,
}

impl StreamTracker {
    /// Account for one event received at `now`.
    pub fn on_event(&mut self, ev: Event<'_>, now: Instant) -> Result<(), Failure> {
        if self.done {
            return Err(Failure::malformed("an event after [DONE]"));
        }
        if ev.error {
            let text = serde_json::from_slice::<serde_json::Value>(ev.data).map_or_else(
                |_| String::from_utf8_lossy(ev.data).chars().take(200).collect(),
                |v| error_text(v.get("error").unwrap_or(&v)),
            );
            return Err(Failure::stream(text));
        }
        if ev.data == b"[DONE]" {
            self.done = true;
            return Ok(());
        }
        let chunk = parse_chunk(ev.data)?;
        if chunk.choices.as_ref().is_some_and(|c| c.text) {
            self.token_events += 1;
            self.first_token.get_or_insert(now);
        }
        if chunk.usage.is_some() {
            self.usage = chunk.usage;
        }
        Ok(())
    }

    /// The stream's body ended: it must have said `[DONE]`. Returns the output token count
    /// (usage when reported, else the events that carried text).
    pub fn finish(&self) -> Result<u32, Failure> {
        if !self.done {
            return Err(Failure::malformed("the stream ended without data: [DONE]"));
        }
        Ok(self.usage.map_or(self.token_events, |u| u.completion_tokens))
    }
}

/// Check a whole (non-streamed) 200 answer: JSON with choices and usage.
pub fn inspect_whole(body: &[u8]) -> Result<Usage, Failure> {
    let chunk = parse_chunk(body)?;
    if chunk.choices.as_ref().is_none_or(|c| c.len == 0) {
        return Err(Failure::malformed("an answer without choices"));
    }
    chunk.usage.ok_or_else(|| Failure::malformed("an answer without usage"))
}

#[cfg(test)]
mod tests {
    use super::super::stats::FailKind;
    use super::*;

    /// Feed `input` split at every `step` bytes; the events' data, or the failure.
    fn events(input: &[u8], step: usize) -> Result<Vec<(bool, String)>, Failure> {
        let mut p = SseParser::default();
        let mut out = Vec::new();
        for piece in input.chunks(step.max(1)) {
            p.feed(piece, &mut |e| {
                out.push((e.error, String::from_utf8_lossy(e.data).into_owned()));
                Ok(())
            })?;
        }
        p.finish()?;
        Ok(out)
    }

    #[test]
    fn events_survive_any_split() {
        let input = b": comment\ndata: {\"a\":1}\n\ndata:x\r\ndata: y\r\n\r\nevent: error\ndata: {}\nid: 3\n\n";
        for step in 1..input.len() {
            let got = events(input, step).unwrap();
            assert_eq!(
                got,
                vec![(false, "{\"a\":1}".to_string()), (false, "x\ny".to_string()), (true, "{}".to_string())],
                "split every {step}"
            );
        }
    }

    #[test]
    fn malformed_streams_are_rejected() {
        let cases: &[(&[u8], &str)] = &[
            (b"data: {}\n\ndata: trunc", "ended inside an event"),
            (b"data: {}\n", "ended inside an event"),
            (b"HTTP/1.1 200 OK\n\n", "not an SSE line"),
            (b"garbage\n\n", "not an SSE line"),
        ];
        for (input, want) in cases {
            let e = events(input, 7).unwrap_err();
            assert_eq!(e.kind, FailKind::Malformed, "{input:?}");
            assert!(e.detail.contains(want), "{input:?}: {}", e.detail);
        }
        let mut p = SseParser::default();
        let big = vec![b'a'; MAX_LINE + 1];
        assert_eq!(p.feed(&big, &mut |_| Ok(())).unwrap_err().kind, FailKind::Malformed);
    }

    fn track(events: &[&[u8]]) -> Result<u32, Failure> {
        let mut t = StreamTracker::default();
        let now = Instant::now();
        for e in events {
            t.on_event(Event { error: false, data: e }, now)?;
        }
        t.finish()
    }

    #[test]
    fn tracker_counts_tokens_and_prefers_usage() {
        let role = br#"{"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}"#;
        let tok = br#"{"choices":[{"index":0,"delta":{"content":"Hi"}}]}"#;
        let text = br#"{"choices":[{"index":0,"text":" there","finish_reason":null}]}"#;
        let fin = br#"{"choices":[{"index":0,"delta":{},"finish_reason":"length"}]}"#;
        let usage = br#"{"choices":[],"usage":{"prompt_tokens":5,"completion_tokens":7,"total_tokens":12}}"#;
        assert_eq!(track(&[role, tok, text, fin, b"[DONE]"]).unwrap(), 2);
        assert_eq!(track(&[role, tok, fin, usage, b"[DONE]"]).unwrap(), 7);
        let mut t = StreamTracker::default();
        t.on_event(Event { error: false, data: role }, Instant::now()).unwrap();
        assert!(t.first_token.is_none(), "an empty role delta is not a token");
        t.on_event(Event { error: false, data: tok }, Instant::now()).unwrap();
        assert!(t.first_token.is_some());
    }

    #[test]
    fn tracker_rejects_bad_streams() {
        let tok: &[u8] = br#"{"choices":[{"delta":{"content":"a"}}]}"#;
        let cases: &[(&[&[u8]], FailKind, &str)] = &[
            (&[tok], FailKind::Malformed, "without data: [DONE]"),
            (&[tok, b"[DONE]", tok], FailKind::Malformed, "after [DONE]"),
            (&[b"{not json"], FailKind::Malformed, "not JSON"),
            (&[br#"{"id":"x"}"#], FailKind::Malformed, "neither choices nor usage"),
            (&[br#"[1,2]"#], FailKind::Malformed, "not JSON"),
            (
                &[tok, br#"{"error":{"message":"worker died","type":"Internal","code":503}}"#],
                FailKind::Stream,
                "worker died",
            ),
        ];
        for (evs, kind, want) in cases {
            let e = track(evs).unwrap_err();
            assert_eq!(e.kind, *kind, "{evs:?}");
            assert!(e.detail.contains(want), "{evs:?}: {}", e.detail);
        }
        let mut t = StreamTracker::default();
        let e =
            t.on_event(Event { error: true, data: br#"{"error":{"message":"boom"}}"# }, Instant::now()).unwrap_err();
        assert_eq!((e.kind, e.detail.as_str()), (FailKind::Stream, "boom"));
    }

    #[test]
    fn whole_answers() {
        let ok = br#"{"id":"c","choices":[{"index":0,"message":{"role":"assistant","content":"Hi"}}],"usage":{"prompt_tokens":3,"completion_tokens":9,"total_tokens":12}}"#;
        assert_eq!(inspect_whole(ok).unwrap(), Usage { prompt_tokens: Some(3), completion_tokens: 9 });
        assert_eq!(inspect_whole(br#"{"choices":[]}"#).unwrap_err().kind, FailKind::Malformed);
        assert_eq!(inspect_whole(br#"{"choices":[{"text":"a"}]}"#).unwrap_err().kind, FailKind::Malformed);
        assert_eq!(inspect_whole(b"<html>").unwrap_err().kind, FailKind::Malformed);
        assert_eq!(inspect_whole(br#"{"error":{"message":"no"}}"#).unwrap_err().kind, FailKind::Stream);
    }
}
