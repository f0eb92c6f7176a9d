//! `switchyard -i`: the real binary under a pseudo-terminal, chatting with an in-tree mock
//! worker (echo mode: each answer is the text its prompt scripts between `[[echo]]` and
//! `[[/echo]]`) registered in a file store. Turns stream their answers, carry the history,
//! Ctrl-C stops an answer (and its worker request) and returns to the prompt, Ctrl-D and
//! Ctrl-C on an empty line exit with status 0; a piped stdin is one prompt.

mod common;

use std::io::{Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::process::CommandExt;
use std::process::{Child, Command, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use switchyard::worker::echo::EchoSplit;
use switchyard::worker::{MockConfig, MockWorker};

/// How long any one expected thing may take to show up before the test fails.
const PATIENCE: Duration = Duration::from_secs(90);

/// The binary running on the slave side of a pseudo-terminal, and everything it wrote.
struct Terminal {
    child: Child,
    master: std::fs::File,
    /// The terminal side, kept to read its settings.
    slave: std::fs::File,
    output: Arc<(Mutex<Vec<u8>>, Condvar)>,
    /// Where the next `expect` starts looking.
    seen: usize,
}

impl Terminal {
    fn start(store: &std::path::Path, extra: &[&str]) -> Terminal {
        let (mut master, mut slave) = (0, 0);
        let size = libc::winsize { ws_row: 40, ws_col: 200, ws_xpixel: 0, ws_ypixel: 0 };
        // SAFETY: openpty writes two descriptors into the given ints; the name pointer may be
        // null and the size is read only.
        let rc = unsafe { libc::openpty(&mut master, &mut slave, std::ptr::null_mut(), std::ptr::null(), &size) };
        assert_eq!(rc, 0, "openpty: {}", std::io::Error::last_os_error());
        // SAFETY: both descriptors were just opened by openpty and are owned here alone.
        let (master, slave) = unsafe { (OwnedFd::from_raw_fd(master), OwnedFd::from_raw_fd(slave)) };
        let slave = std::fs::File::from(slave);
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
        cmd.args(["-i", "--discovery-backend", "file", "--shards", "2", "--no-pin-shards"])
            .args(extra)
            .env("DYN_FILE_KV", store)
            .env("NO_COLOR", "1")
            .stdin(Stdio::from(slave.try_clone().unwrap()))
            .stdout(Stdio::from(slave.try_clone().unwrap()))
            .stderr(Stdio::from(slave.try_clone().unwrap()));
        // SAFETY: between fork and exec only async-signal-safe calls: a new session, then the
        // terminal on stdin made its controlling terminal.
        unsafe {
            cmd.pre_exec(|| {
                if libc::setsid() < 0 || libc::ioctl(0, libc::TIOCSCTTY, 0) < 0 {
                    return Err(std::io::Error::last_os_error());
                }
                Ok(())
            });
        }
        let child = cmd.spawn().expect("start switchyard -i");
        drop(cmd); // closes the child's copies of the slave on this side
        let master = std::fs::File::from(master);
        let output = Arc::new((Mutex::new(Vec::new()), Condvar::new()));
        let (mut reader, out) = (master.try_clone().unwrap(), output.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            while let Ok(n @ 1..) = reader.read(&mut buf) {
                out.0.lock().unwrap().extend_from_slice(&buf[..n]);
                out.1.notify_all();
            }
        });
        Terminal { child, master, slave, output, seen: 0 }
    }

    fn send(&mut self, bytes: &[u8]) {
        self.master.write_all(bytes).unwrap();
    }

    /// Wait until `needle` appears after what earlier calls saw; returns the text between.
    fn expect(&mut self, needle: &str) -> String {
        let t0 = Instant::now();
        let (lock, cv) = &*self.output;
        let mut out = lock.lock().unwrap();
        let needle = needle.as_bytes();
        loop {
            let rest = &out[self.seen..];
            if let Some(i) = rest.windows(needle.len()).position(|w| w == needle) {
                let before = String::from_utf8_lossy(&rest[..i]).into_owned();
                self.seen += i + needle.len();
                return before;
            }
            let shown = String::from_utf8_lossy(rest);
            let needle = String::from_utf8_lossy(needle);
            assert!(t0.elapsed() < PATIENCE, "no {needle:?} in the terminal; it shows:\n{shown}");
            out = cv.wait_timeout(out, Duration::from_millis(200)).unwrap().0;
        }
    }

    /// Send `line` and Enter; wait for `answer` on a line of its own, then the next prompt.
    fn turn(&mut self, line: &str, answer: &str) {
        self.send(format!("{line}\r").as_bytes());
        self.expect(&format!("\n{answer}\r\n"));
        self.expect(PROMPT);
    }

    /// The terminal's local modes (`c_lflag`).
    fn local_modes(&self) -> libc::tcflag_t {
        use std::os::fd::AsRawFd;
        // SAFETY: termios is plain data that tcgetattr fills in for an open terminal.
        unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            assert_eq!(libc::tcgetattr(self.slave.as_raw_fd(), &mut t), 0);
            t.c_lflag
        }
    }

    /// The exit status, once the process ended.
    fn exit_code(&mut self) -> Option<i32> {
        let t0 = Instant::now();
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.code();
            }
            assert!(t0.elapsed() < PATIENCE, "switchyard -i did not exit");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Terminal {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// An echoing mock worker of the Qwen3 model files, `itl` between its tokens.
fn echo_worker(itl: Duration) -> MockWorker {
    MockWorker::start(MockConfig {
        model_name: "qwen3".into(),
        model_dir: Some(common::qwen3_dir()),
        echo: Some(EchoSplit::Token),
        itl,
        ..MockConfig::default()
    })
    .expect("mock worker starts")
}

/// What the worker's `n`-th request was sent, its prompt decoded.
fn prompt_of(worker: &MockWorker, n: usize) -> String {
    let received = worker.received();
    let tok =
        switchyard::tokenize::tokenizer::Tokenizer::from_file(common::qwen3_dir().join("tokenizer.json")).unwrap();
    tok.decode(&received[n].token_ids, false).unwrap()
}

/// Poll `what` until it holds (the test fails past [`PATIENCE`]).
fn eventually(what: &str, f: impl Fn() -> bool) {
    let t0 = Instant::now();
    while !f() {
        assert!(t0.elapsed() < PATIENCE, "never: {what}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

const PROMPT: &str = "? User › ";

#[test]
fn two_turns_with_history_ctrl_c_stops_an_answer_ctrl_d_exits() {
    let store = common::TempDir::new("interactive-chat");
    let port = common::free_port();
    let mut term = Terminal::start(&store.0, &["--http-port", &port.to_string()]);
    // No model yet: the session says it waits, and draws no prompt.
    let before = term.expect("waiting for a model to be discovered");
    assert!(!before.contains(PROMPT), "{before}");
    let worker = echo_worker(Duration::from_millis(30));
    worker.register_file(&store.0).unwrap();
    term.expect("connected to qwen3");
    term.expect(PROMPT);
    // Nothing listens on the HTTP port.
    assert!(std::net::TcpStream::connect(("127.0.0.1", port)).is_err(), "port {port} answers");

    // Turn one: the answer streams on its own line, then the prompt is back.
    term.turn("[[echo]]alpha reply[[/echo]]", "alpha reply");
    // Turn two scripts nothing itself: the answer can only come from the first turn, sent again.
    term.turn("and again?", "alpha reply");
    assert_eq!(worker.received().len(), 2);
    let second = prompt_of(&worker, 1);
    let at = |s: &str| second.find(s).unwrap_or_else(|| panic!("no {s:?} in the second prompt:\n{second}"));
    assert!(
        at("user\n[[echo]]alpha reply[[/echo]]") < at("assistant\nalpha reply")
            && at("assistant\nalpha reply") < at("user\nand again?"),
        "{second}"
    );
    assert_eq!(worker.received()[1].max_tokens, Some(8192));

    // Turn three: a long answer, stopped by Ctrl-C once it streams.
    let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    term.send(format!("[[echo]]{}[[/echo]]\r", words.join(" ")).as_bytes());
    term.expect("\nw0 w1 w2");
    term.send(b"\x03");
    let answer = term.expect(PROMPT);
    assert!(!answer.contains("w399"), "the whole answer came: {answer}");
    eventually("the worker was told to stop", || worker.stats().killed == 1);
    assert_eq!(worker.stats().completed, 2);

    // The session goes on, the stopped answer (as far as it came) in its history.
    term.turn("[[echo]]after the stop[[/echo]]", "after the stop");
    let fourth = prompt_of(&worker, 3);
    assert!(fourth.contains("assistant\nw0 w1 w2"), "{fourth}");

    // Up recalls the last line.
    term.turn("\x1b[A", "after the stop");
    assert_eq!(worker.received().len(), 5);

    // Raw mode while the session runs; the terminal as it was once it ends.
    let cooked = libc::ICANON | libc::ECHO | libc::ISIG;
    assert_eq!(term.local_modes() & cooked, 0);
    term.send(b"\x04");
    assert_eq!(term.exit_code(), Some(0));
    assert_eq!(term.local_modes() & cooked, cooked);
}

#[test]
fn ctrl_c_drops_a_line_then_exits_on_an_empty_one_and_a_failed_turn_is_left_out() {
    let store = common::TempDir::new("interactive-ctrl-c");
    let mut worker = echo_worker(Duration::from_millis(1));
    worker.register_file(&store.0).unwrap();
    let mut term = Terminal::start(&store.0, &[]);
    term.expect(PROMPT);
    term.turn("[[echo]]kept[[/echo]]", "kept");
    // Ctrl-C on a line with text drops it: nothing is sent.
    term.send(b"dropped line\x03");
    term.expect("^C\r");
    term.expect(PROMPT);
    assert_eq!(worker.received().len(), 1);
    // A turn that fails (its model went away) is logged and not kept.
    worker.stop();
    term.send(b"[[echo]]fails[[/echo]]\r");
    term.expect("request failed: ");
    term.expect(PROMPT);
    let mut again = echo_worker(Duration::from_millis(1));
    again.register_file(&store.0).unwrap();
    term.send(b"once more\r");
    let t0 = Instant::now();
    // Until the worker is discovered again the turn fails; then it is answered from the
    // history, which holds the first turn and not the failed one.
    loop {
        term.expect("✔ User · once more");
        term.expect(PROMPT);
        if again.received().len() == 1 {
            break;
        }
        assert!(t0.elapsed() < PATIENCE, "the new worker was never asked");
        std::thread::sleep(Duration::from_millis(100));
        term.send(b"once more\r");
    }
    let prompt = prompt_of(&again, 0);
    assert!(prompt.contains("[[echo]]kept[[/echo]]") && !prompt.contains("fails"), "{prompt}");
    again.stop();
    term.send(b"\x03");
    assert_eq!(term.exit_code(), Some(0));
}

#[test]
fn a_piped_stdin_is_one_prompt() {
    let store = common::TempDir::new("interactive-piped");
    let worker = echo_worker(Duration::from_millis(1));
    worker.register_file(&store.0).unwrap();
    let run = |input: &str| {
        let mut child = Command::new(env!("CARGO_BIN_EXE_switchyard"))
            .args(["-i", "--discovery-backend", "file", "--shards", "1", "--no-pin-shards"])
            .env("DYN_FILE_KV", &store.0)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("start switchyard -i");
        child.stdin.take().unwrap().write_all(input.as_bytes()).unwrap();
        let out = child.wait_with_output().unwrap();
        (
            out.status.code(),
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };
    let (code, stdout, stderr) = run("[[echo]]piped answer[[/echo]]\n");
    assert_eq!((code, stdout.as_str()), (Some(0), "piped answer\n"), "{stderr}");
    assert_eq!(worker.received().len(), 1);
    let (code, stdout, stderr) = run("");
    assert_eq!((code, stdout.as_str()), (Some(1), ""), "{stderr}");
    assert!(stderr.contains("nothing to ask"), "{stderr}");
}

#[test]
fn sigterm_mid_answer_stops_it_and_ends_the_session() {
    let store = common::TempDir::new("interactive-sigterm");
    let worker = echo_worker(Duration::from_millis(30));
    worker.register_file(&store.0).unwrap();
    let mut term = Terminal::start(&store.0, &[]);
    term.expect(PROMPT);
    let words: Vec<String> = (0..400).map(|i| format!("w{i}")).collect();
    term.send(format!("[[echo]]{}[[/echo]]\r", words.join(" ")).as_bytes());
    term.expect("\nw0 w1 w2");
    // SAFETY: kill(2) with the pid of a child this test owns.
    assert_eq!(unsafe { libc::kill(term.child.id() as i32, libc::SIGTERM) }, 0);
    term.expect("signal 15 received: draining");
    assert_eq!(term.exit_code(), Some(0));
    eventually("the worker was told to stop", || worker.stats().killed == 1);
    let cooked = libc::ICANON | libc::ECHO | libc::ISIG;
    assert_eq!(term.local_modes() & cooked, cooked);
}
