//! switchyard: a thread-per-core LLM inference frontend, drop-in for `python -m dynamo.frontend`.
//!
//! # Layout
//!
//! | module | owns | runs on |
//! |---|---|---|
//! | [`config`] | every `dynamo.frontend` flag and `DYN_*` variable, validation, `--dump-config-to` | main thread, once |
//! | [`shard`] | pinned shard threads, their monoio runtimes, listeners, inboxes, shutdown gates | shards |
//! | [`http1`] | HTTP/1.1 parsing, framing, responses, the connection loop (parsers do no I/O) | shards |
//! | [`h2`] | HTTP/2 (h2c) beside HTTP/1.1 on the same port: protocol detection, the connection loop, flow control | shards |
//! | [`kserve`] | KServe v2 gRPC: protobuf messages, gRPC framing and statuses, metadata, ModelInfer, ModelStreamInfer | shards |
//! | [`service`] | the route table, ops routes (`/health`, `/live`, `/metrics`, `/v1/models`, `/openapi.json`), inference routes | shards |
//! | [`openai`] | OpenAI request types; Dynamo's validation order and messages | shards |
//! | [`tokenize`] | model files, HF-exact chat templates, tokenizer, detokenizer, stop handling | shards (+ helper thread for long prompts) |
//! | [`plane`] | Dynamo's TCP request plane wire formats: frames, acks, response stream, payloads (no I/O) | shards |
//! | [`metrics`] | per-shard collectors, merged at scrape time; Prometheus text | shards |
//! | [`registry`] | the immutable snapshot of served models and instances handed to shards | built off-shard, read on shards |
//! | [`discovery`] | Dynamo's file discovery store → live instances and model cards → Registry | control thread |
//! | [`worker`] | in-tree mock worker speaking Dynamo's request plane (tests, benches) | its own std threads |
//! | [`bench`] | `switchyard bench`: the latency benchmark client (its own process) | one monoio thread |
//! | [`error`] | the one error type: kind, side, retry; status mapping in one place | everywhere |
//!
//! A request's way: `shard` accepts → `h2::detect` reads the first bytes → `http1::conn` (or
//! `h2::conn`, with gRPC calls going to `kserve`) frames the request → `service::Frontend`
//! routes it → a handler answers → `http1::response` writes it → `metrics` counts it.
//! What crosses cores: inbox messages (metrics snapshots for a scrape, Registry snapshots,
//! shutdown). Nothing on the request path takes a lock.

pub mod bench;
pub mod config;
pub mod control;
pub mod discovery;
pub mod embedded;
pub mod error;
pub mod h2;
pub mod http1;
pub mod infer;
pub mod kserve;
pub mod log;
pub mod metrics;
pub mod openai;
pub mod plane;
pub mod registry;
pub mod router;
pub mod service;
pub mod shard;
pub mod tokenize;
pub mod util;
pub mod worker;

pub use error::{Error, Kind, Side};
