//! The start-up checks: the validations `dynamo.frontend` 1.6.1 makes (with its messages)
//! and the refusal of options and variables whose behaviour switchyard does not have yet
//! (a flag accepted but not built stops start-up, naming it).

use super::parse::{Parsed, Value};
use super::{boolean, float, int, invalid, text, ConfigError, UNBUILT_ENV_VARS};

/// Options whose every value switchyard implements. Any other option must stay at its
/// default, or start-up stops with a message naming it.
const IMPLEMENTED: &[&str] = &[
    "version",
    // Where card files missing on this host are looked for (discovery::cardfiles); the name
    // changes nothing served, as in 1.6.1.
    "model_path",
    "model_name",
    "http_host",
    "http_port",
    "metrics_prefix",
    "dump_config_to",
    // Discovery filters (every backend applies them to the records it reads).
    "namespace",
    "namespace_prefix",
    // Dynamo ignores these two with a warning; so do we.
    "admission_control",
    "enforce_disagg",
    "session_affinity_ttl_secs",
    "session_affinity_mode",
    // switchyard's own.
    "shards",
    "pin_shards",
    "api_keys_file",
    "max_connections_per_shard",
    "worker_callback_timeout_secs",
    "max_output_tokens",
    "h2_max_concurrent_streams",
    "h2_max_pending_resets",
    "io_driver",
    "header_read_timeout_secs",
    "idle_timeout_secs",
    "max_header_count",
    "max_header_bytes",
    "embedded_workers",
    "embedded_model_path",
    "embedded_fast",
    "exclude_tools_when_tool_choice_none",
    "enable_anthropic_api",
    "strip_anthropic_preamble",
    "reasoning_field_name",
    "enable_streaming_tool_dispatch",
    "enable_streaming_reasoning_dispatch",
    // HTTPS (rustls on every shard; certificates reloaded on change or SIGHUP).
    "tls_cert_path",
    "tls_key_path",
    "tls_client_ca_cert_path",
    // The kv router's cost (docs/dynamo/kv-routing.md §7.2, §7.4).
    "overlap_score_credit",
    "overlap_score_credit_decay",
    "overlap_score_weight",
    "prefill_load_scale",
    "decode_active_request_weight",
    "router_temperature",
    "router_track_prefill_tokens",
    "router_assume_kv_reuse",
    "router_tie_break",
    // Approximate mode (`--no-router-kv-events`, TTL policy).
    "use_kv_events",
    "router_ttl_secs",
    "router_approximate_cache_policy",
    // The router queue (kv mode only; checked in `validate`).
    "router_queue_threshold",
    "router_queue_policy",
    // Replica sync (kv mode, ZMQ event plane; checked in `validate`).
    "router_replica_sync",
    "serve_indexer",
    "router_track_active_blocks",
    "router_track_output_blocks",
    "router_event_threads",
    "router_predicted_ttl_secs",
    "use_remote_indexer",
    // Read and applied before validation (`policy`).
    "router_policy_config",
    // Conditional disaggregation (`cdisagg`, `infer::disagg`).
    "conditional_disagg_enabled",
    "conditional_disagg_config",
    // The lower storage tiers' credit (`router::kv::tier`; checked in `validate`).
    "host_cache_hit_weight",
    "disk_cache_hit_weight",
    // Busy detection (kv mode only; checked in `validate`).
    "active_decode_blocks_threshold",
    "active_prefill_tokens_threshold",
    "active_prefill_tokens_threshold_frac",
    // Models served once this many workers are up (`control`).
    "min_initial_workers",
    // Request migration (`infer::migrate`).
    "migration_limit",
    "migration_max_seq_len",
    // Text chat in the terminal (`interactive`), no HTTP listener.
    "interactive",
    // KServe gRPC on --http-port beside the OpenAI routes; ops routes also on the metrics port.
    "kserve_grpc_server",
    "grpc_metrics_port",
    // TLS of the TCP request plane and its call-back listener (`transport`, `tls::plane`).
    "tcp_tls_cert_path",
    "tcp_tls_key_path",
    "tcp_tls_ca_cert_path",
    "tcp_tls_client_cert_path",
    "tcp_tls_client_key_path",
    "tcp_tls_client_ca_cert_path",
    // TLS of the NATS event plane (`ingest::nats`).
    "nats_tls_ca_cert_path",
    "nats_tls_insecure",
    "nats_tls_client_cert_path",
    "nats_tls_client_key_path",
    // Prompts encoded by another library, checked against the default at load (`tokenize::backend`).
    "tokenizer_backend",
    "tokenizer_fallback",
];

/// Options of which some values are implemented (the default always is).
fn value_supported(dest: &str, v: &Value) -> bool {
    match (dest, v) {
        ("discovery_backend", Value::Str(s)) => ["file", "mem", "etcd", "kubernetes"].contains(&s.as_str()),
        ("router_mode", Value::Str(s)) => super::settings::RouterMode::parse(s).is_some(),
        // The event plane carries KV events, which only the kv router reads: with the other
        // router modes Dynamo's frontend does not use it either.
        ("event_plane", Value::Str(s)) => s == "zmq" || s == "nats",
        // The NATS request plane: requests published to workers' subjects (`transport::nats`).
        ("request_plane", Value::Str(s)) => s == "tcp" || s == "nats",
        // The prefill and decode pools' worker selection: `default` or an instance of
        // --router-policy-config (resolved, and refused outside kv mode, by `policy::selectors`).
        ("router_prefill_policy" | "router_decode_policy", Value::Str(_)) => true,
        _ => false,
    }
}

/// The checks `dynamo.frontend` 1.6.1 makes before it starts, with its messages.
pub(super) fn validate_dynamo(p: &Parsed, warnings: &mut Vec<String>) -> Result<(), ConfigError> {
    const U32_MAX: i64 = u32::MAX as i64;
    if let Value::Str(name) = p.get("model_name") {
        if name.trim().is_empty() {
            return Err(ConfigError {
                message: format!("argument --model-name: model-name must be a non-empty string, got: {name}"),
                exit_code: 2,
            });
        }
    }
    if let Some(path) = text(p, "model_path") {
        if !std::path::Path::new(path).is_dir() {
            return Err(ConfigError {
                message: format!("argument --model-path: model-path must be a valid directory on disk, got: {path}"),
                exit_code: 2,
            });
        }
        // 1.6.1 loads the directory as a model (its config.json first) before it starts.
        if !std::path::Path::new(path).join("config.json").is_file() {
            return Err(invalid(format!("unable to extract config.json from directory {path}")));
        }
    }
    let cert = text(p, "tls_cert_path").is_some();
    let key = text(p, "tls_key_path").is_some();
    if cert ^ key {
        return Err(invalid("--tls-cert-path and --tls-key-path must be provided together"));
    }
    if text(p, "tls_client_ca_cert_path").is_some() && !(cert && key) {
        return Err(invalid("--tls-client-ca-cert-path requires --tls-cert-path and --tls-key-path"));
    }
    let has_ext = matches!(p.get("frontend_route_extensions"), Value::List(l) if !l.is_empty());
    if has_ext && (boolean(p, "interactive") || boolean(p, "kserve_grpc_server")) {
        let mode = if boolean(p, "interactive") { "--interactive" } else { "--kserve-grpc-server" };
        return Err(invalid(format!(
            "--frontend-route-extension is only supported by the HTTP frontend, so it cannot be combined with {mode}"
        )));
    }
    let migration = int(p, "migration_limit").unwrap_or(0);
    if !(0..=U32_MAX).contains(&migration) {
        return Err(invalid(format!("--migration-limit must be between 0 and {U32_MAX} (0=disabled)")));
    }
    if let Some(n) = int(p, "migration_max_seq_len") {
        if !(1..=U32_MAX).contains(&n) {
            return Err(invalid(format!("--migration-max-seq-len must be between 1 and {U32_MAX}")));
        }
    }
    if int(p, "min_initial_workers").unwrap_or(0) < 0 {
        return Err(invalid("--router-min-initial-workers must be >= 0"));
    }
    if let Some(ttl) = int(p, "session_affinity_ttl_secs") {
        if !(1..=31_536_000).contains(&ttl) {
            return Err(invalid("--router-session-affinity-ttl-secs must be between 1 and 31536000"));
        }
    }
    let kv_mode = text(p, "router_mode") == Some("kv") || boolean(p, "load_aware");
    let ais = text(p, "router_prefill_load_model") == Some("ais");
    if text(p, "ais_perf_config").is_some() && !ais {
        return Err(invalid("--ais-perf-config requires --router-prefill-load-model=ais"));
    }
    if ais {
        if !kv_mode {
            return Err(invalid("--router-prefill-load-model=ais requires --router-mode=kv"));
        }
        if text(p, "chat_processor") != Some("dynamo") {
            return Err(invalid("--router-prefill-load-model=ais currently requires --dyn-chat-processor=dynamo"));
        }
        if !boolean(p, "router_track_prefill_tokens") {
            return Err(invalid("--router-prefill-load-model=ais requires --router-track-prefill-tokens"));
        }
    }
    if boolean(p, "serve_indexer") {
        if !kv_mode {
            return Err(invalid("--serve-indexer requires --router-mode=kv"));
        }
        if boolean(p, "use_remote_indexer") {
            return Err(invalid("--serve-indexer and --use-remote-indexer are mutually exclusive"));
        }
    }
    // --router-conditional-disagg and its config: `cdisagg`.
    if let Some(t) = float(p, "active_decode_blocks_threshold") {
        if !(t.is_finite() && (0.0..=1.0).contains(&t)) {
            return Err(invalid("--active-decode-blocks-threshold must be between 0.0 and 1.0"));
        }
    }
    if int(p, "active_prefill_tokens_threshold").is_some_and(|t| t < 0) {
        return Err(invalid("--active-prefill-tokens-threshold must be >= 0"));
    }
    if let Some(t) = float(p, "router_queue_threshold") {
        if !(t.is_finite() && t >= 0.0) {
            return Err(invalid("--router-queue-threshold must be a finite value >= 0"));
        }
    }
    if let Some(t) = float(p, "active_prefill_tokens_threshold_frac") {
        if !(t.is_finite() && t >= 0.0) {
            return Err(invalid("--active-prefill-tokens-threshold-frac must be a finite value >= 0"));
        }
    }
    // Busy thresholds work in every mode (outside kv from the workers' own load reports);
    // the router queue is the kv router's, and 1.6.1 ignores it in the other modes.
    if *p.get("router_queue_threshold") != Value::Null && text(p, "router_mode") != Some("kv") {
        warnings.push("--router-queue-threshold has no effect outside --router-mode kv (as in Dynamo 1.6.1)".into());
    }
    // 1.6.1 checks the kv router's settings in kv mode only (elsewhere they go unread).
    if text(p, "router_mode") == Some("kv") {
        if boolean(p, "router_track_output_blocks") && !boolean(p, "router_track_active_blocks") {
            return Err(invalid("router_track_output_blocks requires router_track_active_blocks=true"));
        }
        if int(p, "router_event_threads").is_some_and(|n| n < 1) {
            return Err(invalid("router_event_threads must be at least 1"));
        }
        for (dest, name) in [("host_cache_hit_weight", "host"), ("disk_cache_hit_weight", "disk")] {
            if float(p, dest).is_some_and(|w| !(0.0..=1.0).contains(&w)) {
                return Err(invalid(format!("{name}_cache_hit_weight must be between 0 and 1")));
            }
        }
        if let Some(ttl) = float(p, "router_predicted_ttl_secs") {
            if !boolean(p, "use_kv_events") {
                return Err(invalid("router_predicted_ttl_secs requires use_kv_events=true"));
            }
            if !(ttl >= 0.0 && ttl.is_finite()) {
                return Err(invalid("router_predicted_ttl_secs must be greater than or equal to 0"));
            }
        }
    }
    // The served indexer and its consumers (`indexer`, `infer::remote_index`): event-driven
    // mode over the TCP request plane.
    if boolean(p, "serve_indexer") || boolean(p, "use_remote_indexer") {
        let which = if boolean(p, "serve_indexer") { "--serve-indexer" } else { "--use-remote-indexer" };
        if !boolean(p, "use_kv_events") && text(p, "router_mode") == Some("kv") {
            return Err(invalid(format!(
                "{which} with --no-router-kv-events (1.6.1's approximate served indexer and its \
                 kv_indexer_record_routing_decision endpoint) is not implemented in this switchyard build"
            )));
        }
        if boolean(p, "serve_indexer") && text(p, "request_plane") == Some("nats") {
            return Err(invalid(
                "--serve-indexer with --request-plane nats is not implemented in this switchyard build \
                 (the served indexer listens on the TCP request plane only)",
            ));
        }
        if boolean(p, "use_remote_indexer") && text(p, "router_mode") != Some("kv") {
            warnings.push("--use-remote-indexer has no effect outside --router-mode kv (as in Dynamo 1.6.1)".into());
        }
    }
    if boolean(p, "router_replica_sync") {
        if text(p, "router_mode") != Some("kv") {
            return Err(invalid(
                "--router-replica-sync is implemented for --router-mode kv only in this switchyard build \
                 (it shares the kv router's bookings)",
            ));
        }
        if text(p, "event_plane") == Some("nats") {
            return Err(invalid(
                "--router-replica-sync with --event-plane nats is not implemented in this switchyard build \
                 (bookings are published on a ZMQ socket only)",
            ));
        }
    }
    // What this frontend registers itself is written to etcd or the file store only.
    if text(p, "discovery_backend") == Some("kubernetes") {
        for (dest, flag) in [("serve_indexer", "--serve-indexer"), ("router_replica_sync", "--router-replica-sync")] {
            if boolean(p, dest) && text(p, "router_mode") == Some("kv") {
                return Err(invalid(format!(
                    "{flag} with --discovery-backend kubernetes is not implemented in this switchyard build \
                     (the frontend's own records are written to etcd or the file store only)"
                )));
            }
        }
    }
    if text(p, "namespace").is_some() && text(p, "namespace_prefix").is_some() {
        warnings.push("--namespace-prefix is set, so --namespace is not used for discovery".into());
    }
    if text(p, "tokenizer_backend").is_some_and(|b| b != "default") && boolean(p, "tokenizer_fallback") {
        // 1.6.1 says it once, when the first model's tokenizer loads.
        warnings.push(
            "Automatic tokenizer fallback is deprecated and will be disabled by default in a future release. \
             Set tokenizer fallback to false (`--no-tokenizer-fallback` in the frontend) to adopt the future \
             behavior now."
                .into(),
        );
    }
    if boolean(p, "enforce_disagg") {
        warnings.push(
            "--enforce-disagg is deprecated and ignored; disaggregated routing topology and readiness \
             are determined automatically from registered worker types"
                .into(),
        );
    }
    Ok(())
}

/// Stop when an option or variable asks for behaviour switchyard does not have yet.
pub(super) fn refuse_unbuilt(p: &Parsed, env: &dyn Fn(&str) -> Option<String>) -> Result<(), ConfigError> {
    let mut unbuilt = Vec::new();
    for (f, v, _) in &p.values {
        if IMPLEMENTED.contains(&f.dest) || *v == Value::from_default(f.default) || value_supported(f.dest, v) {
            continue;
        }
        unbuilt.push(format!("{} {}", f.primary(), show(v)));
    }
    for var in UNBUILT_ENV_VARS {
        if let Some(v) = env(var) {
            unbuilt.push(format!("{var}={v}"));
        }
    }
    if unbuilt.is_empty() {
        return Ok(());
    }
    Err(invalid(format!(
        "not implemented in this switchyard build yet (accepted for dynamo.frontend compatibility, \
         but refusing to ignore it silently): {}",
        unbuilt.join("; ")
    )))
}

fn show(v: &Value) -> String {
    match v {
        Value::Null => "None".into(),
        Value::Bool(b) => b.to_string(),
        Value::Int(i) => i.to_string(),
        Value::Float(f) => f.to_string(),
        Value::Str(s) => s.clone(),
        Value::List(l) => l.join(" "),
    }
}
