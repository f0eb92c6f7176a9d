#!/usr/bin/env bash
# What TLS costs the server: switchyard (one shard pinned to SERVER_CPU, release build) with
# and without --tls-cert-path/--tls-key-path, alternating in one run, ROUNDS rounds, wrk pinned
# to LOAD_CPU with keep-alive connections:
#   * keep-alive requests: `GET /live`, CONNS connections for DURATION seconds;
#   * streamed bytes: a streamed chat answer of TOKENS tokens from the embedded mock workers
#     (--embedded-fast), as SSE over chunked HTTP/1.1.
# Per run: requests/s, server CPU (utime and stime from /proc, apart) per request and per
# streamed kilobyte. The handshakes happen once per connection, in the warm-up.
#
#   perf/tls_cost.sh                 # DURATION=10 ROUNDS=3 CONNS=32 TOKENS=256
set -euo pipefail
DURATION=${DURATION:-10}; ROUNDS=${ROUNDS:-3}; CONNS=${CONNS:-32}; TOKENS=${TOKENS:-256}
SERVER_CPU=${SERVER_CPU:-0}; LOAD_CPU=${LOAD_CPU:-1}; PORT=${PORT:-18440}
REPO=$(cd "$(dirname "$0")/.." && pwd)
cd "$REPO"
WORK=$(mktemp -d /tmp/tls_cost.XXXXXX)
SERVER_PID=""
cleanup() { [ -n "$SERVER_PID" ] && kill "$SERVER_PID" 2>/dev/null; wait 2>/dev/null || true; rm -rf "$WORK"; }
trap cleanup EXIT
command -v wrk >/dev/null || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq wrk >/dev/null; }
command -v wrk >/dev/null || { echo "wrk is missing (apt-get install wrk)" >&2; exit 1; }
[ -n "${SWITCHYARD_BIN:-}" ] || cargo build --release --quiet
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
openssl req -x509 -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -days 30 -subj "/CN=localhost" \
  -addext "subjectAltName=DNS:localhost,IP:127.0.0.1" -keyout "$WORK/key.pem" -out "$WORK/cert.pem" 2>/dev/null
CLK_TCK=$(getconf CLK_TCK)
ticks() { local s; s=$(<"/proc/$1/stat"); s=${s##*) }; awk '{print $12, $13}' <<<"$s"; }
cat >"$WORK/chat.lua" <<LUA
wrk.method = "POST"
wrk.headers["content-type"] = "application/json"
wrk.body = '{"model":"qwen3","messages":[{"role":"user","content":"Tell me a story"}],"max_tokens":$TOKENS,"stream":true}'
LUA

run() { # round scheme what
  local scheme=$1 what=$2 args=() url
  [ "$scheme" = https ] && args=(--tls-cert-path "$WORK/cert.pem" --tls-key-path "$WORK/key.pem")
  taskset -c "$SERVER_CPU" "$BIN" --http-host 127.0.0.1 --http-port "$PORT" --shards 1 --discovery-backend mem \
    --embedded-model-path "$MODEL_DIR" --embedded-workers 1 --embedded-fast "${args[@]}" >"$WORK/server.log" 2>&1 &
  SERVER_PID=$!
  for _ in $(seq 1 600); do curl -sk -m 1 "$scheme://127.0.0.1:$PORT/v1/models" | grep -q qwen3 && break; sleep 0.1; done
  case $what in
    live) url="$scheme://127.0.0.1:$PORT/live"; lua=() ;;
    stream) url="$scheme://127.0.0.1:$PORT/v1/chat/completions"; lua=(-s "$WORK/chat.lua") ;;
  esac
  taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d2s "${lua[@]}" "$url" >/dev/null
  local before after out
  before=$(ticks "$SERVER_PID")
  out=$(taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "${lua[@]}" "$url")
  after=$(ticks "$SERVER_PID")
  kill "$SERVER_PID"; wait "$SERVER_PID" 2>/dev/null || true; SERVER_PID=""
  python3 - "$scheme" "$what" "$before" "$after" "$CLK_TCK" "$out" <<'PY'
import re, sys
scheme, what, before, after, tck, out = sys.argv[1:7]
u0, s0 = map(int, before.split()); u1, s1 = map(int, after.split()); tck = int(tck)
reqs = int(re.search(r"(\d+) requests in", out).group(1))
m = re.search(r"requests in [\d.]+\w+, ([\d.]+)(\w+) read", out)
kb = float(m.group(1)) * {"B": 1 / 1024, "KB": 1, "MB": 1024, "GB": 1024 * 1024}[m.group(2)]
errs = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
user, sys_ = (u1 - u0) / tck, (s1 - s0) / tck
print(f"| {what} | {scheme} | {reqs} | {1e6 * user / reqs:.1f} | {1e6 * sys_ / reqs:.1f} | "
      f"{1e6 * (user + sys_) / kb:.2f} | {errs.group(1) if errs else 0} |")
PY
}
echo "| load | scheme | requests | user µs/req | kernel µs/req | CPU µs per KB sent | non-2xx |"
echo "|---|---|---|---|---|---|---|"
for r in $(seq 1 "$ROUNDS"); do
  for what in live stream; do
    for scheme in http https; do run "$scheme" "$what"; done
  done
done
