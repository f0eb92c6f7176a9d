#!/usr/bin/env bash
# The served KV indexer (docs/dynamo/remote-indexer.md) between switchyard and real Dynamo
# 1.6.1, in both directions, over two real mockers (file discovery, TCP request plane, ZMQ KV
# events):
#   A. switchyard --serve-indexer, read by dynamo.frontend --use-remote-indexer;
#   B. dynamo.frontend --serve-indexer, read by switchyard --use-remote-indexer.
# In each: four prompts are sent through the serving frontend, pinned two to each worker
# (nvext.backend_instance_id), so each worker alone holds two of them; then each prompt goes
# through the consumer, which follows no KV events of its own: every answer must be 200 and
# report the prompt's blocks as cached (a chance hit is 1 in 16), so the consumer routed by
# the served index. Then the serving frontend stops: its record goes, and the consumer
# answers 500 with 1.6.1's body (no silent fall-back), except a prompt shorter than a block,
# which needs no query; a new serving frontend is read again at once. In B, switchyard's
# consumer holds no connection to the workers' KV event publishers.
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_indexer.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
need ss
SERVE=18680 USE=18681
FAILED_BODY='{"message":"Failed to generate completions","type":"Internal Server Error","code":500}'

for i in 1 2; do
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
    --discovery-backend file --request-plane tcp --event-plane zmq --block-size 16 \
    >"$WORK/mocker$i.log" 2>&1 &
  PIDS+=($!)
done
workers_registered 2 "the mockers" || fail "the mockers did not register" "$WORK/mocker1.log" "$WORK/mocker2.log"
mapfile -t WORKERS < <(find "$DYN_FILE_KV/v1/instances" -name '*generate*' -exec cat {} + |
  grep -o '"instance_id":[0-9]*' | cut -d: -f2 | sort -u)
[ "${#WORKERS[@]}" = 2 ] || fail "expected 2 worker ids, found ${WORKERS[*]}"

frontend() { # kind(sy|dy) port log flag: starts a kv-mode frontend; sets F
  local kind=$1 port=$2 log=$3 flag=$4
  if [ "$kind" = sy ]; then
    "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port "$port" --shards 2 "$flag" \
      >"$WORK/$log" 2>&1 &
  else
    "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port "$port" --discovery-backend file --router-mode kv \
      "$flag" >"$WORK/$log" 2>&1 &
  fi
  F=$!; PIDS+=($F)
  model_listed "$port" qwen3 || fail "$kind on $port lists no qwen3" "$WORK/$log"
}

indexer_records() { find "$DYN_FILE_KV/v1/instances" -name '*kv%5Findexer%5Fquery*' 2>/dev/null | wc -l; }

prompt() { # direction n: a prompt of ~20 blocks whose first block is its own
  local words="" w
  for w in $(seq 1 60); do words+="$1-$2 word$w "; done
  echo "$1 prompt $2, unlike any other: $words"
}

chat() { # port content [worker]: body and status of a short chat request
  local nvext=""
  [ -n "${3:-}" ] && nvext=",\"nvext\":{\"backend_instance_id\":$3}"
  curl -s -m 30 "127.0.0.1:$1/v1/chat/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"$2\"}],\"max_tokens\":2$nvext}" \
    -w ' HTTP %{http_code}'
}

flat() { # an error body's Dynamo fields (message, type, code), compact
  "$PY" -c 'import json, sys
b = json.loads(sys.argv[1])
print(json.dumps({k: b[k] for k in ("message", "type", "code")}, separators=(",", ":")))' "$1" 2>/dev/null || echo "not JSON: $1"
}

cached() { grep -o '"cached_tokens":[0-9]*' <<<"$1" | head -n 1 | cut -d: -f2; }

direction() { # name server-kind consumer-kind
  local name=$1 skind=$2 ckind=$3 server consumer out c i
  echo "== $name: $skind --serve-indexer read by $ckind --use-remote-indexer"
  frontend "$skind" $SERVE "$name-server.log" --serve-indexer; server=$F
  frontend "$ckind" $USE "$name-consumer.log" --use-remote-indexer; consumer=$F
  for _ in $(seq 1 100); do [ "$(indexer_records)" -ge 1 ] && break; sleep 0.1; done
  [ "$(indexer_records)" = 1 ] || fail "$name: $(indexer_records) kv_indexer_query records, not 1" "$WORK/$name-server.log"
  for i in 1 2 3 4; do
    out=$(chat $SERVE "$(prompt "$name" $i)" "${WORKERS[$((i % 2))]}")
    [[ "$out" == *"HTTP 200" ]] || fail "$name: warming prompt $i through the server: $out" "$WORK/$name-server.log"
  done
  sleep 1
  for i in 1 2 3 4; do
    out=$(chat $USE "$(prompt "$name" $i)")
    [[ "$out" == *"HTTP 200" ]] || fail "$name: prompt $i through the consumer: ${out:0:300}" \
      "$WORK/$name-consumer.log" "$WORK/$name-server.log"
    c=$(cached "$out")
    [ "${c:-0}" -ge 160 ] || fail "$name: prompt $i reached a worker without its blocks (cached ${c:-none}): \
the consumer did not route by the served index" "$WORK/$name-consumer.log" "$WORK/$name-server.log"
    echo "  prompt $i through the consumer: 200, $c tokens cached"
  done
  if [ "$ckind" = sy ]; then
    local ports
    ports=$(cat "$DYN_FILE_KV"/v1/event_channels/*kv%2Devents* | grep -o 'tcp://127.0.0.1:[0-9]*' | cut -d: -f3 | sort -u)
    for p in $ports; do
      if ss -tnpH state established "( dport = :$p )" | grep -q "pid=$consumer,"; then
        fail "$name: switchyard --use-remote-indexer is connected to the KV event publisher on :$p" "$WORK/$name-consumer.log"
      fi
    done
    echo "  ok: the consumer follows no KV event publisher (ports $(echo $ports))"
  fi
  echo "-- the serving frontend stops"
  kill -TERM "$server"; wait "$server" 2>/dev/null || true
  for _ in $(seq 1 100); do [ "$(indexer_records)" = 0 ] && break; sleep 0.1; done
  [ "$(indexer_records)" = 0 ] || fail "$name: the served indexer's record outlived a clean stop" "$WORK/$name-server.log"
  out=$(chat $USE "$(prompt "$name" 5)")
  # 1.6.1's flat fields, byte for byte (switchyard's bodies also carry OpenAI's nested `error`).
  [ "$(flat "${out% HTTP 500}")" = "$FAILED_BODY" ] && [[ "$out" == *" HTTP 500" ]] ||
    fail "$name: with no served indexer the consumer answered ${out:0:300}, not 1.6.1's 500" "$WORK/$name-consumer.log"
  echo "  ok: ${out:0:120}"
  if [ "$ckind" = sy ]; then
    out=$(chat $USE "hi")
    [[ "$out" == *"HTTP 200" ]] || fail "$name: a prompt shorter than a block needs no query, got ${out:0:300}" \
      "$WORK/$name-consumer.log"
    echo "  ok: a prompt shorter than one block is served without a query"
  fi
  if [ "$ckind" = sy ]; then
    local ok failed
    ok=$(curl -s 127.0.0.1:$USE/metrics | grep '^switchyard_remote_indexer_queries_total{.*outcome="ok"' | awk '{print $NF}')
    failed=$(curl -s 127.0.0.1:$USE/metrics | grep '^switchyard_remote_indexer_queries_total{.*outcome="failed"' | awk '{print $NF}')
    [ "${ok:-0}" -ge 4 ] && [ "${failed:-0}" -ge 1 ] ||
      fail "$name: switchyard_remote_indexer_queries_total ok=${ok:-none} failed=${failed:-none}" "$WORK/$name-consumer.log"
    echo "  ok: queries counted: $ok answered, $failed failed"
  fi
  echo "-- a new serving frontend"
  frontend "$skind" $SERVE "$name-server2.log" --serve-indexer; server=$F
  for _ in $(seq 1 300); do
    out=$(chat $USE "$(prompt "$name" 2)")
    [[ "$out" == *"HTTP 200" ]] && break
    sleep 0.1
  done
  [[ "$out" == *"HTTP 200" ]] || fail "$name: the consumer did not read the new served indexer: ${out:0:300}" \
    "$WORK/$name-consumer.log" "$WORK/$name-server2.log"
  echo "  ok: served again, $(cached "$out") tokens cached"
  kill -TERM "$server" "$consumer"; wait "$server" "$consumer" 2>/dev/null || true
  for _ in $(seq 1 100); do [ "$(indexer_records)" = 0 ] && break; sleep 0.1; done
}

direction A sy dy
direction B dy sy
echo "interop_indexer: ok"
