//! The shard's side of Dynamo's request plane (TCP or NATS): the sockets.
//!
//! * [`client`]: one pipelined connection per worker address, frames written and acks paired
//!   first in, first out ([`client::WorkerConns`]), and the one call that sends a request
//!   and registers its call-back ([`client::RequestPlane::generate`]);
//! * [`callback`]: the shard's response-stream listener, where workers call back, and the
//!   per-request [`callback::ResponseStream`] (`kill` on drop);
//! * [`nats`]: with `--request-plane nats`, the shard's NATS connection: requests published
//!   to workers' subjects, their replies as acks (the answer still comes to the call-back
//!   listener);
//! * `stream`: the byte streams both run on, plain TCP or TLS over it (the request plane's
//!   TLS, docs/dynamo/request-plane-tls.md), behind two small traits.
//!
//! Runs on a shard thread, on its monoio runtime: `Rc`, `RefCell`, no locks, no `Send`.
//! The bytes on these sockets are [`crate::plane`]'s codecs; what a request means is
//! [`crate::infer`]'s.

pub mod callback;
pub mod client;
pub mod nats;
mod stream;
