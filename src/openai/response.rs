//! OpenAI response bodies, written straight into a byte buffer in Dynamo 1.6.1's exact shapes
//! and key order (observed on the real frontend):
//!
//! * chat, whole: `{"id","choices":[{"index","message":{"content","refusal","role"},
//!   "finish_reason","logprobs"}],"created","model","object":"chat.completion","usage"}`;
//!   with a reasoning parser, `"reasoning_content"` (or `--reasoning-field-name`) follows
//!   `"role"` when there is reasoning, an empty content is `null`, and the usage carries
//!   `"completion_tokens_details":{"reasoning_tokens":N}`;
//! * chat, streamed: one `data: {…"object":"chat.completion.chunk"}` per text delta (the first
//!   delta also carries `"role":"assistant"`), a finish chunk with an empty delta, a usage
//!   chunk with `"choices":[]` when `stream_options.include_usage`, then `data: [DONE]`; with
//!   a reasoning parser, a role-only chunk first, then chunks carrying `content` and/or the
//!   reasoning member ([`chat_pieces_chunk_at`]);
//! * completions, whole and streamed: `{"id","choices":[{"text","index","finish_reason"?}],
//!   "created","model","system_fingerprint":null,"object":"text_completion","usage"}`;
//! * an error after the stream started: `data: {"error":{"message","type","code"}}`.
//!
//! Writing by hand keeps the per-chunk cost to a few appends (no intermediate JSON value);
//! strings go through serde_json's escaper.

use std::io::Write as _;

pub use crate::infer::Usage;

/// What every chunk of one answer shares.
#[derive(Clone, Debug)]
pub struct Meta<'a> {
    /// `chatcmpl-…` or `cmpl-…`.
    pub id: &'a str,
    pub created: u64,
    pub model: &'a str,
    /// `id` as a JSON string, and `,"created":N,"model":"…"`: the same in every chunk of a
    /// stream, so written once.
    id_json: Vec<u8>,
    tail: Vec<u8>,
}

impl<'a> Meta<'a> {
    pub fn new(id: &'a str, created: u64, model: &'a str) -> Meta<'a> {
        let mut id_json = Vec::with_capacity(id.len() + 2);
        string(&mut id_json, id);
        let mut tail = Vec::with_capacity(32 + model.len());
        tail.extend_from_slice(b",\"created\":");
        uint(&mut tail, created);
        tail.extend_from_slice(b",\"model\":");
        string(&mut tail, model);
        Meta { id, created, model, id_json, tail }
    }
}

/// `s` as a JSON string (the crate's one writer, byte-identical to serde_json).
pub(super) use crate::util::json_string as string;
pub(super) use crate::util::json_string;

/// `n` in decimal.
fn uint(out: &mut Vec<u8>, n: u64) {
    out.extend_from_slice(itoa::Buffer::new().format(n).as_bytes());
}

fn opt_string(out: &mut Vec<u8>, s: Option<&str>) {
    match s {
        Some(s) => string(out, s),
        None => out.extend_from_slice(b"null"),
    }
}

fn tail(out: &mut Vec<u8>, meta: &Meta<'_>) {
    out.extend_from_slice(&meta.tail);
}

/// A usage object (`completions`: in the completions shape, with `audio_tokens`).
pub(super) fn usage_json(out: &mut Vec<u8>, u: &Usage, completions: bool) {
    usage_json_with(out, u, completions, None)
}

/// [`usage_json`], with `completion_tokens_details.reasoning_tokens` when a reasoning parser
/// counted them.
pub(super) fn usage_json_with(out: &mut Vec<u8>, u: &Usage, completions: bool, reasoning_tokens: Option<u32>) {
    // Numbers through `itoa` (`uint`): `write!` cost ~1.4 K instructions for these few.
    out.extend_from_slice(b"{\"prompt_tokens\":");
    uint(out, u64::from(u.prompt_tokens));
    out.extend_from_slice(b",\"completion_tokens\":");
    uint(out, u64::from(u.completion_tokens));
    out.extend_from_slice(b",\"total_tokens\":");
    uint(out, u64::from(u.prompt_tokens + u.completion_tokens));
    if let Some(c) = u.cached_tokens {
        out.extend_from_slice(if completions {
            b",\"prompt_tokens_details\":{\"audio_tokens\":null,\"cached_tokens\":".as_slice()
        } else {
            b",\"prompt_tokens_details\":{\"cached_tokens\":".as_slice()
        });
        uint(out, u64::from(c));
        out.push(b'}');
    }
    if let Some(n) = reasoning_tokens {
        out.extend_from_slice(b",\"completion_tokens_details\":{\"reasoning_tokens\":");
        uint(out, u64::from(n));
        out.push(b'}');
    }
    out.push(b'}');
}

/// A chat choice's `"logprobs"`: the rendered object ([`super::logprobs::chat`]) or `null`.
fn logprobs_field(out: &mut Vec<u8>, logprobs: Option<&[u8]>) {
    out.extend_from_slice(b",\"logprobs\":");
    out.extend_from_slice(logprobs.unwrap_or(b"null"));
    out.extend_from_slice(b"}]");
}

/// A completion choice's `"logprobs"` ([`super::logprobs::completion`]), absent when `None`.
fn completion_logprobs(out: &mut Vec<u8>, logprobs: Option<&[u8]>) {
    if let Some(l) = logprobs {
        out.extend_from_slice(b",\"logprobs\":");
        out.extend_from_slice(l);
    }
}

/// One choice of a whole answer.
#[derive(Clone, Debug)]
pub struct Choice<'a> {
    pub index: u32,
    pub text: &'a str,
    pub finish_reason: Option<&'a str>,
    /// The rendered logprobs object ([`super::logprobs`]), when asked for.
    pub logprobs: Option<Vec<u8>>,
    /// With a reasoning parser: the member name and the choice's reasoning (maybe empty).
    pub reasoning: Option<(&'static str, &'a str)>,
    /// With parsers: the calls parsed out of the text, and an empty content is `null`.
    pub parsed: Option<&'a [crate::parsers::Call]>,
}

/// A whole chat completion of one choice.
pub fn chat_completion(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    content: &str,
    finish_reason: Option<&str>,
    usage: &Usage,
    logprobs: Option<&[u8]>,
) {
    let choice = Choice {
        index: 0,
        text: content,
        finish_reason,
        logprobs: logprobs.map(<[u8]>::to_vec),
        reasoning: None,
        parsed: None,
    };
    chat_completion_choices(out, meta, std::slice::from_ref(&choice), usage, None);
}

/// A whole chat completion; `reasoning_tokens` when a reasoning parser counted them.
pub fn chat_completion_choices(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    choices: &[Choice<'_>],
    usage: &Usage,
    reasoning_tokens: Option<u32>,
) {
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(&meta.id_json);
    out.extend_from_slice(b",\"choices\":[");
    for (i, c) in choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"index\":");
        uint(out, u64::from(c.index));
        out.extend_from_slice(b",\"message\":{\"content\":");
        match (c.reasoning, c.parsed) {
            (Some(_), _) | (_, Some(_)) if c.text.is_empty() => out.extend_from_slice(b"null"),
            _ => string(out, c.text),
        }
        out.extend_from_slice(b",\"refusal\":null");
        if let Some(calls) = c.parsed.filter(|calls| !calls.is_empty()) {
            out.extend_from_slice(b",\"tool_calls\":[");
            for (i, call) in calls.iter().enumerate() {
                if i > 0 {
                    out.push(b',');
                }
                tool_call(out, None, &call_id(), &call.name, &call.arguments);
            }
            out.push(b']');
        }
        out.extend_from_slice(b",\"role\":\"assistant\"");
        if let Some((field, reasoning)) = c.reasoning.filter(|(_, r)| !r.is_empty()) {
            out.extend_from_slice(b",\"");
            out.extend_from_slice(field.as_bytes());
            out.extend_from_slice(b"\":");
            string(out, reasoning);
        }
        out.extend_from_slice(b"},\"finish_reason\":");
        opt_string(out, c.finish_reason);
        out.extend_from_slice(b",\"logprobs\":");
        out.extend_from_slice(c.logprobs.as_deref().unwrap_or(b"null"));
        out.push(b'}');
    }
    out.push(b']');
    tail(out, meta);
    out.extend_from_slice(b",\"object\":\"chat.completion\",\"usage\":");
    usage_json_with(out, usage, false, reasoning_tokens);
    out.push(b'}');
}

/// One SSE event of a streamed chat completion: a text delta (`first` adds the role), or the
/// finish (empty delta, `finish_reason` set).
pub fn chat_chunk(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    delta: Option<&str>,
    first: bool,
    finish_reason: Option<&str>,
    logprobs: Option<&[u8]>,
) {
    chat_chunk_at(out, meta, 0, delta, first, finish_reason, logprobs)
}

/// [`chat_chunk`] of the choice with `index`.
pub fn chat_chunk_at(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    index: u32,
    delta: Option<&str>,
    first: bool,
    finish_reason: Option<&str>,
    logprobs: Option<&[u8]>,
) {
    chunk_open(out, meta, index);
    let mut sep = false;
    if let Some(text) = delta {
        out.extend_from_slice(b"\"content\":");
        string(out, text);
        sep = true;
    }
    if first {
        if sep {
            out.push(b',');
        }
        out.extend_from_slice(b"\"role\":\"assistant\"");
    }
    chunk_close(out, meta, finish_reason, logprobs);
}

/// One SSE event of a streamed chat completion carrying parsed pieces of a choice: its
/// `content` and its reasoning (member `field`), each when not empty.
pub fn chat_pieces_chunk_at(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    index: u32,
    content: &str,
    (field, reasoning): (&str, &str),
    logprobs: Option<&[u8]>,
) {
    chunk_open(out, meta, index);
    if !content.is_empty() {
        out.extend_from_slice(b"\"content\":");
        string(out, content);
    }
    if !reasoning.is_empty() {
        if !content.is_empty() {
            out.push(b',');
        }
        out.push(b'"');
        out.extend_from_slice(field.as_bytes());
        out.extend_from_slice(b"\":");
        string(out, reasoning);
    }
    chunk_close(out, meta, None, logprobs);
}

/// A new tool call's id, as 1.6.1 makes them: `call-<uuid>`.
pub fn call_id() -> String {
    format!("call-{}", crate::util::format_uuid(crate::util::new_uuid()))
}

/// `{["index":i,]"id":…,"type":"function","function":{"name":…,"arguments":…}}`.
fn tool_call(out: &mut Vec<u8>, index: Option<u32>, id: &str, name: &str, arguments: &str) {
    out.push(b'{');
    if let Some(i) = index {
        out.extend_from_slice(b"\"index\":");
        index_number(out, i);
        out.push(b',');
    }
    out.extend_from_slice(b"\"id\":");
    string(out, id);
    out.extend_from_slice(b",\"type\":\"function\",\"function\":{\"name\":");
    string(out, name);
    out.extend_from_slice(b",\"arguments\":");
    string(out, arguments);
    out.extend_from_slice(b"}}");
}

/// A streamed chat chunk with tool call `call` of choice `index`: a whole call (or the first
/// piece of one) when `start` gives its id and name, else more of its arguments; `role` adds
/// the assistant's role (the first chunk of a forced call).
#[allow(clippy::too_many_arguments)]
pub fn chat_tool_chunk_at(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    index: u32,
    call: u32,
    start: Option<(&str, &str)>,
    arguments: &str,
    role: bool,
) {
    chunk_open(out, meta, index);
    out.extend_from_slice(b"\"content\":\"\",\"tool_calls\":[");
    match start {
        Some((id, name)) => tool_call(out, Some(call), id, name, arguments),
        None => {
            out.extend_from_slice(b"{\"index\":");
            index_number(out, call);
            out.extend_from_slice(b",\"function\":{\"arguments\":");
            string(out, arguments);
            out.extend_from_slice(b"}}");
        }
    }
    out.push(b']');
    if role {
        out.extend_from_slice(b",\"role\":\"assistant\"");
    }
    chunk_close(out, meta, None, None);
}

/// `event: tool_call_dispatch` (`--enable-streaming-tool-dispatch`): a parsed call, whole,
/// ahead of its chunk.
pub fn tool_call_dispatch(out: &mut Vec<u8>, choice: u32, call: u32, id: &str, name: &str, arguments: &str) {
    out.extend_from_slice(b"event: tool_call_dispatch\ndata: {\"choice_index\":");
    index_number(out, choice);
    out.extend_from_slice(b",\"tool_call\":");
    tool_call(out, Some(call), id, name, arguments);
    out.extend_from_slice(b"}\n\n");
}

/// `event: reasoning_dispatch` (`--enable-streaming-reasoning-dispatch`): a choice's whole
/// reasoning, once it ends.
pub fn reasoning_dispatch(out: &mut Vec<u8>, choice: u32, field: &str, reasoning: &str) {
    out.extend_from_slice(b"event: reasoning_dispatch\ndata: {\"index\":");
    index_number(out, choice);
    out.extend_from_slice(b",\"");
    out.extend_from_slice(field.as_bytes());
    out.extend_from_slice(b"\":");
    string(out, reasoning);
    out.extend_from_slice(b"}\n\n");
}

/// A chat chunk up to the opening of its delta object.
fn chunk_open(out: &mut Vec<u8>, meta: &Meta<'_>, index: u32) {
    out.extend_from_slice(b"data: {\"id\":");
    out.extend_from_slice(&meta.id_json);
    out.extend_from_slice(b",\"choices\":[{\"index\":");
    index_number(out, index);
    out.extend_from_slice(b",\"delta\":{");
}

/// A chat chunk from the end of its delta object.
fn chunk_close(out: &mut Vec<u8>, meta: &Meta<'_>, finish_reason: Option<&str>, logprobs: Option<&[u8]>) {
    out.extend_from_slice(b"},\"finish_reason\":");
    opt_string(out, finish_reason);
    logprobs_field(out, logprobs);
    tail(out, meta);
    out.extend_from_slice(b",\"object\":\"chat.completion.chunk\"}\n\n");
}

/// A choice index: almost always 0, written without formatting.
#[inline]
fn index_number(out: &mut Vec<u8>, index: u32) {
    match index {
        0 => out.push(b'0'),
        i => uint(out, u64::from(i)),
    }
}

/// The usage event of a streamed chat completion (`stream_options.include_usage`).
pub fn chat_usage_chunk(out: &mut Vec<u8>, meta: &Meta<'_>, usage: &Usage) {
    chat_usage_chunk_with(out, meta, usage, None)
}

/// [`chat_usage_chunk`] with the reasoning tokens a reasoning parser counted.
pub fn chat_usage_chunk_with(out: &mut Vec<u8>, meta: &Meta<'_>, usage: &Usage, reasoning_tokens: Option<u32>) {
    out.extend_from_slice(b"data: {\"id\":");
    out.extend_from_slice(&meta.id_json);
    out.extend_from_slice(b",\"choices\":[]");
    tail(out, meta);
    out.extend_from_slice(b",\"object\":\"chat.completion.chunk\",\"usage\":");
    usage_json_with(out, usage, false, reasoning_tokens);
    out.extend_from_slice(b"}\n\n");
}

/// A whole text completion of one choice.
pub fn completion(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    text: &str,
    finish_reason: Option<&str>,
    usage: &Usage,
    logprobs: Option<&[u8]>,
) {
    let choice =
        Choice { index: 0, text, finish_reason, logprobs: logprobs.map(<[u8]>::to_vec), reasoning: None, parsed: None };
    completion_choices(out, meta, std::slice::from_ref(&choice), usage);
}

/// A whole text completion.
pub fn completion_choices(out: &mut Vec<u8>, meta: &Meta<'_>, choices: &[Choice<'_>], usage: &Usage) {
    out.extend_from_slice(b"{\"id\":");
    out.extend_from_slice(&meta.id_json);
    out.extend_from_slice(b",\"choices\":[");
    for (i, c) in choices.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        out.extend_from_slice(b"{\"text\":");
        string(out, c.text);
        out.extend_from_slice(b",\"index\":");
        uint(out, u64::from(c.index));
        completion_logprobs(out, c.logprobs.as_deref());
        out.extend_from_slice(b",\"finish_reason\":");
        opt_string(out, c.finish_reason);
        out.push(b'}');
    }
    out.push(b']');
    tail(out, meta);
    out.extend_from_slice(b",\"system_fingerprint\":null,\"object\":\"text_completion\",\"usage\":");
    usage_json(out, usage, true);
    out.push(b'}');
}

/// One SSE event of a streamed text completion; `usage` only on the usage event.
pub fn completion_chunk(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    text: Option<&str>,
    finish_reason: Option<&str>,
    usage: Option<&Usage>,
    logprobs: Option<&[u8]>,
) {
    completion_chunk_at(out, meta, 0, text, finish_reason, usage, logprobs)
}

/// [`completion_chunk`] of the choice with `index`.
pub fn completion_chunk_at(
    out: &mut Vec<u8>,
    meta: &Meta<'_>,
    index: u32,
    text: Option<&str>,
    finish_reason: Option<&str>,
    usage: Option<&Usage>,
    logprobs: Option<&[u8]>,
) {
    out.extend_from_slice(b"data: {\"id\":");
    out.extend_from_slice(&meta.id_json);
    match text {
        Some(t) => {
            out.extend_from_slice(b",\"choices\":[{\"text\":");
            string(out, t);
            out.extend_from_slice(b",\"index\":");
            index_number(out, index);
            completion_logprobs(out, logprobs);
            if let Some(f) = finish_reason {
                out.extend_from_slice(b",\"finish_reason\":");
                string(out, f);
            }
            out.extend_from_slice(b"}]");
        }
        None => out.extend_from_slice(b",\"choices\":[]"),
    }
    tail(out, meta);
    out.extend_from_slice(b",\"system_fingerprint\":null,\"object\":\"text_completion\",\"usage\":");
    match usage {
        Some(u) => usage_json(out, u, true),
        None => out.extend_from_slice(b"null"),
    }
    out.extend_from_slice(b"}\n\n");
}

/// The end of every stream.
pub const DONE: &[u8] = b"data: [DONE]\n\n";

/// The clean end of a stream the server stops before its answer is complete (the drain's
/// grace period is over): an error event, then [`DONE`].
pub const SHUTTING_DOWN: &[u8] =
    b"data: {\"error\":{\"message\":\"Service is shutting down\",\"type\":\"service_unavailable\",\"code\":503}}\n\ndata: [DONE]\n\n";

/// An error event inside a stream that already started (then [`DONE`]).
pub fn stream_error(out: &mut Vec<u8>, message: &str, kind: &str, code: u16) {
    out.extend_from_slice(b"data: {\"error\":{\"message\":");
    string(out, message);
    out.extend_from_slice(b",\"type\":");
    string(out, kind);
    let _ = write!(out, ",\"code\":{code}}}}}\n\n");
}

#[cfg(test)]
mod tests {
    use super::*;

    // Bodies recorded from the real Dynamo 1.6.1 frontend serving a dynamo.mocker worker.
    fn meta_chat() -> Meta<'static> {
        Meta::new("chatcmpl-3cc46b44-df49-4f1f-91c8-cb96532f7986", 1795300247, "/work/observe/qwen3")
    }

    #[test]
    fn strings_and_numbers_as_serde_json_writes_them() {
        let samples = ["", "plain", " héllo 世界", "quote\"", "back\\slash", "tab\t", "nl\n", "\u{1}", "\u{7f}", "/"];
        for s in samples {
            let mut out = Vec::new();
            string(&mut out, s);
            assert_eq!(out, serde_json::to_vec(s).unwrap(), "{s:?}");
        }
        for n in [0, 7, 10, 1795300247, u64::MAX] {
            let mut out = Vec::new();
            uint(&mut out, n);
            assert_eq!(out, n.to_string().into_bytes());
        }
    }

    proptest::proptest! {
        #[test]
        fn any_string_as_serde_json_writes_it(s in "\\PC*|[\\x00-\\x7f]{0,20}") {
            let mut out = Vec::new();
            string(&mut out, &s);
            proptest::prop_assert_eq!(out, serde_json::to_vec(&s).unwrap());
        }
    }

    #[test]
    fn whole_chat_matches_dynamo() {
        let mut out = Vec::new();
        let usage = Usage { prompt_tokens: 9, completion_tokens: 5, cached_tokens: Some(0) };
        chat_completion(&mut out, &meta_chat(), " indponent requireaturestruct", Some("length"), &usage, None);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"id":"chatcmpl-3cc46b44-df49-4f1f-91c8-cb96532f7986","choices":[{"index":0,"message":{"content":" indponent requireaturestruct","refusal":null,"role":"assistant"},"finish_reason":"length","logprobs":null}],"created":1795300247,"model":"/work/observe/qwen3","object":"chat.completion","usage":{"prompt_tokens":9,"completion_tokens":5,"total_tokens":14,"prompt_tokens_details":{"cached_tokens":0}}}"#
        );
    }

    #[test]
    fn streamed_chat_matches_dynamo() {
        let meta = Meta::new("chatcmpl-28d321bd-0979-4d38-8155-89e6aa674ce1", 1795300258, "/work/observe/qwen3");
        let mut out = Vec::new();
        chat_chunk(&mut out, &meta, Some("oot"), true, None, None);
        chat_chunk(&mut out, &meta, Some("from"), false, None, None);
        chat_chunk(&mut out, &meta, None, false, Some("length"), None);
        chat_usage_chunk(&mut out, &meta, &Usage { prompt_tokens: 9, completion_tokens: 3, cached_tokens: Some(0) });
        out.extend_from_slice(DONE);
        let want = concat!(
            "data: {\"id\":\"chatcmpl-28d321bd-0979-4d38-8155-89e6aa674ce1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"oot\",\"role\":\"assistant\"},\"finish_reason\":null,\"logprobs\":null}],\"created\":1795300258,\"model\":\"/work/observe/qwen3\",\"object\":\"chat.completion.chunk\"}\n\n",
            "data: {\"id\":\"chatcmpl-28d321bd-0979-4d38-8155-89e6aa674ce1\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"from\"},\"finish_reason\":null,\"logprobs\":null}],\"created\":1795300258,\"model\":\"/work/observe/qwen3\",\"object\":\"chat.completion.chunk\"}\n\n",
            "data: {\"id\":\"chatcmpl-28d321bd-0979-4d38-8155-89e6aa674ce1\",\"choices\":[{\"index\":0,\"delta\":{},\"finish_reason\":\"length\",\"logprobs\":null}],\"created\":1795300258,\"model\":\"/work/observe/qwen3\",\"object\":\"chat.completion.chunk\"}\n\n",
            "data: {\"id\":\"chatcmpl-28d321bd-0979-4d38-8155-89e6aa674ce1\",\"choices\":[],\"created\":1795300258,\"model\":\"/work/observe/qwen3\",\"object\":\"chat.completion.chunk\",\"usage\":{\"prompt_tokens\":9,\"completion_tokens\":3,\"total_tokens\":12,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n",
            "data: [DONE]\n\n",
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn completions_match_dynamo() {
        let meta = Meta::new("cmpl-7ac8c5ce-029e-4f39-9303-f03d976f1f0b", 1795300261, "/work/observe/qwen3");
        let mut out = Vec::new();
        completion(
            &mut out,
            &meta,
            " used specypes que",
            Some("length"),
            &Usage { prompt_tokens: 1, completion_tokens: 4, cached_tokens: Some(0) },
            None,
        );
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"id":"cmpl-7ac8c5ce-029e-4f39-9303-f03d976f1f0b","choices":[{"text":" used specypes que","index":0,"finish_reason":"length"}],"created":1795300261,"model":"/work/observe/qwen3","system_fingerprint":null,"object":"text_completion","usage":{"prompt_tokens":1,"completion_tokens":4,"total_tokens":5,"prompt_tokens_details":{"audio_tokens":null,"cached_tokens":0}}}"#
        );
        let meta = Meta::new("cmpl-45b4ecf2-68ff-43cd-ad95-e95e8c7edd07", 1795300261, "/work/observe/qwen3");
        let mut out = Vec::new();
        completion_chunk(&mut out, &meta, Some("ook"), None, None, None);
        completion_chunk(&mut out, &meta, Some(""), Some("length"), None, None);
        let want = concat!(
            "data: {\"id\":\"cmpl-45b4ecf2-68ff-43cd-ad95-e95e8c7edd07\",\"choices\":[{\"text\":\"ook\",\"index\":0}],\"created\":1795300261,\"model\":\"/work/observe/qwen3\",\"system_fingerprint\":null,\"object\":\"text_completion\",\"usage\":null}\n\n",
            "data: {\"id\":\"cmpl-45b4ecf2-68ff-43cd-ad95-e95e8c7edd07\",\"choices\":[{\"text\":\"\",\"index\":0,\"finish_reason\":\"length\"}],\"created\":1795300261,\"model\":\"/work/observe/qwen3\",\"system_fingerprint\":null,\"object\":\"text_completion\",\"usage\":null}\n\n",
        );
        assert_eq!(String::from_utf8(out).unwrap(), want);
    }

    #[test]
    fn error_event_shape() {
        let mut out = Vec::new();
        stream_error(&mut out, "Service temporarily unavailable", "service_unavailable", 503);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "data: {\"error\":{\"message\":\"Service temporarily unavailable\",\"type\":\"service_unavailable\",\"code\":503}}\n\n"
        );
    }
}
