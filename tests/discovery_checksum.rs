//! Model-card checksums as Dynamo 1.6.1 computes them (docs/dynamo/request-plane.md §3.2, §3.7): file checksums,
//! `mdc_sum`, local-file verification, and the mock worker's card.

mod common;

use std::path::Path;
use std::time::Duration;

use common::TempDir;
use serde_json::Value;
use switchyard::discovery::checksum::{file_checksum, file_checksum_path, mdc_sum, verify_file, worker_type_byte};
use switchyard::discovery::records::{parse_record, ModelCard, Record, TemplateFormat};
use switchyard::worker::{Codec, MockConfig, MockWorker, UNVERIFIED_CHECKSUM};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/discovery");

fn json_file(name: &str) -> Value {
    serde_json::from_slice(&std::fs::read(Path::new(DATA).join(name)).unwrap()).unwrap()
}

fn snapshot_card(display_name: &str) -> ModelCard {
    let snap = json_file("filekv_snapshot.json");
    let rec = snap["v1/mdc"]
        .as_object()
        .unwrap()
        .values()
        .find(|r| r["value"]["card_json"]["display_name"] == display_name)
        .unwrap_or_else(|| panic!("no card {display_name}"));
    serde_json::from_value(rec["value"]["card_json"].clone()).unwrap()
}

/// The §3.7 byte layout written out by hand (items 1–8, and the aliases last), hashed with
/// blake3.
fn mdc_sum_by_hand(c: &ModelCard) -> String {
    let mut b = Vec::new();
    b.extend_from_slice(c.display_name.as_bytes());
    b.extend_from_slice(c.source_path.as_deref().unwrap_or("").as_bytes());
    for slot in
        [&c.model_info, &c.tokenizer, &c.prompt_formatter, &c.chat_template_file, &c.gen_config].into_iter().flatten()
    {
        b.extend_from_slice(slot.file.checksum.as_bytes());
    }
    let mut extras: Vec<(String, String)> = c
        .extra_files
        .iter()
        .map(|f| {
            let name = f.path.trim_end_matches('/').rsplit('/').next().unwrap().to_string();
            (name, f.checksum.strip_prefix("blake3:").unwrap().to_string())
        })
        .collect();
    extras.sort();
    for (name, hex) in extras {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(hex.as_bytes());
    }
    b.extend_from_slice(&(c.effective_context_length() as u32).to_be_bytes());
    b.extend_from_slice(&c.kv_cache_block_size.unwrap_or(0).to_be_bytes());
    b.push(worker_type_byte(c.worker_type.as_deref()).unwrap());
    b.extend_from_slice(&(c.needs.len() as u32).to_be_bytes());
    for alt in &c.needs {
        let alt = alt.as_array().unwrap();
        b.extend_from_slice(&(alt.len() as u32).to_be_bytes());
        b.extend(alt.iter().map(|t| worker_type_byte(t.as_str()).unwrap()));
    }
    if !c.aliases.is_empty() {
        b.extend_from_slice(&(c.aliases.len() as u32).to_be_bytes());
        for a in &c.aliases {
            b.extend_from_slice(&(a.len() as u32).to_be_bytes());
            b.extend_from_slice(a.as_bytes());
        }
    }
    blake3::hash(&b).to_hex().to_string()
}

// ---------------------------------------------------------------------------------------------
// File checksums
// ---------------------------------------------------------------------------------------------

#[test]
fn file_checksum_is_prefixed_lower_hex_blake3() {
    // Official BLAKE3 test values.
    assert_eq!(file_checksum(b""), "blake3:af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262");
    assert_eq!(file_checksum(b"abc"), "blake3:6437b3ac38465133ffb63b75273a8db548c558465d79db03fd359c6cd5bd9d85");
    // Streaming over a file (bigger than the read buffer) agrees with the one-shot hash.
    let dir = TempDir::new("checksum");
    let big: Vec<u8> = (0..200_000u32).map(|i| (i * 7 % 251) as u8).collect();
    let p = dir.0.join("tokenizer.json");
    std::fs::write(&p, &big).unwrap();
    assert_eq!(file_checksum_path(&p).unwrap(), file_checksum(&big));
}

#[test]
fn verify_file_accepts_match_and_explains_mismatch() {
    let dir = TempDir::new("checksum");
    let p = dir.0.join("config.json");
    std::fs::write(&p, b"{}").unwrap();
    let good = file_checksum(b"{}");
    assert_eq!(verify_file(&p, &good), Ok(()));
    // Hex case does not matter.
    assert_eq!(verify_file(&p, &format!("blake3:{}", good[7..].to_ascii_uppercase())), Ok(()));

    let wrong = file_checksum(b"[]");
    let e = verify_file(&p, &wrong).unwrap_err();
    assert!(e.contains("checksum mismatch") && e.contains(&wrong) && e.contains(&good), "{e}");
    // The placeholder the mock worker used to write is a mismatch, as in Dynamo.
    assert!(verify_file(&p, UNVERIFIED_CHECKSUM).unwrap_err().contains("checksum mismatch"));
    // No `blake3:` prefix: refused, not compared.
    assert!(verify_file(&p, &good[7..]).unwrap_err().contains("unsupported checksum"));
    // Unreadable file.
    assert!(verify_file(&dir.0.join("absent.json"), &good).unwrap_err().contains("cannot read"));
}

// ---------------------------------------------------------------------------------------------
// mdc_sum
// ---------------------------------------------------------------------------------------------

/// The captured cards have `source_path` scrubbed to `<model-dir>` (README of the captures),
/// so the values observed on the wire (02e443a1… for qwen3, f0a5247f… for probejson) cannot
/// be recomputed from them. These are the values of the scrubbed cards as computed by the
/// an independent reference implementation of docs/dynamo/request-plane.md §3.7 (a Python script, not in the repository), which reproduced the
/// observed values on the unscrubbed cards.
#[test]
fn mdc_sum_of_captured_cards_matches_the_reference_script() {
    for (name, want) in [
        ("qwen3", "dbdd9c0f426d1114df602c9f42127c6bf5d12e0b2681b3fbb9b7d635754d2a0f"),
        ("probejson", "ec067799103ffaebde3988f3c70e864c3f4191a1cba63a60fa0c93d564d5da53"),
        ("probesh", "6b9e6f0bf0c8415c3939fec90d2a4062504f79526baf6d06cc3a0554a092b36b"),
    ] {
        let card = snapshot_card(name);
        assert_eq!(mdc_sum(&card), want, "{name}");
        assert_eq!(card.mdc_sum(), want, "{name}");
        assert_eq!(mdc_sum_by_hand(&card), want, "{name}");
    }
}

#[test]
fn mdc_sum_vectors_from_the_reference_script() {
    let v = json_file("mdc_sum_vectors.json");
    let vectors = v["vectors"].as_array().unwrap();
    assert!(vectors.len() >= 7);
    for t in vectors {
        let card: ModelCard = serde_json::from_value(t["card_json"].clone()).unwrap();
        let want = t["mdc_sum"].as_str().unwrap();
        assert_eq!(mdc_sum(&card), want, "{}", t["label"]);
        assert_eq!(mdc_sum_by_hand(&card), want, "{}", t["label"]);
    }
}

/// The cards 1.6.1 workers wrote (gpt-oss with its `chat_template.jinja`, a custom
/// template, aliases) parse, keep their chat template slot as written, and hash to the
/// `mdc_sum` the 1.6.1 frontend sent with their requests.
#[test]
fn cards_written_by_1_6_1_parse_and_hash_as_it_sends() {
    let v = json_file("cards_1_6_1.json");
    let cards = v["cards"].as_array().unwrap();
    assert_eq!(cards.len(), 4);
    let mut hashed = 0;
    for c in cards {
        let raw = serde_json::to_vec(&c["record"]).unwrap();
        let (rec, _) = parse_record(&raw).unwrap_or_else(|e| panic!("{}: {e}", c["file_name"]));
        let Record::Model(rec) = rec else { panic!("not a model record") };
        let card = rec.card_json;
        let name = card.display_name.as_str();
        if let Some(want) = c["mdc_sum"].as_str() {
            assert_eq!(card.mdc_sum(), want, "{name}");
            assert_eq!(mdc_sum_by_hand(&card), want, "{name}");
            hashed += 1;
        }
        // The slot is written back the way it was read.
        let written = serde_json::to_value(&card).unwrap();
        assert_eq!(written["chat_template_file"], c["record"]["card_json"]["chat_template_file"], "{name}");
        assert_eq!(written.get("aliases"), c["record"]["card_json"].get("aliases"), "{name}");
        let template = card.chat_template();
        match name {
            "gptoss-py" | "gptoss-mock" => {
                let t = template.unwrap();
                assert_eq!(
                    (t.kind.as_str(), t.is_custom, t.template_format()),
                    ("hf_chat_template", Some(false), Some(TemplateFormat::Jinja))
                );
                assert!(t.file.path.ends_with("/gptoss/chat_template.jinja"));
                assert_eq!(t.file.size, Some(16738));
            }
            "qwen3-custom" => {
                let t = template.unwrap();
                assert_eq!((t.is_custom, t.template_format()), (Some(true), Some(TemplateFormat::Jinja)));
            }
            "qwen3-main" => {
                assert!(template.is_none());
                assert_eq!(card.aliases, ["qwen3-alias-a", "qwen3-alias-b"]);
                // Without its aliases the card hashes differently.
                let mut plain = card.clone();
                plain.aliases.clear();
                assert_ne!(plain.mdc_sum(), card.mdc_sum());
            }
            other => panic!("unexpected card {other}"),
        }
    }
    assert_eq!(hashed, 3);
}

/// Every chat-template shape of 1.6.1's `PromptFormatterArtifact`: `hf_chat_template` (and its
/// alias `hf_chat_template_jinja`) and `hf_chat_template_json`, nested `{is_custom, file}`, in
/// `chat_template_file` or `prompt_formatter`; the flat shape is refused for them.
#[test]
fn chat_template_slots_in_every_shape() {
    let file = serde_json::json!({"path": "/m/t", "checksum": file_checksum(b"t"), "size": 1});
    let mut base = json_file("mdc_sum_vectors.json")["vectors"][0]["card_json"].clone();
    base.as_object_mut().unwrap().remove("chat_template_file");
    for (kind, format) in [
        ("hf_chat_template", TemplateFormat::Jinja),
        ("hf_chat_template_jinja", TemplateFormat::Jinja),
        ("hf_chat_template_json", TemplateFormat::Json),
    ] {
        for custom in [false, true] {
            let mut v = base.clone();
            v["chat_template_file"] = serde_json::json!({ kind: {"is_custom": custom, "file": file} });
            let card: ModelCard = serde_json::from_value(v.clone()).unwrap();
            let t = card.chat_template().unwrap();
            assert_eq!((t.kind.as_str(), t.is_custom, t.template_format()), (kind, Some(custom), Some(format)));
            assert_eq!(t.file.checksum, file_checksum(b"t"));
            assert_eq!(serde_json::to_value(&card).unwrap()["chat_template_file"], v["chat_template_file"]);
            // Only the file's checksum is hashed, whatever the shape.
            assert_eq!(card.mdc_sum(), mdc_sum_by_hand(&card));
            assert_eq!(card.check_slots(), Ok(()));
            // As the prompt formatter it parses, but 1.6.1 refuses to serve it.
            let mut pf = base.clone();
            pf["prompt_formatter"] = v["chat_template_file"].clone();
            let card: ModelCard = serde_json::from_value(pf).unwrap();
            assert!(card.chat_template().is_none());
            assert!(card.check_slots().unwrap_err().contains("prompt_formatter is a chat template"));
        }
        // The flat shape of the other slots, or no `is_custom`, is not a chat template slot.
        let mut flat = base.clone();
        flat["chat_template_file"] = serde_json::json!({ kind: file });
        assert!(serde_json::from_value::<ModelCard>(flat).is_err(), "{kind}");
    }
    // A tokenizer config in the template slot is no template (1.6.1 ignores it there).
    let mut tc = base.clone();
    tc["chat_template_file"] = serde_json::json!({"hf_tokenizer_config_json": file});
    let card: ModelCard = serde_json::from_value(tc).unwrap();
    assert!(card.chat_template().is_none());
}

/// `extra_files` and `aliases` are hashed the way 1.6.1's `mdcsum` does: extra files as
/// sorted (file name, 0 byte, checksum hex) after the slots, aliases last (count, then
/// length-prefixed names, in order), each only when there are some.
#[test]
fn mdc_sum_hashes_extra_files_and_aliases() {
    let card = snapshot_card("qwen3");
    let base = mdc_sum(&card);
    // mdc_sum, checked against the layout written by hand.
    let layout = |c: &ModelCard| {
        let sum = mdc_sum_by_hand(c);
        assert_eq!(mdc_sum(c), sum);
        sum
    };
    let mut empty = card.clone();
    empty.extra_files = Vec::new();
    empty.aliases = Vec::new();
    assert_eq!(layout(&empty), base, "empty lists hash as absent ones");

    let file = |path: &str, bytes: &[u8]| {
        serde_json::from_value(serde_json::json!({"path": path, "checksum": file_checksum(bytes)})).unwrap()
    };
    let mut extras = card.clone();
    extras.extra_files = vec![
        file("http://h:1/v1/metadata/a/b/_base/preprocessor_config.json", b"p"),
        file("/m/added_tokens.json", b"a"),
    ];
    let with_extras = layout(&extras);
    assert_ne!(with_extras, base);
    extras.extra_files.reverse();
    assert_eq!(mdc_sum(&extras), with_extras, "extra files are sorted by name first");
    // The bytes, written out: the slots, then `added_tokens.json\0<hex>preprocessor_config.json\0<hex>`.
    let mut b = Vec::new();
    b.extend_from_slice(card.display_name.as_bytes());
    b.extend_from_slice(card.source_path.as_deref().unwrap().as_bytes());
    for (_, slot) in card.file_slots() {
        b.extend_from_slice(slot.file.checksum.as_bytes());
    }
    for (name, bytes) in [("added_tokens.json", b"a"), ("preprocessor_config.json", b"p")] {
        b.extend_from_slice(name.as_bytes());
        b.push(0);
        b.extend_from_slice(blake3::hash(bytes).to_hex().as_bytes());
    }
    b.extend_from_slice(&(card.effective_context_length() as u32).to_be_bytes());
    b.extend_from_slice(&card.kv_cache_block_size.unwrap().to_be_bytes());
    b.push(worker_type_byte(card.worker_type.as_deref()).unwrap());
    b.extend_from_slice(&0u32.to_be_bytes());
    assert!(card.needs.is_empty());
    assert_eq!(with_extras, blake3::hash(&b).to_hex().to_string());
    // Then the aliases, last.
    extras.aliases = vec!["x".into(), "yz".into()];
    b.extend_from_slice(&2u32.to_be_bytes());
    b.extend_from_slice(&1u32.to_be_bytes());
    b.extend_from_slice(b"x");
    b.extend_from_slice(&2u32.to_be_bytes());
    b.extend_from_slice(b"yz");
    assert_eq!(mdc_sum(&extras), blake3::hash(&b).to_hex().to_string());
    extras.aliases.reverse();
    assert_ne!(mdc_sum(&extras), blake3::hash(&b).to_hex().to_string(), "alias order is hashed");
}

#[test]
fn mdc_sum_hashes_the_prefixed_checksum_strings() {
    let card = snapshot_card("qwen3");
    let mut stripped = card.clone();
    for s in
        [&mut stripped.model_info, &mut stripped.tokenizer, &mut stripped.prompt_formatter, &mut stripped.gen_config]
    {
        let f = &mut s.as_mut().unwrap().file;
        f.checksum = f.checksum.trim_start_matches("blake3:").to_string();
    }
    assert_ne!(mdc_sum(&card), mdc_sum(&stripped));
    // Paths and sizes are not hashed: URL and local-path cards of the same files agree.
    let mut moved = card.clone();
    moved.model_info.as_mut().unwrap().file.path = "http://h:1/v1/metadata/x/config.json".into();
    moved.model_info.as_mut().unwrap().file.size = None;
    assert_eq!(mdc_sum(&card), mdc_sum(&moved));
    // Neither are slug or fields outside §3.7 (migration_limit, model_type, runtime_config.*).
    let mut other = card.clone();
    other.slug = Some("other".into());
    other.migration_limit = Some(3);
    other.runtime_config.total_kv_blocks = Some(1);
    assert_eq!(mdc_sum(&card), mdc_sum(&other));
    // runtime_config.context_length = 0 is used as is (not replaced by the 40960 maximum).
    let mut no_rc_ctx = card.clone();
    no_rc_ctx.runtime_config.context_length = None;
    assert_ne!(mdc_sum(&card), mdc_sum(&no_rc_ctx));
}

// ---------------------------------------------------------------------------------------------
// Local verification
// ---------------------------------------------------------------------------------------------

#[test]
fn verify_local_files_checks_local_slots_and_skips_urls() {
    let dir = TempDir::new("checksum");
    let cfg = dir.0.join("config.json");
    let tok = dir.0.join("tokenizer.json");
    std::fs::write(&cfg, b"{\"a\":1}").unwrap();
    std::fs::write(&tok, b"{\"model\":{}}").unwrap();
    let mut card = snapshot_card("qwen3");
    card.prompt_formatter = None;
    card.gen_config = None;
    let mi = &mut card.model_info.as_mut().unwrap().file;
    mi.path = cfg.to_string_lossy().into_owned();
    mi.checksum = file_checksum(b"{\"a\":1}");
    let tk = &mut card.tokenizer.as_mut().unwrap().file;
    tk.path = tok.to_string_lossy().into_owned();
    tk.checksum = file_checksum(b"{\"model\":{}}");
    assert_eq!(card.verify_local_files(), Ok(()));

    // A URL slot is not fetched, whatever its checksum.
    let mut with_url = card.clone();
    let tk = &mut with_url.tokenizer.as_mut().unwrap().file;
    tk.path = "http://127.0.0.1:1/v1/metadata/dynamo/b/g/qwen3/_base/tokenizer.json".into();
    tk.checksum = UNVERIFIED_CHECKSUM.into();
    assert_eq!(with_url.verify_local_files(), Ok(()));

    // A changed file is reported with its slot.
    std::fs::write(&tok, b"{\"model\":{\"x\":1}}").unwrap();
    let e = card.verify_local_files().unwrap_err();
    assert!(e.starts_with("tokenizer: checksum mismatch"), "{e}");
    // A missing file too.
    std::fs::remove_file(&cfg).unwrap();
    assert!(card.verify_local_files().unwrap_err().starts_with("model_info: cannot read"));
}

// ---------------------------------------------------------------------------------------------
// The mock worker's card
// ---------------------------------------------------------------------------------------------

#[test]
fn mock_worker_card_carries_real_checksums() {
    let root = TempDir::new("checksum");
    let model = TempDir::new("checksum");
    let files: [(&str, &[u8]); 4] = [
        ("config.json", b"{\"architectures\":[\"Qwen3ForCausalLM\"]}"),
        ("tokenizer.json", b"{\"model\":{\"vocab\":{}}}"),
        ("tokenizer_config.json", b"{\"chat_template\":\"{{ messages }}\"}"),
        ("generation_config.json", b"{\"eos_token_id\":[1]}"),
    ];
    for (name, bytes) in files {
        std::fs::write(model.0.join(name), bytes).unwrap();
    }
    let cfg = MockConfig {
        model_name: "mock-qwen".into(),
        model_dir: Some(model.0.clone()),
        keepalive: Duration::from_secs(60),
        codec: Codec::Msgpack,
        ..Default::default()
    };
    let mut w = MockWorker::start(cfg).unwrap();
    let reg = w.register_file(&root.0).unwrap();
    let (rec, _) = parse_record(&std::fs::read(&reg.card_file).unwrap()).unwrap();
    w.stop();
    let Record::Model(rec) = rec else { panic!("not a model record") };
    let card = rec.card_json;

    // Every slot: `blake3:<hex>` of the file's bytes, the right size, path in the model dir.
    let slots = card.file_slots();
    assert_eq!(slots.len(), 4);
    for ((slot, s), (name, bytes)) in slots.iter().zip(files) {
        assert_eq!(Path::new(&s.file.path), model.0.join(name), "{slot}");
        assert_eq!(s.file.checksum, file_checksum(bytes), "{slot}");
        assert_ne!(s.file.checksum, UNVERIFIED_CHECKSUM);
        assert_eq!(s.file.checksum.len(), "blake3:".len() + 64);
        assert_eq!(s.file.size, Some(bytes.len() as u64), "{slot}");
    }
    assert_eq!(card.verify_local_files(), Ok(()));

    // mdc_sum is what the §3.7 layout gives for the card's values.
    assert_eq!(card.source_path.as_deref(), Some(model.0.to_string_lossy().as_ref()));
    assert_eq!(card.worker_type.as_deref(), Some("aggregated"));
    assert_eq!(mdc_sum(&card), mdc_sum_by_hand(&card));
    let mut layout = Vec::new();
    layout.extend_from_slice(b"mock-qwen");
    layout.extend_from_slice(model.0.to_string_lossy().as_bytes());
    for (_, bytes) in files {
        layout.extend_from_slice(file_checksum(bytes).as_bytes());
    }
    layout.extend_from_slice(&0u32.to_be_bytes()); // runtime_config.context_length = 0
    layout.extend_from_slice(&64u32.to_be_bytes()); // kv_cache_block_size
    layout.push(4); // aggregated
    layout.extend_from_slice(&0u32.to_be_bytes()); // needs = []
    assert_eq!(mdc_sum(&card), blake3::hash(&layout).to_hex().to_string());
}

#[test]
fn mock_worker_without_model_dir_has_no_file_slots() {
    let root = TempDir::new("checksum");
    let cfg = MockConfig { model_name: "bare".into(), model_dir: None, ..Default::default() };
    let mut w = MockWorker::start(cfg).unwrap();
    let reg = w.register_file(&root.0).unwrap();
    let (rec, _) = parse_record(&std::fs::read(&reg.card_file).unwrap()).unwrap();
    w.stop();
    let Record::Model(rec) = rec else { panic!("not a model record") };
    assert!(rec.card_json.file_slots().is_empty());
    assert_eq!(rec.card_json.verify_local_files(), Ok(()));
    assert_eq!(mdc_sum(&rec.card_json), mdc_sum_by_hand(&rec.card_json));
}
