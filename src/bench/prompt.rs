//! Synthetic prompts of an exact token length, and the request bytes built from them.
//!
//! Words: the model's own vocabulary is scanned for tokens that decode to a space and a short
//! lower-case ASCII word (` the`, ` house`, …) and that encode back to exactly that one id
//! ([`Words::from_tokenizer`]). A text of `n` such words, each with its leading space, is `n`
//! tokens under every tokenizer that splits words at spaces before merging (GPT-style
//! byte-level BPE, SentencePiece with metaspace); every prompt is checked by encoding it,
//! and a tokenizer where the count comes out different is refused with an error rather than
//! benchmarked with wrong lengths.
//!
//! Prefix families (`--prefix-families K --prefix-tokens P`): family `f` has one fixed
//! `P`-word prefix (drawn from the seed and `f`); prompt `i` belongs to family `i mod K` and
//! continues with `input - P` words of its own, so requests of one family share exactly `P`
//! prompt tokens of content (after the chat template's own tokens, for chat).
//!
//! Bodies ask for `max_tokens = --output-tokens` with `ignore_eos: true` (a top-level field:
//! Dynamo 1.6.1 takes it there and refuses it inside `nvext`), and for streams
//! `stream_options.include_usage` so the last event carries the output token count. Each
//! request is rendered once, before the measured phase, into the exact bytes sent.

use bytes::Bytes;
use serde_json::json;

use super::schedule::Rng;
use crate::tokenize::Tokenizer;

/// How many single-token words to collect (plenty of variety, quick to scan).
const WANT_WORDS: usize = 4000;
/// Vocabulary ids scanned at most.
const SCAN_IDS: u32 = 200_000;

/// Single-token words of one tokenizer.
#[derive(Debug)]
pub struct Words(Vec<String>);

impl Words {
    /// Scan the vocabulary (see the module docs).
    pub fn from_tokenizer(tok: &Tokenizer) -> Result<Words, String> {
        let mut words = Vec::new();
        let mut missing = 0;
        for id in 0..SCAN_IDS {
            if words.len() >= WANT_WORDS || missing > 1000 {
                break;
            }
            if tok.id_to_token(id).is_none() {
                missing += 1;
                continue;
            }
            missing = 0;
            let Ok(text) = tok.decode(&[id], true) else { continue };
            let word = text.trim_start();
            if !(2..=10).contains(&word.len()) || !word.bytes().all(|b| b.is_ascii_lowercase()) {
                continue;
            }
            let spaced = format!(" {word}");
            if tok.encode(&spaced).is_ok_and(|ids| ids.len() == 1) {
                words.push(spaced);
            }
        }
        if words.len() < 16 {
            return Err(format!(
                "the tokenizer has only {} single-token words; cannot build exact-length prompts",
                words.len()
            ));
        }
        Ok(Words(words))
    }

    /// `n` words drawn from `rng`, appended to `out`.
    fn push(&self, rng: &mut Rng, n: usize, out: &mut String) {
        for _ in 0..n {
            out.push_str(&self.0[rng.below(self.0.len())]);
        }
    }
}

/// Which API the requests go to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Endpoint {
    Chat,
    Completions,
}

impl Endpoint {
    pub fn path(self) -> &'static str {
        match self {
            Endpoint::Chat => "/v1/chat/completions",
            Endpoint::Completions => "/v1/completions",
        }
    }
    pub fn name(self) -> &'static str {
        match self {
            Endpoint::Chat => "chat",
            Endpoint::Completions => "completions",
        }
    }
}

/// The prompts' shape.
#[derive(Clone, Debug)]
pub struct PromptSpec {
    pub input_tokens: usize,
    /// `0`: no shared prefixes.
    pub prefix_families: usize,
    pub prefix_tokens: usize,
    pub seed: u64,
}

/// `count` prompts of exactly `spec.input_tokens` tokens each (checked with `tok`).
pub fn prompts(tok: &Tokenizer, words: &Words, spec: &PromptSpec, count: usize) -> Result<Vec<String>, String> {
    let shared = if spec.prefix_families > 0 { spec.prefix_tokens } else { 0 };
    if shared > spec.input_tokens {
        return Err(format!("--prefix-tokens {shared} is more than --input-tokens {}", spec.input_tokens));
    }
    let prefixes: Vec<String> = (0..spec.prefix_families)
        .map(|f| {
            let mut s = String::new();
            words.push(&mut Rng::stream(spec.seed, (1 << 40) + f as u64), shared, &mut s);
            s
        })
        .collect();
    let mut out = Vec::with_capacity(count);
    for i in 0..count {
        let mut text = if prefixes.is_empty() { String::new() } else { prefixes[i % prefixes.len()].clone() };
        words.push(&mut Rng::stream(spec.seed, i as u64), spec.input_tokens - shared, &mut text);
        let n = tok.encode(&text)?.len();
        if n != spec.input_tokens {
            return Err(format!(
                "a synthetic prompt of {} words is {n} tokens with this tokenizer; exact lengths are not possible",
                spec.input_tokens
            ));
        }
        out.push(text);
    }
    Ok(out)
}

/// What every request body shares.
#[derive(Clone, Debug)]
pub struct BodySpec {
    pub endpoint: Endpoint,
    pub model: String,
    pub output_tokens: u32,
    pub stream: bool,
}

/// The JSON body for one prompt.
pub fn body(spec: &BodySpec, prompt: &str) -> Vec<u8> {
    let mut v = match spec.endpoint {
        Endpoint::Chat => json!({"model": spec.model, "messages": [{"role": "user", "content": prompt}]}),
        Endpoint::Completions => json!({"model": spec.model, "prompt": prompt}),
    };
    v["max_tokens"] = json!(spec.output_tokens);
    v["ignore_eos"] = json!(true);
    v["stream"] = json!(spec.stream);
    if spec.stream {
        v["stream_options"] = json!({"include_usage": true});
    }
    serde_json::to_vec(&v).expect("a JSON value serializes")
}

/// The whole HTTP/1.1 request (keep-alive) carrying `body`.
pub fn request(host: &str, path: &str, body: &[u8]) -> Bytes {
    let mut r = Vec::with_capacity(body.len() + 160);
    r.extend_from_slice(b"POST ");
    r.extend_from_slice(path.as_bytes());
    r.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    r.extend_from_slice(host.as_bytes());
    r.extend_from_slice(b"\r\nContent-Type: application/json\r\nAccept: */*\r\nContent-Length: ");
    r.extend_from_slice(body.len().to_string().as_bytes());
    r.extend_from_slice(b"\r\n\r\n");
    r.extend_from_slice(body);
    Bytes::from(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn qwen3() -> Option<Tokenizer> {
        let base = std::env::var_os("SWITCHYARD_MODELS").map(std::path::PathBuf::from).or_else(|| {
            std::env::var_os("HOME").map(|h| std::path::PathBuf::from(h).join(".cache/switchyard-models"))
        })?;
        Tokenizer::from_file(base.join("qwen3/tokenizer.json")).ok()
    }

    #[test]
    fn exact_lengths_and_shared_prefixes() {
        let Some(tok) = qwen3() else {
            panic!("run `bash scripts/fetch-models.sh qwen3` first");
        };
        let words = Words::from_tokenizer(&tok).unwrap();
        let spec = PromptSpec { input_tokens: 100, prefix_families: 3, prefix_tokens: 40, seed: 11 };
        let ps = prompts(&tok, &words, &spec, 9).unwrap();
        for p in &ps {
            assert_eq!(tok.encode(p).unwrap().len(), 100);
        }
        let ids: Vec<Vec<u32>> = ps.iter().map(|p| tok.encode(p).unwrap()).collect();
        assert_eq!(ids[0][..40], ids[3][..40], "same family, same prefix");
        assert_eq!(ids[1][..40], ids[7][..40]);
        assert_ne!(ids[0][..40], ids[1][..40], "other family, other prefix");
        assert_ne!(ids[0][40..], ids[3][40..], "own suffixes");
        // Same seed, same prompts; another seed, others.
        assert_eq!(prompts(&tok, &words, &spec, 9).unwrap(), ps);
        let other = PromptSpec { seed: 12, ..spec.clone() };
        assert_ne!(prompts(&tok, &words, &other, 9).unwrap(), ps);
        let bad = PromptSpec { prefix_tokens: 101, ..spec };
        assert!(prompts(&tok, &words, &bad, 1).unwrap_err().contains("more than --input-tokens"));
    }

    #[test]
    fn bodies_and_requests() {
        let spec = BodySpec { endpoint: Endpoint::Completions, model: "m".into(), output_tokens: 5, stream: true };
        let b: serde_json::Value = serde_json::from_slice(&body(&spec, " a b")).unwrap();
        assert_eq!(b["prompt"], " a b");
        assert_eq!((b["max_tokens"].as_u64(), b["ignore_eos"].as_bool()), (Some(5), Some(true)));
        assert_eq!(b["stream_options"]["include_usage"], true);
        let chat = BodySpec { endpoint: Endpoint::Chat, stream: false, ..spec };
        let b: serde_json::Value = serde_json::from_slice(&body(&chat, "x")).unwrap();
        assert_eq!(b["messages"][0]["content"], "x");
        assert!(b.get("stream_options").is_none());
        let r = request("h:1", "/v1/completions", b"{}");
        assert!(r.starts_with(b"POST /v1/completions HTTP/1.1\r\nHost: h:1\r\n"));
        assert!(r.ends_with(b"Content-Length: 2\r\n\r\n{}"));
    }
}
