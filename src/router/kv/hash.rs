//! Block hashing for KV-cache-aware routing: the *local* block hashes a request is matched
//! with (docs/dynamo/kv-routing.md §5.2), the chained *sequence* hashes that identify blocks in worker events and
//! in active-sequence tracking (§5.3), and the `keyed-xxh3-v1` tracking-hash variant (§5.4).
//!
//! XXH3-64 comes from the `xxhash-rust` crate (feature `xxh3`): it was already in the
//! dependency tree (through `tokenizers`), so it costs no new build time, and its
//! one-shot `xxh3_64_with_seed` is the exact function Dynamo uses.
//!
//! Local hash of full block `i` (a partial tail block is never hashed):
//! `XXH3_64(u32_le(tokens of block) ++ u64_le(sorted mm hashes of block), seed)` with
//! `seed = 1337 (+ XXH3_64(lora, 0)) (+ XXH3_64(cache_namespace, 1))`, wrapping adds, empty
//! strings counting as absent. Eagle mode hashes windows of `B + 1` tokens with stride `B`.

use xxhash_rust::xxh3::xxh3_64_with_seed;

use crate::plane::kv_events::MmExtraInfo;

/// The seed of every public block and chain hash.
pub const SEED: u64 = 1337;

/// What changes a request's local block hashes besides its tokens.
#[derive(Clone, Copy, Debug, Default)]
pub struct BlockHashOptions<'a> {
    /// LoRA adapter name; `None` or empty = the base model.
    pub lora_name: Option<&'a str>,
    /// Cache namespace (`nvext.cache_salt` / `x-tenant-id`); `None` or empty = none.
    pub cache_namespace: Option<&'a str>,
    /// Eagle speculative decoding: windows of `B + 1` tokens, stride `B`.
    pub is_eagle: bool,
    /// Multimodal objects per block (index = block number); missing entries = none.
    pub block_mm_infos: Option<&'a [Option<MmExtraInfo>]>,
}

fn non_empty(s: Option<&str>) -> Option<&str> {
    s.filter(|s| !s.is_empty())
}

/// The seed of the local block hashes for these options (§5.2).
pub fn block_seed(opts: &BlockHashOptions<'_>) -> u64 {
    let mut seed = SEED;
    if let Some(lora) = non_empty(opts.lora_name) {
        seed = seed.wrapping_add(xxh3_64_with_seed(lora.as_bytes(), 0));
    }
    if let Some(ns) = non_empty(opts.cache_namespace) {
        seed = seed.wrapping_add(xxh3_64_with_seed(ns.as_bytes(), 1));
    }
    seed
}

/// The number of complete blocks in `len` tokens.
pub fn complete_block_count(len: usize, block_size: u32, is_eagle: bool) -> usize {
    let b = block_size as usize;
    if b == 0 {
        return 0;
    }
    if is_eagle {
        len.saturating_sub(1) / b
    } else {
        len / b
    }
}

/// Appends to `out` the hashes of every complete block of `tokens`, with `seed` as the
/// XXH3 seed (public or keyed). `scratch` is reused between calls to avoid allocating.
fn block_hashes_with_seed(
    tokens: &[u32],
    block_size: u32,
    opts: &BlockHashOptions<'_>,
    seed: u64,
    scratch: &mut Vec<u8>,
    out: &mut Vec<u64>,
) {
    let b = block_size as usize;
    let n = complete_block_count(tokens.len(), block_size, opts.is_eagle);
    let window = if opts.is_eagle { b + 1 } else { b };
    out.reserve(n);
    let mut mm: Vec<u64> = Vec::new();
    for i in 0..n {
        let block = &tokens[i * b..i * b + window];
        scratch.clear();
        for t in block {
            scratch.extend_from_slice(&t.to_le_bytes());
        }
        let info = opts.block_mm_infos.and_then(|infos| infos.get(i)).and_then(Option::as_ref);
        if let Some(info) = info {
            mm.clear();
            mm.extend(info.mm_objects.iter().map(|o| o.mm_hash));
            mm.sort_unstable();
            for h in &mm {
                scratch.extend_from_slice(&h.to_le_bytes());
            }
        }
        out.push(xxh3_64_with_seed(scratch, seed));
    }
}

/// The local block hashes of a request (§5.2): one per complete block.
pub fn local_block_hashes(tokens: &[u32], block_size: u32, opts: &BlockHashOptions<'_>) -> Vec<u64> {
    let mut out = Vec::new();
    let mut scratch = Vec::with_capacity(4 * (block_size as usize + 1));
    block_hashes_with_seed(tokens, block_size, opts, block_seed(opts), &mut scratch, &mut out);
    out
}

/// One link of the chain: the sequence hash of a block from its parent's sequence hash.
#[inline]
pub fn chain_hash(parent: u64, local: u64, seed: u64) -> u64 {
    let mut buf = [0u8; 16];
    buf[..8].copy_from_slice(&parent.to_le_bytes());
    buf[8..].copy_from_slice(&local.to_le_bytes());
    xxh3_64_with_seed(&buf, seed)
}

fn chain_with_seed(local: &[u64], seed: u64) -> Vec<u64> {
    let mut out = Vec::with_capacity(local.len());
    let mut prev: Option<u64> = None;
    for &h in local {
        let s = match prev {
            None => h,
            Some(p) => chain_hash(p, h, seed),
        };
        out.push(s);
        prev = Some(s);
    }
    out
}

/// The chained sequence hashes of local block hashes (§5.3): `seq_0 = local_0`,
/// `seq_i = XXH3(u64_le(seq_{i-1}) ++ u64_le(local_i), 1337)`.
pub fn sequence_hashes(local: &[u64]) -> Vec<u64> {
    chain_with_seed(local, SEED)
}

/// Scope of `keyed-xxh3-v1` tracking identities: routers sharing it (and the key) agree.
#[derive(Clone, Copy, Debug)]
pub struct TrackingScope<'a> {
    pub model_name: &'a str,
    /// Routing group; Dynamo's default is `"default"`.
    pub routing_group: &'a str,
    pub block_size: u32,
}

/// A `keyed-xxh3-v1` key: 32 secret bytes and the key's public id (epoch).
#[derive(Clone)]
pub struct TrackingKey {
    pub key: [u8; 32],
    pub key_id: String,
}

impl std::fmt::Debug for TrackingKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("TrackingKey").field("key_id", &self.key_id).finish_non_exhaustive()
    }
}

const KEYED_DOMAIN: &[u8] = b"dynamo.router.tracking-hash/keyed-xxh3-v1\0";

fn frame(h: &mut blake3::Hasher, tag: u8, bytes: &[u8]) {
    h.update(&[tag]);
    h.update(&(bytes.len() as u64).to_le_bytes());
    h.update(bytes);
}

fn frame_optional(h: &mut blake3::Hasher, tag: u8, value: Option<&str>) {
    h.update(&[tag, u8::from(value.is_some())]);
    if let Some(v) = value {
        h.update(&(v.len() as u64).to_le_bytes());
        h.update(v.as_bytes());
    }
}

impl TrackingKey {
    /// The (block seed, chain seed) pair for a scope and request options (§5.4).
    pub fn seeds(&self, scope: &TrackingScope<'_>, opts: &BlockHashOptions<'_>) -> (u64, u64) {
        let mut h = blake3::Hasher::new_keyed(&self.key);
        h.update(KEYED_DOMAIN);
        frame(&mut h, 1, self.key_id.as_bytes());
        frame(&mut h, 2, scope.model_name.as_bytes());
        frame(&mut h, 3, scope.routing_group.as_bytes());
        frame(&mut h, 4, &scope.block_size.to_le_bytes());
        frame_optional(&mut h, 5, non_empty(opts.cache_namespace));
        frame_optional(&mut h, 6, non_empty(opts.lora_name));
        frame(&mut h, 7, &[u8::from(opts.is_eagle)]);
        let d = h.finalize();
        let b = d.as_bytes();
        let word = |i: usize| {
            let mut w = [0u8; 8];
            w.copy_from_slice(&b[i..i + 8]);
            u64::from_le_bytes(w)
        };
        (word(0), word(8))
    }

    /// Keyed tracking identities of a request's complete blocks.
    pub fn sequence_hashes(&self, scope: &TrackingScope<'_>, tokens: &[u32], opts: &BlockHashOptions<'_>) -> Vec<u64> {
        let (block_seed, chain_seed) = self.seeds(scope, opts);
        let mut local = Vec::new();
        let mut scratch = Vec::new();
        block_hashes_with_seed(tokens, scope.block_size, opts, block_seed, &mut scratch, &mut local);
        chain_with_seed(&local, chain_seed)
    }
}

/// The deterministic positive `i32` id Dynamo derives from a LoRA name (BLAKE3, first 8
/// bytes big-endian, low 31 bits, 0 → 1).
pub fn lora_name_to_id(lora_name: &str) -> i32 {
    let d = blake3::hash(lora_name.as_bytes());
    let mut w = [0u8; 8];
    w.copy_from_slice(&d.as_bytes()[..8]);
    let id = (u64::from_be_bytes(w) & 0x7fff_ffff) as i32;
    if id == 0 {
        1
    } else {
        id
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn spec_table_rows() {
        let toks: Vec<u32> = (1000..1200).collect();
        let opts = BlockHashOptions::default();
        let l = local_block_hashes(&toks, 64, &opts);
        assert_eq!(l, [7337154364384838499, 8394412188204864904, 10159065599664913187]);
        assert_eq!(sequence_hashes(&l), [7337154364384838499, 11788397496893737194, 1978969906735676774]);
        let l = local_block_hashes(&toks[..31], 16, &opts);
        assert_eq!(l, [17863182269597592868]);
        let abc = BlockHashOptions { lora_name: Some("abc"), ..opts };
        assert_eq!(local_block_hashes(&toks[..16], 16, &abc), [2765361482876700556]);
        let empty = BlockHashOptions { lora_name: Some(""), cache_namespace: Some(""), ..opts };
        assert_eq!(local_block_hashes(&toks[..16], 16, &empty), [17863182269597592868]);
    }

    #[test]
    fn block_counts() {
        assert_eq!(complete_block_count(33, 16, true), 2);
        assert_eq!(complete_block_count(32, 16, true), 1);
        assert_eq!(complete_block_count(32, 16, false), 2);
        assert_eq!(complete_block_count(0, 16, true), 0);
        assert_eq!(complete_block_count(10, 0, false), 0);
    }
}
