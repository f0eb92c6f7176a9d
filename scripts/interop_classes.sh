#!/usr/bin/env bash
# Policy classes of --router-policy-config against a real Dynamo 1.6.1 worker: one slow
# `python -m dynamo.mocker` (--speedup-ratio 0.05: a 2,000-token prefill takes ~1.5 s), and the
# same steps through switchyard --router-mode kv and through python -m dynamo.frontend
# --router-mode kv, each on a fresh worker. Both must give the same statuses, the same refusal
# bodies and the same per-class metric families, line for line.
#   Limits: class `standard` (busy past 10 prefill tokens, one request per worker may wait):
#     a long prompt goes, a second waits, a third is refused (529, 1.6.1's `details`); a
#     request whose x-dynamo-meta-policy-class header names `vip` (explicit, no threshold)
#     goes past the one waiting; mid-run and final metrics.
#   Buckets: `hot` (uncached < 1,000 tokens, never waits) and `cold` (limit 0: refused
#     whenever it would wait): a cached prompt goes while a new one prefills; a new one is
#     refused.
# Root, loopback-only network namespace.
#
# Usage: bash scripts/interop_classes.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18697

cat >"$WORK/limits.yaml" <<'EOF'
default_policy_family: standard
uncached_isl_buckets: [{min_tokens: 0, bucket: all}]
policy_classes:
  - {name: standard, policy_family: standard, cache_bucket: all, quantum: 1, prefill_busy_threshold: 10,
     request_queue_limit_per_worker: 1}
  - {name: vip, quantum: 1000}
EOF
cat >"$WORK/buckets.yaml" <<'EOF'
default_policy_family: std
uncached_isl_buckets: [{min_tokens: 0, bucket: hot}, {min_tokens: 1000, bucket: cold}]
policy_classes:
  - {name: hot, policy_family: std, cache_bucket: hot, quantum: 1}
  - {name: cold, policy_family: std, cache_bucket: cold, quantum: 1, prefill_busy_threshold: 10,
     request_queue_limit_per_worker: 0}
EOF

client() { # scenario: prints the outcome, timings left out
  python3 - "$PORT" "$1" <<'EOF'
import json, sys, threading, time, urllib.request, urllib.error
port, scenario = sys.argv[1], sys.argv[2]
out = {}
def send(tag, first, hdr=None):
    body = {"model": "qwen3", "prompt": list(range(first, first + 2000)), "max_tokens": 2}
    h = {"content-type": "application/json"}
    if hdr:
        h["x-dynamo-meta-policy-class"] = hdr
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), h)
    try:
        r = urllib.request.urlopen(req, timeout=120)
        out[tag] = f"{r.status}"
    except urllib.error.HTTPError as e:
        out[tag] = f"{e.code} {e.read().decode()}"
def metrics(label):
    m = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics").read().decode()
    lines = sorted(l for l in m.splitlines() if l.startswith("dynamo_frontend_router_queue")
                   or l.startswith("dynamo_frontend_router_admission"))
    print(f"-- metrics {label}"); print("\n".join(lines))
def run(steps):
    ts = []
    for tag, first, hdr, wait in steps:
        t = threading.Thread(target=send, args=(tag, first, hdr)); t.start(); ts.append(t); time.sleep(wait)
    return ts
if scenario == "limits":
    ts = run([("first", 1000, None, 0.3), ("waits", 5000, None, 0.3), ("refused", 9000, None, 0.1),
              ("vip", 13000, "vip", 0.2)])
    metrics("while the first prefills")
else:
    t = run([("cached", 1000, None, 0)]); t[0].join(); time.sleep(1)  # its blocks reach the router
    ts = run([("new", 5000, None, 0.3), ("cached-again", 1000, None, 0.1), ("new-refused", 9000, None, 0.1)])
for t in ts:
    t.join()
for k in sorted(out):
    print(k, out[k])
metrics("at the end")
EOF
}

run() { # kind scenario: prints the outcome of one scenario through one kind of frontend
  local kind=$1 scenario=$2
  export DYN_FILE_KV="$WORK/kv-$kind-$scenario"
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --request-plane tcp --event-plane zmq --block-size 16 --speedup-ratio 0.05 >"$WORK/$kind-$scenario-mocker.log" 2>&1 &
  local mocker=$!; PIDS+=($mocker)
  workers_registered 1 "$kind: mocker" || fail "$kind: the mocker did not register" "$WORK/$kind-$scenario-mocker.log"
  if [ "$kind" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
      --router-policy-config "$WORK/$scenario.yaml" >"$WORK/$kind-$scenario.log" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file --router-mode kv \
      --router-policy-config "$WORK/$scenario.yaml" >"$WORK/$kind-$scenario.log" 2>&1 &
  fi
  local f=$!; PIDS+=($f)
  model_listed $PORT qwen3 || fail "$kind: lists no qwen3" "$WORK/$kind-$scenario.log"
  sleep 1 # subscribed to the worker's events
  client "$scenario" || fail "$kind $scenario: the client failed" "$WORK/$kind-$scenario.log"
  kill "$f" "$mocker"; wait "$f" "$mocker" 2>/dev/null || true
}


for scenario in limits buckets; do
  for kind in sy dy; do
    run $kind $scenario >"$WORK/$kind-$scenario.out"
  done
  echo "== $scenario (switchyard)"; cat "$WORK/sy-$scenario.out"
  diff "$WORK/dy-$scenario.out" "$WORK/sy-$scenario.out" >&2 ||
    fail "$scenario: switchyard and dynamo.frontend differ (< dynamo.frontend, > switchyard)"
done
grep -q '^refused 529 {"message":"router policy class \\"standard\\" queue requests limit reached (current=1, limit=1)","type":"Overloaded","code":529,"details":{"policy_class":"standard","limit_kind":"requests","current":1,"limit":1}}$' "$WORK/sy-limits.out" ||
  fail "limits: not the refusal expected" "$WORK/sy-limits.out"
grep -q '^vip 200$' "$WORK/sy-limits.out" && grep -q '^waits 200$' "$WORK/sy-limits.out" || fail "limits: vip or waits" "$WORK/sy-limits.out"
grep -q '^cached-again 200$' "$WORK/sy-buckets.out" && grep -q '^new-refused 529 .*"limit_kind":"requests","current":0,"limit":0' "$WORK/sy-buckets.out" ||
  fail "buckets: a cached prompt goes, a new one is refused" "$WORK/sy-buckets.out"
echo "interop_classes: ok (switchyard and dynamo.frontend: the same statuses, refusals and per-class metrics)"
