//! Asking a worker for the KV events the event plane lost: the `worker_kv_query_source_*`
//! request-plane endpoint (docs/dynamo/kv-routing.md §4.3).
//!
//! Every `kv-events` publisher names a recovery target in its `v1/event_sources` record
//! (`metadata.recovery_target.transport.tcp` = `host:port/<instance hex>/<ns>/<component>/
//! worker_kv_query_source_<publisher hex>`). It is an ordinary request-plane endpoint: a
//! request frame carrying a msgpack `WorkerKvQueryRequest`, an ack, then the worker dials the
//! caller's response-stream listener and sends one item — `Events`, `TreeDump`, `TooNew`,
//! `InvalidRange`, `Error` or `TreeDumpFailed` — and `complete_final`.
//!
//! This client is blocking and runs on short-lived recovery threads started by the ingest
//! thread (never on a shard): a recovery is rare, may wait seconds for a large tree dump, and
//! must not stall the other publishers' events. Each query binds its own ephemeral
//! response-stream listener on `DYN_TCP_RESPONSE_STREAM_HOST`, so concurrent queries never
//! see each other's call-backs. Every step has a deadline; any failure is an `Err` the
//! caller retries with back-off.
//!
//! With request-plane TLS both connections are TLS, as all of 1.6.1's request-plane traffic
//! is (docs/dynamo/request-plane-tls.md): the query is dialed with the process's dialer and
//! the call-back is accepted with its acceptor ([`crate::tls::plane::PlaneTls`]).

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream, ToSocketAddrs};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::plane::frame::{encode_request_frame, Ack, AckDecoder};
use crate::plane::kv_events::RouterEvent;
use crate::plane::payload::Codec;
use crate::plane::reqenc::control_single_in_many_out;
use crate::plane::stream::{ResponseStreamDecoder, StreamEvent};
use crate::plane::{Decoded, DEFAULT_MAX_MESSAGE_SIZE};
use crate::router::kv::index::Owner;
use crate::tls::plane::PlaneTls;
use crate::util::new_subject;

/// Where one `(worker, dp_rank)` publisher answers recovery queries: its
/// `worker_kv_query_source_*` endpoint on the worker's request plane.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub enum Target {
    /// The TCP request plane.
    Tcp {
        /// `host:port` of the worker's request-plane listener.
        addr: String,
        /// The endpoint path sent in the request frame.
        path: String,
    },
    /// The NATS request plane: the endpoint's subject (`transport.nats_tcp`), reached through
    /// the NATS server of `NATS_SERVER`.
    Nats { subject: String },
}

impl Target {
    /// The owner and target named by a `v1/event_sources` record of topic `kv-events`, or
    /// `None` if the record names no recovery target on either request plane.
    pub fn from_event_source(raw: &Value) -> Option<(Owner, Target)> {
        if raw.get("topic").and_then(Value::as_str) != Some("kv-events") {
            return None;
        }
        let meta = raw.get("metadata")?;
        let worker_id = meta.pointer("/worker/worker_id")?.as_u64()?;
        let dp_rank = meta.pointer("/worker/dp_rank").and_then(Value::as_u64).unwrap_or(0);
        let owner = Owner { worker_id, dp_rank: u32::try_from(dp_rank).ok()? };
        let transport = meta.pointer("/recovery_target/transport")?;
        if let Some(tcp) = transport.get("tcp").and_then(Value::as_str) {
            let (addr, path) = tcp.split_once('/')?;
            if addr.is_empty() || path.is_empty() {
                return None;
            }
            return Some((owner, Target::Tcp { addr: addr.to_owned(), path: path.to_owned() }));
        }
        let subject = transport.get("nats_tcp").and_then(Value::as_str)?;
        crate::plane::nats::check_publish_subject(subject).ok()?;
        Some((owner, Target::Nats { subject: subject.to_owned() }))
    }
}

/// The NATS server a [`Target::Nats`] is reached through, and its TLS.
#[derive(Clone)]
pub struct NatsRoute {
    pub url: String,
    pub tls: Option<std::sync::Arc<rustls::ClientConfig>>,
}

/// `WorkerKvQueryRequest`: `start_event_id: None` asks for the whole tree.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct QueryRequest {
    pub worker_id: u64,
    pub dp_rank: u32,
    pub start_event_id: Option<u64>,
    pub end_event_id: Option<u64>,
    /// Opt in to the `TreeDumpFailed` answer.
    pub supports_tree_dump_failed: bool,
}

impl QueryRequest {
    /// The full restore 1.6.1 sends when it discovers a source.
    pub fn full(owner: Owner) -> QueryRequest {
        QueryRequest {
            worker_id: owner.worker_id,
            dp_rank: owner.dp_rank,
            start_event_id: None,
            end_event_id: None,
            supports_tree_dump_failed: true,
        }
    }

    /// The events `start..=end` (the worker answers with everything from `start` on).
    pub fn range(owner: Owner, start: u64, end: u64) -> QueryRequest {
        QueryRequest { start_event_id: Some(start), end_event_id: Some(end), ..QueryRequest::full(owner) }
    }
}

/// `WorkerKvQueryResponse`.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub enum Answer {
    /// The buffered events from the requested start through the newest.
    Events {
        events: Vec<RouterEvent>,
        last_event_id: u64,
    },
    /// The worker's whole tree; replaces the rank's state; `last_event_id` is the new cursor.
    TreeDump {
        events: Vec<RouterEvent>,
        last_event_id: u64,
        #[serde(default)]
        reset_scope: Option<Value>,
    },
    TooNew {
        #[serde(default)]
        requested_start: Option<u64>,
        #[serde(default)]
        requested_end: Option<u64>,
        newest_available: u64,
    },
    InvalidRange {
        start_id: u64,
        end_id: u64,
    },
    Error(String),
    TreeDumpFailed {
        #[serde(default)]
        last_event_id: Option<u64>,
        message: String,
    },
}

/// Deadlines of one query.
#[derive(Clone, Copy, Debug)]
pub struct Deadlines {
    pub connect: Duration,
    /// From sending the request to the end of the answer.
    pub answer: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines { connect: Duration::from_secs(2), answer: Duration::from_secs(30) }
    }
}

/// One connection of a query: plain TCP, or TLS over it.
enum Conn {
    Plain(TcpStream),
    Client(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
    Server(Box<rustls::StreamOwned<rustls::ServerConnection, TcpStream>>),
}

impl Conn {
    fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Client(s) => &s.sock,
            Conn::Server(s) => &s.sock,
        }
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Client(s) => s.read(buf),
            Conn::Server(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Client(s) => s.write(buf),
            Conn::Server(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Client(s) => s.flush(),
            Conn::Server(s) => s.flush(),
        }
    }
}

/// Run a session's handshake on `sock` within `timeout`.
fn handshake<C, S>(session: &mut C, sock: &mut TcpStream, timeout: Duration) -> io::Result<()>
where
    C: std::ops::DerefMut<Target = rustls::ConnectionCommon<S>>,
    S: rustls::SideData,
{
    sock.set_read_timeout(Some(timeout))?;
    sock.set_write_timeout(Some(timeout))?;
    while session.is_handshaking() {
        session.complete_io(sock)?;
    }
    while session.wants_write() {
        session.write_tls(sock)?;
    }
    sock.set_write_timeout(None)
}

/// The query connection to `addr`, over TLS when `tls` dials TLS.
fn dial(addr: SocketAddr, tls: &PlaneTls, timeout: Duration) -> Result<Conn, String> {
    let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(|e| format!("connect {addr}: {e}"))?;
    sock.set_nodelay(true).ok();
    let Some(dialer) = &tls.dialer else { return Ok(Conn::Plain(sock)) };
    let mut session = dialer.session(addr.ip()).map_err(|e| format!("TLS to {addr}: {e}"))?;
    handshake(&mut session, &mut sock, dialer.handshake_timeout)
        .map_err(|e| format!("TLS handshake with {addr} failed: {e}"))?;
    Ok(Conn::Client(Box::new(rustls::StreamOwned::new(session, sock))))
}

/// The worker's call-back, over TLS when `tls` serves TLS.
fn accept_tls(mut sock: TcpStream, tls: &PlaneTls) -> Result<Conn, String> {
    let Some(acceptor) = &tls.acceptor else { return Ok(Conn::Plain(sock)) };
    let mut session = acceptor.session().map_err(|e| format!("TLS: {e}"))?;
    handshake(&mut session, &mut sock, acceptor.handshake_timeout)
        .map_err(|e| format!("TLS handshake of the call-back failed: {e}"))?;
    Ok(Conn::Server(Box::new(rustls::StreamOwned::new(session, sock))))
}

/// Sends `req` to `target` and waits for the answer; `callback_host` is the address the
/// worker is told to dial back (`DYN_TCP_RESPONSE_STREAM_HOST`), `tls` the process's
/// request-plane TLS.
pub fn query(
    target: &Target,
    req: &QueryRequest,
    callback_host: &str,
    dl: Deadlines,
    tls: &PlaneTls,
    nats: &NatsRoute,
) -> Result<Answer, String> {
    let ip: std::net::IpAddr =
        callback_host.parse().map_err(|e| format!("bad response-stream host {callback_host:?}: {e}"))?;
    let listener = TcpListener::bind(SocketAddr::new(ip, 0)).map_err(|e| format!("response-stream bind: {e}"))?;
    let address = listener.local_addr().map_err(|e| e.to_string())?.to_string();
    let id = new_subject();
    let subject = new_subject();
    let mut control = Vec::new();
    control_single_in_many_out(&mut control, &id, Codec::Msgpack, &address, &subject, &id);
    let body = rmp_serde::to_vec_named(req).map_err(|e| format!("encoding the query: {e}"))?;
    let until = Instant::now() + dl.answer;
    // The request's connection stays open until the answer is read.
    let _sent = match target {
        Target::Tcp { addr, path } => {
            let headers = [("x-endpoint-path", path.as_str()), ("request-id", id.as_str())];
            let mut frame = Vec::with_capacity(512 + body.len());
            encode_request_frame(&mut frame, path, &headers, &control, &body, DEFAULT_MAX_MESSAGE_SIZE)
                .map_err(|e| e.to_string())?;
            let addr = addr
                .to_socket_addrs()
                .ok()
                .and_then(|mut a| a.next())
                .ok_or_else(|| format!("cannot resolve {addr}"))?;
            let mut conn = dial(addr, tls, dl.connect)?;
            conn.write_all(&frame).map_err(|e| format!("send to {addr}: {e}"))?;
            match read_ack(&mut conn, until)? {
                Ack::Accepted => {}
                Ack::Rejected(text) => return Err(format!("worker refused the query: {text}")),
            }
            Sent::Tcp(conn)
        }
        Target::Nats { subject: to } => Sent::Nats(publish(nats, to, &id, &control, &body, dl.connect, until)?),
    };
    let mut back = accept_tls(accept_before(&listener, until)?, tls)?;
    read_answer(&mut back, &subject, until)
}

/// How a query went out, kept until its answer is read.
enum Sent {
    Tcp(#[allow(dead_code)] Conn),
    Nats(#[allow(dead_code)] super::nats::Sub),
}

/// Publishes a query to the worker's subject (docs/dynamo/request-plane.md §5.6) and waits
/// for its reply: empty when the worker took it.
fn publish(
    nats: &NatsRoute,
    to: &str,
    id: &str,
    control: &[u8],
    body: &[u8],
    timeout: Duration,
    until: Instant,
) -> Result<super::nats::Sub, String> {
    use crate::plane::nats::{encode_request, reply, Reply};
    let inbox = format!("_INBOX.{}", new_subject().replace('-', ""));
    let mut sub = super::nats::Sub::connect_as(
        &nats.url,
        &[inbox.as_str()],
        timeout,
        DEFAULT_MAX_MESSAGE_SIZE,
        nats.tls.as_ref(),
        true,
    )
    .map_err(|e| e.to_string())?;
    let mut msg = Vec::with_capacity(512 + body.len());
    encode_request(&mut msg, to, &inbox, &[("request-id", id)], control, body, DEFAULT_MAX_MESSAGE_SIZE)
        .map_err(|e| e.to_string())?;
    sub.send(&msg).map_err(|e| format!("publish to {to}: {e}"))?;
    sub.set_timeout(remaining(until)?).map_err(|e| e.to_string())?;
    let answer = sub.recv().map_err(|e| format!("waiting for the reply on {to}: {e}"))?;
    match reply(&answer) {
        Reply::Accepted => Ok(sub),
        Reply::Refused(text) => Err(format!("worker refused the query: {text}")),
        Reply::NoResponders => Err(format!("no worker listens on {to}")),
        Reply::Status(s) => Err(format!("NATS answered {s} for {to}")),
    }
}

fn remaining(until: Instant) -> Result<Duration, String> {
    let left = until.saturating_duration_since(Instant::now());
    if left.is_zero() {
        Err("recovery query timed out".to_owned())
    } else {
        Ok(left)
    }
}

fn read_some(s: &mut Conn, buf: &mut BytesMut, until: Instant, what: &str) -> Result<(), String> {
    s.tcp().set_read_timeout(Some(remaining(until)?)).map_err(|e| e.to_string())?;
    let mut chunk = [0u8; 16 * 1024];
    match s.read(&mut chunk) {
        Ok(0) => Err(format!("{what}: connection closed")),
        Ok(n) => {
            buf.extend_from_slice(&chunk[..n]);
            Ok(())
        }
        Err(e) if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {
            Err(format!("{what}: timed out"))
        }
        Err(e) => Err(format!("{what}: {e}")),
    }
}

fn read_ack(conn: &mut Conn, until: Instant) -> Result<Ack, String> {
    let dec = AckDecoder::default();
    let mut buf = BytesMut::new();
    loop {
        if let Decoded::Frame(ack) = dec.decode(&mut buf).map_err(|e| e.to_string())? {
            return Ok(ack);
        }
        read_some(conn, &mut buf, until, "waiting for the ack")?;
    }
}

fn accept_before(listener: &TcpListener, until: Instant) -> Result<TcpStream, String> {
    listener.set_nonblocking(true).map_err(|e| e.to_string())?;
    loop {
        match listener.accept() {
            Ok((s, _)) => {
                s.set_nonblocking(false).map_err(|e| e.to_string())?;
                return Ok(s);
            }
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {
                remaining(until).map_err(|_| "the worker never called back".to_owned())?;
                std::thread::sleep(Duration::from_millis(2));
            }
            Err(e) => return Err(format!("accepting the call-back: {e}")),
        }
    }
}

fn read_answer(s: &mut Conn, subject: &str, until: Instant) -> Result<Answer, String> {
    let mut dec = ResponseStreamDecoder::new(Codec::Msgpack, DEFAULT_MAX_MESSAGE_SIZE);
    let mut buf = BytesMut::new();
    let mut answer = None;
    loop {
        let ev = match dec.decode::<Answer>(&mut buf).map_err(|e| format!("answer stream: {e}"))? {
            Decoded::Frame(ev) => ev,
            Decoded::Incomplete { .. } => {
                read_some(s, &mut buf, until, "reading the answer")?;
                continue;
            }
        };
        match ev {
            StreamEvent::Handshake(hs) if hs.subject != subject => {
                return Err(format!("call-back for subject {} instead of {subject}", hs.subject))
            }
            StreamEvent::Handshake(_) => {}
            StreamEvent::Prologue(p) => {
                if let Some(e) = p.error {
                    return Err(format!("worker refused the query: {e}"));
                }
            }
            StreamEvent::Item(a) => answer = Some(a),
            StreamEvent::CompleteFinal | StreamEvent::Sentinel => {
                return answer.ok_or_else(|| "the answer stream ended without an answer".to_owned())
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn event_source_record_names_owner_and_target() {
        let raw = serde_json::json!({
            "type": "EventSource", "topic": "kv-events", "publisher_id": 763980189348717u64,
            "metadata": {
                "worker": {"worker_id": 10094487595439714959u64, "dp_rank": 1},
                "recovery_target": {"transport": {"tcp":
                    "127.0.0.1:45215/8c16d2fc33c5728f/dynamo/backend/worker_kv_query_source_2b6d5ffcd336d"}}
            }
        });
        let (owner, t) = Target::from_event_source(&raw).unwrap();
        assert_eq!(owner, Owner { worker_id: 10094487595439714959, dp_rank: 1 });
        let want = Target::Tcp {
            addr: "127.0.0.1:45215".into(),
            path: "8c16d2fc33c5728f/dynamo/backend/worker_kv_query_source_2b6d5ffcd336d".into(),
        };
        assert_eq!(t, want);
        let mut other = raw.clone();
        other["topic"] = "kv_metrics".into();
        assert_eq!(Target::from_event_source(&other), None);
        let mut broken = raw.clone();
        broken["metadata"]["recovery_target"]["transport"]["tcp"] = "no-path".into();
        assert_eq!(Target::from_event_source(&broken), None);
        // A worker on the NATS request plane (the record 1.6.1's mocker writes there).
        let mut nats = raw;
        let subject = "dynamo_backend.worker_kv_query_source_2b6d5ffcd336d-8c16d2fc33c5728f";
        nats["metadata"]["recovery_target"]["transport"] = serde_json::json!({"nats_tcp": subject});
        let (_, t) = Target::from_event_source(&nats).unwrap();
        assert_eq!(t, Target::Nats { subject: subject.into() });
        nats["metadata"]["recovery_target"]["transport"]["nats_tcp"] = "has space".into();
        assert_eq!(Target::from_event_source(&nats), None);
    }

    #[test]
    fn query_request_encodes_as_the_captured_named_map() {
        // The second captured request: a full restore, keys in 1.6.1's order but for the flag.
        let req = QueryRequest {
            supports_tree_dump_failed: false,
            ..QueryRequest::full(Owner { worker_id: 0x30f2aa86570d7772, dp_rank: 0 })
        };
        let bytes = rmp_serde::to_vec_named(&req).unwrap();
        let back: Value = rmp_serde::from_slice(&bytes).unwrap();
        assert_eq!(
            back,
            serde_json::json!({"worker_id": 0x30f2aa86570d7772u64, "dp_rank": 0, "start_event_id": null,
                               "end_event_id": null, "supports_tree_dump_failed": false})
        );
    }
}
