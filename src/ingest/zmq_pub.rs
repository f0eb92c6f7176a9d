//! A ZeroMQ `PUB` socket spoken directly (ZMTP 3.0, NULL security), never blocking: what
//! the event-ingest thread publishes `active_sequences_events` with under
//! `--router-replica-sync` (docs/dynamo/kv-routing.md §3.1, §7.8), for libzmq `SUB` sockets (other
//! Dynamo routers) and switchyard's own [`super::zmq::Sub`].
//!
//! The same reasoning as the `SUB` side ([`super::zmq`]) keeps libzmq out: the ingest thread
//! polls its own descriptors. Everything here is non-blocking: [`Pub::service`] accepts
//! subscribers, completes their handshakes and reads their subscriptions, and writes what
//! is queued for them; [`Pub::send`] queues a message for every subscriber whose
//! subscription prefixes its first frame. A subscriber that does not read is given at most
//! [`HWM_BYTES`] of queued data; messages beyond that are dropped for it (1.6.1's publisher
//! also drops at its high-water mark), so a stuck peer never holds the thread up.
//!
//! Subscriptions are accepted both as ZMTP 3.0 messages (`0x01` + prefix, `0x00` to
//! cancel), which libzmq sends to a 3.0 peer, and as 3.1 `SUBSCRIBE`/`CANCEL` commands.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;

use super::zmq::{greeting, put_frame, ready_command, FLAG_COMMAND, FLAG_LONG, FLAG_MORE};

/// Queued bytes per subscriber beyond which messages are dropped for it.
pub const HWM_BYTES: usize = 64 << 20;
/// Longest frame accepted from a subscriber (subscriptions and commands are short).
const MAX_IN_FRAME: usize = 64 << 10;

/// A bound publisher and its subscribers.
pub struct Pub {
    listener: TcpListener,
    peers: Vec<Peer>,
    /// Messages dropped for subscribers over [`HWM_BYTES`].
    pub dropped: u64,
    /// Subscribers that completed the handshake, ever.
    pub accepted: u64,
    scratch: Vec<u8>,
}

struct Peer {
    stream: TcpStream,
    inbuf: Vec<u8>,
    out: Vec<u8>,
    /// Their greeting was read.
    greeted: bool,
    /// Their READY was read.
    ready: bool,
    subs: Vec<Vec<u8>>,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Our greeting and `READY` with `Socket-Type: PUB`.
fn hello() -> Vec<u8> {
    let mut g = greeting().to_vec();
    g.extend_from_slice(&ready_command(b"PUB"));
    g
}

impl Pub {
    /// Binds `addr` (port 0: any free port).
    pub fn bind(addr: SocketAddr) -> io::Result<Pub> {
        let listener = TcpListener::bind(addr)?;
        listener.set_nonblocking(true)?;
        Ok(Pub { listener, peers: Vec::new(), dropped: 0, accepted: 0, scratch: Vec::new() })
    }

    pub fn local_addr(&self) -> io::Result<SocketAddr> {
        self.listener.local_addr()
    }

    /// Subscribers connected now (handshake done or not).
    pub fn peers(&self) -> usize {
        self.peers.len()
    }

    /// The descriptors to poll: the listener and every subscriber (for writing too when
    /// something waits for it).
    pub fn poll_fds(&self, fds: &mut Vec<libc::pollfd>) {
        fds.push(libc::pollfd { fd: self.listener.as_raw_fd(), events: libc::POLLIN, revents: 0 });
        for p in &self.peers {
            let events = if p.out.is_empty() { libc::POLLIN } else { libc::POLLIN | libc::POLLOUT };
            fds.push(libc::pollfd { fd: p.stream.as_raw_fd(), events, revents: 0 });
        }
    }

    /// Accepts, reads and writes whatever can be done without blocking; drops subscribers
    /// that closed or broke the protocol.
    pub fn service(&mut self) {
        loop {
            match self.listener.accept() {
                Ok((stream, _)) => {
                    if stream.set_nonblocking(true).is_err() || stream.set_nodelay(true).is_err() {
                        continue;
                    }
                    self.peers.push(Peer {
                        stream,
                        inbuf: Vec::new(),
                        out: hello(),
                        greeted: false,
                        ready: false,
                        subs: Vec::new(),
                    });
                }
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => {
                    crate::log::warn(&format!("zmq pub: accept failed: {e}"));
                    break;
                }
            }
        }
        let mut accepted = 0;
        self.peers.retain_mut(|p| {
            let was_ready = p.ready;
            let ok = p.read().and_then(|()| p.flush());
            if let Err(e) = &ok {
                if e.kind() != io::ErrorKind::UnexpectedEof {
                    crate::log::warn(&format!("zmq pub: subscriber dropped: {e}"));
                }
            }
            if !was_ready && p.ready {
                accepted += 1;
            }
            ok.is_ok()
        });
        self.accepted += accepted;
    }

    /// Queues the multipart message `frames` for every subscriber whose subscription
    /// prefixes `frames[0]`, and writes what it can.
    pub fn send(&mut self, frames: &[Vec<u8>]) {
        let Some(topic) = frames.first() else { return };
        self.scratch.clear();
        for (i, f) in frames.iter().enumerate() {
            put_frame(&mut self.scratch, if i + 1 < frames.len() { FLAG_MORE } else { 0 }, f);
        }
        for p in &mut self.peers {
            if !p.ready || !p.subs.iter().any(|s| topic.starts_with(s)) {
                continue;
            }
            if p.out.len() + self.scratch.len() > HWM_BYTES {
                self.dropped += 1;
                continue;
            }
            p.out.extend_from_slice(&self.scratch);
        }
        self.service();
    }
}

impl Peer {
    fn read(&mut self) -> io::Result<()> {
        let mut chunk = [0u8; 4096];
        loop {
            match self.stream.read(&mut chunk) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "subscriber closed")),
                Ok(n) => self.inbuf.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.parse()
    }

    fn parse(&mut self) -> io::Result<()> {
        let mut at = 0;
        if !self.greeted {
            if self.inbuf.len() < 64 {
                return Ok(());
            }
            let g = &self.inbuf[..64];
            if g[0] != 0xFF || g[9] != 0x7F || g[10] < 3 || &g[12..16] != b"NULL" {
                return Err(bad("not a ZMTP 3.x NULL-security peer"));
            }
            self.greeted = true;
            at = 64;
        }
        loop {
            let b = &self.inbuf[at..];
            let Some(&flags) = b.first() else { break };
            let (len, head) = if flags & FLAG_LONG != 0 {
                let Some(l) = b.get(1..9) else { break };
                (u64::from_be_bytes(l.try_into().expect("8 bytes")), 9)
            } else {
                let Some(&l) = b.get(1) else { break };
                (u64::from(l), 2)
            };
            if len > MAX_IN_FRAME as u64 {
                return Err(bad(format!("a {len}-byte frame from a subscriber")));
            }
            let end = head + len as usize;
            if b.len() < end {
                break;
            }
            let body = &b[head..end];
            if flags & FLAG_COMMAND != 0 {
                if body.starts_with(b"\x05READY") {
                    self.ready = true;
                } else if let Some(t) = body.strip_prefix(b"\x09SUBSCRIBE") {
                    self.subs.push(t.to_vec());
                } else if let Some(t) = body.strip_prefix(b"\x06CANCEL") {
                    let t = t.to_vec();
                    self.cancel(&t);
                }
            } else if self.ready {
                match body.split_first() {
                    Some((1, t)) => self.subs.push(t.to_vec()),
                    Some((0, t)) => {
                        let t = t.to_vec();
                        self.cancel(&t);
                    }
                    _ => {}
                }
            } else {
                return Err(bad("a message before READY"));
            }
            at += end;
        }
        self.inbuf.drain(..at);
        Ok(())
    }

    fn cancel(&mut self, topic: &[u8]) {
        if let Some(i) = self.subs.iter().position(|s| s == topic) {
            self.subs.swap_remove(i);
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        let mut done = 0;
        while done < self.out.len() {
            match self.stream.write(&self.out[done..]) {
                Ok(0) => return Err(io::Error::new(io::ErrorKind::WriteZero, "subscriber stopped reading")),
                Ok(n) => done += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(e),
            }
        }
        self.out.drain(..done);
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ingest::zmq::Sub;
    use std::time::Duration;

    #[test]
    fn a_sub_receives_only_its_topic_and_a_gone_sub_is_dropped() {
        let mut p = Pub::bind("127.0.0.1:0".parse().unwrap()).unwrap();
        let ep = format!("tcp://{}", p.local_addr().unwrap());
        let t = std::thread::spawn(move || {
            let mut s = Sub::connect(&ep, &[b"active"], Duration::from_secs(5), 1 << 20).unwrap();
            let m = s.recv().unwrap();
            (m.len(), m[0].clone(), m[1].clone())
        });
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while p.peers.iter().all(|x| x.subs.is_empty()) {
            assert!(std::time::Instant::now() < until, "no subscription arrived");
            p.service();
            std::thread::sleep(Duration::from_millis(5));
        }
        p.send(&[b"other".to_vec(), b"x".to_vec()]);
        p.send(&[b"active_sequences_events".to_vec(), vec![7u8; 300]]);
        let (n, topic, body) = t.join().unwrap();
        assert_eq!((n, topic.as_slice(), body.len()), (2, &b"active_sequences_events"[..], 300));
        assert_eq!(p.accepted, 1);
        let until = std::time::Instant::now() + Duration::from_secs(5);
        while p.peers() > 0 {
            assert!(std::time::Instant::now() < until, "the closed subscriber stayed");
            p.service();
            std::thread::sleep(Duration::from_millis(5));
        }
    }
}
