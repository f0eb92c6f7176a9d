#!/usr/bin/env bash
# HTTPS interop: switchyard with --tls-cert-path/--tls-key-path (and --tls-client-ca-cert-path)
# in front of a real `python -m dynamo.mocker` of Dynamo 1.6.1 (file discovery, Qwen3's
# tokenizer files), driven by real clients over TLS only:
#   * curl over HTTP/1.1 and over HTTP/2 (ALPN), whole and streamed chat answers;
#   * Python's ssl module, the openai SDK and tritonclient[grpc] with TLS
#     (scripts/interop_tls_client.py);
#   * mutual TLS: the same with a trusted client certificate; no certificate, or one signed by
#     another CA, refused;
#   * a certificate replaced on disk, and another on SIGHUP, served to new connections while
#     a connection opened before keeps being served;
#   * for comparison, `dynamo.frontend` 1.6.1 started with the same TLS options: what it
#     negotiates is printed (it is the peer these options come from).
# Certificates are made here with the openssl CLI. Exits non-zero on any failure.
#
#   bash scripts/interop_tls.sh       # SWITCHYARD_BIN=path skips the release build
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/triton-venv.sh
[ "${1:-}" = "--inside" ] || triton_venv
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
source scripts/procs.sh

command -v openssl >/dev/null || { echo "FAIL: openssl is missing (apt-get install openssl)" >&2; exit 1; }

# A CA, a server leaf for localhost/127.0.0.1, a client leaf, and a stranger CA's client leaf.
CERTS="$WORK/certs"
mkdir -p "$CERTS"
leaf() { # name ca cn extensions
  openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj "/CN=$3" \
    -keyout "$CERTS/$1.key" -out "$CERTS/$1.csr" 2>/dev/null
  printf '%b' "$4" >"$CERTS/$1.ext"
  openssl x509 -req -in "$CERTS/$1.csr" -CA "$CERTS/$2.pem" -CAkey "$CERTS/$2.key" -CAcreateserial \
    -days 7300 -extfile "$CERTS/$1.ext" -out "$CERTS/$1.pem" 2>/dev/null
}
for ca in ca other-ca; do
  openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 7300 -subj "/CN=$ca" \
    -keyout "$CERTS/$ca.key" -out "$CERTS/$ca.pem" 2>/dev/null
done
SERVER_EXT='subjectAltName=DNS:localhost,IP:127.0.0.1\nbasicConstraints=CA:FALSE\nextendedKeyUsage=serverAuth'
CLIENT_EXT='basicConstraints=CA:FALSE\nextendedKeyUsage=clientAuth'
leaf server ca "first-server" "$SERVER_EXT"
leaf second ca "second-server" "$SERVER_EXT"
leaf third ca "third-server" "$SERVER_EXT"
leaf client ca client "$CLIENT_EXT"
leaf stranger other-ca stranger "$CLIENT_EXT"
cp "$CERTS/server.pem" "$CERTS/live.pem"
cp "$CERTS/server.key" "$CERTS/live.key"

export DYN_FILE_KV="$WORK/kv"
mkdir -p "$DYN_FILE_KV"
start mocker "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq

# `serve NAME ARGS...`: start switchyard over HTTPS with ARGS; sets PORT once the model is listed.
serve() {
  local name=$1; shift
  PORT=$(free_port)
  start "$name" "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" \
    --kserve-grpc-server --grpc-metrics-port "$(free_port)" \
    --tls-cert-path "$CERTS/live.pem" --tls-key-path "$CERTS/live.key" "$@"
  SY_PID=${PIDS[-1]}
  for _ in $(seq 1 600); do
    curl -s -m 1 --cacert "$CERTS/ca.pem" "${CLIENT[@]}" "https://localhost:$PORT/v1/models" 2>/dev/null \
      | grep -q '"qwen3"' && return 0
    sleep 0.1
  done
  fail "$name: the model never appeared over HTTPS"
}
chat='{"model":"qwen3","messages":[{"role":"user","content":"Hello"}],"max_tokens":8'
curl_checks() { # what
  local v out
  for v in --http1.1 --http2; do
    out=$(curl -sS -m 30 "$v" --cacert "$CERTS/ca.pem" "${CLIENT[@]}" -w '\n%{http_version}' \
      "https://localhost:$PORT/v1/chat/completions" -H 'content-type: application/json' -d "$chat}") \
      || fail "$1: curl $v whole answer"
    echo "$out" | head -1 | grep -q '"finish_reason":"length"' || fail "$1: curl $v whole answer: $out"
    [ "$(echo "$out" | tail -1)" = "$([ $v = --http2 ] && echo 2 || echo 1.1)" ] || fail "$1: curl $v spoke $(echo "$out" | tail -1)"
    out=$(curl -sS -N -m 30 "$v" --cacert "$CERTS/ca.pem" "${CLIENT[@]}" \
      "https://localhost:$PORT/v1/chat/completions" -H 'content-type: application/json' -d "$chat,\"stream\":true}") \
      || fail "$1: curl $v streamed answer"
    [ "$(echo "$out" | grep -c '^data: ')" -ge 3 ] && echo "$out" | grep -q '^data: \[DONE\]' \
      || fail "$1: curl $v streamed answer: $out"
    echo "ok: $1: curl $v, whole and streamed chat answers"
  done
}
served_cn() { echo | openssl s_client -connect "127.0.0.1:$PORT" -CAfile "$CERTS/ca.pem" "${S_CLIENT[@]}" 2>/dev/null \
  | sed -n 's/^subject=.*CN *= *//p'; }

echo "== HTTPS"
CLIENT=()
S_CLIENT=()
serve https
curl_checks HTTPS
"$PY" scripts/interop_tls_client.py "$PORT" qwen3 "$CERTS" http || fail "HTTPS: python ssl / openai checks"
"$TRITON_VENV/bin/python" scripts/interop_tls_client.py "$PORT" qwen3 "$CERTS" grpc || fail "HTTPS: tritonclient checks"
curl -s -m 5 "http://127.0.0.1:$PORT/v1/models" | grep -q qwen3 && fail "HTTPS: a plain-text request was answered"
echo "ok: a plain-text request on the HTTPS port gets no answer"

echo "== certificate reload (file change, then SIGHUP) with a connection kept open"
[ "$(served_cn)" = "first-server" ] || fail "reload: first certificate not served ($(served_cn))"
# A connection opened before the reloads, used after them.
exec 3> >("$PY" -c '
import socket, ssl, sys, time
ctx = ssl.create_default_context(cafile=sys.argv[2]); ctx.set_alpn_protocols(["http/1.1"])
s = ctx.wrap_socket(socket.create_connection(("127.0.0.1", int(sys.argv[1]))), server_hostname="localhost")
def get():
    s.sendall(b"GET /health HTTP/1.1\r\nhost: x\r\n\r\n")
    return s.recv(65536).split(b"\r\n")[0].decode()
print("before:", get(), flush=True)
sys.stdin.readline()
print("after:", get(), flush=True)
' "$PORT" "$CERTS/ca.pem" >"$WORK/kept.out")
sleep 1
cp "$CERTS/second.key" "$CERTS/live.key.new"; cp "$CERTS/second.pem" "$CERTS/live.pem.new"
mv "$CERTS/live.key.new" "$CERTS/live.key"; mv "$CERTS/live.pem.new" "$CERTS/live.pem"
for _ in $(seq 1 50); do [ "$(served_cn)" = "second-server" ] && break; sleep 0.2; done
[ "$(served_cn)" = "second-server" ] || fail "reload: the changed certificate was not served"
echo "ok: a certificate changed on disk is served to new connections"
cp "$CERTS/third.key" "$CERTS/live.key"; cp "$CERTS/third.pem" "$CERTS/live.pem"
kill -HUP "$SY_PID"
for _ in $(seq 1 50); do [ "$(served_cn)" = "third-server" ] && break; sleep 0.2; done
[ "$(served_cn)" = "third-server" ] || fail "reload: SIGHUP did not bring the new certificate"
kill -0 "$SY_PID" || fail "reload: SIGHUP ended the process"
echo "ok: SIGHUP reloads the certificate; the process keeps running"
echo >&3
exec 3>&-
sleep 1
grep -q "before: HTTP/1.1 200 OK" "$WORK/kept.out" && grep -q "after: HTTP/1.1 200 OK" "$WORK/kept.out" \
  || fail "reload: the connection opened before the reloads was not served after them: $(cat "$WORK/kept.out")"
echo "ok: a connection opened before the reloads is still served"
grep -q 'switchyard_tls_handshakes_total{result="ok"}' <(curl -s --cacert "$CERTS/ca.pem" "https://localhost:$PORT/metrics") \
  || fail "no switchyard_tls_handshakes_total in /metrics"
kill "$SY_PID"; wait "$SY_PID" 2>/dev/null || true
cp "$CERTS/server.pem" "$CERTS/live.pem"; cp "$CERTS/server.key" "$CERTS/live.key"

echo "== mutual TLS"
CLIENT=(--cert "$CERTS/client.pem" --key "$CERTS/client.key")
S_CLIENT=(-cert "$CERTS/client.pem" -key "$CERTS/client.key")
serve mtls --tls-client-ca-cert-path "$CERTS/ca.pem"
curl_checks "mTLS"
curl -s -m 5 --cacert "$CERTS/ca.pem" "https://localhost:$PORT/v1/models" | grep -q qwen3 \
  && fail "mTLS: a client without a certificate was answered"
curl -s -m 5 --cacert "$CERTS/ca.pem" --cert "$CERTS/stranger.pem" --key "$CERTS/stranger.key" \
  "https://localhost:$PORT/v1/models" | grep -q qwen3 && fail "mTLS: a client with an untrusted certificate was answered"
echo "ok: mTLS: curl without a certificate, or with an untrusted one, gets no answer"
"$PY" scripts/interop_tls_client.py "$PORT" qwen3 "$CERTS" http --mtls || fail "mTLS: python ssl / openai checks"
"$TRITON_VENV/bin/python" scripts/interop_tls_client.py "$PORT" qwen3 "$CERTS" grpc --mtls || fail "mTLS: tritonclient checks"

echo "== dynamo.frontend 1.6.1 with the same options (for comparison; printed, not checked)"
REAL=$(free_port)
start dynamo-frontend "$PY" -m dynamo.frontend --discovery-backend file --http-host 127.0.0.1 --http-port "$REAL" \
  --tls-cert-path "$CERTS/live.pem" --tls-key-path "$CERTS/live.key"
for _ in $(seq 1 300); do
  curl -s -m 1 --cacert "$CERTS/ca.pem" "https://localhost:$REAL/v1/models" 2>/dev/null | grep -q qwen3 && break
  sleep 0.2
done
for v in --http1.1 --http2; do
  echo "dynamo.frontend $v: $(curl -s -m 10 "$v" --cacert "$CERTS/ca.pem" -o /dev/null -w 'HTTP %{http_code} over HTTP/%{http_version}' \
    "https://localhost:$REAL/v1/models" 2>&1 || true)"
done
echo "PASS: HTTPS interop"
