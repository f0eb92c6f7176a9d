//! The etcd backend against a real etcd (Debian `etcd-server`): the JSON-gateway client,
//! watches, leases, the frontend's `EtcdView` and a mock worker registered through etcd.

mod common;

use std::io;
use std::time::{Duration, Instant};

use common::etcd::Etcd;
use switchyard::discovery::etcd::{EtcdClient, EtcdLease, EtcdView, Event, EventKind};
use switchyard::discovery::records::{
    instance_hex, instance_key, parse_record, Record, BUCKET_EVENT_CHANNELS, BUCKET_INSTANCES, BUCKET_MDC,
};
use switchyard::worker::{MockConfig, MockWorker};

/// The view's records as owned tuples.
fn snapshot(view: &EtcdView) -> Vec<(String, String, Vec<u8>)> {
    view.records().map(|(b, k, v)| (b.to_string(), k.to_string(), v.to_vec())).collect()
}

/// Applies watch events until `done` holds (at most 15 s).
fn wait_until(view: &mut EtcdView, what: &str, done: impl Fn(&EtcdView) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(15);
    while !done(view) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}; records: {:?}", keys(view));
        if let Err(e) = view.wait(Duration::from_millis(500)) {
            eprintln!("view.wait: {e}");
        }
    }
}

fn keys(view: &EtcdView) -> Vec<String> {
    view.records().map(|(b, k, _)| format!("{b}:{k}")).collect()
}

/// Collects the watch's events until `n` have arrived (at most 10 s).
fn events(watch: &mut switchyard::discovery::etcd::Watch, n: usize) -> Vec<Event> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut all = Vec::new();
    while all.len() < n {
        assert!(Instant::now() < deadline, "only {} of {n} events: {all:?}", all.len());
        all.extend(watch.next_events(Duration::from_millis(200)).unwrap());
    }
    all
}

#[test]
fn put_range_delete_round_trip() {
    let etcd = Etcd::start();
    let c = etcd.client();
    let (kvs, rev0) = c.range_prefix("t/").unwrap();
    assert!(kvs.is_empty());
    let rev1 = c.put("t/a", b"one", None).unwrap();
    assert!(rev1 > rev0);
    c.put("t/b", &[0, 255, 10, b'"'], None).unwrap();
    let last = c.put("t0", b"outside the prefix", None).unwrap();
    let (kvs, rev) = c.range_prefix("t/").unwrap();
    let got: Vec<_> = kvs.iter().map(|kv| (kv.key.as_str(), kv.value.clone())).collect();
    assert_eq!(got, [("t/a", b"one".to_vec()), ("t/b", vec![0, 255, 10, b'"'])]);
    assert_eq!(rev, last, "the store revision of the read");
    assert!(kvs[0].mod_revision < kvs[1].mod_revision && kvs[0].create_revision == kvs[0].mod_revision);
    assert_eq!(c.delete("t/a").unwrap(), 1);
    assert_eq!(c.delete("t/a").unwrap(), 0);
    let (kvs, _) = c.range_prefix("t/").unwrap();
    assert_eq!(kvs.len(), 1);

    // Endpoints are tried in order: a dead one first is skipped.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let two = EtcdClient::new(&format!("http://127.0.0.1:{dead},{}", etcd.endpoint())).unwrap();
    assert_eq!(two.range_prefix("t/").unwrap().0.len(), 1);
}

#[test]
fn watch_sees_put_and_delete() {
    let etcd = Etcd::start();
    let c = etcd.client();
    c.put("w/before", b"old", None).unwrap();
    let (_, rev) = c.range_prefix("w/").unwrap();
    let mut watch = c.watch_prefix("w/", rev + 1).unwrap();
    assert!(watch.next_events(Duration::from_millis(100)).unwrap().is_empty());
    c.put("w/k", b"v1", None).unwrap();
    c.put("x/elsewhere", b"not watched", None).unwrap();
    c.put("w/k", b"v2", None).unwrap();
    c.delete("w/k").unwrap();
    let ev = events(&mut watch, 3);
    let kinds: Vec<_> = ev.iter().map(|e| (e.kind, e.key.as_str(), e.value.as_slice())).collect();
    assert_eq!(
        kinds,
        [(EventKind::Put, "w/k", &b"v1"[..]), (EventKind::Put, "w/k", b"v2"), (EventKind::Delete, "w/k", b"")]
    );
    assert_eq!(ev[2].prev_value.as_deref(), Some(&b"v2"[..]));
    assert!(ev[0].mod_revision < ev[1].mod_revision && ev[1].mod_revision < ev[2].mod_revision);

    // A stream that ends is an error (the caller resyncs), not silence.
    drop(etcd);
    let deadline = Instant::now() + Duration::from_secs(5);
    let err = loop {
        match watch.next_events(Duration::from_millis(200)) {
            Err(e) => break e,
            Ok(ev) => assert!(ev.is_empty() && Instant::now() < deadline, "no error after etcd stopped: {ev:?}"),
        }
    };
    assert!(err.to_string().contains("lost"), "{err}");
}

#[test]
fn view_lists_follows_and_resyncs() {
    let mut etcd = Etcd::start();
    let c = etcd.client();
    c.put("v1/mdc/dynamo/backend/generate/1a", b"card-1a", None).unwrap();
    c.put("v1/instances/dynamo/backend/generate/1a", b"inst-1a", None).unwrap();
    c.put("v1/event_channels/dynamo/backend/kv/1a", b"chan-1a", None).unwrap();
    c.put("v1/other/x", b"not a bucket", None).unwrap();
    c.put("v1/mdcx", b"not in the bucket", None).unwrap();

    let mut view = EtcdView::start(&etcd.endpoint()).unwrap();
    assert!(view.lease_id() > 0);
    assert!(c.lease_keepalive(view.lease_id()).unwrap() > 0, "the frontend holds a live lease");
    let expect = |list: &[(&str, &str, &[u8])]| -> Vec<(String, String, Vec<u8>)> {
        let mut v: Vec<_> = list.iter().map(|(b, k, v)| (b.to_string(), k.to_string(), v.to_vec())).collect();
        v.sort();
        v
    };
    assert_eq!(
        snapshot(&view),
        expect(&[
            (BUCKET_EVENT_CHANNELS, "dynamo/backend/kv/1a", b"chan-1a"),
            (BUCKET_INSTANCES, "dynamo/backend/generate/1a", b"inst-1a"),
            (BUCKET_MDC, "dynamo/backend/generate/1a", b"card-1a"),
        ])
    );
    assert_eq!(view.get(BUCKET_MDC, "dynamo/backend/generate/1a"), Some(&b"card-1a"[..]));
    assert!(!view.wait(Duration::from_millis(200)).unwrap(), "nothing changed");

    c.put("v1/instances/dynamo/backend/generate/2b", b"inst-2b", None).unwrap();
    wait_until(&mut view, "a new instance", |v| v.get(BUCKET_INSTANCES, "dynamo/backend/generate/2b").is_some());
    c.put("v1/other/y", b"ignored", None).unwrap();
    c.delete("v1/mdc/dynamo/backend/generate/1a").unwrap();
    wait_until(&mut view, "a card removed", |v| v.get(BUCKET_MDC, "dynamo/backend/generate/1a").is_none());
    // Writing the same value again is not a change.
    c.put("v1/instances/dynamo/backend/generate/2b", b"inst-2b", None).unwrap();
    assert!(!view.wait(Duration::from_millis(300)).unwrap());

    // etcd restarts (same data): every watch stream is cut. What changed meanwhile is
    // found by re-listing and diffing.
    etcd.restart();
    c.put("v1/mdc/dynamo/backend/generate/3c", b"card-3c", None).unwrap();
    c.delete("v1/instances/dynamo/backend/generate/1a").unwrap();
    c.put("v1/event_channels/dynamo/backend/kv/1a", b"chan-1a-v2", None).unwrap();
    let want = expect(&[
        (BUCKET_EVENT_CHANNELS, "dynamo/backend/kv/1a", b"chan-1a-v2"),
        (BUCKET_INSTANCES, "dynamo/backend/generate/2b", b"inst-2b"),
        (BUCKET_MDC, "dynamo/backend/generate/3c", b"card-3c"),
    ]);
    wait_until(&mut view, "the resync after a restart", |v| snapshot(v) == want);
    // And the new watches follow changes again.
    c.delete("v1/mdc/dynamo/backend/generate/3c").unwrap();
    wait_until(&mut view, "a change after the resync", |v| v.get(BUCKET_MDC, "dynamo/backend/generate/3c").is_none());

    // While etcd is down the records stay as they were, and `wait` reports the failure.
    etcd.kill();
    let before = snapshot(&view);
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match view.wait(Duration::from_millis(300)) {
            Err(_) => break,
            Ok(changed) => assert!(!changed && Instant::now() < deadline, "no error while etcd is down"),
        }
    }
    assert_eq!(snapshot(&view), before);
}

#[test]
fn lease_expiry_and_revoke_remove_keys() {
    let etcd = Etcd::start();
    let c = etcd.client();
    let mut view = EtcdView::start(&etcd.endpoint()).unwrap();

    // A process killed with -9: its keys go when the lease expires.
    let short = c.lease_grant(2).unwrap();
    c.put("v1/instances/dynamo/backend/generate/dead", b"x", Some(short)).unwrap();
    assert_eq!(c.range_prefix("v1/instances/").unwrap().0[0].lease, short);
    assert!(c.lease_keepalive(short).unwrap() > 0);
    wait_until(&mut view, "the key", |v| v.get(BUCKET_INSTANCES, "dynamo/backend/generate/dead").is_some());
    let t = Instant::now();
    wait_until(&mut view, "lease expiry", |v| v.get(BUCKET_INSTANCES, "dynamo/backend/generate/dead").is_none());
    assert!(t.elapsed() >= Duration::from_millis(1000), "expired too early: {:?}", t.elapsed());
    let e = c.lease_keepalive(short).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::NotFound, "{e}");

    // Revoking deletes at once.
    let lease = c.lease_grant(30).unwrap();
    c.put("v1/mdc/dynamo/backend/generate/rev", b"x", Some(lease)).unwrap();
    wait_until(&mut view, "the key", |v| v.get(BUCKET_MDC, "dynamo/backend/generate/rev").is_some());
    c.lease_revoke(lease).unwrap();
    wait_until(&mut view, "revocation", |v| v.get(BUCKET_MDC, "dynamo/backend/generate/rev").is_none());

    // EtcdLease renews every TTL/2: its key outlives the TTL; dropping it stops promptly.
    let kept = EtcdLease::grant(&c, 2).unwrap();
    c.put("v1/mdc/dynamo/backend/generate/kept", b"x", Some(kept.id())).unwrap();
    std::thread::sleep(Duration::from_secs(4));
    assert_eq!(c.range_prefix("v1/mdc/").unwrap().0.len(), 1, "a renewed lease keeps its key");
    let t = Instant::now();
    drop(kept);
    assert!(t.elapsed() < Duration::from_secs(1), "drop took {:?}", t.elapsed());
}

#[test]
fn mock_worker_registers_through_etcd() {
    let etcd = Etcd::start();
    let c = etcd.client();
    let mut view = EtcdView::start(&etcd.endpoint()).unwrap();
    let cfg = MockConfig { model_name: "mock-etcd".into(), ..Default::default() };
    let (mut worker, reg) = MockWorker::start_etcd(cfg, &etcd.endpoint()).unwrap();
    let id = worker.instance_id();
    assert_eq!(reg.lease_id as u64, id, "the instance id is the lease id");
    let key = instance_key("dynamo", "backend", "generate", id);
    assert!(key.ends_with(&instance_hex(id)));
    assert_eq!(reg.card_key, format!("v1/mdc/{key}"));
    assert_eq!(reg.instance_key, format!("v1/instances/{key}"));
    let (kvs, _) = c.range_prefix("v1/").unwrap();
    assert!(kvs.iter().all(|kv| kv.lease == reg.lease_id), "both keys are on the lease");

    wait_until(&mut view, "the worker's records", |v| {
        v.get(BUCKET_MDC, &key).is_some() && v.get(BUCKET_INSTANCES, &key).is_some()
    });
    let (card, _) = parse_record(view.get(BUCKET_MDC, &key).unwrap()).unwrap();
    let Record::Model(card) = card else { panic!("not a model record") };
    assert_eq!((card.instance_id, card.card_json.display_name.as_str()), (id, "mock-etcd"));
    let (inst, _) = parse_record(view.get(BUCKET_INSTANCES, &key).unwrap()).unwrap();
    let Record::Endpoint(inst) = inst else { panic!("not an endpoint record") };
    assert_eq!(inst.instance_id, id);
    assert_eq!(inst.tcp().unwrap().addr, worker.addr().to_string());
    assert_eq!(inst.tcp().unwrap().path, worker.endpoint_path());

    // A clean stop deletes the keys and revokes the lease.
    worker.stop();
    wait_until(&mut view, "the records removed", |v| v.records().all(|(_, k, _)| k != key));
    assert_eq!(c.lease_keepalive(reg.lease_id).unwrap_err().kind(), io::ErrorKind::NotFound);

    // A worker started with a chosen id registers under a lease of that id.
    let cfg = MockConfig { instance_id: Some(0x6a6c_a1ff_fe9d_3106), ..Default::default() };
    let mut worker = MockWorker::start(cfg).unwrap();
    let reg = worker.register_etcd(&etcd.endpoint()).unwrap();
    assert_eq!(reg.lease_id, 7668682386365559046);
    wait_until(&mut view, "the second worker", |v| {
        v.get(BUCKET_INSTANCES, "dynamo/backend/generate/6a6ca1fffe9d3106").is_some()
    });
    worker.stop();
    wait_until(&mut view, "the second worker removed", |v| v.records().next().is_none());
    let big = MockWorker::start(MockConfig { instance_id: Some(u64::MAX), ..Default::default() }).unwrap();
    assert_eq!(big.register_etcd(&etcd.endpoint()).unwrap_err().kind(), io::ErrorKind::InvalidInput);

    let frontend_lease = view.lease_id();
    view.shutdown().unwrap();
    assert_eq!(c.lease_keepalive(frontend_lease).unwrap_err().kind(), io::ErrorKind::NotFound);
}

/// `--router-replica-sync` on etcd: the frontend's `active_sequences_events` channel is put
/// under its own lease for each served endpoint, read back by a view as an EventChannel
/// record, and deleted when the announcer stops.
#[test]
fn replica_sync_channel_is_announced_under_the_frontends_lease() {
    use switchyard::discovery::announce::{Announce, Announcer, Channel, Store};
    let etcd = Etcd::start();
    let mut view = EtcdView::start(&etcd.endpoint()).unwrap();
    let channel = Channel {
        topic: "active_sequences_events",
        publisher_id: 0x1d39493244da9c,
        endpoint: "tcp://127.0.0.1:5".into(),
    };
    let key = "namespace/dynamo/component/backend/endpoint/generate/topic/active_sequences_events/1d39493244da9c";
    let a = Announcer::start(Store::Etcd(view.client().clone(), view.lease_id()), vec![Announce::Channel(channel)])
        .unwrap();
    a.sender().send([("dynamo".to_string(), "backend".to_string(), "generate".to_string())].into()).unwrap();
    wait_until(&mut view, "the channel record", |v| v.get(BUCKET_EVENT_CHANNELS, key).is_some());
    let (record, _) = parse_record(view.get(BUCKET_EVENT_CHANNELS, key).unwrap()).unwrap();
    assert!(matches!(record, Record::EventChannel(_)));
    let raw: serde_json::Value = serde_json::from_slice(view.get(BUCKET_EVENT_CHANNELS, key).unwrap()).unwrap();
    assert_eq!(raw["transport"]["config"]["endpoint"], "tcp://127.0.0.1:5");
    assert_eq!(raw["instance_id"], 0x1d39493244da9c_u64);
    drop(a);
    wait_until(&mut view, "the record deleted", |v| v.get(BUCKET_EVENT_CHANNELS, key).is_none());
}
