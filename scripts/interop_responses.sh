#!/usr/bin/env bash
# The OpenAI Responses API through switchyard with the real OpenAI Python SDK
# (scripts/interop_responses_client.py), in front of one real `python -m dynamo.mocker`
# (Qwen3; it always answers up to `max_output_tokens`, so its responses end `incomplete`) and
# the in-tree echo worker (`switchyard mock-worker --echo token`, hermes tool calls and qwen3
# reasoning; it answers what the prompt scripts, so its responses complete):
# `responses.create` whole and streamed, the `responses.stream(...)` helper read to the end
# with `get_final_response()` (text, reasoning, a tool call and the next turn),
# `responses.input_tokens.count`, and a raw stream checked to end with its terminal event (no
# `data: [DONE]`).
#
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_responses.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
default_file_store
PORT=18497

instances() { # how many generate endpoints the default store holds
  (find "$STORE/v1/instances" -name '*generate*' 2>/dev/null || true) | wc -l
}

t0=$SECONDS
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq >"$WORK/mocker.log" 2>&1 &
PIDS+=("$!")
"$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3-echo --fast --echo token \
  --tool-call-parser hermes --reasoning-parser qwen3 --endpoint dynamo.echo.generate \
  --discovery-backend file >"$WORK/echo.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 600); do [ "$(instances)" -ge 2 ] && break; sleep 0.1; done
[ "$(instances)" -ge 2 ] || fail "the workers did not register in $STORE" "$WORK/mocker.log" "$WORK/echo.log"

"$BIN" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT \
  >"$WORK/frontend.log" 2>&1 &
PIDS+=("$!")
listed() { local all; all=$(curl -s "127.0.0.1:$PORT/v1/models" || true); [[ $all == *'"qwen3"'* && $all == *'"qwen3-echo"'* ]]; }
for _ in $(seq 1 600); do listed && break; sleep 0.1; done
listed || fail "switchyard did not list qwen3 and qwen3-echo" "$WORK/frontend.log"

# A raw stream: named events, and no `[DONE]` after the terminal one.
curl -sN "127.0.0.1:$PORT/v1/responses" -H 'content-type: application/json' \
  -d '{"model":"qwen3","input":"Say hello","max_output_tokens":8,"stream":true}' >"$WORK/raw.sse"
grep -q '^event: response.created$' "$WORK/raw.sse" || fail "no response.created event" "$WORK/raw.sse"
grep -Eq '^event: response.(completed|incomplete)$' "$WORK/raw.sse" || fail "no terminal event" "$WORK/raw.sse"
! grep -q '\[DONE\]' "$WORK/raw.sse" || fail "the stream ends with [DONE]" "$WORK/raw.sse"

env PYTHONUNBUFFERED=1 "$PY" scripts/interop_responses_client.py --base-url "http://127.0.0.1:$PORT/v1" \
  --model qwen3 --echo-model qwen3-echo >"$WORK/client.log" 2>&1 || { cat "$WORK/client.log" >&2; fail "the checks failed" "$WORK/frontend.log"; }
cat "$WORK/client.log"
echo "ok: the OpenAI SDK's Responses calls through switchyard answered as checked, in $((SECONDS - t0)) s"
