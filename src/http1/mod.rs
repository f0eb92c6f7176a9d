//! HTTP/1.1 on a shard: parsing, framing, responses and the connection loop.
//!
//! * [`parse`]: request head (httparse, bounded) and chunked-body decoding. No I/O.
//! * [`request`]: the per-connection [`request::Assembler`] that cuts whole requests off the
//!   read buffer without copying. No I/O.
//! * [`response`]: response serialization and the per-shard `Date` cache. No I/O.
//! * [`conn`]: the connection loop over a monoio `TcpStream`, driving a [`conn::Service`].
//! * [`watch`]: noticing, without reading, a peer that closed while its answer is made.
//!
//! Called by `shard` (one task per accepted connection); calls only the service it is given.
//! Must not depend on routing, models or workers.

pub mod conn;
pub mod parse;
pub mod request;
pub mod response;
pub mod watch;

pub use conn::{ConnConfig, Service};
pub use parse::{Limits, Method};
pub use request::Request;
pub use response::{Body, Response};
