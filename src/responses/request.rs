//! The Responses request body (`POST /v1/responses`) as 1.6.1 reads it: `input` required (a
//! string or a list of items), unknown top-level fields ignored, items matched against the
//! shapes 1.6.1 accepts (an item matching none fails the body with 1.6.1's untagged-enum
//! error, line and column included), the four fields it refuses with 501.
//!
//! Pure data and serde; runs on the shard thread of the request.

use serde::de::{self, Deserializer, SeqAccess, Visitor};
use serde::Deserialize;
use serde_json::{Map, Value};

use crate::error::{Error, Kind};

/// A Responses request (1.6.1's `NvCreateResponse`: the serde name shows in its errors).
#[derive(Debug, Deserialize)]
#[serde(rename = "NvCreateResponse")]
pub struct NvCreateResponse {
    #[serde(default)]
    pub model: Option<String>,
    pub input: Input,
    #[serde(default)]
    pub instructions: Option<String>,
    #[serde(default)]
    pub tools: Option<Vec<Value>>,
    #[serde(default)]
    pub tool_choice: Option<ToolChoiceParam>,
    #[serde(default)]
    pub max_output_tokens: Option<u32>,
    #[serde(default)]
    pub temperature: Option<f32>,
    #[serde(default)]
    pub top_p: Option<f32>,
    #[serde(default)]
    pub stream: Option<bool>,
    #[serde(default)]
    pub text: Option<Value>,
    #[serde(default)]
    pub reasoning: Option<Value>,
    #[serde(default)]
    pub metadata: Option<Map<String, Value>>,
    #[serde(default)]
    pub store: Option<bool>,
    #[serde(default)]
    pub parallel_tool_calls: Option<bool>,
    #[serde(default)]
    pub truncation: Option<Value>,
    #[serde(default)]
    pub service_tier: Option<Value>,
    #[serde(default)]
    pub prompt_cache_key: Option<String>,
    #[serde(default)]
    pub safety_identifier: Option<String>,
    #[serde(default)]
    pub user: Option<String>,
    #[serde(default)]
    pub top_logprobs: Option<u32>,
    #[serde(default)]
    pub background: Option<bool>,
    #[serde(default)]
    pub previous_response_id: Option<String>,
    #[serde(default)]
    pub max_tool_calls: Option<u32>,
    #[serde(default)]
    pub prompt: Option<Value>,
    /// Dynamo's extensions, passed to the chat request as they are.
    #[serde(default)]
    pub nvext: Option<Value>,
    #[serde(default)]
    pub chat_template_args: Option<Value>,
    #[serde(default)]
    pub thinking_token_budget: Option<u32>,
}

/// `input`: a string (one user message) or a list of items.
#[derive(Debug)]
pub enum Input {
    Text(String),
    Items(Vec<InputItemWire>),
}

impl<'de> Deserialize<'de> for Input {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Input, D::Error> {
        struct V;
        const WRONG: &str = "input must be a string or an array of input items";
        impl<'de> Visitor<'de> for V {
            type Value = Input;
            fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
                f.write_str(WRONG)
            }
            fn visit_str<E: de::Error>(self, s: &str) -> Result<Input, E> {
                Ok(Input::Text(s.to_owned()))
            }
            fn visit_string<E: de::Error>(self, s: String) -> Result<Input, E> {
                Ok(Input::Text(s))
            }
            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Input, A::Error> {
                let mut items = Vec::new();
                while let Some(item) = seq.next_element::<InputItemWire>()? {
                    items.push(item);
                }
                Ok(Input::Items(items))
            }
            fn visit_bool<E: de::Error>(self, _: bool) -> Result<Input, E> {
                Err(E::custom(WRONG))
            }
            fn visit_i64<E: de::Error>(self, _: i64) -> Result<Input, E> {
                Err(E::custom(WRONG))
            }
            fn visit_u64<E: de::Error>(self, _: u64) -> Result<Input, E> {
                Err(E::custom(WRONG))
            }
            fn visit_f64<E: de::Error>(self, _: f64) -> Result<Input, E> {
                Err(E::custom(WRONG))
            }
            fn visit_unit<E: de::Error>(self) -> Result<Input, E> {
                Err(E::custom(WRONG))
            }
            fn visit_map<A: de::MapAccess<'de>>(self, _: A) -> Result<Input, A::Error> {
                Err(de::Error::custom(WRONG))
            }
        }
        d.deserialize_any(V)
    }
}

/// One item of `input`; an item that is none of these fails the body (1.6.1's name).
#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum InputItemWire {
    /// `{"role", "content"}`, `type: "message"` optional; content a string or input parts.
    Easy(EasyMessage),
    /// A typed assistant output message (`output_text` / `refusal` parts).
    Output(OutputMessage),
    /// A typed item: calls, their outputs, reasoning, references.
    Item(Item),
}

#[derive(Debug, Deserialize)]
pub enum MessageTag {
    #[serde(rename = "message")]
    Message,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
    System,
    Developer,
}

#[derive(Debug, Deserialize)]
pub struct EasyMessage {
    #[serde(default, rename = "type")]
    pub tag: Option<MessageTag>,
    pub role: Role,
    pub content: EasyContent,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum EasyContent {
    Text(String),
    Parts(Vec<InputPart>),
}

/// A part of a user, system or developer message (or of a call's output).
#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum InputPart {
    #[serde(rename = "input_text")]
    Text { text: String },
    #[serde(rename = "input_image")]
    Image {
        #[serde(default)]
        image_url: Option<String>,
        #[serde(default)]
        file_id: Option<String>,
        #[serde(default)]
        detail: Option<String>,
    },
    #[serde(rename = "input_file")]
    File {},
}

#[derive(Debug, Deserialize)]
pub enum AssistantRole {
    #[serde(rename = "assistant")]
    Assistant,
}

#[derive(Debug, Deserialize)]
pub struct OutputMessage {
    #[serde(rename = "type")]
    pub tag: MessageTag,
    pub role: AssistantRole,
    pub content: Vec<OutputPart>,
    #[serde(default)]
    pub id: Option<String>,
    #[serde(default)]
    pub status: Option<String>,
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum OutputPart {
    #[serde(rename = "output_text")]
    Text { text: String },
    #[serde(rename = "refusal")]
    Refusal { refusal: String },
}

#[derive(Debug, Deserialize)]
#[serde(tag = "type")]
pub enum Item {
    #[serde(rename = "function_call")]
    FunctionCall {
        call_id: String,
        name: String,
        arguments: String,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        status: Option<String>,
    },
    #[serde(rename = "function_call_output")]
    FunctionCallOutput {
        call_id: String,
        output: CallOutput,
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        status: Option<String>,
    },
    #[serde(rename = "reasoning")]
    Reasoning {
        #[serde(default)]
        id: Option<String>,
        #[serde(default)]
        summary: Vec<TextOf>,
        #[serde(default)]
        content: Option<Vec<TextOf>>,
        #[serde(default)]
        encrypted_content: Option<String>,
    },
    #[serde(rename = "item_reference")]
    ItemReference { id: String },
}

/// A summary or reasoning-text part: only its text is used.
#[derive(Debug, Deserialize)]
pub struct TextOf {
    pub text: String,
}

#[derive(Debug, Deserialize)]
#[serde(untagged)]
pub enum CallOutput {
    Text(String),
    Parts(Vec<InputPart>),
}

/// `tool_choice` (1.6.1's name shows in its error).
#[derive(Debug, Clone, Deserialize, serde::Serialize)]
#[serde(untagged)]
pub enum ToolChoiceParam {
    Mode(ToolChoiceMode),
    Function(NamedFunction),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum ToolChoiceMode {
    None,
    Auto,
    Required,
}

#[derive(Debug, Clone, Deserialize, serde::Serialize)]
pub struct NamedFunction {
    #[serde(rename = "type")]
    pub tag: FunctionTag,
    pub name: String,
}

#[derive(Debug, Clone, Copy, Deserialize, serde::Serialize)]
pub enum FunctionTag {
    #[serde(rename = "function")]
    Function,
}

/// A function tool of the request.
#[derive(Debug, Clone, Deserialize)]
pub struct FunctionTool {
    pub name: String,
    #[serde(default)]
    pub description: Option<String>,
    #[serde(default)]
    pub parameters: Option<Value>,
    #[serde(default)]
    pub strict: Option<bool>,
}

/// Parse a body: 1.6.1's deserialization errors, then its 501 refusals.
pub fn parse(body: &[u8]) -> Result<NvCreateResponse, Error> {
    let r: NvCreateResponse = serde_json::from_slice(body)
        .map_err(|e| Error::new(Kind::BadRequest, format!("{}{e}", crate::openai::DESERIALIZE_PREFIX)))?;
    let refused = if r.background == Some(true) {
        Some("background: true")
    } else if r.previous_response_id.is_some() {
        Some("previous_response_id")
    } else if r.max_tool_calls.is_some() {
        Some("max_tool_calls")
    } else if r.prompt.as_ref().is_some_and(|p| !p.is_null()) {
        Some("prompt")
    } else {
        None
    };
    if let Some(field) = refused {
        return Err(Error::new(Kind::NotImplemented, format!("Validation: `{field}` is not supported.")));
    }
    if r.max_output_tokens == Some(0) {
        return Err(Error::new(Kind::BadRequest, "Validation: Max tokens must be greater than 0, got 0"));
    }
    Ok(r)
}

/// The function tools of a request; any other tool type is refused as 1.6.1 refuses it.
pub fn function_tools(tools: &[Value]) -> Result<Vec<FunctionTool>, Error> {
    tools
        .iter()
        .map(|t| match t.get("type").and_then(Value::as_str) {
            Some("function") => serde_json::from_value::<FunctionTool>(t.clone())
                .map_err(|e| Error::new(Kind::BadRequest, format!("{}{e}", crate::openai::DESERIALIZE_PREFIX))),
            Some(other) => Err(Error::new(Kind::BadRequest, format!("Unsupported Responses tools type '{other}'"))),
            None => {
                Err(Error::new(Kind::BadRequest, format!("{}missing field `type`", crate::openai::DESERIALIZE_PREFIX)))
            }
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn err(body: &str) -> (u16, String) {
        let e = parse(body.as_bytes()).unwrap_err();
        (e.status(), e.message().to_string())
    }

    #[test]
    fn shapes_and_refusals() {
        assert!(matches!(parse(br#"{"model":"m","input":"hi","bogus":1}"#).unwrap().input, Input::Text(_)));
        let r = parse(
            br#"{"model":"m","input":[{"role":"user","content":"a"},
            {"type":"message","role":"assistant","content":[{"type":"output_text","text":"b","annotations":[]}]},
            {"type":"function_call","call_id":"c","name":"f","arguments":"{}"},
            {"type":"function_call_output","call_id":"c","output":"r"},
            {"type":"reasoning","summary":[{"type":"summary_text","text":"s"}]},
            {"type":"item_reference","id":"msg_1"}]}"#,
        )
        .unwrap();
        let Input::Items(items) = r.input else { panic!() };
        assert_eq!(items.len(), 6);
        assert!(err(r#"{"model":"m","input":42}"#).1.contains("input must be a string or an array of input items"));
        assert!(err(r#"{"model":"m","input":[{"role":"wizard","content":"x"}]}"#)
            .1
            .contains("data did not match any variant of untagged enum InputItemWire"));
        assert!(err(r#"{"model":"m","input":[{"role":"assistant","content":[{"type":"output_text","text":"x"}]}]}"#)
            .1
            .contains("InputItemWire"));
        assert!(err(r#"{"model":"m"}"#).1.contains("missing field `input`"));
        assert!(err("[]").1.contains("expected struct NvCreateResponse"));
        assert!(err(r#"{"model":"m","input":"x","tool_choice":"sometimes"}"#).1.contains("ToolChoiceParam"));
        assert_eq!(
            err(r#"{"model":"m","input":"x","previous_response_id":"resp_1"}"#),
            (501, "Validation: `previous_response_id` is not supported.".into())
        );
        assert_eq!(err(r#"{"model":"m","input":"x","background":true}"#).0, 501);
        assert!(parse(br#"{"model":"m","input":"x","background":false,"previous_response_id":null}"#).is_ok());
    }
}
