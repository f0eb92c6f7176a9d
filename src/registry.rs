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
    /// The surfaces its card's `model_type` declares: a request of another kind is answered
    /// 404 `Model not found`, as 1.6.1 answers it.
    pub surfaces: Surfaces,
    /// Its card's role, for `/v1/models/{id}/ready`: the workers' namespace, the card's
    /// `worker_type` (`None`: a card from before worker types) and `needs` (alternatives, each
    /// a list of worker types).
    pub role: std::sync::Arc<Role>,
}

/// A pool's card role (see [`Serving::role`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Role {
    pub namespace: String,
    pub worker_type: Option<String>,
    pub needs: Vec<Vec<String>>,
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
    /// The route groups open now (1.6.1's endpoint flags): a route of a closed group answers
    /// a bare 404. See [`Surfaces::next_open`]; `None` until discovery's first snapshot
    /// ([`Surfaces::initially_open`] then).
    pub open: Option<Surfaces>,
    /// Records discovery skipped in the current snapshot, by bucket (`v1/mdc`, ...): files
    /// that are not records, cards whose model cannot be served, instances that cannot be
    /// reached. Every bucket discovery reads is here (0 when nothing was skipped).
    pub skipped: std::collections::BTreeMap<&'static str, u64>,
}

impl Registry {
    pub fn model(&self, name: &str) -> Option<&ModelEntry> {
        self.models.iter().find(|m| m.name == name)
    }

    /// The route groups open now.
    pub fn open(&self, anthropic: bool) -> Surfaces {
        self.open.unwrap_or_else(|| Surfaces::initially_open(anthropic))
    }

    /// Every surface some served model declares.
    pub fn present(&self) -> Surfaces {
        self.serving.values().fold(Surfaces::NONE, |all, s| all | s.surfaces)
    }
}

/// A set of surfaces: the kinds of request a model serves (its card's `model_type` flags, in
/// 1.6.1's bit order), and the route groups a frontend has open. Two groups are not model
/// types: Responses and Anthropic Messages, opened by a chat model.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Surfaces(u16);

impl Surfaces {
    pub const NONE: Surfaces = Surfaces(0);
    pub const CHAT: Surfaces = Surfaces(1 << 0);
    pub const COMPLETIONS: Surfaces = Surfaces(1 << 1);
    pub const EMBEDDING: Surfaces = Surfaces(1 << 2);
    pub const TENSOR: Surfaces = Surfaces(1 << 3);
    pub const IMAGES: Surfaces = Surfaces(1 << 5);
    pub const AUDIOS: Surfaces = Surfaces(1 << 6);
    pub const VIDEOS: Surfaces = Surfaces(1 << 7);
    pub const REALTIME: Surfaces = Surfaces(1 << 8);
    pub const CLASSIFY: Surfaces = Surfaces(1 << 9);
    pub const POOLING: Surfaces = Surfaces(1 << 10);
    pub const RERANK: Surfaces = Surfaces(1 << 11);
    /// Route groups only.
    pub const RESPONSES: Surfaces = Surfaces(1 << 12);
    pub const ANTHROPIC: Surfaces = Surfaces(1 << 13);

    /// The flags of a card's `model_type` (names as 1.6.1 writes them; unknown ones ignored).
    pub fn of_model_type<'a>(flags: impl IntoIterator<Item = &'a str>) -> Surfaces {
        const NAMES: [(&str, Surfaces); 11] = [
            ("Chat", Surfaces::CHAT),
            ("Completions", Surfaces::COMPLETIONS),
            ("Embedding", Surfaces::EMBEDDING),
            ("TensorBased", Surfaces::TENSOR),
            ("Images", Surfaces::IMAGES),
            ("Audios", Surfaces::AUDIOS),
            ("Videos", Surfaces::VIDEOS),
            ("Realtime", Surfaces::REALTIME),
            ("Classify", Surfaces::CLASSIFY),
            ("Pooling", Surfaces::POOLING),
            ("Rerank", Surfaces::RERANK),
        ];
        flags.into_iter().fold(Surfaces::NONE, |all, f| {
            NAMES.iter().find(|(n, _)| n.eq_ignore_ascii_case(f.trim())).map_or(all, |(_, s)| all | *s)
        })
    }

    pub fn contains(self, other: Surfaces) -> bool {
        other.0 != 0 && self.0 & other.0 == other.0
    }

    /// The route groups these model surfaces open: their own, and with chat the two
    /// translation layers over it (Responses; Anthropic Messages when that API is on).
    pub fn routes(self, anthropic: bool) -> Surfaces {
        let mut open = Surfaces(self.0 & !Surfaces::TENSOR.0);
        if self.contains(Surfaces::CHAT) {
            open = open | Surfaces::RESPONSES;
            if anthropic {
                open = open | Surfaces::ANTHROPIC;
            }
        }
        open
    }

    /// The groups open before any model is seen (1.6.1: embeddings and Responses, and
    /// Anthropic Messages when that API is on; chat and completions wait for a model).
    pub fn initially_open(anthropic: bool) -> Surfaces {
        let open = Surfaces::EMBEDDING | Surfaces::RESPONSES;
        if anthropic {
            open | Surfaces::ANTHROPIC
        } else {
            open
        }
    }

    /// The groups open after models of `now` surfaces replaced models of `before` ones: a
    /// group opens when a model of its kind arrives and closes only when the last one leaves
    /// (a group open from the start stays open until a model of its kind came and went).
    pub fn next_open(open: Surfaces, before: Surfaces, now: Surfaces, anthropic: bool) -> Surfaces {
        let vacated = Surfaces(before.0 & !now.0);
        Surfaces((open.0 | now.routes(anthropic).0) & !vacated.routes(anthropic).0)
    }
}

impl std::ops::BitOr for Surfaces {
    type Output = Surfaces;
    fn bitor(self, rhs: Surfaces) -> Surfaces {
        Surfaces(self.0 | rhs.0)
    }
}

#[cfg(test)]
mod tests {
    use super::Surfaces;

    #[test]
    fn model_type_flags_read_as_1_6_1_names_them() {
        let s = Surfaces::of_model_type("Chat | Completions".split('|'));
        assert!(s.contains(Surfaces::CHAT) && s.contains(Surfaces::COMPLETIONS));
        assert!(!s.contains(Surfaces::EMBEDDING));
        assert_eq!(Surfaces::of_model_type(["embedding", "Bogus"]), Surfaces::EMBEDDING);
        assert!(!Surfaces::NONE.contains(Surfaces::NONE));
    }

    #[test]
    fn route_groups_open_with_a_model_and_close_when_the_last_leaves() {
        let start = Surfaces::initially_open(false);
        assert!(start.contains(Surfaces::EMBEDDING) && start.contains(Surfaces::RESPONSES));
        assert!(!start.contains(Surfaces::CHAT) && !start.contains(Surfaces::ANTHROPIC));
        assert!(Surfaces::initially_open(true).contains(Surfaces::ANTHROPIC));
        let chat = Surfaces::CHAT | Surfaces::COMPLETIONS;
        let open = Surfaces::next_open(start, Surfaces::NONE, chat, true);
        assert!(open.contains(Surfaces::CHAT | Surfaces::COMPLETIONS | Surfaces::ANTHROPIC | Surfaces::EMBEDDING));
        // The chat model leaves: its groups close, embeddings (open from the start) stay.
        let gone = Surfaces::next_open(open, chat, Surfaces::NONE, true);
        assert_eq!(gone, Surfaces::EMBEDDING);
        // An embedding model that comes and goes closes the embeddings group.
        let e = Surfaces::next_open(gone, Surfaces::NONE, Surfaces::EMBEDDING, false);
        assert_eq!(Surfaces::next_open(e, Surfaces::EMBEDDING, Surfaces::NONE, false), Surfaces::NONE);
        // Tensor models open no HTTP route.
        assert_eq!(Surfaces::TENSOR.routes(false), Surfaces::NONE);
    }
}
