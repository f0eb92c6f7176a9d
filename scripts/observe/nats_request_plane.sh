#!/usr/bin/env bash
# Observes 1.6.1's NATS request plane: a real `dynamo.mocker --request-plane nats` and the real
# `dynamo.frontend --request-plane nats` against a plain nats-server (JetStream on) that traces
# every protocol message, and writes what it saw under $OUT (default /tmp/obs-nats-request):
# the worker's registration (the discovery record, its `transport`), the server's trace of one
# streamed chat request and one request the client abandons (subjects, reply inboxes, headers,
# payload sizes and bytes), a loopback capture, and which TCP connections the request used
# (whether the answer comes back over NATS or over a call-back connection).
# docs/dynamo/request-plane.md ("The NATS request plane") is written from these.
#
# Needs root (unshare -n), nats-server (scripts/install-system.sh), tcpdump, the Dynamo venv
# (scripts/install-dynamo.sh) and the qwen3 files (scripts/fetch-models.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-nats-request}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need nats-server tcpdump
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
# Only Dynamo's processes run here: no switchyard build needed.
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
export DYN_FILE_KV=$OUT/kv NATS_SERVER=nats://127.0.0.1:14222
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }

# -V traces every protocol line with its payload; max_traced_msg_len keeps payloads whole.
cat >"$OUT/nats.conf" <<CONF
listen: 127.0.0.1:14222
http: 127.0.0.1:18223
max_traced_msg_len: 65536
jetstream { store_dir: "$OUT/js" }
CONF
tcpdump -i lo -s 0 -w "$OUT/lo.pcap" >/dev/null 2>&1 & PIDS+=($!); TCPDUMP=$!
nats-server -c "$OUT/nats.conf" -V >"$OUT/nats.log" 2>&1 & PIDS+=($!)
sleep 1
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane nats >"$OUT/mocker.log" 2>&1 & PIDS+=($!)
for _ in $(seq 1 300); do ls "$DYN_FILE_KV"/v1/instances/*generate* >/dev/null 2>&1 && break; sleep 0.2; done
log "mocker registered: $(ls "$DYN_FILE_KV"/v1/instances | tr '\n' ' ')"
for f in "$DYN_FILE_KV"/v1/instances/*; do log "  instance record: $(head -c 600 "$f")"; done
PORT=18710
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file \
  --request-plane nats >"$OUT/frontend.log" 2>&1 & PIDS+=($!); FE=$!
for _ in $(seq 1 300); do curl -s 127.0.0.1:$PORT/v1/models | grep -q qwen3 && break; sleep 0.2; done
log "frontend: $(curl -s 127.0.0.1:$PORT/v1/models | head -c 200)"
sleep 1
log "streamed request: $(curl -s -m 20 -N 127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":3,"stream":true}' | head -c 400 | tr '\n' ' ')"
ss -tnp >"$OUT/ss-after-streamed.txt" 2>&1
sleep 1
curl -s -m 0.3 -N 127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"count"}],"max_tokens":2000,"stream":true}' >/dev/null
sleep 2
log "nats-server connections: $(curl -s '127.0.0.1:18223/connz?subs=1' | python3 -c 'import json,sys; print([(c.get("name"), c.get("lang"), c.get("subscriptions_list")) for c in json.load(sys.stdin).get("connections", [])])')"
kill $FE; wait $FE 2>/dev/null
# The same worker behind a frontend on the default (TCP) request plane.
"$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $((PORT + 1)) --discovery-backend file \
  >"$OUT/frontend-tcp.log" 2>&1 & PIDS+=($!); FE=$!
for _ in $(seq 1 150); do curl -s 127.0.0.1:$((PORT + 1))/v1/models | grep -q qwen3 && break; sleep 0.2; done
log "frontend on --request-plane tcp: models $(curl -s 127.0.0.1:$((PORT + 1))/v1/models | head -c 120)"
log "  request: $(curl -s -m 20 -w ' HTTP %{http_code}' 127.0.0.1:$((PORT + 1))/v1/chat/completions \
  -H 'content-type: application/json' -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":3}' | head -c 400)"
log "  its log: $(sed 's/\x1b\[[0-9;]*m//g' "$OUT/frontend-tcp.log" | grep -E 'WARN|ERROR' | tail -n 3 | cut -c1-300 | tr '\n' ' ')"
kill $FE; wait $FE 2>/dev/null
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
# The two requests' protocol lines: the publish to the endpoint's subject, its delivery to the
# worker, the reply to the inbox and its delivery, each with its payload line; the CONNECT
# options of both processes.
grep -E 'CONNECT|generate-|_INBOX\.[^ ]+\.[^ *]+ ' -A1 "$OUT/nats.log" | grep -v -E '^--$|\[(SUB|PING|PONG)' \
  >"$OUT/request-trace.txt"
log "request trace: $(wc -l <"$OUT/request-trace.txt") lines in $OUT/request-trace.txt"
echo "written to $OUT"
