#!/usr/bin/env bash
# Chaos against real `python -m dynamo.mocker` workers, bounded in time, all on 127.0.0.1:
#   kill-migrate  two mockers, --migration-limit 3: four streamed chats (two on each worker)
#                 and a whole one; one mocker is SIGKILLed mid-answer; every answer completes
#                 well formed (finish_reason, usage with all max_tokens, [DONE], no error).
#   kill-plain    the same without migration: each answer completes or ends with the 503
#                 error event and [DONE] (the whole one: 503), and the next 20 requests succeed.
#   drain         SIGTERM while a real mocker streams two 400-token answers and makes a whole
#                 one: a new request gets 503 at once, every answer completes, exit 0.
#   leave-<drv>   on io_uring and on epoll: 50 clients go away at random points (before the
#                 first token, mid-stream, during whole answers) while others stay; then
#                 nothing is in flight, every request that left was counted cancelled and was
#                 cancelled at its worker (the mocker logs "request cancellation received" at
#                 least once for each, and every request it received ended), and the next 100
#                 requests succeed.
#   etcd          mockers and switchyard on a real etcd: etcd is stopped while requests keep
#                 being served from the last snapshot, started again, and a mocker started
#                 after it is discovered and served.
#   overload      --router-mode kv with a low --active-decode-blocks-threshold: 20 streams at
#                 once; each is served whole or refused with 1.6.1's 529 body and Retry-After,
#                 and the frontend's counts agree (served + refused = sent, none lost).
#   overload-rr   the same with --router-mode round-robin, where the busy state comes from the
#                 worker's own kv_metrics reports (as in 1.6.1).
#   sessions[-kv] --router-session-affinity-ttl-secs with round-robin (kv): each of four
#                 sessions sends 8 requests on fresh connections; all reach one mocker.
#   kv-restart    --router-mode kv with ZMQ KV events: a mocker is SIGKILLed and another
#                 started (its KV publisher new, the old one's gone mid-sequence); requests
#                 keep succeeding and the new worker is routed to.
# Runs in a loopback-only network namespace (root), like the interop scripts.
# Usage: bash scripts/chaos.sh   (SWITCHYARD_BIN=<binary>, else a release build; CASES="...")
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
declare -A PID
PORT=18631
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/chaos_client.py)
CASES=${CASES:-"kill-migrate kill-plain drain leave-io-uring leave-epoll etcd overload overload-rr kv-restart sessions sessions-kv"}

plain_log() { sed 's/\x1b\[[0-9;]*m//g' "$WORK/$1.log"; }
# `logged name pattern`: whether the log holds the pattern. grep reads it all (`grep -q` would
# stop early, the sed get SIGPIPE, and pipefail turn a match into a failure on a big log).
logged() { plain_log "$1" | grep -c "$2" >/dev/null; }
fail() {
  echo "FAIL: $*" >&2
  for log in "$WORK"/*.log; do
    [ -e "$log" ] || continue
    echo "---- last lines of $(basename "$log")" >&2
    plain_log "$(basename "$log" .log)" | tail -n 20 >&2
  done
  echo "FAIL: $* (the logs above)" >&2 # again, last, where a truncated output still shows it
  exit 1
}
start() { # name command...
  local name=$1; shift
  "$@" >"$WORK/$name.log" 2>&1 &
  PID[$name]=$!
  PIDS+=($!)
}
stop() { # name [signal]
  local pid=${PID[$1]:-}
  [ -n "$pid" ] || return 0
  kill "-${2:-TERM}" "$pid" 2>/dev/null || true
  for _ in $(seq 1 100); do kill -0 "$pid" 2>/dev/null || break; sleep 0.1; done
  kill -KILL "$pid" 2>/dev/null || true
  wait "$pid" 2>/dev/null || true
  unset "PID[$1]"
}
stop_all() { for n in "${!PID[@]}"; do stop "$n"; done; }
client() { "${CLIENT[@]}" "$@"; }
metric() { client metric "$PORT" "$1"; }

mocker() { # name extra-args...
  local name=$1; shift
  start "$name" "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio "${SPEEDUP:-0.2}" \
    --request-plane tcp "${DISCOVERY[@]}" "$@"
}
frontend() { # args...
  start switchyard "$BIN" --http-host 127.0.0.1 --http-port "$PORT" "${DISCOVERY[@]}" "$@"
}
instances() { # count: until /health lists that many instances (60 s)
  for _ in $(seq 1 600); do
    local n
    n=$(curl -s -m 2 "127.0.0.1:$PORT/health" | "$PY" -c 'import json,sys; print(len(json.load(sys.stdin).get("instances",[])))' 2>/dev/null || echo 0)
    [ "$n" -ge "$1" ] && { sleep 0.5; return 0; }
    sleep 0.1
  done
  fail "/health never listed $1 instances"
}
fresh() { # a new, empty file store and nothing running
  stop_all
  rm -rf "$WORK/kv" && mkdir -p "$WORK/kv"
  DISCOVERY=(--discovery-backend file)
  export DYN_FILE_KV="$WORK/kv"
}
served_soon() { # name what [load]: requests (all of which must succeed) until mocker `name` serves one (90 s);
  # with `load`, 8 concurrent streams at a time (the kv router spreads load, not idle requests)
  local t0=$SECONDS
  until logged "$1" "push_handler: request received"; do
    [ $((SECONDS - t0)) -lt 90 ] || fail "$2 got no request in 90 s"
    if [ "${3:-}" = load ]; then
      client streams "$PORT" 8 60 complete >/dev/null || fail "$2: requests failed meanwhile"
    else
      client ok "$PORT" 16 >/dev/null || fail "$2: requests failed meanwhile"
    fi
  done
  # How long the worker took to register and be served (locally 1-2 s after etcd's restart).
  local registered
  registered=$(plain_log "$1" | grep -m1 -o "^[0-9T:.-]*Z.*Registering endpoint\|^[0-9T:.-]*Z.*register" | cut -c12-23 || true)
  echo "  $1 served after $((SECONDS - t0)) s (first registration log line at ${registered:-?})"
}
busy_mocker() { # which of mocker-1 / mocker-2 received requests: prints one that did
  for m in mocker-1 mocker-2; do
    logged "$m" "request received" && { echo "$m"; return; }
  done
  fail "no mocker received a request"
}

case_kill() { # limit mode
  fresh
  mocker mocker-1
  mocker mocker-2
  frontend --migration-limit "$1"
  instances 2
  client streams "$PORT" 4 150 "$2" &
  local c=$!
  sleep 1.5
  local victim
  victim=$(busy_mocker)
  kill -KILL "${PID[$victim]}"
  wait "${PID[$victim]}" 2>/dev/null || true
  wait "$c" || fail "kill (--migration-limit $1): the answers were not $2"
  [ "$1" = 0 ] || {
    local moved
    moved=$(metric dynamo_frontend_model_migration_total)
    [ "$moved" -ge 1 ] || fail "no migration counted"
    local timed
    timed=$(metric dynamo_frontend_model_migration_duration_seconds_count)
    echo "  $moved migration(s), $timed timed"
    [ "$timed" = "$moved" ] || fail "every migration is timed (model_migration_duration_seconds)"
  }
  client ok "$PORT" 20 || fail "requests after the kill failed"
}

case_drain() {
  fresh
  mocker mocker-1
  export DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS=60
  frontend
  unset DYN_HTTP_GRACEFUL_SHUTDOWN_TIMEOUT_SECS
  instances 1
  client streams "$PORT" 2 400 complete &
  local c=$! pid=${PID[switchyard]}
  sleep 1.5
  kill -TERM "$pid"
  sleep 0.3
  local status
  status=$(curl -s -o /dev/null -w '%{http_code}' -m 5 -H 'content-type: application/json' \
    -d '{"model":"qwen3","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}' \
    "127.0.0.1:$PORT/v1/chat/completions")
  echo "  a new request during the drain: $status"
  [ "$status" = 503 ] || fail "drain: a new request got $status, not 503"
  wait "$c" || fail "drain: the answers in flight did not all complete"
  local rc=0
  wait "$pid" || rc=$?
  unset "PID[switchyard]"
  [ "$rc" = 0 ] || fail "drain: switchyard exited $rc"
  echo "  switchyard exited 0 after the answers completed"
}

case_leave() { # io driver
  fresh
  mocker mocker-1
  frontend --io-driver "$1"
  instances 1
  local left
  left=$(client leave "$PORT" 50 7) || fail "the clients failed"
  local t0=$SECONDS
  until [ "$(metric dynamo_frontend_inflight_requests)" = 0 ] && [ "$(metric dynamo_frontend_active_requests)" = 0 ]; do
    [ $((SECONDS - t0)) -lt 15 ] || fail "requests still in flight 15 s after the clients left"
    sleep 0.2
  done
  sleep 1  # the mocker's log lines are written asynchronously
  local cancelled received ended killed
  cancelled=$(metric dynamo_frontend_model_cancellation_total)
  received=$(plain_log mocker-1 | grep -c "push_handler: request received" || true)
  ended=$(plain_log mocker-1 | grep -c "push_handler: request completed" || true)
  killed=$(plain_log mocker-1 | grep -c "request cancellation received" || true)
  echo "  $left of 50 clients left; switchyard counted $cancelled cancelled; the mocker received $received, ended $ended, was told to cancel $killed"
  [ "$cancelled" = "$left" ] || fail "$left clients left but $cancelled requests were counted cancelled"
  # Every request that left was cancelled at the worker (a request that ended at its own
  # max_tokens may also be cancelled, when the frontend is done before the worker's final
  # frame arrives: so at least, not exactly).
  [ "$killed" -ge "$left" ] || fail "$left clients left but the mocker was told to cancel only $killed"
  [ "$ended" = "$received" ] || fail "the mocker still runs $((received - ended)) request(s)"
  client ok "$PORT" 100 || fail "requests after the departures failed"
}

case_etcd() {
  stop_all
  command -v etcd >/dev/null || fail "no etcd binary: apt-get install etcd-server (or bash scripts/install-system.sh)"
  export ETCD_ENDPOINTS=http://127.0.0.1:23791
  local etcd=(etcd --name sy --data-dir "$WORK/etcd" --listen-client-urls "$ETCD_ENDPOINTS"
    --advertise-client-urls "$ETCD_ENDPOINTS" --listen-peer-urls http://127.0.0.1:23801
    --initial-advertise-peer-urls http://127.0.0.1:23801 --initial-cluster sy=http://127.0.0.1:23801)
  start etcd "${etcd[@]}"
  for _ in $(seq 1 100); do curl -s -m 1 "$ETCD_ENDPOINTS/health" | grep -q '"health":"true"' && break; sleep 0.1; done
  DISCOVERY=(--discovery-backend etcd)
  DYN_SYSTEM_PORT=18641 mocker mocker-1
  frontend
  instances 1
  client ok "$PORT" 10 || fail "etcd: requests before the outage failed"
  stop etcd KILL 2>/dev/null
  echo "  etcd stopped"
  client ok "$PORT" 20 || fail "etcd: requests during the outage failed"
  start etcd "${etcd[@]}"
  for _ in $(seq 1 100); do curl -s -m 1 "$ETCD_ENDPOINTS/health" | grep -q '"health":"true"' && break; sleep 0.1; done
  echo "  etcd started again"
  DYN_SYSTEM_PORT=18642 mocker mocker-2
  served_soon mocker-2 "etcd: the mocker started after the outage"
  client ok "$PORT" 20 || fail "etcd: requests after the outage failed"
  unset ETCD_ENDPOINTS
}

case_overload() { # router mode (kv: its own bookings; round-robin: the worker's load reports)
  fresh
  mocker mocker-1 --event-plane zmq --num-gpu-blocks-override 512 --block-size 16
  frontend --router-mode "$1" --event-plane zmq --active-decode-blocks-threshold 0.05
  instances 1
  local out served refused
  # Round-robin learns the load from the worker's periodic kv_metrics reports, not at once
  # from its own bookings: the streams come further apart, so a report lands among them.
  local spacing=0.02
  [ "$1" = round-robin ] && spacing=0.06
  out=$(client overload "$PORT" 20 "$spacing") || fail "overload: $out"
  read -r served refused <<<"$out"
  local ok rejected
  ok=$(metric 'dynamo_frontend_requests_total{endpoint="chat_completions",error_type="",model="qwen3",request_type="stream",status="success"}')
  rejected=$(metric dynamo_frontend_model_rejection_total)
  echo "  20 streams: $served served, $refused refused (529); switchyard counted $ok served, $rejected refused"
  [ "$refused" -ge 1 ] || fail "overload: nothing was refused"
  [ "$served" -ge 1 ] || fail "overload: nothing was served"
  [ $((served + refused)) = 20 ] && [ "$ok" = "$served" ] && [ "$rejected" = "$refused" ] || fail "overload: the counts disagree"
}

case_sessions() { # router mode: each session's requests all reach one mocker
  fresh
  mocker mocker-1
  mocker mocker-2
  frontend --router-mode "$1" --router-session-affinity-ttl-secs 60
  instances 2
  client ok "$PORT" 10 >/dev/null || fail "sessions: requests failed"
  local before1 before2 after1 after2
  for s in alpha beta gamma delta; do
    before1=$(plain_log mocker-1 | grep -c "push_handler: request received" || true)
    before2=$(plain_log mocker-2 | grep -c "push_handler: request received" || true)
    client session "$PORT" "$s" 8 || fail "sessions ($1): session $s failed"
    after1=$(plain_log mocker-1 | grep -c "push_handler: request received" || true)
    after2=$(plain_log mocker-2 | grep -c "push_handler: request received" || true)
    echo "  session $s: mocker-1 $((after1 - before1)), mocker-2 $((after2 - before2))"
    case "$((after1 - before1)) $((after2 - before2))" in
      "8 0" | "0 8") ;;
      *) fail "sessions ($1): session $s was split between the workers" ;;
    esac
  done
}

case_kv_restart() {
  fresh
  mocker mocker-1 --event-plane zmq
  mocker mocker-2 --event-plane zmq
  frontend --router-mode kv --event-plane zmq
  instances 2
  client ok "$PORT" 20 || fail "kv: requests before the restart failed"
  kill -KILL "${PID[mocker-2]}"
  wait "${PID[mocker-2]}" 2>/dev/null || true
  mocker mocker-3 --event-plane zmq
  client ok "$PORT" 40 || fail "kv: requests across the restart failed"
  # Until the new worker is discovered and routed to (the dead one's record lingers until
  # its TTL), every request must still succeed.
  served_soon mocker-3 "kv: the restarted worker" load
  client ok "$PORT" 40 || fail "kv: requests after the restart failed"
}

for c in $CASES; do
  echo "$c"
  case $c in
    kill-migrate) case_kill 3 complete ;;
    kill-plain) case_kill 0 clean ;;
    drain) case_drain ;;
    leave-io-uring) case_leave io-uring ;;
    leave-epoll) case_leave epoll ;;
    etcd) case_etcd ;;
    overload) case_overload kv ;;
    overload-rr) case_overload round-robin ;;
    kv-restart) case_kv_restart ;;
    sessions) case_sessions round-robin ;;
    sessions-kv) case_sessions kv ;;
    *) fail "unknown case $c" ;;
  esac
  echo "  ok"
done
stop_all
echo "chaos: all cases passed"
