//! The output items of a response as the parsed answer comes in: a `reasoning` item for what
//! the reasoning parser takes out, a `message` item with one `output_text` part, a
//! `function_call` item per parsed call, in the order they start. The same [`Items`] builds
//! the whole answer's `output` and, when streaming, writes the events of each step
//! (`response.output_item.added`, `…content_part.added`, `…output_text.delta`, …) as named SSE
//! events numbered by `sequence_number`.
//!
//! Text that is only whitespace is held back until something else follows (so the blank line
//! after `</think>` or between two calls makes no message item of its own). Runs on the shard
//! thread of the request.

use std::io::Write as _;

use serde_json::{json, Map, Value};

use super::object::{new_call_id, new_id};
use crate::parsers::Call;

struct Open {
    index: usize,
    id: String,
    text: String,
}

/// A response's output items, and the events they make.
#[derive(Default)]
pub struct Items {
    /// Write events (a stream).
    events: bool,
    /// Events rendered and not yet sent.
    pub out: Vec<u8>,
    seq: u64,
    /// Finished items by output index (`None` while open).
    slots: Vec<Option<Value>>,
    reasoning: Option<Open>,
    message: Option<Open>,
    /// Whitespace not yet given to a message.
    held: String,
}

impl Items {
    pub fn new(events: bool) -> Items {
        Items { events, ..Items::default() }
    }

    /// Write one event: `type` and `sequence_number` first, then `rest`'s members.
    pub fn event(&mut self, ty: &str, rest: Value) {
        if !self.events {
            return;
        }
        let mut o = Map::new();
        o.insert("type".into(), ty.into());
        o.insert("sequence_number".into(), self.seq.into());
        self.seq += 1;
        if let Value::Object(m) = rest {
            o.extend(m);
        }
        let _ = write!(self.out, "event: {ty}\ndata: ");
        let _ = serde_json::to_writer(&mut self.out, &Value::Object(o));
        self.out.extend_from_slice(b"\n\n");
    }

    fn slot(&mut self) -> usize {
        self.slots.push(None);
        self.slots.len() - 1
    }

    /// Reasoning text.
    pub fn reasoning(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.reasoning.is_none() {
            let index = self.slot();
            let id = new_id("rs_");
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"type": "reasoning", "id": id, "summary": [],
                    "content": [], "status": "in_progress"}}),
            );
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "reasoning_text", "text": ""}}),
            );
            self.reasoning = Some(Open { index, id, text: String::new() });
        }
        let Some(r) = self.reasoning.as_mut() else { return };
        r.text.push_str(text);
        let (id, index) = (r.id.clone(), r.index);
        self.event(
            "response.reasoning_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": text}),
        );
    }

    fn close_reasoning(&mut self) {
        let Some(r) = self.reasoning.take() else { return };
        self.event(
            "response.reasoning_text.done",
            json!({"item_id": r.id, "output_index": r.index, "content_index": 0, "text": r.text}),
        );
        let part = json!({"type": "reasoning_text", "text": r.text});
        self.event(
            "response.content_part.done",
            json!({"item_id": r.id, "output_index": r.index, "content_index": 0, "part": part}),
        );
        let item = json!({"type": "reasoning", "id": r.id, "summary": [], "content": [part], "status": "completed"});
        self.event("response.output_item.done", json!({"output_index": r.index, "item": item}));
        self.slots[r.index] = Some(item);
    }

    /// Answer text.
    pub fn content(&mut self, text: &str) {
        if text.is_empty() {
            return;
        }
        if self.message.is_none() && text.trim().is_empty() {
            self.held.push_str(text);
            return;
        }
        let mut delta = std::mem::take(&mut self.held);
        delta.push_str(text);
        self.message_text(&delta);
    }

    /// Text for the message, opened first when it is not.
    fn message_text(&mut self, delta: &str) {
        self.close_reasoning();
        if self.message.is_none() {
            let index = self.slot();
            let id = new_id("msg_");
            self.event(
                "response.output_item.added",
                json!({"output_index": index, "item": {"type": "message", "content": [], "id": id,
                    "role": "assistant", "status": "in_progress"}}),
            );
            self.event(
                "response.content_part.added",
                json!({"item_id": id, "output_index": index, "content_index": 0,
                    "part": {"type": "output_text", "annotations": [], "logprobs": [], "text": ""}}),
            );
            self.message = Some(Open { index, id, text: String::new() });
        }
        let Some(m) = self.message.as_mut() else { return };
        m.text.push_str(delta);
        let (id, index) = (m.id.clone(), m.index);
        self.event(
            "response.output_text.delta",
            json!({"item_id": id, "output_index": index, "content_index": 0, "delta": delta, "logprobs": []}),
        );
    }

    fn close_message(&mut self, status: &str) {
        let Some(m) = self.message.take() else { return };
        self.event(
            "response.output_text.done",
            json!({"item_id": m.id, "output_index": m.index, "content_index": 0, "text": m.text, "logprobs": []}),
        );
        let part = json!({"type": "output_text", "annotations": [], "logprobs": [], "text": m.text});
        self.event(
            "response.content_part.done",
            json!({"item_id": m.id, "output_index": m.index, "content_index": 0, "part": part}),
        );
        let item = json!({"type": "message", "content": [part], "id": m.id, "role": "assistant", "status": status});
        self.event("response.output_item.done", json!({"output_index": m.index, "item": item}));
        self.slots[m.index] = Some(item);
    }

    /// A parsed tool call: its item, whole.
    pub fn call(&mut self, call: &Call) {
        self.close_reasoning();
        self.close_message("completed");
        self.held.clear();
        let index = self.slot();
        let id = new_id("fc_");
        let call_id = new_call_id();
        self.event(
            "response.output_item.added",
            json!({"output_index": index, "item": {"type": "function_call", "arguments": "", "call_id": call_id,
                "name": call.name, "id": id, "status": "in_progress"}}),
        );
        self.event(
            "response.function_call_arguments.delta",
            json!({"item_id": id, "output_index": index, "delta": call.arguments}),
        );
        if self.events {
            // 1.6.1's member order: `name` before `sequence_number`.
            let mut o = Map::new();
            o.insert("type".into(), "response.function_call_arguments.done".into());
            o.insert("name".into(), call.name.clone().into());
            o.insert("sequence_number".into(), self.seq.into());
            self.seq += 1;
            o.insert("item_id".into(), id.clone().into());
            o.insert("output_index".into(), index.into());
            o.insert("arguments".into(), call.arguments.clone().into());
            self.out.extend_from_slice(b"event: response.function_call_arguments.done\ndata: ");
            let _ = serde_json::to_writer(&mut self.out, &Value::Object(o));
            self.out.extend_from_slice(b"\n\n");
        }
        let item = json!({"type": "function_call", "arguments": call.arguments, "call_id": call_id,
            "name": call.name, "id": id, "status": "completed"});
        self.event("response.output_item.done", json!({"output_index": index, "item": item}));
        self.slots[index] = Some(item);
    }

    /// The end of the answer: open items are closed (the message `completed`, or
    /// `incomplete` when the answer was cut short or failed). Whitespace held back becomes
    /// the message when there is no other item.
    pub fn finish(&mut self, complete: bool) {
        if self.slots.is_empty() && !self.held.is_empty() {
            let held = std::mem::take(&mut self.held);
            self.message_text(&held);
        }
        self.close_reasoning();
        self.close_message(if complete { "completed" } else { "incomplete" });
    }

    /// Whether any event is waiting to be sent.
    pub fn pending(&self) -> bool {
        !self.out.is_empty()
    }

    /// The finished items, in output order.
    pub fn output(&self) -> Vec<Value> {
        self.slots.iter().flatten().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn events(out: &[u8]) -> Vec<Value> {
        let text = std::str::from_utf8(out).unwrap();
        text.split("\n\n")
            .filter(|e| !e.is_empty())
            .map(|e| {
                let (head, data) = e.split_once("\ndata: ").unwrap();
                let v: Value = serde_json::from_str(data).unwrap();
                assert_eq!(head.strip_prefix("event: ").unwrap(), v["type"]);
                v
            })
            .collect()
    }

    #[test]
    fn reasoning_text_and_a_call() {
        let mut it = Items::new(true);
        it.reasoning("think");
        it.content("\n\n");
        it.content("Hi");
        it.call(&Call { name: "f".into(), arguments: "{}".into() });
        it.content("\n");
        it.finish(true);
        let out = it.output();
        assert_eq!(out.len(), 3);
        assert_eq!(out[0]["content"][0]["text"], "think");
        assert_eq!(out[1]["content"][0]["text"], "\n\nHi");
        assert_eq!(out[2]["type"], "function_call");
        let ev = events(&it.out);
        for (i, e) in ev.iter().enumerate() {
            assert_eq!(e["sequence_number"], i as u64);
        }
        let types: Vec<&str> = ev.iter().map(|e| e["type"].as_str().unwrap()).collect();
        assert!(types.contains(&"response.function_call_arguments.done"));
    }

    #[test]
    fn only_whitespace_is_a_message() {
        let mut it = Items::new(true);
        it.content(" ");
        it.finish(false);
        let out = it.output();
        assert_eq!(out[0]["content"][0]["text"], " ");
        assert_eq!(out[0]["status"], "incomplete");
        let ev = events(&it.out);
        assert_eq!(ev[2]["delta"], " ");
    }
}
