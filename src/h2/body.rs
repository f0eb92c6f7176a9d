//! Moving bytes through one HTTP/2 stream within flow control.
//!
//! Receiving: every chunk taken from a [`RecvStream`] is released back to the connection's
//! and the stream's windows at once ([`next_data`]), so a client is never stalled by bytes we
//! already hold. Sending: [`send`] reserves capacity for what it wants to write and sends only
//! what the peer's window allows, waiting for more (a slow reader slows the producer instead of
//! growing a buffer). [`reset`] resolves when the peer cancels the stream (`RST_STREAM`).

use std::future::poll_fn;

use bytes::{Bytes, BytesMut};
use h2::{Reason, RecvStream, SendStream};

/// Why a body could not be read.
#[derive(Debug)]
pub enum ReadError {
    /// More than the limit arrived.
    TooLarge,
    /// The stream or the connection failed (reset, protocol error, connection gone).
    Stream(h2::Error),
}

/// The next DATA chunk of `body`, its bytes released to flow control; `None` at end of stream.
pub async fn next_data(body: &mut RecvStream) -> Option<Result<Bytes, h2::Error>> {
    let chunk = body.data().await?;
    if let Ok(c) = &chunk {
        // Releasing can only fail once the stream is gone, which the next read reports.
        let _ = body.flow_control().release_capacity(c.len());
    }
    Some(chunk)
}

/// The whole body, refusing more than `limit` bytes.
pub async fn read_all(body: &mut RecvStream, limit: usize) -> Result<Bytes, ReadError> {
    let mut first: Option<Bytes> = None;
    let mut rest = BytesMut::new();
    while let Some(chunk) = next_data(body).await {
        let chunk = chunk.map_err(ReadError::Stream)?;
        let have = first.as_ref().map_or(0, Bytes::len) + rest.len();
        if have + chunk.len() > limit {
            return Err(ReadError::TooLarge);
        }
        match &first {
            None => first = Some(chunk),
            Some(f) => {
                if rest.is_empty() {
                    rest.extend_from_slice(f);
                }
                rest.extend_from_slice(&chunk);
            }
        }
    }
    Ok(if rest.is_empty() { first.unwrap_or_default() } else { rest.freeze() })
}

/// Send `data` on `stream` as the peer's window allows; `end` closes the stream with the last
/// piece.
pub async fn send(stream: &mut SendStream<Bytes>, mut data: Bytes, end: bool) -> Result<(), h2::Error> {
    if data.is_empty() {
        return if end { stream.send_data(Bytes::new(), true) } else { Ok(()) };
    }
    while !data.is_empty() {
        stream.reserve_capacity(data.len());
        let granted = match poll_fn(|cx| stream.poll_capacity(cx)).await {
            Some(Ok(n)) => n,
            Some(Err(e)) => return Err(e),
            None => return Err(h2::Error::from(Reason::CANCEL)),
        };
        if granted == 0 {
            continue;
        }
        let piece = data.split_to(granted.min(data.len()));
        stream.send_data(piece, end && data.is_empty())?;
    }
    Ok(())
}

/// Resolves when the peer resets the stream (or the connection goes away).
pub async fn reset(stream: &mut SendStream<Bytes>) -> Reason {
    poll_fn(|cx| stream.poll_reset(cx)).await.unwrap_or(Reason::CANCEL)
}
