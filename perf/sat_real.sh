#!/usr/bin/env bash
# W2-sat: closed loop at saturation with a real `python -m dynamo.mocker` worker, switchyard
# (one shard) and the real `python -m dynamo.frontend` 1.6.1 alternating in one run. Each
# frontend on CPU 0; the worker and `switchyard bench` (128-token prompts, 64 streamed tokens,
# C concurrent streams) on CPU 1. Per round and frontend: requests ok, req/s, TTFT p50/p99,
# the frontend's CPU per request (user and kernel apart, 10 ms ticks from /proc/PID/stat) and
# the worker's CPU per request (its process and children, the same way): a worker must not
# serve less or work harder because of the frontend in front of it.
# Needs root (loopback-only network namespace). Writes a markdown table to stdout.
#
# Usage: bash perf/sat_real.sh   (CONCS="256 2000": the concurrencies; ROUNDS=3, N=<requests
#        per run, default 20 per stream, at least 6000>, SPEEDUP=10 (the mocker's
#        --speedup-ratio), BASE_BIN=<another switchyard build> adds it to every round,
#        SKIP_DYNAMO=1 leaves dynamo.frontend out, SY_ARGS="..." extra switchyard flags,
#        BENCH_CPU=0 puts the client on the frontend's core instead of the worker's)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
CONCS=${CONCS:-256 2000}
ROUNDS=${ROUNDS:-3}
SPEEDUP=${SPEEDUP:-10}
scratch_dir

taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
  --request-plane tcp --event-plane zmq --speedup-ratio "$SPEEDUP" >"$WORK/mocker.log" 2>&1 &
MOCKER=$!
PIDS+=($MOCKER)

# utime + stime ticks of a process and all its descendants
ticks() {
  local p all=$1 frontier=$1 next
  while [ -n "$frontier" ]; do
    next=""
    for p in $frontier; do next="$next $(pgrep -P "$p" || true)"; done
    frontier=$(echo $next)
    all="$all $frontier"
  done
  for p in $all; do awk '{print $14, $15}' "/proc/$p/stat" 2>/dev/null || true; done |
    awk '{u += $1; s += $2} END {print u + 0, s + 0}'
}

bench() { # port concurrency seed requests [more]
  taskset -c "${BENCH_CPU:-1}" "$BIN" bench --url "http://127.0.0.1:$1" --model qwen3 --model-path "$MODEL_DIR" \
    --input-tokens 128 --output-tokens 64 --stream --concurrency "$2" --seed "$3" --requests "$4" \
    --no-progress "${@:5}" >/dev/null
}

VARIANTS=("switchyard=$BIN")
[ -n "${BASE_BIN:-}" ] && VARIANTS+=("switchyard base=$BASE_BIN")
[ -z "${SKIP_DYNAMO:-}" ] && VARIANTS+=("dynamo.frontend 1.6.1=dynamo")
read -r -a SY_EXTRA <<<"${SY_ARGS:-}"

echo "| streams | frontend | ok | req/s | TTFT p50 ms | TTFT p99 ms | frontend CPU µs/req | user | kernel | worker CPU µs/req | worker user | worker kernel |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for _ in $(seq 1 "$ROUNDS"); do
  for c in $CONCS; do
    n=${N:-$((c * 20 > 6000 ? c * 20 : 6000))}
    for v in "${VARIANTS[@]}"; do
      b=${v#*=}
      if [ "$b" = dynamo ]; then
        taskset -c 0 "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp \
          --http-host 127.0.0.1 --http-port 18295 >>"$WORK/fe.log" 2>&1 &
      else
        taskset -c 0 "$b" --discovery-backend file --http-host 127.0.0.1 --http-port 18295 --shards 1 \
          --no-pin-shards "${SY_EXTRA[@]}" >>"$WORK/fe.log" 2>&1 &
      fi
      FE=$!
      qwen3_listed 18295
      bench 18295 "$c" 3 "$((c * 2))" # warm-up: every connection opened once
      read -r fu0 fs0 < <(ticks "$FE")
      read -r wu0 ws0 < <(ticks "$MOCKER")
      t0=$(date +%s.%N)
      bench 18295 "$c" 4 "$n" --json "$WORK/b.json"
      t1=$(date +%s.%N)
      read -r fu1 fs1 < <(ticks "$FE")
      read -r wu1 ws1 < <(ticks "$MOCKER")
      kill "$FE"; wait "$FE" 2>/dev/null || true
      python3 - "${v%%=*}" "$c" "$t0" "$t1" "$WORK/b.json" "$fu0" "$fs0" "$fu1" "$fs1" "$wu0" "$ws0" "$wu1" "$ws1" <<'PYEOF'
import json, os, sys
label, c, t0, t1, path = sys.argv[1:6]
fu0, fs0, fu1, fs1, wu0, ws0, wu1, ws1 = map(int, sys.argv[6:])
r = json.load(open(path))
ok = max(r["ok"], 1)
us = 1e6 / os.sysconf("SC_CLK_TCK") / ok
fu, fs, wu, ws = (fu1 - fu0) * us, (fs1 - fs0) * us, (wu1 - wu0) * us, (ws1 - ws0) * us
t = r["metrics"]["ttft"]
print(f"| {c} | {label} | {r['ok']}/{r['ok'] + r['failed']} | {r['ok'] / (float(t1) - float(t0)):.0f} | {t['p50']:.1f} | {t['p99']:.1f} "
      f"| {fu + fs:.0f} | {fu:.0f} | {fs:.0f} | {wu + ws:.0f} | {wu:.0f} | {ws:.0f} |")
PYEOF
    done
  done
done
