#!/usr/bin/env bash
# The Anthropic Messages API (`--enable-anthropic-api`) spoken by the real Anthropic Python
# SDK (PyPI `anthropic`, scripts/interop_anthropic_client.py) to switchyard in front of one
# real `python -m dynamo.mocker` (Qwen3), file discovery: `messages.create` whole and
# streamed, the `messages.stream(...)` helper read to the end (`get_final_message`),
# `messages.count_tokens` (the templated prompt's tokens, equal to the usage of the same
# request) and the SDK's typed errors.
#
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_anthropic.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18497

t0=$SECONDS
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq >"$WORK/mocker.log" 2>&1 &
PIDS+=("$!")
"$BIN" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT \
  --enable-anthropic-api >"$WORK/switchyard.log" 2>&1 &
PIDS+=("$!")
qwen3_listed $PORT || fail "switchyard did not list qwen3" "$WORK/mocker.log" "$WORK/switchyard.log"
PYTHONUNBUFFERED=1 "$PY" scripts/interop_anthropic_client.py --base-url "http://127.0.0.1:$PORT" --model qwen3 \
  >"$WORK/client.log" 2>&1 || {
  cat "$WORK/client.log" >&2
  fail "the Anthropic SDK's checks failed" "$WORK/switchyard.log" "$WORK/mocker.log"
}
cat "$WORK/client.log"
echo "ok: the Anthropic SDK through switchyard answered as checked, in $((SECONDS - t0)) s"
