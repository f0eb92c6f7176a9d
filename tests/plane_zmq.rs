//! The event plane's ZMQ SUB socket against a real libzmq PUB socket (Debian `python3-zmq`,
//! libzmq 4.3): handshake, topic filtering, multipart messages, long frames, a publisher
//! that goes away.

use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use switchyard::ingest::zmq::Sub;

const PUBLISHER: &str = r#"
import sys, threading, time, zmq
ctx = zmq.Context()
s = ctx.socket(zmq.PUB)
port = s.bind_to_random_port("tcp://127.0.0.1")
print(port, flush=True)
stop = threading.Event()
threading.Thread(target=lambda: (sys.stdin.read(), stop.set()), daemon=True).start()
seq = 0
while not stop.is_set():
    big = bytes([seq % 251]) * 100_000
    s.send_multipart([b"kv-events", (7).to_bytes(8, "big"), seq.to_bytes(8, "big"), b"\x01" + big])
    s.send_multipart([b"kv_metrics", (7).to_bytes(8, "big"), seq.to_bytes(8, "big"), b"\x01"])
    seq += 1
    time.sleep(0.005)
s.close(linger=0)
"#;

/// A real libzmq publisher; killed on drop.
struct Publisher {
    child: Child,
    port: u16,
}

impl Publisher {
    fn start() -> Publisher {
        let python = "/usr/bin/python3";
        let ok = Command::new(python).args(["-c", "import zmq"]).status().is_ok_and(|s| s.success());
        assert!(
            ok,
            "{python} cannot import zmq: install it: apt-get install python3-zmq (or bash scripts/install-system.sh)"
        );
        let mut child = Command::new(python)
            .args(["-c", PUBLISHER])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the publisher");
        let mut line = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
        Publisher { child, port: line.trim().parse().expect("the publisher's port") }
    }

    /// Asks the publisher to stop and waits for it.
    fn stop(&mut self) {
        drop(self.child.stdin.take());
        let _ = self.child.wait();
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn subscribes_filters_and_reassembles_against_libzmq() {
    let mut publisher = Publisher::start();
    let endpoint = format!("tcp://127.0.0.1:{}", publisher.port);
    let mut sub = Sub::connect(&endpoint, &[b"kv-events"], Duration::from_secs(5), 1 << 20).unwrap();
    let mut last = None;
    for _ in 0..50 {
        let m = sub.recv().unwrap();
        assert_eq!(m.len(), 4);
        assert_eq!(m[0], b"kv-events", "only the subscribed topic arrives");
        assert_eq!(m[1], 7u64.to_be_bytes());
        let seq = u64::from_be_bytes(m[2].as_slice().try_into().unwrap());
        if let Some(prev) = last {
            assert_eq!(seq, prev + 1, "messages arrive whole and in order");
        }
        last = Some(seq);
        assert_eq!(m[3].len(), 100_001, "a long (8-byte length) frame");
        assert!(m[3][1..].iter().all(|&b| b == (seq % 251) as u8));
    }
    // drain() takes what is readable without blocking.
    std::thread::sleep(Duration::from_millis(50));
    let mut got = Vec::new();
    sub.drain(&mut got).unwrap();
    assert!(!got.is_empty());
    // The publisher goes away: the next receive fails instead of hanging.
    publisher.stop();
    let t0 = Instant::now();
    let err = loop {
        match sub.recv() {
            Ok(_) => assert!(t0.elapsed() < Duration::from_secs(10), "still receiving after the publisher left"),
            Err(e) => break e,
        }
    };
    assert_eq!(err.kind(), std::io::ErrorKind::UnexpectedEof, "{err}");
}

#[test]
fn oversized_frames_and_non_zmtp_peers_are_refused() {
    let publisher = Publisher::start();
    let endpoint = format!("tcp://127.0.0.1:{}", publisher.port);
    let mut sub = Sub::connect(&endpoint, &[b"kv-events"], Duration::from_secs(5), 1000).unwrap();
    let err = sub.recv().unwrap_err();
    assert!(err.to_string().contains("exceeds the limit"), "{err}");
    // An HTTP server is not a publisher.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        if let Ok((mut c, _)) = listener.accept() {
            let _ = c.write_all(&[b'H'; 64]);
            std::thread::sleep(Duration::from_millis(200));
        }
    });
    let e = Sub::connect(&format!("tcp://127.0.0.1:{port}"), &[b""], Duration::from_secs(2), 1000).err().unwrap();
    assert!(e.to_string().contains("not a ZMTP peer"), "{e}");
}
