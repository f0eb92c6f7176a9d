//! HTTPS on `--http-port` (rustls on every shard), on both I/O drivers: ALPN choosing HTTP/2 or
//! HTTP/1.1 on one port (and prior-knowledge HTTP/2 without ALPN), mutual TLS refusing clients
//! without a trusted certificate, certificates reloaded while connections stay open, and
//! handshakes that fail or never come counted in `/metrics` while the shard serves others.
//! Certificates are made for each test (rcgen), never read from disk fixtures.

mod common;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use rcgen::{BasicConstraints, CertificateParams, DnType, ExtendedKeyUsagePurpose, IsCa, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio_rustls::client::TlsStream;

/// A CA and what it signs.
struct Ca {
    cert: rcgen::Certificate,
    key: KeyPair,
}

impl Ca {
    fn new(name: &str) -> Ca {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(Vec::<String>::new()).unwrap();
        p.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        p.distinguished_name.push(DnType::CommonName, name);
        Ca { cert: p.self_signed(&key).unwrap(), key }
    }

    /// A leaf for `name` (also valid for 127.0.0.1 and localhost): (cert PEM, key PEM).
    fn leaf(&self, name: &str, client: bool) -> (String, String) {
        let key = KeyPair::generate().unwrap();
        let mut p = CertificateParams::new(vec!["localhost".to_string(), "127.0.0.1".to_string()]).unwrap();
        p.distinguished_name.push(DnType::CommonName, name);
        if client {
            p.extended_key_usages = vec![ExtendedKeyUsagePurpose::ClientAuth];
        }
        let cert = p.signed_by(&key, &self.cert, &self.key).unwrap();
        (cert.pem(), key.serialize_pem())
    }

    fn pem(&self) -> String {
        self.cert.pem()
    }
}

/// Write the server's files into `dir`: cert.pem, key.pem, and client-ca.pem when given.
fn write_server_files(dir: &Path, leaf: &(String, String), client_ca: Option<&Ca>) {
    // Replaced by rename, as certificate managers do, so a reader never sees half a file.
    for (name, text) in [("cert.pem", &leaf.0), ("key.pem", &leaf.1)] {
        let tmp = dir.join(format!("{name}.tmp"));
        std::fs::write(&tmp, text).unwrap();
        std::fs::rename(&tmp, dir.join(name)).unwrap();
    }
    if let Some(ca) = client_ca {
        std::fs::write(dir.join("client-ca.pem"), ca.pem()).unwrap();
    }
}

fn server_args(dir: &Path, mtls: bool) -> Vec<String> {
    let mut v = vec![
        "--tls-cert-path".to_string(),
        dir.join("cert.pem").display().to_string(),
        "--tls-key-path".to_string(),
        dir.join("key.pem").display().to_string(),
    ];
    if mtls {
        v.push("--tls-client-ca-cert-path".into());
        v.push(dir.join("client-ca.pem").display().to_string());
    }
    v
}

fn start(driver: &str, args: &[String], extra: &[&str]) -> switchyard::shard::Server {
    let mut all: Vec<&str> = args.iter().map(String::as_str).collect();
    all.extend_from_slice(extra);
    common::start(driver, &all, &[])
}

/// A client configuration trusting `ca`, offering `alpn`, with an optional client certificate.
fn client_config(ca: &Ca, alpn: &[&[u8]], identity: Option<&(String, String)>) -> Arc<rustls::ClientConfig> {
    let mut roots = rustls::RootCertStore::empty();
    roots.add(CertificateDer::from_pem_slice(ca.pem().as_bytes()).unwrap()).unwrap();
    let builder = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::ring::default_provider()))
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_root_certificates(roots);
    let mut config = match identity {
        None => builder.with_no_client_auth(),
        Some((cert, key)) => builder
            .with_client_auth_cert(
                vec![CertificateDer::from_pem_slice(cert.as_bytes()).unwrap()],
                PrivateKeyDer::from_pem_slice(key.as_bytes()).unwrap(),
            )
            .unwrap(),
    };
    config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
    Arc::new(config)
}

async fn connect(
    addr: std::net::SocketAddr,
    config: Arc<rustls::ClientConfig>,
) -> std::io::Result<TlsStream<tokio::net::TcpStream>> {
    let tcp = tokio::net::TcpStream::connect(addr).await?;
    let name = ServerName::try_from("localhost").unwrap();
    tokio_rustls::TlsConnector::from(config).connect(name, tcp).await
}

/// One HTTP/1.1 GET over `tls`, the connection kept open: (status line, body).
async fn get_h1(tls: &mut TlsStream<tokio::net::TcpStream>, path: &str) -> std::io::Result<(String, String)> {
    tls.write_all(format!("GET {path} HTTP/1.1\r\nhost: localhost\r\n\r\n").as_bytes()).await?;
    let mut buf = Vec::new();
    let mut chunk = [0u8; 16384];
    loop {
        let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut chunk)).await.expect("answer in time")?;
        if n == 0 {
            return Err(std::io::Error::new(std::io::ErrorKind::UnexpectedEof, "closed"));
        }
        buf.extend_from_slice(&chunk[..n]);
        let text = String::from_utf8_lossy(&buf).to_string();
        if let Some(end) = text.find("\r\n\r\n") {
            let head = &text[..end];
            let len: usize = head
                .lines()
                .find_map(|l| {
                    l.to_ascii_lowercase().strip_prefix("content-length: ").map(|v| v.trim().parse().unwrap())
                })
                .unwrap_or(0);
            if text.len() >= end + 4 + len {
                let status = head.lines().next().unwrap().to_string();
                return Ok((status, text[end + 4..end + 4 + len].to_string()));
            }
        }
    }
}

/// One HTTP/2 GET over a fresh TLS connection (ALPN h2).
async fn get_h2(addr: std::net::SocketAddr, ca: &Ca, path: &str) -> (u16, String) {
    let tls = connect(addr, client_config(ca, &[b"h2"], None)).await.expect("handshake");
    assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"h2"[..]), "the server chose h2");
    let (mut send, conn) = h2::client::handshake(tls).await.expect("h2 handshake");
    tokio::spawn(async move {
        let _ = conn.await;
    });
    let req = http::Request::get(format!("https://localhost{path}")).body(()).unwrap();
    let (resp, _) = send.send_request(req, true).unwrap();
    let resp = resp.await.unwrap();
    let status = resp.status().as_u16();
    let mut body = resp.into_body();
    let mut out = Vec::new();
    while let Some(d) = body.data().await {
        let d: Bytes = d.unwrap();
        let _ = body.flow_control().release_capacity(d.len());
        out.extend_from_slice(&d);
    }
    (status, String::from_utf8(out).unwrap())
}

fn metric(addr: std::net::SocketAddr, ca: &Ca, identity: Option<&(String, String)>, line: &str) -> u64 {
    let rt = common::h2c::runtime();
    rt.block_on(async {
        let mut tls = connect(addr, client_config(ca, &[b"http/1.1"], identity)).await.unwrap();
        let (_, body) = get_h1(&mut tls, "/metrics").await.unwrap();
        body.lines()
            .find_map(|l| l.strip_prefix(line).map(|v| v.trim().parse().unwrap()))
            .unwrap_or_else(|| panic!("no {line} in /metrics"))
    })
}

#[test]
fn alpn_chooses_h2_or_http1_on_one_port() {
    for driver in ["io-uring", "epoll"] {
        let dir = common::TempDir::new(&format!("tls-alpn-{driver}"));
        let ca = Ca::new("test ca");
        write_server_files(&dir.0, &ca.leaf("server", false), None);
        let server = start(driver, &server_args(&dir.0, false), &[]);
        let addr = server.addr;
        assert!(server.tls);
        let rt = common::h2c::runtime();
        rt.block_on(async {
            // HTTP/1.1 by ALPN, two requests on one connection.
            let mut tls = connect(addr, client_config(&ca, &[b"http/1.1"], None)).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), Some(&b"http/1.1"[..]));
            for _ in 0..2 {
                let (status, body) = get_h1(&mut tls, "/v1/models").await.unwrap();
                assert_eq!(status, "HTTP/1.1 200 OK", "{driver}");
                assert!(body.contains("\"object\":\"list\""), "{body}");
            }
            // No ALPN at all: HTTP/1.1.
            let mut tls = connect(addr, client_config(&ca, &[], None)).await.unwrap();
            assert_eq!(tls.get_ref().1.alpn_protocol(), None);
            assert_eq!(get_h1(&mut tls, "/health").await.unwrap().0, "HTTP/1.1 200 OK");
            // HTTP/2 by ALPN.
            let (status, body) = get_h2(addr, &ca, "/v1/models").await;
            assert_eq!(status, 200);
            assert!(body.contains("\"object\":\"list\""), "{body}");
            // HTTP/2 with prior knowledge and no ALPN: told apart by the preface.
            let tls = connect(addr, client_config(&ca, &[], None)).await.unwrap();
            let (mut send, conn) = h2::client::handshake(tls).await.expect("h2 handshake without ALPN");
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let (resp, _) =
                send.send_request(http::Request::get("https://localhost/live").body(()).unwrap(), true).unwrap();
            assert_eq!(resp.await.unwrap().status(), 200);
        });
        // A plain-text client on the HTTPS port is refused and counted; the shard goes on.
        let mut plain = std::net::TcpStream::connect(addr).unwrap();
        std::io::Write::write_all(&mut plain, b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n").unwrap();
        plain.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut got = Vec::new();
        // Until the server closes (a TLS alert may come first, never an HTTP answer).
        std::io::Read::read_to_end(&mut plain, &mut got).expect("the server closes the connection");
        assert!(!got.starts_with(b"HTTP/"), "a plain request on the HTTPS port is not answered in plain text");
        assert!(metric(addr, &ca, None, "switchyard_tls_handshakes_total{result=\"failed\"}") >= 1);
        assert!(metric(addr, &ca, None, "switchyard_tls_handshakes_total{result=\"ok\"}") >= 5);
        server.shutdown();
    }
}

#[test]
fn mutual_tls_refuses_clients_without_a_trusted_certificate() {
    let dir = common::TempDir::new("tls-mtls");
    let ca = Ca::new("server ca");
    let clients = Ca::new("client ca");
    let stranger = Ca::new("someone else");
    write_server_files(&dir.0, &ca.leaf("server", false), Some(&clients));
    let server = start("io-uring", &server_args(&dir.0, true), &[]);
    let addr = server.addr;
    let trusted = clients.leaf("client", true);
    let untrusted = stranger.leaf("client", true);
    let rt = common::h2c::runtime();
    rt.block_on(async {
        // A trusted client certificate: served, over HTTP/1.1 and HTTP/2.
        let mut tls = connect(addr, client_config(&ca, &[b"http/1.1"], Some(&trusted))).await.unwrap();
        assert_eq!(get_h1(&mut tls, "/v1/models").await.unwrap().0, "HTTP/1.1 200 OK");
        let tls = connect(addr, client_config(&ca, &[b"h2"], Some(&trusted))).await.unwrap();
        let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
        tokio::spawn(async move {
            let _ = conn.await;
        });
        let (resp, _) =
            send.send_request(http::Request::get("https://localhost/health").body(()).unwrap(), true).unwrap();
        assert_eq!(resp.await.unwrap().status(), 200);
        // No certificate, or one from a CA the server does not trust: no answer. (With TLS 1.3
        // the client may finish its side of the handshake before the server's refusal
        // arrives; the refusal then ends the first read.)
        for identity in [None, Some(&untrusted)] {
            let refused = match connect(addr, client_config(&ca, &[b"http/1.1"], identity)).await {
                Err(_) => true,
                Ok(mut tls) => get_h1(&mut tls, "/v1/models").await.is_err(),
            };
            assert!(refused, "a client with {:?} must be refused", identity.map(|_| "an untrusted certificate"));
        }
    });
    assert!(metric(addr, &ca, Some(&trusted), "switchyard_tls_handshakes_total{result=\"failed\"}") >= 2);
    server.shutdown();
}

/// The server certificate's common name, as a new connection sees it.
async fn served_name(addr: std::net::SocketAddr, ca: &Ca) -> String {
    let tls = connect(addr, client_config(ca, &[b"http/1.1"], None)).await.unwrap();
    let der = tls.get_ref().1.peer_certificates().unwrap()[0].clone();
    // The CN is the only printable string the test puts in a leaf's subject.
    let text = String::from_utf8_lossy(der.as_ref()).to_string();
    ["first", "second"].iter().find(|n| text.contains(&format!("{n}-leaf"))).expect("a known leaf").to_string()
}

#[test]
fn certificates_reload_on_change_without_dropping_connections() {
    let dir = common::TempDir::new("tls-reload");
    let ca = Ca::new("reload ca");
    write_server_files(&dir.0, &ca.leaf("first-leaf", false), None);
    let server = start("io-uring", &server_args(&dir.0, false), &[]);
    let addr = server.addr;
    // Reloading is the main thread's job in the binary; here the test runs the same reloader.
    let files = switchyard::tls::TlsFiles { cert: dir.0.join("cert.pem"), key: dir.0.join("key.pem"), client_ca: None };
    let reloader = switchyard::tls::reload::Reloader::start(files, server.tls_publisher()).unwrap();
    let rt = common::h2c::runtime();
    rt.block_on(async {
        assert_eq!(served_name(addr, &ca).await, "first");
        let mut open = connect(addr, client_config(&ca, &[b"http/1.1"], None)).await.unwrap();
        assert_eq!(get_h1(&mut open, "/health").await.unwrap().0, "HTTP/1.1 200 OK");
        write_server_files(&dir.0, &ca.leaf("second-leaf", false), None);
        let deadline = Instant::now() + Duration::from_secs(20);
        while served_name(addr, &ca).await != "second" {
            assert!(Instant::now() < deadline, "the new certificate was not served within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        // The connection accepted before the reload is still served.
        assert_eq!(get_h1(&mut open, "/health").await.unwrap().0, "HTTP/1.1 200 OK");
        // A broken file keeps the certificate in use; SIGHUP's path (reload_now) too.
        std::fs::write(dir.0.join("key.pem"), "not a key").unwrap();
        reloader.reload_now();
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert_eq!(served_name(addr, &ca).await, "second");
    });
    drop(reloader);
    server.shutdown();
}

#[test]
fn a_handshake_that_never_comes_times_out_and_others_are_served() {
    let dir = common::TempDir::new("tls-slow");
    let ca = Ca::new("slow ca");
    write_server_files(&dir.0, &ca.leaf("server", false), None);
    let server = start("epoll", &server_args(&dir.0, false), &["--header-read-timeout-secs", "1"]);
    let addr = server.addr;
    // Silent connections: open, say nothing.
    let silent: Vec<std::net::TcpStream> = (0..20).map(|_| std::net::TcpStream::connect(addr).unwrap()).collect();
    let rt = common::h2c::runtime();
    rt.block_on(async {
        let mut tls = connect(addr, client_config(&ca, &[b"http/1.1"], None)).await.unwrap();
        assert_eq!(get_h1(&mut tls, "/health").await.unwrap().0, "HTTP/1.1 200 OK");
    });
    for mut s in silent {
        s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
        let mut b = [0u8; 1];
        let n = std::io::Read::read(&mut s, &mut b).unwrap_or(0);
        assert_eq!(n, 0, "a silent connection is closed by the server");
    }
    assert_eq!(metric(addr, &ca, None, "switchyard_tls_handshakes_total{result=\"timeout\"}"), 20);
    server.shutdown();
}

const MODEL: &str = "qwen3-mock";

/// An HTTPS frontend in front of one mock worker (first token at once, then one every `itl`),
/// with the model listed.
fn tls_stack(tag: &str, driver: &str, ca: &Ca, itl: Duration) -> (common::stack::Stack, common::TempDir) {
    let dir = common::TempDir::new(tag);
    write_server_files(&dir.0, &ca.leaf("server", false), None);
    let mock = switchyard::worker::MockConfig {
        itl,
        output_tokens: 12,
        model_name: MODEL.into(),
        model_dir: Some(common::qwen3_dir()),
        ..Default::default()
    };
    let mut args: Vec<&str> = vec!["--io-driver", driver];
    let tls_args = server_args(&dir.0, false);
    args.extend(tls_args.iter().map(String::as_str));
    let s = common::stack::Stack::start(tag, mock, &args, &[]);
    let rt = common::h2c::runtime();
    rt.block_on(async {
        let t0 = Instant::now();
        let mut streak = 0;
        while streak < 8 {
            let mut tls = connect(s.addr(), client_config(ca, &[b"http/1.1"], None)).await.unwrap();
            let (_, body) = get_h1(&mut tls, "/v1/models").await.unwrap();
            streak = if body.contains(MODEL) { streak + 1 } else { 0 };
            assert!(t0.elapsed() < Duration::from_secs(90), "the model never appeared");
        }
    });
    (s, dir)
}

fn chat_request(stream: bool) -> String {
    let body = serde_json::json!({"model": MODEL, "stream": stream, "max_tokens": 12,
                                  "messages": [{"role": "user", "content": "Tell me a story"}]})
    .to_string();
    format!(
        "POST /v1/chat/completions HTTP/1.1\r\nhost: localhost\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Streamed and whole chat answers over HTTPS (HTTP/1.1 and HTTP/2), on both drivers.
#[test]
fn answers_stream_over_https() {
    for driver in ["io-uring", "epoll"] {
        let ca = Ca::new("stream ca");
        let (s, _dir) = tls_stack(&format!("tls-stream-{driver}"), driver, &ca, Duration::ZERO);
        let rt = common::h2c::runtime();
        rt.block_on(async {
            let mut tls = connect(s.addr(), client_config(&ca, &[b"http/1.1"], None)).await.unwrap();
            tls.write_all(chat_request(true).as_bytes()).await.unwrap();
            let mut got = Vec::new();
            let mut chunk = [0u8; 16384];
            while !String::from_utf8_lossy(&got).contains("data: [DONE]") {
                let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut chunk)).await.unwrap().unwrap();
                assert!(n > 0, "closed mid-stream: {}", String::from_utf8_lossy(&got));
                got.extend_from_slice(&chunk[..n]);
            }
            let text = String::from_utf8_lossy(&got);
            assert!(text.starts_with("HTTP/1.1 200 OK"), "{text}");
            assert!(text.contains("text/event-stream"), "{text}");
            assert_eq!(text.matches("\"finish_reason\":\"length\"").count(), 1, "{text}");
            // The same connection answers a whole request next.
            tls.write_all(chat_request(false).as_bytes()).await.unwrap();
            let mut got = Vec::new();
            while !String::from_utf8_lossy(&got).contains("\"usage\"") {
                let n = tokio::time::timeout(Duration::from_secs(10), tls.read(&mut chunk)).await.unwrap().unwrap();
                assert!(n > 0);
                got.extend_from_slice(&chunk[..n]);
            }

            // HTTP/2: a streamed answer.
            let tls = connect(s.addr(), client_config(&ca, &[b"h2"], None)).await.unwrap();
            let (mut send, conn) = h2::client::handshake(tls).await.unwrap();
            tokio::spawn(async move {
                let _ = conn.await;
            });
            let body = serde_json::json!({"model": MODEL, "stream": true, "max_tokens": 12,
                                          "messages": [{"role": "user", "content": "Tell me a story"}]})
            .to_string();
            let req = http::Request::post("https://localhost/v1/chat/completions")
                .header("content-type", "application/json")
                .body(())
                .unwrap();
            let (resp, mut out) = send.send_request(req, false).unwrap();
            out.send_data(Bytes::from(body), true).unwrap();
            let resp = resp.await.unwrap();
            assert_eq!(resp.status(), 200);
            let mut body = resp.into_body();
            let mut all = Vec::new();
            while let Some(d) = body.data().await {
                let d = d.unwrap();
                let _ = body.flow_control().release_capacity(d.len());
                all.extend_from_slice(&d);
            }
            let text = String::from_utf8(all).unwrap();
            assert!(text.trim_end().ends_with("data: [DONE]"), "{text}");
        });
    }
}

/// A client that leaves, with a TLS close_notify before its FIN or with only the FIN, cancels
/// its request at the worker, streamed or not, while the worker is quiet.
#[test]
fn https_clients_that_leave_cancel_their_requests() {
    let ca = Ca::new("cancel ca");
    let (s, _dir) = tls_stack("tls-cancel", "io-uring", &ca, Duration::from_secs(3));
    let rt = common::h2c::runtime();
    let mut sent = 0;
    for (stream, notify) in [(false, true), (true, true), (false, false), (true, false)] {
        rt.block_on(async {
            let mut tls = connect(s.addr(), client_config(&ca, &[b"http/1.1"], None)).await.unwrap();
            tls.write_all(chat_request(stream).as_bytes()).await.unwrap();
            sent += 1;
            let t0 = Instant::now();
            while s.worker.stats().frames < sent {
                assert!(t0.elapsed() < Duration::from_secs(10), "the worker never got the request");
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
            if notify {
                // close_notify, then FIN.
                tls.shutdown().await.unwrap();
            }
            drop(tls);
            let t0 = Instant::now();
            while s.worker.stats().killed < sent {
                assert!(
                    t0.elapsed() < Duration::from_secs(3),
                    "request {sent} (stream {stream}, close_notify {notify}) was not cancelled at the worker: {:?}",
                    s.worker.stats()
                );
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        });
    }
}
