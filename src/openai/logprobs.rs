//! Output-token log probabilities as Dynamo 1.6.1 renders them (docs/dynamo/request-plane.md §8.6, capture `p_lp`):
//!
//! * chat: `{"content":[{"token","logprob","token_id","bytes","top_logprobs":[{"token",
//!   "logprob","bytes"}]}],"refusal":null}` — note the extra `token_id`;
//! * completions: `{"tokens":[..],"token_logprobs":[..],"top_logprobs":[{token: logprob}],
//!   "text_offset":[]}`.
//!
//! Log probabilities are written as `f32` (Dynamo's OpenAI types hold `f32`), `bytes` are the
//! UTF-8 bytes of the token text.

use std::io::Write as _;

use super::response::string;
pub use crate::infer::logprobs::{TokenLogprob, TopLogprob};

fn float(out: &mut Vec<u8>, v: f32) {
    if v.is_finite() {
        let _ = serde_json::to_writer(&mut *out, &v);
    } else {
        // JSON has no infinities: what serde_json writes for them.
        out.extend_from_slice(b"null");
    }
}

/// Write `items` comma-separated, each with `f`.
fn join<T>(out: &mut Vec<u8>, items: impl IntoIterator<Item = T>, mut f: impl FnMut(&mut Vec<u8>, T)) {
    for (i, item) in items.into_iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        f(out, item);
    }
}

fn bytes(out: &mut Vec<u8>, s: &str) {
    out.push(b'[');
    join(out, s.bytes(), |out, b| {
        let _ = write!(out, "{b}");
    });
    out.push(b']');
}

/// The chat `logprobs` object of `tokens`.
pub fn chat(out: &mut Vec<u8>, tokens: &[TokenLogprob]) {
    out.extend_from_slice(b"{\"content\":[");
    join(out, tokens, |out, t| {
        out.extend_from_slice(b"{\"token\":");
        string(out, &t.token);
        out.extend_from_slice(b",\"logprob\":");
        float(out, t.logprob);
        let _ = write!(out, ",\"token_id\":{},\"bytes\":", t.token_id);
        bytes(out, &t.token);
        out.extend_from_slice(b",\"top_logprobs\":[");
        join(out, &t.top, |out, top| {
            out.extend_from_slice(b"{\"token\":");
            string(out, &top.token);
            out.extend_from_slice(b",\"logprob\":");
            float(out, top.logprob);
            out.extend_from_slice(b",\"bytes\":");
            bytes(out, &top.token);
            out.push(b'}');
        });
        out.extend_from_slice(b"]}");
    });
    out.extend_from_slice(b"],\"refusal\":null}");
}

/// The completions `logprobs` object of `tokens`. A token text listed twice among the
/// alternatives of one position keeps its first (best-ranked) value.
pub fn completion(out: &mut Vec<u8>, tokens: &[TokenLogprob]) {
    out.extend_from_slice(b"{\"tokens\":[");
    join(out, tokens, |out, t| string(out, &t.token));
    out.extend_from_slice(b"],\"token_logprobs\":[");
    join(out, tokens, |out, t| float(out, t.logprob));
    out.extend_from_slice(b"],\"top_logprobs\":[");
    join(out, tokens, |out, t| {
        out.push(b'{');
        let firsts = t.top.iter().enumerate().filter(|(j, top)| !t.top[..*j].iter().any(|s| s.token == top.token));
        join(out, firsts, |out, (_, top)| {
            string(out, &top.token);
            out.push(b':');
            float(out, top.logprob);
        });
        out.push(b'}');
    });
    out.extend_from_slice(b"],\"text_offset\":[]}");
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sample() -> Vec<TokenLogprob> {
        let top = |token: &str, logprob| TopLogprob { token: token.to_owned(), logprob };
        vec![
            TokenLogprob {
                token: "alpha".into(),
                token_id: 7141,
                logprob: -0.5,
                top: vec![top("alpha", -0.5), top(".", -1.5)],
            },
            TokenLogprob {
                token: " beta".into(),
                token_id: 13440,
                logprob: -0.5,
                top: vec![top(" beta", -0.5), top(".", -1.5)],
            },
        ]
    }

    // The `logprobs` of the capture `p_lp` (a Python worker's log_probs through 1.6.1).
    #[test]
    fn chat_matches_dynamo() {
        let mut out = Vec::new();
        chat(&mut out, &sample());
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"content":[{"token":"alpha","logprob":-0.5,"token_id":7141,"bytes":[97,108,112,104,97],"top_logprobs":[{"token":"alpha","logprob":-0.5,"bytes":[97,108,112,104,97]},{"token":".","logprob":-1.5,"bytes":[46]}]},{"token":" beta","logprob":-0.5,"token_id":13440,"bytes":[32,98,101,116,97],"top_logprobs":[{"token":" beta","logprob":-0.5,"bytes":[32,98,101,116,97]},{"token":".","logprob":-1.5,"bytes":[46]}]}],"refusal":null}"#
        );
    }

    #[test]
    fn completion_shape() {
        let mut out = Vec::new();
        let mut tokens = sample();
        tokens[1].top.push(TopLogprob { token: ".".into(), logprob: -3.0 });
        completion(&mut out, &tokens);
        assert_eq!(
            String::from_utf8(out).unwrap(),
            r#"{"tokens":["alpha"," beta"],"token_logprobs":[-0.5,-0.5],"top_logprobs":[{"alpha":-0.5,".":-1.5},{" beta":-0.5,".":-1.5}],"text_offset":[]}"#
        );
    }

    #[test]
    fn f32_values_and_empty() {
        let mut out = Vec::new();
        let t = TokenLogprob { token: "x".into(), token_id: 1, logprob: -0.1_f64 as f32, top: vec![] };
        chat(&mut out, &[t]);
        assert!(String::from_utf8(out).unwrap().contains("\"logprob\":-0.1,"));
        let mut out = Vec::new();
        completion(&mut out, &[]);
        assert_eq!(out, br#"{"tokens":[],"token_logprobs":[],"top_logprobs":[],"text_offset":[]}"#);
    }
}
