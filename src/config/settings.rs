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
            assume_kv_reuse: true,
            prefer_room: true,
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
