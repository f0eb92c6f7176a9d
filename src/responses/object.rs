//! The response object (`"object": "response"`): the request parameters it echoes, its ids,
//! status and usage, in 1.6.1's key orders (the whole body's, non-null members first; the
//! streamed objects', every member in a fixed order). Runs on the shard thread of the request.

use serde_json::{json, Map, Value};

use super::convert::f32_json;
use super::request::{FunctionTool, NvCreateResponse, ToolChoiceParam};
use crate::infer::Usage;

/// `<prefix>` and 32 hex digits of a fresh v4 UUID.
pub fn new_id(prefix: &str) -> String {
    let mut id = String::with_capacity(prefix.len() + 32);
    id.push_str(prefix);
    id.extend(crate::util::format_uuid(crate::util::new_uuid()).chars().filter(|c| *c != '-'));
    id
}

/// A generated call's `call_id`: `call-` and a hyphenated v4 UUID.
pub fn new_call_id() -> String {
    format!("call-{}", crate::util::format_uuid(crate::util::new_uuid()))
}

/// What a response object repeats of its request.
#[derive(Debug, Clone)]
pub struct Echo {
    pub model: String,
    pub instructions: Value,
    pub max_output_tokens: Value,
    pub metadata: Value,
    pub parallel_tool_calls: bool,
    pub prompt_cache_key: Value,
    pub reasoning: Value,
    pub safety_identifier: Value,
    pub service_tier: Value,
    pub store: bool,
    pub temperature: Value,
    pub text: Value,
    pub tool_choice: Value,
    pub tools: Value,
    pub top_p: Value,
    pub truncation: Value,
}

fn or_null<T: Into<Value>>(v: Option<T>) -> Value {
    v.map_or(Value::Null, Into::into)
}

impl Echo {
    pub fn of(r: &NvCreateResponse, tools: &[FunctionTool]) -> Echo {
        let tools = tools
            .iter()
            .map(|t| {
                let mut o = Map::new();
                o.insert("type".into(), "function".into());
                o.insert("name".into(), t.name.clone().into());
                o.insert("parameters".into(), t.parameters.clone().unwrap_or(Value::Null));
                o.insert("strict".into(), t.strict.unwrap_or(true).into());
                if let Some(d) = &t.description {
                    o.insert("description".into(), d.clone().into());
                }
                Value::Object(o)
            })
            .collect();
        Echo {
            model: r.model.clone().unwrap_or_default(),
            instructions: or_null(r.instructions.clone()),
            max_output_tokens: or_null(r.max_output_tokens),
            metadata: r.metadata.clone().map_or_else(|| json!({}), Value::Object),
            parallel_tool_calls: r.parallel_tool_calls.unwrap_or(true),
            prompt_cache_key: or_null(r.prompt_cache_key.clone()),
            reasoning: r.reasoning.clone().unwrap_or(Value::Null),
            safety_identifier: or_null(r.safety_identifier.clone()),
            service_tier: r.service_tier.clone().filter(|v| !v.is_null()).unwrap_or_else(|| "auto".into()),
            store: r.store.unwrap_or(false),
            temperature: r.temperature.map_or_else(|| json!(1.0), f32_json),
            text: r.text.clone().filter(|v| !v.is_null()).unwrap_or_else(|| json!({"format": {"type": "text"}})),
            tool_choice: match &r.tool_choice {
                None => "auto".into(),
                Some(ToolChoiceParam::Mode(m)) => serde_json::to_value(m).unwrap_or(Value::Null),
                Some(ToolChoiceParam::Function(f)) => json!({"type": "function", "name": f.name}),
            },
            tools: Value::Array(tools),
            top_p: r.top_p.map_or_else(|| json!(1.0), f32_json),
            truncation: r.truncation.clone().filter(|v| !v.is_null()).unwrap_or_else(|| "disabled".into()),
        }
    }
}

/// Where a response stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Status {
    InProgress,
    Completed,
    /// Cut short; the reason (`max_output_tokens`, `content_filter`).
    Incomplete(&'static str),
    Failed,
}

impl Status {
    pub fn name(self) -> &'static str {
        match self {
            Status::InProgress => "in_progress",
            Status::Completed => "completed",
            Status::Incomplete(_) => "incomplete",
            Status::Failed => "failed",
        }
    }
}

/// A response object's own state.
pub struct State<'a> {
    pub id: &'a str,
    pub created_at: u64,
    pub status: Status,
    pub output: Vec<Value>,
    pub usage: Option<Value>,
    pub error: Option<Value>,
}

/// The usage object.
pub fn usage(u: &Usage, reasoning_tokens: u32) -> Value {
    json!({
        "input_tokens": u.prompt_tokens,
        "input_tokens_details": {"cached_tokens": u.cached_tokens.unwrap_or(0)},
        "output_tokens": u.completion_tokens,
        "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
        "total_tokens": u.prompt_tokens + u.completion_tokens,
    })
}

/// The response object; `streamed`: the key order of the objects inside stream events (every
/// member), else the whole body's (non-null members first, then the nulls by name).
pub fn response(echo: &Echo, s: State<'_>, streamed: bool) -> Value {
    let done = s.status == Status::Completed;
    let incomplete = match s.status {
        Status::Incomplete(reason) => json!({"reason": reason}),
        _ => Value::Null,
    };
    let members: [(&str, Value); 35] = [
        ("background", false.into()),
        ("billing", Value::Null),
        ("conversation", Value::Null),
        ("created_at", s.created_at.into()),
        ("completed_at", if done { s.created_at.into() } else { Value::Null }),
        ("error", s.error.unwrap_or(Value::Null)),
        ("id", s.id.into()),
        ("incomplete_details", incomplete),
        ("instructions", echo.instructions.clone()),
        ("max_output_tokens", echo.max_output_tokens.clone()),
        ("max_tool_calls", Value::Null),
        ("metadata", echo.metadata.clone()),
        ("model", echo.model.clone().into()),
        ("object", "response".into()),
        ("output", Value::Array(s.output)),
        ("parallel_tool_calls", echo.parallel_tool_calls.into()),
        ("previous_response_id", Value::Null),
        ("prompt", Value::Null),
        ("prompt_cache_key", echo.prompt_cache_key.clone()),
        ("prompt_cache_retention", Value::Null),
        ("reasoning", echo.reasoning.clone()),
        ("safety_identifier", echo.safety_identifier.clone()),
        ("service_tier", echo.service_tier.clone()),
        ("status", s.status.name().into()),
        ("temperature", echo.temperature.clone()),
        ("text", echo.text.clone()),
        ("tool_choice", echo.tool_choice.clone()),
        ("tools", echo.tools.clone()),
        ("top_logprobs", 0.into()),
        ("top_p", echo.top_p.clone()),
        ("truncation", echo.truncation.clone()),
        ("usage", s.usage.unwrap_or(Value::Null)),
        ("presence_penalty", json!(0.0)),
        ("frequency_penalty", json!(0.0)),
        ("store", echo.store.into()),
    ];
    let mut o = Map::with_capacity(members.len());
    if streamed {
        for (k, v) in members {
            o.insert(k.into(), v);
        }
        return Value::Object(o);
    }
    // The whole body: non-null members in 1.6.1's order, the nulls by name, then the three
    // it always writes last.
    const TAIL: [&str; 3] = ["presence_penalty", "frequency_penalty", "store"];
    let (mut nulls, mut rest): (Vec<_>, Vec<_>) = members.into_iter().partition(|(_, v)| v.is_null());
    let tail: Vec<_> = rest.iter().filter(|(k, _)| TAIL.contains(k)).cloned().collect();
    rest.retain(|(k, _)| !TAIL.contains(k));
    rest.sort_by_key(|(k, _)| if *k == "completed_at" { "created_at~" } else { *k });
    nulls.sort_by_key(|(k, _)| *k);
    for (k, v) in rest.into_iter().chain(nulls).chain(tail) {
        o.insert(k.into(), v);
    }
    Value::Object(o)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_and_the_whole_key_order() {
        let id = new_id("resp_");
        assert_eq!(id.len(), 37);
        assert!(id[5..].bytes().all(|b| b.is_ascii_hexdigit()));
        assert!(crate::util::parse_uuid(&new_call_id()[5..]).is_some());
        let r = super::super::request::parse(br#"{"model":"m","input":"x"}"#).unwrap();
        let echo = Echo::of(&r, &[]);
        let st = State { id: &id, created_at: 7, status: Status::Completed, output: vec![], usage: None, error: None };
        let v = response(&echo, st, false);
        let keys: Vec<&str> = v.as_object().unwrap().keys().map(String::as_str).collect();
        assert_eq!(&keys[..4], ["background", "created_at", "completed_at", "id"]);
        assert_eq!(&keys[keys.len() - 3..], ["presence_penalty", "frequency_penalty", "store"]);
        assert_eq!(v["completed_at"], 7);
        assert_eq!(v["temperature"], 1.0);
    }
}
