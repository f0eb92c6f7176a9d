//! Structured output: the `sampling_options.guided_decoding` a request asks for, built as
//! Dynamo 1.6.1 builds it (compared field by field against 1.6.1 by
//! `scripts/interop_fidelity.sh`).
//!
//! * `guided_json` / `guided_regex` / `guided_choice` / `guided_grammar` (with
//!   `guided_decoding_backend` and `guided_whitespace_pattern`, which modify a constraint and
//!   are dropped without one): at most one constraint, else 400 `Only one guided-decoding
//!   constraint can be set; received: json, regex`; a grammar nested deeper than 500 is
//!   refused.
//! * chat `response_format`: `json_object` is the schema `{"type":"object"}`, `json_schema`
//!   its `schema`; an explicit `guided_json` wins.
//! * chat `tool_choice` (without a structural-tag configuration, which 1.6.1 builds only
//!   for cards that ask for it): `"required"` is an array of calls — `{"type":"array",
//!   "minItems":1,"items":{"type":"object","anyOf":[{"properties":{"name":{"type":"string",
//!   "enum":[NAME]},"parameters":PARAMS},"required":["name","parameters"]},…]}}` with
//!   `"maxItems":1` when `parallel_tool_calls` is false and the tools' `$defs` merged at the
//!   root — and a named function is its `parameters` (the regex `\{\}` when they admit only
//!   the empty object). A forced tool choice replaces a `response_format` schema and cannot
//!   be combined with explicit guided decoding (400 `Invalid request`).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};

use super::chat::NvCreateChatCompletionRequest;
use super::chat_params::{ChatCompletionTool, ChatCompletionToolChoiceOption, FunctionObject, ResponseFormat};
use super::completions::NvCreateCompletionRequest;
use crate::error::{Error, Kind};
use crate::plane::payload::GuidedDecoding;

/// Deepest bracket nesting a `guided_grammar` may have.
const MAX_GRAMMAR_NESTING_DEPTH: usize = 500;

fn invalid(message: impl Into<String>) -> Error {
    Error::new(Kind::BadRequest, message.into())
}

/// The explicit `guided_*` fields, as both request types carry them.
struct Explicit<'a> {
    json: Option<&'a Value>,
    regex: Option<&'a String>,
    choice: Option<&'a Vec<String>>,
    grammar: Option<&'a String>,
    backend: Option<&'a String>,
    whitespace_pattern: Option<&'a String>,
}

impl Explicit<'_> {
    fn any(&self) -> bool {
        self.json.is_some()
            || self.regex.is_some()
            || self.choice.is_some_and(|c| !c.is_empty())
            || self.grammar.is_some()
    }
}

macro_rules! explicit {
    ($r:expr) => {
        Explicit {
            json: $r.guided_json.as_ref(),
            regex: $r.guided_regex.as_ref(),
            choice: $r.guided_choice.as_ref(),
            grammar: $r.guided_grammar.as_ref(),
            backend: $r.guided_decoding_backend.as_ref(),
            whitespace_pattern: $r.guided_whitespace_pattern.as_ref(),
        }
    };
}

/// A completion request's guided decoding.
pub fn completion(r: &NvCreateCompletionRequest) -> Result<Option<GuidedDecoding>, Error> {
    let e = explicit!(r);
    build(e.json.cloned(), &e)
}

/// A chat request's guided decoding: the explicit fields, `response_format`, `tool_choice`.
pub fn chat(r: &NvCreateChatCompletionRequest) -> Result<Option<GuidedDecoding>, Error> {
    let e = explicit!(r);
    let json = e.json.cloned().or_else(|| match &r.response_format {
        Some(ResponseFormat::JsonObject) => Some(json!({"type": "object"})),
        Some(ResponseFormat::JsonSchema { json_schema }) => {
            (!json_schema.schema.is_null()).then(|| json_schema.schema.clone())
        }
        _ => None,
    });
    let mut guided = build(json, &e)?;
    let forced = matches!(
        r.tool_choice,
        Some(ChatCompletionToolChoiceOption::Required | ChatCompletionToolChoiceOption::Named(_))
    );
    if !forced {
        return Ok(guided);
    }
    if e.any() {
        // 1.6.1 keeps the reason for its log ("guided decoding cannot be used in the same
        // request as tool_choice=\"required\" or a named tool_choice"); clients get this.
        return Err(invalid("Invalid request"));
    }
    let response_format = r.response_format.as_ref().is_some_and(|f| !matches!(f, ResponseFormat::Text));
    if let (true, Some(g)) = (response_format, guided.as_mut()) {
        // `response_format` constrains the assistant's content, not its tool calls.
        g.json = None;
    }
    let tools = r.tools.as_deref().unwrap_or(&[]);
    let g = guided.get_or_insert_with(GuidedDecoding::default);
    match &r.tool_choice {
        Some(ChatCompletionToolChoiceOption::Named(named)) => {
            let tool = tools.iter().find(|t| t.function.name == named.function.name).ok_or_else(|| {
                invalid(format!("tool named \"{}\" in tool_choice is not present in tools", named.function.name))
            })?;
            let parameters = parameters(&tool.function);
            if admits_only_empty_object(&parameters) {
                // A JSON schema allows whitespace between tokens, which greedy decoding
                // could emit until max_tokens: the one legal value, exactly.
                g.regex = Some(r"\{\}".to_string());
            } else {
                g.json = Some(parameters);
            }
        }
        _ => g.json = Some(required_schema(tools, r.parallel_tool_calls)?),
    }
    Ok(guided)
}

/// The guided decoding of the explicit fields (with `json` resolved); `None` without a
/// constraint (a backend or whitespace pattern alone is dropped).
fn build(json: Option<Value>, e: &Explicit<'_>) -> Result<Option<GuidedDecoding>, Error> {
    if json.is_none() && !e.any() {
        return Ok(None);
    }
    let choice = e.choice.filter(|c| !c.is_empty()).cloned();
    let set = [
        ("json", json.is_some()),
        ("regex", e.regex.is_some()),
        ("choice", choice.is_some()),
        ("grammar", e.grammar.is_some()),
    ];
    let named: Vec<&str> = set.iter().filter(|(_, on)| *on).map(|(n, _)| *n).collect();
    if named.is_empty() {
        return Ok(None);
    }
    if named.len() > 1 {
        return Err(invalid(format!("Only one guided-decoding constraint can be set; received: {}", named.join(", "))));
    }
    if let Some(g) = e.grammar {
        let depth = nesting_depth(g);
        if depth > MAX_GRAMMAR_NESTING_DEPTH {
            return Err(invalid(format!(
                "guided_grammar exceeds maximum nesting depth of {MAX_GRAMMAR_NESTING_DEPTH} (got {depth})"
            )));
        }
    }
    Ok(Some(GuidedDecoding {
        json,
        regex: e.regex.cloned(),
        choice,
        grammar: e.grammar.cloned(),
        backend: e.backend.cloned(),
        whitespace_pattern: e.whitespace_pattern.cloned(),
        structural_tag: None,
    }))
}

/// The deepest nesting of `( [ {` in `grammar`, counted over its raw bytes (quoted
/// terminals included: balanced quotes add nothing net).
fn nesting_depth(grammar: &str) -> usize {
    let (mut depth, mut max) = (0usize, 0usize);
    for b in grammar.bytes() {
        match b {
            b'(' | b'[' | b'{' => {
                depth += 1;
                max = max.max(depth);
            }
            b')' | b']' | b'}' => depth = depth.saturating_sub(1),
            _ => {}
        }
    }
    max
}

/// A function's parameter schema; a function without one takes an empty object.
fn parameters(f: &FunctionObject) -> Value {
    f.parameters.clone().unwrap_or_else(|| json!({"type": "object", "properties": {}}))
}

/// Whether `schema` admits exactly one document, `{}`: a closed object without properties
/// or required names, and no keyword that could mean more.
fn admits_only_empty_object(schema: &Value) -> bool {
    let Value::Object(map) = schema else { return false };
    if map.get("type").and_then(Value::as_str) != Some("object")
        || map.get("additionalProperties") != Some(&Value::Bool(false))
    {
        return false;
    }
    let properties_empty = match map.get("properties") {
        None => true,
        Some(Value::Object(p)) => p.is_empty(),
        Some(_) => false,
    };
    let required_empty = map.get("required").is_none_or(|r| r.as_array().is_some_and(Vec::is_empty));
    properties_empty
        && required_empty
        && map.iter().all(|(key, value)| {
            matches!(
                key.as_str(),
                "type"
                    | "properties"
                    | "required"
                    | "additionalProperties"
                    | "title"
                    | "description"
                    | "$comment"
                    | "default"
                    | "deprecated"
                    | "examples"
                    | "readOnly"
                    | "writeOnly"
            ) || (key == "minProperties" && value.as_u64() == Some(0))
                || (key == "maxProperties" && value.as_u64().is_some())
        })
}

/// `tool_choice: "required"`: an array of at least one call of the given tools.
fn required_schema(tools: &[ChatCompletionTool], parallel_tool_calls: Option<bool>) -> Result<Value, Error> {
    let mut defs: BTreeMap<String, Value> = BTreeMap::new();
    let mut any_of = Vec::with_capacity(tools.len());
    for tool in tools {
        let mut schema = parameters(&tool.function);
        // As serde_json's `remove` under `preserve_order` (a swap), so the remaining keys
        // keep the order 1.6.1 sends.
        let own = match &mut schema {
            Value::Object(obj) => obj.remove("$defs"),
            _ => None,
        };
        if let Some(own) = own {
            let Value::Object(own) = own else {
                return Err(invalid(format!("Invalid $defs in tool '{}': expected an object", tool.function.name)));
            };
            for (name, def) in own {
                match defs.get(&name) {
                    Some(existing) if *existing != def => {
                        return Err(invalid(format!(
                            "Conflicting $defs entry '{name}' in tool '{}'",
                            tool.function.name
                        )));
                    }
                    _ => {
                        defs.insert(name, def);
                    }
                }
            }
        }
        any_of.push(json!({
            "properties": {
                "name": {"type": "string", "enum": [tool.function.name]},
                "parameters": schema,
            },
            "required": ["name", "parameters"],
        }));
    }
    let mut result = Map::new();
    result.insert("type".into(), json!("array"));
    result.insert("minItems".into(), json!(1));
    result.insert("items".into(), json!({"type": "object", "anyOf": any_of}));
    if parallel_tool_calls == Some(false) {
        result.insert("maxItems".into(), json!(1));
    }
    if !defs.is_empty() {
        result.insert("$defs".into(), Value::Object(defs.into_iter().collect()));
    }
    Ok(Value::Object(result))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chat(body: Value) -> Result<Option<GuidedDecoding>, Error> {
        let r = crate::openai::parse_chat(&serde_json::to_vec(&body).unwrap())?;
        super::chat(&r)
    }

    fn base(extra: Value) -> Value {
        let mut v = json!({"model": "m", "messages": [{"role": "user", "content": "hi"}]});
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        v
    }

    fn tools() -> Value {
        json!([
            {"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}},
            {"type": "function", "function": {"name": "ping"}}
        ])
    }

    #[test]
    fn response_format_and_explicit_fields() {
        let g = chat(base(json!({"response_format": {"type": "json_object"}}))).unwrap().unwrap();
        assert_eq!(serde_json::to_value(&g).unwrap(), json!({"json": {"type": "object"}}));
        assert!(chat(base(json!({"response_format": {"type": "text"}}))).unwrap().is_none());
        let g =
            chat(base(json!({"response_format": {"type": "json_object"}, "guided_json": {"a": 1}}))).unwrap().unwrap();
        assert_eq!(g.json, Some(json!({"a": 1})));
        assert!(chat(base(json!({"guided_decoding_backend": "xgrammar"}))).unwrap().is_none());
        let e = chat(base(json!({"guided_json": {}, "guided_regex": "x"}))).unwrap_err();
        assert_eq!(e.message(), "Only one guided-decoding constraint can be set; received: json, regex");
        let deep = "(".repeat(501);
        assert!(chat(base(json!({"guided_grammar": deep}))).is_err());
    }

    #[test]
    fn forced_tool_choices() {
        let g = chat(base(json!({"tools": tools(), "tool_choice": "required", "parallel_tool_calls": false})))
            .unwrap()
            .unwrap();
        assert_eq!(
            serde_json::to_string(&g).unwrap(),
            r#"{"json":{"type":"array","minItems":1,"items":{"type":"object","anyOf":[{"properties":{"name":{"type":"string","enum":["get_weather"]},"parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}},"required":["name","parameters"]},{"properties":{"name":{"type":"string","enum":["ping"]},"parameters":{"type":"object","properties":{}}},"required":["name","parameters"]}]},"maxItems":1}}"#
        );
        let named = json!({"type": "function", "function": {"name": "get_weather"}});
        let g = chat(base(json!({"tools": tools(), "tool_choice": named}))).unwrap().unwrap();
        assert_eq!(g.json.unwrap()["required"], json!(["city"]));
        let empty = json!([{"type": "function", "function": {"name": "noop", "parameters": {"type": "object", "properties": {}, "additionalProperties": false}}}]);
        let named = json!({"type": "function", "function": {"name": "noop"}});
        let g = chat(base(json!({"tools": empty, "tool_choice": named}))).unwrap().unwrap();
        assert_eq!((g.json, g.regex.as_deref()), (None, Some(r"\{\}")));
        let e = chat(base(json!({"tools": tools(), "tool_choice": "required", "guided_regex": "x"}))).unwrap_err();
        assert_eq!((e.status(), e.message()), (400, "Invalid request"));
        let g = chat(base(
            json!({"tools": tools(), "tool_choice": "required", "response_format": {"type": "json_object"}}),
        ))
        .unwrap()
        .unwrap();
        assert_eq!(g.json.unwrap()["type"], "array");
        assert!(chat(base(json!({"tools": tools(), "tool_choice": "auto"}))).unwrap().is_none());
    }

    #[test]
    fn defs_are_merged_at_the_root() {
        let tools = json!([
            {"type": "function", "function": {"name": "a", "parameters": {"type": "object", "$defs": {"Z": {"type": "string"}}, "properties": {"x": {"$ref": "#/$defs/Z"}}, "required": ["x"]}}},
            {"type": "function", "function": {"name": "b", "parameters": {"type": "object", "properties": {}, "$defs": {"A": {"type": "integer"}}}}}
        ]);
        let g = chat(base(json!({"tools": tools, "tool_choice": "required"}))).unwrap().unwrap();
        let j = g.json.unwrap();
        assert_eq!(serde_json::to_string(&j["$defs"]).unwrap(), r#"{"A":{"type":"integer"},"Z":{"type":"string"}}"#);
        // The swap left by removing `$defs` from the first tool's keys.
        let keys: Vec<&String> =
            j["items"]["anyOf"][0]["properties"]["parameters"].as_object().unwrap().keys().collect();
        assert_eq!(keys, ["type", "required", "properties"]);
    }
}
