//! File discovery backend: the captured Dynamo 1.6.1 store layout, liveness, joins, filters,
//! garbage tolerance and the rescan loop.

use std::fs;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{mpsc, Arc};
use std::time::{Duration, SystemTime};

use serde_json::{json, Value};
use switchyard::config::NamespaceFilter;
use switchyard::discovery::file::{is_expired, namespace_matches, DEFAULT_TTL};
use switchyard::discovery::mem::MemStore;
use switchyard::discovery::records::{
    decode_file_name, encode_key, is_temp_file, parse_record, Codec, Record, TcpAddress,
};
use switchyard::discovery::{watch, FileStore, InotifyWake, ModelInput, PeriodicWake, WakeSource};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/discovery");

/// A temp `DYN_FILE_KV` directory, removed on drop.
struct Store(PathBuf);

impl Store {
    fn empty() -> Store {
        static N: AtomicUsize = AtomicUsize::new(0);
        let nanos = SystemTime::now().duration_since(SystemTime::UNIX_EPOCH).unwrap().as_nanos();
        let dir = std::env::temp_dir().join(format!(
            "switchyard-filekv-{}-{}-{nanos}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        for b in ["v1/instances", "v1/mdc", "v1/event_channels", "v1/event_sources"] {
            fs::create_dir_all(dir.join(b)).unwrap();
        }
        Store(dir)
    }

    /// The store the mocker and two Python probes wrote (filekv_snapshot.json).
    fn captured() -> Store {
        let s = Store::empty();
        for (bucket, files) in snapshot().as_object().unwrap() {
            for (file_name, v) in files.as_object().unwrap() {
                s.write(bucket, file_name, &v["value"]);
            }
        }
        s
    }

    fn write(&self, bucket: &str, file_name: &str, v: &Value) -> PathBuf {
        self.write_bytes(bucket, file_name, &serde_json::to_vec(v).unwrap())
    }

    fn write_bytes(&self, bucket: &str, file_name: &str, bytes: &[u8]) -> PathBuf {
        let p = self.0.join(bucket).join(file_name);
        fs::write(&p, bytes).unwrap();
        p
    }

    fn store(&self) -> FileStore {
        FileStore::new(&self.0, NamespaceFilter::Any)
    }
}

impl Drop for Store {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.0);
    }
}

fn snapshot() -> Value {
    serde_json::from_slice(&fs::read(Path::new(DATA).join("filekv_snapshot.json")).unwrap()).unwrap()
}

fn set_age(path: &Path, age: Duration) {
    let f = fs::File::options().write(true).open(path).unwrap();
    f.set_modified(SystemTime::now() - age).unwrap();
}

fn card(ns: &str, component: &str, instance_id: u64, name: &str) -> Value {
    let mut v = snapshot()["v1/mdc"]["dynamo%2Fbackend%2Fgenerate%2F2aed21ef7e3e48b7"]["value"].clone();
    v["namespace"] = json!(ns);
    v["component"] = json!(component);
    v["instance_id"] = json!(instance_id);
    v["card_json"]["display_name"] = json!(name);
    v
}

fn endpoint(ns: &str, component: &str, instance_id: u64) -> Value {
    json!({"type":"Endpoint","component":component,"endpoint":"generate","namespace":ns,
        "instance_id":instance_id,
        "transport":{"tcp":format!("127.0.0.1:4000/{instance_id:x}/{ns}/{component}/generate")},
        "device_type":"cuda","request_plane_codec":"msgpack"})
}

fn key_file(ns: &str, component: &str, instance_id: u64) -> String {
    encode_key(&format!("{ns}/{component}/generate/{instance_id:x}"))
}

fn model_names(store: &mut FileStore) -> Vec<String> {
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    store.registry(&snap, now).models.into_iter().map(|m| m.name).collect()
}

#[test]
fn captured_store_builds_the_registry() {
    let s = Store::captured();
    let mut store = s.store();
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    assert!(snap.skipped.is_empty(), "{:?}", snap.skipped);
    assert_eq!(snap.instances.len(), 4);
    assert_eq!(snap.cards.len(), 3);
    assert_eq!(snap.event_channels.len(), 4);
    assert_eq!(snap.event_sources.len(), 1);
    assert_eq!(snap.event_sources[0].raw["topic"], "kv-events");

    let reg = store.registry(&snap, now);
    let models: Vec<(&str, u64)> = reg.models.iter().map(|m| (m.name.as_str(), m.context_window)).collect();
    // /v1/models: 0 for the mocker (context_length 0), 40960 for the Python probes.
    assert_eq!(models, [("probejson", 40960), ("probesh", 40960), ("qwen3", 0)]);
    let now_secs = now.duration_since(SystemTime::UNIX_EPOCH).unwrap().as_secs();
    assert!(reg.models.iter().all(|m| m.created == now_secs));
    assert_eq!(
        reg.endpoints,
        [
            "dyn://dynamo.backend.generate",
            "dyn://dynamo.backend.worker_kv_query_source_e1d8dbadb3c25",
            "dyn://dynamo.probejson.generate",
            "dyn://dynamo.probesh.generate",
        ]
    );
    // /health lists every live endpoint record as stored, including the card-less one.
    let want = &snapshot()["v1/instances"];
    assert_eq!(reg.instances.len(), 4);
    assert_eq!(reg.instances[0], want["dynamo%2Fbackend%2Fgenerate%2F2aed21ef7e3e48b7"]["value"]);
    assert_eq!(
        serde_json::to_string(&reg.instances[0]).unwrap(),
        r#"{"type":"Endpoint","component":"backend","endpoint":"generate","namespace":"dynamo","instance_id":3093165831572310199,"transport":{"tcp":"127.0.0.1:39455/2aed21ef7e3e48b7/dynamo/backend/generate"},"device_type":"cuda","request_plane_codec":"msgpack"}"#
    );
    assert!(reg.model("qwen3").is_some());

    // Traffic goes only to endpoint + card pairs: not to worker_kv_query_source, which shares
    // the mocker's instance id.
    let served: Vec<(&str, &str, u64)> =
        snap.served.iter().map(|s| (s.model.as_str(), s.endpoint.endpoint.as_str(), s.endpoint.instance_id)).collect();
    assert_eq!(
        served,
        [
            ("probejson", "generate", 6329110116071030134),
            ("probesh", "generate", 5879282979871083314),
            ("qwen3", "generate", 3093165831572310199),
        ]
    );
    let qwen = &snap.served[2];
    assert_eq!(
        qwen.endpoint.tcp(),
        Some(TcpAddress { addr: "127.0.0.1:39455".into(), path: "2aed21ef7e3e48b7/dynamo/backend/generate".into() })
    );
    assert_eq!(qwen.endpoint.codec(), Some(Codec::Msgpack));
    assert_eq!(snap.served[0].endpoint.codec(), Some(Codec::Json));
    let c = &qwen.card;
    assert_eq!(c.slug.as_deref(), Some("qwen3"));
    assert!(c.model_type.chat() && c.model_type.completions() && !c.model_type.embedding());
    assert_eq!(c.model_type.group_key(), "chat|completions");
    assert_eq!(c.model_input, ModelInput::Tokens);
    assert_eq!(c.kv_cache_block_size, Some(64));
    assert_eq!(c.effective_context_length(), 0);
    assert_eq!(snap.served[1].card.effective_context_length(), 40960);
    assert_eq!(c.worker_type.as_deref(), Some("aggregated"));
    assert_eq!(c.runtime_config.total_kv_blocks, Some(16384));
    assert_eq!(c.runtime_config.extra["enable_local_indexer"], json!(true));
    let slots: Vec<(&str, &str)> = c.file_slots().iter().map(|(n, s)| (*n, s.kind.as_str())).collect();
    assert_eq!(
        slots,
        [
            ("model_info", "hf_config_json"),
            ("tokenizer", "hf_tokenizer_json"),
            ("prompt_formatter", "hf_tokenizer_config_json"),
            ("gen_config", "hf_generation_config_json"),
        ]
    );
    let tok = &c.tokenizer.as_ref().unwrap().file;
    assert_eq!(tok.checksum, "blake3:b0cb923fc505fdf0a53f0287654fa26577d3f333d4134350da0a97664b228739");
    assert_eq!(tok.size, Some(11422654));
    assert!(!tok.is_url());
    assert!(snap.served[1].card.model_info.as_ref().unwrap().file.is_url());
}

#[test]
fn card_round_trips_through_serde() {
    let v = &snapshot()["v1/mdc"]["dynamo%2Fbackend%2Fgenerate%2F2aed21ef7e3e48b7"]["value"];
    let (rec, raw) = parse_record(&serde_json::to_vec(v).unwrap()).unwrap();
    assert_eq!(&raw, v);
    let Record::Model(m) = rec else { panic!("not a model") };
    let back = serde_json::to_value(&m.card_json).unwrap();
    assert_eq!(back, v["card_json"]);
}

#[test]
fn instance_ids_above_i64_survive() {
    let v: Value =
        serde_json::from_slice(&fs::read(Path::new(DATA).join("kv-discovery-snapshot.json")).unwrap()).unwrap();
    let s = Store::empty();
    for (path, rec) in v.as_object().unwrap() {
        let bucket = path.rsplit_once('/').unwrap().0;
        assert_eq!(decode_file_name(rec["file_name_on_disk"].as_str().unwrap()).unwrap(), rec["decoded_key"]);
        s.write(bucket, rec["file_name_on_disk"].as_str().unwrap(), &rec["content"]);
    }
    let mut store = s.store();
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    assert_eq!(snap.served.len(), 1);
    assert_eq!(snap.served[0].endpoint.instance_id, 10094487595439714959);
    assert_eq!(snap.served[0].card.runtime_config.data_parallel_size, Some(2));
    let reg = store.registry(&snap, now);
    assert_eq!(reg.models.len(), 1);
    assert_eq!(reg.instances.len(), 3);
    let text = serde_json::to_string(&reg.instances).unwrap();
    assert!(text.contains("\"instance_id\":10094487595439714959"), "{text}");
}

#[test]
fn expired_records_are_dead() {
    let s = Store::captured();
    let mut store = s.store();
    // The probe's endpoint record was last touched 11 s ago: TTL 10 s → dead.
    set_age(&s.0.join("v1/instances/dynamo%2Fprobesh%2Fgenerate%2F519768b86d374b32"), Duration::from_secs(11));
    // The probejson card is old: its instance is no longer served, though its endpoint record
    // (fresh) is still listed by /health.
    set_age(&s.0.join("v1/mdc/dynamo%2Fprobejson%2Fgenerate%2F57d5841e14bebd76"), Duration::from_secs(60));
    // 9 s old is still alive.
    set_age(&s.0.join("v1/mdc/dynamo%2Fbackend%2Fgenerate%2F2aed21ef7e3e48b7"), Duration::from_secs(9));
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    let reg = store.registry(&snap, now);
    assert_eq!(reg.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["qwen3"]);
    assert_eq!(reg.instances.len(), 3);
    assert!(!reg.endpoints.contains(&"dyn://dynamo.probesh.generate".to_string()));
    assert!(reg.endpoints.contains(&"dyn://dynamo.probejson.generate".to_string()));
    assert!(snap.skipped.is_empty());

    // A longer TTL brings them back.
    let mut store = s.store().with_ttl(Duration::from_secs(120));
    assert_eq!(model_names(&mut store), ["probejson", "probesh", "qwen3"]);

    let t = SystemTime::now();
    assert!(!is_expired(t - DEFAULT_TTL, t, DEFAULT_TTL));
    assert!(is_expired(t - DEFAULT_TTL - Duration::from_millis(1), t, DEFAULT_TTL));
    assert!(!is_expired(t + Duration::from_secs(60), t, DEFAULT_TTL), "future mtime is fresh");
}

#[test]
fn only_instances_with_both_records_are_served() {
    let s = Store::empty();
    // Endpoint without card.
    s.write("v1/instances", &key_file("dynamo", "lonely", 1), &endpoint("dynamo", "lonely", 1));
    // Card without endpoint.
    s.write("v1/mdc", &key_file("dynamo", "ghost", 2), &card("dynamo", "ghost", 2, "ghost"));
    // Card whose instance id matches a record of another endpoint only.
    s.write("v1/mdc", &key_file("dynamo", "other", 1), &card("dynamo", "other", 1, "other"));
    let mut store = s.store();
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    assert!(snap.served.is_empty());
    let reg = store.registry(&snap, now);
    assert!(reg.models.is_empty());
    assert_eq!(reg.endpoints, ["dyn://dynamo.lonely.generate"]);
    assert_eq!(reg.instances.len(), 1);

    // The card arrives: now served, under the card's display name.
    s.write("v1/mdc", &key_file("dynamo", "lonely", 1), &card("dynamo", "lonely", 1, "m1"));
    // A second instance of the same model: still one model entry.
    s.write("v1/instances", &key_file("dynamo", "lonely", 3), &endpoint("dynamo", "lonely", 3));
    s.write("v1/mdc", &key_file("dynamo", "lonely", 3), &card("dynamo", "lonely", 3, "m1"));
    let snap = store.scan(SystemTime::now()).unwrap();
    assert_eq!(snap.served.len(), 2);
    assert_eq!(snap.model_names(), ["m1"]);
    assert_eq!(model_names(&mut store), ["m1"]);
}

#[test]
fn namespace_filters() {
    let s = Store::empty();
    for (ns, id) in [("dynamo", 1u64), ("dynamo-b", 2), ("other", 3)] {
        s.write("v1/instances", &key_file(ns, "backend", id), &endpoint(ns, "backend", id));
        s.write("v1/mdc", &key_file(ns, "backend", id), &card(ns, "backend", id, &format!("m-{ns}")));
    }
    let names = |f: NamespaceFilter| model_names(&mut FileStore::new(&s.0, f));
    assert_eq!(names(NamespaceFilter::Any), ["m-dynamo", "m-dynamo-b", "m-other"]);
    assert_eq!(names(NamespaceFilter::Exact("dynamo".into())), ["m-dynamo"]);
    assert_eq!(names(NamespaceFilter::Prefix("dynamo".into())), ["m-dynamo", "m-dynamo-b"]);
    assert_eq!(names(NamespaceFilter::Exact("nope".into())), Vec::<String>::new());

    let mut store = FileStore::new(&s.0, NamespaceFilter::Exact("other".into()));
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    let reg = store.registry(&snap, now);
    assert_eq!(reg.endpoints, ["dyn://other.backend.generate"]);
    assert_eq!(reg.instances.len(), 1);

    assert!(namespace_matches(&NamespaceFilter::Prefix(String::new()), "x"));
    assert!(!namespace_matches(&NamespaceFilter::Exact("dyn".into()), "dynamo"));
}

#[test]
fn garbage_and_temporaries_are_ignored() {
    let s = Store::captured();
    let good = endpoint("dynamo", "x", 9);
    // A writer's temporary holding a valid record: ignored, and not reported.
    s.write("v1/instances", ".tmp_f9242eb43e1bd08f", &good);
    s.write("v1/mdc", ".tmp_b382cbd646d7f3e5", &card("dynamo", "x", 9, "tmp-model"));
    s.write_bytes("v1/instances", "not%20json", b"{\"type\":\"Endpoint\",");
    s.write_bytes("v1/instances", "empty", b"");
    s.write_bytes("v1/instances", "binary", &[0xff, 0x00, 0x7b]);
    s.write("v1/instances", "no%2Dtype", &json!({"namespace":"dynamo"}));
    s.write("v1/instances", "wrong%2Dtype", &json!({"type":"Bogus"}));
    s.write("v1/instances", "a%2Dmodel", &card("dynamo", "x", 9, "misplaced"));
    s.write("v1/instances", "bad%ZZescape", &good);
    s.write("v1/instances", "trailing%2", &good);
    s.write("v1/instances", "missing%2Dfields", &json!({"type":"Endpoint","namespace":"dynamo"}));
    let mut no_checksum = card("dynamo", "x", 9, "nochecksum");
    no_checksum["card_json"]["tokenizer"]["hf_tokenizer_json"].as_object_mut().unwrap().remove("checksum");
    s.write("v1/mdc", "no%2Dchecksum", &no_checksum);
    let mut two_kinds = card("dynamo", "x", 9, "twokinds");
    two_kinds["card_json"]["tokenizer"]["other"] = json!({"path":"p","checksum":"blake3:00"});
    s.write("v1/mdc", "two%2Dkinds", &two_kinds);
    s.write("v1/event_channels", "junk", &json!([1, 2, 3]));
    fs::create_dir(s.0.join("v1/mdc/subdir")).unwrap();
    fs::write(s.0.join("v1/stray-file"), b"x").unwrap();

    let mut store = s.store();
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    let reg = store.registry(&snap, now);
    assert_eq!(reg.models.iter().map(|m| m.name.as_str()).collect::<Vec<_>>(), ["probejson", "probesh", "qwen3"]);
    assert_eq!(reg.instances.len(), 4);
    assert_eq!(snap.event_channels.len(), 4);
    let mut skipped: Vec<&str> = snap.skipped.iter().map(|k| k.file_name.as_str()).collect();
    skipped.sort();
    assert_eq!(
        skipped,
        [
            "a%2Dmodel",
            "bad%ZZescape",
            "binary",
            "empty",
            "junk",
            "missing%2Dfields",
            "no%2Dchecksum",
            "no%2Dtype",
            "not%20json",
            "subdir",
            "trailing%2",
            "two%2Dkinds",
            "wrong%2Dtype",
        ]
    );
    assert!(snap.skipped.iter().all(|k| !k.reason.is_empty()));
}

#[test]
fn missing_directories_read_as_empty() {
    let s = Store::empty();
    let store = FileStore::new(s.0.join("does-not-exist"), NamespaceFilter::Any);
    let snap = store.scan(SystemTime::now()).unwrap();
    assert_eq!(snap, Default::default());
    fs::remove_dir_all(s.0.join("v1/mdc")).unwrap();
    s.write("v1/instances", &key_file("dynamo", "a", 1), &endpoint("dynamo", "a", 1));
    let mut store = s.store();
    let now = SystemTime::now();
    let snap = store.scan(now).unwrap();
    assert_eq!(store.registry(&snap, now).instances.len(), 1);
}

#[test]
fn percent_encoded_names() {
    for (_, files) in snapshot().as_object().unwrap() {
        for (file_name, v) in files.as_object().unwrap() {
            let key = v["decoded_key"].as_str().unwrap();
            assert_eq!(decode_file_name(file_name).as_deref(), Some(key));
            // Dynamo's encoding: everything outside [A-Za-z0-9] escaped, upper-case hex.
            assert_eq!(&encode_key(key), file_name);
        }
    }
    assert_eq!(decode_file_name("a%2fb%5F").as_deref(), Some("a/b_"));
    assert_eq!(decode_file_name("caf%C3%A9").as_deref(), Some("café"));
    assert_eq!(encode_key("café.~"), "caf%C3%A9%2E%7E");
    assert_eq!(decode_file_name("%FF"), None, "not UTF-8");
    assert_eq!(decode_file_name("%G0"), None);
    assert_eq!(decode_file_name("%"), None);
    assert!(is_temp_file(".tmp_0123") && !is_temp_file("x.tmp_0123") && !is_temp_file("%2Etmp_1"));

    // A record whose file name uses lower-case escapes is still found.
    let s = Store::empty();
    s.write("v1/instances", "dynamo%2fa%2fgenerate%2f1", &endpoint("dynamo", "a", 1));
    s.write("v1/mdc", "dynamo%2fa%2fgenerate%2f1", &card("dynamo", "a", 1, "lower"));
    let snap = s.store().scan(SystemTime::now()).unwrap();
    assert_eq!(snap.instances[0].key, "dynamo/a/generate/1");
    assert_eq!(snap.model_names(), ["lower"]);
}

#[test]
fn transport_and_codec_parsing() {
    assert_eq!(TcpAddress::parse("h:1/a/b"), Some(TcpAddress { addr: "h:1".into(), path: "a/b".into() }));
    assert_eq!(TcpAddress::parse("h:1"), None);
    assert_eq!(TcpAddress::parse("/a"), None);
    let mut v = endpoint("dynamo", "a", 1);
    v.as_object_mut().unwrap().remove("request_plane_codec");
    v.as_object_mut().unwrap().remove("device_type");
    v["transport"] = json!({"nats": "dynamo_backend.generate-1"});
    v["future_field"] = json!(1);
    let (Record::Endpoint(e), _) = parse_record(&serde_json::to_vec(&v).unwrap()).unwrap() else { panic!() };
    assert_eq!(e.codec(), Some(Codec::Msgpack), "absent codec is msgpack");
    assert_eq!(e.tcp(), None);
    assert_eq!(e.transport.other["nats"], json!("dynamo_backend.generate-1"));
    v["request_plane_codec"] = json!("cbor");
    let (Record::Endpoint(e), _) = parse_record(&serde_json::to_vec(&v).unwrap()).unwrap() else { panic!() };
    assert_eq!(e.codec(), None);

    let mut c = card("dynamo", "a", 1, "t");
    c["card_json"]["model_input"] = json!("Text");
    c["card_json"]["model_type"] = json!("Chat");
    let (Record::Model(m), _) = parse_record(&serde_json::to_vec(&c).unwrap()).unwrap() else { panic!() };
    assert_eq!(m.card_json.model_input, ModelInput::Text);
    assert!(m.card_json.model_type.chat() && !m.card_json.model_type.completions());
    c["card_json"]["model_input"] = json!("Hologram");
    let (Record::Model(m), _) = parse_record(&serde_json::to_vec(&c).unwrap()).unwrap() else { panic!() };
    assert_eq!(m.card_json.model_input, ModelInput::Unknown);
}

#[test]
fn created_is_kept_while_served_and_reset_after() {
    let s = Store::empty();
    s.write("v1/instances", &key_file("dynamo", "a", 1), &endpoint("dynamo", "a", 1));
    let card_path = s.write("v1/mdc", &key_file("dynamo", "a", 1), &card("dynamo", "a", 1, "m"));
    let mut store = s.store();
    let t0 = SystemTime::UNIX_EPOCH + Duration::from_secs(2_000_000_000);
    let at = |store: &mut FileStore, t: SystemTime| {
        // Scan at the real time (files are fresh), build the Registry "at" t.
        let snap = store.scan(SystemTime::now()).unwrap();
        store.registry(&snap, t).models
    };
    assert_eq!(at(&mut store, t0)[0].created, 2_000_000_000);
    assert_eq!(at(&mut store, t0 + Duration::from_secs(50))[0].created, 2_000_000_000);
    fs::remove_file(&card_path).unwrap();
    assert!(at(&mut store, t0 + Duration::from_secs(60)).is_empty());
    s.write("v1/mdc", &key_file("dynamo", "a", 1), &card("dynamo", "a", 1, "m"));
    assert_eq!(at(&mut store, t0 + Duration::from_secs(70))[0].created, 2_000_000_070);
}

#[test]
fn watch_reports_changes_only() {
    let s = Store::empty();
    s.write("v1/instances", &key_file("dynamo", "a", 1), &endpoint("dynamo", "a", 1));
    let root = s.0.clone();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let stop2 = stop.clone();
    let t = std::thread::spawn(move || {
        let mut store =
            FileStore::new(root, NamespaceFilter::Any).with_wake(PeriodicWake { interval: Duration::from_millis(20) });
        watch(
            &mut store,
            &stop2,
            |reg, snap| {
                tx.send((reg.models.iter().map(|m| m.name.clone()).collect::<Vec<_>>(), snap.instances.len())).unwrap()
            },
            |e| panic!("scan error {e}"),
        );
    });
    let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a change report");
    // First scan is always reported.
    assert_eq!(next(), (vec![], 1));
    // A card arrives → model served.
    s.write("v1/mdc", &key_file("dynamo", "a", 1), &card("dynamo", "a", 1, "m"));
    assert_eq!(next(), (vec!["m".to_string()], 1));
    // Keep-alive touches change nothing visible.
    for _ in 0..3 {
        set_age(&s.0.join("v1/mdc").join(key_file("dynamo", "a", 1)), Duration::ZERO);
        std::thread::sleep(Duration::from_millis(30));
    }
    assert!(rx.recv_timeout(Duration::from_millis(150)).is_err(), "touch reported as a change");
    // A second endpoint without card: Registry (health) changes, models do not.
    s.write("v1/instances", &key_file("dynamo", "b", 2), &endpoint("dynamo", "b", 2));
    assert_eq!(next(), (vec!["m".to_string()], 2));
    // The instance expires (no touch for > TTL) → model gone.
    set_age(&s.0.join("v1/instances").join(key_file("dynamo", "a", 1)), Duration::from_secs(30));
    assert_eq!(next(), (vec![], 1));
    stop.store(true, Ordering::Release);
    t.join().unwrap();
}

#[test]
fn inotify_wakes_on_record_changes() {
    // A root that does not exist yet: the watch must pick up directories created later.
    let s = Store::empty();
    let root = s.0.join("late");
    let mut wake = InotifyWake::new(&root).with_rescan(Duration::from_secs(600));
    let long = Duration::from_secs(60);
    // Nothing happens: the wait runs to its bound (kept short here).
    let t = std::time::Instant::now();
    wake.wait(Duration::from_millis(200));
    assert!(t.elapsed() >= Duration::from_millis(190), "woke without an event");
    for b in ["", "v1", "v1/mdc"] {
        fs::create_dir_all(root.join(b)).unwrap();
        wake.wait(Duration::from_millis(50)); // absorb the directory event, add the watch
    }
    let path = root.join("v1/mdc").join(key_file("dynamo", "a", 1));
    let writer = {
        let path = path.clone();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(100));
            fs::write(&path, b"{}").unwrap();
        })
    };
    let t = std::time::Instant::now();
    wake.wait(long);
    assert!(t.elapsed() < long, "a new record file did not wake the watch");
    writer.join().unwrap();
    // Removing it wakes the watch too.
    fs::remove_file(&path).unwrap();
    let t = std::time::Instant::now();
    wake.wait(long);
    assert!(t.elapsed() < long, "a removed record did not wake the watch");
}

#[test]
fn mem_store_is_watched_like_any_backend() {
    let store = MemStore::new();
    let stop = Arc::new(AtomicBool::new(false));
    let (tx, rx) = mpsc::channel();
    let (stop2, store2) = (stop.clone(), store.clone());
    let t = std::thread::spawn(move || {
        let mut source = store2.source(NamespaceFilter::Any);
        watch(
            &mut source,
            &stop2,
            |reg, _| tx.send(reg.models.iter().map(|m| m.name.clone()).collect::<Vec<_>>()).unwrap(),
            |e| panic!("scan error {e}"),
        );
    });
    let next = || rx.recv_timeout(Duration::from_secs(5)).expect("a change report");
    assert_eq!(next(), Vec::<String>::new());
    let key = "dynamo/a/generate/1";
    store.put("v1/instances", key, serde_json::to_vec(&endpoint("dynamo", "a", 1)).unwrap());
    store.put("v1/mdc", key, serde_json::to_vec(&card("dynamo", "a", 1, "m")).unwrap());
    // One or two reports (the writes may land in one scan); the last one serves the model.
    let mut names = next();
    if names.is_empty() {
        names = next();
    }
    assert_eq!(names, ["m"]);
    store.delete("v1/mdc", key);
    assert_eq!(next(), Vec::<String>::new());
    assert_eq!(store.len(), 1);
    stop.store(true, Ordering::Release);
    t.join().unwrap();
}

#[test]
fn scan_changed_skips_rescans_where_only_mtimes_moved() {
    let s = Store::captured();
    let store = s.store();
    let now = SystemTime::now();
    let first = store.scan_changed(now).unwrap().expect("the first scan always builds");
    assert_eq!(first.instances.len(), 4);
    assert!(store.scan_changed(now).unwrap().is_none(), "nothing changed");
    // A keep-alive touch moves an mtime only: still nothing to rebuild.
    let any = fs::read_dir(s.0.join("v1/instances")).unwrap().next().unwrap().unwrap().path();
    set_age(&any, Duration::from_secs(1));
    assert!(store.scan_changed(SystemTime::now()).unwrap().is_none(), "an mtime alone is no change");
    // New bytes in a record, a new record, an expired record and a removed one are changes.
    let bytes = fs::read(&any).unwrap();
    let mut v: Value = serde_json::from_slice(&bytes).unwrap();
    v["device_type"] = json!("cpu");
    fs::write(&any, serde_json::to_vec(&v).unwrap()).unwrap();
    let snap = store.scan_changed(SystemTime::now()).unwrap().expect("rewritten record");
    assert!(snap.instances.iter().any(|e| e.raw["device_type"] == "cpu"));
    assert!(store.scan_changed(SystemTime::now()).unwrap().is_none());
    let added = s.write("v1/instances", &key_file("ns2", "backend", 0x77), &endpoint("ns2", "backend", 0x77));
    assert_eq!(store.scan_changed(SystemTime::now()).unwrap().expect("new record").instances.len(), 5);
    set_age(&added, DEFAULT_TTL + Duration::from_secs(1));
    assert_eq!(store.scan_changed(SystemTime::now()).unwrap().expect("expired record").instances.len(), 4);
    fs::remove_file(&any).unwrap();
    assert_eq!(store.scan_changed(SystemTime::now()).unwrap().expect("removed record").instances.len(), 3);
    // A file that is not a record is skipped each time and forces a full scan, which reports it.
    s.write_bytes("v1/instances", "garbage", b"not json");
    let snap = store.scan_changed(SystemTime::now()).unwrap().expect("a new garbage file");
    assert_eq!(snap.instances.len(), 3);
    assert!(!snap.skipped.is_empty());
}

/// A record that just ages (its worker died: no write, no event) leaves a watched store when
/// its TTL is due, not at the next periodic listing (`FULL_SWEEP`, 5 s).
#[test]
fn a_watched_store_drops_a_record_when_its_ttl_is_due_without_any_event() {
    use switchyard::discovery::Source;
    let s = Store::captured();
    let ttl = Duration::from_secs(4);
    let path = fs::read_dir(s.0.join("v1/instances")).unwrap().next().unwrap().unwrap().path();
    // Due one second from now; every other record in four.
    set_age(&path, ttl - Duration::from_secs(1));
    let mut store = s.store().with_ttl(ttl).with_wake(InotifyWake::new(&s.0).with_rescan(Duration::from_millis(50)));
    let started = std::time::Instant::now();
    let first = Source::scan_changed(&mut store, SystemTime::now()).unwrap().expect("the first scan always builds");
    assert_eq!(first.instances.len(), 4);
    loop {
        Source::wait(&mut store, Duration::from_millis(100));
        if let Some(snap) = Source::scan_changed(&mut store, SystemTime::now()).unwrap() {
            assert_eq!(snap.instances.len(), 3, "only the aged record is gone");
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the aged record was still listed {:?} after the scan; its TTL was due after 1 s",
            started.elapsed()
        );
    }
}

#[test]
fn an_inotify_watched_store_rereads_only_the_files_events_name() {
    use switchyard::discovery::Source;
    let s = Store::captured();
    let mut store = s.store().with_wake(InotifyWake::new(&s.0).with_rescan(Duration::from_millis(50)));
    let short = Duration::from_millis(300);
    let first = Source::scan_changed(&mut store, SystemTime::now()).unwrap().expect("the first scan always builds");
    assert_eq!(first.instances.len(), 4);
    Source::wait(&mut store, short);
    assert!(Source::scan_changed(&mut store, SystemTime::now()).unwrap().is_none(), "nothing changed");
    // Rewritten in place with new bytes of the same size: the event names the file, so it
    // is read again.
    let path = fs::read_dir(s.0.join("v1/instances")).unwrap().next().unwrap().unwrap().path();
    let text = String::from_utf8(fs::read(&path).unwrap()).unwrap();
    assert!(text.contains("\"cuda\""));
    // Rewritten with the same bytes (Dynamo's keep-alive of event channels): nothing changed.
    fs::write(&path, text.as_bytes()).unwrap();
    Source::wait(&mut store, short);
    assert!(Source::scan_changed(&mut store, SystemTime::now()).unwrap().is_none(), "same bytes");
    let same_size = text.replace("\"cuda\"", "\"tpu0\"");
    fs::write(&path, same_size.as_bytes()).unwrap();
    Source::wait(&mut store, short);
    let snap = Source::scan_changed(&mut store, SystemTime::now()).unwrap().expect("a rewritten record");
    assert!(snap.instances.iter().any(|e| e.raw["device_type"] == "tpu0"));
    // A write through a hard link outside the store raises no event on the bucket (the same
    // blind spot Dynamo's inotify watch has): the cached copy stays until a full read.
    let elsewhere = Store::empty(); // an unwatched directory on the same file system
    let outside = elsewhere.0.join("link-outside");
    fs::hard_link(&path, &outside).unwrap();
    fs::write(&outside, text.replace("\"cuda\"", "\"npu1\"").as_bytes()).unwrap();
    Source::wait(&mut store, short);
    assert!(Source::scan_changed(&mut store, SystemTime::now()).unwrap().is_none(), "served from the cache");
    // A full read (here: a plain `scan`, which no wake precedes) sees it.
    let snap = store.scan(SystemTime::now()).unwrap();
    assert!(snap.instances.iter().any(|e| e.raw["device_type"] == "npu1"));
    fs::remove_file(&outside).unwrap();
    // A record published the way workers do (temporary, then rename) is read.
    let tmp = s.write("v1/instances", ".tmp_0123456789abcdef", &endpoint("ns2", "backend", 0x78));
    fs::rename(&tmp, s.0.join("v1/instances").join(key_file("ns2", "backend", 0x78))).unwrap();
    Source::wait(&mut store, short);
    let snap = Source::scan_changed(&mut store, SystemTime::now()).unwrap().expect("a new record");
    assert_eq!(snap.instances.len(), 5);
    // Cached records still expire: liveness comes from a fresh stat on every scan.
    set_age(&path, DEFAULT_TTL + Duration::from_secs(1));
    Source::wait(&mut store, short);
    let snap = Source::scan_changed(&mut store, SystemTime::now()).unwrap().expect("an expired record");
    assert_eq!(snap.instances.len(), 4);
}
