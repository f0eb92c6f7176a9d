//! Model card records (`v1/mdc`) as Dynamo 1.6.1 writes them (docs/dynamo/request-plane.md
//! §3.2): the card, its file slots (the chat template's nested `{is_custom, file}` shape
//! included), model types and inputs, the runtime config. Read on the control thread;
//! re-exported by [`super::records`].
//!
//! Every type tolerates unknown fields: Dynamo adds card fields between releases, and a
//! frontend must not drop a worker because of one it does not know.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use crate::tokenize::model::TemplateFormat;

use super::records::EndpointId;

/// A model card record (`v1/mdc`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelRecord {
    pub namespace: String,
    pub component: String,
    pub endpoint: String,
    pub instance_id: u64,
    pub card_json: ModelCard,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ModelRecord {
    pub fn id(&self) -> EndpointId {
        EndpointId {
            namespace: self.namespace.clone(),
            component: self.component.clone(),
            endpoint: self.endpoint.clone(),
        }
    }
}

/// The model deployment card (`card_json`).
///
/// What happens to each field Dynamo 1.6.1 writes:
/// * read: `display_name` (the primary model name), `slug`, `source_path`, the file slots
///   (`model_info`, `tokenizer`, `prompt_formatter`, `chat_template_file`, `gen_config`),
///   `architectural_max_context_length`, `context_length`, `kv_cache_block_size`,
///   `model_type`, `model_input`, `worker_type`, `needs`, `aliases`, `runtime_config` (the
///   sizes, parsers and data-parallel ranks; the rest kept in its `extra`), and
///   `tensor_model_config` (from `extra`, for tensor models);
/// * hashed into `mdc_sum` only: `extra_files` (sibling files such as
///   `preprocessor_config.json`, which nothing here reads) and `router_config`;
/// * knowingly ignored: `migration_limit` (parsed; the frontend's own `--migration-limit`
///   applies), and, kept in `extra`, `media_decoder`, `media_fetcher` (multimodal input is
///   not supported), `lora`, `user_data`, `indexer_identity` and `prompt_context`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct ModelCard {
    /// Model id served on `/v1/models` and matched against the request `model`.
    pub display_name: String,
    /// Cache-directory name for downloaded card files.
    #[serde(default)]
    pub slug: Option<String>,
    #[serde(default)]
    pub source_path: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model_info: Option<FileSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tokenizer: Option<FileSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub prompt_formatter: Option<FileSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub chat_template_file: Option<FileSlot>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gen_config: Option<FileSlot>,
    #[serde(default)]
    pub architectural_max_context_length: Option<u64>,
    /// Legacy top-level context length; what `/v1/models` reports as `context_window`.
    #[serde(default)]
    pub context_length: Option<u64>,
    #[serde(default)]
    pub kv_cache_block_size: Option<u32>,
    #[serde(default)]
    pub migration_limit: Option<u32>,
    pub model_type: ModelType,
    #[serde(default)]
    pub model_input: ModelInput,
    /// `aggregated`, `prefill`, `decode`, `encode`.
    #[serde(default)]
    pub worker_type: Option<String>,
    /// DNF list of worker types this set depends on.
    #[serde(default)]
    pub needs: Vec<Value>,
    /// Other names the model answers to (`--served-model-name a b c` gives `b`, `c`); written
    /// only when there are some.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub aliases: Vec<String>,
    #[serde(default)]
    pub runtime_config: RuntimeConfig,
    /// Sibling files the worker advertises next to the typed slots; only hashed.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub extra_files: Vec<FileRef>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl ModelCard {
    /// The context window `/v1/models` shows: the top-level `context_length`, 0 when absent.
    /// (Observed: 0 for the mocker, whose architectural maximum is 40960; 40960 for the
    /// Python worker.)
    pub fn context_window(&self) -> u64 {
        self.context_length.unwrap_or(0)
    }

    /// The effective context length of docs/dynamo/request-plane.md §3.7 item 5: `runtime_config.context_length` if
    /// present (even 0), else `architectural_max_context_length`, else `context_length`, else 0.
    pub fn effective_context_length(&self) -> u64 {
        self.runtime_config
            .context_length
            .or(self.architectural_max_context_length)
            .or(self.context_length)
            .unwrap_or(0)
    }

    /// The file slots present, in the order `mdc_sum` hashes them.
    pub fn file_slots(&self) -> Vec<(&'static str, &FileSlot)> {
        [
            ("model_info", &self.model_info),
            ("tokenizer", &self.tokenizer),
            ("prompt_formatter", &self.prompt_formatter),
            ("chat_template_file", &self.chat_template_file),
            ("gen_config", &self.gen_config),
        ]
        .into_iter()
        .filter_map(|(n, s)| s.as_ref().map(|s| (n, s)))
        .collect()
    }

    /// The chat template file the card names (`chat_template_file` of a chat-template
    /// kind), which replaces any template in the tokenizer config.
    pub fn chat_template(&self) -> Option<&FileSlot> {
        self.chat_template_file.as_ref().filter(|s| s.template_format().is_some())
    }

    /// Slot kinds Dynamo 1.6.1 refuses to serve: a `prompt_formatter` holding a chat
    /// template rather than the tokenizer config.
    pub fn check_slots(&self) -> Result<(), String> {
        match &self.prompt_formatter {
            Some(s) if s.template_format().is_some() => {
                Err(format!("prompt_formatter is a chat template ({}), not the tokenizer config", s.kind))
            }
            _ => Ok(()),
        }
    }

    /// The card checksum Dynamo sends as `mdc_sum`; see [`super::checksum::mdc_sum`].
    pub fn mdc_sum(&self) -> String {
        super::checksum::mdc_sum(self)
    }

    /// Verifies the blake3 checksum of every file slot whose `path` is local (shared
    /// storage). URL slots are skipped (fetching them is left to the caller). The first
    /// mismatch or unreadable file is the error.
    pub fn verify_local_files(&self) -> Result<(), String> {
        for (slot, s) in self.file_slots() {
            if !s.file.is_url() {
                super::checksum::verify_file(std::path::Path::new(&s.file.path), &s.file.checksum)
                    .map_err(|e| format!("{slot}: {e}"))?;
            }
        }
        Ok(())
    }
}

/// One card file slot, externally tagged by its kind. Most kinds hold the file itself,
/// e.g. `{"hf_tokenizer_json": {"path": ..., "checksum": "blake3:...", "size": ...}}`; the
/// chat-template kinds ([`FileSlot::template_format`]) hold it one level down, next to
/// whether it was given on the worker's command line:
/// `{"hf_chat_template": {"is_custom": false, "file": {"path": ..., ...}}}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(try_from = "Map<String, Value>", into = "Map<String, Value>")]
pub struct FileSlot {
    /// `hf_config_json`, `hf_tokenizer_json`, `hf_tokenizer_config_json`, `hf_chat_template`, ...
    pub kind: String,
    /// `Some` for a chat-template kind: the template was given on the worker's command line
    /// (`--chat-template`) rather than found in the model directory.
    pub is_custom: Option<bool>,
    pub file: FileRef,
}

/// Slot kind of a Jinja chat template (`hf_chat_template_jinja` is read as a synonym).
pub const KIND_CHAT_TEMPLATE: &str = "hf_chat_template";
/// Slot kind of a `chat_template.json`.
pub const KIND_CHAT_TEMPLATE_JSON: &str = "hf_chat_template_json";

impl FileSlot {
    /// The template format of a chat-template kind; `None` for other kinds.
    pub fn template_format(&self) -> Option<TemplateFormat> {
        template_format(&self.kind)
    }
}

fn template_format(kind: &str) -> Option<TemplateFormat> {
    match kind {
        KIND_CHAT_TEMPLATE | "hf_chat_template_jinja" => Some(TemplateFormat::Jinja),
        KIND_CHAT_TEMPLATE_JSON => Some(TemplateFormat::Json),
        _ => None,
    }
}

/// The nested body of a chat-template slot.
#[derive(Deserialize)]
struct TemplateSlot {
    is_custom: bool,
    file: FileRef,
}

impl TryFrom<Map<String, Value>> for FileSlot {
    type Error = String;
    fn try_from(m: Map<String, Value>) -> Result<Self, String> {
        if m.len() != 1 {
            return Err(format!("a file slot has exactly one kind, found {}", m.len()));
        }
        let (kind, v) = m.into_iter().next().expect("one entry");
        if template_format(&kind).is_some() {
            let t = TemplateSlot::deserialize(v).map_err(|e| format!("file slot {kind}: {e}"))?;
            return Ok(FileSlot { kind, is_custom: Some(t.is_custom), file: t.file });
        }
        let file = FileRef::deserialize(v).map_err(|e| format!("file slot {kind}: {e}"))?;
        Ok(FileSlot { kind, is_custom: None, file })
    }
}

impl From<FileSlot> for Map<String, Value> {
    fn from(s: FileSlot) -> Self {
        let file = serde_json::to_value(s.file).unwrap_or(Value::Null);
        let body = match s.is_custom {
            Some(is_custom) => serde_json::json!({ "is_custom": is_custom, "file": file }),
            None => file,
        };
        let mut m = Map::new();
        m.insert(s.kind, body);
        m
    }
}

/// A file a card names. `path` is a local path (shared storage) or an HTTP URL served by the
/// worker. A missing `checksum` rejects the card, as Dynamo does.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct FileRef {
    pub path: String,
    /// `blake3:<hex>`.
    pub checksum: String,
    #[serde(default)]
    pub size: Option<u64>,
}

impl FileRef {
    /// True when `path` is an HTTP(S) URL to fetch rather than a local path.
    pub fn is_url(&self) -> bool {
        self.path.starts_with("http://") || self.path.starts_with("https://")
    }

    /// The file's name: the last non-empty segment of a URL's path (query and fragment
    /// aside), or of a local path. `None` when there is none.
    pub fn basename(&self) -> Option<&str> {
        if !self.is_url() {
            return std::path::Path::new(&self.path).file_name().and_then(|n| n.to_str());
        }
        let rest = self.path.split_once("://").map_or(self.path.as_str(), |(_, r)| r);
        let rest = rest.split(['?', '#']).next().unwrap_or("");
        // Past the authority: only the path's segments count.
        rest.split_once('/').map_or("", |(_, p)| p).rsplit('/').find(|s| !s.is_empty())
    }
}

/// `model_type`: flags joined by ` | `, e.g. `"Chat | Completions"`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(from = "String", into = "String")]
pub struct ModelType {
    pub flags: Vec<String>,
}

impl From<String> for ModelType {
    fn from(s: String) -> Self {
        let flags = s.split('|').map(str::trim).filter(|f| !f.is_empty()).map(str::to_string).collect();
        ModelType { flags }
    }
}

impl From<ModelType> for String {
    fn from(t: ModelType) -> Self {
        t.flags.join(" | ")
    }
}

impl ModelType {
    pub fn has(&self, flag: &str) -> bool {
        self.flags.iter().any(|f| f.eq_ignore_ascii_case(flag))
    }
    pub fn chat(&self) -> bool {
        self.has("Chat")
    }
    pub fn completions(&self) -> bool {
        self.has("Completions")
    }
    pub fn embedding(&self) -> bool {
        self.has("Embedding")
    }
    /// Lower-case flags joined by `|`, as in Dynamo's worker-set key (`chat|completions`).
    pub fn group_key(&self) -> String {
        self.flags.iter().map(|f| f.to_ascii_lowercase()).collect::<Vec<_>>().join("|")
    }
}

/// `model_input`: what the worker accepts.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub enum ModelInput {
    /// The frontend tokenizes and sends a PreprocessedRequest.
    #[default]
    Tokens,
    /// The frontend forwards the OpenAI request.
    Text,
    Tensor,
    /// A value switchyard does not know; such a model cannot be served.
    #[serde(other)]
    Unknown,
}

/// `card_json.runtime_config`: the fields switchyard may use, the rest kept in `extra`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
pub struct RuntimeConfig {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_length: Option<u64>,
    #[serde(default)]
    pub total_kv_blocks: Option<u64>,
    #[serde(default)]
    pub max_num_seqs: Option<u64>,
    #[serde(default)]
    pub max_num_batched_tokens: Option<u64>,
    #[serde(default)]
    pub tool_call_parser: Option<String>,
    #[serde(default)]
    pub reasoning_parser: Option<String>,
    #[serde(default)]
    pub data_parallel_start_rank: Option<u32>,
    #[serde(default)]
    pub data_parallel_size: Option<u32>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}
