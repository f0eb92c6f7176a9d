#!/usr/bin/env bash
# switchyard's user-space instructions per request, counted with valgrind's callgrind (for
# machines without hardware counters, where `perf stat -e instructions` is unavailable), and
# where they go. No Dynamo needed: two in-tree `mock-worker --fast` processes (file
# discovery, no artificial delay) on CPU 1, switchyard with one shard on CPU 0 under
# callgrind (epoll driver: valgrind does not emulate io_uring), `switchyard bench` on CPU 1.
# Instrumentation is switched on only around the measured requests; every thread of the
# frontend is counted (shard, control thread, tokenizer helper).
#
#   W1: chat, 100 prompt tokens, 1 output token, not streamed   (default rate 10/s)
#   W2: chat, 1,000 prompt tokens, 64 output tokens, streamed   (default rate 8/s)
#   W2S: W2-sat's request shape: 128 prompt tokens, 64 output tokens, streamed (rate 8/s)
#
# Usage: bash perf/callgrind.sh w1|w2|w2s      (SWITCHYARD_BIN=<release build>, RATE=, N=60,
#        WORKER="--ttft-ms 20 --itl-ms 5": paced workers, one frame per token as real
#        engines send them, instead of the default --fast bursts)
# Prints "instructions per request: N" and leaves the profile, `callgrind_annotate`
# inclusive and self listings in the printed directory.
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:?usage: perf/callgrind.sh w1|w2|w2s}
command -v valgrind >/dev/null || { echo "callgrind.sh: needs valgrind (apt-get install valgrind)" >&2; exit 1; }
BIN=${SWITCHYARD_BIN:-target/release/switchyard}
[ -x "$BIN" ] || { echo "callgrind.sh: build first (cargo build --release) or set SWITCHYARD_BIN" >&2; exit 1; }
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
case $W in
  w1) ARGS=(--input-tokens 100 --output-tokens 1); RATE=${RATE:-10} ;;
  w2) ARGS=(--input-tokens 1000 --output-tokens 64 --stream); RATE=${RATE:-8} ;;
  w2s) ARGS=(--input-tokens 128 --output-tokens 64 --stream); RATE=${RATE:-8} ;;
  *) echo "callgrind.sh: workload w1, w2 or w2s" >&2; exit 1 ;;
esac
N=${N:-60}
PORT=${PORT:-18777}
OUT=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-callgrind.XXXXXX")
export DYN_FILE_KV=$OUT/kv DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for i in 1 2; do
  # shellcheck disable=SC2086
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL" --model-name qwen3 --discovery-backend file ${WORKER:---fast} \
    >"$OUT/worker$i.log" 2>&1 &
  PIDS+=($!)
done
taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$OUT/callgrind.out" \
  "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards 1 --no-pin-shards \
  --io-driver epoll >"$OUT/frontend.log" 2>&1 &
CG=$!
PIDS+=($CG)
for _ in $(seq 1 240); do
  curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' && break
  sleep 0.5
done
bench() { # seed requests [more args]
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL" "${ARGS[@]}" \
    --rate "$RATE" --seed "$1" --requests "$2" --no-progress "${@:3}"
}
bench 3 20 >/dev/null # warm-up, not counted
callgrind_control -i on "$CG" >/dev/null
bench 4 "$N" --json "$OUT/bench.json" >/dev/null
callgrind_control -i off "$CG" >/dev/null
kill "$CG"
wait "$CG" 2>/dev/null || true
python3 - "$OUT/bench.json" "$OUT/callgrind.out" <<'PYEOF'
import json, sys
r = json.load(open(sys.argv[1]))
total = 0
for line in open(sys.argv[2]):
    if line.startswith(("summary:", "totals:")):
        total = max(total, int(line.split()[1]))
done = r["ok"] + r["failed"]
assert r["failed"] == 0, f"{r['failed']} requests failed"
print(f"requests: {done}, instructions: {total}, instructions per request: {total // max(done, 1)}")
PYEOF
callgrind_annotate --inclusive=yes "$OUT/callgrind.out" >"$OUT/inclusive.txt" 2>/dev/null || true
callgrind_annotate "$OUT/callgrind.out" >"$OUT/self.txt" 2>/dev/null || true
echo "profile: $OUT"
