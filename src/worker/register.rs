//! File-backend registration of a mock worker (docs/dynamo/request-plane.md §3): the model card and the endpoint
//! instance record, written the Dynamo way, kept alive by mtime touches, deleted on stop.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::mpsc;
use std::thread::JoinHandle;

use serde_json::{json, Map, Value};

use super::MockWorker;
use crate::discovery::records::{
    encode_key, instance_key, BUCKET_INSTANCES, BUCKET_MDC, KIND_CHAT_TEMPLATE, KIND_CHAT_TEMPLATE_JSON,
};

/// The placeholder checksum earlier versions wrote into card file slots. No longer written:
/// slots now carry the real `blake3:<hex>` of each file
/// ([`crate::discovery::checksum::file_checksum_path`]). Kept for callers that compare
/// against it; the real Dynamo frontend rejects it with "checksum mismatch".
pub const UNVERIFIED_CHECKSUM: &str = "blake3:0000000000000000000000000000000000000000000000000000000000000000";

/// Where a registration wrote its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FileRegistration {
    /// The `DYN_FILE_KV` root.
    pub root: PathBuf,
    /// `<root>/v1/mdc/<encoded key>`.
    pub card_file: PathBuf,
    /// `<root>/v1/instances/<encoded key>`.
    pub instance_file: PathBuf,
}

/// A live registration of either backend.
pub(crate) enum Registered {
    File(FileRegistered),
    Etcd(super::register_etcd::EtcdRegistered),
    Mem(super::register_mem::MemRegistered),
}

impl Registered {
    /// Ends the registration the way a stopping worker does.
    pub(crate) fn remove(self) {
        match self {
            Registered::File(f) => f.remove(),
            Registered::Etcd(e) => e.remove(),
            Registered::Mem(m) => m.remove(),
        }
    }
}

/// The two records a worker registers, as stored by every backend.
pub(crate) struct WorkerRecords {
    /// `<ns>/<component>/<endpoint>/<instance hex>`, the key in both buckets.
    pub(crate) key: String,
    /// The model card record (`v1/mdc`).
    pub(crate) card: Vec<u8>,
    /// The endpoint instance record (`v1/instances`).
    pub(crate) instance: Vec<u8>,
}

/// A live file registration: its files and the keep-alive thread.
pub(crate) struct FileRegistered {
    files: FileRegistration,
    /// Dropping the sender stops the keep-alive thread.
    stop: Option<mpsc::Sender<()>>,
    keepalive: Option<JoinHandle<()>>,
}

impl FileRegistered {
    /// Stops the keep-alive and deletes the files (graceful shutdown, docs/dynamo/request-plane.md §3.4).
    pub(crate) fn remove(mut self) {
        self.stop.take();
        if let Some(t) = self.keepalive.take() {
            let _ = t.join();
        }
        let _ = fs::remove_file(&self.files.instance_file);
        let _ = fs::remove_file(&self.files.card_file);
    }
}

/// (file name, card slot, slot kind) of the card files taken from `model_dir`, in card order.
const CARD_FILES: [(&str, &str, &str); 4] = [
    ("config.json", "model_info", "hf_config_json"),
    ("tokenizer.json", "tokenizer", "hf_tokenizer_json"),
    ("tokenizer_config.json", "prompt_formatter", "hf_tokenizer_config_json"),
    ("generation_config.json", "gen_config", "hf_generation_config_json"),
];

impl MockWorker {
    /// Registers this worker in the file discovery store at `root` (`DYN_FILE_KV`): card
    /// first, then the instance record (the order a Python worker uses), and starts a thread
    /// touching both every `keepalive`. [`MockWorker::stop`] deletes them.
    pub fn register_file(&self, root: &Path) -> io::Result<FileRegistration> {
        let records = self.worker_records()?;
        let key = encode_key(&records.key);
        let card_file = publish(&root.join(BUCKET_MDC), &key, &records.card)?;
        let instance_file = match publish(&root.join(BUCKET_INSTANCES), &key, &records.instance) {
            Ok(f) => f,
            Err(e) => {
                let _ = fs::remove_file(&card_file);
                return Err(e);
            }
        };
        let files = FileRegistration { root: root.to_path_buf(), card_file, instance_file };
        let (tx, rx) = mpsc::channel::<()>();
        let touched = [files.card_file.clone(), files.instance_file.clone()];
        let period = self.shared.cfg.keepalive;
        let keepalive = std::thread::Builder::new().name("mock-worker-keepalive".into()).spawn(move || {
            while let Err(mpsc::RecvTimeoutError::Timeout) = rx.recv_timeout(period) {
                for f in &touched {
                    let _ = touch(f);
                }
            }
        })?;
        let reg = FileRegistered { files: files.clone(), stop: Some(tx), keepalive: Some(keepalive) };
        self.registrations.lock().unwrap_or_else(|e| e.into_inner()).push(Registered::File(reg));
        Ok(files)
    }

    /// The card and instance records of this worker (card first in registration order).
    pub(crate) fn worker_records(&self) -> io::Result<WorkerRecords> {
        let s = &self.shared;
        let cfg = &s.cfg;
        let card = json!({
            "type": "Model",
            "namespace": cfg.namespace,
            "component": cfg.component,
            "endpoint": cfg.endpoint,
            "instance_id": s.instance_id,
            "card_json": self.card_json()?,
        });
        let instance = json!({
            "type": "Endpoint",
            "component": cfg.component,
            "endpoint": cfg.endpoint,
            "namespace": cfg.namespace,
            "instance_id": s.instance_id,
            "transport": {"tcp": self.transport()},
            "device_type": "cuda",
            "request_plane_codec": cfg.codec.as_str(),
        });
        Ok(WorkerRecords {
            key: instance_key(&cfg.namespace, &cfg.component, &cfg.endpoint, s.instance_id),
            card: to_bytes(&card)?,
            instance: to_bytes(&instance)?,
        })
    }

    /// The `card_json` the mocker publishes (docs/dynamo/request-plane.md §3.2), with this worker's values.
    fn card_json(&self) -> io::Result<Value> {
        let cfg = &self.shared.cfg;
        let slug: String = cfg
            .model_name
            .chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '-' || c == '_' { c.to_ascii_lowercase() } else { '_' })
            .collect();
        let source_path = match &cfg.model_dir {
            Some(d) => d.to_string_lossy().into_owned(),
            None => cfg.model_name.clone(),
        };
        let mut card = Map::new();
        card.insert("display_name".into(), json!(cfg.model_name));
        card.insert("slug".into(), json!(slug));
        card.insert("source_path".into(), json!(source_path));
        if let Some(dir) = &cfg.model_dir {
            for (file, slot, kind) in CARD_FILES {
                if slot == "gen_config" {
                    // The chat template file comes between the tokenizer config and this.
                    if let Some(t) = self.chat_template_slot(dir)? {
                        card.insert("chat_template_file".into(), t);
                    }
                }
                if let Some(file_ref) = file_ref(&dir.join(file))? {
                    card.insert(slot.into(), json!({ kind: file_ref }));
                }
            }
        }
        let rest = json!({
            "architectural_max_context_length": 0,
            "context_length": 0,
            "kv_cache_block_size": 64,
            "migration_limit": 0,
            "model_type": "Chat | Completions",
            "model_input": cfg.model_input.as_str(),
            "worker_type": "aggregated",
            "needs": [],
            "aliases": cfg.aliases,
            "runtime_config": {
                "context_length": 0, "total_kv_blocks": 16384, "max_num_seqs": 256,
                "max_num_batched_tokens": 8192, "tool_call_parser": null, "reasoning_parser": null,
                "tool_call_arguments_format": "json_string", "structural_tag_mode": "off",
                "structural_tag_scope": "auto", "structural_tag_schema": "auto",
                "exclude_tools_when_tool_choice_none": true, "data_parallel_start_rank": 0,
                "data_parallel_size": 1, "enable_local_indexer": false, "kv_event_publishing_enabled": false,
                "runtime_data": {}, "enable_eagle": false
            },
            "media_decoder": null,
            "media_fetcher": null,
        });
        if let Value::Object(rest) = rest {
            card.extend(rest);
        }
        if let Some(Value::Object(rc)) = card.get_mut("runtime_config") {
            rc.insert("total_kv_blocks".into(), json!(cfg.total_kv_blocks));
            rc.insert("tool_call_parser".into(), json!(cfg.tool_call_parser));
            rc.insert("reasoning_parser".into(), json!(cfg.reasoning_parser));
        }
        if cfg.aliases.is_empty() {
            card.shift_remove("aliases");
        }
        if cfg.model_input == super::MockInput::Tensor {
            card.insert("model_type".into(), json!("TensorBased"));
            let config = cfg.tensor_config.clone().unwrap_or_else(|| super::tensor::echo_config(&cfg.model_name));
            card.insert("tensor_model_config".into(), config);
        }
        Ok(Value::Object(card))
    }

    /// The card's `chat_template_file`, as Dynamo 1.6.1 writes it: the custom template when
    /// one is configured (`is_custom: true`), else the directory's `chat_template.jinja`,
    /// else its `chat_template.json`; `None` when there is none.
    fn chat_template_slot(&self, dir: &Path) -> io::Result<Option<Value>> {
        let found = match &self.shared.cfg.chat_template {
            Some(custom) => {
                let missing = || io::Error::new(io::ErrorKind::NotFound, format!("chat template {}", custom.display()));
                let f = file_ref(custom)?.ok_or_else(missing)?;
                Some((KIND_CHAT_TEMPLATE, true, f))
            }
            None => match file_ref(&dir.join("chat_template.jinja"))? {
                Some(f) => Some((KIND_CHAT_TEMPLATE, false, f)),
                None => file_ref(&dir.join("chat_template.json"))?.map(|f| (KIND_CHAT_TEMPLATE_JSON, false, f)),
            },
        };
        Ok(found.map(|(kind, is_custom, file)| json!({ kind: { "is_custom": is_custom, "file": file } })))
    }
}

/// `{"path", "checksum", "size"}` of a card file; `None` when there is no such file.
fn file_ref(path: &Path) -> io::Result<Option<Value>> {
    let meta = match fs::metadata(path) {
        Ok(m) if m.is_file() => m,
        Ok(_) => return Ok(None),
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(e),
    };
    let checksum = crate::discovery::checksum::file_checksum_path(path)?;
    Ok(Some(json!({
        "path": path.to_string_lossy(),
        "checksum": checksum,
        "size": meta.len(),
    })))
}

fn to_bytes(v: &Value) -> io::Result<Vec<u8>> {
    serde_json::to_vec(v).map_err(io::Error::other)
}

pub(crate) use crate::discovery::filewrite::{publish, touch};
