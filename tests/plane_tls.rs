//! The request plane over TLS (docs/dynamo/request-plane-tls.md): the shard side
//! (`transport::client`, `transport::callback`) against the in-tree mock worker serving its
//! request plane over TLS with the variables a real worker reads, on both monoio drivers;
//! then whole switchyard processes (`--tcp-tls-*`) answering HTTP from such workers.
//!
//! Certificates: tests/data/tls (scripts/make-test-certs.sh). `server.pem` names
//! IP:127.0.0.1 and DNS:localhost, `dnsonly.pem` only DNS:localhost, `other.pem` is signed by
//! a CA nobody here trusts.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use switchyard::plane::{Codec, StreamEvent, DEFAULT_MAX_MESSAGE_SIZE};
use switchyard::tls::plane::{PlaneRole, PlaneTls, PlaneTlsFiles};
use switchyard::transport::callback::{CallbackServer, ResponseStream};
use switchyard::transport::client::{ConnsConfig, RequestPlane, TransportError, WorkerConns};
use switchyard::worker::{MockConfig, MockWorker};

const DEADLINE: Duration = Duration::from_secs(5);

fn cert(name: &str) -> Option<PathBuf> {
    Some(PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("tests/data/tls").join(name))
}

/// A process's request-plane TLS from its `DYN_TCP_TLS_*` files.
fn tls(files: PlaneTlsFiles, role: PlaneRole) -> PlaneTls {
    PlaneTls::build(&files, role).unwrap()
}

/// Server certificate and key `name`, trusting the test CA: what a TLS deployment gives
/// every process.
fn one_way(name: &str) -> PlaneTlsFiles {
    PlaneTlsFiles {
        cert: cert(&format!("{name}.pem")),
        key: cert(&format!("{name}.key")),
        ca: cert("ca.pem"),
        ..Default::default()
    }
}

/// [`one_way`] plus client certificates required and shown (mutual TLS).
fn mutual() -> PlaneTlsFiles {
    PlaneTlsFiles {
        client_ca: cert("ca.pem"),
        client_cert: cert("client.pem"),
        client_key: cert("client.key"),
        ..one_way("server")
    }
}

use common::on_both_drivers as run;

/// A shard's request plane with `t`: dialing workers with its dialer, serving call-backs
/// with its acceptor.
fn plane(t: &PlaneTls) -> RequestPlane {
    let conns = WorkerConns::new(ConnsConfig { tls: t.dialer.clone(), ..ConnsConfig::default() });
    let callbacks = CallbackServer::bind_with("127.0.0.1", DEFAULT_MAX_MESSAGE_SIZE, t.acceptor.clone()).unwrap();
    RequestPlane::new(conns, callbacks)
}

fn mock(t: PlaneTls, fast: bool, output_tokens: usize) -> MockWorker {
    MockWorker::start(MockConfig {
        fast,
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(1),
        output_tokens,
        tls: t,
        ..Default::default()
    })
    .unwrap()
}

use common::mock_request as request;

/// The token ids of a whole stream (sentinel and `complete_final` seen).
async fn collect(mut s: ResponseStream) -> Result<Vec<u32>, TransportError> {
    let (mut ids, mut complete, mut sentinel) = (Vec::new(), false, false);
    while let Some(ev) = s.next().await {
        match ev? {
            StreamEvent::Item(i) => ids.extend(i.into_tokens().unwrap().data.unwrap().token_ids),
            StreamEvent::CompleteFinal => complete = true,
            StreamEvent::Sentinel => sentinel = true,
            _ => {}
        }
    }
    assert!(complete && sentinel, "the stream ended properly");
    Ok(ids)
}

async fn generate(p: &RequestPlane, w: &MockWorker, id: &str, max: Option<u32>) -> Result<Vec<u32>, TransportError> {
    let s = p.generate(w.addr(), w.endpoint_path(), Codec::Msgpack, &request(max), id, DEADLINE).await?;
    collect(s).await
}

/// A request that must fail at the connection: `CannotConnect` (retryable, the worker is
/// treated as unreachable), well within `within`.
async fn cannot_connect(p: &RequestPlane, w: &MockWorker, within: Duration) -> String {
    let started = Instant::now();
    let e = generate(p, w, "refused", Some(3)).await.unwrap_err();
    assert!(started.elapsed() < within, "took {:?}", started.elapsed());
    assert!(e.is_retryable(), "{e}");
    let TransportError::CannotConnect { detail, .. } = &e else { panic!("not cannot_connect: {e}") };
    assert_eq!(p.callbacks.registered(), 0, "the subject is released");
    detail.clone()
}

#[test]
fn tls_both_ways_whole_streams_pipelined_and_large() {
    let frontend = tls(one_way("server"), PlaneRole::Frontend);
    let worker_tls = tls(one_way("server"), PlaneRole::Worker);
    let paced = mock(worker_tls.clone(), false, 8);
    let fast = mock(worker_tls, true, 3000);
    run(|| async {
        let p = plane(&frontend);
        assert_eq!(generate(&p, &paced, "one", Some(5)).await.unwrap().len(), 5);
        // Many requests at once share the one TLS connection.
        let (addr, path) = (paced.addr(), paced.endpoint_path().to_owned());
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let (p, path) = (p.clone(), path.clone());
                monoio::spawn(async move {
                    let (req, id) = (request(None), format!("many-{i}"));
                    let s = p.generate(addr, &path, Codec::Msgpack, &req, &id, DEADLINE).await.unwrap();
                    collect(s).await.unwrap().len()
                })
            })
            .collect();
        for t in tasks {
            assert_eq!(t.await, 8);
        }
        // A long stream in large writes: many TLS records per read.
        assert_eq!(generate(&p, &fast, "large", None).await.unwrap().len(), 3000);
        assert_eq!(p.conns.dials(), 2, "one connection per worker");
        assert_eq!(p.callbacks.registered(), 0);
    });
    assert_eq!(paced.stats().completed, 2 * 21);
}

#[test]
fn mutual_tls_and_a_frontend_without_a_client_certificate() {
    let worker = mock(tls(mutual(), PlaneRole::Worker), false, 4);
    let with = tls(mutual(), PlaneRole::Frontend);
    // Serves a certificate, trusts the CA, shows none: the worker refuses it.
    let without = tls(one_way("server"), PlaneRole::Frontend);
    run(|| async {
        let p = plane(&with);
        assert_eq!(generate(&p, &worker, "mtls", None).await.unwrap().len(), 4);
        let q = plane(&without);
        let started = Instant::now();
        let e = generate(&q, &worker, "no-client-cert", None).await.unwrap_err();
        // TLS 1.3: the client finishes its handshake before the server refuses it, so the
        // refusal arrives as the connection closing before the ack.
        assert!(e.is_retryable() && started.elapsed() < Duration::from_secs(3), "{e} after {:?}", started.elapsed());
        assert_eq!(q.callbacks.registered(), 0);
        // The first plane is unaffected.
        assert_eq!(generate(&p, &worker, "mtls-again", None).await.unwrap().len(), 4);
    });
    assert_eq!(worker.stats().frames, 2 * 2, "the refused frontend's frames never reached the worker");
}

#[test]
fn an_untrusted_worker_certificate_is_cannot_connect_not_a_hang() {
    let worker = mock(tls(one_way("other"), PlaneRole::Worker), false, 4);
    let frontend = tls(one_way("server"), PlaneRole::Frontend);
    run(|| async {
        let p = plane(&frontend);
        let detail = cannot_connect(&p, &worker, Duration::from_secs(2)).await;
        assert!(detail.contains("TLS handshake failed") && detail.contains("UnknownIssuer"), "{detail}");
        // Again: a new dial, the same refusal.
        cannot_connect(&p, &worker, Duration::from_secs(2)).await;
        assert_eq!(p.conns.dials(), 2);
        assert_eq!(p.conns.connection_count(), 0);
    });
    assert_eq!(worker.stats().frames, 0);
}

#[test]
fn worker_name_checked_against_its_ip_unless_a_server_name_is_given() {
    let worker = mock(tls(one_way("dnsonly"), PlaneRole::Worker), false, 3);
    let by_ip = tls(one_way("server"), PlaneRole::Frontend);
    let named = tls(PlaneTlsFiles { server_name: Some("localhost".into()), ..one_way("server") }, PlaneRole::Frontend);
    run(|| async {
        let detail = cannot_connect(&plane(&by_ip), &worker, Duration::from_secs(2)).await;
        assert!(detail.contains("not valid for name \"127.0.0.1\""), "{detail}");
        assert_eq!(generate(&plane(&named), &worker, "named", None).await.unwrap().len(), 3);
    });
}

#[test]
fn plain_and_tls_do_not_mix_and_nothing_hangs() {
    let short = |f: PlaneTlsFiles| PlaneTlsFiles { handshake_timeout: Duration::from_secs(1), ..f };
    let tls_worker = mock(tls(one_way("server"), PlaneRole::Worker), false, 3);
    let plain_worker = mock(PlaneTls::default(), false, 3);
    let tls_frontend = tls(short(one_way("server")), PlaneRole::Frontend);
    // Dials TLS but serves its call-back listener in plain TCP (a CA and nothing else).
    let ca_only = tls(PlaneTlsFiles { ca: cert("ca.pem"), ..Default::default() }, PlaneRole::Frontend);
    run(|| async {
        // A TLS frontend and a plain worker: the worker reads a ClientHello as a frame.
        let detail = cannot_connect(&plane(&tls_frontend), &plain_worker, Duration::from_secs(3)).await;
        assert!(detail.contains("TLS handshake failed"), "{detail}");
        // A plain frontend and a TLS worker: the worker ends the connection.
        let plain = plane(&PlaneTls::default());
        let e = generate(&plain, &tls_worker, "plain-to-tls", None).await.unwrap_err();
        assert!(e.is_retryable(), "{e}");
        // The worker calls back over TLS; a plain call-back listener cannot read it: the
        // request ends by its call-back deadline (1.6.1 waits for ever).
        let p = plane(&ca_only);
        let s = p
            .generate(tls_worker.addr(), tls_worker.endpoint_path(), Codec::Msgpack, &request(None), "x", DEADLINE)
            .await
            .unwrap();
        let e = collect(s).await.unwrap_err();
        assert!(matches!(e, TransportError::CallbackTimeout { .. }), "{e}");
        // A TLS call-back listener and a worker calling back in plain TCP: the same.
        let worker_plain_back = mock(
            tls(
                PlaneTlsFiles { cert: cert("server.pem"), key: cert("server.key"), ..Default::default() },
                PlaneRole::Worker,
            ),
            false,
            3,
        );
        let p = plane(&tls_frontend);
        let started = Instant::now();
        let s = p
            .generate(
                worker_plain_back.addr(),
                worker_plain_back.endpoint_path(),
                Codec::Msgpack,
                &request(None),
                "y",
                Duration::from_secs(2),
            )
            .await
            .unwrap();
        let e = collect(s).await.unwrap_err();
        assert!(matches!(e, TransportError::CallbackTimeout { .. }), "{e}");
        assert!(started.elapsed() < Duration::from_secs(4));
    });
}

#[test]
fn a_rotated_worker_certificate_is_taken_without_a_restart() {
    // The worker's files start as the untrusted pair, then the trusted one is written over
    // them (as a certificate manager renews in place).
    let dir = common::TempDir::new("plane-tls-rotate");
    let (pem, key) = (dir.0.join("worker.pem"), dir.0.join("worker.key"));
    std::fs::copy(cert("other.pem").unwrap(), &pem).unwrap();
    std::fs::copy(cert("other.key").unwrap(), &key).unwrap();
    let files = PlaneTlsFiles { cert: Some(pem.clone()), key: Some(key.clone()), ..one_way("server") };
    let worker = mock(tls(files, PlaneRole::Worker), false, 3);
    let frontend = tls(one_way("server"), PlaneRole::Frontend);
    run(|| async {
        let p = plane(&frontend);
        let detail = cannot_connect(&p, &worker, Duration::from_secs(2)).await;
        assert!(detail.contains("UnknownIssuer"), "{detail}");
    });
    std::fs::copy(cert("server.key").unwrap(), &key).unwrap();
    std::fs::copy(cert("server.pem").unwrap(), &pem).unwrap();
    run(|| async {
        let p = plane(&frontend);
        let end = Instant::now() + Duration::from_secs(10);
        loop {
            match generate(&p, &worker, "rotated", None).await {
                Ok(ids) => break assert_eq!(ids.len(), 3),
                Err(e) => assert!(Instant::now() < end, "the new certificate was never served: {e}"),
            }
            monoio::time::sleep(Duration::from_millis(200)).await;
        }
    });
}

#[test]
fn dropping_a_tls_stream_kills_the_worker_stream() {
    let frontend = tls(one_way("server"), PlaneRole::Frontend);
    let worker = MockWorker::start(MockConfig {
        ttft: Duration::from_millis(2),
        itl: Duration::from_millis(20),
        output_tokens: 200,
        tls: tls(one_way("server"), PlaneRole::Worker),
        ..Default::default()
    })
    .unwrap();
    run(|| async {
        let p = plane(&frontend);
        let mut s = p
            .generate(worker.addr(), worker.endpoint_path(), Codec::Msgpack, &request(None), "kill", DEADLINE)
            .await
            .unwrap();
        let mut items = 0;
        while items < 3 {
            if let StreamEvent::Item(_) = s.next().await.unwrap().unwrap() {
                items += 1;
            }
        }
        drop(s);
        let end = Instant::now() + Duration::from_secs(5);
        while worker.stats().killed == 0 {
            assert!(Instant::now() < end, "the worker never saw the kill");
            monoio::time::sleep(Duration::from_millis(10)).await;
        }
    });
}

// ------------------------------------------------------------------ whole processes

/// A switchyard process (`--discovery-backend file`, two shards) with `args` and `env`, in
/// front of the workers registered in `store`; killed on drop.
struct Frontend {
    child: std::process::Child,
    addr: SocketAddr,
}

impl Drop for Frontend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn frontend(store: &std::path::Path, args: &[&str], env: &[(&str, &str)]) -> Frontend {
    let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--no-pin-shards"])
        .args(["--discovery-backend", "file"])
        .args(args)
        .env("DYN_FILE_KV", store)
        .env("DYN_TCP_RESPONSE_STREAM_HOST", "127.0.0.1");
    for var in ["DYN_TCP_TLS_CA_CERT_PATH", "DYN_TCP_TLS_CERT_PATH", "DYN_TCP_TLS_KEY_PATH", "DYN_TCP_TLS_INSECURE"] {
        cmd.env_remove(var);
    }
    for (k, v) in env {
        cmd.env(k, v);
    }
    let (child, addr, lines) = common::spawn_listening(cmd);
    std::thread::spawn(move || lines.for_each(drop));
    let f = Frontend { child, addr };
    // Loading the model files takes seconds; many more on a loaded machine.
    let end = Instant::now() + Duration::from_secs(90);
    while !http(f.addr, "GET", "/v1/models", "").1.contains("\"qwen3\"") {
        assert!(Instant::now() < end, "the model was never listed");
        std::thread::sleep(Duration::from_millis(50));
    }
    f
}

/// One HTTP/1.1 request (connection closed after it): status and body.
fn http(addr: SocketAddr, method: &str, path: &str, body: &str) -> (u16, String) {
    let mut s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(30))).unwrap();
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {}\r\n\
         connection: close\r\n\r\n{body}",
        body.len()
    )
    .unwrap();
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).unwrap();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let status = text.split(' ').nth(1).and_then(|c| c.parse().ok()).unwrap_or(0);
    let (head, rest) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        String::from_utf8(common::read_chunked(&mut BufReader::new(rest.as_bytes()))).unwrap()
    } else {
        rest.to_string()
    };
    (status, body)
}

fn chat(addr: SocketAddr, stream: bool) -> (u16, String) {
    let body = format!(
        r#"{{"model":"qwen3","messages":[{{"role":"user","content":"hi"}}],"max_tokens":5,"stream":{stream}}}"#
    );
    http(addr, "POST", "/v1/chat/completions", &body)
}

fn qwen3_worker(store: &std::path::Path, t: PlaneTls) -> MockWorker {
    let w = MockWorker::start(MockConfig {
        model_name: "qwen3".into(),
        model_dir: Some(common::qwen3_dir()),
        output_tokens: 16,
        vocab_size: 1000,
        tls: t,
        ..Default::default()
    })
    .unwrap();
    w.register_file(store).unwrap();
    w
}

fn path(name: &str) -> String {
    cert(name).unwrap().display().to_string()
}

#[test]
fn switchyard_serves_a_tls_worker_whole_and_streamed_on_both_drivers() {
    let store = common::TempDir::new("plane-tls-e2e");
    let worker = qwen3_worker(&store.0, tls(one_way("server"), PlaneRole::Worker));
    let (cert_pem, key, ca) = (path("server.pem"), path("server.key"), path("ca.pem"));
    for driver in ["epoll", "io-uring"] {
        let f = frontend(
            &store.0,
            &["--io-driver", driver, "--tcp-tls-cert-path", &cert_pem, "--tcp-tls-key-path", &key],
            // The CA by its variable: flags and variables mix as in 1.6.1.
            &[("DYN_TCP_TLS_CA_CERT_PATH", &ca)],
        );
        let (status, body) = chat(f.addr, false);
        assert_eq!(status, 200, "{driver}: {body}");
        let v: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(v["usage"]["completion_tokens"], 5, "{body}");
        assert_eq!(v["choices"][0]["finish_reason"], "length");
        let (status, sse) = chat(f.addr, true);
        assert_eq!(status, 200, "{driver}: {sse}");
        assert!(sse.contains("\"finish_reason\":\"length\"") && sse.trim_end().ends_with("data: [DONE]"), "{sse}");
    }
    // Every request reached the worker over TLS and its answer went back without an error
    // (a stream the frontend ends at max_tokens may count as killed).
    let end = Instant::now() + Duration::from_secs(5);
    while worker.stats().completed + worker.stats().killed < 4 {
        assert!(Instant::now() < end, "{:?}", worker.stats());
        std::thread::sleep(Duration::from_millis(20));
    }
    let stats = worker.stats();
    assert_eq!((stats.frames, stats.stream_errors), (4, 0), "{stats:?}");
}

#[test]
fn switchyard_mutual_tls_and_an_untrusted_worker_is_a_clean_503() {
    let store = common::TempDir::new("plane-tls-mtls");
    let _worker = qwen3_worker(&store.0, tls(mutual(), PlaneRole::Worker));
    let args = [
        "--tcp-tls-cert-path",
        &path("server.pem"),
        "--tcp-tls-key-path",
        &path("server.key"),
        "--tcp-tls-ca-cert-path",
        &path("ca.pem"),
        "--tcp-tls-client-cert-path",
        &path("client.pem"),
        "--tcp-tls-client-key-path",
        &path("client.key"),
        "--tcp-tls-client-ca-cert-path",
        &path("ca.pem"),
    ]
    .map(|s| s.to_string());
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let f = frontend(&store.0, &args, &[]);
    let (status, body) = chat(f.addr, false);
    assert_eq!(status, 200, "{body}");
    drop(f);

    let store = common::TempDir::new("plane-tls-untrusted");
    let _worker = qwen3_worker(&store.0, tls(one_way("other"), PlaneRole::Worker));
    let f = frontend(&store.0, &args, &[]);
    let started = Instant::now();
    let (status, body) = chat(f.addr, false);
    assert_eq!(status, 503, "{body}");
    assert!(body.contains("Service temporarily unavailable") || body.contains("not ready"), "{body}");
    assert!(started.elapsed() < Duration::from_secs(5), "took {:?}", started.elapsed());
    let (status, sse) = chat(f.addr, true);
    assert_eq!(status, 503, "{sse}");
}

#[test]
fn start_up_refuses_incomplete_or_unusable_tls_settings() {
    let run = |args: &[&str], env: &[(&str, &str)]| {
        let mut cmd = std::process::Command::new(env!("CARGO_BIN_EXE_switchyard"));
        cmd.args(["--http-host", "127.0.0.1", "--http-port", "0", "--discovery-backend", "file"]).args(args);
        for (k, v) in env {
            cmd.env(k, v);
        }
        let mut child = cmd.stderr(std::process::Stdio::piped()).stdout(std::process::Stdio::null()).spawn().unwrap();
        let mut err = String::new();
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        // A process that starts is killed once it listens: only start-up failures count.
        let code = loop {
            match lines.next() {
                Some(Ok(l)) if l.contains("listening on") => {
                    let _ = child.kill();
                    let _ = child.wait();
                    break None;
                }
                Some(Ok(l)) => err.push_str(&l),
                _ => break child.wait().unwrap().code(),
            }
        };
        (code, err)
    };
    let (code, err) = run(&["--tcp-tls-cert-path", &path("server.pem")], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("both DYN_TCP_TLS_CERT_PATH and DYN_TCP_TLS_KEY_PATH must be set to enable TCP server TLS"));
    let (code, err) = run(&["--tcp-tls-client-ca-cert-path", &path("ca.pem")], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("DYN_TCP_TLS_CLIENT_CA_CERT_PATH requires DYN_TCP_TLS_CERT_PATH and DYN_TCP_TLS_KEY_PATH"));
    let (code, err) = run(&["--tcp-tls-client-cert-path", &path("client.pem")], &[("DYN_TCP_TLS_INSECURE", "1")]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("must be set together to present a client identity"), "{err}");
    let (code, err) = run(
        &["--tcp-tls-client-cert-path", &path("client.pem"), "--tcp-tls-client-key-path", &path("client.key")],
        &[],
    );
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("Request plane TLS is enabled but DYN_TCP_TLS_CA_CERT_PATH is not set"), "{err}");
    let (code, err) = run(&["--tcp-tls-ca-cert-path", "/nonexistent/ca.pem"], &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("/nonexistent/ca.pem"), "{err}");
    // Complete settings start; so does insecure mode.
    let (code, err) = run(&["--tcp-tls-ca-cert-path", &path("ca.pem")], &[]);
    assert_eq!(code, None, "{err}");
    let (code, err) = run(&[], &[("DYN_TCP_TLS_INSECURE", "true")]);
    assert_eq!(code, None, "{err}");
}
