//! Preprocessing cost on real tokenizers (Qwen3, Llama-3 from scripts/fetch-models.sh):
//! chat template render + tokenize for a ~1K-token chat, tokenize a ~60K-token prompt, and
//! encode throughput on varied, cache-cold text. After criterion, it measures how long a shard
//! stalls while a 60K-token prompt is tokenized inline vs handed to the helper thread.
//!
//! Run: `bash scripts/fetch-models.sh qwen3 llama3 && cargo bench --bench tokenize`
//! Results and machine: perf/RESULTS.md ("Preprocessing").

use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, Criterion, Throughput};
use std::hint::black_box;
use switchyard::tokenize::offload::Offload;
use switchyard::tokenize::{ModelFiles, RenderArgs};

mod common;
use common::varied_text;

// The same allocator as the switchyard binary, so frees of large buffers cost what they cost
// in the server (the system allocator unmaps them, which can stall on a TLB shootdown).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn model(name: &str) -> Arc<ModelFiles> {
    Arc::new(ModelFiles::load(common::model_dir(name)).unwrap_or_else(|e| panic!("{e}: run scripts/fetch-models.sh")))
}

fn bench(c: &mut Criterion) {
    for name in ["qwen3", "llama3"] {
        let m = model(name);
        let tok = m.tokenizer().unwrap();
        let template = m.template(false).unwrap().clone();
        let user = varied_text(&tok, 900, 7);
        let messages = vec![
            serde_json::json!({"role": "system", "content": "You are a helpful assistant."}),
            serde_json::json!({"role": "user", "content": user}),
        ];
        let mut g = c.benchmark_group(format!("preprocess/{name}"));
        let args = RenderArgs {
            messages: &messages,
            tools: None,
            documents: None,
            add_generation_prompt: true,
            continue_final_message: false,
            special_tokens: &m.special_tokens,
            extra: None,
            now: None,
        };
        let n = tok.encode(&template.render(&args).unwrap()).unwrap().len();
        g.throughput(Throughput::Elements(n as u64));
        g.bench_function(format!("render+tokenize chat/{n} tokens"), |b| {
            b.iter(|| {
                let prompt = template.render(black_box(&args)).unwrap();
                black_box(tok.encode(&prompt).unwrap().len())
            })
        });
        g.bench_function("render only", |b| b.iter(|| black_box(template.render(black_box(&args)).unwrap().len())));
        let long = varied_text(&tok, 60_000, 11);
        let n_long = tok.encode(&long).unwrap().len();
        g.throughput(Throughput::Elements(n_long as u64));
        g.sample_size(20);
        g.bench_function(format!("tokenize long prompt/{n_long} tokens"), |b| {
            b.iter(|| black_box(tok.encode(black_box(&long)).unwrap().len()))
        });
        g.finish();
    }
}

/// Poll `fut` by hand on this thread and return the longest single poll: the time the
/// calling (shard) thread could not run anything else while driving it. Between polls this
/// thread sleeps, as a shard would run its other tasks.
fn longest_poll<F: std::future::Future>(fut: F) -> Duration {
    let mut fut = std::pin::pin!(fut);
    let mut cx = std::task::Context::from_waker(std::task::Waker::noop());
    let mut worst = Duration::ZERO;
    loop {
        let t0 = Instant::now();
        let ready = fut.as_mut().poll(&mut cx).is_ready();
        worst = worst.max(t0.elapsed());
        if ready {
            return worst;
        }
        std::thread::sleep(Duration::from_micros(50));
    }
}

fn stall_report() {
    for name in ["qwen3", "llama3"] {
        let m = model(name);
        let tok = m.tokenizer().unwrap();
        let long = varied_text(&tok, 60_000, 11);
        let n = tok.encode(&long).unwrap().len();
        let helper = Offload::start(m.clone(), "tokenize-helper".into()).unwrap();
        longest_poll(helper.encode("warm up".into()));
        let mut inline = Vec::new();
        let mut offloaded = Vec::new();
        for _ in 0..20 {
            inline.push(longest_poll(async {
                black_box(tok.encode(&long).unwrap());
            }));
            offloaded.push(longest_poll(async {
                black_box(helper.encode(long.clone()).await.unwrap());
            }));
        }
        inline.sort();
        offloaded.sort();
        println!(
            "stall/{name}: {n}-token prompt, longest time the shard thread is blocked (median / max of 20): \
             inline {:?} / {:?}, helper thread {:?} / {:?}",
            inline[10], inline[19], offloaded[10], offloaded[19]
        );
    }
}

criterion_group!(benches, bench);

fn main() {
    benches();
    stall_report();
    criterion::Criterion::default().configure_from_args().final_summary();
}
