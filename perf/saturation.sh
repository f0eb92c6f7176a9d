#!/usr/bin/env bash
# CPU per request at saturation (closed loop): switchyard (one shard) on CPU 0, two in-tree
# `mock-worker --fast` processes and `switchyard bench --concurrency C` on CPU 1. Builds
# alternate, ROUNDS rounds; per round and build: requests ok, req/s, and the frontend's CPU
# per request from /proc/PID/stat (user and kernel apart, 10 ms ticks) and its minor page faults.
#
# Usage: bash perf/saturation.sh w1|w2 [concurrency]   (SWITCHYARD_BIN=<release build>,
#        BASE_BIN=<another build> to compare, ROUNDS=3, N=<requests per run>)
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:?usage: perf/saturation.sh w1|w2 [concurrency]}
CONC=${2:-256}
BIN=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$BIN" ] || { echo "saturation.sh: build first (cargo build --release) or set SWITCHYARD_BIN" >&2; exit 1; }
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
case $W in
  w1) ARGS=(--input-tokens 100 --output-tokens 1); N=${N:-6000} ;;
  w2) ARGS=(--input-tokens 1000 --output-tokens 64 --stream); N=${N:-1500} ;;
  *) echo "saturation.sh: workload w1 or w2" >&2; exit 1 ;;
esac
OUT=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-saturation.XXXXXX")
export DYN_FILE_KV=$OUT/kv DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$OUT"' EXIT
for _ in 1 2; do
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL" --model-name qwen3 --discovery-backend file --fast >/dev/null 2>&1 &
  PIDS+=($!)
done
BUILDS=("after=$BIN")
[ -n "${BASE_BIN:-}" ] && BUILDS+=("before=$BASE_BIN")
PORT=${PORT:-18811}
bench() { # seed requests [more]
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL" "${ARGS[@]}" \
    --concurrency "$CONC" --seed "$1" --requests "$2" --no-progress "${@:3}" >/dev/null
}
echo "| workload | concurrency | build | ok | req/s | CPU µs/req | user | kernel | minor faults/req |"
echo "|---|---:|---|---:|---:|---:|---:|---:|---:|"
for _ in $(seq 1 "${ROUNDS:-3}"); do
  for b in "${BUILDS[@]}"; do
    taskset -c 0 "${b#*=}" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards 1 \
      --no-pin-shards >/dev/null 2>&1 &
    SY=$!
    for _ in $(seq 1 240); do curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q qwen3 && break; sleep 0.25; done
    bench 3 500 # warm-up
    read -r u0 s0 f0 < <(awk '{print $14, $15, $10}' "/proc/$SY/stat")
    t0=$(date +%s.%N)
    bench 4 "$N" --json "$OUT/b.json"
    t1=$(date +%s.%N)
    read -r u1 s1 f1 < <(awk '{print $14, $15, $10}' "/proc/$SY/stat")
    kill "$SY"; wait "$SY" 2>/dev/null || true
    python3 - "${b%%=*}" "$W" "$CONC" "$u0" "$s0" "$u1" "$s1" "$t0" "$t1" "$OUT/b.json" "$f0" "$f1" <<'PYEOF'
import json, os, sys
b, w, c, u0, s0, u1, s1, t0, t1, path, f0, f1 = sys.argv[1:]
r = json.load(open(path))
ok = r["ok"]
tick = os.sysconf("SC_CLK_TCK")
u = (int(u1) - int(u0)) / tick * 1e6 / max(ok, 1)
s = (int(s1) - int(s0)) / tick * 1e6 / max(ok, 1)
faults = (int(f1) - int(f0)) / max(ok, 1)
print(f"| {w.upper()} | {c} | {b} | {ok}/{ok + r['failed']} | {ok / (float(t1) - float(t0)):.0f} | {u + s:.1f} | {u:.1f} | {s:.1f} | {faults:.2f} |")
PYEOF
  done
done
