//! `/openapi.json` against the paths Dynamo 1.6.1's lists for the same options
//! (tests/data/openapi-paths-1.6.1.txt: `python -m dynamo.frontend --enable-anthropic-api` in
//! front of a real mocker), and every listed path served (no `Route not found`).

mod common;

use common::{start, Client};

/// 1.6.1's routes switchyard does not serve yet (docs/dynamo/surfaces.md describes them); the
/// list only shrinks.
const NOT_YET: &[&str] = &[
    "/v1/audio/speech",
    "/v1/classify",
    "/v1/images/edits",
    "/v1/images/generations",
    "/v1/pooling",
    "/v1/realtime",
    "/v1/rerank",
    "/v1/videos",
    "/v1/videos/stream",
];

#[test]
fn the_document_lists_1_6_1s_paths_and_each_is_served() {
    let recorded = include_str!("data/openapi-paths-1.6.1.txt");
    let s = start("epoll", &["--enable-anthropic-api"], &[]);
    let doc = Client::connect(s.addr).roundtrip(b"GET /openapi.json HTTP/1.1\r\n\r\n").json();
    let mut ours: Vec<&str> = doc["paths"].as_object().expect("paths").keys().map(String::as_str).collect();
    ours.sort_unstable();
    let want: Vec<&str> = recorded.lines().filter(|p| !NOT_YET.contains(p)).collect();
    assert_eq!(ours, want, "switchyard's paths against 1.6.1's (less those not served yet)");
    for path in ours {
        let path = path.replace("{*model_id}", "some/model").replace("{model_id}", "m");
        let methods = doc["paths"][path.as_str()].as_object().map(|m| m.keys().cloned().collect::<Vec<_>>());
        let method = match methods.as_deref() {
            Some([m, ..]) if m == "post" => "POST",
            _ => "GET",
        };
        let head =
            format!("{method} {path} HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{{}}");
        let r = Client::connect(s.addr).roundtrip(head.as_bytes());
        let body = String::from_utf8_lossy(&r.body);
        assert!(!body.contains("Route not found"), "{method} {path}: {} {body}", r.status);
    }
    s.shutdown();
}
