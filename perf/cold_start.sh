#!/usr/bin/env bash
# Cold start: the first long prompts right after the model is listed. Four in-tree
# `mock-worker --fast` processes on CPU 1; switchyard (kv routing, SHARDS shards) on CPU 0 is
# started ROUNDS times, and the moment /v1/models lists the model, `switchyard bench` sends
# 4,200-token prompts at 8 req/s for 4 s (max_tokens 1). A tokenizer or template still being
# built when the first requests arrive shows as a max far above the p50.
#
# Usage: bash perf/cold_start.sh   (SWITCHYARD_BIN=<release build>, ROUNDS=3, SHARDS=2)
set -euo pipefail
cd "$(dirname "$0")/.."
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
[ -x "$BIN" ] || { echo "cold_start.sh: build first (cargo build --release) or set SWITCHYARD_BIN" >&2; exit 1; }
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-cold.XXXXXX")
export DYN_FILE_KV=$WORK/kv DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in 1 2 3 4; do
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL" --model-name qwen3 --discovery-backend file --fast \
    >/dev/null 2>&1 &
  PIDS+=($!)
done
sleep 2
PORT=${PORT:-18878}
echo "| round | ok | failed | e2e p50 ms | p99 | max |"
echo "|---:|---:|---:|---:|---:|---:|"
for r in $(seq 1 "${ROUNDS:-3}"); do
  taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards "${SHARDS:-2}" \
    --no-pin-shards --router-mode kv >"$WORK/sy.log" 2>&1 &
  SY=$!
  for _ in $(seq 1 1200); do curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q qwen3 && break; sleep 0.05; done
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL" --input-tokens 4200 \
    --output-tokens 1 --rate 8 --duration 4 --seed "$r" --no-progress --json "$WORK/b.json" >/dev/null
  python3 - "$r" "$WORK/b.json" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[2]))
m = r["metrics"]["e2e"]
print(f"| {sys.argv[1]} | {r['ok']} | {r['failed']} | {m['p50']:.1f} | {m['p99']:.1f} | {m['max']:.1f} |")
PYEOF
  kill "$SY"; wait "$SY" 2>/dev/null || true
done
