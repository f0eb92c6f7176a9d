use super::*;

type Answer = (String, Vec<(String, String)>, String);

/// Parser `name`'s answer to `pieces`, fed one after the other.
fn pieces<'a>(name: &str, pieces: impl IntoIterator<Item = &'a str>) -> Answer {
    let mut j = Jail::new(format_of(name).unwrap());
    let mut out = Out::default();
    for p in pieces {
        j.push(p, &mut out);
    }
    j.finish(&mut out);
    (out.content, out.calls.into_iter().map(|c| (c.name, c.arguments)).collect(), out.reasoning)
}

fn whole(name: &str, text: &str) -> Answer {
    pieces(name, [text])
}

/// `text` one character at a time.
fn chars(text: &str) -> impl Iterator<Item = &str> {
    text.char_indices().map(|(i, c)| &text[i..i + c.len_utf8()])
}

#[test]
fn every_name_has_a_format() {
    for name in NAMES {
        assert!(format_of(name).is_some(), "{name}");
    }
    assert!(format_of("no-such").is_none());
}

#[test]
fn every_split_of_a_text_gives_the_same_answer() {
    let texts = [
        ("hermes", "Let me check.\n<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\": \"</tool_call>\"}}\n</tool_call>\nDone."),
        ("hermes", "Use the <tool_call> tag."),
        ("hermes", "{\"name\": \"f\", \"parameters\": {}} and [1]"),
        ("jamba", "x \n<tool_calls>[{\"name\": \"f\", \"arguments\": {}}]</tool_calls> y"),
        ("phi4", "functools[{\"name\": \"f\", \"arguments\": {}}]"),
        ("default", "<|python_tag|>{\"name\": \"f\", \"parameters\": {\"x\": 1}}"),
        ("pythonic", "Sure! [f(a='x'), g(b=[1, 2], c={'k': None})] ok"),
        ("qwen3_coder", "I will.\n<function=f>\n<parameter=a>\nv\n</parameter>\n</function> more"),
        ("minimax_m2", "<minimax:tool_call>\n<invoke name=\"f\">\n<parameter name=\"a\">v</parameter>\n</invoke>\n</minimax:tool_call>"),
        ("deepseek_v3_2", "<｜DSML｜tool_calls>\n<｜DSML｜invoke name=\"f\">\n<｜DSML｜parameter name=\"a\" string=\"false\">3</｜DSML｜parameter>\n</｜DSML｜invoke>\n</｜DSML｜tool_calls>"),
        ("glm47", "<tool_call>f<arg_key>a</arg_key><arg_value>1</arg_value></tool_call>"),
        ("kimi_k2", "<|tool_calls_section_begin|><|tool_call_begin|>functions.f:0<|tool_call_argument_begin|>{}<|tool_call_end|><|tool_calls_section_end|>"),
        ("gemma4", "<|tool_call>call:f{a:<|\"|>x<|\"|>,n:2}<tool_call|>"),
        ("harmony", "<|channel|>analysis<|message|>think<|end|><|start|>assistant<|channel|>commentary to=functions.f <|constrain|>json<|message|>{\"a\":1}<|call|>"),
    ];
    for (name, text) in texts {
        let want = whole(name, text);
        for (at, _) in text.char_indices() {
            assert_eq!(pieces(name, [&text[..at], &text[at..]]), want, "{name} {text:?} cut at {at}");
        }
        assert_eq!(pieces(name, chars(text)), want, "{name} {text:?} per character");
    }
}

#[test]
fn the_families() {
    let call = |n: &str, a: &str| vec![(n.to_string(), a.to_string())];
    assert_eq!(whole("hermes", "Use the <tool_call> tag."), ("Use the <tool_call> tag.".into(), vec![], "".into()));
    assert_eq!(whole("pythonic", "Sure! [f(a='x')]"), ("Sure!".into(), call("f", r#"{"a":"x"}"#), "".into()));
    assert_eq!(
        whole("gemma4", "<|tool_call>call:f{a:<|\"|>x<|\"|>,n:2}<tool_call|>"),
        ("".into(), call("f", r#"{"a":"x","n":2}"#), "".into())
    );
    assert_eq!(
        whole("harmony", "<|channel|>analysis<|message|>hm<|end|><|start|>assistant<|channel|>final<|message|>Hi"),
        ("Hi".into(), vec![], "hm".into())
    );
    // A prose object is not a call; nor is an element of a list.
    assert_eq!(whole("hermes", r#"Use {"name": "x"} here"#).1, vec![]);
    assert_eq!(whole("hermes", r#"see [TOOL_CALLS][{"name": "f", "arguments": {}}]"#).1, vec![]);
}

/// Random texts made of every family's markers, JSON and Python fragments and prose: no
/// parser panics, and each answers the same whole and split per character.
#[test]
fn random_texts_never_panic_and_never_depend_on_the_split() {
    const PARTS: &[&str] = &[
        "<tool_call>",
        "</tool_call>",
        "<TOOLCALL>",
        "</TOOLCALL>",
        "<|python_tag|>",
        "[TOOL_CALLS]",
        "[ARGS]",
        "functools",
        "<tool_calls>",
        "</tool_calls>",
        "{",
        "}",
        "[",
        "]",
        "(",
        ")",
        "\"",
        "'",
        "\\",
        ":",
        ",",
        "=",
        "{\"name\": \"f\", \"arguments\": {\"a\": 1}}",
        "f(a='x')",
        "<function=f>",
        "</function>",
        "<parameter=a>",
        "</parameter>",
        "<minimax:tool_call>",
        "<invoke name=\"f\">",
        "</invoke>",
        "<parameter name=\"a\">",
        "<｜DSML｜tool_calls>",
        "<｜DSML｜invoke name=\"f\">",
        "</｜DSML｜invoke>",
        "<arg_key>",
        "</arg_key>",
        "<arg_value>",
        "</arg_value>",
        "<|tool_calls_section_begin|>",
        "<|tool_call_begin|>",
        "functions.f:0",
        "<|tool_call_argument_begin|>",
        "<|tool_call_end|>",
        "<|tool_call>",
        "call:f",
        "<|\"|>",
        "<tool_call|>",
        "<|channel|>",
        "analysis",
        "final",
        "commentary to=functions.f",
        "<|message|>",
        "<|end|>",
        "<|call|>",
        "<|start|>",
        "<｜tool▁calls▁begin｜>",
        "<｜tool▁call▁begin｜>",
        "<｜tool▁sep｜>",
        "<｜tool▁call▁end｜>",
        "<｜tool▁calls▁end｜>",
        "```json\n",
        "\n",
        " ",
        "é",
        "☃",
        "text",
    ];
    let mut seed: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    for _ in 0..400 {
        let n = (next() % 12) as usize + 1;
        let text: String = (0..n).map(|_| PARTS[(next() % PARTS.len() as u64) as usize]).collect();
        for name in NAMES {
            assert_eq!(pieces(name, chars(&text)), whole(name, &text), "{name} {text:?}");
        }
    }
}
