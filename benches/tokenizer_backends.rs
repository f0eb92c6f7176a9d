//! `--tokenizer`: encoding a ~60K-token prompt for Qwen3 (scripts/fetch-models.sh) with the
//! default tokenizer, with fastokens and with basetenkenizer, each as the server builds it
//! (`ModelFiles::load_instances_choosing`, which checks the library against the default first).
//! The bench thread is pinned to one core; fastokens runs on it alone (its own pool set to the
//! caller, as the server sets it). basetenkenizer hands the work to a pool of its own
//! (min(cores, 8) threads) whatever the caller does: its figure is not a one-core figure.
//!
//! Run: `bash scripts/fetch-models.sh qwen3 && cargo bench --bench tokenizer_backends`
//! (`-- --measurement-time 3` for a short run).

use criterion::{criterion_group, Criterion, Throughput};
use std::hint::black_box;
use switchyard::tokenize::backend::{TokenizerBackend, TokenizerChoice};
use switchyard::tokenize::model::Encoding;
use switchyard::tokenize::{ModelFiles, Tokenizer};

mod common;
use common::varied_text;

// The same allocator as the switchyard binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn qwen3(backend: TokenizerBackend) -> Tokenizer {
    let choice = TokenizerChoice { backend, fallback: false };
    let (files, mut toks) = ModelFiles::load_instances_choosing(common::model_dir("qwen3"), None, 1, choice)
        .unwrap_or_else(|e| panic!("{e}: run scripts/fetch-models.sh qwen3"));
    let want = if backend == TokenizerBackend::Default { Encoding::Default } else { Encoding::Library(backend) };
    assert_eq!(files.encoding, want);
    toks.remove(0)
}

fn bench(c: &mut Criterion) {
    if let Some(core) = core_affinity::get_core_ids().and_then(|ids| ids.into_iter().next()) {
        core_affinity::set_for_current(core);
    }
    let default = qwen3(TokenizerBackend::Default);
    let long = varied_text(&default, 60_000, 11);
    let want = default.encode(&long).unwrap();
    let mut g = c.benchmark_group("tokenizer_backends/qwen3");
    g.throughput(Throughput::Elements(want.len() as u64));
    g.sample_size(20);
    for backend in [TokenizerBackend::Default, TokenizerBackend::Fastokens, TokenizerBackend::Basetenkenizer] {
        let tok = if backend == TokenizerBackend::Default { default.clone() } else { qwen3(backend) };
        assert_eq!(tok.encode(&long).unwrap(), want, "{}: the default's ids", backend.name());
        g.bench_function(format!("{}/tokenize long prompt/{} tokens", backend.name(), want.len()), |b| {
            b.iter(|| black_box(tok.encode(black_box(&long)).unwrap().len()))
        });
    }
    g.finish();
}

criterion_group!(benches, bench);

fn main() {
    benches();
    criterion::Criterion::default().configure_from_args().final_summary();
}
