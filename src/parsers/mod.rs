//! Tool-call and reasoning parsers: a model's answer split into reasoning, content and tool
//! calls, as 1.6.1 splits it for the parser names a worker registers in its card's
//! `runtime_config` (docs/dynamo/parsers.md). Protocol-free: the OpenAI, Anthropic and
//! Responses adapters drive the same parsers, on the shard thread of the request.
//!
//! Parity with 1.6.1 is checked against its recorded answers
//! (`tests/data/parsers/observed-1.6.1.jsonl`, `tests/parsers_observed.rs`).

pub mod reasoning;
