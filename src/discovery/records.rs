//! Discovery records as Dynamo 1.6.1 stores them (docs/dynamo/request-plane.md §3.1–3.2; model
//! cards in [`super::card`], re-exported here), and the file-name key
//! encoding of the file backend.
//!
//! The same JSON values are used by the etcd backend (§4), so nothing here knows about files
//! except [`decode_file_name`] / [`encode_key`] / [`is_temp_file`].
//!
//! Every type tolerates unknown fields: Dynamo adds card fields between releases, and a
//! frontend must not drop a worker because of one it does not know.

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

pub use super::card::*;

// ---------------------------------------------------------------------------------------------
// Keys
// ---------------------------------------------------------------------------------------------

/// Bucket of endpoint instance records (`type: "Endpoint"`).
pub const BUCKET_INSTANCES: &str = "v1/instances";
/// Bucket of model card records (`type: "Model"`).
pub const BUCKET_MDC: &str = "v1/mdc";
/// Bucket of event-plane publisher records (`type: "EventChannel"`).
pub const BUCKET_EVENT_CHANNELS: &str = "v1/event_channels";
/// Bucket of KV-event sources (`type: "EventSource"`): which worker and DP rank a `kv-events`
/// publisher speaks for, and where to ask for a recovery.
pub const BUCKET_EVENT_SOURCES: &str = "v1/event_sources";
/// Every bucket discovery reads.
pub const BUCKETS: [&str; 4] = [BUCKET_EVENT_CHANNELS, BUCKET_EVENT_SOURCES, BUCKET_INSTANCES, BUCKET_MDC];

/// Names starting with this are a writer's temporaries (written, hard-linked, unlinked).
pub const TEMP_PREFIX: &str = ".tmp_";

/// True for a writer's temporary file, which readers must skip.
pub fn is_temp_file(file_name: &str) -> bool {
    file_name.starts_with(TEMP_PREFIX)
}

/// Decodes a file name into its key: plain percent-decoding (`%2F` → `/`; either hex case).
///
/// `None` for a malformed escape (`%` not followed by two hex digits) or a result that is not
/// UTF-8: such a file cannot be a record key.
pub fn decode_file_name(file_name: &str) -> Option<String> {
    let b = file_name.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        if b[i] == b'%' {
            let hi = crate::util::hex_digit(*b.get(i + 1)?)?;
            let lo = crate::util::hex_digit(*b.get(i + 2)?)?;
            out.push(hi << 4 | lo);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8(out).ok()
}

/// Encodes a key the way Dynamo's writers do: every byte outside ASCII `[A-Za-z0-9]` becomes
/// `%XX` with upper-case hex.
pub fn encode_key(key: &str) -> String {
    let mut out = String::with_capacity(key.len() * 3);
    for &c in key.as_bytes() {
        if c.is_ascii_alphanumeric() {
            out.push(c as char);
        } else {
            const HEX: &[u8; 16] = b"0123456789ABCDEF";
            out.push('%');
            out.push(HEX[usize::from(c >> 4)] as char);
            out.push(HEX[usize::from(c & 15)] as char);
        }
    }
    out
}

/// Lower-case hex of an instance id with no zero padding (Rust `{:x}`), as used in keys and
/// TCP endpoint paths.
pub fn instance_hex(instance_id: u64) -> String {
    format!("{instance_id:x}")
}

/// The key of an endpoint instance or model card: `<ns>/<component>/<endpoint>/<instance hex>`.
pub fn instance_key(ns: &str, component: &str, endpoint: &str, instance_id: u64) -> String {
    format!("{ns}/{component}/{endpoint}/{instance_id:x}")
}

// ---------------------------------------------------------------------------------------------
// Endpoint instances
// ---------------------------------------------------------------------------------------------

/// `namespace` / `component` / `endpoint` of a served endpoint.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct EndpointId {
    pub namespace: String,
    pub component: String,
    pub endpoint: String,
}

impl EndpointId {
    /// `dyn://namespace.component.endpoint`, as `/health` lists endpoints.
    pub fn dyn_url(&self) -> String {
        format!("dyn://{}.{}.{}", self.namespace, self.component, self.endpoint)
    }
}

/// An endpoint instance record (`v1/instances`).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct EndpointRecord {
    pub namespace: String,
    pub component: String,
    pub endpoint: String,
    pub instance_id: u64,
    pub transport: Transport,
    /// Informational; a record without it is accepted.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub device_type: Option<String>,
    /// `msgpack` (the default when absent) or `json`; see [`EndpointRecord::codec`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_plane_codec: Option<String>,
    #[serde(flatten)]
    pub extra: Map<String, Value>,
}

impl EndpointRecord {
    pub fn id(&self) -> EndpointId {
        EndpointId {
            namespace: self.namespace.clone(),
            component: self.component.clone(),
            endpoint: self.endpoint.clone(),
        }
    }

    /// The codec to speak on the request plane; `None` for a codec switchyard does not know.
    pub fn codec(&self) -> Option<Codec> {
        match self.request_plane_codec.as_deref() {
            None | Some("msgpack") => Some(Codec::Msgpack),
            Some("json") => Some(Codec::Json),
            Some(_) => None,
        }
    }

    /// The TCP address and endpoint path, when the instance is on the TCP request plane.
    pub fn tcp(&self) -> Option<TcpAddress> {
        TcpAddress::parse(self.transport.tcp.as_deref()?)
    }

    /// The NATS subject, when the instance is on the NATS request plane (`nats_tcp`).
    pub fn nats_tcp(&self) -> Option<&str> {
        self.transport.other.get("nats_tcp").and_then(Value::as_str)
    }
}

/// Request-plane body codec advertised by a worker.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Codec {
    Msgpack,
    Json,
}

/// The externally tagged `transport` of an endpoint record. Only `tcp` is understood; other
/// variants (NATS, HTTP) are kept in `other`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Transport {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tcp: Option<String>,
    #[serde(flatten)]
    pub other: Map<String, Value>,
}

/// `"<host>:<port>/<endpoint path>"` split at the first `/`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TcpAddress {
    /// `host:port` to dial.
    pub addr: String,
    /// Endpoint path to put in every request frame, e.g. `2aed21ef7e3e48b7/dynamo/backend/generate`.
    pub path: String,
}

impl TcpAddress {
    pub fn parse(s: &str) -> Option<TcpAddress> {
        let (addr, path) = s.split_once('/')?;
        if addr.is_empty() || path.is_empty() {
            return None;
        }
        Some(TcpAddress { addr: addr.to_string(), path: path.to_string() })
    }
}

// ---------------------------------------------------------------------------------------------
// Event channels
// ---------------------------------------------------------------------------------------------

/// The typed view of an event-channel record (`v1/event_channels`): one publisher of one
/// topic and where its messages can be received. Scope and unknown fields are left in the
/// raw JSON the snapshot keeps.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
pub struct EventChannelRecord {
    /// `kv-events`, `kv_metrics`, `active_sequences_events`, `forward-pass-metrics`, ...
    pub topic: String,
    /// The publisher id (the envelope's `publisher_id`), not a worker id.
    pub instance_id: u64,
    pub transport: EventTransport,
}

/// How an event channel's messages travel (`transport: {"kind", "config"}`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(try_from = "RawTransport")]
pub enum EventTransport {
    /// `--event-plane zmq`: the publisher's own PUB socket, `tcp://<ip>:<port>`.
    Zmq { endpoint: String },
    /// `--event-plane nats`: published on the NATS server the worker was given, to the
    /// subject `<subject_prefix>.<topic>`.
    Nats { subject_prefix: String },
    /// Any other kind (a ZMQ broker, a later release's transport).
    Other,
}

#[derive(Deserialize)]
struct RawTransport {
    kind: String,
    #[serde(default)]
    config: Value,
}

impl TryFrom<RawTransport> for EventTransport {
    type Error = String;

    fn try_from(raw: RawTransport) -> Result<Self, String> {
        let field = |name: &str| {
            raw.config
                .get(name)
                .and_then(Value::as_str)
                .map(str::to_string)
                .ok_or_else(|| format!("{} transport without a string `config.{name}`", raw.kind))
        };
        Ok(match raw.kind.as_str() {
            "Zmq" => EventTransport::Zmq { endpoint: field("endpoint")? },
            "Nats" => EventTransport::Nats { subject_prefix: field("subject_prefix")? },
            _ => EventTransport::Other,
        })
    }
}

impl EventChannelRecord {
    /// Parses the record value of a `v1/event_channels` entry.
    pub fn parse(raw: &Value) -> Result<EventChannelRecord, String> {
        EventChannelRecord::deserialize(raw).map_err(|e| format!("EventChannel: {e}"))
    }

    /// The NATS subject of a NATS channel (`None` for another transport).
    pub fn nats_subject(&self) -> Option<String> {
        match &self.transport {
            EventTransport::Nats { subject_prefix } => Some(format!("{subject_prefix}.{}", self.topic)),
            _ => None,
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Any record
// ---------------------------------------------------------------------------------------------

/// A parsed record of any bucket, with the JSON it was parsed from.
#[derive(Clone, Debug, PartialEq)]
pub enum Record {
    Endpoint(Box<EndpointRecord>),
    Model(Box<ModelRecord>),
    /// Event-plane records are kept as JSON until the event plane is built.
    EventChannel(Value),
    EventSource(Value),
}

/// Parses one record value (file content or etcd value). Errors name what was wrong.
pub fn parse_record(bytes: &[u8]) -> Result<(Record, Value), String> {
    let raw: Value = serde_json::from_slice(bytes).map_err(|e| format!("not JSON: {e}"))?;
    let ty = raw.get("type").and_then(Value::as_str).ok_or("no string `type` field")?;
    let rec = match ty {
        "Endpoint" => {
            Record::Endpoint(Box::new(EndpointRecord::deserialize(&raw).map_err(|e| format!("Endpoint: {e}"))?))
        }
        "Model" => Record::Model(Box::new(ModelRecord::deserialize(&raw).map_err(|e| format!("Model: {e}"))?)),
        "EventChannel" => Record::EventChannel(raw.clone()),
        "EventSource" => Record::EventSource(raw.clone()),
        other => return Err(format!("unknown record type {other:?}")),
    };
    Ok((rec, raw))
}
