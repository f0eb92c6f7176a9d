#!/usr/bin/env bash
# Raw 1.6.1 answers with tool calls, for the byte shapes: an echo worker registered with the
# hermes tool parser and the qwen3 reasoning parser behind `python -m dynamo.frontend`, asked
# whole and streamed, with tool_choice auto, required and named, and with
# --enable-streaming-tool-dispatch / --enable-streaming-reasoning-dispatch.
# Usage: bash scripts/observe/tool_calls.sh OUT_DIR   (root: a loopback-only namespace)
#   FRONTEND=switchyard   ask $SWITCHYARD_BIN instead, for the same answers side by side
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != --inside ]; then
  OUT=$(realpath -m "${1:?output dir}")
  export OUT
fi
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
mkdir -p "$OUT"
PORT=18530
"$BIN" mock-worker --model-path "$MODEL_DIR" --model-name echo --echo token --fast \
  --endpoint dynamo.echo.generate --tool-call-parser hermes --reasoning-parser qwen3 >"$WORK/worker.log" 2>&1 &
PIDS+=("$!")

start_frontend() { # extra flags...
  if [ "${FRONTEND:-dynamo}" = switchyard ]; then
    "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port $PORT "$@" >"$WORK/frontend.log" 2>&1 &
  else
    "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT "$@" \
      >"$WORK/frontend.log" 2>&1 &
  fi
  FE=$!
  PIDS+=("$FE")
  model_listed $PORT echo
}

TOOLS='[{"type":"function","function":{"name":"get_weather","parameters":{"type":"object","properties":{"location":{"type":"string"}},"required":["location"]}}},{"type":"function","function":{"name":"search","parameters":{"type":"object","properties":{"query":{"type":"string"}}}}}]'
CALL='<think>Need the weather.</think>Let me check.\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>'
ask() { # name stream extra-json script
  local body opts=''
  [ "$2" = true ] && opts=',"stream_options":{"include_usage":true}'
  body="{\"model\":\"echo\",\"max_tokens\":200,\"stream\":$2$opts,\"tools\":$TOOLS$3,\"messages\":[{\"role\":\"user\",\"content\":\"[[echo]]$4[[/echo]]\"}]}"
  curl -s -N "127.0.0.1:$PORT/v1/chat/completions" -H content-type:application/json -d "$body" >"$OUT/$1.txt"
  echo >>"$OUT/$1.txt"
}

start_frontend
ask whole false '' "$CALL"
ask stream true '' "$CALL"
ask required-whole false ',"tool_choice":"required"' '[{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}]'
ask required-stream true ',"tool_choice":"required"' '[{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}]'
ask named-whole false ',"tool_choice":{"type":"function","function":{"name":"get_weather"}}' '{\"location\": \"Paris\"}'
ask named-stream true ',"tool_choice":{"type":"function","function":{"name":"get_weather"}}' '{\"location\": \"Paris\"}'
kill "$FE"; wait "$FE" 2>/dev/null || true
start_frontend --enable-streaming-tool-dispatch --enable-streaming-reasoning-dispatch
ask dispatch-stream true '' "$CALL"
ask dispatch-whole false '' "$CALL"
echo "ok: $(ls "$OUT" | wc -l) answers in $OUT"
