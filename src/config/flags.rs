//! The option table: every `python -m dynamo.frontend` 1.6.1 option, then switchyard's own.
//!
//! Each row gives the spellings (positive names, `--no-` negations, aliases), the
//! destination key (Dynamo's argparse `dest`, also the key in `--dump-config-to`), the
//! environment variable, the kind of value, the default and the choices. Parsing, help and the
//! dump are all driven from this table; `tests/flags.rs` checks it against the recorded
//! Dynamo 1.6.1 table row by row.

/// What kind of value an option takes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// `--x` / `--no-x`; env accepts true/1/yes/on (anything else is false).
    Bool,
    /// Free text (including paths).
    Str,
    /// One of `choices`.
    Choice,
    Int,
    Float,
    /// An integer, or null from "" / "None".
    NullableInt,
    /// A float, or null from "" / "None".
    NullableFloat,
    /// Repeatable; every use appends. Env: whitespace-separated.
    List,
    /// `--version`.
    Version,
    /// Accepted for compatibility, validated against `choices`, stored nowhere (Dynamo warns).
    Ignored,
}

/// A default value, as Dynamo's parser has it.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Default {
    None,
    Bool(bool),
    Int(i64),
    Float(f64),
    Str(&'static str),
    EmptyList,
    /// argparse's `SUPPRESS`: the option has no value of its own.
    Suppressed,
}

/// One option.
#[derive(Clone, Copy, Debug)]
pub struct Flag {
    /// Positive spellings; the first long one is the primary name.
    pub names: &'static [&'static str],
    /// `--no-…` spellings of a boolean option.
    pub negations: &'static [&'static str],
    /// Key of the value (Dynamo's argparse `dest`).
    pub dest: &'static str,
    pub env: Option<&'static str>,
    pub kind: Kind,
    pub default: Default,
    pub choices: &'static [&'static str],
    pub help: &'static str,
    /// Dynamo marks it deprecated; still accepted.
    pub deprecated: bool,
    /// switchyard's own option (not in `dynamo.frontend`).
    pub extension: bool,
}

impl Flag {
    /// The first `--long` spelling.
    pub fn primary(&self) -> &'static str {
        self.names.iter().find(|n| n.starts_with("--")).copied().unwrap_or(self.names[0])
    }
    const fn deprecated(mut self) -> Self {
        self.deprecated = true;
        self
    }
    const fn extension(mut self) -> Self {
        self.extension = true;
        self
    }
}

#[allow(clippy::too_many_arguments)]
const fn flag(
    names: &'static [&'static str],
    negations: &'static [&'static str],
    dest: &'static str,
    env: Option<&'static str>,
    kind: Kind,
    default: Default,
    choices: &'static [&'static str],
    help: &'static str,
) -> Flag {
    Flag { names, negations, dest, env, kind, default, choices, help, deprecated: false, extension: false }
}

/// Every option of `python -m dynamo.frontend` 1.6.1, in its parser's order.
#[rustfmt::skip]
pub static DYNAMO_FLAGS: &[Flag] = &[
    flag(&["--version"], &[], "version", None, Kind::Version, Default::Suppressed,
        &[], "Print the version and exit."),
    flag(&["-i", "--interactive"], &["--no-interactive"], "interactive", Some("DYN_INTERACTIVE"), Kind::Bool, Default::Bool(false),
        &[], "Interactive text chat instead of the HTTP server."),
    flag(&["--namespace"], &[], "namespace", Some("DYN_NAMESPACE"), Kind::Str, Default::None,
        &[], "Only serve models registered in this namespace."),
    flag(&["--kv-cache-block-size"], &[], "kv_cache_block_size", Some("DYN_KV_CACHE_BLOCK_SIZE"), Kind::Int, Default::None,
        &[], "KV cache block size in tokens, overriding what workers register."),
    flag(&["--http-host"], &[], "http_host", Some("DYN_HTTP_HOST"), Kind::Str, Default::Str("0.0.0.0"),
        &[], "Address the HTTP server binds to."),
    flag(&["--http-port"], &[], "http_port", Some("DYN_HTTP_PORT"), Kind::Int, Default::Int(8000),
        &[], "Port the HTTP server binds to."),
    flag(&["--serve-indexer"], &["--no-serve-indexer"], "serve_indexer", Some("DYN_SERVE_INDEXER"), Kind::Bool, Default::Bool(false),
        &[], "Answer other routers' kv_indexer_query from this router's KV index, registered under the workers' component (needs --router-mode kv; listens on DYN_TCP_RPC_HOST:DYN_TCP_RPC_PORT)."),
    flag(&["--tls-cert-path"], &[], "tls_cert_path", Some("DYN_TLS_CERT_PATH"), Kind::Str, Default::None,
        &[], "TLS certificate (PEM) for the HTTP server; needs --tls-key-path."),
    flag(&["--tls-key-path"], &[], "tls_key_path", Some("DYN_TLS_KEY_PATH"), Kind::Str, Default::None,
        &[], "TLS private key (PEM) for the HTTP server; needs --tls-cert-path."),
    flag(&["--tls-client-ca-cert-path"], &[], "tls_client_ca_cert_path", Some("DYN_TLS_CLIENT_CA_CERT_PATH"), Kind::Str, Default::None,
        &[], "CA bundle for verifying HTTP client certificates (mTLS)."),
    flag(&["--tcp-tls-cert-path"], &[], "tcp_tls_cert_path", Some("DYN_TCP_TLS_CERT_PATH"), Kind::Str, Default::None,
        &[], "TLS certificate of the TCP request/response planes."),
    flag(&["--tcp-tls-key-path"], &[], "tcp_tls_key_path", Some("DYN_TCP_TLS_KEY_PATH"), Kind::Str, Default::None,
        &[], "TLS private key of the TCP request/response planes."),
    flag(&["--tcp-tls-ca-cert-path"], &[], "tcp_tls_ca_cert_path", Some("DYN_TCP_TLS_CA_CERT_PATH"), Kind::Str, Default::None,
        &[], "CA bundle the TCP planes use to verify peers."),
    flag(&["--tcp-tls-client-cert-path"], &[], "tcp_tls_client_cert_path", Some("DYN_TCP_TLS_CLIENT_CERT_PATH"), Kind::Str, Default::None,
        &[], "Client certificate for the TCP request plane (mTLS)."),
    flag(&["--tcp-tls-client-key-path"], &[], "tcp_tls_client_key_path", Some("DYN_TCP_TLS_CLIENT_KEY_PATH"), Kind::Str, Default::None,
        &[], "Client private key for the TCP request plane (mTLS)."),
    flag(&["--tcp-tls-client-ca-cert-path"], &[], "tcp_tls_client_ca_cert_path", Some("DYN_TCP_TLS_CLIENT_CA_CERT_PATH"), Kind::Str, Default::None,
        &[], "CA bundle for verifying TCP plane client certificates."),
    flag(&["--nats-tls-ca-cert-path"], &[], "nats_tls_ca_cert_path", Some("NATS_TLS_CA_CERT_PATH"), Kind::Str, Default::None,
        &[], "CA bundle for verifying the NATS server."),
    flag(&["--nats-tls-insecure"], &["--no-nats-tls-insecure"], "nats_tls_insecure", Some("NATS_TLS_INSECURE"), Kind::Bool, Default::Bool(false),
        &[], "Skip verification of the NATS server certificate."),
    flag(&["--nats-tls-client-cert-path"], &[], "nats_tls_client_cert_path", Some("NATS_TLS_CLIENT_CERT_PATH"), Kind::Str, Default::None,
        &[], "Client certificate for NATS (mTLS)."),
    flag(&["--nats-tls-client-key-path"], &[], "nats_tls_client_key_path", Some("NATS_TLS_CLIENT_KEY_PATH"), Kind::Str, Default::None,
        &[], "Client private key for NATS (mTLS)."),
    flag(&["--admission-control"], &[], "admission_control", None, Kind::Ignored, Default::Suppressed,
        &["token-capacity", "none"], "Removed in Dynamo; accepted and ignored with a warning.").deprecated(),
    flag(&["--enforce-disagg"], &["--no-enforce-disagg"], "enforce_disagg", Some("DYN_ENFORCE_DISAGG"), Kind::Bool, Default::Bool(false),
        &[], "Deprecated; accepted and ignored with a warning.").deprecated(),
    flag(&["--router-min-initial-workers"], &[], "min_initial_workers", Some("DYN_ROUTER_MIN_INITIAL_WORKERS"), Kind::Int, Default::Int(0),
        &[], "Workers that must be registered before routing starts."),
    flag(&["--router-mode"], &[], "router_mode", Some("DYN_ROUTER_MODE"), Kind::Choice, Default::Str("round-robin"),
        &["round-robin", "random", "power-of-two", "kv", "direct", "least-loaded", "device-aware-weighted"], "How a worker is picked for each request."),
    flag(&["--router-session-affinity-ttl-secs"], &[], "session_affinity_ttl_secs", Some("DYN_ROUTER_SESSION_AFFINITY_TTL_SECS"), Kind::Int, Default::None,
        &[], "Keep a session on its worker while it is used and this many seconds after (1..31536000)."),
    flag(&["--router-session-affinity-mode"], &[], "session_affinity_mode", Some("DYN_ROUTER_SESSION_AFFINITY_MODE"), Kind::Choice, Default::Str("hard"),
        &["hard", "soft"], "Session affinity strictness."),
    flag(&["--active-decode-blocks-threshold"], &[], "active_decode_blocks_threshold", Some("DYN_ACTIVE_DECODE_BLOCKS_THRESHOLD"), Kind::NullableFloat, Default::None,
        &[], "Busy when active decode blocks exceed this fraction of capacity."),
    flag(&["--active-prefill-tokens-threshold"], &[], "active_prefill_tokens_threshold", Some("DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD"), Kind::NullableInt, Default::None,
        &[], "Busy when active prefill tokens exceed this count."),
    flag(&["--active-prefill-tokens-threshold-frac"], &[], "active_prefill_tokens_threshold_frac", Some("DYN_ACTIVE_PREFILL_TOKENS_THRESHOLD_FRAC"), Kind::NullableFloat, Default::None,
        &[], "Busy when active prefill tokens exceed this fraction of max batched tokens."),
    flag(&["--load-aware"], &["--no-load-aware"], "load_aware", Some("DYN_ROUTER_LOAD_AWARE"), Kind::Bool, Default::Bool(false),
        &[], "Deprecated; implies --router-mode kv.").deprecated(),
    flag(&["--router-kv-overlap-score-credit"], &[], "overlap_score_credit", Some("DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT"), Kind::Float, Default::Float(1.0),
        &[], "Credit per cached block in the KV routing cost.").deprecated(),
    flag(&["--router-kv-overlap-score-credit-decay"], &[], "overlap_score_credit_decay", Some("DYN_ROUTER_KV_OVERLAP_SCORE_CREDIT_DECAY"), Kind::Float, Default::Float(0.0),
        &[], "Decay of the cached-block credit along the prompt.").deprecated(),
    flag(&["--router-kv-overlap-score-weight", "--kv-overlap-score-weight"], &[], "overlap_score_weight", None, Kind::Float, Default::None,
        &[], "Deprecated weight of the overlap score.").deprecated(),
    flag(&["--router-prefill-load-scale"], &[], "prefill_load_scale", Some("DYN_ROUTER_PREFILL_LOAD_SCALE"), Kind::Float, Default::Float(1.0),
        &[], "Scale of the prefill load term in the KV routing cost.").deprecated(),
    flag(&["--router-decode-active-request-weight"], &[], "decode_active_request_weight", Some("DYN_ROUTER_DECODE_ACTIVE_REQUEST_WEIGHT"), Kind::Float, Default::Float(0.0),
        &[], "Weight of active decode requests in the KV routing cost.").deprecated(),
    flag(&["--router-host-cache-hit-weight"], &[], "host_cache_hit_weight", Some("DYN_ROUTER_HOST_CACHE_HIT_WEIGHT"), Kind::Float, Default::Float(0.75),
        &[], "Credit for a block cached in host memory, relative to GPU."),
    flag(&["--router-disk-cache-hit-weight"], &[], "disk_cache_hit_weight", Some("DYN_ROUTER_DISK_CACHE_HIT_WEIGHT"), Kind::Float, Default::Float(0.25),
        &[], "Credit for a block cached on disk, relative to GPU."),
    flag(&["--router-temperature"], &[], "router_temperature", Some("DYN_ROUTER_TEMPERATURE"), Kind::Float, Default::Float(0.0),
        &[], "Softmax temperature of KV worker selection (0 = greedy).").deprecated(),
    flag(&["--router-kv-events", "--kv-events"], &["--no-router-kv-events", "--no-kv-events"], "use_kv_events", Some("DYN_ROUTER_USE_KV_EVENTS"), Kind::Bool, Default::Bool(true),
        &[], "Follow workers' KV events (off: approximate the cache from routing decisions)."),
    flag(&["--router-replica-sync"], &["--no-router-replica-sync"], "router_replica_sync", Some("DYN_ROUTER_REPLICA_SYNC"), Kind::Bool, Default::Bool(false),
        &[], "Share active sequences between router replicas."),
    flag(&["--router-track-active-blocks", "--track-active-blocks"], &["--no-router-track-active-blocks", "--no-track-active-blocks"], "router_track_active_blocks", Some("DYN_ROUTER_TRACK_ACTIVE_BLOCKS"), Kind::Bool, Default::Bool(true),
        &[], "KV router: count in-flight requests' blocks in the decode term (off: the decode term is 0; prefill tokens are still tracked)."),
    flag(&["--router-track-output-blocks", "--track-output-blocks"], &["--no-router-track-output-blocks", "--no-track-output-blocks"], "router_track_output_blocks", Some("DYN_ROUTER_TRACK_OUTPUT_BLOCKS"), Kind::Bool, Default::Bool(false),
        &[], "KV router: count an answer's blocks as it grows (one more each time it crosses a block boundary); with nvext.agent_hints.osl they and the prompt's unshared tail weigh 1 - generated/osl."),
    flag(&["--router-assume-kv-reuse", "--assume-kv-reuse"], &["--no-router-assume-kv-reuse", "--no-assume-kv-reuse"], "router_assume_kv_reuse", Some("DYN_ROUTER_ASSUME_KV_REUSE"), Kind::Bool, Default::Bool(true),
        &[], "Assume shared prefixes reuse blocks when counting active blocks."),
    flag(&["--router-track-prefill-tokens"], &["--no-router-track-prefill-tokens"], "router_track_prefill_tokens", Some("DYN_ROUTER_TRACK_PREFILL_TOKENS"), Kind::Bool, Default::Bool(true),
        &[], "Track prefill tokens of in-flight requests per worker."),
    flag(&["--router-tracking-hash"], &[], "router_tracking_hash", Some("DYN_ROUTER_TRACKING_HASH"), Kind::Choice, Default::Str("public-xxh3-v1"),
        &["public-xxh3-v1", "keyed-xxh3-v1"], "Hash used for active-sequence tracking."),
    flag(&["--router-tracking-key-file"], &[], "router_tracking_key_file", Some("DYN_ROUTER_TRACKING_KEY_FILE"), Kind::Str, Default::None,
        &[], "Key file for keyed tracking hashes."),
    flag(&["--router-tracking-key-id"], &[], "router_tracking_key_id", Some("DYN_ROUTER_TRACKING_KEY_ID"), Kind::Str, Default::None,
        &[], "Key id for keyed tracking hashes."),
    flag(&["--router-prefill-load-model"], &[], "router_prefill_load_model", Some("DYN_ROUTER_PREFILL_LOAD_MODEL"), Kind::Choice, Default::Str("none"),
        &["none", "ais"], "Model of prefill load used in the KV routing cost."),
    flag(&["--router-ttl-secs"], &[], "router_ttl_secs", Some("DYN_ROUTER_TTL_SECS"), Kind::Float, Default::Float(120.0),
        &[], "Lifetime of approximate cache entries without KV events."),
    flag(&["--router-approximate-cache-policy"], &[], "router_approximate_cache_policy", Some("DYN_ROUTER_APPROXIMATE_CACHE_POLICY"), Kind::Choice, Default::Str("ttl"),
        &["ttl", "lru"], "Eviction policy of the approximate cache without KV events."),
    flag(&["--router-queue-threshold"], &[], "router_queue_threshold", Some("DYN_ROUTER_QUEUE_THRESHOLD"), Kind::NullableFloat, Default::None,
        &[], "Queue requests when every worker is above this load.").deprecated(),
    flag(&["--router-policy-config"], &[], "router_policy_config", Some("DYN_ROUTER_POLICY_CONFIG"), Kind::Str, Default::None,
        &[], "YAML file: `router:` settings (they win over options); policy classes of the kv router queue (root profile and per-model profiles: classes by x-dynamo-meta-policy-class and uncached prompt length, fcfs/wspt, deficit round robin, per-worker queue limits answered 529); `worker_selection` instances (dynamo-default-cost-fn, dynamo-two-tier-cost-fn, thunderagent) for the aggregated, prefill and decode pools; `request_classifier: {type: thunderagent}` (session-aware admission: one turn per session at a time, programs kept on their worker, paused and resumed by KV capacity). Refused by name: encode selections (no encode workers are routed)."),
    flag(&["--router-conditional-disagg"], &["--no-router-conditional-disagg"], "conditional_disagg_enabled", Some("DYN_ROUTER_CONDITIONAL_DISAGG"), Kind::Bool, Default::Bool(false),
        &[], "Decide per request between aggregated and disaggregated serving."),
    flag(&["--router-conditional-disagg-config"], &[], "conditional_disagg_config", Some("DYN_ROUTER_CONDITIONAL_DISAGG_CONFIG"), Kind::Str, Default::None,
        &[], "Configuration of conditional disaggregation (JSON)."),
    flag(&["--router-prefill-policy"], &[], "router_prefill_policy", Some("DYN_ROUTER_PREFILL_POLICY"), Kind::Str, Default::None,
        &[], "Deprecated: the prefill pool's worker selection (kv mode): `default` or a worker_selection instance of --router-policy-config.").deprecated(),
    flag(&["--router-decode-policy"], &[], "router_decode_policy", Some("DYN_ROUTER_DECODE_POLICY"), Kind::Str, Default::None,
        &[], "Deprecated: the decode pool's worker selection (kv mode): `default` or a worker_selection instance of --router-policy-config.").deprecated(),
    flag(&["--router-event-threads"], &[], "router_event_threads", Some("DYN_ROUTER_EVENT_THREADS"), Kind::Int, Default::Int(4),
        &[], "KV router: threads that apply KV events to the index (at least 1). No effect on routing, as in 1.6.1; switchyard applies events on one ingest thread and in every shard's replica, whatever the value."),
    flag(&["--router-queue-policy"], &[], "router_queue_policy", Some("DYN_ROUTER_QUEUE_POLICY"), Kind::Choice, Default::Str("fcfs"),
        &["fcfs", "wspt"], "Order of the router queue.").deprecated(),
    flag(&["--use-remote-indexer"], &["--no-use-remote-indexer"], "use_remote_indexer", Some("DYN_USE_REMOTE_INDEXER"), Kind::Bool, Default::Bool(false),
        &[], "KV router: ask a served indexer (--serve-indexer) under the workers' component for each prompt's matches instead of following KV events."),
    flag(&["--enable-session-prefix-index"], &["--no-enable-session-prefix-index"], "enable_session_prefix_index", Some("DYN_ENABLE_SESSION_PREFIX_INDEX"), Kind::Bool, Default::Bool(false),
        &[], "Index session prefixes for affinity."),
    flag(&["--shared-cache-multiplier"], &[], "shared_cache_multiplier", Some("DYN_SHARED_CACHE_MULTIPLIER"), Kind::Float, Default::None,
        &[], "Deprecated: shared cache credit multiplier.").deprecated(),
    flag(&["--shared-cache-type"], &[], "shared_cache_type", Some("DYN_SHARED_CACHE_TYPE"), Kind::Choice, Default::Str("none"),
        &["none", "hicache"], "Kind of shared KV cache between workers."),
    flag(&["--router-predicted-ttl-secs"], &[], "router_predicted_ttl_secs", Some("DYN_ROUTER_PREDICTED_TTL_SECS"), Kind::Float, Default::None,
        &[], "KV router: predict-on-route; each routing decision's blocks count as cached on the chosen worker for this many seconds, merged (per worker, the larger overlap) with what its KV events say. Needs KV events; unset: off."),
    flag(&["--ais-perf-config"], &[], "ais_perf_config", None, Kind::Str, Default::None,
        &[], "Performance model configuration for --router-prefill-load-model ais."),
    flag(&["--ais-backend", "--aic-backend"], &[], "ais_backend", None, Kind::Str, Default::None,
        &[], "Performance model: backend."),
    flag(&["--ais-system", "--aic-system"], &[], "ais_system", None, Kind::Str, Default::None,
        &[], "Performance model: system."),
    flag(&["--ais-backend-version", "--aic-backend-version"], &[], "ais_backend_version", None, Kind::Str, Default::None,
        &[], "Performance model: backend version."),
    flag(&["--ais-tp-size", "--aic-tp-size"], &[], "ais_tp_size", None, Kind::Int, Default::None,
        &[], "Performance model: tensor parallel size."),
    flag(&["--ais-model-path", "--aic-model-path"], &[], "ais_model_path", None, Kind::Str, Default::None,
        &[], "Performance model: model path."),
    flag(&["--ais-moe-tp-size", "--aic-moe-tp-size"], &[], "ais_moe_tp_size", None, Kind::Int, Default::None,
        &[], "Performance model: MoE tensor parallel size."),
    flag(&["--ais-moe-ep-size", "--aic-moe-ep-size"], &[], "ais_moe_ep_size", None, Kind::Int, Default::None,
        &[], "Performance model: MoE expert parallel size."),
    flag(&["--ais-attention-dp-size", "--aic-attention-dp-size"], &[], "ais_attention_dp_size", None, Kind::Int, Default::None,
        &[], "Performance model: attention data parallel size."),
    flag(&["--ais-nextn", "--aic-nextn"], &[], "ais_nextn", None, Kind::Int, Default::None,
        &[], "Performance model: speculative next-n."),
    flag(&["--ais-nextn-accept-rates", "--aic-nextn-accept-rates"], &[], "ais_nextn_accept_rates", None, Kind::Str, Default::None,
        &[], "Performance model: next-n accept rates."),
    flag(&["--ais-mtp-seed", "--aic-mtp-seed"], &[], "ais_mtp_seed", None, Kind::Int, Default::Int(42),
        &[], "Performance model: MTP seed."),
    flag(&["--namespace-prefix"], &[], "namespace_prefix", Some("DYN_NAMESPACE_PREFIX"), Kind::Str, Default::None,
        &[], "Only serve models whose namespace starts with this (wins over --namespace)."),
    flag(&["--migration-limit"], &[], "migration_limit", Some("DYN_MIGRATION_LIMIT"), Kind::Int, Default::Int(0),
        &[], "Times a request may move to another worker after a failure (0 = never)."),
    flag(&["--migration-max-seq-len"], &[], "migration_max_seq_len", Some("DYN_MIGRATION_MAX_SEQ_LEN"), Kind::Int, Default::None,
        &[], "Longest prompt+output that may still migrate."),
    flag(&["--model-name"], &[], "model_name", Some("DYN_MODEL_NAME"), Kind::Str, Default::None,
        &[], "Serve the model under this name."),
    flag(&["--model-path"], &[], "model_path", Some("DYN_MODEL_PATH"), Kind::Str, Default::None,
        &[], "Local model directory (config.json, tokenizer files)."),
    flag(&["--metrics-prefix"], &[], "metrics_prefix", Some("DYN_METRICS_PREFIX"), Kind::Str, Default::None,
        &[], "Prefix of metric names (default dynamo_frontend)."),
    flag(&["--kserve-grpc-server"], &["--no-kserve-grpc-server"], "kserve_grpc_server", Some("DYN_KSERVE_GRPC_SERVER"), Kind::Bool, Default::Bool(false),
        &[], "Serve the KServe v2 gRPC API."),
    flag(&["--grpc-metrics-port"], &[], "grpc_metrics_port", Some("DYN_GRPC_METRICS_PORT"), Kind::Int, Default::Int(8788),
        &[], "Metrics/health port when the KServe gRPC server is on."),
    flag(&["--dump-config-to"], &[], "dump_config_to", Some("DYN_DUMP_CONFIG_TO"), Kind::Str, Default::None,
        &[], "Write the resolved configuration as JSON to this file."),
    flag(&["--frontend-route-extension"], &[], "frontend_route_extensions", Some("DYN_FRONTEND_ROUTE_EXTENSIONS"), Kind::List, Default::EmptyList,
        &[], "Extra HTTP routes provided by Python modules (repeatable)."),
    flag(&["--discovery-backend"], &[], "discovery_backend", Some("DYN_DISCOVERY_BACKEND"), Kind::Choice, Default::Str("etcd"),
        &["kubernetes", "etcd", "file", "mem"], "Where workers and models are discovered."),
    flag(&["--request-plane"], &[], "request_plane", Some("DYN_REQUEST_PLANE"), Kind::Choice, Default::Str("tcp"),
        &["nats", "tcp"], "Transport for requests to workers."),
    flag(&["--response-plane"], &[], "response_plane", Some("DYN_RESPONSE_PLANE"), Kind::Choice, Default::Str("tcp"),
        &["tcp", "quic"], "Transport for responses from workers."),
    flag(&["--event-plane"], &[], "event_plane", Some("DYN_EVENT_PLANE"), Kind::Choice, Default::None,
        &["nats", "zmq"], "Transport for KV events (default: zmq for tcp, nats for nats)."),
    flag(&["--enable-anthropic-api"], &["--no-enable-anthropic-api"], "enable_anthropic_api", Some("DYN_ENABLE_ANTHROPIC_API"), Kind::Bool, Default::Bool(false),
        &[], "Serve the Anthropic Messages API at /v1/messages."),
    flag(&["--strip-anthropic-preamble"], &["--no-strip-anthropic-preamble"], "strip_anthropic_preamble", Some("DYN_STRIP_ANTHROPIC_PREAMBLE"), Kind::Bool, Default::Bool(true),
        &[], "Strip the Claude Code preamble from Anthropic system prompts."),
    flag(&["--enable-streaming-tool-dispatch"], &["--no-enable-streaming-tool-dispatch"], "enable_streaming_tool_dispatch", Some("DYN_ENABLE_STREAMING_TOOL_DISPATCH"), Kind::Bool, Default::Bool(false),
        &[], "Stream tool calls as they are parsed."),
    flag(&["--enable-streaming-reasoning-dispatch"], &["--no-enable-streaming-reasoning-dispatch"], "enable_streaming_reasoning_dispatch", Some("DYN_ENABLE_STREAMING_REASONING_DISPATCH"), Kind::Bool, Default::Bool(false),
        &[], "Stream reasoning content as it is parsed."),
    flag(&["--reasoning-field-name"], &[], "reasoning_field_name", Some("DYN_REASONING_FIELD_NAME"), Kind::Choice, Default::Str("reasoning_content"),
        &["reasoning_content", "reasoning"], "Name of the reasoning field in responses."),
    flag(&["--exclude-tools-when-tool-choice-none"], &["--no-exclude-tools-when-tool-choice-none"], "exclude_tools_when_tool_choice_none", Some("DYN_EXCLUDE_TOOLS_WHEN_TOOL_CHOICE_NONE"), Kind::Bool, Default::Bool(true),
        &[], "Leave tools out of the prompt when tool_choice is none."),
    flag(&["--dyn-chat-processor"], &[], "chat_processor", Some("DYN_CHAT_PROCESSOR"), Kind::Choice, Default::Str("dynamo"),
        &["dynamo", "vllm", "sglang"], "Which preprocessor renders and tokenizes chat requests."),
    flag(&["--dyn-debug-perf"], &["--no-dyn-debug-perf"], "debug_perf", Some("DYN_DEBUG_PERF"), Kind::Bool, Default::Bool(false),
        &[], "Log per-stage timings."),
    flag(&["--dyn-preprocess-workers"], &[], "preprocess_workers", Some("DYN_PREPROCESS_WORKERS"), Kind::Int, Default::Int(0),
        &[], "Extra preprocessing worker processes (0 = in-process)."),
    flag(&["--tokenizer"], &[], "tokenizer_backend", Some("DYN_TOKENIZER"), Kind::Choice, Default::Str("default"),
        &["default", "fastokens", "basetenkenizer"], "Tokenizer implementation."),
    flag(&["--tokenizer-fallback"], &["--no-tokenizer-fallback"], "tokenizer_fallback", Some("DYN_TOKENIZER_FALLBACK"), Kind::Bool, Default::Bool(true),
        &[], "Fall back to the default tokenizer when another fails to load."),
    flag(&["--trust-remote-code"], &["--no-trust-remote-code"], "trust_remote_code", Some("DYN_TRUST_REMOTE_CODE"), Kind::Bool, Default::Bool(false),
        &[], "Allow model repositories to run their own code."),
];

/// switchyard's own options (marked as extensions in `--help`; `SWITCHYARD_*` env vars).
#[rustfmt::skip]
pub static EXTENSION_FLAGS: &[Flag] = &[
    flag(&["--shards"], &[], "shards", Some("SWITCHYARD_SHARDS"), Kind::Int, Default::Int(0),
        &[], "Shard threads, one per core (0 = one per CPU in the process's affinity mask).").extension(),
    flag(&["--pin-shards"], &["--no-pin-shards"], "pin_shards", Some("SWITCHYARD_PIN_SHARDS"), Kind::Bool, Default::Bool(true),
        &[], "Pin each shard thread to its own CPU.").extension(),
    flag(&["--io-driver"], &[], "io_driver", Some("SWITCHYARD_IO_DRIVER"), Kind::Choice, Default::Str("auto"),
        &["auto", "io-uring", "epoll"], "Shard I/O driver (auto: io_uring, else epoll).").extension(),
    flag(&["--header-read-timeout-secs"], &[], "header_read_timeout_secs", Some("SWITCHYARD_HEADER_READ_TIMEOUT_SECS"), Kind::Float, Default::Float(30.0),
        &[], "Close with 408 when a request head is not complete this long after its first byte.").extension(),
    flag(&["--idle-timeout-secs"], &[], "idle_timeout_secs", Some("SWITCHYARD_IDLE_TIMEOUT_SECS"), Kind::Float, Default::Float(300.0),
        &[], "Close a keep-alive connection idle this long.").extension(),
    flag(&["--max-header-count"], &[], "max_header_count", Some("SWITCHYARD_MAX_HEADER_COUNT"), Kind::Int, Default::Int(100),
        &[], "Most header fields per request (more: 431).").extension(),
    flag(&["--max-header-bytes"], &[], "max_header_bytes", Some("SWITCHYARD_MAX_HEADER_BYTES"), Kind::Int, Default::Int(65536),
        &[], "Most bytes of request line and headers (more: 431).").extension(),
    flag(&["--max-connections-per-shard"], &[], "max_connections_per_shard", Some("SWITCHYARD_MAX_CONNECTIONS_PER_SHARD"), Kind::Int, Default::Int(32768),
        &[], "Most open client connections per shard; a connection beyond it is closed at once (counted in /metrics).").extension(),
    flag(&["--h2-max-concurrent-streams"], &[], "h2_max_concurrent_streams", Some("SWITCHYARD_H2_MAX_CONCURRENT_STREAMS"), Kind::Int, Default::Int(256),
        &[], "HTTP/2: most streams a client may have open on one connection (SETTINGS_MAX_CONCURRENT_STREAMS).").extension(),
    flag(&["--h2-max-pending-resets"], &[], "h2_max_pending_resets", Some("SWITCHYARD_H2_MAX_PENDING_RESETS"), Kind::Int, Default::Int(20),
        &[], "HTTP/2: streams a client may open and reset before they are served; beyond it the connection ends with GOAWAY ENHANCE_YOUR_CALM (rapid reset, CVE-2023-44487).").extension(),
    flag(&["--worker-callback-timeout-secs"], &[], "worker_callback_timeout_secs", Some("SWITCHYARD_WORKER_CALLBACK_TIMEOUT_SECS"), Kind::Float, Default::Float(30.0),
        &[], "How long a worker that acknowledged a request may take to call back before the request is tried on another worker or answered 503 (Dynamo waits without end; 0: so do we). Counted in /metrics.").extension(),
    flag(&["--max-output-tokens"], &[], "max_output_tokens", Some("SWITCHYARD_MAX_OUTPUT_TOKENS"), Kind::Int, Default::Int(0),
        &[], "Most tokens one answer may carry (0: no cap): a request asking for more, or naming no max_tokens, is sent with this max_tokens and its answer ends there (finish_reason length). Counted in /metrics.").extension(),
    flag(&["--embedded-workers"], &[], "embedded_workers", Some("SWITCHYARD_EMBEDDED_WORKERS"), Kind::Int, Default::Int(2),
        &[], "With --discovery-backend mem: in-process mock workers to start.").extension(),
    flag(&["--embedded-model-path"], &[], "embedded_model_path", Some("SWITCHYARD_EMBEDDED_MODEL_PATH"), Kind::Str, Default::None,
        &[], "With --discovery-backend mem: model directory the in-process workers serve (named after it).").extension(),
    flag(&["--embedded-fast"], &["--no-embedded-fast"], "embedded_fast", Some("SWITCHYARD_EMBEDDED_FAST"), Kind::Bool, Default::Bool(false),
        &[], "With --discovery-backend mem: the in-process workers answer with no artificial delay (for benchmarks).").extension(),
    flag(&["--api-keys-file"], &[], "api_keys_file", Some("SWITCHYARD_API_KEYS"), Kind::Str, Default::None,
        &[], "API keys the inference routes require (Authorization: Bearer or x-api-key), one per line: LABEL KEY [requests_per_minute=N] [tokens_per_minute=N]. Off when unset.").extension(),
    flag(&["--router-tie-break"], &[], "router_tie_break", Some("SWITCHYARD_ROUTER_TIE_BREAK"), Kind::Choice, Default::Str("room"),
        &["room", "random"], "Kv router: among equally cheap workers, the one with the fewest cached blocks (room) or any (random, as Dynamo).").extension(),
];

/// Settings Dynamo 1.6.1 reads from the environment only (no flag), and their defaults.
pub static DYNAMO_ENV_SETTINGS: &[(&str, &str, &str)] = &[
    ("DYN_HTTP_BODY_LIMIT_MB", "45", "Largest request body in MiB (more: 413)."),
    (
        "DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS",
        "5",
        "Grace period for in-flight requests on SIGTERM/SIGINT; then answers still being made end cleanly.",
    ),
    ("DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS", "0", "An SSE comment after this long without an event (0: none)."),
    ("DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS", "0", "Longest wait for a worker's next item; then 504 (0: no limit)."),
    ("DYN_HTTP_OVERLOAD_STATUS_CODE", "529", "HTTP status of an overload refusal."),
    ("DYN_HTTP_LISTEN_BACKLOG", "1024", "listen(2) backlog of each shard's HTTP socket."),
];

/// Every option: Dynamo's, then switchyard's.
pub fn all() -> impl Iterator<Item = &'static Flag> {
    DYNAMO_FLAGS.iter().chain(EXTENSION_FLAGS.iter())
}

/// The option whose value is stored under `dest`.
pub fn by_dest(dest: &str) -> Option<&'static Flag> {
    all().find(|f| f.dest == dest)
}
