#!/usr/bin/env bash
# The cached-token ratio of 1, 2 and 4 switchyard replicas (`--router-mode kv`, one shard each)
# in front of the same four real `python -m dynamo.mocker` workers with small KV caches (file
# discovery, ZMQ KV events), behind a round-robin client (request i to replica i mod N): the
# prefix-sharing workload of scripts/interop_kv.sh (FAMILIES shared ~400-token system prompts,
# a short unique tail each; REQUESTS requests, CONCURRENCY at a time, fixed seeds), without and
# with sharing between the replicas (`--router-replica-sync`: each replica books the others'
# requests on their workers). Every replica reads every worker's KV events, so each holds the
# whole index; what replicas cannot see without sharing is each other's requests in flight.
# Every run starts its workers afresh (empty caches). Prints one markdown table: the ratio
# (the mean over SEEDS) and its loss against one replica.
# Needs root (loopback-only network namespace).
#
# Usage: bash perf/replica_ratio.sh   (SEEDS="1 2" REQUESTS=300 CONCURRENCY=8 FAMILIES=20
#        REPLICAS="1 2 4" SHARING="0 1" SPEEDUP=20; FRONTEND=dynamo: the same with `python -m dynamo.frontend`
#        replicas; PAUSE: seconds each client waits after an answer)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
SEEDS=${SEEDS:-1 2}
REQUESTS=${REQUESTS:-300}
CONCURRENCY=${CONCURRENCY:-8}
FAMILIES=${FAMILIES:-20}
REPLICAS=${REPLICAS:-1 2 4}
SHARING=${SHARING:-0 1}
SPEEDUP=${SPEEDUP:-20}
FRONTEND=${FRONTEND:-switchyard}
scratch_dir

one_run() { # replicas sync(0|1) seed: prints the ratio
  local n=$1 sync=$2 seed=$3 i urls="" args=(--router-mode kv)
  [ "$sync" = 1 ] && args+=(--router-replica-sync)
  export DYN_FILE_KV="$WORK/kv-$n-$sync-$seed"
  mkdir -p "$DYN_FILE_KV"
  local procs=()
  for i in 1 2 3 4; do
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
      --request-plane tcp --event-plane zmq --block-size 16 --num-gpu-blocks-override 160 \
      --speedup-ratio "$SPEEDUP" >"$WORK/mocker-$n-$sync-$seed-$i.log" 2>&1 &
    procs+=($!); PIDS+=($!)
  done
  workers_registered 4 "replicas $n" || true
  for i in $(seq 1 "$n"); do
    if [ "$FRONTEND" = dynamo ]; then
      "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
        --http-port $((18600 + i)) "${args[@]}" >"$WORK/fe-$n-$sync-$seed-$i.log" 2>&1 &
    else
      "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port $((18600 + i)) --shards 1 --no-pin-shards \
        "${args[@]}" >"$WORK/fe-$n-$sync-$seed-$i.log" 2>&1 &
    fi
    procs+=($!); PIDS+=($!)
    urls="$urls${urls:+,}http://127.0.0.1:$((18600 + i))/v1"
  done
  for i in $(seq 1 "$n"); do qwen3_listed $((18600 + i)); done
  sleep 3 # every replica has subscribed to every worker's events (and to the other replicas')
  "$PY" scripts/interop_client.py prefix --base-url "$urls" --model qwen3 --requests "$REQUESTS" \
    --concurrency "$CONCURRENCY" --families "$FAMILIES" --seed "$seed" --pause "${PAUSE:-0}"
  if [ "$FRONTEND" = switchyard ]; then
    # Every request has ended: each replica should hold no booking, its own or another's.
    sleep 1
    for i in $(seq 1 "$n"); do
      local left
      left=$(curl -s "http://127.0.0.1:$((18600 + i))/metrics" |
        awk '/^switchyard_kv_router_(active_requests|remote_bookings)/ && $NF != 0 { printf "%s ", $0 }')
      [ -z "$left" ] || echo "replica $i still holds after the run: $left" >&2
    done
  fi
  kill "${procs[@]}" 2>/dev/null || true
  wait "${procs[@]}" 2>/dev/null || true
}

declare -A RATIO
for sync in $SHARING; do
  for n in $REPLICAS; do
    [ "$n" = 1 ] && [ "$sync" = 1 ] && continue # one replica has nobody to share with
    vals=""
    for seed in $SEEDS; do vals="$vals $(one_run "$n" "$sync" "$seed")"; done
    RATIO[$n-$sync]=$(python3 -c 'import sys; v = [float(x) for x in sys.argv[1:]]; print(f"{sum(v) / len(v):.4f}")' $vals)
    echo "replicas $n, sharing $sync: ratios$vals, mean ${RATIO[$n-$sync]}" >&2
  done
done
echo "| replicas | sharing | cached-token ratio | loss against 1 replica |"
echo "|---:|---|---:|---:|"
one=${RATIO[1-0]:-}
for sync in $SHARING; do
  for n in $REPLICAS; do
    r=${RATIO[$n-$sync]:-}
    [ -n "$r" ] || continue
    label=none; [ "$sync" = 1 ] && label="--router-replica-sync"
    [ "$n" = 1 ] && label="(one replica)"
    loss="—"; [ -n "$one" ] && loss=$(python3 -c "print(f'{$one - $r:+.4f}')")
    echo "| $n | $label | $r | $loss |"
  done
done
