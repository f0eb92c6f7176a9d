#!/usr/bin/env bash
# The non-chat routes against Dynamo 1.6.1's recorded answers: scripts/surfaces_worker.py (a
# recording worker on Dynamo's own Python runtime, one model per surface, as the venv's vLLM
# and SGLang handlers answer) behind switchyard, and Dynamo 1.6.1's exchanges with the same
# worker (tests/data/surfaces/exchanges-1.6.1.jsonl, recorded by scripts/observe/surfaces.sh)
# replayed case by case by scripts/surfaces_replay.py: the status, the body and what the
# worker received must be 1.6.1's. Replayed: model retrieval (slashed ids) and readiness, and
# /v1/embeddings for models whose workers take text. Cases of token-input embedding models
# (12x, 13x) and the other surfaces are not served yet.
#
# Runs in a loopback-only network namespace (root), like the other interop scripts.
# Usage: bash scripts/interop_surfaces.sh   (SWITCHYARD_BIN=<binary>, else a release build)
set -euo pipefail
cd "$(dirname "$0")/.."

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18511
REC="$WORK/record.jsonl"

t0=$SECONDS
"$PY" scripts/surfaces_worker.py --model-dir "$MODEL_DIR" --record "$REC" --unready >"$WORK/worker.log" 2>&1 &
PIDS+=("$!")
"$BIN" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT \
  >"$WORK/frontend.log" 2>&1 &
PIDS+=("$!")
for m in emb emb-alias org/emb-slash img cls rr; do
  model_listed $PORT "$m" || fail "switchyard did not list $m" "$WORK/worker.log" "$WORK/frontend.log"
done
# cls-wait (decode workers waiting for prefill workers) is committed a moment after the rest.
for _ in $(seq 1 100); do
  [ "$(curl -s -o /dev/null -w '%{http_code}' 127.0.0.1:$PORT/v1/models/cls-wait)" = 503 ] && break
  sleep 0.1
done

# Cases: 002-004 retrieval and readiness (004-model-post: 1.6.1's bare 405 against our JSON
# one; 002/003 of emb-tok: a token-input embedding model switchyard does not serve yet),
# 101-114 and 140-178 embeddings of a Text model (166: a raw control character, which 1.6.1
# escapes and retries; 111: x-request-id).
"$PY" scripts/surfaces_replay.py --base-url "http://127.0.0.1:$PORT" --record "$REC" \
  --cases '00[234]-.*|1(0[1-9]|1[0-4]|[4-7][0-9])-.*' \
  --skip 004-model-post,004-models-post,002-model-emb-tok,003-ready-emb-tok,166-emb-control-char \
  >"$WORK/replay.log" 2>&1 || { cat "$WORK/replay.log" >&2; fail "switchyard answered otherwise than 1.6.1" "$WORK/frontend.log"; }
cat "$WORK/replay.log"

# The route variables, as 1.6.1's phase 2 had them: the models routes and embeddings moved,
# the files and batches variables set, which change nothing in 1.6.1 (1030-1032: Route not
# found either way), and DYN_DISABLE_FRONTEND_NVEXT (1010: embeddings' nvext dropped).
PORT2=18512
DYN_HTTP_SVC_EMB_PATH=/custom/embeddings DYN_HTTP_SVC_MODELS_PATH=/custom/models \
  DYN_HTTP_SVC_BATCHES_PATH=/custom/batches DYN_HTTP_SVC_FILES_PATH=/custom/files \
  DYN_DISABLE_FRONTEND_NVEXT=1 \
  "$BIN" --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT2 \
  >"$WORK/frontend2.log" 2>&1 &
PIDS+=("$!")
for _ in $(seq 1 600); do curl -s "127.0.0.1:$PORT2/custom/models" | grep -q '"emb"' && break; sleep 0.1; done
"$PY" scripts/surfaces_replay.py --base-url "http://127.0.0.1:$PORT2" --record "$REC" \
  --cases '10(0[234]|1[01]|3[012])-.*' >"$WORK/replay2.log" 2>&1 ||
  { cat "$WORK/replay2.log" >&2; fail "switchyard with moved routes answered otherwise than 1.6.1" "$WORK/frontend2.log"; }
cat "$WORK/replay2.log"
# And the moved embeddings route serves a plain request.
got=$(curl -s "127.0.0.1:$PORT2/custom/embeddings" -H 'content-type: application/json' -d '{"model":"emb","input":"hello"}')
want='{"object":"list","model":"emb","data":[{"index":0,"object":"embedding","embedding":[0.5,-0.25,0.0,1.0,1.5,0.125,-2.0,0.0625]}],"usage":{"prompt_tokens":1,"total_tokens":1}}'
[ "$got" = "$want" ] || fail "POST /custom/embeddings answered $got" "$WORK/frontend2.log"
echo "ok: the replayed cases answered as Dynamo 1.6.1 answered them, in $((SECONDS - t0)) s"
