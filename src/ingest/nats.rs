//! A core-NATS subscriber over a blocking `std::net::TcpStream`: what the event-ingest thread
//! needs to receive Dynamo's event plane when workers run with `--event-plane nats` (spec: KV
//! routing §3.3). No JetStream, no publishing, no async runtime: the ingest thread owns the
//! socket and polls its descriptor itself, as it does for [`super::zmq::Sub`]. TLS as 1.6.1
//! speaks it to NATS (docs/dynamo/request-plane-tls.md §7): a `tls://` server is upgraded
//! after its `INFO`, with the configuration of [`crate::tls::plane::nats_client`].
//!
//! # What Dynamo 1.6.1 does on NATS (observed on loopback: `dynamo.mocker --event-plane nats`,
//! `dynamo.frontend --router-mode kv --event-plane nats`, file discovery, nats-server 2.9)
//!
//! * **Server address.** Workers and the frontend read `NATS_SERVER` (default
//!   `nats://localhost:4222`; `nats://` or `tls://` only). There is no flag for it. The
//!   `--event-plane` flag (env `DYN_EVENT_PLANE`) picks the plane; unset, the mocker picks zmq
//!   for file/mem discovery and nats for etcd/kubernetes, the frontend picks zmq. Credentials
//!   come from `NATS_AUTH_USERNAME` / `_PASSWORD` / `_TOKEN` / `_NKEY` /
//!   `_CREDENTIALS_FILE`, TLS from `NATS_TLS_*` (the frontend also has `--nats-tls-*` flags).
//!   Both processes speak the Rust `async-nats` 0.49.1 client: `CONNECT` with `verbose` and
//!   `pedantic` false, `headers` and `no_responders` true, `echo` true, and a user name of
//!   `user` even when no credentials were set (an open server ignores it).
//! * **Subjects.** One per topic and endpoint:
//!   `namespace.<ns>.component.<component>.endpoint.<endpoint>.<topic>`, e.g.
//!   `namespace.dynamo.component.backend.endpoint.generate.kv-events`. A mocker publishes
//!   `kv-events`, `kv_metrics`, `active_sequences_events` and `forward-pass-metrics` (the last
//!   about once a second even when idle). The frontend subscribes with plain `SUB`s (no
//!   wildcard, no queue group) to the first three for each served endpoint.
//! * **Messages.** Plain `PUB` (no headers, no reply subject), so subscribers get `MSG`, not
//!   `HMSG`. The body is the same msgpack `EventEnvelope` as ZMQ frame 3 *without* its 5-byte
//!   header: a map `publisher_id`, `sequence` (per publisher from 0), `published_at` (Unix
//!   ms), `topic` (the bare topic, e.g. `kv-events`), `payload` (msgpack bin holding the
//!   topic's message, e.g. a `kv-events` batch of `RouterEvent`s). See
//!   [`decode_nats_message`](crate::plane::kv_events::decode_nats_message).
//! * **Discovery.** Each publisher still writes a `v1/event_channels` record, with
//!   `"transport": {"kind": "Nats", "config": {"subject_prefix":
//!   "namespace.dynamo.component.backend.endpoint.generate"}}` and `instance_id` = the
//!   publisher id; the subject is `<subject_prefix>.<topic>`
//!   ([`EventChannelRecord::nats_subject`](crate::discovery::records::EventChannelRecord::nats_subject)).
//!   The `v1/event_sources` record of `kv-events` is unchanged from ZMQ mode (publisher id →
//!   worker id, DP rank, recovery endpoint), and recovery stays on the TCP request plane.
//!
//! Captured bytes and records: `tests/data/nats/` (see its README).
//!
//! # The client
//!
//! [`Sub::connect`] reads the server's `INFO`, upgrades to TLS for a `tls://` URL (the
//! server verified under the URL's host; a `nats://` URL to a server that requires TLS is
//! refused), sends `CONNECT` (not verbose, not pedantic,
//! headers on when the server offers them, credentials from the URL), one `SUB` per subject
//! (wildcards allowed) and a `PING`, and returns once the `PONG` proves the server has taken
//! the subscriptions; a `-ERR` before it (a refused subscription, bad credentials) fails the
//! connect. Afterwards [`Sub::drain`] / [`Sub::recv`] parse `MSG`, `HMSG` (header block kept
//! raw), `PING` (answered with `PONG`), `PONG`, `+OK` and `INFO`; a `-ERR`, a line that is not
//! the protocol, a message over `max_payload` or a closed connection is an error, after which
//! the caller drops the `Sub` and connects again (there is no automatic reconnection). Input
//! is framed mini-redis style: a unit is parsed only once it is whole, partial units stay
//! buffered across reads, and control lines are capped so junk cannot grow the buffer.

use std::collections::VecDeque;
use std::io;
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;

use super::nats_io::Io;

/// Where Dynamo looks when `NATS_SERVER` is not set.
pub const DEFAULT_URL: &str = "nats://localhost:4222";
/// The port of a URL that names none.
pub const DEFAULT_PORT: u16 = 4222;
/// Longest control line accepted (an `INFO` listing a large cluster's URLs fits).
const MAX_LINE: usize = 64 * 1024;
/// Bytes read per [`Sub::drain`] call before yielding back to the poll loop.
const DRAIN_BUDGET: usize = 4 << 20;

/// One received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsMsg {
    pub subject: String,
    /// The raw header block of an `HMSG` (`NATS/1.0\r\nName: value\r\n…\r\n`); `None` for a `MSG`.
    pub headers: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// Credentials given in a URL's user-info part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `nats://user:pass@host`
    UserPass(String, String),
    /// `nats://token@host`
    Token(String),
}

/// One server of a URL list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    pub host: String,
    pub port: u16,
    pub auth: Option<Auth>,
    /// `tls://`: the connection is upgraded to TLS after the server's `INFO`.
    pub tls: bool,
}

/// The fields of the server's `INFO` this client looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerInfo {
    #[serde(default)]
    pub server_id: String,
    #[serde(default)]
    pub version: String,
    /// The largest payload the server accepts from publishers.
    #[serde(default)]
    pub max_payload: u64,
    /// Whether the server speaks `HPUB` / `HMSG`.
    #[serde(default)]
    pub headers: bool,
    #[serde(default)]
    pub tls_required: bool,
    /// The server takes TLS without requiring it.
    #[serde(default)]
    pub tls_available: bool,
    #[serde(default)]
    pub auth_required: bool,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn invalid_input(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Parses `nats://[user:pass@|token@]host[:port]` (or `tls://…`), or a comma-separated list
/// of them. The scheme may be left out; other schemes are refused. User-info is taken
/// literally (not percent-decoded).
pub fn parse_urls(list: &str) -> io::Result<Vec<ServerUrl>> {
    let urls =
        list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(parse_url).collect::<io::Result<Vec<_>>>()?;
    if urls.is_empty() {
        return Err(invalid_input(format!("{list:?}: no NATS server URL")));
    }
    Ok(urls)
}

fn parse_url(url: &str) -> io::Result<ServerUrl> {
    let (tls, rest) = match url.split_once("://") {
        Some(("nats", rest)) => (false, rest),
        Some(("tls", rest)) => (true, rest),
        Some((scheme, _)) => {
            return Err(invalid_input(format!("{url}: unsupported scheme {scheme}:// (nats:// or tls://)")))
        }
        None => (false, url),
    };
    let rest = rest.trim_end_matches('/');
    let (auth, hostport) = match rest.rsplit_once('@') {
        Some((info, hostport)) => {
            let auth = match info.split_once(':') {
                Some((user, pass)) => Auth::UserPass(user.to_string(), pass.to_string()),
                None => Auth::Token(info.to_string()),
            };
            (Some(auth), hostport)
        }
        None => (None, rest),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| invalid_input(format!("{url}: unclosed '['")))?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
        return Err(invalid_input(format!("{url}: not a host[:port]")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().map_err(|_| invalid_input(format!("{url}: bad port {p:?}")))?,
    };
    Ok(ServerUrl { host: host.to_string(), port, auth, tls })
}

/// Checks a subscription subject: dot-separated non-empty tokens of printable non-space
/// ASCII or UTF-8, `*` only as a whole token, `>` only as the whole last token.
pub fn check_subject(subject: &str) -> io::Result<()> {
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        let ok = !t.is_empty()
            && !t.chars().any(|c| c.is_whitespace() || c.is_control())
            && (!t.contains('*') || *t == "*")
            && (!t.contains('>') || (*t == ">" && i + 1 == tokens.len()));
        if !ok {
            return Err(invalid_input(format!("{subject:?} is not a NATS subscription subject")));
        }
    }
    Ok(())
}

/// One unit of the server's protocol.
#[derive(Debug)]
enum Op {
    Info(ServerInfo),
    Msg(NatsMsg),
    Ping,
    Pong,
    Ok,
    Err(String),
}

/// A connected, subscribed NATS client.
pub struct Sub {
    stream: Io,
    peer: SocketAddr,
    info: ServerInfo,
    max_payload: usize,
    /// Received, not yet parsed.
    buf: Vec<u8>,
    /// Parsed messages not yet handed out (those that arrived with the handshake, or by
    /// [`Sub::recv`] behind the one it returned).
    ready: VecDeque<NatsMsg>,
    /// `PING`s received and not yet answered.
    pongs_owed: usize,
    /// `PING`s sent by [`Sub::ping`] and not yet answered.
    pings_out: usize,
}

impl Sub {
    /// Connects to the first server of `url` (one URL or a comma-separated list, tried in
    /// order; every address a host name resolves to is tried) that completes the handshake,
    /// and subscribes to `subjects`. Each step is bounded by `timeout`, which stays the
    /// socket's read and write timeout. Messages with a payload over `max_payload` bytes end
    /// the connection. Messages may arrive with the handshake: call [`Sub::drain`] once
    /// before waiting for the socket to become readable.
    pub fn connect(url: &str, subjects: &[&str], timeout: Duration, max_payload: usize) -> io::Result<Sub> {
        Sub::connect_tls(url, subjects, timeout, max_payload, None)
    }

    /// [`Sub::connect`] with the TLS configuration for `tls://` servers (`None`: such a
    /// server cannot be reached).
    pub fn connect_tls(
        url: &str,
        subjects: &[&str],
        timeout: Duration,
        max_payload: usize,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> io::Result<Sub> {
        for s in subjects {
            check_subject(s)?;
        }
        let mut errors = Vec::new();
        let mut kind = io::ErrorKind::NotFound;
        for server in parse_urls(url)? {
            let addrs = match (server.host.as_str(), server.port).to_socket_addrs() {
                Ok(a) => a.collect(),
                Err(e) => {
                    errors.push(format!("{}:{}: {e}", server.host, server.port));
                    kind = e.kind();
                    Vec::new()
                }
            };
            for addr in addrs {
                match Sub::connect_addr(addr, &server, subjects, timeout, max_payload, tls) {
                    Ok(sub) => return Ok(sub),
                    Err(e) => {
                        errors.push(format!("{addr}: {e}"));
                        kind = e.kind();
                    }
                }
            }
        }
        Err(io::Error::new(kind, format!("no NATS server of {url:?} answered: {}", errors.join("; "))))
    }

    fn connect_addr(
        peer: SocketAddr,
        server: &ServerUrl,
        subjects: &[&str],
        timeout: Duration,
        max_payload: usize,
        tls: Option<&Arc<rustls::ClientConfig>>,
    ) -> io::Result<Sub> {
        let stream = TcpStream::connect_timeout(&peer, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        let mut sub = Sub {
            stream: Io::Plain(stream),
            peer,
            info: ServerInfo::default(),
            max_payload,
            buf: Vec::with_capacity(64 * 1024),
            ready: VecDeque::new(),
            pongs_owed: 0,
            pings_out: 0,
        };
        match sub.read_op()? {
            Op::Info(info) => sub.info = info,
            other => return Err(bad(format!("{peer}: not a NATS server (first message: {other:?})"))),
        }
        if server.tls {
            let Some(config) = tls else {
                return Err(invalid_input(format!("{peer}: tls:// needs a TLS configuration")));
            };
            if !(sub.info.tls_required || sub.info.tls_available) {
                return Err(io::Error::new(
                    io::ErrorKind::Unsupported,
                    format!("{peer}: the server does not offer TLS"),
                ));
            }
            sub.stream = sub
                .stream
                .upgrade(&server.host, config)
                .map_err(|e| io::Error::new(e.kind(), format!("{peer}: TLS: {e}")))?;
        } else if sub.info.tls_required {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                format!("{peer}: the server requires TLS (name it with tls://)"),
            ));
        }
        let mut hello = connect_line(&sub.info, server.auth.as_ref(), server.tls);
        for (i, s) in subjects.iter().enumerate() {
            hello.extend_from_slice(format!("SUB {s} {}\r\n", i + 1).as_bytes());
        }
        hello.extend_from_slice(b"PING\r\n");
        sub.stream.send(&hello)?;
        loop {
            match sub.read_op()? {
                Op::Pong => return Ok(sub),
                op => sub.apply(op)?,
            }
            sub.flush_pongs()?;
        }
    }

    /// The server's address.
    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// What the server said about itself (its latest `INFO`).
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The connection, for polling its readiness.
    pub fn stream(&self) -> &TcpStream {
        self.stream.tcp()
    }

    /// Sends a `PING`; [`Sub::pings_outstanding`] counts those not yet answered, so a caller
    /// can tell a silent dead server from a quiet live one.
    pub fn ping(&mut self) -> io::Result<()> {
        self.stream.send(b"PING\r\n")?;
        self.pings_out += 1;
        Ok(())
    }

    /// `PING`s sent by [`Sub::ping`] still waiting for their `PONG`.
    pub fn pings_outstanding(&self) -> usize {
        self.pings_out
    }

    /// The next message. Blocks up to the read timeout per read; a timeout with a message
    /// half received keeps the half for the next call.
    pub fn recv(&mut self) -> io::Result<NatsMsg> {
        loop {
            if let Some(m) = self.ready.pop_front() {
                return Ok(m);
            }
            let op = self.read_op()?;
            self.apply(op)?;
            self.flush_pongs()?;
        }
    }

    /// Every whole message already received or readable without blocking (the socket is
    /// non-blocking for the call), up to a read budget per call so one busy server cannot hold
    /// the thread. For a poll loop: call when the socket is readable. An error (the server
    /// closed, sent `-ERR` or junk) means this connection is finished; messages parsed before
    /// it are still in `out`.
    pub fn drain(&mut self, out: &mut Vec<NatsMsg>) -> io::Result<()> {
        out.extend(self.ready.drain(..));
        self.stream.tcp().set_nonblocking(true)?;
        let r = self.read_available(out);
        self.stream.tcp().set_nonblocking(false)?;
        r?;
        self.flush_pongs()
    }

    fn read_available(&mut self, out: &mut Vec<NatsMsg>) -> io::Result<()> {
        let mut budget = DRAIN_BUDGET;
        loop {
            while let Some(op) = self.parse()? {
                self.apply(op)?;
            }
            out.extend(self.ready.drain(..));
            if budget == 0 {
                return Ok(());
            }
            match self.fill() {
                Ok(n) => budget = budget.saturating_sub(n),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(()),
                Err(e) => return Err(e),
            }
        }
    }

    /// Acts on one unit: messages are queued, `PING`s owed a `PONG`, `-ERR` is an error.
    fn apply(&mut self, op: Op) -> io::Result<()> {
        match op {
            Op::Msg(m) => self.ready.push_back(m),
            Op::Ping => self.pongs_owed += 1,
            Op::Pong => self.pings_out = self.pings_out.saturating_sub(1),
            Op::Ok => {}
            Op::Info(info) => self.info = info,
            Op::Err(e) => {
                return Err(io::Error::new(
                    io::ErrorKind::ConnectionAborted,
                    format!("{}: server error: {e}", self.peer),
                ))
            }
        }
        Ok(())
    }

    fn flush_pongs(&mut self) -> io::Result<()> {
        while self.pongs_owed > 0 {
            self.stream.send(b"PONG\r\n")?;
            self.pongs_owed -= 1;
        }
        Ok(())
    }

    /// Reads until one whole unit is buffered, and parses it.
    fn read_op(&mut self) -> io::Result<Op> {
        loop {
            if let Some(op) = self.parse()? {
                return Ok(op);
            }
            self.fill()?;
        }
    }

    /// One read into `buf`. EOF is an error: the server went away.
    fn fill(&mut self) -> io::Result<usize> {
        let mut chunk = [0u8; 64 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            let how = if self.buf.is_empty() { "" } else { " in the middle of a message" };
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{}: server closed{how}", self.peer)));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(n)
    }

    /// The unit at the start of `buf`, consumed, if it is whole.
    fn parse(&mut self) -> io::Result<Option<Op>> {
        let Some((op, used)) = parse_op(&self.buf, self.max_payload).map_err(|e| bad(format!("{}: {e}", self.peer)))?
        else {
            return Ok(None);
        };
        self.buf.drain(..used);
        Ok(Some(op))
    }
}

/// The `CONNECT` line for a server that sent `info`.
fn connect_line(info: &ServerInfo, auth: Option<&Auth>, tls: bool) -> Vec<u8> {
    let mut o = serde_json::json!({
        "verbose": false,
        "pedantic": false,
        "tls_required": tls,
        "name": "switchyard",
        "lang": "rust",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": 1,
        "echo": false,
        "headers": info.headers,
        "no_responders": false,
    });
    match auth {
        Some(Auth::UserPass(u, p)) => {
            o["user"] = u.as_str().into();
            o["pass"] = p.as_str().into();
        }
        Some(Auth::Token(t)) => o["auth_token"] = t.as_str().into(),
        None => {}
    }
    let mut line = b"CONNECT ".to_vec();
    line.extend_from_slice(o.to_string().as_bytes());
    line.extend_from_slice(b"\r\n");
    line
}

/// Parses one whole protocol unit at the start of `b`: `Ok(None)` when more bytes are needed,
/// else the unit and the bytes it used.
fn parse_op(b: &[u8], max_payload: usize) -> Result<Option<(Op, usize)>, String> {
    let Some(nl) = b.iter().take(MAX_LINE + 2).position(|&c| c == b'\n') else {
        if b.len() > MAX_LINE {
            return Err(format!("no end of line within {MAX_LINE} bytes"));
        }
        return Ok(None);
    };
    let line = b[..nl].strip_suffix(b"\r").unwrap_or(&b[..nl]);
    let line = std::str::from_utf8(line).map_err(|_| format!("a control line is not UTF-8: {}", shown(line)))?;
    let (verb, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
    let rest = rest.trim();
    let used = nl + 1;
    let op = match verb.to_ascii_uppercase().as_str() {
        "MSG" => return parse_msg(b, used, false, rest, max_payload),
        "HMSG" => return parse_msg(b, used, true, rest, max_payload),
        "PING" => Op::Ping,
        "PONG" => Op::Pong,
        "+OK" => Op::Ok,
        "-ERR" => Op::Err(rest.trim_matches('\'').to_string()),
        "INFO" => Op::Info(serde_json::from_str(rest).map_err(|e| format!("INFO is not JSON: {e}"))?),
        _ => return Err(format!("not a NATS protocol line: {}", shown(line.as_bytes()))),
    };
    Ok(Some((op, used)))
}

/// `MSG <subject> <sid> [reply-to] <#bytes>` or `HMSG <subject> <sid> [reply-to] <#header
/// bytes> <#total bytes>`, whose arguments are `args`, followed from `start` on by the bytes
/// and CRLF.
fn parse_msg(
    b: &[u8],
    start: usize,
    with_headers: bool,
    args: &str,
    max_payload: usize,
) -> Result<Option<(Op, usize)>, String> {
    let what = if with_headers { "HMSG" } else { "MSG" };
    let a: Vec<&str> = args.split_ascii_whitespace().collect();
    let sizes = if with_headers { 2 } else { 1 };
    if a.len() != 2 + sizes && a.len() != 3 + sizes {
        return Err(format!("{what} with {} arguments: {}", a.len(), shown(args.as_bytes())));
    }
    let num = |s: &str| s.parse::<usize>().map_err(|_| format!("{what}: {s:?} is not a byte count"));
    let total = num(a[a.len() - 1])?;
    let header_len = if with_headers { num(a[a.len() - 2])? } else { 0 };
    if header_len > total || header_len > MAX_LINE {
        return Err(format!("{what}: {header_len} header bytes in a {total}-byte message"));
    }
    if total - header_len > max_payload {
        return Err(format!("a {}-byte payload exceeds the limit of {max_payload}", total - header_len));
    }
    let end = start + total;
    if b.len() < end + 2 {
        return Ok(None);
    }
    if &b[end..end + 2] != b"\r\n" {
        return Err(format!("{what} on {}: the {total} bytes are not followed by CRLF", a[0]));
    }
    let body = &b[start..end];
    let msg = NatsMsg {
        subject: a[0].to_string(),
        headers: with_headers.then(|| body[..header_len].to_vec()),
        payload: body[header_len..].to_vec(),
    };
    Ok(Some((Op::Msg(msg), end + 2)))
}

/// The start of a line for an error message, printable.
fn shown(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(&line[..line.len().min(60)]);
    format!("{:?}{}", s, if line.len() > 60 { "…" } else { "" })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(b: &[u8]) -> Result<Option<(Op, usize)>, String> {
        parse_op(b, 100)
    }

    #[test]
    fn urls() {
        let u = parse_urls("nats://127.0.0.1:14222").unwrap();
        assert_eq!(u, [ServerUrl { host: "127.0.0.1".into(), port: 14222, auth: None, tls: false }]);
        assert!(parse_urls("tls://localhost:4443").unwrap()[0].tls);
        let u = parse_urls(" nats://a:1 , b ,nats://u:p@[::1]:7/,tok@c:9").unwrap();
        assert_eq!(u.len(), 4);
        assert_eq!((u[1].host.as_str(), u[1].port), ("b", DEFAULT_PORT));
        assert_eq!((u[2].host.as_str(), u[2].port), ("::1", 7));
        assert_eq!(u[2].auth, Some(Auth::UserPass("u".into(), "p".into())));
        assert_eq!(u[3].auth, Some(Auth::Token("tok".into())));
        assert_eq!(parse_urls(DEFAULT_URL).unwrap()[0].host, "localhost");
        for bad in ["", " , ", "http://h", "nats://:4222", "nats://h:x", "nats://h:70000", "nats://[::1"] {
            assert_eq!(parse_urls(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn subjects() {
        for ok in ["a", "a.b-c_d.kv-events", "a.*.c", ">", "a.>", "*.*"] {
            check_subject(ok).unwrap();
        }
        for bad in ["", "a..b", ".a", "a.", "a b", "a.>.c", "a*", "a.b>", "a\tb"] {
            assert!(check_subject(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn units() {
        assert!(op(b"").unwrap().is_none());
        assert!(op(b"PIN").unwrap().is_none());
        assert!(matches!(op(b"PING\r\nx").unwrap(), Some((Op::Ping, 6))));
        assert!(matches!(op(b"pong\r\n").unwrap(), Some((Op::Pong, 6))));
        assert!(matches!(op(b"+OK\r\n").unwrap(), Some((Op::Ok, 5))));
        let Some((Op::Err(e), _)) = op(b"-ERR 'Unknown Protocol Operation'\r\n").unwrap() else { panic!() };
        assert_eq!(e, "Unknown Protocol Operation");
        let info = b"INFO {\"server_id\":\"x\",\"max_payload\":5,\"headers\":true}\r\n";
        let Some((Op::Info(i), _)) = op(info).unwrap() else { panic!() };
        assert_eq!((i.server_id.as_str(), i.max_payload, i.headers), ("x", 5, true));

        let m = b"MSG a.b 1 5\r\nhello\r\nPING\r\n";
        for cut in 0..20 {
            assert!(op(&m[..cut]).unwrap().is_none(), "cut at {cut}");
        }
        let Some((Op::Msg(msg), used)) = op(m).unwrap() else { panic!() };
        assert_eq!((msg.subject.as_str(), msg.payload.as_slice(), msg.headers, used), ("a.b", &b"hello"[..], None, 20));
        let Some((Op::Msg(msg), _)) = op(b"MSG a 1 _INBOX.x 0\r\n\r\n").unwrap() else { panic!() };
        assert!(msg.payload.is_empty());

        let h = b"HMSG s 2 r 12 15\r\nNATS/1.0\r\n\r\nabc\r\n";
        let Some((Op::Msg(msg), used)) = op(h).unwrap() else { panic!() };
        assert_eq!(msg.headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
        assert_eq!((msg.payload.as_slice(), used), (&b"abc"[..], h.len()));
    }

    #[test]
    fn bad_units() {
        for junk in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"MSG a 1\r\n",
            b"MSG a 1 x\r\n",
            b"MSG a 1 -1\r\n",
            b"MSG a 1 2 3 4\r\n",
            b"HMSG a 1 5 3\r\n",
            b"HMSG a 1 18446744073709551615 18446744073709551615\r\n",
            b"MSG a 1 101\r\n",
            b"MSG a 1 3\r\nabcXY",
            b"INFO {not json\r\n",
            b"\xff\xfe\r\n",
        ] {
            assert!(op(junk).is_err(), "{:?}", String::from_utf8_lossy(junk));
        }
        assert!(op(&[b'A'; MAX_LINE]).unwrap().is_none());
        assert!(op(&[b'A'; MAX_LINE + 3]).is_err());
    }

    #[test]
    fn connect_line_fields() {
        let info = ServerInfo { headers: true, ..Default::default() };
        let line = connect_line(&info, Some(&Auth::UserPass("u".into(), "p".into())), false);
        let text = std::str::from_utf8(&line).unwrap();
        let json: serde_json::Value = serde_json::from_str(text.strip_prefix("CONNECT ").unwrap().trim_end()).unwrap();
        assert!(text.ends_with("}\r\n"));
        assert_eq!((json["verbose"].as_bool(), json["pedantic"].as_bool()), (Some(false), Some(false)));
        assert_eq!(
            (json["headers"].as_bool(), json["user"].as_str(), json["pass"].as_str()),
            (Some(true), Some("u"), Some("p"))
        );
        let json = connect_line(&ServerInfo::default(), Some(&Auth::Token("t".into())), true);
        let text = std::str::from_utf8(&json).unwrap();
        assert!(text.contains(r#""auth_token":"t""#) && text.contains(r#""tls_required":true"#), "{text}");
    }
}
