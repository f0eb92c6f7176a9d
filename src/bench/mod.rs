//! `switchyard bench`: a latency benchmark client for OpenAI-compatible servers (switchyard,
//! Dynamo's frontend, anything serving `/v1/chat/completions` and `/v1/completions`).
//!
//! ```text
//! switchyard bench --model-path DIR [--url http://127.0.0.1:8000] [--endpoint chat|completions]
//!     [--stream] [--concurrency N | --rate R] [--requests N] [--duration S] [--json OUT] …
//! switchyard bench --compare A.json B.json
//! ```
//!
//! # Layout
//!
//! | module | owns |
//! |---|---|
//! | [`cli`] | the arguments, checked once into [`cli::Args`] |
//! | [`prompt`] | exact-length synthetic prompts from the model's tokenizer, prefix families, request bytes |
//! | [`schedule`] | the seeded generator and the open loop's Poisson arrivals |
//! | [`client`] | the HTTP/1.1 keep-alive client and its sans-I/O answer reader |
//! | [`sse`] | the SSE parser, per-stream token timing, checks of whole answers |
//! | [`run`] | the runtime, connection pool, closed and open loops, progress line, getrusage |
//! | [`stats`] | outcome classes, HDR histograms, the report (table and `--json`) |
//! | [`compare`] | `--compare`: two reports side by side |
//!
//! Flow: [`main`] parses, asks the server for its model when none is named, builds every
//! request before the clock starts, [`run::run`]s the warm-up and measured phases on one
//! monoio thread, prints the table and writes the JSON. Exit status: 0, or 1 if a measured
//! request failed (unless `--allow-errors`), 2 for bad arguments or set-up errors.
//!
//! Depends on [`crate::tokenize`] (tokenizer) and [`crate::http1::parse`] (chunked decoding)
//! only; nothing of the server runs in the bench process.

pub mod cli;
pub mod client;
pub mod compare;
pub mod prompt;
pub mod run;
pub mod schedule;
pub mod sse;
pub mod stats;

use std::io::{Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::json;

use cli::{Args, Command};
use prompt::{BodySpec, PromptSpec, Words};
use run::{Load, Plan};
use stats::Report;

/// Distinct prepared requests at most; a longer run cycles through them.
const POOL: u64 = 1024;
/// Open loop without `--concurrency`: connections at most.
const OPEN_LOOP_CONNECTIONS: usize = 256;

/// Run `switchyard bench` with the arguments after `bench`; returns the exit status.
pub fn main(args: &[String]) -> i32 {
    match cli::parse(args) {
        Ok(Command::Help) => {
            print!("{}", cli::USAGE);
            0
        }
        Ok(Command::Compare(a, b)) => match compare::run(&a, &b) {
            Ok(table) => {
                print!("{table}");
                0
            }
            Err(e) => {
                eprintln!("switchyard bench: {e}");
                2
            }
        },
        Ok(Command::Run(a)) => match bench(&a) {
            Ok(code) => code,
            Err(e) => {
                eprintln!("switchyard bench: {e}");
                2
            }
        },
        Err(e) => {
            eprintln!("switchyard bench: {e}");
            2
        }
    }
}

fn bench(a: &Args) -> Result<i32, String> {
    let model = match &a.model {
        Some(m) => m.clone(),
        None => only_model(a)?,
    };
    let tok = crate::tokenize::Tokenizer::from_file(a.model_path.join("tokenizer.json"))
        .map_err(|e| format!("{}: {e}", a.model_path.join("tokenizer.json").display()))?;
    let words = Words::from_tokenizer(&tok)?;
    let spec = PromptSpec {
        input_tokens: a.input_tokens,
        prefix_families: a.prefix_families,
        prefix_tokens: a.prefix_tokens,
        seed: a.seed,
    };
    let count = a.requests.map_or(POOL, |n| (n + a.warmup).min(POOL)) as usize;
    let texts = prompt::prompts(&tok, &words, &spec, count)?;
    let body_spec =
        BodySpec { endpoint: a.endpoint, model: model.clone(), output_tokens: a.output_tokens, stream: a.stream };
    let bodies: Vec<Vec<u8>> = texts.iter().map(|t| prompt::body(&body_spec, t)).collect();
    if let Some(path) = &a.save_body {
        std::fs::write(path, &bodies[0]).map_err(|e| format!("--save-body {}: {e}", path.display()))?;
    }
    let requests = bodies.iter().map(|b| prompt::request(&a.host, a.endpoint.path(), b)).collect();
    let load = match a.rate {
        Some(rate) => Load::Open { rate, max_connections: a.concurrency.unwrap_or(OPEN_LOOP_CONNECTIONS) },
        None => Load::Closed { concurrency: a.concurrency.unwrap_or(1) },
    };
    let config = json!({
        "url": a.url,
        "model": model,
        "endpoint": a.endpoint.name(),
        "stream": a.stream,
        "load": match load {
            Load::Closed { concurrency } => format!("closed loop, concurrency {concurrency}"),
            Load::Open { rate, max_connections } => format!("open loop, {rate} req/s (≤ {max_connections} connections)"),
        },
        "concurrency": a.concurrency,
        "rate": a.rate,
        "input_tokens": a.input_tokens,
        "output_tokens": a.output_tokens,
        "prefix_families": a.prefix_families,
        "prefix_tokens": a.prefix_tokens,
        "requests": a.requests,
        "duration_s": a.duration.map(|d| d.as_secs_f64()),
        "warmup": a.warmup,
        "timeout_s": a.timeout.as_secs_f64(),
        "seed": a.seed,
    });
    let plan = Plan {
        addr: a.addr,
        requests,
        stream: a.stream,
        timeout: a.timeout,
        load,
        limit: a.requests,
        duration: a.duration,
        warmup: a.warmup,
        progress: a.progress,
        seed: a.seed,
        driver: a.driver,
    };
    if let Some(t) = a.start_at {
        let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0.0, |d| d.as_secs_f64());
        if t > now {
            std::thread::sleep(Duration::from_secs_f64(t - now));
        }
    }
    let m = run::run(plan).map_err(|e| format!("cannot start the client's runtime: {e}"))?;
    if m.warmup_failed > 0 {
        eprintln!("switchyard bench: note: {} warm-up request(s) failed", m.warmup_failed);
    }
    let report = Report::new(config, &m.rec, m.wall, m.cpu, m.driver);
    let mut table = report.render();
    if let Some(out) = report.metrics.get("output_tokens") {
        let want = f64::from(a.output_tokens);
        if out.min != want || out.max != want {
            table.push_str(&format!(
                "note: output tokens per request ranged {}–{}, not the {} asked for (does the server honour ignore_eos?)\n",
                out.min, out.max, a.output_tokens
            ));
        }
    }
    print!("{table}");
    if let Some(path) = &a.json {
        let text = serde_json::to_string_pretty(&report).map_err(|e| e.to_string())?;
        std::fs::write(path, text).map_err(|e| format!("--json {}: {e}", path.display()))?;
    }
    Ok(if report.failed > 0 && !a.allow_errors { 1 } else { 0 })
}

/// The id of the one model `GET /v1/models` lists.
fn only_model(a: &Args) -> Result<String, String> {
    let body = get(a, "/v1/models").map_err(|e| format!("GET {}/v1/models: {e} (or name one with --model)", a.url))?;
    let v: serde_json::Value =
        serde_json::from_slice(&body).map_err(|e| format!("GET /v1/models: not JSON ({e}); name one with --model"))?;
    let ids: Vec<&str> =
        v["data"].as_array().map(|d| d.iter().filter_map(|m| m["id"].as_str()).collect()).unwrap_or_default();
    match ids.as_slice() {
        [one] => Ok(one.to_string()),
        [] => Err(format!("{} serves no model yet; name one with --model", a.url)),
        many => Err(format!("{} serves {} models ({}); name one with --model", a.url, many.len(), many.join(", "))),
    }
}

/// A blocking `GET` (set-up only, not measured): the 200 body.
fn get(a: &Args, path: &str) -> Result<Vec<u8>, String> {
    let mut s = TcpStream::connect_timeout(&a.addr, Duration::from_secs(10)).map_err(|e| e.to_string())?;
    s.set_read_timeout(Some(Duration::from_secs(10))).map_err(|e| e.to_string())?;
    write!(s, "GET {path} HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n", a.host).map_err(|e| e.to_string())?;
    let mut raw = Vec::new();
    s.read_to_end(&mut raw).map_err(|e| e.to_string())?;
    let mut headers = [httparse::EMPTY_HEADER; 48];
    let mut resp = httparse::Response::new(&mut headers);
    let Ok(httparse::Status::Complete(len)) = resp.parse(&raw) else {
        return Err("not an HTTP response".into());
    };
    if resp.code != Some(200) {
        return Err(format!("status {}", resp.code.unwrap_or(0)));
    }
    let chunked = resp.headers.iter().any(|h| {
        h.name.eq_ignore_ascii_case("transfer-encoding") && String::from_utf8_lossy(h.value).contains("chunked")
    });
    if !chunked {
        return Ok(raw[len..].to_vec());
    }
    let mut body = Vec::new();
    crate::http1::parse::ChunkedDecoder::new(8192)
        .decode(&raw[len..], &mut body, usize::MAX)
        .map_err(|e| e.message().to_string())?;
    Ok(body)
}
