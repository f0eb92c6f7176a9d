//! What the tokenizer benches share: where the model files are, and cache-cold text.

use switchyard::tokenize::Tokenizer;

/// The directory of a model of `scripts/fetch-models.sh` (`$SWITCHYARD_MODELS/<name>`, default
/// `~/.cache/switchyard-models/<name>`).
pub fn model_dir(name: &str) -> String {
    let base = std::env::var("SWITCHYARD_MODELS")
        .unwrap_or_else(|_| format!("{}/.cache/switchyard-models", std::env::var("HOME").unwrap_or_default()));
    format!("{base}/{name}")
}

/// Varied text: decoded runs of pseudo-random vocabulary ids (fixed seed), no repetition.
pub fn varied_text(tok: &Tokenizer, approx_tokens: usize, seed: u64) -> String {
    let mut x = seed;
    let mut ids = Vec::with_capacity(approx_tokens);
    while ids.len() < approx_tokens {
        x = x.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        ids.push(((x >> 33) % 100_000) as u32);
    }
    tok.decode(&ids, true).unwrap()
}
