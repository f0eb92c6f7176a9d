#!/usr/bin/env bash
# W1/W2 side by side: the same two real `python -m dynamo.mocker` workers behind switchyard
# and behind the real `python -m dynamo.frontend` 1.6.1, one run, alternating frontends,
# each frontend pinned to CPU 0 (switchyard with one shard), load generator and workers on
# CPU 1, at a fixed open-loop request rate both sustain:
#   W1: chat, ~100 prompt tokens, max_tokens 1, non-streaming
#   W2: chat, ~1,000 prompt tokens, 64 output tokens, streaming
# Reports per frontend and workload: requests ok/sent, frontend CPU-seconds per 1,000
# requests (every thread's run time from /proc/PID/task/*/schedstat, ns; and its user and
# kernel parts from /proc/PID/stat utime/stime, 10 ms ticks), TTFT p50/p99. Then counts
# switchyard's instructions per request with valgrind's callgrind (this VM has no hardware
# counters, so `perf stat -e instructions` is not available): instrumentation is switched on
# only around the measured load, and every thread of the process is counted (user-space
# instructions only; the kernel's share of each syscall is not in the count).
# Needs root (loopback-only network namespace). Writes a markdown table to stdout.
#
# Usage: bash perf/w1_w2.sh     (RATE1=40 RATE2=8 DURATION=20 ROUNDS=2 CG_REQUESTS=200)
#        BASE_BIN=<another switchyard build> adds it to every round and to the callgrind
#        counts ("switchyard base"), alternating with the others: before/after in one run.
#        SKIP_DYNAMO=1 leaves dynamo.frontend out; ROUNDS=0 only counts instructions;
#        WORKLOADS=w2 runs only that workload; SKIP_CALLGRIND=1 leaves the counts out;
#        KEEP_PROFILES=<dir> keeps the callgrind profiles there.
#        NATS=1 adds two mockers on the NATS request plane (a real nats-server on CPU 1, their
#        own file store) and runs every frontend a second time on `--request-plane nats`
#        in front of them, in the same rounds; the last column is then nats-server's CPU
#        per 1,000 requests (the hop every NATS request takes).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != "--inside" ]; then
  command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
fi
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
RATE1=${RATE1:-40}
RATE2=${RATE2:-8}
DURATION=${DURATION:-20}
ROUNDS=${ROUNDS:-2}
CG_REQUESTS=${CG_REQUESTS:-200}
WORKLOADS=${WORKLOADS:-w1 w2}
scratch_dir

for i in 1 2; do
  taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --request-plane tcp --event-plane zmq --speedup-ratio 10 >"$WORK/mocker$i.log" 2>&1 &
  PIDS+=($!)
done
# The TCP workers' store; the NATS workers register in their own, so that every frontend
# sees only the workers of its plane.
TCP_KV=$DYN_FILE_KV NATS_KV=$WORK/kv-nats NATS_PID=""
PLANES=(tcp)
if [ -n "${NATS:-}" ]; then
  need nats-server
  export NATS_SERVER=nats://127.0.0.1:14292
  taskset -c 1 nats-server -a 127.0.0.1 -p 14292 >"$WORK/nats.log" 2>&1 &
  NATS_PID=$!; PIDS+=($NATS_PID)
  for i in 3 4; do
    DYN_FILE_KV=$NATS_KV taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 \
      --discovery-backend file --request-plane nats --event-plane zmq --speedup-ratio 10 >"$WORK/mocker$i.log" 2>&1 &
    PIDS+=($!)
  done
  PLANES+=(nats)
fi


OFFSET=0
load() { # port workload rate duration → JSON
  OFFSET=$((OFFSET + 100000))
  taskset -c 1 "$PY" perf/loadgen.py --url "http://127.0.0.1:$1" --model qwen3 --workload "$2" --rate "$3" \
    --duration "$4" --offset "$OFFSET"
}

measure() { # label port pid workload rate
  local label=$1 port=$2 pid=$3 w=$4 rate=$5
  load "$port" "$w" "$rate" 3 >/dev/null # warm-up
  local i0 i1 c0 c1 s0 s1 out n0=0 n1=0
  i0=$(cpu "$pid"); sleep 5; i1=$(cpu "$pid") # idle: background work without requests
  c0=$(cpu "$pid"); s0=$(user_sys "$pid")
  [ -n "$NATS_PID" ] && n0=$(cpu "$NATS_PID")
  out=$(load "$port" "$w" "$rate" "$DURATION")
  c1=$(cpu "$pid"); s1=$(user_sys "$pid")
  [ -n "$NATS_PID" ] && n1=$(cpu "$NATS_PID")
  python3 - "$label" "$w" "$rate" "$c0" "$c1" "$i0" "$i1" "$out" "$s0" "$s1" "$n0" "$n1" <<'PYEOF'
import json, os, sys
label, w, rate, c0, c1, i0, i1, out, s0, s1, n0, n1 = sys.argv[1:]
r = json.loads(out)
ok = max(r["ok"], 1)
cpu = (float(c1) - float(c0)) / 1e9
idle_ms_per_s = (float(i1) - float(i0)) / 1e6 / 5
per_k = cpu * 1000 / ok
tick = os.sysconf("SC_CLK_TCK")
(u0, k0), (u1, k1) = (map(int, s0.split()), map(int, s1.split()))
user_k, kern_k = (u1 - u0) / tick * 1000 / ok, (k1 - k0) / tick * 1000 / ok
nats_k = (float(n1) - float(n0)) / 1e9 * 1000 / ok
print(f"| {w.upper()} | {label} | {rate} | {r['ok']}/{r['sent']} | {per_k:.3f} | {user_k:.3f} | {kern_k:.3f} | {r['ttft_p50_ms']} | {r['ttft_p99_ms']} | {idle_ms_per_s:.2f} | {nats_k:.3f} |")
PYEOF
}

SY_EXTRA=()
SY_BIN=$BIN
start_switchyard() { # port [prefix...]
  local port=$1; shift
  "$@" "$SY_BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$port" --shards 1 --no-pin-shards \
    "${SY_EXTRA[@]}" 2>>"$WORK/sy.log" &
}
VARIANTS=("switchyard (1 shard)=$BIN")
[ -n "${BASE_BIN:-}" ] && VARIANTS+=("switchyard base (1 shard)=$BASE_BIN")

user_sys() { awk '{print $14, $15}' "/proc/$1/stat"; } # user, kernel: clock ticks

echo "| workload | frontend | req/s | ok/sent | CPU-s per 1k req | user | kernel | TTFT p50 ms | TTFT p99 ms | idle CPU ms/s | nats-server CPU-s per 1k req |"
echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
for _ in $(seq 1 "$ROUNDS"); do
  for w in $WORKLOADS; do
    rate=$RATE1; [ "$w" = w2 ] && rate=$RATE2
    for plane in "${PLANES[@]}"; do
    suffix=""
    export DYN_FILE_KV=$TCP_KV
    [ "$plane" = nats ] && { suffix=", NATS"; export DYN_FILE_KV=$NATS_KV; }
    for v in "${VARIANTS[@]}"; do
      SY_BIN=${v#*=}
      SY_EXTRA=(--request-plane "$plane")
      start_switchyard 18290 taskset -c 0
      SY=$!
      SY_EXTRA=()
      qwen3_listed 18290
      measure "${v%%=*}$suffix" 18290 "$SY" "$w" "$rate"
      kill "$SY"; wait "$SY" 2>/dev/null || true
    done
    [ -n "${SKIP_DYNAMO:-}" ] && continue
    taskset -c 0 "$PY" -m dynamo.frontend --discovery-backend file --request-plane "$plane" \
      --http-host 127.0.0.1 --http-port 18291 >>"$WORK/dyn.log" 2>&1 &
    DY=$!
    qwen3_listed 18291
    measure "dynamo.frontend 1.6.1$suffix" 18291 "$DY" "$w" "$rate"
    kill "$DY"; wait "$DY" 2>/dev/null || true
    done
  done
done

[ -n "${SKIP_CALLGRIND:-}" ] && exit 0
export DYN_FILE_KV=$TCP_KV
echo
echo "| workload | build | switchyard instructions per request (callgrind, all threads) | requests |"
echo "|---|---|---:|---:|"
for v in "${VARIANTS[@]}"; do
SY_BIN=${v#*=}
for w in $WORKLOADS; do
  rate=$RATE1; [ "$w" = w2 ] && rate=$RATE2
  # Under valgrind everything runs ~50x slower: a lower rate keeps the frontend unsaturated.
  cg_rate=$(python3 -c "print(max(1, min($rate, 10)))")
  # valgrind does not emulate io_uring: the shard runs its epoll driver here.
  SY_EXTRA=(--io-driver epoll)
  start_switchyard 18292 taskset -c 0 valgrind --tool=callgrind --instr-atstart=no \
    --callgrind-out-file="$WORK/cg.$w.out"
  SY_EXTRA=()
  CG=$!
  qwen3_listed 18292
  load 18292 "$w" "$cg_rate" 2 >/dev/null # warm-up, not counted
  callgrind_control -i on "$CG" >/dev/null
  out=$(load 18292 "$w" "$cg_rate" "$(python3 -c "print($CG_REQUESTS / $cg_rate)")")
  callgrind_control -i off "$CG" >/dev/null
  kill "$CG"; wait "$CG" 2>/dev/null || true
  python3 - "$w" "$out" "$WORK/cg.$w.out" "${v%%=*}" <<'PYEOF'
import json, sys
w, out, path, label = sys.argv[1:]
r = json.loads(out)
total = 0
for line in open(path):
    if line.startswith("summary:") or line.startswith("totals:"):
        total = max(total, int(line.split()[1]))
print(f"| {w.upper()} | {label} | {total / max(r['ok'], 1) / 1e3:.1f} K | {r['ok']}/{r['sent']} |")
PYEOF
  if [ -n "${KEEP_PROFILES:-}" ]; then
    mkdir -p "$KEEP_PROFILES" && cp "$WORK/cg.$w.out" "$KEEP_PROFILES/cg.$w.$(basename "$SY_BIN")"
  fi
done
done
