//! Parser parity with Dynamo 1.6.1: its recorded answers to the scripted corpus
//! (`tests/data/parsers/observed-1.6.1.jsonl`, made by `scripts/parsers_record.sh dynamo`)
//! against switchyard's parsers, for every reasoning parser name 1.6.1 accepts. The corpus
//! text split at every token is what a real engine produces; switchyard's split does not
//! depend on how the text is cut, so one run over the whole text answers for every split.
//! Where 1.6.1 loses the model's text (docs/dynamo/parsers.md §5), the whole text must come
//! back as content instead.

use std::collections::BTreeMap;

use serde_json::Value;
use switchyard::parsers::reasoning::{format_of, Split};

fn observed() -> Vec<Value> {
    include_str!("data/parsers/observed-1.6.1.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn corpus() -> Value {
    serde_json::from_str(include_str!("data/parsers/corpus.json")).unwrap()
}

/// Reasoning parsers with which 1.6.1 loses every text.
const LOSES_TEXT: &[&str] = &["inkling", "minimax_m3", "minimax-m3"];

/// (name, corpus text) pairs whose format is not split yet: granite's "Here is my thought
/// process:" / "Here is my response:" framing, and muse's channel framing (1.6.1 drops
/// `<|message|>` and `<|start|>` from the Harmony-shaped text). Each must still differ from
/// 1.6.1's answer, so a pair leaves this list when its format lands.
const NOT_YET: &[(&str, &str)] = &[("granite", "granite"), ("muse", "harmony"), ("muse_glimmer", "harmony")];

#[test]
fn reasoning_parsers_split_as_1_6_1_does() {
    let corpus = corpus();
    let texts = corpus["reasoning_texts"].as_object().unwrap();
    let mut checked = BTreeMap::<String, usize>::new();
    for rec in observed() {
        let (Some(name), None) = (rec["reasoning_parser"].as_str(), rec["tool_parser"].as_str()) else { continue };
        if rec["mode"] != "token" && rec["mode"] != "whole" {
            continue;
        }
        let text = texts[rec["text"].as_str().unwrap()].as_str().unwrap();
        let format = format_of(name).unwrap_or_else(|| panic!("1.6.1 accepts reasoning parser {name}"));
        let mut split = Split::new(format);
        let (mut reasoning, mut content) = (String::new(), String::new());
        split.push(text, &mut reasoning, &mut content);
        split.finish(&mut reasoning, &mut content);
        let (want_r, want_c) = if LOSES_TEXT.contains(&name) {
            assert!(rec["content"].is_null() && rec["reasoning"].is_null(), "1.6.1 now keeps {name}'s text: {rec}");
            (String::new(), text.to_string())
        } else {
            (
                rec["reasoning"].as_str().unwrap_or_default().to_string(),
                rec["content"].as_str().unwrap_or_default().to_string(),
            )
        };
        let got = (reasoning.as_str(), content.as_str());
        let want = (want_r.as_str(), want_c.as_str());
        if NOT_YET.contains(&(name, rec["text"].as_str().unwrap())) {
            assert_ne!(got, want, "{name} now splits {}: take it off NOT_YET", rec["text"]);
            continue;
        }
        assert_eq!(got, want, "{name}, {}: {text:?}", rec["text"]);
        *checked.entry(name.to_string()).or_default() += 1;
    }
    // Every name 1.6.1 accepts was recorded and checked.
    assert_eq!(checked.len(), 35, "{checked:?}");
}
