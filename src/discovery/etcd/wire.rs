//! The bytes on the wire: a one-request HTTP/1.1 client (request writer, response head
//! reader, Content-Length / chunked / read-to-EOF bodies) and the JSON conventions of
//! etcd's gateway (base64 keys and values, int64 as strings).

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::Duration;

use serde_json::Value;

/// Largest response head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Largest unary response body accepted (a range of every record of a bucket).
const MAX_BODY: usize = 256 * 1024 * 1024;

/// Writes `POST path` with a JSON body. `Connection: close`: each request gets its own
/// connection, so a response body may also end at EOF.
pub(crate) fn write_request(stream: &mut TcpStream, authority: &str, path: &str, body: &[u8]) -> io::Result<()> {
    let mut req = Vec::with_capacity(160 + body.len());
    req.extend_from_slice(b"POST ");
    req.extend_from_slice(path.as_bytes());
    req.extend_from_slice(b" HTTP/1.1\r\nHost: ");
    req.extend_from_slice(authority.as_bytes());
    req.extend_from_slice(b"\r\nContent-Type: application/json\r\nAccept: application/json\r\nContent-Length: ");
    req.extend_from_slice(itoa::Buffer::new().format(body.len()).as_bytes());
    req.extend_from_slice(b"\r\nConnection: close\r\n\r\n");
    req.extend_from_slice(body);
    stream.write_all(&req)
}

/// `GET url` (`http://host[:port]/path`) on a connection of its own: the body of a 200
/// response. Any other status, `https://`, or no answer within `timeout` per read is an
/// error. Used for model-card files a worker serves over HTTP.
pub(crate) fn http_get(url: &str, timeout: Duration) -> io::Result<Vec<u8>> {
    let rest = url.strip_prefix("http://").ok_or_else(|| bad(format!("{url}: only http:// URLs are supported")))?;
    let (authority, path) = rest.find('/').map_or((rest, "/"), |i| (&rest[..i], &rest[i..]));
    let with_port = if authority.contains(':') { authority.to_string() } else { format!("{authority}:80") };
    let addr = std::net::ToSocketAddrs::to_socket_addrs(&with_port)?
        .next()
        .ok_or_else(|| bad(format!("{authority}: no address")))?;
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    set_timeouts(&stream, timeout)?;
    let req = format!("GET {path} HTTP/1.1\r\nHost: {authority}\r\nAccept: */*\r\nConnection: close\r\n\r\n");
    stream.write_all(req.as_bytes())?;
    match Response::read_head(stream)?.read_to_end()? {
        (200, body) => Ok(body),
        (status, _) => Err(bad(format!("GET {url}: HTTP {status}"))),
    }
}

/// How the body of a response ends.
#[derive(Debug)]
enum Framing {
    Length(usize),
    Chunked(Chunk),
    Eof,
}

/// Position inside a chunked body.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Chunk {
    /// Expecting a chunk-size line.
    Size,
    /// Inside chunk data, this many bytes left.
    Data(usize),
    /// Expecting the CRLF after chunk data.
    DataEnd,
    /// After the last chunk: trailer lines until an empty one.
    Trailer,
}

/// A client connection, plain or TLS (the Kubernetes API is https in a cluster).
pub(crate) enum Conn {
    Plain(TcpStream),
    Tls(Box<rustls::StreamOwned<rustls::ClientConnection, TcpStream>>),
}

impl Conn {
    /// The socket under it (timeouts, readiness polling).
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            Conn::Plain(s) => s,
            Conn::Tls(s) => &s.sock,
        }
    }
}

impl From<TcpStream> for Conn {
    fn from(s: TcpStream) -> Conn {
        Conn::Plain(s)
    }
}

impl Read for Conn {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.read(buf),
            Conn::Tls(s) => s.read(buf),
        }
    }
}

impl Write for Conn {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Conn::Plain(s) => s.write(buf),
            Conn::Tls(s) => s.write(buf),
        }
    }

    fn flush(&mut self) -> io::Result<()> {
        match self {
            Conn::Plain(s) => s.flush(),
            Conn::Tls(s) => s.flush(),
        }
    }
}

/// A response being read from one connection: status, and a body decoded as it arrives.
pub(crate) struct Response {
    stream: Conn,
    pub(crate) status: u16,
    framing: Framing,
    /// Received, not yet decoded.
    raw: Vec<u8>,
    /// Decoded body bytes not yet taken.
    pub(crate) body: Vec<u8>,
    /// The whole body has been decoded.
    pub(crate) done: bool,
}

fn bad(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg.into())
}

/// Reads one more piece from `stream` into `buf`; 0 at EOF.
fn read_some(stream: &mut impl Read, buf: &mut Vec<u8>) -> io::Result<usize> {
    let mut tmp = [0u8; 16 * 1024];
    let n = stream.read(&mut tmp)?;
    buf.extend_from_slice(&tmp[..n]);
    Ok(n)
}

impl Response {
    /// Reads the response head (1xx responses skipped) from `stream`.
    pub(crate) fn read_head(stream: impl Into<Conn>) -> io::Result<Response> {
        let mut stream = stream.into();
        let mut raw = Vec::new();
        loop {
            let mut headers = [httparse::EMPTY_HEADER; 32];
            let mut resp = httparse::Response::new(&mut headers);
            match resp.parse(&raw).map_err(|e| bad(format!("bad HTTP response head: {e}")))? {
                httparse::Status::Complete(len) => {
                    let status = resp.code.unwrap_or(0);
                    let mut framing = Framing::Eof;
                    for h in resp.headers.iter() {
                        if h.name.eq_ignore_ascii_case("transfer-encoding") {
                            if h.value.eq_ignore_ascii_case(b"chunked") {
                                framing = Framing::Chunked(Chunk::Size);
                            }
                        } else if h.name.eq_ignore_ascii_case("content-length") {
                            if let Framing::Eof = framing {
                                let n = std::str::from_utf8(h.value).ok().and_then(|v| v.trim().parse().ok());
                                framing = Framing::Length(n.ok_or_else(|| bad("bad Content-Length"))?);
                            }
                        }
                    }
                    raw.drain(..len);
                    if (100..200).contains(&status) {
                        continue;
                    }
                    let mut r = Response { stream, status, framing, raw, body: Vec::new(), done: false };
                    r.decode()?;
                    return Ok(r);
                }
                httparse::Status::Partial => {
                    if raw.len() > MAX_HEAD {
                        return Err(bad("HTTP response head too large"));
                    }
                    if read_some(&mut stream, &mut raw)? == 0 {
                        return Err(io::Error::new(
                            io::ErrorKind::UnexpectedEof,
                            "connection closed before a response",
                        ));
                    }
                }
            }
        }
    }

    /// The connection (for timeouts and readiness polling).
    pub(crate) fn stream(&self) -> &TcpStream {
        self.stream.tcp()
    }

    /// Reads once more from the connection (blocking up to its read timeout) and decodes.
    /// `Ok(false)` when the body had already ended or the connection closed.
    pub(crate) fn read_more(&mut self) -> io::Result<bool> {
        if self.done {
            return Ok(false);
        }
        if read_some(&mut self.stream, &mut self.raw)? == 0 {
            return match self.framing {
                Framing::Eof => {
                    self.done = true;
                    Ok(false)
                }
                _ => Err(io::Error::new(io::ErrorKind::UnexpectedEof, "connection closed inside a response body")),
            };
        }
        self.decode()?;
        Ok(true)
    }

    /// Reads the rest of the body.
    pub(crate) fn read_to_end(mut self) -> io::Result<(u16, Vec<u8>)> {
        while !self.done {
            if self.body.len() > MAX_BODY {
                return Err(bad("response body too large"));
            }
            self.read_more()?;
        }
        Ok((self.status, self.body))
    }

    /// Moves what can be decoded from `raw` to `body`.
    fn decode(&mut self) -> io::Result<()> {
        match &mut self.framing {
            Framing::Eof => self.body.append(&mut self.raw),
            Framing::Length(left) => {
                let n = (*left).min(self.raw.len());
                self.body.extend(self.raw.drain(..n));
                *left -= n;
                self.done = *left == 0;
            }
            Framing::Chunked(state) => {
                let mut at = 0;
                while !self.done {
                    match *state {
                        Chunk::Data(left) => {
                            let n = left.min(self.raw.len() - at);
                            if n == 0 {
                                break;
                            }
                            self.body.extend_from_slice(&self.raw[at..at + n]);
                            at += n;
                            *state = if n == left { Chunk::DataEnd } else { Chunk::Data(left - n) };
                        }
                        Chunk::Size | Chunk::DataEnd | Chunk::Trailer => {
                            let Some(eol) = self.raw[at..].windows(2).position(|w| w == b"\r\n") else {
                                break;
                            };
                            let line = &self.raw[at..at + eol];
                            at += eol + 2;
                            *state = match *state {
                                Chunk::Size => match chunk_size(line)? {
                                    0 => Chunk::Trailer,
                                    n => Chunk::Data(n),
                                },
                                Chunk::DataEnd if line.is_empty() => Chunk::Size,
                                Chunk::DataEnd => return Err(bad("chunk data not followed by CRLF")),
                                _ => {
                                    self.done = line.is_empty();
                                    Chunk::Trailer
                                }
                            };
                        }
                    }
                }
                self.raw.drain(..at);
            }
        }
        Ok(())
    }
}

/// Parses a chunk-size line (hex, optional `;extension`).
fn chunk_size(line: &[u8]) -> io::Result<usize> {
    let hex = line.split(|&b| b == b';').next().unwrap_or_default();
    let hex = std::str::from_utf8(hex).map_err(|_| bad("bad chunk size"))?.trim();
    let n = usize::from_str_radix(hex, 16).map_err(|_| bad(format!("bad chunk size {hex:?}")))?;
    if n > MAX_BODY {
        return Err(bad("chunk too large"));
    }
    Ok(n)
}

/// Sets both socket timeouts (a zero duration is raised to 1 ms: std refuses zero).
pub(crate) fn set_timeouts(stream: &TcpStream, t: Duration) -> io::Result<()> {
    let t = t.max(Duration::from_millis(1));
    stream.set_read_timeout(Some(t))?;
    stream.set_write_timeout(Some(t))
}

// ---------------------------------------------------------------------------------------------
// JSON conventions of the gateway
// ---------------------------------------------------------------------------------------------

/// Standard base64 with padding (what protobuf's JSON mapping uses for `bytes`).
pub(crate) fn b64_encode(bytes: &[u8]) -> String {
    crate::util::base64::encode(bytes)
}

/// Decodes standard or URL-safe base64, padded or not.
pub(crate) fn b64_decode(text: &str) -> io::Result<Vec<u8>> {
    crate::util::base64::decode_lenient(text).map_err(|c| bad(format!("bad base64 byte {c:#x}")))
}

/// An int64 field: the gateway writes them as strings; numbers are accepted too; absent is 0.
pub(crate) fn int64(v: &Value, field: &str) -> io::Result<i64> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(0),
        Some(Value::String(s)) => s.parse().map_err(|_| bad(format!("{field}: {s:?} is not an int64"))),
        Some(Value::Number(n)) => n.as_i64().ok_or_else(|| bad(format!("{field}: {n} is not an int64"))),
        Some(other) => Err(bad(format!("{field}: {other} is not an int64"))),
    }
}

/// A base64 field; absent is empty.
pub(crate) fn bytes_field(v: &Value, field: &str) -> io::Result<Vec<u8>> {
    match v.get(field) {
        None | Some(Value::Null) => Ok(Vec::new()),
        Some(Value::String(s)) => b64_decode(s),
        Some(other) => Err(bad(format!("{field}: {other} is not base64 text"))),
    }
}

/// The end of the range of every key starting with `prefix` (etcd's prefix rule: the last
/// byte below 0xff incremented, what follows it dropped; `\0` — every key — when none).
pub(crate) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    vec![0]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn base64_round_trip() {
        for (plain, coded) in [("", ""), ("f", "Zg=="), ("fo", "Zm8="), ("foo", "Zm9v"), ("foob", "Zm9vYg==")] {
            assert_eq!(b64_encode(plain.as_bytes()), coded);
            assert_eq!(b64_decode(coded).unwrap(), plain.as_bytes());
        }
        let all: Vec<u8> = (0..=255).collect();
        assert_eq!(b64_decode(&b64_encode(&all)).unwrap(), all);
        assert!(b64_decode("Zm9v!").is_err());
    }

    #[test]
    fn prefix_ends() {
        assert_eq!(prefix_end(b"v1/mdc/"), b"v1/mdc0");
        assert_eq!(prefix_end(b"a\xff"), b"b");
        assert_eq!(prefix_end(b"\xff"), b"\0");
    }

    #[test]
    fn int64_fields() {
        let v = serde_json::json!({"a": "7668682386365559046", "b": 5, "c": "x"});
        assert_eq!(int64(&v, "a").unwrap(), 7668682386365559046);
        assert_eq!(int64(&v, "b").unwrap(), 5);
        assert_eq!(int64(&v, "missing").unwrap(), 0);
        assert!(int64(&v, "c").is_err());
    }

    /// Serves `pieces` (written with pauses, so reads split anywhere) and reads the response.
    fn serve(pieces: &[&'static [u8]]) -> io::Result<(u16, Vec<u8>)> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let pieces = pieces.to_vec();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            // Read the whole request first: closing with unread bytes would reset the connection.
            let mut req = Vec::new();
            while !req.ends_with(b"{}") {
                let mut tmp = [0u8; 512];
                let n = s.read(&mut tmp).unwrap();
                assert!(n > 0, "request cut short");
                req.extend_from_slice(&tmp[..n]);
            }
            assert!(req.starts_with(b"POST /v3/kv/range HTTP/1.1\r\nHost: h:1\r\n"));
            for p in pieces {
                s.write_all(p).unwrap();
                std::thread::sleep(Duration::from_millis(5));
            }
        });
        let mut stream = TcpStream::connect(addr).unwrap();
        set_timeouts(&stream, Duration::from_secs(5)).unwrap();
        write_request(&mut stream, "h:1", "/v3/kv/range", b"{}").unwrap();
        let got = Response::read_head(stream).and_then(Response::read_to_end);
        server.join().unwrap();
        got
    }

    #[test]
    fn response_bodies() {
        let chunked = serve(&[
            b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhel",
            b"lo\r",
            b"\n6;ext=1\r\n world\r\n0\r\nX-Trailer: 1\r\n",
            b"\r\n",
        ]);
        assert_eq!(chunked.unwrap(), (200, b"hello world".to_vec()));
        let sized = serve(&[b"HTTP/1.1 404 Not Found\r\nContent-Length: 4\r\n\r\nno", b"pe"]);
        assert_eq!(sized.unwrap(), (404, b"nope".to_vec()));
        let to_eof = serve(&[b"HTTP/1.1 200 OK\r\n\r\nuntil ", b"close"]);
        assert_eq!(to_eof.unwrap(), (200, b"until close".to_vec()));
        let cut = serve(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhe"]);
        assert_eq!(cut.unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        let bad_size = serve(&[b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n"]);
        assert_eq!(bad_size.unwrap_err().kind(), io::ErrorKind::InvalidData);
    }
}
