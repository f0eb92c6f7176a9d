//! Base64 (RFC 4648): standard-alphabet encoding with padding, a strict decoder for standard
//! padded text (what OpenAI's and Dynamo's payloads carry) and a lenient one (either alphabet,
//! padding optional: etcd's JSON gateway). Pure functions, any thread.

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Standard base64 with padding.
pub fn encode(bytes: &[u8]) -> String {
    let mut out = String::with_capacity(bytes.len().div_ceil(3) * 4);
    for group in bytes.chunks(3) {
        let b = [group[0], *group.get(1).unwrap_or(&0), *group.get(2).unwrap_or(&0)];
        let n = u32::from(b[0]) << 16 | u32::from(b[1]) << 8 | u32::from(b[2]);
        for i in 0..4 {
            if i <= group.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}

/// The value of one base64 symbol of either alphabet.
fn symbol(c: u8, url_safe: bool) -> Option<u32> {
    Some(u32::from(match c {
        b'A'..=b'Z' => c - b'A',
        b'a'..=b'z' => c - b'a' + 26,
        b'0'..=b'9' => c - b'0' + 52,
        b'+' => 62,
        b'/' => 63,
        b'-' if url_safe => 62,
        b'_' if url_safe => 63,
        _ => return None,
    }))
}

/// Decodes standard base64 with canonical padding; `None` for anything else.
pub fn decode(text: &str) -> Option<Vec<u8>> {
    let t = text.as_bytes();
    if t.len() % 4 != 0 {
        return None;
    }
    let pad = t.iter().rev().take_while(|&&c| c == b'=').count();
    if pad > 2 {
        return None;
    }
    let out = decode_symbols(&t[..t.len() - pad], false)?;
    // Canonical: the padded group's unused bits are zero.
    (encode(&out).len() == t.len() && encode(&out).as_bytes() == t).then_some(out)
}

/// Decodes standard or URL-safe base64, padded or not; the offending byte otherwise.
pub fn decode_lenient(text: &str) -> Result<Vec<u8>, u8> {
    let body = text.trim_end_matches('=');
    if let Some(&c) = body.as_bytes().iter().find(|&&c| symbol(c, true).is_none()) {
        return Err(c);
    }
    decode_symbols(body.as_bytes(), true).ok_or(b'=')
}

fn decode_symbols(text: &[u8], url_safe: bool) -> Option<Vec<u8>> {
    let mut out = Vec::with_capacity(text.len() / 4 * 3 + 2);
    let (mut acc, mut bits) = (0u32, 0u32);
    for &c in text {
        acc = acc << 6 | symbol(c, url_safe)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_refusals() {
        for (plain, coded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg==")] {
            assert_eq!(encode(plain.as_bytes()), coded);
            assert_eq!(decode(coded).unwrap(), plain.as_bytes());
            assert_eq!(decode_lenient(coded.trim_end_matches('=')).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(decode(&encode(&all)).unwrap(), all);
        assert_eq!(decode("%%%"), None);
        assert_eq!(decode("Zg="), None, "not a multiple of 4");
        assert_eq!(decode("Zh=="), None, "not canonical");
        assert_eq!(decode("Zm-v"), None, "URL-safe alphabet");
        assert_eq!(decode_lenient("Zm-v").unwrap(), decode_lenient("Zm+v").unwrap());
        assert_eq!(decode_lenient("Z%"), Err(b'%'));
    }
}
