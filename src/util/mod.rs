//! Small helpers shared by more than one module (no state): hex, JSON strings, a
//! fast hasher for shard-local maps, UUIDs and random ids, HTTP dates ([`date`]); the
//! allocator's few settings ([`alloc`]) and how io_uring runtimes are built ([`uring`]).

pub mod alloc;
pub mod base64;
pub mod date;
pub mod uring;
pub mod yaml;

/// The value of one ASCII hex digit (either case).
pub fn hex_digit(b: u8) -> Option<u8> {
    match b {
        b'0'..=b'9' => Some(b - b'0'),
        b'a'..=b'f' => Some(b - b'a' + 10),
        b'A'..=b'F' => Some(b - b'A' + 10),
        _ => None,
    }
}

/// `tail` percent-decoded as 1.6.1 decodes a path's rest: `%XX` (either hex case) becomes its
/// byte, a `%` not followed by two hex digits stays; `None` when the result is not UTF-8.
pub fn percent_decode(tail: &[u8]) -> Option<String> {
    let mut out = Vec::with_capacity(tail.len());
    let mut i = 0;
    while i < tail.len() {
        let escaped = match tail[i..] {
            [b'%', hi, lo, ..] => hex_digit(hi).zip(hex_digit(lo)),
            _ => None,
        };
        match escaped {
            Some((hi, lo)) => {
                out.push(hi << 4 | lo);
                i += 3;
            }
            None => {
                out.push(tail[i]);
                i += 1;
            }
        }
    }
    String::from_utf8(out).ok()
}

/// Whether `bytes` goes into a JSON string as it is: no quote, backslash or control byte,
/// the only bytes serde_json escapes. Branch-free over the bytes, so it vectorizes.
pub fn json_plain(bytes: &[u8]) -> bool {
    !bytes.iter().fold(false, |hit, &b| hit | (b < 0x20) | (b == b'"') | (b == b'\\'))
}

/// `s` as a JSON string, byte-identical to serde_json: a string without bytes to escape
/// (nearly every token's text, ids, model names, addresses) is copied as it is, skipping the
/// escaper's per-call setup; any other goes through serde_json.
pub fn json_string(out: &mut Vec<u8>, s: &str) {
    if json_plain(s.as_bytes()) {
        out.reserve(s.len() + 2);
        out.push(b'"');
        out.extend_from_slice(s.as_bytes());
        out.push(b'"');
    } else {
        let _ = serde_json::to_writer(&mut *out, s);
    }
}

/// A fast unkeyed hasher (FxHash's mix) for the shard-local maps on the request path: call-back
/// subjects, worker connections, in-flight counts. SipHash, std's default, cost ~240
/// instructions per map operation there. Their keys are made by this process (subjects) or
/// come from the workers it serves (ids, addresses), never from clients, so nobody who could
/// want to flood one bucket chooses them.
#[derive(Clone, Copy, Default)]
pub struct FastHasher(u64);

impl FastHasher {
    #[inline]
    fn add(&mut self, word: u64) {
        self.0 = (self.0.rotate_left(5) ^ word).wrapping_mul(0x51_7c_c1_b7_27_22_0a_95);
    }
}

impl std::hash::Hasher for FastHasher {
    #[inline]
    fn write(&mut self, bytes: &[u8]) {
        let mut chunks = bytes.chunks_exact(8);
        for c in &mut chunks {
            let mut w = [0u8; 8];
            w.copy_from_slice(c);
            self.add(u64::from_le_bytes(w));
        }
        let rest = chunks.remainder();
        if !rest.is_empty() {
            let mut w = [0u8; 8];
            w[..rest.len()].copy_from_slice(rest);
            self.add(u64::from_le_bytes(w) ^ (rest.len() as u64) << 59);
        }
    }
    #[inline]
    fn write_u8(&mut self, n: u8) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u16(&mut self, n: u16) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u32(&mut self, n: u32) {
        self.add(u64::from(n));
    }
    #[inline]
    fn write_u64(&mut self, n: u64) {
        self.add(n);
    }
    #[inline]
    fn write_usize(&mut self, n: usize) {
        self.add(n as u64);
    }
    #[inline]
    fn finish(&self) -> u64 {
        self.0
    }
}

/// A `HashMap` hashed with [`FastHasher`].
pub type FastMap<K, V> = std::collections::HashMap<K, V, std::hash::BuildHasherDefault<FastHasher>>;

/// The 128 bits of a hyphenated UUID (`8-4-4-4-12` hex digits, either case).
pub fn parse_uuid(s: &str) -> Option<u128> {
    let b = s.as_bytes();
    if b.len() != 36 || [8, 13, 18, 23].iter().any(|&i| b[i] != b'-') {
        return None;
    }
    let mut v: u128 = 0;
    for (i, &c) in b.iter().enumerate() {
        if matches!(i, 8 | 13 | 18 | 23) {
            continue;
        }
        v = (v << 4) | u128::from(hex_digit(c)?);
    }
    Some(v)
}

/// `v` as a lower-case hyphenated UUID (the inverse of [`parse_uuid`]).
pub fn format_uuid(v: u128) -> String {
    const HEX: &[u8; 16] = b"0123456789abcdef";
    // Where each byte's two digits go; the hyphens (8, 13, 18, 23) stay. A byte at a time:
    // every request formats two ids, and this is a quarter of the digit-by-digit cost.
    const AT: [usize; 16] = [0, 2, 4, 6, 9, 11, 14, 16, 19, 21, 24, 26, 28, 30, 32, 34];
    let mut text = [b'-'; 36];
    for (b, at) in v.to_be_bytes().into_iter().zip(AT) {
        text[at] = HEX[usize::from(b >> 4)];
        text[at + 1] = HEX[usize::from(b & 0xf)];
    }
    // SAFETY: `text` holds ASCII hex digits and hyphens only, which are valid UTF-8.
    unsafe { String::from_utf8_unchecked(text.to_vec()) }
}

/// A random 64-bit value from std's randomly keyed hasher, the clock and the process id
/// (instance ids, publisher ids, temporary file names; not for anything secret).
pub fn random_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
    h.write_u32(std::process::id());
    h.finish()
}

/// A fresh random (version 4) UUID's bits: 128 bits of a per-thread wyrand stream seeded
/// from std's randomly keyed hasher (no RNG crate). Two keyed SipHash runs per UUID cost
/// ~1 K instructions; the stream costs a few dozen, and with a 64-bit state seeded randomly
/// per thread its UUIDs do not repeat in practice.
pub fn new_uuid() -> u128 {
    thread_local! {
        static STATE: std::cell::Cell<u64> = std::cell::Cell::new({
            use std::hash::{BuildHasher, Hasher};
            let mut h = std::collections::hash_map::RandomState::new().build_hasher();
            h.write_u128(std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos()));
            h.finish()
        });
    }
    let next = || {
        STATE.with(|s| {
            let x = s.get().wrapping_add(0xa076_1d64_78bd_642f);
            s.set(x);
            let m = u128::from(x) * u128::from(x ^ 0xe703_7ed1_a0b4_28db);
            ((m >> 64) as u64) ^ (m as u64)
        })
    };
    let (a, b) = (next(), next());
    // Version 4 in the third group's first digit, variant `10` in the fourth's top bits.
    let hi = (a & 0xffff_ffff_ffff_0fff) | 0x4000;
    let lo = (b & 0x3fff_ffff_ffff_ffff) | 0x8000_0000_0000_0000;
    (u128::from(hi) << 64) | u128::from(lo)
}

/// A fresh UUID-shaped random subject.
pub fn new_subject() -> String {
    crate::util::format_uuid(new_uuid())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_decode_as_1_6_1_decodes_them() {
        assert_eq!(percent_decode(b"index%2ecss").as_deref(), Some("index.css"));
        assert_eq!(percent_decode(b"%69ndex.css").as_deref(), Some("index.css"));
        assert_eq!(percent_decode(b"%2Findex.css").as_deref(), Some("/index.css"));
        assert_eq!(percent_decode(b"%zz").as_deref(), Some("%zz"));
        assert_eq!(percent_decode(b"%").as_deref(), Some("%"));
        assert_eq!(percent_decode(b"a%4").as_deref(), Some("a%4"));
        assert_eq!(percent_decode(b"%c3%a9").as_deref(), Some("é"));
        assert_eq!(percent_decode(b"a%ffb"), None);
    }

    proptest::proptest! {
        #[test]
        fn strings_are_written_as_serde_json_writes_them(text in "\\PC{0,40}|[\\x00-\\x7f]{0,40}") {
            let mut direct = b"x".to_vec();
            json_string(&mut direct, &text);
            proptest::prop_assert_eq!(&direct[1..], serde_json::to_vec(&text).unwrap());
        }
    }

    #[test]
    fn fast_hasher_tells_apart_tails_and_lengths_and_serves_a_map() {
        use std::hash::{BuildHasher, BuildHasherDefault};
        let h = |b: &[u8]| BuildHasherDefault::<FastHasher>::default().hash_one(b);
        assert_ne!(h(b"0123456789a"), h(b"0123456789b"));
        assert_ne!(h(b"ab"), h(b"ab\0"));
        assert_ne!(h(b""), h(b"\0"));
        let mut m: FastMap<String, usize> = FastMap::default();
        for i in 0..5_000 {
            m.insert(format_uuid(u128::from(i as u64) * 0x9e37_79b9_7f4a_7c15), i);
        }
        assert_eq!(m.len(), 5_000);
        assert!((0..5_000).all(|i| m[&format_uuid(u128::from(i as u64) * 0x9e37_79b9_7f4a_7c15)] == i));
    }

    #[test]
    fn uuids_round_trip_and_reject_other_shapes() {
        let s = "6730b46d-fc92-406c-82f2-81d054d421e7";
        let v = parse_uuid(s).unwrap();
        assert_eq!(v >> 96, 0x6730_b46d);
        assert_eq!(format_uuid(v), s);
        assert_eq!(parse_uuid("6730B46D-FC92-406C-82F2-81D054D421E7"), Some(v));
        assert_eq!(format_uuid(0), "00000000-0000-0000-0000-000000000000");
        assert_eq!(format_uuid(u128::MAX), "ffffffff-ffff-ffff-ffff-ffffffffffff");
        assert_eq!(parse_uuid("6730b46dfc92406c82f281d054d421e7"), None);
        assert_eq!(parse_uuid("6730b46d-fc92-406c-82f2-81d054d421eg"), None);
        assert_eq!(parse_uuid(""), None);
    }
}
