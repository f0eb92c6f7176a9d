#!/usr/bin/env bash
# Request-plane TLS with real Dynamo 1.6.1 workers (docs/dynamo/request-plane-tls.md): a real
# `python -m dynamo.mocker` serving its TCP request plane over TLS (DYN_TCP_TLS_*), served
# end to end by switchyard with the same settings as flags (--tcp-tls-*), and for comparison
# by `python -m dynamo.frontend` with the same flags. File discovery, loopback-only network
# namespace (root: unshare -n), certificates of tests/data/tls.
#
#   tls   the mocker with certificate, key and CA; switchyard (io_uring, then epoll) and
#         dynamo.frontend with --tcp-tls-cert-path/--tcp-tls-key-path/--tcp-tls-ca-cert-path:
#         chat and completions, whole and streamed (scripts/interop_client.py check). A
#         capture of lo shows every connection to the mocker's request plane and to
#         switchyard's call-back listeners opening with a TLS ClientHello.
#   mtls  the mocker also requires client certificates (DYN_TCP_TLS_CLIENT_CA_CERT_PATH) and
#         shows its own; switchyard and dynamo.frontend with --tcp-tls-client-cert-path,
#         --tcp-tls-client-key-path and --tcp-tls-client-ca-cert-path pass the same checks;
#         switchyard without a client certificate gets a clean 503 within seconds.
#   mock  the other way round: dynamo.frontend (mTLS flags) in front of switchyard's in-tree
#         mock worker (`switchyard mock-worker`, DYN_TCP_TLS_* as a real worker reads them).
#   nats  KV routing with the event plane on NATS over TLS: a nats-server requiring TLS and
#         client certificates, the mocker on --event-plane nats with NATS_TLS_*, switchyard
#         --router-mode kv --event-plane nats with --nats-tls-* (and request-plane TLS, so its
#         KV recovery queries go over TLS too): KV events arrive, trees are restored, the
#         router credits cached blocks.
#
# Usage: bash scripts/interop_tls_plane.sh   (SWITCHYARD_BIN: a binary already built;
#        TLS_PHASES="tls mtls mock nats" by default)
# Needs: root, tcpdump, openssl, nats-server (bash scripts/install-system.sh), the Dynamo venv
# (scripts/install-dynamo.sh) and the qwen3 files (scripts/fetch-models.sh qwen3); installs
# what the scripts can and fails naming what is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  [ "$(id -u)" = 0 ] || { echo "FAIL: needs root (unshare -n for a loopback-only namespace)" >&2; exit 1; }
  bash scripts/install-system.sh >/dev/null
  need tcpdump openssl nats-server unshare
fi
enter_loopback_namespace "$0" "$@"
test_certs
[ -x "$PY" ] || { echo "FAIL: no Dynamo venv at $VENV (bash scripts/install-dynamo.sh)" >&2; exit 1; }
[ -x "$BIN" ] || { echo "FAIL: no switchyard binary at $BIN (cargo build --release)" >&2; exit 1; }
export DYN_LOG=info
scratch_dir  # WORK, PIDS (stopped on exit)
fail() {
  echo "FAIL: $*" >&2
  for log in "$WORK"/*.log; do
    [ -e "$log" ] || continue
    echo "---- last lines of $(basename "$log")" >&2
    sed 's/\x1b\[[0-9;]*m//g' "$log" | tail -n 20 >&2
  done
  exit 1
}
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/interop_client.py)
PORT=18900

W_TLS=(DYN_TCP_TLS_CERT_PATH="$C/server.pem" DYN_TCP_TLS_KEY_PATH="$C/server.key" DYN_TCP_TLS_CA_CERT_PATH="$C/ca.pem")
W_MTLS=("${W_TLS[@]}" DYN_TCP_TLS_CLIENT_CA_CERT_PATH="$C/ca.pem" DYN_TCP_TLS_CLIENT_CERT_PATH="$C/client.pem"
  DYN_TCP_TLS_CLIENT_KEY_PATH="$C/client.key")
F_TLS=(--tcp-tls-cert-path "$C/server.pem" --tcp-tls-key-path "$C/server.key" --tcp-tls-ca-cert-path "$C/ca.pem")
F_MTLS=("${F_TLS[@]}" --tcp-tls-client-cert-path "$C/client.pem" --tcp-tls-client-key-path "$C/client.key"
  --tcp-tls-client-ca-cert-path "$C/ca.pem")

mocker() { # name env-assignments... [-- mocker flags...]: one mocker, waits for its record
  local name=$1; shift
  local envs=() flags=()
  while [ $# -gt 0 ] && [ "$1" != "--" ]; do envs+=("$1"); shift; done
  [ "${1:-}" = "--" ] && { shift; flags=("$@"); }
  [ ${#flags[@]} -gt 0 ] || flags=(--event-plane zmq)
  env "${envs[@]}" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
    --discovery-backend file --request-plane tcp "${flags[@]}" >"$WORK/$name.log" 2>&1 &
  MOCKER=$!; PIDS+=($MOCKER)
  for _ in $(seq 1 120); do
    ls "$DYN_FILE_KV"/v1/instances/*generate* >/dev/null 2>&1 && break
    kill -0 "$MOCKER" 2>/dev/null || fail "$name exited"
    sleep 0.5
  done
  WORKER_PORT=$(sed -n 's/.*"tcp":"127.0.0.1:\([0-9]*\)\/.*/\1/p' "$DYN_FILE_KV"/v1/instances/*generate* | head -n 1)
  [ -n "$WORKER_PORT" ] || fail "$name: no instance record"
}

frontend() { # name command...: on a new port (FE_PORT), waits for the model
  local name=$1; shift
  PORT=$((PORT + 1)); FE_PORT=$PORT
  "$@" --discovery-backend file --http-host 127.0.0.1 --http-port "$FE_PORT" >"$WORK/$name.log" 2>&1 &
  FE=$!; PIDS+=($FE)
  for _ in $(seq 1 120); do
    kill -0 "$FE" 2>/dev/null || fail "$name exited"
    curl -s -m 2 "127.0.0.1:$FE_PORT/v1/models" | grep -q '"qwen3"' && return 0
    sleep 0.5
  done
  fail "$name: the model never appeared"
}

stop() { kill "$@" 2>/dev/null || true; wait "$@" 2>/dev/null || true; }

check() { # what: the OpenAI SDK's checks through the frontend on FE_PORT
  "${CLIENT[@]}" check --base-url "http://127.0.0.1:$FE_PORT/v1" --model qwen3 >"$WORK/check.out" 2>&1 ||
    { cat "$WORK/check.out" >&2; fail "$1"; }
  echo "  ok: $1"
}

listening_ports() { # pid, except the HTTP port: the process's call-back listeners
  ss -tlnpH | grep "pid=$1," | awk '{print $4}' | sed 's/.*://' | grep -vx "$FE_PORT" | tr '\n' ' '
}

# A capture of lo: every connection to the mocker's request plane and to the frontend's
# call-back listeners must open with a TLS ClientHello (16 03 ..), none in plain bytes.
capture_start() { tcpdump -i lo -s 0 -w "$WORK/$1.pcap" tcp >/dev/null 2>&1 & TCPDUMP=$!; PIDS+=($TCPDUMP); sleep 1; }
capture_check() { # name ports...
  local name=$1; shift
  sleep 1; stop "$TCPDUMP"
  python3 scripts/observe/pcap_conns.py "$WORK/$name.pcap" "$@" >"$WORK/$name.conns"
  local total plain
  total=$(grep -c '^client' "$WORK/$name.conns" || true)
  plain=$(grep -c 'client sent [0-9]* B plain' "$WORK/$name.conns" || true)
  [ "$total" -gt 0 ] && [ "$plain" = 0 ] ||
    { cat "$WORK/$name.conns" >&2; fail "$name: $plain of $total connections on ports $* were not TLS"; }
  echo "  ok: $total connections on the request plane and call-back ports, every one TLS"
}

fresh_store() { export DYN_FILE_KV="$WORK/kv-$1"; mkdir -p "$DYN_FILE_KV"; }

case_tls() {
  echo "tls: a TLS mocker; switchyard and dynamo.frontend with --tcp-tls-cert/key/ca"
  fresh_store tls
  mocker tls-mocker "${W_TLS[@]}"
  echo | openssl s_client -connect "127.0.0.1:$WORKER_PORT" -CAfile "$C/ca.pem" 2>/dev/null |
    grep -q 'Verify return code: 0' || fail "tls: the mocker's request plane does not speak verified TLS"
  for driver in io-uring epoll; do
    capture_start "tls-$driver"
    frontend "tls-switchyard-$driver" "$BIN" --io-driver "$driver" "${F_TLS[@]}"
    local ports; ports=$(listening_ports "$FE")
    check "tls: switchyard ($driver) through a TLS mocker"
    stop "$FE"
    # shellcheck disable=SC2086
    capture_check "tls-$driver" "$WORKER_PORT" $ports
  done
  frontend tls-dynamo "$PY" -m dynamo.frontend "${F_TLS[@]}"
  check "tls: dynamo.frontend through the same mocker, same flags"
  stop "$FE" "$MOCKER"
}

case_mtls() {
  echo "mtls: a mocker requiring client certificates; switchyard and dynamo.frontend with client certificates"
  fresh_store mtls
  mocker mtls-mocker "${W_MTLS[@]}"
  frontend mtls-switchyard "$BIN" "${F_MTLS[@]}"
  check "mtls: switchyard through an mTLS mocker"
  stop "$FE"
  frontend mtls-switchyard-nocert "$BIN" "${F_TLS[@]}"
  local out
  out=$(curl -s -m 20 -w ' %{http_code} %{time_total}' "127.0.0.1:$FE_PORT/v1/chat/completions" \
    -H 'content-type: application/json' -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":4}')
  local code=${out% *}; code=${code##* }
  local secs=${out##* }
  [ "$code" = 503 ] && python3 -c "import sys; sys.exit(0 if $secs < 10 else 1)" ||
    fail "mtls: without a client certificate: wanted a 503 within seconds, got: $out"
  echo "  ok: without a client certificate, a clean 503 after ${secs}s"
  stop "$FE"
  frontend mtls-dynamo "$PY" -m dynamo.frontend "${F_MTLS[@]}"
  check "mtls: dynamo.frontend through the same mocker, same flags"
  stop "$FE" "$MOCKER"
}

case_mock() {
  echo "mock: dynamo.frontend in front of switchyard's mock worker, mTLS"
  fresh_store mock
  env "${W_MTLS[@]}" "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 >"$WORK/mock-worker.log" 2>&1 &
  MOCKER=$!; PIDS+=($MOCKER)
  frontend mock-dynamo "$PY" -m dynamo.frontend "${F_MTLS[@]}"
  check "mock: dynamo.frontend through switchyard's mock worker over mTLS"
  stop "$FE" "$MOCKER"
}

metric() { # name: an unlabelled metric of the frontend on FE_PORT (0 if absent)
  curl -s -m 5 "127.0.0.1:$FE_PORT/metrics" | awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'
}

case_nats() {
  echo "nats: KV events over NATS with TLS (client certificates required), request plane over TLS"
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  nats-server -a 127.0.0.1 -p "$port" --tls --tlscert "$C/server.pem" --tlskey "$C/server.key" \
    --tlsverify --tlscacert "$C/ca.pem" >"$WORK/nats-server.log" 2>&1 &
  local ns=$!; PIDS+=($ns)
  fresh_store nats
  export NATS_SERVER="tls://127.0.0.1:$port"
  mocker nats-mocker "${W_TLS[@]}" NATS_TLS_CA_CERT_PATH="$C/ca.pem" NATS_TLS_CLIENT_CERT_PATH="$C/client.pem" \
    NATS_TLS_CLIENT_KEY_PATH="$C/client.key" -- --event-plane nats --block-size 16 --num-gpu-blocks-override 160
  frontend nats-switchyard "$BIN" --router-mode kv --event-plane nats "${F_TLS[@]}" \
    --nats-tls-ca-cert-path "$C/ca.pem" --nats-tls-client-cert-path "$C/client.pem" \
    --nats-tls-client-key-path "$C/client.key"
  sleep 3
  local ratio
  ratio=$("${CLIENT[@]}" prefix --base-url "http://127.0.0.1:$FE_PORT/v1" --model qwen3 --requests 30 \
    --concurrency 1 --seed 5) || fail "nats: the workload failed"
  local events restores overlap
  events=$(metric switchyard_kv_ingest_events_total)
  restores=$(metric switchyard_kv_ingest_recoveries_total)
  overlap=$(metric switchyard_kv_router_overlap_blocks_total)
  [ "$events" -gt 0 ] || fail "nats: no KV events arrived over NATS/TLS"
  [ "$restores" -gt 0 ] || fail "nats: no tree restored over the TLS request plane"
  [ "$overlap" -gt 0 ] || fail "nats: the kv router credited no cached blocks"
  grep -q "subjects on tls://" "$WORK/nats-switchyard.log" || fail "nats: never subscribed on tls://"
  echo "  ok: $events KV events over NATS/TLS, $restores restores over the TLS request plane," \
    "$overlap cached blocks credited (cached-token ratio $ratio)"
  stop "$FE" "$MOCKER" "$ns"
  unset NATS_SERVER
}

PHASES=${TLS_PHASES:-tls mtls mock nats}
for phase in $PHASES; do
  case "$phase" in
    tls) case_tls ;;
    mtls) case_mtls ;;
    mock) case_mock ;;
    nats) case_nats ;;
    *) fail "unknown phase $phase (tls, mtls, mock, nats)" ;;
  esac
done
echo "PASS: request-plane TLS interop ($PHASES)"
