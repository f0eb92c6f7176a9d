//! The tokenizer's ASCII path (the normalizer skipped when it only applies a Unicode normal
//! form) gives the ids the whole pipeline gives: random ASCII text — words, contractions,
//! digits, punctuation, runs of spaces and newlines, special-token text — is encoded by
//! [`Tokenizer`] and by the tokenizer library directly from the unmodified `tokenizer.json`.
//!
//! The model files come from `scripts/fetch-models.sh` into `$SWITCHYARD_MODELS` (default
//! `~/.cache/switchyard-models`); without them these tests fail and say so.

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use switchyard::tokenize::Tokenizer;
use tokenizers::pipeline::{EncodeOptions, PipelineToken, PipelineTokenizer};

fn tokenizer_json(name: &str) -> String {
    let dir = match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/switchyard-models"),
    }
    .join(name);
    std::fs::read_to_string(dir.join("tokenizer.json")).unwrap_or_else(|e| {
        panic!(
            "model files for {name} are missing in {} ({e}): run `bash scripts/fetch-models.sh` first",
            dir.display()
        )
    })
}

struct Pair {
    ours: Tokenizer,
    library: PipelineTokenizer,
}

fn qwen3() -> &'static Pair {
    static P: OnceLock<Pair> = OnceLock::new();
    P.get_or_init(|| {
        let raw = tokenizer_json("qwen3");
        // The library's own conversion, not ours (tokenize::canonical), on the library's side.
        let canonical = tokenizers::canonicalize_str(&raw).expect("qwen3 tokenizer.json");
        let ours = Tokenizer::from_json_text(raw).expect("qwen3 tokenizer");
        let library = tokenizers::from_json(&canonical).expect("qwen3 tokenizer, library");
        Pair { ours, library }
    })
}

fn library_ids(t: &PipelineTokenizer, text: &str) -> Vec<u32> {
    let mut toks = Vec::new();
    t.encode_into(text, &EncodeOptions::no_specials(), &mut toks).unwrap();
    PipelineToken::cast_slice(&toks).to_vec()
}

#[test]
fn normal_form_normalizers_get_the_ascii_path_and_others_do_not() {
    assert!(qwen3().ours.has_ascii_path(), "qwen3's normalizer is NFC: ASCII text should skip it");
    let llama = Tokenizer::from_json_text(tokenizer_json("llama3")).expect("llama3 tokenizer");
    assert!(!llama.has_ascii_path(), "llama3 has no normalizer: nothing to skip");
}

#[test]
fn non_ascii_text_still_goes_through_the_normalizer() {
    // "e" + combining acute accent: NFC composes it to "é", which tokenizes differently.
    let p = qwen3();
    let text = "Cafe\u{301} au lait, cafe\u{301}s";
    assert_eq!(p.ours.encode(text).unwrap(), library_ids(&p.library, text));
    // Composed by the normalizer: the same ids as the precomposed text.
    assert_eq!(p.ours.encode(text).unwrap(), p.ours.encode("Caf\u{e9} au lait, caf\u{e9}s").unwrap());
}

#[test]
fn instances_built_side_by_side_are_whole_and_equal() {
    // Three instances on two threads: each pipeline (main and ASCII twin) is a unit of work,
    // so instances are assembled from pipelines built on different threads.
    let text = "Hello there, caf\u{e9} <|im_start|>user\nwhat's 12+30?<|im_end|>";
    let want = library_ids(&qwen3().library, text);
    let built = Tokenizer::instances_from_json_text(tokenizer_json("qwen3"), 3, 2).expect("qwen3 instances");
    assert_eq!(built.len(), 3);
    for t in &built {
        assert!(t.has_ascii_path(), "every qwen3 instance has its ASCII twin");
        assert_eq!(t.encode(text).unwrap(), want);
        assert_eq!(t.encode("plain ASCII only").unwrap(), library_ids(&qwen3().library, "plain ASCII only"));
    }
    let first = built[0].token_bytes().expect("qwen3 is byte-level");
    assert!(built.iter().all(|t| std::sync::Arc::ptr_eq(&t.token_bytes().unwrap(), &first)), "one token table");
    // No normalizer: no twin, whatever the thread count.
    let llama = Tokenizer::instances_from_json_text(tokenizer_json("llama3"), 2, 4).expect("llama3 instances");
    assert!(llama.iter().all(|t| !t.has_ascii_path()));
    assert_eq!(llama[0].encode(text).unwrap(), llama[1].encode(text).unwrap());
    // A file that is not a tokenizer is an error, not a panic.
    assert!(Tokenizer::instances_from_json_text("{\"model\": 3}".into(), 2, 2).is_err());
}

fn ascii_text() -> impl Strategy<Value = String> {
    let piece = prop_oneof![
        "[a-zA-Z]{1,12}",
        "[0-9]{1,6}",
        "[ \t]{1,4}",
        "[\r\n]{1,3}",
        "[!-/:-@\\[-`{-~]{1,4}",
        Just("'s".to_string()),
        Just("'LL".to_string()),
        Just("<|im_start|>".to_string()),
        Just("<|im_end|>".to_string()),
        Just("<think>".to_string()),
        Just("<|endoftext|>".to_string()),
        "[\\x00-\\x7f]{1,8}",
    ];
    proptest::collection::vec(piece, 0..40).prop_map(|v| v.concat())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]
    #[test]
    fn ascii_text_gets_the_ids_of_the_whole_pipeline(text in ascii_text()) {
        let p = qwen3();
        prop_assert_eq!(p.ours.encode(&text).unwrap(), library_ids(&p.library, &text));
    }
}
