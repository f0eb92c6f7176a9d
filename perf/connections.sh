#!/usr/bin/env bash
# 10,000 idle keep-alive connections plus 2,000 concurrent streams on one shard
# (perf/connections.py): switchyard release build, one shard pinned to SERVER_CPU, the
# embedded mock workers (first token after their default delay), the client pinned to
# LOAD_CPU. Reports RSS per idle connection, TTFT p50/p99 unloaded and loaded, streams done
# and failed, peak RSS, RSS after everything closed. Bounded: HOLD seconds of streams.
#
#   perf/connections.sh              # IDLE=10000 STREAMS=2000 HOLD=20
set -euo pipefail
IDLE=${IDLE:-10000}; STREAMS=${STREAMS:-2000}; HOLD=${HOLD:-20}; TOKENS=${TOKENS:-64}
SERVER_CPU=${SERVER_CPU:-0}; LOAD_CPU=${LOAD_CPU:-1}; PORT=${PORT:-18460}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
[ "$(ulimit -n)" -gt $((IDLE + STREAMS + 100)) ] || { echo "need more open files than $(ulimit -n) (run as root)" >&2; exit 1; }
[ -n "${SWITCHYARD_BIN:-}" ] || cargo build --release --quiet
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
LOG=$(mktemp)
DYN_HTTP_LISTEN_BACKLOG=4096 taskset -c "$SERVER_CPU" "$BIN" --http-host 127.0.0.1 --http-port "$PORT" --shards 1 --discovery-backend mem \
  --embedded-model-path "$MODEL_DIR" --embedded-workers 2 >"$LOG" 2>&1 &
PID=$!
trap 'kill $PID 2>/dev/null; wait $PID 2>/dev/null; rm -f "$LOG"' EXIT
for _ in $(seq 1 600); do curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q qwen3 && break; sleep 0.1; done
taskset -c "$LOAD_CPU" python3 perf/connections.py --port "$PORT" --model qwen3 --pid "$PID" \
  --idle "$IDLE" --streams "$STREAMS" --tokens "$TOKENS" --hold-seconds "$HOLD"
curl -s "127.0.0.1:$PORT/metrics" | grep -E '^switchyard_limit_hits_total|^switchyard_http_connections_open'
