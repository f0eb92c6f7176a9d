//! What the frontend itself registers in discovery:
//! * under `--router-replica-sync`, one `active_sequences_events` event channel per served
//!   endpoint, pointing at the ZMQ publisher of this process's bookings
//!   (docs/dynamo/kv-routing.md §2.1, §7.8). The record is the one a 1.6.1 `dynamo.frontend
//!   --router-replica-sync` writes: endpoint scope of the workers' endpoint, `instance_id` =
//!   the publisher id, key
//!   `namespace/<ns>/component/<c>/endpoint/<e>/topic/active_sequences_events/<publisher hex>`;
//! * under `--serve-indexer`, one `kv_indexer_query` endpoint instance per served component,
//!   pointing at this process's request-plane listener (docs/dynamo/remote-indexer.md): the
//!   record a worker's endpoint has, key `<ns>/<c>/kv_indexer_query/<instance hex>` in
//!   `v1/instances`.
//!
//! A thread of its own ([`Announcer`]) does the blocking writes: the control thread sends it
//! the set of served endpoints on each discovery change; it writes the records of new ones,
//! deletes those of endpoints no longer served, keeps file records alive (their mtime is
//! their liveness, touched every [`TOUCH_EVERY`]) and deletes every record when stopped.
//! etcd records are attached to the frontend's lease, so a killed frontend's records go
//! with it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::time::Duration;

use serde_json::json;

use super::etcd::EtcdClient;
use super::records::{encode_key, instance_hex, BUCKET_EVENT_CHANNELS, BUCKET_INSTANCES};

/// How often file records are touched (a third of the 10 s TTL, as workers do).
pub const TOUCH_EVERY: Duration = Duration::from_millis(3300);

/// A served endpoint: (namespace, component, endpoint).
pub type Scope = (String, String, String);

/// Where the records go.
pub enum Store {
    File(PathBuf),
    /// The client and the lease the records are attached to.
    Etcd(EtcdClient, i64),
}

/// The channel being announced.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Channel {
    pub topic: &'static str,
    pub publisher_id: u64,
    /// `tcp://<ip>:<port>`.
    pub endpoint: String,
}

impl Channel {
    /// The record key (without the bucket) under `scope`.
    pub fn key(&self, (ns, component, endpoint): &Scope) -> String {
        format!(
            "namespace/{ns}/component/{component}/endpoint/{endpoint}/topic/{}/{}",
            self.topic,
            instance_hex(self.publisher_id)
        )
    }

    /// The record's JSON under `scope`.
    pub fn record(&self, (ns, component, endpoint): &Scope) -> Vec<u8> {
        let v = json!({
            "type": "EventChannel",
            "scope": {"kind": "endpoint", "endpoint": {"namespace": ns, "component": component, "name": endpoint}},
            "topic": self.topic,
            "instance_id": self.publisher_id,
            "transport": {"kind": "Zmq", "config": {"endpoint": self.endpoint}},
        });
        serde_json::to_vec(&v).expect("JSON values serialize")
    }
}

/// An endpoint instance of this process on the TCP request plane, registered under each served
/// endpoint's namespace and component (the served indexer's `kv_indexer_query`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ServedEndpoint {
    pub endpoint: &'static str,
    pub instance_id: u64,
    /// `host:port` of the listener.
    pub address: String,
}

impl ServedEndpoint {
    /// The record key (without the bucket) under the namespace and component of `scope`.
    pub fn key(&self, (ns, component, _): &Scope) -> String {
        format!("{ns}/{component}/{}/{}", self.endpoint, instance_hex(self.instance_id))
    }

    /// The record's JSON, as 1.6.1 writes a served indexer's (a worker endpoint's shape).
    pub fn record(&self, (ns, component, _): &Scope) -> Vec<u8> {
        let path = format!("{}/{}/{ns}/{component}/{}", self.address, instance_hex(self.instance_id), self.endpoint);
        let v = json!({
            "type": "Endpoint",
            "component": component,
            "endpoint": self.endpoint,
            "namespace": ns,
            "instance_id": self.instance_id,
            "transport": {"tcp": path},
            "device_type": "cuda",
            "request_plane_codec": "msgpack",
        });
        serde_json::to_vec(&v).expect("JSON values serialize")
    }
}

/// One kind of record the announcer keeps per served endpoint.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Announce {
    Channel(Channel),
    Endpoint(ServedEndpoint),
}

impl Announce {
    /// Bucket, key and JSON of the record under `scope`.
    fn record(&self, scope: &Scope) -> (&'static str, String, Vec<u8>) {
        match self {
            Announce::Channel(c) => (BUCKET_EVENT_CHANNELS, c.key(scope), c.record(scope)),
            Announce::Endpoint(e) => (BUCKET_INSTANCES, e.key(scope), e.record(scope)),
        }
    }
}

/// Handle to the announcing thread; dropping it deletes the records and waits.
pub struct Announcer {
    tx: Option<flume::Sender<BTreeSet<Scope>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Announcer {
    pub fn start(store: Store, records: Vec<Announce>) -> std::io::Result<Announcer> {
        let (tx, rx) = flume::unbounded::<BTreeSet<Scope>>();
        let thread = std::thread::Builder::new().name("announce".into()).spawn(move || run(store, records, rx))?;
        Ok(Announcer { tx: Some(tx), thread: Some(thread) })
    }

    /// A sender of the served endpoints, for the control thread.
    pub fn sender(&self) -> flume::Sender<BTreeSet<Scope>> {
        self.tx.clone().expect("held until drop")
    }
}

impl Drop for Announcer {
    fn drop(&mut self) {
        self.tx.take();
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

/// What is written: (bucket, key) → file (file store) or nothing (etcd).
type Written = BTreeMap<(&'static str, String), Option<PathBuf>>;

fn run(store: Store, records: Vec<Announce>, rx: flume::Receiver<BTreeSet<Scope>>) {
    let mut written: Written = BTreeMap::new();
    let mut wanted: BTreeSet<Scope> = BTreeSet::new();
    loop {
        match rx.recv_timeout(TOUCH_EVERY) {
            Ok(scopes) => wanted = scopes,
            Err(flume::RecvTimeoutError::Timeout) => {}
            Err(flume::RecvTimeoutError::Disconnected) => break,
        }
        // Several endpoints of one component share its endpoint records: the first wins.
        let mut keys: BTreeMap<(&'static str, String), Vec<u8>> = BTreeMap::new();
        for scope in &wanted {
            for r in &records {
                let (bucket, key, bytes) = r.record(scope);
                keys.entry((bucket, key)).or_insert(bytes);
            }
        }
        written.retain(|key, file| {
            if keys.contains_key(key) {
                return true;
            }
            remove(&store, key, file.as_ref());
            false
        });
        for (key, bytes) in &keys {
            match written.get(key) {
                Some(Some(file)) => {
                    if super::filewrite::touch(file).is_err() {
                        // Deleted by someone (an expiry sweep): write it again.
                        written.remove(key);
                    }
                }
                Some(None) => {}
                None => match write(&store, key, bytes) {
                    Ok(file) => {
                        crate::log::info(&format!("discovery: registered {}/{}", key.0, key.1));
                        written.insert(key.clone(), file);
                    }
                    Err(e) => crate::log::warn(&format!("discovery: cannot register {}/{}: {e}", key.0, key.1)),
                },
            }
        }
    }
    for (key, file) in &written {
        remove(&store, key, file.as_ref());
    }
}

fn write(store: &Store, (bucket, key): &(&'static str, String), bytes: &[u8]) -> std::io::Result<Option<PathBuf>> {
    match store {
        Store::File(root) => super::filewrite::publish(&root.join(bucket), &encode_key(key), bytes).map(Some),
        Store::Etcd(client, lease) => {
            client.put(&format!("{bucket}/{key}"), bytes, Some(*lease))?;
            Ok(None)
        }
    }
}

fn remove(store: &Store, (bucket, key): &(&'static str, String), file: Option<&PathBuf>) {
    let r = match (store, file) {
        (Store::File(_), Some(f)) => std::fs::remove_file(f),
        (Store::Etcd(client, _), _) => client.delete(&format!("{bucket}/{key}")).map(|_| ()),
        _ => Ok(()),
    };
    if let Err(e) = r {
        crate::log::warn(&format!("discovery: cannot remove {bucket}/{key}: {e}"));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_record_has_the_shape_a_1_6_1_frontend_writes() {
        let c = Channel {
            topic: "active_sequences_events",
            publisher_id: 3631537584937614,
            endpoint: "tcp://127.0.0.1:45251".into(),
        };
        let scope = ("dynamo".to_string(), "backend".to_string(), "generate".to_string());
        assert_eq!(
            c.key(&scope),
            "namespace/dynamo/component/backend/endpoint/generate/topic/active_sequences_events/ce6dd3bbd1a8e"
        );
        // Observed from `python -m dynamo.frontend --router-mode kv --router-replica-sync`.
        let observed = r#"{"type":"EventChannel","scope":{"kind":"endpoint","endpoint":{"namespace":"dynamo","component":"backend","name":"generate"}},"topic":"active_sequences_events","instance_id":3631537584937614,"transport":{"kind":"Zmq","config":{"endpoint":"tcp://127.0.0.1:45251"}}}"#;
        assert_eq!(String::from_utf8(c.record(&scope)).unwrap(), observed);
        // Observed from `python -m dynamo.frontend --router-mode kv --serve-indexer`.
        let e = ServedEndpoint {
            endpoint: "kv_indexer_query",
            instance_id: 1509823247424868373,
            address: "127.0.0.1:39431".into(),
        };
        assert_eq!(e.key(&scope), "dynamo/backend/kv_indexer_query/14f3f83e8062d015");
        let observed = r#"{"type":"Endpoint","component":"backend","endpoint":"kv_indexer_query","namespace":"dynamo","instance_id":1509823247424868373,"transport":{"tcp":"127.0.0.1:39431/14f3f83e8062d015/dynamo/backend/kv_indexer_query"},"device_type":"cuda","request_plane_codec":"msgpack"}"#;
        assert_eq!(String::from_utf8(e.record(&scope)).unwrap(), observed);
    }

    #[test]
    fn file_records_come_and_go_with_the_served_endpoints() {
        let root = std::env::temp_dir().join(format!("switchyard-announce-{}", std::process::id()));
        let c = Channel { topic: "active_sequences_events", publisher_id: 0xabc, endpoint: "tcp://127.0.0.1:1".into() };
        let e = ServedEndpoint { endpoint: "kv_indexer_query", instance_id: 0xdef, address: "127.0.0.1:2".into() };
        let a = Announcer::start(Store::File(root.clone()), vec![Announce::Channel(c), Announce::Endpoint(e)]).unwrap();
        let instances = root.join(BUCKET_INSTANCES);
        let endpoints = || std::fs::read_dir(&instances).map_or(0, |d| d.count());
        let dir = root.join(BUCKET_EVENT_CHANNELS);
        let count = || std::fs::read_dir(&dir).map_or(0, |d| d.count());
        // The channel and the endpoint records are written one after the other: wait for both.
        let wait_for = |n: usize, m: usize| {
            let until = std::time::Instant::now() + Duration::from_secs(5);
            while count() != n || endpoints() != m {
                assert!(
                    std::time::Instant::now() < until,
                    "expected {n} channel and {m} endpoint records, found {} and {}",
                    count(),
                    endpoints()
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        };
        let s = |e: &str| ("dynamo".to_string(), "backend".to_string(), e.to_string());
        a.sender().send([s("generate"), s("other")].into()).unwrap();
        // One endpoint record per component, whatever its endpoints.
        wait_for(2, 1);
        a.sender().send([s("other")].into()).unwrap();
        wait_for(1, 1);
        drop(a);
        assert_eq!(count(), 0, "records deleted at stop");
        assert_eq!(endpoints(), 0, "records deleted at stop");
        let _ = std::fs::remove_dir_all(&root);
    }
}
