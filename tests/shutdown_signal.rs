//! The real binary under SIGTERM/SIGINT: it drains a request in flight, exits 0, and does not
//! wait past the grace period for a request that never completes.

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

fn spawn(driver: &str, grace_secs: &str) -> (Child, SocketAddr) {
    let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
        .args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--io-driver", driver])
        .args(["--discovery-backend", "file"])
        .env("DYN_FILE_KV", std::env::temp_dir().join(format!("sy-shutdown-{}-{driver}", std::process::id())))
        .env("DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS", grace_secs)
        .stderr(Stdio::piped())
        .spawn()
        .expect("start switchyard");
    let stderr = child.stderr.take().unwrap();
    let mut lines = BufReader::new(stderr).lines();
    let addr = loop {
        let line = lines.next().expect("switchyard printed its address").unwrap();
        if let Some(rest) = line.split("listening on http://").nth(1) {
            break rest.split_whitespace().next().unwrap().parse().unwrap();
        }
    };
    // Keep draining stderr so the child never blocks on a full pipe.
    std::thread::spawn(move || for _ in lines {});
    (child, addr)
}

fn signal(child: &Child, sig: i32) {
    // SAFETY: kill(2) with the pid of a child we own and a valid signal number.
    let rc = unsafe { libc::kill(child.id() as i32, sig) };
    assert_eq!(rc, 0);
}

fn wait_exit(child: &mut Child, limit: Duration) -> (Option<i32>, Duration) {
    let t0 = Instant::now();
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return (status.code(), t0.elapsed());
        }
        assert!(t0.elapsed() < limit, "switchyard did not exit within {limit:?}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn drains_in_flight_then_exits_zero(driver: &str, sig: i32) {
    let (mut child, addr) = spawn(driver, "5");
    let mut busy = TcpStream::connect(addr).unwrap();
    busy.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    busy.write_all(
        b"POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 27\r\n\r\n{\"mo",
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    signal(&child, sig);
    std::thread::sleep(Duration::from_millis(300));
    busy.write_all(b"del\":\"m\",\"prompt\":\"hi\"}").unwrap();
    let mut resp = String::new();
    busy.read_to_string(&mut resp).unwrap();
    assert!(resp.starts_with("HTTP/1.1 404 Not Found\r\n"), "{resp}");
    assert!(resp.contains("connection: close\r\n") && resp.ends_with("\"code\":404}}"), "{resp}");
    let (code, took) = wait_exit(&mut child, Duration::from_secs(5));
    assert_eq!(code, Some(0));
    assert!(took < Duration::from_secs(2), "exited as soon as the request was done ({took:?})");
}

fn grace_period_bounds_the_drain(driver: &str) {
    let (mut child, addr) = spawn(driver, "1");
    let mut stuck = TcpStream::connect(addr).unwrap();
    stuck
        .write_all(b"POST /v1/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{")
        .unwrap();
    std::thread::sleep(Duration::from_millis(100));
    let t0 = Instant::now();
    signal(&child, libc::SIGTERM);
    let (code, _) = wait_exit(&mut child, Duration::from_secs(5));
    let took = t0.elapsed();
    assert_eq!(code, Some(0));
    assert!(took >= Duration::from_millis(900) && took < Duration::from_secs(3), "{took:?}");
}

#[test]
fn sigterm_io_uring() {
    drains_in_flight_then_exits_zero("io-uring", libc::SIGTERM);
}
#[test]
fn sigterm_epoll() {
    drains_in_flight_then_exits_zero("epoll", libc::SIGTERM);
}
#[test]
fn sigint_io_uring() {
    drains_in_flight_then_exits_zero("io-uring", libc::SIGINT);
}
#[test]
fn grace_io_uring() {
    grace_period_bounds_the_drain("io-uring");
}
#[test]
fn grace_epoll() {
    grace_period_bounds_the_drain("epoll");
}
