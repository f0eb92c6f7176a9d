//! Model-card checksums as Dynamo 1.6.1 computes them (docs/dynamo/request-plane.md §3.2, §3.7).
//!
//! * [`file_checksum`]: the `checksum` string of a card file slot, `blake3:<64 lower-case hex>`
//!   over the file's bytes.
//! * [`verify_file`]: recomputes a local file's checksum and compares it with a card's.
//! * [`mdc_sum`]: the card checksum sent as `mdc_sum` in every request (and naming the
//!   frontend's card-file cache directory).

use std::io::Read;
use std::path::Path;

use serde_json::Value;

use super::records::ModelCard;

/// Prefix of every card file checksum.
pub const CHECKSUM_PREFIX: &str = "blake3:";

/// `blake3:<hex>` of `bytes`, the form card file slots carry.
pub fn file_checksum(bytes: &[u8]) -> String {
    format!("{CHECKSUM_PREFIX}{}", blake3::hash(bytes).to_hex())
}

/// `blake3:<hex>` of the file at `path`, streamed (tokenizer files are tens of MB).
pub fn file_checksum_path(path: &Path) -> std::io::Result<String> {
    let mut f = std::fs::File::open(path)?;
    let mut h = blake3::Hasher::new();
    let mut buf = vec![0u8; 64 * 1024];
    loop {
        let n = f.read(&mut buf)?;
        if n == 0 {
            break;
        }
        h.update(&buf[..n]);
    }
    Ok(format!("{CHECKSUM_PREFIX}{}", h.finalize().to_hex()))
}

/// Checks the file at `path` against `expected` (`blake3:<hex>`; the hex is compared
/// case-insensitively). The error reads like Dynamo's: `checksum mismatch for <path>:
/// expected blake3:..., got blake3:...`.
pub fn verify_file(path: &Path, expected: &str) -> Result<(), String> {
    let want_hex = expected
        .strip_prefix(CHECKSUM_PREFIX)
        .ok_or_else(|| format!("unsupported checksum {expected:?} for {}: expected `blake3:<hex>`", path.display()))?;
    let got = file_checksum_path(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    if got[CHECKSUM_PREFIX.len()..].eq_ignore_ascii_case(want_hex) {
        Ok(())
    } else {
        Err(format!("checksum mismatch for {}: expected {expected}, got {got}", path.display()))
    }
}

/// The worker-type byte of `mdc_sum` item 7: none 0, prefill 1, decode 2, encode 3,
/// aggregated 4. `None` for a name Dynamo 1.6.1 does not know.
pub fn worker_type_byte(worker_type: Option<&str>) -> Option<u8> {
    match worker_type {
        None => Some(0),
        Some("prefill") => Some(1),
        Some("decode") => Some(2),
        Some("encode") => Some(3),
        Some("aggregated") => Some(4),
        Some(_) => None,
    }
}

/// The card checksum Dynamo 1.6.1 sends as `mdc_sum` (docs/dynamo/request-plane.md §3.7): blake3 hex over, in order,
/// * `display_name`, and `source_path` when present;
/// * the file slots' checksum strings (with their `blake3:` prefix) in the order model_info,
///   tokenizer, prompt_formatter, chat_template_file, gen_config (a chat-template slot
///   contributes its file's checksum);
/// * `extra_files`, only when there are some: the (file name, checksum hex without the
///   `blake3:` prefix) pairs sorted, each as the name, one 0 byte, the hex;
/// * the effective context length (u32 BE), the `kv_cache_block_size` (u32 BE, 0 when
///   absent), the worker-type byte, and `needs` (u32 BE count, then per alternative a u32 BE
///   length and one worker-type byte each);
/// * only when present, the blake3 of the JSON `router_config` (item 9, [S] in docs/dynamo/request-plane.md:
///   unverified);
/// * only when non-empty, `aliases`: a u32 BE count, then each alias as a u32 BE byte length
///   and its bytes, in card order.
///
/// Not hashed: `prompt_context` (1.6.1 hashes its Rust debug form; no card seen carries it),
/// `indexer_identity` and the vLLM runtime flags of `runtime_config.runtime_data` (likewise
/// never seen). Unknown worker-type names hash as 0 (none).
pub fn mdc_sum(card: &ModelCard) -> String {
    let mut h = blake3::Hasher::new();
    h.update(card.display_name.as_bytes());
    if let Some(sp) = card.source_path.as_deref() {
        h.update(sp.as_bytes());
    }
    for (_, slot) in card.file_slots() {
        h.update(slot.file.checksum.as_bytes());
    }
    let mut extras: Vec<(&str, &str)> = card
        .extra_files
        .iter()
        .map(|f| {
            let hex = f.checksum.split_once(':').map_or(f.checksum.as_str(), |(_, hex)| hex);
            (f.basename().unwrap_or(""), hex)
        })
        .collect();
    extras.sort_unstable();
    for (name, hex) in extras {
        h.update(name.as_bytes());
        h.update(&[0]);
        h.update(hex.as_bytes());
    }
    // Dynamo stores these as u32; larger JSON values are truncated the way `as u32` would.
    h.update(&(card.effective_context_length() as u32).to_be_bytes());
    h.update(&card.kv_cache_block_size.unwrap_or(0).to_be_bytes());
    h.update(&[worker_type_byte(card.worker_type.as_deref()).unwrap_or(0)]);
    h.update(&(card.needs.len() as u32).to_be_bytes());
    for alt in &card.needs {
        let types: Vec<u8> = match alt {
            Value::Array(a) => a.iter().map(|t| worker_type_byte(t.as_str()).unwrap_or(0)).collect(),
            Value::String(s) => vec![worker_type_byte(Some(s)).unwrap_or(0)],
            _ => Vec::new(),
        };
        h.update(&(types.len() as u32).to_be_bytes());
        h.update(&types);
    }
    if let Some(rc) = card.extra.get("router_config").filter(|v| !v.is_null()) {
        let json = serde_json::to_vec(rc).unwrap_or_default();
        h.update(blake3::hash(&json).as_bytes());
    }
    if !card.aliases.is_empty() {
        h.update(&(card.aliases.len() as u32).to_be_bytes());
        for alias in &card.aliases {
            h.update(&(alias.len() as u32).to_be_bytes());
            h.update(alias.as_bytes());
        }
    }
    h.finalize().to_hex().to_string()
}
