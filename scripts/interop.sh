#!/usr/bin/env bash
# Interop with the real Dynamo 1.6.1, both ways, with file discovery and the TCP request plane:
#   A. switchyard in front of a real `python -m dynamo.mocker` worker;
#   B. the real `python -m dynamo.frontend` in front of switchyard's in-tree mock worker.
# Each side is driven with chat (whole and streamed) and completions requests and the
# answers are checked (status, shapes, usage). Everything runs in a loopback-only network
# namespace (Dynamo's event publishers bind 0.0.0.0), so this needs root (unshare -n).
#
# Usage: bash scripts/interop.sh      (installs Dynamo into a venv and fetches model files first)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ "${1:-}" != "--inside" ]; then
  bash scripts/install-dynamo.sh >/dev/null
  bash scripts/fetch-models.sh qwen3 >/dev/null
  cargo build --release --quiet
  exec unshare -n bash "$0" --inside
fi

ip link set lo up
VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
PY="$VENV/bin/python"
BIN=${CARGO_TARGET_DIR:-target}/release/switchyard
MODEL=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
WORK=$(mktemp -d)
PIDS=()
cleanup() { for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT

wait_model() { # port
  for _ in $(seq 1 120); do
    if curl -s "localhost:$1/v1/models" | grep -q '"id"'; then return 0; fi
    sleep 0.5
  done
  echo "FAIL: no model appeared on port $1" >&2
  return 1
}

check() { # port model label
  local port=$1 model=$2 label=$3
  python3 - "$port" "$model" "$label" <<'EOF'
import json, sys, urllib.request
port, model, label = sys.argv[1], sys.argv[2], sys.argv[3]
def post(path, body):
    req = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=json.dumps(body).encode(),
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        return r.status, r.read().decode()
status, text = post("/v1/chat/completions", {"model": model, "max_tokens": 8,
                    "messages": [{"role": "user", "content": "Hello there"}]})
v = json.loads(text)
assert status == 200 and v["object"] == "chat.completion", text
assert v["usage"]["prompt_tokens"] == 10 and v["usage"]["completion_tokens"] == 8, v["usage"]
assert v["choices"][0]["finish_reason"] == "length", v
status, text = post("/v1/chat/completions", {"model": model, "max_tokens": 4, "stream": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": "Hello there"}]})
events = [e[len("data: "):] for e in text.split("\n\n") if e]
assert events[-1] == "[DONE]", events
chunks = [json.loads(e) for e in events[:-1]]
assert chunks[0]["choices"][0]["delta"]["role"] == "assistant", chunks[0]
assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 4, chunks[-1]
status, text = post("/v1/completions", {"model": model, "prompt": "Once upon a time", "max_tokens": 5})
v = json.loads(text)
assert status == 200 and v["object"] == "text_completion" and v["usage"]["completion_tokens"] == 5, text
print(f"ok: {label}")
EOF
}

# A. switchyard in front of the real mocker.
export DYN_FILE_KV="$WORK/kv-a"
"$PY" -m dynamo.mocker --model-path "$MODEL" --discovery-backend file --request-plane tcp --event-plane zmq \
  >"$WORK/mocker.log" 2>&1 &
PIDS+=($!)
"$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port 18180 2>"$WORK/switchyard.log" &
PIDS+=($!)
wait_model 18180
check 18180 "$MODEL" "switchyard -> dynamo.mocker"

# B. the real frontend in front of switchyard's mock worker.
export DYN_FILE_KV="$WORK/kv-b"
"$BIN" mock-worker --model-path "$MODEL" --model-name qwen3-mock --fast 2>"$WORK/mock-worker.log" &
PIDS+=($!)
"$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port 18181 \
  >"$WORK/frontend.log" 2>&1 &
PIDS+=($!)
wait_model 18181
check 18181 qwen3-mock "dynamo.frontend -> switchyard mock-worker"
echo "interop: 2 passed, 0 failed"
