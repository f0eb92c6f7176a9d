//! The core NATS client protocol, as pure functions: server URLs, `INFO`, the `CONNECT`
//! line, and the units a server sends (`MSG`, `HMSG`, `PING`, `PONG`, `+OK`, `-ERR`,
//! `INFO`), parsed from a byte buffer once whole. The event-ingest thread's blocking
//! subscriber ([`crate::ingest`]'s `nats::Sub`) and the shards' request publisher
//! (`transport::nats`) run their sockets on these. What Dynamo 1.6.1 does on NATS:
//! `src/ingest/nats.rs` (the event plane) and docs/dynamo/request-plane.md §5.6 (the
//! request plane).

use std::io;

use serde::Deserialize;

use super::frame::{encode_two_part, TWO_PART_PRELUDE_LEN};
use super::PlaneError;

/// Where Dynamo looks when `NATS_SERVER` is not set.
pub const DEFAULT_URL: &str = "nats://localhost:4222";
/// The port of a URL that names none.
pub const DEFAULT_PORT: u16 = 4222;
/// Longest control line accepted (an `INFO` listing a large cluster's URLs fits).
const MAX_LINE: usize = 64 * 1024;

/// One received message.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NatsMsg {
    pub subject: String,
    /// Where the sender wants a reply (a request's reply subject).
    pub reply: Option<String>,
    /// The raw header block of an `HMSG` (`NATS/1.0\r\nName: value\r\n…\r\n`); `None` for a `MSG`.
    pub headers: Option<Vec<u8>>,
    pub payload: Vec<u8>,
}

/// Credentials given in a URL's user-info part.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Auth {
    /// `nats://user:pass@host`
    UserPass(String, String),
    /// `nats://token@host`
    Token(String),
}

/// One server of a URL list.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServerUrl {
    pub host: String,
    pub port: u16,
    pub auth: Option<Auth>,
    /// `tls://`: the connection is upgraded to TLS after the server's `INFO`.
    pub tls: bool,
}

/// The fields of the server's `INFO` this client looks at.
#[derive(Clone, Debug, Default, PartialEq, Eq, Deserialize)]
pub struct ServerInfo {
    #[serde(default)]
    pub server_id: String,
    #[serde(default)]
    pub version: String,
    /// The largest payload the server accepts from publishers.
    #[serde(default)]
    pub max_payload: u64,
    /// Whether the server speaks `HPUB` / `HMSG`.
    #[serde(default)]
    pub headers: bool,
    #[serde(default)]
    pub tls_required: bool,
    /// The server takes TLS without requiring it.
    #[serde(default)]
    pub tls_available: bool,
    #[serde(default)]
    pub auth_required: bool,
}

fn invalid_input(msg: impl Into<String>) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidInput, msg.into())
}

/// Parses `nats://[user:pass@|token@]host[:port]` (or `tls://…`), or a comma-separated list
/// of them. The scheme may be left out; other schemes are refused. User-info is taken
/// literally (not percent-decoded).
pub fn parse_urls(list: &str) -> io::Result<Vec<ServerUrl>> {
    let urls =
        list.split(',').map(str::trim).filter(|u| !u.is_empty()).map(parse_url).collect::<io::Result<Vec<_>>>()?;
    if urls.is_empty() {
        return Err(invalid_input(format!("{list:?}: no NATS server URL")));
    }
    Ok(urls)
}

fn parse_url(url: &str) -> io::Result<ServerUrl> {
    let (tls, rest) = match url.split_once("://") {
        Some(("nats", rest)) => (false, rest),
        Some(("tls", rest)) => (true, rest),
        Some((scheme, _)) => {
            return Err(invalid_input(format!("{url}: unsupported scheme {scheme}:// (nats:// or tls://)")))
        }
        None => (false, url),
    };
    let rest = rest.trim_end_matches('/');
    let (auth, hostport) = match rest.rsplit_once('@') {
        Some((info, hostport)) => {
            let auth = match info.split_once(':') {
                Some((user, pass)) => Auth::UserPass(user.to_string(), pass.to_string()),
                None => Auth::Token(info.to_string()),
            };
            (Some(auth), hostport)
        }
        None => (None, rest),
    };
    let (host, port) = if let Some(v6) = hostport.strip_prefix('[') {
        let (host, after) = v6.split_once(']').ok_or_else(|| invalid_input(format!("{url}: unclosed '['")))?;
        (host, after.strip_prefix(':'))
    } else {
        match hostport.rsplit_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (hostport, None),
        }
    };
    if host.is_empty() || host.contains(['/', '?', '#', ' ']) {
        return Err(invalid_input(format!("{url}: not a host[:port]")));
    }
    let port = match port {
        None => DEFAULT_PORT,
        Some(p) => p.parse().map_err(|_| invalid_input(format!("{url}: bad port {p:?}")))?,
    };
    Ok(ServerUrl { host: host.to_string(), port, auth, tls })
}

/// Checks a subscription subject: dot-separated non-empty tokens of printable non-space
/// ASCII or UTF-8, `*` only as a whole token, `>` only as the whole last token.
pub fn check_subject(subject: &str) -> io::Result<()> {
    let tokens: Vec<&str> = subject.split('.').collect();
    for (i, t) in tokens.iter().enumerate() {
        let ok = !t.is_empty()
            && !t.chars().any(|c| c.is_whitespace() || c.is_control())
            && (!t.contains('*') || *t == "*")
            && (!t.contains('>') || (*t == ">" && i + 1 == tokens.len()));
        if !ok {
            return Err(invalid_input(format!("{subject:?} is not a NATS subscription subject")));
        }
    }
    Ok(())
}

/// One unit of the server's protocol.
#[derive(Debug)]
pub enum Op {
    Info(ServerInfo),
    Msg(NatsMsg),
    Ping,
    Pong,
    Ok,
    Err(String),
}

/// The `CONNECT` line for a server that sent `info`.
///
/// `requests`: the client publishes requests and waits for replies, so it asks the server to
/// answer a request nobody is subscribed to with a no-responders status (`HMSG` with
/// `NATS/1.0 503`), as 1.6.1's client does; a subscriber leaves it off.
pub fn connect_line(info: &ServerInfo, auth: Option<&Auth>, tls: bool, requests: bool) -> Vec<u8> {
    let mut o = serde_json::json!({
        "verbose": false,
        "pedantic": false,
        "tls_required": tls,
        "name": "switchyard",
        "lang": "rust",
        "version": env!("CARGO_PKG_VERSION"),
        "protocol": 1,
        "echo": false,
        "headers": info.headers,
        "no_responders": requests && info.headers,
    });
    match auth {
        Some(Auth::UserPass(u, p)) => {
            o["user"] = u.as_str().into();
            o["pass"] = p.as_str().into();
        }
        Some(Auth::Token(t)) => o["auth_token"] = t.as_str().into(),
        None => {}
    }
    let mut line = b"CONNECT ".to_vec();
    line.extend_from_slice(o.to_string().as_bytes());
    line.extend_from_slice(b"\r\n");
    line
}

/// Parses one whole protocol unit at the start of `b`: `Ok(None)` when more bytes are needed,
/// else the unit and the bytes it used.
pub fn parse_op(b: &[u8], max_payload: usize) -> Result<Option<(Op, usize)>, String> {
    let Some(nl) = b.iter().take(MAX_LINE + 2).position(|&c| c == b'\n') else {
        if b.len() > MAX_LINE {
            return Err(format!("no end of line within {MAX_LINE} bytes"));
        }
        return Ok(None);
    };
    let line = b[..nl].strip_suffix(b"\r").unwrap_or(&b[..nl]);
    let line = std::str::from_utf8(line).map_err(|_| format!("a control line is not UTF-8: {}", shown(line)))?;
    let (verb, rest) = line.split_once([' ', '\t']).unwrap_or((line, ""));
    let rest = rest.trim();
    let used = nl + 1;
    let op = match verb.to_ascii_uppercase().as_str() {
        "MSG" => return parse_msg(b, used, false, rest, max_payload),
        "HMSG" => return parse_msg(b, used, true, rest, max_payload),
        "PING" => Op::Ping,
        "PONG" => Op::Pong,
        "+OK" => Op::Ok,
        "-ERR" => Op::Err(rest.trim_matches('\'').to_string()),
        "INFO" => Op::Info(serde_json::from_str(rest).map_err(|e| format!("INFO is not JSON: {e}"))?),
        _ => return Err(format!("not a NATS protocol line: {}", shown(line.as_bytes()))),
    };
    Ok(Some((op, used)))
}

/// `MSG <subject> <sid> [reply-to] <#bytes>` or `HMSG <subject> <sid> [reply-to] <#header
/// bytes> <#total bytes>`, whose arguments are `args`, followed from `start` on by the bytes
/// and CRLF.
fn parse_msg(
    b: &[u8],
    start: usize,
    with_headers: bool,
    args: &str,
    max_payload: usize,
) -> Result<Option<(Op, usize)>, String> {
    let what = if with_headers { "HMSG" } else { "MSG" };
    let a: Vec<&str> = args.split_ascii_whitespace().collect();
    let sizes = if with_headers { 2 } else { 1 };
    if a.len() != 2 + sizes && a.len() != 3 + sizes {
        return Err(format!("{what} with {} arguments: {}", a.len(), shown(args.as_bytes())));
    }
    let num = |s: &str| s.parse::<usize>().map_err(|_| format!("{what}: {s:?} is not a byte count"));
    let total = num(a[a.len() - 1])?;
    let header_len = if with_headers { num(a[a.len() - 2])? } else { 0 };
    if header_len > total || header_len > MAX_LINE {
        return Err(format!("{what}: {header_len} header bytes in a {total}-byte message"));
    }
    if total - header_len > max_payload {
        return Err(format!("a {}-byte payload exceeds the limit of {max_payload}", total - header_len));
    }
    let end = start + total;
    if b.len() < end + 2 {
        return Ok(None);
    }
    if &b[end..end + 2] != b"\r\n" {
        return Err(format!("{what} on {}: the {total} bytes are not followed by CRLF", a[0]));
    }
    let body = &b[start..end];
    let msg = NatsMsg {
        subject: a[0].to_string(),
        reply: (a.len() == 3 + sizes).then(|| a[2].to_string()),
        headers: with_headers.then(|| body[..header_len].to_vec()),
        payload: body[header_len..].to_vec(),
    };
    Ok(Some((Op::Msg(msg), end + 2)))
}

/// The start of a line for an error message, printable.
fn shown(line: &[u8]) -> String {
    let s = String::from_utf8_lossy(&line[..line.len().min(60)]);
    format!("{:?}{}", s, if line.len() > 60 { "…" } else { "" })
}

// ---------------------------------------------------------------- the request plane

/// One request of the NATS request plane (docs/dynamo/request-plane.md §5.6): `HPUB <subject>
/// <reply> <#header bytes> <#total bytes>`, a `NATS/1.0` header block with `headers`, and the
/// two-part message of `control` and `body` (what the TCP plane puts in its frame). `max`
/// bounds the two-part message (`DYN_TCP_MAX_MESSAGE_SIZE`, and the server's `max_payload`).
/// Subjects and header texts must not hold spaces or line ends (the caller's are a checked
/// subject, an inbox, UUIDs and numbers).
pub fn encode_request(
    out: &mut Vec<u8>,
    subject: &str,
    reply: &str,
    headers: &[(&str, &str)],
    control: &[u8],
    body: &[u8],
    max: usize,
) -> Result<(), PlaneError> {
    let payload = TWO_PART_PRELUDE_LEN + control.len() + body.len();
    if payload > max {
        return Err(PlaneError::TooLarge { what: "request payload", len: payload as u64, max: max as u64 });
    }
    let mut block = Vec::with_capacity(128);
    block.extend_from_slice(b"NATS/1.0\r\n");
    for (name, value) in headers {
        if [name, value].iter().any(|t| t.contains(['\r', '\n'])) || name.contains(':') {
            return Err(PlaneError::malformed("request header", format!("{name:?}: {value:?}")));
        }
        block.extend_from_slice(name.as_bytes());
        block.extend_from_slice(b": ");
        block.extend_from_slice(value.as_bytes());
        block.extend_from_slice(b"\r\n");
    }
    block.extend_from_slice(b"\r\n");
    out.reserve(64 + subject.len() + reply.len() + block.len() + payload);
    out.extend_from_slice(b"HPUB ");
    out.extend_from_slice(subject.as_bytes());
    out.push(b' ');
    out.extend_from_slice(reply.as_bytes());
    out.extend_from_slice(format!(" {} {}\r\n", block.len(), block.len() + payload).as_bytes());
    out.extend_from_slice(&block);
    encode_two_part(out, control, body);
    out.extend_from_slice(b"\r\n");
    Ok(())
}

/// What a reply to a request says.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Reply {
    /// No headers, no bytes: the worker took the request (its answer comes on the call-back).
    Accepted,
    /// Bytes: the worker's refusal, as on the TCP plane's ack.
    Refused(String),
    /// The server's `503` status: nobody listens on the subject (the worker is gone).
    NoResponders,
    /// Another status line from the server (`NATS/1.0 408 …`).
    Status(String),
}

/// Reads a reply message.
pub fn reply(msg: &NatsMsg) -> Reply {
    if let Some(h) = &msg.headers {
        let first = h.split(|&c| c == b'\n').next().unwrap_or_default();
        let first = String::from_utf8_lossy(first).trim().to_string();
        let status = first.strip_prefix("NATS/1.0").map(str::trim).unwrap_or(&first);
        if status.starts_with("503") {
            return Reply::NoResponders;
        }
        if !status.is_empty() {
            return Reply::Status(status.to_string());
        }
    }
    if msg.payload.is_empty() {
        Reply::Accepted
    } else {
        Reply::Refused(String::from_utf8_lossy(&msg.payload).into_owned())
    }
}

/// Checks a subject to publish to (from a worker's discovery record): dot-separated tokens of
/// printable non-space text, no wildcards.
pub fn check_publish_subject(subject: &str) -> io::Result<()> {
    check_subject(subject)?;
    if subject.split('.').any(|t| t == "*" || t == ">") {
        return Err(invalid_input(format!("{subject:?} is a wildcard, not a subject to publish to")));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(b: &[u8]) -> Result<Option<(Op, usize)>, String> {
        parse_op(b, 100)
    }

    #[test]
    fn urls() {
        let u = parse_urls("nats://127.0.0.1:14222").unwrap();
        assert_eq!(u, [ServerUrl { host: "127.0.0.1".into(), port: 14222, auth: None, tls: false }]);
        assert!(parse_urls("tls://localhost:4443").unwrap()[0].tls);
        let u = parse_urls(" nats://a:1 , b ,nats://u:p@[::1]:7/,tok@c:9").unwrap();
        assert_eq!(u.len(), 4);
        assert_eq!((u[1].host.as_str(), u[1].port), ("b", DEFAULT_PORT));
        assert_eq!((u[2].host.as_str(), u[2].port), ("::1", 7));
        assert_eq!(u[2].auth, Some(Auth::UserPass("u".into(), "p".into())));
        assert_eq!(u[3].auth, Some(Auth::Token("tok".into())));
        assert_eq!(parse_urls(DEFAULT_URL).unwrap()[0].host, "localhost");
        for bad in ["", " , ", "http://h", "nats://:4222", "nats://h:x", "nats://h:70000", "nats://[::1"] {
            assert_eq!(parse_urls(bad).unwrap_err().kind(), io::ErrorKind::InvalidInput, "{bad:?}");
        }
    }

    #[test]
    fn subjects() {
        for ok in ["a", "a.b-c_d.kv-events", "a.*.c", ">", "a.>", "*.*"] {
            check_subject(ok).unwrap();
        }
        for bad in ["", "a..b", ".a", "a.", "a b", "a.>.c", "a*", "a.b>", "a\tb"] {
            assert!(check_subject(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn units() {
        assert!(op(b"").unwrap().is_none());
        assert!(op(b"PIN").unwrap().is_none());
        assert!(matches!(op(b"PING\r\nx").unwrap(), Some((Op::Ping, 6))));
        assert!(matches!(op(b"pong\r\n").unwrap(), Some((Op::Pong, 6))));
        assert!(matches!(op(b"+OK\r\n").unwrap(), Some((Op::Ok, 5))));
        let Some((Op::Err(e), _)) = op(b"-ERR 'Unknown Protocol Operation'\r\n").unwrap() else { panic!() };
        assert_eq!(e, "Unknown Protocol Operation");
        let info = b"INFO {\"server_id\":\"x\",\"max_payload\":5,\"headers\":true}\r\n";
        let Some((Op::Info(i), _)) = op(info).unwrap() else { panic!() };
        assert_eq!((i.server_id.as_str(), i.max_payload, i.headers), ("x", 5, true));

        let m = b"MSG a.b 1 5\r\nhello\r\nPING\r\n";
        for cut in 0..20 {
            assert!(op(&m[..cut]).unwrap().is_none(), "cut at {cut}");
        }
        let Some((Op::Msg(msg), used)) = op(m).unwrap() else { panic!() };
        assert_eq!((msg.subject.as_str(), msg.payload.as_slice(), msg.headers, used), ("a.b", &b"hello"[..], None, 20));
        let Some((Op::Msg(msg), _)) = op(b"MSG a 1 _INBOX.x 0\r\n\r\n").unwrap() else { panic!() };
        assert!(msg.payload.is_empty());
        assert_eq!(msg.reply.as_deref(), Some("_INBOX.x"));

        let h = b"HMSG s 2 r 12 15\r\nNATS/1.0\r\n\r\nabc\r\n";
        let Some((Op::Msg(msg), used)) = op(h).unwrap() else { panic!() };
        assert_eq!(msg.headers.as_deref(), Some(&b"NATS/1.0\r\n\r\n"[..]));
        assert_eq!((msg.payload.as_slice(), used), (&b"abc"[..], h.len()));
    }

    #[test]
    fn bad_units() {
        for junk in [
            &b"HTTP/1.1 200 OK\r\n"[..],
            b"MSG a 1\r\n",
            b"MSG a 1 x\r\n",
            b"MSG a 1 -1\r\n",
            b"MSG a 1 2 3 4\r\n",
            b"HMSG a 1 5 3\r\n",
            b"HMSG a 1 18446744073709551615 18446744073709551615\r\n",
            b"MSG a 1 101\r\n",
            b"MSG a 1 3\r\nabcXY",
            b"INFO {not json\r\n",
            b"\xff\xfe\r\n",
        ] {
            assert!(op(junk).is_err(), "{:?}", String::from_utf8_lossy(junk));
        }
        assert!(op(&[b'A'; MAX_LINE]).unwrap().is_none());
        assert!(op(&[b'A'; MAX_LINE + 3]).is_err());
    }

    #[test]
    fn connect_line_fields() {
        let info = ServerInfo { headers: true, ..Default::default() };
        let line = connect_line(&info, Some(&Auth::UserPass("u".into(), "p".into())), false, false);
        let text = std::str::from_utf8(&line).unwrap();
        let json: serde_json::Value = serde_json::from_str(text.strip_prefix("CONNECT ").unwrap().trim_end()).unwrap();
        assert!(text.ends_with("}\r\n"));
        assert_eq!((json["verbose"].as_bool(), json["pedantic"].as_bool()), (Some(false), Some(false)));
        assert_eq!(
            (json["headers"].as_bool(), json["user"].as_str(), json["pass"].as_str()),
            (Some(true), Some("u"), Some("p"))
        );
        assert_eq!(json["no_responders"].as_bool(), Some(false));
        let line = connect_line(&info, None, false, true);
        assert!(std::str::from_utf8(&line).unwrap().contains(r#""no_responders":true"#));
        let json = connect_line(&ServerInfo::default(), Some(&Auth::Token("t".into())), true, false);
        let text = std::str::from_utf8(&json).unwrap();
        assert!(text.contains(r#""auth_token":"t""#) && text.contains(r#""tls_required":true"#), "{text}");
    }

    #[test]
    fn request_units() {
        let mut out = Vec::new();
        let headers = [("request-id", "r-1"), ("x-frontend-send-ts-ns", "17")];
        encode_request(&mut out, "ns_c.generate-1f", "_INBOX.a.7", &headers, b"{}", b"xy", 1024).unwrap();
        let text = String::from_utf8_lossy(&out);
        let block = "NATS/1.0\r\nrequest-id: r-1\r\nx-frontend-send-ts-ns: 17\r\n\r\n";
        let total = block.len() + 24 + 2 + 2;
        assert!(
            text.starts_with(&format!("HPUB ns_c.generate-1f _INBOX.a.7 {} {total}\r\n{block}", block.len())),
            "{text}"
        );
        // What a server delivers to the worker parses back into the same bytes.
        let line_end = out.iter().position(|&c| c == b'\n').unwrap() + 1;
        let args = std::str::from_utf8(&out[..line_end]).unwrap().strip_prefix("HPUB ns_c.generate-1f ").unwrap();
        let delivered = [format!("HMSG ns_c.generate-1f 9 {args}").as_bytes(), &out[line_end..]].concat();
        let Some((Op::Msg(m), used)) = parse_op(&delivered, 1024).unwrap() else { panic!() };
        assert_eq!((used, m.reply.as_deref()), (delivered.len(), Some("_INBOX.a.7")));
        assert_eq!(m.headers.as_deref(), Some(block.as_bytes()));
        let two = super::super::frame::TwoPartRef::parse_exact(&m.payload, 1024).unwrap();
        assert_eq!((two.header, two.body), (&b"{}"[..], &b"xy"[..]));
        assert!(matches!(
            encode_request(&mut Vec::new(), "s", "r", &[], &[0; 10], &[], 33),
            Err(PlaneError::TooLarge { len: 34, max: 33, .. })
        ));
        assert!(encode_request(&mut Vec::new(), "s", "r", &[("a", "b\r\nc")], b"", b"", 99).is_err());
    }

    #[test]
    fn replies() {
        let msg = |headers: Option<&[u8]>, payload: &[u8]| NatsMsg {
            subject: "_INBOX.a.1".into(),
            reply: None,
            headers: headers.map(<[u8]>::to_vec),
            payload: payload.to_vec(),
        };
        assert_eq!(reply(&msg(None, b"")), Reply::Accepted);
        assert_eq!(reply(&msg(Some(b"NATS/1.0\r\n\r\n"), b"")), Reply::Accepted);
        assert_eq!(reply(&msg(None, b"Server overloaded: x")), Reply::Refused("Server overloaded: x".into()));
        assert_eq!(reply(&msg(Some(b"NATS/1.0 503\r\n\r\n"), b"")), Reply::NoResponders);
        assert_eq!(
            reply(&msg(Some(b"NATS/1.0 408 Request Timeout\r\n\r\n"), b"")),
            Reply::Status("408 Request Timeout".into())
        );
        check_publish_subject("dynamo_backend.generate-4b884ec7ef22132c").unwrap();
        for bad in ["a.*", "a.>", "a b", "", "a\r\n"] {
            assert!(check_publish_subject(bad).is_err(), "{bad:?}");
        }
    }
}
