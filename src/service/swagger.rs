//! Swagger UI at `/docs`, as Dynamo 1.6.1 serves it (docs/dynamo/swagger-ui.md): `/docs`
//! redirects to `/docs/`, which is Swagger UI's page; the files under it are the dist folder
//! of swagger-ui 5.17.14, reading this server's `/openapi.json`.
//!
//! The files are in the binary (`assets/swagger-ui/`, `include_bytes!`): nothing is fetched
//! at run time. The page and what it loads are stored as they are and answered without a
//! copy; the other builds and the source maps, which only debuggers and bundlers ask for, are
//! stored gzipped and inflated the first time one is asked for, then kept for the process
//! (one `OnceLock` per file: the first asker inflates it, ~10 ms for the largest).
//!
//! Runs on the shard thread that took the request; nothing here is per-shard state.

use std::io::Read;
use std::sync::OnceLock;

use crate::error::{Error, Kind};
use crate::http1::{Body, Method, Response};

/// The path of the UI's page (`/docs` redirects here).
const DIR: &str = "/docs/";

/// How a file is kept in the binary.
enum Stored {
    /// As served.
    Plain(&'static [u8]),
    /// Gzipped; inflated on first use.
    Gzip(&'static [u8]),
}

/// One file under `/docs/`.
struct Asset {
    name: &'static str,
    /// As 1.6.1 labels it (by extension, no charset).
    content_type: &'static str,
    stored: Stored,
}

macro_rules! plain {
    ($name:literal, $ct:expr) => {
        Asset {
            name: $name,
            content_type: $ct,
            stored: Stored::Plain(include_bytes!(concat!("../../assets/swagger-ui/", $name))),
        }
    };
}

macro_rules! gzip {
    ($name:literal, $ct:expr) => {
        Asset {
            name: $name,
            content_type: $ct,
            stored: Stored::Gzip(include_bytes!(concat!("../../assets/swagger-ui/", $name, ".gz"))),
        }
    };
}

const HTML: &str = "text/html";
const CSS: &str = "text/css";
const JS: &str = "text/javascript";
/// Source maps: `text/plain`, as 1.6.1 labels them.
const MAP: &str = "text/plain";
const PNG: &str = "image/png";

const FILES: usize = 18;

/// Every file 1.6.1 serves under `/docs/`; any other name is a 404.
static ASSETS: [Asset; FILES] = [
    plain!("index.html", HTML),
    plain!("index.css", CSS),
    plain!("swagger-ui.css", CSS),
    plain!("swagger-ui-bundle.js", JS),
    plain!("swagger-ui-standalone-preset.js", JS),
    plain!("swagger-initializer.js", JS),
    plain!("favicon-16x16.png", PNG),
    plain!("favicon-32x32.png", PNG),
    plain!("oauth2-redirect.html", HTML),
    gzip!("swagger-ui.js", JS),
    gzip!("swagger-ui-es-bundle.js", JS),
    gzip!("swagger-ui-es-bundle-core.js", JS),
    gzip!("swagger-ui.css.map", MAP),
    gzip!("swagger-ui.js.map", MAP),
    gzip!("swagger-ui-bundle.js.map", MAP),
    gzip!("swagger-ui-es-bundle.js.map", MAP),
    gzip!("swagger-ui-es-bundle-core.js.map", MAP),
    gzip!("swagger-ui-standalone-preset.js.map", MAP),
];

/// The inflated bytes of each `Stored::Gzip` file, by its index in [`ASSETS`]; `None` if the
/// stored bytes did not inflate (a broken build).
static INFLATED: [OnceLock<Option<Box<[u8]>>>; FILES] = [const { OnceLock::new() }; FILES];

/// The answer to any request whose path is `/docs` or starts with `/docs/` (`path` without
/// the query), as 1.6.1's: GET and HEAD only (405 with `Allow: GET,HEAD` and no body
/// otherwise); `/docs` → 303 to `/docs/`; `/docs/` (and `/docs//`) → the page; a file by its
/// percent-decoded name; 400 in plain text when the decoded name is not UTF-8; 404 with no
/// body for any other name. None of these counts as a failed request.
pub fn serve(method: Method, path: &[u8]) -> Response {
    if !matches!(method, Method::Get | Method::Head) {
        return Response::new(405).with_header("allow", "GET,HEAD");
    }
    let Some(tail) = path.strip_prefix(DIR.as_bytes()) else {
        return Response::new(303).with_header("location", DIR);
    };
    let Some(name) = crate::util::percent_decode(tail) else {
        return Response::text(400, "text/plain; charset=utf-8", "Invalid URL: Invalid UTF-8 in `rest`");
    };
    let name = if name.is_empty() || name == "/" { "index.html" } else { name.as_str() };
    let Some(i) = ASSETS.iter().position(|a| a.name == name) else {
        return Response::new(404);
    };
    match bytes(i) {
        Some(body) => {
            Response { content_type: Some(ASSETS[i].content_type), body: Body::Static(body), ..Response::new(200) }
        }
        None => Response::error(&Error::new(Kind::Internal, format!("the embedded /docs/{name} does not inflate"))),
    }
}

/// The served bytes of `ASSETS[i]` (inflated once if stored gzipped).
fn bytes(i: usize) -> Option<&'static [u8]> {
    match ASSETS[i].stored {
        Stored::Plain(b) => Some(b),
        Stored::Gzip(gz) => INFLATED[i]
            .get_or_init(|| {
                let mut out = Vec::new();
                flate2::read::GzDecoder::new(gz).read_to_end(&mut out).ok().map(|_| out.into_boxed_slice())
            })
            .as_deref(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_stored_file_reads_back() {
        for (i, a) in ASSETS.iter().enumerate() {
            let body = bytes(i).unwrap_or_else(|| panic!("{} does not inflate", a.name));
            assert!(!body.is_empty(), "{} is empty", a.name);
        }
    }
}
