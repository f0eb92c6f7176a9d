//! The walls between modules, kept by a check: every `crate::<module>` path in `src/` (every
//! `switchyard::<module>` path in `src/main.rs`) must be allowed by the layering table of
//! `docs/architecture.md` for the module the file belongs to.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

/// `module → modules it may import`, read from the table in docs/architecture.md (rows
/// whose first cell is a backticked module name; the last cell lists the allowed ones).
fn allowed() -> BTreeMap<String, BTreeSet<String>> {
    let doc = include_str!("../docs/architecture.md");
    let mut out = BTreeMap::new();
    for line in doc.lines() {
        let cells: Vec<&str> = line.split('|').map(str::trim).collect();
        if cells.len() < 4 || !cells[1].starts_with('`') {
            continue;
        }
        let module = cells[1].trim_matches('`').to_string();
        let imports = cells[cells.len() - 2]
            .split(',')
            .map(|s| s.trim().trim_matches('`').to_string())
            .filter(|s| !s.is_empty() && s != "—")
            .collect();
        out.insert(module, imports);
    }
    out
}

/// The crate modules a source text refers to through `prefix::` (comments left out).
fn references(text: &str, prefix: &str) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    let code: String = text
        .lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .map(|l| match l.find("//") {
            // A `//` inside a string (a URL) is kept; a trailing comment is not code.
            Some(i) if !l[..i].contains('"') => &l[..i],
            _ => l,
        })
        .collect::<Vec<_>>()
        .join("\n");
    let pat = format!("{prefix}::");
    let mut rest = code.as_str();
    while let Some(i) = rest.find(&pat) {
        let before = rest[..i].chars().last();
        rest = &rest[i + pat.len()..];
        if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
            continue; // part of a longer name
        }
        if let Some(group) = rest.strip_prefix('{') {
            let end = group.find('}').unwrap_or(group.len());
            for item in group[..end].split(',') {
                let name: String = item.trim().chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
                if !name.is_empty() {
                    out.insert(name);
                }
            }
        } else {
            let name: String = rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').collect();
            out.insert(name);
        }
    }
    out
}

fn rust_files(dir: &Path, out: &mut Vec<std::path::PathBuf>) {
    for entry in std::fs::read_dir(dir).expect("src/ is readable") {
        let path = entry.expect("a directory entry").path();
        if path.is_dir() {
            rust_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "rs") {
            out.push(path);
        }
    }
}

/// Every import that breaks the table, as `file: crate::module`.
fn violations(allowed: &BTreeMap<String, BTreeSet<String>>) -> Vec<String> {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut files = Vec::new();
    rust_files(&src, &mut files);
    let mut bad = Vec::new();
    for file in files {
        let rel = file.strip_prefix(&src).expect("under src/");
        let module = rel.iter().next().and_then(|c| c.to_str()).map(|c| c.trim_end_matches(".rs")).unwrap_or("");
        if module == "lib" {
            continue; // declares the modules
        }
        let text = std::fs::read_to_string(&file).expect("readable source");
        let prefix = if module == "main" { "switchyard" } else { "crate" };
        let Some(may) = allowed.get(module) else {
            bad.push(format!("{}: module `{module}` has no row in docs/architecture.md", rel.display()));
            continue;
        };
        for used in references(&text, prefix) {
            if used != module && allowed.contains_key(&used) && !may.contains(&used) {
                bad.push(format!("{}: {prefix}::{used} (`{module}` may not import `{used}`)", rel.display()));
            }
        }
    }
    bad
}

#[test]
fn every_import_is_allowed_by_the_layering_table() {
    let allowed = allowed();
    assert!(allowed.len() > 20, "the table of docs/architecture.md was not found: {allowed:?}");
    let bad = violations(&allowed);
    assert!(bad.is_empty(), "imports across walls:\n{}", bad.join("\n"));
}

/// The check can fail: taking one allowed import away from a module that uses it is
/// reported, naming the file.
#[test]
fn a_broken_wall_is_reported() {
    let mut allowed = allowed();
    allowed.get_mut("kserve").expect("a kserve row").remove("infer");
    let bad = violations(&allowed);
    assert!(bad.iter().any(|b| b.starts_with("kserve/") && b.contains("crate::infer")), "{bad:?}");
    // And a module the table forbids outright, as `kserve` → `service`.
    assert!(!allowed["kserve"].contains("service") && !allowed["kserve"].contains("http1"));
}

#[test]
fn references_are_read_from_code_not_comments() {
    let text = "use crate::a::b;\n// crate::c\nuse crate::{d, e::f};\nlet x = crate::g::h(); // crate::i\nmy_crate::j";
    let got: Vec<String> = references(text, "crate").into_iter().collect();
    assert_eq!(got, ["a", "d", "e", "g"]);
}
