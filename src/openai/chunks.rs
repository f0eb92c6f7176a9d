//! OpenAI chunk objects a `model_input = Text` worker sends (docs/dynamo/request-plane.md §7.4), relayed and
//! aggregated the way Dynamo 1.6.1 does: each chunk is read into Dynamo's chunk type and
//! written back in that type's key order (capture `ptext1`: the worker's `id`, `created` and
//! `usage` kept, `"logprobs":null` added, keys reordered), and a non-streamed answer is the
//! chunks folded into one `chat.completion` / `text_completion`.
//!
//! Keys Dynamo's types do not have are dropped; missing ones take their defaults.

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// Token counts as the worker reported them; the details are kept as sent.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChunkUsage {
    pub prompt_tokens: u32,
    pub completion_tokens: u32,
    pub total_tokens: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prompt_tokens_details: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub completion_tokens_details: Option<Value>,
}

/// A chat delta, in Dynamo's key order.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct Delta {
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub function_call: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tool_calls: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub role: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reasoning_content: Option<String>,
}

/// One choice of a `chat.completion.chunk`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatChunkChoice {
    pub index: u32,
    pub delta: Delta,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Value>,
}

/// A `chat.completion.chunk`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct ChatChunk {
    pub id: String,
    pub choices: Vec<ChatChunkChoice>,
    pub created: u64,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub service_tier: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    pub object: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChunkUsage>,
}

/// One choice of a `text_completion` chunk or answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionChoice {
    pub text: String,
    pub index: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub logprobs: Option<Value>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub finish_reason: Option<String>,
}

/// A `text_completion` chunk, or a whole text completion.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(default)]
pub struct CompletionChunk {
    pub id: String,
    pub choices: Vec<CompletionChoice>,
    pub created: u64,
    pub model: String,
    pub system_fingerprint: Option<String>,
    pub object: String,
    pub usage: Option<ChunkUsage>,
}

/// The assistant message of a whole chat answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct Message {
    pub content: String,
    pub refusal: Option<String>,
    pub role: String,
}

/// One choice of a whole chat answer.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatChoice {
    pub index: u32,
    pub message: Message,
    pub finish_reason: Option<String>,
    pub logprobs: Option<Value>,
}

/// A whole `chat.completion`.
#[derive(Clone, Debug, Default, PartialEq, Serialize)]
pub struct ChatCompletion {
    pub id: String,
    pub choices: Vec<ChatChoice>,
    pub created: u64,
    pub model: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub system_fingerprint: Option<String>,
    pub object: &'static str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub usage: Option<ChunkUsage>,
}

/// Append the arrays of `more` to those of `into` (logprobs objects of consecutive chunks:
/// chat `content`, completions `tokens`, `token_logprobs`, ...); `null` takes the other side.
fn merge_logprobs(into: &mut Option<Value>, more: Option<Value>) {
    let Some(more) = more.filter(|m| !m.is_null()) else { return };
    let Some(Value::Object(acc)) = into.as_mut() else {
        *into = Some(more);
        return;
    };
    if let Value::Object(more) = more {
        for (k, v) in more {
            match (acc.get_mut(&k), v) {
                (Some(Value::Array(a)), Value::Array(b)) => a.extend(b),
                (None, v) => {
                    acc.insert(k, v);
                }
                _ => {}
            }
        }
    }
}

/// Replace `slot` with `v` when there is one.
fn keep_latest<T>(slot: &mut Option<T>, v: Option<T>) {
    if v.is_some() {
        *slot = v;
    }
}

/// The choice with `index` in `choices` (kept sorted by index), added by `new` if missing.
fn choice_at<T>(choices: &mut Vec<T>, index: u32, key: fn(&T) -> u32, new: impl FnOnce() -> T) -> &mut T {
    let at = match choices.binary_search_by_key(&index, key) {
        Ok(i) => i,
        Err(i) => {
            choices.insert(i, new());
            i
        }
    };
    &mut choices[at]
}

/// The chat chunks of one answer folded into one `chat.completion`: contents concatenated
/// per choice index, the last finish reason and usage, `id` / `created` / `model` of the
/// first chunk.
#[derive(Debug, Default)]
pub struct ChatAggregate {
    out: Option<ChatCompletion>,
}

impl ChatAggregate {
    pub fn add(&mut self, chunk: ChatChunk) {
        let (fp, usage) = (chunk.system_fingerprint, chunk.usage);
        let out = self.out.get_or_insert_with(|| {
            let (id, created, model) = (chunk.id, chunk.created, chunk.model);
            ChatCompletion { id, created, model, object: "chat.completion", ..Default::default() }
        });
        keep_latest(&mut out.system_fingerprint, fp);
        keep_latest(&mut out.usage, usage);
        for c in chunk.choices {
            let choice = choice_at(
                &mut out.choices,
                c.index,
                |x| x.index,
                || {
                    let message = Message { role: "assistant".into(), ..Default::default() };
                    ChatChoice { index: c.index, message, ..Default::default() }
                },
            );
            if let Some(t) = c.delta.content {
                choice.message.content.push_str(&t);
            }
            if let Some(r) = c.delta.role {
                choice.message.role = r;
            }
            if let Some(r) = c.delta.refusal {
                choice.message.refusal.get_or_insert_with(String::new).push_str(&r);
            }
            keep_latest(&mut choice.finish_reason, c.finish_reason);
            merge_logprobs(&mut choice.logprobs, c.logprobs);
        }
    }

    /// The answer (`None` if no chunk came).
    pub fn finish(self) -> Option<ChatCompletion> {
        self.out
    }
}

/// The completion chunks of one answer folded into one `text_completion` (as
/// [`ChatAggregate`] does for chat).
#[derive(Debug, Default)]
pub struct CompletionAggregate {
    out: Option<CompletionChunk>,
}

impl CompletionAggregate {
    pub fn add(&mut self, chunk: CompletionChunk) {
        let CompletionChunk { id, choices, created, model, system_fingerprint, usage, .. } = chunk;
        let out = self.out.get_or_insert_with(|| {
            let object = "text_completion".into();
            CompletionChunk { id, created, model, object, ..Default::default() }
        });
        keep_latest(&mut out.system_fingerprint, system_fingerprint);
        keep_latest(&mut out.usage, usage);
        for c in choices {
            let choice = choice_at(
                &mut out.choices,
                c.index,
                |x| x.index,
                || CompletionChoice { index: c.index, ..Default::default() },
            );
            choice.text.push_str(&c.text);
            keep_latest(&mut choice.finish_reason, c.finish_reason);
            merge_logprobs(&mut choice.logprobs, c.logprobs);
        }
    }

    /// The answer (`None` if no chunk came).
    pub fn finish(self) -> Option<CompletionChunk> {
        self.out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // The chunks of capture `ptext1` (a Text worker through 1.6.1) and what the client got.
    const WORKER: [&str; 4] = [
        r#"{"id":"chatcmpl-probe","object":"chat.completion.chunk","created":1795295985,"model":"probe-text","choices":[{"index":0,"delta":{"role":"assistant","content":"Hi"},"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-probe","object":"chat.completion.chunk","created":1795295985,"model":"probe-text","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-probe","object":"chat.completion.chunk","created":1795295985,"model":"probe-text","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null}]}"#,
        r#"{"id":"chatcmpl-probe","object":"chat.completion.chunk","created":1795295985,"model":"probe-text","choices":[{"index":0,"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}"#,
    ];
    const CLIENT: [&str; 4] = [
        r#"{"id":"chatcmpl-probe","choices":[{"index":0,"delta":{"content":"Hi","role":"assistant"},"finish_reason":null,"logprobs":null}],"created":1795295985,"model":"probe-text","object":"chat.completion.chunk"}"#,
        r#"{"id":"chatcmpl-probe","choices":[{"index":0,"delta":{"content":" there"},"finish_reason":null,"logprobs":null}],"created":1795295985,"model":"probe-text","object":"chat.completion.chunk"}"#,
        r#"{"id":"chatcmpl-probe","choices":[{"index":0,"delta":{"content":"!"},"finish_reason":null,"logprobs":null}],"created":1795295985,"model":"probe-text","object":"chat.completion.chunk"}"#,
        r#"{"id":"chatcmpl-probe","choices":[{"index":0,"delta":{},"finish_reason":"stop","logprobs":null}],"created":1795295985,"model":"probe-text","object":"chat.completion.chunk","usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}"#,
    ];

    #[test]
    fn chat_chunks_relayed_as_dynamo() {
        let mut agg = ChatAggregate::default();
        for (w, c) in WORKER.iter().zip(CLIENT) {
            let chunk: ChatChunk = serde_json::from_str(w).unwrap();
            assert_eq!(serde_json::to_string(&chunk).unwrap(), c);
            agg.add(chunk);
        }
        assert_eq!(
            serde_json::to_string(&agg.finish().unwrap()).unwrap(),
            r#"{"id":"chatcmpl-probe","choices":[{"index":0,"message":{"content":"Hi there!","refusal":null,"role":"assistant"},"finish_reason":"stop","logprobs":null}],"created":1795295985,"model":"probe-text","object":"chat.completion","usage":{"prompt_tokens":3,"completion_tokens":3,"total_tokens":6}}"#
        );
    }

    #[test]
    fn completion_chunks_aggregate() {
        let mut agg = CompletionAggregate::default();
        for (text, finish) in [("a", None), ("b", Some("length"))] {
            let chunk = CompletionChunk {
                id: "cmpl-1".into(),
                choices: vec![CompletionChoice {
                    text: text.into(),
                    finish_reason: finish.map(Into::into),
                    ..Default::default()
                }],
                created: 7,
                model: "m".into(),
                object: "text_completion".into(),
                ..Default::default()
            };
            agg.add(chunk);
        }
        assert_eq!(
            serde_json::to_string(&agg.finish().unwrap()).unwrap(),
            r#"{"id":"cmpl-1","choices":[{"text":"ab","index":0,"finish_reason":"length"}],"created":7,"model":"m","system_fingerprint":null,"object":"text_completion","usage":null}"#
        );
    }

    #[test]
    fn logprobs_arrays_are_concatenated() {
        let mut acc = None;
        merge_logprobs(&mut acc, Some(serde_json::json!({"content": [1], "refusal": null})));
        merge_logprobs(&mut acc, None);
        merge_logprobs(&mut acc, Some(serde_json::json!({"content": [2], "refusal": null})));
        assert_eq!(acc, Some(serde_json::json!({"content": [1, 2], "refusal": null})));
    }
}
