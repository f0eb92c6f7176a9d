//! [`EtcdClient`]: the unary calls of etcd's v3 JSON gateway, and opening a [`Watch`].

use std::io;
use std::net::{TcpStream, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{json, Value};

use super::wire::{self, b64_encode, bytes_field, int64, prefix_end, Response};
use super::Watch;

/// `ETCD_ENDPOINTS` when unset (Dynamo's default).
pub const DEFAULT_ENDPOINTS: &str = "http://localhost:2379";

/// Connect timeout per address.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Read / write timeout of a unary call.
const CALL_TIMEOUT: Duration = Duration::from_secs(5);

/// One `http://host:port` of `ETCD_ENDPOINTS`.
#[derive(Clone, Debug, PartialEq, Eq)]
struct Endpoint {
    /// `host:port`, as dialed and sent in `Host`.
    authority: String,
}

/// A key-value pair as stored.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Kv {
    pub key: String,
    pub value: Vec<u8>,
    pub create_revision: i64,
    pub mod_revision: i64,
    /// The lease the key is attached to; 0 for none.
    pub lease: i64,
}

impl Kv {
    pub(crate) fn from_json(v: &Value) -> io::Result<Kv> {
        Ok(Kv {
            key: String::from_utf8_lossy(&bytes_field(v, "key")?).into_owned(),
            value: bytes_field(v, "value")?,
            create_revision: int64(v, "create_revision")?,
            mod_revision: int64(v, "mod_revision")?,
            lease: int64(v, "lease")?,
        })
    }
}

/// A blocking client of etcd's v3 JSON gateway. Cheap to clone (clones share which
/// endpoint answered last).
#[derive(Clone, Debug)]
pub struct EtcdClient {
    endpoints: Arc<Vec<Endpoint>>,
    /// Index of the endpoint that answered last; tried first.
    preferred: Arc<AtomicUsize>,
}

impl EtcdClient {
    /// Parses `ETCD_ENDPOINTS`: comma-separated `http://host:port` (a bare `host:port` is
    /// taken as http; a missing port is 2379). No connection is made yet.
    pub fn new(endpoints: &str) -> io::Result<EtcdClient> {
        let invalid = |msg: String| io::Error::new(io::ErrorKind::InvalidInput, msg);
        let mut list = Vec::new();
        for item in endpoints.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            let lower = item.to_ascii_lowercase();
            if lower.starts_with("https://") {
                return Err(invalid(format!("{item}: TLS etcd endpoints are not supported yet")));
            }
            let rest = if lower.starts_with("http://") { &item[7..] } else { item };
            if rest.contains("://") {
                return Err(invalid(format!("{item}: not an http:// etcd endpoint")));
            }
            let host_port = rest.trim_end_matches('/');
            if host_port.is_empty() || host_port.contains('/') || host_port.contains('@') {
                return Err(invalid(format!("{item}: expected http://host:port")));
            }
            let has_port = match host_port.rfind(':') {
                Some(i) => !host_port.ends_with(']') && host_port[i + 1..].parse::<u16>().is_ok(),
                None => false,
            };
            let authority = if has_port { host_port.to_string() } else { format!("{host_port}:2379") };
            list.push(Endpoint { authority });
        }
        if list.is_empty() {
            return Err(invalid(format!("no etcd endpoint in {endpoints:?}")));
        }
        Ok(EtcdClient { endpoints: Arc::new(list), preferred: Arc::new(AtomicUsize::new(0)) })
    }

    /// The endpoints as `host:port`, in configured order.
    pub fn endpoints(&self) -> Vec<String> {
        self.endpoints.iter().map(|e| e.authority.clone()).collect()
    }

    /// Connects to the endpoint that answered last, else to the others in order.
    fn connect(&self) -> io::Result<(TcpStream, &Endpoint)> {
        let n = self.endpoints.len();
        let first = self.preferred.load(Ordering::Relaxed) % n;
        let mut errors = Vec::new();
        for i in (0..n).map(|k| (first + k) % n) {
            let ep = &self.endpoints[i];
            let addrs = match ep.authority.to_socket_addrs() {
                Ok(a) => a,
                Err(e) => {
                    errors.push(format!("{}: {e}", ep.authority));
                    continue;
                }
            };
            for addr in addrs {
                match TcpStream::connect_timeout(&addr, CONNECT_TIMEOUT) {
                    Ok(s) => {
                        s.set_nodelay(true)?;
                        self.preferred.store(i, Ordering::Relaxed);
                        return Ok((s, ep));
                    }
                    Err(e) => errors.push(format!("{addr}: {e}")),
                }
            }
        }
        Err(io::Error::new(
            io::ErrorKind::ConnectionRefused,
            format!("no etcd endpoint answers ({})", errors.join("; ")),
        ))
    }

    /// Sends `body` to `path` and returns the response with its head read.
    pub(crate) fn open(&self, path: &str, body: &Value, timeout: Duration) -> io::Result<Response> {
        let (mut stream, ep) = self.connect()?;
        wire::set_timeouts(&stream, timeout)?;
        let bytes = serde_json::to_vec(body).map_err(io::Error::other)?;
        wire::write_request(&mut stream, &ep.authority, path, &bytes)?;
        Response::read_head(stream)
    }

    /// A unary call: the response JSON (for the streaming lease keep-alive, its first
    /// `result`). A non-2xx status or an `error` member is an error naming etcd's message.
    fn call(&self, path: &str, body: Value) -> io::Result<Value> {
        let (status, bytes) = self.open(path, &body, CALL_TIMEOUT)?.read_to_end()?;
        let first_line = bytes.split(|&b| b == b'\n').find(|l| !l.iter().all(u8::is_ascii_whitespace));
        let mut v: Value = serde_json::from_slice(first_line.unwrap_or(b"null"))
            .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, format!("etcd {path}: not JSON: {e}")))?;
        if let Some(err) = v.get("error").filter(|e| !e.is_null()) {
            let msg = v.get("message").or_else(|| err.get("message")).unwrap_or(err);
            let msg = msg.as_str().map_or_else(|| msg.to_string(), str::to_string);
            return Err(io::Error::other(format!("etcd {path}: {msg}")));
        }
        if !(200..300).contains(&status) {
            return Err(io::Error::other(format!("etcd {path}: HTTP {status}")));
        }
        if let Some(result) = v.get_mut("result") {
            return Ok(result.take());
        }
        Ok(v)
    }

    /// Every key starting with `prefix`, in key order, and the store revision of the read.
    pub fn range_prefix(&self, prefix: &str) -> io::Result<(Vec<Kv>, i64)> {
        let v = self.call(
            "/v3/kv/range",
            json!({"key": b64_encode(prefix.as_bytes()), "range_end": b64_encode(&prefix_end(prefix.as_bytes()))}),
        )?;
        let revision = header_revision(&v)?;
        let kvs = match v.get("kvs").and_then(Value::as_array) {
            Some(list) => list.iter().map(Kv::from_json).collect::<io::Result<_>>()?,
            None => Vec::new(),
        };
        Ok((kvs, revision))
    }

    /// Writes `key`, attached to `lease` when given; returns the new store revision.
    pub fn put(&self, key: &str, value: &[u8], lease: Option<i64>) -> io::Result<i64> {
        let mut body = json!({"key": b64_encode(key.as_bytes()), "value": b64_encode(value)});
        if let Some(id) = lease {
            body["lease"] = json!(id.to_string());
        }
        header_revision(&self.call("/v3/kv/put", body)?)
    }

    /// Deletes `key`; returns how many keys were deleted (0 or 1).
    pub fn delete(&self, key: &str) -> io::Result<i64> {
        let v = self.call("/v3/kv/deleterange", json!({"key": b64_encode(key.as_bytes())}))?;
        int64(&v, "deleted")
    }

    /// Grants a lease of `ttl` seconds; etcd picks the id.
    pub fn lease_grant(&self, ttl: i64) -> io::Result<i64> {
        self.lease_grant_id(ttl, 0)
    }

    /// Grants a lease of `ttl` seconds with the given id (0: etcd picks one). Fails if a
    /// lease of that id exists.
    pub fn lease_grant_id(&self, ttl: i64, id: i64) -> io::Result<i64> {
        let v = self.call("/v3/lease/grant", json!({"TTL": ttl.to_string(), "ID": id.to_string()}))?;
        match int64(&v, "ID")? {
            0 => Err(io::Error::other("etcd granted no lease id")),
            id => Ok(id),
        }
    }

    /// Renews lease `id`; returns its remaining TTL in seconds. A lease that no longer
    /// exists is a `NotFound` error.
    pub fn lease_keepalive(&self, id: i64) -> io::Result<i64> {
        let v = self.call("/v3/lease/keepalive", json!({"ID": id.to_string()}))?;
        match int64(&v, "TTL")? {
            ttl if ttl > 0 => Ok(ttl),
            _ => Err(io::Error::new(io::ErrorKind::NotFound, format!("etcd lease {id:x} not found"))),
        }
    }

    /// Revokes lease `id`, deleting every key attached to it.
    pub fn lease_revoke(&self, id: i64) -> io::Result<()> {
        self.call("/v3/lease/revoke", json!({"ID": id.to_string()})).map(drop)
    }

    /// Watches every key starting with `prefix` from `start_revision` (with previous values).
    /// Returns once etcd has confirmed the watch.
    pub fn watch_prefix(&self, prefix: &str, start_revision: i64) -> io::Result<Watch> {
        let body = json!({"create_request": {
            "key": b64_encode(prefix.as_bytes()),
            "range_end": b64_encode(&prefix_end(prefix.as_bytes())),
            "start_revision": start_revision.to_string(),
            "prev_kv": true,
        }});
        Watch::open(self.open("/v3/watch", &body, CALL_TIMEOUT)?, prefix, CALL_TIMEOUT)
    }
}

/// `header.revision` of a response.
fn header_revision(v: &Value) -> io::Result<i64> {
    int64(v.get("header").unwrap_or(&Value::Null), "revision")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse() {
        let c = EtcdClient::new("http://localhost:2379, http://10.0.0.2:1234/,127.0.0.1").unwrap();
        assert_eq!(c.endpoints(), ["localhost:2379", "10.0.0.2:1234", "127.0.0.1:2379"]);
        let e = EtcdClient::new("https://etcd:2379").unwrap_err();
        assert!(e.to_string().contains("TLS etcd endpoints are not supported yet"), "{e}");
        assert!(EtcdClient::new(" , ").is_err());
        assert!(EtcdClient::new("unix:///x").is_err());
        assert!(EtcdClient::new("http://u@h:1").is_err());
    }
}
