//! The embedded default (`--discovery-backend mem`): in-process mock workers serving a real
//! model directory, registered in an in-process [`MemStore`] that the control thread
//! watches like any discovery store.
//!
//! The workers are the in-tree mock worker ([`crate::worker`]): each listens on its own
//! loopback port and speaks Dynamo's TCP request plane, so a request takes exactly the way it
//! takes to a real worker — template, tokenizer, router, request plane, call-back stream,
//! detokenizer. They answer every request with the same scripted sentence (tokenized with
//! the model's own tokenizer), so what comes back reads as text; a request with `ignore_eos`
//! and `max_tokens` gets exactly `max_tokens` tokens (the sentence repeated). With
//! `--embedded-fast` they add no delay at all (for measuring the frontend with
//! `switchyard bench`); otherwise the mock worker's default 10 ms TTFT and 1 ms ITL apply.

use std::io;

use crate::config::Embedded;
use crate::discovery::mem::MemStore;
use crate::tokenize::ModelFiles;
use crate::worker::{MockConfig, MockWorker};

/// What the embedded workers say.
pub const ANSWER: &str = "Hello! This answer comes from one of switchyard's embedded mock workers. \
Start switchyard with --discovery-backend etcd or file to serve real Dynamo workers.";

/// The running embedded workers; dropping them deregisters and stops them.
pub struct Workers {
    pub store: MemStore,
    pub workers: Vec<MockWorker>,
    /// The name the model is served under.
    pub model: String,
}

/// The served name of a model directory: its last path component.
pub fn model_name(cfg: &Embedded) -> String {
    cfg.model_path.file_name().map_or_else(|| "model".to_string(), |n| n.to_string_lossy().into_owned())
}

/// Start `cfg.workers` mock workers for `cfg.model_path` and register them in a new store.
pub fn start(cfg: &Embedded) -> io::Result<Workers> {
    let files = ModelFiles::load(&cfg.model_path).map_err(|e| io::Error::other(e.to_string()))?;
    let script = files.tokenizer().and_then(|t| t.encode(ANSWER)).map_err(io::Error::other)?;
    let store = MemStore::new();
    let model = model_name(cfg);
    let mut workers = Vec::with_capacity(cfg.workers);
    for _ in 0..cfg.workers {
        let w = MockWorker::start(MockConfig {
            script: Some(script.clone()),
            eos_token_id: None,
            model_name: model.clone(),
            model_dir: Some(cfg.model_path.clone()),
            fast: cfg.fast,
            // The frontend's own request-plane TLS, both roles swapped: the workers serve
            // its certificate and dial back trusting its CA.
            tls: crate::tls::plane::installed().clone(),
            ..MockConfig::default()
        })?;
        w.register_mem(&store)?;
        workers.push(w);
    }
    Ok(Workers { store, workers, model })
}
