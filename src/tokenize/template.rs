//! Chat templates rendered the way Hugging Face transformers' `apply_chat_template` renders
//! them, with minijinja.
//!
//! What transformers does, and how it is mirrored here:
//! * Jinja environment with `trim_blocks` and `lstrip_blocks`, loop controls, no trailing
//!   newline kept → the same minijinja settings;
//! * Python string methods (`.strip()`, `.split()`, `.startswith()`, `.items()`, …) → the
//!   pycompat method callback of minijinja-contrib;
//! * `tojson` is `json.dumps(x, ensure_ascii=False, indent, separators, sort_keys)` → our own
//!   filter (minijinja's escapes `<>&` and spaces differently), see [`super::pyjson`];
//! * `{{ value }}` prints Python's `str()` (`True`, `None`, `{'a': 1}`) → a custom formatter;
//! * globals `raise_exception(msg)`, `strftime_now(fmt)`, `namespace`, `dict`;
//! * `{% generation %}…{% endgeneration %}` (assistant masks) → the tags are removed;
//! * the render variables: `messages` (keys whose value is null removed, reasoning fields
//!   aliased as `thinking` and `reasoning_content`), `tools`, `documents`,
//!   `add_generation_prompt`, the tokenizer's named special tokens, then the request's extra
//!   template arguments (which win);
//! * `continue_final_message`: a marker is appended to the final message, the output is cut at
//!   the marker (and right-trimmed when the template trimmed the marker's trailing space).

use std::collections::BTreeMap;
use std::time::{SystemTime, UNIX_EPOCH};

use minijinja::value::{Kwargs, Value as JValue};
use minijinja::{Environment, Error as JError, ErrorKind};
use serde_json::{Map, Value};

use super::native::{Native, Role, Turn};
use super::pyjson;

const TEMPLATE_NAME: &str = "chat";
const CONTINUE_TAG: &str = "CONTINUE_FINAL_MESSAGE_TAG ";
const REASONING_FIELDS: [&str; 3] = ["reasoning_content", "thinking", "reasoning"];
/// Template instructions one render may run (minijinja's fuel): a template that loops
/// without end (nested `range` loops run 10^10 times) is stopped with an error instead of
/// holding its shard (a few seconds at most: 6 s in the fuzzer's build on a loaded core).
/// A real template spends one per expression or statement, a few hundred a message at
/// most, so tens of thousands of messages fit.
pub const RENDER_FUEL: u64 = 20_000_000;
/// Bytes one render may write: a template that prints without end is stopped with an error
/// instead of growing the prompt until memory runs out.
pub const MAX_RENDER_BYTES: usize = 256 << 20;

/// A compiled chat template.
pub struct ChatTemplate {
    env: Environment<'static>,
    source: String,
    native: Option<Native>,
    /// The template mentions the `developer` role (gpt-oss's does; most do not).
    developer: bool,
}

impl std::fmt::Debug for ChatTemplate {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ChatTemplate").field("bytes", &self.source.len()).finish()
    }
}

/// What one render needs.
#[derive(Clone, Copy, Debug)]
pub struct RenderArgs<'a> {
    /// The conversation: an array of message objects.
    pub messages: &'a [Value],
    pub tools: Option<&'a Value>,
    pub documents: Option<&'a Value>,
    pub add_generation_prompt: bool,
    pub continue_final_message: bool,
    /// The tokenizer's named special tokens (`bos_token`, `eos_token`, …).
    pub special_tokens: &'a BTreeMap<String, String>,
    /// Extra template variables from the request (`chat_template_args` / `_kwargs`).
    pub extra: Option<&'a Map<String, Value>>,
    /// The time `strftime_now` reports (seconds since the epoch); `None` for the real clock.
    pub now: Option<u64>,
}

impl<'a> RenderArgs<'a> {
    /// A conversation and nothing else (no tools, documents or extra arguments), with the
    /// generation prompt, the clock at `now`.
    pub fn conversation(
        messages: &'a [Value],
        special_tokens: &'a BTreeMap<String, String>,
        now: Option<u64>,
    ) -> RenderArgs<'a> {
        RenderArgs {
            messages,
            tools: None,
            documents: None,
            add_generation_prompt: true,
            continue_final_message: false,
            special_tokens,
            extra: None,
            now,
        }
    }
}

/// Why a render failed; the message is meant for the client (a 400).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RenderError(pub String);

impl std::fmt::Display for RenderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

/// Remove `{% generation %}` / `{% endgeneration %}` tags (with their whitespace control).
fn strip_generation_tags(source: &str) -> String {
    let mut out = String::with_capacity(source.len());
    let mut rest = source;
    while let Some(start) = rest.find("{%") {
        let Some(len) = rest[start..].find("%}") else { break };
        let tag = &rest[start..start + len + 2];
        let inner =
            tag.trim_start_matches("{%").trim_end_matches("%}").trim_matches(|c: char| c == '-' || c.is_whitespace());
        out.push_str(&rest[..start]);
        if inner != "generation" && inner != "endgeneration" {
            out.push_str(tag);
        }
        rest = &rest[start + len + 2..];
    }
    out.push_str(rest);
    out
}

fn to_json(v: &JValue) -> Result<Value, JError> {
    serde_json::to_value(v).map_err(|e| JError::new(ErrorKind::InvalidOperation, format!("not JSON-like: {e}")))
}

/// The `tojson` filter: Python's `json.dumps` with transformers' defaults.
fn tojson(value: &JValue, kwargs: Kwargs) -> Result<JValue, JError> {
    let mut opts = pyjson::DumpOptions::default();
    if let Some(indent) = kwargs.get::<Option<JValue>>("indent")? {
        opts.indent = if let Some(n) = indent.as_i64() {
            Some(" ".repeat(n.max(0) as usize))
        } else {
            indent.as_str().map(str::to_string)
        };
    }
    if let Some(seps) = kwargs.get::<Option<JValue>>("separators")? {
        let parts: Vec<String> = seps.try_iter()?.map(|p| p.as_str().unwrap_or("").to_string()).collect();
        if let [a, b] = parts.as_slice() {
            opts.separators = Some((a.clone(), b.clone()));
        }
    }
    opts.sort_keys = kwargs.get::<Option<bool>>("sort_keys")?.unwrap_or(false);
    opts.ensure_ascii = kwargs.get::<Option<bool>>("ensure_ascii")?.unwrap_or(false);
    kwargs.assert_all_used()?;
    Ok(JValue::from(pyjson::dumps(&to_json(value)?, &opts)))
}

fn raise_exception(message: String) -> Result<JValue, JError> {
    Err(JError::new(ErrorKind::InvalidOperation, message))
}

impl ChatTemplate {
    /// Compile `source`; a syntax error is reported with its line.
    pub fn compile(source: &str) -> Result<ChatTemplate, String> {
        let mut env = Environment::new();
        env.set_fuel(Some(RENDER_FUEL));
        let syntax = minijinja::syntax::SyntaxConfig::builder()
            .trim_blocks(true)
            .lstrip_blocks(true)
            .keep_trailing_newline(false)
            .build()
            .map_err(|e| e.to_string())?;
        env.set_syntax(syntax);
        env.set_unknown_method_callback(minijinja_contrib::pycompat::unknown_method_callback);
        env.add_filter("tojson", tojson);
        env.add_function("raise_exception", raise_exception);
        // `{{ value }}` prints Python's str(): strings as they are, the rest as repr.
        env.set_formatter(|out, _state, value| {
            if value.is_undefined() {
                return Ok(());
            }
            if let Some(s) = value.as_str() {
                return out.write_str(s).map_err(JError::from);
            }
            let mut text = String::new();
            pyjson::to_str(&mut text, &to_json(value)?);
            out.write_str(&text).map_err(JError::from)
        });
        let cleaned = strip_generation_tags(source);
        env.add_template_owned(TEMPLATE_NAME, cleaned.clone()).map_err(|e| e.to_string())?;
        let native = Native::recognise(&cleaned);
        let developer = cleaned.contains("developer");
        let mut template = ChatTemplate { env, source: cleaned, native, developer };
        if let Some(n) = native {
            if let Err(e) = template.probe_native(n) {
                crate::log::warn(&format!("chat template: the native {n:?} renderer is not used: {e}"));
                template.native = None;
            }
        }
        Ok(template)
    }

    /// Whether the template handles `developer` messages itself (its text names the role);
    /// otherwise the preprocessor hands them over as `system` messages.
    pub fn knows_developer_role(&self) -> bool {
        self.developer
    }

    /// The native renderer for this template, if its text is recognised ([`super::native`]).
    pub fn native(&self) -> Option<Native> {
        self.native
    }

    /// Render probe conversations with the engine and natively; any difference is an error.
    fn probe_native(&self, native: Native) -> Result<(), String> {
        const TEXTS: [&str; 4] = ["Hi there.", " <tool_response>x</tool_response> ", "", "a\n\n{{ b }}</think>ü"];
        let conversations: [&[(Role, usize)]; 4] = [
            &[(Role::User, 0)],
            &[(Role::System, 0), (Role::User, 1)],
            &[(Role::User, 1), (Role::System, 2), (Role::User, 3), (Role::User, 0)],
            &[(Role::System, 3), (Role::System, 1), (Role::User, 2)],
        ];
        let thinking: [Option<Value>; 3] = [None, Some(Value::Bool(false)), Some(Value::Bool(true))];
        let no_tokens = BTreeMap::new();
        for conv in conversations {
            let turns = conv.iter().map(|&(role, i)| Turn { role, content: TEXTS[i] });
            let json: Vec<Value> = turns
                .clone()
                .map(|t| {
                    let role = if t.role == Role::System { "system" } else { "user" };
                    serde_json::json!({"role": role, "content": t.content})
                })
                .collect();
            for add_generation_prompt in [true, false] {
                for think in &thinking {
                    let mut extra = Map::new();
                    if let Some(v) = think {
                        extra.insert("enable_thinking".into(), v.clone());
                    }
                    let engine = self
                        .render(&RenderArgs {
                            messages: &json,
                            tools: None,
                            documents: None,
                            add_generation_prompt,
                            continue_final_message: false,
                            special_tokens: &no_tokens,
                            extra: Some(&extra),
                            now: Some(0),
                        })
                        .map_err(|e| e.0)?;
                    let direct = native.render(turns.clone(), add_generation_prompt, &extra);
                    if direct.as_deref() != Some(engine.as_str()) {
                        return Err(format!("{json:?} renders {engine:?}, natively {direct:?}"));
                    }
                }
            }
        }
        Ok(())
    }

    /// Render a conversation to the prompt text with the template engine (the native
    /// renderer is chosen by the caller, which has the typed messages).
    pub fn render(&self, args: &RenderArgs<'_>) -> Result<String, RenderError> {
        if args.messages.is_empty() {
            return Err(RenderError(
                "Cannot apply chat template to an empty conversation. Provide at least one message.".into(),
            ));
        }
        if args.continue_final_message && args.add_generation_prompt {
            return Err(RenderError(
                "continue_final_message and add_generation_prompt are not compatible. Use continue_final_message \
                 when you want the model to continue the final message, and add_generation_prompt when you want to \
                 add a header that will prompt it to start a new assistant message instead."
                    .into(),
            ));
        }
        // Only continuing the final message edits a message; otherwise each is converted once,
        // straight from the request's JSON, without a prepared copy.
        let (messages, final_text) = if args.continue_final_message {
            let mut prepared: Vec<Value> = args.messages.iter().map(prepare_message).collect::<Result<_, _>>()?;
            let text = self.tag_final_message(&mut prepared)?;
            (prepared.iter().map(jinja).collect::<Vec<_>>(), Some(text))
        } else {
            (args.messages.iter().map(jinja_message).collect::<Result<Vec<_>, _>>()?, None)
        };

        // The context is built as template values directly (not serialized into them through
        // serde, then merged with the clock function): a third of a small render's cost was
        // that conversion. Later keys win, as in a dict: the request's extra arguments over
        // the special tokens, the fixed names over both.
        let now =
            args.now.unwrap_or_else(|| SystemTime::now().duration_since(UNIX_EPOCH).map(|d| d.as_secs()).unwrap_or(0));
        let strftime_now =
            JValue::from_function(move |fmt: String| -> Result<String, JError> { Ok(strftime(&fmt, now)) });
        let mut ctx = JMap::with_capacity(args.special_tokens.len() + 8);
        for (k, v) in args.special_tokens {
            ctx.insert(JValue::from(k.as_str()), JValue::from(v.as_str()));
        }
        if let Some(extra) = args.extra {
            for (k, v) in extra {
                ctx.insert(JValue::from(k.as_str()), jinja(v));
            }
        }
        ctx.insert(JValue::from("messages"), JValue::from(messages));
        ctx.insert(JValue::from("tools"), args.tools.map_or(JValue::from(()), jinja));
        ctx.insert(JValue::from("documents"), args.documents.map_or(JValue::from(()), jinja));
        ctx.insert(JValue::from("add_generation_prompt"), JValue::from(args.add_generation_prompt));
        ctx.insert(JValue::from("strftime_now"), strftime_now);
        let env_ctx = JValue::from_object(ctx);
        let tmpl = self.env.get_template(TEMPLATE_NAME).map_err(|e| RenderError(e.to_string()))?;
        let mut out = Bounded(Vec::with_capacity(4096));
        let rendered = match tmpl.render_captured_to(env_ctx, &mut out) {
            Ok(_) => String::from_utf8(out.0).map_err(|e| RenderError(e.to_string()))?,
            Err(_) if out.0.len() > MAX_RENDER_BYTES => {
                return Err(RenderError(format!("the chat template renders more than {MAX_RENDER_BYTES} bytes")))
            }
            Err(e) => return Err(RenderError(render_error_text(&e))),
        };
        match final_text {
            None => Ok(rendered),
            Some(final_text) => cut_at_tag(rendered, &final_text),
        }
    }

    /// Append the continuation marker to the final message's text; returns that text.
    fn tag_final_message(&self, messages: &mut [Value]) -> Result<String, RenderError> {
        let last = messages
            .last_mut()
            .and_then(Value::as_object_mut)
            .ok_or_else(|| RenderError("continue_final_message is set but the conversation is empty!".into()))?;
        let Some(content) = last.get_mut("content") else {
            return Err(RenderError(
                "continue_final_message is set but the final message has no \"content\" to continue!".into(),
            ));
        };
        if !self.source.contains("content") {
            return Err(RenderError(
                "continue_final_message is set to \"content\" but this is not an accepted field in the chat_template"
                    .into(),
            ));
        }
        match content {
            Value::String(s) => {
                let text = s.clone();
                s.push_str(CONTINUE_TAG);
                Ok(text)
            }
            Value::Array(parts) => {
                for part in parts.iter_mut().rev() {
                    if let Some(Value::String(t)) = part.get_mut("text") {
                        let text = t.clone();
                        t.push_str(CONTINUE_TAG);
                        return Ok(text);
                    }
                }
                Err(RenderError(
                    "continue_final_message is set but we could not find any text to continue in the final message!"
                        .into(),
                ))
            }
            _ => Err(RenderError("continue_final_message needs text content in the final message".into())),
        }
    }
}

fn cut_at_tag(rendered: String, final_text: &str) -> Result<String, RenderError> {
    let tag = CONTINUE_TAG.trim();
    if !rendered.contains(final_text.trim()) || !rendered.contains(tag) {
        return Err(RenderError(
            "continue_final_message is set but the final message does not appear in the chat after applying the \
             chat template!"
                .into(),
        ));
    }
    let loc = rendered.rfind(tag).unwrap_or(0);
    if rendered[loc..].starts_with(CONTINUE_TAG) {
        Ok(rendered[..loc].to_string())
    } else {
        Ok(rendered[..loc].trim_end().to_string())
    }
}

/// A template map: what minijinja itself builds when it serializes a map (insertion order).
type JMap = indexmap::IndexMap<JValue, JValue>;

/// A JSON value as a template value (what serializing it into one gives, without serde).
fn jinja(v: &Value) -> JValue {
    match v {
        Value::Null => JValue::from(()),
        Value::Bool(b) => JValue::from(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => JValue::from(i),
            (None, Some(u)) => JValue::from(u),
            _ => JValue::from(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => JValue::from(s.as_str()),
        Value::Array(a) => JValue::from(a.iter().map(jinja).collect::<Vec<_>>()),
        Value::Object(m) => {
            JValue::from_object(m.iter().map(|(k, v)| (JValue::from(k.as_str()), jinja(v))).collect::<JMap>())
        }
    }
}

/// A message's entries as transformers hands it to the template: null-valued keys dropped,
/// reasoning aliased under `thinking` (first) and `reasoning_content`. A key given twice
/// keeps its first position and its last value (as a dict, and both map types here, do).
fn message_entries<'a>(m: &'a Value, mut put: impl FnMut(&'a str, &'a Value)) -> Result<(), RenderError> {
    let Some(obj) = m.as_object() else {
        return Err(RenderError(format!("Chat messages should be dicts, but got {m}")));
    };
    let reasoning = REASONING_FIELDS.iter().find_map(|k| obj.get(*k).filter(|v| !v.is_null()));
    if let Some(r) = reasoning {
        put("thinking", r);
    }
    for (k, v) in obj {
        if !v.is_null() {
            put(k, v);
        }
    }
    if let Some(r) = reasoning {
        put("reasoning_content", r);
    }
    Ok(())
}

/// The message as JSON (for [`ChatTemplate::tag_final_message`], which edits it).
fn prepare_message(m: &Value) -> Result<Value, RenderError> {
    let mut out = Map::with_capacity(m.as_object().map_or(0, |o| o.len()) + 2);
    message_entries(m, |k, v| {
        out.insert(k.to_string(), v.clone());
    })?;
    Ok(Value::Object(out))
}

/// The message as a template value, converted straight from the request's JSON.
fn jinja_message(m: &Value) -> Result<JValue, RenderError> {
    let mut out = JMap::with_capacity(m.as_object().map_or(0, |o| o.len()) + 2);
    message_entries(m, |k, v| {
        out.insert(JValue::from(k), jinja(v));
    })?;
    Ok(JValue::from_object(out))
}

/// A render's output, refused past [`MAX_RENDER_BYTES`] (the byte that crosses the limit is
/// kept, so the caller can tell this refusal from the template's own errors).
struct Bounded(Vec<u8>);

impl std::io::Write for Bounded {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        if self.0.len() + buf.len() > MAX_RENDER_BYTES {
            self.0.extend_from_slice(&buf[..(MAX_RENDER_BYTES + 1 - self.0.len()).min(buf.len())]);
            return Err(std::io::Error::other("render output limit"));
        }
        self.0.extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// `raise_exception` messages come through as they are; other errors with their detail.
fn render_error_text(e: &JError) -> String {
    match e.kind() {
        ErrorKind::InvalidOperation => e.detail().map(str::to_string).unwrap_or_else(|| e.to_string()),
        _ => e.to_string(),
    }
}

/// The subset of C `strftime` that chat templates use (`%d %b %Y` and friends), in UTC.
pub fn strftime(fmt: &str, secs: u64) -> String {
    const DAYS: [&str; 7] = ["Thursday", "Friday", "Saturday", "Sunday", "Monday", "Tuesday", "Wednesday"];
    const MONTHS: [&str; 12] = [
        "January",
        "February",
        "March",
        "April",
        "May",
        "June",
        "July",
        "August",
        "September",
        "October",
        "November",
        "December",
    ];
    let days = (secs / 86_400) as i64;
    let rem = secs % 86_400;
    let (y, m, d) = crate::util::date::civil_from_days(days);
    let (hh, mm, ss) = (rem / 3600, (rem % 3600) / 60, rem % 60);
    let month = MONTHS[(m - 1) as usize];
    let wday = DAYS[(days % 7) as usize];
    let mut out = String::with_capacity(fmt.len() + 16);
    let mut chars = fmt.chars();
    while let Some(c) = chars.next() {
        if c != '%' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('d') => out.push_str(&format!("{d:02}")),
            Some('-') => match chars.next() {
                Some('d') => out.push_str(&d.to_string()),
                Some('m') => out.push_str(&m.to_string()),
                Some(o) => out.push_str(&format!("%-{o}")),
                None => out.push_str("%-"),
            },
            Some('m') => out.push_str(&format!("{m:02}")),
            Some('Y') => out.push_str(&y.to_string()),
            Some('y') => out.push_str(&format!("{:02}", y % 100)),
            Some('b') | Some('h') => out.push_str(&month[..3]),
            Some('B') => out.push_str(month),
            Some('a') => out.push_str(&wday[..3]),
            Some('A') => out.push_str(wday),
            Some('H') => out.push_str(&format!("{hh:02}")),
            Some('M') => out.push_str(&format!("{mm:02}")),
            Some('S') => out.push_str(&format!("{ss:02}")),
            Some('%') => out.push('%'),
            Some(o) => {
                out.push('%');
                out.push(o);
            }
            None => out.push('%'),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn messages_convert_as_prepared_copies_do() {
        let cases = [
            serde_json::json!({"role": "user", "content": "hi", "name": null}),
            serde_json::json!({"role": "assistant", "content": "x", "reasoning_content": "r1", "tool_calls": null}),
            serde_json::json!({"thinking": "t", "role": "assistant", "reasoning": "r", "content": null}),
            serde_json::json!({"role": "assistant", "reasoning": "r", "content": [{"type": "text", "text": "a"}]}),
            serde_json::json!({"role": "tool", "content": "{}", "extra": {"n": 1, "f": 1.5, "z": null, "b": true}}),
            serde_json::json!({"role": "user", "content": "q", "reasoning_content": null, "thinking": "t2"}),
        ];
        for m in cases {
            let direct = jinja_message(&m).unwrap();
            let copied = jinja(&prepare_message(&m).unwrap());
            // Debug output shows keys in order, so this checks order as well as values.
            assert_eq!(format!("{direct:?}"), format!("{copied:?}"), "{m}");
        }
        assert!(jinja_message(&serde_json::json!("text")).is_err());
    }

    fn render(src: &str, msgs: Value) -> Result<String, RenderError> {
        let t = ChatTemplate::compile(src).unwrap();
        let msgs = msgs.as_array().unwrap().clone();
        let special = BTreeMap::from([("bos_token".to_string(), "<s>".to_string())]);
        t.render(&RenderArgs {
            messages: &msgs,
            tools: None,
            documents: None,
            add_generation_prompt: true,
            continue_final_message: false,
            special_tokens: &special,
            extra: None,
            now: Some(1_721_952_000),
        })
    }

    #[test]
    fn python_flavoured_output() {
        let out = render(
            "{{ bos_token }}{% for m in messages %}{{ m.role.upper() }}:{{ m.content.strip() }}|{{ m.meta }}|{{ m.meta | tojson }}\n{% endfor %}{{ strftime_now('%d %b %Y') }}",
            serde_json::json!([{"role": "user", "content": "  hi  ", "meta": {"a": true, "b": null, "c": 1.0}}]),
        )
        .unwrap();
        assert_eq!(
            out,
            "<s>USER:hi|{'a': True, 'b': None, 'c': 1.0}|{\"a\": true, \"b\": null, \"c\": 1.0}\n26 Jul 2024"
        );
    }

    #[test]
    fn raise_exception_message_reaches_the_caller() {
        let e =
            render("{{ raise_exception('Conversation roles must alternate') }}", serde_json::json!([{"role": "user"}]))
                .unwrap_err();
        assert_eq!(e.0, "Conversation roles must alternate");
    }

    #[test]
    fn generation_tags_are_removed() {
        assert_eq!(strip_generation_tags("a{% generation %}b{%- endgeneration -%}c"), "abc");
    }
}
