#!/usr/bin/env bash
# Request fidelity against the real Dynamo 1.6.1: the same named requests
# (scripts/fidelity_cases.py, ~170 ordinary chat and completions requests setting every
# sampling, stop, structured-output and output field 1.6.1 reads, plus requests it refuses)
# go through `python -m dynamo.frontend` and through switchyard, each in front of the same
# recording worker written on Dynamo's own Python runtime (scripts/fidelity_worker.py,
# registered as Qwen3 from its model directory). scripts/fidelity_compare.py then compares,
# case by case, the HTTP status, the answer and what the worker received, byte for byte;
# the differences switchyard makes on purpose are listed, with their reasons, in
# scripts/fidelity_allowed.txt. A difference not listed fails the run, and so does a listed
# one that no longer happens.
#
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_fidelity.sh   (SWITCHYARD_BIN=<binary>; KEEP=<dir> keeps both runs)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18491

# run_cases NAME OUT FRONTEND...: the recording worker and a frontend on $PORT, every case.
run_cases() {
  local name=$1 out=$2; shift 2
  local kv="$WORK/kv-$name" record="$WORK/record-$name.jsonl"
  mkdir -p "$kv"
  DYN_FILE_KV=$kv "$PY" scripts/fidelity_worker.py --model-path "$MODEL_DIR" --model-name qwen3 \
    --record "$record" >"$WORK/worker-$name.log" 2>&1 &
  local worker=$!
  PIDS+=("$worker")
  DYN_FILE_KV=$kv "$@" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port "$PORT" \
    >"$WORK/frontend-$name.log" 2>&1 &
  local frontend=$!
  PIDS+=("$frontend")
  if ! qwen3_listed "$PORT"; then
    tail -n 30 "$WORK/worker-$name.log" "$WORK/frontend-$name.log" >&2
    exit 1
  fi
  timeout 1200 "$PY" scripts/fidelity_cases.py --url "http://127.0.0.1:$PORT" --record "$record" --out "$out" \
    --model qwen3 --model-path "$MODEL_DIR" >"$WORK/cases-$name.log" 2>&1 || {
    tail -n 30 "$WORK/cases-$name.log" "$WORK/frontend-$name.log" >&2
    exit 1
  }
  kill "$frontend" "$worker" 2>/dev/null || true
  wait "$frontend" "$worker" 2>/dev/null || true
  echo "$name: $(grep -c . "$record") worker requests recorded"
}

run_cases dynamo "$WORK/dynamo.json" "$PY" -m dynamo.frontend
run_cases switchyard "$WORK/switchyard.json" "$BIN"
if [ -n "${KEEP:-}" ]; then mkdir -p "$KEEP" && cp "$WORK"/dynamo.json "$WORK"/switchyard.json "$KEEP"/; fi
"$PY" scripts/fidelity_compare.py "$WORK/dynamo.json" "$WORK/switchyard.json" --allow scripts/fidelity_allowed.txt
echo "ok: request fidelity matches Dynamo 1.6.1 (but for the listed differences)"
