#!/usr/bin/env bash
# The request classifier `thunderagent` (--router-policy-config request_classifier) against
# real Dynamo 1.6.1 workers: two `python -m dynamo.mocker` of 64 KV blocks of 16 tokens (1,024
# tokens each, --speedup-ratio 0.2), and the same steps through switchyard --router-mode kv
# and through python -m dynamo.frontend --router-mode kv, each on fresh workers. Both must
# give the same outcome, line for line:
#   * two turns of one session sent 50 ms apart: the second's first token comes after the
#     first turn's end;
#   * two 700-token programs fill the two workers; a third waits (no token after 1.5 s)
#     while a request without a session goes; the first program's last turn
#     (x-dynamo-session-final: true) ends it as it begins, and the waiting one then goes.
# Root, loopback-only network namespace.
#
# Usage: bash scripts/interop_thunder.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18711

cat >"$WORK/thunder.yaml" <<'YAML'
request_classifier:
  type: thunderagent
  parameters: {buffer_per_program: 0, scheduler_interval_seconds: 0.2}
YAML

client() { # prints the outcome, timings left out
  python3 - "$PORT" <<'PY'
import json, sys, threading, time, urllib.request, urllib.error
port = sys.argv[1]
first, end, status, began = {}, {}, {}, {}
def send(tag, start, n, session=None, last=False):
    began[tag] = time.monotonic()
    body = {"model": "qwen3", "prompt": list(range(start, start + n)), "max_tokens": 20, "stream": True,
            "ignore_eos": True}
    h = {"content-type": "application/json"}
    if session:
        h["x-dynamo-session-id"] = session
    if last:
        h["x-dynamo-session-final"] = "true"
    req = urllib.request.Request(f"http://127.0.0.1:{port}/v1/completions", json.dumps(body).encode(), h)
    try:
        with urllib.request.urlopen(req, timeout=120) as r:
            for line in r:
                if line.startswith(b"data: {") and tag not in first:
                    first[tag] = time.monotonic()
            status[tag] = r.status
    except urllib.error.HTTPError as e:
        status[tag] = f"{e.code} {e.read().decode()}"
    end[tag] = time.monotonic()
def go(*args, **kw):
    t = threading.Thread(target=send, args=args, kwargs=kw); t.start(); return t
# One turn at a time.
a = go("s1-first", 1000, 300, "s1"); time.sleep(0.05); b = go("s1-second", 2000, 300, "s1")
a.join(); b.join()
print("s1:", status["s1-first"], status["s1-second"], "second began after the first ended:",
      first["s1-second"] >= end["s1-first"])
# Deferral until a program ends.
for tag, start in (("big1", 10000), ("big2", 20000)):
    go(tag, start, 700, tag).join()
    print(tag, status[tag])
c = go("big3", 30000, 700, "big3")
time.sleep(0.5)
go("no-session", 40000, 100).join()
print("no-session", status["no-session"], "while big3 waited:", "big3" not in first)
time.sleep(1.0)
print("big3 waiting after 1.5 s:", "big3" not in first)
go("big1-last", 50000, 50, "big1", last=True).join()
print("big1-last", status["big1-last"])
c.join()
# The last turn ends the program as it begins: big3 goes at the next scheduler pass.
print("big3", status["big3"], "went once big1's last turn began:", first["big3"] >= began["big1-last"])
PY
}

run() { # kind: prints the outcome through one kind of frontend
  local kind=$1
  export DYN_FILE_KV="$WORK/kv-$kind"
  local pids=()
  for i in 1 2; do
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --block-size 16 --num-gpu-blocks-override 64 --speedup-ratio 0.2 \
      >"$WORK/$kind-mocker-$i.log" 2>&1 &
    pids+=($!); PIDS+=($!)
  done
  workers_registered 2 "$kind: mockers" || fail "$kind: the mockers did not register" "$WORK/$kind-mocker-1.log"
  if [ "$kind" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
      --router-policy-config "$WORK/thunder.yaml" >"$WORK/$kind.log" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file --router-mode kv \
      --router-policy-config "$WORK/thunder.yaml" >"$WORK/$kind.log" 2>&1 &
  fi
  local f=$!; PIDS+=($f)
  model_listed $PORT qwen3 || fail "$kind: lists no qwen3" "$WORK/$kind.log"
  sleep 1 # subscribed to the workers' events
  client || fail "$kind: the client failed" "$WORK/$kind.log"
  kill "$f" "${pids[@]}"; wait "$f" "${pids[@]}" 2>/dev/null || true
}

for kind in sy dy; do
  run $kind >"$WORK/$kind.out"
done
echo "== switchyard"; cat "$WORK/sy.out"
diff "$WORK/dy.out" "$WORK/sy.out" >&2 || fail "switchyard and dynamo.frontend differ (< dynamo.frontend, > switchyard)"
grep -q '^s1: 200 200 second began after the first ended: True$' "$WORK/sy.out" || fail "one turn at a time" "$WORK/sy.out"
grep -q '^big3 waiting after 1.5 s: True$' "$WORK/sy.out" && grep -q "^big3 200 went once big1's last turn began: True$" "$WORK/sy.out" ||
  fail "deferral until a program ends" "$WORK/sy.out"
echo "interop_thunder: ok (switchyard and dynamo.frontend: one turn per session, a program waiting for room until another ends)"
