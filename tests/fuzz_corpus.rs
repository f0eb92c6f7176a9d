//! The fuzzers' inputs on the stable toolchain: every committed corpus file
//! (`fuzz/corpus/<target>/`) and every crash the fuzzers found (`tests/data/fuzz/<target>/`)
//! replayed through the target function the fuzzer runs (`switchyard::fuzzing`), so
//! `cargo test` keeps them passing without cargo-fuzz or a nightly toolchain.

use std::path::{Path, PathBuf};

use switchyard::fuzzing::{target, TARGETS};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).to_path_buf()
}

/// The files of `dir`, sorted (none when it does not exist).
fn files(dir: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else { return Vec::new() };
    let mut out: Vec<PathBuf> = entries.map(|e| e.expect("a directory entry").path()).filter(|p| p.is_file()).collect();
    out.sort();
    out
}

/// Runs every file under `base/<target>/` through its target; returns how many ran and the
/// files that panicked.
fn replay(base: &Path) -> (usize, Vec<String>) {
    let mut ran = 0;
    let mut failed = Vec::new();
    for dir in files_and_dirs(base) {
        let name = dir.file_name().and_then(|n| n.to_str()).expect("a UTF-8 directory name").to_string();
        let run = target(&name).unwrap_or_else(|| panic!("{} names no fuzz target", dir.display()));
        for file in files(&dir) {
            let data = std::fs::read(&file).expect("a readable input");
            ran += 1;
            if std::panic::catch_unwind(|| run(&data)).is_err() {
                failed.push(file.display().to_string());
            }
        }
    }
    (ran, failed)
}

fn files_and_dirs(base: &Path) -> Vec<PathBuf> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(base)
        .unwrap_or_else(|e| panic!("{}: {e}", base.display()))
        .map(|e| e.expect("a directory entry").path())
        .filter(|p| p.is_dir())
        .collect();
    dirs.sort();
    dirs
}

#[test]
fn every_corpus_file_replays_through_its_target() {
    let (ran, failed) = replay(&root().join("fuzz/corpus"));
    assert!(failed.is_empty(), "corpus inputs that panic: {failed:#?}");
    assert!(ran >= TARGETS.len(), "only {ran} corpus files");
}

#[test]
fn every_crash_found_replays_through_its_target() {
    let (ran, failed) = replay(&root().join("tests/data/fuzz"));
    assert!(failed.is_empty(), "crash regressions that panic again: {failed:#?}");
    assert!(ran > 0, "no crash regressions under tests/data/fuzz");
}

#[test]
fn each_target_has_a_fuzzer_and_a_corpus() {
    for (name, _) in TARGETS {
        let fuzzer = root().join("fuzz/fuzz_targets").join(format!("{name}.rs"));
        let source = std::fs::read_to_string(&fuzzer).unwrap_or_else(|e| panic!("{}: {e}", fuzzer.display()));
        assert!(source.contains(&format!("::{name}(data)")), "{} does not run `{name}`", fuzzer.display());
        assert!(!files(&root().join("fuzz/corpus").join(name)).is_empty(), "fuzz/corpus/{name} is empty");
    }
    let manifest = std::fs::read_to_string(root().join("fuzz/Cargo.toml")).expect("fuzz/Cargo.toml");
    assert_eq!(manifest.matches("[[bin]]").count(), TARGETS.len(), "fuzz/Cargo.toml lists another set of targets");
}

#[test]
fn the_committed_corpus_stays_small() {
    let mut bytes = 0;
    for dir in files_and_dirs(&root().join("fuzz/corpus")) {
        bytes += files(&dir).iter().map(|f| f.metadata().expect("metadata").len()).sum::<u64>();
    }
    assert!(bytes < 4 * 1024 * 1024, "fuzz/corpus holds {bytes} bytes");
}

mod chat_templates {
    use std::collections::BTreeMap;

    use switchyard::tokenize::template::{ChatTemplate, RenderArgs, MAX_RENDER_BYTES};

    /// `source` rendered for `messages` (no tools, a generation prompt).
    fn render_messages(source: &str, messages: &[serde_json::Value]) -> Result<String, String> {
        let special = BTreeMap::new();
        let args = RenderArgs::conversation(messages, &special, Some(0));
        ChatTemplate::compile(source)?.render(&args).map_err(|e| e.0)
    }

    fn render(source: &str) -> Result<String, String> {
        render_messages(source, &[serde_json::json!({"role": "user", "content": "hi"})])
    }

    /// Two nested `range` loops run 10^10 times: the render ends in an error when its fuel
    /// is spent, instead of holding its shard (tests/data/fuzz/chat_template/nested_loops
    /// hung the chat_template fuzz target before the fuel was set).
    #[test]
    fn a_template_that_loops_without_end_runs_out_of_fuel() {
        let e = render("{% for a in range(99999) %}{% for b in range(99999) %}{% endfor %}{% endfor %}").unwrap_err();
        assert!(e.contains("fuel"), "{e}");
    }

    /// A 100 MB string printed 99999 times: the render stops at the output limit, instead of
    /// growing the prompt until memory runs out (tests/data/fuzz/chat_template/endless_output
    /// took the chat_template fuzz target past its memory limit before).
    #[test]
    fn a_template_that_prints_without_end_stops_at_the_output_limit() {
        let e = render(r#"{% set s = "a" * 99999999 %}{% for i in range(99999) %}{{ s }}{% endfor %}"#).unwrap_err();
        assert_eq!(e, format!("the chat template renders more than {MAX_RENDER_BYTES} bytes"));
        let e = render("{% macro f(n) %}{{ f(n) }}{% endmacro %}{{ f(1) }}").unwrap_err();
        assert!(e.contains("recursion"), "{e}");
    }

    /// The limits leave real renders alone: a long conversation renders in full.
    #[test]
    fn a_long_conversation_renders_within_the_limits() {
        let source = "{% for m in messages %}<|{{ m.role }}|>{{ m.content }}\n{% endfor %}";
        let messages: Vec<_> =
            (0..20_000).map(|i| serde_json::json!({"role": "user", "content": format!("turn {i}")})).collect();
        let text = render_messages(source, &messages).unwrap();
        assert_eq!(text.lines().count(), 20_000);
        assert!(text.ends_with("<|user|>turn 19999\n"), "{}", &text[text.len() - 40..]);
    }
}

mod http1 {
    use switchyard::http1::parse::{parse_head, Limits};
    use switchyard::Kind;

    /// A request line naming HTTP/2 was answered 505 when it arrived whole and 400 when a
    /// read ended inside its version (`HTTP/2.`): found by the http1 target, which feeds
    /// the same bytes whole and in pieces (tests/data/fuzz/http1/http2_version_split), and
    /// again, after a first fix, with garbage before `HTTP/2` and with more words after the
    /// version.
    #[test]
    fn an_http2_version_is_505_however_the_line_is_split() {
        let line = b"HEAD /live HTTP/2.0\r\n\r\n";
        for cut in 0..line.iter().position(|&b| b == b'\r').unwrap() {
            match parse_head(&line[..cut], &Limits::default()) {
                Ok(None) => {}
                other => {
                    panic!("{:?} answered before the line ended: {other:?}", String::from_utf8_lossy(&line[..cut]))
                }
            }
        }
        let e = parse_head(line, &Limits::default()).unwrap_err();
        assert_eq!(e.kind(), Kind::VersionNotSupported);
        // A version that is not HTTP/2 itself, though it ends like one, is malformed however
        // it is split (tests/data/fuzz/http1/http2_version_garbage_split: 505 whole, 400 split).
        let garbage_then_2 = b"GET /v/models \xe9\xe9HTTP/2\r\n\r\n";
        for cut in [15, 20, garbage_then_2.len()] {
            let e = parse_head(&garbage_then_2[..cut], &Limits::default()).unwrap_err();
            assert_eq!(e.kind(), Kind::BadRequest, "cut at {cut}");
        }
        // The version is what follows the target, whatever comes after it on the line
        // (tests/data/fuzz/http1/version_then_more_words: answered only once split).
        let then_more = b"GET /health  HTT\x07POST /vCoPnnection: ";
        for cut in [17, 35, then_more.len()] {
            let e = parse_head(&then_more[..cut], &Limits::default()).unwrap_err();
            assert_eq!(e.kind(), Kind::BadRequest, "cut at {cut}");
        }
        for garbage in [&b"GET / HTTP/2x\r\n\r\n"[..], b"GET / HTTP/9.9\r\n\r\n", b"GET / HTTP/2.1"] {
            let e = parse_head(garbage, &Limits::default()).unwrap_err();
            assert_eq!(e.kind(), Kind::BadRequest, "{}", String::from_utf8_lossy(garbage));
        }
    }
}
