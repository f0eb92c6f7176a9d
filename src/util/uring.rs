//! How every io_uring runtime of the process is built (the shards, the bench client). Called
//! on the thread that will run the runtime: the ring belongs to that thread.
//!
//! A ring's completions are work the kernel does in the owning thread's context. Left at the
//! defaults, every completion that arrives while the thread runs in user space interrupts it
//! (from another CPU, an inter-processor interrupt: a worker's frame, a client's bytes), and
//! every completion for a sleeping thread wakes it on its own, at the sender's expense. With
//! `IORING_SETUP_DEFER_TASKRUN` (Linux 6.1; it needs `SINGLE_ISSUER`, only the owning thread
//! submits, which is how monoio uses a ring) that work waits until the thread asks for
//! completions, when it parks: a burst of frames costs one wake-up and one pass instead of an
//! interrupt each (perf/RESULTS.md, "Deferred completions"). Older kernels get
//! `COOP_TASKRUN` (5.19: no interrupts, wake-ups as before), then the defaults.
//!
//! monoio reaps completions when it parks (`submit_and_wait`, which asks for them); between
//! parks, while tasks are ready, it only submits. Deferred work therefore waits for the ready
//! tasks to run, as completions queue behind ready tasks anyway; no task here re-wakes itself
//! in a loop, which would keep the ring from being reaped.

use std::io;

/// A completion mode: the driver's name with it (as the start-up log shows it) and the
/// set-up flags it adds.
type Mode = (&'static str, fn(&mut io_uring::Builder));

/// A shard's or the bench's io_uring runtime.
pub type Runtime = monoio::Runtime<monoio::time::TimeDriver<monoio::IoUringDriver>>;

/// A shard's or the bench's io_uring runtime: 1,024 entries, timers, and the most economical
/// completion mode the kernel accepts; with the driver's name in that mode.
pub fn runtime() -> io::Result<(Runtime, &'static str)> {
    let modes: [Mode; 3] = [
        ("io_uring (deferred completions)", |b| {
            b.setup_single_issuer().setup_defer_taskrun();
        }),
        ("io_uring (cooperative completions)", |b| {
            b.setup_coop_taskrun();
        }),
        ("io_uring", |_| {}),
    ];
    let mut last = None;
    for (name, set) in modes {
        let mut urb = io_uring::IoUring::builder();
        set(&mut urb);
        match monoio::RuntimeBuilder::<monoio::IoUringDriver>::new()
            .uring_builder(urb)
            .with_entries(1024)
            .enable_timer()
            .build()
        {
            Ok(rt) => return Ok((rt, name)),
            Err(e) => last = Some(e),
        }
    }
    Err(last.unwrap_or_else(|| io::Error::other("no io_uring mode")))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A deferred-completion ring still delivers completions that arrive while the thread is
    /// busy, and while it sleeps: a socket pair, one side written from another thread.
    #[test]
    fn completions_arrive_in_every_mode_the_kernel_gives() {
        let (mut rt, mode) = match runtime() {
            Ok(x) => x,
            Err(e) => panic!("no io_uring runtime on this kernel ({e}); the shards fall back to epoll there"),
        };
        assert!(mode.starts_with("io_uring"), "{mode}");
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let writer = std::thread::spawn(move || {
            use std::io::Write;
            let (mut s, _) = listener.accept().unwrap();
            for i in 0..50u8 {
                s.write_all(&[i]).unwrap();
                std::thread::sleep(std::time::Duration::from_millis(if i % 10 == 0 { 5 } else { 0 }));
            }
        });
        let got = rt.block_on(async move {
            use monoio::io::AsyncReadRent;
            let mut s = monoio::net::TcpStream::connect(addr).await.unwrap();
            let mut got = Vec::new();
            while got.len() < 50 {
                let (res, buf) = s.read(Vec::with_capacity(64)).await;
                assert!(res.unwrap() > 0, "EOF after {} bytes", got.len());
                got.extend_from_slice(&buf);
            }
            got
        });
        writer.join().unwrap();
        assert_eq!(got, (0..50u8).collect::<Vec<_>>());
    }
}
