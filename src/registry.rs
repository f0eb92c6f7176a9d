//! The Registry: an immutable snapshot of what is served — models, their worker instances
//! and the endpoints those instances expose.
//!
//! Built off the shard threads and handed to every shard as an `Arc<Registry>`; a shard swaps
//! its snapshot between requests, and a request in flight keeps the snapshot it started with.
//! Shards only read it. Until a discovery backend publishes one, the snapshot is empty.

/// One served model, as `/v1/models` lists it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ModelEntry {
    pub name: String,
    /// Unix seconds when the model was first seen.
    pub created: u64,
    /// Context window from the model card (0 when unknown, as Dynamo reports it).
    pub context_window: u64,
}

/// A worker instance that serves a model.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Worker {
    /// Where its request plane listens.
    pub addr: std::net::SocketAddr,
    /// Endpoint path put in every request frame.
    pub path: String,
    /// On the NATS request plane: the subject its endpoint listens on (`transport.nats_tcp`);
    /// `addr` and `path` are then unused.
    pub nats_subject: Option<String>,
    /// Body codec it advertised.
    pub codec: crate::plane::payload::Codec,
    pub instance_id: u64,
    /// The worker runs on CPU (`device_type: "cpu"`), for `device-aware-weighted`.
    pub cpu: bool,
    /// Its data-parallel ranks: `dp_start .. dp_start + dp_size` (card `runtime_config`;
    /// one rank, 0, when the card says nothing). The kv router picks a rank.
    pub dp_start: u32,
    pub dp_size: u32,
    /// A prefill worker's KV hand-off rendezvous (its card's
    /// `runtime_config.disaggregated_endpoint`), sent to both legs as `bootstrap_info`.
    pub bootstrap: Option<std::sync::Arc<Bootstrap>>,
}

/// Where a prefill worker waits for its decode worker to fetch the prompt's KV blocks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Bootstrap {
    pub host: String,
    pub port: u16,
}

impl Worker {
    /// The worker's data-parallel ranks.
    pub fn dp_ranks(&self) -> std::ops::Range<u32> {
        self.dp_start..self.dp_start + self.dp_size.max(1)
    }
}

/// The sizes a model's card announces, as the `model_*` gauges of `/metrics` show them
/// (0 when the card leaves one out).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CardLimits {
    /// `runtime_config.context_length`, else the architectural maximum, else the top level.
    pub context_length: u64,
    pub kv_cache_block_size: u64,
    pub max_num_batched_tokens: u64,
    pub max_num_seqs: u64,
    pub total_kv_blocks: u64,
}

impl CardLimits {
    /// The block size the kv router hashes prompts with: the card's, 16 when it names none
    /// (or one that does not fit).
    pub fn block_size(&self) -> u32 {
        u32::try_from(self.kv_cache_block_size).ok().filter(|b| *b > 0).unwrap_or(16)
    }
}

/// The model files and tokenizers of a `model_input = Tokens` model.
#[derive(Clone, Debug)]
pub struct TokensModel {
    pub files: std::sync::Arc<crate::tokenize::ModelFiles>,
    /// One tokenizer per shard: shard `i` uses `tokenizers[i]` only.
    pub tokenizers: std::sync::Arc<Vec<crate::tokenize::Tokenizer>>,
}

/// What a `model_input = Tensor` model declares about its tensors (see
/// [`crate::kserve::tensor_meta`]).
#[derive(Clone, Debug)]
pub struct TensorModel {
    /// The card's `tensor_model_config`.
    pub config: crate::plane::tensor::TensorModelConfig,
    /// What its `triton_model_config` declares (decoded once, when the card arrives); when
    /// present it supersedes `config`. The whole Triton message stays in `config`'s bytes.
    pub triton: Option<TritonDeclared>,
}

/// The parts of a Triton `ModelConfig` a frontend checks requests against and describes
/// models with.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TritonDeclared {
    pub platform: String,
    /// Above 0: a batching model of at most this many requests (a leading batch dimension).
    pub max_batch_size: i32,
    pub inputs: Vec<DeclaredTensor>,
    pub outputs: Vec<DeclaredTensor>,
}

/// One input or output a Triton `ModelConfig` declares.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct DeclaredTensor {
    pub name: String,
    /// Triton's `TYPE_*` number.
    pub data_type: i32,
    pub dims: Vec<i64>,
    /// May be left out of a request (inputs only).
    pub optional: bool,
}

/// A pool of workers: aggregated (no `worker_type` on the card), or the prefill or decode
/// workers of disaggregated serving.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Pool {
    #[default]
    Aggregated,
    Prefill,
    Decode,
}

impl Pool {
    /// The pool of a card's `worker_type`.
    pub fn of_worker_type(t: Option<&str>) -> Pool {
        match t {
            Some("prefill") => Pool::Prefill,
            Some("decode") => Pool::Decode,
            _ => Pool::Aggregated,
        }
    }
}

/// What a shard needs to serve one model.
#[derive(Clone, Debug)]
pub struct Serving {
    /// The model's primary name (its card's `display_name`), whichever of its names a request
    /// used: what responses and metrics call it.
    pub name: String,
    /// `Some` for `model_input = Tokens` (the frontend tokenizes); `None` for
    /// `model_input = Text` (the OpenAI request is forwarded as the client sent it).
    pub tokens: Option<TokensModel>,
    /// `Some` for `model_input = Tensor`: served over KServe gRPC only.
    pub tensor: Option<std::sync::Arc<TensorModel>>,
    pub workers: Vec<Worker>,
    /// The card checksum sent with every request.
    pub mdc_sum: Option<String>,
    /// What the card (of the first worker seen) says about the model's sizes.
    pub limits: CardLimits,
    /// The reasoning parser of the card's `runtime_config.reasoning_parser` (Tokens models:
    /// a Text model's worker parses its own answer).
    pub reasoning: Option<crate::parsers::reasoning::Format>,
    /// The tool-call parser of the card's `runtime_config.tool_call_parser` (Tokens models);
    /// used when a request offers tools.
    pub tools: Option<crate::parsers::tools::Format>,
    /// Disaggregated serving: the model's prefill workers (their own card checksum and
    /// limits), each request prefilled there before `workers` decode it.
    pub prefill: Option<std::sync::Arc<Serving>>,
    /// The workers' pool, as their cards' `worker_type` says (each pool has its own kv
    /// worker selection).
    pub pool: Pool,
    /// The workers' cards say they need prefill workers (`needs: [["prefill"]]`): without
    /// any, the model is not listed and its requests are answered 503, as 1.6.1 answers.
    pub needs_prefill: bool,
    /// `--use-remote-indexer`: the served indexers (`kv_indexer_query` instances) under the
    /// workers' component, asked in turn for each request's matches.
    pub remote_indexers: Vec<Worker>,
}

impl Serving {
    /// Requests can be served now: workers, and prefill workers when they are needed.
    pub fn ready(&self) -> bool {
        !self.workers.is_empty() && (!self.needs_prefill || self.prefill.is_some())
    }
}

/// What the frontend can serve right now.
#[derive(Clone, Debug, Default)]
pub struct Registry {
    pub models: Vec<ModelEntry>,
    /// `dyn://namespace.component.endpoint` of every live endpoint, for `/health`.
    pub endpoints: Vec<String>,
    /// The endpoint records of live instances, as discovery stores them, for `/health`.
    pub instances: Vec<serde_json::Value>,
    /// Serving data of each listed model, by name. An alias maps to the same `Arc` as its
    /// primary name.
    pub serving: std::collections::BTreeMap<String, std::sync::Arc<Serving>>,
    /// Alias → primary name, for every alias discovery accepted (listed or not).
    pub aliases: std::collections::BTreeMap<String, String>,
    /// Records discovery skipped in the current snapshot, by bucket (`v1/mdc`, ...): files
    /// that are not records, cards whose model cannot be served, instances that cannot be
    /// reached. Every bucket discovery reads is here (0 when nothing was skipped).
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
}

impl Registry {
    pub fn model(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }
}
