#!/usr/bin/env bash
# KV-aware routing against real Dynamo 1.6.1 workers: four `python -m dynamo.mocker` workers
# with small KV caches (file discovery, ZMQ KV events), the same prefix-sharing workload
# (300 requests one at a time over 20 prompt families: a long shared system prompt, a short
# unique tail; fixed seed) through
#   1. switchyard --router-mode kv,
#   2. switchyard --router-mode kv --router-tie-break random (1.6.1's pick among equals;
#      informational, asserts nothing: only with `tiebreak` in KV_PHASES),
#   3. switchyard --router-mode round-robin,
#   4. python -m dynamo.frontend --router-mode kv,
# each with freshly started workers (empty caches). Reports each cached-token ratio (sum of
# usage.prompt_tokens_details.cached_tokens / prompt tokens) and requires switchyard kv to be
# at least Dynamo's kv (the mean of three workloads each; KV_TOLERANCE, default 0, allows it
# that much below) and clearly above round-robin. Root, loopback-only network namespace (like scripts/interop.sh).
#
# Then the recovery phase, on one set of four fresh mockers: a switchyard started after the
# workers have filled their caches restores every worker's tree through its
# worker_kv_query_source endpoint before any request; a SIGKILLed worker's blocks leave the
# index; a worker started later (a new publisher) is restored and routed to; all without
# restarting switchyard. With KV_PHASES containing `gap` as well, events lost while its
# subscriptions are cut (ss -K) are asked for and recovered.
#
# The busy phase: two unhurried mockers, --active-decode-blocks-threshold 0.001; while both
# decode a long answer, a third request gets 529 with the same body from switchyard as from
# dynamo.frontend, and once they finish requests pass again.
#
# The nats phase: two mockers on --event-plane nats with a real nats-server (Debian); the
# kv router must receive their events and usage over NATS (and restore their trees over the
# request plane) and credit cached prefixes.
#
# Usage: bash scripts/interop_kv.sh     (SWITCHYARD_BIN: a binary already built;
#        KV_PHASES="ratios recovery busy nats approx dp replica" by default; add
#        `tiebreak` for run 2 of the ratios)
#
# The replica phase: switchyard and python -m dynamo.frontend, both --router-replica-sync,
# on one mocker: a request held through switchyard raises dynamo.frontend's logit for the
# next prompt by its 12 blocks (36.5 instead of 24.5), a request held through dynamo.frontend
# is a remote booking with its 12 blocks in switchyard's metrics, and the mocker's
# MarkPrefillCompleted is matched to switchyard's booking by request id.
#
# The dp phase: workers with --data-parallel-size 2; every rank's events are followed and
# restored, the router picks ranks (routing.dp_rank, as dynamo.frontend sends it).
#
# The approx phase: --no-router-kv-events (no KV events read; the cache predicted from the
# router's own decisions) on the ratios workload must stay well above round-robin.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
TOL=${KV_TOLERANCE:-0}
WORK=$(mktemp -d "${TMPDIR:-/tmp}/switchyard-kv.XXXXXX")
PIDS=()
cleanup() {
  for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  sleep 1
  for p in "${PIDS[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  rm -rf "$WORK"
}
trap cleanup EXIT
fail() {
  echo "FAIL: $*" >&2
  for log in "$WORK"/*.log; do echo "---- $(basename "$log")" >&2; tail -n 15 "$log" >&2; done
  echo "FAIL: $* (the logs above)" >&2 # again, last, where a truncated output still shows it
  exit 1
}

MOCKERS=()
start_mockers() { # log-prefix first last [speedup]: mockers first..last; waits for all registered
  local i before
  [ "$2" = 1 ] && MOCKERS=()
  # Records already there (a killed worker's may have gone meanwhile): wait for these plus the new ones.
  before=$({ find "$DYN_FILE_KV/v1/instances" -name '*generate*' 2>/dev/null || true; } | wc -l)
  for i in $(seq "$2" "$3"); do
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane "${EVENT_PLANE:-zmq}" --block-size 16 --num-gpu-blocks-override 160 \
      --speedup-ratio "${4:-20}" --data-parallel-size "${DP_SIZE:-1}" >"$WORK/$1-mocker$i.log" 2>&1 &
    MOCKERS[i]=$!; PIDS+=($!)
  done
  workers_registered $((before + $3 - $2 + 1)) "$1: mockers $2..$3" || true
}
start_frontend() { # log-name frontend-command...: sets FE, waits for the model
  local log=$1; shift
  "$@" --discovery-backend file --http-host 127.0.0.1 --http-port 18500 >"$WORK/$log.log" 2>&1 &
  FE=$!; PIDS+=($FE)
  for _ in $(seq 1 240); do
    # Answered by this frontend, not by one an earlier phase left behind.
    kill -0 "$FE" 2>/dev/null || fail "$log: the frontend exited"
    curl -s -m 2 localhost:18500/v1/models | grep -q '"qwen3"' && return 0
    sleep 0.5
  done
  fail "$log: the model never appeared within 120 s"
}

run() { # label seed frontend-command...: prints the cached-token ratio
  local label=$1 seed=$2; shift 2
  export DYN_FILE_KV="$WORK/kv-$label-$seed"
  mkdir -p "$DYN_FILE_KV"
  start_mockers "$label-$seed" 1 4
  local pids=("${MOCKERS[@]}")
  start_frontend "$label-$seed-frontend" "$@"
  local fe=$FE
  sleep 3 # every frontend has subscribed to every worker's events
  local ratio
  ratio=$("$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 300 --concurrency 1 --seed "$seed") \
    || fail "$label: the workload failed"
  if [[ "$label" == switchyard-kv ]]; then
    # Its own counters agree: 300 kv decisions, cached prefixes credited.
    # A scrape merges every shard's counters; a shard that does not answer within the
    # scrape's 2 s wait (a starved CPU) is left out of that scrape, so look up to 3 times.
    local tries=0
    until curl -s -m 5 localhost:18500/metrics | python3 -c '
import sys
d = o = 0
for line in sys.stdin:
    if line.startswith("switchyard_kv_router_decisions_total{"): d += int(line.split()[-1])
    if line.startswith("switchyard_kv_router_overlap_blocks_total "): o = int(line.split()[-1])
assert d == 300 and o > 0, f"kv router metrics: {d} decisions, {o} overlap blocks"
' >&2; do
      tries=$((tries + 1))
      [ "$tries" -lt 3 ] || fail "$label: kv router metrics"
      sleep 1
    done
  fi
  kill "$fe" "${pids[@]}" 2>/dev/null || true
  wait "$fe" "${pids[@]}" 2>/dev/null || true
  local subs; subs=$(grep -c "kv events: subscribed" "$WORK/$label-$seed-frontend.log" || true)
  if [[ "$label" == switchyard-kv ]] && [ "$subs" -lt 4 ]; then
    fail "$label: subscribed to $subs of 4 workers' kv-events publishers"
  fi
  echo "$ratio"
}

metric() { # name: the value of an unlabelled metric of the frontend on :18500 (0 if absent)
  curl -s -m 5 localhost:18500/metrics | awk -v n="$1" '$1 == n { v = $2 } END { print v + 0 }'
}
wait_metric() { # name op value seconds what: polls until `metric name` op value holds
  local v
  for _ in $(seq 1 $(($4 * 5))); do
    v=$(metric "$1")
    python3 -c "import sys; sys.exit(0 if $v $2 $3 else 1)" && { echo "$v"; return 0; }
    sleep 0.2
  done
  fail "recovery: $5 ($1 = $v, wanted $2 $3 within $4 s)"
}

cut_gap() { # restored-count: forces a gap by cutting the kv-events subscriptions (ss -K)
  local restored=$1
  # A gap: switchyard's subscriptions to the kv-events publishers are cut (ss -K) and
  # requests run while it reconnects (1 s), so their events are lost; the next events show
  # the hole and the missing range is asked of each worker.
  local ports
  ports=$(grep -o 'subscribed to tcp://127.0.0.1:[0-9]* (kv-events)' "$WORK/recovery.log" | grep -o ':[0-9]* ' | tr -d ': ')
  "$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 24 --concurrency 4 --seed 9 >/dev/null &
  local load=$!
  # Cut again and again while that load runs (the client takes a moment to start).
  while kill -0 "$load" 2>/dev/null; do
    for p in $ports; do ss -K dst 127.0.0.1 dport = "$p" >/dev/null 2>&1 || true; done
    sleep 0.3
  done
  wait "$load" || fail "recovery: the workload during the cut failed"
  sleep 2
  "$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 12 --concurrency 4 --seed 10 >/dev/null || fail "recovery: the workload after the cut failed"
  local gaps
  gaps=$(wait_metric switchyard_kv_ingest_event_gaps_total '>=' 1 10 "a gap seen after the cut")
  wait_metric switchyard_kv_ingest_recoveries_total '>' "$restored" 10 "the gap recovered" >/dev/null
  echo "cut subscriptions: $gaps gaps, recovered from the workers" >&2
}

recovery() {
  export DYN_FILE_KV="$WORK/kv-recovery"
  mkdir -p "$DYN_FILE_KV"
  start_mockers recovery 1 4
  start_frontend recovery-warm "$BIN" --router-mode kv
  sleep 3
  "$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 60 --concurrency 1 --seed 5 >/dev/null || fail "recovery: the warm-up workload failed"
  kill "$FE"; wait "$FE" 2>/dev/null || true
  # A fresh switchyard saw none of those events: its index is filled by the tree dumps alone.
  start_frontend recovery "$BIN" --router-mode kv
  local restored blocks
  restored=$(wait_metric switchyard_kv_ingest_recoveries_total '>=' 4 15 "four workers' trees restored")
  blocks=$(wait_metric switchyard_kv_index_blocks '>' 0 5 "restored blocks in the index")
  echo "restored $restored worker trees, $blocks blocks, before any request" >&2
  if [[ " $PHASES " == *" gap "* ]]; then
    cut_gap "$restored"
    blocks=$(metric switchyard_kv_index_blocks)
  fi
  # A killed worker's blocks leave the index once discovery drops it (10 s record TTL).
  kill -KILL "${MOCKERS[1]}"
  local left
  left=$(wait_metric switchyard_kv_index_blocks '<' "$blocks" 30 "the killed worker's blocks removed")
  echo "worker killed: index $blocks -> $left blocks" >&2
  # A worker (a new publisher) started now is restored in full and gets requests.
  start_mockers recovery-late 5 5
  wait_metric switchyard_kv_ingest_full_restores_total '>=' 5 20 "the new worker's tree restored" >/dev/null
  local ratio
  ratio=$("$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 60 --concurrency 1 --seed 5) || fail "recovery: the workload after the kill failed"
  python3 -c "import sys; sys.exit(0 if $ratio > 0.3 else 1)" \
    || fail "recovery: cached-token ratio $ratio after restore (the restored trees are not used)"
  local given_up gaps
  given_up=$(metric switchyard_kv_ingest_recoveries_abandoned_total)
  gaps=$(metric switchyard_kv_ingest_event_gaps_total)
  [ "$given_up" = 0 ] || fail "recovery: $given_up recoveries abandoned"
  kill "$FE" "${MOCKERS[@]}" 2>/dev/null || true
  wait "$FE" "${MOCKERS[@]}" 2>/dev/null || true
  echo "recovery: ok (cached-token ratio $ratio after the restore; $gaps gaps)"
}

# Three workloads (seeds) per frontend, each on fresh workers: a new prompt family lands on a
# worker chosen among equals (switchyard: the emptiest cache, ties of that at random; Dynamo:
# at random), so one run's ratio varies by a few hundredths; the means are compared.
mean() { python3 -c "import sys; v=[float(x) for x in sys.argv[1:]]; print(f'{sum(v)/len(v):.4f}')" "$@"; }
SEEDS=(7 11 13)
ratios() { # label frontend-command...: the mean ratio over the seeds
  local label=$1; shift
  local r=() seed
  for seed in "${SEEDS[@]}"; do r+=("$(run "$label" "$seed" "$@")"); done
  mean "${r[@]}"
}
chat() { # content max_tokens: "<status> <body>" of a chat completion through :18500
  curl -s -m 60 -o "$WORK/body" -w '%{http_code}' localhost:18500/v1/chat/completions \
    -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"$1\"}],\"max_tokens\":$2,\"ignore_eos\":true}"
  printf ' %s' "$(cat "$WORK/body")"
}

busy_probe() { # label frontend-command...: prints the 529 body seen while both workers decode
  local label=$1; shift
  start_frontend "busy-$label" "$@" --router-mode kv --active-decode-blocks-threshold 0.001
  sleep 3
  local long=()
  chat "long answer one" 600 >/dev/null & long+=($!)
  sleep 1
  chat "long answer two" 600 >/dev/null & long+=($!)
  sleep 1
  local got; got=$(chat "short probe" 4)
  [[ "$got" == 529* ]] || fail "busy ($label): a request while both workers decode got ${got:0:300}"
  wait "${long[@]}"
  sleep 1
  local after; after=$(chat "after the long ones" 4)
  [[ "$after" == 200* ]] || fail "busy ($label): a request after the long ones got ${after:0:300}"
  kill "$FE"; wait "$FE" 2>/dev/null || true
  echo "${got#529 }"
}

busy() {
  export DYN_FILE_KV="$WORK/kv-busy"
  mkdir -p "$DYN_FILE_KV"
  start_mockers busy 1 2 1
  local ours theirs
  ours=$(busy_probe switchyard "$BIN")
  theirs=$(busy_probe dynamo "$PY" -m dynamo.frontend --request-plane tcp)
  python3 - "$ours" "$theirs" <<'PYEOF' || fail "busy: 529 bodies differ"
import json, sys
ours, theirs = (json.loads(b) for b in sys.argv[1:])
assert ours == theirs, f"switchyard {ours} != dynamo {theirs}"
PYEOF
  kill "${MOCKERS[@]}"; wait "${MOCKERS[@]}" 2>/dev/null || true
  echo "busy: ok (529 $ours from both, 200 once the workers are free)"
}

nats_phase() {
  command -v nats-server >/dev/null || fail "nats: nats-server missing: apt-get install nats-server (or bash scripts/install-system.sh)"
  local port; port=$(python3 -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])')
  nats-server -a 127.0.0.1 -p "$port" >"$WORK/nats-server.log" 2>&1 &
  local ns=$!; PIDS+=($ns)
  export NATS_SERVER="nats://127.0.0.1:$port" DYN_FILE_KV="$WORK/kv-nats" EVENT_PLANE=nats
  mkdir -p "$DYN_FILE_KV"
  start_mockers nats 1 2
  start_frontend nats "$BIN" --router-mode kv --event-plane nats
  sleep 3
  local ratio
  ratio=$("$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 60 --concurrency 1 --seed 5) || fail "nats: the workload failed"
  local events usage
  events=$(metric switchyard_kv_ingest_events_total)
  [ "$events" -gt 0 ] || fail "nats: no KV events arrived over NATS"
  python3 -c "import sys; sys.exit(0 if $ratio > 0.3 else 1)" || fail "nats: cached-token ratio $ratio"
  grep -q "subjects on nats://" "$WORK/nats.log" || fail "nats: never subscribed on the NATS server"
  kill "$FE" "${MOCKERS[@]}"; wait "$FE" "${MOCKERS[@]}" 2>/dev/null || true
  kill "$ns"; wait "$ns" 2>/dev/null || true
  unset NATS_SERVER EVENT_PLANE
  echo "nats: ok ($events KV events over NATS, cached-token ratio $ratio)"
}

approx_phase() { # approximate mode on real mockers: one workload, against round-robin's mean
  local ratio
  ratio=$(run switchyard-approx 7 "$BIN" --router-mode kv --no-router-kv-events)
  echo "approx: switchyard --router-mode kv --no-router-kv-events: cached-token ratio $ratio"
  python3 -c "import sys; sys.exit(0 if $ratio >= 0.5 else 1)" \
    || fail "approx: cached-token ratio $ratio (round-robin gets about 0.22)"
  # The LRU policy bounds each worker's prediction by its 160 advertised blocks.
  ratio=$(run switchyard-approx-lru 7 "$BIN" --router-mode kv --no-router-kv-events \
    --router-approximate-cache-policy lru)
  echo "approx: ... --router-approximate-cache-policy lru: cached-token ratio $ratio"
  python3 -c "import sys; sys.exit(0 if $ratio >= 0.5 else 1)" \
    || fail "approx lru: cached-token ratio $ratio (round-robin gets about 0.22)"
}

dp_phase() { # two mockers with two data-parallel ranks each: ranks are routed and credited
  export DYN_FILE_KV="$WORK/kv-dp" DP_SIZE=2
  mkdir -p "$DYN_FILE_KV"
  start_mockers dp 1 2
  start_frontend dp "$BIN" --router-mode kv
  sleep 3
  local ratio
  ratio=$("$PY" scripts/interop_client.py prefix --base-url http://127.0.0.1:18500/v1 --model qwen3 \
    --requests 150 --concurrency 1 --seed 7) || fail "dp: the workload failed"
  local restored; restored=$(metric switchyard_kv_ingest_recoveries_total)
  kill "$FE" "${MOCKERS[@]}"; wait "$FE" "${MOCKERS[@]}" 2>/dev/null || true
  unset DP_SIZE
  local subs; subs=$(grep -c "subscribed to .*(kv-events)" "$WORK/dp.log" || true)
  [ "$subs" -ge 4 ] || fail "dp: subscribed to $subs kv-events publishers, not one per rank (4)"
  [ "$restored" -ge 4 ] || fail "dp: $restored of 4 rank trees restored"
  python3 -c "import sys; sys.exit(0 if $ratio >= 0.5 else 1)" || fail "dp: cached-token ratio $ratio"
  echo "dp: ok (4 ranks on 2 workers; cached-token ratio $ratio)"
}

complete() { # port first-token count max_tokens: a /v1/completions of token ids first..first+count-1
  local ids; ids=$(python3 -c "import sys; a=int(sys.argv[1]); print(','.join(str(t) for t in range(a, a+int(sys.argv[2]))))" "$2" "$3")
  curl -s -m 120 -o /dev/null -w '%{http_code}' "localhost:$1/v1/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"prompt\":[$ids],\"max_tokens\":$4,\"ignore_eos\":true}"
}
replica_phase() { # switchyard and dynamo.frontend, both --router-replica-sync, on one mocker
  export DYN_FILE_KV="$WORK/kv-replica"
  mkdir -p "$DYN_FILE_KV"
  start_mockers replica 1 1 1
  local w; w=$(python3 -c "import json,glob; print(json.load(open(glob.glob('$DYN_FILE_KV/v1/instances/*generate*')[0]))['instance_id'])")
  start_frontend replica "$BIN" --router-mode kv --router-replica-sync
  local sy=$FE
  "$PY" -m dynamo.frontend --request-plane tcp --router-mode kv --router-replica-sync --discovery-backend file \
    --http-host 127.0.0.1 --http-port 18501 >"$WORK/replica-dynamo.log" 2>&1 &
  local dyn=$!; PIDS+=($dyn)
  for _ in $(seq 1 120); do
    curl -s -m 2 localhost:18501/v1/models | grep -q '"qwen3"' && break
    kill -0 "$dyn" 2>/dev/null || fail "replica: dynamo.frontend exited"
    sleep 0.5
  done
  sleep 3 # each frontend subscribed to the other's active_sequences_events channel
  local subs; subs=$(grep -c "subscribed to .*(active_sequences_events)" "$WORK/replica.log" || true)
  [ "$subs" -ge 2 ] || fail "replica: switchyard subscribed to $subs active_sequences_events publishers (worker + dynamo.frontend)"
  local lbl="{worker_id=\"$w\",dp_rank=\"0\"}"
  # 1. A request held through switchyard (200 tokens, 12 blocks of 16) is load for
  # dynamo.frontend: its choice for another 200-token prompt costs 12.5 + (12 + 12) = 36.5
  # instead of the idle worker's 24.5.
  complete 18500 1000 200 600 >/dev/null &
  local long=$!
  wait_metric "switchyard_kv_router_active_blocks$lbl" '==' 12 10 "switchyard booked its request" >/dev/null
  wait_metric switchyard_kv_ingest_prefill_marks_total '>=' 1 10 "the mocker's prefill mark matched" >/dev/null
  [ "$(complete 18501 30000 200 1)" = 200 ] || fail "replica: dynamo.frontend's request failed"
  [ "$(metric "switchyard_kv_router_active_blocks$lbl")" = 12 ] || fail "replica: switchyard's request ended too early"
  local logit
  logit=$(sed 's/\x1b\[[0-9;]*m//g' "$WORK/replica-dynamo.log" | grep 'Selected worker' | tail -n 1 | grep -o 'logit=[0-9.]*' | cut -d= -f2)
  [ "$logit" = 36.5 ] || fail "replica: dynamo.frontend chose with logit '$logit' (36.5 counts switchyard's booking, 24.5 does not)"
  wait "$long" || fail "replica: the held request failed"
  wait_metric "switchyard_kv_router_active_requests$lbl" '==' 0 10 "switchyard freed its request" >/dev/null
  # 2. A request held through dynamo.frontend is load in switchyard's table.
  complete 18501 50000 200 600 >/dev/null &
  long=$!
  wait_metric switchyard_kv_router_remote_bookings '==' 1 10 "switchyard holds dynamo.frontend's booking" >/dev/null
  wait_metric "switchyard_kv_router_active_blocks$lbl" '==' 12 5 "its 12 blocks counted" >/dev/null
  wait "$long" || fail "replica: the held request failed"
  wait_metric switchyard_kv_router_remote_bookings '==' 0 10 "dynamo.frontend's Free applied" >/dev/null
  local published; published=$(metric switchyard_kv_ingest_active_published_total)
  kill "$sy" "$dyn" "${MOCKERS[@]}" 2>/dev/null || true
  wait "$sy" "$dyn" "${MOCKERS[@]}" 2>/dev/null || true
  echo "replica: ok (dynamo.frontend logit 36.5 with switchyard's booking; switchyard held dynamo's; $published events published)"
}

# `gap` (inside recovery) is not in the default list: whether a cut loses events depends on
# timing on this VM (it passes when run alone, it did not always under CI load).
PHASES=${KV_PHASES:-ratios recovery busy nats approx dp replica}
if [[ " $PHASES " == *" replica "* ]]; then
  replica_phase
fi
if [[ " $PHASES " == *" dp "* ]]; then
  dp_phase
fi
if [[ " $PHASES " == *" approx "* ]]; then
  approx_phase
fi
if [[ " $PHASES " == *" nats "* ]]; then
  nats_phase
fi
if [[ " $PHASES " == *" busy "* ]]; then
  busy
fi
if [[ " $PHASES " == *" recovery "* ]]; then
  recovery
fi
[[ " $PHASES " == *" ratios "* ]] || exit 0
kv=$(ratios switchyard-kv "$BIN" --router-mode kv)
echo "switchyard --router-mode kv:          cached-token ratio $kv"
# The same router with 1.6.1's uniform pick among equally cheap workers (informational: it
# shows what the default tie-break toward the emptiest cache adds).
if [[ " $PHASES " == *" tiebreak "* ]]; then
  kvr=$(ratios switchyard-kv-random "$BIN" --router-mode kv --router-tie-break random)
  echo "switchyard --router-mode kv --router-tie-break random: cached-token ratio $kvr"
fi
# Round-robin's ratio barely moves with the seed (about 0.22) and is only checked to lie well
# below kv's: one seed.
rr=$(run switchyard-rr "${SEEDS[0]}" "$BIN" --router-mode round-robin)
echo "switchyard --router-mode round-robin: cached-token ratio $rr"
dyn=$(ratios dynamo-kv "$PY" -m dynamo.frontend --request-plane tcp --router-mode kv)
echo "dynamo.frontend --router-mode kv:     cached-token ratio $dyn"
python3 - "$kv" "$rr" "$dyn" "$TOL" <<'PYEOF' || fail "cached-token ratios"
import sys
kv, rr, dyn, tol = map(float, sys.argv[1:])
assert kv >= dyn - tol, f"switchyard kv {kv:.3f} below Dynamo kv {dyn:.3f} (tolerance {tol})"
assert kv >= rr + 0.1, f"switchyard kv {kv:.3f} not clearly above round-robin {rr:.3f}"
print(f"ok: kv {kv:.3f} >= dynamo {dyn:.3f} - {tol}, and > round-robin {rr:.3f} + 0.1")
PYEOF
