//! The event-ingest thread's NATS client over TLS (`--nats-tls-*`, `NATS_TLS_*`,
//! `NATS_SERVER=tls://…`) against a real `nats-server` that requires TLS (and, with
//! `--tlsverify`, client certificates), as 1.6.1's client speaks it: plain `INFO`, then the
//! TLS handshake, then `CONNECT` (docs/dynamo/request-plane-tls.md §7). Certificates:
//! tests/data/tls (scripts/make-test-certs.sh).

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::nats::{collect, NatsServer};
use switchyard::ingest::nats::Sub;
use switchyard::tls::plane::{nats_client, NatsTlsFiles};

const T: Duration = Duration::from_secs(5);
const MAX: usize = 1 << 20;

fn cert(name: &str) -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls").join(name)
}

fn path(name: &str) -> String {
    cert(name).display().to_string()
}

/// A server on 127.0.0.1 with the test server certificate, client certificates required.
fn mtls_server() -> NatsServer {
    NatsServer::start_tls(&path("server.pem"), &path("server.key"), Some(&path("ca.pem")))
}

fn config(files: NatsTlsFiles, url: &str) -> Arc<rustls::ClientConfig> {
    nats_client(&files, url).unwrap().expect("a TLS configuration")
}

/// The CA and the client identity: what a frontend with every `--nats-tls-*` path has.
fn full() -> NatsTlsFiles {
    NatsTlsFiles {
        ca: Some(cert("ca.pem")),
        client_cert: Some(cert("client.pem")),
        client_key: Some(cert("client.key")),
        ..Default::default()
    }
}

/// A publisher over TLS with the client certificate, speaking the protocol by hand.
struct TlsPublisher(rustls::StreamOwned<rustls::ClientConnection, TcpStream>);

impl TlsPublisher {
    fn connect(port: u16) -> TlsPublisher {
        let sock = TcpStream::connect(("127.0.0.1", port)).unwrap();
        sock.set_read_timeout(Some(T)).unwrap();
        let mut info = String::new();
        BufReader::new(&sock).read_line(&mut info).unwrap();
        assert!(info.starts_with("INFO ") && info.contains("\"tls_required\":true"), "{info}");
        let name = rustls::pki_types::ServerName::try_from("127.0.0.1").unwrap();
        let session = rustls::ClientConnection::new(config(full(), "tls://x"), name).unwrap();
        let mut p = TlsPublisher(rustls::StreamOwned::new(session, sock));
        p.0.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"tls_required\":true}\r\nPING\r\n").unwrap();
        p.pong();
        p
    }

    fn pong(&mut self) {
        let mut got = Vec::new();
        let mut b = [0u8; 512];
        while !String::from_utf8_lossy(&got).contains("PONG\r\n") {
            let n = self.0.read(&mut b).unwrap();
            assert!(n > 0, "the server closed");
            got.extend_from_slice(&b[..n]);
        }
    }

    fn publish(&mut self, subject: &str, payload: &[u8]) {
        let mut m = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\nPING\r\n");
        self.0.write_all(&m).unwrap();
        self.pong();
    }
}

#[test]
fn mutual_tls_subscriber_receives_what_is_published() {
    let server = mtls_server();
    let url = format!("tls://127.0.0.1:{}", server.port());
    let mut sub = Sub::connect_tls(&url, &["kv.>"], T, MAX, Some(&config(full(), &url))).unwrap();
    assert!(sub.server_info().tls_required);
    let mut publisher = TlsPublisher::connect(server.port());
    // Small and large payloads: the large one spans many TLS records.
    let big = vec![0xa5u8; 200 * 1024];
    publisher.publish("kv.a", b"one");
    publisher.publish("kv.b", &big);
    publisher.publish("kv.c", b"three");
    let got = collect(&mut sub, 3);
    assert_eq!(got.iter().map(|m| m.subject.as_str()).collect::<Vec<_>>(), ["kv.a", "kv.b", "kv.c"]);
    assert_eq!((got[0].payload.as_slice(), got[1].payload.len()), (&b"one"[..], big.len()));
    // The server's PINGs are answered through the TLS session too: still connected.
    sub.ping().unwrap();
    let deadline = Instant::now() + T;
    while sub.pings_outstanding() > 0 {
        assert!(Instant::now() < deadline, "no PONG over TLS");
        let _ = collect(&mut sub, 0);
        std::thread::sleep(Duration::from_millis(10));
    }
}

#[test]
fn the_server_is_verified_under_the_url_host() {
    let server = mtls_server();
    // DNS:localhost is in the certificate, and so is IP:127.0.0.1.
    let url = format!("tls://localhost:{}", server.port());
    Sub::connect_tls(&url, &["a"], T, MAX, Some(&config(full(), &url))).unwrap();
    // Insecure mode checks nothing but the handshake's signatures.
    let insecure = NatsTlsFiles { ca: None, insecure: true, ..full() };
    let url = format!("tls://127.0.0.1:{}", server.port());
    Sub::connect_tls(&url, &["a"], T, MAX, Some(&config(insecure, &url))).unwrap();
}

#[test]
fn refusals_are_errors_not_hangs() {
    let server = mtls_server();
    let url = format!("tls://127.0.0.1:{}", server.port());
    let short = Duration::from_secs(2);
    let refused = |files: NatsTlsFiles| {
        let started = Instant::now();
        let e = Sub::connect_tls(&url, &["a"], short, MAX, Some(&config(files, &url))).err().expect("refused");
        assert!(started.elapsed() < Duration::from_secs(4), "took {:?}", started.elapsed());
        e.to_string()
    };
    let e = refused(NatsTlsFiles { ca: Some(cert("other-ca.pem")), ..full() });
    assert!(e.contains("UnknownIssuer") || e.contains("invalid peer certificate"), "{e}");
    // No client certificate for a server that wants one.
    let e = refused(NatsTlsFiles { ca: Some(cert("ca.pem")), ..Default::default() });
    assert!(!e.is_empty());
    // A nats:// URL to a server that requires TLS.
    let plain = format!("nats://127.0.0.1:{}", server.port());
    let e = Sub::connect_tls(&plain, &["a"], short, MAX, Some(&config(full(), &url))).err().unwrap();
    assert!(e.to_string().contains("requires TLS"), "{e}");
    // tls:// to a server without TLS.
    let open = NatsServer::start();
    let url = format!("tls://127.0.0.1:{}", open.port());
    let e = Sub::connect_tls(&url, &["a"], short, MAX, Some(&config(full(), &url))).err().unwrap();
    assert!(e.to_string().contains("does not offer TLS"), "{e}");
}

#[test]
fn switchyard_refuses_nats_tls_options_without_a_tls_url() {
    let run = |env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
        cmd.args(["--http-host", "127.0.0.1", "--http-port", "0", "--discovery-backend", "file"])
            .args(["--router-mode", "kv", "--event-plane", "nats", "--nats-tls-ca-cert-path", &path("ca.pem")])
            .env_remove("NATS_SERVER");
        for (k, v) in env {
            cmd.env(k, v);
        }
        cmd.output().unwrap()
    };
    let out = run(&[]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains(
            "NATS TLS is configured (NATS_TLS_CA_CERT_PATH, NATS_TLS_INSECURE, or a client certificate) but \
             NATS_SERVER does not use the 'tls://' scheme: nats://localhost:4222"
        ),
        "{err}"
    );
    let out = run(&[("NATS_SERVER", "nats://127.0.0.1:4222"), ("NATS_TLS_CLIENT_KEY_PATH", "/k.pem")]);
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("must be set together to enable NATS mTLS"), "{err}");
}
