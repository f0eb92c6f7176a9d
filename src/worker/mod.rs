//! The in-tree mock worker: a process-internal stand-in for `python -m dynamo.mocker` that
//! speaks Dynamo 1.6.1's TCP request plane, so tests and benches run without Python.
//!
//! Built on the pure codecs of [`crate::plane`]; plain std threads and blocking sockets
//! (this is a test / bench tool, never on a shard's hot path):
//!
//! | thread | does |
//! |---|---|
//! | acceptor | accepts frontend connections on the worker's listener |
//! | one per frontend connection | decodes request frames, writes one ack per frame in order (FIFO), **before** decoding the payload (docs/dynamo/request-plane.md §5.5) |
//! | one per request | dials the call-back `address` of `connection_info`, writes handshake, prologue, items, `complete_final`, sentinel (docs/dynamo/request-plane.md §6.2) with the configured delays |
//! | one per request (reader) | reads the frontend's `"kill"` / `"stop"` on the call-back socket (docs/dynamo/request-plane.md §6.3) |
//! | keep-alive (per [`MockWorker::register_file`]) | touches the record files' mtimes every `keepalive` (docs/dynamo/request-plane.md §3.4) |
//!
//! # What a request produces (`model_input = Tokens`)
//!
//! Mirrors the mocker's stream in exchange `stream1` (tests/data/plane/stream1.resp.bin; docs/dynamo/request-plane.md §7.3): one `LLMEngineOutput` per token (`token_ids`
//! holding that token, `tokens`/`text`/logprob fields `nil`), `completion_usage` on the first
//! and on the last item, and a last item with `token_ids: []`, the `finish_reason` and the
//! final usage; then `{"complete_final":true}` and `"sentinel"`. Items are encoded with the
//! request's `payload_codec`.
//!
//! * Token ids: with [`MockConfig::echo`], the text the prompt scripts between `[[echo]]` and
//!   `[[/echo]]`, tokenized by the model's tokenizer ([`echo`]); else [`MockConfig::script`]
//!   exactly, else deterministic pseudo-random ids below
//!   [`MockConfig::vocab_size`] (seeded by `sampling_options.seed`, else by the prompt), never
//!   equal to the EOS id except as the last natural token.
//! * Length: the natural length is `script.len()` (script mode) or
//!   [`MockConfig::output_tokens`]; `stop_conditions.max_tokens` caps it. With `ignore_eos:
//!   true` *and* `max_tokens` there is no natural end: exactly `max_tokens` tokens come (a
//!   script is repeated), as from an engine told to ignore EOS — what benchmarks ask for.
//! * Delays: [`MockConfig::ttft`] before the first item, [`MockConfig::itl`] between items,
//!   each token written on its own. A zero delay never sleeps or reads the clock.
//!   [`MockConfig::fast`] adds no delay at all (no timer on the path, whatever ttft/itl say)
//!   and writes the frames in batches of up to 64 KiB: the mode for measuring a frontend,
//!   where the worker should cost as little as possible.
//! * `finish_reason`: `"eos"` when the EOS id ([`MockConfig::eos_token_id`]) was emitted
//!   (in random mode the last natural token is the EOS id when one is configured; a script
//!   stops at its first EOS id; `ignore_eos: true` disables both), `"length"` when
//!   `max_tokens` cut the natural length, else `"stop"`.
//! * `"kill"` from the frontend: the worker stops writing, sends no `complete_final` and no
//!   sentinel, and closes. `"stop"`: the stream ends early but normally, with
//!   `finish_reason: "cancelled"`, `complete_final` and sentinel. A frontend that closes the
//!   call-back socket is treated like `"kill"`.
//! * `output_options.logprobs: n`: each token item also carries `log_probs: [-(i+1)/8]` (the
//!   `i`-th output token) and `top_logprobs` with `n` alternatives: the token itself, then ids
//!   13, 14, … each one nat less likely, `token: null` (as Python workers send them).
//!
//! `model_input = Text`: the body is the client's OpenAI request (`max_tokens` or
//! `max_completion_tokens` caps the length); items are `chat.completion.chunk` objects (as in
//! exchange `ptext1` (tests/data/plane/ptext1.resp.bin; docs/dynamo/request-plane.md §7.4)) with one `" tok<id>"` word per token, the first carrying
//! `role: "assistant"`, and a last chunk with an empty delta, the finish reason
//! (`"stop"` / `"length"`) and `usage` (as in `ptext1`; `prompt_tokens` is the length of the
//! request object re-encoded as compact JSON, so tests can see what arrived). A request with
//! `prompt` instead of `messages` gets `text_completion` chunks (`text`, no delta).
//!
//! `model_input = Tensor`: an echo model, see [`tensor`].
//!
//! # Acks
//!
//! Empty ack = accepted. `Server unavailable: unknown endpoint <path>` for a frame whose
//! path is not this worker's endpoint path; `Read error: <detail>` for bytes that cannot be
//! framed (then the connection is closed, since framing is lost). A frame whose payload does
//! not decode still gets an empty ack; the worker counts it in
//! [`MockStats::decode_errors`] and never calls back, like the real worker.
//!
//! # Registration (file backend, docs/dynamo/request-plane.md §3)
//!
//! [`MockWorker::register_file`] writes the model card (`v1/mdc`) then the endpoint
//! instance (`v1/instances`) the Dynamo way (`.tmp_<hex>` created exclusively, hard-linked
//! to the percent-encoded key, temporary unlinked), touches both every
//! [`MockConfig::keepalive`], and [`MockWorker::stop`] deletes them. Card file slots point
//! at the files of [`MockConfig::model_dir`] in place (the mocker's "shared-storage MDC"),
//! with `chat_template_file` for its `chat_template.jinja` / `.json` or for
//! [`MockConfig::chat_template`], and [`MockConfig::aliases`] as the card's `aliases`.
//!
//! Each slot carries the real blake3 checksum of its file (`blake3:<hex>`, as Dynamo writes
//! and verifies it). The files are referenced by local path (shared storage); serving them
//! over HTTP like a worker with `DYN_SYSTEM_PORT` is not built yet.

pub mod cli;
pub mod echo;
pub mod embedded;
pub(crate) mod register;
mod register_etcd;
mod register_mem;
mod serve;
pub mod tensor;
mod tls;

use std::collections::HashMap;
use std::io;
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

pub use crate::plane::Codec;
pub use register::{FileRegistration, UNVERIFIED_CHECKSUM};
pub use register_etcd::EtcdRegistration;

/// What the worker accepts (`card_json.model_input`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum MockInput {
    /// `PreprocessedRequest` in, `LLMEngineOutput` items out.
    #[default]
    Tokens,
    /// The OpenAI request in, `chat.completion.chunk` items out.
    Text,
    /// `NvCreateTensorRequest` in, `NvCreateTensorResponse` items out: an echo model
    /// ([`tensor`]).
    Tensor,
}

impl MockInput {
    /// The card value: `Tokens` or `Text`.
    pub fn as_str(self) -> &'static str {
        match self {
            MockInput::Tokens => "Tokens",
            MockInput::Text => "Text",
            MockInput::Tensor => "Tensor",
        }
    }
}

/// Configuration of a [`MockWorker`].
#[derive(Clone, Debug)]
pub struct MockConfig {
    /// Delay before the first item (after the call-back connection is up).
    pub ttft: Duration,
    /// Delay between acknowledging a request and dialing its call-back (a worker slow to
    /// call back, for the frontend's call-back deadline).
    pub callback_delay: Duration,
    /// Delay between items.
    pub itl: Duration,
    /// Natural output length in random mode (`max_tokens` may cut it).
    pub output_tokens: usize,
    /// Exact token ids to emit (its length is the natural output length); `None`:
    /// deterministic pseudo-random ids below `vocab_size`.
    pub script: Option<Vec<u32>>,
    /// Exclusive upper bound of the random ids (must be ≥ 2 in random mode).
    pub vocab_size: u32,
    /// The EOS id: ends a script, and is the last natural token in random mode.
    pub eos_token_id: Option<u32>,
    /// No delays at all (ttft and itl ignored); frames are written in batches.
    pub fast: bool,
    pub namespace: String,
    pub component: String,
    pub endpoint: String,
    /// Card `display_name` (the served model id).
    pub model_name: String,
    /// Card `aliases`: other names the model answers to (written only when not empty).
    pub aliases: Vec<String>,
    /// A custom chat template file for the card's `chat_template_file` (`is_custom: true`),
    /// as a worker's `--chat-template` gives; `None`: the model directory's
    /// `chat_template.jinja` or `chat_template.json`, when there is one.
    pub chat_template: Option<PathBuf>,
    pub model_input: MockInput,
    /// The card's `tensor_model_config` in tensor mode; `None`: [`tensor::echo_config`].
    pub tensor_config: Option<serde_json::Value>,
    /// The advertised `request_plane_codec`. Responses use each request's `payload_codec`.
    pub codec: Codec,
    /// Address to listen on; port 0 picks one.
    pub listen: SocketAddr,
    /// Directory whose `config.json`, `tokenizer.json`, `tokenizer_config.json`,
    /// `generation_config.json` the card names (slots for absent files are left out).
    pub model_dir: Option<PathBuf>,
    /// mtime keep-alive period of registered files (Dynamo: TTL/3 ≈ 3.33 s).
    pub keepalive: Duration,
    /// Instance id; `None` draws a random one (the file backend's per-runtime id). With
    /// etcd it is the lease id ([`MockWorker::start_etcd`] sets it).
    pub instance_id: Option<u64>,
    /// The card's `runtime_config.tool_call_parser` (as a worker's `--dyn-tool-call-parser`).
    pub tool_call_parser: Option<String>,
    /// The card's `runtime_config.reasoning_parser`.
    pub reasoning_parser: Option<String>,
    /// Answer with the text the prompt scripts ([`echo`]); needs `model_dir`'s tokenizer.
    pub echo: Option<echo::EchoSplit>,
    /// The card's `runtime_config.total_kv_blocks` (of `kv_cache_block_size` 64 tokens).
    pub total_kv_blocks: u64,
    /// The request plane's TLS, as a real worker takes it from `DYN_TCP_TLS_*`: its listener
    /// (certificate, key, client CA) and its call-backs (CA or insecure, client identity,
    /// server name). Plain TCP by default.
    pub tls: crate::tls::plane::PlaneTls,
}

impl Default for MockConfig {
    fn default() -> Self {
        MockConfig {
            ttft: Duration::from_millis(10),
            callback_delay: Duration::ZERO,
            itl: Duration::from_millis(1),
            output_tokens: 16,
            script: None,
            vocab_size: 32_000,
            eos_token_id: None,
            fast: false,
            namespace: "dynamo".into(),
            component: "backend".into(),
            endpoint: "generate".into(),
            model_name: "mock-model".into(),
            aliases: Vec::new(),
            chat_template: None,
            model_input: MockInput::Tokens,
            tensor_config: None,
            codec: Codec::Msgpack,
            listen: SocketAddr::from(([127, 0, 0, 1], 0)),
            model_dir: None,
            keepalive: Duration::from_millis(3333),
            instance_id: None,
            tool_call_parser: None,
            reasoning_parser: None,
            echo: None,
            total_kv_blocks: 16384,
            tls: Default::default(),
        }
    }
}

/// Counters of a running worker.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct MockStats {
    /// Request frames received (every ack written counts one).
    pub frames: u64,
    /// Frames acked with a refusal (unknown endpoint, unframeable bytes).
    pub rejected: u64,
    /// Accepted frames whose payload did not decode (no call-back).
    pub decode_errors: u64,
    /// Streams that ended with `complete_final` and sentinel.
    pub completed: u64,
    /// Streams ended by `"kill"` or by the frontend closing the socket.
    pub killed: u64,
    /// Call-backs that could not be dialed or written.
    pub stream_errors: u64,
}

#[derive(Default)]
pub(crate) struct Counters {
    frames: AtomicU64,
    rejected: AtomicU64,
    decode_errors: AtomicU64,
    completed: AtomicU64,
    killed: AtomicU64,
    stream_errors: AtomicU64,
}

impl Counters {
    pub(crate) fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }
}

/// State shared by every thread of one worker.
pub(crate) struct Shared {
    pub(crate) cfg: MockConfig,
    pub(crate) instance_id: u64,
    /// `<instance hex>/<ns>/<component>/<endpoint>`.
    pub(crate) endpoint_path: String,
    pub(crate) addr: SocketAddr,
    pub(crate) shutdown: AtomicBool,
    pub(crate) counters: Counters,
    /// Clones of open frontend connections, shut down by `stop`.
    pub(crate) conns: Mutex<HashMap<u64, TcpStream>>,
    pub(crate) next_conn: AtomicU64,
    pub(crate) conn_threads: Mutex<Vec<JoinHandle<()>>>,
    /// Request streams still running.
    pub(crate) active_streams: AtomicUsize,
    /// Every Tokens request received, in order.
    pub(crate) received: Mutex<Vec<Received>>,
    /// Echo mode's tokenizer and split.
    pub(crate) echo: Option<echo::Echo>,
}

/// What a Tokens request asked for (kept so a test can see what a worker was sent).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Received {
    pub request_id: String,
    pub token_ids: Vec<u32>,
    pub max_tokens: Option<u32>,
}

/// A running mock worker. Dropping it stops it.
pub struct MockWorker {
    shared: Arc<Shared>,
    acceptor: Option<JoinHandle<()>>,
    registrations: Mutex<Vec<register::Registered>>,
}

impl MockWorker {
    /// Binds the listener and starts the acceptor thread.
    pub fn start(cfg: MockConfig) -> io::Result<MockWorker> {
        if cfg.script.is_none() && cfg.vocab_size < 2 {
            return Err(io::Error::new(io::ErrorKind::InvalidInput, "vocab_size must be at least 2"));
        }
        for (what, v) in [("namespace", &cfg.namespace), ("component", &cfg.component), ("endpoint", &cfg.endpoint)] {
            if v.is_empty() || v.contains('/') {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, format!("bad {what} {v:?}")));
            }
        }
        let echo = match (cfg.echo, &cfg.model_dir) {
            (None, _) => None,
            (Some(split), Some(dir)) => {
                let tokenizer = crate::tokenize::tokenizer::Tokenizer::from_file(dir.join("tokenizer.json"))
                    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("echo mode: {e}")))?;
                Some(echo::Echo { tokenizer, split })
            }
            (Some(_), None) => {
                return Err(io::Error::new(io::ErrorKind::InvalidInput, "echo mode needs a model directory"))
            }
        };
        let listener = TcpListener::bind(cfg.listen)?;
        let addr = listener.local_addr()?;
        let instance_id = cfg.instance_id.unwrap_or_else(crate::util::random_u64);
        let endpoint_path = format!("{instance_id:x}/{}/{}/{}", cfg.namespace, cfg.component, cfg.endpoint);
        let shared = Arc::new(Shared {
            cfg,
            instance_id,
            endpoint_path,
            addr,
            shutdown: AtomicBool::new(false),
            counters: Counters::default(),
            conns: Mutex::new(HashMap::new()),
            next_conn: AtomicU64::new(0),
            conn_threads: Mutex::new(Vec::new()),
            active_streams: AtomicUsize::new(0),
            received: Mutex::new(Vec::new()),
            echo,
        });
        let s = Arc::clone(&shared);
        let acceptor = std::thread::Builder::new()
            .name("mock-worker-accept".into())
            .spawn(move || serve::accept_loop(listener, s))?;
        Ok(MockWorker { shared, acceptor: Some(acceptor), registrations: Mutex::new(Vec::new()) })
    }

    /// The listening address (what the instance record advertises).
    pub fn addr(&self) -> SocketAddr {
        self.shared.addr
    }

    pub fn instance_id(&self) -> u64 {
        self.shared.instance_id
    }

    /// The endpoint path request frames must carry: `<instance hex>/<ns>/<component>/<endpoint>`.
    pub fn endpoint_path(&self) -> &str {
        &self.shared.endpoint_path
    }

    /// The instance record's `transport.tcp`: `<host>:<port>/<endpoint path>`.
    pub fn transport(&self) -> String {
        let mut addr = self.shared.addr;
        if addr.ip().is_unspecified() {
            addr.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
        }
        format!("{addr}/{}", self.shared.endpoint_path)
    }

    pub fn config(&self) -> &MockConfig {
        &self.shared.cfg
    }

    pub fn stats(&self) -> MockStats {
        let c = &self.shared.counters;
        let l = |a: &AtomicU64| a.load(Ordering::Relaxed);
        MockStats {
            frames: l(&c.frames),
            rejected: l(&c.rejected),
            decode_errors: l(&c.decode_errors),
            completed: l(&c.completed),
            killed: l(&c.killed),
            stream_errors: l(&c.stream_errors),
        }
    }

    /// Every Tokens request received so far, in order.
    pub fn received(&self) -> Vec<Received> {
        self.shared.received.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Stops the worker: deletes registered files and etcd keys (then revokes the lease),
    /// closes the listener and every frontend connection, and waits (≤ 2 s) for running
    /// streams to notice. Idempotent.
    pub fn stop(&mut self) {
        for r in self.registrations.lock().unwrap_or_else(|e| e.into_inner()).drain(..) {
            r.remove();
        }
        self.shared.shutdown.store(true, Ordering::SeqCst);
        if let Some(acceptor) = self.acceptor.take() {
            // Wake the blocking accept.
            let mut wake = self.shared.addr;
            if wake.ip().is_unspecified() {
                wake.set_ip(std::net::Ipv4Addr::LOCALHOST.into());
            }
            let _ = TcpStream::connect_timeout(&wake, Duration::from_secs(1));
            let _ = acceptor.join();
        }
        for (_, c) in self.shared.conns.lock().unwrap_or_else(|e| e.into_inner()).drain() {
            let _ = c.shutdown(Shutdown::Both);
        }
        let threads: Vec<_> = self.shared.conn_threads.lock().unwrap_or_else(|e| e.into_inner()).drain(..).collect();
        for t in threads {
            let _ = t.join();
        }
        let deadline = Instant::now() + Duration::from_secs(2);
        while self.shared.active_streams.load(Ordering::SeqCst) > 0 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }
}

impl Drop for MockWorker {
    fn drop(&mut self) {
        self.stop();
    }
}
