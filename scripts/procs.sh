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
