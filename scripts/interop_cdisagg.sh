#!/usr/bin/env bash
# Conditional disaggregation (`--router-conditional-disagg`, docs/dynamo/disaggregated.md §4)
# against real Dynamo 1.6.1 mockers: a `--disaggregation-mode prefill` mocker and a decode
# worker that publishes KV events (a real `dynamo.mocker --disaggregation-mode decode` whose
# engine runs as an aggregated one — 1.6.1's decode mocker publishes none, so without them the
# default policy can never skip a prefill: scripts/kv_decode_worker.py). Through switchyard
# --router-mode kv --router-conditional-disagg, then through dynamo.frontend with the same
# flags (file discovery, TCP request plane, ZMQ events, block size 16; the loopback captured):
#   1. a fresh 1,000-token prompt: both legs, as without the option;
#   2. the same prompt again (992 of its tokens cached on the decode worker: 8 left to
#      prefill, under 2,048 and 0.7 of the prompt): no prefill leg; the decode worker gets the
#      whole request, an aggregated one with "x-bypass-remote-prefill" in its annotations,
#      the same as what dynamo.frontend sends it (token ids, request ids aside);
#   3. with {"eff_isl_threshold": 0} nothing is skipped.
# Root, loopback-only network namespace.
#
# Usage: bash scripts/interop_cdisagg.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
need tcpdump
PORT=18740

prompt() { # SEED: 1,000 token ids
  python3 -c "import json, random, sys; r = random.Random(int(sys.argv[1])); print(json.dumps([r.randrange(1000, 30000) for _ in range(1000)]))" "$1"
}
probe() { # PORT TAG(max_tokens) SEED: a completion of the seed's prompt; fails unless 200
  local out
  out=$(curl -s -m 60 "127.0.0.1:$1/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"prompt\":$(prompt "$3"),\"max_tokens\":$2}" -w ' HTTP %{http_code}')
  case "$out" in *'"choices"'*"HTTP 200") ;; *) fail "probe $2 through port $1: ${out:0:300}" "$WORK/switchyard.log" "$WORK/dynamo.log" ;; esac
  sleep 0.7 # the decode worker's KV events reach the router
}
metric() { # PORT NAME LABELS
  curl -s -m 5 "127.0.0.1:$1/metrics" | { grep "^$2{.*$3" || true; } | awk '{s += $NF} END {print s + 0}'
}

tcpdump -i lo -s 0 -w "$WORK/lo.pcap" >/dev/null 2>&1 &
TCPD=$!; PIDS+=($TCPD)
sleep 0.5
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file --request-plane tcp \
  --event-plane zmq --block-size 16 --speedup-ratio 10 --disaggregation-mode prefill >"$WORK/prefill.log" 2>&1 &
PIDS+=($!)
"$PY" scripts/kv_decode_worker.py --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
  --request-plane tcp --event-plane zmq --block-size 16 --speedup-ratio 10 --disaggregation-mode decode \
  >"$WORK/decode.log" 2>&1 &
PIDS+=($!)
workers_registered 2 "the mockers" || fail "the mockers did not register" "$WORK/prefill.log" "$WORK/decode.log"

"$BIN" --discovery-backend file --router-mode kv --router-conditional-disagg --http-host 127.0.0.1 --http-port $PORT \
  >"$WORK/switchyard.log" 2>&1 &
SY=$!; PIDS+=($SY)
model_listed $PORT qwen3 || fail "switchyard lists no qwen3" "$WORK/switchyard.log"
sleep 1
probe $PORT 31 1
probe $PORT 32 1
skipped=$(metric $PORT switchyard_disaggregated_legs_total 'worker_type="decode_prefill_skipped",outcome="ok"')
prefilled=$(metric $PORT switchyard_disaggregated_legs_total 'worker_type="prefill",outcome="ok"')
[ "$skipped" = 1 ] && [ "$prefilled" = 1 ] ||
  fail "switchyard: $prefilled prefill legs and $skipped requests without one (wanted 1 and 1)" "$WORK/switchyard.log"
echo "1-2. switchyard: a fresh prompt prefilled, the same again sent to the decode worker alone: ok"
kill $SY; wait $SY 2>/dev/null || true

"$PY" -m dynamo.frontend --discovery-backend file --router-mode kv --router-conditional-disagg --http-host 127.0.0.1 \
  --http-port $((PORT + 1)) >"$WORK/dynamo.log" 2>&1 &
DY=$!; PIDS+=($DY)
model_listed $((PORT + 1)) qwen3 || fail "dynamo.frontend lists no qwen3" "$WORK/dynamo.log"
for _ in $(seq 1 100); do grep -q 'Prefill router target activated' "$WORK/dynamo.log" && break; sleep 0.2; done
sleep 2
probe $((PORT + 1)) 41 2
probe $((PORT + 1)) 42 2
kill $DY; wait $DY 2>/dev/null || true

"$BIN" --discovery-backend file --router-mode kv --router-conditional-disagg --http-host 127.0.0.1 \
  --http-port $((PORT + 2)) --router-conditional-disagg-config '{"eff_isl_threshold": 0}' >"$WORK/switchyard-zero.log" 2>&1 &
SZ=$!; PIDS+=($SZ)
model_listed $((PORT + 2)) qwen3 || fail "switchyard (threshold 0) lists no qwen3" "$WORK/switchyard-zero.log"
sleep 1
probe $((PORT + 2)) 51 1
skipped=$(metric $((PORT + 2)) switchyard_disaggregated_legs_total 'worker_type="decode_prefill_skipped"')
[ "$skipped" = 0 ] || fail "3. with eff_isl_threshold 0 a prefill was skipped" "$WORK/switchyard-zero.log"
echo "3. with eff_isl_threshold 0 the cached prompt is prefilled: ok"
kill $SZ; wait $SZ 2>/dev/null || true

sleep 1
kill $TCPD; wait $TCPD 2>/dev/null || true
ports=$(cat "$DYN_FILE_KV"/v1/instances/* | grep -o '"tcp":"127.0.0.1:[0-9]*' | cut -d: -f3 | sort -u | tr '\n' ' ')
# shellcheck disable=SC2086
"$PY" scripts/observe/plane_frames.py "$WORK/lo.pcap" $ports >"$WORK/frames.txt"
"$PY" - "$WORK/frames.txt" <<'EOF' || fail "2. what the decode worker received differs from dynamo.frontend's (frames: $WORK/frames.txt)"
import json, sys
legs = {}  # "prefill" | "decode" -> [(request id, body)]
cur = None
for line in open(sys.argv[1]):
    if line.startswith("REQUEST "):
        path, headers = line.split(" path=", 1)[1].split(" headers=", 1)
        cur = (path, json.loads(headers).get("request-id"))
    elif line.startswith("  body: ") and cur is not None and cur[0].endswith("/generate"):
        kind = "prefill" if "/prefill/" in cur[0] else "decode"
        legs.setdefault(kind, []).append((cur[1], json.loads(line[len("  body: "):])))
        cur = None
decode = {b["stop_conditions"]["max_tokens"]: (rid, b) for rid, b in legs.get("decode", [])}
prefilled = {rid for rid, _ in legs.get("prefill", [])}
def check(fresh, again):
    (frid, f), (arid, a) = decode[fresh], decode[again]
    assert frid in prefilled and (f.get("prefill_result") or f.get("bootstrap_info")), f"probe {fresh} was not handed off"
    assert "x-bypass-remote-prefill" not in f["annotations"], f["annotations"]
    assert arid not in prefilled, f"probe {again} went to the prefill worker"
    assert a["annotations"] == ["x-bypass-remote-prefill"], a["annotations"]
    assert a.get("prefill_result") is None and a.get("bootstrap_info") is None, a
    return a
ours, theirs = check(31, 32), check(41, 42)
def norm(b):
    b = json.loads(json.dumps(b))
    b["token_ids"] = len(b["token_ids"])
    b["stop_conditions"]["max_tokens"] = "<tag>"
    for k in ("request_id", "id"):
        b.pop(k, None)
    return b
assert list(ours) == list(theirs), (list(ours), list(theirs))
assert norm(ours) == norm(theirs), json.dumps({"switchyard": norm(ours), "dynamo": norm(theirs)}, indent=1)
print("2. the request without a prefill leg: the same body as dynamo.frontend's (keys in order, annotations, routing, no override): ok")
EOF
echo "interop_cdisagg: ok"
