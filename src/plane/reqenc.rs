//! The msgpack body of a `PreprocessedRequest`, written mostly by hand.
//!
//! Why: `rmp_serde` writes a prompt's token ids one `serialize_u32` call at a time, ~80
//! instructions each (callgrind: ~80 K of a W2 request's ~1.1 M for a 1,000-token prompt).
//! Here the top-level map, the model name and the two id arrays are written directly; the
//! small nested structs (stop conditions, sampling and output options, routing hints, the
//! router override) still go through `rmp_serde`, so their bytes cannot drift from the
//! derived `Serialize`. The output is byte-identical to `rmp_serde::to_vec_named` of the
//! whole struct (tested below against it).
//!
//! The JSON control message of a request is written here too ([`control_single_in_many_out`]):
//! building a `RequestControlMessage`, serializing its `connection_info.info` into a string
//! and serializing that again cost ~7 K instructions a request (a twentieth of a small
//! request); the same bytes written directly cost a few hundred.

use super::payload::{Codec, OutputOptions, PreprocessedRequest, SamplingOptions, StopConditions};
use super::PlaneError;
use crate::util::{json_plain, json_string};

/// The control message of a unary-in / streaming-out request, appended to `out` as
/// `serde_json::to_vec(&RequestControlMessage::single_in_many_out(id, codec, &info))` writes
/// it, where `info` is the `TcpStreamInfo { address, subject, context, stream_type: Response }`.
pub fn control_single_in_many_out(
    out: &mut Vec<u8>,
    id: &str,
    codec: Codec,
    address: &str,
    subject: &str,
    context: &str,
) {
    out.reserve(260 + id.len() + address.len() + subject.len() + context.len());
    out.extend_from_slice(b"{\"id\":");
    json_string(out, id);
    out.extend_from_slice(b",\"request_type\":\"single_in\",\"response_type\":\"many_out\",\"payload_codec\":\"");
    out.extend_from_slice(codec.as_str().as_bytes());
    out.extend_from_slice(b"\",\"connection_info\":{\"transport\":\"tcp_server\",\"info\":");
    if [address, subject, context].iter().all(|s| json_plain(s.as_bytes())) {
        // The usual case (an address and two UUIDs): the inner JSON's quotes, escaped once.
        out.extend_from_slice(br#""{\"address\":\""#);
        out.extend_from_slice(address.as_bytes());
        out.extend_from_slice(br#"\",\"subject\":\""#);
        out.extend_from_slice(subject.as_bytes());
        out.extend_from_slice(br#"\",\"context\":\""#);
        out.extend_from_slice(context.as_bytes());
        out.extend_from_slice(br#"\",\"stream_type\":\"response\"}""#);
    } else {
        let mut info = Vec::with_capacity(80 + address.len() + subject.len() + context.len());
        info.extend_from_slice(b"{\"address\":");
        json_string(&mut info, address);
        info.extend_from_slice(b",\"subject\":");
        json_string(&mut info, subject);
        info.extend_from_slice(b",\"context\":");
        json_string(&mut info, context);
        info.extend_from_slice(b",\"stream_type\":\"response\"}");
        // Built from UTF-8 pieces and ASCII: always UTF-8.
        json_string(out, std::str::from_utf8(&info).unwrap_or_default());
    }
    out.extend_from_slice(b"}}");
}

/// `req` as `rmp_serde::to_vec_named(req)` encodes it.
pub fn preprocessed_request(req: &PreprocessedRequest) -> Result<Vec<u8>, PlaneError> {
    let mut out = Vec::with_capacity(256 + req.model.len() + 3 * req.token_ids.len());
    let err = |e: rmp_serde::encode::Error| PlaneError::codec("msgpack body", e);
    // The derived `Serialize` sends every key but `routing` and the trailing optional ones,
    // which are skipped when `None`.
    let optional = [
        req.routing.is_some(),
        req.prefill_result.is_some(),
        req.bootstrap_info.is_some(),
        req.extra_args.is_some(),
        req.router.is_some(),
        req.mm_processor_kwargs.is_some(),
        req.media_io_kwargs.is_some(),
        req.request_timestamp_ms.is_some(),
    ];
    let keys = 9 + optional.iter().filter(|&&b| b).count();
    if keys < 16 {
        out.push(0x80 | keys as u8);
    } else {
        out.push(0xde); // map 16
        out.extend_from_slice(&(keys as u16).to_be_bytes());
    }
    key(&mut out, "model");
    str(&mut out, &req.model);
    key(&mut out, "token_ids");
    u32_array(&mut out, &req.token_ids);
    LAST.with(|last| {
        let mut last = last.borrow_mut();
        key(&mut out, "stop_conditions");
        remembered(&mut out, &mut last.stop, &req.stop_conditions, |a, b| a == b).map_err(err)?;
        key(&mut out, "sampling_options");
        remembered(&mut out, &mut last.sampling, &req.sampling_options, same_sampling).map_err(err)?;
        key(&mut out, "output_options");
        remembered(&mut out, &mut last.output, &req.output_options, |a, b| a == b).map_err(err)
    })?;
    key(&mut out, "eos_token_ids");
    u32_array(&mut out, &req.eos_token_ids);
    key(&mut out, "mdc_sum");
    match &req.mdc_sum {
        Some(s) => str(&mut out, s),
        None => out.push(0xc0),
    }
    key(&mut out, "annotations");
    array_len(&mut out, req.annotations.len());
    for a in &req.annotations {
        str(&mut out, a);
    }
    if let Some(r) = &req.routing {
        key(&mut out, "routing");
        rmp_serde::encode::write_named(&mut out, r).map_err(err)?;
    }
    key(&mut out, "router_config_override");
    rmp_serde::encode::write_named(&mut out, &req.router_config_override).map_err(err)?;
    if let Some(p) = &req.prefill_result {
        key(&mut out, "prefill_result");
        rmp_serde::encode::write_named(&mut out, p).map_err(err)?;
    }
    if let Some(b) = &req.bootstrap_info {
        key(&mut out, "bootstrap_info");
        rmp_serde::encode::write_named(&mut out, b).map_err(err)?;
    }
    let values = [
        ("extra_args", &req.extra_args),
        ("router", &req.router),
        ("mm_processor_kwargs", &req.mm_processor_kwargs),
        ("media_io_kwargs", &req.media_io_kwargs),
    ];
    for (name, value) in values {
        if let Some(v) = value {
            key(&mut out, name);
            rmp_serde::encode::write_named(&mut out, v).map_err(err)?;
        }
    }
    if let Some(ts) = req.request_timestamp_ms {
        key(&mut out, "request_timestamp_ms");
        rmp_serde::encode::write_named(&mut out, &ts).map_err(err)?;
    }
    Ok(out)
}

thread_local! {
    /// The last nested options encoded on this thread, with their bytes.
    static LAST: std::cell::RefCell<Last> = std::cell::RefCell::default();
}

/// Requests from one client mostly repeat their options: the nested structs are encoded
/// through `rmp_serde` (~3 K instructions for the three) only when they differ from the
/// previous request's on this thread; otherwise its bytes are copied.
#[derive(Default)]
struct Last {
    stop: Option<(StopConditions, Vec<u8>)>,
    sampling: Option<(SamplingOptions, Vec<u8>)>,
    output: Option<(OutputOptions, Vec<u8>)>,
}

/// `value` encoded into `out`: the bytes in `slot` when `same` holds for its value, else
/// freshly (and kept in `slot`).
fn remembered<T: serde::Serialize + Clone>(
    out: &mut Vec<u8>,
    slot: &mut Option<(T, Vec<u8>)>,
    value: &T,
    same: impl Fn(&T, &T) -> bool,
) -> Result<(), rmp_serde::encode::Error> {
    if let Some((last, bytes)) = slot {
        if same(last, value) {
            out.extend_from_slice(bytes);
            return Ok(());
        }
    }
    let start = out.len();
    rmp_serde::encode::write_named(out, value)?;
    *slot = Some((value.clone(), out[start..].to_vec()));
    Ok(())
}

/// Equal options that also encode the same: floats equal bit for bit (`-0.0 == 0.0`, but
/// the bytes differ), no JSON value (whose numbers compare the same way).
fn same_sampling(a: &SamplingOptions, b: &SamplingOptions) -> bool {
    let bits = |o: &SamplingOptions| {
        [
            o.presence_penalty,
            o.frequency_penalty,
            o.repetition_penalty,
            o.temperature,
            o.top_p,
            o.min_p,
            o.length_penalty,
        ]
        .map(|f| f.map(f32::to_bits))
    };
    a.guided_decoding.is_none() && a == b && bits(a) == bits(b)
}

/// A key (always shorter than 32 bytes: a fixstr).
fn key(out: &mut Vec<u8>, k: &str) {
    debug_assert!(k.len() < 32);
    out.push(0xa0 | k.len() as u8);
    out.extend_from_slice(k.as_bytes());
}

/// A string in its shortest form, as `rmp::encode::write_str` writes it.
fn str(out: &mut Vec<u8>, s: &str) {
    let n = s.len();
    if n < 32 {
        out.push(0xa0 | n as u8);
    } else if n < 256 {
        out.extend_from_slice(&[0xd9, n as u8]);
    } else if n < 65_536 {
        out.push(0xda);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdb);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
    out.extend_from_slice(s.as_bytes());
}

fn array_len(out: &mut Vec<u8>, n: usize) {
    if n < 16 {
        out.push(0x90 | n as u8);
    } else if n < 65_536 {
        out.push(0xdc);
        out.extend_from_slice(&(n as u16).to_be_bytes());
    } else {
        out.push(0xdd);
        out.extend_from_slice(&(n as u32).to_be_bytes());
    }
}

/// Each id in its shortest unsigned form (`rmp::encode::write_uint`). Written into reserved
/// space eight bytes at a time (marker and big-endian value packed in one word, the cursor
/// advanced by the form's length) rather than pushed byte by byte: a 1,000-token prompt cost
/// ~24 instructions per id the other way.
fn u32_array(out: &mut Vec<u8>, ids: &[u32]) {
    array_len(out, ids.len());
    let start = out.len();
    // Five bytes per id at most, plus slack for the last eight-byte store.
    out.resize(start + 5 * ids.len() + 8, 0);
    let buf = out[start..].as_mut_ptr();
    let mut at = 0;
    for &v in ids {
        // The form's bytes in memory order, as a little-endian word.
        let (word, len) = if v < 128 {
            (u64::from(v), 1)
        } else if v < 256 {
            (0xcc | u64::from(v) << 8, 2)
        } else if v < 65_536 {
            (0xcd | u64::from((v as u16).swap_bytes()) << 8, 3)
        } else {
            (0xce | u64::from(v.swap_bytes()) << 8, 5)
        };
        // SAFETY: `at` is at most 5 bytes per id written so far, so `at + 8` is within the
        // 5 * ids.len() + 8 bytes reserved after `start`; the store is unaligned-safe.
        unsafe { buf.add(at).cast::<u64>().write_unaligned(word.to_le()) };
        at += len;
    }
    out.truncate(start + at);
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plane::payload::{RoutingHints, StopConditions};

    fn same(req: &PreprocessedRequest) {
        assert_eq!(preprocessed_request(req).unwrap(), rmp_serde::to_vec_named(req).unwrap(), "{req:?}");
    }

    #[test]
    fn byte_identical_to_the_derived_encoding() {
        same(&PreprocessedRequest::default());
        let ids: Vec<u32> =
            [0, 1, 127, 128, 255, 256, 65_535, 65_536, u32::MAX].into_iter().cycle().take(70_000).collect();
        same(&PreprocessedRequest {
            model: "m".repeat(40),
            token_ids: ids.clone(),
            stop_conditions: StopConditions {
                max_tokens: Some(64),
                stop: Some(vec!["x".into()]),
                ..Default::default()
            },
            eos_token_ids: vec![151_645, 151_643],
            mdc_sum: Some("ab".repeat(32)),
            annotations: vec!["formatted_prompt".into(); 17],
            routing: Some(RoutingHints { dp_rank: Some(1), ..Default::default() }),
            router_config_override: Some(Box::new(serde_json::json!({"k": 1}))),
            ..Default::default()
        });
        for n in [0, 15, 16, 31, 32, 255, 256, 65_535, 65_536] {
            same(&PreprocessedRequest { model: "q".repeat(n), token_ids: ids[..n].to_vec(), ..Default::default() });
        }
        // The trailing keys sent only when set, alone and together.
        let full = PreprocessedRequest {
            prefill_result: Some(Box::new(serde_json::json!({"disaggregated_params": "dummy"}))),
            bootstrap_info: Some(Box::new(crate::plane::preprocessed::BootstrapInfo {
                bootstrap_host: "h".into(),
                bootstrap_port: 7,
                bootstrap_room: 1 << 62,
                handoff_id: 0x0123_4567_89ab_cdef_0123_4567_89ab_cdef,
            })),
            extra_args: Some(Box::new(
                serde_json::json!({"nvext": {"cache_salt": "s"}, "sampling_options": {"detokenize": false}}),
            )),
            router: Some(Box::new(serde_json::json!({"ttft_target": 100.0}))),
            mm_processor_kwargs: Some(Box::new(serde_json::json!({"num_crops": 4}))),
            media_io_kwargs: Some(Box::new(serde_json::json!({"video": {"num_frames": 4}}))),
            request_timestamp_ms: Some(1234.5),
            ..Default::default()
        };
        same(&full);
        same(&PreprocessedRequest { router: full.router.clone(), ..Default::default() });
        same(&PreprocessedRequest { request_timestamp_ms: Some(0.25), ..Default::default() });
        same(&PreprocessedRequest { prefill_result: full.prefill_result.clone(), ..Default::default() });
        same(&PreprocessedRequest { bootstrap_info: full.bootstrap_info.clone(), ..Default::default() });
    }

    fn control_both_ways(id: &str, codec: Codec, address: &str, subject: &str) -> (Vec<u8>, Vec<u8>) {
        use crate::plane::payload::{RequestControlMessage, StreamType, TcpStreamInfo};
        let info = TcpStreamInfo {
            address: address.into(),
            subject: subject.into(),
            context: id.into(),
            stream_type: StreamType::Response,
        };
        let derived = RequestControlMessage::single_in_many_out(id, codec, &info).unwrap().to_json().unwrap();
        let mut direct = b"prefix".to_vec();
        control_single_in_many_out(&mut direct, id, codec, address, subject, id);
        assert_eq!(&direct[..6], b"prefix");
        (direct[6..].to_vec(), derived)
    }

    #[test]
    fn control_message_is_the_derived_json() {
        let (direct, derived) =
            control_both_ways("0b5f1c9e-5a5e-4d7c-9a8e-1f2b3c4d5e6f", Codec::Msgpack, "127.0.0.1:40123", "a-b");
        assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(derived).unwrap());
        let nasty = "q\"\\\n\r\t\u{8}\u{c}\u{0}\u{1f}\u{7f}ü😀/";
        let (direct, derived) = control_both_ways(nasty, Codec::Json, nasty, nasty);
        assert_eq!(String::from_utf8(direct).unwrap(), String::from_utf8(derived).unwrap());
    }

    #[test]
    fn repeated_options_reuse_their_bytes_only_when_they_encode_the_same() {
        use crate::plane::payload::{OutputOptions, SamplingOptions};
        let temps = [None, Some(0.0), Some(-0.0), Some(0.0), Some(0.5), Some(0.5), Some(f32::NAN), Some(f32::NAN)];
        for (i, temperature) in temps.into_iter().enumerate() {
            let guided = (i == 5).then(|| {
                Box::new(crate::plane::payload::GuidedDecoding {
                    json: Some(serde_json::json!({"x": -0.0})),
                    ..Default::default()
                })
            });
            same(&PreprocessedRequest {
                stop_conditions: StopConditions { max_tokens: Some(1 + (i as u32 % 2)), ..Default::default() },
                sampling_options: SamplingOptions { temperature, guided_decoding: guided, ..Default::default() },
                output_options: OutputOptions { logprobs: (i > 3).then_some(2), ..Default::default() },
                ..Default::default()
            });
        }
    }

    proptest::proptest! {
        #[test]
        fn random_control_messages_are_the_derived_json(id in "\\PC{0,40}|[\\x00-\\x7f]{0,40}", address in ".{0,30}", subject in "\\PC{0,40}") {
            let (direct, derived) = control_both_ways(&id, Codec::Msgpack, &address, &subject);
            proptest::prop_assert_eq!(direct, derived);
        }

        #[test]
        fn random_requests_encode_the_same(
            model in ".{0,40}",
            ids in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..300),
            eos in proptest::collection::vec(proptest::prelude::any::<u32>(), 0..3),
            sum in proptest::option::of("[0-9a-f]{0,64}"),
            routed in proptest::option::of(0u32..8),
        ) {
            let req = PreprocessedRequest {
                model,
                token_ids: ids,
                eos_token_ids: eos,
                mdc_sum: sum,
                routing: routed.map(|r| RoutingHints { dp_rank: Some(r), ..Default::default() }),
                ..Default::default()
            };
            proptest::prop_assert_eq!(preprocessed_request(&req).unwrap(), rmp_serde::to_vec_named(&req).unwrap());
        }
    }
}
