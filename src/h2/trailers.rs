//! Pseudo-header fields in a request's trailers (RFC 9113 §8.1: such a request is malformed).
//!
//! The `h2` crate decodes a trailer block and keeps only its regular fields, so a server built
//! on it never sees a `:method` sent as a trailer and would answer the request as if it were
//! well formed. [`Watch`] closes that gap without a second HPACK decoder: it reads the frame
//! headers of the bytes the client sends (on their way to `h2`, never changing them), and for
//! the one block it must inspect — a second HEADERS block on a stream, i.e. trailers — it walks
//! the HPACK representations and reports a field whose name is certainly a pseudo-header: an
//! indexed field or name from the static table's pseudo-header entries (1–14), or a literal
//! name starting with `:` (plain, or Huffman-coded: `:` is the 7-bit code `1011100`). A name
//! taken from the dynamic table is not resolved (that needs the table, i.e. decoding every
//! block); encoders send `:method`, `:scheme` and `:path` through the static table, so a
//! pseudo-header in trailers is caught in practice. The stream is then reset with
//! PROTOCOL_ERROR by the handler ([`Flag::is_set`] once its body is read).
//!
//! Cost: a few comparisons per frame header; the bytes of a frame are only looked at for
//! trailer blocks, which ordinary requests do not have.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::rc::Rc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

/// Streams remembered at most (request headers seen, stream not ended); beyond it new
/// streams are not watched (h2 refuses streams beyond its own concurrency limit anyway).
const MAX_OPEN: usize = 4096;
/// A trailer block longer than this is not inspected further.
const MAX_BLOCK: usize = 64 * 1024;

const DATA: u8 = 0x0;
const HEADERS: u8 = 0x1;
const RST_STREAM: u8 = 0x3;
const CONTINUATION: u8 = 0x9;
const END_STREAM: u8 = 0x1;
const END_HEADERS: u8 = 0x4;
const PADDED: u8 = 0x8;
const PRIORITY: u8 = 0x20;

/// A stream's "its trailers carried a pseudo-header" mark, handed to the stream's handler in
/// the request's extensions.
#[derive(Clone, Debug, Default)]
pub struct Flag(Arc<AtomicBool>);

impl Flag {
    pub fn is_set(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }
}

/// Whether the request with these extensions had pseudo-header fields in its trailers (only
/// known once its body has been read to the end).
pub fn malformed(extensions: &http::Extensions) -> bool {
    extensions.get::<Flag>().is_some_and(Flag::is_set)
}

#[derive(Default)]
struct Marks {
    /// Flags of the streams the connection loop has accepted, by stream id.
    flags: HashMap<u32, Flag>,
    /// Streams found malformed before the connection loop accepted them.
    early: HashSet<u32>,
}

/// One connection's watcher: fed the client's bytes in order, connection preface first.
pub struct Watch {
    /// Bytes of the 24-byte connection preface still to skip.
    preface_left: usize,
    head: [u8; 9],
    head_len: usize,
    /// Payload bytes of the current frame still to come.
    left: usize,
    /// The current frame is part of a trailer block being collected.
    collecting: bool,
    block: Vec<u8>,
    block_stream: u32,
    /// A trailer block continues in CONTINUATION frames.
    block_open: bool,
    /// Padding and priority bytes still to drop from the front of the current HEADERS payload.
    skip_front: usize,
    /// Padding at the end of the current HEADERS payload.
    pad_back: usize,
    open: HashSet<u32>,
    marks: Rc<RefCell<Marks>>,
}

/// The connection loop's side of a [`Watch`]: a flag per accepted stream.
#[derive(Clone, Default)]
pub struct Marker(Rc<RefCell<Marks>>);

impl Marker {
    /// The flag of stream `id`, just accepted (set already if its trailers came with it).
    pub fn accept(&self, id: u32) -> Flag {
        let mut m = self.0.borrow_mut();
        let flag = Flag::default();
        if m.early.remove(&id) {
            flag.0.store(true, Ordering::Relaxed);
        }
        m.flags.insert(id, flag.clone());
        flag
    }

    /// Stream `id` is finished with.
    pub fn finish(&self, id: u32) {
        self.0.borrow_mut().flags.remove(&id);
    }
}

impl Watch {
    /// A watcher and the marker that hands out its flags.
    pub fn new() -> (Watch, Marker) {
        let w = Watch {
            preface_left: 24,
            head: [0; 9],
            head_len: 0,
            left: 0,
            collecting: false,
            block: Vec::new(),
            block_stream: 0,
            block_open: false,
            skip_front: 0,
            pad_back: 0,
            open: HashSet::new(),
            marks: Rc::default(),
        };
        let m = Marker(w.marks.clone());
        (w, m)
    }

    /// Take the next bytes the client sent (after the connection preface).
    pub fn feed(&mut self, mut bytes: &[u8]) {
        let preface = self.preface_left.min(bytes.len());
        self.preface_left -= preface;
        bytes = &bytes[preface..];
        while !bytes.is_empty() {
            if self.left == 0 && self.head_len < 9 {
                let n = (9 - self.head_len).min(bytes.len());
                self.head[self.head_len..self.head_len + n].copy_from_slice(&bytes[..n]);
                self.head_len += n;
                bytes = &bytes[n..];
                if self.head_len == 9 {
                    self.start_frame();
                }
                continue;
            }
            let n = self.left.min(bytes.len());
            if self.collecting {
                self.take_payload(&bytes[..n]);
            }
            self.left -= n;
            bytes = &bytes[n..];
            if self.left == 0 {
                self.end_frame();
            }
        }
    }

    fn start_frame(&mut self) {
        let h = self.head;
        let len = (usize::from(h[0]) << 16) | (usize::from(h[1]) << 8) | usize::from(h[2]);
        let (kind, flags) = (h[3], h[4]);
        let stream = u32::from_be_bytes([h[5], h[6], h[7], h[8]]) & 0x7fff_ffff;
        self.left = len;
        self.collecting = false;
        match kind {
            HEADERS if stream != 0 => {
                if self.open.contains(&stream) {
                    // A second block on the stream: trailers.
                    self.open.remove(&stream);
                    self.collecting = true;
                    self.block.clear();
                    self.block_stream = stream;
                    self.skip_front = usize::from(flags & PADDED != 0) + if flags & PRIORITY != 0 { 5 } else { 0 };
                    // Padded: the length is the payload's first byte (MAX until it is read).
                    self.pad_back = if flags & PADDED != 0 { usize::MAX } else { 0 };
                } else if flags & END_STREAM == 0 && self.open.len() < MAX_OPEN {
                    self.open.insert(stream);
                }
            }
            CONTINUATION if self.block_open && stream == self.block_stream => {
                self.collecting = self.block.len() < MAX_BLOCK;
                self.skip_front = 0;
                self.pad_back = 0;
            }
            DATA if flags & END_STREAM != 0 => {
                self.open.remove(&stream);
            }
            RST_STREAM => {
                self.open.remove(&stream);
            }
            _ => {}
        }
        // The header is consumed (its bytes stay in `head` until the next frame's arrive, so
        // `end_frame` still sees the flags); a frame without payload ends at once.
        self.head_len = 0;
        if len == 0 {
            self.end_frame();
        }
    }

    fn take_payload(&mut self, mut bytes: &[u8]) {
        if self.pad_back == usize::MAX {
            // The first byte of a padded HEADERS payload is the pad length.
            if let Some((&pad, rest)) = bytes.split_first() {
                self.pad_back = usize::from(pad);
                self.skip_front -= 1;
                bytes = rest;
            }
        }
        let drop = self.skip_front.min(bytes.len());
        self.skip_front -= drop;
        bytes = &bytes[drop..];
        let room = MAX_BLOCK.saturating_sub(self.block.len());
        self.block.extend_from_slice(&bytes[..bytes.len().min(room)]);
    }

    fn end_frame(&mut self) {
        if !self.collecting {
            return;
        }
        self.collecting = false;
        if self.pad_back != usize::MAX {
            let keep = self.block.len().saturating_sub(self.pad_back);
            self.block.truncate(keep);
        }
        self.block_open = self.head[4] & END_HEADERS == 0;
        if self.block_open {
            return; // CONTINUATION frames follow
        }
        if has_pseudo(&self.block) {
            let id = self.block_stream;
            let mut m = self.marks.borrow_mut();
            match m.flags.get(&id) {
                Some(flag) => flag.0.store(true, Ordering::Relaxed),
                None if m.early.len() < MAX_OPEN => {
                    m.early.insert(id);
                }
                None => {}
            }
        }
        self.block.clear();
        self.block_stream = 0;
    }
}

/// An HPACK integer with an `n`-bit prefix at `b[0]`: (value, bytes used).
fn int(b: &[u8], n: u32) -> Option<(usize, usize)> {
    let mask = (1usize << n) - 1;
    let mut v = usize::from(*b.first()?) & mask;
    if v < mask {
        return Some((v, 1));
    }
    let mut shift = 0;
    for (i, &c) in b.iter().enumerate().skip(1) {
        v = v.checked_add(usize::from(c & 0x7f).checked_shl(shift)?)?;
        if c & 0x80 == 0 {
            return Some((v, i + 1));
        }
        shift += 7;
        if shift > 28 {
            return None;
        }
    }
    None
}

/// Whether an HPACK string at `b[0]` certainly starts with `:`; and its encoded size.
fn string(b: &[u8]) -> Option<(bool, usize)> {
    let huffman = *b.first()? & 0x80 != 0;
    let (len, used) = int(b, 7)?;
    let body = b.get(used..used + len)?;
    let colon = match body.first() {
        Some(&c) if huffman => c >> 1 == 0b101_1100,
        Some(&c) => c == b':',
        None => false,
    };
    Some((colon, used + len))
}

/// Whether a header block certainly holds a pseudo-header field (see the module docs).
pub fn has_pseudo(mut b: &[u8]) -> bool {
    let static_pseudo = |i: usize| (1..=14).contains(&i);
    while let Some(&first) = b.first() {
        let step = if first & 0x80 != 0 {
            match int(b, 7) {
                Some((i, _)) if static_pseudo(i) => return true,
                Some((_, used)) => used,
                None => return false,
            }
        } else if first & 0xe0 == 0x20 {
            match int(b, 5) {
                Some((_, used)) => used,
                None => return false,
            }
        } else {
            let prefix = if first & 0x40 != 0 { 6 } else { 4 };
            let Some((name, mut used)) = int(b, prefix) else { return false };
            if name == 0 {
                match string(&b[used..]) {
                    Some((true, _)) => return true,
                    Some((false, n)) => used += n,
                    None => return false,
                }
            } else if static_pseudo(name) {
                return true;
            }
            match string(&b[used..]) {
                Some((_, n)) => used + n,
                None => return false,
            }
        };
        b = &b[step..];
    }
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(kind: u8, flags: u8, stream: u32, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![(payload.len() >> 16) as u8, (payload.len() >> 8) as u8, payload.len() as u8, kind, flags];
        f.extend_from_slice(&stream.to_be_bytes());
        f.extend_from_slice(payload);
        f
    }

    fn literal(name: &str, value: &str) -> Vec<u8> {
        let mut b = vec![0x00, name.len() as u8];
        b.extend_from_slice(name.as_bytes());
        b.push(value.len() as u8);
        b.extend_from_slice(value.as_bytes());
        b
    }

    #[test]
    fn blocks_with_and_without_pseudo_headers() {
        assert!(has_pseudo(&[0x83]), ":method POST, static index 3");
        assert!(has_pseudo(&literal(":method", "POST")));
        assert!(has_pseudo(&[0x02, 0x03, b'G', b'E', b'T']), "literal, static name 2 (:method)");
        // ':' Huffman-coded first (1011100), then padding ones: a one-byte name.
        assert!(has_pseudo(&[0x00, 0x81, 0b1011_1001, 0x01, b'x']));
        assert!(!has_pseudo(&literal("x-test", "ok")));
        assert!(!has_pseudo(&[0x0f, 0x10, 0x02, b'o', b'k']), "literal, static name 31 (content-type)");
        assert!(!has_pseudo(&[0xbe]), "a dynamic-table index is not resolved");
        assert!(!has_pseudo(&[0x20]), "a table size update");
        assert!(!has_pseudo(&[0x00, 0x05, b'x']), "truncated: no verdict");
    }

    #[test]
    fn only_trailer_blocks_are_flagged_in_any_split() {
        let mut bytes = frame(HEADERS, END_HEADERS, 1, &literal("x-a", "1"));
        bytes.extend(frame(DATA, 0, 1, b"test"));
        let mut trailer = literal("x-b", "2");
        trailer.extend(literal(":method", "POST"));
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM | PADDED, 1, &[&[2u8][..], &trailer, &[0, 0]].concat()));
        // Stream 3: clean trailers split over a CONTINUATION; stream 5: no trailers.
        bytes.extend(frame(HEADERS, END_HEADERS, 3, &literal("x-a", "1")));
        bytes.extend(frame(HEADERS, END_STREAM, 3, &literal("x-b", "2")));
        bytes.extend(frame(CONTINUATION, END_HEADERS, 3, &literal("x-c", "3")));
        bytes.extend(frame(HEADERS, END_HEADERS | END_STREAM, 5, &literal(":method", "GET")));
        let bytes = [&b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"[..], &bytes].concat();
        for split in [1, 7, 9, 13, bytes.len()] {
            let (mut w, m) = Watch::new();
            let one = m.accept(1);
            for piece in bytes.chunks(split) {
                w.feed(piece);
            }
            let three = m.accept(3);
            let five = m.accept(5);
            assert!(one.is_set(), "split {split}");
            assert!(!three.is_set() && !five.is_set(), "split {split}");
            m.finish(1);
        }
    }
}
