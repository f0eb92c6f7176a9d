//! Streamed (chunked) responses through the real connection loop: chunks reach the client as
//! they are produced, the body ends cleanly, keep-alive continues after it, and a client that
//! goes away mid-stream is noticed by the producer (its sends start failing).

use std::cell::Cell;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpStream;
use std::rc::Rc;
use std::sync::mpsc;
use std::time::Duration;

use bytes::Bytes;
use switchyard::http1::conn::{serve, ConnConfig, Service};
use switchyard::http1::{Request, Response};
use switchyard::shard::gate::Gate;
use switchyard::shard::local;
use switchyard::util::date::DateCache;

/// Streams `n` SSE events 5 ms apart; records whether a send failed (client gone).
struct Streamer {
    n: usize,
    send_failed: Rc<Cell<bool>>,
}

impl Service for Streamer {
    async fn call(&self, _req: Request) -> Response {
        let (tx, rx) = local::channel::<Bytes>();
        let (n, failed) = (self.n, self.send_failed.clone());
        monoio::spawn(async move {
            for i in 0..n {
                if tx.send(Bytes::from(format!("data: {i}\n\n"))).is_err() {
                    failed.set(true);
                    return;
                }
                monoio::time::sleep(Duration::from_millis(5)).await;
            }
        });
        Response::stream(200, "text/event-stream", rx).with_header("cache-control", "no-cache")
    }
}

/// Run a one-connection-at-a-time server on a monoio thread; report each connection's
/// `send_failed` flag when it ends.
fn server(n: usize, conns: usize) -> (std::net::SocketAddr, mpsc::Receiver<bool>) {
    let (addr_tx, addr_rx) = mpsc::channel();
    let (done_tx, done_rx) = mpsc::channel();
    std::thread::spawn(move || {
        let mut rt = monoio::RuntimeBuilder::<monoio::LegacyDriver>::new().enable_timer().build().unwrap();
        rt.block_on(async move {
            let listener = monoio::net::TcpListener::bind("127.0.0.1:0").unwrap();
            addr_tx.send(listener.local_addr().unwrap()).unwrap();
            let (gate, date, cfg) = (Gate::new(), DateCache::default(), ConnConfig::default());
            let metrics = switchyard::metrics::ShardMetrics::default();
            for _ in 0..conns {
                let (stream, _) = listener.accept().await.unwrap();
                let failed = Rc::new(Cell::new(false));
                let svc = Streamer { n, send_failed: failed.clone() };
                serve(stream, bytes::BytesMut::new(), &svc, &cfg, &gate, &date, &metrics).await;
                // Let the producer run into the closed channel if it has not yet.
                monoio::time::sleep(Duration::from_millis(50)).await;
                done_tx.send(failed.get()).unwrap();
            }
        });
    });
    (addr_rx.recv().unwrap(), done_rx)
}

fn read_chunked(r: &mut BufReader<TcpStream>) -> Vec<String> {
    let mut events = Vec::new();
    loop {
        let mut size = String::new();
        r.read_line(&mut size).unwrap();
        let n = usize::from_str_radix(size.trim(), 16).unwrap();
        let mut data = vec![0u8; n + 2];
        r.read_exact(&mut data).unwrap();
        if n == 0 {
            return events;
        }
        events.push(String::from_utf8(data[..n].to_vec()).unwrap());
    }
}

fn read_head(r: &mut BufReader<TcpStream>) -> Vec<String> {
    let mut lines = Vec::new();
    loop {
        let mut l = String::new();
        r.read_line(&mut l).unwrap();
        if l == "\r\n" {
            return lines;
        }
        lines.push(l.trim_end().to_string());
    }
}

#[test]
fn chunks_arrive_in_order_and_keep_alive_continues() {
    let (addr, done) = server(20, 1);
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    for _ in 0..2 {
        w.write_all(b"GET /stream HTTP/1.1\r\n\r\n").unwrap();
        let head = read_head(&mut r);
        assert_eq!(head[0], "HTTP/1.1 200 OK");
        assert!(head.contains(&"transfer-encoding: chunked".to_string()), "{head:?}");
        assert!(head.contains(&"content-type: text/event-stream".to_string()));
        let all: String = read_chunked(&mut r).concat();
        let want: String = (0..20).map(|i| format!("data: {i}\n\n")).collect();
        assert_eq!(all, want);
    }
    drop(w);
    drop(r);
    assert!(!done.recv().unwrap(), "no send failed while the client read everything");
}

#[test]
fn a_client_that_leaves_mid_stream_stops_the_producer() {
    let (addr, done) = server(400, 1);
    let s = TcpStream::connect(addr).unwrap();
    s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
    let mut w = s.try_clone().unwrap();
    let mut r = BufReader::new(s);
    w.write_all(b"GET /stream HTTP/1.1\r\n\r\n").unwrap();
    read_head(&mut r);
    let mut size = String::new();
    r.read_line(&mut size).unwrap();
    drop(w);
    drop(r);
    // 400 events would take 2 s; the producer must notice the departure and stop early.
    assert!(done.recv_timeout(Duration::from_secs(10)).unwrap(), "the producer saw the client leave");
}
