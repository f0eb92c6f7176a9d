# Sourced by scripts that start background processes: a scratch directory ($WORK), the PIDs
# they started ($PIDS, stopped by PID on exit, never by name) and a free loopback port.
WORK=$(mktemp -d)
PIDS=()
cleanup_procs() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$WORK"
}
trap cleanup_procs EXIT
free_port() { python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }
# `start NAME COMMAND...`: run COMMAND in the background, output to $WORK/NAME.log, its PID
# in $PIDS. `fail MESSAGE`: the message, the last lines of every log, exit 1. (Scripts may
# define their own after sourcing this.)
start() {
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PIDS+=($!)
}
fail() { echo "FAIL: $*" >&2; for f in "$WORK"/*.log; do echo "== $f" >&2; tail -20 "$f" >&2; done; echo "FAIL: $* (the logs above)" >&2; exit 1; }
