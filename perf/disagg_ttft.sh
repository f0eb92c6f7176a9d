#!/usr/bin/env bash
# What disaggregated serving adds to TTFT at the same load: real `python -m dynamo.mocker`
# workers in three topologies — one aggregated worker (`agg`), a prefill worker and a decode
# worker handed off sequentially (`pd`: the decode leg waits for the prefill answer), and the
# same pair with a rendezvous (`pd-boot`: `--bootstrap-ports`, both legs at once) — behind
# switchyard (one shard) and the real `python -m dynamo.frontend` 1.6.1, both
# `--router-mode kv`, an open loop at RATE (10) req/s of INPUT-token prompts (1000) and OUTPUT
# (32) streamed tokens, ROUNDS (3) rounds with the frontends alternating. Every run starts its
# workers afresh, then its frontend; the frontend on CPU 0, the workers and `switchyard bench`
# on CPU 1. Per run: requests ok/failed, TTFT p50/p99 and ITL p50. The mockers' own prefill
# time is in every figure; the difference between a `pd` row and the `agg` row of the same
# frontend is what the hand-off adds (a second worker request, and for `pd` a second
# round trip before the decode starts).
# Needs root (loopback-only network namespace). Writes a markdown table to stdout.
#
# Usage: bash perf/disagg_ttft.sh   (ROUNDS=3 RATE=10 DURATION=20 INPUT=1000 OUTPUT=32
#        SPEEDUP=10 TOPOLOGIES="agg pd pd-boot")
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-10}
DURATION=${DURATION:-20}
INPUT=${INPUT:-1000}
OUTPUT=${OUTPUT:-32}
SPEEDUP=${SPEEDUP:-10}
TOPOLOGIES=${TOPOLOGIES:-agg pd pd-boot}
scratch_dir

mocker() { # log args...
  local log=$1; shift
  taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --request-plane tcp --event-plane zmq --speedup-ratio "$SPEEDUP" "$@" >"$WORK/$log" 2>&1 &
  WORKERS+=($!); PIDS+=($!)
}

one_run() { # frontend topology round: prints one table row
  local label=$1 topo=$2 round=$3 fe
  export DYN_FILE_KV="$WORK/kv-$label-$topo-$round"
  mkdir -p "$DYN_FILE_KV"
  WORKERS=()
  case "$topo" in
    agg) mocker "m-$label-$topo-$round.log"; workers_registered 1 "$topo" || true ;;
    pd | pd-boot)
      mocker "d-$label-$topo-$round.log" --disaggregation-mode decode
      if [ "$topo" = pd-boot ]; then
        mocker "p-$label-$topo-$round.log" --disaggregation-mode prefill --bootstrap-ports $((17900 + round))
      else
        mocker "p-$label-$topo-$round.log" --disaggregation-mode prefill
      fi
      workers_registered 2 "$topo" || true ;;
  esac
  if [ "$label" = dynamo ]; then
    taskset -c 0 "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --router-mode kv \
      --http-host 127.0.0.1 --http-port 18297 >"$WORK/fe-$label-$topo-$round.log" 2>&1 &
  else
    taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port 18297 --shards 1 \
      --no-pin-shards --router-mode kv >"$WORK/fe-$label-$topo-$round.log" 2>&1 &
  fi
  fe=$!
  PIDS+=($fe)
  qwen3_listed 18297
  sleep 1
  taskset -c 1 "$BIN" bench --url http://127.0.0.1:18297 --model qwen3 --model-path "$MODEL_DIR" \
    --input-tokens "$INPUT" --output-tokens "$OUTPUT" --stream --rate "$RATE" --duration "$DURATION" \
    --seed "$round" --timeout 60 --allow-errors --no-progress --json "$WORK/b.json" >/dev/null
  kill "$fe" "${WORKERS[@]}" 2>/dev/null || true
  wait "$fe" "${WORKERS[@]}" 2>/dev/null || true
  python3 - "$label" "$topo" "$round" "$WORK/b.json" <<'PYEOF'
import json, sys
label, topo, rnd, path = sys.argv[1:]
r = json.load(open(path))
t, itl = r["metrics"]["ttft"], r["metrics"].get("itl", {})
print(f"| {rnd} | {topo} | {label} | {r['ok']} | {r['failed']} | {t['p50']:.1f} | {t['p99']:.1f} "
      f"| {itl.get('p50', float('nan')):.2f} |")
PYEOF
}

echo "| round | topology | frontend | ok | failed | TTFT p50 ms | TTFT p99 ms | ITL p50 ms |"
echo "|---:|---|---|---:|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
  for topo in $TOPOLOGIES; do
    if [ $((round % 2)) = 1 ]; then order="switchyard dynamo"; else order="dynamo switchyard"; fi
    for label in $order; do one_run "$label" "$topo" "$round"; done
  done
done
