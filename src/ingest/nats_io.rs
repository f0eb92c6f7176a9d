//! The NATS client's connection ([`super::nats::Sub`]): plain TCP, or TLS over it once the
//! server's `INFO` has been read (the way core NATS starts TLS, and 1.6.1's client with it).
//! Blocking, on the event-ingest thread; the session is a rustls `StreamOwned`, so reads
//! through it honour the socket's timeouts and non-blocking mode like the plain socket.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::sync::Arc;

/// The connection to the server.
pub(super) enum Io {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Io {
    /// The socket (its descriptor is polled; its options are set).
    pub(super) fn tcp(&self) -> &TcpStream {
        match self {
            Io::Plain(s) => s,
            Io::Tls(s) => &s.sock,
        }
    }

    /// Write all of `bytes` (sealed and sent, for TLS).
    pub(super) fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        match self {
            Io::Plain(s) => s.write_all(bytes),
            Io::Tls(s) => {
                s.write_all(bytes)?;
                s.flush()
            }
        }
    }

    pub(super) fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Io::Plain(s) => s.read(buf),
            Io::Tls(s) => s.read(buf),
        }
    }

    /// The TLS handshake over this plain connection, the server verified under `host` (its
    /// name or address, as the URL gives it), within the socket's timeouts.
    pub(super) fn upgrade(self, host: &str, config: &Arc<rustls::ClientConfig>) -> io::Result<Io> {
        let Io::Plain(mut sock) = self else { return Ok(self) };
        let name = rustls::pki_types::ServerName::try_from(host.to_owned())
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, format!("{host}: not a TLS server name: {e}")))?;
        let mut session = rustls::ClientConnection::new(config.clone(), name).map_err(io::Error::other)?;
        while session.is_handshaking() {
            session.complete_io(&mut sock)?;
        }
        Ok(Io::Tls(Box::new(rustls::StreamOwned::new(session, sock))))
    }
}
