#!/usr/bin/env bash
# Disaggregated serving (docs/dynamo/disaggregated.md) against real Dynamo 1.6.1 mockers: one
# `--disaggregation-mode decode` and one `--disaggregation-mode prefill` worker (file
# discovery, TCP request plane, ZMQ KV events), in two rounds — the prefill worker without a
# KV rendezvous (the decode leg waits for the prefill answer and carries `prefill_result`),
# then with `--bootstrap-ports` (both legs at once, carrying `bootstrap_info`):
#   1. readiness: with only the decode worker up, switchyard lists no model and answers 503
#      with 1.6.1's text, as dynamo.frontend does (first round only);
#   2. the OpenAI SDK through switchyard --router-mode kv: chat and completions, whole and
#      streamed, complete; both legs counted in switchyard_disaggregated_legs_total;
#   3. the same probe requests through switchyard and through dynamo.frontend, the loopback
#      captured: what each worker receives from switchyard equals what it receives from
#      dynamo.frontend, leg by leg (request ids, rendezvous rooms and hand-off ids aside);
#   4. a client that leaves mid-stream: cancelled, nothing left in flight;
#   5. the prefill worker killed while streams are under way (second round): every request
#      ends (answered, or a clean error status), none hangs; the next request is refused
#      cleanly; a new prefill worker is served again;
#   6. with only the prefill worker up (first round), the model is unknown: 404, as 1.6.1.
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_disagg.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
need tcpdump
scratch_dir
PORT=18660
CLIENT=(env PYTHONUNBUFFERED=1 "$PY" scripts/interop_client.py)

metric() { # port name [label-filter]: the sum of a family's samples ("" when none)
  curl -s "127.0.0.1:$1/metrics" | grep -v '^#' | grep -F "${3:-}" |
    awk -v n="$2" '$1 == n || index($1, n "{") == 1 {s += $NF; seen = 1} END {if (seen) print s + 0}'
}

mocker() { # mode log [args...]: a disaggregated mocker; sets M
  local mode=$1 log=$2; shift 2
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --speedup-ratio 10 \
    --discovery-backend file --request-plane tcp --event-plane zmq --block-size 16 \
    --disaggregation-mode "$mode" "$@" >"$WORK/$log" 2>&1 &
  M=$!; PIDS+=($M)
}

chat() { # port max_tokens [stream]: a chat request's body and status
  curl -s -m 30 "127.0.0.1:$1/v1/chat/completions" -H 'content-type: application/json' \
    -d "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"disaggregated probe\"}],\"max_tokens\":$2,\"stream\":${3:-false}}" \
    -w ' HTTP %{http_code}'
}

round() { # name bootstrap(0|1)
  local name=$1 boot=$2 args=() sy dy
  [ "$boot" = 1 ] && args=(--bootstrap-ports 17991)
  echo "== round $name"
  # Captured from the start: the frontends keep their worker connections open.
  tcpdump -i lo -s 0 -w "$WORK/$name.pcap" >/dev/null 2>&1 &
  local tcpd=$!; PIDS+=($tcpd)
  sleep 0.5
  mocker decode "$name-decode.log"; local decode=$M
  workers_registered 1 "the decode mocker" || fail "the decode mocker did not register" "$WORK/$name-decode.log"
  "$BIN" --discovery-backend file --router-mode kv --http-host 127.0.0.1 --http-port $PORT --shards 2 \
    >"$WORK/$name-switchyard.log" 2>&1 &
  sy=$!; PIDS+=($sy)
  for _ in $(seq 1 100); do curl -s "127.0.0.1:$PORT/live" >/dev/null && break; sleep 0.1; done
  if [ "$boot" = 0 ]; then
    echo "-- 1. only the decode worker"
    # Until its card's model files are loaded the model is unknown (404).
    for _ in $(seq 1 300); do
      out=$(chat $PORT 3)
      case "$out" in *"HTTP 404") sleep 0.1 ;; *) break ;; esac
    done
    curl -s "127.0.0.1:$PORT/v1/models" | grep -q '"qwen3"' &&
      fail "switchyard listed a decode-only model" "$WORK/$name-switchyard.log"
    case "$out" in
      *"Model \`qwen3\` is not ready to serve requests yet. The deployment may still be starting up"*"HTTP 503") ;;
      *) fail "decode only: switchyard answered $out, not 1.6.1's 503" "$WORK/$name-switchyard.log" ;;
    esac
    echo "  ok: not listed, 503: ${out:0:120}"
  fi
  mocker prefill "$name-prefill.log" "${args[@]}"; local prefill=$M
  workers_registered 2 "the prefill mocker" || fail "the prefill mocker did not register" "$WORK/$name-prefill.log"
  model_listed $PORT qwen3 || fail "switchyard did not list the disaggregated model" "$WORK/$name-switchyard.log"

  echo "-- 2. the OpenAI SDK through switchyard"
  "${CLIENT[@]}" check --base-url "http://127.0.0.1:$PORT/v1" --model qwen3 ||
    fail "the OpenAI SDK through switchyard ($name)" "$WORK/$name-switchyard.log" "$WORK/$name-prefill.log" "$WORK/$name-decode.log"
  local p d
  p=$(metric $PORT switchyard_disaggregated_legs_total 'worker_type="prefill",outcome="ok"')
  d=$(metric $PORT switchyard_disaggregated_legs_total 'worker_type="decode",outcome="ok"')
  [ "${p:-0}" -ge 4 ] && [ "${d:-0}" -ge 4 ] ||
    fail "legs counted: prefill '${p}', decode '${d}' (4 requests or more each)" "$WORK/$name-switchyard.log"
  echo "  ok: prefill legs $p, decode legs $d"

  echo "-- 3. what the workers receive: switchyard against dynamo.frontend"
  "$PY" -m dynamo.frontend --discovery-backend file --router-mode kv --http-host 127.0.0.1 \
    --http-port $((PORT + 1)) >"$WORK/$name-dynamo.log" 2>&1 &
  dy=$!; PIDS+=($dy)
  model_listed $((PORT + 1)) qwen3 || fail "dynamo.frontend did not list the model" "$WORK/$name-dynamo.log"
  for t in 31 32; do
    case "$(chat $PORT $t true)" in *"[DONE]"*"HTTP 200") ;; *) fail "probe via switchyard" "$WORK/$name-switchyard.log" ;; esac
    case "$(chat $((PORT + 1)) $((t + 10)) true)" in *"[DONE]"*"HTTP 200") ;; *) fail "probe via dynamo.frontend" "$WORK/$name-dynamo.log" ;; esac
  done
  sleep 1
  kill "$tcpd"; wait "$tcpd" 2>/dev/null || true
  kill "$dy"; wait "$dy" 2>/dev/null || true
  local ports
  ports=$(cat "$DYN_FILE_KV"/v1/instances/* | grep -o '"tcp":"127.0.0.1:[0-9]*' | cut -d: -f3 | sort -u | tr '\n' ' ')
  "$PY" scripts/observe/plane_frames.py "$WORK/$name.pcap" $ports >"$WORK/$name-frames.txt"
  "$PY" scripts/disagg_compare.py "$WORK/$name-frames.txt" "$boot" ||
    fail "the hand-off differs from dynamo.frontend's ($name; frames in $WORK/$name-frames.txt)"

  echo "-- 4. a client that leaves mid-stream"
  local before after inflight
  before=$(metric $PORT dynamo_frontend_model_cancellation_total)
  curl -s -m 0.5 -N "127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"qwen3","messages":[{"role":"user","content":"count"}],"max_tokens":3000,"stream":true}' >/dev/null || true
  for _ in $(seq 1 50); do
    inflight=$(metric $PORT dynamo_frontend_inflight_requests)
    after=$(metric $PORT dynamo_frontend_model_cancellation_total)
    [ "$inflight" = 0 ] && [ "$after" = $((${before:-0} + 1)) ] && break
    sleep 0.1
  done
  [ "$inflight" = 0 ] && [ "$after" = $((${before:-0} + 1)) ] ||
    fail "after a client left: in flight '$inflight', cancellations '$before' -> '$after'" "$WORK/$name-switchyard.log"
  echo "  ok: cancelled (cancellations ${before:-0} -> $after), nothing in flight"

  if [ "$boot" = 1 ]; then
    echo "-- 5. the prefill worker killed while streams are under way"
    # Streams 1-4 are under way (handed off, decoding) when the prefill worker is killed;
    # 5-6 start right after it.
    local pids=() i codes=""
    long() {
      curl -s -m 60 -o "$WORK/kill-$1.out" -w '%{http_code}' -N "127.0.0.1:$PORT/v1/chat/completions" \
        -H 'content-type: application/json' \
        -d "{\"model\":\"qwen3\",\"messages\":[{\"role\":\"user\",\"content\":\"long answer $1\"}],\"max_tokens\":600,\"stream\":true}" \
        >"$WORK/kill-$1.code"
    }
    for i in 1 2 3 4; do long $i & pids+=($!); done
    for _ in $(seq 1 50); do [ -s "$WORK/kill-4.out" ] && break; sleep 0.05; done
    kill -KILL "$prefill"
    for i in 5 6; do long $i & pids+=($!); done
    for p in "${pids[@]}"; do wait "$p" || fail "a request hung or was dropped after the prefill worker died" "$WORK/$name-switchyard.log"; done
    for i in 1 2 3 4 5 6; do codes="$codes $(cat "$WORK/kill-$i.code")"; done
    for c in $codes; do
      case "$c" in 200 | 500 | 502 | 503) ;; *) fail "a request ended with status $c after the prefill worker died" "$WORK/$name-switchyard.log" ;; esac
    done
    for i in 1 2 3 4 5 6; do
      if [ "$(cat "$WORK/kill-$i.code")" = 200 ]; then
        tail -c 300 "$WORK/kill-$i.out" | grep -q '\[DONE\]\|"error"' ||
          fail "stream $i was cut without [DONE] or an error event: $(tail -c 200 "$WORK/kill-$i.out")" "$WORK/$name-switchyard.log"
      fi
    done
    out=$(chat $PORT 3)
    case "$out" in *"HTTP 503") ;; *) fail "with the prefill worker dead a request answered $out, not 503" "$WORK/$name-switchyard.log" ;; esac
    for _ in $(seq 1 100); do
      inflight=$(metric $PORT dynamo_frontend_inflight_requests)
      [ "$inflight" = 0 ] && break
      sleep 0.1
    done
    [ "$inflight" = 0 ] || fail "requests left in flight after the prefill worker died: $inflight" "$WORK/$name-switchyard.log"
    echo "  ok: statuses$codes, then 503: ${out:0:100}; nothing in flight"
    mocker prefill "$name-prefill2.log" --bootstrap-ports 17992; prefill=$M
    local ok=""
    for _ in $(seq 1 120); do
      case "$(chat $PORT 3)" in *"HTTP 200") ok=1; break ;; esac
      sleep 0.5
    done
    [ -n "$ok" ] || fail "a new prefill worker was not served within 60 s" "$WORK/$name-switchyard.log" "$WORK/$name-prefill2.log"
    echo "  ok: a new prefill worker serves"
  else
    echo "-- 6. only the prefill worker"
    kill "$decode"; wait "$decode" 2>/dev/null || true
    rm -f "$DYN_FILE_KV"/v1/instances/*backend* "$DYN_FILE_KV"/v1/mdc/*backend*
    local code=""
    for _ in $(seq 1 50); do
      code=$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$PORT/v1/chat/completions" -H 'content-type: application/json' \
        -d '{"model":"qwen3","messages":[{"role":"user","content":"hi"}],"max_tokens":2}')
      [ "$code" = 404 ] && break
      sleep 0.2
    done
    [ "$code" = 404 ] || fail "prefill only: switchyard answered $code, not 404" "$WORK/$name-switchyard.log"
    echo "  ok: 404"
  fi
  for p in "$sy" "$prefill" "$decode"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$DYN_FILE_KV"
}

round sequential 0
round bootstrap 1
echo "PASS: disaggregated serving"
