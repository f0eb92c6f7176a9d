#!/usr/bin/env bash
# KServe gRPC interop: the real tritonclient[grpc] (PyPI) against switchyard
# --kserve-grpc-server, through scripts/interop_grpc_client.py, in front of
#   A. two in-tree mock workers (`switchyard mock-worker`, deterministic output: the streamed
#      pieces, the unary answer and /v1/completions on the same port must agree exactly);
#   B. two real `python -m dynamo.mocker` workers of Dynamo 1.6.1 (random output: the same
#      checks except the text comparisons);
#   C. a tensor model: scripts/interop_tensor_worker.py (an echo on Dynamo 1.6.1's own Python
#      runtime, ModelInput.Tensor / ModelType.TensorBased) served by switchyard AND by the real
#      `python -m dynamo.frontend --kserve-grpc-server`, both driven by
#      scripts/interop_grpc_tensor_client.py; the answers to the requests both must accept are
#      compared (they must be equal), the rest of both transcripts is printed;
#   D. the in-tree tensor echo (`switchyard mock-worker --tensor`) behind switchyard.
# A and B with file discovery and the real Qwen3 tokenizer files. Exits non-zero on any failure.
# The tritonclient venv is cached in ~/.cache/switchyard-triton-venv; the Dynamo venv, model
# files and a release build come from scripts/real-dynamo-env.sh, which also reruns this
# script in a loopback-only network namespace (root), as the other interop scripts do.
#
#   bash scripts/interop_grpc.sh       # SWITCHYARD_BIN=path skips the release build
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/triton-venv.sh
[ "${1:-}" = "--inside" ] || triton_venv
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
source scripts/procs.sh


phase() { # name worker-kind client-args...
  local name=$1 kind=$2; shift 2
  echo "== $name"
  export DYN_FILE_KV="$WORK/kv-$name"
  mkdir -p "$DYN_FILE_KV"
  for i in 1 2; do
    case $kind in
      mock) start "$name-worker$i" "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --fast ;;
      mocker) start "$name-worker$i" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
        --discovery-backend file --request-plane tcp --event-plane zmq ;;
    esac
  done
  local port metrics
  port=$(free_port)
  metrics=$(free_port)
  start "$name-switchyard" "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$port" \
    --kserve-grpc-server --grpc-metrics-port "$metrics"
  for _ in $(seq 1 600); do
    curl -s -m 1 "http://127.0.0.1:$port/v1/models" 2>/dev/null | grep -q '"qwen3"' && break
    sleep 0.1
  done
  curl -s -m 1 "http://127.0.0.1:$port/v1/models" | grep -q '"qwen3"' || fail "$name: the model never appeared"
  curl -sf -m 2 "http://127.0.0.1:$metrics/metrics" >/dev/null || fail "$name: no /metrics on --grpc-metrics-port"
  "$TRITON_VENV/bin/python" scripts/interop_grpc_client.py "$port" qwen3 "$@" || fail "$name: tritonclient checks"
  cleanup_procs
  WORK=$(mktemp -d)
  PIDS=()
}

tensor_phase() {
  echo "== C-tensor (switchyard and dynamo.frontend in front of a Dynamo tensor worker)"
  export DYN_FILE_KV="$WORK/kv-tensor"
  mkdir -p "$DYN_FILE_KV"
  start tensor-worker "$PY" scripts/interop_tensor_worker.py echo
  local port metrics real
  port=$(free_port)
  metrics=$(free_port)
  real=$(free_port)
  start tensor-switchyard "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$port" \
    --kserve-grpc-server --grpc-metrics-port "$metrics"
  # With --kserve-grpc-server, 1.6.1 serves gRPC on --http-port.
  start tensor-dynamo-frontend "$PY" -m dynamo.frontend --discovery-backend file --http-host 127.0.0.1 \
    --http-port "$real" --kserve-grpc-server
  "$TRITON_VENV/bin/python" scripts/interop_grpc_tensor_client.py "$port" echo "$WORK/switchyard.json" --switchyard \
    || fail "C: tritonclient checks through switchyard"
  "$TRITON_VENV/bin/python" scripts/interop_grpc_tensor_client.py "$real" echo "$WORK/dynamo.json" \
    || fail "C: tritonclient checks through dynamo.frontend"
  python3 - "$WORK/switchyard.json" "$WORK/dynamo.json" <<'PY' || fail "C: switchyard and dynamo.frontend answer differently"
import json, sys
ours, real = (json.load(open(p)) for p in sys.argv[1:3])
same = ["metadata", "config", "tritonclient raw", "tritonclient params", "typed", "stream two", "unknown model"]
bad = [k for k in same if ours.get(k) != real.get(k)]
for k in bad:
    print(f"DIFF {k}:\n  switchyard: {ours.get(k)}\n  dynamo:     {real.get(k)}")
for k in sorted(set(ours) | set(real)):
    if k not in same and ours.get(k) != real.get(k):
        print(f"recorded {k}:\n  switchyard: {ours.get(k)}\n  dynamo:     {real.get(k)}")
print(f"identical answers: {', '.join(k for k in same if k not in bad)}")
sys.exit(1 if bad else 0)
PY
  cleanup_procs
  WORK=$(mktemp -d)
  PIDS=()

  echo "== D-tensor-mock (switchyard in front of switchyard mock-worker --tensor)"
  export DYN_FILE_KV="$WORK/kv-tensor-mock"
  mkdir -p "$DYN_FILE_KV"
  start tensor-mock "$BIN" mock-worker --tensor --model-name echo
  port=$(free_port)
  metrics=$(free_port)
  start tensor-mock-switchyard "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$port" \
    --kserve-grpc-server --grpc-metrics-port "$metrics"
  "$TRITON_VENV/bin/python" scripts/interop_grpc_tensor_client.py "$port" echo "$WORK/mock.json" --switchyard \
    || fail "D: tritonclient checks through switchyard"
  cleanup_procs
  WORK=$(mktemp -d)
  PIDS=()
}

phase A-mock-worker mock --deterministic
phase B-dynamo-mocker mocker
tensor_phase
echo "interop_grpc: OK"
