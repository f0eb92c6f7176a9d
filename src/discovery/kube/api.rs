//! The Kubernetes API as discovery uses it: blocking HTTP/1.1 requests (plain or TLS, a bearer
//! token) and one list-then-watch thread per followed kind, as Dynamo 1.6.1's reflectors do
//! it — a paginated list (`limit=500`, `continue`), then a watch from the list's
//! `resourceVersion` (`watch=true&timeoutSeconds=290&allowWatchBookmarks=true`) whose
//! newline-delimited events become [`Change`]s; a watch that ends is resumed from the last
//! version seen, a `410 Gone` (or any failure) lists again, failures back off (0.5 s doubling
//! to 30 s). The threads are the discovery backend's own; the control thread reads their
//! changes from a channel.

use std::io::{self, Write};
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::Value;

use super::config::Cluster;
use super::state::{Change, Kind};
use crate::discovery::etcd::wire::{set_timeouts, Conn, Response};

/// Per read while waiting on a watch: how soon a stop is noticed.
const POLL: Duration = Duration::from_millis(500);
/// Connect and unary request timeout.
const TIMEOUT: Duration = Duration::from_secs(10);
/// A watch's server-side length (1.6.1's), and how long it may stay silent before it is
/// taken as lost (bookmarks arrive well within it).
const WATCH_SECS: u64 = 290;
const FIRST_BACKOFF: Duration = Duration::from_millis(500);
const MAX_BACKOFF: Duration = Duration::from_secs(30);

/// The label readiness objects must carry (1.6.1's effective selector).
pub const DISCOVERY_LABEL: &str = "nvidia.com/dynamo-discovery-enabled=true";

/// A followed collection: its kind and the path of its namespaced list.
#[derive(Clone, Debug)]
pub struct Collection {
    pub kind: Kind,
    pub path: String,
    pub selector: Option<&'static str>,
}

impl Collection {
    pub fn of(kind: Kind, namespace: &str) -> Collection {
        let (path, selector) = match kind {
            Kind::Slices => {
                (format!("/apis/discovery.k8s.io/v1/namespaces/{namespace}/endpointslices"), Some(DISCOVERY_LABEL))
            }
            Kind::Pods => (format!("/api/v1/namespaces/{namespace}/pods"), Some(DISCOVERY_LABEL)),
            Kind::Metadata => (format!("/apis/nvidia.com/v1alpha1/namespaces/{namespace}/dynamoworkermetadatas"), None),
        };
        Collection { kind, path, selector }
    }

    /// The collection's path with `before`, the label selector, then `after` as its query
    /// (1.6.1's parameter order: `?&labelSelector=…&limit=500`,
    /// `?&watch=true&timeoutSeconds=290&labelSelector=…&allowWatchBookmarks=true&resourceVersion=…`).
    fn query(&self, before: &str, after: &str) -> String {
        let mut q = format!("{}?{before}", self.path);
        if let Some(s) = self.selector {
            q.push_str("&labelSelector=");
            q.push_str(&percent(s));
        }
        q.push_str(after);
        q
    }
}

/// Sends one request on a connection of its own and reads the response head.
pub(crate) fn request(
    cluster: &Cluster,
    method: &str,
    path: &str,
    body: Option<(&str, &[u8])>,
) -> io::Result<Response> {
    let addr = cluster
        .authority
        .to_socket_addrs()?
        .next()
        .ok_or_else(|| io::Error::new(io::ErrorKind::NotFound, format!("{}: no address", cluster.authority)))?;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT)?;
    set_timeouts(&tcp, TIMEOUT)?;
    let _ = tcp.set_nodelay(true);
    let mut conn = match &cluster.tls {
        None => Conn::Plain(tcp),
        Some((config, name)) => {
            let session = rustls::ClientConnection::new(config.clone(), name.clone()).map_err(io::Error::other)?;
            Conn::Tls(Box::new(rustls::StreamOwned::new(session, tcp)))
        }
    };
    let mut head = format!(
        "{method} {path} HTTP/1.1\r\nHost: {}\r\nAccept: application/json\r\nUser-Agent: switchyard\r\nConnection: close\r\n",
        cluster.authority
    );
    if let Some(auth) = cluster.token.bearer() {
        head.push_str("Authorization: ");
        head.push_str(&auth);
        head.push_str("\r\n");
    }
    if let Some((content_type, bytes)) = body {
        head.push_str(&format!("Content-Type: {content_type}\r\nContent-Length: {}\r\n", bytes.len()));
    }
    head.push_str("\r\n");
    let mut out = head.into_bytes();
    if let Some((_, bytes)) = body {
        out.extend_from_slice(bytes);
    }
    conn.write_all(&out)?;
    conn.flush()?;
    Response::read_head(conn)
}

/// A whole JSON response of a unary request; a status other than 2xx is an error naming it
/// and the server's message.
pub fn call(cluster: &Cluster, method: &str, path: &str, body: Option<(&str, &[u8])>) -> io::Result<Value> {
    let (status, bytes) = request(cluster, method, path, body)?.read_to_end()?;
    let v: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    if !(200..300).contains(&status) {
        let msg = v["message"].as_str().unwrap_or("");
        return Err(io::Error::other(format!("{method} {path}: HTTP {status} {msg}")));
    }
    Ok(v)
}

/// Every object of `c`, and the list's resource version.
pub fn list(cluster: &Cluster, c: &Collection) -> io::Result<(Vec<Value>, String)> {
    let mut items = Vec::new();
    let mut next: Option<String> = None;
    loop {
        let extra = match &next {
            None => "&limit=500".to_string(),
            Some(token) => format!("&limit=500&continue={}", percent(token)),
        };
        let mut v = call(cluster, "GET", &c.query("", &extra), None)?;
        if let Some(Value::Array(page)) = v.get_mut("items").map(Value::take) {
            items.extend(page);
        }
        let meta = &v["metadata"];
        match meta["continue"].as_str().filter(|s| !s.is_empty()) {
            Some(token) => next = Some(token.to_string()),
            None => return Ok((items, meta["resourceVersion"].as_str().unwrap_or("").to_string())),
        }
    }
}

fn percent(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || b"-_.~".contains(&b) {
            out.push(b as char);
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

/// How a watch ended.
#[derive(Debug, PartialEq, Eq)]
enum Ended {
    /// The server closed it (its timeout): watch again from `String`.
    Closed(String),
    /// The version is too old (`410`): list again.
    Gone,
    Stopped,
}

/// Watches `c` from `version`, sending each change; returns how it ended.
fn watch(
    cluster: &Cluster,
    c: &Collection,
    version: &str,
    tx: &flume::Sender<Change>,
    stop: &AtomicBool,
) -> io::Result<Ended> {
    let before = format!("&watch=true&timeoutSeconds={WATCH_SECS}");
    let after = format!("&allowWatchBookmarks=true&resourceVersion={}", percent(version));
    let mut resp = request(cluster, "GET", &c.query(&before, &after), None)?;
    if resp.status == 410 {
        return Ok(Ended::Gone);
    }
    if !(200..300).contains(&resp.status) {
        return Err(io::Error::other(format!("watch {}: HTTP {}", c.path, resp.status)));
    }
    set_timeouts(resp.stream(), POLL)?;
    let mut version = version.to_string();
    let mut line = Vec::new();
    let mut heard = Instant::now();
    loop {
        while let Some(at) = resp.body.iter().position(|&b| b == b'\n') {
            line.extend(resp.body.drain(..=at));
            let event: Value = serde_json::from_slice(&line)
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("watch {}: {e}", c.path)))?;
            line.clear();
            heard = Instant::now();
            let object = event["object"].clone();
            if let Some(v) = object["metadata"]["resourceVersion"].as_str() {
                version = v.to_string();
            }
            let change = match event["type"].as_str() {
                Some("ADDED" | "MODIFIED") => Change::Upsert(c.kind, object),
                Some("DELETED") => Change::Deleted(c.kind, object),
                Some("BOOKMARK") => continue,
                Some("ERROR") if object["code"].as_u64() == Some(410) => return Ok(Ended::Gone),
                _ => return Err(io::Error::other(format!("watch {}: {}", c.path, event))),
            };
            if tx.send(change).is_err() {
                return Ok(Ended::Stopped);
            }
        }
        if stop.load(Ordering::Acquire) {
            return Ok(Ended::Stopped);
        }
        if resp.done {
            return Ok(Ended::Closed(version));
        }
        match resp.read_more() {
            Ok(true) => {}
            Ok(false) => return Ok(Ended::Closed(version)),
            Err(e) if matches!(e.kind(), io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut) => {
                if heard.elapsed() > Duration::from_secs(WATCH_SECS + 30) {
                    return Err(io::Error::other(format!("watch {}: silent for {WATCH_SECS} s", c.path)));
                }
            }
            Err(e) => return Err(e),
        }
        if !resp.body.contains(&b'\n') {
            line.append(&mut resp.body);
        }
    }
}

/// Lists and watches `c` until `stop` is set (see the module doc), on the calling thread.
pub fn follow(cluster: &Cluster, c: &Collection, tx: &flume::Sender<Change>, stop: &AtomicBool) {
    let mut backoff = FIRST_BACKOFF;
    let mut failing = false;
    'list: while !stop.load(Ordering::Acquire) {
        let (items, mut version) = match list(cluster, c) {
            Ok(x) => x,
            Err(e) => {
                if !failing {
                    crate::log::warn(&format!("kubernetes discovery: listing {} failed: {e}; retrying", c.path));
                    failing = true;
                }
                pause(backoff, stop);
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        if failing {
            crate::log::info(&format!("kubernetes discovery: {} listed again", c.path));
            failing = false;
        }
        backoff = FIRST_BACKOFF;
        if tx.send(Change::Listed(c.kind, items)).is_err() {
            return;
        }
        loop {
            match watch(cluster, c, &version, tx, stop) {
                Ok(Ended::Closed(v)) => version = v,
                Ok(Ended::Gone) => continue 'list,
                Ok(Ended::Stopped) => return,
                Err(e) => {
                    crate::log::warn(&format!("kubernetes discovery: {e}; listing again"));
                    pause(backoff, stop);
                    continue 'list;
                }
            }
        }
    }
}

fn pause(d: Duration, stop: &AtomicBool) {
    let until = Instant::now() + d;
    while Instant::now() < until && !stop.load(Ordering::Acquire) {
        std::thread::sleep(POLL.min(until.saturating_duration_since(Instant::now())));
    }
}

/// Starts one [`follow`] thread per collection.
pub fn start(
    cluster: Cluster,
    collections: Vec<Collection>,
    tx: flume::Sender<Change>,
    stop: Arc<AtomicBool>,
) -> io::Result<Vec<std::thread::JoinHandle<()>>> {
    let cluster = Arc::new(cluster);
    collections
        .into_iter()
        .map(|c| {
            let (cluster, tx, stop) = (cluster.clone(), tx.clone(), stop.clone());
            let name = match c.kind {
                Kind::Slices => "kube-slices",
                Kind::Pods => "kube-pods",
                Kind::Metadata => "kube-metadata",
            };
            std::thread::Builder::new().name(name.into()).spawn(move || follow(&cluster, &c, &tx, &stop))
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn requests_are_those_of_1_6_1() {
        // As tests/data/kube/exchanges-1.6.1.jsonl records a 1.6.1 frontend's.
        let slices = Collection::of(Kind::Slices, "dynamo");
        assert_eq!(
            slices.query("", "&limit=500"),
            "/apis/discovery.k8s.io/v1/namespaces/dynamo/endpointslices?&labelSelector=nvidia.com%2Fdynamo-discovery-enabled%3Dtrue&limit=500"
        );
        assert_eq!(
            slices.query("&watch=true&timeoutSeconds=290", "&allowWatchBookmarks=true&resourceVersion=7"),
            "/apis/discovery.k8s.io/v1/namespaces/dynamo/endpointslices?&watch=true&timeoutSeconds=290&labelSelector=nvidia.com%2Fdynamo-discovery-enabled%3Dtrue&allowWatchBookmarks=true&resourceVersion=7"
        );
        let dwm = Collection::of(Kind::Metadata, "ns");
        assert_eq!(
            dwm.query("", "&limit=500"),
            "/apis/nvidia.com/v1alpha1/namespaces/ns/dynamoworkermetadatas?&limit=500"
        );
        assert_eq!(percent("a b/c"), "a%20b%2Fc");
    }
}
