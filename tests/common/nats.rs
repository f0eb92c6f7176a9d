//! A real NATS server for tests: Debian's `nats-server` on 127.0.0.1 with a free port,
//! killed (by its pid) on drop, so also when a test panics.

use std::io::{BufRead, BufReader, Write};
use std::net::TcpStream;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use super::free_port;

/// A running `nats-server`.
pub struct NatsServer {
    child: Option<Child>,
    port: u16,
    /// Extra arguments (TLS).
    extra: Vec<String>,
}

impl NatsServer {
    /// Starts the server and waits until it greets. Fails the test when the binary is missing.
    pub fn start() -> NatsServer {
        let mut server = NatsServer { child: None, port: free_port(), extra: Vec::new() };
        server.spawn();
        server
    }

    /// A server that requires TLS on its client port: certificate `cert`/`key` (PEM files),
    /// and with `client_ca` a client certificate signed by that CA (`--tlsverify`).
    pub fn start_tls(cert: &str, key: &str, client_ca: Option<&str>) -> NatsServer {
        let mut extra: Vec<String> = ["--tls", "--tlscert", cert, "--tlskey", key].map(String::from).to_vec();
        if let Some(ca) = client_ca {
            extra.extend(["--tlsverify", "--tlscacert", ca].map(String::from));
        }
        let mut server = NatsServer { child: None, port: free_port(), extra };
        server.spawn();
        server
    }

    /// `nats://127.0.0.1:<port>`.
    pub fn url(&self) -> String {
        format!("nats://127.0.0.1:{}", self.port)
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    /// Kills the server and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Kills the server and starts it again on the same port.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    fn spawn(&mut self) {
        let child = Command::new("nats-server")
            .args(["-a", "127.0.0.1", "-p", &self.port.to_string()])
            .args(&self.extra)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "the `nats-server` binary is not on PATH; install it: apt-get install nats-server \
                 (or bash scripts/install-system.sh)"
            ),
            Err(e) => panic!("cannot start nats-server: {e}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        while !self.greets() {
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                panic!("nats-server exited ({status}) before it was ready on port {}", self.port);
            }
            assert!(Instant::now() < deadline, "nats-server not ready on port {} after 20 s", self.port);
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl NatsServer {
    /// A plain server takes a publisher; a TLS one at least says `INFO`.
    fn greets(&self) -> bool {
        if self.extra.is_empty() {
            return Publisher::connect(self.port).is_ok();
        }
        let Ok(s) = TcpStream::connect(("127.0.0.1", self.port)) else { return false };
        let _ = s.set_read_timeout(Some(Duration::from_secs(1)));
        let mut line = String::new();
        BufReader::new(s).read_line(&mut line).is_ok() && line.starts_with("INFO ")
    }
}

impl Drop for NatsServer {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A publisher speaking the NATS protocol by hand (`PUB`, `HPUB`), independent of the client
/// under test.
pub struct Publisher {
    stream: TcpStream,
    reader: BufReader<TcpStream>,
}

impl Publisher {
    /// Connects and completes the handshake (INFO, CONNECT with headers, PING/PONG).
    pub fn connect(port: u16) -> std::io::Result<Publisher> {
        let stream = TcpStream::connect(("127.0.0.1", port))?;
        stream.set_read_timeout(Some(Duration::from_secs(5)))?;
        let mut p = Publisher { reader: BufReader::new(stream.try_clone()?), stream };
        let info = p.line()?;
        if !info.starts_with("INFO ") {
            return Err(std::io::Error::other(format!("not a NATS greeting: {info}")));
        }
        p.stream.write_all(b"CONNECT {\"verbose\":false,\"pedantic\":false,\"headers\":true}\r\n")?;
        p.flush()?;
        Ok(p)
    }

    fn line(&mut self) -> std::io::Result<String> {
        let mut line = String::new();
        if self.reader.read_line(&mut line)? == 0 {
            return Err(std::io::ErrorKind::UnexpectedEof.into());
        }
        Ok(line)
    }

    /// `PUB subject <len>` + payload.
    pub fn publish(&mut self, subject: &str, payload: &[u8]) {
        let mut m = format!("PUB {subject} {}\r\n", payload.len()).into_bytes();
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\n");
        self.stream.write_all(&m).expect("PUB");
    }

    /// `HPUB subject <header len> <total len>` + headers + payload.
    pub fn publish_with_headers(&mut self, subject: &str, headers: &[u8], payload: &[u8]) {
        let total = headers.len() + payload.len();
        let mut m = format!("HPUB {subject} {} {total}\r\n", headers.len()).into_bytes();
        m.extend_from_slice(headers);
        m.extend_from_slice(payload);
        m.extend_from_slice(b"\r\n");
        self.stream.write_all(&m).expect("HPUB");
    }

    /// Waits until the server has processed everything sent so far (PING → PONG).
    pub fn flush(&mut self) -> std::io::Result<()> {
        self.stream.write_all(b"PING\r\n")?;
        loop {
            let line = self.line()?;
            match line.trim_end() {
                "PONG" => return Ok(()),
                "PING" => self.stream.write_all(b"PONG\r\n")?,
                l if l.starts_with("-ERR") => return Err(std::io::Error::other(l.to_string())),
                _ => {}
            }
        }
    }
}

/// Waits up to `ms` for the subscriber's socket to become readable.
pub fn wait_readable(sub: &switchyard::ingest::nats::Sub, ms: i32) {
    let mut fd = libc::pollfd { fd: std::os::fd::AsRawFd::as_raw_fd(sub.stream()), events: libc::POLLIN, revents: 0 };
    // SAFETY: `fd` is one valid, initialised pollfd that outlives the call; nfds is 1.
    unsafe { libc::poll(&mut fd, 1, ms) };
}

/// Polls and drains until `n` messages arrived (5 s at most).
pub fn collect(sub: &mut switchyard::ingest::nats::Sub, n: usize) -> Vec<switchyard::ingest::nats::NatsMsg> {
    let mut got = Vec::new();
    let deadline = Instant::now() + Duration::from_secs(5);
    sub.drain(&mut got).unwrap();
    while got.len() < n {
        assert!(Instant::now() < deadline, "{} of {n} messages after 5 s", got.len());
        wait_readable(sub, 100);
        sub.drain(&mut got).unwrap();
    }
    assert_eq!(got.len(), n, "more messages than expected: {:?}", &got[n..]);
    got
}
