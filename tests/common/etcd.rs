//! A real etcd for tests: `etcd` on 127.0.0.1 with free ports and a temporary data dir,
//! killed (by its pid) and cleaned up on drop.

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::{Duration, Instant};

use super::free_port;
use switchyard::discovery::etcd::EtcdClient;

/// A running etcd.
pub struct Etcd {
    child: Option<Child>,
    dir: PathBuf,
    client_port: u16,
    peer_port: u16,
}

impl Etcd {
    /// Starts etcd and waits until it answers. Fails the test when the binary is missing.
    pub fn start() -> Etcd {
        static SEQ: AtomicU32 = AtomicU32::new(0);
        let dir = std::env::temp_dir().join(format!(
            "switchyard-etcd-{}-{}",
            std::process::id(),
            SEQ.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("etcd temp dir");
        let mut etcd = Etcd { child: None, dir, client_port: free_port(), peer_port: free_port() };
        etcd.spawn();
        etcd
    }

    /// `http://127.0.0.1:<client port>`.
    pub fn endpoint(&self) -> String {
        format!("http://127.0.0.1:{}", self.client_port)
    }

    pub fn client(&self) -> EtcdClient {
        EtcdClient::new(&self.endpoint()).unwrap()
    }

    /// Kills etcd (its connections drop) and starts it again on the same ports and data.
    pub fn restart(&mut self) {
        self.kill();
        self.spawn();
    }

    /// Kills etcd and waits for it to exit.
    pub fn kill(&mut self) {
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    fn spawn(&mut self) {
        let client = format!("http://127.0.0.1:{}", self.client_port);
        let peer = format!("http://127.0.0.1:{}", self.peer_port);
        let log = std::fs::File::create(self.dir.join("etcd.log")).expect("etcd log file");
        let child = Command::new("etcd")
            .args(["--name", "test", "--data-dir"])
            .arg(self.dir.join("data"))
            .args(["--listen-client-urls", &client, "--advertise-client-urls", &client])
            .args(["--listen-peer-urls", &peer, "--initial-advertise-peer-urls", &peer])
            .args(["--initial-cluster", &format!("test={peer}"), "--log-level", "warn"])
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("etcd log file"))
            .stderr(log)
            .spawn();
        let child = match child {
            Ok(c) => c,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!(
                "the `etcd` binary is not on PATH; install it: apt-get install etcd-server \
                 (or bash scripts/install-system.sh)"
            ),
            Err(e) => panic!("cannot start etcd: {e}"),
        };
        self.child = Some(child);
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if self.client().range_prefix("ready-check/").is_ok() {
                return;
            }
            if let Some(status) = self.child.as_mut().and_then(|c| c.try_wait().ok().flatten()) {
                let log = std::fs::read_to_string(self.dir.join("etcd.log")).unwrap_or_default();
                panic!("etcd exited ({status}) before it was ready:\n{log}");
            }
            assert!(Instant::now() < deadline, "etcd not ready on {} after 20 s", self.endpoint());
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Etcd {
    fn drop(&mut self) {
        self.kill();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
