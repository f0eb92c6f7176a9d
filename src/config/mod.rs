//! Configuration: every `dynamo.frontend` option and `DYN_*` variable, validated once.
//!
//! * [`flags`]: the option table (spellings, env vars, defaults, choices).
//! * [`parse`]: command line + environment → one value per option (CLI beats env).
//! * [`help`]: `--help` text from the table.
//! * `checks`: Dynamo's start-up validations and the refusal of options whose behaviour
//!   is not built yet.
//! * this file: the typed [`Config`] the rest of switchyard reads, and `--dump-config-to`.
//!
//! Called by `main` once, before any thread starts. Depends on nothing else in the crate.

pub mod cdisagg;
mod checks;
pub mod classes;
pub mod classifier;
pub mod flags;
pub mod help;
pub mod parse;
mod policy;
pub mod settings;
mod values;
use values::{boolean, env_number, float, int, kv_cost, secs, text};

use std::path::PathBuf;
use std::time::Duration;

pub use parse::{Action, Parsed, UsageError, Value};

/// Which I/O driver the shards use.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum IoDriver {
    /// io_uring where the kernel allows it, epoll otherwise.
    Auto,
    IoUring,
    Epoll,
}

/// Paths of the routes switchyard serves (Dynamo's `DYN_HTTP_SVC_*_PATH` overrides).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RoutePaths {
    pub health: String,
    pub live: String,
    pub metrics: String,
    pub models: String,
    pub chat: String,
    pub completions: String,
    /// `--enable-anthropic-api`: the Anthropic Messages route (`DYN_HTTP_SVC_ANTHROPIC_PATH`,
    /// default `/v1/messages`; count tokens is always `<path>/count_tokens`).
    pub anthropic: Option<String>,
    /// `/v1/responses`; its token count is `<responses>/input_tokens`.
    pub responses: String,
    pub embeddings: String,
}

/// Route-path variables switchyard honours: (variable, default path).
pub const SERVED_PATH_VARS: &[(&str, &str)] = &[
    ("DYN_HTTP_SVC_HEALTH_PATH", "/health"),
    ("DYN_HTTP_SVC_LIVE_PATH", "/live"),
    ("DYN_HTTP_SVC_METRICS_PATH", "/metrics"),
    ("DYN_HTTP_SVC_MODELS_PATH", "/v1/models"),
    ("DYN_HTTP_SVC_CHAT_PATH", "/v1/chat/completions"),
    ("DYN_HTTP_SVC_CMP_PATH", "/v1/completions"),
    ("DYN_HTTP_SVC_RESPONSES_PATH", "/v1/responses"),
    ("DYN_HTTP_SVC_EMB_PATH", "/v1/embeddings"),
];

/// Dynamo 1.6.1 variables whose behaviour switchyard does not have yet: setting one stops
/// start-up instead of being silently ignored.
///
/// Not here, because they do nothing in 1.6.1 either: `DYN_HTTP_SVC_FILES_PATH` and
/// `DYN_HTTP_SVC_BATCHES_PATH`. 1.6.1 reads them but never mounts the files and batches
/// routes, so with or without them those paths answer `Route not found`, as switchyard's do
/// (docs/dynamo/surfaces.md §14; replayed by scripts/interop_surfaces.sh).
pub const UNBUILT_ENV_VARS: &[&str] = &[
    "DYN_HTTP_SVC_POOLING_PATH",
    "DYN_HTTP_SVC_CLASSIFY_PATH",
    "DYN_HTTP_SVC_RERANK_PATH",
    "DYN_HTTP_SVC_VLLM_GENERATE_PATH",
    "DYN_HTTP_SVC_SGLANG_GENERATE_PATH",
    "DYN_HTTP_PRE_COMMIT_ERROR_PEEK_MS",
];

/// `--discovery-backend`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Discovery {
    Etcd,
    File,
    Mem,
    Kubernetes,
}

/// The in-process workers of `--discovery-backend mem`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Embedded {
    pub workers: usize,
    /// The model directory they serve; the model is named after its last component.
    pub model_path: PathBuf,
    /// No artificial delay: no TTFT/ITL timers, frames written in batches
    /// (the mock worker's fast mode).
    pub fast: bool,
}

/// `--embedded-*` options: required with `mem` (its workers live in this process), refused
/// with any other backend.
fn embedded(p: &Parsed) -> Result<Option<Embedded>, ConfigError> {
    let workers = int(p, "embedded_workers").unwrap_or(2);
    let path = text(p, "embedded_model_path");
    if text(p, "discovery_backend") != Some("mem") {
        if path.is_some() || workers != 2 || boolean(p, "embedded_fast") {
            return Err(invalid(
                "--embedded-workers, --embedded-model-path and --embedded-fast need --discovery-backend mem",
            ));
        }
        return Ok(None);
    }
    let Some(path) = path else {
        return Err(invalid(
            "--discovery-backend mem serves in-process mock workers: give --embedded-model-path DIR, a model \
             directory with tokenizer.json (bash scripts/fetch-models.sh qwen3 fetches one)",
        ));
    };
    if !std::path::Path::new(path).join("tokenizer.json").is_file() {
        return Err(invalid(format!("--embedded-model-path {path}: no tokenizer.json in that directory")));
    }
    if !(1..=64).contains(&workers) {
        return Err(invalid("--embedded-workers must be between 1 and 64"));
    }
    Ok(Some(Embedded { workers: workers as usize, model_path: PathBuf::from(path), fast: boolean(p, "embedded_fast") }))
}

/// The resolved configuration.
#[derive(Clone, Debug)]
pub struct Config {
    /// Every option's value, for `--dump-config-to` and later lookups.
    pub parsed: Parsed,
    pub http_host: String,
    pub http_port: u16,
    /// Prefix of every metric name, without the trailing `_` (Dynamo: `dynamo_frontend`).
    pub metrics_prefix: String,
    pub dump_config_to: Option<PathBuf>,
    /// Shard threads; 0 = one per CPU in the affinity mask.
    pub shards: usize,
    /// In-process workers to start (`--discovery-backend mem` only).
    pub embedded: Option<Embedded>,
    /// `--discovery-backend`.
    pub discovery: Discovery,
    /// `--router-mode`.
    pub router_mode: settings::RouterMode,
    /// `--router-replica-sync`: share kv bookings with other routers.
    pub router_replica_sync: bool,
    /// `--serve-indexer`: answer other routers' `kv_indexer_query` from this process's index.
    pub serve_indexer: bool,
    /// `--use-remote-indexer`: score workers with a served indexer's answers instead of a
    /// local index (no KV event subscription).
    pub use_remote_indexer: bool,
    /// `--migration-limit`: how many times a request may move to another worker mid-answer
    /// (also reported per model in `/metrics`).
    pub migration_limit: u32,
    /// `--router-min-initial-workers`: a model is served once this many of its workers are
    /// up at the same time.
    pub min_initial_workers: usize,
    /// HTTP status of an overload refusal (`DYN_HTTP_OVERLOAD_STATUS_CODE`, default 529).
    pub overload_status: u16,
    /// `false` under a truthy `DYN_DISABLE_FRONTEND_NVEXT`: requests keep only their
    /// `nvext.cache_salt` on the chat, completions and Responses routes (the routing headers
    /// ignored too) and no `nvext` at all on embeddings, as in 1.6.1.
    pub nvext_enabled: bool,
    /// `--migration-max-seq-len`: no migration once prompt + generated tokens exceed it.
    pub migration_max_seq_len: Option<u32>,
    pub pin_shards: bool,
    pub io_driver: IoDriver,
    pub header_read_timeout: Duration,
    pub idle_timeout: Duration,
    pub max_header_count: usize,
    pub max_header_bytes: usize,
    /// `DYN_HTTP_BODY_LIMIT_MB` in bytes (default 45 MiB: the limit Dynamo 1.6.1 enforces).
    pub body_limit_bytes: usize,
    /// `DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS`.
    pub graceful_shutdown: Duration,
    /// `DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS`: an SSE comment (`:`) after this long without an
    /// event.
    pub sse_keep_alive: Option<Duration>,
    /// `DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS`: the longest wait for a worker's next item
    /// (its first included).
    pub backend_stream_timeout: Option<Duration>,
    /// `DYN_HTTP_LISTEN_BACKLOG`.
    pub listen_backlog: i32,
    pub paths: RoutePaths,
    /// `--exclude-tools-when-tool-choice-none`.
    pub exclude_tools_when_tool_choice_none: bool,
    /// `--strip-anthropic-preamble`: drop Claude Code's `x-anthropic-billing-header:` line
    /// from the start of an Anthropic request's system prompt.
    pub strip_anthropic_preamble: bool,
    /// `--reasoning-field-name`: the member that carries parsed reasoning in chat answers
    /// (`reasoning_content` or `reasoning`).
    pub reasoning_field: &'static str,
    /// `--enable-streaming-tool-dispatch`: `event: tool_call_dispatch` ahead of each call.
    pub streaming_tool_dispatch: bool,
    /// `--enable-streaming-reasoning-dispatch`: `event: reasoning_dispatch` once reasoning ends.
    pub streaming_reasoning_dispatch: bool,
    /// The kv router's cost parameters (`--router-kv-overlap-score-credit` …).
    pub kv_cost: settings::CostParams,
    /// Each worker pool's selection: the cost function with `kv_cost`, unless
    /// `--router-policy-config`'s `worker_selection` (or `--router-prefill-policy`,
    /// `--router-decode-policy`, `DYN_ROUTER_WORKER_SELECTION_POLICY`) names an instance.
    pub kv_selectors: settings::Selectors,
    /// `--no-router-kv-events`: the kv router predicts the cache from its own decisions,
    /// each prediction living this long (`--router-ttl-secs`).
    pub kv_approximate_ttl: Option<Duration>,
    /// `--router-predicted-ttl-secs` (kv mode, KV events on): the predict-on-route side index,
    /// each prediction living this long.
    pub kv_predicted_ttl: Option<Duration>,
    /// `--router-conditional-disagg`: when a disaggregated request may skip its prefill leg.
    pub conditional_disagg: Option<cdisagg::ConditionalDisagg>,
    /// `--router-approximate-cache-policy`.
    pub kv_cache_policy: settings::CachePolicy,
    /// The kv router's queue (`--router-queue-threshold`, `--router-queue-policy`).
    pub kv_queue: Option<settings::QueueConfig>,
    /// The kv router queue's policy classes (`--router-policy-config`; the synthetic class
    /// of `kv_queue` for models the file gives none).
    pub kv_classes: classes::ClassProfiles,
    /// `--router-policy-config`'s `request_classifier` (kv mode): ThunderAgent's parameters.
    pub kv_classifier: Option<classifier::ThunderConfig>,
    /// The kv router's busy thresholds (`--active-decode-blocks-threshold` …).
    pub kv_busy: settings::BusyThresholds,
    /// `--router-session-affinity-ttl-secs` and `-mode` (`None`: affinity off).
    pub session_affinity: Option<(Duration, settings::AffinityMode)>,
    /// `-i` / `--interactive`: text chat in the terminal instead of any HTTP listener
    /// ([`crate::interactive`]); it wins over `--kserve-grpc-server`, as in 1.6.1.
    pub interactive: bool,
    /// `--kserve-grpc-server`: the KServe v2 gRPC service on `--http-port` (the OpenAI routes
    /// stay there too). Off with `--interactive`.
    pub kserve_grpc: bool,
    /// `--grpc-metrics-port`: with `--kserve-grpc-server`, the ops routes (`/metrics`,
    /// `/health`, `/live`, `/v1/models`) are also served there, as 1.6.1 serves them.
    pub grpc_metrics_port: u16,
    /// HTTP/2 settings (`DYN_GRPC_INITIAL_{CONNECTION,STREAM}_WINDOW_SIZE`).
    pub h2: settings::Settings,
    /// `--max-connections-per-shard`.
    pub max_connections_per_shard: usize,
    /// `--worker-callback-timeout-secs`: how long an acknowledged request waits for its
    /// worker's call-back; `None`: without end.
    pub worker_callback_timeout: Option<Duration>,
    /// `--max-output-tokens`: the most tokens one answer may carry; `None`: no cap.
    pub max_output_tokens: Option<u32>,
    /// HTTPS on `--http-port` (`--tls-cert-path` …); `None`: plain HTTP.
    pub tls: Option<settings::TlsFiles>,
    /// `--api-keys-file` (`SWITCHYARD_API_KEYS`): the key file the inference routes check.
    pub api_keys_file: Option<PathBuf>,
    /// TLS of the TCP request plane (requests to workers) and of the call-back listener
    /// (`--tcp-tls-*`, `DYN_TCP_TLS_*`).
    pub plane_tls: settings::PlaneTlsFiles,
    /// TLS of the NATS event plane (`--nats-tls-*`, `NATS_TLS_*`).
    pub nats_tls: settings::NatsTlsFiles,
    /// `--request-plane nats`: the NATS servers requests are published through (`NATS_SERVER`,
    /// default `nats://localhost:4222`); `None`: the TCP request plane.
    pub request_plane_nats: Option<String>,
    /// `--tokenizer`, `--tokenizer-fallback`: the library that encodes prompts.
    pub tokenizer: settings::TokenizerChoice,
    /// `--model-path` (`DYN_MODEL_PATH`): a directory holding a model's files, where a card's
    /// files are looked for by name when the worker's paths are not on this host. Its
    /// `config.json` must be readable at start-up, as 1.6.1 reads it. (`--model-name` names
    /// that local model in 1.6.1 and changes nothing served: it is validated and kept in
    /// [`Config::parsed`] only.)
    pub model_overlay: Option<PathBuf>,
}

/// A configuration that cannot start: the message and the exit code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub message: String,
    pub exit_code: i32,
}

impl From<UsageError> for ConfigError {
    fn from(e: UsageError) -> Self {
        ConfigError { message: e.message, exit_code: e.exit_code }
    }
}

fn invalid(message: impl Into<String>) -> ConfigError {
    ConfigError { message: message.into(), exit_code: 1 }
}

/// Parse the process's arguments and environment.
///
/// As `dynamo.frontend` 1.6.1 does before its runtime starts, the transport TLS options
/// given on the command line are then exported to the variables its runtime reads
/// (`--tcp-tls-cert-path` → `DYN_TCP_TLS_CERT_PATH` …; `--no-nats-tls-insecure` removes
/// `NATS_TLS_INSECURE`), so the threads that read them (the NATS client of the event-ingest
/// thread) see the command line. Call it before any other thread starts.
pub fn from_process() -> Result<(Action, Option<Config>, Vec<String>), ConfigError> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let loaded = load(&args, &|k| std::env::var(k).ok())?;
    if let Some(cfg) = &loaded.1 {
        export_transport_tls(&cfg.parsed);
    }
    Ok(loaded)
}

/// The transport TLS options and the variables 1.6.1's frontend exports them to.
const TRANSPORT_TLS_VARS: &[(&str, &str)] = &[
    ("tcp_tls_cert_path", "DYN_TCP_TLS_CERT_PATH"),
    ("tcp_tls_key_path", "DYN_TCP_TLS_KEY_PATH"),
    ("tcp_tls_ca_cert_path", "DYN_TCP_TLS_CA_CERT_PATH"),
    ("tcp_tls_client_cert_path", "DYN_TCP_TLS_CLIENT_CERT_PATH"),
    ("tcp_tls_client_key_path", "DYN_TCP_TLS_CLIENT_KEY_PATH"),
    ("tcp_tls_client_ca_cert_path", "DYN_TCP_TLS_CLIENT_CA_CERT_PATH"),
    ("nats_tls_ca_cert_path", "NATS_TLS_CA_CERT_PATH"),
    ("nats_tls_client_cert_path", "NATS_TLS_CLIENT_CERT_PATH"),
    ("nats_tls_client_key_path", "NATS_TLS_CLIENT_KEY_PATH"),
];

fn export_transport_tls(p: &Parsed) {
    // Only the main thread runs here (see `from_process`), so changing the environment
    // races with no reader.
    for (dest, var) in TRANSPORT_TLS_VARS {
        if let Some(v) = text(p, dest) {
            std::env::set_var(var, v);
        }
    }
    if boolean(p, "nats_tls_insecure") {
        std::env::set_var("NATS_TLS_INSECURE", "1");
    } else {
        std::env::remove_var("NATS_TLS_INSECURE");
    }
}

/// Parse, validate and type the configuration. Returns the action, the config (for
/// `Action::Run`) and warnings to log.
pub fn load(
    args: &[String],
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<(Action, Option<Config>, Vec<String>), ConfigError> {
    let mut parsed = parse::parse(args, env)?;
    if parsed.action != Action::Run {
        return Ok((parsed.action, None, Vec::new()));
    }
    let policy::PolicyFile { selection, classes: mut kv_classes, classifier } = policy::apply(&mut parsed)?;
    let conditional_disagg = cdisagg::settings(&parsed)?;
    let mut warnings = parsed.warnings.clone();
    checks::validate_dynamo(&parsed, &mut warnings)?;
    checks::refuse_unbuilt(&parsed, env)?;
    let mut cfg = typed(parsed, env)?;
    cfg.conditional_disagg = conditional_disagg;
    cfg.kv_selectors = policy::selectors(&selection, cfg.kv_cost, &cfg.parsed, env)?;
    kv_classes.fallback = std::sync::Arc::new(classes::PolicyProfile::synthetic(cfg.kv_queue));
    cfg.kv_classes = kv_classes;
    cfg.kv_classifier = classifier;
    cfg.plane_tls.check(settings::PlaneRole::Frontend, &mut warnings).map_err(invalid)?;
    if cfg.serve_indexer && (cfg.plane_tls.serves_tls() || cfg.plane_tls.dials_tls()) {
        return Err(invalid(
            "--serve-indexer with request-plane TLS (DYN_TCP_TLS_*) is not implemented in this switchyard build \
             (the served indexer's listener and call-backs speak plain TCP)",
        ));
    }
    // 1.6.1 checks its NATS options when it connects to NATS: with `--event-plane nats`.
    if text(&cfg.parsed, "event_plane") == Some("nats") {
        let server = nats_server(env);
        cfg.nats_tls.check(&server).map_err(invalid)?;
    }
    if let Some(server) = &cfg.request_plane_nats {
        // The shards' NATS connections speak plain TCP; the request plane's TLS settings
        // would go unused.
        let tls = if server.contains("tls://") {
            Some(format!("NATS_SERVER={server}"))
        } else if cfg.nats_tls.any() {
            Some("--nats-tls-* (NATS_TLS_*)".to_owned())
        } else if cfg.plane_tls.serves_tls() || cfg.plane_tls.dials_tls() {
            Some("--tcp-tls-* (DYN_TCP_TLS_*)".to_owned())
        } else {
            None
        };
        if let Some(what) = tls {
            return Err(invalid(format!(
                "--request-plane nats with TLS ({what}) is not implemented in this switchyard build"
            )));
        }
    }
    Ok((Action::Run, Some(cfg), warnings))
}

/// `NATS_SERVER`, or where Dynamo looks without it.
fn nats_server(env: &dyn Fn(&str) -> Option<String>) -> String {
    env("NATS_SERVER").unwrap_or_else(|| "nats://localhost:4222".to_owned())
}

/// The request plane's TLS: the six `--tcp-tls-*` options (or their variables), and the
/// three variables 1.6.1's runtime reads without an option (`DYN_TCP_TLS_INSECURE`,
/// `DYN_TCP_TLS_SERVER_NAME`, `DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS`).
fn plane_tls(p: &Parsed, env: &dyn Fn(&str) -> Option<String>) -> settings::PlaneTlsFiles {
    let path = |dest: &str| text(p, dest).map(PathBuf::from);
    settings::PlaneTlsFiles {
        cert: path("tcp_tls_cert_path"),
        key: path("tcp_tls_key_path"),
        client_ca: path("tcp_tls_client_ca_cert_path"),
        ca: path("tcp_tls_ca_cert_path"),
        client_cert: path("tcp_tls_client_cert_path"),
        client_key: path("tcp_tls_client_key_path"),
        ..settings::PlaneTlsFiles::from_env(env)
    }
}

fn typed(parsed: Parsed, env: &dyn Fn(&str) -> Option<String>) -> Result<Config, ConfigError> {
    let p = &parsed;
    let port = int(p, "http_port").unwrap_or(8000);
    let http_port = u16::try_from(port).map_err(|_| invalid(format!("--http-port {port} is not a TCP port")))?;
    let metrics_prefix = match text(p, "metrics_prefix").map(str::trim) {
        Some(s) if !s.is_empty() => s.trim_end_matches('_').to_string(),
        _ => "dynamo_frontend".to_string(),
    };
    let io_driver = match text(p, "io_driver") {
        Some("io-uring") => IoDriver::IoUring,
        Some("epoll") => IoDriver::Epoll,
        _ => IoDriver::Auto,
    };
    let count = |dest: &str, min: i64| -> Result<usize, ConfigError> {
        let v = int(p, dest).unwrap_or(0);
        if v < min {
            return Err(invalid(format!("--{} must be >= {min}", dest.replace('_', "-"))));
        }
        Ok(v as usize)
    };
    let body_mb: u64 = env_number(env, "DYN_HTTP_BODY_LIMIT_MB", 45)?;
    let grace: u64 = env_number(env, "DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", 5)?;
    // 0 (the default) turns either off, as in 1.6.1.
    let keep_alive_ms: u64 = env_number(env, "DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS", 0)?;
    let stream_timeout_secs: u64 = env_number(env, "DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS", 0)?;
    // 1.6.1 takes any status from 200 to 999 (and falls back to 529 for others; here they
    // stop start-up).
    let overload_status: u16 = env_number(env, "DYN_HTTP_OVERLOAD_STATUS_CODE", 529)?;
    if !(200..=999).contains(&overload_status) {
        return Err(invalid(format!(
            "DYN_HTTP_OVERLOAD_STATUS_CODE: {overload_status} is not a status from 200 to 999"
        )));
    }
    let backlog: i32 = env_number(env, "DYN_HTTP_LISTEN_BACKLOG", 1024)?;
    let path = |var: &str, default: &str| -> Result<String, ConfigError> {
        match env(var) {
            None => Ok(default.to_string()),
            Some(v) if v.starts_with('/') && !v.contains(['?', '#', ' ']) => Ok(v),
            Some(v) => Err(invalid(format!("{var}: '{v}' is not an absolute path"))),
        }
    };
    let paths = RoutePaths {
        health: path(SERVED_PATH_VARS[0].0, SERVED_PATH_VARS[0].1)?,
        live: path(SERVED_PATH_VARS[1].0, SERVED_PATH_VARS[1].1)?,
        metrics: path(SERVED_PATH_VARS[2].0, SERVED_PATH_VARS[2].1)?,
        models: path(SERVED_PATH_VARS[3].0, SERVED_PATH_VARS[3].1)?,
        chat: path(SERVED_PATH_VARS[4].0, SERVED_PATH_VARS[4].1)?,
        completions: path(SERVED_PATH_VARS[5].0, SERVED_PATH_VARS[5].1)?,
        anthropic: match boolean(p, "enable_anthropic_api") {
            true => Some(path("DYN_HTTP_SVC_ANTHROPIC_PATH", "/v1/messages")?),
            false => None,
        },
        responses: path(SERVED_PATH_VARS[6].0, SERVED_PATH_VARS[6].1)?,
        embeddings: path(SERVED_PATH_VARS[7].0, SERVED_PATH_VARS[7].1)?,
    };
    let metrics_port = int(p, "grpc_metrics_port").unwrap_or(8788);
    let grpc_metrics_port = u16::try_from(metrics_port)
        .map_err(|_| invalid(format!("--grpc-metrics-port {metrics_port} is not a TCP port")))?;
    let max_header_bytes = count("max_header_bytes", 256)?;
    Ok(Config {
        interactive: boolean(p, "interactive"),
        kserve_grpc: boolean(p, "kserve_grpc_server") && !boolean(p, "interactive"),
        grpc_metrics_port,
        h2: settings::Settings {
            max_concurrent_streams: u32::try_from(count("h2_max_concurrent_streams", 1)?).unwrap_or(u32::MAX),
            max_pending_resets: count("h2_max_pending_resets", 0)?,
            ..settings::Settings::from_env(env, max_header_bytes)
        },
        max_connections_per_shard: count("max_connections_per_shard", 1)?,
        worker_callback_timeout: match float(p, "worker_callback_timeout_secs").unwrap_or(30.0) {
            0.0 => None,
            s if s.is_finite() && s > 0.0 => Some(Duration::from_secs_f64(s)),
            s => {
                return Err(invalid(format!(
                    "--worker-callback-timeout-secs {s} must be 0 or a positive number of seconds"
                )))
            }
        },
        max_output_tokens: match count("max_output_tokens", 0)? {
            0 => None,
            n => Some(u32::try_from(n).map_err(|_| invalid("--max-output-tokens is larger than 2^32 - 1"))?),
        },
        api_keys_file: text(p, "api_keys_file").map(PathBuf::from),
        tls: match (text(p, "tls_cert_path"), text(p, "tls_key_path")) {
            (Some(cert), Some(key)) => Some(settings::TlsFiles {
                cert: cert.into(),
                key: key.into(),
                client_ca: text(p, "tls_client_ca_cert_path").map(PathBuf::from),
            }),
            _ => None,
        },
        plane_tls: plane_tls(p, env),
        request_plane_nats: (text(p, "request_plane") == Some("nats")).then(|| nats_server(env)),
        model_overlay: text(p, "model_path").map(PathBuf::from),
        tokenizer: settings::TokenizerChoice {
            backend: text(p, "tokenizer_backend").and_then(settings::TokenizerBackend::parse).unwrap_or_default(),
            fallback: boolean(p, "tokenizer_fallback"),
        },
        nats_tls: settings::NatsTlsFiles {
            ca: text(p, "nats_tls_ca_cert_path").map(PathBuf::from),
            insecure: boolean(p, "nats_tls_insecure"),
            client_cert: text(p, "nats_tls_client_cert_path").map(PathBuf::from),
            client_key: text(p, "nats_tls_client_key_path").map(PathBuf::from),
        },
        http_host: text(p, "http_host").unwrap_or("0.0.0.0").to_string(),
        http_port,
        metrics_prefix,
        dump_config_to: text(p, "dump_config_to").map(PathBuf::from),
        shards: count("shards", 0)?,
        embedded: embedded(p)?,
        discovery: match text(p, "discovery_backend") {
            Some("file") => Discovery::File,
            Some("mem") => Discovery::Mem,
            Some("kubernetes") => Discovery::Kubernetes,
            _ => Discovery::Etcd,
        },
        router_mode: text(p, "router_mode")
            .and_then(settings::RouterMode::parse)
            .unwrap_or(settings::RouterMode::RoundRobin),
        router_replica_sync: boolean(p, "router_replica_sync"),
        serve_indexer: boolean(p, "serve_indexer"),
        use_remote_indexer: boolean(p, "use_remote_indexer") && text(p, "router_mode") == Some("kv"),
        migration_limit: u32::try_from(int(p, "migration_limit").unwrap_or(0).max(0)).unwrap_or(u32::MAX),
        migration_max_seq_len: int(p, "migration_max_seq_len").and_then(|n| u32::try_from(n).ok()),
        min_initial_workers: usize::try_from(int(p, "min_initial_workers").unwrap_or(0)).unwrap_or(0),
        overload_status,
        nvext_enabled: !env("DYN_DISABLE_FRONTEND_NVEXT").is_some_and(|v| settings::is_truthy(&v)),
        pin_shards: boolean(p, "pin_shards"),
        io_driver,
        header_read_timeout: secs(p, "header_read_timeout_secs")?,
        idle_timeout: secs(p, "idle_timeout_secs")?,
        max_header_count: count("max_header_count", 1)?.min(settings::MAX_HEADERS_CAP),
        max_header_bytes,
        body_limit_bytes: (body_mb.saturating_mul(1024 * 1024)).min(usize::MAX as u64) as usize,
        graceful_shutdown: Duration::from_secs(grace),
        sse_keep_alive: (keep_alive_ms > 0).then(|| Duration::from_millis(keep_alive_ms)),
        backend_stream_timeout: (stream_timeout_secs > 0).then(|| Duration::from_secs(stream_timeout_secs)),
        listen_backlog: backlog,
        paths,
        exclude_tools_when_tool_choice_none: boolean(p, "exclude_tools_when_tool_choice_none"),
        strip_anthropic_preamble: boolean(p, "strip_anthropic_preamble"),
        reasoning_field: match text(p, "reasoning_field_name") {
            Some("reasoning") => "reasoning",
            _ => "reasoning_content",
        },
        streaming_tool_dispatch: boolean(p, "enable_streaming_tool_dispatch"),
        streaming_reasoning_dispatch: boolean(p, "enable_streaming_reasoning_dispatch"),
        kv_cost: kv_cost(p)?,
        kv_selectors: settings::Selectors::same(settings::CostParams::default()),
        kv_approximate_ttl: if boolean(p, "use_kv_events") { None } else { Some(secs(p, "router_ttl_secs")?) },
        conditional_disagg: None,
        kv_predicted_ttl: float(p, "router_predicted_ttl_secs")
            .filter(|_| text(p, "router_mode") == Some("kv"))
            .map(Duration::from_secs_f64),
        kv_cache_policy: match text(p, "router_approximate_cache_policy") {
            Some("lru") => settings::CachePolicy::Lru,
            _ => settings::CachePolicy::Ttl,
        },
        kv_queue: float(p, "router_queue_threshold").map(|threshold_frac| settings::QueueConfig {
            threshold_frac,
            policy: text(p, "router_queue_policy").and_then(settings::Policy::parse).unwrap_or(settings::Policy::Fcfs),
        }),
        kv_classes: classes::ClassProfiles::default(),
        kv_classifier: None,
        kv_busy: settings::BusyThresholds {
            decode_blocks_frac: float(p, "active_decode_blocks_threshold"),
            prefill_tokens: int(p, "active_prefill_tokens_threshold").map(|n| n.max(0) as u64),
            prefill_frac: float(p, "active_prefill_tokens_threshold_frac"),
        },
        session_affinity: int(p, "session_affinity_ttl_secs").map(|ttl| {
            let mode = match text(p, "session_affinity_mode") {
                Some("soft") => settings::AffinityMode::Soft,
                _ => settings::AffinityMode::Hard,
            };
            (Duration::from_secs(ttl.max(1) as u64), mode)
        }),
        parsed,
    })
}

impl Config {
    /// Approximate mode's TTL and cache policy (`None`: KV events are read).
    pub fn kv_approximate(&self) -> Option<(Duration, settings::CachePolicy)> {
        self.kv_approximate_ttl.map(|ttl| (ttl, self.kv_cache_policy))
    }

    /// The configuration as `--dump-config-to` writes it: every option under `config`,
    /// the `DYN_*`/`SWITCHYARD_*` environment, and the version.
    pub fn dump_json(&self) -> serde_json::Value {
        let mut config = serde_json::Map::new();
        for (f, v, _) in &self.parsed.values {
            if f.kind != flags::Kind::Version && f.kind != flags::Kind::Ignored {
                config.insert(f.dest.to_string(), v.to_json());
            }
        }
        let mut environment = serde_json::Map::new();
        let mut vars: Vec<(String, String)> = std::env::vars()
            .filter(|(k, _)| k.starts_with("DYN_") || k.starts_with("SWITCHYARD_") || k == "ETCD_ENDPOINTS")
            .collect();
        vars.sort();
        for (k, v) in vars {
            environment.insert(k, v.into());
        }
        serde_json::json!({
            "config": config,
            "environment": environment,
            "switchyard_version": env!("CARGO_PKG_VERSION"),
            "system_info": {
                "os": std::env::consts::OS,
                "arch": std::env::consts::ARCH,
                "cpus": std::thread::available_parallelism().map(|n| n.get()).unwrap_or(1),
            },
        })
    }

    /// Write [`Config::dump_json`] to `--dump-config-to`, creating parent directories.
    pub fn write_dump(&self) -> std::io::Result<()> {
        let Some(path) = &self.dump_config_to else { return Ok(()) };
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            std::fs::create_dir_all(parent)?;
        }
        let text = serde_json::to_string_pretty(&self.dump_json()).map_err(std::io::Error::other)?;
        std::fs::write(path, text)
    }

    /// The namespace filter discovery uses: `--namespace-prefix` wins over `--namespace`.
    pub fn namespace_filter(&self) -> NamespaceFilter {
        let p = &self.parsed;
        match (text(p, "namespace_prefix"), text(p, "namespace")) {
            (Some(prefix), _) => NamespaceFilter::Prefix(prefix.to_string()),
            (None, Some(ns)) => NamespaceFilter::Exact(ns.to_string()),
            (None, None) => NamespaceFilter::Any,
        }
    }
}

/// Which namespaces' models are served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NamespaceFilter {
    Any,
    Exact(String),
    Prefix(String),
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run(args: &[&str], env: &[(&str, &str)]) -> Result<Config, ConfigError> {
        let args: Vec<String> = args.iter().map(|s| s.to_string()).collect();
        let env: Vec<(String, String)> = env.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        load(&args, &move |k| env.iter().find(|(n, _)| n == k).map(|(_, v)| v.clone()))
            .map(|(_, c, _)| c.expect("run action"))
    }

    #[test]
    fn defaults() {
        let c = run(&[], &[]).unwrap();
        assert_eq!((c.http_host.as_str(), c.http_port), ("0.0.0.0", 8000));
        assert_eq!(c.metrics_prefix, "dynamo_frontend");
        assert_eq!(c.body_limit_bytes, 45 * 1024 * 1024);
        assert_eq!(c.graceful_shutdown, Duration::from_secs(5));
        assert_eq!(c.paths.health, "/health");
        assert_eq!(c.namespace_filter(), NamespaceFilter::Any);
    }

    #[test]
    fn kserve_grpc_and_h2_windows() {
        let c = run(&[], &[]).unwrap();
        assert!(!c.kserve_grpc);
        assert_eq!(c.grpc_metrics_port, 8788);
        assert_eq!((c.h2.connection_window, c.h2.stream_window), (None, None));
        let env = [
            ("DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE", "16777216"),
            ("DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE", "1048576"),
        ];
        let c = run(&["--kserve-grpc-server", "--grpc-metrics-port", "9001"], &env).unwrap();
        assert!(c.kserve_grpc);
        assert_eq!(c.grpc_metrics_port, 9001);
        assert_eq!((c.h2.connection_window, c.h2.stream_window), (Some(16 << 20), Some(1 << 20)));
        // `-i` wins over `--kserve-grpc-server`, as in 1.6.1 (no listener at all then).
        let c = run(&["--kserve-grpc-server", "-i"], &[]).unwrap();
        assert!(c.interactive && !c.kserve_grpc);
        assert!(run(&[], &[("DYN_INTERACTIVE", "true")]).unwrap().interactive);
        let c = run(&[], &[("DYN_KSERVE_GRPC_SERVER", "true")]).unwrap();
        assert!(c.kserve_grpc);
        assert!(run(&["--grpc-metrics-port", "70000"], &[]).is_err());
    }

    #[test]
    fn tls_pair_and_ca() {
        let e = run(&["--tls-cert-path", "/x"], &[]).unwrap_err();
        assert_eq!(e.message, "--tls-cert-path and --tls-key-path must be provided together");
        let e = run(&["--tls-client-ca-cert-path", "/x"], &[]).unwrap_err();
        assert!(e.message.contains("requires --tls-cert-path"));
    }

    #[test]
    fn the_built_in_prefill_and_decode_selection_only() {
        for flag in ["--router-prefill-policy", "--router-decode-policy"] {
            assert!(run(&[flag, "default"], &[]).is_ok(), "{flag}");
            let e = run(&[flag, "cache-first"], &[]).unwrap_err();
            assert!(e.message.contains(&format!("{flag} cache-first")), "{}", e.message);
        }
    }

    #[test]
    fn conditional_disaggregation_is_checked_in_1_6_1s_order() {
        let c = run(&["--router-mode", "kv", "--router-conditional-disagg"], &[]).unwrap();
        assert_eq!(c.conditional_disagg, Some(cdisagg::ConditionalDisagg::default()));
        assert_eq!(run(&["--router-mode", "kv"], &[]).unwrap().conditional_disagg, None);
        let cfg = "--router-conditional-disagg-config";
        let fails = |args: &[&str], env: &[(&str, &str)]| {
            let e = run(args, env).unwrap_err();
            (e.exit_code, e.message)
        };
        assert_eq!(
            fails(&["--router-mode", "kv", "--router-conditional-disagg", cfg, r#"{"bogus":1}"#], &[]),
            (2, format!("argument {cfg}: {cfg} has unknown field(s): bogus"))
        );
        assert_eq!(
            fails(
                &["--router-mode", "kv", "--router-conditional-disagg"],
                &[("DYN_ROUTER_CONDITIONAL_DISAGG_CONFIG", "{")]
            ),
            (1, format!("{cfg} must be a JSON object"))
        );
        assert_eq!(
            fails(&["--router-mode", "kv", cfg, r#"{"eff_isl_threshold":-1}"#], &[]),
            (1, format!("{cfg} requires --router-conditional-disagg"))
        );
        assert_eq!(
            fails(&["--router-conditional-disagg", cfg, r#"{"eff_isl_threshold":-1}"#], &[]),
            (1, format!("{cfg} eff_isl_threshold must be >= 0"))
        );
        assert_eq!(
            fails(&["--router-mode", "kv", "--router-conditional-disagg", cfg, r#"{"policy":"prefill_load"}"#], &[]),
            (
                1,
                "conditional_disagg policy='prefill_load' needs prefill_busy_threshold, but neither \
                 prefill_busy_threshold nor --router-queue-threshold is set"
                    .into()
            )
        );
        let c = run(
            &[
                "--router-mode",
                "kv",
                "--router-conditional-disagg",
                "--router-queue-threshold",
                "0.5",
                cfg,
                r#"{"policy":"isl_or_load"}"#,
            ],
            &[],
        )
        .unwrap();
        assert_eq!(c.conditional_disagg.unwrap().prefill_busy_threshold, Some(0.5));
        assert_eq!(
            fails(&["--router-conditional-disagg"], &[]),
            (1, "--router-conditional-disagg requires --router-mode=kv".into())
        );
        assert_eq!(
            fails(&["--router-mode", "kv", "--router-conditional-disagg", "--no-router-kv-events"], &[]),
            (1, "--router-conditional-disagg requires --router-kv-events".into())
        );
    }

    #[test]
    fn request_plane_nats() {
        assert_eq!(run(&[], &[]).unwrap().request_plane_nats, None);
        let c = run(&["--request-plane", "nats"], &[]).unwrap();
        assert_eq!(c.request_plane_nats.as_deref(), Some("nats://localhost:4222"));
        let c = run(&[], &[("DYN_REQUEST_PLANE", "nats"), ("NATS_SERVER", "nats://10.0.0.1:4333")]).unwrap();
        assert_eq!(c.request_plane_nats.as_deref(), Some("nats://10.0.0.1:4333"));
        type Case<'a> = (&'a [&'a str], &'a [(&'a str, &'a str)]);
        let refused: [Case<'_>; 3] = [
            (&["--request-plane", "nats"], &[("NATS_SERVER", "tls://127.0.0.1:4443")]),
            (&["--request-plane", "nats", "--nats-tls-ca-cert-path", "/ca.pem"], &[("NATS_SERVER", "nats://h:1")]),
            (&["--request-plane", "nats", "--tcp-tls-cert-path", "/c.pem", "--tcp-tls-key-path", "/k.pem"], &[]),
        ];
        for (args, env) in refused {
            let e = run(args, env).unwrap_err();
            assert!(e.message.starts_with("--request-plane nats with TLS ("), "{args:?}: {}", e.message);
            assert!(e.message.ends_with("is not implemented in this switchyard build"), "{}", e.message);
        }
    }

    #[test]
    fn request_plane_and_nats_tls() {
        let c = run(&[], &[]).unwrap();
        assert_eq!(c.plane_tls, settings::PlaneTlsFiles::default());
        assert!(!c.plane_tls.serves_tls() && !c.plane_tls.dials_tls());
        let c = run(
            &["--tcp-tls-cert-path", "/c.pem", "--tcp-tls-key-path", "/k.pem"],
            &[
                ("DYN_TCP_TLS_CA_CERT_PATH", "/ca.pem"),
                ("DYN_TCP_TLS_SERVER_NAME", "worker.local"),
                ("DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS", "7"),
            ],
        )
        .unwrap();
        let t = &c.plane_tls;
        assert!(t.serves_tls() && t.dials_tls());
        assert_eq!((t.ca.as_deref(), t.server_name.as_deref()), (Some("/ca.pem".as_ref()), Some("worker.local")));
        assert_eq!(t.handshake_timeout, Duration::from_secs(7));
        // Not a whole number of seconds: 1.6.1's default.
        let c = run(&[], &[("DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS", "1.5")]).unwrap();
        assert_eq!(c.plane_tls.handshake_timeout, settings::DEFAULT_TLS_HANDSHAKE_TIMEOUT);
        // 1.6.1's pairs and messages.
        let e = run(&["--tcp-tls-key-path", "/k.pem"], &[]).unwrap_err();
        assert_eq!(
            e.message,
            "both DYN_TCP_TLS_CERT_PATH and DYN_TCP_TLS_KEY_PATH must be set to enable TCP server TLS"
        );
        let e = run(&["--tcp-tls-client-ca-cert-path", "/ca.pem"], &[]).unwrap_err();
        assert!(e.message.starts_with("DYN_TCP_TLS_CLIENT_CA_CERT_PATH requires"), "{}", e.message);
        let e = run(&["--tcp-tls-ca-cert-path", "/ca.pem", "--tcp-tls-client-key-path", "/k.pem"], &[]).unwrap_err();
        assert!(e.message.contains("must be set together to present a client identity"), "{}", e.message);
        let e = run(&[], &[("DYN_TCP_TLS_CLIENT_CERT_PATH", "/c"), ("DYN_TCP_TLS_CLIENT_KEY_PATH", "/k")]).unwrap_err();
        assert!(e.message.starts_with("Request plane TLS is enabled but DYN_TCP_TLS_CA_CERT_PATH"), "{}", e.message);
        run(&[], &[("DYN_TCP_TLS_INSECURE", "yes")]).unwrap();
        // A set that cannot work with peers set up alike is started with 1.6.1's warning.
        let args: Vec<String> = ["--tcp-tls-ca-cert-path", "/ca.pem"].iter().map(|s| s.to_string()).collect();
        let (_, _, w) = load(&args, &|_| None).unwrap();
        assert!(
            w.iter().any(|m| m.contains("server is running in plaintext but client TLS env vars are set")),
            "{w:?}"
        );
        // NATS: checked when the event plane is NATS, with 1.6.1's messages.
        let nats = ["--router-mode", "kv", "--event-plane", "nats"];
        let tls_args = [&nats[..], &["--nats-tls-ca-cert-path", "/ca.pem"]].concat();
        run(&["--nats-tls-ca-cert-path", "/ca.pem"], &[]).unwrap();
        let e = run(&tls_args, &[]).unwrap_err();
        assert!(e.message.ends_with("does not use the 'tls://' scheme: nats://localhost:4222"), "{}", e.message);
        let c = run(&tls_args, &[("NATS_SERVER", "tls://127.0.0.1:4443")]).unwrap();
        assert_eq!(c.nats_tls.ca.as_deref(), Some("/ca.pem".as_ref()));
        let e = run(&[&nats[..], &["--nats-tls-client-cert-path", "/c.pem"]].concat(), &[]).unwrap_err();
        assert_eq!(
            e.message,
            "Both NATS_TLS_CLIENT_CERT_PATH and NATS_TLS_CLIENT_KEY_PATH must be set together to enable NATS mTLS"
        );
        let c = run(&nats, &[("NATS_TLS_INSECURE", "1"), ("NATS_SERVER", "tls://h:1")]).unwrap();
        assert!(c.nats_tls.insecure);
    }

    #[test]
    fn reasoning_field_name() {
        assert_eq!(run(&[], &[]).unwrap().reasoning_field, "reasoning_content");
        assert_eq!(run(&["--reasoning-field-name", "reasoning"], &[]).unwrap().reasoning_field, "reasoning");
        assert_eq!(run(&[], &[("DYN_REASONING_FIELD_NAME", "reasoning")]).unwrap().reasoning_field, "reasoning");
        assert!(run(&["--reasoning-field-name", "thoughts"], &[]).is_err());
    }

    #[test]
    fn model_path_must_be_dir() {
        let e = run(&["--model-path", "/definitely/not/here"], &[]).unwrap_err();
        assert_eq!(e.exit_code, 2);
        assert!(e.message.contains("model-path must be a valid directory on disk"));
    }

    #[test]
    fn unbuilt_options_are_refused_by_name() {
        run(&["--discovery-backend", "file"], &[]).unwrap();
        assert!(run(&["--discovery-backend", "mem"], &[]).is_err());
        run(&["--router-mode", "least-loaded"], &[]).unwrap();
        run(&["--router-mode", "kv"], &[]).unwrap();
        run(&["--router-mode", "kv", "--no-router-kv-events"], &[]).unwrap();
        let c = run(&["--router-mode", "kv", "--no-router-kv-events", "--router-approximate-cache-policy", "lru"], &[])
            .unwrap();
        assert_eq!(c.kv_cache_policy, settings::CachePolicy::Lru);
        let c = run(&["--migration-limit", "3", "--migration-max-seq-len", "4096"], &[]).unwrap();
        assert_eq!((c.migration_limit, c.migration_max_seq_len), (3, Some(4096)));
        let e = run(&[], &[("DYN_HTTP_PRE_COMMIT_ERROR_PEEK_MS", "50")]).unwrap_err();
        assert!(e.message.contains("DYN_HTTP_PRE_COMMIT_ERROR_PEEK_MS"));
        assert_eq!(run(&[], &[("DYN_HTTP_OVERLOAD_STATUS_CODE", "503")]).unwrap().overload_status, 503);
        assert!(run(&[], &[]).unwrap().nvext_enabled);
        assert!(!run(&[], &[("DYN_DISABLE_FRONTEND_NVEXT", "Yes")]).unwrap().nvext_enabled);
        assert!(run(&[], &[("DYN_DISABLE_FRONTEND_NVEXT", "0")]).unwrap().nvext_enabled);
        assert!(run(&[], &[("DYN_HTTP_OVERLOAD_STATUS_CODE", "99")]).is_err());
        assert_eq!(run(&["--router-min-initial-workers", "2"], &[]).unwrap().min_initial_workers, 2);
        let c =
            run(&[], &[("DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS", "100"), ("DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS", "2")])
                .unwrap();
        assert_eq!(
            (c.sse_keep_alive, c.backend_stream_timeout),
            (Some(Duration::from_millis(100)), Some(Duration::from_secs(2)))
        );
        // Defaults given explicitly are fine.
        run(&["--router-mode", "round-robin", "--discovery-backend", "etcd"], &[]).unwrap();
        // The Anthropic routes: off by default; the path variable moves them.
        assert_eq!(run(&[], &[]).unwrap().paths.anthropic, None);
        assert_eq!(run(&["--enable-anthropic-api"], &[]).unwrap().paths.anthropic.as_deref(), Some("/v1/messages"));
        let c =
            run(&[], &[("DYN_ENABLE_ANTHROPIC_API", "1"), ("DYN_HTTP_SVC_ANTHROPIC_PATH", "/a/v1/messages")]).unwrap();
        assert_eq!(c.paths.anthropic.as_deref(), Some("/a/v1/messages"));
        assert!(c.strip_anthropic_preamble);
    }

    #[test]
    fn busy_thresholds_work_in_every_mode_and_the_queue_is_ignored_outside_kv_with_a_warning() {
        for mode in ["round-robin", "random", "least-loaded", "power-of-two"] {
            let c = run(&["--router-mode", mode, "--active-decode-blocks-threshold", "0.5"], &[]).unwrap();
            assert_eq!(c.kv_busy.decode_blocks_frac, Some(0.5));
        }
        let args: Vec<String> =
            ["--router-mode", "random", "--router-queue-threshold", "0.5"].iter().map(|s| s.to_string()).collect();
        let (_, _, warnings) = load(&args, &|_| None).unwrap();
        assert!(warnings.iter().any(|w| w.contains("--router-queue-threshold has no effect outside")), "{warnings:?}");
        let args: Vec<String> =
            ["--router-mode", "kv", "--router-queue-threshold", "0.5"].iter().map(|s| s.to_string()).collect();
        assert!(load(&args, &|_| None).unwrap().2.is_empty());
    }

    #[test]
    fn replica_sync_needs_the_kv_router_and_the_zmq_event_plane() {
        run(&["--router-mode", "kv", "--router-replica-sync"], &[]).unwrap();
        run(&["--router-mode", "kv"], &[("DYN_ROUTER_REPLICA_SYNC", "true")]).unwrap();
        let e = run(&["--router-replica-sync"], &[]).unwrap_err();
        assert!(e.message.contains("--router-replica-sync is implemented for --router-mode kv only"), "{}", e.message);
        let e = run(&["--router-mode", "kv", "--router-replica-sync", "--event-plane", "nats"], &[]).unwrap_err();
        assert!(e.message.contains("--event-plane nats is not implemented"), "{}", e.message);
    }

    #[test]
    fn kv_cost_flags_reach_the_cost_parameters() {
        let c = run(
            &["--router-mode", "kv", "--router-kv-overlap-score-credit", "0.5", "--router-temperature", "0.3"],
            &[("DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT", "2"), ("DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY", "1")],
        )
        .unwrap();
        let k = c.kv_cost;
        assert_eq!((k.overlap_credit, k.temperature, k.decode_active_request_weight), (0.5, 0.3, 2.0));
        assert_eq!((k.overlap_credit_decay, k.prefill_load_scale, k.track_prefill_tokens), (1.0, 1.0, true));
        let c = run(&["--kv-overlap-score-weight", "3", "--no-router-track-prefill-tokens"], &[]).unwrap();
        assert_eq!((c.kv_cost.prefill_load_scale, c.kv_cost.track_prefill_tokens), (3.0, false));
        assert!(c.kv_cost.assume_kv_reuse);
        let c = run(&["--router-mode", "kv", "--no-router-assume-kv-reuse"], &[]).unwrap();
        assert!(!c.kv_cost.assume_kv_reuse);
        let e = run(&["--router-temperature", "-1"], &[]).unwrap_err();
        assert!(e.message.contains("--router-temperature must be"), "{}", e.message);
        // The lower storage tiers' credit, checked in kv mode as 1.6.1 checks it.
        let c = run(
            &["--router-mode", "kv", "--router-host-cache-hit-weight", "0.5"],
            &[("DYN_ROUTER_DISK_CACHE_HIT_WEIGHT", "0")],
        )
        .unwrap();
        assert_eq!((c.kv_cost.host_cache_hit_weight, c.kv_cost.disk_cache_hit_weight), (0.5, 0.0));
        let e = run(&["--router-mode", "kv", "--router-host-cache-hit-weight", "1.5"], &[]).unwrap_err();
        assert_eq!(e.message, "host_cache_hit_weight must be between 0 and 1");
        let e = run(&["--router-mode", "kv", "--router-disk-cache-hit-weight", "-0.1"], &[]).unwrap_err();
        assert_eq!(e.message, "disk_cache_hit_weight must be between 0 and 1");
        // Outside kv mode 1.6.1 never builds the router config: not checked.
        run(&["--router-host-cache-hit-weight", "7"], &[]).unwrap();
    }

    #[test]
    fn ignored_and_deprecated_options_warn() {
        let (_, _, w) = load(&["--admission-control".into(), "none".into()], &|_| None).unwrap();
        assert!(w.iter().any(|m| m.contains("--admission-control")));
    }

    #[test]
    fn env_only_settings_and_paths() {
        let c = run(&[], &[("DYN_HTTP_BODY_LIMIT_MB", "1"), ("DYN_HTTP_SVC_HEALTH_PATH", "/healthz")]).unwrap();
        assert_eq!(c.body_limit_bytes, 1024 * 1024);
        assert_eq!(c.paths.health, "/healthz");
        assert!(run(&[], &[("DYN_HTTP_SVC_LIVE_PATH", "nope")]).is_err());
    }

    #[test]
    fn prefix_wins_over_namespace() {
        let args: Vec<String> = ["--namespace", "a", "--namespace-prefix", "b"].iter().map(|s| s.to_string()).collect();
        let parsed = parse::parse(&args, &|_| None).unwrap();
        let mut w = Vec::new();
        checks::validate_dynamo(&parsed, &mut w).unwrap();
        assert!(w.iter().any(|m| m.contains("--namespace-prefix")));
        let c = typed(parsed, &|_| None).unwrap();
        assert_eq!(c.namespace_filter(), NamespaceFilter::Prefix("b".into()));
    }
}
