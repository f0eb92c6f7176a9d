//! One turn of the chat: the conversation so far as a streamed OpenAI chat completion request
//! (what Dynamo 1.6.1's text input sends: the served model, `max_completion_tokens` 8192,
//! `temperature` 0.7, `n` 1), run on a shard through the OpenAI adapter exactly as a
//! `POST /v1/chat/completions` body would be, and its SSE answer read back.
//!
//! Runs in two places. [`start`] (terminal thread) hands the request to a shard's inbox as a
//! [`ShardMsg::Run`]; the task that spawns there (`serve`, shard thread) counts as a request
//! in flight for the shard's drain and forwards the answer's SSE bytes. [`Sent`] is the
//! terminal's end: dropping it stops the turn, which drops the answer on the shard and so
//! cancels the worker's request (`kill`), as a client that disconnects does. [`Reader`]
//! (terminal thread) turns the SSE bytes back into content, reasoning or an error.

use std::rc::Rc;

use bytes::Bytes;

use crate::infer::Caller;
use crate::openai::serve::{serve as serve_openai, Answer, Api};
use crate::shard::{ShardCtx, ShardMsg};

/// The most tokens one answer may have (1.6.1's `MAX_TOKENS` of its text input).
pub const MAX_COMPLETION_TOKENS: u32 = 8192;
/// The sampling temperature of every turn (1.6.1's).
pub const TEMPERATURE: f64 = 0.7;

/// The messages so far: user turns and the answers they got.
#[derive(Debug, Default)]
pub struct Conversation {
    messages: Vec<serde_json::Value>,
}

impl Conversation {
    /// A user turn.
    pub fn ask(&mut self, text: &str) {
        self.messages.push(serde_json::json!({"role": "user", "content": text}));
    }

    /// The answer to the last user turn (with its reasoning, when the model's parser split
    /// one out).
    pub fn answered(&mut self, content: &str, reasoning: &str) {
        let mut m = serde_json::json!({"role": "assistant", "content": content});
        if !reasoning.is_empty() {
            m["reasoning_content"] = reasoning.into();
        }
        self.messages.push(m);
    }

    /// Take back the last user turn (its request failed: the next one should not carry it).
    pub fn withdraw(&mut self) {
        if self.messages.last().is_some_and(|m| m["role"] == "user") {
            self.messages.pop();
        }
    }

    /// The chat completion request for `model` carrying the whole conversation.
    pub fn request(&self, model: &str) -> Bytes {
        let body = serde_json::json!({
            "model": model,
            "messages": self.messages,
            "stream": true,
            "max_completion_tokens": MAX_COMPLETION_TOKENS,
            "temperature": TEMPERATURE,
            "n": 1,
        });
        Bytes::from(body.to_string())
    }
}

/// What a shard sends back for a turn.
#[derive(Debug)]
pub enum Piece {
    /// SSE bytes of the answer (one event or more).
    Sse(Bytes),
    /// The request was refused before any answer (the error's message).
    Refused(String),
    /// The answer is complete.
    End,
}

/// A turn on its way. Dropping it stops the turn.
pub struct Sent {
    pub pieces: flume::Receiver<Piece>,
    /// Never sent on: its end (this `Sent` dropped) is the stop.
    _stop: flume::Sender<()>,
}

/// Hand the request `body` to the shard whose inbox is `inbox`.
pub fn start(inbox: &flume::Sender<ShardMsg>, body: Bytes) -> Result<Sent, String> {
    let (tx, pieces) = flume::unbounded();
    let (stop, stopped) = flume::bounded::<()>(1);
    let work = move |ctx: &Rc<ShardCtx>| {
        monoio::spawn(serve(ctx.clone(), body, tx, stopped));
    };
    inbox.send(ShardMsg::Run(Box::new(work))).map_err(|_| "the shards have stopped".to_string())?;
    Ok(Sent { pieces, _stop: stop })
}

/// On the shard: run the request and forward its answer until it ends, the terminal stops it,
/// or the shard's drain is over.
async fn serve(ctx: Rc<ShardCtx>, body: Bytes, out: flume::Sender<Piece>, stopped: flume::Receiver<()>) {
    let _in_flight = ctx.gate.enter();
    let answer = async {
        match serve_openai(&ctx, Api::Chat, &body, Ok(None), Caller::default()).await {
            Ok(Answer::Stream(mut rx)) => {
                while let Some(bytes) = rx.recv().await {
                    if out.send(Piece::Sse(bytes)).is_err() {
                        return;
                    }
                }
                let _ = out.send(Piece::End);
            }
            Ok(Answer::Json(_)) => {
                let _ = out.send(Piece::Refused("the answer came whole instead of streamed".into()));
            }
            Err(e) => {
                let _ = out.send(Piece::Refused(e.message().to_string()));
            }
        }
    };
    // Leaving the select drops the answer: its stream sees its reader gone and the worker is
    // told to stop.
    monoio::select! {
        _ = answer => {},
        _ = stopped.recv_async() => {},
        _ = ctx.gate.finished() => {},
    }
}

/// The SSE answer of a chat completion, read back: the text to show, the reasoning kept for
/// the history, and the error that ended it, if one did.
#[derive(Debug)]
pub struct Reader {
    buf: Vec<u8>,
    /// The member carrying parsed reasoning (`--reasoning-field-name`).
    field: &'static str,
    pub content: String,
    pub reasoning: String,
    pub error: Option<String>,
}

impl Reader {
    pub fn new(field: &'static str) -> Reader {
        Reader { buf: Vec::new(), field, content: String::new(), reasoning: String::new(), error: None }
    }

    /// Read `bytes` of the stream; returns the content they add (what to print).
    pub fn feed(&mut self, bytes: &[u8]) -> String {
        self.buf.extend_from_slice(bytes);
        let mut shown = String::new();
        while let Some(end) = self.buf.windows(2).position(|w| w == b"\n\n") {
            let event: Vec<u8> = self.buf.drain(..end + 2).collect();
            self.event(&String::from_utf8_lossy(&event), &mut shown);
        }
        shown
    }

    /// One SSE event: named events (`event: …`, the dispatch events) and comments are not
    /// the answer; `data: [DONE]` ends it.
    fn event(&mut self, event: &str, shown: &mut String) {
        let mut data = String::new();
        for line in event.lines() {
            if line.starts_with("event:") {
                return;
            }
            if let Some(d) = line.strip_prefix("data:") {
                data.push_str(d.strip_prefix(' ').unwrap_or(d));
            }
        }
        if data.is_empty() || data == "[DONE]" {
            return;
        }
        let Ok(chunk) = serde_json::from_str::<serde_json::Value>(&data) else {
            self.error = Some(format!("an answer chunk that is not JSON: {data}"));
            return;
        };
        if let Some(e) = chunk.get("error") {
            let message = e.get("message").and_then(|m| m.as_str()).map_or_else(|| e.to_string(), str::to_string);
            self.error = Some(message);
            return;
        }
        let delta = &chunk["choices"][0]["delta"];
        if let Some(text) = delta["content"].as_str() {
            self.content.push_str(text);
            shown.push_str(text);
        }
        if let Some(text) = delta[self.field].as_str() {
            self.reasoning.push_str(text);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_carries_the_whole_conversation() {
        let mut c = Conversation::default();
        c.ask("hi");
        c.answered("hello", "");
        c.ask("and then?");
        c.answered("then this", "thought about it");
        c.ask("bad");
        c.withdraw();
        c.ask("last");
        let body: serde_json::Value = serde_json::from_slice(&c.request("qwen3")).unwrap();
        assert_eq!(
            body,
            serde_json::json!({
                "model": "qwen3",
                "messages": [
                    {"role": "user", "content": "hi"},
                    {"role": "assistant", "content": "hello"},
                    {"role": "user", "content": "and then?"},
                    {"role": "assistant", "content": "then this", "reasoning_content": "thought about it"},
                    {"role": "user", "content": "last"},
                ],
                "stream": true,
                "max_completion_tokens": 8192,
                "temperature": 0.7,
                "n": 1,
            })
        );
        // The body passes the OpenAI adapter's own parsing and validation.
        crate::openai::parse_chat(&c.request("qwen3")).unwrap();
    }

    #[test]
    fn the_answer_is_read_back_across_split_events() {
        let mut r = Reader::new("reasoning_content");
        let stream = concat!(
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"role\":\"assistant\",\"reasoning_content\":\"hm\"}}]}\n\n",
            ": keep-alive\n\n",
            "event: reasoning_dispatch\ndata: {\"choices\":[{\"delta\":{\"content\":\"not this\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Hel\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"lo\\n\"}}]}\n\n",
            "data: {\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"stop\"}]}\n\n",
            "data: [DONE]\n\n",
        );
        let (a, b) = stream.as_bytes().split_at(130);
        let mut shown = r.feed(a);
        shown += &r.feed(b);
        assert_eq!((shown.as_str(), r.content.as_str(), r.reasoning.as_str()), ("Hello\n", "Hello\n", "hm"));
        assert_eq!(r.error, None);
        let mut r = Reader::new("reasoning");
        assert_eq!(r.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"a\",\"reasoning\":\"r\"}}]}\n\n"), "a");
        assert_eq!(r.reasoning, "r");
    }

    #[test]
    fn an_error_event_ends_the_answer() {
        let mut r = Reader::new("reasoning_content");
        r.feed(b"data: {\"choices\":[{\"delta\":{\"content\":\"par\"}}]}\n\n");
        r.feed(b"data: {\"error\":{\"message\":\"worker went away\",\"type\":\"Internal\",\"code\":500}}\n\n");
        assert_eq!((r.content.as_str(), r.error.as_deref()), ("par", Some("worker went away")));
    }
}
