//! The shard's response-stream ("call-home") listener and the per-request
//! [`ResponseStream`] (docs/dynamo/request-plane.md §6.1–§6.4).
//!
//! Every shard binds its own listener on port 0 (host `DYN_TCP_RESPONSE_STREAM_HOST`), so a
//! worker's call-back always lands on the shard that registered the subject; the subject
//! table is a plain `RefCell<HashMap>`. For each accepted connection a task reads the
//! handshake (bounded by [`HANDSHAKE_TIMEOUT`]), looks the subject up (unknown, expired or
//! already connected: the socket is closed, which the worker reads as a kill), and then
//! feeds the decoded events into the subject's slot: a local queue plus the consumer's
//! waker. The task watches the slot too: when the [`ResponseStream`] is dropped before the
//! stream ended, it writes the header-only `"kill"` frame and closes, as 1.6.1 does.
//!
//! End-of-stream rules: EOF or reset before the sentinel, or a sentinel before
//! `complete_final`, is [`TransportError::StreamIncomplete`] ("stream ended before generation
//! completed"); a prologue error is [`TransportError::Prologue`]; anything else the decoder
//! refuses is [`TransportError::Plane`]. After the sentinel the frontend closes the socket.
//!
//! The event queue is unbounded: a worker writes no faster than its engine produces, and a
//! slow HTTP client is the HTTP layer's concern.
//!
//! With request-plane TLS (`DYN_TCP_TLS_CERT_PATH` and `_KEY_PATH`; with
//! `DYN_TCP_TLS_CLIENT_CA_CERT_PATH` workers must show a certificate signed by that CA) every
//! accepted connection first runs the TLS handshake, within the plane's handshake timeout; a
//! connection that fails it is closed and nothing else happens (the request it was for ends
//! by its call-back deadline, as an unanswered one does). The rest is the same code over the
//! TLS stream ([`super::stream`]).

use crate::util::FastMap;
use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::poll_fn;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::task::{Context, Poll, Waker};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use monoio::net::{TcpListener, TcpStream};

use super::client::TransportError;
use super::stream::{ReadSome, Tls, WriteAll};
use crate::plane::frame::TwoPartRef;
use crate::plane::payload::{CallHomeHandshake, Codec, ControlMessage};
use crate::plane::stream::{encode_control, ResponseStreamDecoder, StreamEvent};
use crate::plane::{Decoded, PlaneError, DEFAULT_MAX_MESSAGE_SIZE};
use crate::tls::plane::Acceptor;

/// How long an accepted call-back connection may take to send its handshake.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

pub use crate::plane::stream::{Item, ItemMode, JsonItem, StreamItem, TensorItem};

/// One event of a response stream.
pub type Event = StreamEvent<StreamItem>;

#[derive(Default)]
struct SlotState {
    events: EventQueue,
    consumer: Option<Waker>,
    /// The worker's handshake for this subject arrived.
    connected: bool,
    /// Nothing more will be queued (sentinel, error or EOF).
    ended: bool,
    /// The consumer went away before the end: send `kill`.
    cancelled: bool,
    conn: Option<Waker>,
}

struct StreamSlot {
    codec: Codec,
    mode: ItemMode,
    st: RefCell<SlotState>,
}

impl StreamSlot {
    /// Queue an event (or the final error) and wake the consumer.
    fn push(&self, ev: Result<Event, TransportError>, last: bool) {
        let waker = {
            let mut st = self.st.borrow_mut();
            if st.ended {
                return;
            }
            st.events.push_back(ev);
            st.ended |= last;
            st.consumer.take()
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for StreamSlot {
    fn drop(&mut self) {
        pool_queue(std::mem::take(&mut self.st.get_mut().events));
    }
}

/// A stream's event queue holds decoded items (176 bytes each); a worker that answers faster
/// than the client reads fills it to dozens of them, and growing a fresh queue that far
/// copied it ~6 times per request (~15 K instructions per W2 request, measured against the
/// in-tree `--fast` worker; ~90 K in an earlier measurement). Ended streams' queues are kept per
/// shard thread and handed to new streams, up to [`QUEUE_POOL_ENTRIES`] slots of capacity in
/// all: the queues of a few streams, which is what a steady load reuses. More would stay
/// behind after a burst for the life of the process, and pin the allocator's pages around
/// them: up to ~45 MB before this bound (256 queues of up to 1,024 slots); after 300
/// streams at once, 1.0–1.5 MB more resident with this bound than with 2,048 slots.
type EventQueue = VecDeque<Result<Event, TransportError>>;
const QUEUE_POOL_MAX_CAPACITY: usize = 1024;
const QUEUE_POOL_ENTRIES: usize = 512;

/// The pooled queues and the sum of their capacities.
#[derive(Default)]
struct QueuePool {
    queues: Vec<EventQueue>,
    slots: usize,
}

thread_local! {
    static QUEUE_POOL: RefCell<QueuePool> = RefCell::default();
}

fn pooled_queue() -> EventQueue {
    QUEUE_POOL
        .with(|p| {
            let mut p = p.borrow_mut();
            let q = p.queues.pop()?;
            p.slots -= q.capacity();
            Some(q)
        })
        .unwrap_or_default()
}

/// Keep `q` for a later stream if the pool has room for its capacity.
fn pool_queue(mut q: EventQueue) {
    q.clear();
    let cap = q.capacity();
    if cap == 0 || cap > QUEUE_POOL_MAX_CAPACITY {
        return;
    }
    QUEUE_POOL.with(|p| {
        let mut p = p.borrow_mut();
        if p.slots + cap <= QUEUE_POOL_ENTRIES {
            p.slots += cap;
            p.queues.push(q);
        }
    });
}

struct Inner {
    addr: SocketAddr,
    /// `addr` as text, formatted once (it goes into every request's control message).
    addr_text: String,
    max: usize,
    subjects: RefCell<FastMap<String, Rc<StreamSlot>>>,
}

impl Inner {
    fn remove(&self, subject: &str, slot: &Rc<StreamSlot>) {
        let mut map = self.subjects.borrow_mut();
        if map.get(subject).is_some_and(|s| Rc::ptr_eq(s, slot)) {
            map.remove(subject);
        }
    }
}

/// One shard's call-back listener and subject table. Cheap to clone (an `Rc`).
#[derive(Clone)]
pub struct CallbackServer {
    inner: Rc<Inner>,
}

impl CallbackServer {
    /// Bind on `DYN_TCP_RESPONSE_STREAM_HOST` (default `127.0.0.1`), port 0, and start the
    /// accept loop, serving the process's request-plane TLS if it has one
    /// ([`crate::tls::plane::installed`]). Must run inside the shard's runtime.
    pub fn from_env() -> io::Result<CallbackServer> {
        let host = std::env::var("DYN_TCP_RESPONSE_STREAM_HOST").unwrap_or_else(|_| "127.0.0.1".to_owned());
        let tls = crate::tls::plane::installed().acceptor.clone();
        CallbackServer::bind_with(&host, DEFAULT_MAX_MESSAGE_SIZE, tls)
    }

    /// Bind on `host`, port 0, and start the accept loop. The bound `host:port` is the
    /// `address` workers are told to call back; an unspecified host (`0.0.0.0`) would be
    /// useless there, so name a reachable one.
    pub fn bind(host: &str, max_message_size: usize) -> io::Result<CallbackServer> {
        CallbackServer::bind_with(host, max_message_size, None)
    }

    /// [`CallbackServer::bind`], every call-back over TLS when `tls` is given.
    pub fn bind_with(host: &str, max_message_size: usize, tls: Option<Acceptor>) -> io::Result<CallbackServer> {
        let ip: std::net::IpAddr =
            host.parse().map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("bad host {host:?}: {e}")))?;
        let listener = TcpListener::bind(SocketAddr::new(ip, 0))?;
        let addr = listener.local_addr()?;
        let inner = Rc::new(Inner {
            addr,
            addr_text: addr.to_string(),
            max: max_message_size,
            subjects: RefCell::new(FastMap::default()),
        });
        monoio::spawn(accept_loop(inner.clone(), listener, tls));
        Ok(CallbackServer { inner })
    }

    /// The `host:port` workers call back.
    pub fn addr(&self) -> SocketAddr {
        self.inner.addr
    }

    /// [`CallbackServer::addr`] as the text workers are sent.
    pub fn addr_text(&self) -> &str {
        &self.inner.addr_text
    }

    /// Subjects registered and not yet released.
    pub fn registered(&self) -> usize {
        self.inner.subjects.borrow().len()
    }

    /// Expect a call-back for `subject`, answering in `codec`, within `deadline` from now
    /// ([`Duration::MAX`]: without end). Registering a subject twice replaces the first
    /// registration.
    pub fn register(&self, subject: &str, codec: Codec, deadline: Duration) -> ResponseStream {
        self.register_as(subject, codec, ItemMode::Tokens, deadline)
    }

    /// [`CallbackServer::register`] with the items decoded as `mode`.
    pub fn register_as(&self, subject: &str, codec: Codec, mode: ItemMode, deadline: Duration) -> ResponseStream {
        let st = SlotState { events: pooled_queue(), ..SlotState::default() };
        let slot = Rc::new(StreamSlot { codec, mode, st: RefCell::new(st) });
        self.inner.subjects.borrow_mut().insert(subject.to_owned(), slot.clone());
        ResponseStream {
            server: self.inner.clone(),
            slot,
            subject: subject.to_owned(),
            deadline: Instant::now().checked_add(deadline),
            after: deadline,
            done: false,
        }
    }
}

pub use crate::util::{new_subject, new_uuid};

/// The response stream of one request, consumed by the request task.
///
/// Dropping it before the end releases the subject and, if the worker is connected, sends
/// `kill` on the call-back socket.
pub struct ResponseStream {
    server: Rc<Inner>,
    slot: Rc<StreamSlot>,
    subject: String,
    /// When the worker must have called back by; `None`: no limit.
    deadline: Option<Instant>,
    after: Duration,
    done: bool,
}

impl ResponseStream {
    pub fn subject(&self) -> &str {
        &self.subject
    }

    /// [`Self::next`] as a poll, for a stream whose worker has connected (every read after
    /// its first item): no call-back deadline is kept here, the worker's connection ends the
    /// stream if it goes. Before the worker connects, use [`Self::next`].
    pub fn poll_next(&mut self, cx: &mut Context<'_>) -> Poll<Option<Result<Event, TransportError>>> {
        if self.done {
            return Poll::Ready(None);
        }
        let got = {
            let mut st = self.slot.st.borrow_mut();
            match st.events.pop_front() {
                Some(ev) => Some(ev),
                None if st.ended => None,
                None => {
                    if !st.consumer.as_ref().is_some_and(|w| w.will_wake(cx.waker())) {
                        st.consumer = Some(cx.waker().clone());
                    }
                    return Poll::Pending;
                }
            }
        };
        if matches!(got, None | Some(Err(_)) | Some(Ok(StreamEvent::Sentinel))) {
            self.done = true;
            self.release();
        }
        Poll::Ready(got)
    }

    /// The next event: `Handshake`, `Prologue`, `Item`..., `CompleteFinal`, `Sentinel`, then
    /// `None`. An error is the last thing yielded.
    pub async fn next(&mut self) -> Option<Result<Event, TransportError>> {
        if self.done {
            return None;
        }
        if self.slot.st.borrow().connected {
            return poll_fn(|cx| self.poll_next(cx)).await;
        }
        let slot = self.slot.clone();
        let wait = poll_fn(|cx| {
            let mut st = slot.st.borrow_mut();
            match st.events.pop_front() {
                Some(ev) => Poll::Ready(Some(ev)),
                None if st.ended => Poll::Ready(None),
                None => {
                    st.consumer = Some(cx.waker().clone());
                    Poll::Pending
                }
            }
        });
        // Connecting queues the handshake event, which ends the wait.
        let got = match self.deadline {
            None => wait.await,
            Some(deadline) => monoio::select! {
                ev = wait => ev,
                _ = monoio::time::sleep(deadline.saturating_duration_since(Instant::now())) => {
                    self.release();
                    Some(Err(TransportError::CallbackTimeout { subject: self.subject.clone(), after: self.after }))
                },
            },
        };
        if matches!(got, None | Some(Err(_)) | Some(Ok(StreamEvent::Sentinel))) {
            self.done = true;
            self.release();
        }
        got
    }

    /// Forget the subject; if the stream is connected and not over, ask its task to kill it.
    fn release(&mut self) {
        self.server.remove(&self.subject, &self.slot);
        let waker = {
            let mut st = self.slot.st.borrow_mut();
            if st.ended {
                None
            } else {
                st.ended = true;
                st.cancelled = true;
                st.conn.take()
            }
        };
        if let Some(w) = waker {
            w.wake();
        }
    }
}

impl Drop for ResponseStream {
    fn drop(&mut self) {
        self.release();
    }
}

async fn accept_loop(inner: Rc<Inner>, listener: TcpListener, tls: Option<Acceptor>) {
    loop {
        match listener.accept().await {
            Ok((stream, _)) => {
                match &tls {
                    // No TCP_NODELAY (a system call per request): over plain TCP the frontend
                    // writes on a call-back only its last word, the `kill` frame before it
                    // closes, and a lone write is never held back by Nagle's algorithm.
                    None => {
                        monoio::spawn(serve_callback(inner.clone(), stream));
                    }
                    Some(acceptor) => {
                        // The TLS handshake is a conversation of writes and reads.
                        let _ = stream.set_nodelay(true);
                        monoio::spawn(serve_tls_callback(inner.clone(), stream, acceptor.clone()));
                    }
                }
            }
            // EMFILE and friends: back off instead of spinning.
            Err(_) => monoio::time::sleep(Duration::from_millis(10)).await,
        }
    }
}

/// A call-back over TLS: the handshake, then the same as a plain one. A worker that fails
/// the handshake (no TLS, no or an untrusted client certificate) is closed on.
async fn serve_tls_callback(inner: Rc<Inner>, stream: TcpStream, acceptor: Acceptor) {
    let Ok(session) = acceptor.session() else { return };
    let session = rustls::Connection::Server(session);
    if let Ok(tls) = Tls::handshake(stream, session, acceptor.handshake_timeout).await {
        serve_callback(inner, tls).await;
    }
}

enum ReadOutcome {
    Data(BytesMut),
    Closed(String),
    TimedOut,
    Cancelled,
}

/// Read once into `buf`'s spare capacity, bounded by `timeout`, cut short by cancellation.
async fn read_some<S: ReadSome>(
    stream: &mut S,
    mut buf: BytesMut,
    timeout: Option<Duration>,
    slot: Option<&StreamSlot>,
) -> ReadOutcome {
    buf.reserve(8192);
    let read = stream.read_some(buf);
    let cancelled = poll_fn(|cx| match slot {
        Some(slot) => {
            let mut st = slot.st.borrow_mut();
            if st.cancelled {
                Poll::Ready(())
            } else {
                st.conn = Some(cx.waker().clone());
                Poll::Pending
            }
        }
        None => Poll::Pending,
    });
    let done = |res: io::Result<usize>, b: BytesMut| match res {
        Ok(0) => ReadOutcome::Closed("the worker closed the response stream".to_owned()),
        Ok(_) => ReadOutcome::Data(b),
        Err(e) => ReadOutcome::Closed(format!("response stream read failed: {e}")),
    };
    // No timer without a timeout: the item reads (one per token) would otherwise each arm
    // and cancel one (~1 K instructions in the time driver per read).
    match timeout {
        Some(t) => monoio::select! {
            _ = cancelled => ReadOutcome::Cancelled,
            (res, b) = read => done(res, b),
            _ = monoio::time::sleep(t) => ReadOutcome::TimedOut,
        },
        None => monoio::select! {
            _ = cancelled => ReadOutcome::Cancelled,
            (res, b) = read => done(res, b),
        },
    }
}

fn stream_error(e: PlaneError) -> TransportError {
    match e {
        PlaneError::Protocol(detail) if detail.starts_with("sentinel before complete_final") => {
            TransportError::StreamIncomplete { detail }
        }
        other => TransportError::Plane(other),
    }
}

async fn serve_callback<S: ReadSome + WriteAll>(inner: Rc<Inner>, mut stream: S) {
    let mut buf = BytesMut::with_capacity(8192);
    // 1. The handshake, peeked (not consumed: the stream decoder reads it again).
    let started = Instant::now();
    let subject = loop {
        match TwoPartRef::parse(&buf, inner.max) {
            Ok(Decoded::Frame((tp, _))) => match CallHomeHandshake::from_json(tp.header) {
                Ok(hs) => break hs.subject,
                Err(_) => return,
            },
            Ok(Decoded::Incomplete { .. }) => {}
            Err(_) => return,
        }
        let left = HANDSHAKE_TIMEOUT.saturating_sub(started.elapsed());
        match read_some(&mut stream, buf, Some(left), None).await {
            ReadOutcome::Data(b) => buf = b,
            _ => return,
        }
    };
    // 2. The subject: unknown, expired or taken → close.
    let Some(slot) = inner.subjects.borrow().get(&subject).cloned() else { return };
    {
        let mut st = slot.st.borrow_mut();
        if st.connected || st.ended {
            return;
        }
        st.connected = true;
    }
    // 3. Events until the sentinel, an error, EOF or cancellation.
    let mut decoder = ResponseStreamDecoder::new(slot.codec, inner.max);
    loop {
        loop {
            let decoded = match slot.mode {
                ItemMode::Tokens => decoder.decode::<Item>(&mut buf).map(|d| d.map(|e| e.map(StreamItem::Tokens))),
                ItemMode::Json => decoder.decode::<JsonItem>(&mut buf).map(|d| d.map(|e| e.map(StreamItem::Json))),
                ItemMode::Tensor => {
                    decoder.decode::<TensorItem>(&mut buf).map(|d| d.map(|e| e.map(StreamItem::Tensor)))
                }
                ItemMode::Raw => {
                    decoder.decode::<serde_json::Value>(&mut buf).map(|d| d.map(|e| e.map(StreamItem::Raw)))
                }
            };
            match decoded {
                Ok(Decoded::Frame(StreamEvent::Prologue(p))) if p.error.is_some() => {
                    slot.push(Err(TransportError::Prologue(p.error.unwrap_or_default())), true);
                }
                Ok(Decoded::Frame(ev)) => {
                    let last = matches!(ev, StreamEvent::Sentinel);
                    slot.push(Ok(ev), last);
                }
                Ok(Decoded::Incomplete { .. }) => break,
                Err(e) => slot.push(Err(stream_error(e)), true),
            }
            if slot.st.borrow().ended {
                break;
            }
        }
        let (ended, cancelled) = {
            let st = slot.st.borrow();
            (st.ended, st.cancelled)
        };
        if ended && !cancelled {
            // Sentinel or error: close (FIN) right away, as 1.6.1 does.
            inner.remove(&subject, &slot);
            return;
        }
        let outcome =
            if cancelled { ReadOutcome::Cancelled } else { read_some(&mut stream, buf, None, Some(&slot)).await };
        match outcome {
            ReadOutcome::Data(b) => buf = b,
            ReadOutcome::Closed(detail) => {
                slot.push(Err(TransportError::StreamIncomplete { detail }), true);
                inner.remove(&subject, &slot);
                return;
            }
            ReadOutcome::TimedOut => {
                let detail = "response stream read timed out".to_owned();
                slot.push(Err(TransportError::StreamIncomplete { detail }), true);
                inner.remove(&subject, &slot);
                return;
            }
            ReadOutcome::Cancelled => {
                let mut kill = Vec::with_capacity(32);
                encode_control(&mut kill, ControlMessage::Kill);
                let _ = stream.write_all_of(kill).await;
                let _ = stream.close().await;
                return;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_queue_pool_keeps_a_bounded_capacity() {
        let queue = |cap: usize| EventQueue::with_capacity(cap);
        let pooled = || QUEUE_POOL.with(|p| (p.borrow().queues.len(), p.borrow().slots));
        assert_eq!(pooled(), (0, 0));
        // Queues come back with their capacity and go out again, largest last in.
        pool_queue(queue(64));
        pool_queue(queue(128));
        let (n, slots) = pooled();
        assert_eq!(n, 2);
        assert!(slots >= 192, "{slots}");
        assert!(pooled_queue().capacity() >= 128);
        assert!(pooled_queue().capacity() >= 64);
        assert_eq!(pooled(), (0, 0));
        assert_eq!(pooled_queue().capacity(), 0, "an empty pool hands out a new queue");
        // Too large a queue is not kept; many queues stop at the bound.
        pool_queue(queue(QUEUE_POOL_MAX_CAPACITY + 1));
        assert_eq!(pooled(), (0, 0));
        for _ in 0..100 {
            pool_queue(queue(100));
        }
        let (n, slots) = pooled();
        assert!(slots <= QUEUE_POOL_ENTRIES && slots + 128 > QUEUE_POOL_ENTRIES, "{n} queues, {slots} slots");
        let bytes = slots * std::mem::size_of::<Result<Event, TransportError>>();
        assert!(bytes <= 96 << 10, "{bytes} bytes pooled");
    }

    #[test]
    fn subjects_are_version_4_uuids_and_differ() {
        let (a, b) = (new_subject(), new_subject());
        assert_ne!(a, b);
        for s in [a, b] {
            let v = crate::util::parse_uuid(&s).unwrap_or_else(|| panic!("{s} is not a UUID"));
            assert_eq!((v >> 76) & 0xf, 4, "{s}: version");
            assert_eq!((v >> 62) & 0b11, 0b10, "{s}: variant");
            assert_eq!(s.as_bytes()[14], b'4');
        }
    }
}
