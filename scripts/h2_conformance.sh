#!/usr/bin/env bash
# HTTP/2 conformance of switchyard's h2c listener: starts a switchyard on 127.0.0.1 (file
# discovery over an empty store, --kserve-grpc-server: the same HTTP/2 path every route and
# gRPC call takes), runs scripts/h2_conformance.py (the h2spec-equivalent suite, Python 3
# standard library only) against it and stops it by PID. Exits non-zero on any failed case.
#
#   bash scripts/h2_conformance.sh      # SWITCHYARD_BIN=path skips the debug build
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/procs.sh

BIN=${SWITCHYARD_BIN:-}
if [ -z "$BIN" ]; then
  cargo build --locked --bin switchyard
  BIN="${CARGO_TARGET_DIR:-target}/debug/switchyard"
fi

mkdir -p "$WORK/store"
port=$(free_port)
metrics=$(free_port)
DYN_FILE_KV="$WORK/store" "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$port" \
  --kserve-grpc-server --grpc-metrics-port "$metrics" >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do
  curl -s -m 1 -o /dev/null "http://127.0.0.1:$port/live" && break
  sleep 0.1
done
if ! python3 scripts/h2_conformance.py --port "$port" "$@"; then
  echo "== switchyard log" >&2
  tail -20 "$WORK/switchyard.log" >&2
  exit 1
fi
