//! Noticing a client that went away while its answer is still being made: runs inside the
//! connection's task on its shard.
//!
//! An HTTP/1.1 connection is not read while a request is answered (pipelined bytes wait in
//! the socket), so a peer's close would go unseen until the answer is written, and the
//! worker would generate for nobody. The watch looks at the socket without reading it: a
//! `recv(MSG_PEEK | MSG_DONTWAIT)` of one byte says whether the peer closed (0), reset
//! (an error), sent more (a pipelined request: the peer is there) or is quiet (`EAGAIN`).
//!
//! A request answered whole is looked at on a timer, not on readiness: one answered within
//! [`FIRST_LOOK`] costs one timer entry and no system call (readiness would cost a poll
//! submission and its cancellation on io_uring, a `poll` call on epoll, per request). Longer
//! requests are looked at after 50 ms, then at doubling intervals up to [`MAX_GAP`], so the
//! worker hears of the departure within a second however long the wait.
//!
//! A streamed answer is watched on readiness instead ([`second_handle`], [`gone`]): a stream
//! parks the shard about once per token, and a timer left pending through it would make every
//! one of those parks a timed wait (a kernel timer armed and cancelled per token). The watch
//! waits for the socket to become readable through a second descriptor (the connection task
//! keeps writing through the first), so a peer that leaves while the worker is quiet, before
//! the first token or between two, is noticed at once; a write to a closed peer fails by
//! itself anyway.
//!
//! The same wait ends when the shard's drain is over (the grace period after SIGTERM), so an
//! answer still being made then is ended cleanly rather than cut.

use std::os::fd::{AsRawFd, FromRawFd};
use std::time::Duration;

use monoio::net::TcpStream;

use crate::shard::gate::Gate;

/// When a request still being answered is first looked at.
pub const FIRST_LOOK: Duration = Duration::from_millis(50);
/// The longest time between two looks.
pub const MAX_GAP: Duration = Duration::from_secs(1);

/// What the socket says about its peer.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Peer {
    /// Nothing to read: the peer is waiting for its answer.
    Quiet,
    /// Bytes are waiting (a pipelined request): the peer is there.
    Sent,
    /// The peer closed or reset the connection.
    Gone,
}

/// Look at the socket without taking anything from it.
pub fn peer(stream: &TcpStream) -> Peer {
    let mut byte = 0u8;
    // SAFETY: the descriptor belongs to `stream`, open for the duration of the call, and the
    // buffer is one valid, writable byte; MSG_PEEK leaves the data in the socket and
    // MSG_DONTWAIT makes the call return at once whatever the descriptor's blocking mode.
    let n = unsafe {
        libc::recv(stream.as_raw_fd(), (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT)
    };
    match n {
        0 => Peer::Gone,
        n if n > 0 => Peer::Sent,
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Peer::Quiet,
            _ => Peer::Gone,
        },
    }
}

/// A second descriptor of `stream`'s socket, to wait on its readability while the connection
/// task writes through the first (a readiness wait borrows the stream it waits on). `None`
/// when the descriptor cannot be duplicated (the descriptor table is full): then only a failed
/// write tells that the peer left.
pub fn second_handle(stream: &TcpStream) -> Option<TcpStream> {
    // SAFETY: the descriptor belongs to `stream`, open for the duration of the call;
    // F_DUPFD_CLOEXEC creates a new descriptor of the same socket and touches nothing else.
    let fd = unsafe { libc::fcntl(stream.as_raw_fd(), libc::F_DUPFD_CLOEXEC, 0) };
    if fd < 0 {
        return None;
    }
    // SAFETY: `fd` was just created above and nothing else owns it; the std stream takes it
    // over (and closes it if the conversion below fails).
    let std = unsafe { std::net::TcpStream::from_raw_fd(fd) };
    TcpStream::from_std(std).ok()
}

/// Resolves when the peer of `handle` (a [`second_handle`]) closed or reset the connection.
/// Once the peer has sent bytes (a pipelined request) it never resolves: the peer is there,
/// and from then on a failed write tells if it leaves. A failed wait never resolves either:
/// a watch that cannot watch must not end a request.
pub async fn gone(handle: TcpStream) {
    loop {
        if handle.readable(false).await.is_err() {
            break;
        }
        match peer(&handle) {
            Peer::Gone => return,
            Peer::Sent => break,
            // Readiness without anything to read (a spurious wake): wait again.
            Peer::Quiet => {}
        }
    }
    std::future::pending::<()>().await
}

/// Why a request's answer must stop being made.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Stop {
    /// The peer closed or reset the connection.
    PeerGone,
    /// The shard's drain is over ([`Gate::finished`]): the answer must end now.
    ShuttingDown,
}

/// Resolves when the peer of `stream` is gone or the shard's drain ends; never otherwise.
/// Nothing is registered anywhere before [`FIRST_LOOK`].
pub async fn until_stop(stream: &TcpStream, gate: &Gate) -> Stop {
    monoio::time::sleep(FIRST_LOOK).await;
    let finished = gate.finished();
    let mut finished = std::pin::pin!(finished);
    let mut gap = FIRST_LOOK;
    loop {
        if peer(stream) == Peer::Gone {
            return Stop::PeerGone;
        }
        gap = (gap * 2).min(MAX_GAP);
        monoio::select! {
            _ = monoio::time::sleep(gap) => {},
            _ = &mut finished => return Stop::ShuttingDown,
        }
    }
}
