#!/usr/bin/env bash
# Observes how the real Dynamo 1.6.1 frontend and `dynamo.mocker` use the NATS TLS options
# (`--nats-tls-*` / `NATS_TLS_*`) with `--event-plane nats` against a nats-server that
# requires TLS and client certificates, and writes what it saw under $OUT (default
# /tmp/obs-nats-tls): per frontend its start (or its exit and last log lines), one chat
# request, the server's view of each connection (`/connz`: TLS version, cipher, subjects),
# and a capture summary. docs/dynamo/request-plane-tls.md §7 is written from these.
#
# Needs root (unshare -n), nats-server (scripts/install-system.sh), tcpdump, openssl, the
# Dynamo venv (scripts/install-dynamo.sh), the qwen3 files and the test certificates
# (scripts/make-test-certs.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-nats-tls}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need nats-server tcpdump openssl
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
# Only Dynamo's processes run here: no switchyard build needed.
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
test_certs
export DYN_FILE_KV=$OUT/kv
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }

cat >"$OUT/nats.conf" <<CONF
listen: 127.0.0.1:14443
http: 127.0.0.1:18222
jetstream { store_dir: "$OUT/js" }
tls {
  cert_file: "$C/server.pem"
  key_file: "$C/server.key"
  ca_file: "$C/ca.pem"
  verify: true
  timeout: 2
}
CONF
tcpdump -i lo -s 0 -w "$OUT/lo.pcap" tcp port 14443 >/dev/null 2>&1 & PIDS+=($!); TCPDUMP=$!
nats-server -c "$OUT/nats.conf" >"$OUT/nats.log" 2>&1 & PIDS+=($!)
sleep 1
log "nats-server: $(head -c 300 "$OUT/nats.log" | tr '\n' ' ')"
NATS_TLS=(NATS_SERVER=tls://127.0.0.1:14443 NATS_TLS_CA_CERT_PATH=$C/ca.pem NATS_TLS_CLIENT_CERT_PATH=$C/client.pem NATS_TLS_CLIENT_KEY_PATH=$C/client.key)
env "${NATS_TLS[@]}" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane nats >"$OUT/mocker.log" 2>&1 & PIDS+=($!)
for _ in $(seq 1 300); do ls "$DYN_FILE_KV"/v1/instances/*generate* >/dev/null 2>&1 && break; sleep 0.2; done
log "mocker (${NATS_TLS[*]}): $(ls "$DYN_FILE_KV"/v1/instances | head -1); event channel: $(cat "$DYN_FILE_KV"/v1/event_channels/* 2>/dev/null | head -c 300)"
PORT=18700
frontend() { # name env... -- flags...
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  PORT=$((PORT + 1))
  env "${envs[@]}" "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file \
    --router-mode kv "$@" >"$OUT/fe-$name.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  local up=
  for _ in $(seq 1 150); do
    kill -0 $pid 2>/dev/null || break
    curl -s 127.0.0.1:$PORT/v1/models | grep -q qwen3 && { up=1; break; }
    sleep 0.2
  done
  if ! kill -0 $pid 2>/dev/null; then
    log "frontend $name (${envs[*]} $*): EXITED rc=$(wait $pid; echo $?): $(sed 's/\x1b\[[0-9;]*m//g' "$OUT/fe-$name.log" | grep -v '^\s*$' | tail -n 4 | cut -c1-500 | tr '\n' ' ')"
    return
  fi
  local listed="model NOT listed after 30 s"
  [ -n "$up" ] && listed="model listed"
  log "frontend $name (${envs[*]} $*): $listed"
  local r; r=$(curl -s -m 20 -w ' %{http_code} %{time_total}s' 127.0.0.1:$PORT/v1/chat/completions -H 'content-type: application/json' \
    -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')
  log "  request: ${r: -20} $(echo "$r" | head -c 200)"
  log "  nats-server connections: $(curl -s '127.0.0.1:18222/connz?subs=1' | python3 -c 'import json,sys; print([(c.get("name"), c.get("lang"), c.get("tls_version"), c.get("tls_cipher_suite"), len(c.get("subscriptions_list") or [])) for c in json.load(sys.stdin).get("connections", [])])')"
  log "  frontend log (tls/nats lines): $(sed 's/\x1b\[[0-9;]*m//g' "$OUT/fe-$name.log" | grep -i -E 'nats|tls' | grep -v -i 'mm_routing' | tail -n 4 | cut -c1-400 | tr '\n' ' ')"
  kill $pid; wait $pid 2>/dev/null
}
frontend ok -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem --nats-tls-client-cert-path $C/client.pem \
  --nats-tls-client-key-path $C/client.key
frontend okenv NATS_SERVER=tls://127.0.0.1:14443 NATS_TLS_CA_CERT_PATH=$C/ca.pem NATS_TLS_CLIENT_CERT_PATH=$C/client.pem NATS_TLS_CLIENT_KEY_PATH=$C/client.key -- --event-plane nats
export NATS_SERVER=tls://127.0.0.1:14443
frontend okurl -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem --nats-tls-client-cert-path $C/client.pem \
  --nats-tls-client-key-path $C/client.key
frontend natsscheme NATS_SERVER=nats://127.0.0.1:14443 -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem \
  --nats-tls-client-cert-path $C/client.pem --nats-tls-client-key-path $C/client.key
frontend natsschemeplain NATS_SERVER=nats://127.0.0.1:14443 -- --event-plane nats
frontend wrongca -- --event-plane nats --nats-tls-ca-cert-path $C/other-ca.pem --nats-tls-client-cert-path $C/client.pem \
  --nats-tls-client-key-path $C/client.key
frontend insecure -- --event-plane nats --nats-tls-insecure --nats-tls-client-cert-path $C/client.pem --nats-tls-client-key-path $C/client.key
frontend noclientcert -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem
frontend certnokey -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem --nats-tls-client-cert-path $C/client.pem
frontend keynocert -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem --nats-tls-client-key-path $C/client.key
frontend notlsopts -- --event-plane nats
frontend dnsname NATS_SERVER=tls://localhost:14443 -- --event-plane nats --nats-tls-ca-cert-path $C/ca.pem \
  --nats-tls-client-cert-path $C/client.pem --nats-tls-client-key-path $C/client.key
frontend zmqplane -- --event-plane zmq --nats-tls-ca-cert-path $C/ca.pem --nats-tls-client-cert-path $C/client.pem \
  --nats-tls-client-key-path $C/client.key
frontend zmqnoserver -u NATS_SERVER -- --event-plane zmq --nats-tls-ca-cert-path $C/ca.pem
frontend missingca -- --event-plane nats --nats-tls-ca-cert-path $C/nope.pem --nats-tls-client-cert-path $C/client.pem \
  --nats-tls-client-key-path $C/client.key
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
python3 scripts/observe/pcap_conns.py "$OUT/lo.pcap" 14443 >>"$S"
echo "written to $OUT"
