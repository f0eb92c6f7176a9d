//! `--tokenizer` through the server: the prompt token ids a worker receives with
//! `--tokenizer fastokens` (and `basetenkenizer`) are the default's, for chats and completions,
//! short prompts (encoded on the shard) and long ones (on its helper thread); and the binary's
//! log lines and serving when the library cannot load a model's `tokenizer.json`: the fallback
//! (one line naming the model and the reason, the model served) or, with
//! `--no-tokenizer-fallback`, the model refused with a line saying why.
//!
//! Needs the Qwen3 files: `bash scripts/fetch-models.sh qwen3`.

mod common;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::stack::Stack;
use common::Client;
use switchyard::worker::{MockConfig, MockWorker};

fn mock(model_dir: std::path::PathBuf) -> MockConfig {
    MockConfig {
        model_name: "m".into(),
        model_dir: Some(model_dir),
        fast: true,
        output_tokens: 2,
        ..MockConfig::default()
    }
}

/// Long text (past the size a shard encodes itself), varied and not all ASCII.
fn long_text() -> String {
    let mut s = String::new();
    let mut i = 0u64;
    while s.len() < 40 * 1024 {
        i += 1;
        s.push_str(&format!(
            "Paragraph {i}: the quick brown fox {} jumps; naïve café №{i} — 東京 {}\n",
            i * 7919,
            i % 13
        ));
    }
    s
}

/// The prompt ids the worker received for each request, in order.
fn prompt_ids(args: &[&str], tag: &str) -> Vec<Vec<u32>> {
    let stack = Stack::start(tag, mock(common::qwen3_dir()), args, &[]);
    let addr = stack.addr();
    let long = long_text();
    let requests = [
        (
            "/v1/chat/completions",
            serde_json::json!({"model": "m", "max_tokens": 1,
            "messages": [{"role": "system", "content": "You are helpful."}, {"role": "user", "content": "Hello, world! 你好 😀"}]}),
        ),
        (
            "/v1/chat/completions",
            serde_json::json!({"model": "m", "max_tokens": 1,
            "messages": [{"role": "user", "content": long}]}),
        ),
        (
            "/v1/completions",
            serde_json::json!({"model": "m", "max_tokens": 1,
            "prompt": "def f(x):\n\treturn x  <|im_end|> naïve   spaces"}),
        ),
        ("/v1/completions", serde_json::json!({"model": "m", "max_tokens": 1, "prompt": long})),
    ];
    for (path, body) in &requests {
        let r = common::post_json(addr, path, body);
        assert_eq!(r.status, 200, "{tag} {path}: {}", String::from_utf8_lossy(&r.body));
    }
    let got: Vec<Vec<u32>> = stack.worker.received().into_iter().map(|r| r.token_ids).collect();
    assert_eq!(got.len(), requests.len(), "{tag}: one worker request per call");
    got
}

#[test]
fn fastokens_and_basetenkenizer_send_the_default_prompt_ids() {
    let want = prompt_ids(&[], "backend-default");
    assert!(want[1].len() > 8_000 && want[3].len() > 8_000, "the long prompts are long");
    for lib in ["fastokens", "basetenkenizer"] {
        let got = prompt_ids(&["--tokenizer", lib], &format!("backend-{lib}"));
        for (i, (g, w)) in got.iter().zip(&want).enumerate() {
            assert_eq!(g, w, "{lib}: request {i}");
        }
    }
}

/// A model directory with a WordLevel `tokenizer.json` (the default reads it; neither library
/// does) and the files a card names.
fn word_level_model() -> common::TempDir {
    let dir = common::TempDir::new("backend-e2e-wordlevel");
    let json = serde_json::json!({
        "version": "1.0", "truncation": null, "padding": null,
        "added_tokens": [{"id": 0, "content": "[UNK]", "single_word": false, "lstrip": false, "rstrip": false,
                          "normalized": false, "special": true}],
        "normalizer": null, "pre_tokenizer": {"type": "Split", "pattern": {"String": " "}, "behavior": "Removed", "invert": false}, "post_processor": null, "decoder": null,
        "model": {"type": "WordLevel", "vocab": {"[UNK]": 0, "hello": 1, "world": 2, "!": 3}, "unk_token": "[UNK]"}
    });
    std::fs::write(dir.0.join("tokenizer.json"), json.to_string()).unwrap();
    std::fs::write(dir.0.join("tokenizer_config.json"), r#"{"eos_token": "[UNK]"}"#).unwrap();
    std::fs::write(dir.0.join("config.json"), r#"{"max_position_embeddings": 64, "eos_token_id": 0}"#).unwrap();
    dir
}

/// The switchyard binary on `store`, its stderr lines collected.
struct Frontend {
    child: Child,
    addr: std::net::SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Frontend {
    fn start(store: &std::path::Path, args: &[&str]) -> Frontend {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "2", "--discovery-backend", "file"])
            .args(args)
            .env("DYN_FILE_KV", store)
            .stderr(Stdio::piped())
            .spawn()
            .expect("start switchyard");
        let mut lines = BufReader::new(child.stderr.take().unwrap()).lines();
        let seen = Arc::new(Mutex::new(Vec::new()));
        let addr = loop {
            let line = lines.next().expect("switchyard printed its address").unwrap();
            seen.lock().unwrap().push(line.clone());
            if let Some(rest) = line.split("listening on http://").nth(1) {
                break rest.split_whitespace().next().unwrap().parse().unwrap();
            }
        };
        let keep = seen.clone();
        std::thread::spawn(move || {
            for l in lines.map_while(Result::ok) {
                keep.lock().unwrap().push(l);
            }
        });
        Frontend { child, addr, lines: seen }
    }

    /// The first log line containing `what`, waiting up to 90 s for it.
    fn line(&self, what: &str) -> String {
        let t0 = Instant::now();
        loop {
            if let Some(l) = self.lines.lock().unwrap().iter().find(|l| l.contains(what)) {
                return l.clone();
            }
            assert!(
                t0.elapsed() < Duration::from_secs(90),
                "no log line with {what:?}: {:?}",
                self.lines.lock().unwrap()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn models(&self) -> serde_json::Value {
        Client::connect(self.addr).roundtrip(b"GET /v1/models HTTP/1.1\r\n\r\n").json()
    }
}

impl Drop for Frontend {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[test]
fn a_tokenizer_fastokens_cannot_load_falls_back_or_is_refused() {
    let model = word_level_model();
    let store = common::TempDir::new("backend-e2e-store");
    let mut worker = MockWorker::start(MockConfig { model_name: "wordlevel".into(), ..mock(model.0.clone()) }).unwrap();
    worker.register_file(&store.0).unwrap();

    // Fallback (the default): served, with one line naming the model and the reason.
    let f = Frontend::start(&store.0, &["--tokenizer", "fastokens"]);
    let line = f.line("falling back to the default tokenizer");
    assert!(line.contains("WARN") && line.contains("model wordlevel") && line.contains("fastokens"), "{line}");
    assert!(line.contains("unsupported model type: WordLevel"), "{line}");
    assert!(f.line("Automatic tokenizer fallback is deprecated").contains("WARN"));
    let t0 = Instant::now();
    while f.models()["data"].as_array().is_none_or(|d| d.is_empty()) {
        assert!(t0.elapsed() < Duration::from_secs(90), "the model was never listed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let r = common::post_json(
        f.addr,
        "/v1/completions",
        &serde_json::json!({"model": "wordlevel", "max_tokens": 1, "prompt": "hello world !"}),
    );
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(worker.received().last().map(|r| r.token_ids.clone()), Some(vec![1, 2, 3]));
    let fallbacks = f.lines.lock().unwrap().iter().filter(|l| l.contains("falling back")).count();
    assert_eq!(fallbacks, 1, "one line per model");
    drop(f);

    // --no-tokenizer-fallback: not served, and the line says why.
    let f = Frontend::start(&store.0, &["--tokenizer", "fastokens", "--no-tokenizer-fallback"]);
    let line = f.line("not served");
    assert!(
        line.contains("model wordlevel")
            && line.contains("failed to load fastokens tokenizer backend and fallback is disabled"),
        "{line}"
    );
    assert_eq!(f.models()["data"], serde_json::json!([]), "the model is not listed");
    let r = common::post_json(
        f.addr,
        "/v1/completions",
        &serde_json::json!({"model": "wordlevel", "max_tokens": 1, "prompt": "hello"}),
    );
    assert_eq!(r.status, 404, "{}", String::from_utf8_lossy(&r.body));
    drop(f);
    worker.stop();
}
