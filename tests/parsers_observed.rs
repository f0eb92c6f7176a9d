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

mod tools {
    use super::*;
    use switchyard::parsers::{reasoning, tools, Out, Parse, Parsers};

    /// What switchyard answers: content, calls (name, arguments as JSON), reasoning.
    type Answer = (String, Vec<(String, Value)>, String);

    fn ours(tool: Option<&str>, reasoning: Option<&str>, text: &str) -> Answer {
        let parsers = Parsers {
            reasoning: reasoning.map(|n| reasoning::format_of(n).unwrap()),
            tools: tool.map(|n| tools::format_of(n).unwrap_or_else(|| panic!("1.6.1 accepts tool parser {n}"))),
        };
        let mut parse = Parse::new(parsers);
        let mut out = Out::default();
        parse.push(text, &mut out);
        parse.finish(&mut out);
        let calls =
            out.calls.into_iter().map(|c| (c.name, serde_json::from_str::<Value>(&c.arguments).unwrap())).collect();
        (out.content, calls, out.reasoning)
    }

    fn theirs(rec: &Value) -> Answer {
        let calls = rec["tool_calls"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| (c["name"].as_str().unwrap().to_string(), c["arguments"].clone()))
            .collect();
        (
            rec["content"].as_str().unwrap_or_default().to_string(),
            calls,
            rec["reasoning"].as_str().unwrap_or_default().to_string(),
        )
    }

    /// What switchyard answers where it parts from 1.6.1 on purpose.
    enum Expect {
        /// 1.6.1 loses some of the model's text: it all comes back as content instead.
        Whole,
        /// 1.6.1 loses or mangles a call (or the reasoning) that the text makes plainly:
        /// switchyard's answer (content, calls as (name, arguments JSON), reasoning).
        Answer(&'static str, &'static [(&'static str, &'static str)], &'static str),
    }

    const WEATHER: &[(&str, &str)] = &[("get_weather", r#"{"location": "Paris"}"#)];
    const NESTED: &[(&str, &str)] = &[("search", r#"{"query": "a {b} [c] \"d\" </tool_call> e"}"#)];

    /// (tool parser, reasoning parser or "-", corpus text) where switchyard and 1.6.1 differ.
    /// Any other setting must answer exactly as 1.6.1; each of these must not (so an entry
    /// leaves the list when 1.6.1 is recorded again and agrees).
    const DIFFERS: &[(&str, &str, &str, Expect)] = &[
        // Formats 1.6.1's parser does not read, whose text it drops.
        ("deepseek_v3", "-", "deepseek_v31", Expect::Whole),
        ("deepseek_v3_1", "-", "deepseek_v3", Expect::Whole),
        ("glm47", "-", "hermes_bad_json", Expect::Whole),
        ("glm47", "-", "hermes_prose", Expect::Whole),
        ("glm47", "-", "hermes_unclosed", Expect::Whole),
        ("glm47", "-", "qwen3_coder", Expect::Whole),
        ("hermes", "-", "glm45", Expect::Whole),
        ("hermes", "-", "glm47", Expect::Whole),
        ("hermes", "-", "hermes_bad_json", Expect::Whole),
        ("hermes", "-", "hermes_prose", Expect::Whole),
        ("hermes", "-", "qwen3_coder", Expect::Whole),
        ("qwen25", "-", "glm45", Expect::Whole),
        ("qwen25", "-", "glm47", Expect::Whole),
        ("qwen25", "-", "hermes_bad_json", Expect::Whole),
        ("qwen25", "-", "hermes_prose", Expect::Whole),
        ("qwen25", "-", "hermes_unclosed", Expect::Whole),
        ("qwen25", "-", "qwen3_coder", Expect::Whole),
        ("muse", "-", "harmony", Expect::Whole),
        ("muse", "-", "harmony_final", Expect::Whole),
        ("muse", "-", "harmony_full", Expect::Whole),
        ("muse_glimmer", "-", "harmony", Expect::Whole),
        ("muse_glimmer", "-", "harmony_final", Expect::Whole),
        ("muse_glimmer", "-", "harmony_full", Expect::Whole),
        ("nemotron_nano", "-", "glm45", Expect::Whole),
        ("nemotron_nano", "-", "glm47", Expect::Whole),
        ("nemotron_nano", "-", "hermes_bad_json", Expect::Whole),
        ("nemotron_nano", "-", "hermes_nested", Expect::Whole),
        ("nemotron_nano", "-", "hermes_one", Expect::Whole),
        ("nemotron_nano", "-", "hermes_post", Expect::Whole),
        ("nemotron_nano", "-", "hermes_pre", Expect::Whole),
        ("nemotron_nano", "-", "hermes_two", Expect::Whole),
        ("qwen3_coder", "-", "glm45", Expect::Whole),
        ("qwen3_coder", "-", "glm47", Expect::Whole),
        ("qwen3_coder", "-", "hermes_bad_json", Expect::Whole),
        ("qwen3_coder", "-", "hermes_nested", Expect::Whole),
        ("qwen3_coder", "-", "hermes_one", Expect::Whole),
        ("qwen3_coder", "-", "hermes_post", Expect::Whole),
        ("qwen3_coder", "-", "hermes_pre", Expect::Whole),
        ("qwen3_coder", "-", "hermes_two", Expect::Whole),
        // A JSON string holding the end tag: 1.6.1's hermes cuts the call there and loses
        // it (its default parser reads it whole; its mistral and phi4 miss it).
        ("hermes", "-", "hermes_nested", Expect::Answer("", NESTED, "")),
        ("qwen25", "-", "hermes_nested", Expect::Answer("", NESTED, "")),
        ("mistral", "-", "hermes_nested", Expect::Answer("<tool_call>\n</tool_call>", NESTED, "")),
        ("phi4", "-", "hermes_nested", Expect::Answer("<tool_call>\n</tool_call>", NESTED, "")),
        // GLM-4.7 writing JSON, or its pairs on lines of their own: 1.6.1 names the call
        // after the raw text, or drops the arguments.
        ("glm47", "-", "glm45", Expect::Answer("", WEATHER, "")),
        ("glm47", "-", "hermes_nested", Expect::Answer("", NESTED, "")),
        (
            "glm47",
            "-",
            "hermes_one",
            Expect::Answer("", &[("get_weather", r#"{"location": "Paris", "unit": "celsius"}"#)], ""),
        ),
        ("glm47", "-", "hermes_post", Expect::Answer("\nDone.", &[("search", r#"{"query": "x"}"#)], "")),
        ("glm47", "-", "hermes_pre", Expect::Answer("Let me check that for you.\n", WEATHER, "")),
        (
            "glm47",
            "-",
            "hermes_two",
            Expect::Answer(
                "\n",
                &[("get_weather", r#"{"location": "Paris"}"#), ("search", r#"{"query": "Paris news"}"#)],
                "",
            ),
        ),
        // 1.6.1's default parser leaves `TOOLCALL>` of its own marker as content.
        ("default", "-", "nemotron", Expect::Answer("", WEATHER, "")),
        // Mistral's `[TOOL_CALLS]name[ARGS]{…}`: 1.6.1 loses it.
        ("mistral", "-", "mistral_args", Expect::Answer("", WEATHER, "")),
        // Harmony: 1.6.1 loses the call and the analysis.
        ("harmony", "-", "harmony", Expect::Answer("", WEATHER, "")),
        ("harmony", "-", "harmony_full", Expect::Answer("", WEATHER, "The user wants the weather.")),
        ("harmony", "-", "harmony_final", Expect::Answer("Hello there!", &[], "Simple greeting.")),
        ("harmony", "gpt_oss", "think_call", Expect::Answer("", WEATHER, "The user wants the weather.")),
        ("harmony", "gpt_oss", "think_answer", Expect::Answer("Hello there!", &[], "Simple greeting.")),
    ];

    #[test]
    fn tool_parsers_cut_calls_as_1_6_1_does() {
        let corpus = corpus();
        let texts = corpus["tool_texts"].as_object().unwrap();
        let mut failures = Vec::new();
        let mut checked = BTreeMap::<String, usize>::new();
        for rec in observed() {
            let Some(tool) = rec["tool_parser"].as_str() else { continue };
            if rec["mode"] != "token" && rec["mode"] != "whole" {
                continue;
            }
            let reasoning = rec["reasoning_parser"].as_str();
            let key = rec["text"].as_str().unwrap();
            let text = match reasoning {
                None => texts[key].as_str().unwrap().to_string(),
                Some(r) => corpus["combos"]
                    .as_array()
                    .unwrap()
                    .iter()
                    .find(|c| c["tool"] == tool && c["reasoning"] == r)
                    .unwrap()["texts"][key]
                    .as_str()
                    .unwrap()
                    .to_string(),
            };
            // Without tools, or with tool_choice "none", no calls are parsed.
            let offered = rec["variant"] == "tools";
            let got = ours(offered.then_some(tool), reasoning, &text);
            let theirs = theirs(&rec);
            let differs = DIFFERS
                .iter()
                .find(|(t, r, k, _)| offered && *t == tool && *r == reasoning.unwrap_or("-") && *k == key);
            let want = match differs {
                None => theirs.clone(),
                Some((.., Expect::Whole)) => (text.clone(), Vec::new(), String::new()),
                Some((.., Expect::Answer(c, calls, r))) => (
                    c.to_string(),
                    calls.iter().map(|(n, a)| (n.to_string(), serde_json::from_str(a).unwrap())).collect(),
                    r.to_string(),
                ),
            };
            let setting = format!("{tool}/{}/{key} {}", reasoning.unwrap_or("-"), rec["mode"]);
            if got != want {
                failures.push(format!("{setting}: ours {got:?}, want {want:?}"));
            } else if differs.is_some() && got == theirs {
                failures.push(format!("{setting}: 1.6.1 agrees now: take it off DIFFERS"));
            }
            *checked.entry(tool.to_string()).or_default() += 1;
        }
        failures.sort();
        failures.dedup();
        assert!(failures.is_empty(), "{} settings:\n{}", failures.len(), failures.join("\n"));
        // Every name 1.6.1 accepts was recorded and checked.
        assert_eq!(checked.len(), tools::NAMES.len(), "{checked:?}");
    }

    /// However a text is cut (every token boundary is a character boundary), switchyard's
    /// answer is the answer to the whole text: every tool parser, every corpus text.
    #[test]
    fn every_cut_of_every_text_gives_the_whole_answer() {
        let corpus = corpus();
        let texts = corpus["tool_texts"].as_object().unwrap();
        for name in tools::NAMES {
            for (key, text) in texts {
                let text = text.as_str().unwrap();
                let want = ours(Some(name), Some("qwen3"), text);
                for (at, _) in text.char_indices().skip(1) {
                    let parsers = Parsers { reasoning: reasoning::format_of("qwen3"), tools: tools::format_of(name) };
                    let mut parse = Parse::new(parsers);
                    let mut out = Out::default();
                    parse.push(&text[..at], &mut out);
                    parse.push(&text[at..], &mut out);
                    parse.finish(&mut out);
                    let calls = out
                        .calls
                        .into_iter()
                        .map(|c| (c.name, serde_json::from_str::<Value>(&c.arguments).unwrap()))
                        .collect();
                    assert_eq!((out.content, calls, out.reasoning), want, "{name} {key} cut at {at}");
                }
            }
        }
    }
}
