//! Reading a model directory: `config.json`, `tokenizer.json`, `tokenizer_config.json`,
//! `generation_config.json`, and the chat template wherever it lives.
//!
//! Parsing happens once per model, off the shard threads; the result ([`ModelFiles`]) is
//! immutable and shared. What each shard needs of its own (a tokenizer instance, whose encode
//! scratch pool sits behind locks) is built with it: all of a server's at load, side by side
//! on a few threads ([`ModelFiles::load_instances`], run by the control thread), or one more
//! later with [`ModelFiles::tokenizer`].
//!
//! Where things come from, as Hugging Face transformers reads them:
//! * chat template: a [`TemplateFile`] given apart from the directory (a model card's
//!   `chat_template_file`, possibly a custom template anywhere), else `chat_template.jinja`,
//!   else `chat_template.json` (`{"chat_template": …}`), else `tokenizer_config.json`'s
//!   `chat_template` — a string, or a list of `{"name","template"}` of which `default` is
//!   used (and `tool_use` when tools are given);
//! * special tokens: `bos_token`, `eos_token`, `unk_token`, `pad_token` of
//!   `tokenizer_config.json`, each a string or an `AddedToken` object with `content`;
//! * context length: `max_position_embeddings`, `n_positions`, `max_seq_len`, `seq_length`,
//!   `max_sequence_length` in `config.json` (or its `text_config`), else the tokenizer's
//!   `model_max_length` when it is a real bound;
//! * end-of-sequence ids: `generation_config.json` `eos_token_id` (int or list), else
//!   `config.json`'s, else the id of `eos_token`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::Value;

use super::backend::{Decision, TokenizerBackend, TokenizerChoice};
use super::template::ChatTemplate;
use super::tokenizer::Tokenizer;

/// The most tokenizer pipelines built at once when a model loads. Each build holds several
/// times `tokenizer.json`'s size for a moment (Qwen3: ~70 MB), so the load's peak grows with
/// this; four build a 64-shard server's 128 pipelines in about a quarter of the time one
/// thread takes.
const MAX_BUILD_THREADS: usize = 4;

/// Why a model directory cannot be served.
#[derive(Debug)]
pub struct LoadError {
    pub path: PathBuf,
    pub message: String,
}

impl std::fmt::Display for LoadError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path.display(), self.message)
    }
}

impl std::error::Error for LoadError {}

fn err(path: &Path, message: impl Into<String>) -> LoadError {
    LoadError { path: path.to_path_buf(), message: message.into() }
}

/// What encodes a model's prompts (`--tokenizer`), as decided at load.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Encoding {
    /// The default tokenizer, as chosen.
    Default,
    /// Another library, checked equal to the default on the check texts.
    Library(TokenizerBackend),
    /// The default tokenizer instead of the library chosen, and why.
    FellBack(TokenizerBackend, String),
}

impl Encoding {
    /// Say what was decided for `model` (the name it is served as): a line when a library
    /// encodes its prompts, a warning with the reason when it fell back, nothing by default.
    pub fn log(&self, model: &str) {
        match self {
            Encoding::Default => {}
            Encoding::Library(b) => crate::log::info(&format!(
                "model {model}: prompts encoded with {} (its token ids equal the default tokenizer's on the check texts)",
                b.name()
            )),
            Encoding::FellBack(b, why) => crate::log::warn(&format!(
                "model {model}: tokenizer {} not used, falling back to the default tokenizer: {why}",
                b.name()
            )),
        }
    }
}

/// A chat template file's format.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum TemplateFormat {
    /// The template text itself (`chat_template.jinja`, or a custom template).
    Jinja,
    /// JSON holding `{"chat_template": …}` (`chat_template.json`): a string or a list of
    /// named templates.
    Json,
}

/// A chat template file named apart from the model directory. It replaces every template
/// the directory would give (its `chat_template.*` files and the tokenizer config's), as
/// Dynamo does with a card's `chat_template_file`. Its name does not matter.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct TemplateFile {
    pub path: PathBuf,
    pub format: TemplateFormat,
}

/// Everything read from a model directory, parsed once.
#[derive(Debug)]
pub struct ModelFiles {
    pub dir: PathBuf,
    /// Where further tokenizer instances are built from: `tokenizer.json`, read again from
    /// disk (checked against the digest taken at load) rather than kept in memory, in its
    /// own text or rewritten. It is often tens of megabytes, and instances are built rarely
    /// (one per shard).
    tokenizer_path: PathBuf,
    tokenizer_digest: blake3::Hash,
    /// The instance built while loading, handed out by the first [`ModelFiles::tokenizer`]
    /// call (building one takes a large share of a second, and its memory is not small).
    spare: std::sync::Mutex<Option<Tokenizer>>,
    /// The instance the tokenizer helper threads share ([`ModelFiles::helper_tokenizer`]).
    helper: std::sync::OnceLock<Tokenizer>,
    /// The first instance's token table, shared by the later ones (byte-level tokenizers).
    token_bytes: Option<Arc<super::bytes::TokenBytes>>,
    /// Named chat templates (`default`, `tool_use`, …), compiled.
    pub templates: BTreeMap<String, Arc<ChatTemplate>>,
    /// Named special tokens (`bos_token`, `eos_token`, `unk_token`, `sep_token`, `pad_token`,
    /// `cls_token`, `mask_token`) as text: the variables transformers gives every template.
    pub special_tokens: BTreeMap<String, String>,
    pub context_length: Option<u64>,
    /// Ids that end generation (generation_config.json, else config.json, else `eos_token`).
    pub eos_token_ids: Vec<u32>,
    /// Whether the tokenizer config asks for a BOS token at encode time.
    pub add_bos_token: bool,
    /// What encodes prompts (`--tokenizer`); further instances ([`ModelFiles::tokenizer`])
    /// carry the same library.
    pub encoding: Encoding,
}

fn read_json(path: &Path) -> Result<Option<Value>, LoadError> {
    match std::fs::read_to_string(path) {
        Ok(text) => serde_json::from_str(&text).map(Some).map_err(|e| err(path, format!("invalid JSON: {e}"))),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(err(path, e.to_string())),
    }
}

/// The text of a special-token entry: a string, or an AddedToken object's `content`.
fn token_text(v: &Value) -> Option<String> {
    match v {
        Value::String(s) => Some(s.clone()),
        Value::Object(o) => o.get("content").and_then(Value::as_str).map(str::to_string),
        _ => None,
    }
}

fn ids_of(v: Option<&Value>) -> Vec<u32> {
    match v {
        Some(Value::Number(n)) => n.as_u64().map(|x| vec![x as u32]).unwrap_or_default(),
        Some(Value::Array(a)) => a.iter().filter_map(Value::as_u64).map(|x| x as u32).collect(),
        _ => Vec::new(),
    }
}

const CONTEXT_KEYS: &[&str] =
    &["max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "max_sequence_length"];

fn context_length(config: Option<&Value>, tok_config: Option<&Value>) -> Option<u64> {
    let from = |v: &Value| CONTEXT_KEYS.iter().find_map(|k| v.get(*k).and_then(Value::as_u64));
    if let Some(c) = config {
        if let Some(n) = from(c).or_else(|| c.get("text_config").and_then(from)) {
            return Some(n);
        }
    }
    // transformers uses a huge sentinel (1e30) when the tokenizer has no bound.
    tok_config.and_then(|t| t.get("model_max_length")).and_then(Value::as_u64).filter(|n| *n < 10_000_000)
}

impl ModelFiles {
    /// Read and check a model directory. Any missing or malformed file that serving needs is
    /// an error naming that file; the model is then not served.
    pub fn load(dir: impl AsRef<Path>) -> Result<ModelFiles, LoadError> {
        ModelFiles::load_with(dir, None)
    }

    /// [`ModelFiles::load`], with the chat template taken from `template` when given.
    pub fn load_with(dir: impl AsRef<Path>, template: Option<&TemplateFile>) -> Result<ModelFiles, LoadError> {
        let (files, mut built) = Self::read(dir.as_ref(), template, 1, TokenizerChoice::default())?;
        *files.spare.lock().unwrap_or_else(|p| p.into_inner()) = built.pop();
        Ok(files)
    }

    /// [`ModelFiles::load_with`] and `instances` tokenizer instances (at least one), built
    /// side by side on up to as many threads as this process may run at once (at most
    /// [`MAX_BUILD_THREADS`]). The files keep no spare: further [`ModelFiles::tokenizer`]
    /// calls build from disk.
    pub fn load_instances(
        dir: impl AsRef<Path>,
        template: Option<&TemplateFile>,
        instances: usize,
    ) -> Result<(ModelFiles, Vec<Tokenizer>), LoadError> {
        Self::read(dir.as_ref(), template, instances, TokenizerChoice::default())
    }

    /// [`ModelFiles::load_instances`], prompts encoded as `choice` says when the library
    /// passes its check ([`super::backend::decide`]; [`ModelFiles::encoding`] says what was
    /// decided). A model the library fails for without fallback is an error.
    pub fn load_instances_choosing(
        dir: impl AsRef<Path>,
        template: Option<&TemplateFile>,
        instances: usize,
        choice: TokenizerChoice,
    ) -> Result<(ModelFiles, Vec<Tokenizer>), LoadError> {
        Self::read(dir.as_ref(), template, instances, choice)
    }

    fn read(
        dir: &Path,
        template: Option<&TemplateFile>,
        instances: usize,
        choice: TokenizerChoice,
    ) -> Result<(ModelFiles, Vec<Tokenizer>), LoadError> {
        let dir = dir.to_path_buf();
        if !dir.is_dir() {
            return Err(err(&dir, "not a directory"));
        }
        let tok_path = dir.join("tokenizer.json");
        let raw = std::fs::read_to_string(&tok_path).map_err(|e| err(&tok_path, e.to_string()))?;
        let tokenizer_digest = blake3::hash(raw.as_bytes());
        let threads = std::thread::available_parallelism().map_or(1, usize::from).min(MAX_BUILD_THREADS);
        // The other library reads the same text (freed once it is decided).
        let text = (choice.backend != TokenizerBackend::Default).then(|| raw.clone());
        let built = Tokenizer::instances_from_json_text(raw, instances, threads).map_err(|e| err(&tok_path, e))?;
        let (built, encoding) = match text {
            None => (built, Encoding::Default),
            Some(text) => match super::backend::decide(choice, &text, &built, threads) {
                Decision::Use(encoders) => {
                    let built = built.into_iter().zip(encoders).map(|(t, e)| t.with_encoder(e)).collect();
                    (built, Encoding::Library(choice.backend))
                }
                Decision::Default(why) => {
                    let why = why.unwrap_or_else(|| "not chosen".into());
                    (built, Encoding::FellBack(choice.backend, why))
                }
                Decision::Refuse(why) => return Err(err(&tok_path, why)),
            },
        };
        let tokenizer = &built[0];
        let config = read_json(&dir.join("config.json"))?;
        let tok_config = read_json(&dir.join("tokenizer_config.json"))?.unwrap_or(Value::Null);
        let gen_config = read_json(&dir.join("generation_config.json"))?;

        let mut special_tokens = BTreeMap::new();
        for name in ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token", "cls_token", "mask_token"] {
            if let Some(text) = tok_config.get(name).and_then(token_text) {
                special_tokens.insert(name.to_string(), text);
            }
        }

        let templates = match template {
            Some(t) => Self::load_template_file(t)?,
            None => Self::load_templates(&dir, &tok_config)?,
        };
        let mut eos_token_ids = ids_of(gen_config.as_ref().and_then(|g| g.get("eos_token_id")));
        if eos_token_ids.is_empty() {
            eos_token_ids = ids_of(config.as_ref().and_then(|c| c.get("eos_token_id")));
        }
        if eos_token_ids.is_empty() {
            if let Some(id) = special_tokens.get("eos_token").and_then(|t| tokenizer.token_to_id(t)) {
                eos_token_ids.push(id);
            }
        }
        let files = ModelFiles {
            context_length: context_length(config.as_ref(), Some(&tok_config)),
            add_bos_token: tok_config.get("add_bos_token").and_then(Value::as_bool).unwrap_or(false),
            dir,
            tokenizer_path: tok_path,
            tokenizer_digest,
            token_bytes: tokenizer.token_bytes(),
            spare: std::sync::Mutex::new(None),
            helper: std::sync::OnceLock::new(),
            templates,
            special_tokens,
            eos_token_ids,
            encoding,
        };
        Ok((files, built))
    }

    fn load_templates(dir: &Path, tok_config: &Value) -> Result<BTreeMap<String, Arc<ChatTemplate>>, LoadError> {
        let mut sources: BTreeMap<String, String> = BTreeMap::new();
        let jinja = dir.join("chat_template.jinja");
        let json = dir.join("chat_template.json");
        if jinja.is_file() {
            let text = std::fs::read_to_string(&jinja).map_err(|e| err(&jinja, e.to_string()))?;
            sources.insert("default".into(), text);
        } else if let Some(v) = read_json(&json)? {
            let t = v.get("chat_template").cloned().unwrap_or(Value::Null);
            Self::collect_templates(&json, &t, &mut sources)?;
        } else if let Some(t) = tok_config.get("chat_template") {
            Self::collect_templates(&dir.join("tokenizer_config.json"), t, &mut sources)?;
        }
        Self::compile_templates(dir, sources)
    }

    /// The templates of a file named apart from the directory. A JSON file must hold a
    /// `chat_template` (Dynamo refuses one without).
    fn load_template_file(t: &TemplateFile) -> Result<BTreeMap<String, Arc<ChatTemplate>>, LoadError> {
        let path = &t.path;
        let mut sources: BTreeMap<String, String> = BTreeMap::new();
        match t.format {
            TemplateFormat::Jinja => {
                let text = std::fs::read_to_string(path).map_err(|e| err(path, e.to_string()))?;
                sources.insert("default".into(), text);
            }
            TemplateFormat::Json => {
                let v = read_json(path)?.ok_or_else(|| err(path, "not found"))?;
                let t = v.get("chat_template").ok_or_else(|| err(path, "no `chat_template` field"))?;
                Self::collect_templates(path, t, &mut sources)?;
            }
        }
        Self::compile_templates(path, sources)
    }

    fn compile_templates(
        at: &Path,
        sources: BTreeMap<String, String>,
    ) -> Result<BTreeMap<String, Arc<ChatTemplate>>, LoadError> {
        let mut templates = BTreeMap::new();
        for (name, source) in sources {
            let compiled = ChatTemplate::compile(&source)
                .map_err(|e| err(at, format!("chat template `{name}` does not compile: {e}")))?;
            templates.insert(name, Arc::new(compiled));
        }
        Ok(templates)
    }

    fn collect_templates(path: &Path, t: &Value, out: &mut BTreeMap<String, String>) -> Result<(), LoadError> {
        match t {
            Value::String(s) => {
                out.insert("default".into(), s.clone());
            }
            Value::Array(list) => {
                for entry in list {
                    let name = entry.get("name").and_then(Value::as_str);
                    let template = entry.get("template").and_then(Value::as_str);
                    match (name, template) {
                        (Some(n), Some(s)) => {
                            out.insert(n.to_string(), s.to_string());
                        }
                        _ => return Err(err(path, "chat_template list entries need `name` and `template`")),
                    }
                }
            }
            Value::Null => {}
            _ => return Err(err(path, "chat_template must be a string or a list of named templates")),
        }
        Ok(())
    }

    /// A new tokenizer instance (one per shard; instances share nothing).
    pub fn tokenizer(&self) -> Result<Tokenizer, String> {
        if let Some(t) = self.spare.lock().unwrap_or_else(|p| p.into_inner()).take() {
            return Ok(t);
        }
        let path = &self.tokenizer_path;
        let raw = std::fs::read_to_string(path).map_err(|e| format!("{}: {e}", path.display()))?;
        if blake3::hash(raw.as_bytes()) != self.tokenizer_digest {
            return Err(format!("{}: changed on disk since the model was loaded", path.display()));
        }
        let encoder = match self.encoding {
            Encoding::Library(backend) => {
                let json = serde_json::from_str(&raw).map_err(|e| format!("{}: {e}", path.display()))?;
                Some(super::backend::Encoder::build(backend, json)?)
            }
            _ => None,
        };
        let t = Tokenizer::from_json_text_sharing(raw, self.token_bytes.clone())?;
        Ok(match encoder {
            Some(e) => t.with_encoder(e),
            None => t,
        })
    }

    /// Name `t` (a shard's instance, usually shard 0's) as the one the tokenizer helper
    /// threads share. The first call wins.
    pub fn share_with_helpers(&self, t: &Tokenizer) {
        let _ = self.helper.set(t.clone());
    }

    /// The instance for a tokenizer helper thread: the shared one when there is one (no
    /// second copy of the vocabulary, and no build while requests wait), else a new one.
    pub fn helper_tokenizer(&self) -> Result<Tokenizer, String> {
        match self.helper.get() {
            Some(t) => Ok(t.clone()),
            None => self.tokenizer(),
        }
    }

    /// The template transformers would pick: `tool_use` when tools are given and it exists,
    /// else `default`, else the only one.
    pub fn template(&self, with_tools: bool) -> Option<&Arc<ChatTemplate>> {
        if with_tools {
            if let Some(t) = self.templates.get("tool_use") {
                return Some(t);
            }
        }
        self.templates.get("default").or_else(|| (self.templates.len() == 1).then(|| self.templates.values().next())?)
    }
}
