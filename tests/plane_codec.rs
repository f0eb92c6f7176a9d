//! Request-plane codecs checked against bytes captured from real Dynamo 1.6.1 processes
//! (tests/data/plane/, see its README). Nothing here reads files at run time.

use bytes::BytesMut;
use proptest::prelude::*;
use serde_json::Value;
use switchyard::plane::{
    encode_ack, encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue,
    encode_request_frame, encode_two_part, Ack, AckDecoder, Annotated, CallHomeHandshake, Codec, ControlMessage,
    Decoded, FinishReason, LLMEngineOutput, PlaneError, PreprocessedRequest, RequestControlMessage, RequestFrame,
    RequestFrameDecoder, RequestFrameRef, ResponseStreamDecoder, StreamEvent, StreamPrologue, StreamType,
    TcpStreamInfo, TwoPart, TwoPartDecoder, TwoPartKind, TwoPartRef, DEFAULT_MAX_MESSAGE_SIZE,
};

const MAX: usize = DEFAULT_MAX_MESSAGE_SIZE;

macro_rules! data {
    ($name:literal) => {
        ($name, include_bytes!(concat!("data/plane/", $name)) as &[u8])
    };
}

/// Request-plane connection bytes (frontend → worker), with the matching ack bytes.
/// A named captured blob.
type Blob = (&'static str, &'static [u8]);

const REQS: &[(Blob, Blob)] = &[
    (data!("req1.req.bin"), data!("req1.ack.bin")),
    (data!("stream1.req.bin"), data!("stream1.ack.bin")),
    (data!("cancel1.req.bin"), data!("cancel1.ack.bin")),
    (data!("probe_stop1.req.bin"), data!("probe_stop1.ack.bin")),
    (data!("p_chunks.req.bin"), data!("p_chunks.ack.bin")),
    (data!("p_eosmid.req.bin"), data!("p_eosmid.ack.bin")),
    (data!("p_err1.req.bin"), data!("p_err1.ack.bin")),
    (data!("p_err2.req.bin"), data!("p_err2.ack.bin")),
    (data!("p_err3.req.bin"), data!("p_err3.ack.bin")),
    (data!("p_json.req.bin"), data!("p_json.ack.bin")),
    (data!("p_lp.req.bin"), data!("p_lp.ack.bin")),
    (data!("p_nomax.req.bin"), data!("p_nomax.ack.bin")),
    (data!("p_usagelie.req.bin"), data!("p_usagelie.ack.bin")),
    (data!("ptext1.req.bin"), data!("ptext1.ack.bin")),
    (data!("migrate1.req.bin"), data!("migrate1.ack.bin")),
    (data!("migrate1.req2.bin"), data!("migrate1.ack2.bin")),
    (data!("deadworker.req.bin"), data!("deadworker.ack.bin")),
    (data!("concurrency.req.bin"), data!("concurrency.ack.bin")),
];

/// Response streams (worker → frontend): bytes, codec, whether it ends normally, whether the
/// worker is the Rust mocker (all keys serialized) or a Python worker (sparse dicts), Text mode.
struct Resp {
    name: &'static str,
    bytes: &'static [u8],
    codec: Codec,
    complete: bool,
    mocker: bool,
    text: bool,
}

macro_rules! resp {
    ($name:literal, $codec:expr, $complete:expr, $mocker:expr, $text:expr) => {
        Resp {
            name: $name,
            bytes: include_bytes!(concat!("data/plane/", $name)),
            codec: $codec,
            complete: $complete,
            mocker: $mocker,
            text: $text,
        }
    };
}

const RESPS: &[Resp] = &[
    resp!("req1.resp.bin", Codec::Msgpack, true, true, false),
    resp!("stream1.resp.bin", Codec::Msgpack, true, true, false),
    resp!("cancel1.resp.bin", Codec::Msgpack, false, true, false),
    resp!("probe_stop1.resp.bin", Codec::Msgpack, false, false, false),
    resp!("p_chunks.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_eosmid.resp.bin", Codec::Msgpack, false, false, false),
    resp!("p_err1.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_err2.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_err3.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_json.resp.bin", Codec::Json, true, false, false),
    resp!("p_lp.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_nomax.resp.bin", Codec::Msgpack, true, false, false),
    resp!("p_usagelie.resp.bin", Codec::Msgpack, true, false, false),
    resp!("ptext1.resp.bin", Codec::Msgpack, true, false, true),
    resp!("migrate1.resp.bin", Codec::Msgpack, false, false, false),
    resp!("migrate1.resp2.bin", Codec::Msgpack, false, false, false),
    resp!("deadworker.resp.bin", Codec::Msgpack, true, false, false),
];

/// Frontend → worker direction of response sockets (cancellation).
const CTLS: &[(&str, &[u8])] =
    &[data!("cancel1.ctl.bin"), data!("probe_stop1.ctl.bin"), data!("p_eosmid.ctl.bin"), data!("migrate1.ctl.bin")];

fn hex(s: &str) -> Vec<u8> {
    let s: String = s.chars().filter(|c| !c.is_whitespace()).collect();
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The frontend's own item type, so stream decoding takes its hand-written msgpack path.
type Item = switchyard::transport::callback::Item;

// ---------------------------------------------------------------- generic drivers

/// Feeds `pieces` one after another into a buffer and collects every frame `decode` takes off
/// it; all bytes must be used (`what` names them in the failure).
fn feed<T>(
    pieces: &[&[u8]],
    what: &str,
    mut decode: impl FnMut(&mut BytesMut) -> Result<Decoded<T>, switchyard::plane::PlaneError>,
) -> Vec<T> {
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for p in pieces {
        buf.extend_from_slice(p);
        while let Decoded::Frame(f) = decode(&mut buf).unwrap() {
            out.push(f);
        }
    }
    assert!(buf.is_empty(), "trailing {what} bytes");
    out
}

/// Decode all request frames of a connection, feeding the bytes in the given pieces.
fn decode_reqs(pieces: &[&[u8]]) -> Vec<RequestFrame> {
    let dec = RequestFrameDecoder::new(MAX);
    feed(pieces, "request", |b| dec.decode(b))
}

fn decode_acks(pieces: &[&[u8]]) -> Vec<Ack> {
    let dec = AckDecoder::new(MAX);
    feed(pieces, "ack", |b| dec.decode(b))
}

fn decode_stream<T: serde::de::DeserializeOwned + 'static>(
    codec: Codec,
    pieces: &[&[u8]],
) -> (Vec<StreamEvent<T>>, bool) {
    let mut dec = ResponseStreamDecoder::new(codec, MAX);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for p in pieces {
        buf.extend_from_slice(p);
        loop {
            match dec.decode::<T>(&mut buf).unwrap() {
                Decoded::Frame(e) => out.push(e),
                Decoded::Incomplete { need } => {
                    assert!(need > buf.len() || dec.is_done(), "Incomplete must ask for more bytes");
                    break;
                }
            }
        }
    }
    assert!(buf.is_empty());
    (out, dec.is_done())
}

fn decode_two_parts(pieces: &[&[u8]]) -> Vec<TwoPart> {
    let dec = TwoPartDecoder::new(MAX);
    feed(pieces, "two-part", |b| dec.decode(b))
}

fn bytewise(b: &[u8]) -> Vec<&[u8]> {
    b.chunks(1).collect()
}

/// A prefix of a two-part stream that ends on a frame boundary at or after `at` bytes.
fn frame_prefix(b: &[u8], at: usize) -> &[u8] {
    let mut off = 0;
    while off < at {
        match TwoPartRef::parse(&b[off..], MAX).unwrap() {
            Decoded::Frame((_, used)) => off += used,
            Decoded::Incomplete { .. } => break,
        }
    }
    &b[..off]
}

/// Blobs checked with a two-way split at every byte: whole blobs up to 6000 bytes; for the
/// large response streams (cancel1, migrate1 resp2) a whole-frame prefix of 3000+ bytes
/// (every frame shape occurs there). Large blobs are also fed byte by byte, whole.
fn split_target(b: &[u8]) -> &[u8] {
    if b.len() <= 6000 {
        b
    } else {
        frame_prefix(b, 3000)
    }
}

/// The first `n` request frames of a connection.
fn request_prefix(b: &[u8], n: usize) -> &[u8] {
    let mut off = 0;
    for _ in 0..n {
        match RequestFrameRef::parse(&b[off..], MAX).unwrap() {
            Decoded::Frame((_, used)) => off += used,
            Decoded::Incomplete { .. } => break,
        }
    }
    &b[..off]
}

// ---------------------------------------------------------------- §6.6 vectors

#[test]
fn spec_6_6_vectors_reproduced() {
    let mut out = Vec::new();
    encode_ack(&mut out, &Ack::Accepted);
    assert_eq!(out, hex("00000000"));

    out.clear();
    let hs =
        CallHomeHandshake { subject: "e106ffe1-75e9-42c7-af1e-3888b0e2588c".into(), stream_type: StreamType::Response };
    encode_handshake(&mut out, &hs).unwrap();
    assert_eq!(
        out,
        hex("000000000000004b 0000000000000000 0000000000000000
             7b227375626a656374223a2265313036666665312d373565392d343263372d616631652d333838386230653235383863222c2273747265616d5f74797065223a22726573706f6e7365227d")
    );

    out.clear();
    encode_prologue(&mut out, &StreamPrologue { error: None }).unwrap();
    assert_eq!(out, hex("000000000000000e 0000000000000000 0000000000000000 7b226572726f72223a6e756c6c7d"));

    out.clear();
    let item = Annotated::from_data(LLMEngineOutput { token_ids: vec![1687], ..Default::default() });
    encode_item(&mut out, Codec::Msgpack, &item).unwrap();
    assert_eq!(
        out,
        hex("0000000000000000 0000000000000088 0000000000000000
             82a46461746181a46461746189a9746f6b656e5f69647391cd0697a6746f6b656e73c0a474657874c0ab6f75747075745f74797065a474657874ad63756d5f6c6f675f70726f6273c0a96c6f675f70726f6273c0ac746f705f6c6f6770726f6273c0ad66696e6973685f726561736f6ec0a5696e646578c0ae636f6d706c6574655f66696e616cc2")
    );

    out.clear();
    encode_complete_final(&mut out, Codec::Msgpack).unwrap();
    assert_eq!(out, hex("0000000000000000 0000000000000011 0000000000000000 81ae636f6d706c6574655f66696e616cc3"));

    out.clear();
    encode_control(&mut out, ControlMessage::Sentinel);
    assert_eq!(out, hex("000000000000000a 0000000000000000 0000000000000000 2273656e74696e656c22"));

    out.clear();
    encode_control(&mut out, ControlMessage::Kill);
    assert_eq!(out, hex("000000000000000600000000000000000000000000000000226b696c6c22"));

    // The request frame prelude of req1.
    let (_, req1) = REQS[0].0;
    assert_eq!(req1.len(), 1252);
    assert_eq!(&req1[..2], &hex("0028")[..]);
    assert_eq!(&req1[42..44], &hex("00a0")[..]);
    assert_eq!(
        &req1[44 + 160..44 + 160 + 4 + 24],
        &hex("00000414 000000000000015c 00000000000002a0 0000000000000000")[..]
    );
}

// ---------------------------------------------------------------- request frames

#[test]
fn req1_decoded_values() {
    let frames = decode_reqs(&[REQS[0].0 .1]);
    assert_eq!(frames.len(), 1);
    let f = &frames[0];
    assert_eq!(f.path, "2aed21ef7e3e48b7/dynamo/backend/generate");
    assert_eq!(
        f.headers,
        vec![
            ("request-id".to_string(), "75aa66a8-580e-4ee4-b3e3-7e79f94cf1f5".to_string()),
            ("x-endpoint-path".to_string(), "2aed21ef7e3e48b7/dynamo/backend/generate".to_string()),
            ("x-frontend-send-ts-ns".to_string(), "1795295675135219003".to_string()),
        ]
    );
    assert_eq!(f.header("request-id"), Some("75aa66a8-580e-4ee4-b3e3-7e79f94cf1f5"));
    let tp = f.two_part(MAX).unwrap();
    assert_eq!((tp.header.len(), tp.body.len(), tp.checksum), (348, 672, 0));
    assert_eq!(tp.kind(), TwoPartKind::HeaderAndBody);

    let ctl = RequestControlMessage::from_json(tp.header).unwrap();
    assert_eq!(ctl.id, "75aa66a8-580e-4ee4-b3e3-7e79f94cf1f5");
    assert_eq!(ctl.payload_codec, Codec::Msgpack);
    assert_eq!(ctl.connection_info.transport, "tcp_server");
    let info = ctl.connection_info.tcp_info().unwrap();
    assert_eq!(
        info,
        TcpStreamInfo {
            address: "127.0.0.1:42111".into(),
            subject: "e106ffe1-75e9-42c7-af1e-3888b0e2588c".into(),
            context: "75aa66a8-580e-4ee4-b3e3-7e79f94cf1f5".into(),
            stream_type: StreamType::Response,
        }
    );
    // Rebuilt from typed parts: identical control bytes.
    let rebuilt = RequestControlMessage::single_in_many_out(&ctl.id, Codec::Msgpack, &info).unwrap();
    assert_eq!(rebuilt.to_json().unwrap(), tp.header);

    let req: PreprocessedRequest = Codec::Msgpack.decode(tp.body).unwrap();
    assert_eq!(req.model, "qwen3");
    assert_eq!(req.token_ids, vec![151644, 872, 198, 9707, 1052, 151645, 198, 151644, 77091, 198]);
    assert_eq!(req.stop_conditions.max_tokens, Some(5));
    assert_eq!(req.stop_conditions.stop_token_ids_hidden, Some(vec![151645, 151643]));
    assert_eq!(req.sampling_options.temperature, None);
    assert_eq!(req.eos_token_ids, vec![151645, 151643]);
    assert_eq!(req.mdc_sum.as_deref(), Some("02e443a1968a6836220d03d0626912676c569fdfe6e5afd4171dcbab53a907c3"));
    assert!(req.annotations.is_empty());
    assert_eq!(req.routing, Some(Default::default()));
    assert_eq!(req.router_config_override, None);
    assert_eq!(Codec::Msgpack.encode(&req).unwrap(), tp.body);

    // The whole 1252-byte frame, from typed parts and the captured header order.
    let headers: Vec<(&str, &str)> = f.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
    let mut out = Vec::new();
    encode_request_frame(
        &mut out,
        &f.path,
        &headers,
        &rebuilt.to_json().unwrap(),
        &Codec::Msgpack.encode(&req).unwrap(),
        MAX,
    )
    .unwrap();
    assert_eq!(out, REQS[0].0 .1);
}

#[test]
fn stream1_sampling_options_on_the_wire() {
    let frames = decode_reqs(&[REQS[1].0 .1]);
    let tp = frames[0].two_part(MAX).unwrap();
    let req: PreprocessedRequest = Codec::Msgpack.decode(tp.body).unwrap();
    assert_eq!(req.stop_conditions.max_tokens, Some(8));
    assert_eq!(req.stop_conditions.stop, Some(vec!["xyz".to_string()]));
    assert_eq!(req.sampling_options.temperature, Some(0.7f32));
    assert_eq!(req.sampling_options.top_p, Some(0.9f32));
    assert_eq!(req.sampling_options.seed, Some(42));
    assert_eq!(req.output_options.logprobs, Some(2));
    // Same bytes as the captured stream1 body (docs/dynamo/request-plane.md §7.1: float32 0x3f333333 / 0x3f666666).
    let body = Codec::Msgpack.encode(&req).unwrap();
    assert_eq!(body, tp.body);
    assert!(body.windows(5).any(|w| w == hex("ca3f333333")));
}

/// Every captured request frame decodes, and re-encodes byte for byte from typed values.
#[test]
fn every_request_frame_roundtrips() {
    let mut total = 0;
    for ((name, bytes), (_, acks)) in REQS {
        let frames = decode_reqs(&[bytes]);
        let acks = decode_acks(&[acks]);
        assert_eq!(acks.len(), frames.len(), "{name}: one ack per request");
        assert!(acks.iter().all(|a| *a == Ack::Accepted), "{name}");
        let mut out = Vec::new();
        for f in &frames {
            let tp = f.two_part(MAX).unwrap();
            assert_eq!(tp.checksum, 0);
            let ctl = RequestControlMessage::from_json(tp.header).unwrap();
            assert_eq!(f.header("request-id"), Some(ctl.id.as_str()), "{name}");
            assert_eq!(f.header("x-endpoint-path"), Some(f.path.as_str()), "{name}");
            assert_eq!(ctl.connection_info.tcp_info().unwrap().context, ctl.id, "{name}");
            let ctl_bytes = ctl.to_json().unwrap();
            assert_eq!(ctl_bytes, tp.header, "{name}: control message");
            let body = if name.starts_with("ptext1") {
                // Text model: the client's OpenAI request as received (an opaque object here).
                let v: Value = ctl.payload_codec.decode(tp.body).unwrap();
                assert_eq!(v["model"], "probe-text");
                tp.body.to_vec()
            } else {
                let req: PreprocessedRequest = ctl.payload_codec.decode(tp.body).unwrap();
                assert!(!req.token_ids.is_empty(), "{name}");
                let b = ctl.payload_codec.encode(&req).unwrap();
                assert_eq!(b, tp.body, "{name}: body");
                b
            };
            let headers: Vec<(&str, &str)> = f.headers.iter().map(|(k, v)| (k.as_str(), v.as_str())).collect();
            encode_request_frame(&mut out, &f.path, &headers, &ctl_bytes, &body, MAX).unwrap();
        }
        assert_eq!(out, *bytes, "{name}: whole connection");
        let mut ack_bytes = Vec::new();
        for a in &acks {
            encode_ack(&mut ack_bytes, a);
        }
        assert_eq!(ack_bytes, REQS.iter().find(|r| r.0 .0 == *name).unwrap().1 .1);
        total += frames.len();
    }
    // 16 single requests + 4 pipelined (deadworker) + 30 pipelined (concurrency).
    assert_eq!(total, 16 + 4 + 30);
}

#[test]
fn p_json_request_is_json_coded() {
    let frames = decode_reqs(&[REQS[9].0 .1]);
    let tp = frames[0].two_part(MAX).unwrap();
    let ctl = RequestControlMessage::from_json(tp.header).unwrap();
    assert_eq!(ctl.payload_codec, Codec::Json);
    assert_eq!(tp.body[0], b'{');
    let req: PreprocessedRequest = Codec::Json.decode(tp.body).unwrap();
    assert_eq!(req.model, "probejson");
    assert_eq!(req.token_ids, vec![603, 1378]);
}

#[test]
fn migrate1_retry_appends_tokens_and_reduces_max_tokens() {
    let first = decode_reqs(&[REQS[14].0 .1]);
    let second = decode_reqs(&[REQS[15].0 .1]);
    let body = |f: &RequestFrame| -> (RequestControlMessage, PreprocessedRequest) {
        let tp = f.two_part(MAX).unwrap();
        (RequestControlMessage::from_json(tp.header).unwrap(), Codec::Msgpack.decode(tp.body).unwrap())
    };
    let (c1, r1) = body(&first[0]);
    let (c2, r2) = body(&second[0]);
    assert_eq!(c1.id, c2.id, "request id kept across the retry");
    assert_ne!(c1.connection_info.tcp_info().unwrap().subject, c2.connection_info.tcp_info().unwrap().subject);
    assert_eq!(r1.stop_conditions.max_tokens, Some(60));
    assert_eq!(r2.stop_conditions.max_tokens, Some(23));
    assert_eq!(r2.token_ids.len(), r1.token_ids.len() + 37);
    assert_eq!(&r2.token_ids[..2], &r1.token_ids[..]);
}

// ---------------------------------------------------------------- response streams

fn check_mocker_items(name: &str, events: &[StreamEvent<Item>]) {
    for e in events {
        if let StreamEvent::Item(a) = e {
            let out = a.data.as_ref().unwrap();
            assert!(out.tokens.is_none() && out.text.is_none(), "{name}");
            assert!(out.token_ids.len() <= 1, "{name}");
        }
    }
}

/// Every captured response stream decodes into the documented sequence, and each frame
/// re-encodes to the captured bytes (typed for the mocker, as the generic value for the
/// sparse Python dicts).
#[test]
fn every_response_stream_decodes_and_reencodes() {
    for r in RESPS {
        let (events, done) = if r.text {
            let (ev, done) = decode_stream::<Annotated<Value>>(r.codec, &[r.bytes]);
            for e in &ev {
                if let StreamEvent::Item(a) = e {
                    assert_eq!(a.data.as_ref().unwrap()["object"], "chat.completion.chunk");
                }
            }
            (ev.len(), done)
        } else {
            let (ev, done) = decode_stream::<Item>(r.codec, &[r.bytes]);
            assert!(
                matches!(ev[0], StreamEvent::Handshake(ref h) if h.stream_type == StreamType::Response),
                "{}",
                r.name
            );
            assert!(matches!(ev[1], StreamEvent::Prologue(StreamPrologue { error: None })), "{}", r.name);
            if r.mocker {
                check_mocker_items(r.name, &ev);
            }
            (ev.len(), done)
        };
        assert_eq!(done, r.complete, "{}", r.name);
        assert!(events >= 3, "{}", r.name);

        // Frame-by-frame re-encoding.
        let frames = decode_two_parts(&[r.bytes]);
        let mut out = Vec::new();
        for (i, f) in frames.iter().enumerate() {
            match (i, f.kind()) {
                (0, TwoPartKind::Control) => {
                    let hs: CallHomeHandshake = serde_json::from_slice(&f.header).unwrap();
                    assert_eq!(CallHomeHandshake::from_json(&f.header).unwrap(), hs);
                    encode_handshake(&mut out, &hs).unwrap();
                }
                (1, TwoPartKind::Control) => {
                    let p: StreamPrologue = serde_json::from_slice(&f.header).unwrap();
                    assert_eq!(StreamPrologue::from_json(&f.header).unwrap(), p);
                    encode_prologue(&mut out, &p).unwrap();
                }
                (_, TwoPartKind::Control) => encode_control(&mut out, ControlMessage::from_json(&f.header).unwrap()),
                (_, TwoPartKind::Data) => {
                    let env: switchyard::plane::ResponseEnvelope<Value> = r.codec.decode(&f.body).unwrap();
                    match env.data {
                        None => encode_complete_final(&mut out, r.codec).unwrap(),
                        Some(_) if r.mocker => {
                            let env: switchyard::plane::ResponseEnvelope<Item> = r.codec.decode(&f.body).unwrap();
                            encode_item(&mut out, r.codec, env.data.as_ref().unwrap()).unwrap();
                        }
                        Some(v) => encode_item(&mut out, r.codec, &v).unwrap(),
                    }
                }
                other => panic!("{}: unexpected frame {other:?}", r.name),
            }
        }
        assert_eq!(out, r.bytes, "{}", r.name);
    }
}

/// The hand-written decoder of the Tokens item envelope agrees with serde on every captured
/// msgpack data frame of a real worker, and takes the fast path for the mocker's.
#[test]
fn captured_item_frames_decode_the_same_by_hand() {
    let mut fast = 0;
    for r in RESPS.iter().filter(|r| r.codec == Codec::Msgpack && !r.text) {
        for f in decode_two_parts(&[r.bytes]).iter().filter(|f| f.kind() == TwoPartKind::Data) {
            let by_serde: switchyard::plane::ResponseEnvelope<Item> = r.codec.decode(&f.body).unwrap();
            match switchyard::plane::itemdec::envelope(&f.body) {
                Some(by_hand) => {
                    assert_eq!(by_hand, by_serde, "{}", r.name);
                    fast += 1;
                }
                None => assert!(!r.mocker, "{}: a mocker frame left the fast path", r.name),
            }
        }
    }
    assert!(fast >= 20, "only {fast} frames took the fast path");
}

#[test]
fn req1_stream_values() {
    let (ev, done) = decode_stream::<Item>(Codec::Msgpack, &[RESPS[0].bytes]);
    assert!(done);
    assert_eq!(ev.len(), 2 + 6 + 2);
    let StreamEvent::Handshake(hs) = &ev[0] else { panic!() };
    assert_eq!(hs.subject, "e106ffe1-75e9-42c7-af1e-3888b0e2588c");
    let tokens: Vec<u32> = ev
        .iter()
        .filter_map(|e| match e {
            StreamEvent::Item(a) => Some(a.data.as_ref().unwrap().token_ids.clone()),
            _ => None,
        })
        .flatten()
        .collect();
    assert_eq!(tokens, vec![1894, 1687, 1581, 1943, 1257]);
    let StreamEvent::Item(first) = &ev[2] else { panic!() };
    let usage = first.data.as_ref().unwrap().completion_usage.as_ref().unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (10, 1, 11));
    assert_eq!(usage.prompt_tokens_details.as_ref().unwrap().cached_tokens, Some(0));
    let StreamEvent::Item(last) = &ev[7] else { panic!() };
    assert_eq!(last.data.as_ref().unwrap().finish_reason, Some(FinishReason::Length));
    assert_eq!(last.data.as_ref().unwrap().completion_usage.as_ref().unwrap().completion_tokens, 5);
    assert_eq!(ev[8], StreamEvent::CompleteFinal);
    assert_eq!(ev[9], StreamEvent::Sentinel);
}

fn items(name: &str) -> Vec<LLMEngineOutput> {
    let r = RESPS.iter().find(|r| r.name == name).unwrap();
    let (ev, _) = decode_stream::<Item>(r.codec, &[r.bytes]);
    ev.into_iter()
        .filter_map(|e| match e {
            StreamEvent::Item(a) => a.data.map(|d| *d),
            _ => None,
        })
        .collect()
}

#[test]
fn python_worker_payloads() {
    // p_chunks: several tokens per item.
    let c = items("p_chunks.resp.bin");
    assert_eq!(c[0].token_ids, vec![7141, 13440, 21619]);
    assert_eq!(c[3].finish_reason, Some(FinishReason::Eos));
    // p_lp: log_probs / top_logprobs.
    let lp = items("p_lp.resp.bin");
    assert_eq!(lp[0].log_probs, Some(vec![-0.5]));
    let top = &lp[0].top_logprobs.as_ref().unwrap()[0];
    assert_eq!((top[1].rank, top[1].token_id, top[1].token.clone(), top[1].logprob), (2, 13, None, -1.5));
    // p_usagelie: worker-provided usage.
    let u = items("p_usagelie.resp.bin");
    let usage = u.iter().find_map(|o| o.completion_usage.clone()).unwrap();
    assert_eq!((usage.prompt_tokens, usage.completion_tokens, usage.total_tokens), (999, 555, 1554));
    assert_eq!(
        usage.prompt_tokens_details.unwrap(),
        switchyard::plane::PromptTokensDetails { audio_tokens: None, cached_tokens: Some(3) }
    );
    // p_err2: finish_reason {"error": ..}.
    let e = items("p_err2.resp.bin");
    assert_eq!(e[0].finish_reason, Some(FinishReason::Error("probe engine error".into())));
    // p_json: JSON-coded response frames.
    let j = items("p_json.resp.bin");
    assert_eq!(j.iter().map(|o| o.token_ids.clone()).collect::<Vec<_>>(), vec![vec![603], vec![1378], vec![]]);
    // p_eosmid: a hidden EOS token mid-stream, then the frontend's kill.
    let m = items("p_eosmid.resp.bin");
    assert_eq!(m.last().unwrap().token_ids, vec![151645]);
}

#[test]
fn p_err1_error_item() {
    let r = RESPS.iter().find(|r| r.name == "p_err1.resp.bin").unwrap();
    let (ev, done) = decode_stream::<Item>(r.codec, &[r.bytes]);
    assert!(done);
    let StreamEvent::Item(a) = &ev[2] else { panic!() };
    assert!(a.is_error());
    assert!(a.data.is_none());
    assert_eq!(a.event.as_deref(), Some("error"));
    let err = a.error.as_ref().unwrap();
    assert_eq!(err.error_type, serde_json::json!({"Backend": "InvalidArgument"}));
    assert_eq!(err.class.as_deref(), Some("InvalidRequest"));
    assert_eq!(err.reason.as_deref(), Some("backend.invalid_argument"));
    assert_eq!(err.message, "ValueError: probe: deliberate failure");
}

#[test]
fn cancelled_streams_end_without_complete_final() {
    for name in
        ["cancel1.resp.bin", "probe_stop1.resp.bin", "p_eosmid.resp.bin", "migrate1.resp.bin", "migrate1.resp2.bin"]
    {
        let r = RESPS.iter().find(|r| r.name == name).unwrap();
        let mut dec = ResponseStreamDecoder::new(Codec::Msgpack, MAX);
        let mut buf = BytesMut::from(r.bytes);
        let mut n = 0;
        while let Decoded::Frame(e) = dec.decode::<Item>(&mut buf).unwrap() {
            assert!(!matches!(e, StreamEvent::CompleteFinal | StreamEvent::Sentinel), "{name}");
            n += 1;
        }
        assert!(buf.is_empty() && !dec.complete_final_seen() && !dec.is_done(), "{name}");
        assert!(n > 2, "{name}");
    }
    assert_eq!(items("cancel1.resp.bin").len(), 648);
    for (name, bytes) in CTLS {
        let frames = decode_two_parts(&[bytes]);
        assert_eq!(frames.len(), 1, "{name}");
        assert_eq!(frames[0].kind(), TwoPartKind::Control);
        assert_eq!(ControlMessage::from_json(&frames[0].header).unwrap(), ControlMessage::Kill, "{name}");
        let mut out = Vec::new();
        encode_control(&mut out, ControlMessage::Kill);
        assert_eq!(out, *bytes, "{name}");
    }
}

// ---------------------------------------------------------------- every byte boundary

#[test]
fn request_frames_split_at_every_boundary() {
    for ((name, bytes), (_, acks)) in REQS {
        let whole = decode_reqs(&[bytes]);
        assert_eq!(decode_reqs(&bytewise(bytes)), whole, "{name} bytewise");
        // concurrency.req.bin (37 KB, 30 frames): every split inside its first 4 frames.
        let part = request_prefix(bytes, 4);
        let whole = decode_reqs(&[part]);
        for k in 0..=part.len() {
            assert_eq!(decode_reqs(&[&part[..k], &part[k..]]), whole, "{name} split at {k}");
        }
        let whole = decode_acks(&[acks]);
        assert_eq!(decode_acks(&bytewise(acks)), whole);
        for k in 0..=acks.len() {
            assert_eq!(decode_acks(&[&acks[..k], &acks[k..]]), whole);
        }
    }
}

#[test]
fn response_streams_split_at_every_boundary() {
    for r in RESPS {
        if r.text {
            let whole = decode_stream::<Annotated<Value>>(r.codec, &[r.bytes]);
            assert_eq!(decode_stream::<Annotated<Value>>(r.codec, &bytewise(r.bytes)), whole, "{}", r.name);
            for k in 0..=r.bytes.len() {
                let got = decode_stream::<Annotated<Value>>(r.codec, &[&r.bytes[..k], &r.bytes[k..]]);
                assert_eq!(got, whole, "{} split at {k}", r.name);
            }
            continue;
        }
        let whole = decode_stream::<Item>(r.codec, &[r.bytes]);
        assert_eq!(decode_stream::<Item>(r.codec, &bytewise(r.bytes)), whole, "{} bytewise", r.name);
        let part = split_target(r.bytes);
        let whole = decode_stream::<Item>(r.codec, &[part]);
        for k in 0..=part.len() {
            assert_eq!(decode_stream::<Item>(r.codec, &[&part[..k], &part[k..]]), whole, "{} split at {k}", r.name);
        }
    }
    for (name, bytes) in CTLS {
        let whole = decode_two_parts(&[bytes]);
        for k in 0..=bytes.len() {
            assert_eq!(decode_two_parts(&[&bytes[..k], &bytes[k..]]), whole, "{name} split at {k}");
        }
    }
}

/// Incomplete never consumes and its `need` is exact for a two-part message.
#[test]
fn incomplete_need_is_exact() {
    let bytes = RESPS[0].bytes;
    let (_, first_len) = TwoPartRef::parse(bytes, MAX).unwrap().frame().unwrap();
    assert_eq!(first_len, 24 + 75);
    for k in 0..first_len {
        match TwoPartRef::parse(&bytes[..k], MAX).unwrap() {
            Decoded::Incomplete { need } => assert_eq!(need, if k < 24 { 24 } else { first_len }),
            Decoded::Frame(_) => panic!("frame from {k} bytes"),
        }
    }
    let req = REQS[0].0 .1;
    for k in 0..req.len() {
        let Decoded::Incomplete { need } = RequestFrameRef::parse(&req[..k], MAX).unwrap() else { panic!() };
        assert!(need > k && need <= req.len(), "need {need} at {k}");
    }
}

// ---------------------------------------------------------------- errors

#[test]
fn oversized_lengths_are_errors_before_the_bytes_arrive() {
    let mut prelude = Vec::new();
    prelude.extend_from_slice(&(MAX as u64).to_be_bytes());
    prelude.extend_from_slice(&1u64.to_be_bytes());
    prelude.extend_from_slice(&0u64.to_be_bytes());
    assert!(matches!(TwoPartRef::parse(&prelude, MAX), Err(PlaneError::TooLarge { .. })));
    // Overflowing header_len + body_len.
    let mut prelude = vec![0xff; 16];
    prelude.extend_from_slice(&[0; 8]);
    assert!(matches!(TwoPartRef::parse(&prelude, MAX), Err(PlaneError::TooLarge { .. })));
    // Exactly at the limit is fine (just incomplete).
    let mut prelude = Vec::new();
    prelude.extend_from_slice(&(MAX as u64).to_be_bytes());
    prelude.extend_from_slice(&[0; 16]);
    assert!(TwoPartRef::parse(&prelude, MAX).unwrap().is_incomplete());

    // Request payload length.
    let mut f = vec![0, 1, b'p', 0, 2, b'{', b'}'];
    f.extend_from_slice(&1025u32.to_be_bytes());
    assert!(matches!(
        RequestFrameDecoder::new(1024).decode(&mut BytesMut::from(&f[..])),
        Err(PlaneError::TooLarge { .. })
    ));
    // Ack length.
    let mut buf = BytesMut::from(&u32::MAX.to_be_bytes()[..]);
    assert!(matches!(AckDecoder::new(MAX).decode(&mut buf), Err(PlaneError::TooLarge { .. })));
    // Encoding over the limit.
    let mut out = Vec::new();
    assert!(encode_request_frame(&mut out, "p", &[], b"{}", &[0; 100], 64).is_err());
}

#[test]
fn malformed_request_frames() {
    let frame = |path: &[u8], headers: &[u8]| {
        let mut f = Vec::new();
        f.extend_from_slice(&(path.len() as u16).to_be_bytes());
        f.extend_from_slice(path);
        f.extend_from_slice(&(headers.len() as u16).to_be_bytes());
        f.extend_from_slice(headers);
        f.extend_from_slice(&24u32.to_be_bytes());
        encode_two_part(&mut f, b"", b"");
        f
    };
    let dec = RequestFrameDecoder::new(MAX);
    assert!(matches!(
        dec.decode(&mut BytesMut::from(&frame(&[0xff, 0xfe], b"{}")[..])),
        Err(PlaneError::Malformed { .. })
    ));
    assert!(matches!(
        dec.decode(&mut BytesMut::from(&frame(b"p", b"{\"a\":1}")[..])),
        Err(PlaneError::Malformed { .. })
    ));
    assert!(matches!(
        dec.decode(&mut BytesMut::from(&frame(b"p", b"not json")[..])),
        Err(PlaneError::Malformed { .. })
    ));
    // `{}` headers are fine (the mocker acked such frames).
    let f = dec.decode(&mut BytesMut::from(&frame(b"p", b"{}")[..])).unwrap().frame().unwrap();
    assert!(f.headers.is_empty());
    assert_eq!(f.two_part(MAX).unwrap().kind(), TwoPartKind::Empty);
    // A payload whose two-part prelude disagrees with payload_len.
    let mut bad = vec![0, 1, b'p', 0, 2, b'{', b'}'];
    bad.extend_from_slice(&25u32.to_be_bytes());
    encode_two_part(&mut bad, b"", b"");
    bad.push(0);
    let f = dec.decode(&mut BytesMut::from(&bad[..])).unwrap().frame().unwrap();
    assert!(matches!(f.two_part(MAX), Err(PlaneError::Malformed { .. })));
}

fn stream_of(frames: &[(&[u8], &[u8])]) -> BytesMut {
    let mut out = Vec::new();
    for (h, b) in frames {
        encode_two_part(&mut out, h, b);
    }
    BytesMut::from(&out[..])
}

fn run(codec: Codec, mut buf: BytesMut) -> Result<Vec<StreamEvent<Item>>, PlaneError> {
    let mut dec = ResponseStreamDecoder::new(codec, MAX);
    let mut out = Vec::new();
    while let Decoded::Frame(e) = dec.decode::<Item>(&mut buf)? {
        out.push(e);
    }
    Ok(out)
}

#[test]
fn response_stream_protocol_errors() {
    let hs: &[u8] = br#"{"subject":"s","stream_type":"response"}"#;
    let pro: &[u8] = br#"{"error":null}"#;
    let cf = Codec::Msgpack.encode(&switchyard::plane::ResponseEnvelope::<()>::complete_final()).unwrap();
    let empty_env = hex("81ae636f6d706c6574655f66696e616cc2"); // {"complete_final": false}
                                                               // Sentinel before complete_final (1.6.1 answers 503).
    let e = run(Codec::Msgpack, stream_of(&[(hs, b""), (pro, b""), (b"\"sentinel\"", b"")])).unwrap_err();
    assert!(matches!(e, PlaneError::Protocol(_)));
    // kill / stop from the worker.
    for w in [&b"\"kill\""[..], b"\"stop\""] {
        assert!(run(Codec::Msgpack, stream_of(&[(hs, b""), (pro, b""), (w, b"")])).is_err());
    }
    // Data before the handshake; header+body frames in the item phase.
    assert!(run(Codec::Msgpack, stream_of(&[(b"", &cf)])).is_err());
    assert!(run(Codec::Msgpack, stream_of(&[(hs, b""), (pro, b""), (b"x", &cf)])).is_err());
    // Neither data nor complete_final.
    assert!(run(Codec::Msgpack, stream_of(&[(hs, b""), (pro, b""), (b"", &empty_env)])).is_err());
    // Garbage body, garbage handshake.
    assert!(run(Codec::Msgpack, stream_of(&[(hs, b""), (pro, b""), (b"", b"\xc1\xc1")])).is_err());
    assert!(run(Codec::Msgpack, stream_of(&[(b"{", b"")])).is_err());
    // Bytes after the sentinel.
    let mut ok = stream_of(&[(hs, b""), (pro, b""), (b"", &cf), (b"\"sentinel\"", b"")]);
    assert_eq!(run(Codec::Msgpack, ok.clone()).unwrap().len(), 4);
    ok.extend_from_slice(b"\0");
    assert!(run(Codec::Msgpack, ok).is_err());
    // A prologue error is reported, not swallowed.
    let ev = run(Codec::Msgpack, stream_of(&[(hs, b""), (br#"{"error":"no"}"#, b"")])).unwrap();
    assert_eq!(ev[1], StreamEvent::Prologue(StreamPrologue { error: Some("no".into()) }));
    // An item carrying complete_final: item, then CompleteFinal.
    let both =
        Codec::Json.encode(&serde_json::json!({"data": {"data": {"token_ids": [1]}}, "complete_final": true})).unwrap();
    let ev = run(Codec::Json, stream_of(&[(hs, b""), (pro, b""), (b"", &both), (b"\"sentinel\"", b"")])).unwrap();
    assert!(matches!(ev[2], StreamEvent::Item(_)));
    assert_eq!(ev[3], StreamEvent::CompleteFinal);
    assert_eq!(ev[4], StreamEvent::Sentinel);
}

#[test]
fn tolerant_decoding() {
    // Unknown keys ignored, missing keys defaulted, "abort" alias.
    let v = serde_json::json!({"token_ids": [5], "finish_reason": "abort", "brand_new": {"x": 1}});
    let b = Codec::Msgpack.encode(&v).unwrap();
    let o: LLMEngineOutput = Codec::Msgpack.decode(&b).unwrap();
    assert_eq!(o.token_ids, vec![5]);
    assert_eq!(o.finish_reason, Some(FinishReason::Cancelled));
    let r: PreprocessedRequest =
        Codec::Msgpack.decode(&Codec::Msgpack.encode(&serde_json::json!({"model": "m"})).unwrap()).unwrap();
    assert_eq!(r.model, "m");
    assert!(r.token_ids.is_empty());
    // Trailing bytes after a msgpack value are an error.
    let mut b2 = b.clone();
    b2.push(0xc0);
    assert!(Codec::Msgpack.decode::<LLMEngineOutput>(&b2).is_err());
    assert_eq!(Codec::from_name("json"), Some(Codec::Json));
    assert_eq!(Codec::from_name("cbor"), None);
    let err: switchyard::Error = PlaneError::Protocol("x".into()).into();
    assert_eq!(err.status(), 503);
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn garbage_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..256), max in 0usize..4096) {
        let _ = TwoPartRef::parse(&bytes, max);
        let _ = RequestFrameRef::parse(&bytes, max);
        let _ = AckDecoder::new(max).parse(&bytes);
        let _ = TwoPartDecoder::new(max).decode(&mut BytesMut::from(&bytes[..]));
        let _ = RequestFrameDecoder::new(max).decode(&mut BytesMut::from(&bytes[..]));
        for codec in [Codec::Msgpack, Codec::Json] {
            let mut dec = ResponseStreamDecoder::new(codec, max);
            let mut buf = BytesMut::from(&bytes[..]);
            for _ in 0..8 {
                if !matches!(dec.decode::<Item>(&mut buf), Ok(Decoded::Frame(_))) { break; }
            }
            let _ = codec.decode::<PreprocessedRequest>(&bytes);
            let _ = codec.decode::<Item>(&bytes);
        }
    }

    #[test]
    fn truncated_captures_are_incomplete_not_errors(cut in 0usize..1411) {
        let bytes = RESPS[0].bytes;
        let mut dec = ResponseStreamDecoder::new(Codec::Msgpack, MAX);
        let mut buf = BytesMut::from(&bytes[..cut]);
        loop {
            match dec.decode::<Item>(&mut buf) {
                Ok(Decoded::Frame(_)) => continue,
                Ok(Decoded::Incomplete { .. }) => break,
                Err(e) => panic!("{e}"),
            }
        }
        let req = REQS[0].0 .1;
        let cut = cut.min(req.len() - 1);
        prop_assert!(RequestFrameDecoder::new(MAX).decode(&mut BytesMut::from(&req[..cut])).unwrap().is_incomplete());
    }

    #[test]
    fn two_part_roundtrip(h in proptest::collection::vec(any::<u8>(), 0..64), b in proptest::collection::vec(any::<u8>(), 0..64)) {
        let mut out = Vec::new();
        encode_two_part(&mut out, &h, &b);
        let (tp, used) = TwoPartRef::parse(&out, MAX).unwrap().frame().unwrap();
        prop_assert_eq!(used, out.len());
        prop_assert_eq!(tp.header, &h[..]);
        prop_assert_eq!(tp.body, &b[..]);
    }
}

/// `msgpack_len` measures exactly one value, for every marker family rmp writes.
#[test]
fn msgpack_len_measures_one_value() {
    use switchyard::plane::payload::msgpack_len;
    let long = "x".repeat(70_000);
    let values = [
        serde_json::json!(null),
        serde_json::json!([
            true,
            false,
            0,
            127,
            128,
            255,
            256,
            65535,
            65536,
            4294967296u64,
            -1,
            -33,
            -129,
            -40000,
            -3000000000i64
        ]),
        serde_json::json!({"a": 1.5, "b": [1, [2, [3, {"c": "d"}]]], "e": {}}),
        serde_json::json!(["", "a".repeat(31), "b".repeat(32), "c".repeat(255), "d".repeat(256), long]),
        serde_json::json!((0..20).collect::<Vec<u32>>()),
        serde_json::json!((0..70_000).map(|i| i % 3).collect::<Vec<u32>>()),
    ];
    for v in &values {
        let bytes = rmp_serde::to_vec_named(v).unwrap();
        assert_eq!(msgpack_len(&bytes), Some(bytes.len()), "{v}");
        let mut more = bytes.clone();
        more.extend_from_slice(&[0xc0, 0x01]);
        assert_eq!(msgpack_len(&more), Some(bytes.len()));
        assert_eq!(msgpack_len(&bytes[..bytes.len() - 1]), None, "truncated");
    }
    // Binary, float32 and ext markers.
    let mut b = vec![0x94, 0xc4, 3, 1, 2, 3, 0xca, 0x3f, 0xc0, 0, 0, 0xd6, 7, 9, 9, 9, 9, 0xc8, 0x01, 0x2c, 7];
    b.extend_from_slice(&[0; 300]);
    assert_eq!(msgpack_len(&b), Some(b.len()));
    assert_eq!(msgpack_len(&[0xc1]), None);
}

/// The small JSON headers of the response stream (handshake, prologue, control words) read
/// by their quick paths exactly as serde reads them, and reject what serde rejects.
#[test]
fn small_headers_read_as_serde_reads_them() {
    fn same<T, E>(quick: Result<T, E>, serde: Result<T, serde_json::Error>, text: &[u8])
    where
        T: PartialEq + std::fmt::Debug,
        E: std::fmt::Debug,
    {
        match (quick, serde) {
            (Ok(a), Ok(b)) => assert_eq!(a, b, "{}", String::from_utf8_lossy(text)),
            (Err(_), Err(_)) => {}
            (a, b) => panic!("{}: quick {a:?}, serde {b:?}", String::from_utf8_lossy(text)),
        }
    }
    let handshakes: [&[u8]; 9] = [
        br#"{"subject":"e106ffe1-75e9-42c7-af1e-3888b0e2588c","stream_type":"response"}"#,
        br#"{"subject":"s","stream_type":"request"}"#,
        br#"{"subject":"","stream_type":"response"}"#,
        br#"{"subject":"a\"b","stream_type":"response"}"#,
        br#"{"subject":"a\u0041","stream_type":"response"}"#,
        br#"{"subject":"a","stream_type":"sideways"}"#,
        br#"{"subject":"a","stream_type":"response"} "#,
        br#"{"stream_type":"response","subject":"a"}"#,
        b"{\"subject\":\"\xff\",\"stream_type\":\"response\"}",
    ];
    for h in handshakes {
        same(CallHomeHandshake::from_json(h), serde_json::from_slice::<CallHomeHandshake>(h), h);
    }
    for p in [&br#"{"error":null}"#[..], br#"{"error":"boom"}"#, br#"{}"#, br#"{"error":1}"#] {
        same(StreamPrologue::from_json(p), serde_json::from_slice::<StreamPrologue>(p), p);
    }
    for w in [&b"\"sentinel\""[..], b"\"kill\"", b"\"stop\"", b" \"stop\"", b"\"halt\""] {
        same(ControlMessage::from_json(w), serde_json::from_slice::<ControlMessage>(w), w);
    }
}

proptest! {
    #[test]
    fn random_handshakes_read_as_serde_reads_them(subject in "\\PC{0,40}|[\\x00-\\x7f]{0,20}", request in any::<bool>()) {
        let kind = if request { "request" } else { "response" };
        let text = format!(r#"{{"subject":{},"stream_type":"{kind}"}}"#, serde_json::to_string(&subject).unwrap());
        let serde: CallHomeHandshake = serde_json::from_str(&text).unwrap();
        prop_assert_eq!(CallHomeHandshake::from_json(text.as_bytes()).unwrap(), serde);
    }
}
