//! The contract between a protocol adapter and the driver: [`InferRequest`], everything a
//! client may ask of one generation, in no protocol's shape.
//!
//! Sampling, output and guided-decoding options are carried in the request plane's own types
//! ([`SamplingOptions`], [`OutputOptions`]): they are what a worker receives, so an adapter
//! fills them once and the driver moves them into the wire request unchanged. Stop options
//! are split from the wire's because the driver enforces them itself too ([`Stops`]).
//!
//! A field the worker is not sent is either used by the driver (stream, n, echo, the pinned
//! worker, annotations it answers) or is the adapter's own business (response shapes).

use bytes::Bytes;
use smallvec::SmallVec;

use crate::metrics::Endpoint;
use crate::plane::payload::{OutputOptions, RoutingHints, SamplingOptions};
use crate::plane::tensor::TensorRequest;
pub use crate::tokenize::preprocess::{ChatInput, PlainRole, PlainTurn};

/// The API key a request was admitted with (`--api-keys-file`), charged with its tokens;
/// `None`: keys are off.
pub type ApiKey = Option<std::sync::Arc<crate::auth::Key>>;

/// One generation asked for by a client.
#[derive(Debug)]
pub struct InferRequest {
    /// What the request counts as in the per-request metrics.
    pub endpoint: Endpoint,
    /// The served model name the client asked for.
    pub model: String,
    /// Where the prompt comes from.
    pub input: Input,
    /// Sampling, as the worker receives it (`n` and `best_of` included, as 1.6.1 sends them).
    pub sampling: SamplingOptions,
    /// Stop conditions (the worker is sent them and the driver enforces them).
    pub stops: Stops,
    /// Output options, as the worker receives them.
    pub output: OutputOptions,
    /// Choices per prompt (OpenAI `n`); each is its own worker request.
    pub choices: u8,
    /// Completions `echo`: every choice starts with its prompt's text.
    pub echo: bool,
    /// Answer as a stream of events while generating (the adapter decides what that means
    /// on its wire); otherwise the same events arrive once the answer is complete.
    pub stream: bool,
    /// Output log probabilities were asked for: deltas carry them.
    pub logprobs: bool,
    /// A worker the client named; every router mode sends the request there.
    pub pinned: Option<u64>,
    /// The session the request's headers name, when session affinity is on.
    pub session: Option<std::rc::Rc<str>>,
    /// The policy class (or family) its `x-dynamo-meta-policy-class` header names.
    pub policy_class: Option<std::rc::Rc<str>>,
    /// The agent session its headers name, for the request classifier (one configured).
    pub agent: Option<AgentSession>,
    /// The API key it came with (`--api-keys-file`): charged its tokens when it ends.
    pub key: ApiKey,
    /// `nvext.annotations`: forwarded to the worker; those the driver answers itself
    /// ([`AnnotationKind`]) come back as events before any text.
    pub annotations: Vec<String>,
    /// Routing hints forwarded to the worker (`cache_salt`, priorities, …).
    pub routing: RoutingHints,
    /// The thinking-token budget.
    pub max_thinking_tokens: Option<u32>,
    /// Options forwarded to the worker outside the typed groups (`extra_args`).
    pub extra_args: Option<Box<serde_json::Value>>,
    /// Router latency targets (`router`).
    pub router: Option<Box<serde_json::Value>>,
    /// `request_timestamp_ms` (trace replay).
    pub request_timestamp_ms: Option<f64>,
    /// Multimodal processor and media decoding options, passed through.
    pub mm_processor_kwargs: Option<Box<serde_json::Value>>,
    pub media_io_kwargs: Option<Box<serde_json::Value>>,
    /// The request object a `model_input = Text` worker receives as is (JSON), when the
    /// adapter has one; without it such models are refused.
    pub forward: Option<Bytes>,
}

/// Who sent a request, as its headers say: the session it names (session affinity on) and
/// the API key it was admitted with (`--api-keys-file`).
#[derive(Clone, Default)]
pub struct Caller {
    pub session: Option<std::rc::Rc<str>>,
    pub policy_class: Option<std::rc::Rc<str>>,
    pub agent: Option<AgentSession>,
    pub key: ApiKey,
}

/// The agent session a request's headers name (1.6.1's session headers, whether session
/// affinity is on or not), and whether it is the session's last turn
/// (`x-dynamo-session-final`).
#[derive(Clone, Debug)]
pub struct AgentSession {
    pub id: std::rc::Rc<str>,
    pub last: bool,
}

impl InferRequest {
    /// What the request asks of routing: its pinned worker, session and policy class.
    pub fn asked(&self) -> super::dispatch::Asked<'_> {
        super::dispatch::Asked {
            pinned: self.pinned,
            session: self.session.as_deref(),
            class: self.policy_class.as_deref(),
            agent: self.agent.as_ref(),
        }
    }

    /// Take the session and key of `caller`.
    pub fn set_caller(&mut self, caller: Caller) {
        self.session = caller.session;
        self.policy_class = caller.policy_class;
        self.agent = caller.agent;
        self.key = caller.key;
    }

    /// A request for `model` with every option unset: one choice, not streamed.
    pub fn new(endpoint: Endpoint, model: String, input: Input) -> InferRequest {
        InferRequest {
            endpoint,
            model,
            input,
            sampling: SamplingOptions::default(),
            stops: Stops::default(),
            output: OutputOptions::default(),
            choices: 1,
            echo: false,
            stream: false,
            logprobs: false,
            pinned: None,
            session: None,
            policy_class: None,
            agent: None,
            key: None,
            annotations: Vec::new(),
            routing: RoutingHints::default(),
            max_thinking_tokens: None,
            extra_args: None,
            router: None,
            request_timestamp_ms: None,
            mm_processor_kwargs: None,
            media_io_kwargs: None,
            forward: None,
        }
    }
}

/// Where a request's prompt comes from.
#[derive(Debug)]
pub enum Input {
    /// A conversation, rendered with the model's chat template.
    Chat(ChatInput),
    /// One or more prompts (a batch: one answer per prompt, in order).
    Prompts(SmallVec<[Prompt; 1]>),
    /// Tensors for a `model_input = Tensor` model, already in the worker's shape.
    Tensor(Box<TensorRequest>),
}

/// One completion prompt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Prompt {
    /// Text, encoded with the tokenizer's own special tokens (a BOS where the model adds one).
    Text(String),
    /// Token ids, sent as they are.
    Ids(Vec<u32>),
}

/// Stop conditions of a request (the model's EOS ids are added by the driver).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Stops {
    /// Most tokens to generate.
    pub max_tokens: Option<u32>,
    /// Fewest tokens before any stop condition is honoured.
    pub min_tokens: Option<u32>,
    pub strings: Vec<String>,
    pub token_ids: Option<Vec<u32>>,
    /// Generate past the model's EOS tokens (as the client set it: the worker is sent the
    /// client's value).
    pub ignore_eos: Option<bool>,
    /// Keep a matched stop string in the text.
    pub include_stop_str: bool,
    /// Drop special tokens from the text (default true).
    pub skip_special_tokens: bool,
}

/// Annotations ([`InferRequest::annotations`]) the driver answers itself, in the order
/// they are answered (Dynamo 1.6.1's).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnnotationKind {
    /// The request's id (the one its response ids carry).
    RequestId,
    /// A prompt's token ids, as compact JSON (one per prompt).
    TokenIds,
    /// The prompt text after the chat template (chat only).
    FormattedPrompt,
}

impl AnnotationKind {
    const ALL: [AnnotationKind; 3] =
        [AnnotationKind::RequestId, AnnotationKind::TokenIds, AnnotationKind::FormattedPrompt];

    /// The annotation's name, as clients ask for it and as it comes back.
    pub fn name(self) -> &'static str {
        match self {
            AnnotationKind::RequestId => "request_id",
            AnnotationKind::TokenIds => "token_ids",
            AnnotationKind::FormattedPrompt => "formatted_prompt",
        }
    }

    /// The annotations of `names` the driver answers, each once, in answering order.
    pub fn asked(names: &[String]) -> SmallVec<[AnnotationKind; 3]> {
        AnnotationKind::ALL.into_iter().filter(|k| names.iter().any(|n| n == k.name())).collect()
    }
}
