//! The shard's side of 1.6.1's NATS request plane (`--request-plane nats`,
//! docs/dynamo/request-plane.md §5.6): one NATS connection per shard, on which a request to a
//! worker registered with a `nats_tcp` subject is published to that subject with a reply
//! subject under the shard's inbox; the worker's empty reply is the ack. The answer comes to
//! the shard's TCP call-back listener, as on the TCP plane ([`super::callback`]).
//!
//! Runs on a shard thread, on its monoio runtime: `Rc`, `RefCell`, no locks, no `Send`. The
//! connection is dialed by the first request (the servers of `NATS_SERVER` in order, their
//! addresses resolved at start-up), and again by the first request after it broke. The
//! handshake: the server's `INFO`, then `CONNECT` (headers and no-responders on, the URL's
//! credentials), `SUB <inbox>.*` and a `PING`, whose `PONG` says the server took them;
//! requests made meanwhile wait in the output buffer. A reader task pairs replies with
//! requests by the reply subject's last token and answers the server's `PING`s; a writer task
//! writes whatever is buffered in one write.
//!
//! A dial or handshake that fails fails the waiting requests with
//! [`TransportError::CannotConnect`]; a connection that breaks (EOF, `-ERR`, bytes that are
//! not the protocol) fails every request still waiting for its ack with
//! [`TransportError::ConnectionLost`]. The server's no-responders status (nobody subscribed:
//! the worker is gone) is a `CannotConnect` for that request alone; a non-empty reply is the
//! worker's refusal, [`TransportError::Rejected`], as on TCP. Plain TCP only: a server that
//! requires TLS is refused at the handshake (start-up refuses `tls://` and `--nats-tls-*`
//! with this plane).

use std::cell::{Cell, RefCell};
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::Waker;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use monoio::io::Splitable;
use monoio::net::TcpStream;

use super::client::{complete, wait_ack, write_buffered, AckSlot, OutBuffer, TransportError};
use super::stream::{ReadSome, WriteAll};
use crate::plane::nats::{connect_line, encode_request, parse_op, reply, Auth, NatsMsg, Op, Reply, ServerInfo};
use crate::plane::{PlaneError, DEFAULT_MAX_MESSAGE_SIZE};
use crate::util::FastMap;

/// One NATS server to dial: an address `NATS_SERVER` resolved to, and its URL's credentials.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsServer {
    pub addr: SocketAddr,
    pub auth: Option<Auth>,
}

/// Knobs of [`NatsRequests`].
#[derive(Clone, Debug)]
pub struct NatsConfig {
    /// Tried in order.
    pub servers: Vec<NatsServer>,
    /// Bounds each server's dial and handshake.
    pub connect_timeout: Duration,
    /// How long a request waits for its reply.
    pub ack_timeout: Duration,
    /// `DYN_TCP_MAX_MESSAGE_SIZE` (the server's `max_payload` bounds it too).
    pub max_message_size: usize,
}

impl NatsConfig {
    /// The servers of `NATS_SERVER` (one URL or a comma-separated list), resolved now: at
    /// start-up, off the shard threads. `tls://` servers are refused (plain TCP only).
    pub fn from_url(list: &str) -> Result<NatsConfig, String> {
        use std::net::ToSocketAddrs;
        let mut servers = Vec::new();
        for url in crate::plane::nats::parse_urls(list).map_err(|e| e.to_string())? {
            if url.tls {
                return Err(format!("{list}: tls:// is not implemented for the NATS request plane"));
            }
            let addrs = (url.host.as_str(), url.port)
                .to_socket_addrs()
                .map_err(|e| format!("NATS server {}:{}: {e}", url.host, url.port))?;
            servers.extend(addrs.map(|addr| NatsServer { addr, auth: url.auth.clone() }));
        }
        Ok(NatsConfig::new(servers))
    }

    /// 1.6.1's timeouts (those of the TCP plane) for `servers`.
    pub fn new(servers: Vec<NatsServer>) -> Self {
        NatsConfig {
            servers,
            connect_timeout: Duration::from_secs(5),
            ack_timeout: Duration::from_secs(30),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
        }
    }
}

#[derive(Default)]
struct ConnState {
    /// Bytes for the server not yet handed to the writer (requests, `PONG`s).
    out: Vec<u8>,
    /// Requests waiting for their reply, by the reply subject's last token.
    pending: FastMap<u64, AckSlot>,
    writer: Option<Waker>,
    broken: bool,
    /// The server that took the handshake, and what it said of itself.
    peer: Option<(SocketAddr, ServerInfo)>,
}

struct Conn {
    st: RefCell<ConnState>,
}

struct Inner {
    cfg: NatsConfig,
    /// `_INBOX.<random>`: replies come to `<inbox>.<token>`.
    inbox: String,
    conn: RefCell<Option<Rc<Conn>>>,
    next_token: Cell<u64>,
    dials: Cell<u64>,
}

impl Inner {
    /// The address errors name: the connected server, else the first configured.
    fn addr(&self, conn: &Conn) -> SocketAddr {
        conn.st.borrow().peer.as_ref().map(|p| p.0).unwrap_or_else(|| self.first_addr())
    }

    fn first_addr(&self) -> SocketAddr {
        self.cfg.servers.first().map_or(SocketAddr::from(([0, 0, 0, 0], 0)), |s| s.addr)
    }

    /// Mark `conn` broken: fail every waiting request with what `err` makes of its address,
    /// stop the writer, forget the connection.
    fn fail(&self, conn: &Rc<Conn>, err: impl Fn(SocketAddr) -> TransportError) {
        let addr = self.addr(conn);
        let (pending, writer) = {
            let mut st = conn.st.borrow_mut();
            st.broken = true;
            st.out.clear();
            (std::mem::take(&mut st.pending), st.writer.take())
        };
        {
            let mut current = self.conn.borrow_mut();
            if current.as_ref().is_some_and(|c| Rc::ptr_eq(c, conn)) {
                *current = None;
            }
        }
        for (_, slot) in pending {
            complete(&slot, Err(err(addr)));
        }
        if let Some(w) = writer {
            w.wake();
        }
    }
}

/// A shard's NATS request publisher (see the module docs).
#[derive(Clone)]
pub struct NatsRequests {
    inner: Rc<Inner>,
}

impl NatsRequests {
    pub fn new(cfg: NatsConfig) -> Self {
        let inbox = format!("_INBOX.{}", crate::util::new_subject().replace('-', ""));
        NatsRequests {
            inner: Rc::new(Inner {
                cfg,
                inbox,
                conn: RefCell::new(None),
                next_token: Cell::new(1),
                dials: Cell::new(0),
            }),
        }
    }

    /// Dials attempted since creation.
    pub fn dials(&self) -> u64 {
        self.inner.dials.get()
    }

    /// Publish one request (the two-part message of `control` and `body`, with `headers`) to
    /// `subject` and wait for the worker's reply. `Ok(())`: the worker took it.
    pub async fn request(
        &self,
        subject: &str,
        headers: &[(&str, &str)],
        control: &[u8],
        body: &[u8],
    ) -> Result<(), TransportError> {
        let conn = self.conn();
        let token = self.inner.next_token.get();
        self.inner.next_token.set(token + 1);
        let reply_to = format!("{}.{token}", self.inner.inbox);
        let slot = AckSlot::default();
        let writer = {
            let mut st = conn.st.borrow_mut();
            let server_max = st.peer.as_ref().map_or(u64::MAX, |p| p.1.max_payload).max(1);
            let max = self.inner.cfg.max_message_size.min(usize::try_from(server_max).unwrap_or(usize::MAX));
            let mark = st.out.len();
            if let Err(e) = encode_request(&mut st.out, subject, &reply_to, headers, control, body, max) {
                st.out.truncate(mark);
                return Err(e.into());
            }
            st.pending.insert(token, slot.clone());
            st.writer.take()
        };
        if let Some(w) = writer {
            w.wake();
        }
        let addr = self.inner.addr(&conn);
        let result = wait_ack(&slot, self.inner.cfg.ack_timeout, addr).await;
        conn.st.borrow_mut().pending.remove(&token);
        result
    }

    /// The live connection, or a new one (its task dials).
    fn conn(&self) -> Rc<Conn> {
        if let Some(c) = self.inner.conn.borrow().as_ref() {
            return c.clone();
        }
        let conn = Rc::new(Conn { st: RefCell::new(ConnState::default()) });
        *self.inner.conn.borrow_mut() = Some(conn.clone());
        self.inner.dials.set(self.inner.dials.get() + 1);
        monoio::spawn(run(self.inner.clone(), conn.clone()));
        conn
    }
}

/// Dial, handshake, then read and write until the connection breaks.
async fn run(inner: Rc<Inner>, conn: Rc<Conn>) {
    let mut errors = Vec::new();
    for server in inner.cfg.servers.clone() {
        let attempt = monoio::select! {
            r = handshake(&inner, &server) => r,
            _ = monoio::time::sleep(inner.cfg.connect_timeout) => Err("connect timed out".to_owned()),
        };
        match attempt {
            Ok((stream, buf, info)) => {
                conn.st.borrow_mut().peer = Some((server.addr, info));
                let (rd, wr) = stream.into_split();
                monoio::spawn(read_replies(inner.clone(), conn.clone(), rd, buf));
                return write_out(&inner, &conn, wr).await;
            }
            Err(e) => errors.push(format!("{}: {e}", server.addr)),
        }
    }
    let detail = format!("no NATS server answered: {}", errors.join("; "));
    inner.fail(&conn, |addr| TransportError::CannotConnect { addr, detail: detail.clone() });
}

/// `INFO` in; `CONNECT`, `SUB <inbox>.*`, `PING` out; `PONG` in. Returns the stream, what
/// was read past the `PONG`, and the server's `INFO`.
async fn handshake(inner: &Inner, server: &NatsServer) -> Result<(TcpStream, BytesMut, ServerInfo), String> {
    let mut stream = TcpStream::connect(server.addr).await.map_err(|e| e.to_string())?;
    let _ = stream.set_nodelay(true);
    let mut buf = BytesMut::with_capacity(4096);
    let info = match next_op(&mut stream, &mut buf).await? {
        Op::Info(info) => info,
        other => return Err(format!("not a NATS server (first message: {other:?})")),
    };
    if info.tls_required {
        return Err("the server requires TLS, which this build's NATS request plane does not speak".into());
    }
    let mut hello = connect_line(&info, server.auth.as_ref(), false, true);
    hello.extend_from_slice(format!("SUB {}.* 1\r\nPING\r\n", inner.inbox).as_bytes());
    let (res, _) = stream.write_all_of(hello).await;
    res.map_err(|e| e.to_string())?;
    loop {
        match next_op(&mut stream, &mut buf).await? {
            Op::Pong => return Ok((stream, buf, info)),
            Op::Err(e) => return Err(format!("server error: {e}")),
            Op::Ping => {
                let (res, _) = stream.write_all_of(b"PONG\r\n".to_vec()).await;
                res.map_err(|e| e.to_string())?;
            }
            Op::Info(_) | Op::Ok | Op::Msg(_) => {}
        }
    }
}

/// The next whole unit from `rd`, reading as needed.
async fn next_op<R: ReadSome>(rd: &mut R, buf: &mut BytesMut) -> Result<Op, String> {
    loop {
        if let Some((op, used)) = parse_op(buf, DEFAULT_MAX_MESSAGE_SIZE)? {
            buf.advance(used);
            return Ok(op);
        }
        buf.reserve(4096);
        let (res, b) = rd.read_some(std::mem::take(buf)).await;
        *buf = b;
        match res {
            Ok(0) => return Err("closed by the server".into()),
            Ok(_) => {}
            Err(e) => return Err(e.to_string()),
        }
    }
}

/// Replies to their requests; `PING`s answered; anything else that is not a reply ignored.
async fn read_replies<R: ReadSome>(inner: Rc<Inner>, conn: Rc<Conn>, mut rd: R, mut buf: BytesMut) {
    let prefix = format!("{}.", inner.inbox);
    loop {
        if conn.st.borrow().broken {
            return;
        }
        let op = match next_op(&mut rd, &mut buf).await {
            Ok(op) => op,
            Err(detail) => {
                return inner.fail(&conn, |addr| TransportError::ConnectionLost { addr, detail: detail.clone() })
            }
        };
        match op {
            Op::Msg(msg) => deliver(&inner, &conn, &prefix, msg),
            Op::Ping => {
                let writer = {
                    let mut st = conn.st.borrow_mut();
                    st.out.extend_from_slice(b"PONG\r\n");
                    st.writer.take()
                };
                if let Some(w) = writer {
                    w.wake();
                }
            }
            Op::Err(e) => {
                let detail = format!("server error: {e}");
                return inner.fail(&conn, |addr| TransportError::ConnectionLost { addr, detail: detail.clone() });
            }
            Op::Info(_) | Op::Ok | Op::Pong => {}
        }
    }
}

/// Complete the request `msg` replies to (a late reply, whose request gave up, is dropped).
fn deliver(inner: &Inner, conn: &Conn, prefix: &str, msg: NatsMsg) {
    let Some(token) = msg.subject.strip_prefix(prefix).and_then(|t| t.parse::<u64>().ok()) else { return };
    let Some(slot) = conn.st.borrow_mut().pending.remove(&token) else { return };
    let addr = inner.addr(conn);
    let result = match reply(&msg) {
        Reply::Accepted => Ok(()),
        Reply::Refused(text) => Err(TransportError::Rejected { text }),
        Reply::NoResponders => Err(TransportError::CannotConnect {
            addr,
            detail: "no responders: no worker listens on the subject".into(),
        }),
        Reply::Status(status) => Err(TransportError::Plane(PlaneError::Protocol(format!(
            "the NATS server answered the request with status {status}"
        )))),
    };
    complete(&slot, result);
}

/// Write whatever is buffered, until the connection breaks.
async fn write_out<W: WriteAll>(inner: &Inner, conn: &Rc<Conn>, wr: W) {
    if let Err(e) = write_buffered(wr, &conn.st).await {
        let detail = e.to_string();
        inner.fail(conn, |addr| TransportError::ConnectionLost { addr, detail: detail.clone() });
    }
}

impl OutBuffer for ConnState {
    fn parts(&mut self) -> (&mut Vec<u8>, &mut Option<Waker>, bool) {
        (&mut self.out, &mut self.writer, self.broken)
    }
}
