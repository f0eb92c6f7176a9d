//! Plain settings types the other modules' configuration takes: the kv router's cost,
//! cache, queue and busy thresholds, and HTTP/2's settings. Defined here so that the
//! configuration depends on nothing else of the crate; the modules that use them re-export
//! them and add their behaviour.

/// `--router-session-affinity-mode`: what a session bound to a busy worker gets.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum AffinityMode {
    /// Refused as overload (the binding is exact).
    #[default]
    Hard,
    /// Routed as if unbound; the binding moves to where it ran.
    Soft,
}

/// `--tokenizer` (`DYN_TOKENIZER`): which library encodes prompts. Decoding always uses the
/// default tokenizer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub enum TokenizerBackend {
    /// switchyard's own tokenizer (`tokenize::tokenizer`).
    #[default]
    Default,
    /// The `fastokens` crate.
    Fastokens,
    /// The `basetenkenizer` crate.
    Basetenkenizer,
}

impl TokenizerBackend {
    /// The backend of a `--tokenizer` value.
    pub fn parse(s: &str) -> Option<TokenizerBackend> {
        Some(match s {
            "default" => TokenizerBackend::Default,
            "fastokens" => TokenizerBackend::Fastokens,
            "basetenkenizer" => TokenizerBackend::Basetenkenizer,
            _ => return None,
        })
    }

    /// The `--tokenizer` value naming it.
    pub fn name(self) -> &'static str {
        match self {
            TokenizerBackend::Default => "default",
            TokenizerBackend::Fastokens => "fastokens",
            TokenizerBackend::Basetenkenizer => "basetenkenizer",
        }
    }
}

/// `--tokenizer` and `--tokenizer-fallback` together: the encoder a model's prompts use.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Hash)]
pub struct TokenizerChoice {
    pub backend: TokenizerBackend,
    /// Serve a model with the default encoder when the chosen one cannot load its
    /// `tokenizer.json` (or, switchyard's own check, gives other ids than the default);
    /// without it such a model is not served.
    pub fallback: bool,
}

/// The router modes built so far (`kv` is not one of them yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RouterMode {
    RoundRobin,
    Random,
    PowerOfTwo,
    LeastLoaded,
    DeviceAwareWeighted,
    Direct,
    /// KV-cache aware (the kv selection); without an index (or for a prompt given as text to a
    /// Text model) it routes round-robin.
    Kv,
}

impl RouterMode {
    /// The mode of a `--router-mode` value, if built.
    pub fn parse(s: &str) -> Option<RouterMode> {
        Some(match s {
            "round-robin" => RouterMode::RoundRobin,
            "random" => RouterMode::Random,
            "power-of-two" => RouterMode::PowerOfTwo,
            "least-loaded" => RouterMode::LeastLoaded,
            "device-aware-weighted" => RouterMode::DeviceAwareWeighted,
            "direct" => RouterMode::Direct,
            "kv" => RouterMode::Kv,
            _ => return None,
        })
    }
}

/// Router knobs that enter the cost (defaults: the frontend's 1.6.1 CONFIG_DUMP).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CostParams {
    /// `--kv-overlap-score-weight` (`overlap_score_credit`).
    pub overlap_credit: f64,
    pub overlap_credit_decay: f64,
    pub prefill_load_scale: f64,
    pub decode_active_request_weight: f64,
    pub host_cache_hit_weight: f64,
    pub disk_cache_hit_weight: f64,
    /// `--router-temperature`: 0 picks the minimum (ties at random).
    pub temperature: f64,
    /// `--router-track-prefill-tokens`.
    pub track_prefill_tokens: bool,
    /// `--router-track-active-blocks` (on by default): the decode term counts the worker's
    /// booked blocks and the request's own; off (`--no-router-track-active-blocks`), the
    /// decode term is 0 and bookings carry no blocks (prefill tokens are still tracked).
    pub track_active_blocks: bool,
    /// `--router-track-output-blocks`: an answer's blocks join its booking as it grows
    /// (decayed by `nvext.agent_hints.osl` when given).
    pub track_output_blocks: bool,
    /// `--router-assume-kv-reuse`: requests sharing a prompt block share it in the decode
    /// cost (off: every booked block counts once per request).
    pub assume_kv_reuse: bool,
    /// `--router-tie-break room` (switchyard's default): exact ties at temperature 0 go to
    /// the candidate with the fewest cached blocks (see `router::kv::cost::choose_roomiest`); off (`random`),
    /// uniformly at random as 1.6.1 does.
    pub prefer_room: bool,
}

impl Default for CostParams {
    fn default() -> Self {
        CostParams {
            overlap_credit: 1.0,
            overlap_credit_decay: 0.0,
            prefill_load_scale: 1.0,
            decode_active_request_weight: 0.0,
            host_cache_hit_weight: 0.75,
            disk_cache_hit_weight: 0.25,
            temperature: 0.0,
            track_prefill_tokens: true,
            track_active_blocks: true,
            track_output_blocks: false,
            assume_kv_reuse: true,
            prefer_room: true,
        }
    }
}

/// How the kv router picks among a pool's candidates (`worker_selection` of
/// `--router-policy-config`; the options' cost function unless an instance is selected).
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Selector {
    /// The cost function (1.6.1's built-in `default`, or a `dynamo-default-cost-fn`
    /// instance: these parameters).
    Cost(CostParams),
    /// `dynamo-two-tier-cost-fn`: least loaded when the active requests are unbalanced past
    /// both thresholds, else least loaded among the best device overlaps when that overlap
    /// covers more than `cache_threshold` of the prompt's blocks, else least loaded.
    TwoTier { cache_threshold: f64, balance_abs_threshold: u64, balance_rel_threshold: f64 },
    /// `thunderagent` (without its request classifier): the rank with the least booked
    /// prefill tokens plus potential decode blocks × block size; ties to the lower
    /// (worker id, rank). No cache term.
    LeastLoad,
}

/// The selector of each worker pool (aggregated workers, and the prefill and decode workers
/// of disaggregated serving).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct Selectors {
    pub aggregated: Selector,
    pub prefill: Selector,
    pub decode: Selector,
}

impl Selectors {
    /// Every pool with the options' cost function.
    pub fn same(params: CostParams) -> Selectors {
        Selectors {
            aggregated: Selector::Cost(params),
            prefill: Selector::Cost(params),
            decode: Selector::Cost(params),
        }
    }
}

/// `--router-approximate-cache-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CachePolicy {
    /// Blocks live `--router-ttl-secs` after their last touch.
    Ttl,
    /// Each rank holds at most its `total_kv_blocks`, least recently touched out first
    /// (ranks that advertise no size fall back to the TTL).
    Lru,
}

/// `--router-queue-policy`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Policy {
    Fcfs,
    Wspt,
}

impl Policy {
    pub fn parse(s: &str) -> Option<Policy> {
        match s {
            "fcfs" => Some(Policy::Fcfs),
            "wspt" => Some(Policy::Wspt),
            _ => None,
        }
    }
}

/// `--router-queue-threshold` and `--router-queue-policy`.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct QueueConfig {
    pub threshold_frac: f64,
    pub policy: Policy,
}

/// The busy thresholds (all off by default, as in 1.6.1).
#[derive(Clone, Copy, Debug, Default, PartialEq)]
pub struct BusyThresholds {
    /// `--active-decode-blocks-threshold`: share of the worker's KV blocks in use.
    pub decode_blocks_frac: Option<f64>,
    /// `--active-prefill-tokens-threshold`.
    pub prefill_tokens: Option<u64>,
    /// `--active-prefill-tokens-threshold-frac`, of `max_num_batched_tokens`.
    pub prefill_frac: Option<f64>,
}

/// HTTP/2 settings of every connection of this process, fixed at start-up.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Settings {
    /// Connection-level receive window (`DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE`).
    pub connection_window: Option<u32>,
    /// Per-stream receive window (`DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE`).
    pub stream_window: Option<u32>,
    /// Most concurrent streams a client may open.
    pub max_concurrent_streams: u32,
    /// Most bytes of a request's header list (HPACK-decoded, CONTINUATION frames included).
    pub max_header_list_size: u32,
    /// Streams a client may open and reset before they are served (rapid reset).
    pub max_pending_resets: usize,
}

impl Default for Settings {
    fn default() -> Self {
        Settings {
            connection_window: None,
            stream_window: None,
            max_concurrent_streams: 256,
            max_header_list_size: 64 * 1024,
            max_pending_resets: 20,
        }
    }
}

/// Largest legal flow-control window (RFC 9113 §6.9.1).
pub const MAX_WINDOW: u32 = (1 << 31) - 1;

impl Settings {
    /// The windows from `DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE` and
    /// `DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE` (bytes; unset or unparsable leaves the HTTP/2
    /// default of 65 535, as 1.6.1 leaves tonic's), `max_header_list_size` from the header
    /// byte limit.
    pub fn from_env(get: impl Fn(&str) -> Option<String>, max_header_bytes: usize) -> Settings {
        let window = |name: &str| get(name).and_then(|v| v.trim().parse::<u32>().ok()).map(|w| w.min(MAX_WINDOW));
        Settings {
            connection_window: window("DYN_GRPC_INITIAL_CONNECTION_WINDOW_SIZE"),
            stream_window: window("DYN_GRPC_INITIAL_STREAM_WINDOW_SIZE"),
            max_header_list_size: u32::try_from(max_header_bytes).unwrap_or(u32::MAX),
            ..Settings::default()
        }
    }
}

/// Hard cap on the header array; `Limits::max_headers` may only lower it.
pub const MAX_HEADERS_CAP: usize = 256;

/// The HTTPS listener's files (`--tls-cert-path`, `--tls-key-path`, `--tls-client-ca-cert-path`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TlsFiles {
    pub cert: std::path::PathBuf,
    pub key: std::path::PathBuf,
    /// Clients must present a certificate signed by one of these (mutual TLS).
    pub client_ca: Option<std::path::PathBuf>,
}

/// Dynamo's truthy words for boolean variables (`1`, `true`, `on`, `yes`, any case).
pub fn is_truthy(v: &str) -> bool {
    matches!(v.to_ascii_lowercase().as_str(), "1" | "true" | "on" | "yes")
}

/// The TLS of the TCP request plane and its response streams (`--tcp-tls-*`,
/// `DYN_TCP_TLS_*`; docs/dynamo/request-plane-tls.md). One set serves both roles a Dynamo
/// process plays, as 1.6.1 reads it:
///
/// * the listener it serves: a frontend's response-stream (call-back) listener, a worker's
///   request-plane listener — TLS when `cert` and `key` are set, client certificates
///   required when `client_ca` is set too;
/// * the connections it dials: a frontend's requests to workers, a worker's call-back — TLS
///   when any of `ca`, `insecure`, `client_cert`, `client_key` is set; the peer is verified
///   against `ca` (or not at all with `insecure`) under the name `server_name`, else the
///   peer's IP address; `client_cert` + `client_key` is the identity shown for mutual TLS.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaneTlsFiles {
    pub cert: Option<std::path::PathBuf>,
    pub key: Option<std::path::PathBuf>,
    pub client_ca: Option<std::path::PathBuf>,
    pub ca: Option<std::path::PathBuf>,
    /// `DYN_TCP_TLS_INSECURE`: dial without verifying the peer's certificate.
    pub insecure: bool,
    pub client_cert: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
    /// `DYN_TCP_TLS_SERVER_NAME`: the name dialed peers are verified (and SNI) against.
    pub server_name: Option<String>,
    /// `DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS` (default 3 s; a value that is not a whole number
    /// of seconds keeps the default, as in 1.6.1).
    pub handshake_timeout: std::time::Duration,
}

/// 1.6.1's TLS handshake timeout when `DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS` is unset.
pub const DEFAULT_TLS_HANDSHAKE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(3);

impl Default for PlaneTlsFiles {
    fn default() -> Self {
        PlaneTlsFiles {
            cert: None,
            key: None,
            client_ca: None,
            ca: None,
            insecure: false,
            client_cert: None,
            client_key: None,
            server_name: None,
            handshake_timeout: DEFAULT_TLS_HANDSHAKE_TIMEOUT,
        }
    }
}

/// Which side of a connection a [`PlaneTlsFiles`] check speaks for (1.6.1 words its messages
/// after the component: a frontend's call-back listener is its "TCP server", a worker's
/// listener its "TCP request plane"; a frontend dials the "Request plane", a worker's
/// call-back dials "TCP").
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PlaneRole {
    Frontend,
    Worker,
}

impl PlaneTlsFiles {
    /// Every `DYN_TCP_TLS_*` variable from `env` (empty values count as unset).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> PlaneTlsFiles {
        let path = |k: &str| env(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        PlaneTlsFiles {
            cert: path("DYN_TCP_TLS_CERT_PATH"),
            key: path("DYN_TCP_TLS_KEY_PATH"),
            client_ca: path("DYN_TCP_TLS_CLIENT_CA_CERT_PATH"),
            ca: path("DYN_TCP_TLS_CA_CERT_PATH"),
            insecure: env("DYN_TCP_TLS_INSECURE").is_some_and(|v| is_truthy(&v)),
            client_cert: path("DYN_TCP_TLS_CLIENT_CERT_PATH"),
            client_key: path("DYN_TCP_TLS_CLIENT_KEY_PATH"),
            server_name: env("DYN_TCP_TLS_SERVER_NAME"),
            handshake_timeout: env("DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS")
                .and_then(|v| v.parse::<u64>().ok())
                .map_or(DEFAULT_TLS_HANDSHAKE_TIMEOUT, std::time::Duration::from_secs),
        }
    }

    /// The listener speaks TLS.
    pub fn serves_tls(&self) -> bool {
        self.cert.is_some() && self.key.is_some()
    }

    /// Dialed connections speak TLS.
    pub fn dials_tls(&self) -> bool {
        self.ca.is_some() || self.insecure || self.client_cert.is_some() || self.client_key.is_some()
    }

    /// 1.6.1's checks of the set, with its messages (an incomplete pair, a client CA without
    /// a certificate to serve, dialing TLS with nothing to verify the peer by), and its
    /// warnings about sets that cannot work with peers configured alike.
    pub fn check(&self, role: PlaneRole, warnings: &mut Vec<String>) -> Result<(), String> {
        let (server, dialer) = match role {
            PlaneRole::Frontend => ("TCP server", "Request plane"),
            PlaneRole::Worker => ("TCP request plane", "TCP"),
        };
        if self.cert.is_some() != self.key.is_some() {
            return Err(format!(
                "both DYN_TCP_TLS_CERT_PATH and DYN_TCP_TLS_KEY_PATH must be set to enable {server} TLS"
            ));
        }
        if self.client_ca.is_some() && !self.serves_tls() {
            return Err("DYN_TCP_TLS_CLIENT_CA_CERT_PATH requires DYN_TCP_TLS_CERT_PATH and DYN_TCP_TLS_KEY_PATH \
                        to also be set"
                .into());
        }
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err("both DYN_TCP_TLS_CLIENT_CERT_PATH and DYN_TCP_TLS_CLIENT_KEY_PATH must be set together \
                        to present a client identity"
                .into());
        }
        if self.dials_tls() && !self.insecure && self.ca.is_none() {
            return Err(format!(
                "{dialer} TLS is enabled but DYN_TCP_TLS_CA_CERT_PATH is not set and DYN_TCP_TLS_INSECURE is not \
                 true; provide a CA cert or set insecure mode for development"
            ));
        }
        let trust = self.ca.is_some() || self.insecure;
        if self.serves_tls() {
            if self.client_ca.is_some() && self.client_cert.is_none() {
                warnings.push(format!(
                    "{server}: server enforces client certificates but no client identity is configured; outbound \
                     connections to peers that also enforce mTLS will fail the handshake"
                ));
            }
            if !trust {
                warnings.push(format!(
                    "{server}: server has TLS enabled but no client trust is configured; peers cannot verify this \
                     server"
                ));
            }
        } else if trust {
            warnings.push(format!(
                "{server}: server is running in plaintext but client TLS env vars are set; set the server cert/key \
                 to enable TLS, or unset the client vars"
            ));
        }
        Ok(())
    }
}

/// The TLS of the NATS client (`--nats-tls-*`, `NATS_TLS_*`): trust `ca` (besides the
/// system's roots), or nothing at all with `insecure`; show `client_cert` + `client_key`
/// for mutual TLS. Any of them asks for TLS, which `NATS_SERVER` must then name with the
/// `tls://` scheme.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct NatsTlsFiles {
    pub ca: Option<std::path::PathBuf>,
    pub insecure: bool,
    pub client_cert: Option<std::path::PathBuf>,
    pub client_key: Option<std::path::PathBuf>,
}

impl NatsTlsFiles {
    /// Every `NATS_TLS_*` variable from `env` (empty values count as unset).
    pub fn from_env(env: &dyn Fn(&str) -> Option<String>) -> NatsTlsFiles {
        let path = |k: &str| env(k).filter(|v| !v.is_empty()).map(std::path::PathBuf::from);
        NatsTlsFiles {
            ca: path("NATS_TLS_CA_CERT_PATH"),
            insecure: env("NATS_TLS_INSECURE").is_some_and(|v| is_truthy(&v)),
            client_cert: path("NATS_TLS_CLIENT_CERT_PATH"),
            client_key: path("NATS_TLS_CLIENT_KEY_PATH"),
        }
    }

    /// Some option asks for TLS.
    pub fn any(&self) -> bool {
        self.ca.is_some() || self.insecure || self.client_cert.is_some() || self.client_key.is_some()
    }

    /// 1.6.1's checks before it connects to `server` (the `NATS_SERVER` value), with its
    /// messages.
    pub fn check(&self, server: &str) -> Result<(), String> {
        if self.client_cert.is_some() != self.client_key.is_some() {
            return Err(
                "Both NATS_TLS_CLIENT_CERT_PATH and NATS_TLS_CLIENT_KEY_PATH must be set together to enable NATS mTLS"
                    .into(),
            );
        }
        if self.any() && !server.starts_with("tls://") {
            return Err(format!(
                "NATS TLS is configured (NATS_TLS_CA_CERT_PATH, NATS_TLS_INSECURE, or a client certificate) but \
                 NATS_SERVER does not use the 'tls://' scheme: {server}"
            ));
        }
        Ok(())
    }
}
