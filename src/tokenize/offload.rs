//! Keeping long tokenizations off the shard threads.
//!
//! A shard must not stall its other connections for more than about a millisecond. Encoding
//! runs at roughly 20 M tokens/s on one core here, so a typical chat prompt (≤ 4 K tokens) is
//! encoded inline in well under that budget, while a 60 K-token prompt takes several
//! milliseconds. Prompts longer than [`INLINE_MAX_BYTES`] therefore go to a helper thread
//! owned by the shard: the shard sends the text over a channel and awaits the ids; its other
//! tasks keep running meanwhile. The helper is not pinned, so the kernel can put it on any idle
//! core. It shares a shard's tokenizer instance ([`ModelFiles::helper_tokenizer`]) rather than
//! building its own: a second copy of the vocabulary would cost as much memory as the shard's
//! (~20 MB for Qwen3), and building it ~70 MB more for a moment, on the first long prompt.
//!
//! Splitting the text into pieces and yielding between them was the other option; it is not
//! exact in general (a BPE merge or a pre-tokenizer rule may span the cut), so it was not used.

use std::sync::Arc;
use std::thread::JoinHandle;

use super::model::ModelFiles;
use super::tokenizer::Tokenizer;

/// Texts up to this size are tokenized inline on the shard (≈ 4 K tokens, ≈ 0.2 ms).
pub const INLINE_MAX_BYTES: usize = 16 * 1024;

struct Job {
    text: String,
    add_special_tokens: bool,
    reply: flume::Sender<Result<Vec<u32>, String>>,
}

/// A helper thread that tokenizes long texts for one shard and one model.
pub struct Offload {
    jobs: Option<flume::Sender<Job>>,
    thread: Option<JoinHandle<()>>,
}

impl Offload {
    /// Start the helper with the tokenizer instance `model` gives helpers.
    pub fn start(model: Arc<ModelFiles>, name: String) -> std::io::Result<Offload> {
        let (tx, rx) = flume::unbounded::<Job>();
        let thread = std::thread::Builder::new().name(name).spawn(move || {
            let tokenizer = match model.helper_tokenizer() {
                Ok(t) => t,
                Err(e) => {
                    for job in rx.iter() {
                        let _ = job.reply.send(Err(e.clone()));
                    }
                    return;
                }
            };
            for job in rx.iter() {
                let mut ids = Vec::new();
                let r = tokenizer.encode_into(&job.text, job.add_special_tokens, &mut ids).map(|_| ids);
                let _ = job.reply.send(r);
            }
        })?;
        Ok(Offload { jobs: Some(tx), thread: Some(thread) })
    }

    /// Tokenize `text` on the helper thread; the calling task waits, its shard does not.
    pub async fn encode(&self, text: String) -> Result<Vec<u32>, String> {
        self.encode_with(text, false).await
    }

    /// [`Offload::encode`], optionally adding the tokenizer's own special tokens.
    pub async fn encode_with(&self, text: String, add_special_tokens: bool) -> Result<Vec<u32>, String> {
        let (reply, result) = flume::bounded(1);
        let jobs = self.jobs.as_ref().ok_or("tokenizer helper stopped")?;
        jobs.send(Job { text, add_special_tokens, reply }).map_err(|_| "tokenizer helper stopped".to_string())?;
        result.recv_async().await.map_err(|_| "tokenizer helper stopped".to_string())?
    }
}

impl Drop for Offload {
    fn drop(&mut self) {
        self.jobs.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// `text` encoded inline when it is short enough for the shard; `None`: it is not (hand it
/// to the helper, [`Offload::encode_with`]), or the instance's encoder waits on a pool of its
/// own ([`Tokenizer::encodes_inline`]: basetenkenizer), which a shard must not. A caller makes
/// no future for the common case.
pub fn encode_short(inline: &Tokenizer, text: &str, add_special_tokens: bool) -> Option<Result<Vec<u32>, String>> {
    if text.len() > INLINE_MAX_BYTES || !inline.encodes_inline() {
        return None;
    }
    let mut ids = Vec::new();
    Some(inline.encode_into(text, add_special_tokens, &mut ids).map(|()| ids))
}
