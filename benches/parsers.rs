//! The cost of parsing a streamed answer: reasoning and tool calls cut out of each output
//! token's text as it arrives ([`switchyard::parsers::Parse`]), on one core, for W2's shape
//! (64 output tokens, one delta per token).
//!
//! * `none`: no parser (the text passes through), for comparison;
//! * `qwen3`: the reasoning parser alone;
//! * `qwen3+hermes/prose`: reasoning and the hermes tool parser, an answer without a call
//!   (every piece scanned for markers and bare JSON);
//! * `qwen3+hermes/call`: the same with a call at the end (the jail holds it, then parses it).
//!
//! Throughput is in output tokens (deltas) per second; the per-token cost is the time shown
//! divided by 64. Run: `cargo bench --bench parsers`.

use std::hint::black_box;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use switchyard::parsers::{reasoning, tools, Out, Parse, Parsers};

const PROSE: &str = "<think>The user asks about the weather in Paris; I know it well.</think>Paris is \
mild in spring, with rain now and then, so pack a light coat and an umbrella. Mornings are cool; \
afternoons are pleasant for a walk along the river.";
const CALL: &str = "<think>The user wants the weather; call the tool.</think>Let me check that for you.\n\
<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>";

/// `text` cut into `n` pieces on character boundaries (a model's deltas).
fn deltas(text: &str, n: usize) -> Vec<&str> {
    let step = text.len().div_ceil(n);
    let mut out = Vec::with_capacity(n);
    let mut at = 0;
    while at < text.len() {
        let mut end = (at + step).min(text.len());
        while !text.is_char_boundary(end) {
            end += 1;
        }
        out.push(&text[at..end]);
        at = end;
    }
    out
}

fn run(parsers: Parsers, pieces: &[&str], out: &mut Out) -> usize {
    let mut parse = Parse::new(parsers);
    let mut n = 0;
    for p in pieces {
        out.clear();
        parse.push(black_box(p), out);
        n += out.content.len() + out.reasoning.len() + out.calls.len();
    }
    out.clear();
    parse.finish(out);
    n + out.calls.len()
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("parse_64_tokens");
    g.throughput(Throughput::Elements(64));
    let qwen3 = reasoning::format_of("qwen3");
    let hermes = tools::format_of("hermes");
    let cases = [
        ("none", Parsers::default(), PROSE),
        ("qwen3", Parsers { reasoning: qwen3, tools: None }, PROSE),
        ("qwen3+hermes/prose", Parsers { reasoning: qwen3, tools: hermes }, PROSE),
        ("qwen3+hermes/call", Parsers { reasoning: qwen3, tools: hermes }, CALL),
    ];
    let mut out = Out::default();
    for (name, parsers, text) in cases {
        let pieces = deltas(text, 64);
        g.bench_function(name, |b| b.iter(|| run(parsers, &pieces, &mut out)));
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
