//! The terminal's line editor: raw mode on the terminal ([`RawMode`]), its bytes decoded into
//! keys ([`Decoder`]), and the `User` prompt line with editing and history ([`Editor`]).
//!
//! Written on termios (through `libc`) rather than a line-editing crate: the prompt needs a
//! line, the cursor keys, a history and Ctrl-C / Ctrl-D, which is this much code. Raw mode
//! turns off the terminal's echo, line buffering and signal keys, so Ctrl-C reaches the
//! session as a byte — at the prompt and while an answer streams alike — and output
//! processing stays on (`\n` still starts a new line). The editor draws on stderr (the
//! answers go to stdout, as in 1.6.1) and knows lines longer than the terminal is wide.
//!
//! Runs on the terminal thread. [`Decoder`] and [`Editor`] do no I/O: they take bytes and
//! keys and append what to draw to a buffer, so tests drive them directly.

use std::io::Write as _;

use unicode_width::UnicodeWidthChar;

/// A key the editor knows.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Key {
    Char(char),
    Enter,
    Backspace,
    Delete,
    Left,
    Right,
    Up,
    Down,
    Home,
    End,
    /// Ctrl-U: the whole line goes.
    KillLine,
    /// Ctrl-W: the word before the cursor goes.
    KillWord,
    /// Ctrl-C.
    Interrupt,
    /// Ctrl-D.
    Eof,
    /// Anything else (other control keys, unknown escape sequences): ignored.
    Other,
}

/// Turns the terminal's bytes into keys; an escape sequence or a UTF-8 character split across
/// reads waits for the rest.
#[derive(Debug, Default)]
pub struct Decoder {
    pending: Vec<u8>,
}

impl Decoder {
    pub fn push(&mut self, bytes: &[u8]) {
        self.pending.extend_from_slice(bytes);
    }

    /// Forget what was typed but not read yet.
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// The next complete key, if one has arrived.
    pub fn next_key(&mut self) -> Option<Key> {
        let (key, used) = decode(&self.pending)?;
        self.pending.drain(..used);
        Some(key)
    }
}

/// The key at the start of `b` and its length in bytes; `None` when `b` is empty or holds
/// only the start of a key.
fn decode(b: &[u8]) -> Option<(Key, usize)> {
    let first = *b.first()?;
    let key = match first {
        // `\r\n` is one Enter (a pasted Windows line end).
        b'\r' if b.get(1) == Some(&b'\n') => return Some((Key::Enter, 2)),
        b'\r' | b'\n' => Key::Enter,
        0x7f | 0x08 => Key::Backspace,
        0x01 => Key::Home,
        0x02 => Key::Left,
        0x03 => Key::Interrupt,
        0x04 => Key::Eof,
        0x05 => Key::End,
        0x06 => Key::Right,
        0x0e => Key::Down,
        0x10 => Key::Up,
        0x15 => Key::KillLine,
        0x17 => Key::KillWord,
        0x1b => return escape(b),
        c if c < 0x20 => Key::Other,
        _ => return utf8(b),
    };
    Some((key, 1))
}

/// An escape sequence: `ESC [ params final` or `ESC O final`; any other `ESC x` is one
/// unknown key.
fn escape(b: &[u8]) -> Option<(Key, usize)> {
    match *b.get(1)? {
        b'[' => {
            let end = b[2..].iter().position(|c| (0x40..=0x7e).contains(c))? + 2;
            let key = match &b[2..=end] {
                b"A" => Key::Up,
                b"B" => Key::Down,
                b"C" => Key::Right,
                b"D" => Key::Left,
                b"H" | b"1~" | b"7~" => Key::Home,
                b"F" | b"4~" | b"8~" => Key::End,
                b"3~" => Key::Delete,
                _ => Key::Other,
            };
            Some((key, end + 1))
        }
        b'O' => {
            let key = match *b.get(2)? {
                b'A' => Key::Up,
                b'B' => Key::Down,
                b'C' => Key::Right,
                b'D' => Key::Left,
                b'H' => Key::Home,
                b'F' => Key::End,
                _ => Key::Other,
            };
            Some((key, 3))
        }
        _ => Some((Key::Other, 2)),
    }
}

/// One UTF-8 character; a byte that cannot start one is an unknown key.
fn utf8(b: &[u8]) -> Option<(Key, usize)> {
    let len = match b[0] {
        0x00..=0x7f => 1,
        0xc2..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf4 => 4,
        _ => return Some((Key::Other, 1)),
    };
    let bytes = b.get(..len)?;
    match std::str::from_utf8(bytes).ok().and_then(|s| s.chars().next()) {
        Some(c) => Some((Key::Char(c), len)),
        None => Some((Key::Other, 1)),
    }
}

/// What a key did to the line.
#[derive(Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Still editing.
    Editing,
    /// Enter on a line with text: the line.
    Line(String),
    /// Ctrl-C on an empty line, or Ctrl-D on an empty line: the user is done.
    Quit,
}

/// The prompt, as dialoguer's colourful theme draws it for 1.6.1: `? User › ` while editing,
/// `✔ User · text` once sent.
const PROMPT: &str = "\x1b[33m?\x1b[0m \x1b[1mUser\x1b[0m \x1b[38;5;8m›\x1b[0m ";
const PROMPT_PLAIN: &str = "? User › ";
const PROMPT_COLUMNS: usize = 9;

/// The `User` line: its text, cursor and history, and where the drawing left the cursor.
#[derive(Debug, Default)]
pub struct Editor {
    line: Vec<char>,
    cursor: usize,
    history: Vec<String>,
    /// The history entry shown (`None`: the line being written, kept in `draft`).
    browsing: Option<usize>,
    draft: Vec<char>,
    /// Rows between the prompt's first row and the cursor, as last drawn.
    row: usize,
    /// The line changed since it was drawn.
    dirty: bool,
    /// No colours (`NO_COLOR`).
    plain: bool,
}

impl Editor {
    pub fn new(plain: bool) -> Editor {
        Editor { plain, ..Editor::default() }
    }

    /// Start a new line: draw the prompt.
    pub fn begin(&mut self, cols: usize, out: &mut Vec<u8>) {
        self.line.clear();
        self.cursor = 0;
        self.browsing = None;
        self.row = 0;
        self.draw(cols, out);
    }

    /// Apply `key`. A line sent, dropped or ended is drawn at once (appended to `out`); other
    /// changes wait for [`Editor::refresh`], so keys that came together (a paste) are drawn
    /// once.
    pub fn key(&mut self, key: Key, cols: usize, out: &mut Vec<u8>) -> Outcome {
        match key {
            Key::Char(c) => {
                self.line.insert(self.cursor, c);
                self.cursor += 1;
            }
            Key::Enter if self.line.iter().all(|c| c.is_whitespace()) => {}
            Key::Enter => return Outcome::Line(self.submit(out)),
            Key::Backspace if self.cursor > 0 => {
                self.cursor -= 1;
                self.line.remove(self.cursor);
            }
            Key::Delete | Key::Eof if self.cursor < self.line.len() => {
                self.line.remove(self.cursor);
            }
            Key::Eof if self.line.is_empty() => return self.quit(out),
            Key::Interrupt if self.line.is_empty() => return self.quit(out),
            Key::Interrupt => {
                // The line is dropped, as a shell drops it: `^C`, and a new prompt.
                self.cursor = self.line.len();
                self.draw(cols, out);
                out.extend_from_slice(b"^C\r\n");
                self.begin(cols, out);
                return Outcome::Editing;
            }
            Key::Left => self.cursor = self.cursor.saturating_sub(1),
            Key::Right => self.cursor = (self.cursor + 1).min(self.line.len()),
            Key::Home => self.cursor = 0,
            Key::End => self.cursor = self.line.len(),
            Key::Up => self.older(),
            Key::Down => self.newer(),
            Key::KillLine => {
                self.line.clear();
                self.cursor = 0;
            }
            Key::KillWord => {
                let mut start = self.cursor;
                while start > 0 && self.line[start - 1].is_whitespace() {
                    start -= 1;
                }
                while start > 0 && !self.line[start - 1].is_whitespace() {
                    start -= 1;
                }
                self.line.drain(start..self.cursor);
                self.cursor = start;
            }
            _ => return Outcome::Editing,
        }
        self.dirty = true;
        Outcome::Editing
    }

    /// Draw the line if it changed.
    pub fn refresh(&mut self, cols: usize, out: &mut Vec<u8>) {
        if self.dirty {
            self.draw(cols, out);
        }
    }

    /// The history entry before the one shown (the line being written is kept).
    fn older(&mut self) {
        let at = match self.browsing {
            None if self.history.is_empty() => return,
            None => {
                self.draft = std::mem::take(&mut self.line);
                self.history.len() - 1
            }
            Some(0) => return,
            Some(i) => i - 1,
        };
        self.browsing = Some(at);
        self.line = self.history[at].chars().collect();
        self.cursor = self.line.len();
    }

    /// The history entry after the one shown, then the line being written.
    fn newer(&mut self) {
        let Some(i) = self.browsing else { return };
        if i + 1 < self.history.len() {
            self.browsing = Some(i + 1);
            self.line = self.history[i + 1].chars().collect();
        } else {
            self.browsing = None;
            self.line = std::mem::take(&mut self.draft);
        }
        self.cursor = self.line.len();
    }

    /// Enter: the line is redrawn as sent and joins the history.
    fn submit(&mut self, out: &mut Vec<u8>) -> String {
        let text: String = self.line.iter().collect();
        self.to_start(out);
        match self.plain {
            true => out.extend_from_slice("✔ User · ".as_bytes()),
            false => {
                out.extend_from_slice("\x1b[32m✔\x1b[0m \x1b[1mUser\x1b[0m \x1b[38;5;8m·\x1b[0m \x1b[32m".as_bytes())
            }
        }
        out.extend_from_slice(text.as_bytes());
        if !self.plain {
            out.extend_from_slice(b"\x1b[0m");
        }
        out.extend_from_slice(b"\r\n");
        if self.history.last() != Some(&text) {
            self.history.push(text.clone());
        }
        self.line.clear();
        self.cursor = 0;
        self.browsing = None;
        self.row = 0;
        text
    }

    fn quit(&mut self, out: &mut Vec<u8>) -> Outcome {
        out.extend_from_slice(b"\r\n");
        self.row = 0;
        Outcome::Quit
    }

    /// Back to the prompt's first column, everything after it cleared.
    fn to_start(&self, out: &mut Vec<u8>) {
        if self.row > 0 {
            let _ = write!(out, "\x1b[{}A", self.row);
        }
        out.extend_from_slice(b"\r\x1b[J");
    }

    /// Redraw the prompt and the line, and put the cursor where it is in the line. A line
    /// wider than the terminal wraps; the rows are counted from the text's widths.
    fn draw(&mut self, cols: usize, out: &mut Vec<u8>) {
        self.dirty = false;
        let cols = cols.max(1);
        self.to_start(out);
        out.extend_from_slice(if self.plain { PROMPT_PLAIN } else { PROMPT }.as_bytes());
        let text: String = self.line.iter().collect();
        out.extend_from_slice(text.as_bytes());
        let end = PROMPT_COLUMNS + width(&self.line);
        // A row filled to its last column leaves the cursor there: start the next row.
        if end % cols == 0 {
            out.extend_from_slice(b"\r\n");
        }
        let at = PROMPT_COLUMNS + width(&self.line[..self.cursor]);
        let (end_row, row, col) = (end / cols, at / cols, at % cols);
        if end_row > row {
            let _ = write!(out, "\x1b[{}A", end_row - row);
        }
        out.push(b'\r');
        if col > 0 {
            let _ = write!(out, "\x1b[{col}C");
        }
        self.row = row;
    }
}

/// The columns `chars` take on a terminal.
fn width(chars: &[char]) -> usize {
    chars.iter().map(|c| c.width().unwrap_or(0)).sum()
}

/// The terminal of `fd` in raw mode until dropped (then as it was).
pub struct RawMode {
    fd: i32,
    saved: libc::termios,
}

impl RawMode {
    pub fn enter(fd: i32) -> std::io::Result<RawMode> {
        // SAFETY: termios is plain data that tcgetattr fills in; `fd` is an open descriptor
        // (a bad one makes the call fail, which is reported).
        let saved = unsafe {
            let mut t: libc::termios = std::mem::zeroed();
            if libc::tcgetattr(fd, &mut t) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            t
        };
        let mut raw = saved;
        raw.c_lflag &= !(libc::ICANON | libc::ECHO | libc::ISIG | libc::IEXTEN);
        raw.c_iflag &= !(libc::ICRNL | libc::IXON);
        raw.c_cc[libc::VMIN] = 1;
        raw.c_cc[libc::VTIME] = 0;
        // SAFETY: `raw` is a termios read from this descriptor and changed in its flags only.
        if unsafe { libc::tcsetattr(fd, libc::TCSADRAIN, &raw) } != 0 {
            return Err(std::io::Error::last_os_error());
        }
        Ok(RawMode { fd, saved })
    }
}

impl Drop for RawMode {
    fn drop(&mut self) {
        // SAFETY: `saved` is the termios tcgetattr gave for this descriptor.
        unsafe { libc::tcsetattr(self.fd, libc::TCSADRAIN, &self.saved) };
    }
}

/// Whether `fd` is a terminal.
pub fn is_terminal(fd: i32) -> bool {
    // SAFETY: isatty only looks at the descriptor number.
    unsafe { libc::isatty(fd) == 1 }
}

/// The width of the terminal of `fd` in columns (80 when it cannot be told).
pub fn columns(fd: i32) -> usize {
    // SAFETY: winsize is plain data that TIOCGWINSZ fills in.
    let ws = unsafe {
        let mut ws: libc::winsize = std::mem::zeroed();
        if libc::ioctl(fd, libc::TIOCGWINSZ, &mut ws) != 0 {
            return 80;
        }
        ws
    };
    match ws.ws_col {
        0 => 80,
        c => c as usize,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn keys(bytes: &[u8]) -> Vec<Key> {
        let mut d = Decoder::default();
        d.push(bytes);
        std::iter::from_fn(|| d.next_key()).collect()
    }

    #[test]
    fn bytes_become_keys() {
        use Key::*;
        assert_eq!(
            keys(b"a\x1b[A\x1b[B\x1b[C\x1b[D\x1bOH\x1b[F\x1b[3~\x1b[1;5C\x7f\x03\x04\r\n\r\x15\x17\x1bx"),
            vec![
                Char('a'),
                Up,
                Down,
                Right,
                Left,
                Home,
                End,
                Delete,
                Other,
                Backspace,
                Interrupt,
                Eof,
                Enter,
                Enter,
                KillLine,
                KillWord,
                Other
            ]
        );
        assert_eq!(keys("é→😀".as_bytes()), vec![Char('é'), Char('→'), Char('😀')]);
        assert_eq!(keys(b"\xff"), vec![Other]);
    }

    #[test]
    fn a_key_split_across_reads_waits_for_its_rest() {
        let mut d = Decoder::default();
        d.push(b"\x1b[");
        assert_eq!(d.next_key(), None);
        d.push(b"A\xe2\x86");
        assert_eq!(d.next_key(), Some(Key::Up));
        assert_eq!(d.next_key(), None);
        d.push(b"\x92");
        assert_eq!(d.next_key(), Some(Key::Char('→')));
    }

    /// Feed `typed` to a plain editor 80 columns wide; the outcomes that are not `Editing`.
    fn typing(e: &mut Editor, typed: &[u8]) -> Vec<Outcome> {
        let mut out = Vec::new();
        e.begin(80, &mut out);
        let mut d = Decoder::default();
        d.push(typed);
        let mut outcomes = Vec::new();
        while let Some(k) = d.next_key() {
            match e.key(k, 80, &mut out) {
                Outcome::Editing => e.refresh(80, &mut out),
                o => outcomes.push(o),
            }
        }
        outcomes
    }

    #[test]
    fn editing_and_history() {
        let mut e = Editor::new(true);
        assert_eq!(typing(&mut e, b"helo\x1b[Dl\x01X\x1b[D\x1b[3~\x05!\r"), vec![Outcome::Line("hello!".into())]);
        // Enter on blanks sends nothing.
        assert_eq!(typing(&mut e, b"   \r\x15second one\x17two\r"), vec![Outcome::Line("second two".into())]);
        // Up, up: the first line; down: the second; down again: the line being written.
        assert_eq!(typing(&mut e, b"dr\x1b[A\x1b[A\x1b[B\x1b[Bx\r"), vec![Outcome::Line("drx".into())]);
        assert_eq!(typing(&mut e, b"\x1b[A\r"), vec![Outcome::Line("drx".into())]);
        // Up past the oldest line stays there.
        assert_eq!(typing(&mut e, b"\x1b[A\x1b[A\x1b[A\x1b[A\r"), vec![Outcome::Line("hello!".into())]);
        // A line sent twice in a row is kept once.
        assert_eq!(e.history, vec!["hello!", "second two", "drx", "hello!"]);
    }

    #[test]
    fn ctrl_c_drops_a_line_and_quits_on_an_empty_one_as_ctrl_d_does() {
        let mut e = Editor::new(true);
        assert_eq!(typing(&mut e, b"abc\x03\x03"), vec![Outcome::Quit]);
        assert_eq!(typing(&mut e, b"abc\x03x\r"), vec![Outcome::Line("x".into())]);
        // Ctrl-D on text deletes under the cursor; on an empty line it quits.
        assert_eq!(typing(&mut e, b"ab\x01\x04\r"), vec![Outcome::Line("b".into())]);
        assert_eq!(typing(&mut e, b"ab\x15\x04"), vec![Outcome::Quit]);
    }

    #[test]
    fn a_wrapped_line_is_drawn_back_from_its_first_row() {
        let mut e = Editor::new(true);
        let mut out = Vec::new();
        e.begin(10, &mut out);
        out.clear();
        // The prompt takes 9 columns: one character fills the row, the next starts row 1.
        e.key(Key::Char('a'), 10, &mut out);
        assert!(out.is_empty(), "drawn on refresh");
        e.refresh(10, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "\r\x1b[J? User › a\r\n\r");
        let mut out = Vec::new();
        for c in "bc".chars() {
            e.key(Key::Char(c), 10, &mut out);
        }
        e.refresh(10, &mut out);
        assert_eq!(e.row, 1);
        out.clear();
        e.key(Key::Home, 10, &mut out);
        e.refresh(10, &mut out);
        assert_eq!(e.row, 0);
        assert_eq!(String::from_utf8(out).unwrap(), "\x1b[1A\r\x1b[J? User › abc\x1b[1A\r\x1b[9C");
        let mut out = Vec::new();
        e.key(Key::End, 10, &mut out);
        e.refresh(10, &mut out);
        e.refresh(10, &mut out);
        assert_eq!(String::from_utf8(out).unwrap(), "\r\x1b[J? User › abc\r\x1b[2C");
        let mut out = Vec::new();
        assert_eq!(e.key(Key::Enter, 10, &mut out), Outcome::Line("abc".into()));
        assert_eq!(String::from_utf8(out).unwrap(), "\x1b[1A\r\x1b[J✔ User · abc\r\n");
    }
}
