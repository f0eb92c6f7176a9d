//! One tokenizer instance: encode text to ids, decode ids to text.
//!
//! Wraps the `tokenizers` crate's read-only pipeline tokenizer. Its encode path keeps scratch
//! buffers in a pool behind mutexes, one sub-pool per thread, so an instance must not be
//! shared across shards (their locks and lock words would meet): each shard builds its own
//! from [`super::model::ModelFiles::tokenizer`]. A clone shares the instance (the pipelines
//! are behind an `Arc`); the tokenizer helper threads use one that way
//! ([`super::model::ModelFiles::helper_tokenizer`]), each thread then taking its own sub-pool.
//!
//! Prompts are encoded the way Dynamo's frontend does it after rendering the chat template:
//! without the post-processor's special tokens (the template already wrote BOS where the
//! model wants one), with special tokens in the text matched to their ids.
//!
//! ASCII text skips the normalizer when that normalizer only applies a Unicode normal form
//! (NFC, NFD, NFKC, NFKD, alone or in a sequence — Qwen's tokenizers): every normal form
//! leaves ASCII unchanged, yet checking that costs ~10 instructions per character (~50 K
//! for a 1,000-token prompt). Such a tokenizer is built twice, the second time from the same
//! file with `"normalizer": null`, and ASCII text goes to the second. The ids are the same
//! by construction (tested on random ASCII and the golden prompts); the price is a second
//! vocabulary in memory per instance, which only these tokenizers pay.
//!
//! `--tokenizer fastokens|basetenkenizer`: an instance may carry another library's encoder
//! ([`super::backend::Encoder`], checked equal to this one at load); prompts are then encoded
//! with it, and everything else — decoding, token lookups, the streaming token table — stays
//! with this tokenizer.

use tokenizers::pipeline::{EncodeOptions, PipelineNormalizer, PipelineToken, PipelineTokenizer};

use std::sync::Arc;

use super::backend::Encoder;
use super::bytes::TokenBytes;
use super::canonical;

/// A tokenizer instance. A clone is the same instance (see the module docs).
#[derive(Clone)]
pub struct Tokenizer {
    inner: PipelineTokenizer,
    /// The same tokenizer without its normalizer, for ASCII text (see the module docs).
    ascii: Option<PipelineTokenizer>,
    plain: EncodeOptions,
    with_specials: EncodeOptions,
    /// Byte-level BPE: every id's bytes, for the streaming detokenizer. Built once per model
    /// and shared by its instances ([`Tokenizer::from_json_text_sharing`]).
    bytes: Option<Arc<TokenBytes>>,
    /// `--tokenizer`'s encoder, when the model uses one (see the module docs).
    encoder: Option<Encoder>,
}

impl std::fmt::Debug for Tokenizer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Tokenizer")
    }
}

impl Tokenizer {
    /// Rewrite a `tokenizer.json` of any supported version into the canonical form.
    pub fn canonical_json(raw: &str) -> Result<String, String> {
        if canonical::is_canonical(raw) {
            return Ok(raw.to_string());
        }
        canonical::rewrite(raw)
    }

    /// Build from a `tokenizer.json` text of any supported version. The text is taken rather
    /// than borrowed so that it is freed as soon as nothing needs it: building a pipeline
    /// takes about six times the file's size for a moment, on top of whatever else is alive
    /// (`perf/RESULTS.md`, "Memory").
    pub fn from_json_text(raw: String) -> Result<Tokenizer, String> {
        Self::from_json_text_sharing(raw, None)
    }

    /// [`Tokenizer::from_json_text`] for a further instance of a model: `bytes` is the token
    /// table of an instance built from the same text ([`Tokenizer::token_bytes`]), shared
    /// rather than built again.
    pub fn from_json_text_sharing(raw: String, bytes: Option<Arc<TokenBytes>>) -> Result<Tokenizer, String> {
        // A file that says it is canonical is read as it is; one that then fails is converted
        // as any older file would be (the conversion leaves a canonical file as it is).
        if canonical::is_canonical(&raw) {
            if let Ok(inner) = tokenizers::from_json(&raw) {
                return Ok(Self::wrap(inner, raw, bytes));
            }
        }
        let canonical = canonical::rewrite(&raw)?;
        drop(raw);
        Self::build(canonical, bytes)
    }

    /// `n` instances (at least one) of the tokenizer `raw` describes, built side by side on
    /// up to `threads` threads (building one takes over a second for a large vocabulary, and
    /// a server builds one per shard). They share one token table.
    pub fn instances_from_json_text(raw: String, n: usize, threads: usize) -> Result<Vec<Tokenizer>, String> {
        let n = n.max(1);
        if n == 1 {
            return Self::from_json_text(raw).map(|t| vec![t]);
        }
        let said_canonical = canonical::is_canonical(&raw);
        let json = if said_canonical { raw } else { canonical::rewrite(&raw)? };
        let built = Self::build_side_by_side(&json, n, threads);
        match built {
            // A file that said it was canonical and failed is converted, as one instance is.
            Err(_) if said_canonical => Self::build_side_by_side(&canonical::rewrite(&json)?, n, threads),
            other => other,
        }
    }

    /// `n` instances from canonical `json`, in order, on up to `threads` threads (this one
    /// among them). Each pipeline is a unit of work: an instance's ASCII twin (see the module
    /// docs) builds beside its main pipeline when the file's normalizer is a normal form.
    fn build_side_by_side(json: &str, n: usize, threads: usize) -> Result<Vec<Tokenizer>, String> {
        let plain = normal_forms_in_json(json).then(|| without_normalizer(json)).flatten();
        let per = if plain.is_some() { 2 } else { 1 };
        let units = n * per;
        // A twin that fails to build is no twin (Ok(None)); a main pipeline's failure is the error.
        let build = |u: usize| -> Result<Option<PipelineTokenizer>, String> {
            match (u % per, &plain) {
                (1, Some(plain)) => Ok(tokenizers::from_json(plain).ok()),
                _ => tokenizers::from_json(json).map(Some).map_err(|e| format!("cannot build the tokenizer: {e}")),
            }
        };
        let mut done = side_by_side(units, threads, "tokenizer-build", build).into_iter();
        let mut out = Vec::with_capacity(n);
        let mut bytes: Option<Arc<TokenBytes>> = None;
        for _ in 0..n {
            let inner = done.next().and_then(|p| p.transpose()).unwrap_or_else(|| Err("no tokenizer built".into()))?;
            let twin = if per == 2 { done.next().and_then(|p| p.ok().flatten()) } else { None };
            let ascii = twin.filter(|_| normal_forms_only(&inner));
            if bytes.is_none() {
                bytes = TokenBytes::build(&inner).map(Arc::new);
            }
            out.push(Tokenizer {
                inner,
                ascii,
                plain: EncodeOptions::no_specials(),
                with_specials: EncodeOptions::default(),
                bytes: bytes.clone(),
                encoder: None,
            });
        }
        Ok(out)
    }

    /// Build from canonical JSON (see [`Tokenizer::canonical_json`]).
    pub fn from_canonical_json(json: &str) -> Result<Tokenizer, String> {
        Self::build(json.to_string(), None)
    }

    fn build(json: String, bytes: Option<Arc<TokenBytes>>) -> Result<Tokenizer, String> {
        let inner = tokenizers::from_json(&json).map_err(|e| format!("cannot build the tokenizer: {e}"))?;
        Ok(Self::wrap(inner, json, bytes))
    }

    /// `inner` was built from the canonical `json`. The built pipeline says whether its
    /// normalizer is one to skip for ASCII; only then is `json` read again. `json` is freed
    /// before the second pipeline is built, so that only its own text is alive then. `bytes`
    /// is another instance's token table (see [`Tokenizer::from_json_text_sharing`]); without
    /// one it is built here when the tokenizer is byte-level.
    fn wrap(inner: PipelineTokenizer, json: String, bytes: Option<Arc<TokenBytes>>) -> Tokenizer {
        let plain = normal_forms_only(&inner).then(|| without_normalizer(&json)).flatten();
        drop(json);
        let ascii = plain.and_then(|j| tokenizers::from_json(&j).ok());
        let bytes = bytes.or_else(|| TokenBytes::build(&inner).map(Arc::new));
        Tokenizer {
            inner,
            ascii,
            plain: EncodeOptions::no_specials(),
            with_specials: EncodeOptions::default(),
            bytes,
            encoder: None,
        }
    }

    /// Whether decoding is a concatenation of token bytes (a byte-level BPE), so that
    /// [`Tokenizer::append_bytes`] applies.
    pub fn is_byte_level(&self) -> bool {
        self.bytes.is_some()
    }

    /// The token table, to share with a further instance of the same model.
    pub fn token_bytes(&self) -> Option<Arc<TokenBytes>> {
        self.bytes.clone()
    }

    /// Byte-level tokenizers: append the bytes `decode` concatenates for `ids` to `out` and
    /// return true (`decode(ids)` is then `out`'s new bytes read as UTF-8, invalid sequences
    /// replaced). Other tokenizers: return false and append nothing.
    #[inline]
    pub fn append_bytes(&self, ids: &[u32], skip_special_tokens: bool, out: &mut Vec<u8>) -> bool {
        let Some(table) = &self.bytes else { return false };
        for &id in ids {
            table.append(&self.inner, id, skip_special_tokens, out);
        }
        true
    }

    /// Whether ASCII text skips the normalizer (see the module docs).
    pub fn has_ascii_path(&self) -> bool {
        self.ascii.is_some()
    }

    /// Build from a `tokenizer.json` file of any supported version.
    pub fn from_file(path: impl AsRef<std::path::Path>) -> Result<Tokenizer, String> {
        Self::from_json_text(std::fs::read_to_string(path).map_err(|e| e.to_string())?)
    }

    /// This instance, its prompts encoded by `encoder` (see the module docs).
    pub fn with_encoder(self, encoder: Encoder) -> Tokenizer {
        Tokenizer { encoder: Some(encoder), ..self }
    }

    /// `--tokenizer`'s encoder, when prompts are encoded by another library.
    pub fn encoder(&self) -> Option<&Encoder> {
        self.encoder.as_ref()
    }

    /// Whether a shard may encode a short prompt itself: false when the encoder waits on a
    /// pool of its own (basetenkenizer, [`Encoder::inline`]).
    pub fn encodes_inline(&self) -> bool {
        self.encoder.as_ref().is_none_or(Encoder::inline)
    }

    /// Append the ids of `text` to `out`. With `add_special_tokens` the post-processor's
    /// tokens (e.g. a BOS) are added as `tokenizer.encode(text)` would. Encoded by
    /// `--tokenizer`'s encoder when the instance carries one.
    #[inline]
    pub fn encode_into(&self, text: &str, add_special_tokens: bool, out: &mut Vec<u32>) -> Result<(), String> {
        match &self.encoder {
            Some(e) => e.encode_into(text, add_special_tokens, out),
            None => self.encode_default_into(text, add_special_tokens, out),
        }
    }

    /// [`Tokenizer::encode_into`] with this tokenizer's own encoder, whatever the instance
    /// carries.
    pub fn encode_default_into(&self, text: &str, add_special_tokens: bool, out: &mut Vec<u32>) -> Result<(), String> {
        let opts = if add_special_tokens { &self.with_specials } else { &self.plain };
        let mut toks = Vec::with_capacity(text.len() / 3 + 8);
        let pipeline = match &self.ascii {
            Some(ascii) if text.is_ascii() => ascii,
            _ => &self.inner,
        };
        pipeline.encode_into(text, opts, &mut toks).map_err(|e| format!("tokenization failed: {e}"))?;
        out.extend_from_slice(PipelineToken::cast_slice(&toks));
        Ok(())
    }

    /// The ids of `text`, without added special tokens.
    pub fn encode(&self, text: &str) -> Result<Vec<u32>, String> {
        let mut out = Vec::new();
        self.encode_into(text, false, &mut out)?;
        Ok(out)
    }

    /// Decode `ids` to text; invalid UTF-8 at the edges becomes U+FFFD, as in transformers.
    pub fn decode(&self, ids: &[u32], skip_special_tokens: bool) -> Result<String, String> {
        self.inner.decode(ids, skip_special_tokens).map_err(|e| format!("detokenization failed: {e}"))
    }

    /// The id of a token (added and special tokens included).
    pub fn token_to_id(&self, token: &str) -> Option<u32> {
        if let Some(id) = self.inner.get_added_vocabulary().token_to_id(token) {
            return Some(id);
        }
        let mut toks = Vec::new();
        self.inner.encode_into(token, &self.plain, &mut toks).ok()?;
        match toks.as_slice() {
            [one] if self.id_to_token(one.id()).as_deref() == Some(token) => Some(one.id()),
            _ => None,
        }
    }

    /// The token text of an id, as stored in the vocabulary.
    pub fn id_to_token(&self, id: u32) -> Option<String> {
        self.inner.get_added_vocabulary().simple_id_to_token(id).or_else(|| self.inner.get_model().id_to_token(id))
    }

    /// The text of every added token (special or not), by id.
    pub fn added_token_texts(&self) -> Vec<String> {
        let mut all: Vec<(u32, String)> =
            self.inner.get_added_vocabulary().get_vocab().into_iter().map(|(t, id)| (id, t)).collect();
        all.sort();
        all.into_iter().map(|(_, t)| t).collect()
    }

    /// Whether `id` is a special added token (skipped by `skip_special_tokens`).
    pub fn is_special(&self, id: u32) -> bool {
        let added = self.inner.get_added_vocabulary();
        added.simple_id_to_token(id).is_some_and(|t| added.is_special_token(&t))
    }
}

/// `build(u)` for every `u` below `units`, in order of `u`, run on up to `threads` threads
/// (this one among them, the others named `{name}-{k}`): building tokenizers side by side at
/// model load. A unit a panicked thread held is built again here.
pub(crate) fn side_by_side<T: Send>(
    units: usize,
    threads: usize,
    name: &str,
    build: impl Fn(usize) -> T + Sync,
) -> Vec<T> {
    let next = std::sync::atomic::AtomicUsize::new(0);
    let work = || {
        let mut mine = Vec::new();
        loop {
            let u = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            if u >= units {
                return mine;
            }
            mine.push((u, build(u)));
        }
    };
    let mut done: Vec<(usize, T)> = std::thread::scope(|s| {
        let others: Vec<_> = (1..threads.clamp(1, units.max(1)))
            .map(|k| std::thread::Builder::new().name(format!("{name}-{k}")).spawn_scoped(s, work))
            .collect();
        let mut done = work();
        // A thread that could not start built nothing: the others took its share.
        for h in others.into_iter().flatten() {
            done.extend(h.join().unwrap_or_default());
        }
        done
    });
    if done.len() < units {
        let have: std::collections::HashSet<usize> = done.iter().map(|(u, _)| *u).collect();
        for u in (0..units).filter(|u| !have.contains(u)) {
            done.push((u, build(u)));
        }
    }
    done.sort_by_key(|(u, _)| *u);
    done.into_iter().map(|(_, t)| t).collect()
}

/// `json` (a canonical `tokenizer.json`) with `"normalizer": null`. The other members are
/// borrowed from `json`, not copied, until the new text is written.
/// Whether `inner`'s normalizer only applies Unicode normal forms (one, or a sequence).
fn normal_forms_only(inner: &PipelineTokenizer) -> bool {
    !inner.get_normalizers().is_empty()
        && inner.get_normalizers().iter().all(|n| {
            matches!(
                n,
                PipelineNormalizer::NFC(_)
                    | PipelineNormalizer::NFD(_)
                    | PipelineNormalizer::NFKC(_)
                    | PipelineNormalizer::NFKD(_)
            )
        })
}

/// [`normal_forms_only`] read from the file before any pipeline is built, so that the ASCII
/// twin can build beside the main pipeline; the built pipeline still decides.
fn normal_forms_in_json(json: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Top {
        #[serde(default)]
        normalizer: Option<Value>,
    }
    use serde_json::Value;
    fn forms(v: &Value) -> bool {
        match v.get("type").and_then(Value::as_str) {
            Some("NFC" | "NFD" | "NFKC" | "NFKD") => true,
            Some("Sequence") => v
                .get("normalizers")
                .and_then(Value::as_array)
                .is_some_and(|all| !all.is_empty() && all.iter().all(forms)),
            _ => false,
        }
    }
    serde_json::from_str::<Top>(json).ok().and_then(|t| t.normalizer).is_some_and(|n| forms(&n))
}

fn without_normalizer(json: &str) -> Option<String> {
    use serde_json::value::RawValue;
    let null = RawValue::from_string("null".into()).ok()?;
    let mut top: indexmap::IndexMap<String, &RawValue> = serde_json::from_str(json).ok()?;
    top.insert("normalizer".into(), &null);
    serde_json::to_string(&top).ok()
}
