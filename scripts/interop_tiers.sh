#!/usr/bin/env bash
# Lower KV storage tiers against real Dynamo 1.6.1 workers: two `python -m dynamo.mocker`
# workers that offload to host memory (32 GPU blocks, 64 host blocks, block 16) publish
# `host_pinned` KV events beside their GPU ones. The same steps run through switchyard
# --router-mode kv and then through python -m dynamo.frontend --router-mode kv, each with
# freshly started workers:
#   A1      a 256-token prompt A (16 blocks), unpinned: worker X;
#   F1..F3  other prompts pinned to X: A leaves X's GPU, stays in its host memory;
#   A2      A again, unpinned: X, credited for 16 host blocks (kv_hit_rate 0.75 — the host
#           weight; an idle worker's tie would be 50/50 without the host tier);
#   F4, F5  pinned to X: A leaves the GPU again; the frontend is restarted, so what it knows
#           of X's host memory comes from X's tree dump only;
#   A3      X again, 0.75;
#   F6..F9  pinned to X: A leaves host memory too;
#   A4      kv_hit_rate 0.0.
# Each frontend's (worker is X, kv_hit_rate) per step must be the expected ones, so the two
# agree. Root, loopback-only network namespace.
#
# Usage: bash scripts/interop_tiers.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18690
EXPECTED="A2 X 0.75
A3 X 0.75
A4 - 0.0"

frontend() { # kind log: starts a kv-mode frontend; sets F
  if [ "$1" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
      >>"$WORK/$2" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file --router-mode kv \
      >>"$WORK/$2" 2>&1 &
  fi
  F=$!; PIDS+=($F)
  model_listed $PORT qwen3 || fail "$1: lists no qwen3" "$WORK/$2"
  sleep 1 # subscribed to both workers' events, their trees restored
}

step() { # label first-token [pinned-worker]: prints "label worker kv_hit_rate"
  python3 - "$PORT" "$@" <<'EOF'
import json, sys, urllib.request
port, label, first = sys.argv[1], sys.argv[2], int(sys.argv[3])
pin = sys.argv[4] if len(sys.argv) > 4 else None
nvext = {"extra_fields": ["worker_id", "timing"]}
if pin:
    nvext["backend_instance_id"] = int(pin)
body = {"model": "qwen3", "prompt": list(range(first, first + 256)), "max_tokens": 1, "ignore_eos": True,
        "nvext": nvext}
req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                             {"content-type": "application/json"})
out = json.load(urllib.request.urlopen(req, timeout=60))
ext = out.get("nvext", {})
print(label, ext["worker_id"]["decode_worker_id"], ext["timing"].get("kv_hit_rate"))
EOF
  sleep 0.5 # the worker's events reach the router
}

run() { # kind: the steps through one kind of frontend, on fresh workers; prints the outcome
  local kind=$1 log="$1-frontend.log" i
  export DYN_FILE_KV="$WORK/kv-$kind"
  local mockers=()
  for i in 1 2; do
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --block-size 16 --num-gpu-blocks-override 32 --num-host-blocks 64 \
      --speedup-ratio 20 >"$WORK/$kind-mocker$i.log" 2>&1 &
    mockers+=($!); PIDS+=($!)
  done
  workers_registered 2 "$kind: mockers" || fail "$kind: the mockers did not register" "$WORK/$kind-mocker1.log"
  frontend "$kind" "$log"
  local x
  x=$(step A1 1000 | cut -d' ' -f2) || fail "$kind: A1" "$WORK/$log"
  for i in 1 2 3; do step "F$i" $((10000 * i)) "$x" >/dev/null || fail "$kind: F$i" "$WORK/$log"; done
  local out
  out=$(step A2 1000) || fail "$kind: A2" "$WORK/$log"
  for i in 4 5; do step "F$i" $((10000 * i)) "$x" >/dev/null || fail "$kind: F$i" "$WORK/$log"; done
  kill "$F"; wait "$F" 2>/dev/null || true
  frontend "$kind" "$log"
  out+=$'\n'$(step A3 1000) || fail "$kind: A3" "$WORK/$log"
  for i in 6 7 8 9; do step "F$i" $((10000 * i)) "$x" >/dev/null || fail "$kind: F$i" "$WORK/$log"; done
  out+=$'\n'$(step A4 1000) || fail "$kind: A4" "$WORK/$log"
  kill "$F" "${mockers[@]}"; wait "$F" "${mockers[@]}" 2>/dev/null || true
  # X by name; the last step's worker is either.
  echo "$out" | awk -v x="$x" '{ w = ($1 == "A4") ? "-" : ($2 == x ? "X" : "other:" $2); print $1, w, $3 }'
}

for kind in sy dy; do
  got=$(run $kind)
  echo "== $kind"; echo "$got"
  [ "$got" = "$EXPECTED" ] || fail "$kind: expected
$EXPECTED" "$WORK/$kind-frontend.log" "$WORK/$kind-mocker1.log"
done
echo "interop_tiers: ok (switchyard and dynamo.frontend: host-tier hits credited at 0.75, restored from a tree dump, gone after host eviction)"
