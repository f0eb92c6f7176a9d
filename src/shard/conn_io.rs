//! A client connection's bytes, as the protocol loops see them: a plain socket
//! (`monoio::net::TcpStream`, completion-based on io_uring) or TLS over one
//! ([`super::tls::PollRent`]). Runs in each connection's task on its shard.
//!
//! Besides reading and writing, a connection can be waited on *without a buffer*
//! ([`Io::readable`]): an idle keep-alive connection then holds no read buffer (on io_uring a
//! pending read pins its buffer for as long as it waits), so ten thousand idle connections
//! cost their sockets and small tasks, not ten thousand buffers.

use std::future::Future;
use std::io;

use monoio::io::{AsyncReadRent, AsyncWriteRent};

/// A connection the HTTP/1.1 loop and protocol detection can serve.
pub trait Io: AsyncReadRent + AsyncWriteRent + std::os::fd::AsRawFd {
    /// Resolves once the peer sent something or closed (a read would not wait); holds no
    /// buffer while it waits.
    fn readable(&mut self) -> impl Future<Output = io::Result<()>>;
}

impl Io for monoio::net::TcpStream {
    async fn readable(&mut self) -> io::Result<()> {
        monoio::net::TcpStream::readable(self, false).await
    }
}
