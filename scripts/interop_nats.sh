#!/usr/bin/env bash
# The NATS request plane (docs/dynamo/request-plane.md §5.6) against real processes: a real
# nats-server (JetStream on), a real `python -m dynamo.mocker --request-plane nats`, and
# switchyard with `--request-plane nats` (two shards, so two NATS connections), driven by the
# real OpenAI Python SDK (scripts/interop_client.py):
#   1. chat and completions, whole and streamed, through switchyard; the same through
#      `python -m dynamo.frontend --request-plane nats` (the peer serves the same worker);
#   2. a client that leaves mid-stream: counted as a cancellation, nothing left in flight;
#   3. a frontend on the TCP plane in front of the NATS worker does not list it, and says why;
#   4. the NATS server stopped: a request ends with a clean 503 (no hang); started again, the
#      next requests are answered (switchyard dials again; the worker reconnects by itself);
#   5. a kv-mode switchyard started after the worker has cached prompts restores the worker's
#      tree through its recovery endpoint on NATS (docs/dynamo/kv-routing.md, recovery).
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_nats.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
need nats-server
scratch_dir
export NATS_SERVER=nats://127.0.0.1:14322
PORT=18640
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/interop_client.py)

start_nats() {
  nats-server -a 127.0.0.1 -p 14322 -js -sd "$WORK/js" >>"$WORK/nats.log" 2>&1 &
  NATS=$!; PIDS+=($NATS)
  for _ in $(seq 1 50); do
    (echo >/dev/tcp/127.0.0.1/14322) 2>/dev/null && return 0
    sleep 0.1
  done
  fail "nats-server did not start" "$WORK/nats.log"
}

start_nats
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
  --discovery-backend file --request-plane nats >"$WORK/mocker.log" 2>&1 &
MOCKER=$!; PIDS+=($MOCKER)
workers_registered 1 "the NATS mocker" || fail "the mocker did not register" "$WORK/mocker.log"
grep -q '"nats_tcp"' "$DYN_FILE_KV"/v1/instances/*generate* ||
  fail "the mocker's record names no nats_tcp subject: $(cat "$DYN_FILE_KV"/v1/instances/*generate*)"

echo "== 1. the OpenAI SDK through switchyard --request-plane nats"
"$BIN" --discovery-backend file --request-plane nats --http-host 127.0.0.1 --http-port $PORT --shards 2 \
  >"$WORK/switchyard.log" 2>&1 &
SY=$!; PIDS+=($SY)
model_listed $PORT qwen3 || fail "switchyard did not list the NATS worker's model" "$WORK/switchyard.log"
"${CLIENT[@]}" check --base-url "http://127.0.0.1:$PORT/v1" --model qwen3 ||
  fail "the OpenAI SDK through switchyard on NATS" "$WORK/switchyard.log" "$WORK/mocker.log"
# Both shards answer (each publishes on its own connection).
for i in $(seq 1 6); do
  "${CLIENT[@]}" ids --base-url "http://127.0.0.1:$PORT/v1" --model qwen3 --n 2 >/dev/null ||
    fail "request $i through switchyard on NATS" "$WORK/switchyard.log"
done

echo "== 1b. the same requests through dynamo.frontend --request-plane nats"
"$PY" -m dynamo.frontend --discovery-backend file --request-plane nats --http-host 127.0.0.1 \
  --http-port $((PORT + 1)) >"$WORK/dynamo.log" 2>&1 &
DYN=$!; PIDS+=($DYN)
model_listed $((PORT + 1)) qwen3 || fail "dynamo.frontend did not list the NATS worker's model" "$WORK/dynamo.log"
"${CLIENT[@]}" check --base-url "http://127.0.0.1:$((PORT + 1))/v1" --model qwen3 ||
  fail "the OpenAI SDK through dynamo.frontend on NATS" "$WORK/dynamo.log"
kill "$DYN"; wait "$DYN" 2>/dev/null || true

echo "== 2. a client that leaves mid-stream"
metric() { # name: the sum of its samples on switchyard's /metrics ("" when it has none)
  curl -s "127.0.0.1:$PORT/metrics" | awk -v n="$1" '$1 == n || index($1, n "{") == 1 {s += $NF; seen = 1} END {if (seen) print s + 0}'
}
before=$(metric dynamo_frontend_model_cancellation_total)
curl -s -m 0.5 -N "127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
  -d '{"model":"qwen3","messages":[{"role":"user","content":"count"}],"max_tokens":3000,"stream":true}' >/dev/null || true
inflight="" after=""
for _ in $(seq 1 50); do
  inflight=$(metric dynamo_frontend_inflight_requests)
  after=$(metric dynamo_frontend_model_cancellation_total)
  [ "$inflight" = 0 ] && [ "$after" = $((${before:-0} + 1)) ] && break
  sleep 0.1
done
[ "$inflight" = 0 ] || fail "in-flight requests: '$inflight' (not 0) after the client left" "$WORK/switchyard.log"
[ "$after" = $((${before:-0} + 1)) ] ||
  fail "cancellations went from '$before' to '$after' when a client left mid-stream" "$WORK/switchyard.log"
echo "  ok: the abandoned stream was cancelled (cancellations ${before:-0} -> $after, in flight 0)"

echo "== 3. a frontend on the TCP plane in front of the NATS worker"
"$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port $((PORT + 2)) --shards 1 \
  >"$WORK/switchyard-tcp.log" 2>&1 &
TCPFE=$!; PIDS+=($TCPFE)
for _ in $(seq 1 100); do
  grep -q "on the NATS request plane" "$WORK/switchyard-tcp.log" && break
  sleep 0.1
done
grep -q "start the frontend with --request-plane nats" "$WORK/switchyard-tcp.log" ||
  fail "a TCP-plane switchyard did not say why it skips the NATS worker" "$WORK/switchyard-tcp.log"
curl -s "127.0.0.1:$((PORT + 2))/v1/models" | grep -q '"qwen3"' &&
  fail "a TCP-plane switchyard listed a model only a NATS worker serves"
kill "$TCPFE"; wait "$TCPFE" 2>/dev/null || true
echo "  ok: not listed; the log says to start with --request-plane nats"

echo "== 4. the NATS server stopped, then started again"
kill "$NATS"; wait "$NATS" 2>/dev/null || true
code=$(curl -s -o "$WORK/down.json" -w '%{http_code}' -m 40 "127.0.0.1:$PORT/v1/chat/completions" \
  -H 'content-type: application/json' -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":2}') || true
[ "$code" = 503 ] || fail "with NATS down a request answered $code, not 503: $(cat "$WORK/down.json")" "$WORK/switchyard.log"
echo "  ok: 503 with NATS down: $(head -c 160 "$WORK/down.json")"
start_nats
ok=""
for _ in $(seq 1 60); do
  if "${CLIENT[@]}" ids --base-url "http://127.0.0.1:$PORT/v1" --model qwen3 --n 1 >/dev/null 2>&1; then ok=1; break; fi
  sleep 0.5
done
[ -n "$ok" ] || fail "no request succeeded within 30 s of NATS starting again" "$WORK/switchyard.log" "$WORK/mocker.log"
"${CLIENT[@]}" check --base-url "http://127.0.0.1:$PORT/v1" --model qwen3 ||
  fail "the OpenAI SDK after NATS came back" "$WORK/switchyard.log"
echo "== 5. kv routing restores the worker's cached blocks over the NATS request plane"
# The worker's cache holds the prompts above; a kv-mode switchyard started now asks for them
# through the worker's worker_kv_query_source endpoint, published on its NATS subject.
"$BIN" --discovery-backend file --request-plane nats --router-mode kv --http-host 127.0.0.1 \
  --http-port $((PORT + 3)) --shards 1 >"$WORK/switchyard-kv.log" 2>&1 &
KVFE=$!; PIDS+=($KVFE)
model_listed $((PORT + 3)) qwen3 || fail "a kv-mode switchyard did not list the NATS worker's model" "$WORK/switchyard-kv.log"
kvmetric() { curl -s "127.0.0.1:$((PORT + 3))/metrics" | awk -v n="$1" '$1 == n {print $NF}'; }
recovered="" blocks=""
for _ in $(seq 1 100); do
  recovered=$(kvmetric switchyard_kv_ingest_recoveries_total)
  blocks=$(kvmetric switchyard_kv_index_blocks)
  [ "${recovered:-0}" -ge 1 ] && [ "${blocks:-0}" -ge 1 ] && break
  sleep 0.1
done
[ "${recovered:-0}" -ge 1 ] && [ "${blocks:-0}" -ge 1 ] ||
  fail "no tree restored over NATS: recoveries '$recovered', index blocks '$blocks', failures '$(kvmetric switchyard_kv_ingest_recovery_failures_total)'" \
    "$WORK/switchyard-kv.log" "$WORK/mocker.log"
"${CLIENT[@]}" ids --base-url "http://127.0.0.1:$((PORT + 3))/v1" --model qwen3 --n 2 >/dev/null ||
  fail "a request through the kv-mode switchyard on NATS" "$WORK/switchyard-kv.log"
echo "  ok: $recovered recovery answer(s) applied over NATS, $blocks blocks in the index"
echo "PASS: the NATS request plane"
