//! The in-tree mock worker driven by a tiny frontend built from the plane codecs and std
//! sockets: request frames, FIFO acks, the call-back stream, kill / stop, bad input, and
//! file-backend registration read back by discovery.

use std::collections::HashMap;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant, SystemTime};

use bytes::BytesMut;
use serde_json::Value;
use switchyard::config::NamespaceFilter;
use switchyard::discovery::FileStore;
use switchyard::plane::{
    encode_control, encode_request_frame, Ack, AckDecoder, Annotated, Codec, ControlMessage, Decoded, FinishReason,
    LLMEngineOutput, PreprocessedRequest, RequestControlMessage, ResponseStreamDecoder, StopConditions, StreamEvent,
    StreamType, TcpStreamInfo, DEFAULT_MAX_MESSAGE_SIZE,
};
use switchyard::worker::{MockConfig, MockInput, MockWorker};

const T: Duration = Duration::from_secs(10);

/// A minimal frontend: one request connection, one call-back listener.
struct Frontend {
    conn: TcpStream,
    acks: BytesMut,
    listener: TcpListener,
    path: String,
    seq: u64,
}

/// What one call-back stream delivered.
#[derive(Debug, Default)]
struct Received<T> {
    subject: String,
    items: Vec<T>,
    complete_final: bool,
    sentinel: bool,
}

impl Frontend {
    fn new(w: &MockWorker) -> Frontend {
        let conn = TcpStream::connect(w.addr()).unwrap();
        conn.set_read_timeout(Some(T)).unwrap();
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        Frontend { conn, acks: BytesMut::new(), listener, path: w.endpoint_path().to_string(), seq: 0 }
    }

    /// Encodes a request frame; returns (frame bytes, subject).
    fn frame(&mut self, path: &str, codec: Codec, body: &[u8]) -> (Vec<u8>, String) {
        self.seq += 1;
        let id = format!("req-{}", self.seq);
        let subject = format!("subject-{}", self.seq);
        let info = TcpStreamInfo {
            address: self.listener.local_addr().unwrap().to_string(),
            subject: subject.clone(),
            context: id.clone(),
            stream_type: StreamType::Response,
        };
        let ctrl = RequestControlMessage::single_in_many_out(&id, codec, &info).unwrap().to_json().unwrap();
        let mut out = Vec::new();
        let headers = [("request-id", id.as_str()), ("x-endpoint-path", path)];
        encode_request_frame(&mut out, path, &headers, &ctrl, body, DEFAULT_MAX_MESSAGE_SIZE).unwrap();
        (out, subject)
    }

    fn send(&mut self, req: &PreprocessedRequest, codec: Codec) -> String {
        let path = self.path.clone();
        let (bytes, subject) = self.frame(&path, codec, &codec.encode(req).unwrap());
        self.conn.write_all(&bytes).unwrap();
        subject
    }

    fn read_ack(&mut self) -> Ack {
        let dec = AckDecoder::default();
        loop {
            if let Decoded::Frame(a) = dec.decode(&mut self.acks).unwrap() {
                return a;
            }
            let mut chunk = [0u8; 4096];
            let n = self.conn.read(&mut chunk).unwrap();
            assert!(n > 0, "worker closed the request connection");
            self.acks.extend_from_slice(&chunk[..n]);
        }
    }

    /// Accepts one call-back connection (None if none comes within `wait`).
    fn accept(&self, wait: Duration) -> Option<TcpStream> {
        self.listener.set_nonblocking(true).unwrap();
        let end = Instant::now() + wait;
        loop {
            match self.listener.accept() {
                Ok((s, _)) => {
                    s.set_nonblocking(false).unwrap();
                    s.set_read_timeout(Some(T)).unwrap();
                    return Some(s);
                }
                Err(_) if Instant::now() < end => std::thread::sleep(Duration::from_millis(2)),
                Err(_) => return None,
            }
        }
    }
}

/// Reads a whole stream until the sentinel or EOF; `cancel: Some((n, word))` sends `word`
/// (kill / stop) once `n` items have arrived.
fn read_stream<T: serde::de::DeserializeOwned + 'static>(
    mut s: TcpStream,
    codec: Codec,
    cancel: Option<(usize, ControlMessage)>,
) -> Received<T> {
    let mut dec = ResponseStreamDecoder::new(codec, DEFAULT_MAX_MESSAGE_SIZE);
    let mut buf = BytesMut::new();
    let mut r = Received { subject: String::new(), items: Vec::new(), complete_final: false, sentinel: false };
    let mut sent = false;
    loop {
        loop {
            match dec.decode::<T>(&mut buf).unwrap() {
                Decoded::Frame(StreamEvent::Handshake(h)) => {
                    assert_eq!(h.stream_type, StreamType::Response);
                    r.subject = h.subject;
                }
                Decoded::Frame(StreamEvent::Prologue(p)) => assert_eq!(p.error, None),
                Decoded::Frame(StreamEvent::Item(i)) => {
                    r.items.push(i);
                    if let Some((after, word)) = cancel {
                        if !sent && r.items.len() >= after {
                            let mut out = Vec::new();
                            encode_control(&mut out, word);
                            s.write_all(&out).unwrap();
                            sent = true;
                        }
                    }
                }
                Decoded::Frame(StreamEvent::CompleteFinal) => r.complete_final = true,
                Decoded::Frame(StreamEvent::Sentinel) => {
                    r.sentinel = true;
                    return r; // dropping `s` is the frontend's FIN
                }
                Decoded::Incomplete { .. } => break,
            }
        }
        let mut chunk = [0u8; 8192];
        match s.read(&mut chunk) {
            Ok(0) | Err(_) => return r,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    }
}

fn outputs(r: &Received<Annotated<LLMEngineOutput>>) -> Vec<&LLMEngineOutput> {
    r.items.iter().map(|a| a.data.as_ref().expect("data")).collect()
}

fn token_ids(r: &Received<Annotated<LLMEngineOutput>>) -> Vec<u32> {
    outputs(r).iter().flat_map(|o| o.token_ids.iter().copied()).collect()
}

fn finish(r: &Received<Annotated<LLMEngineOutput>>) -> Option<FinishReason> {
    outputs(r).last().and_then(|o| o.finish_reason.clone())
}

fn request(prompt: &[u32], max_tokens: Option<u32>) -> PreprocessedRequest {
    PreprocessedRequest {
        model: "mock-model".into(),
        token_ids: prompt.to_vec(),
        stop_conditions: StopConditions { max_tokens, ..Default::default() },
        ..Default::default()
    }
}

fn fast(cfg: MockConfig) -> MockConfig {
    MockConfig { fast: true, ..cfg }
}

/// One request, its ack and its whole stream.
fn roundtrip(w: &MockWorker, req: &PreprocessedRequest, codec: Codec) -> Received<Annotated<LLMEngineOutput>> {
    let mut fe = Frontend::new(w);
    let subject = fe.send(req, codec);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let r = read_stream(fe.accept(T).expect("call-back"), codec, None);
    assert_eq!(r.subject, subject);
    r
}

#[test]
fn random_tokens_follow_the_mocker_shape() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 5, vocab_size: 100, ..Default::default() })).unwrap();
    let r = roundtrip(&w, &request(&[1, 2, 3], None), Codec::Msgpack);
    assert!(r.complete_final && r.sentinel);
    let outs = outputs(&r);
    assert_eq!(outs.len(), 6, "5 token items + the final item");
    for o in &outs[..5] {
        assert_eq!(o.token_ids.len(), 1);
        assert!(o.token_ids[0] < 100);
        assert_eq!(o.finish_reason, None);
        assert_eq!(o.text, None);
    }
    let first = outs[0].completion_usage.as_ref().expect("usage on the first item");
    assert_eq!((first.prompt_tokens, first.completion_tokens, first.total_tokens), (3, 1, 4));
    assert!(outs[1..5].iter().all(|o| o.completion_usage.is_none()));
    let last = outs[5];
    assert!(last.token_ids.is_empty());
    assert_eq!(last.finish_reason, Some(FinishReason::Stop));
    let u = last.completion_usage.as_ref().expect("usage on the last item");
    assert_eq!((u.prompt_tokens, u.completion_tokens, u.total_tokens), (3, 5, 8));
    // Deterministic in the prompt.
    let again = roundtrip(&w, &request(&[1, 2, 3], None), Codec::Msgpack);
    assert_eq!(token_ids(&again), token_ids(&r));
    // The worker counts a stream as completed after its last write; the test may read the
    // sentinel first, so wait (bounded) for the count.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while w.stats().completed < 2 && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    assert_eq!(w.stats().completed, 2);
}

#[test]
fn max_tokens_caps_the_output_with_length() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 20, ..Default::default() })).unwrap();
    let r = roundtrip(&w, &request(&[7; 10], Some(8)), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 8);
    assert_eq!(finish(&r), Some(FinishReason::Length));
    let r = roundtrip(&w, &request(&[7; 10], Some(50)), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 20);
    assert_eq!(finish(&r), Some(FinishReason::Stop));
    let r = roundtrip(&w, &request(&[7; 10], Some(0)), Codec::Msgpack);
    assert!(token_ids(&r).is_empty());
    assert_eq!(finish(&r), Some(FinishReason::Length));
    assert!(r.complete_final && r.sentinel);
}

#[test]
fn script_is_emitted_exactly() {
    let script = vec![11, 22, 33, 44, 55];
    let w = MockWorker::start(fast(MockConfig { script: Some(script.clone()), ..Default::default() })).unwrap();
    let r = roundtrip(&w, &request(&[1], None), Codec::Msgpack);
    assert_eq!(token_ids(&r), script);
    assert_eq!(finish(&r), Some(FinishReason::Stop));
    let r = roundtrip(&w, &request(&[1], Some(3)), Codec::Msgpack);
    assert_eq!(token_ids(&r), vec![11, 22, 33]);
    assert_eq!(finish(&r), Some(FinishReason::Length));
}

#[test]
fn eos_ends_the_stream_with_eos() {
    let script = vec![5, 6, 2, 7, 8];
    let cfg = fast(MockConfig { script: Some(script), eos_token_id: Some(2), ..Default::default() });
    let w = MockWorker::start(cfg).unwrap();
    let r = roundtrip(&w, &request(&[1], None), Codec::Msgpack);
    assert_eq!(token_ids(&r), vec![5, 6, 2]);
    assert_eq!(finish(&r), Some(FinishReason::Eos));
    let mut req = request(&[1], None);
    req.stop_conditions.ignore_eos = Some(true);
    let r = roundtrip(&w, &req, Codec::Msgpack);
    assert_eq!(token_ids(&r), vec![5, 6, 2, 7, 8]);
    assert_eq!(finish(&r), Some(FinishReason::Stop));

    // Random mode: the EOS id only ever comes last.
    let cfg = fast(MockConfig { output_tokens: 50, vocab_size: 3, eos_token_id: Some(1), ..Default::default() });
    let w = MockWorker::start(cfg).unwrap();
    let r = roundtrip(&w, &request(&[9, 9], None), Codec::Msgpack);
    let ids = token_ids(&r);
    assert_eq!(ids.len(), 50);
    assert_eq!(ids.last(), Some(&1));
    assert!(!ids[..49].contains(&1));
    assert_eq!(finish(&r), Some(FinishReason::Eos));
}

/// `ignore_eos` with `max_tokens`: exactly `max_tokens` tokens (a script repeats), finish
/// `length`; without `ignore_eos` the natural length stays.
#[test]
fn ignore_eos_with_max_tokens_generates_exactly_max_tokens() {
    let cfg = fast(MockConfig { script: Some(vec![5, 6, 2]), eos_token_id: Some(2), ..Default::default() });
    let w = MockWorker::start(cfg).unwrap();
    let mut req = request(&[1], Some(8));
    req.stop_conditions.ignore_eos = Some(true);
    let r = roundtrip(&w, &req, Codec::Msgpack);
    assert_eq!(token_ids(&r), vec![5, 6, 2, 5, 6, 2, 5, 6]);
    assert_eq!(finish(&r), Some(FinishReason::Length));

    let w = MockWorker::start(fast(MockConfig { output_tokens: 4, ..Default::default() })).unwrap();
    let r = roundtrip(&w, &req, Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 8);
    assert_eq!(finish(&r), Some(FinishReason::Length));
    let r = roundtrip(&w, &request(&[1], Some(8)), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 4);
    assert_eq!(finish(&r), Some(FinishReason::Stop));
}

#[test]
fn json_codec_request_gets_json_frames() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 3, ..Default::default() })).unwrap();
    let r = roundtrip(&w, &request(&[1, 2], None), Codec::Json);
    assert_eq!(token_ids(&r).len(), 3);
    assert!(r.complete_final && r.sentinel);
}

#[test]
fn delays_are_honoured() {
    let cfg = MockConfig {
        ttft: Duration::from_millis(120),
        itl: Duration::from_millis(20),
        output_tokens: 4,
        ..Default::default()
    };
    let w = MockWorker::start(cfg).unwrap();
    let t0 = Instant::now();
    let r = roundtrip(&w, &request(&[1], None), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 4);
    assert!(t0.elapsed() >= Duration::from_millis(120 + 3 * 20), "{:?}", t0.elapsed());
}

#[test]
fn kill_mid_stream_stops_without_complete_final() {
    let cfg =
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(10), output_tokens: 500, ..Default::default() };
    let w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let s = fe.accept(T).unwrap();
    let r: Received<Annotated<LLMEngineOutput>> = read_stream(s, Codec::Msgpack, Some((3, ControlMessage::Kill)));
    assert!(!r.complete_final && !r.sentinel);
    assert!(r.items.len() >= 3 && r.items.len() < 20, "{} items after kill", r.items.len());
    let end = Instant::now() + T;
    while w.stats().killed == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(w.stats().killed, 1);
    assert_eq!(w.stats().completed, 0);
}

#[test]
fn stop_ends_the_stream_early_but_normally() {
    let cfg =
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(10), output_tokens: 500, ..Default::default() };
    let w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let r: Received<Annotated<LLMEngineOutput>> =
        read_stream(fe.accept(T).unwrap(), Codec::Msgpack, Some((2, ControlMessage::Stop)));
    assert!(r.complete_final && r.sentinel);
    assert!(token_ids(&r).len() < 20);
    assert_eq!(finish(&r), Some(FinishReason::Cancelled));
}

#[test]
fn frontend_closing_the_callback_ends_the_stream() {
    let cfg =
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(5), output_tokens: 10_000, ..Default::default() };
    let w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    drop(fe.accept(T).unwrap());
    let end = Instant::now() + T;
    while w.stats().killed + w.stats().stream_errors == 0 && Instant::now() < end {
        std::thread::sleep(Duration::from_millis(5));
    }
    assert_eq!(w.stats().completed, 0);
    assert_eq!(w.stats().killed + w.stats().stream_errors, 1);
}

#[test]
fn pipelined_requests_get_fifo_acks() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 4, ..Default::default() })).unwrap();
    let mut fe = Frontend::new(&w);
    let mut wire = Vec::new();
    let mut subjects = Vec::new();
    let good = fast_req_body();
    let path = fe.path.clone();
    for i in 0..12u32 {
        // Every fourth frame goes to an endpoint this worker does not serve.
        let p = if i % 4 == 3 { format!("{path}x") } else { path.clone() };
        let (bytes, subject) = fe.frame(&p, Codec::Msgpack, &good);
        wire.extend_from_slice(&bytes);
        subjects.push((i % 4 != 3).then_some(subject));
    }
    fe.conn.write_all(&wire).unwrap();
    for (i, s) in subjects.iter().enumerate() {
        match fe.read_ack() {
            Ack::Accepted => assert!(s.is_some(), "frame {i} should be refused"),
            Ack::Rejected(t) => {
                assert!(s.is_none(), "frame {i} refused: {t}");
                assert!(t.starts_with("Server unavailable: unknown endpoint "), "{t}");
            }
        }
    }
    let mut got: HashMap<String, usize> = HashMap::new();
    let served = subjects.iter().flatten().count();
    let streams: Vec<_> = (0..served).map(|_| fe.accept(T).expect("call-back")).collect();
    for s in streams {
        let r: Received<Annotated<LLMEngineOutput>> = read_stream(s, Codec::Msgpack, None);
        assert!(r.complete_final && r.sentinel);
        got.insert(r.subject.clone(), token_ids(&r).len());
    }
    assert_eq!(got.len(), served);
    for s in subjects.iter().flatten() {
        assert_eq!(got.get(s), Some(&4));
    }
    assert_eq!(w.stats().rejected, 3);
}

fn fast_req_body() -> Vec<u8> {
    Codec::Msgpack.encode(&request(&[4, 5, 6], None)).unwrap()
}

#[test]
fn undecodable_payload_is_acked_but_never_called_back() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 2, ..Default::default() })).unwrap();
    let mut fe = Frontend::new(&w);
    let path = fe.path.clone();
    // Body that is not a PreprocessedRequest.
    let (bad, _) = fe.frame(&path, Codec::Msgpack, &[0xc1, 0xc1, 0xc1]);
    fe.conn.write_all(&bad).unwrap();
    assert_eq!(fe.read_ack(), Ack::Accepted);
    assert!(fe.accept(Duration::from_millis(200)).is_none());
    assert_eq!(w.stats().decode_errors, 1);
    // The connection still works.
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let r: Received<Annotated<LLMEngineOutput>> = read_stream(fe.accept(T).unwrap(), Codec::Msgpack, None);
    assert_eq!(token_ids(&r).len(), 2);
}

#[test]
fn garbage_frames_are_refused_or_closed_never_crash() {
    let w = MockWorker::start(fast(MockConfig { output_tokens: 2, ..Default::default() })).unwrap();
    let garbage: [&[u8]; 3] = [
        // Header JSON that is not JSON.
        b"\x00\x01a\x00\x03xyz\x00\x00\x00\x00",
        // Payload longer than the 32 MiB limit.
        b"\x00\x01a\x00\x02{}\xff\xff\xff\xff",
        // Path that is not UTF-8.
        b"\x00\x02\xff\xfe\x00\x02{}\x00\x00\x00\x00",
    ];
    for g in garbage {
        let mut c = TcpStream::connect(w.addr()).unwrap();
        c.set_read_timeout(Some(T)).unwrap();
        c.write_all(g).unwrap();
        let mut got = Vec::new();
        let _ = c.read_to_end(&mut got); // the worker closes after its refusal
        let mut buf = BytesMut::from(&got[..]);
        match AckDecoder::default().decode(&mut buf).unwrap() {
            Decoded::Frame(Ack::Rejected(t)) => assert!(t.starts_with("Read error: "), "{t}"),
            other => panic!("expected a refusal, got {other:?}"),
        }
    }
    // Half a frame then EOF.
    let mut c = TcpStream::connect(w.addr()).unwrap();
    c.write_all(b"\x00\x10abc").unwrap();
    drop(c);
    // Still serving.
    let r = roundtrip(&w, &request(&[1], None), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 2);
}

#[test]
fn text_model_streams_openai_chunks() {
    let cfg = fast(MockConfig { output_tokens: 6, model_input: MockInput::Text, ..Default::default() });
    let w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    let body =
        serde_json::json!({"messages":[{"role":"user","content":"Hi"}],"model":"m","max_tokens":3,"stream":true});
    let path = fe.path.clone();
    let (bytes, _) = fe.frame(&path, Codec::Msgpack, &Codec::Msgpack.encode(&body).unwrap());
    fe.conn.write_all(&bytes).unwrap();
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let r: Received<Annotated<Value>> = read_stream(fe.accept(T).unwrap(), Codec::Msgpack, None);
    assert!(r.complete_final && r.sentinel);
    let chunks: Vec<&Value> = r.items.iter().map(|a| a.data.as_ref().unwrap()).collect();
    assert_eq!(chunks.len(), 4);
    assert_eq!(chunks[0]["object"], "chat.completion.chunk");
    assert_eq!(chunks[0]["model"], "m");
    assert_eq!(chunks[0]["choices"][0]["delta"]["role"], "assistant");
    assert!(chunks[1]["choices"][0]["delta"]["content"].as_str().unwrap().starts_with(" tok"));
    assert_eq!(chunks[3]["choices"][0]["finish_reason"], "length");
}

static DIRS: AtomicU64 = AtomicU64::new(0);

fn temp_dir() -> PathBuf {
    let d = std::env::temp_dir().join(format!(
        "switchyard-mock-worker-{}-{}",
        std::process::id(),
        DIRS.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn file_registration_is_read_back_by_discovery() {
    let root = temp_dir();
    let model_dir = temp_dir();
    std::fs::write(model_dir.join("config.json"), b"{}").unwrap();
    std::fs::write(model_dir.join("tokenizer.json"), b"{\"model\":{}}").unwrap();
    let cfg = MockConfig {
        model_name: "mock-qwen".into(),
        model_dir: Some(model_dir.clone()),
        keepalive: Duration::from_millis(50),
        codec: Codec::Json,
        ..Default::default()
    };
    let mut w = MockWorker::start(cfg).unwrap();
    let reg = w.register_file(&root).unwrap();
    assert!(reg.card_file.starts_with(root.join("v1/mdc")));
    assert!(reg.instance_file.starts_with(root.join("v1/instances")));
    let hex = format!("{:x}", w.instance_id());
    assert_eq!(
        reg.instance_file.file_name().unwrap().to_str().unwrap(),
        format!("dynamo%2Fbackend%2Fgenerate%2F{hex}")
    );
    // No temporaries left.
    for bucket in ["v1/mdc", "v1/instances"] {
        for e in std::fs::read_dir(root.join(bucket)).unwrap() {
            assert!(!e.unwrap().file_name().to_string_lossy().starts_with(".tmp_"));
        }
    }

    let mut store = FileStore::new(&root, NamespaceFilter::Any);
    let snap = store.scan(SystemTime::now()).unwrap();
    assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
    assert_eq!(snap.model_names(), vec!["mock-qwen".to_string()]);
    let served = &snap.served[0];
    assert_eq!(served.endpoint.instance_id, w.instance_id());
    let tcp = served.endpoint.tcp().unwrap();
    assert_eq!(tcp.addr, w.addr().to_string());
    assert_eq!(tcp.path, w.endpoint_path());
    assert_eq!(served.endpoint.request_plane_codec.as_deref(), Some("json"));
    assert!(served.card.model_type.chat() && served.card.model_type.completions());
    let slots: Vec<_> = served.card.file_slots().into_iter().map(|(n, s)| (n, s.kind.clone())).collect();
    assert_eq!(
        slots,
        vec![("model_info", "hf_config_json".to_string()), ("tokenizer", "hf_tokenizer_json".to_string())]
    );
    assert_eq!(served.card.tokenizer.as_ref().unwrap().file.size, Some(12));
    let registry = store.registry(&snap, SystemTime::now());
    assert_eq!(registry.models.len(), 1);
    assert_eq!(registry.models[0].name, "mock-qwen");
    assert_eq!(registry.endpoints, vec!["dyn://dynamo.backend.generate".to_string()]);

    // Keep-alive: an aged file gets a fresh mtime again.
    let old = SystemTime::now() - Duration::from_secs(60);
    std::fs::File::options().write(true).open(&reg.instance_file).unwrap().set_modified(old).unwrap();
    std::thread::sleep(Duration::from_millis(300));
    let mtime = std::fs::metadata(&reg.instance_file).unwrap().modified().unwrap();
    assert!(mtime > old + Duration::from_secs(50));

    // The discovered address serves requests.
    let r = roundtrip(&w, &request(&[1], Some(2)), Codec::Msgpack);
    assert_eq!(token_ids(&r).len(), 2);

    // Stop deletes the records.
    w.stop();
    assert!(!reg.card_file.exists() && !reg.instance_file.exists());
    assert!(store.scan(SystemTime::now()).unwrap().served.is_empty());
    let _ = std::fs::remove_dir_all(&root);
    let _ = std::fs::remove_dir_all(&model_dir);
}

#[test]
fn stop_is_prompt_with_streams_in_flight() {
    let cfg =
        MockConfig { ttft: Duration::ZERO, itl: Duration::from_millis(50), output_tokens: 1000, ..Default::default() };
    let mut w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let s = fe.accept(T).unwrap();
    let t0 = Instant::now();
    w.stop();
    assert!(t0.elapsed() < Duration::from_secs(3));
    let r: Received<Annotated<LLMEngineOutput>> = read_stream(s, Codec::Msgpack, None);
    assert!(!r.complete_final);
    assert!(TcpStream::connect_timeout(&w.addr(), Duration::from_millis(200)).is_err(), "listener still open");
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

#[test]
fn frames_match_the_spec_byte_vectors() {
    // docs/dynamo/request-plane.md §6.6 (req1 capture): a middle data frame for token 1687, complete_final, sentinel.
    let item =
        unhex(concat!(
        "0000000000000000", "0000000000000088", "0000000000000000",
        "82a46461746181a46461746189a9746f6b656e5f69647391cd0697a6746f6b656e73c0a474657874c0ab6f75747075745f74797065",
        "a474657874ad63756d5f6c6f675f70726f6273c0a96c6f675f70726f6273c0ac746f705f6c6f6770726f6273c0ad66696e6973685f",
        "726561736f6ec0a5696e646578c0ae636f6d706c6574655f66696e616cc2"
    ));
    let tail = unhex(concat!(
        "0000000000000000",
        "0000000000000011",
        "0000000000000000",
        "81ae636f6d706c6574655f66696e616cc3",
        "000000000000000a",
        "0000000000000000",
        "0000000000000000",
        "2273656e74696e656c22"
    ));
    let prologue = unhex("000000000000000e00000000000000000000000000000000" /* + */);
    let cfg = fast(MockConfig { script: Some(vec![5, 1687, 9]), ..Default::default() });
    let w = MockWorker::start(cfg).unwrap();
    let mut fe = Frontend::new(&w);
    fe.send(&request(&[1], None), Codec::Msgpack);
    assert_eq!(fe.read_ack(), Ack::Accepted);
    let mut s = fe.accept(T).unwrap();
    let mut raw = Vec::new();
    let mut chunk = [0u8; 4096];
    while !raw.ends_with(b"\"sentinel\"") {
        let n = s.read(&mut chunk).unwrap();
        assert!(n > 0);
        raw.extend_from_slice(&chunk[..n]);
    }
    let find = |needle: &[u8]| raw.windows(needle.len()).any(|w| w == needle);
    assert!(find(&item), "the token-1687 item frame is not byte-identical to the capture");
    assert!(raw.ends_with(&tail), "complete_final + sentinel differ from the capture");
    assert!(find(&[&prologue[..], b"{\"error\":null}"].concat()));
}
