#!/usr/bin/env bash
# W1 side by side: tiny non-streaming chat (~100 prompt tokens, max_tokens 1) through
# switchyard and through the real `python -m dynamo.frontend` 1.6.1, both in front of the same
# in-tree mock worker (fast mode, file discovery). The frontend is pinned to CPU 0, wrk and the
# worker to CPU 1; each frontend runs alone. Reports frontend CPU-µs per request (utime+stime
# from /proc over the wrk run) and requests/s. Needs root (loopback-only network namespace).
#
# Usage: bash perf/w1_side_by_side.sh        (DURATION=10 CONNS=8 ROUNDS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--inside" ]; then
  command -v wrk >/dev/null || { apt-get update -qq && apt-get install -y -qq wrk; }
fi
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
DURATION=${DURATION:-10}
CONNS=${CONNS:-8}
ROUNDS=${ROUNDS:-2}
WORK=$(mktemp -d)
export DYN_FILE_KV="$WORK/kv"
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

cat >"$WORK/w1.lua" <<'EOF'
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
wrk.body = '{"model":"qwen3","max_tokens":1,"messages":[{"role":"system","content":"You are a helpful assistant that answers briefly and precisely."},{"role":"user","content":"Please summarise the following in one sentence: The quick brown fox jumps over the lazy dog while the cat watches from the window and the birds sing in the old oak tree near the river bank on a sunny afternoon in late spring, and the farmer counts his sheep twice because he is not sure."}]}'
EOF

taskset -c 1 "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --fast 2>"$WORK/worker.log" &
PIDS+=($!)
TCK=$(getconf CLK_TCK)
cpu() { awk '{print $14+$15}' "/proc/$1/stat"; }

run() { # label port pid
  local label=$1 port=$2 pid=$3
  for _ in $(seq 1 120); do curl -s "localhost:$port/v1/models" | grep -q qwen3 && break; sleep 0.5; done
  # warm up
  taskset -c 1 wrk -t1 -c"$CONNS" -d2s -s "$WORK/w1.lua" "http://127.0.0.1:$port/v1/chat/completions" >/dev/null
  local c0; c0=$(cpu "$pid")
  local out; out=$(taskset -c 1 wrk -t1 -c"$CONNS" -d"${DURATION}s" -s "$WORK/w1.lua" "http://127.0.0.1:$port/v1/chat/completions")
  local c1; c1=$(cpu "$pid")
  local reqs; reqs=$(echo "$out" | awk '/requests in/ {print $1}')
  local non2xx; non2xx=$(echo "$out" | awk '/Non-2xx/ {print $4}')
  local rps; rps=$(echo "$out" | awk '/Requests\/sec/ {print $2}')
  local p50; p50=$(echo "$out" | awk '/Latency/ {print $2}')
  python3 -c "
t=($c1-$c0)/$TCK; n=$reqs
print(f'| $label | {n} | $rps | {t:.2f} | {t*1e6/max(n,1):.1f} | $p50 | ${non2xx:-0} |')"
}

echo "| frontend | requests | req/s | frontend CPU s | CPU µs/req | mean latency | non-2xx |"
echo "|---|---:|---:|---:|---:|---:|---:|"
for _ in $(seq 1 "$ROUNDS"); do
  taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port 18190 --shards 1 2>"$WORK/sy.log" &
  SY=$!
  run "switchyard (1 shard)" 18190 "$SY"
  kill "$SY"; wait "$SY" 2>/dev/null || true
  taskset -c 0 "$VENV/bin/python" -m dynamo.frontend --discovery-backend file --request-plane tcp \
    --http-host 127.0.0.1 --http-port 18191 >"$WORK/dyn.log" 2>&1 &
  DY=$!
  run "dynamo.frontend 1.6.1" 18191 "$DY"
  kill "$DY"; wait "$DY" 2>/dev/null || true
done
