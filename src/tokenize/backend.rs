//! The other prompt encoders of `--tokenizer` (`fastokens`, `basetenkenizer`), as Dynamo
//! 1.6.1 offers them: the chosen library encodes prompts, the default tokenizer
//! ([`super::tokenizer`]) still decodes, and a model whose `tokenizer.json` the library cannot
//! load is served with the default encoder (`--tokenizer-fallback`, the default) or not at all.
//! switchyard adds a check 1.6.1 does not make: before a model uses the library, the library's
//! ids must equal the default's on the texts of [`super::parity`]; a model where they differ
//! falls back (or, without fallback, is not served). Either way one log line names the model
//! and the reason ([`Decision`]).
//!
//! Threads: instances are built on the control thread at model load (one per shard, as the
//! default's are; the tokenizer helper threads share shard 0's) and encode on the thread that
//! encodes today — a shard, or its helper for a long prompt. Left alone, fastokens would spread
//! a long input over a pool of its own (`FASTOKENS_BPE_THREADS`, read once per process) and
//! some regex splits over rayon's: [`keep_on_caller`] sets that pool to the caller alone, and
//! each encoding thread runs fastokens inside a one-thread rayon pool made of itself, so every
//! fastokens encode runs on the calling thread. basetenkenizer hands any input of 16 or more
//! pre-tokenized pieces (nearly every prompt) to a private pool of min(cores, 8) threads and
//! waits for it, which nothing outside the crate can change; so its encodes all go through the
//! shard's helper thread ([`Encoder::inline`] is false), and a shard never waits on that pool.

use std::sync::Arc;

use super::tokenizer::Tokenizer;

pub use crate::config::settings::{TokenizerBackend, TokenizerChoice};

/// One instance of another library's encoder. A clone shares the instance.
#[derive(Clone)]
pub struct Encoder {
    lib: Lib,
}

#[derive(Clone)]
enum Lib {
    Fast(Arc<fastokens::Tokenizer>),
    Baseten(Arc<basetenkenizer::Tokenizer>),
}

impl std::fmt::Debug for Encoder {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Encoder({})", self.backend().name())
    }
}

impl Encoder {
    /// Build `backend`'s encoder from a parsed `tokenizer.json` — the same text the default
    /// tokenizer reads (1.6.1 also merges `tokenizer_config.json`'s special tokens into the
    /// libraries' input, and into its default's; switchyard's default reads `tokenizer.json`
    /// alone, so its alternatives do too). `Err`: the library cannot load it (its message).
    pub fn build(backend: TokenizerBackend, json: serde_json::Value) -> Result<Encoder, String> {
        let lib = match backend {
            TokenizerBackend::Default => return Err("the default tokenizer is not another encoder".into()),
            TokenizerBackend::Fastokens => {
                keep_on_caller();
                Lib::Fast(Arc::new(fastokens::Tokenizer::from_json(json).map_err(|e| e.to_string())?))
            }
            TokenizerBackend::Basetenkenizer => {
                Lib::Baseten(Arc::new(basetenkenizer::Tokenizer::from_json(json).map_err(|e| e.to_string())?))
            }
        };
        Ok(Encoder { lib })
    }

    /// Which library this is.
    pub fn backend(&self) -> TokenizerBackend {
        match self.lib {
            Lib::Fast(_) => TokenizerBackend::Fastokens,
            Lib::Baseten(_) => TokenizerBackend::Basetenkenizer,
        }
    }

    /// Whether a shard may encode with it inline (see the module docs): false for
    /// basetenkenizer, whose encodes wait on a pool of its own.
    pub fn inline(&self) -> bool {
        matches!(self.lib, Lib::Fast(_))
    }

    /// Append the ids of `text` to `out`; with `add_special_tokens`, the post-processor's
    /// tokens too, as the default tokenizer's `encode_into` does.
    pub fn encode_into(&self, text: &str, add_special_tokens: bool, out: &mut Vec<u32>) -> Result<(), String> {
        let ids = match &self.lib {
            Lib::Fast(t) => on_this_thread(|| t.encode_with_special_tokens(text, add_special_tokens))
                .map_err(|e| format!("tokenization failed (fastokens): {e}"))?,
            Lib::Baseten(t) => t
                .encode_with_special_tokens(text, add_special_tokens)
                .map_err(|e| format!("tokenization failed (basetenkenizer): {e}"))?,
        };
        if out.is_empty() {
            *out = ids;
        } else {
            out.extend_from_slice(&ids);
        }
        Ok(())
    }
}

/// Make fastokens' own pool the caller alone (`FASTOKENS_BPE_THREADS=1`, read when the pool
/// is first used). The binary calls it before any thread starts; building a fastokens
/// encoder calls it too (a no-op once the variable is set), for processes that did not.
pub fn keep_on_caller() {
    const VAR: &str = "FASTOKENS_BPE_THREADS";
    static ONCE: std::sync::Once = std::sync::Once::new();
    ONCE.call_once(|| {
        if std::env::var(VAR).as_deref() != Ok("1") {
            std::env::set_var(VAR, "1");
        }
    });
}

thread_local! {
    /// This thread as a one-thread rayon pool (None: rayon could not make one).
    static OWN_POOL: Option<rayon_core::ThreadPool> =
        rayon_core::ThreadPoolBuilder::new().num_threads(1).use_current_thread().build().ok();
}

/// Run `f` with this thread as the rayon pool its parallel iterators use, so that they run
/// here (a thread outside any pool would hand them to rayon's global pool and wait).
fn on_this_thread<T: Send>(f: impl FnOnce() -> T + Send) -> T {
    OWN_POOL.with(|pool| match pool {
        Some(p) => p.install(f),
        None => f(),
    })
}

/// What a model's prompts are encoded with, decided at load.
#[derive(Debug)]
pub enum Decision {
    /// The chosen library, one instance per shard.
    Use(Vec<Encoder>),
    /// The default encoder, and why (`None`: the default was chosen).
    Default(Option<String>),
    /// The model is not served (`--no-tokenizer-fallback`), and why.
    Refuse(String),
}

/// Decide what encodes the prompts of the model whose `tokenizer.json` is `json` and whose
/// default instances are `default` (one per shard), on up to `threads` threads: `choice`'s
/// library when it loads and [`super::parity::check`] finds it equal to `default[0]`, else
/// the default (with fallback) or nothing.
pub fn decide(choice: TokenizerChoice, json: &str, default: &[Tokenizer], threads: usize) -> Decision {
    let backend = choice.backend;
    if backend == TokenizerBackend::Default || default.is_empty() {
        return Decision::Default(None);
    }
    let name = backend.name();
    let parse = || serde_json::from_str::<serde_json::Value>(json).map_err(|e| format!("invalid JSON: {e}"));
    let first = match parse().and_then(|v| Encoder::build(backend, v)) {
        Ok(e) => e,
        Err(e) if choice.fallback => return Decision::Default(Some(format!("{name} cannot load it: {e}"))),
        Err(e) => {
            return Decision::Refuse(format!("failed to load {name} tokenizer backend and fallback is disabled: {e}"))
        }
    };
    if let Err(m) = super::parity::check(&default[0], &first) {
        let why = format!("{name} gives other token ids than the default tokenizer: {}", m.message);
        return match choice.fallback {
            true => Decision::Default(Some(why)),
            false => Decision::Refuse(format!("{why}; fallback is disabled")),
        };
    }
    // The other shards' instances, side by side (each parses its own copy of the file).
    let more = super::tokenizer::side_by_side(default.len() - 1, threads, "encoder-build", |_| {
        parse().and_then(|v| Encoder::build(backend, v))
    });
    let mut out = Vec::with_capacity(default.len());
    out.push(first);
    for e in more {
        match e {
            Ok(e) => out.push(e),
            Err(e) if choice.fallback => return Decision::Default(Some(format!("{name} cannot load it again: {e}"))),
            Err(e) => {
                return Decision::Refuse(format!(
                    "failed to load {name} tokenizer backend and fallback is disabled: {e}"
                ))
            }
        }
    }
    Decision::Use(out)
}
