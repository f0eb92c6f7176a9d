//! Every block-hash vector captured from the 1.6.1 binding (tests/data/kv/kv-hash-vectors.json).

use serde_json::Value;
use switchyard::plane::kv_events::MmExtraInfo;
use switchyard::router::kv::hash::{
    local_block_hashes, lora_name_to_id, sequence_hashes, BlockHashOptions, TrackingKey, TrackingScope,
};

fn u64s(v: &Value) -> Vec<u64> {
    v.as_array().unwrap().iter().map(|x| x.as_u64().unwrap()).collect()
}

fn tokens(case: &Value) -> Vec<u32> {
    if let Some(t) = case.get("tokens") {
        return t.as_array().unwrap().iter().map(|x| x.as_u64().unwrap() as u32).collect();
    }
    let desc = case["tokens_desc"].as_str().unwrap();
    let inner = desc.strip_prefix("range(").unwrap().strip_suffix(')').unwrap();
    let (a, b) = inner.split_once(", ").unwrap();
    (a.parse().unwrap()..b.parse().unwrap()).collect()
}

#[test]
fn all_hash_vectors() {
    let text = std::fs::read_to_string("tests/data/kv/kv-hash-vectors.json").unwrap();
    let cases: Vec<Value> = serde_json::from_str(&text).unwrap();
    let mut checked = 0;
    for case in &cases {
        let name = case["case"].as_str().unwrap();
        if let Some(expected) = case.get("local_block_hashes") {
            let toks = tokens(case);
            assert_eq!(toks.len() as u64, case["num_tokens"].as_u64().unwrap(), "{name}");
            let o = &case["options"];
            let mm: Option<Vec<Option<MmExtraInfo>>> =
                o.get("block_mm_infos").map(|v| serde_json::from_value(v.clone()).unwrap());
            let opts = BlockHashOptions {
                lora_name: o.get("lora_name").and_then(Value::as_str),
                cache_namespace: o.get("cache_namespace").and_then(Value::as_str),
                is_eagle: o.get("is_eagle").and_then(Value::as_bool).unwrap_or(false),
                block_mm_infos: mm.as_deref(),
            };
            let bs = case["block_size"].as_u64().unwrap() as u32;
            let local = local_block_hashes(&toks, bs, &opts);
            assert_eq!(local, u64s(expected), "local hashes: {name}");
            let seq = u64s(&case["sequence_hashes_public_xxh3_v1"]);
            assert_eq!(sequence_hashes(&local), seq, "sequence hashes: {name}");
        } else if name.starts_with("keyed-xxh3-v1") {
            assert_eq!(case["key"], "32 bytes of 0x5a");
            let key = TrackingKey { key: [0x5a; 32], key_id: case["key_id"].as_str().unwrap().into() };
            let scope = TrackingScope {
                model_name: case["model_name"].as_str().unwrap(),
                routing_group: case["routing_group"].as_str().unwrap(),
                block_size: case["block_size"].as_u64().unwrap() as u32,
            };
            let opts = BlockHashOptions {
                lora_name: case["lora_name"].as_str(),
                cache_namespace: case["cache_namespace"].as_str(),
                is_eagle: case["is_eagle"].as_bool().unwrap(),
                block_mm_infos: None,
            };
            let (bseed, cseed) = key.seeds(&scope, &opts);
            assert_eq!(bseed, case["derived_block_seed"].as_u64().unwrap());
            assert_eq!(cseed, case["derived_chain_seed"].as_u64().unwrap());
            let toks = tokens(case);
            assert_eq!(key.sequence_hashes(&scope, &toks, &opts), u64s(&case["sequence_hashes"]));
        } else if name.starts_with("lora_name_to_id") {
            let v = lora_name_to_id(case["lora_name"].as_str().unwrap());
            assert_eq!(i64::from(v), case["value"].as_i64().unwrap());
        } else {
            panic!("vector of an unknown kind: {name}");
        }
        checked += 1;
    }
    assert_eq!(checked, cases.len());
    assert_eq!(checked, 14);
}
