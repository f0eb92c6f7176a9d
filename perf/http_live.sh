#!/usr/bin/env bash
# perf/http_live.sh: server-side cost of `GET /live` for switchyard (io_uring, epoll) vs a
# tokio + hyper baseline (perf/baseline-hyper).
#
# Each server runs pinned to SERVER_CPU, wrk runs pinned to LOAD_CPU. Over each wrk run we
# sample the server's utime+stime (/proc/PID/stat) and, where the CPU exposes a PMU,
# its instruction count (perf stat -p PID). The set is run ROUNDS times in alternating order
# (A B C A B C) so run-to-run noise is visible.
#
# Env: DURATION (s, default 10), CONNS (default 32), WARMUP (s, default 1), ROUNDS (default 2),
#      PORT (first port, default 18080), SERVER_CPU (default 0), LOAD_CPU (default 1).
# Output: a markdown table on stdout, also written to perf/out/http_live-<date>.md.
set -euo pipefail

DURATION=${DURATION:-10}
CONNS=${CONNS:-32}
WARMUP=${WARMUP:-1}
ROUNDS=${ROUNDS:-2}
PORT=${PORT:-18080}
SERVER_CPU=${SERVER_CPU:-0}
LOAD_CPU=${LOAD_CPU:-1}

PERF_DIR=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
REPO=$(cd "$PERF_DIR/.." && pwd)
OUT_DIR=$PERF_DIR/out
WORK=$(mktemp -d /tmp/http_live.XXXXXX)

log() { printf '[http_live] %s\n' "$*" >&2; }
die() { log "error: $*"; exit 1; }

# --- cleanup: stop only what this script started, by PID -------------------------------------
SERVER_PID=""
PERF_PID=""
cleanup() {
    [[ -n $PERF_PID ]] && kill "$PERF_PID" 2>/dev/null || true
    if [[ -n $SERVER_PID ]]; then
        kill -TERM "$SERVER_PID" 2>/dev/null || true
        wait "$SERVER_PID" 2>/dev/null || true
    fi
    rm -rf "$WORK"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# --- (a) tools -------------------------------------------------------------------------------
SUDO=""
[[ $(id -u) -eq 0 ]] || SUDO=sudo
missing=()
command -v wrk >/dev/null 2>&1 || missing+=(wrk)
perf --version >/dev/null 2>&1 || missing+=(linux-perf)
command -v curl >/dev/null 2>&1 || missing+=(curl)
command -v taskset >/dev/null 2>&1 || missing+=(util-linux)
if ((${#missing[@]})); then
    log "installing: ${missing[*]}"
    $SUDO apt-get update -qq
    DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y -qq "${missing[@]}" >/dev/null
fi
command -v wrk >/dev/null || die "wrk not available"

# Instructions are counted only if the PMU is usable (VMs often expose none: perf then prints
# "<not supported>" and still exits 0, so parse the value instead of trusting the exit code).
PERF_OK=0
if perf --version >/dev/null 2>&1; then
    v=$(perf stat -x, -e instructions true 2>&1 >/dev/null | awk -F, '/instructions/ {print $1; exit}')
    [[ $v =~ ^[0-9]+$ ]] && PERF_OK=1
fi
((PERF_OK)) && log "perf: instructions counter available" || log "perf: instructions unsupported here -> n/a"

NCPU=$(nproc)
((NCPU >= 2)) || die "need at least 2 CPUs (server on $SERVER_CPU, wrk on $LOAD_CPU)"
CLK_TCK=$(getconf CLK_TCK)

# --- (b) build -------------------------------------------------------------------------------
log "building switchyard (release)"
(cd "$REPO" && cargo build --release --quiet)
TARGET_DIR=${CARGO_TARGET_DIR:-$REPO/target}
[[ $TARGET_DIR = /* ]] || TARGET_DIR=$REPO/$TARGET_DIR
SY_BIN=$TARGET_DIR/release/switchyard
[[ -x $SY_BIN ]] || die "switchyard binary not found at $SY_BIN"

log "building baseline-hyper (release)"
cargo build --release --quiet --manifest-path "$PERF_DIR/baseline-hyper/Cargo.toml" \
    --target-dir "$PERF_DIR/baseline-hyper/target"
HY_BIN=$PERF_DIR/baseline-hyper/target/release/baseline-hyper
[[ -x $HY_BIN ]] || die "baseline binary not found at $HY_BIN"

# --- helpers ---------------------------------------------------------------------------------
# utime+stime (clock ticks) of a whole process, all threads. Fields after the ")" of comm.
cpu_ticks() {
    local s
    s=$(<"/proc/$1/stat")
    s=${s##*) }
    awk '{print $12 + $13}' <<<"$s"
}

# "busy idle" jiffies of one CPU from /proc/stat (idle includes iowait; steal is left out).
cpu_core() { awk -v c="cpu$1" '$1 == c {print $2+$3+$4+$7+$8, $5+$6}' /proc/stat; }

port_free() { ! (exec 3<>"/dev/tcp/127.0.0.1/$1") 2>/dev/null; }

wait_live() { # pid port
    local i
    for ((i = 0; i < 200; i++)); do
        kill -0 "$1" 2>/dev/null || return 1
        curl -fsS -o /dev/null --max-time 1 "http://127.0.0.1:$2/live" 2>/dev/null && return 0
        sleep 0.05
    done
    return 1
}

# Servers: name | command (PORT substituted).
NAMES=("switchyard io_uring" "switchyard epoll" "hyper baseline")
CMDS=(
    "$SY_BIN --http-host 127.0.0.1 --http-port PORT --shards 1 --io-driver io-uring"
    "$SY_BIN --http-host 127.0.0.1 --http-port PORT --shards 1 --io-driver epoll"
    "$HY_BIN PORT"
)

ROWS=()
run_one() { # round index
    local round=$1 i=$2 name=${NAMES[$2]} port=$((PORT + $2))
    local cmd=${CMDS[$i]//PORT/$port} slog=$WORK/server-$round-$i.log
    port_free "$port" || die "port $port already in use"

    # shellcheck disable=SC2086
    taskset -c "$SERVER_CPU" $cmd >"$slog" 2>&1 &
    SERVER_PID=$!
    wait_live "$SERVER_PID" "$port" || { cat "$slog" >&2; die "$name did not answer /live"; }
    if [[ $name == switchyard* ]]; then # make sure the requested driver is the one running
        local drv
        drv=$(sed -n 's/.*io driver \([a-z_]*\).*/\1/p' "$slog" | head -1)
        [[ $name == *"$drv" ]] || die "$name: server reports io driver '${drv:-?}'"
    fi

    if ((WARMUP > 0)); then
        taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${WARMUP}s" "http://127.0.0.1:$port/live" >/dev/null
    fi

    local t0 t1 wout=$WORK/wrk-$round-$i.txt pout=$WORK/perf-$round-$i.csv
    t0=$(cpu_ticks "$SERVER_PID")
    local lb0 li0 lb1 li1
    read -r lb0 li0 < <(cpu_core "$LOAD_CPU")
    if ((PERF_OK)); then
        perf stat -x, -e instructions -p "$SERVER_PID" -o "$pout" -- sleep "$DURATION" &
        PERF_PID=$!
    fi
    taskset -c "$LOAD_CPU" wrk -t1 -c"$CONNS" -d"${DURATION}s" "http://127.0.0.1:$port/live" >"$wout"
    if [[ -n $PERF_PID ]]; then wait "$PERF_PID" || true; PERF_PID=""; fi
    t1=$(cpu_ticks "$SERVER_PID")
    read -r lb1 li1 < <(cpu_core "$LOAD_CPU")

    kill -TERM "$SERVER_PID"
    local rc=0
    for ((k = 0; k < 100; k++)); do kill -0 "$SERVER_PID" 2>/dev/null || break; sleep 0.1; done
    kill -0 "$SERVER_PID" 2>/dev/null && { log "$name did not stop on SIGTERM; killing"; kill -KILL "$SERVER_PID"; }
    wait "$SERVER_PID" || rc=$?
    SERVER_PID=""
    [[ $name == switchyard* && $rc -ne 0 ]] && log "warning: $name exited $rc on SIGTERM"

    local reqs secs rps errs instr
    read -r reqs secs < <(awk '/requests in/ {r=$1; s=$4; sub(/,$/,"",s); print r, s}' "$wout")
    [[ -n ${reqs:-} && $reqs -gt 0 ]] || { cat "$wout" >&2; die "$name: wrk completed no requests"; }
    rps=$(awk '/^Requests\/sec:/ {print $2}' "$wout")
    errs=$(awk '/Non-2xx/ {n+=$NF} /Socket errors/ {gsub(/,/,""); n+=$4+$6+$8+$10} END {print n+0}' "$wout")
    instr=""
    if ((PERF_OK)); then
        instr=$(awk -F, '/instructions/ {print $1; exit}' "$pout" 2>/dev/null || true)
        [[ $instr =~ ^[0-9]+$ ]] || instr=""
    fi

    ROWS+=("$(awk -v rd="$round" -v n="$name" -v r="$reqs" -v rps="$rps" -v dt="$((t1 - t0))" \
        -v hz="$CLK_TCK" -v d="$DURATION" -v ins="$instr" -v e="$errs" \
        -v lb="$((lb1 - lb0))" -v li="$((li1 - li0))" 'BEGIN {
        cpu = dt / hz
        ipr = (ins == "") ? "n/a" : sprintf("%.0f", ins / r)
        printf "| %d | %s | %d | %.0f | %.2f | %.0f%% | %.0f%% | %.2f | %s | %d |", rd, n, r, rps, cpu, 100 * cpu / d, 100 * lb / (lb + li), cpu * 1e6 / r, ipr, e
    }')")
    log "${ROWS[-1]}"
}

# --- (c) run: A B C, A B C, ... --------------------------------------------------------------
log "duration ${DURATION}s, ${CONNS} connections, server on CPU $SERVER_CPU, wrk on CPU $LOAD_CPU"
for ((round = 1; round <= ROUNDS; round++)); do
    for i in "${!NAMES[@]}"; do
        run_one "$round" "$i"
    done
done

# --- (d) report ------------------------------------------------------------------------------
mkdir -p "$OUT_DIR"
STAMP=$(date +%Y%m%d-%H%M%S)
OUT=$OUT_DIR/http_live-$STAMP.md
COMMIT=$(git -C "$REPO" rev-parse --short HEAD 2>/dev/null || echo '?')
git -C "$REPO" diff --quiet HEAD -- 2>/dev/null || COMMIT="$COMMIT (dirty)"
MODEL=$(lscpu | sed -n 's/^Model name:[[:space:]]*//p' | head -1)
{
    echo "# GET /live: switchyard vs hyper baseline ($STAMP)"
    echo
    echo "commit $COMMIT; $NCPU CPUs ($MODEL); kernel $(uname -r);" \
        "server on CPU $SERVER_CPU, \`wrk -t1 -c$CONNS -d${DURATION}s\` on CPU $LOAD_CPU; warm-up ${WARMUP}s;" \
        "instructions: $( ((PERF_OK)) && echo 'perf stat -e instructions -p PID' || echo 'n/a (no PMU)')"
    echo
    echo "| round | server | requests | req/s | server CPU s | server CPU % | wrk core busy | CPU µs/req | instr/req | errors |"
    echo "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|"
    printf '%s\n' "${ROWS[@]}"
    echo
    echo "CPU = utime+stime of the server process over the wrk run (/proc/PID/stat, ${CLK_TCK} Hz ticks)."
    echo "server CPU % = server CPU s / duration; wrk core busy = non-idle share of CPU $LOAD_CPU (/proc/stat) over the run."
    echo "On 2 cores req/s is capped by whichever core saturates first (wrk or server; see the two busy columns): compare CPU µs/req and instr/req, not req/s."
} | tee "$OUT"
log "written to $OUT"
