#!/usr/bin/env bash
# perf/bench_agreement.sh: do `switchyard bench`'s numbers agree with an independent client?
#
# Non-streaming: switchyard with in-process mock workers that add no delay (--discovery-backend
# mem --embedded-fast, one shard, pinned to SERVER_CPU). For each workload (/v1/completions,
# /v1/chat/completions) `switchyard bench` and wrk (a Lua script POSTing the bench's own
# request body, written by --save-body) run *at the same time* (the bench's --start-at), with
# CONNS connections each for DURATION seconds, both pinned to LOAD_CPU, ROUNDS times. Both
# closed loops share one server, so each should see the same latency and half the server's
# throughput. Compares requests/s and mean and p50 latency (the median over the rounds of
# each round's difference) and exits 1 if one is beyond TOLERANCE %. Also reports the bench
# client's own CPU per request (getrusage).
#
# Streaming: switchyard (file discovery) in front of one `switchyard mock-worker` process that
# waits STREAM_TTFT_MS before the first token and STREAM_ITL_MS between tokens (both pinned to
# SERVER_CPU), and `switchyard bench --stream` against aiperf
# (PyPI, AIPERF_VERSION, in a venv cached at AIPERF_VENV) streaming chat with the same prompt
# and output lengths at low load (one request at a time, STREAM_REQUESTS requests per run,
# STREAM_ROUNDS rounds, alternating order): requests/s, TTFT, ITL and end-to-end latency
# (mean and p50) must agree within TOLERANCE % as well. STREAM_ROUNDS=0 skips this part.
#
# Env: DURATION (s, default 5), CONNS (default 8), ROUNDS (default 5), INPUT (prompt tokens,
#      default 128), OUTPUT (max_tokens, default 16), TOLERANCE (%, default 10),
#      PORT (default 18490), SERVER_CPU (default 0), LOAD_CPU (default 1),
#      MODEL_DIR (default ~/.cache/switchyard-models/qwen3; `bash scripts/fetch-models.sh qwen3`),
#      STREAM_REQUESTS (default 60), STREAM_OUTPUT (default 64), STREAM_ROUNDS (default 2),
#      STREAM_TTFT_MS (default 100), STREAM_ITL_MS (default 5),
#      AIPERF_VENV (default ~/.cache/switchyard-aiperf-venv), AIPERF_VERSION (default 0.13.0).
# The tables also show each run's server CPU per request (utime+stime of the switchyard
# process from /proc, 10 ms ticks; in the wrk part it includes the in-process mock workers)
# next to the bench client's own, to show how much cheaper the client is.
# Output: a markdown table on stdout.
set -euo pipefail

DURATION=${DURATION:-5}
CONNS=${CONNS:-8}
ROUNDS=${ROUNDS:-5}
INPUT=${INPUT:-128}
OUTPUT=${OUTPUT:-16}
TOLERANCE=${TOLERANCE:-10}
PORT=${PORT:-18490}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
MODEL_DIR=${MODEL_DIR:-$HOME/.cache/switchyard-models/qwen3}
STREAM_REQUESTS=${STREAM_REQUESTS:-60}
STREAM_TTFT_MS=${STREAM_TTFT_MS:-100}
STREAM_ITL_MS=${STREAM_ITL_MS:-5}
STREAM_OUTPUT=${STREAM_OUTPUT:-64}
STREAM_ROUNDS=${STREAM_ROUNDS:-2}
AIPERF_VENV=${AIPERF_VENV:-$HOME/.cache/switchyard-aiperf-venv}
AIPERF_VERSION=${AIPERF_VERSION:-0.13.0}

PERF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$PERF_DIR/.." && pwd)
WORK=$(mktemp -d /tmp/bench_agreement.XXXXXX)

log() { printf '[bench_agreement] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 2; }

SERVER_PID=""
WORKER_PID=""
cleanup() {
    for pid in $SERVER_PID $WORKER_PID; do
        kill -TERM "$pid" 2>/dev/null || true
        wait "$pid" 2>/dev/null || true
    done
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- tools: wrk (Debian), taskset, python3 for the arithmetic --------------------------------
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
command -v python3 >/dev/null 2>&1 || missing+=(python3)
if ((${#missing[@]})); then
    [[ $(id -u) -eq 0 ]] || die "missing ${missing[*]}; as root run: apt-get install -y ${missing[*]}"
    log "installing: ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${missing[@]}" >/dev/null
fi
[[ -f $MODEL_DIR/tokenizer.json ]] || die "no $MODEL_DIR/tokenizer.json (bash scripts/fetch-models.sh qwen3)"
(($(nproc) >= 2)) || die "need 2 CPUs (server on $SERVER_CPU, clients on $LOAD_CPU)"

log "building switchyard (release)"
(cd "$REPO" && cargo build --release --quiet)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET_DIR = /* ]] || TARGET_DIR=$REPO/$TARGET_DIR
SY=$TARGET_DIR/release/switchyard
[[ -x $SY ]] || die "no binary at $SY"

if ((STREAM_ROUNDS > 0)) && [[ ! -x $AIPERF_VENV/bin/aiperf ]]; then
    log "installing aiperf $AIPERF_VERSION into $AIPERF_VENV"
    python3 -m venv "$AIPERF_VENV"
    "$AIPERF_VENV/bin/pip" install -q "aiperf==$AIPERF_VERSION"
fi

# --- the server ------------------------------------------------------------------------------
URL=http://127.0.0.1:$PORT
start_server() { # discovery flags...
    taskset -c "$SERVER_CPU" "$SY" "$@" --shards 1 --http-host 127.0.0.1 --http-port "$PORT" >"$WORK/server.log" 2>&1 &
    SERVER_PID=$!
    for _ in $(seq 1 200); do
        curl -sf "$URL/v1/models" 2>/dev/null | grep -q '"id"' && break
        kill -0 "$SERVER_PID" 2>/dev/null || { cat "$WORK/server.log" >&2; die "switchyard exited"; }
        sleep 0.1
    done
    curl -sf "$URL/v1/models" | grep -q '"id"' || die "no model served"
}
stop_server() {
    kill -TERM "$SERVER_PID" 2>/dev/null || true
    wait "$SERVER_PID" 2>/dev/null || true
    SERVER_PID=""
}
# CPU ticks (utime + stime, exited threads included) of the server so far.
server_ticks() { awk '{print $14 + $15}' "/proc/$SERVER_PID/stat"; }
start_server --discovery-backend mem --embedded-model-path "$MODEL_DIR" --embedded-fast

# wrk: POST the body in $BODY_FILE; print one JSON line of results from done().
cat >"$WORK/post.lua" <<'EOF'
local f = assert(io.open(os.getenv("BODY_FILE"), "rb"))
wrk.method = "POST"
wrk.body = f:read("*a")
f:close()
wrk.headers["Content-Type"] = "application/json"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    'WRKJSON {"requests":%d,"duration_us":%d,"mean_us":%.3f,"p50_us":%d,"p99_us":%d,' ..
    '"status":%d,"timeout":%d,"connect":%d,"read":%d,"write":%d}\n',
    summary.requests, summary.duration, latency.mean, latency:percentile(50), latency:percentile(99),
    e.status, e.timeout, e.connect, e.read, e.write))
end
EOF

bench() { # endpoint out.json [bench flags...]
    local ep=$1 out=$2
    shift 2
    taskset -c "$LOAD_CPU" "$SY" bench --url "$URL" --model-path "$MODEL_DIR" --endpoint "$ep" \
        --input-tokens "$INPUT" --output-tokens "$OUTPUT" --no-progress --json "$out" "$@" >"$out.txt"
}

# Both clients at once, CONNS connections each, over the same seconds: the bench prepares its
# requests, then waits for --start-at; wrk is started at that instant with the same duration.
# Both see the same server at the same moment (on this small shared machine the server's
# speed drifts between runs by more than the clients could differ).
for endpoint in completions chat; do
    path=/v1/chat/completions
    [[ $endpoint == completions ]] && path=/v1/completions
    bench "$endpoint" "$WORK/probe-$endpoint.json" --requests 1 --save-body "$WORK/body-$endpoint.json"
    BODY_FILE=$WORK/body-$endpoint.json taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d1s -s "$WORK/post.lua" \
        "$URL$path" >/dev/null
    for round in $(seq 1 "$ROUNDS"); do
        log "$endpoint round $round: switchyard bench and wrk together"
        start=$(python3 -c 'import time; print(f"{time.time() + 2:.3f}")')
        bench "$endpoint" "$WORK/bench-$endpoint-$round.json" --concurrency "$CONNS" --duration "$DURATION" \
            --start-at "$start" &
        bench_pid=$!
        python3 -c "import time; time.sleep(max(0.0, $start - time.time()))"
        t0=$(server_ticks)
        BODY_FILE=$WORK/body-$endpoint.json taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" \
            -s "$WORK/post.lua" "$URL$path" | sed -n 's/^WRKJSON //p' >"$WORK/wrk-$endpoint-$round.json"
        wait "$bench_pid" || die "switchyard bench failed: $(cat "$WORK/bench-$endpoint-$round.json.txt")"
        echo $(($(server_ticks) - t0)) >"$WORK/both-$endpoint-$round.ticks"
    done
done

stop_server

# --- streaming, low load: switchyard bench vs aiperf -----------------------------------------
sbench() { # out.json
    taskset -c "$LOAD_CPU" "$SY" bench --url "$URL" --model-path "$MODEL_DIR" --stream --concurrency 1 \
        --requests "$STREAM_REQUESTS" --warmup 10 --input-tokens "$INPUT" --output-tokens "$STREAM_OUTPUT" \
        --no-progress --json "$1" >"$1.txt"
}
saiperf() { # out.json
    local dir=$WORK/aiperf-$RANDOM
    taskset -c "$LOAD_CPU" "$AIPERF_VENV/bin/aiperf" profile --model qwen3 --url "$URL" --endpoint-type chat \
        --streaming --concurrency 1 --request-count "$STREAM_REQUESTS" --warmup-request-count 10 \
        --synthetic-input-tokens-mean "$INPUT" --synthetic-input-tokens-stddev 0 \
        --output-tokens-mean "$STREAM_OUTPUT" --output-tokens-stddev 0 --extra-inputs ignore_eos:true \
        --tokenizer "$MODEL_DIR" --random-seed 1 --ui none --artifact-dir "$dir" >"$dir.log" 2>&1 ||
        { tail -20 "$dir.log" >&2; die "aiperf failed"; }
    cp "$dir/profile_export_aiperf.json" "$1"
}
if ((STREAM_ROUNDS > 0)); then
    export DYN_FILE_KV=$WORK/kv
    mkdir -p "$DYN_FILE_KV"
    taskset -c "$SERVER_CPU" "$SY" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 \
        --ttft-ms "$STREAM_TTFT_MS" --itl-ms "$STREAM_ITL_MS" >"$WORK/worker.log" 2>&1 &
    WORKER_PID=$!
    start_server --discovery-backend file
    for round in $(seq 1 "$STREAM_ROUNDS"); do
        if ((round % 2)); then order="sbench saiperf"; else order="saiperf sbench"; fi
        for client in $order; do
            log "streaming round $round: $client"
            t0=$(server_ticks)
            "$client" "$WORK/$client-$round.json"
            echo $(($(server_ticks) - t0)) >"$WORK/$client-$round.ticks"
        done
    done
    stop_server
fi

python3 - "$WORK" "$ROUNDS" "$TOLERANCE" "$CONNS" "$DURATION" "$INPUT" "$OUTPUT" "$STREAM_ROUNDS" "$STREAM_REQUESTS" "$STREAM_OUTPUT" "$STREAM_TTFT_MS" "$STREAM_ITL_MS" <<'EOF'
import json, statistics, sys
work, rounds, tol, conns, duration, inp, out = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), *sys.argv[4:8]
srounds, sreq, sout = int(sys.argv[8]), sys.argv[9], sys.argv[10]
print(f"Non-streaming, closed loop, switchyard bench and wrk at the same time, {conns} connections each, {duration} s, "
      f"{rounds} rounds, {inp} prompt tokens, max_tokens {out}; server: switchyard, 1 shard, 2 embedded fast mock "
      f"workers (its CPU includes them). Verdict on the median of the per-round differences.\n")
def verdict(what, names, bench_rows, other, other_rows):
    """Print bench vs the other client for each named column: the median over the rounds of
    each round's difference (the two runs of a round are next to each other in time, so they
    share the machine's state more than any other pair); returns the largest in %."""
    worst = 0.0
    for i, name in enumerate(names):
        diffs = [(b[i + 1] - o[i + 1]) * 100.0 / o[i + 1] for b, o in zip(bench_rows, other_rows)]
        diff = statistics.median(diffs)
        bv = statistics.median(row[i + 1] for row in bench_rows)
        ov = statistics.median(row[i + 1] for row in other_rows)
        worst = max(worst, abs(diff))
        mark = "ok" if abs(diff) <= tol else f"BEYOND {tol:.0f} %"
        print(f"- {what}, {name}: bench {bv:.3f}, {other} {ov:.3f} (medians); per-round difference, median "
              f"{diff:+.1f} % (range {min(diffs):+.1f} … {max(diffs):+.1f} %) ({mark})")
    return worst

def server_us(name, n):
    """Server CPU-µs per request of one run (ticks are 10 ms; warm-up requests included)."""
    return int(open(f"{work}/{name}.ticks").read()) * 10000 / max(n, 1)

print("| workload | round | client | requests | req/s | mean ms | p50 ms | failed | bench CPU-µs/req | server CPU-µs/req (both clients) |")
print("|---|---:|---|---:|---:|---:|---:|---:|---:|---:|")
worst, ok = 0.0, True
for ep in ("completions", "chat"):
    rows = {"bench": [], "wrk": []}
    for r in range(1, rounds + 1):
        b = json.load(open(f"{work}/bench-{ep}-{r}.json"))
        w = json.load(open(f"{work}/wrk-{ep}-{r}.json"))
        bm = b["metrics"]["e2e"]
        brow = (b["ok"], b["requests_per_s"], bm["mean"], bm["p50"], b["failed"])
        wfail = w["status"] + w["timeout"] + w["connect"] + w["read"] + w["write"]
        wrow = (w["requests"], w["requests"] / (w["duration_us"] / 1e6), w["mean_us"] / 1e3, w["p50_us"] / 1e3, wfail)
        if b["failed"] or wfail:
            ok = False
        cpu = b["bench_cpu"]["us_per_request"]
        srv = server_us(f"both-{ep}-{r}", b["ok"] + b["failed"] + wrow[0])
        print(f"| {ep} | {r} | switchyard bench | {brow[0]} | {brow[1]:.0f} | {brow[2]:.3f} | {brow[3]:.3f} | {brow[4]} | {cpu:.1f} | {srv:.0f} |")
        print(f"| {ep} | {r} | wrk | {wrow[0]} | {wrow[1]:.0f} | {wrow[2]:.3f} | {wrow[3]:.3f} | {wrow[4]} | | |")
        rows["bench"].append(brow)
        rows["wrk"].append(wrow)
    print()
    worst = max(worst, verdict(ep, ("req/s", "mean latency (ms)", "p50 latency (ms)"), rows["bench"], "wrk", rows["wrk"]))
    print()
if srounds:
    print(f"Streaming chat, one request at a time, {sreq} requests per run, {srounds} rounds, {inp} prompt tokens, "
          f"{sout} output tokens; server: switchyard, 1 shard, file discovery, one `switchyard mock-worker` process "
          f"with {sys.argv[11]} ms TTFT and {sys.argv[12]} ms ITL.\n")
    print("| round | client | ok | req/s | TTFT mean ms | TTFT p50 ms | ITL mean ms | E2E mean ms | E2E p50 ms | bench CPU-µs/req | server CPU-µs/req |")
    print("|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    rows = {"bench": [], "aiperf": []}
    for r in range(1, srounds + 1):
        b = json.load(open(f"{work}/sbench-{r}.json"))
        a = json.load(open(f"{work}/saiperf-{r}.json"))
        m = b["metrics"]
        brow = (b["ok"], b["requests_per_s"], m["ttft"]["mean"], m["ttft"]["p50"], m["itl"]["mean"], m["e2e"]["mean"], m["e2e"]["p50"])
        aok = int(a["request_count"]["avg"])
        arow = (aok, a["request_throughput"]["avg"], a["time_to_first_token"]["avg"], a["time_to_first_token"]["p50"],
                a["inter_token_latency"]["avg"], a["request_latency"]["avg"], a["request_latency"]["p50"])
        if b["failed"] or a.get("error_summary"):
            ok = False
        cpu = b["bench_cpu"]["us_per_request"]
        bs = server_us(f"sbench-{r}", b["ok"] + b["failed"] + 10)
        as_ = server_us(f"saiperf-{r}", aok + 10)
        print(f"| {r} | switchyard bench | {brow[0]} | " + " | ".join(f"{v:.3f}" for v in brow[1:]) + f" | {cpu:.1f} | {bs:.0f} |")
        print(f"| {r} | aiperf | {arow[0]} | " + " | ".join(f"{v:.3f}" for v in arow[1:]) + f" | | {as_:.0f} |")
        rows["bench"].append(brow)
        rows["aiperf"].append(arow)
    print()
    names = ("req/s", "TTFT mean (ms)", "TTFT p50 (ms)", "ITL mean (ms)", "E2E mean (ms)", "E2E p50 (ms)")
    worst = max(worst, verdict("streaming", names, rows["bench"], "aiperf", rows["aiperf"]))
    print()
print(f"Largest difference: {worst:.1f} % (tolerance {tol:.0f} %).")
if not ok:
    print("FAIL: a client saw failed requests.")
    sys.exit(1)
sys.exit(0 if worst <= tol else 1)
EOF
