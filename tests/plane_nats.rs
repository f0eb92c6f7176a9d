//! The event plane's NATS subscriber against a real `nats-server` (Debian package) and against
//! scripted fake servers: the captured messages of a real 1.6.1 worker arrive byte-exact on
//! the subjects its discovery records name, wildcards and headers, large messages split
//! across reads, a server restart, and junk that must end in an error, never a panic or hang.

mod common;

use std::io::{ErrorKind, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::time::{Duration, Instant};

use common::nats::{collect, wait_readable, NatsServer, Publisher};
use serde_json::Value;
use switchyard::discovery::records::{parse_record, EventChannelRecord, EventTransport, Record};
use switchyard::ingest::nats::Sub;
use switchyard::plane::kv_events::{decode_kv_events, decode_nats_message};

const T: Duration = Duration::from_secs(5);
const MAX: usize = 1 << 20;
/// The topics the 1.6.1 frontend subscribes to in kv mode.
const FRONTEND_TOPICS: [&str; 3] = ["kv-events", "kv_metrics", "active_sequences_events"];

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len()).step_by(2).map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap()).collect()
}

/// The captured worker messages: `(subject, body)` in arrival order.
fn captured() -> Vec<(String, Vec<u8>)> {
    let text = std::fs::read_to_string("tests/data/nats/messages.json").unwrap();
    let msgs: Vec<Value> = serde_json::from_str(&text).unwrap();
    msgs.iter()
        .map(|m| (m["subject"].as_str().unwrap().to_string(), unhex(m["payload_hex"].as_str().unwrap())))
        .collect()
}

/// The captured discovery records, by `<bucket>/<file name>`.
fn records() -> Vec<(String, Value)> {
    let text = std::fs::read_to_string("tests/data/nats/discovery.json").unwrap();
    let map: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    map.into_iter().collect()
}

/// Drains until the connection fails (5 s at most) and returns the error.
fn drain_until_error(sub: &mut Sub) -> std::io::Error {
    let deadline = Instant::now() + T;
    let mut got = Vec::new();
    loop {
        if let Err(e) = sub.drain(&mut got) {
            return e;
        }
        assert!(Instant::now() < deadline, "no error 5 s after the server went away");
        wait_readable(sub, 100);
    }
}

#[test]
fn captured_worker_messages_arrive_byte_exact_on_the_discovered_subjects() {
    // The worker's event channels name the subjects.
    let mut channels = Vec::new();
    let mut source = None;
    for (key, value) in records() {
        let (record, raw) = parse_record(value.to_string().as_bytes()).unwrap();
        match record {
            Record::EventChannel(_) => channels.push(EventChannelRecord::parse(&raw).unwrap()),
            Record::EventSource(_) => source = Some(raw),
            Record::Endpoint(_) => {}
            Record::Model(_) => panic!("{key}: no model cards in this capture"),
        }
    }
    assert_eq!(channels.len(), 4);
    for c in &channels {
        let prefix = "namespace.dynamo.component.backend.endpoint.generate";
        assert_eq!(c.transport, EventTransport::Nats { subject_prefix: prefix.into() });
    }
    let source = source.expect("the kv-events event source");
    let subjects: Vec<String> = channels
        .iter()
        .filter(|c| FRONTEND_TOPICS.contains(&c.topic.as_str()))
        .map(|c| c.nats_subject().unwrap())
        .collect();
    assert_eq!(subjects.len(), 3);

    let server = NatsServer::start();
    let refs: Vec<&str> = subjects.iter().map(String::as_str).collect();
    let mut sub = Sub::connect(&server.url(), &refs, T, MAX).unwrap();
    assert!(sub.server_info().headers);
    let mut publisher = Publisher::connect(server.port()).unwrap();
    let all = captured();
    for (subject, body) in &all {
        publisher.publish(subject, body);
    }
    publisher.publish(&subjects[0], b"marker");
    publisher.flush().unwrap();

    // forward-pass-metrics is not subscribed: everything else, in order, then the marker.
    let expected: Vec<&(String, Vec<u8>)> = all.iter().filter(|(s, _)| subjects.contains(s)).collect();
    assert_eq!(expected.len(), all.len() - 1);
    let got = collect(&mut sub, expected.len() + 1);
    for (m, (subject, body)) in got.iter().zip(&expected) {
        assert_eq!((&m.subject, &m.payload, &m.headers), (subject, body, &None));
    }
    assert_eq!(got.last().unwrap().payload, b"marker");

    // The kv-events bodies decode into events of the worker the event source names, from the
    // publisher the channel names.
    let kv = channels.iter().find(|c| c.topic == "kv-events").unwrap();
    let worker = source["metadata"]["worker"]["worker_id"].as_u64().unwrap();
    let mut events = 0;
    for m in got.iter().filter(|m| m.subject.ends_with(".kv-events")) {
        let msg = decode_nats_message(m.subject.as_bytes(), &m.payload).unwrap();
        assert_eq!(msg.publisher_id, kv.instance_id);
        assert_eq!(source["publisher_id"].as_u64(), Some(msg.publisher_id));
        for e in decode_kv_events(msg.envelope.payload).unwrap() {
            assert_eq!(e.worker_id, worker);
            events += 1;
        }
    }
    assert_eq!(events, 2);
}

#[test]
fn zmq_channel_records_still_decode() {
    let text = std::fs::read_to_string("tests/data/discovery/kv-discovery-snapshot.json").unwrap();
    let snap: serde_json::Map<String, Value> = serde_json::from_str(&text).unwrap();
    let mut zmq = 0;
    for (key, v) in snap.iter().filter(|(k, _)| k.starts_with("v1/event_channels/")) {
        let c = EventChannelRecord::parse(&v["content"]).unwrap();
        let EventTransport::Zmq { endpoint } = &c.transport else { panic!("{key}: {:?}", c.transport) };
        assert!(endpoint.starts_with("tcp://"), "{endpoint}");
        assert_eq!(c.nats_subject(), None);
        zmq += 1;
    }
    assert!(zmq > 0);
    let broker = serde_json::json!({"topic": "kv-events", "instance_id": 1,
        "transport": {"kind": "ZmqBroker", "config": {"xsub_endpoints": [], "xpub_endpoints": []}}});
    assert_eq!(EventChannelRecord::parse(&broker).unwrap().transport, EventTransport::Other);
    assert!(EventChannelRecord::parse(&serde_json::json!({"topic": "kv-events"})).is_err());
    let no_prefix = serde_json::json!({"topic": "kv-events", "instance_id": 1, "transport": {"kind": "Nats"}});
    let e = EventChannelRecord::parse(&no_prefix).unwrap_err();
    assert!(e.contains("config.subject_prefix"), "{e}");
}

#[test]
fn wildcards_headers_and_messages_split_across_reads() {
    let server = NatsServer::start();
    let subjects = ["namespace.*.component.backend.endpoint.generate.kv-events", "other.>"];
    let mut sub = Sub::connect(&server.url(), &subjects, T, MAX).unwrap();
    let mut publisher = Publisher::connect(server.port()).unwrap();
    let kv = captured().into_iter().find(|(s, _)| s.ends_with(".kv-events")).unwrap().1;
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8).collect();
    let headers = b"NATS/1.0\r\nX-Test: one\r\n\r\n";
    publisher.publish("namespace.ns2.component.backend.endpoint.generate.kv-events", &kv);
    publisher.publish("namespace.dynamo.component.backend.endpoint.generate.kv_metrics", b"not subscribed");
    publisher.publish_with_headers("other.a.b", headers, b"with headers");
    publisher.publish("other.big", &big);
    for i in 0..200u32 {
        publisher.publish("other.n", &i.to_be_bytes());
    }
    publisher.flush().unwrap();

    let got = collect(&mut sub, 203);
    assert_eq!(got[0].subject, "namespace.ns2.component.backend.endpoint.generate.kv-events");
    assert_eq!(got[0].payload, kv);
    assert_eq!((got[1].subject.as_str(), got[1].headers.as_deref()), ("other.a.b", Some(&headers[..])));
    assert_eq!(got[1].payload, b"with headers");
    assert_eq!((got[2].subject.as_str(), got[2].payload == big), ("other.big", true));
    for (i, m) in got[3..].iter().enumerate() {
        assert_eq!((m.subject.as_str(), m.payload.as_slice()), ("other.n", &(i as u32).to_be_bytes()[..]));
    }
    // A client PING is answered.
    sub.ping().unwrap();
    assert_eq!(sub.pings_outstanding(), 1);
    let deadline = Instant::now() + T;
    while sub.pings_outstanding() > 0 {
        assert!(Instant::now() < deadline, "no PONG");
        wait_readable(&sub, 100);
        sub.drain(&mut Vec::new()).unwrap();
    }
}

#[test]
fn payloads_over_the_limit_end_the_connection() {
    let server = NatsServer::start();
    let mut small = Sub::connect(&server.url(), &["s"], T, 1000).unwrap();
    let mut publisher = Publisher::connect(server.port()).unwrap();
    publisher.publish("s", &[7; 1000]);
    publisher.publish("s", &[7; 1001]);
    publisher.flush().unwrap();
    let first = small.recv().unwrap();
    assert_eq!(first.payload.len(), 1000, "the limit itself is allowed");
    let e = drain_until_error(&mut small);
    assert_eq!(e.kind(), ErrorKind::InvalidData);
    assert!(e.to_string().contains("exceeds the limit of 1000"), "{e}");
}

#[test]
fn a_server_restart_ends_the_connection_and_a_new_one_works() {
    let mut server = NatsServer::start();
    let dead = format!("nats://127.0.0.1:{}", common::free_port());
    // A list: the first server does not answer, the second does.
    let mut sub = Sub::connect(&format!("{dead},{}", server.url()), &["a.*"], T, MAX).unwrap();
    assert_eq!(sub.peer().port(), server.port());
    let e = Sub::connect(&dead, &["a.*"], T, MAX).err().unwrap();
    assert_eq!(e.kind(), ErrorKind::ConnectionRefused, "{e}");

    server.restart();
    let e = drain_until_error(&mut sub);
    assert!(matches!(e.kind(), ErrorKind::UnexpectedEof | ErrorKind::ConnectionReset), "{e}");

    let mut sub = Sub::connect(&server.url(), &["a.*"], T, MAX).unwrap();
    let mut publisher = Publisher::connect(server.port()).unwrap();
    publisher.publish("a.b", b"after the restart");
    publisher.flush().unwrap();
    let got = collect(&mut sub, 1);
    assert_eq!((got[0].subject.as_str(), got[0].payload.as_slice()), ("a.b", &b"after the restart"[..]));
}

/// What a fake server does with its connection.
type Script = Box<dyn FnOnce(TcpStream) + Send>;

/// A fake server on 127.0.0.1 that runs `script` on its first connection; its URL.
fn fake(script: impl FnOnce(TcpStream) + Send + 'static) -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("nats://{}", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        if let Ok((c, _)) = listener.accept() {
            c.set_read_timeout(Some(T)).unwrap();
            script(c);
        }
    });
    url
}

const INFO: &[u8] = b"INFO {\"server_id\":\"fake\",\"headers\":true,\"max_payload\":1048576}\r\n";

/// Reads what the client sends up to and including its first `PING`.
fn read_hello(c: &mut TcpStream) -> String {
    let mut got = Vec::new();
    let mut b = [0u8; 1024];
    while !got.ends_with(b"PING\r\n") {
        let n = c.read(&mut b).unwrap();
        assert!(n > 0, "client closed during the handshake");
        got.extend_from_slice(&b[..n]);
    }
    String::from_utf8(got).unwrap()
}

#[test]
fn a_scripted_server_byte_by_byte() {
    let (tx, rx) = std::sync::mpsc::channel();
    let url = fake(move |mut c| {
        c.write_all(INFO).unwrap();
        let hello = read_hello(&mut c);
        // A message may come before the PONG that ends the handshake.
        c.write_all(b"MSG early.one 1 5\r\nearly\r\nPONG\r\n").unwrap();
        let script: &[u8] =
            b"PING\r\n+OK\r\nMSG a.b 1 5\r\nhello\r\nINFO {\"server_id\":\"fake2\"}\r\nHMSG a.c 2 reply.to 20 23\r\nNATS/1.0\r\nX-A: b\r\n\r\nabc\r\nMSG a.d 1 0\r\n\r\n";
        for b in script {
            c.write_all(&[*b]).unwrap();
            std::thread::sleep(Duration::from_millis(1));
        }
        // The PING is answered.
        let mut pong = [0u8; 6];
        c.read_exact(&mut pong).unwrap();
        tx.send((hello, pong)).unwrap();
        c.write_all(b"MSG a.e 1 10\r\ncut sh").unwrap();
    });
    let mut sub = Sub::connect(&url, &["a.>", "early.*"], T, MAX).unwrap();
    let got = collect(&mut sub, 4);
    let (hello, pong) = rx.recv_timeout(T).unwrap();
    assert_eq!(&pong, b"PONG\r\n");
    let connect: Value = serde_json::from_str(hello.lines().next().unwrap().strip_prefix("CONNECT ").unwrap()).unwrap();
    assert_eq!((connect["verbose"].as_bool(), connect["pedantic"].as_bool()), (Some(false), Some(false)));
    assert_eq!(connect["headers"].as_bool(), Some(true), "the server offered headers");
    assert!(hello.ends_with("\r\nSUB a.> 1\r\nSUB early.* 2\r\nPING\r\n"), "{hello}");

    assert_eq!((got[0].subject.as_str(), got[0].payload.as_slice()), ("early.one", &b"early"[..]));
    assert_eq!((got[1].subject.as_str(), got[1].payload.as_slice()), ("a.b", &b"hello"[..]));
    assert_eq!(got[2].headers.as_deref(), Some(&b"NATS/1.0\r\nX-A: b\r\n\r\n"[..]));
    assert_eq!((got[2].subject.as_str(), got[2].payload.as_slice()), ("a.c", &b"abc"[..]));
    assert_eq!((got[3].subject.as_str(), got[3].payload.len()), ("a.d", 0));
    assert_eq!(sub.server_info().server_id, "fake2", "a later INFO replaces the first");
    // The server closes in the middle of a message.
    let e = drain_until_error(&mut sub);
    assert_eq!(e.kind(), ErrorKind::UnexpectedEof);
    assert!(e.to_string().contains("in the middle of a message"), "{e}");
}

#[test]
fn junk_from_a_fake_server_is_an_error() {
    let short = Duration::from_millis(300);
    let cases: Vec<(&str, Script)> = vec![
        ("not a NATS protocol line", Box::new(|mut c| c.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap())),
        (
            "no end of line",
            Box::new(|mut c| {
                let _ = c.write_all(&[b'A'; 100_000]);
                std::thread::sleep(Duration::from_secs(1));
            }),
        ),
        ("server closed", Box::new(drop)),
        ("requires TLS", Box::new(|mut c| c.write_all(b"INFO {\"tls_required\":true}\r\n").unwrap())),
        ("INFO is not JSON", Box::new(|mut c| c.write_all(b"INFO {\"a\":\r\n").unwrap())),
        (
            "Authorization Violation",
            Box::new(|mut c| {
                c.write_all(INFO).unwrap();
                read_hello(&mut c);
                c.write_all(b"-ERR 'Authorization Violation'\r\n").unwrap();
            }),
        ),
        // INFO, then silence: the handshake times out.
        (
            "",
            Box::new(|mut c| {
                c.write_all(INFO).unwrap();
                read_hello(&mut c);
                std::thread::sleep(Duration::from_secs(2));
            }),
        ),
    ];
    for (want, script) in cases {
        let url = fake(script);
        let t0 = Instant::now();
        let e = Sub::connect(&url, &["a"], short, MAX).err().expect(want);
        assert!(e.to_string().contains(want), "want {want:?}, got {e}");
        assert!(t0.elapsed() < Duration::from_secs(2), "{want:?} took {:?}", t0.elapsed());
        if want.is_empty() {
            assert!(matches!(e.kind(), ErrorKind::WouldBlock | ErrorKind::TimedOut), "{e}");
        }
    }
    assert_eq!(Sub::connect("http://127.0.0.1:1", &["a"], short, MAX).err().unwrap().kind(), ErrorKind::InvalidInput);
    assert_eq!(Sub::connect("nats://127.0.0.1:1", &["a b"], short, MAX).err().unwrap().kind(), ErrorKind::InvalidInput);

    // After a good handshake: junk lines, bad lengths, random bytes.
    let mut seed = 0x9e37_79b9_7f4a_7c15u64;
    let mut junk: Vec<Vec<u8>> = vec![
        b"MSG a 1 3\r\nabcXY\r\n".to_vec(),
        b"MSG a 1 nope\r\n".to_vec(),
        b"HMSG a 1 9 3\r\n".to_vec(),
        b"WHAT\r\n".to_vec(),
        b"-ERR 'Slow Consumer'\r\n".to_vec(),
    ];
    for _ in 0..20 {
        junk.push(
            (0..300)
                .map(|_| {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    seed as u8
                })
                .collect(),
        );
    }
    for bytes in junk {
        let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(20)]).into_owned();
        let url = fake(move |mut c| {
            c.write_all(INFO).unwrap();
            read_hello(&mut c);
            c.write_all(b"PONG\r\n").unwrap();
            let _ = c.write_all(&bytes);
        });
        let mut sub = Sub::connect(&url, &["a"], T, MAX).unwrap();
        let e = drain_until_error(&mut sub);
        assert!(
            matches!(e.kind(), ErrorKind::InvalidData | ErrorKind::ConnectionAborted | ErrorKind::UnexpectedEof),
            "{shown:?}: {e}"
        );
    }
}
