//! The cost the trailer watcher (`switchyard::h2::trailers::Watch`) adds to every byte an
//! HTTP/2 client sends: a typical request (HEADERS, one DATA frame of ~1 KB, END_STREAM)
//! fed as one read, and the same request with a trailer block, which is the only case where
//! the watcher looks inside a frame's payload.
//!
//! Run: `cargo bench --bench h2_trailers`
//! Results and machine: perf/RESULTS.md ("HTTP/2 (h2c) and KServe gRPC: h2load").

use criterion::{criterion_group, criterion_main, Criterion, Throughput};
use std::hint::black_box;
use switchyard::h2::trailers::Watch;

fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
    let n = payload.len();
    [&[(n >> 16) as u8, (n >> 8) as u8, n as u8, kind, flags][..], &stream.to_be_bytes(), payload].concat()
}

fn literal(name: &str, value: &str) -> Vec<u8> {
    [&[0u8, name.len() as u8][..], name.as_bytes(), &[value.len() as u8], value.as_bytes()].concat()
}

/// Streams 1, 3, 5, …: `count` requests, each HEADERS + 1 KB DATA (+ a trailer block).
fn requests(count: u32, trailers: bool) -> Vec<u8> {
    let head = [
        literal(":method", "POST"),
        literal(":scheme", "http"),
        literal(":path", "/v1/chat/completions"),
        literal(":authority", "127.0.0.1:8000"),
        literal("content-type", "application/json"),
    ]
    .concat();
    let body = vec![b'x'; 1024];
    let mut out = Vec::new();
    for i in 0..count {
        let id = 2 * i + 1;
        out.extend(frame(1, 0x4, id, &head));
        out.extend(frame(0, if trailers { 0 } else { 0x1 }, id, &body));
        if trailers {
            out.extend(frame(1, 0x5, id, &literal("x-checksum", "abc")));
        }
    }
    out
}

fn bench(c: &mut Criterion) {
    let mut g = c.benchmark_group("h2_trailers");
    for (name, trailers) in [("64 requests, no trailers", false), ("64 requests with trailers", true)] {
        let bytes = [&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..], &requests(64, trailers)].concat();
        g.throughput(Throughput::Elements(64));
        g.bench_function(name, |b| {
            b.iter(|| {
                let (mut w, _marker) = Watch::new();
                for chunk in bytes.chunks(16 * 1024) {
                    w.feed(black_box(chunk));
                }
                w
            })
        });
    }
    g.finish();
}

criterion_group!(benches, bench);
criterion_main!(benches);
