#!/usr/bin/env bash
# What asking a served KV indexer costs (docs/dynamo/remote-indexer.md): two real
# `python -m dynamo.mocker` workers behind switchyard `--router-mode kv` (one shard) in two
# setups, alternating for ROUNDS (3) rounds — `local`: the frontend follows the workers' KV
# events itself; `remote`: it runs `--use-remote-indexer` and asks a second switchyard
# `--serve-indexer` (one shard) for every request's matches — under an open loop of RATE (20)
# req/s, INPUT-token prompts (1000), OUTPUT (16) streamed tokens. The frontends on CPU 0, the
# workers and `switchyard bench` on CPU 1. Per run: requests ok/failed, TTFT p50/p99, and the
# CPU time per request (user + kernel, from /proc) of the asking frontend and of the serving
# one. Needs root (loopback-only network namespace). Writes a markdown table to stdout.
#
# Usage: bash perf/remote_indexer.sh   (ROUNDS=3 RATE=20 DURATION=20 INPUT=1000 OUTPUT=16 SPEEDUP=10;
#        SETUPS="local remote"; the setup `b` is `local` with another build, B_BIN, for an A/B
#        of the default kv path: SETUPS="b local" B_BIN=/path/to/other/switchyard)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
ROUNDS=${ROUNDS:-3}
RATE=${RATE:-20}
DURATION=${DURATION:-20}
INPUT=${INPUT:-1000}
OUTPUT=${OUTPUT:-16}
SPEEDUP=${SPEEDUP:-10}
SETUPS=${SETUPS:-local remote}
scratch_dir

proc_cpu() { # pid: user and kernel CPU time in ms (utime, stime from /proc/PID/stat)
  awk -v hz="$(getconf CLK_TCK)" '{print $14 * 1000 / hz, $15 * 1000 / hz}' "/proc/$1/stat"
}

one_run() { # setup round: prints one table row
  local setup=$1 round=$2 fe server="" args=(--router-mode kv) bin=$BIN
  [ "$setup" = b ] && bin=${B_BIN:?B_BIN: the other build for setup b}
  export DYN_FILE_KV="$WORK/kv-$setup-$round"
  mkdir -p "$DYN_FILE_KV"
  local workers=()
  for i in 1 2; do
    taskset -c 1 "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --speedup-ratio "$SPEEDUP" >"$WORK/m-$setup-$round-$i.log" 2>&1 &
    workers+=($!); PIDS+=($!)
  done
  workers_registered 2 "$setup" || true
  if [ "$setup" = remote ]; then
    taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port 18298 --shards 1 --no-pin-shards \
      --router-mode kv --serve-indexer >"$WORK/server-$round.log" 2>&1 &
    server=$!; PIDS+=($server)
    qwen3_listed 18298
    args+=(--use-remote-indexer)
  fi
  taskset -c 0 "$bin" --discovery-backend file --http-host 127.0.0.1 --http-port 18297 --shards 1 --no-pin-shards \
    "${args[@]}" >"$WORK/fe-$setup-$round.log" 2>&1 &
  fe=$!; PIDS+=($fe)
  qwen3_listed 18297
  sleep 2
  local fe0 sv0 fe1 sv1
  fe0=$(proc_cpu "$fe"); sv0=$([ -n "$server" ] && proc_cpu "$server" || echo "0 0")
  taskset -c 1 "$BIN" bench --url http://127.0.0.1:18297 --model qwen3 --model-path "$MODEL_DIR" \
    --input-tokens "$INPUT" --output-tokens "$OUTPUT" --stream --rate "$RATE" --duration "$DURATION" \
    --seed "$round" --timeout 60 --allow-errors --no-progress --json "$WORK/b.json" >/dev/null
  fe1=$(proc_cpu "$fe"); sv1=$([ -n "$server" ] && proc_cpu "$server" || echo "0 0")
  kill "$fe" $server "${workers[@]}" 2>/dev/null || true
  wait "$fe" $server "${workers[@]}" 2>/dev/null || true
  python3 - "$setup" "$round" "$WORK/b.json" "$fe0" "$fe1" "$sv0" "$sv1" <<'PYEOF'
import json, sys
setup, rnd, path, fe0, fe1, sv0, sv1 = sys.argv[1:]
r = json.load(open(path))
t = r["metrics"]["ttft"]
n = max(r["ok"] + r["failed"], 1)
(fu0, fk0), (fu1, fk1) = map(float, fe0.split()), map(float, fe1.split())
(su0, sk0), (su1, sk1) = map(float, sv0.split()), map(float, sv1.split())
per = lambda a, b: (b - a) * 1000 / n  # µs per request
print(f"| {rnd} | {setup} | {r['ok']} | {r['failed']} | {t['p50']:.1f} | {t['p99']:.1f} "
      f"| {per(fu0, fu1):.0f} / {per(fk0, fk1):.0f} | {per(su0, su1):.0f} / {per(sk0, sk1):.0f} |")
PYEOF
}

echo "| round | setup | ok | failed | TTFT p50 ms | TTFT p99 ms | asking frontend CPU µs/req (user / kernel) | serving frontend CPU µs/req (user / kernel) |"
echo "|---:|---|---:|---:|---:|---:|---:|---:|"
for round in $(seq 1 "$ROUNDS"); do
  for setup in $SETUPS; do one_run "$setup" "$round"; done
done
