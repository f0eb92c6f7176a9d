#!/usr/bin/env bash
# KServe gRPC interop: the real tritonclient[grpc] (PyPI) against switchyard
# --kserve-grpc-server in front of two in-tree mock workers (`switchyard mock-worker`, file
# discovery, real Qwen3 tokenizer files). Runs scripts/interop_grpc_client.py and exits
# non-zero on any failure. The client venv is cached in ~/.cache/switchyard-triton-venv.
#
#   bash scripts/interop_grpc.sh            # builds the release binary unless SWITCHYARD_BIN is set
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=${TRITON_VENV:-${HOME:-/root}/.cache/switchyard-triton-venv}
if [ ! -x "$VENV/bin/python" ]; then
  python3 -m venv "$VENV"
fi
# Pinned: the versions this script was checked with.
"$VENV/bin/pip" install -q tritonclient[grpc]==2.73.0 grpcio==1.85.1 protobuf==6.33.6 numpy==2.4.6 \
  python-rapidjson==1.25 packaging==26.3 urllib3==2.8.0
bash scripts/fetch-models.sh qwen3 >/dev/null
[ -n "${SWITCHYARD_BIN:-}" ] || cargo build --release --quiet
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3

WORK=$(mktemp -d)
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() { echo "FAIL: $*" >&2; for f in "$WORK"/*.log; do echo "== $f" >&2; tail -20 "$f" >&2; done; exit 1; }
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

export DYN_FILE_KV="$WORK/kv" DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
for i in 1 2; do
  "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --fast >"$WORK/worker$i.log" 2>&1 &
  PIDS+=($!)
done
PORT=$(free_port)
METRICS=$(free_port)
"$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" \
  --kserve-grpc-server --grpc-metrics-port "$METRICS" >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)

for _ in $(seq 1 200); do
  curl -s -m 1 "http://127.0.0.1:$PORT/v1/models" 2>/dev/null | grep -q '"qwen3"' && break
  sleep 0.1
done
curl -s -m 1 "http://127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' || fail "the model never appeared"
curl -sf -m 2 "http://127.0.0.1:$METRICS/metrics" >/dev/null || fail "no /metrics on --grpc-metrics-port"

"$VENV/bin/python" scripts/interop_grpc_client.py "$PORT" qwen3 || fail "tritonclient checks"
echo "interop_grpc: OK"
