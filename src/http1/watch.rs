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
//! Over TLS the socket carries records, not requests, and a leaving client may send an alert
//! (close_notify; in TLS 1.3 it looks like any other record) before its FIN: bytes waiting do
//! not prove the peer is there. So bytes waiting count as [`Peer::Sent`] only while the
//! connection is still established (no FIN or reset from the peer), and a streamed answer whose
//! peer sent bytes keeps looking at it once a [`MAX_GAP`].
//!
//! The same wait ends when the shard's drain is over (the grace period after SIGTERM), so an
//! answer still being made then is ended cleanly rather than cut.

use std::os::fd::{AsRawFd, FromRawFd, RawFd};
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
pub fn peer(stream: &impl AsRawFd) -> Peer {
    let fd = stream.as_raw_fd();
    let mut byte = 0u8;
    // SAFETY: the descriptor belongs to `stream`, open for the duration of the call, and the
    // buffer is one valid, writable byte; MSG_PEEK leaves the data in the socket and
    // MSG_DONTWAIT makes the call return at once whatever the descriptor's blocking mode.
    let n = unsafe { libc::recv(fd, (&mut byte as *mut u8).cast(), 1, libc::MSG_PEEK | libc::MSG_DONTWAIT) };
    match n {
        0 => Peer::Gone,
        n if n > 0 && peer_closed(fd) => Peer::Gone,
        n if n > 0 => Peer::Sent,
        _ => match std::io::Error::last_os_error().kind() {
            std::io::ErrorKind::WouldBlock | std::io::ErrorKind::Interrupted => Peer::Quiet,
            _ => Peer::Gone,
        },
    }
}

/// Whether the peer of socket `fd` is done sending: the connection is no longer established
/// (its FIN arrived, `CLOSE_WAIT`, or its reset, `CLOSE`: a client closing a socket with
/// unread data — TLS session tickets, say — resets it), maybe behind bytes not read yet. A
/// socket whose state cannot be read is taken as open.
fn peer_closed(fd: RawFd) -> bool {
    // SAFETY: tcp_info is plain data, zero is a valid value of it; `len` says how much the
    // kernel may write, and both pointers are valid for the duration of the call on `fd`,
    // which the caller keeps open.
    unsafe {
        let mut info: libc::tcp_info = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
        let rc = libc::getsockopt(
            fd,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        );
        rc == 0 && info.tcpi_state != TCP_ESTABLISHED
    }
}

/// `TCP_ESTABLISHED` of the kernel's TCP states.
const TCP_ESTABLISHED: u8 = 1;

/// A second descriptor of `stream`'s socket, to wait on its readability while the connection
/// task writes through the first (a readiness wait borrows the stream it waits on). `None`
/// when the descriptor cannot be duplicated (the descriptor table is full): then only a failed
/// write tells that the peer left.
pub fn second_handle(stream: &impl AsRawFd) -> Option<TcpStream> {
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
/// Once the peer has sent bytes (a pipelined request, a TLS record) readiness says nothing
/// more: the socket is then looked at once a [`MAX_GAP`]. A failed wait never resolves: a
/// watch that cannot watch must not end a request (a failed write still tells).
pub async fn gone(handle: TcpStream) {
    loop {
        if handle.readable(false).await.is_err() {
            std::future::pending::<()>().await
        }
        match peer(&handle) {
            Peer::Gone => return,
            Peer::Sent => break,
            // Readiness without anything to read (a spurious wake): wait again.
            Peer::Quiet => {}
        }
    }
    loop {
        monoio::time::sleep(MAX_GAP).await;
        if peer(&handle) == Peer::Gone {
            return;
        }
    }
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
pub async fn until_stop(stream: &impl AsRawFd, gate: &Gate) -> Stop {
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
