#!/usr/bin/env bash
# Observes 1.6.1's disaggregated serving: a real `dynamo.mocker --disaggregation-mode prefill`
# and a real `--disaggregation-mode decode` (file discovery, TCP request plane, ZMQ KV events)
# behind the real `dynamo.frontend --router-mode kv`, and writes what it saw under $OUT
# (default /tmp/obs-disagg): both registrations (instance records and model cards), a loopback
# capture of two streamed chat requests (decode first with `--bootstrap-ports`, then without
# it when DISAGG_BOOTSTRAP=0), the frontend's answers and metrics, and what the frontend answers
# when only one kind of worker is present. docs/dynamo/disaggregated.md is written from these.
#
# Needs root (unshare -n), tcpdump, the Dynamo venv (scripts/install-dynamo.sh) and the qwen3
# files (scripts/fetch-models.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-disagg}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need tcpdump
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
export DYN_FILE_KV=$OUT/kv
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }
BOOT=()
[ "${DISAGG_BOOTSTRAP:-1}" = 1 ] && BOOT=(--bootstrap-ports 17990)
PORT=18720
chat() { # max_tokens stream
  curl -s -m 20 -N 127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"hello there, tell me a story\"}],\"max_tokens\":$1,\"stream\":$2}" \
    -w ' HTTP %{http_code}' | head -c 1500 | tr '\n' ' '
}

tcpdump -i lo -s 0 -w "$OUT/lo.pcap" >/dev/null 2>&1 & PIDS+=($!); TCPDUMP=$!
sleep 0.5
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file \
  --router-mode kv >"$OUT/frontend.log" 2>&1 & PIDS+=($!); FE=$!
sleep 4
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq --disaggregation-mode decode \
  >"$OUT/decode.log" 2>&1 & PIDS+=($!); DECODE=$!
for _ in $(seq 1 300); do ls "$DYN_FILE_KV"/v1/instances/*/*/* >/dev/null 2>&1 && break; sleep 0.2; done
sleep 3
log "decode only: models $(curl -s 127.0.0.1:$PORT/v1/models | head -c 300)"
log "  health: $(curl -s 127.0.0.1:$PORT/health | head -c 600)"
log "  request: $(chat 3 false)"
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq --disaggregation-mode prefill \
  "${BOOT[@]}" >"$OUT/prefill.log" 2>&1 & PIDS+=($!)
sleep 6
find "$DYN_FILE_KV" -type f | sort >"$OUT/kv-files.txt"
while read -r f; do echo "$f: $(cat "$f")" >>"$OUT/records.txt"; done <"$OUT/kv-files.txt"
log "records: $(wc -l <"$OUT/kv-files.txt") in $OUT/records.txt"
log "both: models $(curl -s 127.0.0.1:$PORT/v1/models | head -c 300)"
log "  health: $(curl -s 127.0.0.1:$PORT/health | head -c 600)"
log "  streamed: $(chat 5 true)"
sleep 1
log "  unary: $(chat 4 false)"
sleep 1
curl -s 127.0.0.1:$PORT/metrics >"$OUT/metrics.txt"
log "metrics with prefill/decode/worker_type: $(grep -v '^#' "$OUT/metrics.txt" | grep -iE 'prefill|decode|worker_type' | head -40 | tr '\n' ';')"
# The client leaves during a long answer.
curl -s -m 0.5 -N 127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"count"}],"max_tokens":3000,"stream":true}' >/dev/null
sleep 2
# Only the prefill worker left.
kill $DECODE; wait $DECODE 2>/dev/null
sleep 3
log "prefill only: models $(curl -s 127.0.0.1:$PORT/v1/models | head -c 300)"
log "  request: $(chat 3 false)"
kill $FE; wait $FE 2>/dev/null
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
# The workers' listen ports, from their instance records; then every frame sent to them.
PORTS=$(grep -o '"tcp":"127.0.0.1:[0-9]*' "$OUT/records.txt" | cut -d: -f3 | sort -u | tr '\n' ' ')
"$PY" scripts/observe/plane_frames.py "$OUT/lo.pcap" $PORTS >"$OUT/frames.txt" 2>&1
log "frames: $(grep -c '^REQUEST' "$OUT/frames.txt") requests, $(grep -c '^CALLBACK' "$OUT/frames.txt") call-backs in $OUT/frames.txt"
log "frontend warnings: $(sed 's/\x1b\[[0-9;]*m//g' "$OUT/frontend.log" | grep -E 'WARN|ERROR|refill|isagg' | tail -n 12 | cut -c1-300 | tr '\n' ' ')"
echo "written to $OUT"
