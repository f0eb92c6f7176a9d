//! HTTP/1.1 framing with scripted bytes: every request split at every byte boundary parses the
//! same as in one piece; smuggling shapes get 400; limits get their statuses; pipelined
//! requests come out in order.

use bytes::BytesMut;
use switchyard::http1::parse::Limits;
use switchyard::http1::request::{Assembler, Request, Step};

/// What a request means, independent of how its bytes arrived.
#[derive(Debug, PartialEq, Eq)]
struct Seen {
    method: String,
    path: String,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    keep_alive: bool,
}

fn seen(r: &Request) -> Seen {
    let b = &r.head_bytes;
    Seen {
        method: r.head.method.as_str().to_string(),
        path: String::from_utf8_lossy(r.path()).into_owned(),
        headers: r
            .head
            .headers
            .iter()
            .map(|(n, v)| {
                (String::from_utf8_lossy(n.get(b)).into_owned(), String::from_utf8_lossy(v.get(b)).into_owned())
            })
            .collect(),
        body: r.body.to_vec(),
        keep_alive: r.head.keep_alive,
    }
}

fn limits() -> Limits {
    Limits { max_headers: 32, max_head_bytes: 4096, max_body_bytes: 1 << 20 }
}

/// Feed `chunks` one after another; collect requests or the first error status.
fn feed(chunks: &[&[u8]], limits: Limits) -> Result<Vec<Seen>, u16> {
    let mut asm = Assembler::new(limits);
    let mut buf = BytesMut::new();
    let mut out = Vec::new();
    for c in chunks {
        buf.extend_from_slice(c);
        loop {
            match asm.next(&mut buf) {
                Ok(Step::Ready(r)) => out.push(seen(&r)),
                Ok(Step::NeedMore { .. }) => break,
                Err(e) => return Err(e.status()),
            }
        }
    }
    Ok(out)
}

const CHAT: &[u8] = b"POST /v1/chat/completions HTTP/1.1\r\nHost: localhost:8000\r\nContent-Type: application/json\r\nContent-Length: 57\r\nX-Request-Id: abc\r\n\r\n{\"model\":\"m\",\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}]}";
const CHUNKED: &[u8] = b"POST /v1/completions?x=1 HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\nContent-Type: application/json\r\n\r\n5;ext=1\r\n{\"a\":\r\nA\r\n\"bcdefghi\"\r\n1\r\n}\r\n0\r\nX-Trailer: t\r\n\r\n";
const GET_CLOSE: &[u8] = b"GET /live HTTP/1.1\r\nConnection: close\r\n\r\n";
const HTTP10: &[u8] = b"GET /health HTTP/1.0\r\n\r\n";
const HTTP10_KA: &[u8] = b"GET /health HTTP/1.0\r\nConnection: keep-alive\r\n\r\n";

#[test]
fn every_split_parses_the_same() {
    for req in [CHAT, CHUNKED, GET_CLOSE, HTTP10, HTTP10_KA] {
        let whole = feed(&[req], limits()).expect("whole request parses");
        assert_eq!(whole.len(), 1);
        for i in 0..=req.len() {
            let split = feed(&[&req[..i], &req[i..]], limits()).unwrap_or_else(|s| panic!("split at {i}: status {s}"));
            assert_eq!(split, whole, "split at {i} of {:?}", String::from_utf8_lossy(req));
        }
        // Byte by byte too.
        let bytes: Vec<&[u8]> = req.chunks(1).collect();
        assert_eq!(feed(&bytes, limits()).unwrap(), whole);
    }
}

#[test]
fn meaning_of_the_samples() {
    let chat = &feed(&[CHAT], limits()).unwrap()[0];
    assert_eq!((chat.method.as_str(), chat.path.as_str()), ("POST", "/v1/chat/completions"));
    assert_eq!(chat.body.len(), 57);
    assert!(chat.keep_alive);
    let chunked = &feed(&[CHUNKED], limits()).unwrap()[0];
    assert_eq!(chunked.path, "/v1/completions");
    assert_eq!(chunked.body, b"{\"a\":\"bcdefghi\"}");
    assert!(!feed(&[GET_CLOSE], limits()).unwrap()[0].keep_alive);
    assert!(!feed(&[HTTP10], limits()).unwrap()[0].keep_alive);
    assert!(feed(&[HTTP10_KA], limits()).unwrap()[0].keep_alive);
}

#[test]
fn pipelined_requests_come_out_in_order() {
    let mut all = Vec::new();
    for r in [CHAT, CHUNKED, HTTP10_KA, CHAT, GET_CLOSE] {
        all.extend_from_slice(r);
    }
    let got = feed(&[&all], limits()).unwrap();
    let paths: Vec<&str> = got.iter().map(|s| s.path.as_str()).collect();
    assert_eq!(paths, ["/v1/chat/completions", "/v1/completions", "/health", "/v1/chat/completions", "/live"]);
    // And split anywhere, the order and content hold.
    for i in (0..all.len()).step_by(7) {
        assert_eq!(feed(&[&all[..i], &all[i..]], limits()).unwrap(), got, "split at {i}");
    }
}

fn status_of(req: &[u8]) -> u16 {
    match feed(&[req], limits()) {
        Err(s) => s,
        Ok(v) => panic!("expected an error for {:?}, parsed {v:?}", String::from_utf8_lossy(req)),
    }
}

#[test]
fn smuggling_shapes_are_rejected_with_400() {
    let cases: &[&[u8]] = &[
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nContent-Length: 5\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nContent-Length: 5, 6\r\n\r\nhello!",
        b"POST / HTTP/1.1\r\nContent-Length: +5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nContent-Length: 0x5\r\n\r\nhello",
        b"POST / HTTP/1.1\r\nContent-Length: \r\n\r\n",
        b"POST / HTTP/1.1\r\nContent-Length: 99999999999999999999\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked, identity\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: identity\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.0\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n-1\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n11111111111111111\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\nhello\r\n0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello0\r\n\r\n",
        b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost : x\r\n\r\n",
        b"GET / HTTP/1.1\r\nHost: x\r\n folded\r\n\r\n",
        b"GET  / HTTP/1.1\r\n\r\n",
        b"GET / HTTP/1.x\r\n\r\n",
        b"\x00\x01garbage\r\n\r\n",
    ];
    for c in cases {
        assert_eq!(status_of(c), 400, "{:?}", String::from_utf8_lossy(c));
    }
}

#[test]
fn limits_and_other_statuses() {
    // Too many header fields.
    let mut many = b"GET / HTTP/1.1\r\n".to_vec();
    for i in 0..40 {
        many.extend_from_slice(format!("X-H{i}: v\r\n").as_bytes());
    }
    many.extend_from_slice(b"\r\n");
    assert_eq!(status_of(&many), 431);
    // Too many header bytes, complete or still arriving.
    let big = format!("GET / HTTP/1.1\r\nX-Big: {}\r\n\r\n", "a".repeat(5000));
    assert_eq!(status_of(big.as_bytes()), 431);
    assert_eq!(status_of(&big.as_bytes()[..4500]), 431);
    // Body over the limit, announced or chunked.
    assert_eq!(status_of(b"POST / HTTP/1.1\r\nContent-Length: 1048577\r\n\r\n"), 413);
    let mut chunked = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n".to_vec();
    chunked.extend_from_slice(b"100001\r\n");
    assert_eq!(status_of(&chunked), 413);
    // Unsupported coding before chunked, unknown expectation, HTTP/2 on the HTTP/1 listener.
    assert_eq!(status_of(b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip, chunked\r\n\r\n"), 501);
    assert_eq!(status_of(b"POST / HTTP/1.1\r\nExpect: 200-ok\r\nContent-Length: 1\r\n\r\nx"), 417);
    assert_eq!(status_of(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"), 505);
    // Trailers are bounded like headers.
    let mut trailers = b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n".to_vec();
    trailers.extend_from_slice(format!("X-T: {}\r\n\r\n", "t".repeat(5000)).as_bytes());
    assert_eq!(status_of(&trailers), 431);
}

#[test]
fn expect_continue_is_asked_once_before_the_body() {
    let mut asm = Assembler::new(limits());
    let mut buf = BytesMut::from(&b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\n"[..]);
    match asm.next(&mut buf).unwrap() {
        Step::NeedMore { send_continue, .. } => assert!(send_continue),
        s => panic!("{s:?}"),
    }
    match asm.next(&mut buf).unwrap() {
        Step::NeedMore { send_continue, .. } => assert!(!send_continue, "only once"),
        s => panic!("{s:?}"),
    }
    buf.extend_from_slice(b"abc");
    assert!(matches!(asm.next(&mut buf).unwrap(), Step::Ready(_)));
    // A body already on its way needs no 100.
    let mut asm = Assembler::new(limits());
    let mut buf = BytesMut::from(&b"POST / HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 3\r\n\r\na"[..]);
    match asm.next(&mut buf).unwrap() {
        Step::NeedMore { send_continue, .. } => assert!(!send_continue),
        s => panic!("{s:?}"),
    }
}

#[test]
fn identical_duplicate_content_length_is_accepted() {
    let got = feed(&[b"POST / HTTP/1.1\r\nContent-Length: 2\r\nContent-Length: 2\r\n\r\nok"], limits()).unwrap();
    assert_eq!(got[0].body, b"ok");
}
