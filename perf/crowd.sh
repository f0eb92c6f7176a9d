#!/usr/bin/env bash
# A crowd on one shard: IDLE idle keep-alive connections plus STREAMS concurrent streams, and
# the TTFT a light client sees meanwhile against the TTFT it sees on an empty server.
#
#   bash perf/crowd.sh                       # IDLE=10000 STREAMS=2000; ~2 minutes
#   IDLE=19800 STREAMS=0 bash perf/crowd.sh  # as many idle connections as one process may hold here
#   (perf/flood.py: a 20,000-connection flood against a shard with a connection limit)
#
# switchyard (release build, one shard) on CPU 0; one in-tree mock worker process
# (`switchyard mock-worker`, first token after TTFT_MS, then one token every ITL_MS: a
# decoding GPU's pace, not a flood) and every client on CPU 1; file discovery; 127.0.0.1 only.
# The clients are `switchyard bench` (native) for the streams and the probe, and a small
# Python holder for the idle connections (each answered `GET /live` once, then silent).
# Phases:
#   1. probe alone: PROBES streamed chats one after another (128 prompt tokens, 2 answer
#      tokens): TTFT p50/p99 unloaded;
#   2. IDLE connections opened and held; the server's RSS before and after;
#   3. with them held, STREAMS streams of TOKENS tokens in a closed loop for DURATION s, and
#      after RAMP s the probe again: TTFT p50/p99 loaded; streams done and failed;
#   4. everything closed: RSS SETTLE s later; the server's limit counters.
# Prints a markdown table row per phase and the verdicts (p99 within 2x, idle < 4 KB each).
# Knobs: IDLE, STREAMS, TOKENS (64), ITL_MS (100), TTFT_MS (10), DURATION (30), RAMP (10),
# PROBES (100), PORT (18470), SETTLE (3), SWITCHYARD_BIN (default: a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
IDLE=${IDLE:-10000}; STREAMS=${STREAMS:-2000}; TOKENS=${TOKENS:-64}; ITL_MS=${ITL_MS:-100}
TTFT_MS=${TTFT_MS:-10}; DURATION=${DURATION:-30}; RAMP=${RAMP:-10}; PROBES=${PROBES:-100}
PORT=${PORT:-18470}; SETTLE=${SETTLE:-3}
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet
  SWITCHYARD_BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
BIN=$(realpath "$SWITCHYARD_BIN")
NOFILE=$((IDLE + 2 * STREAMS + 150))
[ "$(ulimit -Hn)" = unlimited ] || [ "$(ulimit -Hn)" -ge "$NOFILE" ] || ulimit -Hn "$NOFILE" 2>/dev/null || true
ulimit -n "$NOFILE" 2>/dev/null || {
  echo "need $NOFILE open files, the hard limit is $(ulimit -Hn) (run as root)" >&2
  exit 1
}
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
WORK=$(mktemp -d)
export DYN_FILE_KV="$WORK/kv"
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/status"; }
mb() { awk -v k="$1" 'BEGIN {printf "%.1f", k / 1024}'; }

taskset -c 1 "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
  --ttft-ms "$TTFT_MS" --itl-ms "$ITL_MS" --output-tokens 4096 >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
DYN_HTTP_LISTEN_BACKLOG=4096 taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 \
  --http-port "$PORT" --shards 1 --no-pin-shards >"$WORK/switchyard.log" 2>&1 &
SY=$!
PIDS+=("$SY")
for _ in $(seq 1 600); do
  curl -s "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' && break
  sleep 0.1
done
curl -s "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' || { echo "FAIL: switchyard did not list qwen3" >&2; exit 1; }

bench() { # json-out args...: switchyard bench on CPU 1 against the server
  local out=$1; shift
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL_DIR" \
    --endpoint chat --stream --no-progress --json "$out" "$@" >/dev/null
}
ttft() { # json → "p50 p99" of TTFT in ms
  python3 -c 'import json, sys; m = json.load(open(sys.argv[1]))["metrics"]["ttft"]; print("%.1f %.1f" % (m["p50"], m["p99"]))' "$1"
}
counts() { # json → "ok failed"
  python3 -c 'import json, sys; r = json.load(open(sys.argv[1])); print(r["ok"], r["failed"])' "$1"
}

echo "== probe alone ($PROBES streamed chats, one at a time)" >&2
bench "$WORK/unloaded.json" --concurrency 1 --requests "$PROBES" --input-tokens 128 --output-tokens 2 --warmup 5
read -r u50 u99 <<<"$(ttft "$WORK/unloaded.json")"

sleep "$SETTLE"
rss0=$(kb "$SY" VmRSS)
echo "== $IDLE idle connections" >&2
coproc HOLD { taskset -c 1 python3 perf/hold_conns.py "$PORT" "$IDLE" used; }
PIDS+=("$HOLD_PID")
read -r line <&"${HOLD[0]}"
[ "$line" = "open $IDLE" ] || { echo "FAIL: holder: $line" >&2; exit 1; }
sleep "$SETTLE"
rss1=$(kb "$SY" VmRSS)

l50=-; l99=-; sok=0; sfail=0
if [ "$STREAMS" -gt 0 ]; then
  echo "== $STREAMS streams for ${DURATION} s, the probe after ${RAMP} s" >&2
  bench "$WORK/streams.json" --concurrency "$STREAMS" --duration "$DURATION" --input-tokens 128 \
    --output-tokens "$TOKENS" --timeout 120 --allow-errors &
  load=$!
  sleep "$RAMP"
  bench "$WORK/loaded.json" --concurrency 1 --requests "$PROBES" --input-tokens 128 --output-tokens 2 --allow-errors
  read -r l50 l99 <<<"$(ttft "$WORK/loaded.json")"
  rss_peak=$(kb "$SY" VmHWM)
  wait "$load" || true
  read -r sok sfail <<<"$(counts "$WORK/streams.json")"
fi
rss_held=$(kb "$SY" VmRSS)
echo close >&"${HOLD[1]}"
read -r line <&"${HOLD[0]}"
closed=${line#closed }
sleep "$SETTLE"
rss2=$(kb "$SY" VmRSS)
hwm=$(kb "$SY" VmHWM)
limits=$(curl -s "127.0.0.1:$PORT/metrics" | grep -E '^switchyard_limit_hits_total' | awk '$2 > 0' | tr '\n' ' ')

per=$(awk -v a="$rss0" -v b="$rss1" -v n="$IDLE" 'BEGIN {printf "%.2f", (b - a) / n}')
echo
echo "| idle | streams | TTFT p50/p99 alone ms | TTFT p50/p99 in the crowd ms | streams ok/failed | RSS rest → idle held MB | KB per idle conn | idle closed by server | RSS after all, MB | VmHWM MB |"
echo "|---:|---:|---|---|---|---|---:|---:|---:|---:|"
echo "| $IDLE | $STREAMS | $u50 / $u99 | $l50 / $l99 | $sok / $sfail | $(mb "$rss0") → $(mb "$rss1") | $per | $closed | $(mb "$rss2") | $(mb "$hwm") |"
echo "limit counters above zero: ${limits:-none}"
echo "RSS with idle held after the streams: $(mb "$rss_held") MB"
verdict=0
if [ "$STREAMS" -gt 0 ]; then
  python3 -c "import sys; sys.exit(0 if float('$l99') <= 2 * float('$u99') else 1)" \
    && echo "ok: loaded TTFT p99 $l99 ms <= 2 x $u99 ms" \
    || { echo "over: loaded TTFT p99 $l99 ms > 2 x $u99 ms"; verdict=1; }
  [ "$sfail" = 0 ] || { echo "over: $sfail streams failed"; verdict=1; }
fi
python3 -c "import sys; sys.exit(0 if ($rss1 - $rss0) / 1024 < 40 * $IDLE / 10000 else 1)" \
  && echo "ok: $IDLE idle connections add $(mb $((rss1 - rss0))) MB" \
  || { echo "over: $IDLE idle connections add $(mb $((rss1 - rss0))) MB (budget 40 MB per 10,000)"; verdict=1; }
[ "$closed" = 0 ] || { echo "over: the server closed $closed idle connections"; verdict=1; }
exit "$verdict"
