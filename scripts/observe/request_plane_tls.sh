#!/usr/bin/env bash
# Observes how the real Dynamo 1.6.1 frontend and `dynamo.mocker` use the request-plane TLS
# options (`--tcp-tls-*` / `DYN_TCP_TLS_*`) and writes what it saw under $OUT (default
# /tmp/obs-plane-tls): per case the HTTP answers (status, time, body), the connections on
# loopback (scripts/observe/pcap_conns.py over a tcpdump capture: who dialed whom, TLS or
# plain, SNI and ALPN), `openssl s_client` probes, listening sockets (ss), the discovery
# records and the processes' logs. docs/dynamo/request-plane-tls.md is written from these.
#
# Cases (file discovery, TCP request plane, one mocker per case, frontends started against it):
#   tls      - mocker with cert/key/CA; frontends: the same three (ok), a wrong CA, only the CA
#              (no cert/key), nothing, DYN_TCP_TLS_INSECURE=1 instead of the CA; start-up
#              checks (cert without key, client CA alone, client cert without key, a missing
#              file, a file that is not PEM)
#   mtls     - mocker also with a client CA and a client identity; frontends with and without
#              a client certificate
#   dnsonly  - mocker whose certificate names only DNS:localhost; frontend without and with
#              DYN_TCP_TLS_SERVER_NAME=localhost
#   plain    - mocker without TLS; frontend with cert/key/CA, then the same with
#              DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS=1
#
# Needs root (unshare -n: a loopback-only namespace), tcpdump, openssl, the Dynamo venv
# (scripts/install-dynamo.sh), the qwen3 files (scripts/fetch-models.sh qwen3) and the test
# certificates (scripts/make-test-certs.sh).
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-plane-tls}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need tcpdump openssl
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
# Only Dynamo's processes run here: no switchyard build needed.
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
test_certs
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
PORT=18600
W_TLS=(DYN_TCP_TLS_CERT_PATH=$C/server.pem DYN_TCP_TLS_KEY_PATH=$C/server.key DYN_TCP_TLS_CA_CERT_PATH=$C/ca.pem)
F_TLS=(--tcp-tls-cert-path $C/server.pem --tcp-tls-key-path $C/server.key --tcp-tls-ca-cert-path $C/ca.pem)
F_CLIENT=(--tcp-tls-client-cert-path $C/client.pem --tcp-tls-client-key-path $C/client.key)

log() { echo "$*" | tee -a "$CASE/summary.txt"; }

mocker() { # env assignments...
  env "$@" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
    --discovery-backend file --request-plane tcp --event-plane zmq >"$CASE/mocker.log" 2>&1 &
  MOCKER=$!; PIDS+=($MOCKER)
  for _ in $(seq 1 300); do ls "$DYN_FILE_KV"/v1/instances/*generate* >/dev/null 2>&1 && break; sleep 0.2; done
  cat "$DYN_FILE_KV"/v1/instances/*generate* >"$CASE/instance.json"
  WORKER_PORT=$(sed -n 's/.*"tcp":"127.0.0.1:\([0-9]*\)\/.*/\1/p' "$CASE/instance.json")
  log "mocker ($*): request plane on 127.0.0.1:$WORKER_PORT, record $(cat "$CASE/instance.json")"
}

frontend() { # name [env assignments...] -- flags...: start, wait for the model (or the exit)
  local name=$1; shift
  local envs=()
  while [ "$1" != "--" ]; do envs+=("$1"); shift; done; shift
  PORT=$((PORT + 1))
  env "${envs[@]}" "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $PORT --discovery-backend file "$@" \
    >"$CASE/fe-$name.log" 2>&1 &
  local pid=$!; PIDS+=($pid)
  FE_PID=$pid
  for _ in $(seq 1 300); do
    kill -0 $pid 2>/dev/null || { log "frontend $name (${envs[*]} $*): EXITED rc=$(wait $pid; echo $?): $(grep -v '^\s*$' "$CASE/fe-$name.log" | tail -n 3 | tr '\n' ' ')"; return 1; }
    curl -s 127.0.0.1:$PORT/v1/models | grep -q qwen3 && break
    sleep 0.2
  done
  log "frontend $name (${envs[*]} $*): up on $PORT; response-stream listener $(ss -tlnp | grep "pid=$pid," | grep -v ":$PORT " | awk '{print $4}' | tr '\n' ' ')"
}

ask() { # name [stream]: one chat request, logged with status and time
  local body='{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":6'
  [ "${2:-}" = stream ] && body="$body,\"stream\":true"
  local r; r=$(curl -s -m 60 -w '\n%{http_code} %{time_total}s' 127.0.0.1:$PORT/v1/chat/completions \
    -H 'content-type: application/json' -d "$body}")
  log "  request ($1${2:+, $2}): status/time $(echo "$r" | tail -n 1); body: $(echo "$r" | head -n -1 | tr '\n' ' ' | cut -c1-400)"
}

stop_fe() { kill $FE_PID 2>/dev/null; wait $FE_PID 2>/dev/null; }

start_case() { # name
  CASE=$OUT/$1; mkdir -p "$CASE"
  export DYN_FILE_KV=$CASE/kv
  tcpdump -i lo -s 0 -w "$CASE/lo.pcap" tcp >/dev/null 2>&1 &
  TCPDUMP=$!; PIDS+=($TCPDUMP); sleep 1
  echo "== case $1" | tee -a "$CASE/summary.txt"
}

end_case() {
  kill $MOCKER 2>/dev/null; wait $MOCKER 2>/dev/null
  sleep 1; kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
  echo "-- connections touching the worker's request plane (:$WORKER_PORT) and the frontends' response-stream listeners" >>"$CASE/summary.txt"
  python3 scripts/observe/pcap_conns.py "$CASE/lo.pcap" $WORKER_PORT $RESPONSE_PORTS >>"$CASE/summary.txt"
  RESPONSE_PORTS=
}

note_response_port() { # record the frontend's response-stream port for the capture summary
  RESPONSE_PORTS="$RESPONSE_PORTS $(ss -tlnp | grep "pid=$FE_PID," | grep -v ":$PORT " | awk '{print $4}' | sed 's/.*://' | tr '\n' ' ')"
}
RESPONSE_PORTS=

probe() { # what port [s_client args...]: the handshake as openssl sees it
  local what=$1 port=$2; shift 2
  local r; r=$(echo | timeout 5 openssl s_client -connect 127.0.0.1:$port -CAfile $C/ca.pem "$@" 2>&1)
  log "  openssl s_client $what :$port $*: $(echo "$r" | grep -E 'Verification|Protocol  *:|Cipher is|ALPN|alert|Acceptable client certificate CA names|requested|errno|Peer signing|^subject=' | tr '\n' ';' | tr -s ' ')"
}

# --- tls --------------------------------------------------------------------------------
start_case tls
mocker "${W_TLS[@]}"
probe worker $WORKER_PORT
probe worker $WORKER_PORT -alpn h2,http/1.1
frontend ok -- "${F_TLS[@]}" && { note_response_port; ask ok; ask ok stream;
  probe "frontend response listener" $(echo $RESPONSE_PORTS | awk '{print $NF}'); stop_fe; }
frontend wrongca -- --tcp-tls-cert-path $C/server.pem --tcp-tls-key-path $C/server.key --tcp-tls-ca-cert-path $C/other-ca.pem \
  && { note_response_port; ask wrongca; ask wrongca-again; stop_fe; }
frontend caonly -- --tcp-tls-ca-cert-path $C/ca.pem && { note_response_port; ask caonly; stop_fe; }
frontend none -- && { note_response_port; ask none; stop_fe; }
frontend insecure DYN_TCP_TLS_INSECURE=1 -- --tcp-tls-cert-path $C/server.pem --tcp-tls-key-path $C/server.key \
  && { note_response_port; ask insecure; stop_fe; }
frontend certonly -- --tcp-tls-cert-path $C/server.pem && { ask certonly; stop_fe; }
frontend clientcaonly -- --tcp-tls-client-ca-cert-path $C/ca.pem && { ask clientcaonly; stop_fe; }
frontend clientcertnokey -- "${F_TLS[@]}" --tcp-tls-client-cert-path $C/client.pem && { ask clientcertnokey; stop_fe; }
frontend missingfile -- --tcp-tls-cert-path $C/nope.pem --tcp-tls-key-path $C/server.key --tcp-tls-ca-cert-path $C/ca.pem \
  && { ask missingfile; stop_fe; }
frontend notpem -- --tcp-tls-cert-path $C/server.pem --tcp-tls-key-path $C/server.key --tcp-tls-ca-cert-path $C/../../../README.md \
  && { ask notpem; stop_fe; }
end_case

# --- mtls -------------------------------------------------------------------------------
start_case mtls
mocker "${W_TLS[@]}" DYN_TCP_TLS_CLIENT_CA_CERT_PATH=$C/ca.pem DYN_TCP_TLS_CLIENT_CERT_PATH=$C/client.pem \
  DYN_TCP_TLS_CLIENT_KEY_PATH=$C/client.key
probe "worker, no client cert" $WORKER_PORT
probe "worker, client cert" $WORKER_PORT -cert $C/client.pem -key $C/client.key
frontend ok -- "${F_TLS[@]}" "${F_CLIENT[@]}" --tcp-tls-client-ca-cert-path $C/ca.pem \
  && { note_response_port; ask ok; ask ok stream;
       probe "frontend response listener, no client cert" $(echo $RESPONSE_PORTS | awk '{print $NF}'); stop_fe; }
frontend noclientcert -- "${F_TLS[@]}" && { note_response_port; ask noclientcert; stop_fe; }
frontend serveridentity -- "${F_TLS[@]}" --tcp-tls-client-cert-path $C/server.pem --tcp-tls-client-key-path $C/server.key \
  && { note_response_port; ask serveridentity; stop_fe; }
end_case

# --- dnsonly ----------------------------------------------------------------------------
start_case dnsonly
mocker DYN_TCP_TLS_CERT_PATH=$C/dnsonly.pem DYN_TCP_TLS_KEY_PATH=$C/dnsonly.key DYN_TCP_TLS_CA_CERT_PATH=$C/ca.pem \
  DYN_TCP_TLS_SERVER_NAME=localhost
frontend byip -- "${F_TLS[@]}" && { note_response_port; ask byip; stop_fe; }
frontend servername DYN_TCP_TLS_SERVER_NAME=localhost -- "${F_TLS[@]}" && { note_response_port; ask servername; stop_fe; }
end_case

# --- plain worker -----------------------------------------------------------------------
start_case plain
mocker DYN_LOG=info
frontend tls -- "${F_TLS[@]}" && { note_response_port; ask tls; stop_fe; }
frontend timeout1 DYN_TCP_TLS_HANDSHAKE_TIMEOUT_SECS=1 -- "${F_TLS[@]}" && { note_response_port; ask timeout1; stop_fe; }
end_case
echo "written to $OUT"
