//! switchyard: a thread-per-core LLM inference frontend, drop-in for `python -m dynamo.frontend`.
//!
//! # Layout
//!
//! | module | owns | runs on |
//! |---|---|---|
//! | [`config`] | every `dynamo.frontend` flag and `DYN_*` variable, validation, `--dump-config-to` | main thread, once |
//! | [`shard`] | pinned shard threads, their monoio runtimes, listeners, inboxes, shutdown gates | shards |
//! | [`http1`], [`h2`] | HTTP/1.1 and HTTP/2 (h2c) on the same port: parsing, framing, connection loops | shards |
//! | [`service`] | the route table, ops routes, the h2 handler: HTTP → an adapter | shards |
//! | [`openai`], [`kserve`] | protocol adapters: requests → [`infer::InferRequest`], events → their answers | shards |
//! | [`infer`] | the one driver: resolve → preprocess → route/dispatch → postprocess; typed events; the tracker | shards |
//! | [`tokenize`] | model files, HF-exact chat templates, tokenizer, detokenizer, stop handling | shards (+ helper thread) |
//! | [`router`] | the per-shard worker choice; the kv index replica and selection | shards |
//! | [`auth`] | optional API keys: admission by key, per-key request and token rates | main (the file) / shards |
//! | [`tls`] | PEM files → rustls configurations (HTTPS, mutual TLS), certificate reloading | main / reload thread; handshakes on shards |
//! | [`transport`] | the request-plane client and call-back listener (sockets) | shards |
//! | [`plane`] | Dynamo's wire formats: frames, payloads, items, KV event messages (no I/O) | any |
//! | [`metrics`] | per-shard collectors, merged at scrape time; Prometheus text | shards |
//! | [`registry`] | the immutable snapshot of served models handed to shards | built off-shard, read on shards |
//! | [`discovery`], [`control`] | etcd / file / mem stores → model cards → Registry snapshots | control thread |
//! | [`ingest`] | the event-ingest thread: KV events, recovery, replica sync → rings | ingest thread |
//! | [`worker`] | the in-tree mock worker (tests, benches, the embedded demo) | its own std threads |
//! | [`interactive`] | `-i`: text chat in the terminal, each turn a chat completion run on a shard | main thread (+ a task per turn on shard 0) |
//! | [`bench`] | `switchyard bench`: the latency benchmark client (its own process) | one monoio thread |
//! | [`error`] | the one error type: kind, side, retry; status mapping in one place | everywhere |
//! | `fuzzing` | the fuzz targets, shared by `fuzz/` and `tests/fuzz_corpus.rs` | the fuzzer's or test's thread |
//!
//! A request's way: `shard` accepts → `h2::detect` reads the first bytes → `http1::conn` (or
//! `h2::conn`, gRPC calls going to `kserve`) frames the request → `service::Frontend` routes it
//! → an adapter (`openai`, `kserve`) makes an `InferRequest` → `infer::run` → its events are
//! rendered → `http1::response` writes them → `metrics` counts it (see
//! docs/request-lifecycle.md). The walls between these modules are listed in
//! docs/architecture.md and checked by `tests/layering.rs`. What crosses cores: inbox
//! messages (metrics snapshots for a scrape, Registry snapshots, shutdown) and the kv
//! rings. Nothing on the request path takes a lock.

pub mod anthropic;
pub mod auth;
pub mod bench;
pub mod config;
pub mod control;
pub mod discovery;
pub mod error;
#[doc(hidden)]
pub mod fuzzing;
pub mod h2;
pub mod http1;
pub mod indexer;
pub mod infer;
pub mod ingest;
pub mod interactive;
pub mod kserve;
pub mod log;
pub mod metrics;
pub mod openai;
pub mod parsers;
pub mod plane;
pub mod registry;
pub mod responses;
pub mod router;
pub mod service;
pub mod shard;
pub mod tls;
pub mod tokenize;
pub mod transport;
pub mod util;
pub mod worker;

pub use error::{Error, Kind, Side};
