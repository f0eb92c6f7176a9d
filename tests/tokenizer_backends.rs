//! `--tokenizer fastokens|basetenkenizer`: the other encoders against the default tokenizer.
//!
//! * Every model of `scripts/fetch-models.sh`, both libraries: the library is used only when
//!   its ids equal the default's on the load check, and then also on every prompt of the
//!   conformance corpus (`tests/corpus/expected`); where the library is not used, the fallback
//!   is real (the library cannot load the file, or gives other ids on a check text) and the
//!   model encodes with the default. Without fallback such a model is not served.
//! * A `tokenizer.json` neither library can load (a WordLevel model, which the default reads):
//!   the fallback, or the refusal without it.
//!
//! Needs the model files: `bash scripts/fetch-models.sh`.

mod common;

use switchyard::tokenize::backend::{Encoder, TokenizerBackend, TokenizerChoice};
use switchyard::tokenize::model::Encoding;
use switchyard::tokenize::{parity, ModelFiles, Tokenizer};

const MODELS: &[&str] = &["qwen3", "llama3", "deepseek_v3", "gemma3", "gptoss"];
const LIBRARIES: &[TokenizerBackend] = &[TokenizerBackend::Fastokens, TokenizerBackend::Basetenkenizer];

fn choice(backend: TokenizerBackend, fallback: bool) -> TokenizerChoice {
    TokenizerChoice { backend, fallback }
}

/// The corpus prompts of `model` with their expected ids.
fn corpus(model: &str) -> Vec<(String, Vec<u32>)> {
    let path = format!("{}/tests/corpus/expected/{model}.json", env!("CARGO_MANIFEST_DIR"));
    let all: Vec<serde_json::Value> = serde_json::from_str(&std::fs::read_to_string(&path).unwrap()).unwrap();
    all.iter()
        .filter_map(|c| {
            let prompt = c["prompt"].as_str()?.to_string();
            let ids = c["token_ids"].as_array()?.iter().map(|v| v.as_u64().unwrap() as u32).collect();
            Some((prompt, ids))
        })
        .collect()
}

fn encode(t: &Tokenizer, text: &str) -> Vec<u32> {
    let mut out = Vec::new();
    t.encode_into(text, false, &mut out).unwrap();
    out
}

/// One model, one library: what load decides, and that it is right.
fn check_model(model: &str, backend: TokenizerBackend) -> String {
    let dir = common::model_dir(model);
    let (files, toks) = ModelFiles::load_instances_choosing(&dir, None, 2, choice(backend, true))
        .unwrap_or_else(|e| panic!("{model}: {e}"));
    let prompts = corpus(model);
    assert!(!prompts.is_empty(), "{model}: no corpus prompts");
    let outcome = match &files.encoding {
        Encoding::Library(b) => {
            assert_eq!(*b, backend);
            for t in &toks {
                assert_eq!(t.encoder().map(Encoder::backend), Some(backend), "{model}: every instance carries it");
            }
            // Beyond the load check: the whole corpus, through the library.
            for (i, (prompt, want)) in prompts.iter().enumerate() {
                assert_eq!(&encode(&toks[1], prompt), want, "{model} {}: corpus prompt {i}", backend.name());
            }
            format!("{model}: {} used ({} corpus prompts equal)", backend.name(), prompts.len())
        }
        Encoding::FellBack(b, why) => {
            assert_eq!(*b, backend);
            assert!(toks.iter().all(|t| t.encoder().is_none()), "{model}: fell back, so no instance carries it");
            // The fallback is real: the library cannot load the file, or differs on a check text.
            let json = std::fs::read_to_string(dir.join("tokenizer.json")).unwrap();
            match Encoder::build(backend, serde_json::from_str(&json).unwrap()) {
                Err(e) => assert!(why.contains(&e), "{model}: {why:?} names the load error {e:?}"),
                Ok(enc) => {
                    let m = parity::check(&toks[0], &enc).expect_err("a fallback after a passed check");
                    assert!(why.contains(&m.message), "{model}: {why:?} names the mismatch {m:?}");
                }
            }
            for (i, (prompt, want)) in prompts.iter().enumerate() {
                assert_eq!(&encode(&toks[0], prompt), want, "{model}: corpus prompt {i} with the default");
            }
            // Without fallback, the model is not served.
            let e = ModelFiles::load_instances_choosing(&dir, None, 1, choice(backend, false))
                .expect_err("no fallback: not served");
            assert!(e.to_string().contains("fallback is disabled"), "{model}: {e}");
            format!("{model}: {} fell back: {why}", backend.name())
        }
        Encoding::Default => panic!("{model}: {} was chosen", backend.name()),
    };
    eprintln!("{outcome}");
    outcome
}

#[test]
fn fastokens_equals_the_default_or_falls_back_on_every_model() {
    let outcomes: Vec<String> = MODELS.iter().map(|m| check_model(m, TokenizerBackend::Fastokens)).collect();
    // Qwen3 is the model the benches and the e2e test run fastokens on: it must pass.
    assert!(outcomes[0].starts_with("qwen3: fastokens used"), "{outcomes:?}");
}

#[test]
fn basetenkenizer_equals_the_default_or_falls_back_on_every_model() {
    for m in MODELS {
        check_model(m, TokenizerBackend::Basetenkenizer);
    }
}

/// A WordLevel tokenizer: the default tokenizer reads it, neither library does.
fn word_level_dir(tag: &str) -> common::TempDir {
    let dir = common::TempDir::new(tag);
    let json = serde_json::json!({
        "version": "1.0",
        "truncation": null,
        "padding": null,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false,
                          "normalized": false, "special": true}],
        "normalizer": null,
        "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false},
        "post_processor": null,
        "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "!": 3}, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.0.join("tokenizer.json"), json.to_string()).unwrap();
    std::fs::write(dir.0.join("tokenizer_config.json"), r#"{"eos_token": "[UNK]"}"#).unwrap();
    dir
}

#[test]
fn a_tokenizer_neither_library_loads_falls_back_or_is_refused() {
    let dir = word_level_dir("backend-wordlevel");
    let plain = ModelFiles::load_instances(&dir.0, None, 1).expect("the default reads a WordLevel tokenizer");
    assert_eq!(plain.0.encoding, Encoding::Default);
    let want = encode(&plain.1[0], "hello world !");
    assert_eq!(want, vec![1, 2, 3]);
    for &backend in LIBRARIES {
        let (files, toks) =
            ModelFiles::load_instances_choosing(&dir.0, None, 2, choice(backend, true)).expect("falls back");
        match &files.encoding {
            Encoding::FellBack(b, why) => {
                assert_eq!(*b, backend);
                assert!(why.contains("cannot load it") && why.contains("WordLevel"), "{why}");
            }
            other => panic!("{}: {other:?}", backend.name()),
        }
        assert!(toks.iter().all(|t| t.encoder().is_none()));
        assert_eq!(encode(&toks[1], "hello world !"), want);
        let e = ModelFiles::load_instances_choosing(&dir.0, None, 2, choice(backend, false)).expect_err("refused");
        let msg = e.to_string();
        assert!(
            msg.contains(&format!("failed to load {} tokenizer backend and fallback is disabled", backend.name()))
                && msg.contains("tokenizer.json"),
            "{msg}"
        );
    }
}

/// The check texts themselves: every one encodes with the default on every model, and the
/// long one is past the sizes where the libraries cut their input.
#[test]
fn the_check_texts_encode_with_the_default() {
    let files = ModelFiles::load(common::model_dir("qwen3")).unwrap();
    let t = files.tokenizer().unwrap();
    let texts = parity::texts(&t);
    assert!(texts.len() > parity::TEXTS.len() + 1, "the model's added tokens are in");
    assert!(texts.last().is_some_and(|l| l.len() > 64 * 1024));
    for text in &texts {
        let mut out = Vec::new();
        t.encode_into(text, true, &mut out).unwrap();
    }
}

/// Qwen3's `tokenizer.json` with `<|im_start|>` marked `single_word` (matched only as a whole
/// word): the default and fastokens honour the flag, basetenkenizer 0.2.9 does not — a real
/// difference the load check finds.
fn single_word_qwen3() -> common::TempDir {
    let src = common::model_dir("qwen3");
    let dir = common::TempDir::new("backend-single-word");
    let mut json: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(src.join("tokenizer.json")).unwrap()).unwrap();
    let added = json["added_tokens"].as_array_mut().unwrap();
    let tok = added.iter_mut().find(|t| t["content"] == "<|im_start|>").expect("qwen3 has <|im_start|>");
    tok["single_word"] = true.into();
    std::fs::write(dir.0.join("tokenizer.json"), json.to_string()).unwrap();
    std::fs::copy(src.join("tokenizer_config.json"), dir.0.join("tokenizer_config.json")).unwrap();
    dir
}

#[test]
fn other_ids_than_the_default_fall_back_or_are_refused() {
    let dir = single_word_qwen3();
    let text = "x<|im_start|>y <|im_start|> z";
    let (plain, def) = ModelFiles::load_instances(&dir.0, None, 1).unwrap();
    assert_eq!(plain.encoding, Encoding::Default);
    let want = encode(&def[0], text);
    assert_eq!(want.iter().filter(|&&id| id == 151644).count(), 1, "the default matches only the whole word");

    let (files, toks) =
        ModelFiles::load_instances_choosing(&dir.0, None, 2, choice(TokenizerBackend::Basetenkenizer, true)).unwrap();
    match &files.encoding {
        Encoding::FellBack(TokenizerBackend::Basetenkenizer, why) => {
            assert!(
                why.contains("basetenkenizer gives other token ids than the default tokenizer: check text"),
                "{why}"
            );
        }
        other => panic!("{other:?}"),
    }
    assert!(toks.iter().all(|t| t.encoder().is_none()));
    assert_eq!(encode(&toks[1], text), want, "the default encodes");
    let e = ModelFiles::load_instances_choosing(&dir.0, None, 2, choice(TokenizerBackend::Basetenkenizer, false))
        .expect_err("refused without fallback");
    assert!(
        e.to_string().contains("other token ids than the default tokenizer")
            && e.to_string().contains("fallback is disabled"),
        "{e}"
    );

    // fastokens honours the flag: used, and equal on the text.
    let (files, toks) =
        ModelFiles::load_instances_choosing(&dir.0, None, 1, choice(TokenizerBackend::Fastokens, false)).unwrap();
    assert_eq!(files.encoding, Encoding::Library(TokenizerBackend::Fastokens));
    assert_eq!(encode(&toks[0], text), want);
}
