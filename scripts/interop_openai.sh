#!/usr/bin/env bash
# Ordinary requests of a new user, sent with the real OpenAI Python SDK
# (scripts/interop_openai_client.py), through `python -m dynamo.frontend` and through
# switchyard in turn, in front of the same real workers:
#   M.  one real `python -m dynamo.mocker` (Qwen3): batched completion prompts (strings and
#       token-id arrays, whole and streamed), the max_tokens bound, the mocker's own error
#       for a request without max_tokens, content as text parts, n samples and echo;
#   R.  three recording workers on Dynamo's own runtime (scripts/fidelity_worker.py), each
#       registered as a real engine registers: Qwen3 with two aliases, gpt-oss (its directory
#       ships chat_template.jinja, so its card names the file) and Qwen3 with a custom chat
#       template (what vLLM's --chat-template registers). The client decodes the prompt each
#       worker received: text parts, `developer` on both templates, the custom template and
#       the aliases.
# Every process uses file discovery without DYN_FILE_KV: the store is the one 1.6.1 uses by
# default, $TMPDIR/dynamo_store_kv (checked to hold the records). Where 1.6.1 falls short of
# what OpenAI clients expect (n, echo, developer on Qwen3) the peer run checks that it does.
#
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_openai.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
[ "${1:-}" = --inside ] || bash scripts/fetch-models.sh gptoss >/dev/null
enter_loopback_namespace "$0" "$@"
scratch_dir
default_file_store
PORT=18493
GPTOSS_DIR=$(dirname "$MODEL_DIR")/gptoss
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/interop_openai_client.py)

listed() { # models (comma-separated): until the frontend on $PORT lists every one
  local all models
  IFS=, read -ra models <<<"$1"
  for _ in $(seq 1 600); do
    all=$(curl -s "127.0.0.1:$PORT/v1/models" || true)
    local m missing=0
    for m in "${models[@]}"; do
      [[ $all == *"\"$m\""* ]] || missing=1
    done
    [ $missing = 0 ] && return 0
    sleep 0.1
  done
  return 1
}

instances() { # how many generate endpoints the default store holds
  (find "$STORE/v1/instances" -name '*generate*' 2>/dev/null || true) | wc -l
}

wait_instances() { # count
  for _ in $(seq 1 600); do
    [ "$(instances)" -ge "$1" ] && return 0
    sleep 0.1
  done
  fail "$1 workers did not register in $STORE (found $(instances))" "$WORK"/*.log
}

# with_frontends MODELS CLIENT-ARGS...: each frontend in turn on $PORT (once it lists every one
# of MODELS, comma-separated: a worker's instance can be in the store before its model card),
# the client against it (--peer for dynamo.frontend).
with_frontends() {
  local model=$1; shift
  local name cmd
  for name in dynamo switchyard; do
    if [ $name = dynamo ]; then cmd=("$PY" -m dynamo.frontend); else cmd=("$BIN"); fi
    "${cmd[@]}" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT \
      >"$WORK/frontend-$name.log" 2>&1 &
    local pid=$!
    PIDS+=("$pid")
    listed "$model" || fail "$name did not list $model" "$WORK/frontend-$name.log"
    local peer=()
    [ $name = dynamo ] && peer=(--peer)
    echo " through $name:"
    "${CLIENT[@]}" "$@" --base-url "http://127.0.0.1:$PORT/v1" "${peer[@]}" >"$WORK/client-$name.log" 2>&1 || {
      cat "$WORK/client-$name.log" >&2
      fail "$name: the checks failed" "$WORK/frontend-$name.log"
    }
    cat "$WORK/client-$name.log"
    kill "$pid"; wait "$pid" 2>/dev/null || true
  done
}

t0=$SECONDS
echo "M: dynamo.mocker (Qwen3), file discovery in the default store"
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq >"$WORK/mocker.log" 2>&1 &
MOCKER=$!
PIDS+=("$MOCKER")
wait_instances 1
with_frontends qwen3 mocker --model qwen3 --model-path "$MODEL_DIR"
kill "$MOCKER"; wait "$MOCKER" 2>/dev/null || true
for _ in $(seq 1 100); do [ "$(instances)" -eq 0 ] && break; sleep 0.1; done
[ "$(instances)" -eq 0 ] || fail "the stopped mocker's record stayed in $STORE"

echo "R: recording workers (Qwen3 with aliases, gpt-oss, Qwen3 with a custom template)"
printf '%s' 'CUSTOM{% for m in messages %}[{{ m.role }}]{{ m.content }}{% endfor %}{% if add_generation_prompt %}[assistant]{% endif %}' \
  >"$WORK/custom.jinja"
recorder() { # name model-dir component extra-args...
  local name=$1 dir=$2 component=$3; shift 3
  : >"$WORK/record-$name.jsonl"
  "$PY" scripts/fidelity_worker.py --model-path "$dir" --model-name "$name" --endpoint "dynamo.$component.generate" \
    --record "$WORK/record-$name.jsonl" "$@" >"$WORK/worker-$name.log" 2>&1 &
  PIDS+=("$!")
}
recorder qwen3 "$MODEL_DIR" qwen --alias qwen3-a --alias qwen3-b
recorder gpt-oss "$GPTOSS_DIR" gptoss
recorder qwen3-custom "$MODEL_DIR" custom --custom-template "$WORK/custom.jinja"
wait_instances 3
spec() { echo "$1=$2,$WORK/record-$1.jsonl"; }
with_frontends qwen3,gpt-oss,qwen3-custom recording --qwen3 "$(spec qwen3 "$MODEL_DIR")" --gptoss "$(spec gpt-oss "$GPTOSS_DIR")" \
  --custom "$(spec qwen3-custom "$MODEL_DIR")" --alias qwen3-a --alias qwen3-b
echo "ok: the OpenAI SDK's requests through switchyard answered as checked, in $((SECONDS - t0)) s"
