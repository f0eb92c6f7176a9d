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

use super::nats_io::Io;
pub use crate::plane::nats::{
    check_subject, parse_urls, Auth, NatsMsg, ServerInfo, ServerUrl, DEFAULT_PORT, DEFAULT_URL,
};
use crate::plane::nats::{connect_line, parse_op, Op};

/// Bytes read per [`Sub::drain`] call before yielding back to the poll loop.
const DRAIN_BUDGET: usize = 4 << 20;

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

fn invalid_input(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
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
        Sub::connect_as(url, subjects, timeout, max_payload, tls, false)
    }

    /// [`Sub::connect_tls`]; with `requests`, for a client that also sends requests: headers
    /// on, and the server's no-responders status for a subject nobody listens on (see
    /// [`crate::plane::nats::reply`]).
    pub fn connect_as(
        url: &str,
        subjects: &[&str],
        timeout: Duration,
        max_payload: usize,
        tls: Option<&Arc<rustls::ClientConfig>>,
        requests: bool,
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
                match Sub::connect_addr(addr, &server, subjects, timeout, max_payload, tls, requests) {
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
        requests: bool,
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
        let mut hello = connect_line(&sub.info, server.auth.as_ref(), server.tls, requests);
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

    /// Sends protocol bytes as they are (e.g. an `HPUB` of [`crate::plane::nats::encode_request`]).
    pub fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.send(bytes)
    }

    /// Bounds each later read (and [`Sub::recv`]'s wait) by `timeout`.
    pub fn set_timeout(&mut self, timeout: Duration) -> io::Result<()> {
        self.stream.tcp().set_read_timeout(Some(timeout))
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
