//! Shards: one pinned thread per core, each with its own monoio runtime, listener, connections,
//! metrics and Registry snapshot. Nothing on a shard's request path is shared with another
//! shard; what crosses threads goes through the shard's inbox ([`ShardMsg`]).
//!
//! Lifecycle (Seastar's start / run / stop):
//! 1. [`Server::start`] binds one `SO_REUSEPORT` socket per shard on the calling thread (so a
//!    bind error is reported before anything runs), reads every allowed core id *before*
//!    pinning any thread (a pinned thread only sees its own core), then spawns the shards and
//!    waits until each has built its runtime.
//! 2. A shard accepts connections and runs one task per connection and one task reading its
//!    inbox. A connection's first bytes tell HTTP/2 (the prior-knowledge preface: h2c, gRPC)
//!    from HTTP/1.1 ([`crate::h2::detect`]); the connection is then served by
//!    [`crate::h2::conn::serve`] or [`crate::http1::conn::serve`], both answering through the
//!    same service (built per shard by the factory [`Server::start`] is given: the HTTP
//!    service of [`crate::service`] in the server). With `--kserve-grpc-server` each shard also listens on
//!    `--grpc-metrics-port`, serving the same routes. With `--interactive` no shard listens:
//!    requests reach the shards as work sent to their inboxes ([`ShardMsg::Run`], from the
//!    terminal of [`crate::interactive`]).
//! 3. [`Server::shutdown`] sends `Shutdown` to every inbox. Each shard closes its [`gate`]:
//!    requests already in flight finish while `/health` and `/live` answer 503 and new
//!    inference requests get 503 "Service is not ready" (Dynamo 1.6.1's draining behaviour),
//!    on connections already open and on new ones (the listener stays open while the shard
//!    drains); the shard exits when no request is in flight or when the grace period
//!    (`DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS`) ends. Then every answer still being made
//!    ends cleanly — an SSE error event and `[DONE]`, a 503, a gRPC UNAVAILABLE — its worker
//!    request is cancelled, and the connections close.
//!
//! I/O driver: io_uring when the kernel allows it, epoll otherwise (`--io-driver` forces one;
//! io_uring is refused under Docker's default seccomp profile, and then `auto` falls back).

pub mod conn_io;
pub mod gate;
mod listener;
pub mod local;
pub mod tls;

use std::cell::RefCell;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::{mpsc, Arc};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use monoio::net::TcpListener;

use crate::config::{Config, IoDriver};
use crate::h2::Detected;
use crate::http1::conn::{self, ConnConfig};
use crate::http1::{Limits, Service};
use crate::metrics::{ShardMetrics, Snapshot};
use crate::registry::Registry;
use crate::util::date::DateCache;
use gate::Gate;

/// A message to one shard.
pub enum ShardMsg {
    /// Reply with this shard's metrics.
    Snapshot(flume::Sender<Snapshot>),
    /// Install a new Registry snapshot (requests in flight keep the old one).
    Registry(Arc<Registry>),
    /// Install this shard's KV index replica (`--router-mode kv`).
    KvReplica(Box<crate::router::kv::select::KvInstall>),
    /// Another shard saw this worker fail: skip it until then.
    Inhibit(u64, Instant),
    /// Another shard changed a session's binding or its use.
    Session(crate::router::session::SessionMsg),
    /// A model's busy thresholds from now on (`POST /busy_threshold` on any shard).
    Busy(String, crate::config::settings::BusyThresholds),
    /// The HTTPS configuration for connections accepted from now on (a certificate reload).
    Tls(Arc<rustls::ServerConfig>),
    /// Run this on the shard (from its inbox task; it may spawn tasks of its own): how a
    /// caller without a connection (the `--interactive` terminal) hands a shard a request.
    Run(Work),
    /// Stop accepting, drain, exit.
    Shutdown,
}

/// Work for a shard's inbox task ([`ShardMsg::Run`]).
pub type Work = Box<dyn FnOnce(&Rc<ShardCtx>) + Send>;

/// What every shard can see: fixed at start-up, read-only afterwards.
pub struct Shared {
    pub config: Arc<Config>,
    /// `--request-plane nats`: the NATS servers, resolved at start-up.
    pub nats: Option<crate::transport::nats::NatsConfig>,
    /// Inbox of every shard, by shard id.
    pub inboxes: Vec<flume::Sender<ShardMsg>>,
    pub started: Instant,
    /// The kv router queue's per-class counts, every shard's.
    pub class_book: Arc<crate::router::kv::queue::ClassBook>,
    /// The request classifier (`--router-policy-config` `request_classifier`, kv mode).
    pub classifier: Option<Arc<crate::router::thunder::Classifier>>,
}

/// A shard's own state, reachable from every task on it.
pub struct ShardCtx {
    pub id: usize,
    /// This shard's request plane: worker connections and its call-back listener.
    pub plane: crate::transport::client::RequestPlane,
    /// This shard's worker selection (`--router-mode`) and in-flight counts.
    pub router: crate::router::Router,
    /// Session affinity bindings (`--router-session-affinity-ttl-secs`), this shard's copy.
    pub sessions: crate::router::session::Sessions,
    /// This shard's KV index replica and bookings (`--router-mode kv`).
    pub kv: crate::router::kv::select::KvSelector,
    /// Tokenizer helper threads for long prompts, by model directory (started on first use).
    pub offloads: RefCell<std::collections::HashMap<std::path::PathBuf, Rc<crate::tokenize::offload::Offload>>>,
    pub shared: Arc<Shared>,
    pub metrics: ShardMetrics,
    pub gate: Gate,
    pub date: DateCache,
    pub conn: ConnConfig,
    registry: RefCell<Arc<Registry>>,
    /// The HTTPS configuration new connections on `--http-port` get (`None`: plain HTTP).
    tls: RefCell<Option<Arc<rustls::ServerConfig>>>,
}

impl ShardCtx {
    /// This shard's tokenizer helper thread for `files` (started on first use; the spawn does
    /// not block, the helper builds its tokenizer on its own thread).
    pub fn offload(
        &self,
        files: &Arc<crate::tokenize::ModelFiles>,
    ) -> Result<Rc<crate::tokenize::offload::Offload>, String> {
        if let Some(o) = self.offloads.borrow().get(&files.dir) {
            return Ok(o.clone());
        }
        let o = Rc::new(
            crate::tokenize::offload::Offload::start(files.clone(), format!("tokenize-{}", self.id))
                .map_err(|e| format!("cannot start the tokenizer helper: {e}"))?,
        );
        self.offloads.borrow_mut().insert(files.dir.clone(), o.clone());
        Ok(o)
    }

    /// The Registry snapshot new requests should use.
    pub fn registry(&self) -> Arc<Registry> {
        self.registry.borrow().clone()
    }

    /// Read this shard's Registry snapshot in place (no reference count taken: the snapshot
    /// `Arc` is shared by every shard, so a clone is an atomic on a shared line).
    pub fn with_registry<R>(&self, f: impl FnOnce(&Registry) -> R) -> R {
        f(&self.registry.borrow())
    }
}

/// The running shards.
pub struct Server {
    /// The address every shard's listener is bound to (`0.0.0.0:0` when `listening` is
    /// false).
    pub addr: SocketAddr,
    /// Whether the shards listen on `--http-port` (not with `--interactive`).
    pub listening: bool,
    /// Where `--grpc-metrics-port` is bound (with `--kserve-grpc-server`).
    pub metrics_addr: Option<SocketAddr>,
    /// The I/O driver each shard runs ("io_uring", with its completion mode, or "epoll").
    pub drivers: Vec<&'static str>,
    /// Whether `--http-port` speaks HTTPS.
    pub tls: bool,
    inboxes: Vec<flume::Sender<ShardMsg>>,
    threads: Vec<JoinHandle<()>>,
    /// The request classifier's thread, told every registry too.
    classifier: Option<Arc<crate::router::thunder::Classifier>>,
}

impl Server {
    /// Bind, spawn and start every shard; returns once all of them run.
    ///
    /// `service` builds each shard's service from its context, on the shard's thread (it is
    /// `!Send`: everything a request needs stays on its shard).
    pub fn start<S, F>(config: Arc<Config>, service: F) -> io::Result<Server>
    where
        S: Service + crate::h2::Handler,
        F: Fn(Rc<ShardCtx>) -> Rc<S> + Send + Sync + 'static,
    {
        let service = Arc::new(service);
        let cores = core_affinity::get_core_ids().unwrap_or_default();
        let n = match config.shards {
            0 => cores.len().max(1),
            n => n,
        };
        // `--interactive`: no listener (and so no HTTPS configuration to read either).
        let listening = !config.interactive;
        // HTTPS: the files are read before anything is bound, so a bad one stops the start.
        let tls = match &config.tls {
            Some(files) if listening => Some(crate::tls::server_config(files).map_err(io::Error::other)?),
            _ => None,
        };
        let (listeners, addr) = match listening {
            true => {
                let all = listener::bind_all(&config.http_host, config.http_port, n, config.listen_backlog)?;
                let addr = all[0].local_addr()?;
                (all.into_iter().map(Some).collect(), addr)
            }
            false => ((0..n).map(|_| None).collect::<Vec<_>>(), SocketAddr::from(([0, 0, 0, 0], 0))),
        };
        let mut extra: Vec<Option<std::net::TcpListener>> = match config.kserve_grpc {
            true => listener::bind_all(&config.http_host, config.grpc_metrics_port, n, config.listen_backlog)?
                .into_iter()
                .map(Some)
                .collect(),
            false => (0..n).map(|_| None).collect(),
        };
        let metrics_addr = match &extra[0] {
            Some(l) => Some(l.local_addr()?),
            None => None,
        };
        let (senders, receivers): (Vec<_>, Vec<_>) = (0..n).map(|_| flume::unbounded()).unzip();
        let nats = match &config.request_plane_nats {
            Some(url) => Some(
                crate::transport::nats::NatsConfig::from_url(url)
                    .map_err(|e| io::Error::other(format!("--request-plane nats: {e}")))?,
            ),
            None => None,
        };
        let classifier = match &config.kv_classifier {
            Some(c) => Some(Arc::new(crate::router::thunder::Classifier::start(c.clone(), n)?)),
            None => None,
        };
        let shared = Arc::new(Shared {
            config: config.clone(),
            nats,
            inboxes: senders.clone(),
            started: Instant::now(),
            class_book: Default::default(),
            classifier: classifier.clone(),
        });
        let (ready_tx, ready_rx) = mpsc::channel::<io::Result<(usize, &'static str)>>();
        let mut threads = Vec::with_capacity(n);
        for (id, (listener, inbox)) in listeners.into_iter().zip(receivers).enumerate() {
            let core = if config.pin_shards && !cores.is_empty() { Some(cores[id % cores.len()]) } else { None };
            let shared = shared.clone();
            let ready = ready_tx.clone();
            let listeners = (listener, extra[id].take());
            let tls = tls.clone();
            let t = std::thread::Builder::new().name(format!("shard-{id}")).spawn({
                let service = service.clone();
                move || run_shard(id, core, listeners, tls, inbox, shared, ready, service)
            })?;
            threads.push(t);
        }
        drop(ready_tx);
        let mut drivers = vec![""; n];
        for _ in 0..n {
            match ready_rx.recv() {
                Ok(Ok((id, driver))) => drivers[id] = driver,
                Ok(Err(e)) => {
                    for s in &senders {
                        let _ = s.send(ShardMsg::Shutdown);
                    }
                    return Err(e);
                }
                Err(_) => return Err(io::Error::other("a shard thread exited during start-up")),
            }
        }
        Ok(Server { addr, listening, metrics_addr, drivers, tls: tls.is_some(), inboxes: senders, threads, classifier })
    }

    /// A function another thread can keep to give every shard a new HTTPS configuration
    /// (certificate reloads, [`crate::tls::reload`]).
    pub fn tls_publisher(&self) -> impl Fn(Arc<rustls::ServerConfig>) + Send + 'static {
        let inboxes = self.inboxes.clone();
        move |config| {
            for s in &inboxes {
                let _ = s.send(ShardMsg::Tls(config.clone()));
            }
        }
    }

    /// The inbox of shard `id` (`None` past the last shard).
    pub fn inbox(&self, id: usize) -> Option<flume::Sender<ShardMsg>> {
        self.inboxes.get(id).cloned()
    }

    /// Hand every shard a new Registry snapshot.
    pub fn publish(&self, registry: Arc<Registry>) {
        (self.publisher())(registry)
    }

    /// A function another thread can keep to publish Registry snapshots to every shard.
    pub fn publisher(&self) -> impl Fn(Arc<Registry>) + Send + 'static {
        let inboxes = self.inboxes.clone();
        let classifier = self.classifier.clone();
        move |registry| {
            if let Some(c) = &classifier {
                c.registry(registry.clone());
            }
            for s in &inboxes {
                let _ = s.send(ShardMsg::Registry(registry.clone()));
            }
        }
    }

    /// Give shard `i` the KV index replica `replicas[i]` (`--router-mode kv`).
    pub fn install_kv(&self, installs: Vec<crate::router::kv::select::KvInstall>) {
        for (s, k) in self.inboxes.iter().zip(installs) {
            let _ = s.send(ShardMsg::KvReplica(Box::new(k)));
        }
    }

    /// Ask every shard to stop and wait for all of them (each bounded by the grace period).
    pub fn shutdown(self) {
        for s in &self.inboxes {
            let _ = s.send(ShardMsg::Shutdown);
        }
        for t in self.threads {
            let _ = t.join();
        }
    }
}

#[allow(clippy::too_many_arguments)]
fn run_shard<S: Service + crate::h2::Handler, F: Fn(Rc<ShardCtx>) -> Rc<S>>(
    id: usize,
    core: Option<core_affinity::CoreId>,
    listener: (Option<std::net::TcpListener>, Option<std::net::TcpListener>),
    tls: Option<Arc<rustls::ServerConfig>>,
    inbox: flume::Receiver<ShardMsg>,
    shared: Arc<Shared>,
    ready: mpsc::Sender<io::Result<(usize, &'static str)>>,
    service: Arc<F>,
) {
    if let Some(core) = core {
        if !core_affinity::set_for_current(core) {
            crate::log::warn(&format!("shard {id}: could not pin to core {}", core.id));
        }
    }
    let driver = shared.config.io_driver;
    let runtime = match driver {
        IoDriver::Epoll => build_epoll().map(Runtime::Epoll),
        IoDriver::IoUring => crate::util::uring::runtime().map(Runtime::Uring),
        IoDriver::Auto => {
            crate::util::uring::runtime().map(Runtime::Uring).or_else(|_| build_epoll().map(Runtime::Epoll))
        }
    };
    match runtime {
        Err(e) => {
            let msg = format!("shard {id}: cannot build its {driver:?} runtime: {e}");
            let _ = ready.send(Err(io::Error::new(e.kind(), msg)));
        }
        Ok(Runtime::Uring((mut rt, name))) => {
            let _ = ready.send(Ok((id, name)));
            rt.block_on(shard_main(id, listener, tls, inbox, shared, &*service));
        }
        Ok(Runtime::Epoll(mut rt)) => {
            let _ = ready.send(Ok((id, "epoll")));
            rt.block_on(shard_main(id, listener, tls, inbox, shared, &*service));
        }
    }
}

enum Runtime {
    Uring((crate::util::uring::Runtime, &'static str)),
    Epoll(monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>),
}

fn build_epoll() -> io::Result<monoio::Runtime<monoio::time::TimeDriver<monoio::LegacyDriver>>> {
    monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build()
}

async fn shard_main<S: Service + crate::h2::Handler>(
    id: usize,
    listeners: (Option<std::net::TcpListener>, Option<std::net::TcpListener>),
    tls: Option<Arc<rustls::ServerConfig>>,
    inbox: flume::Receiver<ShardMsg>,
    shared: Arc<Shared>,
    make_service: &dyn Fn(Rc<ShardCtx>) -> Rc<S>,
) {
    let (listener, metrics_listener) = match (
        listeners.0.map(TcpListener::from_std).transpose(),
        listeners.1.map(TcpListener::from_std).transpose(),
    ) {
        (Ok(l), Ok(m)) => (l, m),
        (Err(e), _) | (_, Err(e)) => {
            crate::log::error(&format!("shard {id}: listener: {e}"));
            return;
        }
    };
    let cfg = &shared.config;
    let conn = ConnConfig {
        limits: Limits {
            max_headers: cfg.max_header_count,
            max_head_bytes: cfg.max_header_bytes,
            max_body_bytes: cfg.body_limit_bytes,
        },
        header_timeout: cfg.header_read_timeout,
        idle_timeout: cfg.idle_timeout,
        linger: Duration::from_secs(5),
    };
    let grace = cfg.graceful_shutdown;
    let callbacks = match crate::transport::callback::CallbackServer::from_env() {
        Ok(c) => c,
        Err(e) => {
            crate::log::error(&format!("shard {id}: response-stream listener: {e}"));
            return;
        }
    };
    let mut plane = crate::transport::client::RequestPlane::new(
        crate::transport::client::WorkerConns::new(crate::transport::client::ConnsConfig::default()),
        callbacks,
    );
    if let Some(nats) = &shared.nats {
        plane = plane.with_nats(crate::transport::nats::NatsRequests::new(nats.clone()));
    }
    let ctx = Rc::new(ShardCtx {
        id,
        plane,
        router: crate::router::Router::new(
            cfg.router_mode,
            (id as u64 + 1).wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ std::process::id() as u64,
        )
        .on_inhibit(tell_others(id, &shared, |(worker, until)| ShardMsg::Inhibit(worker, until))),
        sessions: match cfg.session_affinity {
            Some((ttl, mode)) => crate::router::session::Sessions::new(
                ttl,
                mode,
                id as u16,
                Some(tell_others(id, &shared, ShardMsg::Session)),
            ),
            None => Default::default(),
        },
        kv: crate::router::kv::select::KvSelector::new(cfg.kv_cost, cfg.kv_busy)
            .with_selectors(cfg.kv_selectors)
            .with_classes(cfg.kv_classes.clone(), shared.class_book.clone()),
        offloads: RefCell::new(std::collections::HashMap::new()),
        shared: shared.clone(),
        metrics: ShardMetrics::default(),
        gate: Gate::new(),
        date: DateCache::default(),
        conn,
        registry: RefCell::new(Arc::new(Registry::default())),
        tls: RefCell::new(tls),
    });
    monoio::spawn(inbox_loop(ctx.clone(), inbox));
    let service = make_service(ctx.clone());

    if let Some(m) = metrics_listener {
        monoio::spawn(accept_loop(id, m, false, ctx.clone(), service.clone()));
    }
    if let Some(l) = listener {
        monoio::spawn(accept_loop(id, l, true, ctx.clone(), service));
    }
    ctx.gate.closed().await;
    monoio::select! {
        _ = ctx.gate.drained() => {},
        _ = monoio::time::sleep(grace) => {
            crate::log::warn(&format!(
                "shard {id}: {} request(s) still in flight after the {}s grace period; closing them",
                ctx.gate.in_flight(), grace.as_secs_f64()
            ));
        },
    }
    // Close every connection (idle keep-alive ones included) before the runtime goes away;
    // answers still being made end cleanly first (an error event and `[DONE]`, a gRPC
    // status) and their workers are told to stop.
    ctx.gate.finish();
    monoio::select! {
        _ = ctx.gate.empty() => {},
        _ = monoio::time::sleep(Duration::from_secs(1)) => {},
    }
    // Let the requests just dropped send their workers `kill`.
    monoio::time::sleep(Duration::from_millis(20)).await;
}

/// Accept connections until the shard's drain is over (then the listener is dropped). While
/// the shard drains, new connections are still taken and their requests answered 503, so a
/// load balancer sees the frontend going rather than a refused connection. Connections on the
/// `main` listener (`--http-port`) speak HTTPS when it is configured; the metrics port
/// (`--grpc-metrics-port`) stays plain.
async fn accept_loop<S: Service + crate::h2::Handler>(
    id: usize,
    listener: TcpListener,
    main: bool,
    ctx: Rc<ShardCtx>,
    service: Rc<S>,
) {
    loop {
        let accepted = monoio::select! {
            r = listener.accept() => Some(r),
            _ = ctx.gate.finished() => None,
        };
        match accepted {
            None => return,
            Some(Ok((stream, _peer))) => {
                if ctx.metrics.open_connections() >= ctx.shared.config.max_connections_per_shard as i64 {
                    // Over the limit: closed at once (dropping it), before any buffer exists.
                    ctx.metrics.edge(crate::metrics::Edge::ConnectionLimit);
                    drop(stream);
                    continue;
                }
                let tls = if main { ctx.tls.borrow().clone() } else { None };
                monoio::spawn(connection(stream, tls, ctx.clone(), service.clone()));
            }
            Some(Err(e)) => {
                // EMFILE/ENFILE and friends: back off instead of spinning.
                crate::log::warn(&format!("shard {id}: accept: {e}"));
                monoio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    }
}

/// One connection: over TLS when `tls` is given ([`tls::serve`]); otherwise its first bytes
/// choose HTTP/2 or HTTP/1.1.
async fn connection<S: Service + crate::h2::Handler>(
    mut stream: monoio::net::TcpStream,
    tls: Option<Arc<rustls::ServerConfig>>,
    ctx: Rc<ShardCtx>,
    service: Rc<S>,
) {
    let _conn = ctx.gate.connection();
    ctx.metrics.connection_opened();
    let _ = stream.set_nodelay(true);
    if let Some(config) = tls {
        let serve = Box::pin(tls::serve(stream, config, &ctx, service));
        serve.await;
        ctx.metrics.connection_closed();
        return;
    }
    // The protocol loops are boxed: their futures hold a whole request's state (~10 KB), and
    // spawning a future moves it by value, so this one stays small and the big one is
    // written to the heap once instead of copied on every move (~30 K instructions per
    // accepted connection).
    //
    // Each boxed future is made in a statement of its own: a temporary in the statement
    // that awaits stays in this future's layout (rustc keeps its room until the statement
    // ends, after the await), which made this future — all an idle connection holds — as
    // large as the protocol loop it had boxed. Detection is boxed too: it waits with a timer
    // (~0.5 KB, cache-line aligned).
    let detect = Box::pin(crate::h2::detect(&mut stream, ctx.conn.idle_timeout, &ctx.gate));
    match detect.await {
        Detected::Http1(read) => {
            let serve = Box::pin(conn::serve(stream, read, &*service, &ctx.conn, &ctx.gate, &ctx.date, &ctx.metrics));
            serve.await;
        }
        Detected::H2(read) => {
            let settings = ctx.shared.config.h2;
            let timeouts =
                crate::h2::conn::Timeouts { handshake: ctx.conn.header_timeout, idle: ctx.conn.idle_timeout };
            match monoio::io::IntoPollIo::into_poll_io(stream) {
                Ok(io) => {
                    let serve = Box::pin(crate::h2::conn::serve(
                        io,
                        read,
                        service,
                        &settings,
                        timeouts,
                        &ctx.gate,
                        &ctx.metrics,
                    ));
                    serve.await
                }
                Err(e) => crate::log::warn(&format!("h2: cannot switch the connection to poll I/O: {e}")),
            }
        }
        Detected::BadPreface => {
            let refuse = Box::pin(crate::h2::refuse(stream));
            refuse.await
        }
        Detected::Closed => {}
    }
    ctx.metrics.connection_closed();
}

/// A hook that passes a change made on shard `id` (an inhibition, a session's) to every
/// other shard's inbox, wrapped by `wrap`.
fn tell_others<T: Clone + 'static>(id: usize, shared: &Shared, wrap: fn(T) -> ShardMsg) -> crate::router::Tell<T> {
    let others: Vec<flume::Sender<ShardMsg>> =
        shared.inboxes.iter().enumerate().filter(|(i, _)| *i != id).map(|(_, s)| s.clone()).collect();
    Box::new(move |change| {
        for inbox in &others {
            let _ = inbox.send(wrap(change.clone()));
        }
    })
}

async fn inbox_loop(ctx: Rc<ShardCtx>, inbox: flume::Receiver<ShardMsg>) {
    while let Ok(msg) = inbox.recv_async().await {
        match msg {
            ShardMsg::Snapshot(reply) => {
                let mut snap = ctx.metrics.snapshot();
                snap.kv = ctx.kv.stats();
                let _ = reply.send(snap);
            }
            ShardMsg::Registry(reg) => *ctx.registry.borrow_mut() = reg,
            ShardMsg::KvReplica(k) => ctx.kv.install(*k),
            ShardMsg::Busy(model, busy) => ctx.kv.set_busy(model, busy),
            ShardMsg::Inhibit(worker, until) => ctx.router.inhibit_here(worker, until),
            ShardMsg::Session(m) => ctx.sessions.apply(m),
            ShardMsg::Tls(config) => *ctx.tls.borrow_mut() = Some(config),
            ShardMsg::Run(work) => work(&ctx),
            ShardMsg::Shutdown => ctx.gate.close(),
        }
    }
}
