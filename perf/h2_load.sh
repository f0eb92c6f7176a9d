#!/usr/bin/env bash
# perf/h2_load.sh: h2load (Debian nghttp2-client) against switchyard over HTTP/1.1 and h2c.
#
# 1. `GET /live` over HTTP/1.1 (h2load --h1), the build under test vs BEFORE_BIN (a build
#    without HTTP/2, if given): the HTTP/1.1 path must not get slower now that a connection's
#    first bytes are sniffed for the HTTP/2 preface.
# 2. `GET /live` over h2c (prior knowledge), 1 and 8 concurrent streams per connection.
# 3. Inference, same prompt and max_tokens, one mock worker (`switchyard mock-worker --fast`):
#    `/v1/completions` over HTTP/1.1 and over h2c, and KServe `ModelInfer` (unary gRPC) over
#    h2c. The gRPC body is a framed ModelInferRequest made by tritonclient's protobuf module
#    (the venv of scripts/interop_grpc.sh).
# 4. Streaming, 64 tokens per request (`ignore_eos`): SSE over HTTP/1.1 and h2c, and KServe
#    `ModelStreamInfer` with `streaming` (one response per token piece); tokens/s = req/s × 64.
#
# One shard, pinned to SERVER_CPU; h2load and the worker on LOAD_CPU. Each figure is the
# median of ROUNDS runs. Env: N (requests per run, default 20000 for /live, N/4 for inference),
# CONNS (default 32), ROUNDS (default 3), BEFORE_BIN, SWITCHYARD_BIN.
set -euo pipefail
cd "$(dirname "$0")/.."

N=${N:-20000}
CONNS=${CONNS:-32}
ROUNDS=${ROUNDS:-3}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
TRITON_PY=${TRITON_VENV:-$HOME/.cache/switchyard-triton-venv}/bin/python
command -v h2load >/dev/null || { echo "h2load missing: apt-get install nghttp2-client" >&2; exit 1; }

source scripts/procs.sh
wait_up() { for _ in $(seq 1 200); do curl -s -m 1 "http://127.0.0.1:$1$2" | grep -q "$3" && return 0; sleep 0.1; done; return 1; }

# median req/s of ROUNDS runs of h2load ARGS...
rate() {
  local runs=()
  for _ in $(seq 1 "$ROUNDS"); do
    local out
    out=$(taskset -c "$LOAD_CPU" h2load "$@" 2>&1)
    echo "$out" | grep -q " 0 failed, 0 errored" && echo "$out" | grep -q " 0 4xx, 0 5xx" || { echo "$out" >&2; echo "h2load failed" >&2; exit 1; }
    runs+=("$(echo "$out" | awk '/^finished in/ {print $4}')")
  done
  printf '%s\n' "${runs[@]}" | sort -n | awk '{a[NR]=$1} END {print a[int((NR+1)/2)]}'
}

serve() { # binary port extra-args...: one pinned shard
  local bin=$1 port=$2; shift 2
  taskset -c "$SERVER_CPU" "$bin" --http-host 127.0.0.1 --http-port "$port" --shards 1 "$@" >"$WORK/server-$port.log" 2>&1 &
  PIDS+=($!)
}

export DYN_FILE_KV=$WORK/empty
mkdir -p "$DYN_FILE_KV"
echo "| what | protocol | req/s (median of $ROUNDS) |"
echo "|---|---|---|"
for label in after before; do
  bin=$BIN
  if [ $label = before ]; then [ -n "${BEFORE_BIN:-}" ] || continue; bin=$BEFORE_BIN; fi
  port=$(free_port)
  serve "$bin" "$port" --discovery-backend file
  wait_up "$port" /live live || { echo "server did not start" >&2; exit 1; }
  echo "| GET /live ($label) | HTTP/1.1 | $(rate --h1 -n "$N" -c "$CONNS" "http://127.0.0.1:$port/live") |"
  if [ $label = after ]; then
    echo "| GET /live | h2c, 1 stream/conn | $(rate -n "$N" -c "$CONNS" -m 1 "http://127.0.0.1:$port/live") |"
    echo "| GET /live | h2c, 8 streams/conn | $(rate -n "$N" -c "$CONNS" -m 8 "http://127.0.0.1:$port/live") |"
  fi
  kill "${PIDS[-1]}"; wait "${PIDS[-1]}" 2>/dev/null || true
done

export DYN_FILE_KV=$WORK/kv DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
taskset -c "$LOAD_CPU" "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --fast --output-tokens 64 >"$WORK/worker.log" 2>&1 &
PIDS+=($!)
port=$(free_port)
serve "$BIN" "$port" --discovery-backend file --kserve-grpc-server --grpc-metrics-port "$(free_port)"
wait_up "$port" /v1/models '"qwen3"' || { echo "model never listed" >&2; exit 1; }
printf '{"model":"qwen3","prompt":"Tell me about the sea","max_tokens":16}' >"$WORK/cmpl.json"
"$TRITON_PY" - "$WORK/infer.bin" <<'PY'
import struct, sys
from tritonclient.grpc import service_pb2 as pb
r = pb.ModelInferRequest(model_name="qwen3", id="p")
t = r.inputs.add(name="text_input", datatype="BYTES", shape=[1])
t.contents.bytes_contents.append(b"Tell me about the sea")
r.parameters["max_tokens"].int64_param = 16
def write(path, r):
    b = r.SerializeToString()
    open(path, "wb").write(b"\0" + struct.pack(">I", len(b)) + b)
write(sys.argv[1], r)
r.parameters["max_tokens"].int64_param = 64
r.parameters["ignore_eos"].bool_param = True
s = r.inputs.add(name="streaming", datatype="BOOL", shape=[1])
s.contents.bool_contents.append(True)
write(sys.argv[1] + ".stream", r)
PY
n=$((N / 4))
J=(-d "$WORK/cmpl.json" -H "content-type: application/json")
echo "| /v1/completions, 16 tokens | HTTP/1.1 | $(rate --h1 -n "$n" -c "$CONNS" "${J[@]}" "http://127.0.0.1:$port/v1/completions") |"
echo "| /v1/completions, 16 tokens | h2c | $(rate -n "$n" -c "$CONNS" -m 4 "${J[@]}" "http://127.0.0.1:$port/v1/completions") |"
G=(-d "$WORK/infer.bin" -H "content-type: application/grpc" -H "te: trailers")
echo "| ModelInfer (unary gRPC), 16 tokens | h2c | $(rate -n "$n" -c "$CONNS" -m 4 "${G[@]}" "http://127.0.0.1:$port/inference.GRPCInferenceService/ModelInfer") |"
printf '{"model":"qwen3","prompt":"Tell me about the sea","max_tokens":64,"ignore_eos":true,"stream":true}' >"$WORK/sse.json"
S=(-d "$WORK/sse.json" -H "content-type: application/json")
tok() { awk -v r="$1" 'BEGIN {printf "%.0f req/s = %.0f tokens/s", r, r * 64}'; }
echo "| streamed, 64 tokens: SSE /v1/completions | HTTP/1.1 | $(tok "$(rate --h1 -n "$n" -c "$CONNS" "${S[@]}" "http://127.0.0.1:$port/v1/completions")") |"
echo "| streamed, 64 tokens: SSE /v1/completions | h2c | $(tok "$(rate -n "$n" -c "$CONNS" -m 4 "${S[@]}" "http://127.0.0.1:$port/v1/completions")") |"
G=(-d "$WORK/infer.bin.stream" -H "content-type: application/grpc" -H "te: trailers")
echo "| streamed, 64 tokens: ModelStreamInfer | h2c | $(tok "$(rate -n "$n" -c "$CONNS" -m 4 "${G[@]}" "http://127.0.0.1:$port/inference.GRPCInferenceService/ModelStreamInfer")") |"
