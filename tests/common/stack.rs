//! A whole frontend for end-to-end tests: an in-process switchyard (two shards) with file
//! discovery and a control thread, in front of one in-tree mock worker registered in a fresh
//! store directory. Dropping it stops everything and removes the store.

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use switchyard::control::{Backend, Control};
use switchyard::shard::Server;
use switchyard::worker::{MockConfig, MockWorker};

pub struct Stack {
    server: Option<Server>,
    control: Option<Control>,
    pub worker: MockWorker,
    /// More workers of the same model ([`Stack::start_many`]).
    pub others: Vec<MockWorker>,
    store: PathBuf,
}

impl Drop for Stack {
    fn drop(&mut self) {
        stop_all(self.control.take(), self.server.take(), &mut self.worker);
        for w in &mut self.others {
            w.stop();
        }
        let _ = std::fs::remove_dir_all(&self.store);
    }
}

/// Stop a frontend's control thread, then the frontend, then its worker.
pub fn stop_all(control: Option<Control>, server: Option<Server>, worker: &mut MockWorker) {
    if let Some(c) = control {
        c.stop();
    }
    if let Some(s) = server {
        s.shutdown();
    }
    worker.stop();
}

impl Stack {
    /// Start the worker (`mock`), register it under a store named after `tag`, start the
    /// frontend with `--discovery-backend file` and `args`/`env`, and wait until both shards
    /// list the model.
    pub fn start(tag: &str, mock: MockConfig, args: &[&str], env: &[(&str, &str)]) -> Stack {
        Stack::start_many(tag, vec![mock], args, env)
    }

    /// As [`Stack::start`] with one worker per configuration (the first is `worker`, the
    /// others `others`), all registered before the frontend starts.
    pub fn start_many(tag: &str, mocks: Vec<MockConfig>, args: &[&str], env: &[(&str, &str)]) -> Stack {
        let store = std::env::temp_dir().join(format!("sy-stack-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&store);
        std::fs::create_dir_all(&store).unwrap();
        let mut workers: Vec<MockWorker> = mocks.into_iter().map(|m| MockWorker::start(m).unwrap()).collect();
        for w in &workers {
            w.register_file(&store).unwrap();
        }
        let worker = workers.remove(0);
        let others = workers;
        let mut all = vec!["--discovery-backend", "file"];
        all.extend_from_slice(args);
        let cfg = Arc::new(super::config(&all, env));
        let server = switchyard::service::start(cfg.clone()).unwrap();
        let control = Control::start(&cfg, &server, Backend::File(store.clone())).unwrap();
        let s = Stack { server: Some(server), control: Some(control), worker, others, store };
        // Over HTTPS the test waits for the model itself, with its own client.
        if !s.server().tls {
            wait_listed(s.addr());
        }
        s
    }

    pub fn addr(&self) -> std::net::SocketAddr {
        self.server().addr
    }

    /// The store directory the worker is registered in.
    pub fn store(&self) -> &std::path::Path {
        &self.store
    }

    /// Shut the frontend down as SIGTERM does (drain, then the grace period) and wait for it.
    pub fn shutdown_server(&mut self) {
        if let Some(s) = self.server.take() {
            s.shutdown();
        }
    }

    pub fn server(&self) -> &Server {
        self.server.as_ref().expect("running")
    }
}

/// Wait until 8 fresh connections in a row (so both shards) list a model.
pub fn wait_listed(addr: std::net::SocketAddr) {
    let t0 = Instant::now();
    let mut streak = 0;
    while streak < 8 {
        let r = super::Client::connect(addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n");
        streak = if r.json()["data"].as_array().is_some_and(|d| !d.is_empty()) { streak + 1 } else { 0 };
        assert!(t0.elapsed() < Duration::from_secs(90), "the model never appeared");
        std::thread::sleep(Duration::from_millis(20));
    }
}
