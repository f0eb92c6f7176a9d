//! `switchyard bench` arguments: parsed and checked once into [`Args`], or a clear error.

use std::net::{SocketAddr, ToSocketAddrs};
use std::path::PathBuf;
use std::time::Duration;

use super::prompt::Endpoint;
use super::run::Driver;

pub const USAGE: &str = "\
usage: switchyard bench --model-path DIR [options]
       switchyard bench --compare A.json B.json

Sends synthetic OpenAI requests to a running server and reports TTFT, inter-token latency,
end-to-end latency and output tokens/s (p50/p90/p99/p99.9/max).

target:
  --url URL               server base URL (default http://127.0.0.1:8000; http only)
  --model NAME            model to ask for (default: the only one in GET /v1/models)
  --endpoint chat|completions
                          /v1/chat/completions (default) or /v1/completions
  --stream                stream the answers (SSE); TTFT and ITL are measured only then
requests:
  --model-path DIR        model directory whose tokenizer.json shapes the prompts (required)
  --input-tokens N        prompt length in tokens, exact (default 128)
  --output-tokens N       max_tokens, sent with ignore_eos: true (default 32)
  --prefix-families K     K families of prompts sharing a prefix (default 0: none)
  --prefix-tokens P       length of each family's shared prefix (needs --prefix-families)
  --seed S                seed of prompts and arrivals (default 0)
load:
  --concurrency N         closed loop: N requests in flight (default 1); with --rate: the
                          most connections open (default 256)
  --rate R                open loop: Poisson arrivals at R requests/s
  --requests N            measured requests (default 100 unless --duration is given)
  --duration S            stop starting requests after S seconds
  --warmup N              requests before the measured ones, not recorded (default 0)
  --timeout S             per-request limit in seconds (default 60)
  --start-at T            begin (warm-up first) at Unix time T, in seconds, after all
                          set-up: to start together with another client
output:
  --json OUT              write the report with the raw histograms to OUT
  --save-body FILE        write the first request's JSON body to FILE (for other clients)
  --no-progress           no progress line on stderr
  --allow-errors          exit 0 even if requests failed
  --io-driver auto|io-uring|epoll
                          the client's I/O driver (default auto)
";

/// What to do.
#[derive(Debug)]
pub enum Command {
    Run(Box<Args>),
    Compare(PathBuf, PathBuf),
    Help,
}

/// A checked benchmark configuration.
#[derive(Clone, Debug)]
pub struct Args {
    pub url: String,
    /// `host:port` for the Host header.
    pub host: String,
    pub addr: SocketAddr,
    pub model: Option<String>,
    pub model_path: PathBuf,
    pub endpoint: Endpoint,
    pub stream: bool,
    pub concurrency: Option<usize>,
    pub rate: Option<f64>,
    pub seed: u64,
    pub input_tokens: usize,
    pub output_tokens: u32,
    pub prefix_families: usize,
    pub prefix_tokens: usize,
    pub requests: Option<u64>,
    pub duration: Option<Duration>,
    pub warmup: u64,
    pub timeout: Duration,
    pub json: Option<PathBuf>,
    pub save_body: Option<PathBuf>,
    /// Unix time (s) to begin at.
    pub start_at: Option<f64>,
    pub progress: bool,
    pub allow_errors: bool,
    pub driver: Driver,
}

fn parse_num<T: std::str::FromStr>(flag: &str, v: &str) -> Result<T, String> {
    v.parse().map_err(|_| format!("{flag}: {v:?} is not a valid number"))
}

fn positive_secs(flag: &str, v: &str) -> Result<Duration, String> {
    let s: f64 = parse_num(flag, v)?;
    if !(s.is_finite() && s > 0.0 && s < 1e9) {
        return Err(format!("{flag}: must be a positive number of seconds"));
    }
    Ok(Duration::from_secs_f64(s))
}

/// Split `http://host:port[/]` into the `host:port` string and a resolved address.
fn parse_url(url: &str) -> Result<(String, SocketAddr), String> {
    let Some(rest) = url.strip_prefix("http://") else {
        return Err(format!("--url {url}: only http:// URLs are supported"));
    };
    let host = rest.trim_end_matches('/');
    if host.is_empty() || host.contains('/') {
        return Err(format!("--url {url}: give the server's base URL, e.g. http://127.0.0.1:8000"));
    }
    let with_port = if host.rsplit_once(':').is_some_and(|(_, p)| p.parse::<u16>().is_ok()) {
        host.to_string()
    } else {
        format!("{host}:80")
    };
    let addr = with_port
        .to_socket_addrs()
        .map_err(|e| format!("--url {url}: {e}"))?
        .next()
        .ok_or_else(|| format!("--url {url}: no address"))?;
    Ok((host.to_string(), addr))
}

/// Parse the arguments after `bench`.
pub fn parse(args: &[String]) -> Result<Command, String> {
    let mut url = "http://127.0.0.1:8000".to_string();
    let mut model = None;
    let mut model_path = None;
    let mut endpoint = Endpoint::Chat;
    let mut stream = false;
    let mut concurrency = None;
    let mut rate = None;
    let mut seed = 0;
    let mut input_tokens = 128;
    let mut output_tokens = 32;
    let mut prefix_families = 0;
    let mut prefix_tokens = None;
    let mut requests = None;
    let mut duration = None;
    let mut warmup = 0;
    let mut timeout = Duration::from_secs(60);
    let mut json = None;
    let mut save_body = None;
    let mut start_at = None;
    let mut progress = true;
    let mut allow_errors = false;
    let mut driver = Driver::Auto;
    let mut compare = None;

    let mut it = args.iter();
    while let Some(a) = it.next() {
        let (flag, inline) = match a.split_once('=') {
            Some((f, v)) if f.starts_with("--") => (f, Some(v.to_string())),
            _ => (a.as_str(), None),
        };
        let mut value = || -> Result<String, String> {
            match &inline {
                Some(v) => Ok(v.clone()),
                None => it.next().cloned().ok_or_else(|| format!("{flag} needs a value")),
            }
        };
        match flag {
            "-h" | "--help" => return Ok(Command::Help),
            "--url" => url = value()?,
            "--model" => model = Some(value()?),
            "--model-path" => model_path = Some(PathBuf::from(value()?)),
            "--endpoint" => {
                endpoint = match value()?.as_str() {
                    "chat" => Endpoint::Chat,
                    "completions" => Endpoint::Completions,
                    other => return Err(format!("--endpoint {other}: expected chat or completions")),
                }
            }
            "--stream" => stream = true,
            "--concurrency" => concurrency = Some(parse_num::<usize>(flag, &value()?)?),
            "--rate" => rate = Some(parse_num::<f64>(flag, &value()?)?),
            "--seed" => seed = parse_num(flag, &value()?)?,
            "--input-tokens" => input_tokens = parse_num(flag, &value()?)?,
            "--output-tokens" => output_tokens = parse_num(flag, &value()?)?,
            "--prefix-families" => prefix_families = parse_num(flag, &value()?)?,
            "--prefix-tokens" => prefix_tokens = Some(parse_num::<usize>(flag, &value()?)?),
            "--requests" => requests = Some(parse_num::<u64>(flag, &value()?)?),
            "--duration" => duration = Some(positive_secs(flag, &value()?)?),
            "--warmup" => warmup = parse_num(flag, &value()?)?,
            "--timeout" => timeout = positive_secs(flag, &value()?)?,
            "--json" => json = Some(PathBuf::from(value()?)),
            "--save-body" => save_body = Some(PathBuf::from(value()?)),
            "--start-at" => {
                let t: f64 = parse_num(flag, &value()?)?;
                if !(t.is_finite() && t > 0.0) {
                    return Err("--start-at takes a Unix time in seconds".into());
                }
                start_at = Some(t);
            }
            "--no-progress" => progress = false,
            "--allow-errors" => allow_errors = true,
            "--io-driver" => {
                driver = match value()?.as_str() {
                    "auto" => Driver::Auto,
                    "io-uring" => Driver::IoUring,
                    "epoll" => Driver::Epoll,
                    other => return Err(format!("--io-driver {other}: expected auto, io-uring or epoll")),
                }
            }
            "--compare" => {
                let a = value()?;
                let b = it.next().ok_or("--compare needs two report files")?;
                compare = Some((PathBuf::from(a), PathBuf::from(b)));
            }
            other => return Err(format!("unknown argument {other} (see switchyard bench --help)")),
        }
    }
    if let Some((a, b)) = compare {
        if args.len() != 3 {
            return Err("--compare takes two report files and nothing else".into());
        }
        return Ok(Command::Compare(a, b));
    }
    let model_path = model_path.ok_or("--model-path DIR is required (a model directory with tokenizer.json)")?;
    if !model_path.join("tokenizer.json").is_file() {
        return Err(format!("--model-path {}: no tokenizer.json there", model_path.display()));
    }
    if concurrency == Some(0) {
        return Err("--concurrency must be at least 1".into());
    }
    if let Some(r) = rate {
        if !(r.is_finite() && r > 0.0) {
            return Err("--rate must be a positive number of requests per second".into());
        }
    }
    if input_tokens == 0 {
        return Err("--input-tokens must be at least 1".into());
    }
    if output_tokens == 0 {
        return Err("--output-tokens must be at least 1".into());
    }
    if prefix_tokens.is_some() && prefix_families == 0 {
        return Err("--prefix-tokens needs --prefix-families".into());
    }
    let prefix_tokens = if prefix_families > 0 {
        let p = prefix_tokens.ok_or("--prefix-families needs --prefix-tokens")?;
        if p >= input_tokens {
            return Err(format!("--prefix-tokens {p} must be less than --input-tokens {input_tokens}"));
        }
        p
    } else {
        0
    };
    if requests == Some(0) {
        return Err("--requests must be at least 1".into());
    }
    if requests.is_none() && duration.is_none() {
        requests = Some(100);
    }
    let (host, addr) = parse_url(&url)?;
    Ok(Command::Run(Box::new(Args {
        url,
        host,
        addr,
        model,
        model_path,
        endpoint,
        stream,
        concurrency,
        rate,
        seed,
        input_tokens,
        output_tokens,
        prefix_families,
        prefix_tokens,
        requests,
        duration,
        warmup,
        timeout,
        json,
        save_body,
        start_at,
        progress,
        allow_errors,
        driver,
    })))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(list: &[&str]) -> Result<Command, String> {
        parse(&list.iter().map(|s| s.to_string()).collect::<Vec<_>>())
    }

    fn model_dir() -> String {
        let dir = std::env::temp_dir().join(format!("sy-bench-cli-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("tokenizer.json"), "{}").unwrap();
        dir.display().to_string()
    }

    #[test]
    fn defaults_and_values() {
        let m = model_dir();
        let Command::Run(a) = args(&["--model-path", &m]).unwrap() else { panic!() };
        assert_eq!((a.requests, a.input_tokens, a.output_tokens), (Some(100), 128, 32));
        assert_eq!((a.host.as_str(), a.addr.port()), ("127.0.0.1:8000", 8000));
        let Command::Run(a) =
            args(&["--model-path", &m, "--rate=20", "--duration", "1.5", "--url", "http://localhost:9/"]).unwrap()
        else {
            panic!()
        };
        assert_eq!((a.rate, a.requests, a.duration), (Some(20.0), None, Some(Duration::from_millis(1500))));
        assert_eq!(a.addr.port(), 9);
        assert!(matches!(args(&["--compare", "a", "b"]).unwrap(), Command::Compare(..)));
    }

    #[test]
    fn bad_input_is_a_clear_error() {
        let m = model_dir();
        let cases: &[(&[&str], &str)] = &[
            (&[], "--model-path DIR is required"),
            (&["--model-path", "/nonexistent"], "no tokenizer.json"),
            (&["--model-path", &m, "--concurrency", "0"], "at least 1"),
            (&["--model-path", &m, "--rate", "-3"], "--rate must be a positive"),
            (&["--model-path", &m, "--rate", "abc"], "not a valid number"),
            (&["--model-path", &m, "--timeout", "0"], "positive number of seconds"),
            (&["--model-path", &m, "--prefix-families", "2"], "needs --prefix-tokens"),
            (&["--model-path", &m, "--prefix-tokens", "2"], "needs --prefix-families"),
            (&["--model-path", &m, "--prefix-families", "2", "--prefix-tokens", "128"], "less than --input-tokens"),
            (&["--model-path", &m, "--url", "https://x"], "only http://"),
            (&["--model-path", &m, "--url", "http://x:1/v1"], "base URL"),
            (&["--model-path", &m, "--endpoint", "embeddings"], "expected chat or completions"),
            (&["--model-path", &m, "--bogus"], "unknown argument --bogus"),
            (&["--model-path", &m, "--start-at", "-1"], "Unix time in seconds"),
            (&["--model-path", &m, "--requests"], "needs a value"),
            (&["--compare", "a"], "two report files"),
            (&["--compare", "a", "b", "--stream"], "nothing else"),
        ];
        for (list, want) in cases {
            let e = args(list).unwrap_err();
            assert!(e.contains(want), "{list:?}: {e}");
        }
    }
}
