//! A Responses request as the chat request it stands for (its JSON, which the OpenAI adapter
//! then parses and validates as any `/v1/chat/completions` body): `instructions` and the
//! leading system/developer messages merged into one system message (joined by a blank line,
//! as 1.6.1), `function_call` items as the `tool_calls` of an assistant turn,
//! `function_call_output` items as `tool` messages, `reasoning` items as the
//! `reasoning_content` of the assistant turn that follows, function tools as chat tools.
//!
//! Unlike 1.6.1, an assistant turn made of calls only has an empty text (not a null one), so
//! that templates testing its content render it: the usual tool loop `[user, function_call,
//! function_call_output]` works. Runs on the shard thread of the request.

use serde_json::{json, Map, Value};

use super::request::{
    CallOutput, EasyContent, FunctionTool, InputItemWire, InputPart, Item, NvCreateResponse, OutputPart, Role,
    ToolChoiceParam,
};
use crate::error::{Error, Kind};

/// An `f32` as the JSON number it was written as (`0.3`, not `0.30000001192092896`).
pub fn f32_json(v: f32) -> Value {
    v.to_string().parse::<f64>().ok().and_then(serde_json::Number::from_f64).map_or(Value::Null, Value::Number)
}

/// The chat request body of `r`; `tools` are its function tools.
pub fn to_chat(r: &NvCreateResponse, tools: &[FunctionTool]) -> Result<Value, Error> {
    let mut chat = Map::new();
    chat.insert("model".into(), Value::String(r.model.clone().unwrap_or_default()));
    chat.insert("messages".into(), Value::Array(messages(r)?));
    if !tools.is_empty() {
        let tools: Vec<Value> = tools.iter().map(chat_tool).collect();
        chat.insert("tools".into(), Value::Array(tools));
    }
    if let Some(choice) = &r.tool_choice {
        let v = match choice {
            ToolChoiceParam::Mode(m) => serde_json::to_value(m).unwrap_or(Value::Null),
            ToolChoiceParam::Function(f) => json!({"type": "function", "function": {"name": f.name}}),
        };
        chat.insert("tool_choice".into(), v);
    }
    if let Some(n) = r.max_output_tokens {
        chat.insert("max_completion_tokens".into(), n.into());
    }
    if let Some(t) = r.temperature {
        chat.insert("temperature".into(), f32_json(t));
    }
    if let Some(p) = r.top_p {
        chat.insert("top_p".into(), f32_json(p));
    }
    if r.stream == Some(true) {
        chat.insert("stream".into(), Value::Bool(true));
        chat.insert("stream_options".into(), json!({"include_usage": true}));
    }
    if let Some(p) = r.parallel_tool_calls {
        chat.insert("parallel_tool_calls".into(), Value::Bool(p));
    }
    if let Some(format) = r.text.as_ref().and_then(|t| t.get("format")) {
        if let Some(rf) = response_format(format) {
            chat.insert("response_format".into(), rf);
        }
    }
    for (key, v) in [("nvext", &r.nvext), ("chat_template_args", &r.chat_template_args)] {
        if let Some(v) = v.as_ref().filter(|v| !v.is_null()) {
            chat.insert(key.into(), v.clone());
        }
    }
    if let Some(b) = r.thinking_token_budget {
        chat.insert("thinking_token_budget".into(), b.into());
    }
    if let Some(u) = &r.user {
        chat.insert("user".into(), Value::String(u.clone()));
    }
    Ok(Value::Object(chat))
}

/// `text.format` as a chat `response_format` (`text`: none).
fn response_format(format: &Value) -> Option<Value> {
    match format.get("type")?.as_str()? {
        "json_object" => Some(json!({"type": "json_object"})),
        "json_schema" => {
            let mut schema = Map::new();
            schema.insert("name".into(), format.get("name").cloned().unwrap_or_else(|| "response".into()));
            for key in ["description", "schema", "strict"] {
                if let Some(v) = format.get(key).filter(|v| !v.is_null()) {
                    schema.insert(key.into(), v.clone());
                }
            }
            Some(json!({"type": "json_schema", "json_schema": schema}))
        }
        _ => None,
    }
}

/// A function tool as a chat tool.
fn chat_tool(t: &FunctionTool) -> Value {
    let mut f = Map::new();
    f.insert("name".into(), Value::String(t.name.clone()));
    if let Some(d) = &t.description {
        f.insert("description".into(), Value::String(d.clone()));
    }
    if let Some(p) = &t.parameters {
        f.insert("parameters".into(), p.clone());
    }
    if let Some(s) = t.strict {
        f.insert("strict".into(), Value::Bool(s));
    }
    json!({"type": "function", "function": f})
}

fn file_refused() -> Error {
    Error::new(
        Kind::BadRequest,
        "Validation: Failed to convert responses request: File input content is not yet supported",
    )
}

/// The text of input parts joined by `sep`, or chat content parts when there is an image.
fn parts_content(parts: &[InputPart], sep: &str) -> Result<Value, Error> {
    let has_image = parts.iter().any(|p| matches!(p, InputPart::Image { .. }));
    if !has_image {
        let mut texts = Vec::with_capacity(parts.len());
        for p in parts {
            match p {
                InputPart::Text { text } => texts.push(text.as_str()),
                InputPart::File {} => return Err(file_refused()),
                InputPart::Image { .. } => {}
            }
        }
        return Ok(Value::String(texts.join(sep)));
    }
    let mut out = Vec::with_capacity(parts.len());
    for p in parts {
        match p {
            InputPart::Text { text } => out.push(json!({"type": "text", "text": text})),
            InputPart::Image { image_url: Some(url), detail, .. } => {
                let mut image = json!({"url": url});
                if let Some(d) = detail {
                    image["detail"] = Value::String(d.clone());
                }
                out.push(json!({"type": "image_url", "image_url": image}));
            }
            InputPart::Image { .. } => {
                return Err(Error::new(Kind::BadRequest, "Invalid request"));
            }
            InputPart::File {} => return Err(file_refused()),
        }
    }
    Ok(Value::Array(out))
}

/// A content's text (system and assistant parts are joined with nothing, user parts by a
/// newline, as 1.6.1 joins them).
fn content_value(content: &EasyContent, role: Role) -> Result<Value, Error> {
    match content {
        EasyContent::Text(s) => Ok(Value::String(s.clone())),
        EasyContent::Parts(parts) => parts_content(parts, if role == Role::User { "\n" } else { "" }),
    }
}

fn as_text(v: Value) -> String {
    match v {
        Value::String(s) => s,
        other => other.to_string(),
    }
}

/// The chat messages of `r`'s instructions and input.
fn messages(r: &NvCreateResponse) -> Result<Vec<Value>, Error> {
    let mut system: Vec<String> = r.instructions.iter().cloned().collect();
    let mut out: Vec<Value> = Vec::new();
    let mut leading = true;
    let mut reasoning: Option<String> = None;
    let items: &[InputItemWire] = match &r.input {
        super::request::Input::Text(s) => {
            out.push(json!({"role": "user", "content": s}));
            &[]
        }
        super::request::Input::Items(items) => items,
    };
    for item in items {
        match item {
            InputItemWire::Easy(m) if matches!(m.role, Role::System | Role::Developer) => {
                let text = as_text(content_value(&m.content, m.role)?);
                if leading {
                    system.push(text);
                } else {
                    out.push(json!({"role": "system", "content": text}));
                }
            }
            InputItemWire::Easy(m) if m.role == Role::User => {
                leading = false;
                flush_reasoning(&mut out, &mut reasoning);
                out.push(json!({"role": "user", "content": content_value(&m.content, Role::User)?}));
            }
            InputItemWire::Easy(m) => {
                leading = false;
                let text = as_text(content_value(&m.content, Role::Assistant)?);
                assistant_text(&mut out, &mut reasoning, text);
            }
            InputItemWire::Output(m) => {
                leading = false;
                let text: String = m
                    .content
                    .iter()
                    .map(|p| match p {
                        OutputPart::Text { text } => text.as_str(),
                        OutputPart::Refusal { .. } => "",
                    })
                    .collect();
                assistant_text(&mut out, &mut reasoning, text);
            }
            InputItemWire::Item(Item::FunctionCall { call_id, name, arguments, .. }) => {
                leading = false;
                let call = json!({"id": call_id, "type": "function",
                    "function": {"name": name, "arguments": arguments}});
                match out.last_mut() {
                    Some(last) if is_assistant(last) && reasoning.is_none() => {
                        let calls = last.as_object_mut().and_then(|o| {
                            o.entry("tool_calls").or_insert_with(|| Value::Array(Vec::new())).as_array_mut()
                        });
                        if let Some(calls) = calls {
                            calls.push(call);
                        }
                    }
                    _ => {
                        let mut turn = json!({"role": "assistant", "content": "", "tool_calls": [call]});
                        if let Some(text) = reasoning.take() {
                            turn["reasoning_content"] = Value::String(text);
                        }
                        out.push(turn);
                    }
                }
            }
            InputItemWire::Item(Item::FunctionCallOutput { call_id, output, .. }) => {
                leading = false;
                flush_reasoning(&mut out, &mut reasoning);
                let text = match output {
                    CallOutput::Text(s) => s.clone(),
                    CallOutput::Parts(parts) => as_text(parts_content(parts, "")?),
                };
                out.push(json!({"role": "tool", "tool_call_id": call_id, "content": text}));
            }
            InputItemWire::Item(Item::Reasoning { summary, content, .. }) => {
                leading = false;
                let texts: Vec<&str> = match content.as_deref() {
                    Some(c) if !c.is_empty() => c.iter().map(|t| t.text.as_str()).collect(),
                    _ => summary.iter().map(|t| t.text.as_str()).collect(),
                };
                let text = texts.join("\n");
                match reasoning.as_mut() {
                    Some(r) => {
                        r.push('\n');
                        r.push_str(&text);
                    }
                    None => reasoning = Some(text),
                }
            }
            InputItemWire::Item(Item::ItemReference { .. }) => {}
        }
    }
    flush_reasoning(&mut out, &mut reasoning);
    if !system.is_empty() {
        out.insert(0, json!({"role": "system", "content": system.join("\n\n")}));
    }
    if out.is_empty() {
        return Err(Error::new(Kind::BadRequest, "Messages array cannot be empty"));
    }
    Ok(out)
}

fn is_assistant(m: &Value) -> bool {
    m.get("role").and_then(Value::as_str) == Some("assistant")
}

/// An assistant turn's text: it joins a turn of calls only (a replay of an answer that listed
/// its calls first), else it is a turn of its own, with the reasoning before it.
fn assistant_text(out: &mut Vec<Value>, reasoning: &mut Option<String>, text: String) {
    if reasoning.is_none() {
        if let Some(last) = out.last_mut() {
            let empty = last.get("content").and_then(Value::as_str) == Some("");
            if is_assistant(last) && empty && last.get("tool_calls").is_some() {
                last["content"] = Value::String(text);
                return;
            }
        }
    }
    let mut turn = json!({"role": "assistant", "content": text});
    if let Some(r) = reasoning.take() {
        turn["reasoning_content"] = Value::String(r);
    }
    out.push(turn);
}

/// Reasoning no assistant turn followed: a turn of its own, with no text.
fn flush_reasoning(out: &mut Vec<Value>, reasoning: &mut Option<String>) {
    if let Some(r) = reasoning.take() {
        out.push(json!({"role": "assistant", "content": "", "reasoning_content": r}));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: &str) -> Value {
        let r = super::super::request::parse(body.as_bytes()).unwrap();
        let tools = super::super::request::function_tools(r.tools.as_deref().unwrap_or(&[])).unwrap();
        to_chat(&r, &tools).unwrap()
    }

    #[test]
    fn instructions_and_items() {
        let v = chat(
            r#"{"model":"m","instructions":"I","input":[{"role":"developer","content":"D"},
            {"role":"system","content":[{"type":"input_text","text":"S1"},{"type":"input_text","text":"S2"}]},
            {"role":"user","content":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]},
            {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
            {"type":"function_call_output","call_id":"c1","output":"R"},
            {"type":"reasoning","summary":[{"type":"summary_text","text":"T"}]},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"A"}]}],
            "max_output_tokens":5,"temperature":0.3}"#,
        );
        assert_eq!(
            v["messages"],
            json!([
                {"role": "system", "content": "I\n\nD\n\nS1S2"},
                {"role": "user", "content": "a\nb"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "f", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "c1", "content": "R"},
                {"role": "assistant", "content": "A", "reasoning_content": "T"},
            ])
        );
        assert_eq!(v["max_completion_tokens"], 5);
        assert_eq!(v["temperature"].to_string(), "0.3");
    }

    #[test]
    fn a_replay_with_the_call_first_joins_the_message() {
        let v = chat(
            r#"{"model":"m","input":[{"role":"user","content":"u"},
            {"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},
            {"role":"assistant","content":"Let me check."}],
            "tools":[{"type":"function","name":"f","parameters":{"type":"object"}}],"tool_choice":"auto"}"#,
        );
        assert_eq!(v["messages"][1]["content"], "Let me check.");
        assert_eq!(v["messages"].as_array().unwrap().len(), 2);
        assert_eq!(
            v["tools"][0],
            json!({"type": "function", "function": {"name": "f", "parameters": {"type": "object"}}})
        );
        assert_eq!(v["tool_choice"], "auto");
    }
}
