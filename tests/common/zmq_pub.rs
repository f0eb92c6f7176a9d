//! A real libzmq PUB socket (Debian `python3-zmq`) that publishes multipart messages in a
//! loop every 20 ms, for the event-plane tests.

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};

const PUBLISHER: &str = r#"
import sys, time, zmq
msgs = [[bytes.fromhex(h) for h in m.split(",")] for m in sys.argv[1:]]
s = zmq.Context().socket(zmq.PUB)
print(s.bind_to_random_port("tcp://127.0.0.1"), flush=True)
while True:
    for m in msgs:
        s.send_multipart(m)
    time.sleep(0.02)
"#;

/// The publisher process and its port; killed on drop.
pub struct Publisher(pub Child, pub u16);

impl Publisher {
    /// The SUB endpoint to connect to.
    pub fn endpoint(&self) -> String {
        format!("tcp://127.0.0.1:{}", self.1)
    }
}

impl Drop for Publisher {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Publishes `messages` (each one message: its frames in hex, comma-joined) over and over.
pub fn publish(messages: &[String]) -> Publisher {
    let python = "/usr/bin/python3";
    let ok = Command::new(python).args(["-c", "import zmq"]).status().is_ok_and(|s| s.success());
    assert!(
        ok,
        "{python} cannot import zmq: install it: apt-get install python3-zmq (or bash scripts/install-system.sh)"
    );
    let mut child =
        Command::new(python).arg("-c").arg(PUBLISHER).args(messages).stdout(Stdio::piped()).spawn().unwrap();
    let mut line = String::new();
    BufReader::new(child.stdout.take().unwrap()).read_line(&mut line).unwrap();
    Publisher(child, line.trim().parse().expect("the publisher prints its port"))
}
