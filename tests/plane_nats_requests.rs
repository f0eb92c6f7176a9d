//! The shard's NATS request publisher (`transport::nats`) against a real `nats-server` (Debian
//! package), on both monoio drivers: requests arrive on the worker's subject with 1.6.1's
//! headers and the two-part payload, replies pair with their requests (an empty reply is the
//! ack, a non-empty one the worker's refusal), nobody listening is a no-responders error, a
//! reply that never comes times out, and a server that goes away fails requests cleanly and is
//! dialed again once it is back. The test plays the worker with the event plane's subscriber
//! and a raw publisher; the real `dynamo.mocker` on NATS is `scripts/interop_nats.sh`.

mod common;

use std::sync::mpsc;
use std::time::{Duration, Instant};

use common::nats::{NatsServer, Publisher};
use common::on_both_drivers as run;
use switchyard::ingest::nats::{NatsMsg, Sub};
use switchyard::plane::frame::TwoPartRef;
use switchyard::transport::client::TransportError;
use switchyard::transport::nats::{NatsConfig, NatsRequests};

const SUBJECT: &str = "dynamo_backend.generate-1f";
const HEADERS: [(&str, &str); 2] = [("request-id", "req-1"), ("x-frontend-send-ts-ns", "1795763985213188871")];

/// A worker on `SUBJECT`: every request is sent to `seen`, and answered with the next reply
/// of `replies` (`None`: no answer), until `n` requests came.
fn worker(server: &NatsServer, replies: Vec<Option<&'static [u8]>>) -> mpsc::Receiver<NatsMsg> {
    let mut sub = Sub::connect(&server.url(), &[SUBJECT], Duration::from_secs(5), 1 << 20).expect("subscribe");
    let mut publisher = Publisher::connect(server.port()).expect("publisher");
    let (seen, got) = mpsc::channel();
    std::thread::spawn(move || {
        for reply in replies {
            let Ok(msg) = sub.recv() else { return };
            let to = msg.reply.clone().expect("a request has a reply subject");
            let _ = seen.send(msg);
            if let Some(bytes) = reply {
                publisher.publish(&to, bytes);
                let _ = publisher.flush();
            }
        }
    });
    got
}

fn requests(server: &NatsServer, ack_timeout: Duration) -> NatsRequests {
    let mut cfg = NatsConfig::from_url(&server.url()).expect("the server's URL");
    cfg.ack_timeout = ack_timeout;
    cfg.connect_timeout = Duration::from_secs(2);
    NatsRequests::new(cfg)
}

#[test]
fn requests_reach_the_subject_and_replies_are_acks() {
    let server = NatsServer::start();
    let got = worker(&server, [Some(&b""[..]), Some(&b"Server overloaded: worker at capacity"[..])].repeat(2));
    run(|| async {
        let nats = requests(&server, Duration::from_secs(5));
        nats.request(SUBJECT, &HEADERS, b"{\"id\":\"req-1\"}", b"body").await.expect("an empty reply is the ack");
        let refused = nats.request(SUBJECT, &HEADERS, b"{}", b"").await;
        assert_eq!(
            refused,
            Err(TransportError::Rejected { text: "Server overloaded: worker at capacity".into() }),
            "a non-empty reply is the worker's refusal"
        );
        assert!(refused.unwrap_err().is_overloaded());
        assert_eq!(nats.dials(), 1, "one connection for every request");
    });
    let first = got.recv_timeout(Duration::from_secs(5)).expect("the worker saw the request");
    assert_eq!(first.subject, SUBJECT);
    let headers = String::from_utf8(first.headers.clone().expect("HMSG")).unwrap();
    assert_eq!(headers, "NATS/1.0\r\nrequest-id: req-1\r\nx-frontend-send-ts-ns: 1795763985213188871\r\n\r\n");
    let two = TwoPartRef::parse_exact(&first.payload, 1 << 20).expect("a two-part payload");
    assert_eq!((two.header, two.body), (&b"{\"id\":\"req-1\"}"[..], &b"body"[..]));
    assert!(first.reply.as_deref().is_some_and(|r| r.starts_with("_INBOX.")), "{:?}", first.reply);
}

#[test]
fn nobody_listening_is_a_no_responders_error() {
    let server = NatsServer::start();
    run(|| async {
        let nats = requests(&server, Duration::from_secs(20));
        let t = Instant::now();
        let err = nats.request("dynamo_backend.generate-dead", &HEADERS, b"{}", b"").await.unwrap_err();
        assert!(
            matches!(&err, TransportError::CannotConnect { detail, .. } if detail.contains("no responders")),
            "{err:?}"
        );
        assert!(err.is_retryable(), "another worker may take it");
        assert!(t.elapsed() < Duration::from_secs(5), "answered by the server, not by a timeout");
    });
}

#[test]
fn a_reply_that_never_comes_times_out() {
    let server = NatsServer::start();
    let _got = worker(&server, vec![None, None]);
    run(|| async {
        let nats = requests(&server, Duration::from_millis(300));
        let err = nats.request(SUBJECT, &HEADERS, b"{}", b"").await.unwrap_err();
        assert!(matches!(err, TransportError::AckTimeout { .. }), "{err:?}");
    });
}

#[test]
fn a_server_that_goes_away_fails_requests_then_is_dialed_again() {
    let server = std::cell::RefCell::new(NatsServer::start());
    run(|| async {
        let nats = requests(&server.borrow(), Duration::from_secs(5));
        // Connected: nobody listens, the server says so.
        let err = nats.request("nobody.here", &HEADERS, b"{}", b"").await.unwrap_err();
        assert!(format!("{err}").contains("no responders"), "{err}");
        let dials = nats.dials();
        server.borrow_mut().kill();
        let t = Instant::now();
        // The connection breaks (the request in flight fails), or the dial after it fails.
        loop {
            match nats.request("nobody.here", &HEADERS, b"{}", b"").await {
                Err(TransportError::CannotConnect { detail, .. }) if !detail.contains("no responders") => break,
                Err(TransportError::ConnectionLost { .. }) => {}
                other => assert!(t.elapsed() < Duration::from_secs(5), "server down, still: {other:?}"),
            }
        }
        assert!(t.elapsed() < Duration::from_secs(5), "failed within the connect timeout");
        server.borrow_mut().restart();
        let err = nats.request("nobody.here", &HEADERS, b"{}", b"").await.unwrap_err();
        assert!(format!("{err}").contains("no responders"), "connected again: {err}");
        assert!(nats.dials() > dials, "dialed again");
    });
}
