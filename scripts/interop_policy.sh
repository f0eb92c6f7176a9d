#!/usr/bin/env bash
# `worker_selection` of --router-policy-config against real Dynamo 1.6.1 workers: two
# `python -m dynamo.mocker` workers, and the same steps through switchyard --router-mode kv
# and through python -m dynamo.frontend --router-mode kv, each with freshly started workers
# and a policy file that selects a `dynamo-two-tier-cost-fn` instance for the aggregated pool:
#   with cache_threshold 0.5 (the cache tier applies): prompt A pinned to worker a, prompt B
#   pinned to worker b, then A and B unpinned: A to a, B to b (the workers holding them);
#   with cache_threshold 1.0 (it never applies): the same, and A and B unpinned go to one
#   worker (the first least-loaded candidate: every worker is idle);
#   with a `thunderagent` instance (no cache term; the least booked load, ties to the lower
#   worker id): A and B unpinned both go to the lower worker id.
# Each frontend's answers must be the expected ones, so the two agree. Then a name that is no
# instance (`--router-prefill-policy fast`): both frontends fail to start. Root, loopback-only
# network namespace.
#
# Usage: bash scripts/interop_policy.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18695

policy() { # cache_threshold, or `ta`: writes the policy file, prints its path
  local f="$WORK/policy-$1.yaml"
  if [ "$1" = ta ]; then
    printf 'worker_selection:\n  aggregated: ta\n  instances:\n  - {name: ta, type: thunderagent}\n' >"$f"
  else
    printf 'worker_selection:\n  aggregated: tt\n  instances:\n  - name: tt\n    type: dynamo-two-tier-cost-fn\n    parameters: {cache_threshold: %s}\n' "$1" >"$f"
  fi
  echo "$f"
}

frontend() { # kind log policy-file: starts a kv-mode frontend; sets F
  if [ "$1" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
      --router-policy-config "$3" >>"$WORK/$2" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file --router-mode kv \
      --router-policy-config "$3" >>"$WORK/$2" 2>&1 &
  fi
  F=$!; PIDS+=($F)
  model_listed $PORT qwen3 || fail "$1: lists no qwen3" "$WORK/$2"
  sleep 1 # subscribed to both workers' events
}

steps() { # prints "A->a B->b" style outcome of the four steps
  python3 - "$PORT" "$DYN_FILE_KV" <<'EOF'
import json, os, sys, time, urllib.request
port, store = sys.argv[1], sys.argv[2]
ids = set()
for root, _, files in os.walk(os.path.join(store, "v1", "instances")):
    for f in files:
        if "generate" in root or "generate" in f:
            ids.add(json.load(open(os.path.join(root, f)))["instance_id"])
a, b = sorted(ids)
def send(first, pin=None):
    nvext = {"extra_fields": ["worker_id"]}
    if pin:
        nvext["backend_instance_id"] = pin
    body = {"model": "qwen3", "prompt": list(range(first, first + 256)), "max_tokens": 1, "ignore_eos": True,
            "nvext": nvext}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=60))
    time.sleep(0.5)  # the worker's events reach the router
    return out["nvext"]["worker_id"]["decode_worker_id"]
assert send(1000, a) == a and send(5000, b) == b, "pinned requests"
name = {a: "a", b: "b"}
print(f"A->{name[send(1000)]} B->{name[send(5000)]}")
EOF
}

run() { # kind threshold: the steps through one kind of frontend, on fresh workers
  local kind=$1 log="$1-$2-frontend.log" i
  export DYN_FILE_KV="$WORK/kv-$kind-$2"
  local mockers=()
  for i in 1 2; do
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --block-size 16 --speedup-ratio 20 >"$WORK/$kind-$2-mocker$i.log" 2>&1 &
    mockers+=($!); PIDS+=($!)
  done
  workers_registered 2 "$kind: mockers" || fail "$kind: the mockers did not register" "$WORK/$kind-$2-mocker1.log"
  frontend "$kind" "$log" "$(policy "$2")"
  steps || fail "$kind $2: the steps failed" "$WORK/$log"
  kill "$F" "${mockers[@]}"; wait "$F" "${mockers[@]}" 2>/dev/null || true
}

for kind in sy dy; do
  got=$(run $kind 0.5)
  echo "== $kind, cache_threshold 0.5: $got"
  [ "$got" = "A->a B->b" ] || fail "$kind: with the cache tier A and B go to the workers holding them, got $got" "$WORK/$kind-0.5-frontend.log"
  got=$(run $kind 1.0)
  echo "== $kind, cache_threshold 1.0: $got"
  case "$got" in "A->a B->a" | "A->b B->b") ;; *) fail "$kind: without the cache tier A and B go to one worker, got $got" "$WORK/$kind-1.0-frontend.log" ;; esac
  got=$(run $kind ta)
  echo "== $kind, thunderagent: $got"
  [ "$got" = "A->a B->a" ] || fail "$kind: thunderagent sends both to the lower worker id when all are idle, got $got" "$WORK/$kind-ta-frontend.log"
done

# The prefill pool's selection on a real disaggregated deployment: two prefill mockers and
# one decode mocker. The file selects a two-tier instance whose cache tier never applies
# (cache_threshold 1.0) for the prefill pool only: four fresh prompts, one at a time, all go
# to one prefill worker (the first least-loaded candidate), through both frontends. (On this
# workload the default cost function also keeps to one prefill worker: the check shows the
# instance serving a real pair, not a choice only it makes.)
printf 'worker_selection:\n  prefill: tt\n  instances:\n  - {name: tt, type: dynamo-two-tier-cost-fn, parameters: {cache_threshold: 1.0}}\n' \
  >"$WORK/pools.yaml"
prefills() { # prints how many prefill workers the four prompts went to
  python3 - "$PORT" <<'PYEOF'
import json, sys, time, urllib.request
port = sys.argv[1]
seen = []
for i in range(4):
    body = {"model": "qwen3", "prompt": list(range(20000 + 3000 * i, 20256 + 3000 * i)), "max_tokens": 2,
            "nvext": {"extra_fields": ["worker_id"]}}
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(),
                                 {"content-type": "application/json"})
    out = json.load(urllib.request.urlopen(req, timeout=60))
    seen.append(out["nvext"]["worker_id"]["prefill_worker_id"])
    time.sleep(0.5)
print(len(set(seen)))
PYEOF
}
pools() { # kind [frontend args...]: prints the prefill workers used, on fresh workers
  local kind=$1 i; shift
  export DYN_FILE_KV="$WORK/kv-pools-$kind-$#"
  local ms=()
  for i in 1 2 3; do
    local mode=prefill
    [ $i = 3 ] && mode=decode
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file --speedup-ratio 20 \
      --request-plane tcp --event-plane zmq --block-size 16 --disaggregation-mode $mode >"$WORK/pools-$kind-$i.log" 2>&1 &
    ms+=($!); PIDS+=($!)
  done
  workers_registered 3 "$kind: pool mockers" || fail "$kind: the pool mockers did not register" "$WORK/pools-$kind-3.log"
  if [ "$kind" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
      --router-policy-config "$WORK/pools.yaml" "$@" >>"$WORK/pools-$kind.log" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file --router-mode kv \
      --router-policy-config "$WORK/pools.yaml" "$@" >>"$WORK/pools-$kind.log" 2>&1 &
  fi
  local f=$!; PIDS+=($f)
  model_listed $PORT qwen3 || fail "$kind: lists no qwen3 (pools)" "$WORK/pools-$kind.log"
  sleep 1
  prefills || fail "$kind: the pool requests failed" "$WORK/pools-$kind.log"
  kill "$f" "${ms[@]}"; wait "$f" "${ms[@]}" 2>/dev/null || true
}
for kind in sy dy; do
  got=$(pools $kind)
  echo "== $kind, prefill pool on a two-tier instance (threshold 1.0): $got prefill worker(s)"
  [ "$got" = 1 ] || fail "$kind: the prefill pool's instance sends fresh prompts to one worker, got $got" "$WORK/pools-$kind.log"
done

# A prefill policy that names no instance: switchyard does not start.
export DYN_FILE_KV="$WORK/kv-none"
mkdir -p "$DYN_FILE_KV"
f=$(policy 0.5)
if timeout 60 "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT \
  --router-policy-config "$f" --router-prefill-policy fast >"$WORK/sy-unknown.log" 2>&1; then
  fail "switchyard started with --router-prefill-policy fast" "$WORK/sy-unknown.log"
fi
grep -q 'unknown worker-selection instance "fast"; configured instances: tt' "$WORK/sy-unknown.log" ||
  fail "switchyard: not 1.6.1's message" "$WORK/sy-unknown.log"
echo "== sy: $(grep -o 'unknown worker-selection instance.*' "$WORK/sy-unknown.log" | head -1)"
echo "interop_policy: ok (switchyard and dynamo.frontend: a two-tier instance follows the cache above its threshold and the least-loaded candidate otherwise)"
