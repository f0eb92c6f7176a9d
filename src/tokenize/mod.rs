//! Pre- and post-processing of text: model files, chat templates, tokenization.
//!
//! * [`model`]: read a model directory once (off the shard threads) into [`model::ModelFiles`].
//! * [`template`]: render a conversation exactly as transformers' `apply_chat_template` does.
//! * [`native`]: recognised templates written without the template engine where that is exact.
//! * [`pyjson`]: Python's `json.dumps` / `repr` text forms that templates print.
//! * [`tokenizer`]: one tokenizer instance per shard: encode prompts, decode ids.
//! * [`bytes`]: every token's bytes for byte-level tokenizers, for streaming decode.
//! * [`backend`], [`parity`]: `--tokenizer`'s other encoders, checked against the default.
//! * [`canonical`]: older `tokenizer.json` formats rewritten for the reader, in little memory.
//!
//! Called by the request path on a shard (render → encode) and by the control side when a
//! model appears (load). Depends on nothing of the HTTP or routing layers.

pub mod backend;
pub mod bytes;
pub mod canonical;
pub mod detok;
pub mod model;
pub mod native;
pub mod offload;
pub mod parity;
pub mod preprocess;
pub mod pyjson;
pub mod stop;
pub mod template;
pub mod tokenizer;

pub use model::{ModelFiles, TemplateFile, TemplateFormat};
pub use template::{ChatTemplate, RenderArgs};
pub use tokenizer::Tokenizer;
