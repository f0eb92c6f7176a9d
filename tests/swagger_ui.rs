//! Swagger UI at `/docs` over real sockets, as Dynamo 1.6.1 serves it
//! (docs/dynamo/swagger-ui.md): the redirect, every file's status, type and bytes (against
//! `assets/swagger-ui/`, whose `SHA256SUMS` lists what 1.6.1 serves), the initializer's
//! settings, misses, percent-decoded names, HEAD, other methods, HTTP/2, and that none of it
//! is in `/openapi.json` or counted as a failed request.

mod common;

use std::io::Read;
use std::path::PathBuf;

use common::{h2c, start, Client};

fn assets() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("assets/swagger-ui")
}

/// The files 1.6.1 serves under `/docs/` (the names of `SHA256SUMS`), and the initializer.
fn served_names() -> Vec<String> {
    let sums = std::fs::read_to_string(assets().join("SHA256SUMS")).expect("assets/swagger-ui/SHA256SUMS");
    let mut names: Vec<String> = sums.lines().filter_map(|l| l.split_whitespace().nth(1)).map(str::to_string).collect();
    assert_eq!(names.len(), 17, "SHA256SUMS lists {names:?}");
    names.push("swagger-initializer.js".into());
    names
}

/// A file's bytes as the package has them (`NAME`, or `NAME.gz` inflated).
fn expected(name: &str) -> Vec<u8> {
    let dir = assets();
    if let Ok(b) = std::fs::read(dir.join(name)) {
        return b;
    }
    let gz =
        std::fs::read(dir.join(format!("{name}.gz"))).unwrap_or_else(|e| panic!("no assets/swagger-ui/{name}: {e}"));
    let mut out = Vec::new();
    flate2::read::GzDecoder::new(&gz[..]).read_to_end(&mut out).expect("a gzip file");
    out
}

/// The content type 1.6.1 sends for a file, by its extension.
fn content_type(name: &str) -> &'static str {
    match name.rsplit('.').next() {
        Some("html") => "text/html",
        Some("css") => "text/css",
        Some("js") => "text/javascript",
        Some("map") => "text/plain",
        Some("png") => "image/png",
        _ => panic!("no type for {name}"),
    }
}

fn get(c: &mut Client, path: &str) -> common::Resp {
    c.roundtrip(format!("GET {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes())
}

/// A bodiless answer with no content type, as 1.6.1's redirects, misses and 405s are.
fn assert_bare(r: &common::Resp, status: u16, what: &str) {
    assert_eq!(r.status, status, "{what}: {}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.header("content-length"), Some("0"), "{what}");
    assert_eq!(r.header("content-type"), None, "{what}");
    assert!(r.body.is_empty(), "{what}");
}

#[test]
fn docs_redirect_and_page() {
    let s = start("epoll", &[], &[]);
    let mut c = Client::connect(s.addr);
    for path in ["/docs", "/docs?x=1"] {
        let r = get(&mut c, path);
        assert_bare(&r, 303, path);
        assert_eq!(r.header("location"), Some("/docs/"), "{path}");
    }
    let index = expected("index.html");
    for path in ["/docs/", "/docs/?x=1", "/docs//", "/docs/index.html"] {
        let r = get(&mut c, path);
        assert_eq!((r.status, r.header("content-type")), (200, Some("text/html")), "{path}");
        assert_eq!(r.body, index, "{path}");
    }
    // The page loads these, relative to /docs/.
    let page = String::from_utf8(index).unwrap();
    for name in ["swagger-ui.css", "index.css", "favicon-32x32.png", "swagger-ui-bundle.js", "swagger-initializer.js"] {
        assert!(page.contains(name), "index.html does not load {name}");
    }
    s.shutdown();
}

#[test]
fn every_file_with_its_type_and_bytes() {
    let s = start("epoll", &[], &[]);
    let mut c = Client::connect(s.addr);
    for name in served_names() {
        let r = get(&mut c, &format!("/docs/{name}"));
        assert_eq!(r.status, 200, "/docs/{name}");
        assert_eq!(r.header("content-type"), Some(content_type(&name)), "/docs/{name}");
        assert_eq!(r.header("content-length"), Some(expected(&name).len().to_string().as_str()), "/docs/{name}");
        assert!(r.body == expected(&name), "/docs/{name}: not the vendored bytes");
        // Asked again (an inflated file is kept): the same bytes.
        assert!(get(&mut c, &format!("/docs/{name}?v=2")).body == r.body, "/docs/{name} asked again");
    }
    // The bundle is Swagger UI 5.17.14, as 1.6.1's.
    let bundle = get(&mut c, "/docs/swagger-ui-bundle.js").body;
    let version = br#"PACKAGE_VERSION:"5.17.14""#;
    assert!(bundle.windows(version.len()).any(|w| w == version), "the bundle is not Swagger UI 5.17.14");
    s.shutdown();
}

#[test]
fn initializer_reads_openapi_json() {
    let s = start("epoll", &[], &[]);
    let mut c = Client::connect(s.addr);
    let init = String::from_utf8(get(&mut c, "/docs/swagger-initializer.js").body).unwrap();
    for setting in [
        r##"dom_id: "#swagger-ui""##,
        r#"url: "/openapi.json""#,
        "deepLinking: true",
        r#"layout: "StandaloneLayout""#,
        "presets: [SwaggerUIBundle.presets.apis, SwaggerUIStandalonePreset]",
        "plugins: [SwaggerUIBundle.plugins.DownloadUrl]",
    ] {
        assert!(init.contains(setting), "the initializer lacks {setting}:\n{init}");
    }
    // What it points at: this server's document, which does not list /docs (nor does 1.6.1's).
    let r = get(&mut c, "/openapi.json");
    assert_eq!(r.status, 200);
    let doc = r.json();
    let paths = doc["paths"].as_object().expect("paths");
    assert!(paths.contains_key("/v1/chat/completions"), "{paths:?}");
    assert!(!paths.keys().any(|p| p.starts_with("/docs")), "/openapi.json lists {:?}", paths.keys());
    s.shutdown();
}

#[test]
fn misses_methods_and_names() {
    let s = start("epoll", &[], &[]);
    let mut c = Client::connect(s.addr);
    for path in [
        "/docs/nope.js",
        "/docs/nope",
        "/docs/LICENSE",
        "/docs/package.json",
        "/docs/oauth2-redirect.js",
        "/docs/INDEX.CSS",
        "/docs//index.css",
        "/docs/index.css/",
        "/docs/a/b",
        "/docs/dist/index.css",
        "/docs/%2Findex.css",
        "/docs/index.css%00",
        "/docs/%zz",
        "/docs/%",
    ] {
        assert_bare(&get(&mut c, path), 404, path);
    }
    // Names are percent-decoded; one that is not UTF-8 after it is a 400 in plain text.
    for path in ["/docs/%69ndex.css", "/docs/index%2ecss", "/docs/index%2Ecss"] {
        let r = get(&mut c, path);
        assert_eq!((r.status, r.body.clone()), (200, expected("index.css")), "{path}");
    }
    for path in ["/docs/%ff", "/docs/a%ffb"] {
        let r = get(&mut c, path);
        assert_eq!(r.status, 400, "{path}");
        assert_eq!(r.header("content-type"), Some("text/plain; charset=utf-8"));
        assert_eq!(r.body, b"Invalid URL: Invalid UTF-8 in `rest`");
    }
    // Only GET and HEAD, checked before the name: 405, `Allow: GET,HEAD`, no body.
    for (method, path) in [
        ("POST", "/docs"),
        ("POST", "/docs/"),
        ("PUT", "/docs/swagger-ui.css"),
        ("DELETE", "/docs/index.html"),
        ("OPTIONS", "/docs/"),
        ("POST", "/docs/nope.js"),
        ("POST", "/docs/%ff"),
    ] {
        let r = c.roundtrip(format!("{method} {path} HTTP/1.1\r\nHost: t\r\nContent-Length: 0\r\n\r\n").as_bytes());
        assert_bare(&r, 405, &format!("{method} {path}"));
        assert_eq!(r.header("allow"), Some("GET,HEAD"), "{method} {path}");
    }
    // Neighbours are not Swagger UI's: the JSON 404 of an unknown route.
    for path in ["/docsx", "/Docs", "/doc"] {
        let r = get(&mut c, path);
        assert_eq!(r.status, 404, "{path}");
        assert_eq!(r.json()["message"], format!("Route not found: GET {path}"));
    }
    // Of all these, only the three unknown routes count as failed requests (as in 1.6.1).
    let metrics = String::from_utf8(get(&mut c, "/metrics").body).unwrap();
    let failures: Vec<&str> = metrics.lines().filter(|l| l.starts_with("dynamo_frontend_failures_total{")).collect();
    assert_eq!(failures, [r#"dynamo_frontend_failures_total{class="NotFound",reason="request.not_found"} 3"#]);
    s.shutdown();
}

#[test]
fn head_states_the_length_and_sends_no_body() {
    let s = start("epoll", &[], &[]);
    let mut c = Client::connect(s.addr);
    let head = |c: &mut Client, path: &str| {
        c.send(format!("HEAD {path} HTTP/1.1\r\nHost: t\r\n\r\n").as_bytes());
        c.read_response_opts(true)
    };
    for name in ["swagger-ui-bundle.js", "index.html", "swagger-ui-bundle.js.map"] {
        let r = head(&mut c, &format!("/docs/{name}"));
        assert_eq!(r.status, 200, "{name}");
        assert_eq!(r.header("content-type"), Some(content_type(name)));
        assert_eq!(r.header("content-length"), Some(expected(name).len().to_string().as_str()), "{name}");
    }
    let r = head(&mut c, "/docs");
    assert_eq!((r.status, r.header("location")), (303, Some("/docs/")));
    assert_eq!(head(&mut c, "/docs/nope.js").status, 404);
    assert_eq!(head(&mut c, "/docs/%ff").status, 400);
    // No body followed any of those heads: the next answer on the connection is whole.
    let r = get(&mut c, "/docs/index.css");
    assert_eq!((r.status, r.body), (200, expected("index.css")));
    s.shutdown();
}

#[test]
fn over_http2_and_io_uring() {
    let s = start("io-uring", &[], &[]);
    let rt = h2c::runtime();
    rt.block_on(async {
        let mut c = h2c::connect(s.addr).await;
        let r = h2c::request(&mut c, "GET", "/docs", "", vec![]).await;
        assert_eq!((r.status, r.headers.get("location").map(|v| v.to_str().unwrap())), (303, Some("/docs/")));
        for name in ["swagger-ui-bundle.js", "swagger-ui-bundle.js.map"] {
            let r = h2c::request(&mut c, "GET", &format!("/docs/{name}"), "", vec![]).await;
            assert_eq!(r.status, 200, "{name}");
            assert_eq!(r.headers.get("content-type").map(|v| v.to_str().unwrap()), Some(content_type(name)));
            assert!(r.body == expected(name), "{name} over HTTP/2: not the vendored bytes");
        }
        assert_eq!(h2c::request(&mut c, "GET", "/docs/nope.js", "", vec![]).await.status, 404);
    });
    s.shutdown();
}
