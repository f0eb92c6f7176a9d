//! Targets of what the control thread reads from the discovery store (file-store records,
//! etcd watch streams, model cards) and of the chat templates those cards name, rendered
//! with a client's conversation.

use std::collections::BTreeMap;
use std::time::{Duration, SystemTime};

use serde_json::{Map, Value};

use crate::config::NamespaceFilter;
use crate::discovery::etcd::watch::{line_result, result_events};
use crate::discovery::etcd::{EventKind, VIEW_BUCKETS};
use crate::discovery::records::{decode_file_name, is_temp_file, EventChannelRecord, BUCKETS};
use crate::discovery::snapshot::{build, Catalog, ParseCache, Raw, Snapshot};
use crate::tokenize::template::{ChatTemplate, RenderArgs};

/// Discovery: bytes starting with `{` are an etcd watch stream (one JSON message a line, as
/// the gateway sends them) whose events change the view of the buckets; any other bytes are
/// file-store records, separated by 0x1E, each a bucket digit, a file name, a newline and
/// the file's content. Either way the records are built into a snapshot (twice: the second
/// time from the parse cache), a Registry, the event-plane publishers, and each served
/// card's derived values.
pub fn discovery(data: &[u8]) {
    let records: BTreeMap<(&'static str, String), Vec<u8>> =
        if data.first() == Some(&b'{') { etcd_records(data) } else { file_records(data) };
    let now = SystemTime::UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    let raws = records.iter().map(|((bucket, key), bytes)| Raw { bucket, name: key, key, modified: now, bytes });
    let mut cache = ParseCache::default();
    let snap = build(raws.clone(), &NamespaceFilter::Any, Vec::new(), &mut cache);
    assert_eq!(snap, build(raws, &NamespaceFilter::Any, Vec::new(), &mut cache), "the parse cache changed a snapshot");
    use_snapshot(&snap, now);
}

/// The records an etcd view holds after the watch stream `data` (a bucket is picked by each
/// event's key prefix, as the view's one watch per bucket would).
fn etcd_records(data: &[u8]) -> BTreeMap<(&'static str, String), Vec<u8>> {
    let mut records = BTreeMap::new();
    for line in data.split(|&b| b == b'\n') {
        let Ok(Some(result)) = line_result(line, "v1/") else { continue };
        let Ok(events) = result_events(&result) else { continue };
        for ev in events {
            let Some((bucket, key)) =
                VIEW_BUCKETS.iter().find_map(|b| Some((*b, ev.key.strip_prefix(b)?.strip_prefix('/')?)))
            else {
                continue;
            };
            match ev.kind {
                EventKind::Put => records.insert((bucket, key.to_string()), ev.value),
                EventKind::Delete => records.remove(&(bucket, key.to_string())),
            };
        }
    }
    records
}

/// The records of a file store listed as `data` (names decoded as the file backend decodes
/// them; temporaries and undecodable names skipped).
fn file_records(data: &[u8]) -> BTreeMap<(&'static str, String), Vec<u8>> {
    let mut records = BTreeMap::new();
    for rec in data.split(|&b| b == 0x1e) {
        let Some((&bucket, rest)) = rec.split_first() else { continue };
        let bucket = BUCKETS[usize::from(bucket) % BUCKETS.len()];
        let nl = rest.iter().position(|&b| b == b'\n').unwrap_or(rest.len());
        let name = String::from_utf8_lossy(&rest[..nl]);
        if is_temp_file(&name) {
            continue;
        }
        let Some(key) = decode_file_name(&name) else { continue };
        records.insert((bucket, key), rest.get(nl + 1..).unwrap_or_default().to_vec());
    }
    records
}

/// What the control thread makes of a snapshot, short of loading model files.
fn use_snapshot(snap: &Snapshot, now: SystemTime) {
    let registry = Catalog::default().registry(snap, now);
    assert!(registry.models.windows(2).all(|w| w[0].name <= w[1].name), "models out of order");
    for (load_only, remote_index) in [(false, false), (true, false), (false, true)] {
        let _ = crate::control::kv_publishers(snap, load_only, remote_index);
    }
    for c in &snap.event_channels {
        if let Ok(channel) = EventChannelRecord::parse(&c.raw) {
            let _ = channel.nats_subject();
        }
    }
    for served in &snap.served {
        let card = &served.card;
        let _ = (card.context_window(), card.effective_context_length(), card.mdc_sum(), card.check_slots());
        for (_, slot) in card.file_slots() {
            let _ = (slot.template_format(), slot.file.is_url(), slot.file.basename());
        }
        let _ = (card.model_type.group_key(), served.endpoint.codec(), served.endpoint.tcp());
        let _ = crate::kserve::tensor_meta::load(card.extra.get("tensor_model_config"));
    }
}

/// Chat templates: the bytes up to the first NUL are a template's source, the rest the JSON
/// of a render: a conversation (an array of messages), or an object with `messages`,
/// `tools`, `documents`, `extra` (the request's template arguments),
/// `add_generation_prompt` and `continue_final_message`. A template must compile or be
/// refused, and a render must end, in a prompt or an error.
pub fn chat_template(data: &[u8]) {
    let nul = data.iter().position(|&b| b == 0).unwrap_or(data.len());
    let source = String::from_utf8_lossy(&data[..nul]);
    let Ok(template) = ChatTemplate::compile(&source) else { return };
    let json: Value = serde_json::from_slice(data.get(nul + 1..).unwrap_or_default()).unwrap_or(Value::Null);
    let empty = Vec::new();
    let (messages, obj) = match &json {
        Value::Array(m) => (m, None),
        Value::Object(o) => (o.get("messages").and_then(Value::as_array).unwrap_or(&empty), Some(o)),
        _ => (&empty, None),
    };
    let get = |k: &str| obj.and_then(|o| o.get(k));
    let flag = |k: &str| get(k).and_then(Value::as_bool).unwrap_or(false);
    let special: BTreeMap<String, String> =
        [("bos_token", "<s>"), ("eos_token", "</s>")].into_iter().map(|(k, v)| (k.into(), v.into())).collect();
    let extra: Option<&Map<String, Value>> = get("extra").and_then(Value::as_object);
    let messages = if messages.is_empty() { std::slice::from_ref(&json) } else { messages };
    let args = RenderArgs {
        tools: get("tools"),
        documents: get("documents"),
        add_generation_prompt: flag("add_generation_prompt"),
        continue_final_message: flag("continue_final_message"),
        extra,
        ..RenderArgs::conversation(messages, &special, Some(0))
    };
    let _ = template.render(&args);
    let _ = (template.native(), template.knows_developer_role());
}
