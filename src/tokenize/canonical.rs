//! A `tokenizer.json` of any supported version rewritten into the canonical form the tokenizer
//! reader takes, without the whole file ever becoming a JSON tree in memory.
//!
//! Runs wherever a tokenizer is built: on the control thread when a model is loaded, in the
//! bench and in the mock worker.
//!
//! The library's converter (`tokenizers::canonicalize_str`) parses the whole file into a
//! `serde_json::Value`, rewrites it and prints it again. For Qwen3's 11 MB file that takes
//! ~100 MB for a moment, more than the pipeline later built from the result ever holds, and
//! it sets the process's peak memory. Of a model's two big members the converter reads the
//! vocabulary only for its type (an array means Unigram), and rewrites the merges only where
//! an entry is spelled `"a b"` (into `["a", "b"]`; `#version` lines are dropped). So
//! [`rewrite`] gives the converter a *skeleton*: the file with an empty vocabulary of the same
//! type and no merges. Into its answer go the original vocabulary text, as it is, and the
//! merges, written one entry at a time by the converter's rules. The result is the
//! converter's output as JSON values (spacing and the escaping of strings may differ); a test
//! compares the two on every model the tests use. A file whose shape this does not cover (no
//! model object, a merges entry the converter refuses, …) goes to the converter itself, which
//! then gives its own answer or error.

use indexmap::IndexMap;
use serde::de::{DeserializeSeed, Deserializer, SeqAccess, Visitor};
use serde_json::value::RawValue;
use serde_json::Value;

/// The format version the reader takes as it is.
const CANONICAL: &str = "2.0";

/// Whether `raw` says it is in the canonical format already (`"version": "2.0"`). Reads
/// nothing but the top-level keys; the rest is skipped without being kept.
pub fn is_canonical(raw: &str) -> bool {
    #[derive(serde::Deserialize)]
    struct Head<'a> {
        #[serde(borrow)]
        version: Option<std::borrow::Cow<'a, str>>,
    }
    serde_json::from_str::<Head>(raw).is_ok_and(|h| h.version.as_deref() == Some(CANONICAL))
}

/// `raw` rewritten into the canonical format (see the module docs).
pub fn rewrite(raw: &str) -> Result<String, String> {
    match lean(raw) {
        Some(text) => Ok(text),
        None => tokenizers::canonicalize_str(raw).map_err(|e| format!("cannot read tokenizer.json: {e}")),
    }
}

/// A member replaced by an empty stand-in in the skeleton.
struct Stub<'a> {
    original: &'a RawValue,
    empty: Box<RawValue>,
}

impl<'a> Stub<'a> {
    /// A stand-in for `member` when it is an object or an array (the converter sees its type).
    fn of(member: Option<&&'a RawValue>) -> Option<Option<Stub<'a>>> {
        let Some(&original) = member else { return Some(None) };
        let empty = match original.get().as_bytes().first() {
            Some(b'{') => "{}",
            Some(b'[') => "[]",
            // null or a scalar: small, left to the converter.
            _ => return Some(None),
        };
        Some(Some(Stub { original, empty: RawValue::from_string(empty.to_string()).ok()? }))
    }
}

/// The canonical text, or `None` when the file is outside what the skeleton covers.
fn lean(raw: &str) -> Option<String> {
    let top: IndexMap<String, &RawValue> = serde_json::from_str(raw).ok()?;
    let model: IndexMap<String, &RawValue> = serde_json::from_str(top.get("model")?.get()).ok()?;
    let vocab = Stub::of(model.get("vocab"))?;
    // Merges are rewritten only from an array (the converter refuses anything else but null).
    let merges = Stub::of(model.get("merges"))?.filter(|s| s.empty.get() == "[]");

    let mut skeleton_model: IndexMap<&str, &RawValue> = model.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    for (key, stub) in [("vocab", &vocab), ("merges", &merges)] {
        if let Some(s) = stub {
            skeleton_model.insert(key, &s.empty);
        }
    }
    let skeleton_model = RawValue::from_string(serde_json::to_string(&skeleton_model).ok()?).ok()?;
    let mut skeleton: IndexMap<&str, &RawValue> = top.iter().map(|(k, v)| (k.as_str(), *v)).collect();
    skeleton.insert("model", &skeleton_model);
    let canonical = tokenizers::canonicalize_str(&serde_json::to_string(&skeleton).ok()?).ok()?;

    let canonical_top: IndexMap<String, &RawValue> = serde_json::from_str(&canonical).ok()?;
    let canonical_model: IndexMap<String, &RawValue> = serde_json::from_str(canonical_top.get("model")?.get()).ok()?;
    // The stand-ins must come back where they went, untouched.
    for (key, stub) in [("vocab", &vocab), ("merges", &merges)] {
        if let Some(s) = stub {
            if canonical_model.get(key)?.get() != s.empty.get() {
                return None;
            }
        }
    }

    let mut out = Vec::with_capacity(raw.len() + raw.len() / 8);
    write_object(&mut out, &canonical_top, &mut |out, key, value| {
        if key != "model" {
            out.extend_from_slice(value.get().as_bytes());
            return Some(());
        }
        write_object(out, &canonical_model, &mut |out, key, value| {
            match (key, &vocab, &merges) {
                ("vocab", Some(v), _) => out.extend_from_slice(v.original.get().as_bytes()),
                ("merges", _, Some(m)) => write_merges(out, m.original)?,
                _ => out.extend_from_slice(value.get().as_bytes()),
            }
            Some(())
        })
    })?;
    String::from_utf8(out).ok()
}

/// A member writer: the output, the member's key and its value as read.
type WriteMember<'w> = dyn FnMut(&mut Vec<u8>, &str, &RawValue) -> Option<()> + 'w;

/// `members` as a JSON object, each value written by `value`.
fn write_object(out: &mut Vec<u8>, members: &IndexMap<String, &RawValue>, value: &mut WriteMember) -> Option<()> {
    out.push(b'{');
    for (i, (key, raw)) in members.iter().enumerate() {
        if i > 0 {
            out.push(b',');
        }
        crate::util::json_string(out, key);
        out.push(b':');
        value(out, key, raw)?;
    }
    out.push(b'}');
    Some(())
}

/// The merges array `merges` as `[["a","b"],…]`, by the converter's rules: a pair of strings
/// stays, a string `"a b"` of exactly two parts becomes a pair, a string starting with
/// `#version` is dropped; anything else is refused (`None`: the converter reports it).
fn write_merges(out: &mut Vec<u8>, merges: &RawValue) -> Option<()> {
    let mut de = serde_json::Deserializer::from_str(merges.get());
    Merges(out).deserialize(&mut de).ok()
}

/// Writes the merges out as they are read, one entry alive at a time.
struct Merges<'o>(&'o mut Vec<u8>);

impl<'de> DeserializeSeed<'de> for Merges<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<(), D::Error> {
        d.deserialize_seq(self)
    }
}

impl<'de> Visitor<'de> for Merges<'_> {
    type Value = ();

    fn expecting(&self, f: &mut std::fmt::Formatter) -> std::fmt::Result {
        f.write_str("an array of merges")
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        use serde::de::Error;
        let out = self.0;
        out.push(b'[');
        let mut first = true;
        while let Some(entry) = seq.next_element::<Value>()? {
            let pair = match &entry {
                Value::Array(pair) => match pair.as_slice() {
                    [Value::String(a), Value::String(b)] => (a.as_str(), b.as_str()),
                    _ => return Err(A::Error::custom("a merge that is not a pair of strings")),
                },
                Value::String(s) if s.starts_with("#version") => continue,
                Value::String(s) => {
                    let mut parts = s.split(' ');
                    match (parts.next(), parts.next(), parts.next()) {
                        (Some(a), Some(b), None) => (a, b),
                        _ => return Err(A::Error::custom("a merge that is not two tokens")),
                    }
                }
                _ => return Err(A::Error::custom("a merge that is neither a pair nor a string")),
            };
            if !first {
                out.push(b',');
            }
            first = false;
            out.push(b'[');
            crate::util::json_string(out, pair.0);
            out.push(b',');
            crate::util::json_string(out, pair.1);
            out.push(b']');
        }
        out.push(b']');
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn library(raw: &str) -> Value {
        serde_json::from_str(&tokenizers::canonicalize_str(raw).expect("the converter takes it")).unwrap()
    }

    fn ours(raw: &str) -> Value {
        serde_json::from_str(&lean(raw).expect("the skeleton covers it")).unwrap()
    }

    /// A small legacy BPE file: merges spelled as strings, a `#version` line, a `ByteLevel`
    /// pre-tokenizer the converter lowers into the model, no `"type"` on the model.
    const LEGACY_BPE: &str = r##"{
        "version": "1.0", "truncation": null, "padding": null, "added_tokens": [],
        "normalizer": null,
        "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": false, "trim_offsets": true, "use_regex": true},
        "post_processor": null, "decoder": {"type": "ByteLevel", "add_prefix_space": true, "trim_offsets": true, "use_regex": true},
        "model": {"dropout": null, "unk_token": null, "continuing_subword_prefix": null, "end_of_word_suffix": null,
                  "fuse_unk": false, "vocab": {"a": 0, "b": 1, "ab": 2, "\"q": 3, "\"qa": 4},
                  "merges": ["#version: 0.2", "a b", "\"q a"]}
    }"##;

    #[test]
    fn a_legacy_bpe_file_comes_out_as_the_converter_writes_it() {
        assert_eq!(ours(LEGACY_BPE), library(LEGACY_BPE));
        let text = lean(LEGACY_BPE).unwrap();
        assert!(text.contains(r#"[["a","b"],["\"q","a"]]"#), "{text}");
    }

    #[test]
    fn pairs_stay_pairs_and_a_unigram_vocabulary_stays_an_array() {
        let pairs = LEGACY_BPE.replace(r##"["#version: 0.2", "a b", "\"q a"]"##, r#"[["a", "b"], ["\"q", "a"]]"#);
        assert_eq!(ours(&pairs), library(&pairs));
        let unigram = r#"{"version": "1.0", "added_tokens": [], "normalizer": null, "pre_tokenizer": null,
            "post_processor": null, "decoder": null,
            "model": {"unk_id": 0, "vocab": [["<unk>", 0.0], ["a", -1.5], ["b", -2.25e-3]]}}"#;
        assert_eq!(ours(unigram), library(unigram));
        assert_eq!(library(unigram)["model"]["type"], "Unigram");
    }

    #[test]
    fn what_the_converter_refuses_goes_to_the_converter() {
        let three_parts = LEGACY_BPE.replace(r#""a b""#, r#""a b c""#);
        assert_eq!(lean(&three_parts), None);
        let err = rewrite(&three_parts).unwrap_err();
        assert!(err.contains("cannot read tokenizer.json"), "{err}");
        assert_eq!(lean(r#"{"version": "1.0"}"#), None);
        assert!(rewrite("not json").is_err());
    }

    /// Every model the tests use (`scripts/fetch-models.sh`): the skeleton covers it, and the
    /// result is the converter's, value for value.
    #[test]
    fn the_fetched_models_come_out_as_the_converter_writes_them() {
        let base = match std::env::var_os("SWITCHYARD_MODELS") {
            Some(d) => std::path::PathBuf::from(d),
            None => std::path::PathBuf::from(std::env::var_os("HOME").unwrap()).join(".cache/switchyard-models"),
        };
        for name in ["qwen3", "llama3", "deepseek_v3", "gemma3", "gptoss"] {
            let path = base.join(name).join("tokenizer.json");
            let raw = std::fs::read_to_string(&path)
                .unwrap_or_else(|e| panic!("run `bash scripts/fetch-models.sh` first ({}: {e})", path.display()));
            assert!(!is_canonical(&raw), "{name}");
            let ours = lean(&raw).unwrap_or_else(|| panic!("{name}: the skeleton does not cover it"));
            let ours: Value = serde_json::from_str(&ours).unwrap();
            assert!(ours == library(&raw), "{name}: differs from the converter's output");
        }
    }

    #[test]
    fn only_version_2_is_canonical() {
        assert!(is_canonical(r#"{"added_tokens": [{"id": 1}], "version": "2.0", "model": {}}"#));
        assert!(!is_canonical(LEGACY_BPE));
        assert!(!is_canonical(r#"{"model": {}}"#));
        assert!(!is_canonical("[1, 2]"));
    }
}
