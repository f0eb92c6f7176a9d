#!/usr/bin/env bash
# Where a request's CPU goes: switchyard's CPU per request split by thread (user and kernel
# apart) and by system call, at a fixed offered load.
#
#   bash perf/breakdown.sh w1|w2 [RATE]     (SWITCHYARD_BIN=<release build>, DURATION=10,
#                                            IO_DRIVER=io-uring|epoll, OUT=<dir>)
#
# One switchyard shard on CPU 0 in front of two in-tree `mock-worker --fast` processes (no
# artificial delay); `switchyard bench` on CPU 1, open loop (Poisson arrivals) at RATE
# requests/s (W1: chat, 100 prompt tokens, 1 output token, whole; W2: chat, 1,000 prompt
# tokens, 64 streamed tokens). Two runs of the same load after a warm-up:
#   1. untraced: per thread of the process (shard, tokenizer helper, control, ingest, …), user
#      and kernel µs per request from /proc/PID/task/TID/stat (10 ms ticks: use DURATION long
#      enough), the process's minor page faults and context switches per request;
#   2. traced with `perf trace -s` (system-call tracepoints; no hardware counters needed):
#      per system call, calls, failed calls (EAGAIN and the like) and the time spent inside
#      the call per request (a wait's time is mostly sleeping, not CPU), and per class (receive, send, wait, accept/close, memory, other); and the
#      io_uring submissions per request (io_uring:io_uring_submit_req), whose work the kernel
#      does inside io_uring_enter or its own workers. Tracing slows system calls down: read
#      the counts from run 2, the times from run 1.
# User-space functions are perf/callgrind.sh's job (instructions per function).
# Output: a markdown report on stdout and in OUT (default perf/out/breakdown-<workload>-<time>).
set -euo pipefail
cd "$(dirname "$0")/.."
W=${1:?usage: perf/breakdown.sh w1|w2 [RATE]}
case $W in
  w1) ARGS=(--endpoint chat --input-tokens 100 --output-tokens 1); RATE=${2:-400} ;;
  w2) ARGS=(--endpoint chat --stream --input-tokens 1000 --output-tokens 64); RATE=${2:-100} ;;
  *) echo "breakdown.sh: workload w1 or w2" >&2; exit 2 ;;
esac
DURATION=${DURATION:-10}
IO_DRIVER=${IO_DRIVER:-io-uring}
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
[ -x "$BIN" ] || { echo "breakdown.sh: build first (cargo build --release) or set SWITCHYARD_BIN" >&2; exit 1; }
command -v perf >/dev/null || { echo "breakdown.sh: needs perf (apt-get install linux-perf)" >&2; exit 1; }
bash scripts/fetch-models.sh qwen3 >/dev/null
MODEL=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
OUT=${OUT:-perf/out/breakdown-$W-$(date -u +%Y%m%dT%H%M%S)}
mkdir -p "$OUT"
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-breakdown.XXXXXX")
export DYN_FILE_KV=$WORK/kv DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1
mkdir -p "$DYN_FILE_KV"
PIDS=()
trap 'kill "${PIDS[@]}" 2>/dev/null || true; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
for _ in 1 2; do
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL" --model-name qwen3 --discovery-backend file --fast \
    --output-tokens 64 >/dev/null 2>&1 &
  PIDS+=($!)
done
PORT=${PORT:-18830}
taskset -c 0 "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards 1 --no-pin-shards \
  --io-driver "$IO_DRIVER" >"$OUT/switchyard.log" 2>&1 &
SY=$!
PIDS+=("$SY")
for _ in $(seq 1 240); do curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q qwen3 && break; sleep 0.25; done
curl -s -m 1 "127.0.0.1:$PORT/v1/models" | grep -q qwen3 || { echo "FAIL: switchyard did not list qwen3" >&2; exit 1; }

bench() { # seed duration json
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$PORT" --model qwen3 --model-path "$MODEL" "${ARGS[@]}" \
    --rate "$RATE" --duration "$2" --seed "$1" --timeout 30 --no-progress --allow-errors --json "$3" >/dev/null
}
# Every thread: tid comm utime stime (ticks); the comm may hold spaces, so read after ')'.
threads() {
  for t in /proc/"$SY"/task/*; do
    local stat
    stat=$(cat "$t/stat" 2>/dev/null) || continue
    local comm=${stat#*(}
    comm=${comm%)*}
    # shellcheck disable=SC2086
    set -- ${stat##*) }
    echo "${t##*/} ${comm// /_} ${12} ${13}"
  done
}
process() { awk '{print $10, $12}' /proc/"$SY"/stat; } # minflt, majflt
ctxsw() { awk '/^(voluntary|nonvoluntary)_ctxt_switches/ {s += $2} END {print s}' /proc/"$SY"/status; }

bench 1 3 "$WORK/warm.json" # warm-up: caches, helper threads, connections

# Run 1: untraced.
threads >"$WORK/t0"; read -r f0 _ < <(process); x0=$(ctxsw)
bench 2 "$DURATION" "$OUT/bench-untraced.json"
threads >"$WORK/t1"; read -r f1 _ < <(process); x1=$(ctxsw)

# Run 2: the same load under `perf trace -s` and the io_uring tracepoint count.
perf trace -s -p "$SY" -o "$OUT/trace.txt" &
TRACE=$!
perf stat -e 'io_uring:io_uring_submit_req' -x, -p "$SY" -o "$OUT/uring.csv" &
STAT=$!
sleep 1
bench 3 "$DURATION" "$OUT/bench-traced.json"
kill -INT "$TRACE" "$STAT" 2>/dev/null || true
wait "$TRACE" 2>/dev/null || true
wait "$STAT" 2>/dev/null || true

python3 - "$W" "$RATE" "$DURATION" "$IO_DRIVER" "$WORK/t0" "$WORK/t1" "$f0" "$f1" "$x0" "$x1" "$OUT" <<'PYEOF' | tee "$OUT/report.md"
import json, os, re, sys
from collections import defaultdict
w, rate, duration, driver, t0p, t1p, f0, f1, x0, x1, out = sys.argv[1:]
tick = os.sysconf("SC_CLK_TCK")
untraced = json.load(open(f"{out}/bench-untraced.json"))
traced = json.load(open(f"{out}/bench-traced.json"))
n1, n2 = max(untraced["ok"], 1), max(traced["ok"], 1)

def threads(path):
    rows = {}
    for line in open(path):
        tid, comm, u, s = line.split()
        rows[tid] = (comm, int(u), int(s))
    return rows

a, b = threads(t0p), threads(t1p)
by_name = defaultdict(lambda: [0, 0])
for tid, (comm, u, s) in b.items():
    u0, s0 = a.get(tid, (comm, 0, 0))[1:]
    # A digit suffix names one of several alike (tokenize-0, shard-1): keep it.
    by_name[comm][0] += u - u0
    by_name[comm][1] += s - s0
us = lambda ticks, n: ticks / tick * 1e6 / n
print(f"# {w.upper()} at {rate} req/s for {duration} s, one shard, {driver}")
print()
print(f"Run 1 (untraced): {untraced['ok']} ok, {untraced['failed']} failed, "
      f"{untraced['requests_per_s']:.1f} req/s.")
print()
print("| thread | user µs/req | kernel µs/req |")
print("|---|---:|---:|")
tu = tk = 0
for comm, (u, s) in sorted(by_name.items(), key=lambda kv: -(kv[1][0] + kv[1][1])):
    if u + s == 0:
        continue
    tu, tk = tu + u, tk + s
    print(f"| {comm} | {us(u, n1):.1f} | {us(s, n1):.1f} |")
print(f"| **all** | **{us(tu, n1):.1f}** | **{us(tk, n1):.1f}** |")
print()
print(f"Minor page faults per request: {(int(f1) - int(f0)) / n1:.2f}; "
      f"context switches per request: {(int(x1) - int(x0)) / n1:.2f}.")
print()

# perf trace -s: per thread a table "syscall calls errors total(ms) min avg max stddev".
calls = defaultdict(lambda: [0, 0, 0.0])
for line in open(f"{out}/trace.txt"):
    m = re.match(r"\s+([a-z_0-9]+)\s+(\d+)\s+(\d+)\s+([\d.]+)\s", line)
    if m and m.group(1) != "syscall":
        c = calls[m.group(1)]
        c[0] += int(m.group(2)); c[1] += int(m.group(3)); c[2] += float(m.group(4))
classes = [
    ("receive", {"read", "recvfrom", "recvmsg", "readv", "recvmmsg"}),
    ("send", {"write", "sendto", "sendmsg", "writev", "sendmmsg"}),
    ("wait", {"epoll_wait", "epoll_pwait", "epoll_pwait2", "io_uring_enter", "futex", "poll", "ppoll",
              "nanosleep", "clock_nanosleep", "rt_sigtimedwait", "select", "pselect6"}),
    ("accept/connect/close", {"accept", "accept4", "connect", "close", "shutdown", "socket", "setsockopt",
                              "getsockopt", "dup", "dup3", "fcntl", "epoll_ctl"}),
    ("memory", {"madvise", "mmap", "munmap", "mprotect", "brk", "mremap"}),
]
def klass(name):
    return next((k for k, names in classes if name in names), "other")
print(f"Run 2 (under `perf trace -s`): {traced['ok']} ok, {traced['failed']} failed. Per request:")
print()
print("| system call | class | calls | failed | µs inside the call (traced; waits included) |")
print("|---|---|---:|---:|---:|")
per_class = defaultdict(lambda: [0.0, 0.0, 0.0])
for name, (c, e, ms) in sorted(calls.items(), key=lambda kv: -kv[1][0]):
    k = klass(name)
    pc = per_class[k]
    pc[0] += c / n2; pc[1] += e / n2; pc[2] += ms * 1e3 / n2
    if c / n2 >= 0.01:
        print(f"| {name} | {k} | {c / n2:.2f} | {e / n2:.2f} | {ms * 1e3 / n2:.1f} |")
print()
print("| class | calls | failed | µs inside the calls (traced; waits included) |")
print("|---|---:|---:|---:|")
for k, (c, e, t) in sorted(per_class.items(), key=lambda kv: -kv[1][0]):
    print(f"| {k} | {c:.2f} | {e:.2f} | {t:.1f} |")
uring = 0
for line in open(f"{out}/uring.csv"):
    parts = line.strip().split(",")
    if len(parts) > 2 and "io_uring_submit_req" in parts[2] and parts[0].replace(".", "").isdigit():
        uring = int(float(parts[0]))
print()
print(f"io_uring submissions per request: {uring / n2:.2f} (requests to the kernel made without a system call of their own).")
PYEOF
echo "results: $OUT/report.md" >&2
