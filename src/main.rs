//! `switchyard`: parse the configuration, start the shards, wait for SIGTERM/SIGINT, drain.
//! Two subcommands run something else instead: `switchyard mock-worker …` (the in-tree mock
//! worker, [`switchyard::worker::cli`]) and `switchyard bench …` (the latency benchmark
//! client, [`switchyard::bench`]). With `-i` / `--interactive` the shards listen nowhere and
//! the main thread runs a text chat in the terminal instead ([`switchyard::interactive`]),
//! the signals being waited for on a thread of their own.
//!
//! The main thread is the control thread: it blocks the termination signals before any shard
//! starts (so every thread inherits the mask and only `sigtimedwait` here sees them), starts
//! the shards, then sleeps in `sigtimedwait`, waking once a second to hand memory the shards
//! freed back to the system. On a signal it asks every shard to drain and exits 0 once
//! they are done (each shard bounds its drain by `DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS`).

use std::sync::Arc;

use switchyard::config::{self, Action, Discovery};
use switchyard::control::{Backend, Control};
use switchyard::discovery::announce::{Announce, Announcer, Channel, ServedEndpoint, Store};
use switchyard::ingest::peers::{SyncOut, SyncSetup};
use switchyard::log;

#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args.first().map(String::as_str) {
        Some("mock-worker") => {
            mock_worker(&args[1..]);
            return;
        }
        Some("bench") => std::process::exit(switchyard::bench::main(&args[1..])),
        _ => {}
    }
    let (action, cfg, warnings) = match config::from_process() {
        Ok(x) => x,
        Err(e) => {
            eprintln!("switchyard: error: {}", e.message);
            std::process::exit(e.exit_code);
        }
    };
    match action {
        Action::Help => {
            print!("{}", config::help::render());
            return;
        }
        Action::Version => {
            println!("switchyard {}", env!("CARGO_PKG_VERSION"));
            return;
        }
        Action::Run => {}
    }
    let cfg = Arc::new(cfg.expect("a Run action carries a config"));
    for w in &warnings {
        log::warn(w);
    }
    if let Err(e) = cfg.write_dump() {
        log::error(&format!("failed to dump config to {:?}: {e}", cfg.dump_config_to));
    }

    raise_open_files_limit();
    // Before any thread starts: the allocator's arena stays on ordinary pages.
    switchyard::util::alloc::without_huge_pages();
    // Before any thread starts: fastokens encodes on its caller only.
    if cfg.tokenizer.backend == switchyard::tokenize::backend::TokenizerBackend::Fastokens {
        switchyard::tokenize::backend::keep_on_caller();
    }
    // With HTTPS, SIGHUP reloads the certificate instead of ending the process; in a terminal
    // session (no HTTPS there) it ends the session cleanly, as a closed terminal should.
    let signals = block_termination_signals(cfg.tls.is_some() || cfg.interactive);
    let server = match switchyard::service::start(cfg.clone()) {
        Ok(s) => s,
        Err(e) => {
            eprintln!("switchyard: error: {e}");
            std::process::exit(1);
        }
    };
    let driver = server.drivers.first().copied().unwrap_or("?");
    match server.listening {
        true => log::info(&format!(
            "listening on {}://{} with {} shard(s), io driver {driver}",
            if server.tls { "https" } else { "http" },
            server.addr,
            server.drivers.len(),
        )),
        false => log::info(&format!(
            "interactive: text chat in the terminal, no HTTP listener; {} shard(s), io driver {driver}",
            server.drivers.len()
        )),
    }
    let mut embedded = None;
    let backend = match cfg.discovery {
        Discovery::File => {
            let root = match std::env::var_os("DYN_FILE_KV") {
                Some(root) => root.into(),
                None => switchyard::discovery::file::default_root(std::env::var_os("TMPDIR").map(Into::into)),
            };
            log::info(&format!("discovery: file store {}", root.display()));
            Some(Backend::File(root))
        }
        Discovery::Etcd => {
            let endpoints = std::env::var("ETCD_ENDPOINTS")
                .unwrap_or_else(|_| switchyard::discovery::etcd::DEFAULT_ENDPOINTS.to_string());
            match switchyard::discovery::etcd::EtcdView::start(&endpoints) {
                Ok(view) => {
                    log::info(&format!("discovery: etcd at {endpoints}"));
                    Some(Backend::Etcd(Box::new(view)))
                }
                Err(e) => stop_starting(
                    format!(
                        "cannot reach etcd at {endpoints} (ETCD_ENDPOINTS): {e}\n\
                         (no etcd? try --discovery-backend mem --embedded-model-path DIR for in-process workers)"
                    ),
                    || server.shutdown(),
                ),
            }
        }
        Discovery::Mem => {
            let e = cfg.embedded.as_ref().expect("validated: mem has embedded workers");
            match switchyard::worker::embedded::start(e) {
                Ok(w) => {
                    log::info(&format!(
                        "discovery: in-process, {} embedded mock worker(s) serving model {:?} from {}",
                        w.workers.len(),
                        w.model,
                        e.model_path.display()
                    ));
                    let store = w.store.clone();
                    embedded = Some(w);
                    Some(Backend::Mem(store))
                }
                Err(e) => stop_starting(format!("cannot start the embedded workers: {e}"), || server.shutdown()),
            }
        }
        Discovery::Kubernetes => {
            match switchyard::discovery::kube::KubeSettings::from_env(&|k| std::env::var(k).ok()) {
                Ok(k) => {
                    log::info(&format!(
                        "discovery: kubernetes at {:?}, pod {} ({}) in namespace {}, {:?} mode",
                        k.cluster, k.pod.name, k.pod.uid, k.pod.namespace, k.mode
                    ));
                    if let Err(e) = k.clear_stale_metadata() {
                        stop_starting(format!("kubernetes discovery: {e}"), || server.shutdown());
                    }
                    Some(Backend::Kube(Box::new(k)))
                }
                Err(e) => stop_starting(format!("kubernetes discovery: {e}"), || server.shutdown()),
            }
        }
    };
    // --router-replica-sync: the publisher of this process's bookings, and its discovery record.
    let kv_mode = cfg.router_mode == switchyard::config::settings::RouterMode::Kv;
    let (sync, channel) = match replica_sync(&cfg, kv_mode) {
        Ok(x) => x,
        Err(e) => stop_starting(format!("--router-replica-sync: {e}"), || server.shutdown()),
    };
    // --router-mode kv: one index replica per shard, fed by the event-ingest thread (and one
    // for the served indexer under --serve-indexer). Another mode with a busy threshold: the
    // same thread follows only the workers' load reports (`kv_metrics`), which the shards
    // read to leave busy workers out.
    let mut served_replica = None;
    let ingest = if kv_mode || cfg.kv_busy.any() {
        let serve = kv_mode && cfg.serve_indexer;
        match switchyard::ingest::Ingest::start_serving(
            server.drivers.len(),
            cfg.kv_approximate(),
            cfg.kv_predicted_ttl,
            sync,
            serve,
        ) {
            Ok((i, installs, extra)) => {
                server.install_kv(installs);
                served_replica = extra;
                Some(i)
            }
            Err(e) => stop_starting(format!("cannot start the KV event-ingest thread: {e}"), || server.shutdown()),
        }
    } else {
        None
    };
    // --serve-indexer: the kv_indexer_query listener, on DYN_TCP_RPC_HOST:DYN_TCP_RPC_PORT.
    let served = match served_replica.map(serve_indexer).transpose() {
        Ok(s) => s,
        Err(e) => stop_starting(format!("--serve-indexer: {e}"), || server.shutdown()),
    };
    let mut records = Vec::new();
    records.extend(channel.map(Announce::Channel));
    if let Some(s) = &served {
        records.push(Announce::Endpoint(ServedEndpoint {
            endpoint: switchyard::indexer::KV_INDEXER_QUERY_ENDPOINT,
            instance_id: switchyard::ingest::random_id(),
            address: s.address().to_owned(),
        }));
    }
    // File and etcd stores; the in-process store has no other router to read them.
    let store = match backend.as_ref() {
        Some(Backend::File(root)) => Some(Store::File(root.clone())),
        Some(Backend::Etcd(view)) => Some(Store::Etcd(view.client().clone(), view.lease_id())),
        _ => None,
    };
    let announcer = match store.filter(|_| !records.is_empty()).map(|s| Announcer::start(s, records)).transpose() {
        Ok(a) => a,
        Err(e) => stop_starting(format!("cannot start the discovery announcer: {e}"), || server.shutdown()),
    };
    let kv = ingest.as_ref().map(|i| i.sender());
    let announce = announcer.as_ref().map(|a| a.sender());
    let mut taps: Vec<_> = served.as_ref().map(|s| s.registry_sender()).into_iter().collect();
    // --interactive: the terminal learns the models from every registry the shards get.
    let terminal = cfg.interactive.then(|| {
        let (tx, rx) = flume::unbounded();
        taps.push(tx);
        rx
    });
    let control = match backend.map(|b| Control::start_announcing(&cfg, &server, b, kv, announce, taps)).transpose() {
        Ok(c) => c,
        Err(e) => stop_starting(format!("cannot start discovery: {e}"), || server.shutdown()),
    };

    // HTTPS: the certificate is rebuilt when its files change or on SIGHUP.
    let reloader = match &cfg.tls {
        Some(files) if server.listening => {
            match switchyard::tls::reload::Reloader::start(files.clone(), server.tls_publisher()) {
                Ok(r) => Some(r),
                Err(e) => stop_starting(format!("cannot start the TLS reload thread: {e}"), || server.shutdown()),
            }
        }
        _ => None,
    };
    let (sig, code) = match terminal {
        Some(registry) => {
            // The terminal session on this thread; the signals, waited for on another one,
            // end it as they stop the server.
            let end = switchyard::interactive::run(&server, &cfg, registry, move || wait_for(&signals));
            let code = end.exit_code();
            match end {
                switchyard::interactive::End::Signal(sig) => (Some(sig), code),
                _ => (None, code),
            }
        }
        None => loop {
            match (wait_for(&signals), &reloader) {
                (libc::SIGHUP, Some(r)) => r.reload_now(),
                (sig, _) => break (Some(sig), 0),
            }
        },
    };
    drop(reloader);
    let grace = cfg.graceful_shutdown.as_secs_f64();
    match sig {
        Some(sig) => log::info(&format!("signal {sig} received: draining (grace {grace}s)")),
        None => log::info(&format!("the terminal session ended: draining (grace {grace}s)")),
    }
    // Drain first: discovery keeps serving snapshots to the requests still in flight.
    server.shutdown();
    if let Some(c) = control {
        c.stop();
    }
    drop(embedded);
    drop(announcer);
    drop(served);
    drop(ingest);
    log::info("stopped");
    if code != 0 {
        std::process::exit(code);
    }
}

/// Start-up failed: say why, stop what already runs (`shutdown`), exit 1.
fn stop_starting(why: String, shutdown: impl FnOnce()) -> ! {
    eprintln!("switchyard: error: {why}");
    shutdown();
    std::process::exit(1);
}

/// The ZMQ publisher of `--router-replica-sync` (bound on `DYN_EVENT_PLANE_HOST`, default
/// 127.0.0.1; 1.6.1 binds 0.0.0.0 and only advertises that host) and the event channel
/// record that names it.
fn replica_sync(
    cfg: &switchyard::config::Config,
    kv_mode: bool,
) -> std::io::Result<(Option<SyncSetup>, Option<Channel>)> {
    if !kv_mode || !cfg.router_replica_sync {
        return Ok((None, None));
    }
    let host = std::env::var("DYN_EVENT_PLANE_HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    let ip: std::net::IpAddr =
        host.parse().map_err(|_| std::io::Error::other(format!("DYN_EVENT_PLANE_HOST={host} is not an IP address")))?;
    let socket = switchyard::ingest::zmq_pub::Pub::bind(std::net::SocketAddr::new(ip, 0))?;
    let endpoint = format!("tcp://{}", socket.local_addr()?);
    // JSON-safe, as 1.6.1's publisher ids.
    let publisher_id = switchyard::ingest::random_id() & ((1 << 53) - 1);
    let channel = Channel { topic: "active_sequences_events", publisher_id, endpoint: endpoint.clone() };
    log::info(&format!("replica sync: publishing active_sequences_events on {endpoint} (publisher {publisher_id:x})"));
    Ok((Some((SyncOut::new(socket, publisher_id), endpoint)), Some(channel)))
}

/// The served indexer's listener: `DYN_TCP_RPC_HOST` (default 127.0.0.1; 1.6.1 binds every
/// address and advertises the host's) and `DYN_TCP_RPC_PORT` (default 0: any).
fn serve_indexer(replica: switchyard::indexer::IndexReplica) -> std::io::Result<switchyard::indexer::ServedIndexer> {
    let host = std::env::var("DYN_TCP_RPC_HOST").unwrap_or_else(|_| "127.0.0.1".to_string());
    let port = match std::env::var("DYN_TCP_RPC_PORT") {
        Ok(p) => p.parse().map_err(|_| std::io::Error::other(format!("DYN_TCP_RPC_PORT={p} is not a port")))?,
        Err(_) => 0,
    };
    switchyard::indexer::ServedIndexer::start(replica, &host, port)
}

/// `switchyard mock-worker …`: the in-tree mock worker as a process, until a signal.
fn mock_worker(args: &[String]) {
    let parsed = match switchyard::worker::cli::parse(args, &|k| std::env::var(k).ok()) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("switchyard mock-worker: {e}");
            std::process::exit(2);
        }
    };
    let signals = block_termination_signals(false);
    let store = parsed.backend.to_string();
    let worker = match switchyard::worker::cli::start(parsed) {
        Ok(w) => w,
        Err(e) => {
            eprintln!("switchyard mock-worker: {e}");
            std::process::exit(1);
        }
    };
    log::info(&format!(
        "mock worker for {} listening on {} (registered in {})",
        worker.config().model_name,
        worker.addr(),
        store
    ));
    wait_for(&signals);
    drop(worker);
}

/// Raise the soft limit on open descriptors to the hard one: every client connection, worker
/// connection and call-back stream is a descriptor, and the usual soft default (1,024) would
/// refuse connections long before `--max-connections-per-shard`.
fn raise_open_files_limit() {
    // SAFETY: rlimit is plain data filled in by getrlimit; setrlimit only reads it.
    unsafe {
        let mut lim: libc::rlimit = std::mem::zeroed();
        if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 && lim.rlim_cur < lim.rlim_max {
            lim.rlim_cur = lim.rlim_max;
            if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                log::warn("cannot raise the open files limit (RLIMIT_NOFILE)");
            }
        }
    }
}

/// Block SIGTERM and SIGINT (and SIGHUP when `hup`) in this thread, and so in every thread
/// spawned later.
fn block_termination_signals(hup: bool) -> libc::sigset_t {
    // SAFETY: sigset_t is plain data; sigemptyset/sigaddset initialise it, and
    // pthread_sigmask only reads it. No other thread exists yet.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        if hup {
            libc::sigaddset(&mut set, libc::SIGHUP);
        }
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

/// Sleep until one of `set`'s signals arrives; returns its number. Once a second meanwhile,
/// memory the shards freed goes back to the system ([`switchyard::util::alloc::give_back_due`]):
/// a shard that went quiet does not call into the allocator, which would otherwise keep it.
fn wait_for(set: &libc::sigset_t) -> i32 {
    let second = libc::timespec { tv_sec: 1, tv_nsec: 0 };
    loop {
        // SAFETY: `set` was initialised by block_termination_signals; a null `siginfo` is
        // allowed and `second` outlives the call.
        let sig = unsafe { libc::sigtimedwait(set, std::ptr::null_mut(), &second) };
        if sig > 0 {
            return sig;
        }
        // EAGAIN: the second passed (EINTR: woken early); either way, a look at the allocator.
        switchyard::util::alloc::give_back_due();
    }
}
