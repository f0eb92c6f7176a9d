#!/usr/bin/env bash
# Interop with the real Dynamo 1.6.1 from PyPI, both ways, over the TCP request plane, driven
# by the OpenAI Python SDK (scripts/interop_client.py):
#   A.       switchyard in front of two real `python -m dynamo.mocker` workers of one model:
#            chat and completions, whole and streamed (exact usage, finish_reason), and both
#            workers got requests (the request ids in their logs);
#   A-kill.  SIGKILL one mocker, a request every 200 ms for 16 s: none hangs, every request
#            sent more than 13 s after the kill (record TTL 10 s + sweep) succeeds, and since
#            switchyard retries a failed worker's requests on the other one, none fails at
#            all (INTEROP_STRICT_FAILOVER=0 only counts the failures);
#   A-term.  SIGTERM the other mocker: the model leaves /v1/models within 3 s (etcd: when the
#            killed mocker's lease expires) and a chat request then gets 1.6.1's bare 404
#            (the chat route is switched off with its last model);
#   B.       the real `python -m dynamo.frontend` in front of switchyard's in-tree mock worker:
#            chat and completions, whole and streamed.
#   C.       (file store) a mocker whose model directory is gone from this host once it has
#            registered (its disk is not shared): switchyard without --model-path does not
#            serve the model and its log names the missing file; with --model-path pointing at
#            another copy of the files it serves chat and completions, as 1.6.1 does.
# Every case runs with each discovery backend in DISCOVERY (default "file etcd"): the file
# store, and a real etcd (Debian etcd-server, started here on 127.0.0.1) where the mockers
# also serve their model card files over HTTP (DYN_SYSTEM_PORT), as on separate nodes. Every
# process is bound to 127.0.0.1 in a loopback-only network namespace (Dynamo's event
# publishers bind 0.0.0.0), so this needs root (unshare -n).
#
# Usage: bash scripts/interop.sh      (installs Dynamo into a venv and fetches model files first)
# Env:   VENV (default ~/.cache/switchyard-dynamo-venv), DISCOVERY (default "file etcd"),
#        SWITCHYARD_BIN (a switchyard binary already built; default: build the release one),
#        INTEROP_STRICT_FAILOVER=0 (count failed requests after the SIGKILL, allow them).
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/interop_client.py)
DISCOVERIES=${DISCOVERY:-file etcd}
export DYN_LOG=info
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-interop.XXXXXX")
declare -A PID=()   # process name -> pid; its output goes to $WORK/<name>.log
PASSED=0
MAIN_PID=$BASHPID

cleanup() {
  [ "$BASHPID" = "$MAIN_PID" ] || return 0  # not in subshells
  for name in "${!PID[@]}"; do kill "${PID[$name]}" 2>/dev/null || true; done
  for name in "${!PID[@]}"; do reap "$name" 5; done
  rm -rf "$WORK"
}
trap cleanup EXIT

plain_log() { sed 's/\x1b\[[0-9;]*m//g' "$WORK/$1.log"; }  # name: the log without colours

fail() { # message
  echo "FAIL: $*" >&2
  for log in "$WORK"/*.log; do
    [ -e "$log" ] || continue
    echo "---- last lines of $(basename "$log")" >&2
    plain_log "$(basename "$log" .log)" | tail -n 25 >&2
  done
  echo "FAIL: $* (the logs above)" >&2 # again, last, where a truncated output still shows it
  exit 1
}

start() { # name command...: run in the background, output to $WORK/<name>.log
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PID[$name]=$!
}

reap() { # name seconds: wait that long for the exit, then SIGKILL
  local name=$1 pid=${PID[$1]}
  for _ in $(seq 1 $(($2 * 10))); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  if kill -0 "$pid" 2>/dev/null; then
    echo "note: $name (pid $pid) still running after $2 s, SIGKILL" >&2
    kill -KILL "$pid" 2>/dev/null || true
  fi
  wait "$pid" 2>/dev/null || true
  unset "PID[$name]"
}

stop() { # name: SIGTERM, then the exit within 10 s
  kill "${PID[$1]}" 2>/dev/null || true
  reap "$1" 10
}

alive() { # name
  kill -0 "${PID[$1]}" 2>/dev/null || fail "$1 exited early (see $1.log)"
}

client() { # what client-args...
  local what=$1; shift
  "${CLIENT[@]}" "$@" || fail "$what"
}

# --- discovery --------------------------------------------------------------------------
# A fresh, empty store per case: its environment and the flags both sides take
# (DISCOVERY_ARGS). For etcd, a new etcd server per case (fixed ports: the namespace is ours).
ETCD_PORT=23790
discovery_fresh() { # case-name
  case "$DISCOVERY" in
    file)
      export DYN_FILE_KV="$WORK/kv-$1"
      mkdir -p "$DYN_FILE_KV"
      DISCOVERY_ARGS=(--discovery-backend file)
      ;;
    etcd)
      command -v etcd >/dev/null || fail "no etcd binary: apt-get install etcd-server (or bash scripts/install-system.sh)"
      [ -n "${PID[etcd]:-}" ] && stop etcd
      ETCD_PORT=$((ETCD_PORT + 2))
      local peer=$((ETCD_PORT + 1))
      start etcd etcd --name sy --data-dir "$WORK/etcd-$1" \
        --listen-client-urls "http://127.0.0.1:$ETCD_PORT" --advertise-client-urls "http://127.0.0.1:$ETCD_PORT" \
        --listen-peer-urls "http://127.0.0.1:$peer" --initial-advertise-peer-urls "http://127.0.0.1:$peer" \
        --initial-cluster "sy=http://127.0.0.1:$peer"
      export ETCD_ENDPOINTS="http://127.0.0.1:$ETCD_PORT"
      for _ in $(seq 1 100); do
        curl -s -m 1 "$ETCD_ENDPOINTS/health" | grep -q '"health":"true"' && break
        sleep 0.1
      done
      curl -s -m 1 "$ETCD_ENDPOINTS/health" | grep -q '"health":"true"' || fail "etcd did not start"
      DISCOVERY_ARGS=(--discovery-backend etcd)
      ;;
    *) fail "DISCOVERY=$DISCOVERY is not supported (file, etcd)" ;;
  esac
}

etcd_instances() { # number of generate endpoint instances registered in etcd
  curl -s -m 2 -X POST "$ETCD_ENDPOINTS/v3/kv/range" \
    -d "{\"key\":\"$(printf 'v1/instances/' | base64)\",\"range_end\":\"$(printf 'v1/instances0' | base64)\",\"keys_only\":true}" |
    python3 -c 'import base64,json,sys; print(sum("/generate/" in base64.b64decode(k["key"]).decode() for k in json.load(sys.stdin).get("kvs", [])))'
}

# --- waits ------------------------------------------------------------------------------
models_json() { curl -s -m 2 "http://127.0.0.1:$1/v1/models" || true; }

wait_model() { # port model who: until /v1/models lists the model
  local port=$1 model=$2 who=$3
  for _ in $(seq 1 120); do
    if models_json "$port" | grep -q "\"id\":\"$model\""; then return 0; fi
    sleep 0.5
  done
  fail "model $model did not appear in $who's /v1/models (port $port) within 60 s: $(models_json "$port")"
}

wait_records() { # count what: until the discovery store holds count generate instances
  local count=$1 what=$2 n=0
  for _ in $(seq 1 120); do
    case "$DISCOVERY" in
      file) n=$( (find "$DYN_FILE_KV/v1/instances" -name '*generate*' 2>/dev/null || true) | wc -l) ;;
      etcd) n=$(etcd_instances || echo 0) ;;
    esac
    [ "$n" -ge "$count" ] && return 0
    sleep 0.5
  done
  fail "$what: $count worker instances did not register within 60 s (found $n)"
}

# --- cases ------------------------------------------------------------------------------
A_PORT=18180
A_MODEL=qwen3

SYSTEM_PORT=18300
mocker() { # name: with etcd, the mocker serves its card files over HTTP (DYN_SYSTEM_PORT)
  local system=()
  if [ "$DISCOVERY" = etcd ]; then
    SYSTEM_PORT=$((SYSTEM_PORT + 1))
    system=(env DYN_SYSTEM_PORT=$SYSTEM_PORT DYN_SYSTEM_HOST=127.0.0.1)
  fi
  start "$1" "${system[@]}" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name "$A_MODEL" --speedup-ratio 10 \
    "${DISCOVERY_ARGS[@]}" --request-plane tcp --event-plane zmq
}

case_a() { # A: switchyard in front of two real mockers
  echo "A ($DISCOVERY): switchyard -> 2 x dynamo.mocker"
  discovery_fresh a
  mocker mocker-1
  mocker mocker-2
  wait_records 2 "A"
  start switchyard "$BIN" "${DISCOVERY_ARGS[@]}" --http-host 127.0.0.1 --http-port $A_PORT
  wait_model $A_PORT $A_MODEL switchyard
  alive mocker-1; alive mocker-2
  client "A: requests through switchyard" check --base-url "http://127.0.0.1:$A_PORT/v1" --model $A_MODEL
  # Both workers served: every answered request id is in exactly one mocker's log.
  local ids; ids=$("${CLIENT[@]}" ids --base-url "http://127.0.0.1:$A_PORT/v1" --model $A_MODEL --n 8) \
    || fail "A: the requests for the traffic check failed"
  local n1=0 n2=0 id uuid in1 in2
  sleep 1  # the mockers' log lines are written asynchronously
  for id in $ids; do
    uuid=${id#chatcmpl-}
    in1=$(plain_log mocker-1 | grep -c "request received request_id=$uuid" || true)
    in2=$(plain_log mocker-2 | grep -c "request received request_id=$uuid" || true)
    [ $((in1 + in2)) -eq 1 ] || fail "A: request $uuid is in $((in1 + in2)) mocker logs, not 1"
    n1=$((n1 + in1)); n2=$((n2 + in2))
  done
  [ "$n1" -gt 0 ] && [ "$n2" -gt 0 ] || fail "A: not both mockers got requests (mocker-1: $n1, mocker-2: $n2 of 8)"
  echo "  ok: both mockers served (mocker-1: $n1, mocker-2: $n2 of 8 requests)"
  PASSED=$((PASSED + 1))
}

case_a_kill() { # A-kill: SIGKILL one mocker under a steady request stream
  echo "A-kill ($DISCOVERY): SIGKILL mocker-1, a request every 200 ms for 16 s"
  local strict=()
  [ "${INTEROP_STRICT_FAILOVER:-1}" = 1 ] && strict=(--strict)
  client "A-kill: requests after SIGKILL of a mocker" failover --base-url "http://127.0.0.1:$A_PORT/v1" \
    --model $A_MODEL --kill-pid "${PID[mocker-1]}" --duration 16 --interval 0.2 --timeout 10 --window 13 "${strict[@]}"
  reap mocker-1 5
  alive switchyard
  PASSED=$((PASSED + 1))
}

case_a_term() { # A-term: SIGTERM the last mocker; the model goes away
  # The SIGTERMed mocker deletes its records at once. With etcd the SIGKILLed one's stay until
  # its lease (TTL 30 s) expires, ~17 s after this starts; with files its 10 s TTL is over.
  local within=3
  [ "$DISCOVERY" = etcd ] && within=20
  echo "A-term ($DISCOVERY): SIGTERM mocker-2, the model leaves within $within s"
  client "A-term: model removal after SIGTERM of the last mocker" gone --base-url "http://127.0.0.1:$A_PORT/v1" \
    --model $A_MODEL --term-pid "${PID[mocker-2]}" --within $within
  reap mocker-2 10
  alive switchyard
  stop switchyard
  PASSED=$((PASSED + 1))
}

case_b() { # B: the real frontend in front of switchyard's mock worker
  echo "B ($DISCOVERY): dynamo.frontend -> switchyard mock-worker"
  discovery_fresh b
  local port=18181 model=qwen3-mock
  start mock-worker "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name $model --fast \
    "${DISCOVERY_ARGS[@]}"
  wait_records 1 "B"
  start frontend "$PY" -m dynamo.frontend "${DISCOVERY_ARGS[@]}" --request-plane tcp --http-host 127.0.0.1 --http-port $port
  wait_model $port $model dynamo.frontend
  client "B: requests through dynamo.frontend" check --base-url "http://127.0.0.1:$port/v1" --model $model
  stop frontend
  stop mock-worker
  PASSED=$((PASSED + 1))
}

case_c() { # C: --model-path supplies card files missing on this host
  echo "C ($DISCOVERY): --model-path overlay for a worker whose model directory is not here"
  discovery_fresh c
  local port=18182 copy="$WORK/worker-model"
  cp -r "$MODEL_DIR" "$copy"
  start mocker-c "$PY" -m dynamo.mocker --model-path "$copy" --model-name $A_MODEL --speedup-ratio 10 \
    "${DISCOVERY_ARGS[@]}" --request-plane tcp --event-plane zmq
  wait_records 1 "C"
  sleep 2  # the card is written with the instance; the mocker has read its files by then
  rm -rf "$copy"
  start switchyard-c-bare "$BIN" "${DISCOVERY_ARGS[@]}" --request-plane tcp --http-host 127.0.0.1 --http-port $port
  for _ in $(seq 1 100); do plain_log switchyard-c-bare | grep -q "not reachable on this host" && break; sleep 0.1; done
  plain_log switchyard-c-bare | grep -q "file config.json not reachable on this host" ||
    fail "C: switchyard without --model-path did not name the missing config.json"
  models_json $port | grep -q "\"id\":\"$A_MODEL\"" && fail "C: $A_MODEL served without its files"
  stop switchyard-c-bare
  start switchyard-c "$BIN" "${DISCOVERY_ARGS[@]}" --request-plane tcp --http-host 127.0.0.1 --http-port $port \
    --model-path "$MODEL_DIR"
  wait_model $port $A_MODEL switchyard
  client "C: requests with the files from --model-path" check --base-url "http://127.0.0.1:$port/v1" --model $A_MODEL
  stop switchyard-c
  stop mocker-c
  PASSED=$((PASSED + 1))
}

[ -x "$BIN" ] || fail "no switchyard binary at $BIN"
[ -x "$PY" ] || fail "no Dynamo venv at $VENV (scripts/install-dynamo.sh)"
t0=$SECONDS
for DISCOVERY in $DISCOVERIES; do
  case_a
  case_a_kill
  case_a_term
  case_b
  [ "$DISCOVERY" = file ] && case_c
  [ -n "${PID[etcd]:-}" ] && stop etcd
done
echo "interop ($DISCOVERIES): $PASSED passed, 0 failed in $((SECONDS - t0)) s"
