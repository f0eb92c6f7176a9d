#!/usr/bin/env bash
# W3 latency with real workers: 4,200-token prompts that share long prefixes, kv routing, four
# real `python -m dynamo.mocker` workers, an open loop at RATE (8) req/s; switchyard (one
# shard) and the real `python -m dynamo.frontend` 1.6.1 (`--router-mode kv` both) alternating,
# ROUNDS (3) rounds. Every run starts the four mockers afresh (empty caches: neither frontend
# inherits the other's cached prefixes) and then its frontend; the load starts the moment the
# model is listed, so the first requests after start are in the figures (a frontend that lists
# a model before it can serve long prompts at full speed shows it in p99 and max).
# The frontend on CPU 0; the mockers and `switchyard bench` on CPU 1.
# Per run: requests ok/failed, TTFT p50/p99/max and ITL p50.
# Needs root (loopback-only network namespace). Writes a markdown table to stdout.
#
# Usage: bash perf/w3_real.sh   (ROUNDS=3, RATE=8, DURATION=30 (seconds of load),
#        FAMILIES=8 prompt families, PREFIX=4000 shared tokens of the 4,200, OUTPUT=32
#        streamed tokens, SPEEDUP=10 (the mockers' --speedup-ratio))
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-8}
DURATION=${DURATION:-30}
FAMILIES=${FAMILIES:-8}
PREFIX=${PREFIX:-4000}
OUTPUT=${OUTPUT:-32}
SPEEDUP=${SPEEDUP:-10}
scratch_dir

one_run() { # label round: fresh mockers, the frontend, the load; prints one table row
  local label=$1 round=$2 i fe
  export DYN_FILE_KV="$WORK/kv-$label-$round"
  mkdir -p "$DYN_FILE_KV"
  local mockers=()
  for i in 1 2 3 4; do
    taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --speedup-ratio "$SPEEDUP" >"$WORK/mocker-$label-$round-$i.log" 2>&1 &
    mockers+=($!)
    PIDS+=($!)
  done
  workers_registered 4 "$label round $round" || true
  if [ "$label" = dynamo ]; then
    taskset -c 0 "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --router-mode kv \
      --http-host 127.0.0.1 --http-port 18296 >"$WORK/fe-$label-$round.log" 2>&1 &
  else
    taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port 18296 --shards 1 \
      --no-pin-shards --router-mode kv >"$WORK/fe-$label-$round.log" 2>&1 &
  fi
  fe=$!
  PIDS+=($fe)
  qwen3_listed 18296
  taskset -c 1 "$BIN" bench --url http://127.0.0.1:18296 --model qwen3 --model-path "$MODEL_DIR" \
    --input-tokens 4200 --prefix-families "$FAMILIES" --prefix-tokens "$PREFIX" --output-tokens "$OUTPUT" \
    --stream --rate "$RATE" --duration "$DURATION" --seed "$round" --timeout 60 --allow-errors \
    --no-progress --json "$WORK/b.json" >/dev/null
  kill "$fe" "${mockers[@]}" 2>/dev/null || true
  wait "$fe" "${mockers[@]}" 2>/dev/null || true
  python3 - "$label" "$round" "$WORK/b.json" <<'PYEOF'
import json, sys
label, rnd, path = sys.argv[1:]
r = json.load(open(path))
t, itl = r["metrics"]["ttft"], r["metrics"].get("itl", {})
print(f"| {rnd} | {label} | {r['ok']} | {r['failed']} | {t['p50']:.1f} | {t['p99']:.1f} | {t['max']:.1f} "
      f"| {itl.get('p50', float('nan')):.2f} |")
PYEOF
}

echo "| round | frontend | ok | failed | TTFT p50 ms | TTFT p99 ms | TTFT max ms | ITL p50 ms |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
  if [ $((round % 2)) = 1 ]; then order="switchyard dynamo"; else order="dynamo switchyard"; fi
  for label in $order; do one_run "$label" "$round"; done
done
