//! The shard-side request plane (`transport::client`, `transport::callback`) against the in-tree
//! mock worker and tiny std-socket fakes, on both monoio drivers (io_uring when the kernel
//! allows it, epoll always).

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use switchyard::plane::{
    encode_ack, encode_handshake, encode_item, encode_prologue, Ack, Annotated, CallHomeHandshake, Codec, Decoded,
    FinishReason, LLMEngineOutput, RequestControlMessage, RequestFrameDecoder, StreamEvent, StreamPrologue, StreamType,
    DEFAULT_MAX_MESSAGE_SIZE,
};
use switchyard::transport::callback::{CallbackServer, Item, ResponseStream};
use switchyard::transport::client::{RequestPlane, TransportError, WorkerConns};
use switchyard::worker::{MockConfig, MockWorker};

const DEADLINE: Duration = Duration::from_secs(5);

use common::on_both_drivers as run;

fn plane() -> RequestPlane {
    RequestPlane::new(WorkerConns::default(), CallbackServer::bind("127.0.0.1", DEFAULT_MAX_MESSAGE_SIZE).unwrap())
}

use common::mock_request as request;

fn mock(fast: bool, script: Option<Vec<u32>>) -> MockWorker {
    MockWorker::start(MockConfig {
        fast,
        script,
        ttft: Duration::from_millis(5),
        itl: Duration::from_millis(1),
        output_tokens: 8,
        ..Default::default()
    })
    .unwrap()
}

/// Everything a stream yields up to and including the sentinel.
struct Collected {
    items: Vec<Item>,
    complete_final: bool,
}

async fn collect(mut s: ResponseStream) -> Result<Collected, TransportError> {
    let mut out = Collected { items: Vec::new(), complete_final: false };
    let mut sentinel = false;
    while let Some(ev) = s.next().await {
        match ev? {
            StreamEvent::Handshake(hs) => assert_eq!(hs.subject, s.subject()),
            StreamEvent::Prologue(p) => assert_eq!(p.error, None),
            StreamEvent::Item(i) => out.items.push(i.into_tokens().expect("a Tokens item")),
            StreamEvent::CompleteFinal => out.complete_final = true,
            StreamEvent::Sentinel => sentinel = true,
        }
    }
    assert!(sentinel && out.complete_final);
    Ok(out)
}

fn tokens(c: &Collected) -> Vec<u32> {
    c.items.iter().flat_map(|i| i.data.as_ref().unwrap().token_ids.clone()).collect()
}

fn finish(c: &Collected) -> Option<FinishReason> {
    c.items.last().and_then(|i| i.data.as_ref()).and_then(|d| d.finish_reason.clone())
}

async fn generate(p: &RequestPlane, w: &MockWorker, id: &str, max: Option<u32>) -> Result<Collected, TransportError> {
    let s = p.generate(w.addr(), w.endpoint_path(), Codec::Msgpack, &request(max), id, DEADLINE).await?;
    collect(s).await
}

/// A full, successful request: the shard still works.
async fn healthy(p: &RequestPlane, w: &MockWorker) {
    let c = generate(p, w, "healthy", Some(3)).await.unwrap();
    assert_eq!(tokens(&c).len(), 3.min(w.config().output_tokens));
    assert_eq!(p.callbacks.registered(), 0);
}

async fn eventually(what: &str, cond: impl Fn() -> bool) {
    let end = Instant::now() + Duration::from_secs(5);
    while !cond() {
        assert!(Instant::now() < end, "timed out waiting for {what}");
        monoio::time::sleep(Duration::from_millis(5)).await;
    }
}

// ---------------------------------------------------------------- fakes

#[derive(Clone, Copy)]
enum Fake {
    /// Acks every frame, never calls back.
    AckOnly,
    /// Refuses every frame with this text.
    Reject(&'static str),
    /// Reads a frame and closes without acking.
    CloseNoAck,
    /// Acks, calls back, sends handshake, prologue and one item, then closes.
    HalfStream,
    /// Acks, calls back, sends handshake and prologue, then bytes that are no frame, and
    /// keeps the connection open.
    Garbage,
}

fn fake_worker(mode: Fake) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    std::thread::spawn(move || {
        for conn in l.incoming().flatten() {
            std::thread::spawn(move || fake_conn(conn, mode));
        }
    });
    addr
}

fn fake_conn(mut conn: TcpStream, mode: Fake) {
    let decoder = RequestFrameDecoder::default();
    let mut buf = BytesMut::new();
    let mut chunk = [0u8; 4096];
    loop {
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        while let Ok(Decoded::Frame(frame)) = decoder.decode(&mut buf) {
            let mut out = Vec::new();
            match mode {
                Fake::CloseNoAck => return,
                Fake::Reject(text) => encode_ack(&mut out, &Ack::Rejected(text.into())),
                Fake::AckOnly | Fake::HalfStream | Fake::Garbage => encode_ack(&mut out, &Ack::Accepted),
            }
            conn.write_all(&out).unwrap();
            if let Fake::HalfStream | Fake::Garbage = mode {
                let tp = frame.two_part(DEFAULT_MAX_MESSAGE_SIZE).unwrap();
                let ctl = RequestControlMessage::from_json(tp.header).unwrap();
                let info = ctl.connection_info.tcp_info().unwrap();
                let mut back = TcpStream::connect(&info.address).unwrap();
                let mut s = Vec::new();
                let hs = CallHomeHandshake { subject: info.subject, stream_type: StreamType::Response };
                encode_handshake(&mut s, &hs).unwrap();
                encode_prologue(&mut s, &StreamPrologue { error: None }).unwrap();
                if let Fake::Garbage = mode {
                    // A two-part header declaring absurd lengths, then noise.
                    s.extend_from_slice(&[0xff; 24]);
                    s.extend_from_slice(b"this is not a frame at all");
                    back.write_all(&s).unwrap();
                    std::thread::sleep(Duration::from_secs(3));
                    return;
                }
                let item = LLMEngineOutput { token_ids: vec![7], ..Default::default() };
                encode_item(&mut s, ctl.payload_codec, &Annotated::from_data(item)).unwrap();
                back.write_all(&s).unwrap();
                drop(back);
            }
        }
    }
}

fn refused_addr() -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    l.local_addr().unwrap()
}

// ---------------------------------------------------------------- tests

#[test]
fn scripted_generate_fast_and_delayed() {
    run(|| async {
        let p = plane();
        for fast in [true, false] {
            let w = mock(fast, Some(vec![11, 22, 33, 44]));
            let c = generate(&p, &w, "req-script", None).await.unwrap();
            assert_eq!(tokens(&c), vec![11, 22, 33, 44]);
            assert_eq!(finish(&c), Some(FinishReason::Stop));
            let usage = c.items.last().unwrap().data.as_ref().unwrap().completion_usage.clone().unwrap();
            assert_eq!((usage.prompt_tokens, usage.completion_tokens), (3, 4));
            assert_eq!(p.callbacks.registered(), 0);
            eventually("completed", || w.stats().completed == 1).await;
        }
    });
}

#[test]
fn json_codec_roundtrip() {
    run(|| async {
        let p = plane();
        let w = mock(true, Some(vec![5, 6]));
        let s = p.generate(w.addr(), w.endpoint_path(), Codec::Json, &request(None), "req-json", DEADLINE).await;
        assert_eq!(tokens(&collect(s.unwrap()).await.unwrap()), vec![5, 6]);
    });
}

#[test]
fn max_tokens_caps_the_stream() {
    run(|| async {
        let p = plane();
        let w = mock(true, None);
        let c = generate(&p, &w, "req-max", Some(3)).await.unwrap();
        assert_eq!(tokens(&c).len(), 3);
        assert_eq!(finish(&c), Some(FinishReason::Length));
    });
}

#[test]
fn twenty_concurrent_requests_share_one_connection() {
    run(|| async {
        let p = plane();
        for (round, fast) in [(1, true), (2, false)] {
            let w = std::rc::Rc::new(mock(fast, None));
            let handles: Vec<_> = (0..20)
                .map(|i| {
                    let (p, w) = (p.clone(), w.clone());
                    monoio::spawn(async move { generate(&p, &w, &format!("req-{i}"), Some(i % 5 + 1)).await })
                })
                .collect();
            for (i, h) in handles.into_iter().enumerate() {
                let c = h.await.unwrap();
                assert_eq!(tokens(&c).len() as u32, i as u32 % 5 + 1);
            }
            assert_eq!(p.conns.dials(), round, "one pipelined connection per worker");
            eventually("20 completed", || w.stats().completed == 20).await;
            assert_eq!(w.stats().frames, 20);
            assert_eq!(p.callbacks.registered(), 0);
        }
    });
}

#[test]
fn dropping_the_stream_kills_the_worker_stream() {
    run(|| async {
        let p = plane();
        let w = MockWorker::start(MockConfig {
            ttft: Duration::from_millis(1),
            itl: Duration::from_millis(20),
            output_tokens: 500,
            ..Default::default()
        })
        .unwrap();
        let mut s =
            p.generate(w.addr(), w.endpoint_path(), Codec::Msgpack, &request(None), "k", DEADLINE).await.unwrap();
        let mut items = 0;
        while items < 2 {
            if let StreamEvent::Item(_) = s.next().await.unwrap().unwrap() {
                items += 1;
            }
        }
        drop(s);
        assert_eq!(p.callbacks.registered(), 0);
        eventually("killed", || w.stats().killed == 1).await;
        assert_eq!(w.stats().completed, 0);
        healthy(&p, &w).await;
    });
}

#[test]
fn worker_that_never_calls_back_hits_the_deadline() {
    run(|| async {
        let p = plane();
        let fake = fake_worker(Fake::AckOnly);
        let deadline = Duration::from_millis(150);
        let started = Instant::now();
        let mut s =
            p.generate(fake, "x/dynamo/backend/generate", Codec::Msgpack, &request(None), "r", deadline).await.unwrap();
        match s.next().await {
            Some(Err(TransportError::CallbackTimeout { after, .. })) => assert_eq!(after, deadline),
            other => panic!("expected a call-back timeout, got {other:?}"),
        }
        assert!(started.elapsed() >= deadline);
        assert!(s.next().await.is_none());
        assert_eq!(p.callbacks.registered(), 0);
        healthy(&p, &mock(true, None)).await;
    });
}

#[test]
fn worker_closing_mid_stream_is_an_incomplete_stream() {
    run(|| async {
        let p = plane();
        let fake = fake_worker(Fake::HalfStream);
        let s = p.generate(fake, "x/dynamo/backend/generate", Codec::Msgpack, &request(None), "r", DEADLINE).await;
        let err = collect(s.unwrap()).await.err().unwrap();
        assert!(matches!(err, TransportError::StreamIncomplete { .. }), "{err:?}");
        assert!(err.to_string().contains("stream ended before generation completed"));
        assert!(err.is_retryable());
        assert_eq!(p.callbacks.registered(), 0);
        healthy(&p, &mock(true, None)).await;
    });
}

#[test]
fn garbage_on_the_response_stream_is_an_error_not_a_hang() {
    run(|| async {
        let p = plane();
        let fake = fake_worker(Fake::Garbage);
        let started = Instant::now();
        let s = p.generate(fake, "x/dynamo/backend/generate", Codec::Msgpack, &request(None), "r", DEADLINE).await;
        let err = collect(s.unwrap()).await.err().unwrap();
        assert!(started.elapsed() < Duration::from_secs(2), "noticed at once, not at a timeout");
        assert!(!matches!(err, TransportError::CallbackTimeout { .. }), "{err:?}");
        assert_eq!(p.callbacks.registered(), 0);
        healthy(&p, &mock(true, None)).await;
    });
}

#[test]
fn error_acks_are_typed() {
    run(|| async {
        let p = plane();
        let w = mock(true, None);
        let req = request(None);
        let r = p.generate(w.addr(), "deadbeef/dynamo/backend/generate", Codec::Msgpack, &req, "r", DEADLINE);
        match r.await.err().unwrap() {
            TransportError::Rejected { text } => assert!(text.starts_with("Server unavailable"), "{text}"),
            other => panic!("{other:?}"),
        }
        assert_eq!(p.callbacks.registered(), 0);
        // The connection survives a refusal.
        healthy(&p, &w).await;
        assert_eq!(p.conns.dials(), 1);

        let fake = fake_worker(Fake::Reject("Server overloaded: worker at capacity"));
        let err = p.generate(fake, "x/y/z/w", Codec::Msgpack, &request(None), "r", DEADLINE).await.err().unwrap();
        assert!(err.is_overloaded(), "{err:?}");
        assert_eq!(p.callbacks.registered(), 0);
    });
}

#[test]
fn connect_refused_is_cannot_connect() {
    run(|| async {
        let p = plane();
        let dead = refused_addr();
        let err = p.generate(dead, "x/y/z/w", Codec::Msgpack, &request(None), "r", DEADLINE).await.err().unwrap();
        assert!(matches!(err, TransportError::CannotConnect { addr, .. } if addr == dead), "{err:?}");
        assert!(err.is_retryable());
        assert_eq!(p.conns.connection_count(), 0);
        assert_eq!(p.callbacks.registered(), 0);
        healthy(&p, &mock(true, None)).await;
    });
}

#[test]
fn broken_connection_fails_pending_and_reconnects() {
    run(|| async {
        let p = plane();
        let fake = fake_worker(Fake::CloseNoAck);
        for round in 1..=2 {
            let err = p.generate(fake, "x/y/z/w", Codec::Msgpack, &request(None), "r", DEADLINE).await.err().unwrap();
            assert!(matches!(err, TransportError::ConnectionLost { .. }), "{err:?}");
            assert_eq!(p.conns.dials(), round);
            assert_eq!(p.conns.connection_count(), 0);
        }
        assert_eq!(p.callbacks.registered(), 0);
        healthy(&p, &mock(true, None)).await;
    });
}

#[test]
fn unknown_subject_is_closed() {
    run(|| async {
        let p = plane();
        let addr = p.callbacks.addr();
        let done = std::thread::spawn(move || {
            let mut c = TcpStream::connect(addr).unwrap();
            let mut s = Vec::new();
            let hs = CallHomeHandshake { subject: "nobody".into(), stream_type: StreamType::Response };
            encode_handshake(&mut s, &hs).unwrap();
            c.write_all(&s).unwrap();
            c.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut b = [0u8; 16];
            matches!(c.read(&mut b), Ok(0) | Err(_))
        });
        eventually("closed", || done.is_finished()).await;
        assert!(done.join().unwrap());
        healthy(&p, &mock(true, None)).await;
    });
}
