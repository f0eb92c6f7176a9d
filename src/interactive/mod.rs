//! `-i` / `--interactive`: text chat in the terminal with the model discovery finds, instead
//! of the HTTP server (Dynamo 1.6.1's `run_input(runtime, "text", engine)`).
//!
//! Everything else starts as for the server — shards, discovery, control, KV ingest — but
//! the shards bind no listener. The terminal is one more thin adapter over the request path:
//! each turn is a streamed chat completion body carrying the whole conversation, handed to a
//! shard's inbox and answered by the OpenAI adapter ([`turn`]), so templates, tokenization,
//! routing, streaming and cancellation are those of a `POST /v1/chat/completions`.
//!
//! What the user sees (stdin a terminal):
//! * log lines saying the session waits for a model, then `connected to NAME`: the first
//!   model discovery serves (the oldest, by name among equals; kept for the session, as
//!   1.6.1 keeps the first one it finds);
//! * the prompt `? User › ` on stderr, with editing and a history on the arrow keys
//!   ([`editor`]); Enter on an empty line sends nothing;
//! * the answer's text streamed to stdout, then a newline; the assistant turn (with its
//!   reasoning, when the model's parser splits reasoning out) joins the conversation;
//! * Ctrl-C while an answer streams stops it — on the worker too — and the prompt comes back
//!   (what was shown stays in the conversation); Ctrl-C on a line drops the line; Ctrl-C on an
//!   empty line, or Ctrl-D, ends the session (and the process, with status 0);
//! * a failed turn (no such model, a worker's error) is logged, and the conversation goes on
//!   without it.
//!
//! With stdin not a terminal, all of it is one prompt: it is asked once, its answer printed,
//! and the process exits (status 1 when the turn failed). SIGINT and SIGTERM end a session
//! at any point, as they stop the server.
//!
//! Runs on the main thread ([`run`]), with two threads of its own that only wait: one reads
//! stdin, one waits for signals. The turns' tasks run on shard 0.

pub mod editor;
pub mod turn;

use std::io::{Read as _, Write as _};
use std::sync::Arc;

use crate::config::Config;
use crate::registry::Registry;
use crate::shard::{Server, ShardMsg};
use editor::{Decoder, Editor, Outcome, RawMode};
use turn::{Conversation, Piece, Reader};

/// How a session ended.
#[derive(Debug, PartialEq, Eq)]
pub enum End {
    /// The user ended it (Ctrl-D, Ctrl-C on an empty line, the end of stdin), or the one
    /// prompt of a piped stdin was answered.
    Quit,
    /// The session could not run, or the prompt of a piped stdin failed.
    Failed,
    /// This signal arrived (SIGINT, SIGTERM).
    Signal(i32),
}

impl End {
    /// The process's exit status after a session that ended so.
    pub fn exit_code(&self) -> i32 {
        match self {
            End::Failed => 1,
            End::Quit | End::Signal(_) => 0,
        }
    }
}

/// Run the session until it ends. `registry` receives every Registry the shards are handed
/// (a control tap); `wait_signal` blocks until a termination signal arrives and returns it
/// (it is called over and over on a thread of its own).
pub fn run(
    server: &Server,
    cfg: &Config,
    registry: flume::Receiver<Arc<Registry>>,
    mut wait_signal: impl FnMut() -> i32 + Send + 'static,
) -> End {
    let Some(inbox) = server.inbox(0) else {
        crate::log::error("interactive: no shard to run requests on");
        return End::Failed;
    };
    let (signals_tx, signals) = flume::unbounded();
    let waiter = move || while signals_tx.send(wait_signal()).is_ok() {};
    if let Err(e) = std::thread::Builder::new().name("signals".into()).spawn(waiter) {
        crate::log::error(&format!("interactive: cannot start the thread waiting for signals: {e}"));
        return End::Failed;
    }
    let (keys_tx, keys) = flume::unbounded();
    if let Err(e) = std::thread::Builder::new().name("terminal-input".into()).spawn(move || read_stdin(keys_tx)) {
        crate::log::error(&format!("interactive: cannot start the thread reading stdin: {e}"));
        return End::Failed;
    }
    let mut session = Session {
        inputs: Inputs { keys: Some(keys), signals: Some(signals), registry: Some(registry), latest: None },
        inbox,
        field: cfg.reasoning_field,
        typed: Decoder::default(),
    };
    match editor::is_terminal(0) {
        true => session.chat(),
        false => session.single(),
    }
}

/// Forward what stdin gives until its end.
fn read_stdin(tx: flume::Sender<Vec<u8>>) {
    let mut stdin = std::io::stdin().lock();
    let mut buf = vec![0u8; 4096];
    loop {
        match stdin.read(&mut buf) {
            Ok(0) => return,
            Ok(n) => {
                if tx.send(buf[..n].to_vec()).is_err() {
                    return;
                }
            }
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(_) => return,
        }
    }
}

/// What the session waits on.
struct Inputs {
    /// Bytes from stdin; `None` once it ended.
    keys: Option<flume::Receiver<Vec<u8>>>,
    signals: Option<flume::Receiver<i32>>,
    registry: Option<flume::Receiver<Arc<Registry>>>,
    /// The newest Registry received.
    latest: Option<Arc<Registry>>,
}

/// What arrived.
enum Input {
    Keys(Vec<u8>),
    /// Stdin ended.
    KeysEnd,
    Signal(i32),
    /// A new Registry (now in `latest`).
    Registry,
    /// A piece of the turn's answer (`None`: the shard let go of the turn).
    Piece(Option<Piece>),
    /// Nothing is left that could arrive.
    Closed,
}

impl Inputs {
    /// Wait for the next input (and for `pieces` of a turn, when one is on its way).
    fn next(&mut self, pieces: Option<&flume::Receiver<Piece>>) -> Input {
        enum Got {
            Keys(Option<Vec<u8>>),
            Signal(Option<i32>),
            Registry(Option<Arc<Registry>>),
            Piece(Option<Piece>),
        }
        loop {
            if self.keys.is_none() && self.signals.is_none() && self.registry.is_none() && pieces.is_none() {
                return Input::Closed;
            }
            let mut select = flume::Selector::new();
            if let Some(r) = &self.keys {
                select = select.recv(r, |m| Got::Keys(m.ok()));
            }
            if let Some(r) = &self.signals {
                select = select.recv(r, |m| Got::Signal(m.ok()));
            }
            if let Some(r) = &self.registry {
                select = select.recv(r, |m| Got::Registry(m.ok()));
            }
            if let Some(r) = pieces {
                select = select.recv(r, |m| Got::Piece(m.ok()));
            }
            match select.wait() {
                Got::Keys(Some(b)) => return Input::Keys(b),
                Got::Keys(None) => {
                    self.keys = None;
                    return Input::KeysEnd;
                }
                Got::Signal(Some(s)) => return Input::Signal(s),
                Got::Signal(None) => self.signals = None,
                Got::Registry(Some(r)) => {
                    self.latest = Some(r);
                    return Input::Registry;
                }
                Got::Registry(None) => self.registry = None,
                Got::Piece(p) => return Input::Piece(p),
            }
        }
    }
}

/// How a turn went.
enum Answered {
    /// The whole answer came.
    Whole(Reader),
    /// Ctrl-C stopped it; what came before is kept.
    Stopped(Reader),
    /// The request failed (the error's message).
    Failed(String),
    Signal(i32),
}

struct Session {
    inputs: Inputs,
    /// Shard 0's inbox, where every turn runs.
    inbox: flume::Sender<ShardMsg>,
    /// `--reasoning-field-name`: where answers carry parsed reasoning.
    field: &'static str,
    /// Keys typed and not read yet (typed ahead while an answer streamed, say).
    typed: Decoder,
}

impl Session {
    /// The chat with a terminal: prompt, answer, again.
    fn chat(&mut self) -> End {
        let _raw = match RawMode::enter(0) {
            Ok(r) => r,
            Err(e) => {
                crate::log::error(&format!("interactive: cannot set up the terminal: {e}"));
                return End::Failed;
            }
        };
        let model = match self.model(true) {
            Ok(m) => m,
            Err(end) => return end,
        };
        crate::log::info("Ctrl-C stops an answer; Ctrl-C on an empty line or Ctrl-D exits");
        let mut editor = Editor::new(std::env::var_os("NO_COLOR").is_some_and(|v| !v.is_empty()));
        let mut conversation = Conversation::default();
        loop {
            let line = match self.line(&mut editor) {
                Ok(l) => l,
                Err(end) => return end,
            };
            conversation.ask(&line);
            match self.answer(&model, &conversation, true) {
                Answered::Whole(r) | Answered::Stopped(r) => conversation.answered(&r.content, &r.reasoning),
                Answered::Failed(e) => {
                    conversation.withdraw();
                    crate::log::error(&format!("request failed: {e}"));
                }
                Answered::Signal(s) => return End::Signal(s),
            }
        }
    }

    /// Stdin is not a terminal: all of it is one prompt, asked once.
    fn single(&mut self) -> End {
        let mut prompt = Vec::new();
        loop {
            match self.inputs.next(None) {
                Input::Keys(b) => prompt.extend_from_slice(&b),
                Input::KeysEnd | Input::Closed => break,
                Input::Signal(s) => return End::Signal(s),
                Input::Registry | Input::Piece(_) => {}
            }
        }
        let text = String::from_utf8_lossy(&prompt);
        let text = text.trim_end_matches(['\r', '\n']);
        if text.trim().is_empty() {
            crate::log::error("interactive: nothing to ask (stdin is empty)");
            return End::Failed;
        }
        let model = match self.model(false) {
            Ok(m) => m,
            Err(end) => return end,
        };
        let mut conversation = Conversation::default();
        conversation.ask(text);
        match self.answer(&model, &conversation, false) {
            Answered::Whole(_) | Answered::Stopped(_) => End::Quit,
            Answered::Failed(e) => {
                crate::log::error(&format!("request failed: {e}"));
                End::Failed
            }
            Answered::Signal(s) => End::Signal(s),
        }
    }

    /// Wait until discovery serves a model to chat with. On a terminal, Ctrl-C or Ctrl-D
    /// gives up; other keys are kept for the prompt.
    fn model(&mut self, tty: bool) -> Result<String, End> {
        let mut told = false;
        loop {
            if let Some(name) = self.inputs.latest.as_deref().and_then(chat_model) {
                crate::log::info(&format!("connected to {name}"));
                return Ok(name);
            }
            if !told {
                crate::log::info("waiting for a model to be discovered");
                told = true;
            }
            match self.inputs.next(None) {
                Input::Keys(b) if tty => {
                    if b.iter().any(|&c| c == 0x03 || c == 0x04) {
                        return Err(End::Quit);
                    }
                    self.typed.push(&b);
                }
                Input::KeysEnd if tty => return Err(End::Quit),
                Input::Closed => return Err(if tty { End::Quit } else { End::Failed }),
                Input::Signal(s) => return Err(End::Signal(s)),
                _ => {}
            }
        }
    }

    /// Read one line at the prompt.
    fn line(&mut self, editor: &mut Editor) -> Result<String, End> {
        let mut out = Vec::new();
        editor.begin(editor::columns(2), &mut out);
        loop {
            let cols = editor::columns(2);
            while let Some(key) = self.typed.next_key() {
                match editor.key(key, cols, &mut out) {
                    Outcome::Editing => {}
                    Outcome::Line(l) => {
                        draw(&mut out);
                        return Ok(l);
                    }
                    Outcome::Quit => {
                        draw(&mut out);
                        return Err(End::Quit);
                    }
                }
            }
            editor.refresh(cols, &mut out);
            draw(&mut out);
            match self.inputs.next(None) {
                Input::Keys(b) => self.typed.push(&b),
                Input::KeysEnd | Input::Closed => {
                    draw(&mut b"\r\n".to_vec());
                    return Err(End::Quit);
                }
                Input::Signal(s) => {
                    draw(&mut b"\r\n".to_vec());
                    return Err(End::Signal(s));
                }
                Input::Registry | Input::Piece(_) => {}
            }
        }
    }

    /// Send the conversation to `model` and stream the answer to stdout. On a terminal
    /// (`tty`), Ctrl-C stops the answer; what else is typed meanwhile waits for the prompt.
    fn answer(&mut self, model: &str, conversation: &Conversation, tty: bool) -> Answered {
        let sent = match turn::start(&self.inbox, conversation.request(model)) {
            Ok(s) => s,
            Err(e) => return Answered::Failed(e),
        };
        let mut reader = Reader::new(self.field);
        let answered = loop {
            match self.inputs.next(Some(&sent.pieces)) {
                Input::Piece(Some(Piece::Sse(b))) => {
                    show(&reader.feed(&b));
                    if let Some(e) = reader.error.take() {
                        break Answered::Failed(e);
                    }
                }
                Input::Piece(Some(Piece::End)) => break Answered::Whole(reader),
                Input::Piece(Some(Piece::Refused(e))) => break Answered::Failed(e),
                Input::Piece(None) => break Answered::Failed("the answer was cut short (shutting down)".into()),
                Input::Keys(b) if tty => match b.iter().position(|&c| c == 0x03) {
                    // What was typed before Ctrl-C goes with the answer it interrupted.
                    Some(i) => {
                        self.typed.clear();
                        self.typed.push(&b[i + 1..]);
                        break Answered::Stopped(reader);
                    }
                    None => self.typed.push(&b),
                },
                Input::Signal(s) => break Answered::Signal(s),
                Input::Keys(_) | Input::KeysEnd | Input::Registry | Input::Closed => {}
            }
        };
        // Dropping the turn stops it on the shard (and at the worker) if it still runs.
        drop(sent);
        show("\n");
        answered
    }
}

/// The model to chat with in `registry`: the oldest served model (by name among equals)
/// whose card declares chat and that has its workers.
fn chat_model(registry: &Registry) -> Option<String> {
    let served = registry.models.iter().filter_map(|m| {
        let s = registry.serving.get(&m.name)?;
        (s.ready() && s.surfaces.contains(crate::registry::Surfaces::CHAT)).then(|| (m.created, s.name.clone()))
    });
    served.min().map(|(_, name)| name)
}

/// Write `out` to the terminal (stderr) and empty it.
fn draw(out: &mut Vec<u8>) {
    if out.is_empty() {
        return;
    }
    let mut err = std::io::stderr().lock();
    let _ = err.write_all(out);
    let _ = err.flush();
    out.clear();
}

/// Write answer text to stdout now.
fn show(text: &str) {
    if text.is_empty() {
        return;
    }
    let mut o = std::io::stdout().lock();
    let _ = o.write_all(text.as_bytes());
    let _ = o.flush();
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::registry::{ModelEntry, Serving};

    fn serving(name: &str, workers: usize) -> Arc<Serving> {
        Arc::new(Serving {
            name: name.into(),
            tokens: None,
            tensor: None,
            workers: (0..workers as u64)
                .map(|i| crate::registry::Worker {
                    addr: std::net::SocketAddr::from(([127, 0, 0, 1], 1)),
                    path: String::new(),
                    nats_subject: None,
                    codec: Default::default(),
                    instance_id: 100 + i,
                    cpu: false,
                    dp_start: 0,
                    dp_size: 1,
                    bootstrap: None,
                })
                .collect(),
            mdc_sum: None,
            limits: Default::default(),
            reasoning: None,
            tools: None,
            prefill: None,
            pool: Default::default(),
            needs_prefill: false,
            remote_indexers: Vec::new(),
            surfaces: crate::registry::Surfaces::CHAT,
            role: Default::default(),
        })
    }

    #[test]
    fn the_oldest_ready_model_is_chosen() {
        let mut r = Registry::default();
        assert_eq!(chat_model(&r), None);
        for (name, created, workers) in [("zeta", 5, 1), ("beta", 7, 1), ("alpha", 7, 1), ("idle", 1, 0)] {
            r.models.push(ModelEntry { name: name.into(), created, context_window: 0 });
            r.serving.insert(name.into(), serving(name, workers));
        }
        assert_eq!(chat_model(&r).as_deref(), Some("zeta"));
        r.models.retain(|m| m.name != "zeta");
        assert_eq!(chat_model(&r).as_deref(), Some("alpha"));
    }
}
