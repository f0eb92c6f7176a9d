//! A hand-written msgpack decoder for the hot frame of the response stream: the
//! `{"data": Annotated<LLMEngineOutput>, "complete_final": bool}` envelope of a Tokens
//! worker, one per generated token or so.
//!
//! Why not serde: decoding this small map through `rmp_serde` and the derived visitors cost
//! ~5.9 K instructions per frame (measured with callgrind: ~380 K of a ~1.4 M-instruction
//! 64-token streamed request), most of it in generic `deserialize_any` / `Option` dispatch.
//! Walking the bytes directly costs a small fraction of that.
//!
//! The fast path only ever answers for inputs it understands completely. Anything else —
//! an `error` object, `top_logprobs`, `tokens`, JSON-valued extras, binary strings, a struct
//! encoded as an array, a duplicate key, a type serde would reject — returns `None`, and the
//! caller decodes the frame with serde as before (which then yields the same value, or its
//! error). So for every input the result equals the serde decoder's: the tests compare both
//! on every captured frame and on random values.

use super::payload::{
    Annotated, CompletionUsage, FinishReason, LLMEngineOutput, OutputType, PromptTokensDetails, ResponseEnvelope,
};
use super::stream::Item;

/// The envelope decoded from `b` (all of it), or `None`: not on the fast path.
pub fn envelope(b: &[u8]) -> Option<ResponseEnvelope<Item>> {
    if let Some(env) = token_frame(b) {
        return Some(env);
    }
    let mut r = Reader { b, p: 0 };
    let n = r.map_len()?;
    let (mut data, mut complete_final) = (None, None);
    for _ in 0..n {
        match r.key()? {
            b"data" if data.is_none() => data = Some(if r.nil() { None } else { Some(r.annotated()?) }),
            b"complete_final" if complete_final.is_none() => complete_final = Some(r.bool()?),
            b"data" | b"complete_final" => return None,
            _ => r.skip()?,
        }
    }
    (r.p == b.len()).then_some(ResponseEnvelope { data: data.flatten(), complete_final: complete_final? })
}

/// What a Tokens worker sends for almost every generated token (Dynamo's mocker and engines
/// serialize the same struct the same way): an item whose output has token ids and nothing
/// else, every other always-serialized field nil, and `complete_final: false`; its first and
/// last frames may also set `finish_reason` and end with `completion_usage` (10 keys instead
/// of 9). The runs between those values never change, so such a frame is recognised by
/// comparing them whole and reading only the ids, the reason and the usage, instead of
/// walking ~14 keys (~1.7–1.9 K instructions a frame, ~100 K of a 64-token streamed
/// request). Anything that differs by a byte takes the general path.
const TOKEN_HEAD: &[u8] = b"\x82\xa4data\x81\xa4data";
const TOKEN_MID: &[u8] = b"\xa6tokens\xc0\xa4text\xc0\xaboutput_type\xa4text\xadcum_log_probs\xc0\xa9log_probs\xc0\
\xactop_logprobs\xc0\xadfinish_reason";
const TOKEN_INDEX: &[u8] = b"\xa5index\xc0";
const TOKEN_USAGE: &[u8] = b"\xb0completion_usage";
const TOKEN_FINAL: &[u8] = b"\xaecomplete_final\xc2";

fn token_frame(b: &[u8]) -> Option<ResponseEnvelope<Item>> {
    let (&keys, rest) = b.strip_prefix(TOKEN_HEAD)?.split_first()?;
    let with_usage = match keys {
        0x89 => false,
        0x8a => true,
        _ => return None,
    };
    let body = rest.strip_prefix(b"\xa9token_ids".as_slice())?.strip_suffix(TOKEN_FINAL)?;
    let mut r = Reader { b: body, p: 0 };
    let mut out = Box::<LLMEngineOutput>::default();
    r.u32s(&mut out.token_ids)?;
    if r.take(TOKEN_MID.len())? != TOKEN_MID {
        return None;
    }
    if !r.nil() {
        out.finish_reason = Some(r.finish_reason()?);
    }
    if r.take(TOKEN_INDEX.len())? != TOKEN_INDEX {
        return None;
    }
    if with_usage {
        if r.take(TOKEN_USAGE.len())? != TOKEN_USAGE || r.nil() {
            return None;
        }
        out.completion_usage = Some(r.usage()?);
    }
    (r.p == body.len()).then(|| ResponseEnvelope::item(Annotated::from_data(out)))
}

/// Byte-string equality for short keys, compared inline 8 bytes at a time (a `memcmp` call
/// per key cost more than the comparison).
#[inline(always)]
fn same(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    // Keys are short: compare 8 bytes at a time, the tail byte by byte.
    let (mut x, mut y) = (a, b);
    while x.len() >= 8 {
        let (xa, xr) = x.split_at(8);
        let (ya, yr) = y.split_at(8);
        if u64::from_ne_bytes(xa.try_into().unwrap_or_default())
            != u64::from_ne_bytes(ya.try_into().unwrap_or_default())
        {
            return false;
        }
        (x, y) = (xr, yr);
    }
    x == y
}

struct Reader<'a> {
    b: &'a [u8],
    p: usize,
}

impl<'a> Reader<'a> {
    #[inline(always)]
    fn peek(&self) -> Option<u8> {
        self.b.get(self.p).copied()
    }

    #[inline(always)]
    fn byte(&mut self) -> Option<u8> {
        let m = self.peek()?;
        self.p += 1;
        Some(m)
    }

    #[inline(always)]
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let s = self.b.get(self.p..self.p.checked_add(n)?)?;
        self.p += n;
        Some(s)
    }

    fn be(&mut self, n: usize) -> Option<u64> {
        Some(self.take(n)?.iter().fold(0u64, |acc, &x| (acc << 8) | u64::from(x)))
    }

    /// Consumes a nil if one is next.
    #[inline(always)]
    fn nil(&mut self) -> bool {
        let is = self.peek() == Some(0xc0);
        self.p += usize::from(is);
        is
    }

    fn map_len(&mut self) -> Option<usize> {
        match self.byte()? {
            m @ 0x80..=0x8f => Some(usize::from(m & 0x0f)),
            0xde => Some(self.be(2)? as usize),
            0xdf => Some(self.be(4)? as usize),
            _ => None,
        }
    }

    fn array_len(&mut self) -> Option<usize> {
        match self.byte()? {
            m @ 0x90..=0x9f => Some(usize::from(m & 0x0f)),
            0xdc => Some(self.be(2)? as usize),
            0xdd => Some(self.be(4)? as usize),
            _ => None,
        }
    }

    /// A short string's bytes, for keys and enum names: only ever compared with ASCII
    /// literals, so no UTF-8 check is needed.
    #[inline(always)]
    fn key(&mut self) -> Option<&'a [u8]> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be(1)? as usize,
            _ => return None,
        };
        self.take(n)
    }

    fn str(&mut self) -> Option<&'a str> {
        let n = match self.byte()? {
            m @ 0xa0..=0xbf => usize::from(m & 0x1f),
            0xd9 => self.be(1)? as usize,
            0xda => self.be(2)? as usize,
            0xdb => self.be(4)? as usize,
            _ => return None,
        };
        std::str::from_utf8(self.take(n)?).ok()
    }

    fn bool(&mut self) -> Option<bool> {
        match self.byte()? {
            0xc2 => Some(false),
            0xc3 => Some(true),
            _ => None,
        }
    }

    /// Any msgpack integer, as i128 (so every width and sign fits).
    fn int(&mut self) -> Option<i128> {
        Some(match self.byte()? {
            m @ 0x00..=0x7f => i128::from(m),
            m @ 0xe0..=0xff => i128::from(m as i8),
            0xcc => i128::from(self.be(1)?),
            0xcd => i128::from(self.be(2)?),
            0xce => i128::from(self.be(4)?),
            0xcf => i128::from(self.be(8)?),
            0xd0 => i128::from(self.be(1)? as u8 as i8),
            0xd1 => i128::from(self.be(2)? as u16 as i16),
            0xd2 => i128::from(self.be(4)? as u32 as i32),
            0xd3 => i128::from(self.be(8)? as i64),
            _ => return None,
        })
    }

    fn u32(&mut self) -> Option<u32> {
        u32::try_from(self.int()?).ok()
    }

    fn f64(&mut self) -> Option<f64> {
        match self.peek()? {
            0xca => {
                self.p += 1;
                Some(f64::from(f32::from_bits(self.be(4)? as u32)))
            }
            0xcb => {
                self.p += 1;
                Some(f64::from_bits(self.be(8)?))
            }
            _ => {
                let i = self.int()?;
                // serde's f64 accepts integers (as `i64` / `u64` casts).
                match i64::try_from(i) {
                    Ok(v) => Some(v as f64),
                    Err(_) => Some(u64::try_from(i).ok()? as f64),
                }
            }
        }
    }

    /// An array of u32s, appended to `into`.
    fn u32s(&mut self, into: &mut Vec<u32>) -> Option<()> {
        let n = self.array_len()?;
        into.reserve_exact(n.min(4096));
        for _ in 0..n {
            into.push(self.u32()?);
        }
        Some(())
    }

    fn opt_u32(&mut self) -> Option<Option<u32>> {
        if self.nil() {
            return Some(None);
        }
        Some(Some(self.u32()?))
    }

    /// Skips one value of any type.
    fn skip(&mut self) -> Option<()> {
        let n = super::payload::msgpack_len(self.b.get(self.p..)?)?;
        self.p += n;
        Some(())
    }

    /// `Annotated<LLMEngineOutput>` without an `error` object.
    fn annotated(&mut self) -> Option<Item> {
        const FIELDS: &[&[u8]] = &[b"data", b"id", b"event", b"comment", b"error"];
        let n = self.map_len()?;
        let mut a = Annotated { data: None, id: None, event: None, comment: None, error: None };
        let mut seen = 0u32;
        for _ in 0..n {
            let Some(field) = self.field(FIELDS, &mut seen)? else { continue };
            if self.nil() {
                continue;
            }
            match field {
                0 => a.data = Some(self.output()?),
                1 => a.id = Some(self.str()?.to_owned()),
                2 => a.event = Some(self.str()?.to_owned()),
                3 => {
                    let n = self.array_len()?;
                    let mut c = Vec::with_capacity(n.min(16));
                    for _ in 0..n {
                        c.push(self.str()?.to_owned());
                    }
                    a.comment = Some(c);
                }
                _ => return None, // an error object: the serde path
            }
        }
        Some(a)
    }

    /// Built in its box (a few hundred bytes: filled in place rather than moved in).
    fn output(&mut self) -> Option<Box<LLMEngineOutput>> {
        // Declaration order (the order workers send them). `tokens`, `top_logprobs` and the
        // JSON-valued extras are only taken as nil; a value sends the frame to serde.
        const FIELDS: &[&[u8]] = &[
            b"token_ids",
            b"tokens",
            b"text",
            b"output_type",
            b"cum_log_probs",
            b"log_probs",
            b"top_logprobs",
            b"finish_reason",
            b"index",
            b"completion_usage",
            b"stop_reason",
            b"disaggregated_params",
            b"extra_args",
        ];
        let n = self.map_len()?;
        let mut o = Box::<LLMEngineOutput>::default();
        let mut seen = 0u32;
        for _ in 0..n {
            let Some(field) = self.field(FIELDS, &mut seen)? else { continue };
            // Present and nil: `None`, as serde gives (but `token_ids` and `output_type` are
            // not optional: nil there is serde's error, so the serde path).
            if field != 0 && field != 3 && self.nil() {
                continue;
            }
            match field {
                0 => self.u32s(&mut o.token_ids)?,
                2 => o.text = Some(self.str()?.to_owned()),
                3 => {
                    o.output_type = match self.key()? {
                        b"text" => OutputType::Text,
                        b"image" => OutputType::Image,
                        b"video" => OutputType::Video,
                        b"audio" => OutputType::Audio,
                        _ => return None,
                    }
                }
                4 => o.cum_log_probs = Some(self.f64()?),
                5 => {
                    let n = self.array_len()?;
                    let mut v = Vec::with_capacity(n.min(4096));
                    for _ in 0..n {
                        v.push(self.f64()?);
                    }
                    o.log_probs = Some(v);
                }
                7 => o.finish_reason = Some(self.finish_reason()?),
                8 => o.index = Some(self.u32()?),
                9 => o.completion_usage = Some(self.usage()?),
                _ => return None,
            }
        }
        Some(o)
    }

    /// A `finish_reason` given as a string (an `error` object is left to serde).
    fn finish_reason(&mut self) -> Option<FinishReason> {
        Some(match self.key()? {
            b"eos" => FinishReason::Eos,
            b"stop" => FinishReason::Stop,
            b"length" => FinishReason::Length,
            b"cancelled" | b"abort" => FinishReason::Cancelled,
            b"content_filter" => FinishReason::ContentFilter,
            _ => return None,
        })
    }

    fn usage(&mut self) -> Option<CompletionUsage> {
        const FIELDS: &[&[u8]] = &[
            b"prompt_tokens",
            b"completion_tokens",
            b"total_tokens",
            b"prompt_tokens_details",
            b"completion_tokens_details",
        ];
        let n = self.map_len()?;
        let mut u = CompletionUsage::default();
        let mut seen = 0u32;
        for _ in 0..n {
            let Some(field) = self.field(FIELDS, &mut seen)? else { continue };
            match field {
                0 => u.prompt_tokens = self.u32()?,
                1 => u.completion_tokens = self.u32()?,
                2 => u.total_tokens = self.u32()?,
                _ if self.nil() => {}
                3 => u.prompt_tokens_details = Some(self.details()?),
                _ => return None,
            }
        }
        Some(u)
    }

    fn details(&mut self) -> Option<PromptTokensDetails> {
        const FIELDS: &[&[u8]] = &[b"audio_tokens", b"cached_tokens"];
        let n = self.map_len()?;
        let mut d = PromptTokensDetails::default();
        let mut seen = 0u32;
        for _ in 0..n {
            let Some(field) = self.field(FIELDS, &mut seen)? else { continue };
            let v = self.opt_u32()?;
            if field == 0 {
                d.audio_tokens = v;
            } else {
                d.cached_tokens = v;
            }
        }
        Some(d)
    }

    /// The next key of a map whose fields are `names`: `Some(Some(i))` for `names[i]` seen
    /// for the first time, `Some(None)` for a key serde ignores (its value skipped), `None`
    /// for a duplicate (serde's error) or a key that is not a short string.
    ///
    /// Workers send a struct's keys in declaration order, so the field after the highest one
    /// seen so far is tried first (one comparison per key instead of a scan).
    #[inline(always)]
    fn field(&mut self, names: &[&[u8]], seen: &mut u32) -> Option<Option<usize>> {
        let key = self.key()?;
        let next = (32 - seen.leading_zeros()) as usize;
        let found = match names.get(next) {
            Some(n) if same(n, key) => Some(next),
            _ => names.iter().position(|n| same(n, key)),
        };
        let Some(i) = found else {
            self.skip()?;
            return Some(None);
        };
        if *seen & (1 << i) != 0 {
            return None;
        }
        *seen |= 1 << i;
        Some(Some(i))
    }
}
#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::payload::{Codec, TopLogprob};

    fn serde_path(b: &[u8]) -> Option<ResponseEnvelope<Item>> {
        let mut de = rmp_serde::Deserializer::from_read_ref(b);
        let v: ResponseEnvelope<Item> = serde::Deserialize::deserialize(&mut de).ok()?;
        (crate::plane::payload::msgpack_len(b) == Some(b.len())).then_some(v)
    }

    fn both(env: &ResponseEnvelope<Item>) -> (Vec<u8>, Option<ResponseEnvelope<Item>>) {
        let b = Codec::Msgpack.encode(env).unwrap();
        let fast = envelope(&b);
        (b, fast)
    }

    #[test]
    fn a_token_item_with_usage_decodes_as_serde_does() {
        let out = LLMEngineOutput {
            token_ids: vec![1, 300, 70_000, u32::MAX],
            text: Some("héllo".into()),
            cum_log_probs: Some(-1.25),
            log_probs: Some(vec![-0.5, -0.75]),
            finish_reason: Some(FinishReason::Length),
            index: Some(0),
            completion_usage: Some(CompletionUsage {
                prompt_tokens: 1008,
                completion_tokens: 64,
                total_tokens: 1072,
                prompt_tokens_details: Some(PromptTokensDetails { audio_tokens: None, cached_tokens: Some(512) }),
                completion_tokens_details: None,
            }),
            ..Default::default()
        };
        let env = ResponseEnvelope::item(Annotated { id: Some("7".into()), ..Annotated::from_data(Box::new(out)) });
        let (b, fast) = both(&env);
        assert_eq!(fast.as_ref(), Some(&env));
        assert_eq!(fast, serde_path(&b));
        let (b, fast) = both(&ResponseEnvelope::complete_final());
        assert_eq!(fast, Some(ResponseEnvelope::complete_final()));
        assert_eq!(fast, serde_path(&b));
    }

    #[test]
    fn what_the_fast_path_leaves_to_serde() {
        let with = |o: LLMEngineOutput| ResponseEnvelope::item(Annotated::from_data(Box::new(o)));
        let rare = [
            with(LLMEngineOutput { tokens: Some(vec![Some("a".into())]), ..Default::default() }),
            with(LLMEngineOutput {
                top_logprobs: Some(vec![vec![TopLogprob { rank: 1, ..Default::default() }]]),
                ..Default::default()
            }),
            with(LLMEngineOutput { finish_reason: Some(FinishReason::Error("x".into())), ..Default::default() }),
            with(LLMEngineOutput { stop_reason: Some(serde_json::json!("</s>")), ..Default::default() }),
            ResponseEnvelope::item(Annotated {
                error: Some(Box::new(crate::plane::payload::DynamoError { message: "m".into(), ..Default::default() })),
                ..Annotated::from_data(Box::default())
            }),
        ];
        for env in rare {
            let (b, fast) = both(&env);
            assert_eq!(fast, None, "{env:?}");
            assert_eq!(serde_path(&b), Some(env));
        }
        // Trailing bytes, a truncated map, a duplicate key, a missing `complete_final`.
        let (mut b, _) = both(&ResponseEnvelope::complete_final());
        b.push(0xc0);
        assert_eq!(envelope(&b), None);
        assert_eq!(envelope(&[0x82, 0xa4, b'd', b'a', b't', b'a']), None);
        let dup = [0x82, 0xae].iter().chain(b"complete_final").chain(&[0xc3, 0xae]).chain(b"complete_final");
        let mut dup: Vec<u8> = dup.copied().collect();
        dup.push(0xc2);
        assert_eq!(envelope(&dup), None);
        assert_eq!(serde_path(&dup), None);
        assert_eq!(envelope(&[0x80]), None);
    }

    /// A plain token frame's bytes before and after its id array.
    const PLAIN_HEAD: &[u8] = b"\x82\xa4data\x81\xa4data\x89\xa9token_ids";
    const PLAIN_TAIL: &[u8] =
        b"\xa6tokens\xc0\xa4text\xc0\xaboutput_type\xa4text\xadcum_log_probs\xc0\xa9log_probs\xc0\
\xactop_logprobs\xc0\xadfinish_reason\xc0\xa5index\xc0\xaecomplete_final\xc2";

    #[test]
    fn a_plain_token_frame_is_what_serde_writes_for_a_token_only_item() {
        for ids in [vec![], vec![0], vec![127, 128, 255, 256, 65_535, 65_536, u32::MAX], (0..300).collect()] {
            let env = ResponseEnvelope::item(Annotated::from_data(Box::new(LLMEngineOutput {
                token_ids: ids,
                ..Default::default()
            })));
            let b = Codec::Msgpack.encode(&env).unwrap();
            assert_eq!(token_frame(&b).as_ref(), Some(&env), "{b:x?}");
            assert_eq!(serde_path(&b).as_ref(), Some(&env));
        }
        // The captured mocker stream's second frame is one.
        let captured = include_bytes!("../../tests/data/plane/stream1.resp.bin");
        let at = captured.windows(PLAIN_HEAD.len()).position(|w| w == PLAIN_HEAD).expect("a plain frame");
        let end =
            at + captured[at..].windows(PLAIN_TAIL.len()).position(|w| w == PLAIN_TAIL).unwrap() + PLAIN_TAIL.len();
        let env = token_frame(&captured[at..end]).expect("the captured frame");
        assert_eq!(Some(env), serde_path(&captured[at..end]));
        // One byte off anywhere around the ids: not this path (and the general one agrees
        // with serde, whatever it answers).
        let b = Codec::Msgpack
            .encode(&ResponseEnvelope::item(Annotated::from_data(Box::new(LLMEngineOutput {
                token_ids: vec![7],
                ..Default::default()
            }))))
            .unwrap();
        for i in 0..b.len() {
            let mut c = b.clone();
            c[i] ^= 0x01;
            if token_frame(&c).is_some() {
                assert!(i >= PLAIN_HEAD.len() && i < b.len() - PLAIN_TAIL.len(), "byte {i} changed");
            }
            if let Some(fast) = envelope(&c) {
                assert_eq!(Some(fast), serde_path(&c), "byte {i}");
            }
        }
    }

    #[test]
    fn the_captured_first_and_last_frames_take_the_token_frame_path() {
        let captured = include_bytes!("../../tests/data/plane/req1.resp.bin");
        let frames: Vec<&[u8]> = captured
            .windows(TOKEN_HEAD.len())
            .enumerate()
            .filter(|(_, w)| *w == TOKEN_HEAD)
            .map(|(at, _)| {
                let end = at + captured[at..].windows(TOKEN_FINAL.len()).position(|w| w == TOKEN_FINAL).unwrap();
                &captured[at..end + TOKEN_FINAL.len()]
            })
            .collect();
        let with_usage: Vec<_> = frames.iter().filter(|f| f[TOKEN_HEAD.len()] == 0x8a).collect();
        assert_eq!(with_usage.len(), 2, "the mocker's first and last frames carry usage");
        for f in with_usage {
            let env = token_frame(f).expect("a token frame");
            assert!(env.data.as_ref().and_then(|a| a.data.as_ref()).is_some_and(|o| o.completion_usage.is_some()));
            assert_eq!(Some(env), serde_path(f));
            // One byte off anywhere: whatever the fast paths answer, serde answers the same.
            for i in 0..f.len() {
                let mut c = f.to_vec();
                c[i] ^= 0x01;
                if let Some(fast) = envelope(&c) {
                    assert_eq!(Some(fast), serde_path(&c), "byte {i}");
                }
            }
        }
    }

    /// Usage from (prompt, completion, cached) as workers report it.
    fn usage_of((p, c, cached): (u32, u32, Option<u32>)) -> CompletionUsage {
        CompletionUsage {
            prompt_tokens: p,
            completion_tokens: c,
            total_tokens: p + c,
            prompt_tokens_details: cached.map(|c| PromptTokensDetails { audio_tokens: None, cached_tokens: Some(c) }),
            completion_tokens_details: None,
        }
    }

    /// The finish reasons a string can give, and none (for 0 and from 6 on).
    fn reason(i: usize) -> Option<FinishReason> {
        [
            FinishReason::Eos,
            FinishReason::Stop,
            FinishReason::Length,
            FinishReason::Cancelled,
            FinishReason::ContentFilter,
        ]
        .get(i.wrapping_sub(1))
        .cloned()
    }

    proptest::proptest! {
        /// Items with ids, a finish reason and usage and nothing else: the token-frame path
        /// answers, as serde does.
        #[test]
        fn token_frames_equal_serde(
            ids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..20),
            fin in 0usize..6,
            usage in proptest::option::of((0u32..70_000, 0u32..70_000, proptest::option::of(0u32..5000))),
        ) {
            let finish_reason = reason(fin);
            let env = ResponseEnvelope::item(Annotated::from_data(Box::new(LLMEngineOutput {
                token_ids: ids,
                finish_reason,
                completion_usage: usage.map(usage_of),
                ..Default::default()
            })));
            let b = Codec::Msgpack.encode(&env).unwrap();
            proptest::prop_assert_eq!(token_frame(&b), Some(env.clone()));
            proptest::prop_assert_eq!(serde_path(&b), Some(env));
        }

        /// Token-only items of any ids: the plain-frame path answers, as serde does.
        #[test]
        fn plain_frames_equal_serde(ids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..40)) {
            let env = ResponseEnvelope::item(Annotated::from_data(Box::new(LLMEngineOutput {
                token_ids: ids,
                ..Default::default()
            })));
            let b = Codec::Msgpack.encode(&env).unwrap();
            proptest::prop_assert_eq!(token_frame(&b), Some(env.clone()));
            proptest::prop_assert_eq!(serde_path(&b), Some(env));
        }

        /// Random outputs: the fast path's answer is always serde's.
        #[test]
        fn fast_equals_serde(
            ids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..20),
            text in proptest::option::of(".{0,12}"),
            lp in proptest::option::of(proptest::collection::vec(-100.0f64..0.0, 0..4)),
            cum in proptest::option::of(-1e6f64..0.0),
            fin in 0usize..7,
            index in proptest::option::of(proptest::prelude::any::<u32>()),
            usage in proptest::option::of((0u32..5000, 0u32..5000, proptest::option::of(0u32..5000))),
            id in proptest::option::of("[a-z0-9]{0,8}"),
            comment in proptest::option::of(proptest::collection::vec("[a-z ]{0,6}", 0..3)),
        ) {
            let finish_reason = reason(fin);
            let out = LLMEngineOutput {
                token_ids: ids,
                text,
                log_probs: lp,
                cum_log_probs: cum,
                finish_reason,
                index,
                completion_usage: usage.map(usage_of),
                ..Default::default()
            };
            let env = ResponseEnvelope::item(Annotated { id, comment, ..Annotated::from_data(Box::new(out)) });
            let (b, fast) = both(&env);
            proptest::prop_assert_eq!(fast.as_ref(), Some(&env));
            proptest::prop_assert_eq!(fast, serde_path(&b));
        }

        /// Arbitrary bytes: whenever the fast path answers, serde answers the same.
        #[test]
        fn garbage_answers_agree(b in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..64)) {
            if let Some(fast) = envelope(&b) {
                proptest::prop_assert_eq!(Some(fast), serde_path(&b));
            }
        }
    }
}
