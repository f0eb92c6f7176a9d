//! The worker's threads: acceptor, per-connection frame reader / acker, per-request stream
//! writer and its kill / stop reader. See the module docs of [`crate::worker`].

use std::io::{self, Read, Write};
use std::net::{Shutdown, TcpListener, TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use bytes::BytesMut;
use serde_json::{json, Value};

use super::tls::Sock;
use super::{Counters, MockInput, Shared};
use crate::plane::{
    encode_ack, encode_complete_final, encode_control, encode_handshake, encode_item, encode_prologue, Ack, Annotated,
    CallHomeHandshake, Codec, CompletionUsage, ControlMessage, Decoded, FinishReason, LLMEngineOutput,
    PreprocessedRequest, PromptTokensDetails, RequestControlMessage, RequestFrame, RequestFrameDecoder, StreamPrologue,
    StreamType, TcpStreamInfo, TopLogprob, TwoPartDecoder, TwoPartKind, DEFAULT_MAX_MESSAGE_SIZE,
};

/// How long a finished stream waits for the frontend's FIN (Dynamo: ≤ 10 s).
const FIN_WAIT: Duration = Duration::from_secs(10);
/// Read timeout of the call-back reader, so it notices shutdown.
const READER_POLL: Duration = Duration::from_millis(50);
/// Longest single sleep while waiting for a delay, so kill / stop / shutdown are prompt.
const WAIT_SLICE: Duration = Duration::from_millis(5);
/// In fast mode, frames are written once this many bytes are buffered.
const FAST_FLUSH: usize = 64 * 1024;

// ---------------------------------------------------------------- accept + request frames

pub(crate) fn accept_loop(listener: TcpListener, shared: Arc<Shared>) {
    for conn in listener.incoming() {
        if shared.shutdown.load(Ordering::SeqCst) {
            break;
        }
        let Ok(conn) = conn else { continue };
        let _ = conn.set_nodelay(true);
        let id = shared.next_conn.fetch_add(1, Ordering::Relaxed);
        if let Ok(clone) = conn.try_clone() {
            shared.conns.lock().unwrap_or_else(|e| e.into_inner()).insert(id, clone);
        }
        let s = Arc::clone(&shared);
        let spawned = std::thread::Builder::new().name("mock-worker-conn".into()).spawn(move || {
            conn_loop(conn, &s);
            s.conns.lock().unwrap_or_else(|e| e.into_inner()).remove(&id);
        });
        match spawned {
            Ok(t) => {
                let mut threads = shared.conn_threads.lock().unwrap_or_else(|e| e.into_inner());
                threads.retain(|t| !t.is_finished());
                threads.push(t);
            }
            Err(e) => crate::log::error(&format!("mock worker: cannot spawn a connection thread: {e}")),
        }
    }
}

/// Reads request frames, acks each in order before decoding its payload, starts its stream.
/// With request-plane TLS, the handshake comes first (a frontend that fails it is dropped).
fn conn_loop(tcp: TcpStream, shared: &Arc<Shared>) {
    let sock = match &shared.cfg.tls.acceptor {
        None => Sock::plain(tcp),
        Some(acceptor) => match Sock::accept(tcp, acceptor) {
            Ok(s) => s,
            Err(e) => {
                crate::log::warn(&format!("mock worker: request-plane TLS handshake failed: {e}"));
                return;
            }
        },
    };
    let mut conn = &sock;
    let decoder = RequestFrameDecoder::new(DEFAULT_MAX_MESSAGE_SIZE);
    let mut buf = BytesMut::with_capacity(64 * 1024);
    let mut chunk = vec![0u8; 64 * 1024];
    let mut ack = Vec::with_capacity(64);
    loop {
        loop {
            ack.clear();
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(frame)) => {
                    Counters::bump(&shared.counters.frames);
                    let known = frame.path == shared.endpoint_path;
                    if known {
                        encode_ack(&mut ack, &Ack::Accepted);
                    } else {
                        Counters::bump(&shared.counters.rejected);
                        let text = format!("Server unavailable: unknown endpoint {}", frame.path);
                        encode_ack(&mut ack, &Ack::Rejected(text));
                    }
                    if conn.write_all(&ack).is_err() {
                        return;
                    }
                    if known {
                        if let Err(e) = start_request(shared, &frame) {
                            Counters::bump(&shared.counters.decode_errors);
                            crate::log::warn(&format!("mock worker: request not served: {e}"));
                        }
                    }
                }
                Ok(Decoded::Incomplete { .. }) => break,
                Err(e) => {
                    // Framing is lost: refuse and close.
                    Counters::bump(&shared.counters.frames);
                    Counters::bump(&shared.counters.rejected);
                    encode_ack(&mut ack, &Ack::Rejected(format!("Read error: {e}")));
                    let _ = conn.write_all(&ack);
                    let _ = conn.shutdown(Shutdown::Both);
                    return;
                }
            }
        }
        match conn.read(&mut chunk) {
            Ok(0) | Err(_) => return,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
        if shared.shutdown.load(Ordering::SeqCst) {
            return;
        }
    }
}

/// What one request will produce.
struct Job {
    info: TcpStreamInfo,
    codec: Codec,
    request_id: String,
    prompt_tokens: u32,
    tokens: Vec<u32>,
    finish: FinishReason,
    /// `Some(model)` for `model_input = Text` (OpenAI chunks), `None` for Tokens.
    text_model: Option<String>,
    /// A Text request with a `prompt` (no `messages`): `text_completion` chunks.
    text_completion: bool,
    /// `output_options.logprobs` of a Tokens request: emit [`mock_logprobs`] per token.
    logprobs: Option<u32>,
}

/// Decodes the payload and spawns the stream thread. Errors are payloads that do not decode.
fn start_request(shared: &Arc<Shared>, frame: &RequestFrame) -> Result<(), String> {
    let tp = frame.two_part(DEFAULT_MAX_MESSAGE_SIZE).map_err(|e| e.to_string())?;
    let ctrl = RequestControlMessage::from_json(tp.header).map_err(|e| e.to_string())?;
    if ctrl.connection_info.transport != "tcp_server" {
        return Err(format!("unsupported call-back transport {:?}", ctrl.connection_info.transport));
    }
    let info = ctrl.connection_info.tcp_info().map_err(|e| e.to_string())?;
    let codec = ctrl.payload_codec;
    let cfg = &shared.cfg;
    if cfg.model_input == MockInput::Tensor {
        let req = codec.decode(tp.body).map_err(|e| e.to_string())?;
        return super::tensor::start(shared, info, codec, req);
    }
    let (prompt_tokens, tokens, finish, text_model, text_completion, logprobs) = match cfg.model_input {
        MockInput::Tokens => {
            let req: PreprocessedRequest = codec.decode(tp.body).map_err(|e| e.to_string())?;
            shared.received.lock().unwrap_or_else(|e| e.into_inner()).push(super::Received {
                request_id: ctrl.id.clone(),
                token_ids: req.token_ids.clone(),
                max_tokens: req.stop_conditions.max_tokens,
            });
            let sc = &req.stop_conditions;
            let echoed = match &shared.echo {
                Some(echo) => Some(echo.answer(&req.token_ids)?),
                None => None,
            };
            let (tokens, finish) = plan_tokens(
                cfg,
                echoed.as_deref().or(cfg.script.as_deref()),
                &req.token_ids,
                req.sampling_options.seed,
                sc.max_tokens,
                sc.ignore_eos.unwrap_or(false),
            );
            let prompt_tokens = u32::try_from(req.token_ids.len()).unwrap_or(u32::MAX);
            (prompt_tokens, tokens, finish, None, false, req.output_options.logprobs)
        }
        MockInput::Text => {
            let req: Value = codec.decode(tp.body).map_err(|e| e.to_string())?;
            let max = req
                .get("max_completion_tokens")
                .or_else(|| req.get("max_tokens"))
                .and_then(Value::as_u64)
                .map(|m| u32::try_from(m).unwrap_or(u32::MAX));
            let seed = req.get("seed").and_then(Value::as_i64);
            let model = req.get("model").and_then(Value::as_str).unwrap_or(&cfg.model_name).to_string();
            let text_completion = req.get("messages").is_none();
            let prompt = serde_json::to_vec(&req.get("messages").or_else(|| req.get("prompt"))).unwrap_or_default();
            let prompt: Vec<u32> = prompt.iter().map(|&b| u32::from(b)).collect();
            let ignore_eos = req.get("ignore_eos").and_then(Value::as_bool).unwrap_or(false);
            let (tokens, finish) = plan_tokens(cfg, cfg.script.as_deref(), &prompt, seed, max, ignore_eos);
            // Text workers count their own prompt: here one per byte of the request object as
            // received, in compact JSON (so a test can see what arrived).
            let received = serde_json::to_vec(&req).map_or(0, |b| b.len());
            let prompt_tokens = u32::try_from(received).unwrap_or(u32::MAX);
            (prompt_tokens, tokens, finish, Some(model), text_completion, None)
        }
        // Answered above.
        MockInput::Tensor => return Err("a tensor request outside tensor mode".into()),
    };
    let request_id = ctrl.id;
    let job = Job { info, codec, request_id, prompt_tokens, tokens, finish, text_model, text_completion, logprobs };
    let s = Arc::clone(shared);
    s.active_streams.fetch_add(1, Ordering::SeqCst);
    let spawned = std::thread::Builder::new().name("mock-worker-stream".into()).spawn(move || {
        run_stream(&s, job);
        s.active_streams.fetch_sub(1, Ordering::SeqCst);
    });
    if let Err(e) = spawned {
        shared.active_streams.fetch_sub(1, Ordering::SeqCst);
        return Err(format!("cannot spawn a stream thread: {e}"));
    }
    Ok(())
}

// ---------------------------------------------------------------- token plan

/// The tokens to emit and the finish reason (see the module docs for the rules).
pub(crate) fn plan_tokens(
    cfg: &super::MockConfig,
    script: Option<&[u32]>,
    prompt: &[u32],
    seed: Option<i64>,
    max_tokens: Option<u32>,
    ignore_eos: bool,
) -> (Vec<u32>, FinishReason) {
    let eos = if ignore_eos { None } else { cfg.eos_token_id };
    // With `ignore_eos` and a token limit there is no natural end: the limit is the length
    // (a script repeats, random mode draws that many ids), as an engine told to ignore EOS
    // generates until `max_tokens`.
    let forced = max_tokens.filter(|_| ignore_eos).map(|m| m as usize);
    let mut tokens = match (script, forced) {
        (Some(script), Some(n)) if !script.is_empty() => script.iter().copied().cycle().take(n).collect(),
        (Some(script), _) => script.to_vec(),
        (None, Some(n)) => random_ids(cfg, n, prompt, seed, eos),
        (None, None) => random_ids(cfg, cfg.output_tokens, prompt, seed, eos),
    };
    let mut finish = FinishReason::Stop;
    if let Some(p) = eos.and_then(|e| tokens.iter().position(|&t| t == e)) {
        tokens.truncate(p + 1);
        finish = FinishReason::Eos;
    }
    if let Some(max) = max_tokens.map(|m| m as usize) {
        if max < tokens.len() || (forced.is_some() && tokens.len() == max) {
            tokens.truncate(max);
            finish = FinishReason::Length;
        }
    }
    (tokens, finish)
}

/// `len` ids below `vocab_size`, deterministic in (seed or prompt); never the configured EOS
/// id except as the last one when `eos` is set.
fn random_ids(cfg: &super::MockConfig, len: usize, prompt: &[u32], seed: Option<i64>, eos: Option<u32>) -> Vec<u32> {
    let mut state = match seed {
        Some(s) => s as u64,
        None => prompt.iter().fold(0xcbf2_9ce4_8422_2325u64, |h, &t| (h ^ u64::from(t)).wrapping_mul(0x100_0000_01b3)),
    };
    let vocab = cfg.vocab_size.max(2);
    let avoid = cfg.eos_token_id;
    let mut out: Vec<u32> = (0..len)
        .map(|_| {
            let id = (splitmix64(&mut state) % u64::from(vocab)) as u32;
            if Some(id) == avoid {
                (id + 1) % vocab
            } else {
                id
            }
        })
        .collect();
    if let (Some(e), Some(last)) = (eos, out.last_mut()) {
        *last = e;
    }
    out
}

fn splitmix64(state: &mut u64) -> u64 {
    *state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
    let mut z = *state;
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

// ---------------------------------------------------------------- response stream

#[derive(Default)]
struct Flags {
    killed: AtomicBool,
    stopped: AtomicBool,
    done: AtomicBool,
}

enum End {
    Normal,
    Stopped,
    Killed,
}

fn run_stream(shared: &Arc<Shared>, job: Job) {
    if !shared.cfg.callback_delay.is_zero() {
        std::thread::sleep(shared.cfg.callback_delay);
    }
    let conn = match dial(shared, &job.info.address) {
        Ok(c) => c,
        Err(e) => {
            Counters::bump(&shared.counters.stream_errors);
            crate::log::warn(&format!("mock worker: call-back to {} failed: {e}", job.info.address));
            return;
        }
    };
    let flags = Arc::new(Flags::default());
    let reader = conn.try_clone().ok().and_then(|r| {
        let _ = r.tcp().set_read_timeout(Some(READER_POLL));
        let f = Arc::clone(&flags);
        let s = Arc::clone(shared);
        std::thread::Builder::new().name("mock-worker-ctl".into()).spawn(move || read_controls(r, &f, &s)).ok()
    });
    let result = write_stream(shared, &job, &conn, &flags);
    let c = &shared.counters;
    let normal = matches!(result, Ok(End::Normal | End::Stopped));
    match result {
        Ok(End::Normal | End::Stopped) => Counters::bump(&c.completed),
        Ok(End::Killed) => Counters::bump(&c.killed),
        Err(_) if flags.killed.load(Ordering::SeqCst) => Counters::bump(&c.killed),
        Err(e) => {
            Counters::bump(&c.stream_errors);
            crate::log::warn(&format!("mock worker: stream {} failed: {e}", job.request_id));
        }
    }
    if !normal {
        let _ = conn.shutdown(Shutdown::Both);
    }
    flags.done.store(true, Ordering::SeqCst);
    if let Some(r) = reader {
        let _ = r.join();
    }
}

/// Dial a call-back `address`, over TLS when the worker's request plane has a dialer.
pub(crate) fn dial(shared: &Shared, address: &str) -> io::Result<Sock> {
    let mut last = io::Error::new(io::ErrorKind::InvalidInput, format!("no address in {address:?}"));
    for a in address.to_socket_addrs()? {
        match TcpStream::connect_timeout(&a, Duration::from_secs(5)) {
            Ok(c) => {
                let _ = c.set_nodelay(true);
                return match &shared.cfg.tls.dialer {
                    None => Ok(Sock::plain(c)),
                    Some(dialer) => Sock::connect(c, dialer).map_err(|e| io::Error::new(e.kind(), format!("TLS: {e}"))),
                };
            }
            Err(e) => last = e,
        }
    }
    Err(last)
}

/// Reads the frontend's control words until kill / EOF, or until the stream is done and the
/// frontend's FIN did not come within [`FIN_WAIT`].
fn read_controls(sock: Sock, flags: &Flags, shared: &Shared) {
    let mut conn = &sock;
    let decoder = TwoPartDecoder::default();
    let mut buf = BytesMut::with_capacity(256);
    let mut chunk = [0u8; 1024];
    let mut done_at: Option<Instant> = None;
    loop {
        match conn.read(&mut chunk) {
            Ok(0) => {
                // The frontend closed: after the sentinel that is the normal end; before it,
                // nobody is listening any more.
                if !flags.done.load(Ordering::SeqCst) {
                    flags.killed.store(true, Ordering::SeqCst);
                }
                return;
            }
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if shared.shutdown.load(Ordering::SeqCst) {
                    return;
                }
                if flags.done.load(Ordering::SeqCst) {
                    let since = *done_at.get_or_insert_with(Instant::now);
                    if since.elapsed() >= FIN_WAIT {
                        return;
                    }
                }
                continue;
            }
            Err(_) => {
                if !flags.done.load(Ordering::SeqCst) {
                    flags.killed.store(true, Ordering::SeqCst);
                }
                return;
            }
        }
        while let Ok(Decoded::Frame(frame)) = decoder.decode(&mut buf) {
            if frame.kind() != TwoPartKind::Control {
                continue;
            }
            match ControlMessage::from_json(&frame.header) {
                Ok(ControlMessage::Kill) => {
                    flags.killed.store(true, Ordering::SeqCst);
                    return;
                }
                Ok(ControlMessage::Stop) => flags.stopped.store(true, Ordering::SeqCst),
                _ => {}
            }
        }
    }
}

/// Waits `d` in slices; false if the stream must end (kill, stop or worker shutdown). A zero
/// `d` neither sleeps nor reads the clock.
fn wait(d: Duration, shared: &Shared, flags: &Flags) -> bool {
    if d.is_zero() {
        return !interrupted(shared, flags);
    }
    let end = Instant::now() + d;
    loop {
        if interrupted(shared, flags) {
            return false;
        }
        let now = Instant::now();
        if now >= end {
            return true;
        }
        std::thread::sleep((end - now).min(WAIT_SLICE));
    }
}

fn interrupted(shared: &Shared, flags: &Flags) -> bool {
    flags.killed.load(Ordering::SeqCst)
        || flags.stopped.load(Ordering::SeqCst)
        || shared.shutdown.load(Ordering::SeqCst)
}

fn encode_err(e: crate::plane::PlaneError) -> io::Error {
    io::Error::other(e.to_string())
}

fn write_stream(shared: &Shared, job: &Job, mut conn: &Sock, flags: &Flags) -> io::Result<End> {
    let cfg = &shared.cfg;
    let mut out = Vec::with_capacity(4096);
    let hs = CallHomeHandshake { subject: job.info.subject.clone(), stream_type: StreamType::Response };
    encode_handshake(&mut out, &hs).map_err(encode_err)?;
    encode_prologue(&mut out, &StreamPrologue { error: None }).map_err(encode_err)?;
    conn.write_all(&out)?;
    out.clear();
    let created = SystemTime::now().duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    let mut emitted = 0usize;
    let mut proceed = cfg.fast || wait(cfg.ttft, shared, flags);
    for (i, &tok) in job.tokens.iter().enumerate() {
        if !proceed || interrupted(shared, flags) {
            break;
        }
        match &job.text_model {
            None => {
                let usage = (i == 0).then(|| usage(job.prompt_tokens, 1));
                let mut item = LLMEngineOutput { token_ids: vec![tok], completion_usage: usage, ..Default::default() };
                if let Some(n) = job.logprobs {
                    let (lp, top) = mock_logprobs(i, tok, n);
                    item.log_probs = Some(vec![lp]);
                    item.top_logprobs = Some(vec![top]);
                }
                encode_item(&mut out, job.codec, &Annotated::from_data(item)).map_err(encode_err)?;
            }
            Some(model) => {
                let chunk = text_chunk(job, model, created, i, Some(format!(" tok{tok}")), Value::Null);
                encode_item(&mut out, job.codec, &Annotated::from_data(chunk)).map_err(encode_err)?;
            }
        }
        emitted += 1;
        if cfg.fast {
            if out.len() >= FAST_FLUSH {
                conn.write_all(&out)?;
                out.clear();
            }
        } else {
            conn.write_all(&out)?;
            out.clear();
            if i + 1 < job.tokens.len() {
                proceed = wait(cfg.itl, shared, flags);
            }
        }
    }
    if flags.killed.load(Ordering::SeqCst) || shared.shutdown.load(Ordering::SeqCst) {
        return Ok(End::Killed);
    }
    let stopped = flags.stopped.load(Ordering::SeqCst) && emitted < job.tokens.len();
    let finish = if stopped { FinishReason::Cancelled } else { job.finish.clone() };
    let n = u32::try_from(emitted).unwrap_or(u32::MAX);
    match &job.text_model {
        None => {
            let item = LLMEngineOutput {
                token_ids: Vec::new(),
                finish_reason: Some(finish),
                completion_usage: Some(usage(job.prompt_tokens, n)),
                ..Default::default()
            };
            encode_item(&mut out, job.codec, &Annotated::from_data(item)).map_err(encode_err)?;
        }
        Some(model) => {
            let reason = match finish {
                FinishReason::Length => "length",
                _ => "stop",
            };
            let mut chunk = text_chunk(job, model, created, emitted, None, json!(reason));
            chunk["usage"] = serde_json::to_value(usage(job.prompt_tokens, n)).unwrap_or_default();
            encode_item(&mut out, job.codec, &Annotated::from_data(chunk)).map_err(encode_err)?;
        }
    }
    encode_complete_final(&mut out, job.codec).map_err(encode_err)?;
    encode_control(&mut out, ControlMessage::Sentinel);
    conn.write_all(&out)?;
    Ok(if stopped { End::Stopped } else { End::Normal })
}

/// The deterministic logprobs of the `i`-th output token `tok` with `n` alternatives:
/// `-(i+1)/8` for the token itself (rank 1), then ids 13, 14, … one nat less likely each.
/// Token texts are left to the frontend (`token: null`, as Python workers send them).
pub(crate) fn mock_logprobs(i: usize, tok: u32, n: u32) -> (f64, Vec<TopLogprob>) {
    let lp = -((i % 64) as f64 + 1.0) / 8.0;
    let top = (0..n)
        .map(|r| {
            let token_id = if r == 0 { tok } else { 12 + r };
            TopLogprob { rank: r + 1, token_id, token: None, logprob: lp - f64::from(r), bytes: None }
        })
        .collect();
    (lp, top)
}

fn usage(prompt: u32, completion: u32) -> CompletionUsage {
    CompletionUsage {
        prompt_tokens: prompt,
        completion_tokens: completion,
        total_tokens: prompt.saturating_add(completion),
        prompt_tokens_details: Some(PromptTokensDetails { audio_tokens: None, cached_tokens: Some(0) }),
        completion_tokens_details: None,
    }
}

/// The OpenAI chunk of a Text model: the `i`-th piece of `content` (none on the finish
/// chunk), `chat.completion.chunk` (the first delta with the role) or `text_completion`.
fn text_chunk(job: &Job, model: &str, created: u64, i: usize, content: Option<String>, finish: Value) -> Value {
    if job.text_completion {
        return json!({
            "id": format!("cmpl-{}", job.request_id),
            "object": "text_completion",
            "created": created,
            "model": model,
            "choices": [{"text": content.unwrap_or_default(), "index": 0, "finish_reason": finish}],
        });
    }
    let delta = match content {
        Some(c) if i == 0 => json!({"role": "assistant", "content": c}),
        Some(c) => json!({"content": c}),
        None => json!({}),
    };
    json!({
        "id": format!("chatcmpl-{}", job.request_id),
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    })
}
