//! `switchyard bench` end to end: the real binary against a real switchyard process serving
//! embedded mock workers (`--discovery-backend mem --embedded-fast`, real Qwen3 tokenizer),
//! and against scripted fake servers for the failure classes.

mod common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

const BIN: &str = env!("CARGO_BIN_EXE_switchyard");

fn qwen3_dir() -> PathBuf {
    common::model_dir("qwen3")
}

/// A switchyard process with two fast embedded workers; killed on drop.
struct Server {
    child: Child,
    addr: SocketAddr,
}

impl Drop for Server {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Server {
    fn start() -> Server {
        Server::start_with(&[])
    }

    /// [`Server::start`] with further server options.
    fn start_with(extra: &[&str]) -> Server {
        let mut child = Command::new(BIN)
            .args(["--discovery-backend", "mem", "--embedded-fast", "--embedded-model-path"])
            .arg(qwen3_dir())
            .args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--no-pin-shards"])
            .args(extra)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start switchyard");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let addr = loop {
            let line = lines.next().expect("switchyard exited before listening").unwrap();
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        // Keep draining stderr so the server never blocks on a full pipe.
        std::thread::spawn(move || for _ in lines {});
        let server = Server { child, addr };
        let t0 = Instant::now();
        while !server.models().contains("qwen3") {
            assert!(t0.elapsed() < Duration::from_secs(90), "the embedded model never appeared");
            std::thread::sleep(Duration::from_millis(50));
        }
        server
    }

    fn models(&self) -> String {
        self.get("/v1/models")
    }

    fn get(&self, path: &str) -> String {
        let Ok(mut s) = std::net::TcpStream::connect(self.addr) else { return String::new() };
        let _ = write!(s, "GET {path} HTTP/1.1\r\nHost: t\r\nConnection: close\r\n\r\n");
        let mut out = String::new();
        let _ = s.read_to_string(&mut out);
        out
    }

    fn url(&self) -> String {
        format!("http://{}", self.addr)
    }
}

struct Run {
    code: i32,
    stdout: String,
    stderr: String,
    report: Option<Value>,
}

/// `switchyard bench --url URL --model-path qwen3 ARGS --json TMP`.
fn bench(url: &str, tag: &str, args: &[&str]) -> Run {
    let json = std::env::temp_dir().join(format!("sy-bench-test-{tag}-{}.json", std::process::id()));
    let _ = std::fs::remove_file(&json);
    let out = Command::new(BIN)
        .arg("bench")
        .args(["--url", url, "--model-path"])
        .arg(qwen3_dir())
        .args(args)
        .arg("--json")
        .arg(&json)
        .output()
        .expect("run switchyard bench");
    let report = std::fs::read_to_string(&json).ok().map(|t| serde_json::from_str(&t).expect("report is JSON"));
    Run {
        code: out.status.code().unwrap_or(-1),
        stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        report,
    }
}

impl Run {
    fn report(&self) -> &Value {
        self.report.as_ref().unwrap_or_else(|| panic!("no report\nstdout: {}\nstderr: {}", self.stdout, self.stderr))
    }
    fn ok(&self) -> u64 {
        self.report()["ok"].as_u64().unwrap()
    }
    fn failed(&self) -> u64 {
        self.report()["failed"].as_u64().unwrap()
    }
    fn metric(&self, key: &str) -> &Value {
        &self.report()["metrics"][key]
    }
    fn assert_clean(&self, ok: u64) {
        assert_eq!(
            (self.code, self.ok(), self.failed()),
            (0, ok, 0),
            "stdout: {}\nstderr: {}",
            self.stdout,
            self.stderr
        );
    }
}

/// Every successful request got exactly `n` output tokens.
fn assert_output_tokens(r: &Run, n: u32) {
    let m = r.metric("output_tokens");
    assert_eq!((m["min"].as_f64(), m["max"].as_f64()), (Some(f64::from(n)), Some(f64::from(n))), "{m}");
    assert_eq!(r.report()["output_tokens_total"].as_u64(), Some(r.ok() * u64::from(n)));
}

#[test]
fn streaming_and_whole_closed_and_open_loop_against_switchyard() {
    let s = Server::start();
    let url = s.url();

    // Streaming chat, closed loop.
    let r = bench(
        &url,
        "sc",
        &[
            "--stream",
            "--concurrency",
            "4",
            "--requests",
            "40",
            "--warmup",
            "4",
            "--input-tokens",
            "32",
            "--output-tokens",
            "20",
            "--no-progress",
        ],
    );
    r.assert_clean(40);
    assert_output_tokens(&r, 20);
    assert_eq!(r.metric("ttft")["count"].as_u64(), Some(40));
    assert_eq!(r.metric("itl")["count"].as_u64(), Some(40));
    let (ttft, e2e) = (r.metric("ttft")["p50"].as_f64().unwrap(), r.metric("e2e")["p50"].as_f64().unwrap());
    assert!(ttft > 0.0 && ttft <= e2e, "ttft {ttft} e2e {e2e}");
    assert!(r.stdout.contains("40 ok, 0 failed"), "{}", r.stdout);
    assert!(r.stdout.contains("TTFT (ms)") && r.stdout.contains("p99.9"), "{}", r.stdout);
    assert!(r.report()["bench_cpu"]["us_per_request"].as_f64().unwrap() > 0.0);
    // The chat template adds its own tokens around the 32 of content, the same for each.
    let prompt = r.metric("prompt_tokens");
    assert!(prompt["min"].as_f64().unwrap() > 32.0 && prompt["min"] == prompt["max"], "{prompt}");

    // Whole completions, closed loop: no TTFT/ITL; the prompt is exactly the asked length.
    let w = bench(
        &url,
        "wc",
        &[
            "--endpoint",
            "completions",
            "--concurrency",
            "3",
            "--requests",
            "30",
            "--input-tokens",
            "50",
            "--output-tokens",
            "7",
            "--no-progress",
        ],
    );
    w.assert_clean(30);
    assert_output_tokens(&w, 7);
    assert!(w.metric("ttft").is_null() && w.metric("itl").is_null());
    assert_eq!(
        (w.metric("prompt_tokens")["min"].as_f64(), w.metric("prompt_tokens")["max"].as_f64()),
        (Some(50.0), Some(50.0))
    );

    // Open loop, streaming completions and whole chat, with prefix families.
    let o = bench(
        &url,
        "so",
        &[
            "--stream",
            "--endpoint",
            "completions",
            "--rate",
            "200",
            "--requests",
            "60",
            "--seed",
            "3",
            "--output-tokens",
            "12",
            "--prefix-families",
            "3",
            "--prefix-tokens",
            "64",
            "--no-progress",
        ],
    );
    o.assert_clean(60);
    assert_output_tokens(&o, 12);
    assert!(o.stdout.contains("open loop, 200 req/s"), "{}", o.stdout);
    // 60 Poisson arrivals at 200/s take about 0.3 s; far from 0 and from a closed loop's pace.
    let d = o.report()["duration_s"].as_f64().unwrap();
    assert!((0.1..3.0).contains(&d), "open loop took {d} s");
    let ow = bench(&url, "wo", &["--rate", "100", "--requests", "20", "--output-tokens", "5", "--no-progress"]);
    ow.assert_clean(20);
    assert_output_tokens(&ow, 5);

    // --duration bounds a run instead of --requests; the progress line comes once a second.
    let dur = bench(&url, "dur", &["--stream", "--concurrency", "2", "--duration", "1.5", "--output-tokens", "4"]);
    assert_eq!((dur.code, dur.failed()), (0, 0), "{}", dur.stderr);
    assert!(dur.ok() > 10, "only {} requests in 1.5 s", dur.ok());
    let d = dur.report()["duration_s"].as_f64().unwrap();
    assert!((1.4..4.0).contains(&d), "duration {d}");
    assert!(dur.stderr.contains(" ok, 0 failed, "), "no progress line: {}", dur.stderr);

    // The export round-trips through --compare: the same p50s, read back from the raw
    // histograms.
    let a = std::env::temp_dir().join(format!("sy-bench-test-sc-{}.json", std::process::id()));
    let b = std::env::temp_dir().join(format!("sy-bench-test-wc-{}.json", std::process::id()));
    let out = Command::new(BIN).arg("bench").arg("--compare").arg(&a).arg(&b).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let table = String::from_utf8(out.stdout).unwrap();
    let e2e_row = table.lines().find(|l| l.starts_with("E2E latency p50 (ms)")).expect(&table);
    let want_a = switchyard::bench::stats::num(r.metric("e2e")["p50"].as_f64().unwrap());
    let want_b = switchyard::bench::stats::num(w.metric("e2e")["p50"].as_f64().unwrap());
    let cells: Vec<&str> = e2e_row.split_whitespace().collect();
    assert_eq!(&cells[4..6], &[want_a.as_str(), want_b.as_str()], "{e2e_row}");
    assert!(table.contains("only in A: TTFT, ITL"), "{table}");
    for p in [&a, &b] {
        let _ = std::fs::remove_file(p);
    }
}

/// A server's idle timeout closes keep-alive connections the bench holds in its pool; a
/// request must not be sent on one of them (it would be lost: "closed" failures in a long
/// low-rate run). One connection at most, arrivals seconds apart: the server closes it
/// between requests (counted in its /metrics), and every request is still answered.
#[test]
fn connections_the_server_closed_while_idle_are_not_reused() {
    let s = Server::start_with(&["--idle-timeout-secs", "1.2"]);
    let r = bench(
        &s.url(),
        "idle",
        &[
            "--rate",
            "0.5",
            "--concurrency",
            "1",
            "--requests",
            "6",
            "--seed",
            "3",
            "--input-tokens",
            "16",
            "--output-tokens",
            "2",
            "--no-progress",
        ],
    );
    r.assert_clean(6);
    let metrics = s.get("/metrics");
    let closed: f64 = metrics
        .lines()
        .filter(|l| l.starts_with("switchyard_limit_hits_total{limit=\"idle_timeout\"}"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert!(closed >= 1.0, "the server closed no idle connection between the requests: {metrics}");
}

#[test]
fn a_server_answering_errors_is_counted_as_errors() {
    let s = Server::start();
    let r = bench(
        &s.url(),
        "err",
        &["--model", "no-such-model", "--requests", "12", "--concurrency", "3", "--no-progress"],
    );
    assert_eq!(r.code, 1, "failed requests make the exit status 1\n{}", r.stdout);
    assert_eq!((r.ok(), r.failed()), (0, 12));
    assert_eq!(r.report()["errors"]["http_404"].as_u64(), Some(12), "{}", r.report()["errors"]);
    assert!(r.report()["metrics"].as_object().unwrap().is_empty(), "failures are not recorded as latencies");
    assert!(r.stdout.contains("errors: http_404 12"), "{}", r.stdout);
    let allowed = bench(
        &s.url(),
        "err2",
        &["--model", "no-such-model", "--stream", "--requests", "2", "--allow-errors", "--no-progress"],
    );
    assert_eq!((allowed.code, allowed.failed()), (0, 2));
}

/// A fake server answering every request on every connection with `answer`, or never
/// answering when it is empty.
fn fake_server(answer: Vec<u8>) -> SocketAddr {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let answer = std::sync::Arc::new(answer);
    std::thread::spawn(move || {
        for c in l.incoming() {
            let Ok(mut c) = c else { return };
            let answer = answer.clone();
            std::thread::spawn(move || {
                let mut buf = [0u8; 65536];
                let mut head = Vec::new();
                while let Ok(n) = c.read(&mut buf) {
                    if n == 0 {
                        return;
                    }
                    head.extend_from_slice(&buf[..n]);
                    // One request per read is enough for these tests' small bodies.
                    if !answer.is_empty() && head.windows(4).any(|w| w == b"\r\n\r\n") {
                        head.clear();
                        if c.write_all(&answer).is_err() {
                            return;
                        }
                    }
                }
            });
        }
    });
    addr
}

/// An HTTP/1.1 answer with a Content-Length body.
fn answer(status: &str, content_type: &str, body: &str) -> Vec<u8> {
    format!("HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\ncontent-length: {}\r\n\r\n{body}", body.len())
        .into_bytes()
}

#[test]
fn timeouts_and_malformed_answers_are_failures_not_successes() {
    let sse = "text/event-stream";
    let json = "application/json";
    let mut truncated = answer("200 OK", json, r#"{"choices":[]}"#);
    truncated.truncate(truncated.len() - 3);
    let cases: Vec<(Vec<u8>, &str, &[&str])> = vec![
        (Vec::new(), "timeout", &["--timeout", "0.3"]),
        (truncated, "timeout", &["--timeout", "0.3"]),
        (answer("200 OK", sse, "data: nonsense\n\n"), "malformed", &["--stream"]),
        (answer("200 OK", sse, "data: {\"choices\":[{\"text\":\"a\"}]}\n\n"), "malformed", &["--stream"]),
        (answer("200 OK", sse, "data: {\"choices\":[]}\n\ndata: [DO"), "malformed", &["--stream"]),
        (answer("200 OK", json, r#"{"choices":[]}"#), "malformed", &["--stream"]),
        (
            answer("200 OK", sse, "data: {\"error\":{\"message\":\"worker gone\"}}\n\ndata: [DONE]\n\n"),
            "stream_error",
            &["--stream"],
        ),
        (answer("200 OK", json, r#"{"id":"x"}"#), "malformed", &[]),
        (b"NOT HTTP AT ALL\r\n\r\n".to_vec(), "malformed", &[]),
        (answer("503 Service Unavailable", json, "{}"), "http_503", &["--stream"]),
    ];
    for (answer, class, extra) in cases {
        let shown = String::from_utf8_lossy(&answer).into_owned();
        let addr = fake_server(answer);
        let mut args = vec!["--model", "m", "--requests", "3", "--timeout", "5", "--no-progress"];
        args.extend_from_slice(extra);
        let r = bench(&format!("http://{addr}"), class, &args);
        assert_eq!(r.code, 1, "{shown}: {}", r.stdout);
        assert_eq!((r.ok(), r.failed()), (0, 3), "{shown}");
        assert_eq!(r.report()["errors"][class].as_u64(), Some(3), "{shown}: {}", r.report()["errors"]);
    }
    // Nothing listening: connection errors.
    let port = TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let r =
        bench(&format!("http://127.0.0.1:{port}"), "refused", &["--model", "m", "--requests", "2", "--no-progress"]);
    assert_eq!((r.code, r.failed()), (1, 2));
    assert_eq!(r.report()["errors"]["connect"].as_u64(), Some(2));
}

#[test]
fn bad_arguments_are_clear_errors() {
    let out =
        Command::new(BIN).args(["bench", "--concurrency", "0", "--model-path"]).arg(qwen3_dir()).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--concurrency must be at least 1"));
    let missing = Path::new("/nonexistent/report.json");
    let out = Command::new(BIN).arg("bench").arg("--compare").arg(missing).arg(missing).output().unwrap();
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stderr).contains("/nonexistent/report.json"));
    let out = Command::new(BIN).args(["bench", "--help"]).output().unwrap();
    assert!(out.status.success() && String::from_utf8_lossy(&out.stdout).contains("--prefix-families"));
}
