# Sourced by the scripts that run real Dynamo 1.6.1 processes (interop.sh, interop_kv.sh).
# `enter_loopback_namespace "$0" "$@"`: outside the namespace, install what they need (the
# Dynamo venv, Debian servers, model files, a release build unless SWITCHYARD_BIN names a
# binary) and re-run the script inside a loopback-only network namespace (Dynamo's event
# publishers bind 0.0.0.0); inside, bring `lo` up and set the common variables.
enter_loopback_namespace() {
  local script=$1; shift
  if [ "${1:-}" != "--inside" ]; then
    # SWITCHYARD_SETUP_DONE: the caller installed all of it already (.ci/run, before running
    # scripts side by side).
    if [ -z "${SWITCHYARD_SETUP_DONE:-}" ]; then
      bash scripts/install-dynamo.sh >/dev/null
      bash scripts/install-system.sh >/dev/null
      bash scripts/fetch-models.sh qwen3 >/dev/null
    fi
    [ -n "${SWITCHYARD_BIN:-}" ] || cargo build --release --quiet
    exec unshare -n bash "$script" --inside
  fi
  ip link set lo up
  VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
  PY="$VENV/bin/python"
  BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/release/switchyard}
  MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
  export DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
}

# `model_listed PORT NAME`: wait (up to a minute) until the frontend on PORT lists model NAME.
model_listed() {
  for _ in $(seq 1 600); do
    curl -s "127.0.0.1:$1/v1/models" | grep -q "\"$2\"" && return 0
    sleep 0.1
  done
  echo "FAIL: no model $2 on port $1" >&2
  return 1
}

# `workers_registered N [LABEL]`: wait (up to 120 s) until N worker endpoints (`generate`)
# are in the file store $DYN_FILE_KV; past that, warn (naming LABEL) and return 1.
workers_registered() {
  for _ in $(seq 1 240); do
    [ "$(find "$DYN_FILE_KV/v1/instances" -name '*generate*' 2>/dev/null | wc -l)" -ge "$1" ] && return 0
    sleep 0.5
  done
  echo "warning: ${2:-workers}: $1 workers did not all register within 120 s" >&2
  return 1
}

# `default_file_store`: Dynamo's default file store under a private TMPDIR (no DYN_FILE_KV,
# as a new user runs it): sets TMPDIR and STORE (call after scratch_dir).
default_file_store() {
  unset DYN_FILE_KV
  export TMPDIR="$WORK/tmp"
  mkdir -p "$TMPDIR"
  STORE="$TMPDIR/dynamo_store_kv"
}

# `qwen3_listed PORT`: model_listed PORT qwen3.
qwen3_listed() { model_listed "$1" qwen3; }

# `scratch_dir`: $WORK, a temporary directory holding the file store (DYN_FILE_KV), and
# PIDS, processes to stop; on exit the processes are stopped and the directory removed.
scratch_dir() {
  WORK=$(mktemp -d)
  export DYN_FILE_KV="$WORK/kv"
  PIDS=()
  trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$WORK"' EXIT
}

# `cpu PID`: CPU time of every thread of a process, in ns (schedstat: nanosecond resolution).
cpu() { cat /proc/"$1"/task/*/schedstat 2>/dev/null | awk '{s += $1} END {print s}'; }

# `need TOOL...`: fail with the package to install when a command is missing.
need() {
  local tool
  for tool in "$@"; do
    command -v "$tool" >/dev/null ||
      { echo "FAIL: no $tool on PATH (apt-get install $tool, or bash scripts/install-system.sh)" >&2; exit 1; }
  done
}

# `test_certs`: the TLS test certificates of tests/data/tls (made by scripts/make-test-certs.sh
# when missing); sets C to their directory.
test_certs() {
  [ -f tests/data/tls/ca.pem ] || bash scripts/make-test-certs.sh >/dev/null || exit 1
  C=$PWD/tests/data/tls
}

# `fail MESSAGE LOG...`: the message, the last lines of each log, the message again (last,
# where a truncated output still shows it); exit 1.
fail() {
  local msg=$1; shift
  echo "FAIL: $msg" >&2
  for log in "$@"; do echo "---- $(basename "$log")" >&2; tail -n 25 "$log" >&2; done
  echo "FAIL: $msg (the logs above)" >&2
  exit 1
}
