//! Parsing a typical ~1 KB chat-completion request (the headers the `openai` Python client
//! sends, a short conversation as the body).
//!
//! Run: `cargo bench --bench http1_parse`
//! Results and machine: perf/RESULTS.md ("HTTP/1.1 request parsing").

use bytes::BytesMut;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use std::hint::black_box;
use switchyard::http1::parse::{parse_head, Limits};
use switchyard::http1::request::{Assembler, Step};

fn chat_request() -> Vec<u8> {
    let body = serde_json::json!({
        "model": "Qwen/Qwen3-0.6B",
        "messages": [
            {"role": "system", "content": "You are a helpful assistant. Answer briefly and precisely, and cite the source when you can."},
            {"role": "user", "content": "What is the capital of France, and what is it famous for? Give three short points."},
            {"role": "assistant", "content": "Paris. 1) The Eiffel Tower. 2) The Louvre. 3) Its cafés and cuisine."},
            {"role": "user", "content": "And what about Lyon? Same format please, keep it short."}
        ],
        "max_tokens": 256,
        "temperature": 0.7,
        "top_p": 0.95,
        "stream": true,
        "stream_options": {"include_usage": true}
    })
    .to_string();
    let head = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nAccept-Encoding: gzip, deflate\r\n\
         Connection: keep-alive\r\nAccept: application/json\r\nContent-Type: application/json\r\n\
         User-Agent: OpenAI/Python 1.99.9\r\nX-Stainless-Lang: python\r\nX-Stainless-Package-Version: 1.99.9\r\n\
         X-Stainless-OS: Linux\r\nX-Stainless-Arch: x64\r\nX-Stainless-Runtime: CPython\r\n\
         X-Stainless-Runtime-Version: 3.11.7\r\nAuthorization: Bearer EMPTY\r\nX-Stainless-Async: false\r\n\
         X-Stainless-Retry-Count: 0\r\nX-Stainless-Read-Timeout: 600\r\nContent-Length: {}\r\n\r\n",
        body.len()
    );
    let mut req = head.into_bytes();
    req.extend_from_slice(body.as_bytes());
    req
}

fn bench(c: &mut Criterion) {
    let req = chat_request();
    let limits = Limits::default();
    let mut g = c.benchmark_group("http1");
    g.throughput(Throughput::Bytes(req.len() as u64));
    g.bench_function(format!("parse_head/{}B", req.len()), |b| {
        b.iter(|| black_box(parse_head(black_box(&req), &limits).unwrap().unwrap().head_len))
    });
    g.bench_function(format!("assemble_request/{}B", req.len()), |b| {
        b.iter_batched_ref(
            || BytesMut::from(&req[..]),
            |buf| {
                let mut asm = Assembler::new(limits);
                match asm.next(buf).unwrap() {
                    Step::Ready(r) => black_box(r.body.len()),
                    Step::NeedMore { .. } => unreachable!(),
                }
            },
            BatchSize::SmallInput,
        )
    });
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
