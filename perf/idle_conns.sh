#!/usr/bin/env bash
# What an idle keep-alive connection costs switchyard in resident memory.
#
#   bash perf/idle_conns.sh              # N=10000; ~1 minute
#   N=2000 ROUNDS=1 bash perf/idle_conns.sh
#
# One switchyard shard (no workers: only `GET /live` is asked), pinned to CPU 0; a Python
# client pinned to CPU 1 opens N connections to it, in batches, and holds them. Two cases,
# each measured ROUNDS times on a fresh server:
#   fresh  connected, nothing sent (the shard waits for the first bytes: HTTP/1.1 or HTTP/2)
#   used   one `GET /live` answered on each, then idle (the HTTP/1.1 keep-alive loop)
# For each: the server's RSS (VmRSS) and anonymous memory (smaps_rollup) at rest, with the N
# connections open, and after they are closed; the difference per connection; and the
# kernel's TCP buffer pages (/proc/net/sockstat, not in RSS). Everything binds 127.0.0.1;
# `ulimit -n` is raised inside the script (server and client inherit it).
# Knobs: N (10000), ROUNDS (2), PORT (18480), SETTLE (3 s between a change and a reading),
# SWITCHYARD_BIN (default: a release build).
set -euo pipefail
cd "$(dirname "$0")/.."
N=${N:-10000}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18480}
SETTLE=${SETTLE:-3}
if [ -z "${SWITCHYARD_BIN:-}" ]; then
  cargo build --release --quiet
  SWITCHYARD_BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
fi
ulimit -n $((N + 4096))

WORK=$(mktemp -d)
SY=""
CLIENT=""
cleanup() {
  [ -n "$CLIENT" ] && kill "$CLIENT" 2>/dev/null
  [ -n "$SY" ] && kill "$SY" 2>/dev/null
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT

kb() { awk -v k="$2:" '$1 == k {print $2}' "/proc/$1/${3:-status}"; }
tcp_pages() { awk '$1 == "TCP:" {for (i = 2; i < NF; i++) if ($i == "mem") print $(i + 1)}' /proc/net/sockstat; }

measure() { # mode → one markdown row
  local mode=$1
  DYN_FILE_KV="$WORK/kv" taskset -c 0 "$SWITCHYARD_BIN" --discovery-backend file --http-host 127.0.0.1 \
    --http-port "$PORT" --shards 1 --no-pin-shards >>"$WORK/sy.log" 2>&1 &
  SY=$!
  for _ in $(seq 1 100); do curl -sf "127.0.0.1:$PORT/live" >/dev/null && break; sleep 0.1; done
  sleep "$SETTLE"
  local rss0 anon0 tcp0 rss1 anon1 tcp1 rss2 anon2
  rss0=$(kb "$SY" VmRSS); anon0=$(kb "$SY" Anonymous smaps_rollup); tcp0=$(tcp_pages)
  coproc CL { taskset -c 1 python3 perf/hold_conns.py "$PORT" "$N" "$mode"; }
  CLIENT=$CL_PID
  local line
  read -r line <&"${CL[0]}"
  [ "$line" = "open $N" ] || { echo "client: $line" >&2; exit 1; }
  sleep "$SETTLE"
  rss1=$(kb "$SY" VmRSS); anon1=$(kb "$SY" Anonymous smaps_rollup); tcp1=$(tcp_pages)
  echo close >&"${CL[1]}"
  read -r line <&"${CL[0]}"
  wait "$CLIENT" 2>/dev/null || true
  CLIENT=""
  sleep "$SETTLE"
  rss2=$(kb "$SY" VmRSS); anon2=$(kb "$SY" Anonymous smaps_rollup)
  kill "$SY"; wait "$SY" 2>/dev/null || true
  SY=""
  python3 - "$mode" "$N" "$rss0" "$anon0" "$rss1" "$anon1" "$rss2" "$anon2" "$tcp0" "$tcp1" <<'PYEOF'
import sys
mode, n, rss0, anon0, rss1, anon1, rss2, anon2, tcp0, tcp1 = sys.argv[1:]
n = int(n)
mb = lambda kb: f"{int(kb) / 1024:.1f}"
per = lambda a, b: f"{(int(b) - int(a)) * 1024 / n / 1024:.1f}"
tcp = f"{(int(tcp1) - int(tcp0)) * 4096 / n / 1024:.1f}"
print(f"| {mode} | {n} | {mb(rss0)} | {mb(rss1)} | {mb(rss2)} | {per(rss0, rss1)} | {per(anon0, anon1)} | {tcp} |")
PYEOF
}

echo "| connections | N | RSS at rest MB | RSS with N open MB | RSS after close MB | RSS KB per conn | anon KB per conn | kernel TCP KB per conn |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|"
for _ in $(seq 1 "$ROUNDS"); do
  measure fresh
  measure used
done
