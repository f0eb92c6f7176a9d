//! Driving the load: one monoio runtime on the calling thread (io_uring when allowed, else
//! epoll), a connection pool, the closed or open loop, the progress line, and the bench's own
//! CPU use (getrusage around the measured phase).
//!
//! * Closed loop (`--concurrency N`): N tasks, each sending its next request as soon as its
//!   previous answer is complete, over its own keep-alive connection.
//! * Open loop (`--rate R`): a dispatcher sleeps until each Poisson arrival and spawns the
//!   request then, whatever is still in flight; at most `--concurrency` connections are open
//!   (a request beyond that waits for one, and its latency includes the wait).
//!
//! A phase ends after `--requests` requests or when `--duration` has passed (no new request
//! starts after that; those in flight finish or time out). The warm-up phase runs first as a
//! closed loop with the same concurrency (open loop: as many as the connections opened ahead,
//! at most 64), and its results are dropped.
//!
//! Everything runs on one thread: the client does far less per request than the server it
//! measures, and the final table shows how much (CPU-µs per request, % of a core).

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::io::{self, Write as _};
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::client::{connect, exchange, timed_out, Conn};
use super::schedule::Poisson;
use super::stats::{CpuUse, FailKind, Failure, Recorder};

/// How load is offered.
#[derive(Clone, Copy, Debug, PartialEq)]
pub enum Load {
    Closed {
        concurrency: usize,
    },
    /// `max_connections` bounds the connections (and so the requests in flight).
    Open {
        rate: f64,
        max_connections: usize,
    },
}

/// Which I/O driver the runtime uses.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Driver {
    Auto,
    IoUring,
    Epoll,
}

/// Everything a run needs, prepared before it starts.
pub struct Plan {
    pub addr: SocketAddr,
    /// Prepared requests; request `i` sends `requests[i % len]`.
    pub requests: Vec<Bytes>,
    pub stream: bool,
    pub timeout: Duration,
    pub load: Load,
    /// Measured requests at most (`None`: until `duration`).
    pub limit: Option<u64>,
    pub duration: Option<Duration>,
    pub warmup: u64,
    pub progress: bool,
    pub seed: u64,
    pub driver: Driver,
}

/// What a run measured.
pub struct Measured {
    pub rec: Recorder,
    /// Start of the measured phase to its last answer.
    pub wall: Duration,
    pub cpu: CpuUse,
    pub driver: &'static str,
    /// Requests of the warm-up phase that failed.
    pub warmup_failed: u64,
}

/// Run `plan` on a new runtime on this thread.
pub fn run(plan: Plan) -> io::Result<Measured> {
    let driver = plan.driver;
    let (m, name) = block_on(driver, drive(plan))?;
    Ok(Measured { driver: name, ..m })
}

fn block_on<F: Future>(driver: Driver, fut: F) -> io::Result<(F::Output, &'static str)> {
    let uring = if driver == Driver::Epoll {
        None
    } else {
        match crate::util::uring::runtime() {
            Ok((rt, _)) => Some(rt),
            Err(e) if driver == Driver::IoUring => return Err(e),
            Err(_) => None,
        }
    };
    if let Some(mut rt) = uring {
        return Ok((rt.block_on(fut), "io_uring"));
    }
    let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build()?;
    Ok((rt.block_on(fut), "epoll"))
}

/// Connections, shared by the request tasks.
struct Pool {
    addr: SocketAddr,
    idle: RefCell<Vec<Conn>>,
    /// Connections open or being opened.
    open: Cell<usize>,
    cap: usize,
    /// Requests waiting for a connection: they get one (`Some`) or the right to open one.
    waiters: RefCell<VecDeque<flume::Sender<Option<Conn>>>>,
    connect_timeout: Duration,
}

impl Pool {
    async fn acquire(&self) -> Result<Conn, Failure> {
        loop {
            let Some(c) = self.idle.borrow_mut().pop() else { break };
            if !c.closed_while_idle() {
                return Ok(c);
            }
            // The server closed it while it was idle: drop it and free its slot (no request
            // waits while connections are idle), which opens anew below.
            drop(c);
            self.release();
        }
        if self.open.get() < self.cap {
            self.open.set(self.open.get() + 1);
        } else {
            let (tx, rx) = flume::bounded(1);
            self.waiters.borrow_mut().push_back(tx);
            match rx.recv_async().await {
                Ok(Some(c)) => return Ok(c),
                Ok(None) => {} // a slot was handed over: open a connection in it
                Err(_) => return Err(Failure::new(FailKind::Connect, "the connection pool closed")),
            }
        }
        match monoio::time::timeout(self.connect_timeout, connect(self.addr)).await {
            Ok(Ok(c)) => Ok(c),
            Ok(Err(e)) => {
                self.release();
                Err(Failure::new(FailKind::Connect, format!("connect to {}: {e}", self.addr)))
            }
            Err(_) => {
                self.release();
                Err(Failure::new(FailKind::Connect, format!("connect to {} timed out", self.addr)))
            }
        }
    }

    fn put_back(&self, mut c: Conn) {
        c.park();
        let mut c = Some(c);
        while let Some(w) = self.waiters.borrow_mut().pop_front() {
            match w.send(c.take()) {
                Ok(()) => return,
                Err(flume::SendError(back)) => c = back,
            }
        }
        if let Some(c) = c {
            self.idle.borrow_mut().push(c);
        }
    }

    /// A connection was closed: hand its slot to a waiter, or free it.
    fn release(&self) {
        while let Some(w) = self.waiters.borrow_mut().pop_front() {
            if w.send(None).is_ok() {
                return;
            }
        }
        self.open.set(self.open.get().saturating_sub(1));
    }
}

/// One phase's shared state.
struct Phase {
    pool: Rc<Pool>,
    requests: Rc<Vec<Bytes>>,
    stream: bool,
    timeout: Duration,
    /// Index of the next request; the phase issues `first..end`.
    next: Cell<u64>,
    end: Option<u64>,
    stop_at: Option<Instant>,
    in_flight: Cell<usize>,
    rec: RefCell<Recorder>,
}

impl Phase {
    /// The next request index, unless the phase is over.
    fn ticket(&self, now: Instant) -> Option<u64> {
        let i = self.next.get();
        if self.end.is_some_and(|e| i >= e) || self.stop_at.is_some_and(|s| now >= s) {
            return None;
        }
        self.next.set(i + 1);
        Some(i)
    }

    /// Request `i`, started (or due) at `start`. The caller has counted it in `in_flight`
    /// already (before spawning it, so the end of the phase cannot miss it).
    async fn one(&self, i: u64, start: Instant) {
        let req = self.requests[(i % self.requests.len() as u64) as usize].clone();
        let outcome = match self.pool.acquire().await {
            Err(f) => Err(f),
            Ok(mut conn) => {
                let left = (start + self.timeout).saturating_duration_since(Instant::now());
                match monoio::time::timeout(left, exchange(&mut conn, req, self.stream, start)).await {
                    Ok((o, true)) => {
                        self.pool.put_back(conn);
                        o
                    }
                    Ok((o, false)) => {
                        drop(conn);
                        self.pool.release();
                        o
                    }
                    Err(_) => {
                        drop(conn);
                        self.pool.release();
                        Err(timed_out(self.timeout))
                    }
                }
            }
        };
        self.rec.borrow_mut().record(&outcome);
        self.in_flight.set(self.in_flight.get() - 1);
    }
}

async fn drive(plan: Plan) -> Measured {
    let (concurrency, cap) = match plan.load {
        Load::Closed { concurrency } => (concurrency, concurrency),
        Load::Open { max_connections, .. } => (max_connections.min(64), max_connections),
    };
    let pool = Rc::new(Pool {
        addr: plan.addr,
        idle: RefCell::new(Vec::new()),
        open: Cell::new(0),
        cap,
        waiters: RefCell::new(VecDeque::new()),
        connect_timeout: plan.timeout.min(Duration::from_secs(10)),
    });
    // Open the closed loop's connections before anything is timed.
    for _ in 0..concurrency.min(cap) {
        if pool.open.get() >= cap {
            break;
        }
        pool.open.set(pool.open.get() + 1);
        match connect(plan.addr).await {
            Ok(c) => pool.idle.borrow_mut().push(c),
            Err(_) => pool.release(),
        }
    }
    let requests = Rc::new(plan.requests);
    let phase = |first: u64, end: Option<u64>, stop_at: Option<Instant>| {
        Rc::new(Phase {
            pool: pool.clone(),
            requests: requests.clone(),
            stream: plan.stream,
            timeout: plan.timeout,
            next: Cell::new(first),
            end,
            stop_at,
            in_flight: Cell::new(0),
            rec: RefCell::new(Recorder::default()),
        })
    };
    let mut warmup_failed = 0;
    if plan.warmup > 0 {
        let w = phase(0, Some(plan.warmup), None);
        closed_loop(&w, concurrency.max(1)).await;
        warmup_failed = w.rec.borrow().failed();
    }
    let t0 = Instant::now();
    let measured = phase(plan.warmup, plan.limit.map(|n| plan.warmup + n), plan.duration.map(|d| t0 + d));
    let done = Rc::new(Cell::new(false));
    if plan.progress {
        monoio::spawn(progress(measured.clone(), done.clone(), t0));
    }
    let cpu0 = rusage();
    match plan.load {
        Load::Closed { concurrency } => closed_loop(&measured, concurrency).await,
        Load::Open { rate, .. } => open_loop(&measured, rate, plan.seed, t0).await,
    }
    let wall = t0.elapsed();
    let cpu1 = rusage();
    done.set(true);
    if plan.progress && stderr_is_tty() {
        eprintln!(); // end the progress line
    }
    let rec = std::mem::take(&mut *measured.rec.borrow_mut());
    let finished = (rec.ok + rec.failed()).max(1) as f64;
    let (user_s, sys_s) = (cpu1.0 - cpu0.0, cpu1.1 - cpu0.1);
    let cpu = CpuUse {
        user_s,
        sys_s,
        us_per_request: (user_s + sys_s) * 1e6 / finished,
        percent_of_core: (user_s + sys_s) * 100.0 / wall.as_secs_f64().max(1e-9),
    };
    Measured { rec, wall, cpu, driver: "", warmup_failed }
}

async fn closed_loop(phase: &Rc<Phase>, concurrency: usize) {
    let tasks: Vec<_> = (0..concurrency)
        .map(|_| {
            let p = phase.clone();
            monoio::spawn(async move {
                while let Some(i) = p.ticket(Instant::now()) {
                    p.in_flight.set(p.in_flight.get() + 1);
                    p.one(i, Instant::now()).await;
                }
            })
        })
        .collect();
    for t in tasks {
        t.await;
    }
}

async fn open_loop(phase: &Rc<Phase>, rate: f64, seed: u64, t0: Instant) {
    let mut arrivals = Poisson::new(rate, seed);
    loop {
        let due = t0 + arrivals.next_arrival();
        let Some(i) = phase.ticket(due) else { break };
        monoio::time::sleep_until(due.into()).await;
        phase.in_flight.set(phase.in_flight.get() + 1);
        let p = phase.clone();
        monoio::spawn(async move { p.one(i, due).await });
    }
    // Wait for the stragglers (each is bounded by --timeout).
    while phase.in_flight.get() > 0 {
        monoio::time::sleep(Duration::from_millis(1)).await;
    }
}

/// Once a second on stderr: elapsed, answers, failures, in flight, rate, median latency.
async fn progress(phase: Rc<Phase>, done: Rc<Cell<bool>>, t0: Instant) {
    let tty = stderr_is_tty();
    let mut last = 0u64;
    loop {
        monoio::time::sleep(Duration::from_secs(1)).await;
        if done.get() {
            return;
        }
        let (ok, failed, p50) = {
            let r = phase.rec.borrow();
            (r.ok, r.failed(), r.e2e_p50_ms())
        };
        let line = format!(
            "[{:>4.0} s] {ok} ok, {failed} failed, {} in flight, {} req/s, e2e p50 {p50:.2} ms",
            t0.elapsed().as_secs_f64(),
            phase.in_flight.get(),
            ok + failed - last
        );
        last = ok + failed;
        let mut err = io::stderr().lock();
        let _ = if tty { write!(err, "\r\x1b[K{line}") } else { writeln!(err, "{line}") };
        let _ = err.flush();
    }
}

fn stderr_is_tty() -> bool {
    // SAFETY: isatty only inspects the descriptor.
    unsafe { libc::isatty(2) == 1 }
}

/// User and system CPU seconds of this process so far.
fn rusage() -> (f64, f64) {
    // SAFETY: getrusage fills the zeroed struct it is given and reads nothing else.
    let ru = unsafe {
        let mut ru: libc::rusage = std::mem::zeroed();
        libc::getrusage(libc::RUSAGE_SELF, &mut ru);
        ru
    };
    let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
    (secs(ru.ru_utime), secs(ru.ru_stime))
}
