//! Model-card features of Dynamo 1.6.1: the chat template file a card names (the model
//! directory's, or a custom one anywhere, local or served over HTTP), aliases, skipped
//! records (logged once, counted in `/metrics`) and the file store's default directory.

mod common;

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime};

use common::stack::Stack;
use common::{Client, TempDir};
use serde_json::{json, Value};
use switchyard::config::NamespaceFilter;
use switchyard::discovery::cardfiles::model_dir;
use switchyard::discovery::checksum::file_checksum;
use switchyard::discovery::records::{encode_key, parse_record, ModelCard, Record};
use switchyard::discovery::FileStore;
use switchyard::tokenize::{ModelFiles, RenderArgs, TemplateFile, TemplateFormat};
use switchyard::worker::{MockConfig, MockWorker};

const DATA: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/discovery");

/// A fresh temp directory, removed on drop.
/// `cards_1_6_1.json`: the cards 1.6.1 workers wrote, and what their requests looked like.
fn observed() -> Value {
    serde_json::from_slice(&std::fs::read(Path::new(DATA).join("cards_1_6_1.json")).unwrap()).unwrap()
}

fn observed_card(name: &str) -> Value {
    let v = observed();
    let c = v["cards"].as_array().unwrap().iter().find(|c| c["record"]["card_json"]["display_name"] == name);
    c.unwrap_or_else(|| panic!("no card {name}")).clone()
}

/// Points every file of a recorded card at `dir` (the recording's directory was this
/// machine's model cache; the files, and so the checksums, are the same).
fn relocate(card: &mut Value, dir: &Path) {
    for slot in ["model_info", "tokenizer", "prompt_formatter", "chat_template_file", "gen_config"] {
        let Some(kinds) = card[slot].as_object_mut() else { continue };
        for body in kinds.values_mut() {
            let file = if body.get("file").is_some() { &mut body["file"] } else { body };
            let name = file["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
            file["path"] = dir.join(name).to_string_lossy().into_owned().into();
        }
    }
}

/// The conversation of the recorded requests, rendered by `files`' template at `now`.
fn render(files: &ModelFiles, now: u64) -> String {
    let request = observed()["request"].clone();
    let messages = request["messages"].as_array().unwrap();
    let args = RenderArgs {
        messages,
        tools: None,
        documents: None,
        add_generation_prompt: true,
        continue_final_message: false,
        special_tokens: &files.special_tokens,
        extra: None,
        now: Some(now),
    };
    files.template(false).expect("a chat template").render(&args).unwrap()
}

fn chat(addr: std::net::SocketAddr, model: &str) -> common::Resp {
    let mut body = observed()["request"].clone();
    body["model"] = model.into();
    let body = body.to_string();
    let req = format!(
        "POST /v1/chat/completions HTTP/1.1\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    );
    Client::connect(addr).roundtrip(req.as_bytes())
}

fn get(addr: std::net::SocketAddr, path: &str) -> common::Resp {
    Client::connect(addr).roundtrip(format!("GET {path} HTTP/1.1\r\n\r\n").as_bytes())
}

/// Polls `/v1/models` (≤ 20 s) until its ids are `want` on 8 fresh connections in a row.
fn wait_ids(addr: std::net::SocketAddr, want: &[&str]) {
    let t0 = Instant::now();
    let mut streak = 0;
    while streak < 8 {
        let v = get(addr, "/v1/models").json();
        let ids: Vec<String> =
            v["data"].as_array().unwrap().iter().map(|m| m["id"].as_str().unwrap().to_string()).collect();
        streak = if ids == want { streak + 1 } else { 0 };
        assert!(t0.elapsed() < Duration::from_secs(20), "/v1/models lists {ids:?}, not {want:?}");
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn card_of(reg_card_file: &Path) -> ModelCard {
    let (rec, _) = parse_record(&std::fs::read(reg_card_file).unwrap()).unwrap();
    let Record::Model(rec) = rec else { panic!("not a model record") };
    rec.card_json
}

// ---------------------------------------------------------------------------------------------
// Chat template files
// ---------------------------------------------------------------------------------------------

/// The gpt-oss card 1.6.1's Python worker wrote names the directory's `chat_template.jinja`
/// (nested slot); its files are verified where they lie, and the template renders the
/// recorded request to exactly the prompt 1.6.1 sent.
#[test]
fn gptoss_card_template_renders_what_1_6_1_sent() {
    let dir = common::model_dir("gptoss");
    let recorded = observed_card("gptoss-py");
    let mut card = recorded["record"]["card_json"].clone();
    relocate(&mut card, &dir);
    let card: ModelCard = serde_json::from_value(card).unwrap();
    let cache = TempDir::new("gptoss-cache");
    let at = model_dir(&card, &cache.0, None).unwrap();
    assert_eq!(at.dir, dir);
    let want = TemplateFile { path: dir.join("chat_template.jinja"), format: TemplateFormat::Jinja };
    assert_eq!(at.template.as_ref(), Some(&want));
    let files = ModelFiles::load_with(&at.dir, at.template.as_ref()).unwrap();
    let prompt = render(&files, observed()["request_time"].as_u64().unwrap());
    assert_eq!(prompt, recorded["prompt"].as_str().unwrap());
    let ids = files.tokenizer().unwrap().encode(&prompt).unwrap();
    assert_eq!(ids.len() as u64, recorded["prompt_tokens"].as_u64().unwrap());
}

/// A card whose files are not on this host (the worker's disk is not shared): each is looked
/// for under `--model-path` by its name, as 1.6.1 does, verified, and copied into the cache
/// directory, where the template then renders what 1.6.1 sent. Without the overlay, or with
/// a file there that is not the card's, the card is refused with a message naming the file.
#[test]
fn model_path_overlay_supplies_files_missing_on_this_host() {
    let dir = common::model_dir("gptoss");
    let recorded = observed_card("gptoss-py");
    let mut card = recorded["record"]["card_json"].clone();
    relocate(&mut card, Path::new("/nonexistent/worker/gptoss"));
    let card: ModelCard = serde_json::from_value(card).unwrap();

    let cache = TempDir::new("overlay-none");
    let err = model_dir(&card, &cache.0, None).unwrap_err();
    assert!(err.contains("not reachable on this host") && err.contains("--model-path"), "{err}");

    let cache = TempDir::new("overlay-cache");
    let at = model_dir(&card, &cache.0, Some(&dir)).unwrap();
    assert!(at.dir.starts_with(&cache.0), "{}", at.dir.display());
    let want = TemplateFile { path: at.dir.join("chat_template.jinja"), format: TemplateFormat::Jinja };
    assert_eq!(at.template.as_ref(), Some(&want));
    for name in ["tokenizer.json", "tokenizer_config.json", "config.json", "chat_template.jinja"] {
        assert_eq!(std::fs::read(at.dir.join(name)).unwrap(), std::fs::read(dir.join(name)).unwrap(), "{name}");
    }
    let files = ModelFiles::load_with(&at.dir, at.template.as_ref()).unwrap();
    let prompt = render(&files, observed()["request_time"].as_u64().unwrap());
    assert_eq!(prompt, recorded["prompt"].as_str().unwrap());
    // Seen again (the copies verified in place): the same directory.
    assert_eq!(model_dir(&card, &cache.0, Some(&dir)).unwrap(), at);

    // An overlay whose tokenizer is another file: refused by its checksum.
    let wrong = TempDir::new("overlay-wrong");
    for e in std::fs::read_dir(&dir).unwrap() {
        let e = e.unwrap();
        std::fs::copy(e.path(), wrong.0.join(e.file_name())).unwrap();
    }
    let mut tok = std::fs::read(wrong.0.join("tokenizer.json")).unwrap();
    tok.push(b' ');
    std::fs::write(wrong.0.join("tokenizer.json"), tok).unwrap();
    let cache = TempDir::new("overlay-wrong-cache");
    let err = model_dir(&card, &cache.0, Some(&wrong.0)).unwrap_err();
    assert!(err.starts_with("tokenizer: "), "{err}");
}

/// A template file given apart from the directory replaces the tokenizer config's template,
/// whatever the file is called; a JSON one holds `{"chat_template": …}`.
#[test]
fn template_file_overrides_the_directory() {
    let qwen3 = common::qwen3_dir();
    let tmp = TempDir::new("override");
    let custom = observed()["custom_template"].as_str().unwrap().to_string();
    let jinja = tmp.0.join("any-name.txt");
    std::fs::write(&jinja, &custom).unwrap();
    let recorded = observed_card("qwen3-custom");
    let slot = &recorded["record"]["card_json"]["chat_template_file"]["hf_chat_template"]["file"];
    assert_eq!(file_checksum(custom.as_bytes()), slot["checksum"].as_str().unwrap(), "the recorded template");

    let plain = ModelFiles::load(&qwen3).unwrap();
    assert!(render(&plain, 0).starts_with("<|im_start|>system\nBe brief.<|im_end|>"));
    let t = TemplateFile { path: jinja, format: TemplateFormat::Jinja };
    let files = ModelFiles::load_with(&qwen3, Some(&t)).unwrap();
    assert_eq!(render(&files, 0), recorded["prompt"].as_str().unwrap());
    let ids = files.tokenizer().unwrap().encode(&render(&files, 0)).unwrap();
    assert_eq!(ids.len() as u64, recorded["prompt_tokens"].as_u64().unwrap());

    // chat_template.json form, a named list of which `default` is used.
    let json_file = tmp.0.join("templates.json");
    let list =
        json!({"chat_template": [{"name": "default", "template": custom}, {"name": "tool_use", "template": "T"}]});
    std::fs::write(&json_file, list.to_string()).unwrap();
    let t = TemplateFile { path: json_file.clone(), format: TemplateFormat::Json };
    let files = ModelFiles::load_with(&qwen3, Some(&t)).unwrap();
    assert_eq!(render(&files, 0), recorded["prompt"].as_str().unwrap());
    // Without `chat_template` it cannot be served.
    std::fs::write(&json_file, "{}").unwrap();
    let e = ModelFiles::load_with(&qwen3, Some(&t)).unwrap_err();
    assert!(e.to_string().contains("no `chat_template` field"), "{e}");
}

/// The mock worker writes the slots as 1.6.1 workers do: the directory's template
/// (`is_custom: false`) or a custom one (`is_custom: true`) between the tokenizer config and
/// the generation config, and `aliases` between `needs` and `runtime_config`.
#[test]
fn mock_worker_card_has_the_template_slot_and_aliases() {
    let store = TempDir::new("mockcard");
    let gptoss = common::model_dir("gptoss");
    let mut w =
        MockWorker::start(MockConfig { model_name: "g".into(), model_dir: Some(gptoss.clone()), ..Default::default() })
            .unwrap();
    let reg = w.register_file(&store.0).unwrap();
    let raw: Value = serde_json::from_slice(&std::fs::read(&reg.card_file).unwrap()).unwrap();
    w.stop();
    let keys: Vec<&str> = raw["card_json"].as_object().unwrap().keys().map(String::as_str).collect();
    let at = |k: &str| keys.iter().position(|x| *x == k).unwrap_or_else(|| panic!("no {k} in {keys:?}"));
    assert!(at("prompt_formatter") < at("chat_template_file") && at("chat_template_file") < at("gen_config"));
    assert!(!keys.contains(&"aliases"), "no aliases: no key");
    let recorded = observed_card("gptoss-mock");
    let mut want = recorded["record"]["card_json"]["chat_template_file"].clone();
    let path = gptoss.join("chat_template.jinja").to_string_lossy().into_owned();
    want["hf_chat_template"]["file"]["path"] = path.into();
    assert_eq!(raw["card_json"]["chat_template_file"], want, "as the 1.6.1 mocker wrote it");

    let custom = TempDir::new("mockcard-custom");
    let template = custom.0.join("t.jinja");
    std::fs::write(&template, "{{ messages }}").unwrap();
    let cfg = MockConfig {
        model_name: "q".into(),
        model_dir: Some(common::qwen3_dir()),
        chat_template: Some(template.clone()),
        aliases: vec!["q-a".into(), "q-b".into()],
        ..Default::default()
    };
    let mut w = MockWorker::start(cfg).unwrap();
    let reg = w.register_file(&store.0).unwrap();
    let raw: Value = serde_json::from_slice(&std::fs::read(&reg.card_file).unwrap()).unwrap();
    w.stop();
    let keys: Vec<&str> = raw["card_json"].as_object().unwrap().keys().map(String::as_str).collect();
    let at = |k: &str| keys.iter().position(|x| *x == k).unwrap();
    assert_eq!((at("needs") + 1, at("aliases") + 1), (at("aliases"), at("runtime_config")));
    assert_eq!(raw["card_json"]["aliases"], json!(["q-a", "q-b"]));
    let slot = &raw["card_json"]["chat_template_file"]["hf_chat_template"];
    assert_eq!(slot["is_custom"], true);
    assert_eq!(slot["file"]["path"], template.to_string_lossy().as_ref());
    assert_eq!(slot["file"]["checksum"], file_checksum(b"{{ messages }}"));
}

/// Serves `files` (URL file name → local file) over HTTP, as a worker with
/// `DYN_SYSTEM_PORT` serves its card files; counts the requests.
fn serve_files(files: Vec<(String, PathBuf)>) -> (u16, Arc<AtomicUsize>) {
    use std::io::Write;
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    let hits = Arc::new(AtomicUsize::new(0));
    let counted = hits.clone();
    std::thread::spawn(move || {
        for conn in listener.incoming() {
            let Ok(mut conn) = conn else { continue };
            let mut line = String::new();
            if std::io::BufReader::new(conn.try_clone().unwrap()).read_line(&mut line).is_err() {
                continue;
            }
            let name = line.split_whitespace().nth(1).unwrap_or("").rsplit('/').next().unwrap_or("").to_string();
            counted.fetch_add(1, Ordering::SeqCst);
            let found = files.iter().find(|(n, _)| *n == name).and_then(|(_, p)| std::fs::read(p).ok());
            let (status, body) = match found {
                Some(b) => ("200 OK", b),
                None => ("404 Not Found", Vec::new()),
            };
            let _ = write!(conn, "HTTP/1.1 {status}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n", body.len());
            let _ = conn.write_all(&body);
        }
    });
    (port, hits)
}

/// A worker started with a custom template (any name, outside the model directory) is
/// served with it: the prompt is the custom rendering, not the tokenizer config's. Served
/// over HTTP under another name, the downloaded file is still the template.
#[test]
fn custom_template_is_used_local_and_over_http() {
    let tmp = TempDir::new("custom");
    let template = tmp.0.join("my-template.j2");
    std::fs::write(&template, observed()["custom_template"].as_str().unwrap()).unwrap();
    let want_tokens = observed_card("qwen3-custom")["prompt_tokens"].clone();
    let mock = MockConfig {
        fast: true,
        output_tokens: 2,
        model_name: "qwen3-custom".into(),
        model_dir: Some(common::qwen3_dir()),
        chat_template: Some(template.clone()),
        ..Default::default()
    };
    let s = Stack::start("custom-template", mock, &[], &[]);
    let r = chat(s.addr(), "qwen3-custom");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["usage"]["prompt_tokens"], want_tokens, "rendered with the custom template");

    // The same card with every file a URL; the template's URL ends in an odd name.
    let name = format!("qwen3-custom-url-{}", std::process::id());
    let qwen3 = common::qwen3_dir();
    let mut served: Vec<(String, PathBuf)> =
        ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
            .iter()
            .map(|f| (f.to_string(), qwen3.join(f)))
            .collect();
    served.push(("custom.v2".into(), template.clone()));
    let (port, hits) = serve_files(served);
    let card_file = std::fs::read_dir(s.store().join("v1/mdc")).unwrap().next().unwrap().unwrap().path();
    let mut rec: Value = serde_json::from_slice(&std::fs::read(&card_file).unwrap()).unwrap();
    let card = &mut rec["card_json"];
    card["display_name"] = name.clone().into();
    let base = format!("http://127.0.0.1:{port}/v1/metadata/dynamo/backend/generate/{name}/_base");
    for slot in ["model_info", "tokenizer", "prompt_formatter", "gen_config"] {
        for f in card[slot].as_object_mut().unwrap().values_mut() {
            let file = f["path"].as_str().unwrap().rsplit('/').next().unwrap().to_string();
            f["path"] = format!("{base}/{file}").into();
        }
    }
    card["chat_template_file"]["hf_chat_template"]["file"]["path"] = format!("{base}/custom.v2").into();
    std::fs::write(&card_file, serde_json::to_vec(&rec).unwrap()).unwrap();
    wait_ids(s.addr(), &[&name]);
    let r = chat(s.addr(), &name);
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["usage"]["prompt_tokens"], want_tokens, "rendered with the downloaded template");
    assert_eq!(hits.load(Ordering::SeqCst), 5, "each of the 5 files fetched once");
    let cache = switchyard::discovery::cardfiles::default_cache().join("by-slug");
    let _ = std::fs::remove_dir_all(cache.join(&name));
}

/// The gpt-oss directory registered by the mock worker (card naming its
/// `chat_template.jinja`) is served, with that template: the prompt has as many tokens as
/// the one 1.6.1 sent for the same request.
#[test]
fn gptoss_worker_is_served_with_its_template_file() {
    let mock = MockConfig {
        fast: true,
        output_tokens: 2,
        model_name: "gptoss-mock".into(),
        model_dir: Some(common::model_dir("gptoss")),
        ..Default::default()
    };
    let s = Stack::start("gptoss", mock, &[], &[]);
    let card = card_of(&std::fs::read_dir(s.store().join("v1/mdc")).unwrap().next().unwrap().unwrap().path());
    assert!(card.chat_template().is_some());
    let r = chat(s.addr(), "gptoss-mock");
    assert_eq!(r.status, 200, "{}", String::from_utf8_lossy(&r.body));
    assert_eq!(r.json()["usage"]["prompt_tokens"], observed_card("gptoss-py")["prompt_tokens"]);
}

// ---------------------------------------------------------------------------------------------
// Aliases
// ---------------------------------------------------------------------------------------------

/// A worker registered with aliases: each alias is listed as its own model (same owner,
/// context window and creation time), answered by `/v1/models/<alias>` and served by the
/// same worker, whose answers name the primary model; the card's `mdc_sum` covers the aliases.
#[test]
fn aliases_are_listed_and_served() {
    let mock = MockConfig {
        fast: true,
        output_tokens: 2,
        model_name: "qwen3-main".into(),
        aliases: vec!["qwen3-alias-a".into(), "qwen3-alias-b".into()],
        model_dir: Some(common::qwen3_dir()),
        ..Default::default()
    };
    let s = Stack::start("aliases", mock, &[], &[]);
    let addr = s.addr();
    wait_ids(addr, &["qwen3-alias-a", "qwen3-alias-b", "qwen3-main"]);
    let list = get(addr, "/v1/models").json();
    let entries = list["data"].as_array().unwrap();
    for e in entries {
        let mut e = e.clone();
        e["id"] = "x".into();
        let mut first = entries[0].clone();
        first["id"] = "x".into();
        assert_eq!(e, first, "aliases share owned_by, created and context_window");
    }
    let one = get(addr, "/v1/models/qwen3-alias-b");
    assert_eq!(one.status, 200);
    assert_eq!(one.json()["id"], "qwen3-alias-b");
    assert_eq!(get(addr, "/v1/models/qwen3-alias-c").status, 404);

    for model in ["qwen3-main", "qwen3-alias-a", "qwen3-alias-b"] {
        let before = s.worker.stats().completed;
        let r = chat(addr, model);
        assert_eq!(r.status, 200, "{model}: {}", String::from_utf8_lossy(&r.body));
        assert_eq!(r.json()["model"], "qwen3-main", "{model}: answered under the primary name, as 1.6.1 does");
        // The worker counts a stream once it has written its end, which may be just after
        // the answer reached us.
        let deadline = Instant::now() + Duration::from_secs(5);
        while s.worker.stats().completed < before + 1 && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(5));
        }
        assert_eq!(s.worker.stats().completed, before + 1, "{model} reached the worker");
    }
    assert_eq!(chat(addr, "qwen3-alias-c").status, 404);

    let card = card_of(&std::fs::read_dir(s.store().join("v1/mdc")).unwrap().next().unwrap().unwrap().path());
    assert_eq!(card.aliases, ["qwen3-alias-a", "qwen3-alias-b"]);
    let mut plain = card.clone();
    plain.aliases.clear();
    assert_ne!(card.mdc_sum(), plain.mdc_sum(), "aliases are hashed");
}

/// The alias card 1.6.1 wrote, in a file store: its aliases are listed next to it; an alias
/// that is another model's name, or that another model claimed first, is not.
#[test]
fn recorded_alias_card_in_a_file_store() {
    let store = TempDir::new("aliasstore");
    for b in ["v1/mdc", "v1/instances"] {
        std::fs::create_dir_all(store.0.join(b)).unwrap();
    }
    let add = |component: &str, id: u64, name: &str, aliases: Value| {
        let mut rec = observed_card("qwen3-main")["record"].clone();
        rec["component"] = component.into();
        rec["instance_id"] = id.into();
        rec["card_json"]["display_name"] = name.into();
        rec["card_json"]["aliases"] = aliases;
        let file = encode_key(&format!("dynamo/{component}/generate/{id:x}"));
        std::fs::write(store.0.join("v1/mdc").join(&file), rec.to_string()).unwrap();
        let ep = json!({"type": "Endpoint", "namespace": "dynamo", "component": component, "endpoint": "generate",
            "instance_id": id, "transport": {"tcp": format!("127.0.0.1:9/{id:x}/dynamo/{component}/generate")}});
        std::fs::write(store.0.join("v1/instances").join(&file), ep.to_string()).unwrap();
    };
    add("alias", 1, "qwen3-main", json!(["qwen3-alias-a", "qwen3-alias-b"]));
    add("other", 2, "zz-other", json!(["qwen3-alias-a", "qwen3-main", "zz-alias"]));
    let mut fs = FileStore::new(&store.0, NamespaceFilter::Any);
    let now = SystemTime::now();
    let snap = fs.scan(now).unwrap();
    let reg = fs.registry(&snap, now);
    let names: Vec<(&str, u64)> = reg.models.iter().map(|m| (m.name.as_str(), m.context_window)).collect();
    assert_eq!(
        names,
        [
            ("qwen3-alias-a", 40960),
            ("qwen3-alias-b", 40960),
            ("qwen3-main", 40960),
            ("zz-alias", 40960),
            ("zz-other", 40960)
        ]
    );
    assert_eq!(reg.aliases.get("qwen3-alias-a").map(String::as_str), Some("qwen3-main"));
    assert_eq!(reg.aliases.get("zz-alias").map(String::as_str), Some("zz-other"));
    assert_eq!(snap.alias_conflicts.len(), 2, "{:?}", snap.alias_conflicts);
}

// ---------------------------------------------------------------------------------------------
// The real binary: skipped records, default store directory
// ---------------------------------------------------------------------------------------------

/// The switchyard binary, its address, and its stderr lines as they come.
struct Running {
    child: Child,
    addr: std::net::SocketAddr,
    lines: Arc<Mutex<Vec<String>>>,
}

impl Running {
    fn start(cmd: Command) -> Running {
        let (child, addr, rest) = common::spawn_listening(cmd);
        let lines = Arc::new(Mutex::new(Vec::new()));
        let sink = lines.clone();
        std::thread::spawn(move || {
            for l in rest.map_while(Result::ok) {
                sink.lock().unwrap().push(l);
            }
        });
        Running { child, addr, lines }
    }

    fn lines_with(&self, needle: &str) -> Vec<String> {
        self.lines.lock().unwrap().iter().filter(|l| l.contains(needle)).cloned().collect()
    }

    /// Waits (≤ 20 s) until `/metrics` has `line`.
    fn wait_metric(&self, line: &str) {
        let t0 = Instant::now();
        loop {
            let text = String::from_utf8(get(self.addr, "/metrics").body).unwrap();
            if text.lines().any(|l| l == line) {
                return;
            }
            assert!(t0.elapsed() < Duration::from_secs(20), "no `{line}` in\n{text}");
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits (≤ 20 s) until `/health` lists `n` instances.
    fn wait_instances(&self, n: usize) {
        let t0 = Instant::now();
        while get(self.addr, "/health").json()["instances"].as_array().map_or(0, Vec::len) != n {
            assert!(t0.elapsed() < Duration::from_secs(20), "/health never listed {n} instances");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Running {
    fn drop(&mut self) {
        // SAFETY: kill(2) on the pid of a child this test started.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let _ = self.child.wait();
    }
}

fn switchyard() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    cmd.args(["--http-host", "127.0.0.1", "--http-port", "0", "--shards", "1", "--discovery-backend", "file"]);
    cmd
}

/// A record that cannot be parsed is logged once with its reason, however often discovery
/// rebuilds while it stays, and counted by the `switchyard_discovery_records_skipped` gauge
/// until it goes.
#[test]
fn skipped_record_is_logged_once_and_counted() {
    let store = TempDir::new("skipped");
    let mut cmd = switchyard();
    cmd.env("DYN_FILE_KV", &store.0);
    let run = Running::start(cmd);
    run.wait_metric("switchyard_discovery_records_skipped{bucket=\"v1/mdc\"} 0");
    std::fs::create_dir_all(store.0.join("v1/mdc")).unwrap();
    std::fs::create_dir_all(store.0.join("v1/instances")).unwrap();
    let bad_name = encode_key("dynamo/broken/generate/1");
    let bad = store.0.join("v1/mdc").join(&bad_name);
    std::fs::write(&bad, br#"{"type":"Model","namespace":"dynamo","#).unwrap();
    run.wait_metric("switchyard_discovery_records_skipped{bucket=\"v1/mdc\"} 1");
    // Rebuilds while it stays: an instance record comes and goes, twice.
    for id in [7u64, 8] {
        let ep = json!({"type": "Endpoint", "namespace": "dynamo", "component": "c", "endpoint": "generate",
            "instance_id": id, "transport": {"tcp": format!("127.0.0.1:9/{id:x}/dynamo/c/generate")}});
        let file = store.0.join("v1/instances").join(encode_key(&format!("dynamo/c/generate/{id:x}")));
        std::fs::write(&file, ep.to_string()).unwrap();
        run.wait_instances(1);
        std::fs::remove_file(&file).unwrap();
        run.wait_instances(0);
    }
    run.wait_metric("switchyard_discovery_records_skipped{bucket=\"v1/mdc\"} 1");
    let logged = run.lines_with(&bad_name);
    assert_eq!(logged.len(), 1, "{logged:?}");
    assert!(logged[0].contains("skipped v1/mdc record") && logged[0].contains("not JSON"), "{logged:?}");
    std::fs::remove_file(&bad).unwrap();
    run.wait_metric("switchyard_discovery_records_skipped{bucket=\"v1/mdc\"} 0");
    run.wait_metric("switchyard_discovery_records_skipped{bucket=\"v1/instances\"} 0");
}

/// Without `DYN_FILE_KV`, the frontend and the mock worker both use
/// `$TMPDIR/dynamo_store_kv`, as 1.6.1 does, and find each other there.
#[test]
fn file_store_defaults_to_the_temp_directory() {
    let tmp = TempDir::new("tmpdir");
    let root = tmp.0.join("dynamo_store_kv");
    let mut cmd = switchyard();
    cmd.env_remove("DYN_FILE_KV").env("TMPDIR", &tmp.0);
    let run = Running::start(cmd);
    let mut worker = Command::new(env!("CARGO_BIN_EXE_switchyard"));
    worker
        .args(["mock-worker", "--model-name", "tmp-qwen3", "--discovery-backend", "file", "--fast", "--model-path"])
        .arg(common::qwen3_dir())
        .env_remove("DYN_FILE_KV")
        .env_remove("DYN_DISCOVERY_BACKEND")
        .env("TMPDIR", &tmp.0)
        .stderr(std::process::Stdio::null());
    let mut worker = worker.spawn().unwrap();
    let t0 = Instant::now();
    let listed = loop {
        let v = get(run.addr, "/v1/models").json();
        if v["data"].as_array().is_some_and(|d| d.iter().any(|m| m["id"] == "tmp-qwen3")) {
            break true;
        }
        if t0.elapsed() > Duration::from_secs(20) {
            break false;
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let in_store = std::fs::read_dir(root.join("v1/mdc")).map(|d| d.count()).unwrap_or(0);
    // SAFETY: kill(2) on the pid of a child this test started.
    unsafe { libc::kill(worker.id() as i32, libc::SIGTERM) };
    let _ = worker.wait();
    assert!(listed, "the worker registered in the default store was not served");
    assert_eq!(in_store, 1, "the card is in {}", root.display());
    let said = run.lines_with("discovery: file store");
    assert!(said.iter().any(|l| l.ends_with(&format!("file store {}", root.display()))), "{said:?}");
}
