//! The files a model card names (config, tokenizer, tokenizer config, chat template,
//! generation config): where they are read from, and their checksums.
//!
//! A card's file slots carry a `path` and a `blake3:<hex>` checksum. A local path means
//! shared storage (a worker without `DYN_SYSTEM_PORT`); every file is verified where it
//! lies and the tokenizer's directory is used. A URL means the worker serves the files
//! itself (`http://<host>:<port>/v1/metadata/<ns>/<component>/<endpoint>/<slug>/_base/<file>`,
//! docs/dynamo/request-plane.md §3.6): each is downloaded once into `<cache>/by-slug/<slug>/<mdc_sum>/<file>`
//! (Dynamo keeps `~/.cache/dynamo/mdc/by-slug/...`), verified, and the directory used. A file
//! whose checksum does not match rejects the card, as Dynamo does.
//!
//! A local path that does not exist on this host (the worker's disk is not shared) is looked
//! for under the frontend's `--model-path` by its file name, as Dynamo 1.6.1 does; the files
//! are then verified and copied into the same cache directory, so the model still has one
//! directory. 1.6.1 would next try the Hugging Face hub; switchyard downloads nothing from
//! it, and such a card is not served, with a message saying which file is missing where.
//!
//! A card's chat template file (`chat_template_file`) is handed on apart from the directory
//! ([`CardFiles::template`]): a custom template lies anywhere, under any name, and with a
//! URL its name is whatever the URL's last segment is.
//!
//! Blocking I/O; runs on the control thread.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::checksum::{file_checksum, verify_file};
use super::records::{FileSlot, ModelCard};
use crate::tokenize::TemplateFile;

/// Per-read bound on a card file download.
const FETCH_TIMEOUT: Duration = Duration::from_secs(30);

/// Where downloaded card files are kept: `$SWITCHYARD_CACHE_DIR/mdc`, else
/// `$HOME/.cache/switchyard/mdc`, else the temp directory's.
pub fn default_cache() -> PathBuf {
    if let Some(d) = std::env::var_os("SWITCHYARD_CACHE_DIR") {
        return PathBuf::from(d).join("mdc");
    }
    match std::env::var_os("HOME") {
        Some(h) => PathBuf::from(h).join(".cache/switchyard/mdc"),
        None => std::env::temp_dir().join("switchyard-cache/mdc"),
    }
}

/// A directory name made of the display name: ASCII letters and digits kept (lower case),
/// everything else one `-`.
fn slug(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            out.push(c.to_ascii_lowercase());
        } else if !out.ends_with('-') {
            out.push('-');
        }
    }
    let out = out.trim_matches('-');
    if out.is_empty() {
        "model".into()
    } else {
        out.into()
    }
}

/// The last path segment of a URL, if it is a plain file name.
fn file_name(url: &str) -> Option<&str> {
    let name = url.rsplit('/').next()?;
    let name = name.split(['?', '#']).next()?;
    (!name.is_empty() && name != "." && name != ".." && !name.contains('\\')).then_some(name)
}

/// Where a card's files are, verified.
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct CardFiles {
    /// The tokenizer's own directory (shared storage), or the cache directory the URL files
    /// were downloaded to.
    pub dir: PathBuf,
    /// The card's chat template file, which replaces whatever template `dir` holds.
    pub template: Option<TemplateFile>,
}

/// The local files of `card`, verified: the tokenizer's own directory for shared storage, or
/// the cache directory the URL files were downloaded (or the `overlay`'s files copied) to,
/// and the chat template file.
pub fn model_dir(card: &ModelCard, cache: &Path, overlay: Option<&Path>) -> Result<CardFiles, String> {
    card.check_slots()?;
    let slots = card.file_slots();
    let Some((_, tokenizer)) = slots.iter().find(|(kind, _)| *kind == "tokenizer") else {
        return Err("the card names no tokenizer file".into());
    };
    let template_at = |dir: &Path| {
        card.chat_template().and_then(|slot| {
            let format = slot.template_format()?;
            let local = Path::new(&slot.file.path);
            let path = match slot.file.is_url() || !local.exists() {
                true => dir.join(file_name(&slot.file.path)?),
                false => local.to_path_buf(),
            };
            Some(TemplateFile { path, format })
        })
    };
    let cache_dir = || cache.join("by-slug").join(slug(&card.display_name)).join(card.mdc_sum());
    let unreachable = slots.iter().any(|(_, s)| !s.file.is_url() && !Path::new(&s.file.path).exists());
    if !tokenizer.file.is_url() && unreachable {
        let dir = cache_dir();
        overlaid(&slots, &dir, overlay)?;
        let template = template_at(&dir);
        return Ok(CardFiles { dir, template });
    }
    if !tokenizer.file.is_url() {
        card.verify_local_files()?;
        let dir = Path::new(&tokenizer.file.path)
            .parent()
            .map(Path::to_path_buf)
            .ok_or_else(|| format!("tokenizer path {} has no directory", tokenizer.file.path))?;
        let template = template_at(&dir);
        return Ok(CardFiles { dir, template });
    }
    let dir = cache_dir();
    fs::create_dir_all(&dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (kind, slot) in &slots {
        let f = &slot.file;
        if !f.is_url() {
            // A custom template may stay a local path (shared storage) next to served files.
            if *kind == "chat_template_file" {
                verify_file(Path::new(&f.path), &f.checksum).map_err(|e| format!("{kind}: {e}"))?;
                continue;
            }
            return Err(format!("{kind}: mixing local paths and URLs in one card is not supported"));
        }
        let name = file_name(&f.path).ok_or_else(|| format!("{kind}: no file name in {}", f.path))?;
        let target = dir.join(name);
        if verify_file(&target, &f.checksum).is_ok() {
            continue; // downloaded before
        }
        let bytes = super::etcd::wire::http_get(&f.path, FETCH_TIMEOUT).map_err(|e| format!("{kind}: {e}"))?;
        let got = file_checksum(&bytes);
        if got != f.checksum {
            return Err(format!("{kind}: checksum mismatch for {}: card says {}, file is {got}", f.path, f.checksum));
        }
        let tmp = dir.join(format!(".tmp_{name}"));
        fs::write(&tmp, &bytes).and_then(|_| fs::rename(&tmp, &target)).map_err(|e| format!("{kind}: {e}"))?;
    }
    let template = template_at(&dir);
    Ok(CardFiles { dir, template })
}

/// Every local file of `slots` copied into `dir`, verified: from the worker's path where this
/// host has it, else from `overlay` (`--model-path`) by its file name. URL slots are not
/// mixed with local ones here (a card of local paths whose files this host lacks).
fn overlaid(slots: &[(&str, &FileSlot)], dir: &Path, overlay: Option<&Path>) -> Result<(), String> {
    fs::create_dir_all(dir).map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
    for (kind, slot) in slots {
        let f = &slot.file;
        if f.is_url() {
            return Err(format!("{kind}: mixing local paths and URLs in one card is not supported"));
        }
        let name = file_name(&f.path).ok_or_else(|| format!("{kind}: no file name in {}", f.path))?;
        let target = dir.join(name);
        if verify_file(&target, &f.checksum).is_ok() {
            continue; // copied before
        }
        let worker = Path::new(&f.path);
        let source = match (worker.exists(), overlay.map(|o| o.join(name))) {
            (true, _) => worker.to_path_buf(),
            (false, Some(local)) if local.exists() => local,
            (false, over) => {
                let custom = if slot.is_custom == Some(true) { "custom " } else { "" };
                let looked = match over {
                    Some(local) => format!("nor at {} (--model-path)", local.display()),
                    None => "and no --model-path was given to look for it by name".into(),
                };
                return Err(format!(
                    "{kind}: {custom}file {name} not reachable on this host: not at the worker's path {} {looked}; \
                     switchyard does not download model files from the Hugging Face hub",
                    worker.display()
                ));
            }
        };
        verify_file(&source, &f.checksum).map_err(|e| format!("{kind}: {e}"))?;
        let tmp = dir.join(format!(".tmp_{name}"));
        fs::copy(&source, &tmp).and_then(|_| fs::rename(&tmp, &target)).map_err(|e| format!("{kind}: {e}"))?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_and_file_names() {
        assert_eq!(slug("Qwen/Qwen3-0.6B"), "qwen-qwen3-0-6b");
        assert_eq!(slug("///"), "model");
        assert_eq!(file_name("http://h:1/v1/metadata/a/b/_base/tokenizer.json"), Some("tokenizer.json"));
        assert_eq!(file_name("http://h:1/x/"), None);
        assert_eq!(file_name("http://h:1/x/.."), None);
    }
}
