//! `switchyard mock-worker`: run the in-tree mock worker as its own process, registered in
//! a Dynamo file store, so any frontend — switchyard or `python -m dynamo.frontend` — can
//! serve it.
//!
//! ```text
//! switchyard mock-worker --model-path DIR [--model-name NAME] [--alias NAME]...
//!     [--chat-template FILE] [--discovery-backend file|etcd] [--file-kv DIR] [--ttft-ms 10]
//!     [--itl-ms 1] [--output-tokens 16] [--fast] [--codec msgpack|json]
//!     [--tool-call-parser NAME] [--reasoning-parser NAME] [--echo token|char]
//!     [--endpoint NAMESPACE.COMPONENT.ENDPOINT]
//! switchyard mock-worker --tensor [--model-name echo] [--discovery-backend file|etcd] [--file-kv DIR]
//! ```
//! `--alias` adds a name to the card's `aliases` (as `--served-model-name a b` does for vLLM);
//! `--chat-template` names a custom template file (`is_custom: true` in the card).
//! `--tool-call-parser` / `--reasoning-parser` name the parsers in the card's
//! `runtime_config` (as an engine's `--dyn-tool-call-parser` / `--dyn-reasoning-parser` do);
//! `--echo` answers each request with the text its prompt scripts (see [`super::echo`]).
//! `--tensor` serves the echo tensor model of [`super::tensor`] (no model files needed).
//! The backend defaults to `$DYN_DISCOVERY_BACKEND`, else `file`. The file store defaults to
//! `$DYN_FILE_KV`, else `dynamo_store_kv` in the temp directory (`$TMPDIR`, else `/tmp`), as
//! for Dynamo's workers and frontend; etcd is reached at `$ETCD_ENDPOINTS` (else
//! `http://localhost:2379`). The listen host defaults to `$DYN_TCP_RPC_HOST` (else
//! 127.0.0.1). The request plane's TLS comes from `DYN_TCP_TLS_*`, as for a real worker
//! (docs/dynamo/request-plane-tls.md): `_CERT_PATH` + `_KEY_PATH` make its listener TLS
//! (`_CLIENT_CA_CERT_PATH` requires client certificates), `_CA_CERT_PATH` (or `_INSECURE`),
//! `_CLIENT_CERT_PATH` + `_CLIENT_KEY_PATH` and `_SERVER_NAME` make its call-backs TLS. The
//! worker stays up until SIGTERM/SIGINT, then removes its records.

use std::path::PathBuf;
use std::time::Duration;

use super::{MockConfig, MockWorker};
use crate::discovery::etcd::{EtcdClient, DEFAULT_ENDPOINTS};
use crate::plane::payload::Codec;

const USAGE: &str = "usage: switchyard mock-worker --model-path DIR [--model-name NAME] [--alias NAME]... \
[--chat-template FILE] [--discovery-backend file|etcd] [--file-kv DIR] [--ttft-ms N] [--itl-ms N] [--output-tokens N] [--fast] [--codec msgpack|json] [--vocab-size N]
       [--tool-call-parser NAME] [--reasoning-parser NAME] [--echo token|char] [--endpoint NS.COMPONENT.ENDPOINT]
       switchyard mock-worker --tensor [--model-name NAME] [--discovery-backend file|etcd] [--file-kv DIR] [--codec msgpack|json]";

/// Where the worker registers.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum MockBackend {
    /// A file store directory (`DYN_FILE_KV`).
    File(PathBuf),
    /// etcd endpoints (`ETCD_ENDPOINTS` syntax).
    Etcd(String),
}

impl std::fmt::Display for MockBackend {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            MockBackend::File(dir) => write!(f, "file store {}", dir.display()),
            MockBackend::Etcd(endpoints) => write!(f, "etcd {endpoints}"),
        }
    }
}

/// Parsed `mock-worker` arguments.
#[derive(Debug)]
pub struct MockArgs {
    pub config: MockConfig,
    pub backend: MockBackend,
}

fn number<T: std::str::FromStr>(flag: &str, v: Option<&String>) -> Result<T, String> {
    v.ok_or_else(|| format!("{flag} needs a value"))?.parse().map_err(|_| format!("{flag}: not a number"))
}

/// Parse the arguments after `mock-worker`.
pub fn parse(args: &[String], env: &dyn Fn(&str) -> Option<String>) -> Result<MockArgs, String> {
    let mut cfg = MockConfig::default();
    let mut file_kv = env("DYN_FILE_KV").map(PathBuf::from);
    let mut model_name = None;
    let mut backend = env("DYN_DISCOVERY_BACKEND");
    let mut it = args.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "--model-path" => cfg.model_dir = Some(PathBuf::from(it.next().ok_or("--model-path needs a value")?)),
            "--model-name" => model_name = Some(it.next().ok_or("--model-name needs a value")?.clone()),
            "--alias" => cfg.aliases.push(it.next().ok_or("--alias needs a value")?.clone()),
            "--chat-template" => {
                cfg.chat_template = Some(PathBuf::from(it.next().ok_or("--chat-template needs a value")?))
            }
            "--discovery-backend" => backend = Some(it.next().ok_or("--discovery-backend needs a value")?.clone()),
            "--file-kv" => file_kv = Some(PathBuf::from(it.next().ok_or("--file-kv needs a value")?)),
            "--ttft-ms" => cfg.ttft = Duration::from_millis(number("--ttft-ms", it.next())?),
            "--itl-ms" => cfg.itl = Duration::from_millis(number("--itl-ms", it.next())?),
            "--output-tokens" => cfg.output_tokens = number("--output-tokens", it.next())?,
            "--vocab-size" => cfg.vocab_size = number("--vocab-size", it.next())?,
            "--fast" => cfg.fast = true,
            "--tool-call-parser" => {
                cfg.tool_call_parser = Some(it.next().ok_or("--tool-call-parser needs a value")?.clone())
            }
            "--reasoning-parser" => {
                cfg.reasoning_parser = Some(it.next().ok_or("--reasoning-parser needs a value")?.clone())
            }
            "--endpoint" => {
                let v = it.next().ok_or("--endpoint needs a value")?;
                match v.split('.').collect::<Vec<_>>()[..] {
                    [ns, component, endpoint] => {
                        cfg.namespace = ns.to_string();
                        cfg.component = component.to_string();
                        cfg.endpoint = endpoint.to_string();
                    }
                    _ => return Err(format!("--endpoint {v}: expected NAMESPACE.COMPONENT.ENDPOINT")),
                }
            }
            "--echo" => {
                let v = it.next().map(String::as_str).unwrap_or_default();
                cfg.echo = Some(super::echo::EchoSplit::parse(v).ok_or("--echo takes token or char")?);
            }
            "--tensor" => cfg.model_input = super::MockInput::Tensor,
            "--codec" => {
                cfg.codec = match it.next().map(String::as_str) {
                    Some("msgpack") => Codec::Msgpack,
                    Some("json") => Codec::Json,
                    _ => return Err("--codec takes msgpack or json".into()),
                }
            }
            "-h" | "--help" => return Err(USAGE.into()),
            other => return Err(format!("unknown argument {other}\n{USAGE}")),
        }
    }
    if cfg.model_input == super::MockInput::Tensor {
        cfg.model_name = model_name.unwrap_or_else(|| "echo".to_string());
    } else {
        let dir = cfg.model_dir.clone().ok_or_else(|| format!("--model-path is required\n{USAGE}"))?;
        if !dir.join("tokenizer.json").is_file() {
            return Err(format!("--model-path {}: no tokenizer.json there", dir.display()));
        }
        // Dynamo names a model after its path unless told otherwise.
        cfg.model_name = model_name.unwrap_or_else(|| dir.display().to_string());
    }
    let tls = crate::tls::plane::PlaneTlsFiles::from_env(env);
    cfg.tls = crate::tls::plane::PlaneTls::build(&tls, crate::tls::plane::PlaneRole::Worker)?;
    if let Some(host) = env("DYN_TCP_RPC_HOST") {
        let ip = host.parse().map_err(|_| format!("DYN_TCP_RPC_HOST: {host} is not an IP address"))?;
        cfg.listen = std::net::SocketAddr::new(ip, 0);
    }
    let backend = match backend.as_deref().unwrap_or("file") {
        "file" => MockBackend::File(
            file_kv.unwrap_or_else(|| crate::discovery::file::default_root(env("TMPDIR").map(PathBuf::from))),
        ),
        "etcd" => {
            let endpoints = env("ETCD_ENDPOINTS").unwrap_or_else(|| DEFAULT_ENDPOINTS.to_string());
            EtcdClient::new(&endpoints).map_err(|e| format!("ETCD_ENDPOINTS: {e}"))?;
            MockBackend::Etcd(endpoints)
        }
        other => return Err(format!("--discovery-backend {other}: expected file or etcd")),
    };
    Ok(MockArgs { config: cfg, backend })
}

/// Start the worker, register it, and return it (the caller waits for a signal, then drops
/// it, which removes the records).
pub fn start(args: MockArgs) -> std::io::Result<MockWorker> {
    match &args.backend {
        MockBackend::File(dir) => {
            std::fs::create_dir_all(dir)?;
            let worker = MockWorker::start(args.config)?;
            worker.register_file(dir)?;
            Ok(worker)
        }
        MockBackend::Etcd(endpoints) => MockWorker::start_etcd(args.config, endpoints).map(|(w, _)| w),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arguments() {
        let env = |k: &str| (k == "DYN_FILE_KV").then(|| "/tmp/kv".to_string());
        let e = parse(&[], &env).unwrap_err();
        assert!(e.contains("--model-path is required"));
        let e = parse(&["--bogus".into()], &env).unwrap_err();
        assert!(e.contains("unknown argument --bogus"));
        let e = parse(&["--ttft-ms".into(), "x".into()], &env).unwrap_err();
        assert!(e.contains("not a number"));
        let t = parse(&["--tensor".into()], &env).unwrap();
        assert_eq!((t.config.model_input, t.config.model_name.as_str()), (crate::worker::MockInput::Tensor, "echo"));
    }

    #[test]
    fn backends() {
        let dir = std::env::temp_dir().join(format!("switchyard-cli-backends-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
        let model = vec!["--model-path".to_string(), dir.display().to_string()];
        let with = |vars: &'static [(&'static str, &'static str)]| {
            move |k: &str| vars.iter().find(|(n, _)| *n == k).map(|(_, v)| v.to_string())
        };
        let file = parse(&model, &with(&[("DYN_FILE_KV", "/tmp/kv")])).unwrap();
        assert_eq!(file.backend, MockBackend::File("/tmp/kv".into()));
        // Without DYN_FILE_KV: Dynamo's default, in the temp directory.
        let file = parse(&model, &with(&[("TMPDIR", "/scratch")])).unwrap();
        assert_eq!(file.backend, MockBackend::File("/scratch/dynamo_store_kv".into()));
        let file = parse(&model, &with(&[])).unwrap();
        assert_eq!(file.backend, MockBackend::File("/tmp/dynamo_store_kv".into()));
        let mut named = model.clone();
        named.extend(["--alias", "b", "--alias", "c", "--chat-template", "/t/x.jinja"].map(String::from));
        let named = parse(&named, &with(&[])).unwrap();
        assert_eq!(named.config.aliases, ["b", "c"]);
        assert_eq!(named.config.chat_template, Some(PathBuf::from("/t/x.jinja")));
        let etcd = parse(&model, &with(&[("DYN_DISCOVERY_BACKEND", "etcd")])).unwrap();
        assert_eq!(etcd.backend, MockBackend::Etcd(DEFAULT_ENDPOINTS.into()));
        let mut args = model.clone();
        args.extend(["--discovery-backend".to_string(), "etcd".to_string()]);
        let etcd = parse(&args, &with(&[("ETCD_ENDPOINTS", "http://127.0.0.1:1,http://127.0.0.1:2")])).unwrap();
        assert_eq!(etcd.backend, MockBackend::Etcd("http://127.0.0.1:1,http://127.0.0.1:2".into()));
        let e = parse(&args, &with(&[("ETCD_ENDPOINTS", "https://x:1")])).unwrap_err();
        assert!(e.contains("TLS etcd endpoints are not supported yet"), "{e}");
        let e = parse(&model, &with(&[("DYN_DISCOVERY_BACKEND", "nats")])).unwrap_err();
        assert!(e.contains("expected file or etcd"), "{e}");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
