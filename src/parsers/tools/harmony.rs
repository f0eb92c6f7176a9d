//! gpt-oss's Harmony format: messages of channels. `analysis` is reasoning, `final` (and
//! `commentary` to no one) is content, `commentary to=functions.name` carries a call's
//! arguments up to `<|call|>`. Text outside any message is content.

use serde_json::Value;

use super::scan::{first_of, held_tail, is_name};
use super::{Call, Out};

const CHANNEL: &str = "<|channel|>";
const START: &str = "<|start|>";
const MESSAGE: &str = "<|message|>";
const CALL: &str = "<|call|>";
const END: &str = "<|end|>";
const RETURN: &str = "<|return|>";

/// Where the text stands.
#[derive(Debug, Default)]
pub struct State {
    mode: Mode,
}

#[derive(Debug, Default)]
enum Mode {
    /// Outside any message.
    #[default]
    Text,
    /// After `<|start|>`: the role, up to the channel or the message.
    Role,
    /// After `<|channel|>`: the header, up to `<|message|>`.
    Header,
    Reasoning,
    Content,
    /// The arguments of a call to this function.
    Call(String),
}

/// Feed `text` (the end of the text when `eof`), held text in `buf`.
pub fn push(st: &mut State, buf: &mut String, text: &str, out: &mut Out, eof: bool) {
    buf.push_str(text);
    let mut at = 0;
    loop {
        let rest = &buf[at..];
        if rest.is_empty() {
            break;
        }
        match &st.mode {
            Mode::Text | Mode::Reasoning | Mode::Content => {
                let ends: &[&str] = match st.mode {
                    Mode::Text => &[CHANNEL, START, MESSAGE],
                    _ => &[END, RETURN, CALL, START, CHANNEL],
                };
                let sink = match st.mode {
                    Mode::Reasoning => &mut out.reasoning,
                    _ => &mut out.content,
                };
                match first_of(rest, ends) {
                    Some((pos, m)) => {
                        sink.push_str(&rest[..pos]);
                        st.mode = match m {
                            CHANNEL => Mode::Header,
                            START => Mode::Role,
                            MESSAGE => Mode::Content,
                            _ => Mode::Text,
                        };
                        at += pos + m.len();
                    }
                    None => {
                        let keep = if eof { 0 } else { held_tail(rest, ends) };
                        sink.push_str(&rest[..rest.len() - keep]);
                        at += rest.len() - keep;
                        break;
                    }
                }
            }
            Mode::Role => match first_of(rest, &[CHANNEL, MESSAGE]) {
                Some((pos, m)) => {
                    st.mode = if m == CHANNEL { Mode::Header } else { Mode::Content };
                    at += pos + m.len();
                }
                None if eof => {
                    at = buf.len();
                }
                None => break,
            },
            Mode::Header => match rest.find(MESSAGE) {
                Some(pos) => {
                    st.mode = channel(&rest[..pos]);
                    at += pos + MESSAGE.len();
                }
                None if eof => {
                    out.content.push_str(CHANNEL);
                    out.content.push_str(rest);
                    at = buf.len();
                }
                None => break,
            },
            Mode::Call(name) => {
                let (args, len) = match first_of(rest, &[CALL, END, RETURN]) {
                    Some((pos, m)) => (&rest[..pos], pos + m.len()),
                    None if eof => (rest, rest.len()),
                    None => break,
                };
                match serde_json::from_str::<Value>(args.trim()) {
                    Ok(Value::Object(_)) => {
                        out.calls.push(Call { name: name.clone(), arguments: args.trim().to_string() })
                    }
                    _ => out.content.push_str(args),
                }
                st.mode = Mode::Text;
                at += len;
            }
        }
    }
    buf.drain(..at);
}

/// The mode a message's header opens: `analysis`, `final`, `commentary [to=functions.x]`.
fn channel(header: &str) -> Mode {
    let header = header.trim();
    if let Some(to) = header.split_once("to=").map(|(_, r)| r) {
        let recipient = to.split(|c: char| c.is_whitespace() || c == '<').next().unwrap_or("");
        if let Some(name) = recipient.strip_prefix("functions.").filter(|n| is_name(n)) {
            return Mode::Call(name.to_string());
        }
    }
    match header.split_whitespace().next() {
        Some("analysis") => Mode::Reasoning,
        _ => Mode::Content,
    }
}
