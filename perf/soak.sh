#!/usr/bin/env bash
# Memory under a steady mixed load: does switchyard's resident memory stay flat, stay under
# its budget, and come back once the load stops?
#
#   bash perf/soak.sh              # 30 minutes of load, RSS every 10 s, plot in perf/plots/
#   bash perf/soak.sh --short      # the CI variant: ~2.5 minutes (90 s of load), RSS every 2 s
#   DURATION=600 bash perf/soak.sh # any length (seconds of load)
#
# One switchyard shard (pinned to CPU 0) in front of two in-tree mock workers
# (`mock-worker --fast`); five open-loop `switchyard bench` clients (Poisson arrivals) on
# CPU 1, together RATE requests/s (default 50):
#   40 %  chat, streamed,     1,000 prompt tokens,  64 output tokens (W2)
#   25 %  chat, whole,          100 prompt tokens,  16 output tokens
#   15 %  completions, streamed, 300 prompt tokens, 128 output tokens
#   15 %  completions, whole, 2,000 prompt tokens,   8 output tokens
#    5 %  chat, streamed,     6,000 prompt tokens,  32 output tokens (over 16 KB of text:
#         tokenized on the shard's helper thread)
# Phases: cold (IDLE_S, ready, before any request), prime (3 requests of each kind, one at a
# time: what the first requests build once, the shard's tokenizer word cache (2 MB) and the
# helper thread, is built then), idle (IDLE_S, no requests), load (DURATION; its first WARMUP
# seconds are the warm-up), after (SETTLE_S, no requests). VmRSS, VmHWM and anonymous memory
# (and the server's open descriptors: connections) are sampled every SAMPLE_S seconds into
# OUT/rss.csv. The verdict (exit 1, saying which
# bound failed and by how much):
#   peak    VmHWM over the whole run (start included)            < PEAK_MB (100)
#   growth  median RSS of three windows after the warm-up (first, middle, last; a window: a
#           tenth of the load after warm-up, at least 3 samples); fails when RSS rises in
#           both halves, each by GROWTH_PCT/2 (2.5 %) or more: a leak grows with every
#           request, so a leak of GROWTH_PCT over the load fails as before, while a one-off
#           step lies in one half only (~2 MB: the tokenizer's second encode scratch, built
#           the first time the shard and its long-prompt helper encode at once, which
#           happens by chance anywhere from the prime to 60 s into the load)
#   return  RSS at the end of `after` over the idle RSS          < RETURN_PCT (10 %)
#           (the cold figure is reported beside it)
#   and no failed request.
# Output: OUT (default perf/out/soak-<UTC time>): rss.csv, the bench reports, summary.md and
# soak_rss.png (perf/plot.py --soak); the full run also copies the plot to
# perf/plots/soak_rss.png. SWITCHYARD_BIN names the binary (default: a release build).
# Knobs: DURATION, WARMUP, SAMPLE_S, IDLE_S, SETTLE_S, RATE, PEAK_MB, GROWTH_PCT, RETURN_PCT,
# START_IN (30: seconds the clients get to prepare), PORT (18500), OUT.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
SHORT=0
[ "${1:-}" = "--short" ] && SHORT=1
if [ "$SHORT" = 1 ]; then
  DURATION=${DURATION:-90} WARMUP=${WARMUP:-45} SAMPLE_S=${SAMPLE_S:-2} IDLE_S=${IDLE_S:-6} SETTLE_S=${SETTLE_S:-16}
else
  DURATION=${DURATION:-1800} WARMUP=${WARMUP:-300} SAMPLE_S=${SAMPLE_S:-10} IDLE_S=${IDLE_S:-30} SETTLE_S=${SETTLE_S:-60}
fi
RATE=${RATE:-50}
START_IN=${START_IN:-30}
PEAK_MB=${PEAK_MB:-100}
GROWTH_PCT=${GROWTH_PCT:-5}
RETURN_PCT=${RETURN_PCT:-10}
PORT=${PORT:-18500}
OUT=${OUT:-$ROOT/perf/out/soak-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet
  SWITCHYARD_BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
BIN=$(realpath "$SWITCHYARD_BIN")
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
[ -f "$MODEL_DIR/tokenizer.json" ] || bash scripts/fetch-models.sh qwen3 >/dev/null

WORK=$(mktemp -d)
export DYN_FILE_KV="$WORK/kv"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

for i in 1 2; do
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --fast --output-tokens 256 >"$WORK/worker$i.log" 2>&1 &
  PIDS+=($!)
done
taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards 1 \
  --no-pin-shards >"$OUT/switchyard.log" 2>&1 &
SY=$!
PIDS+=("$SY")
for _ in $(seq 1 600); do
  curl -s "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' && break
  sleep 0.1
done
curl -s "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' || { echo "FAIL: switchyard did not list qwen3" >&2; exit 1; }
sleep 3 # the start's last frees reach the system

# Milliseconds since the first sample (bash's own clock: no process per sample).
now_ms() { local t=${EPOCHREALTIME/./}; echo $((t / 1000)); }
T0=$(now_ms)
PHASE=cold
echo "t_s,phase,rss_kb,hwm_kb,anon_kb,fds" >"$OUT/rss.csv"
sample() {
  local t rss hwm anon fds
  t=$(($(now_ms) - T0))
  rss=$(awk '$1 == "VmRSS:" {print $2}' /proc/"$SY"/status)
  hwm=$(awk '$1 == "VmHWM:" {print $2}' /proc/"$SY"/status)
  anon=$(awk '$1 == "Anonymous:" {print $2}' /proc/"$SY"/smaps_rollup)
  fds=$(find /proc/"$SY"/fd -mindepth 1 -maxdepth 1 2>/dev/null | wc -l)
  printf '%d.%d,%s,%s,%s,%s,%s\n' $((t / 1000)) $((t % 1000 / 100)) "$PHASE" "$rss" "$hwm" "$anon" "$fds" >>"$OUT/rss.csv"
}
# Sample every SAMPLE_S seconds for `$1` seconds.
sample_for() {
  local end=$(($(now_ms) + $1 * 1000))
  while [ "$(now_ms)" -lt "$end" ]; do
    sample
    sleep "$SAMPLE_S"
  done
}

echo "== cold ${IDLE_S}s, prime, idle ${IDLE_S}s, load ${DURATION}s at ${RATE} req/s (warm-up ${WARMUP}s), after ${SETTLE_S}s; RSS every ${SAMPLE_S}s" >&2
sample_for "$IDLE_S"

# name share endpoint stream input output
MIX="w2:40:chat:1:1000:64 chat_whole:25:chat:0:100:16 cmpl_stream:15:completions:1:300:128 cmpl_whole:15:completions:0:2000:8 long:5:chat:1:6000:32"
# `bench` with the flags of one MIX entry and then the given ones.
bench_mix() {
  local name share endpoint stream input output
  IFS=: read -r name share endpoint stream input output <<<"$1"
  shift
  local flags=(--endpoint "$endpoint" --input-tokens "$input" --output-tokens "$output")
  [ "$stream" = 1 ] && flags+=(--stream)
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL_DIR" "${flags[@]}" \
    --seed 7 --timeout 60 --no-progress "$@"
}

# Prime: a few requests of each kind, one at a time. What the first requests build once (the
# tokenizer's word cache on the shard, the helper thread of long prompts) is then in the idle
# figure the return is measured against; the cold figure is reported too.
PHASE=prime
for m in $MIX; do
  bench_mix "$m" --requests 3 --concurrency 1 >>"$WORK/prime.out" 2>&1 || { cat "$WORK/prime.out" >&2; exit 1; }
done
PHASE=idle
sample_for "$IDLE_S"

# The clients prepare their prompts first (seconds each, on one core); they all start at
# START, when the load phase begins. Each keeps at most 16 connections: enough for its rate,
# and the count of idle keep-alive connections (each costs the server memory) stays bounded.
START=$(($(date +%s) + START_IN))
LOADS=()
for m in $MIX; do
  name=${m%%:*}
  share=$(cut -d: -f2 <<<"$m")
  rate=$(python3 -c "print(round($RATE * $share / 100, 2))")
  bench_mix "$m" --rate "$rate" --concurrency 16 --duration "$DURATION" --start-at "$START" --allow-errors \
    --json "$OUT/bench-$name.json" >"$WORK/bench-$name.out" 2>&1 &
  LOADS+=($!)
  PIDS+=($!)
done
sample_for $((START - $(date +%s)))
PHASE=load
sample_for "$DURATION"
for p in "${LOADS[@]}"; do wait "$p" || true; done
PHASE=after
sample_for "$SETTLE_S"
sample

status=0
python3 - "$OUT" "$WARMUP" "$PEAK_MB" "$GROWTH_PCT" "$RETURN_PCT" "$RATE" "$DURATION" "$(basename "$BIN")" <<'PYEOF' || status=$?
import csv, json, statistics, sys
from pathlib import Path
out, warmup, peak_mb, growth_pct, return_pct, rate, duration, binary = sys.argv[1:]
out = Path(out)
warmup, peak_mb, growth_pct, return_pct = float(warmup), float(peak_mb), float(growth_pct), float(return_pct)
rows = list(csv.DictReader(open(out / "rss.csv")))
mb = lambda r, k="rss_kb": int(r[k]) / 1024
idle = [mb(r) for r in rows if r["phase"] == "idle"]
cold = [mb(r) for r in rows if r["phase"] == "cold"]
load = [r for r in rows if r["phase"] == "load"]
after = [r for r in rows if r["phase"] == "after"]
t_load0 = float(load[0]["t_s"])
steady = [mb(r) for r in load if float(r["t_s"]) - t_load0 >= warmup]
win = max(3, len(steady) // 10)
if len(steady) < 2 * win:
    sys.exit(f"FAIL: only {len(steady)} samples after the warm-up; make DURATION longer than WARMUP")
first, last = statistics.median(steady[:win]), statistics.median(steady[-win:])
mid_at = (len(steady) - win) // 2
mid = statistics.median(steady[mid_at:mid_at + win])
half1, half2 = (mid - first) / first * 100, (last - mid) / mid * 100
idle_mb = statistics.median(idle)
end_mb = mb(after[-1])
peak = max(mb(r, "hwm_kb") for r in rows)
load_max = max(mb(r) for r in load)
growth = (last - first) / first * 100
ret = (end_mb - idle_mb) / idle_mb * 100
cold_mb = statistics.median(cold)
ret_cold = (end_mb - cold_mb) / cold_mb * 100
reports = {p.stem[6:]: json.load(open(p)) for p in sorted(out.glob("bench-*.json"))}
ok = sum(r["ok"] for r in reports.values())
failed = sum(r["failed"] for r in reports.values())
checks = [
    ("peak", peak < peak_mb, f"VmHWM {peak:.1f} MB (start included); budget {peak_mb:.0f} MB"),
    ("growth", min(half1, half2) < growth_pct / 2,
     f"median RSS {first:.1f} MB after the warm-up, {mid:.1f} MB midway, {last:.1f} MB at the end: "
     f"{half1:+.1f} % then {half2:+.1f} % ({growth:+.1f} % in all; bound: {growth_pct / 2:.1f} % in both halves)"),
    ("return", ret < return_pct,
     f"RSS {end_mb:.1f} MB after the load against {idle_mb:.1f} MB idle: {ret:+.1f} % (bound {return_pct:.0f} %)"),
    ("requests", failed == 0, f"{ok} ok, {failed} failed"),
]
md = [f"# Soak: {binary}, {duration} s at {rate} req/s (mixed), warm-up {warmup:.0f} s", "",
      "| check | result | measured |", "|---|---|---|"]
md += [f"| {name} | {'pass' if good else 'FAIL'} | {what} |" for name, good, what in checks]
md += ["", f"RSS during the load: max {load_max:.1f} MB; idle {idle_mb:.1f} MB after the first requests, "
       f"{cold_mb:.1f} MB before any (after the load: {ret_cold:+.1f} % over that).", "",
       "| load | ok | failed | achieved req/s | TTFT or latency p50 ms | p99 ms |", "|---|---:|---:|---:|---:|---:|"]
for name, r in reports.items():
    m = r["metrics"]
    first_ms = m["ttft"] if m.get("ttft", {}).get("count") else m["e2e"]
    md.append(f"| {name} | {r['ok']} | {r['failed']} | {r['requests_per_s']:.1f} | {first_ms['p50']:.2f} | {first_ms['p99']:.2f} |")
(out / "summary.md").write_text("\n".join(md) + "\n")
print("\n".join(md))
bad = [(n, w) for n, good, w in checks if not good]
for n, w in bad:
    print(f"FAIL: {n}: {w}", file=sys.stderr)
sys.exit(1 if bad else 0)
PYEOF

# The plot: matplotlib in a venv, as perf/side_by_side.sh sets it up (the short run only uses
# it when it is there already).
PLOT_VENV=${PLOT_VENV:-$HOME/.cache/switchyard-plot-venv}
if [ "$SHORT" = 0 ] && ! "$PLOT_VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  { [ -x "$PLOT_VENV/bin/python" ] || python3 -m venv "$PLOT_VENV"; } && "$PLOT_VENV/bin/pip" install -q "matplotlib==3.9.2" || true
fi
if [ -x "$PLOT_VENV/bin/python" ] && "$PLOT_VENV/bin/python" -c "import matplotlib" 2>/dev/null; then
  "$PLOT_VENV/bin/python" perf/plot.py --soak "$OUT" >/dev/null
  [ "$SHORT" = 0 ] && cp "$OUT/soak_rss.png" perf/plots/soak_rss.png
else
  echo "no matplotlib in $PLOT_VENV: no plot" >&2
fi
echo "results: $OUT/summary.md" >&2
exit "$status"
