#!/usr/bin/env bash
# The parser parity run: echo workers (`switchyard mock-worker --echo token`), one per tool-call
# parser, reasoning parser and combination that Dynamo 1.6.1 accepts, behind one frontend;
# scripts/parsers_probe.py puts tests/data/parsers/corpus.json through it and writes what came
# back, one JSON line per request.
#
# Usage: bash scripts/parsers_record.sh dynamo|switchyard OUT.jsonl
#   ONLY=t-hermes,r-qwen3,c-harmony+gpt_oss   only these settings (default: every one)
#   ECHO_MODEL=gptoss                         the echo workers' model files (default: qwen3)
#   dynamo:     python -m dynamo.frontend 1.6.1 (what tests/data/parsers/observed-1.6.1.jsonl holds)
#   switchyard: $SWITCHYARD_BIN (default: a release build)
# Needs root (a loopback-only network namespace) and the Dynamo venv (scripts/install-dynamo.sh).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ "${1:-}" != --inside ]; then
  [ -z "${ECHO_MODEL:-}" ] || bash scripts/fetch-models.sh "$ECHO_MODEL" >/dev/null
  FRONTEND=${1:?dynamo or switchyard}
  OUT=$(realpath -m "${2:?output file}")
  export FRONTEND OUT
fi
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
PORT=18510

# The parser names 1.6.1 accepts, from its own runtime.
mapfile -t TOOLS < <("$PY" -c 'import dynamo._core as c; print("\n".join(sorted(c.get_tool_parser_names())))')
mapfile -t REASONING < <("$PY" -c 'import dynamo._core as c; print("\n".join(sorted(c.get_reasoning_parser_names())))')
mapfile -t COMBOS < <("$PY" -c 'import json,sys; [print(c["tool"]+"+"+c["reasoning"]) for c in json.load(open(sys.argv[1]))["combos"]]' tests/data/parsers/corpus.json)

# All settings, then one batch of them at a time: a frontend with many models opens several
# file watchers per model, and inotify allows 128 instances per user by default.
SETTINGS=()
for t in "${TOOLS[@]}"; do SETTINGS+=("t-$t|--tool-call-parser $t"); done
for r in "${REASONING[@]}"; do SETTINGS+=("r-$r|--reasoning-parser $r"); done
for c in "${COMBOS[@]}"; do SETTINGS+=("c-$c|--tool-call-parser ${c%+*} --reasoning-parser ${c#*+}"); done
if [ -n "${ONLY:-}" ]; then
  kept=()
  for s in "${SETTINGS[@]}"; do [[ ",$ONLY," == *",${s%%|*},"* ]] && kept+=("$s"); done
  SETTINGS=("${kept[@]}")
fi
[ -n "${ECHO_MODEL:-}" ] && MODEL_DIR=$(dirname "$MODEL_DIR")/$ECHO_MODEL
BATCH=${BATCH:-12}
: >"$OUT"

run_batch() { # settings...
  local pids=() models=() i=0 s name
  for s in "$@"; do
    name=${s%%|*}
    i=$((i + 1))
    # shellcheck disable=SC2086 # the parser flags split on purpose
    "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name "$name" --echo token --fast \
      --endpoint "dynamo.echo$i.generate" ${s#*|} >>"$WORK/workers.log" 2>&1 &
    pids+=("$!")
    models+=("$name")
  done
  if [ "$FRONTEND" = dynamo ]; then
    "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 --http-port $PORT \
      >"$WORK/frontend.log" 2>&1 &
  else
    "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port $PORT >"$WORK/frontend.log" 2>&1 &
  fi
  pids+=("$!")
  PIDS+=("${pids[@]}")
  local want=${#models[@]} got=0
  for _ in $(seq 1 480); do
    got=$( (curl -s "127.0.0.1:$PORT/v1/models" || true) | "$PY" -c 'import json,sys
try: print(len(json.load(sys.stdin)["data"]))
except Exception: print(0)')
    [ "$got" -ge "$want" ] && break
    sleep 0.25
  done
  [ "$got" -ge "$want" ] || {
    echo "FAIL: $FRONTEND lists $got of $want models" >&2
    grep -iE "error|warn" "$WORK/frontend.log" | tail -5 >&2
    exit 1
  }
  "$PY" scripts/parsers_probe.py --url "http://127.0.0.1:$PORT" --corpus tests/data/parsers/corpus.json \
    --models "$(IFS=,; echo "${models[*]}")" --out "$WORK/batch.jsonl"
  cat "$WORK/batch.jsonl" >>"$OUT"
  kill "${pids[@]}" 2>/dev/null || true
  wait "${pids[@]}" 2>/dev/null || true
  rm -rf "$DYN_FILE_KV"
}

for ((b = 0; b < ${#SETTINGS[@]}; b += BATCH)); do
  run_batch "${SETTINGS[@]:b:BATCH}"
done
echo "ok: $(wc -l <"$OUT") answers from $FRONTEND in $OUT"
