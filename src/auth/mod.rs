//! Optional API keys (`--api-keys-file`, `SWITCHYARD_API_KEYS`; off when unset): the keys the
//! inference routes require, each with an optional request and token rate per minute and a
//! label that names it in `/metrics`. Dynamo has no keys; a deployment that wants them
//! otherwise puts a proxy in front.
//!
//! The file is read once at start-up (main thread): one key per line,
//! `LABEL KEY [requests_per_minute=N] [tokens_per_minute=N]`; blank lines and `#` comments are
//! skipped. Keys are kept as BLAKE3 digests only, and a presented key is looked up by its
//! digest, so the lookup's timing says nothing about the stored keys.
//!
//! On a shard, [`Keys::admit`] reads the key from `Authorization: Bearer …` or `x-api-key`
//! (Anthropic's header) and counts the request against its per-minute window; tokens are
//! charged when a request ends with its usage ([`Key::charge`]) and a key over its token rate
//! is refused until the window turns. The windows are fixed minutes shared by every shard
//! (one atomic word each, no lock): a key's limit holds for the whole process, whichever shard
//! its connections land on.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::error::{Error, Kind};

/// How long a rate window lasts.
pub const WINDOW: Duration = Duration::from_secs(60);

/// A count within the current window, in one atomic word: the window's index in the high 24
/// bits, the count in the low 40.
#[derive(Default)]
struct Window(AtomicU64);

const COUNT_BITS: u32 = 40;
const COUNT_MASK: u64 = (1 << COUNT_BITS) - 1;

impl Window {
    fn split(word: u64, now: u64) -> u64 {
        if word >> COUNT_BITS == now & 0xFF_FFFF {
            word & COUNT_MASK
        } else {
            0
        }
    }

    /// The count in window `now`.
    fn current(&self, now: u64) -> u64 {
        Self::split(self.0.load(Ordering::Relaxed), now)
    }

    /// Add `n` in window `now` if the count stays within `limit`; false (nothing added) if not.
    fn add_within(&self, now: u64, n: u64, limit: Option<u64>) -> bool {
        let mut word = self.0.load(Ordering::Relaxed);
        loop {
            let count = Self::split(word, now);
            if limit.is_some_and(|l| count + n > l) {
                return false;
            }
            let next = ((now & 0xFF_FFFF) << COUNT_BITS) | ((count + n).min(COUNT_MASK));
            match self.0.compare_exchange_weak(word, next, Ordering::Relaxed, Ordering::Relaxed) {
                Ok(_) => return true,
                Err(w) => word = w,
            }
        }
    }
}

/// One key: its label, limits, windows and counters.
pub struct Key {
    pub label: String,
    pub requests_per_minute: Option<u64>,
    pub tokens_per_minute: Option<u64>,
    requests: Window,
    tokens: Window,
    epoch: Instant,
    /// Requests admitted, refused for the request rate, refused for the token rate.
    admitted: AtomicU64,
    limited_requests: AtomicU64,
    limited_tokens: AtomicU64,
    /// Tokens charged (prompt + completion).
    charged: AtomicU64,
}

impl std::fmt::Debug for Key {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Key").field("label", &self.label).finish_non_exhaustive()
    }
}

impl Key {
    fn window(&self) -> u64 {
        self.epoch.elapsed().as_secs() / WINDOW.as_secs()
    }

    /// Seconds until the current window ends.
    fn retry_after(&self) -> u64 {
        WINDOW.as_secs() - self.epoch.elapsed().as_secs() % WINDOW.as_secs()
    }

    /// A request with this key ended having used `tokens` (prompt and completion).
    pub fn charge(&self, tokens: u64) {
        self.tokens.add_within(self.window(), tokens, None);
        self.charged.fetch_add(tokens, Ordering::Relaxed);
    }
}

/// Why a request was not admitted: the error in the protocol's shape, and for a rate limit
/// the seconds until the window turns (`Retry-After`).
#[derive(Debug)]
pub struct Refusal {
    pub error: Error,
    pub retry_after: Option<u64>,
}

/// The loaded key file.
pub struct Keys {
    by_digest: HashMap<[u8; 32], usize>,
    keys: Vec<Arc<Key>>,
    /// Requests refused for a missing key, for an unknown key.
    missing: AtomicU64,
    unknown: AtomicU64,
}

impl Keys {
    /// Read the key file at `path`; an error names the file and the line.
    pub fn load(path: &Path) -> Result<Keys, String> {
        let text = std::fs::read_to_string(path)
            .map_err(|e| format!("cannot read the API key file {}: {e}", path.display()))?;
        Keys::parse(&text).map_err(|e| format!("API key file {}: {e}", path.display()))
    }

    /// Parse a key file's text.
    pub fn parse(text: &str) -> Result<Keys, String> {
        let epoch = Instant::now();
        let mut keys = Keys {
            by_digest: HashMap::new(),
            keys: Vec::new(),
            missing: AtomicU64::new(0),
            unknown: AtomicU64::new(0),
        };
        for (i, line) in text.lines().enumerate() {
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let at = |m: String| format!("line {}: {m}", i + 1);
            let mut words = line.split_whitespace();
            let (Some(label), Some(secret)) = (words.next(), words.next()) else {
                return Err(at("want LABEL KEY [requests_per_minute=N] [tokens_per_minute=N]".into()));
            };
            if !label.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.:".contains(&b)) {
                return Err(at(format!("label {label:?}: letters, digits and - _ . : only")));
            }
            let (mut rpm, mut tpm) = (None, None);
            for w in words {
                let (name, value) = w.split_once('=').ok_or_else(|| at(format!("{w:?} is not name=value")))?;
                let n: u64 = value.parse().map_err(|_| at(format!("{name}: {value:?} is not a whole number")))?;
                match name {
                    "requests_per_minute" => rpm = Some(n),
                    "tokens_per_minute" => tpm = Some(n),
                    _ => return Err(at(format!("unknown setting {name:?}"))),
                }
            }
            if keys.keys.iter().any(|k| k.label == label) {
                return Err(at(format!("label {label:?} appears twice")));
            }
            let digest = *blake3::hash(secret.as_bytes()).as_bytes();
            if keys.by_digest.insert(digest, keys.keys.len()).is_some() {
                return Err(at("this key appears twice".into()));
            }
            keys.keys.push(Arc::new(Key {
                label: label.to_string(),
                requests_per_minute: rpm,
                tokens_per_minute: tpm,
                requests: Window::default(),
                tokens: Window::default(),
                epoch,
                admitted: AtomicU64::new(0),
                limited_requests: AtomicU64::new(0),
                limited_tokens: AtomicU64::new(0),
                charged: AtomicU64::new(0),
            }));
        }
        if keys.keys.is_empty() {
            return Err("no keys in it".into());
        }
        Ok(keys)
    }

    /// How many keys there are.
    pub fn len(&self) -> usize {
        self.keys.len()
    }

    /// Whether there are none (never, once loaded).
    pub fn is_empty(&self) -> bool {
        self.keys.is_empty()
    }

    /// Admit a request whose headers `header` gives (lower-case names): its key, counted
    /// against its request rate; or the refusal (401 without a known key, 429 over a rate).
    pub fn admit<'a>(&self, header: impl Fn(&str) -> Option<&'a [u8]>) -> Result<Arc<Key>, Refusal> {
        let presented = header("authorization")
            .and_then(bearer)
            .or_else(|| header("x-api-key").map(<[u8]>::trim_ascii))
            .filter(|k| !k.is_empty());
        let Some(presented) = presented else {
            self.missing.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal {
                error: Error::new(
                    Kind::Unauthorized,
                    "Missing API key: send it as 'Authorization: Bearer <key>' or 'x-api-key: <key>'",
                ),
                retry_after: None,
            });
        };
        let Some(&i) = self.by_digest.get(blake3::hash(presented).as_bytes()) else {
            self.unknown.fetch_add(1, Ordering::Relaxed);
            return Err(Refusal {
                error: Error::new(Kind::Unauthorized, "Incorrect API key provided"),
                retry_after: None,
            });
        };
        let key = &self.keys[i];
        let now = key.window();
        if key.tokens_per_minute.is_some_and(|l| key.tokens.current(now) >= l) {
            key.limited_tokens.fetch_add(1, Ordering::Relaxed);
            let msg = format!(
                "Rate limit reached for API key '{}': {} tokens per minute",
                key.label,
                key.tokens_per_minute.unwrap_or(0)
            );
            return Err(Refusal {
                error: Error::new(Kind::TooManyRequests, msg),
                retry_after: Some(key.retry_after()),
            });
        }
        if !key.requests.add_within(now, 1, key.requests_per_minute) {
            key.limited_requests.fetch_add(1, Ordering::Relaxed);
            let msg = format!(
                "Rate limit reached for API key '{}': {} requests per minute",
                key.label,
                key.requests_per_minute.unwrap_or(0)
            );
            return Err(Refusal {
                error: Error::new(Kind::TooManyRequests, msg),
                retry_after: Some(key.retry_after()),
            });
        }
        key.admitted.fetch_add(1, Ordering::Relaxed);
        Ok(key.clone())
    }

    /// The keys' families in Prometheus text, appended to `out`.
    pub fn render(&self, out: &mut String) {
        use std::fmt::Write;
        let _ = writeln!(
            out,
            "# HELP switchyard_api_key_requests_total Inference requests by API key label and result\n\
             # TYPE switchyard_api_key_requests_total counter"
        );
        for k in &self.keys {
            for (result, c) in [
                ("admitted", &k.admitted),
                ("rate_limited_requests", &k.limited_requests),
                ("rate_limited_tokens", &k.limited_tokens),
            ] {
                let _ = writeln!(
                    out,
                    "switchyard_api_key_requests_total{{key=\"{}\",result=\"{result}\"}} {}",
                    k.label,
                    c.load(Ordering::Relaxed)
                );
            }
        }
        let _ = writeln!(
            out,
            "# HELP switchyard_api_key_tokens_total Tokens (prompt and completion) of finished requests by API key label\n\
             # TYPE switchyard_api_key_tokens_total counter"
        );
        for k in &self.keys {
            let _ = writeln!(
                out,
                "switchyard_api_key_tokens_total{{key=\"{}\"}} {}",
                k.label,
                k.charged.load(Ordering::Relaxed)
            );
        }
        let _ = writeln!(
            out,
            "# HELP switchyard_api_key_rejected_total Inference requests refused without a known API key\n\
             # TYPE switchyard_api_key_rejected_total counter\n\
             switchyard_api_key_rejected_total{{reason=\"missing\"}} {}\n\
             switchyard_api_key_rejected_total{{reason=\"unknown\"}} {}",
            self.missing.load(Ordering::Relaxed),
            self.unknown.load(Ordering::Relaxed)
        );
    }
}

/// The credentials of an `Authorization: Bearer …` value (the scheme in any case).
fn bearer(v: &[u8]) -> Option<&[u8]> {
    let v = v.trim_ascii();
    (v.len() > 7 && v[..7].eq_ignore_ascii_case(b"bearer ")).then(|| v[7..].trim_ascii())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers<'a>(hs: &'a [(&'a str, &'a str)]) -> impl Fn(&str) -> Option<&'a [u8]> + 'a {
        move |n| hs.iter().find(|(k, _)| *k == n).map(|(_, v)| v.as_bytes())
    }

    #[test]
    fn the_file_is_read_strictly() {
        let k = Keys::parse("# ops\nalice sk-a requests_per_minute=2\n\nbob sk-b tokens_per_minute=10\n").unwrap();
        assert_eq!(k.len(), 2);
        for (text, want) in [
            ("alice", "line 1: want LABEL KEY"),
            ("alice sk-a rpm=3", "unknown setting \"rpm\""),
            ("alice sk-a requests_per_minute=x", "is not a whole number"),
            ("alice sk-a\nalice sk-b", "line 2: label \"alice\" appears twice"),
            ("alice sk-a\nbob sk-a", "line 2: this key appears twice"),
            ("al/ice sk-a", "letters, digits"),
            ("# nothing", "no keys"),
        ] {
            let e = Keys::parse(text).err().unwrap();
            assert!(e.contains(want), "{text:?}: {e}");
        }
    }

    #[test]
    fn keys_come_from_either_header_and_limits_hold() {
        let k = Keys::parse("alice sk-a requests_per_minute=2\nbob sk-b tokens_per_minute=10\n").unwrap();
        let e = k.admit(headers(&[])).unwrap_err();
        assert_eq!((e.error.kind(), e.retry_after), (Kind::Unauthorized, None));
        let e = k.admit(headers(&[("authorization", "Bearer sk-x")])).unwrap_err();
        assert_eq!(e.error.kind(), Kind::Unauthorized);
        assert_eq!(k.admit(headers(&[("authorization", "bearer  sk-a ")])).unwrap().label, "alice");
        assert_eq!(k.admit(headers(&[("x-api-key", "sk-a")])).unwrap().label, "alice");
        let e = k.admit(headers(&[("x-api-key", "sk-a")])).unwrap_err();
        assert_eq!(e.error.kind(), Kind::TooManyRequests);
        assert!(e.retry_after.is_some_and(|s| (1..=60).contains(&s)));
        assert!(e.error.to_string().contains("2 requests per minute"), "{}", e.error);
        // Tokens: admitted until the charged tokens reach the rate.
        let bob = k.admit(headers(&[("x-api-key", "sk-b")])).unwrap();
        bob.charge(6);
        k.admit(headers(&[("x-api-key", "sk-b")])).unwrap().charge(4);
        let e = k.admit(headers(&[("x-api-key", "sk-b")])).unwrap_err();
        assert!(e.error.to_string().contains("10 tokens per minute"), "{}", e.error);
        let mut out = String::new();
        k.render(&mut out);
        for line in [
            "switchyard_api_key_requests_total{key=\"alice\",result=\"admitted\"} 2",
            "switchyard_api_key_requests_total{key=\"alice\",result=\"rate_limited_requests\"} 1",
            "switchyard_api_key_requests_total{key=\"bob\",result=\"rate_limited_tokens\"} 1",
            "switchyard_api_key_tokens_total{key=\"bob\"} 10",
            "switchyard_api_key_rejected_total{reason=\"missing\"} 1",
            "switchyard_api_key_rejected_total{reason=\"unknown\"} 1",
        ] {
            assert!(out.contains(line), "{line} in\n{out}");
        }
    }

    #[test]
    fn a_window_turns() {
        let w = Window::default();
        assert!(w.add_within(5, 3, Some(3)));
        assert!(!w.add_within(5, 1, Some(3)));
        assert_eq!(w.current(5), 3);
        assert_eq!(w.current(6), 0);
        assert!(w.add_within(6, 3, Some(3)));
    }
}
