//! The frontend side of the TCP request plane, per shard: pipelined worker connections with
//! FIFO ack pairing ([`WorkerConns`]) and the one-call [`RequestPlane::generate`].
//!
//! Everything here is shard-local (`Rc`, `RefCell`, no `Send`, no locks) and runs on the
//! shard's monoio runtime. Dynamo facts: docs/dynamo/request-plane.md §5.1, §5.5, §9.1.
//!
//! One connection per worker address, created lazily by the first send and reused by every
//! later one (1.6.1 pipelines all requests over one connection). Each connection has:
//!
//! * an output buffer: [`WorkerConns::send`] encodes its frame straight into it and, in the
//!   same step, appends an ack slot to the pending queue, so frame order = slot order;
//! * a writer task: dials (with a timeout), then writes whatever is buffered, coalescing all
//!   frames queued since its last write into one `write_all`;
//! * a reader task: decodes acks and completes the pending slots front to back (FIFO).
//!
//! A connect failure fails every queued send with [`TransportError::CannotConnect`]; a
//! broken connection (EOF, reset, write error, an ack nobody waits for) fails every pending
//! send with [`TransportError::ConnectionLost`]. Either way the connection leaves the table,
//! so the next send dials again.
//!
//! With request-plane TLS ([`ConnsConfig::tls`]; docs/dynamo/request-plane-tls.md) every
//! connection is TLS, as in 1.6.1 (no per-worker choice, no plain fallback): the writer
//! task dials, then runs the handshake within the plane's handshake timeout, verifying the
//! worker under `DYN_TCP_TLS_SERVER_NAME` or its IP address. A refused certificate, a
//! worker that does not speak TLS or a handshake that times out is a
//! [`TransportError::CannotConnect`], like an unreachable worker. The reader and writer
//! tasks are the same code over the TLS halves ([`super::stream`]).

use crate::util::FastMap;
use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::fmt;
use std::future::poll_fn;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::{Poll, Waker};
use std::time::Duration;

use bytes::BytesMut;
use monoio::io::Splitable;
use monoio::net::TcpStream;

use super::callback::{CallbackServer, ItemMode, ResponseStream};
use super::stream::{ReadSome, Tls, WriteAll};
use crate::plane::frame::{encode_request_frame, Ack, AckDecoder};
use crate::plane::payload::{Codec, PreprocessedRequest};
use crate::plane::reqenc::control_single_in_many_out;
use crate::plane::{Decoded, PlaneError, DEFAULT_MAX_MESSAGE_SIZE};
use crate::tls::plane::Dialer;

/// A request-plane failure seen by the socket layer (the codecs' own errors are wrapped in
/// [`TransportError::Plane`]).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum TransportError {
    /// The worker's address could not be dialed (refused, unreachable, timed out): 1.6.1's
    /// `cannot_connect`. The request never reached the worker; retry elsewhere.
    CannotConnect { addr: SocketAddr, detail: String },
    /// The worker refused the frame with a non-empty ack (`Server unavailable: ...`,
    /// `Server overloaded: ...`); `text` is the ack verbatim.
    Rejected { text: String },
    /// The request-plane connection broke before this frame's ack arrived.
    ConnectionLost { addr: SocketAddr, detail: String },
    /// No ack within [`ConnsConfig::ack_timeout`].
    AckTimeout { addr: SocketAddr },
    /// The worker did not connect back within the call-back deadline.
    CallbackTimeout { subject: String, after: Duration },
    /// The response stream ended (EOF, reset, or a sentinel) before `complete_final`:
    /// 1.6.1's "Stream ended before generation completed" (`disconnected`).
    StreamIncomplete { detail: String },
    /// The stream prologue carried an error: the engine refused before streaming.
    Prologue(String),
    /// A codec or protocol error (encoding the request, decoding the stream).
    Plane(PlaneError),
}

impl TransportError {
    /// Whether the request may be retried / migrated to another worker (docs/dynamo/request-plane.md §9.1, §9.2).
    pub fn is_retryable(&self) -> bool {
        matches!(
            self,
            TransportError::CannotConnect { .. }
                | TransportError::ConnectionLost { .. }
                | TransportError::Rejected { .. }
                | TransportError::StreamIncomplete { .. }
        )
    }

    /// Whether this is an `Server overloaded` refusal.
    pub fn is_overloaded(&self) -> bool {
        matches!(self, TransportError::Rejected { text } if text.starts_with("Server overloaded"))
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            TransportError::CannotConnect { addr, detail } => write!(f, "cannot connect to worker {addr}: {detail}"),
            TransportError::Rejected { text } => write!(f, "worker refused the request: {text}"),
            TransportError::ConnectionLost { addr, detail } => {
                write!(f, "request-plane connection to {addr} lost before the ack: {detail}")
            }
            TransportError::AckTimeout { addr } => write!(f, "no ack from worker {addr}"),
            TransportError::CallbackTimeout { subject, after } => {
                write!(f, "worker did not call back for subject {subject} within {after:?}")
            }
            TransportError::StreamIncomplete { detail } => {
                write!(f, "stream ended before generation completed: {detail}")
            }
            TransportError::Prologue(text) => write!(f, "worker refused the stream: {text}"),
            TransportError::Plane(e) => e.fmt(f),
        }
    }
}

impl std::error::Error for TransportError {}

impl From<PlaneError> for TransportError {
    fn from(e: PlaneError) -> Self {
        TransportError::Plane(e)
    }
}

impl From<TransportError> for crate::Error {
    /// Every request-plane failure is the worker's: 503, as 1.6.1 answers.
    fn from(e: TransportError) -> Self {
        crate::Error::new(crate::Kind::ServiceUnavailable, "Service temporarily unavailable")
            .with_side(crate::Side::Worker)
            .with_cause(e)
    }
}

/// Knobs of [`WorkerConns`].
#[derive(Clone, Debug)]
pub struct ConnsConfig {
    pub connect_timeout: Duration,
    /// How long a send waits for its ack.
    pub ack_timeout: Duration,
    /// `DYN_TCP_MAX_MESSAGE_SIZE`.
    pub max_message_size: usize,
    /// TLS towards every worker (`None`: plain TCP).
    pub tls: Option<Dialer>,
}

impl Default for ConnsConfig {
    /// 1.6.1's timeouts, and the process's request-plane TLS ([`crate::tls::plane::installed`]).
    fn default() -> Self {
        ConnsConfig {
            connect_timeout: Duration::from_secs(5),
            ack_timeout: Duration::from_secs(30),
            max_message_size: DEFAULT_MAX_MESSAGE_SIZE,
            tls: crate::tls::plane::installed().dialer.clone(),
        }
    }
}

#[derive(Default)]
pub(super) struct AckState {
    result: Option<Result<(), TransportError>>,
    waker: Option<Waker>,
}

pub(super) type AckSlot = Rc<RefCell<AckState>>;

pub(super) fn complete(slot: &AckSlot, result: Result<(), TransportError>) {
    let waker = {
        let mut s = slot.borrow_mut();
        s.result = Some(result);
        s.waker.take()
    };
    if let Some(w) = waker {
        w.wake();
    }
}

#[derive(Default)]
struct ConnState {
    /// Encoded frames not yet handed to the writer.
    out: Vec<u8>,
    /// One slot per written-or-queued frame, oldest first.
    pending: VecDeque<AckSlot>,
    writer: Option<Waker>,
    reader: Option<Waker>,
    broken: bool,
}

struct Conn {
    addr: SocketAddr,
    st: RefCell<ConnState>,
}

struct Inner {
    cfg: ConnsConfig,
    conns: RefCell<FastMap<SocketAddr, Rc<Conn>>>,
    dials: Cell<u64>,
}

impl Inner {
    /// Mark `conn` broken: fail every pending send, stop its tasks, forget it.
    fn fail(&self, conn: &Rc<Conn>, err: TransportError) {
        let (pending, wakers) = {
            let mut st = conn.st.borrow_mut();
            st.broken = true;
            st.out.clear();
            (std::mem::take(&mut st.pending), [st.writer.take(), st.reader.take()])
        };
        {
            let mut map = self.conns.borrow_mut();
            if map.get(&conn.addr).is_some_and(|c| Rc::ptr_eq(c, conn)) {
                map.remove(&conn.addr);
            }
        }
        for slot in pending {
            complete(&slot, Err(err.clone()));
        }
        for w in wakers.into_iter().flatten() {
            w.wake();
        }
    }
}

/// The pipelined request-plane connections of one shard, one per worker address.
#[derive(Clone)]
pub struct WorkerConns {
    inner: Rc<Inner>,
}

impl Default for WorkerConns {
    fn default() -> Self {
        WorkerConns::new(ConnsConfig::default())
    }
}

impl WorkerConns {
    pub fn new(cfg: ConnsConfig) -> Self {
        WorkerConns { inner: Rc::new(Inner { cfg, conns: RefCell::new(FastMap::default()), dials: Cell::new(0) }) }
    }

    /// Connections currently open or being dialed.
    pub fn connection_count(&self) -> usize {
        self.inner.conns.borrow().len()
    }

    /// Dials attempted since creation (each new connection counts one).
    pub fn dials(&self) -> u64 {
        self.inner.dials.get()
    }

    /// Write one request frame to the worker at `addr` and wait for its ack.
    ///
    /// `Ok(())` = empty ack (the worker took the request; the answer comes on the call-back
    /// stream). Must run inside the shard's monoio runtime.
    pub async fn send(
        &self,
        addr: SocketAddr,
        path: &str,
        control: &[u8],
        body: &[u8],
        headers: &[(&str, &str)],
    ) -> Result<(), TransportError> {
        let conn = self.conn(addr);
        let slot = AckSlot::default();
        let writer = {
            let mut st = conn.st.borrow_mut();
            let mark = st.out.len();
            if let Err(e) =
                encode_request_frame(&mut st.out, path, headers, control, body, self.inner.cfg.max_message_size)
            {
                st.out.truncate(mark);
                return Err(e.into());
            }
            st.pending.push_back(slot.clone());
            st.writer.take()
        };
        if let Some(w) = writer {
            w.wake();
        }
        wait_ack(&slot, self.inner.cfg.ack_timeout, addr).await
    }

    /// The live connection to `addr`, or a new one (its writer task dials).
    fn conn(&self, addr: SocketAddr) -> Rc<Conn> {
        if let Some(c) = self.inner.conns.borrow().get(&addr) {
            return c.clone();
        }
        let conn = Rc::new(Conn { addr, st: RefCell::new(ConnState::default()) });
        self.inner.conns.borrow_mut().insert(addr, conn.clone());
        self.inner.dials.set(self.inner.dials.get() + 1);
        monoio::spawn(run_writer(self.inner.clone(), conn.clone()));
        conn
    }
}

/// The ack `slot` gets, or [`TransportError::AckTimeout`] (naming `addr`) after `timeout`.
pub(super) async fn wait_ack(slot: &AckSlot, timeout: Duration, addr: SocketAddr) -> Result<(), TransportError> {
    let ack = poll_fn(|cx| {
        let mut s = slot.borrow_mut();
        match s.result.take() {
            Some(r) => Poll::Ready(r),
            None => {
                s.waker = Some(cx.waker().clone());
                Poll::Pending
            }
        }
    });
    monoio::select! {
        r = ack => r,
        _ = monoio::time::sleep(timeout) => Err(TransportError::AckTimeout { addr }),
    }
}

async fn run_writer(inner: Rc<Inner>, conn: Rc<Conn>) {
    let addr = conn.addr;
    let dialed = monoio::select! {
        r = TcpStream::connect(addr) => r.map_err(|e| e.to_string()),
        _ = monoio::time::sleep(inner.cfg.connect_timeout) => Err("connect timed out".to_owned()),
    };
    let stream = match dialed {
        Ok(s) => s,
        Err(detail) => return inner.fail(&conn, TransportError::CannotConnect { addr, detail }),
    };
    let _ = stream.set_nodelay(true);
    match &inner.cfg.tls {
        None => {
            let (rd, wr) = stream.into_split();
            monoio::spawn(run_reader(inner.clone(), conn.clone(), rd));
            write_frames(&inner, &conn, wr).await;
        }
        Some(dialer) => {
            let handshake = match dialer.session(addr.ip()) {
                Ok(session) => Tls::handshake(stream, rustls::Connection::Client(session), dialer.handshake_timeout)
                    .await
                    .map_err(|e| format!("TLS handshake failed: {e}")),
                Err(e) => Err(format!("TLS: {e}")),
            };
            match handshake {
                Ok(tls) => {
                    let (rd, wr) = tls.into_split();
                    monoio::spawn(run_reader(inner.clone(), conn.clone(), rd));
                    write_frames(&inner, &conn, wr).await;
                }
                Err(detail) => inner.fail(&conn, TransportError::CannotConnect { addr, detail }),
            }
        }
    }
}

/// Write whatever the sends buffer, until the connection breaks.
async fn write_frames<W: WriteAll>(inner: &Inner, conn: &Rc<Conn>, wr: W) {
    if let Err(e) = write_buffered(wr, &conn.st).await {
        inner.fail(conn, TransportError::ConnectionLost { addr: conn.addr, detail: e.to_string() });
    }
}

/// A connection's output buffer, as its writer task sees it.
pub(super) trait OutBuffer {
    /// The bytes to write, the writer's waker slot, and whether the connection broke.
    fn parts(&mut self) -> (&mut Vec<u8>, &mut Option<Waker>, bool);
}

impl OutBuffer for ConnState {
    fn parts(&mut self) -> (&mut Vec<u8>, &mut Option<Waker>, bool) {
        (&mut self.out, &mut self.writer, self.broken)
    }
}

/// A writer task's loop: wait for buffered bytes, write all of them in one write, give the
/// (usually larger) buffer back for the next ones. Ends when the connection is marked broken
/// (`Ok`) or a write fails.
pub(super) async fn write_buffered<W: WriteAll, S: OutBuffer>(mut wr: W, state: &RefCell<S>) -> std::io::Result<()> {
    loop {
        let next = poll_fn(|cx| {
            let mut st = state.borrow_mut();
            let (out, writer, broken) = st.parts();
            if broken {
                Poll::Ready(None)
            } else if !out.is_empty() {
                Poll::Ready(Some(std::mem::take(out)))
            } else {
                *writer = Some(cx.waker().clone());
                Poll::Pending
            }
        })
        .await;
        let Some(buf) = next else { return Ok(()) };
        let (res, mut buf) = wr.write_all_of(buf).await;
        res?;
        buf.clear();
        let mut st = state.borrow_mut();
        let (out, _, broken) = st.parts();
        if out.is_empty() && !broken {
            *out = buf;
        }
    }
}

async fn run_reader<R: ReadSome>(inner: Rc<Inner>, conn: Rc<Conn>, mut rd: R) {
    let addr = conn.addr;
    let decoder = AckDecoder::new(inner.cfg.max_message_size);
    let mut buf = BytesMut::with_capacity(1024);
    loop {
        loop {
            match decoder.decode(&mut buf) {
                Ok(Decoded::Frame(ack)) => {
                    let Some(slot) = conn.st.borrow_mut().pending.pop_front() else {
                        let detail = "ack without a pending request".to_owned();
                        return inner.fail(&conn, TransportError::ConnectionLost { addr, detail });
                    };
                    let result = match ack {
                        Ack::Accepted => Ok(()),
                        Ack::Rejected(text) => Err(TransportError::Rejected { text }),
                    };
                    complete(&slot, result);
                }
                Ok(Decoded::Incomplete { need }) => {
                    buf.reserve(need.saturating_sub(buf.len()).max(1024));
                    break;
                }
                Err(e) => return inner.fail(&conn, TransportError::ConnectionLost { addr, detail: e.to_string() }),
            }
        }
        let broken = poll_fn(|cx| {
            let mut st = conn.st.borrow_mut();
            if st.broken {
                Poll::Ready(())
            } else {
                st.reader = Some(cx.waker().clone());
                Poll::Pending
            }
        });
        let read = rd.read_some(buf);
        let outcome = monoio::select! {
            _ = broken => return,
            (res, b) = read => match res {
                Ok(0) => Err("closed by the worker".to_owned()),
                Ok(_) => Ok(b),
                Err(e) => Err(e.to_string()),
            },
        };
        match outcome {
            Ok(b) => buf = b,
            Err(detail) => return inner.fail(&conn, TransportError::ConnectionLost { addr, detail }),
        }
    }
}

// ---------------------------------------------------------------- generate

/// A request body the plane can send, and how the worker's answer items decode.
pub trait RequestBody: serde::Serialize {
    const ITEMS: ItemMode;

    /// The prompt's token ids, when the frontend tokenized it (what the kv router hashes).
    fn prompt_tokens(&self) -> Option<&[u32]> {
        None
    }

    /// The output length the request says to expect (`nvext.agent_hints.osl`).
    fn expected_output_tokens(&self) -> Option<u32> {
        None
    }

    /// Names the data-parallel rank the router chose (`routing.dp_rank`).
    fn set_dp_rank(&mut self, _rank: u32) {}

    /// The data-parallel rank the request already names (`routing.dp_rank`), if any.
    fn dp_rank(&self) -> Option<u32> {
        None
    }

    /// Told which worker it is about to be sent to (after [`RequestBody::set_dp_rank`]).
    fn routed(&mut self, _to: Routed<'_>) {}

    /// Whether the sender waits for the worker's first item before the request counts as
    /// started (else it has started once the worker acknowledged it).
    fn waits_for_first_item(&self) -> bool {
        true
    }

    /// The body's bytes in `codec`.
    fn encode_body(&self, codec: Codec) -> Result<Vec<u8>, PlaneError> {
        codec.encode(self)
    }
}

/// The worker a request is about to be sent to, as [`RequestBody::routed`] is told.
#[derive(Clone, Copy, Debug)]
pub struct Routed<'a> {
    pub instance_id: u64,
    /// Its number of data-parallel ranks.
    pub dp_size: u32,
    /// Its KV rendezvous (a prefill worker's `disaggregated_endpoint`): host and port.
    pub bootstrap: Option<(&'a str, u16)>,
}

/// `model_input = Tokens`: answered with `LLMEngineOutput` items.
impl RequestBody for PreprocessedRequest {
    const ITEMS: ItemMode = ItemMode::Tokens;

    fn prompt_tokens(&self) -> Option<&[u32]> {
        Some(&self.token_ids)
    }

    fn expected_output_tokens(&self) -> Option<u32> {
        self.routing.as_ref().and_then(|r| r.expected_output_tokens)
    }

    fn set_dp_rank(&mut self, rank: u32) {
        self.routing.get_or_insert_with(Default::default).dp_rank = Some(rank);
    }

    fn dp_rank(&self) -> Option<u32> {
        self.routing.as_ref().and_then(|r| r.dp_rank)
    }

    fn encode_body(&self, codec: Codec) -> Result<Vec<u8>, PlaneError> {
        match codec {
            Codec::Msgpack => crate::plane::reqenc::preprocessed_request(self),
            Codec::Json => codec.encode(self),
        }
    }
}

/// `model_input = Text`: the client's OpenAI request, answered with OpenAI chunk objects.
impl RequestBody for serde_json::Value {
    const ITEMS: ItemMode = ItemMode::Json;
}

/// `model_input = Tensor`: `NvCreateTensorRequest`, answered with `NvCreateTensorResponse` items.
impl RequestBody for crate::plane::tensor::TensorRequest {
    const ITEMS: ItemMode = ItemMode::Tensor;
}

/// A shard's request plane: its worker connections, its NATS publisher (with
/// `--request-plane nats`) and its call-back listener.
#[derive(Clone)]
pub struct RequestPlane {
    pub conns: WorkerConns,
    pub nats: Option<super::nats::NatsRequests>,
    pub callbacks: CallbackServer,
}

impl RequestPlane {
    pub fn new(conns: WorkerConns, callbacks: CallbackServer) -> Self {
        RequestPlane { conns, nats: None, callbacks }
    }

    /// The same plane, publishing requests to NATS-registered workers with `nats`.
    pub fn with_nats(mut self, nats: super::nats::NatsRequests) -> Self {
        self.nats = Some(nats);
        self
    }

    /// Send one request body (a `PreprocessedRequest`, or a Text model's OpenAI request) to the worker at `worker` (endpoint `endpoint_path`,
    /// `<instance hex>/<ns>/<component>/<endpoint>`) and return its response stream.
    ///
    /// A fresh subject is registered first; the stream yields
    /// [`TransportError::CallbackTimeout`] if the worker has not connected back within
    /// `callback_deadline` of this call. On error the subject is already gone.
    pub async fn generate<B: RequestBody + ?Sized>(
        &self,
        worker: SocketAddr,
        endpoint_path: &str,
        codec: Codec,
        request: &B,
        request_id: &str,
        callback_deadline: Duration,
    ) -> Result<ResponseStream, TransportError> {
        self.generate_to(
            Route::Tcp { addr: worker, path: endpoint_path },
            codec,
            request,
            request_id,
            callback_deadline,
        )
        .await
    }

    /// [`RequestPlane::generate`] to a worker on either plane.
    pub async fn generate_to<B: RequestBody + ?Sized>(
        &self,
        route: Route<'_>,
        codec: Codec,
        request: &B,
        request_id: &str,
        callback_deadline: Duration,
    ) -> Result<ResponseStream, TransportError> {
        let subject = super::callback::new_subject();
        let stream = self.callbacks.register_as(&subject, codec, B::ITEMS, callback_deadline);
        let mut control = Vec::new();
        control_single_in_many_out(&mut control, request_id, codec, self.callbacks.addr_text(), &subject, request_id);
        let body = request.encode_body(codec)?;
        let ts = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).map_or(0, |d| d.as_nanos());
        let ts = ts.to_string();
        // On error `stream` drops here: the subject goes, and a worker that already called
        // back is sent `kill`.
        match route {
            Route::Tcp { addr, path } => {
                let headers = [("request-id", request_id), ("x-endpoint-path", path), ("x-frontend-send-ts-ns", &ts)];
                self.conns.send(addr, path, &control, &body, &headers).await?;
            }
            Route::Nats { subject } => {
                let Some(nats) = &self.nats else {
                    let detail = "the worker is on the NATS request plane; start with --request-plane nats".to_owned();
                    return Err(TransportError::Plane(PlaneError::Protocol(detail)));
                };
                // 1.6.1 sends no endpoint path on NATS: the subject names the endpoint.
                let headers = [("request-id", request_id), ("x-frontend-send-ts-ns", &ts)];
                nats.request(subject, &headers, &control, &body).await?;
            }
        }
        Ok(stream)
    }
}

/// Where a request goes: a worker's TCP request-plane address and endpoint path, or its NATS
/// subject.
#[derive(Clone, Copy, Debug)]
pub enum Route<'a> {
    Tcp { addr: SocketAddr, path: &'a str },
    Nats { subject: &'a str },
}
