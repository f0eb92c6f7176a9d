//! A ZeroMQ `SUB` socket, spoken directly (ZMTP 3.0, NULL security) over a blocking
//! `std::net::TcpStream`: what the event-ingest thread needs to receive Dynamo's event plane
//! from the workers' libzmq `PUB` sockets (docs/dynamo/kv-routing.md §3.1).
//!
//! Why not libzmq or a ZeroMQ crate: a `SUB` socket that connects to one publisher is a
//! 64-byte greeting, one `READY` command each way, one subscription message, then a stream
//! of length-prefixed frames. The ingest thread owns its sockets and polls their descriptors
//! itself; a library would bring its own I/O threads (libzmq) or its own async runtime (the
//! pure-Rust crates) into a process whose threads are all accounted for.
//!
//! One [`Sub`] is one connection to one publisher. We announce ZMTP 3.0, so subscriptions
//! are sent as messages (`0x01` + topic prefix), which libzmq 4.x accepts from 3.0 peers, and
//! no heartbeat commands are expected; commands that do arrive are skipped. Messages are
//! returned whole (all frames up to the one without MORE); frames over `max_frame` bytes
//! end the connection, so a broken or hostile peer cannot make us allocate without bound.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream, ToSocketAddrs};
use std::time::Duration;

use smallvec::SmallVec;

/// One multipart message: its frames in order (Dynamo's event plane uses 4).
pub type Message = SmallVec<[Vec<u8>; 4]>;

pub(crate) const FLAG_MORE: u8 = 0x01;
pub(crate) const FLAG_LONG: u8 = 0x02;
pub(crate) const FLAG_COMMAND: u8 = 0x04;

/// A connected, subscribed `SUB` socket.
pub struct Sub {
    stream: TcpStream,
    peer: SocketAddr,
    max_frame: usize,
    /// Received, not yet parsed.
    buf: Vec<u8>,
    /// Frames of the message being assembled.
    parts: Message,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// The 64-byte greeting: signature, version 3.0, mechanism NULL, not a server.
pub(crate) fn greeting() -> [u8; 64] {
    let mut g = [0u8; 64];
    g[0] = 0xFF;
    g[9] = 0x7F;
    g[10] = 3;
    g[11] = 0;
    g[12..16].copy_from_slice(b"NULL");
    g
}

/// A `READY` command announcing `Socket-Type: <kind>`.
pub(crate) fn ready_command(kind: &[u8]) -> Vec<u8> {
    let mut body = Vec::with_capacity(32);
    body.push(5);
    body.extend_from_slice(b"READY");
    body.push(11);
    body.extend_from_slice(b"Socket-Type");
    body.extend_from_slice(&(kind.len() as u32).to_be_bytes());
    body.extend_from_slice(kind);
    let mut out = vec![FLAG_COMMAND, body.len() as u8];
    out.extend_from_slice(&body);
    out
}

fn ready() -> Vec<u8> {
    ready_command(b"SUB")
}

/// One frame with `flags` (short or long form chosen by length).
fn frame(flags: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 9);
    put_frame(&mut out, flags, body);
    out
}

/// Appends one frame with `flags` to `out`.
pub(crate) fn put_frame(out: &mut Vec<u8>, flags: u8, body: &[u8]) {
    if body.len() <= 255 {
        out.push(flags);
        out.push(body.len() as u8);
    } else {
        out.push(flags | FLAG_LONG);
        out.extend_from_slice(&(body.len() as u64).to_be_bytes());
    }
    out.extend_from_slice(body);
}

/// `tcp://host:port` → an address.
pub fn resolve(endpoint: &str) -> io::Result<SocketAddr> {
    let hostport = endpoint.strip_prefix("tcp://").ok_or_else(|| bad(format!("{endpoint}: not a tcp:// endpoint")))?;
    // `tcp://[::1]:5555` and `tcp://host:5555` both resolve as written.
    hostport.to_socket_addrs()?.next().ok_or_else(|| bad(format!("{endpoint}: no address")))
}

impl Sub {
    /// Connects to the publisher at `endpoint` (`tcp://host:port`), completes the handshake
    /// (each step bounded by `timeout`) and subscribes to every prefix in `topics`.
    pub fn connect(endpoint: &str, topics: &[&[u8]], timeout: Duration, max_frame: usize) -> io::Result<Sub> {
        let peer = resolve(endpoint)?;
        let mut stream = TcpStream::connect_timeout(&peer, timeout)?;
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(timeout))?;
        stream.set_write_timeout(Some(timeout))?;
        stream.write_all(&greeting())?;
        let mut theirs = [0u8; 64];
        stream.read_exact(&mut theirs)?;
        if theirs[0] != 0xFF || theirs[9] != 0x7F {
            return Err(bad(format!("{endpoint}: not a ZMTP peer")));
        }
        if theirs[10] < 3 {
            return Err(bad(format!("{endpoint}: ZMTP {}.x is too old (3.x needed)", theirs[10])));
        }
        if &theirs[12..16] != b"NULL" {
            return Err(bad(format!("{endpoint}: only the NULL security mechanism is supported")));
        }
        stream.write_all(&ready())?;
        let mut sub = Sub { stream, peer, max_frame, buf: Vec::with_capacity(64 * 1024), parts: Message::new() };
        // The peer's READY must come first; check it names a publisher.
        let (flags, body) = sub.read_frame()?;
        if flags & FLAG_COMMAND == 0 || !body.starts_with(b"\x05READY") {
            return Err(bad(format!("{endpoint}: expected READY, got another frame")));
        }
        if let Some(kind) = property(&body[6..], b"Socket-Type") {
            if kind != b"PUB" && kind != b"XPUB" {
                return Err(bad(format!("{endpoint}: peer is a {} socket, not PUB", String::from_utf8_lossy(kind))));
            }
        }
        for t in topics {
            let mut m = Vec::with_capacity(t.len() + 1);
            m.push(1);
            m.extend_from_slice(t);
            sub.stream.write_all(&frame(0, &m))?;
        }
        Ok(sub)
    }

    pub fn peer(&self) -> SocketAddr {
        self.peer
    }

    /// The connection, for polling its readiness.
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Reads one frame (blocking up to the socket's read timeout per read).
    fn read_frame(&mut self) -> io::Result<(u8, Vec<u8>)> {
        loop {
            if let Some((flags, body, used)) = self.parse_frame()? {
                self.buf.drain(..used);
                return Ok((flags, body));
            }
            self.fill()?;
        }
    }

    /// A complete frame at the start of `buf`, if there is one.
    fn parse_frame(&self) -> io::Result<Option<(u8, Vec<u8>, usize)>> {
        let split = split_frame(&self.buf, self.max_frame).map_err(|e| bad(format!("{}: {e}", self.peer)))?;
        Ok(split.map(|(flags, body)| (flags, self.buf[body.clone()].to_vec(), body.end)))
    }

    /// One read into `buf`. EOF is an error: the publisher went away.
    fn fill(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 16 * 1024];
        let n = self.stream.read(&mut chunk)?;
        if n == 0 {
            return Err(io::Error::new(io::ErrorKind::UnexpectedEof, format!("{}: publisher closed", self.peer)));
        }
        self.buf.extend_from_slice(&chunk[..n]);
        Ok(())
    }

    /// The next whole message. Blocks up to the read timeout per read; a timeout with a
    /// message half received keeps the half for the next call.
    pub fn recv(&mut self) -> io::Result<Message> {
        loop {
            let (flags, body) = self.read_frame()?;
            if flags & FLAG_COMMAND != 0 {
                continue; // PING and friends: nothing to do for a 3.0 SUB
            }
            self.parts.push(body);
            if flags & FLAG_MORE == 0 {
                return Ok(std::mem::take(&mut self.parts));
            }
        }
    }

    /// Every whole message already received or readable without blocking (the socket is
    /// switched to non-blocking for the call). For a poll loop: call when the socket is
    /// readable.
    pub fn drain(&mut self, out: &mut Vec<Message>) -> io::Result<()> {
        self.stream.set_nonblocking(true)?;
        let r = loop {
            match self.recv() {
                Ok(m) => out.push(m),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break Ok(()),
                Err(e) => break Err(e),
            }
        };
        self.stream.set_nonblocking(false)?;
        r
    }
}

/// The frame at the start of `b`: its flags and the range of its body (which ends where the
/// frame does); `None` until the whole frame is there. A frame over `max_frame` bytes is an
/// error, so a peer cannot make us buffer without bound.
pub fn split_frame(b: &[u8], max_frame: usize) -> Result<Option<(u8, std::ops::Range<usize>)>, String> {
    let Some(&flags) = b.first() else { return Ok(None) };
    let (len, head) = if flags & FLAG_LONG != 0 {
        let Some(len) = b.get(1..9) else { return Ok(None) };
        (u64::from_be_bytes(len.try_into().expect("8 bytes")), 9)
    } else {
        let Some(&len) = b.get(1) else { return Ok(None) };
        (u64::from(len), 2)
    };
    if len > max_frame as u64 {
        return Err(format!("a {len}-byte frame exceeds the limit of {max_frame}"));
    }
    let end = head + len as usize;
    if b.len() < end {
        return Ok(None);
    }
    Ok(Some((flags, head..end)))
}

/// The value of property `name` in a READY command's property list.
fn property<'a>(mut props: &'a [u8], name: &[u8]) -> Option<&'a [u8]> {
    while let Some((&n, rest)) = props.split_first() {
        let (key, rest) = rest.split_at_checked(n as usize)?;
        let (len, rest) = rest.split_at_checked(4)?;
        let len = u32::from_be_bytes(len.try_into().ok()?) as usize;
        let (value, rest) = rest.split_at_checked(len)?;
        if key.eq_ignore_ascii_case(name) {
            return Some(value);
        }
        props = rest;
    }
    None
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_and_properties() {
        assert_eq!(frame(FLAG_MORE, b"ab"), [1, 2, b'a', b'b']);
        let long = frame(0, &[7u8; 300]);
        assert_eq!(&long[..9], &[FLAG_LONG, 0, 0, 0, 0, 0, 0, 1, 44]);
        let r = ready();
        assert_eq!(property(&r[2 + 6..], b"socket-type"), Some(&b"SUB"[..]));
        assert_eq!(property(b"\x03abc\x00\x00\x00\x09short", b"abc"), None, "truncated value");
        assert_eq!(greeting()[12..16], *b"NULL");
        assert!(resolve("udp://1.2.3.4:5").is_err());
        assert_eq!(resolve("tcp://127.0.0.1:5555").unwrap().port(), 5555);
    }
}
