#!/usr/bin/env bash
# Observes 1.6.1's conditional disaggregation: `dynamo.frontend --router-mode kv
# --router-conditional-disagg [--router-conditional-disagg-config JSON]` in front of a real
# `dynamo.mocker --disaggregation-mode prefill` and decode workers (file discovery, TCP request
# plane, ZMQ event plane, block size 16), and writes what it saw under $OUT (default
# /tmp/obs-cdisagg):
#   validation.txt   each invalid flag combination: exit code and the last lines of stderr;
#   resp/TAG.txt     every probe's HTTP answer (headers and body); a probe is told apart by
#                    its max_tokens (TAG), which the decode leg carries in stop_conditions;
#   fe-PHASE.log     each frontend's log (DYN_LOG=$LOGSPEC: the "Conditional disagg
#                    decision" debug lines and "Conditional disagg routing to decode worker");
#   frames.txt       every request-plane frame a worker received (plane_frames.py), from a
#                    loopback capture (lo.pcap) of the whole run;
#   probes.txt       per probe: phase, prompt length, the frontend's decision, the legs each
#                    worker received, nvext.worker_id, usage, timing keys; then the bodies of a
#                    normal decode leg, a bypassed request and an aggregated request side by
#                    side (analyze.py, written here);
#   summary.txt      the short version.
# Phases (one frontend each, on its own port, the workers kept):
#   real     the real decode mocker (it publishes no KV events: 1.6.1 turns them off for
#            decode engines), default policy: nothing can be bypassed;
#   real-pload0  {"policy": "prefill_load", "prefill_busy_threshold": 0.0} with the real decode
#            mocker: a load-based bypass needs no decode cache (what the real decode mocker does
#            with a request that has neither prefill_result nor bootstrap_info);
#   then the real decode worker is replaced by two "KV decode" workers: a real dynamo.mocker
#   registered as a decode worker (--disaggregation-mode decode) whose engine runs as an
#   aggregated one so that it publishes KV events (scripts/kv_decode_worker.py), plus an
#   aggregated mocker serving model qwen3agg (namespace agg) for the aggregated comparison;
#   default  isl_bounding defaults (2048, 0.7): fresh / repeated / extended prompts,
#            completions and chat, streamed and whole, with and without nvext; the same
#            prompt on the aggregated model; a client annotation next to the bypass one; the
#            Responses API on a bypassed prompt; the venv's OpenAI SDK streaming a bypassed
#            and a normal request (summary.txt: "sdk TAG");
#   wide     {"eff_isl_threshold": 100000, "eff_isl_ratio_threshold": 1.0};
#   zero     {"eff_isl_threshold": 0};
#   dgate0 / dgate1   {"decode_busy_threshold": 0.0} and 1.0;
#   pload    {"policy": "prefill_load"} with --router-queue-threshold 0.5, concurrent long
#            prompts against a slow prefill worker (PREFILL_SPEEDUP, default 0.2);
#   isload   {"policy": "isl_or_load"} with --router-queue-threshold 0.5, the same;
#   pload0   {"policy": "prefill_load", "prefill_busy_threshold": 0.0}, no queue threshold.
# A whole run takes about 6 minutes. /work/notes/research-conditional-disagg.md was written
# from its output.
#
# Needs root (unshare -n), tcpdump, the Dynamo venv (scripts/install-dynamo.sh) and the qwen3
# files (scripts/fetch-models.sh).
# Usage: SWITCHYARD_BIN=/bin/true timeout 1800 bash scripts/observe/conditional_disagg.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-cdisagg}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need tcpdump
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
export DYN_FILE_KV=$OUT/kv
LOGSPEC=${LOGSPEC:-info,dynamo_llm::kv_router=debug,dynamo_kv_router=debug}
PREFILL_SPEEDUP=${PREFILL_SPEEDUP:-0.2}
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill $p 2>/dev/null; done; wait 2>/dev/null' EXIT
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }
mkdir -p "$OUT/resp" "$OUT/prompts"
strip() { sed 's/\x1b\[[0-9;]*m//g' "$@"; }

# ---- the stand-in decode worker and the prompts ------------------------------------------
# The stand-in decode worker: scripts/kv_decode_worker.py (a real mocker whose engine runs as an
# aggregated one, so that it publishes KV events).
cp scripts/kv_decode_worker.py "$OUT/kvdecode.py"
# prompt NAME SEED N [SEED N ...]: token ids, a concatenation of seeded random runs
prompt() {
  local name=$1; shift
  "$PY" - "$@" >"$OUT/prompts/$name.json" <<'EOF'
import json, random, sys
ids, a = [], sys.argv[1:]
for i in range(0, len(a), 2):
    r = random.Random(int(a[i])); ids += [r.randrange(1000, 30000) for _ in range(int(a[i + 1]))]
print(json.dumps(ids))
EOF
}
LONGTEXT="Conditional disaggregation probe. $(for i in $(seq 1 40); do printf 'Sentence number %d talks about routers, prefill workers, decode workers and caches. ' "$i"; done)"

# ---- requests --------------------------------------------------------------------------------
# comp TAG PORT MODEL PROMPT STREAM [nvext]: /v1/completions with token ids; TAG = max_tokens
comp() {
  local tag=$1 port=$2 model=$3 p=$4 stream=$5 nv=${6-'"nvext":{"extra_fields":["worker_id","timing"]},'}
  echo "{\"model\":\"$model\",$nv\"prompt\":$(cat "$OUT/prompts/$p.json"),\"max_tokens\":$tag,\"stream\":$stream}" >"$OUT/resp/$tag.req"
  curl -s -m 120 -N -D - "127.0.0.1:$port/v1/completions" -H 'content-type: application/json' \
    -d @"$OUT/resp/$tag.req" >"$OUT/resp/$tag.txt"
  echo "$PHASE comp $p stream=$stream" >"$OUT/resp/$tag.meta"
}
# chat TAG PORT STREAM [TEXT]
chat() {
  local tag=$1 port=$2 stream=$3 text=${4:-$LONGTEXT}
  echo "{\"model\":\"qwen3\",\"nvext\":{\"extra_fields\":[\"worker_id\",\"timing\"]},\"messages\":[{\"role\":\"user\",\"content\":\"$text\"}],\"max_tokens\":$tag,\"stream\":$stream}" >"$OUT/resp/$tag.req"
  curl -s -m 120 -N -D - "127.0.0.1:$port/v1/chat/completions" -H 'content-type: application/json' \
    -d @"$OUT/resp/$tag.req" >"$OUT/resp/$tag.txt"
  echo "$PHASE chat ${#text}chars stream=$stream" >"$OUT/resp/$tag.meta"
}
# burst FIRST-TAG N SEED: N concurrent fresh 3000-token prompts
burst() { # first-tag n seed-base
  local t=$1 n=$2 s=$3 i pids=()
  for i in $(seq 0 $((n - 1))); do prompt "b$((s + i))" $((s + i)) 3000; done
  for i in $(seq 0 $((n - 1))); do comp $((t + i)) $P qwen3 "b$((s + i))" false & pids+=($!); done
  for p in "${pids[@]}"; do wait "$p"; done
}
# brief TAG: one line about a probe's answer
brief() {
  local f=$OUT/resp/$1.txt
  printf '  %s: %s %s | %s\n' "$1" "$(head -1 "$f" | tr -d '\r')" \
    "$(grep -o '"usage":{[^}]*}[^}]*}' "$f" | tail -1)" "$(grep -o '"worker_id":{[^}]*}' "$f" | tail -1)" | tee -a "$S"
}
decisions() { # the decision lines of the current frontend
  strip "$OUT/fe-$PHASE.log" | grep -E 'Conditional disagg|conditional_disagg|bypass' |
    sed -E 's/^([^ ]*) .*(dynamo_llm::[a-z_:]*): /\1 \2: /' >"$OUT/decisions-$PHASE.txt"
}

# ---- processes ------------------------------------------------------------------------------
mocker() { # name mode [args...]
  local name=$1 mode=$2; shift 2
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --request-plane tcp --event-plane zmq --block-size 16 --disaggregation-mode "$mode" "$@" \
    >"$OUT/$name.log" 2>&1 &
  M=$!; PIDS+=($M)
}
kvdecode() { # name
  "$PY" "$OUT/kvdecode.py" --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --request-plane tcp --event-plane zmq --block-size 16 --disaggregation-mode decode \
    --speedup-ratio 10 >"$OUT/$1.log" 2>&1 &
  M=$!; PIDS+=($M)
}
PORT=18730
frontend() { # phase args...: a new frontend on a new port; sets FE, P
  [ -n "${FE:-}" ] && { kill "$FE"; wait "$FE" 2>/dev/null; }
  PHASE=$1; shift
  PORT=$((PORT + 1)); P=$PORT
  log "== phase $PHASE: dynamo.frontend --router-mode kv $*"
  DYN_LOG=$LOGSPEC "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port $P \
    --discovery-backend file --router-mode kv "$@" >"$OUT/fe-$PHASE.log" 2>&1 &
  FE=$!; PIDS+=($FE)
  model_listed $P qwen3 || { log "frontend $PHASE did not list qwen3"; return 1; }
  for _ in $(seq 1 100); do grep -q 'Prefill router target activated' "$OUT/fe-$PHASE.log" && break; sleep 0.2; done
  sleep 2 # the KV event subscriptions
}

tcpdump -i lo -s 0 -w "$OUT/lo.pcap" >/dev/null 2>&1 & PIDS+=($!); TCPDUMP=$!
sleep 0.5

# ---- 0. validation ----------------------------------------------------------------------------
V=$OUT/validation.txt
check() { # label args...
  local label=$1 rc; shift
  timeout 40 "$PY" -m dynamo.frontend --http-host 127.0.0.1 --http-port 18729 --discovery-backend file "$@" \
    >"$OUT/v.out" 2>&1
  rc=$?
  { echo "### $label"; echo "args: $*"; echo "exit: $rc"; strip "$OUT/v.out" | grep -v '^\s*$' | tail -n 4; echo; } >>"$V"
}
CD=(--router-mode kv --router-conditional-disagg)
check "unknown key" "${CD[@]}" --router-conditional-disagg-config '{"bogus": 1, "alpha": 2}'
check "not JSON" "${CD[@]}" --router-conditional-disagg-config 'nope'
check "JSON array" "${CD[@]}" --router-conditional-disagg-config '[1]'
check "ratio 1.01" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_threshold": 100000, "eff_isl_ratio_threshold": 1.01}'
check "ratio -0.1" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_ratio_threshold": -0.1}'
check "ratio string" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_ratio_threshold": "0.5"}'
check "ratio null" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_ratio_threshold": null}'
check "threshold -1" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_threshold": -1}'
check "threshold 1.5" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_threshold": 1.5}'
check "threshold true" "${CD[@]}" --router-conditional-disagg-config '{"eff_isl_threshold": true}'
check "policy unknown" "${CD[@]}" --router-conditional-disagg-config '{"policy": "always"}'
check "policy number" "${CD[@]}" --router-conditional-disagg-config '{"policy": 3}'
check "prefill_busy -1" "${CD[@]}" --router-conditional-disagg-config '{"prefill_busy_threshold": -1}'
check "decode_busy -0.5" "${CD[@]}" --router-conditional-disagg-config '{"decode_busy_threshold": -0.5}'
check "decode_busy string" "${CD[@]}" --router-conditional-disagg-config '{"decode_busy_threshold": "x"}'
check "config without the flag" --router-mode kv --router-conditional-disagg-config '{"eff_isl_threshold": 10}'
check "flag without kv mode" --router-conditional-disagg
check "flag with round-robin" --router-mode round-robin --router-conditional-disagg
check "flag with --no-router-kv-events" "${CD[@]}" --no-router-kv-events
check "prefill_load without queue threshold" "${CD[@]}" --router-conditional-disagg-config '{"policy": "prefill_load"}'
check "isl_or_load without queue threshold" "${CD[@]}" --router-conditional-disagg-config '{"policy": "isl_or_load"}'
DYN_ROUTER_CONDITIONAL_DISAGG_CONFIG='{"bogus": 1}' check "env DYN_ROUTER_CONDITIONAL_DISAGG_CONFIG bogus" "${CD[@]}"
DYN_ROUTER_CONDITIONAL_DISAGG=true check "env DYN_ROUTER_CONDITIONAL_DISAGG=true, round-robin" --router-mode round-robin
log "validation: $(grep -c '^###' "$V") cases in $V"

# ---- 1. the real pair -------------------------------------------------------------------------
mocker prefill prefill --speedup-ratio "$PREFILL_SPEEDUP"; PREFILL=$M
mocker decode-real decode --speedup-ratio 10; DREAL=$M
workers_registered 2 "prefill + real decode" || true
cp -r "$DYN_FILE_KV" "$OUT/kv-real"
log "real decode mocker's card: $(cat "$OUT"/kv-real/v1/mdc/*backend* | grep -o '"enable_local_indexer":[a-z]*,"kv_event_publishing_enabled":[a-z]*')"
prompt pa 100 1000
frontend real --router-conditional-disagg
comp 101 $P qwen3 pa false; sleep 2
comp 102 $P qwen3 pa false; sleep 1
chat 103 $P false "hello"
for t in 101 102 103; do brief $t; done
decisions
log "$(grep -c 'bypass=true' "$OUT/decisions-real.txt") bypassed; $(strip "$OUT/fe-real.log" | grep -o 'KV-event publishing is disabled.*' | head -1 | cut -c1-400)"
# A load-based bypass needs no decode cache: what the real decode mocker does with a request
# that carries neither prefill_result nor bootstrap_info.
frontend real-pload0 --router-conditional-disagg --router-conditional-disagg-config '{"policy": "prefill_load", "prefill_busy_threshold": 0.0}'
burst 104 3 500
for t in 104 105 106; do brief $t; done
decisions
kill "$DREAL"; wait "$DREAL" 2>/dev/null
rm -f "$DYN_FILE_KV"/v1/instances/*backend*

# ---- 2. KV decode workers + an aggregated worker -----------------------------------------------
kvdecode decode-a; DA=$M
kvdecode decode-b; DB=$M
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3agg --endpoint dyn://agg.backend.generate \
  --discovery-backend file --request-plane tcp --event-plane zmq --block-size 16 --speedup-ratio 10 \
  >"$OUT/agg.log" 2>&1 & PIDS+=($!)
workers_registered 4 "2 KV decode + agg + prefill" || true
sleep 3
cp -r "$DYN_FILE_KV" "$OUT/kv-main"
log "workers: $(cat "$DYN_FILE_KV"/v1/instances/*generate* | grep -o '"namespace":"[a-z]*","instance_id":[0-9]*,"transport":{"tcp":"[^"]*' | sed 's/"transport":{"tcp":"//' | tr '\n' ' ')"

# default policy
frontend default --router-conditional-disagg
model_listed $P qwen3agg || true
prompt p1 1 1000; prompt p1b 11 1000
comp 111 $P qwen3 p1 false; sleep 1.5                      # fresh: ratio 1.0, not bypassed
comp 112 $P qwen3 p1 false; sleep 1                        # repeated: eff 8, bypassed
comp 113 $P qwen3 p1 true; sleep 1                         # repeated, streamed
comp 114 $P qwen3 p1b true; sleep 1.5                      # fresh, streamed (normal disagg stream)
comp 115 $P qwen3 p1 true ''; sleep 1                      # repeated, streamed, no nvext
comp 116 $P qwen3 p1b false ''; sleep 1                    # repeated, whole, no nvext
chat 117 $P false; sleep 1.5                               # fresh chat
chat 118 $P false; sleep 1                                 # repeated chat, whole
chat 119 $P true; sleep 1                                  # repeated chat, streamed
chat 120 $P false "hello"; sleep 1                         # short, fresh
chat 121 $P false "hello"; sleep 1                         # short, repeated (no full block)
prompt p3 3 3000; prompt p3x 3 3000 4 2500
comp 122 $P qwen3 p3 false; sleep 2                        # 3000 fresh
comp 123 $P qwen3 p3x false; sleep 1                       # eff 2508 >= 2048 (ratio 0.456): not
prompt p5 5 320; prompt p5a 5 320 6 200; prompt p5b 5 320 7 800; prompt p5c 5 320 8 700
comp 124 $P qwen3 p5 false; sleep 1.5
comp 125 $P qwen3 p5a false; sleep 1                       # eff 200/520 = 0.385: bypassed
comp 126 $P qwen3 p5b false; sleep 1                       # eff 800/1120 = 0.714: not
comp 127 $P qwen3 p5c false; sleep 1                       # eff 700/1020 = 0.686: bypassed
prompt p7 12 2064
comp 128 $P qwen3 p7 false; sleep 1.5                      # 2064 tokens = 129 blocks
prompt p7x 12 2064 13 2048
comp 129 $P qwen3 p7x false; sleep 1                       # eff 2048 = threshold: not
prompt p7y 12 2064 14 2047
comp 130 $P qwen3 p7y false; sleep 1                       # eff 2047: bypassed
comp 131 $P qwen3agg p1 false; sleep 1                     # aggregated, first
comp 132 $P qwen3agg p1 false; sleep 1                     # aggregated, repeated
comp 133 $P qwen3agg p1 true; sleep 1                      # aggregated, streamed
prompt p8 15 1000; prompt p8b 16 1000
comp 134 $P qwen3 p8 false ''; sleep 1                     # fresh, whole, no nvext
comp 135 $P qwen3 p8b true ''; sleep 1                     # fresh, streamed, no nvext
for t in $(seq 111 135); do brief $t; done
# The OpenAI SDK (the venv's openai) on a bypassed stream: completions and chat.
sdk() { # tag kind [prompt]
  "$PY" - "$P" "$OUT/prompts/${3:-p1}.json" "$1" "$2" "$LONGTEXT" <<'EOF2'
import json, sys, openai
port, prompt, tag, kind, text = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4], sys.argv[5]
c = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none")
n = 0
try:
    if kind == "comp":
        s = c.completions.create(model="qwen3", prompt=json.load(open(prompt)), max_tokens=tag, stream=True)
    else:
        s = c.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": text}], max_tokens=tag, stream=True)
    for ch in s:
        n += 1
    print(f"  sdk {tag} {kind}: ok, {n} chunks")
except Exception as e:
    import traceback
    where = [f"{f.filename.split('site-packages/')[-1]}:{f.lineno} {f.line}" for f in traceback.extract_tb(e.__traceback__) if "openai/" in f.filename][-2:]
    print(f"  sdk {tag} {kind}: {type(e).__name__} after {n} chunks: {str(e)[:300]} at {where}")
EOF2
}
sdk 136 comp | tee -a "$S"; sleep 1
sdk 137 chat | tee -a "$S"; sleep 1
# A client annotation next to the bypass one; the Responses API on a bypassed prompt.
comp 139 $P qwen3 p1 true '"nvext":{"annotations":["my-note"]},'; sleep 1
echo "{\"model\":\"qwen3\",\"input\":\"$LONGTEXT\",\"max_output_tokens\":140,\"stream\":true}" >"$OUT/resp/140.req"
curl -s -m 120 -N -D - "127.0.0.1:$P/v1/responses" -H 'content-type: application/json' \
  -d @"$OUT/resp/140.req" >"$OUT/resp/140.txt"
echo "$PHASE responses ${#LONGTEXT}chars stream=true" >"$OUT/resp/140.meta"; sleep 1
for t in 139 140; do brief $t; done
prompt p10 17 1000
sdk 138 comp p10 | tee -a "$S"; sleep 1                     # control: a fresh (not bypassed) stream
curl -s 127.0.0.1:$P/metrics >"$OUT/metrics-default.txt"
log "metrics naming bypass/conditional: $(grep -iE 'bypass|conditional' "$OUT/metrics-default.txt" | grep -v '^#' | head | tr '\n' ';')"
decisions

# a new frontend learns the decode workers' caches? (p1 cached on a decode worker already)
frontend wide --router-conditional-disagg --router-conditional-disagg-config '{"eff_isl_threshold": 100000, "eff_isl_ratio_threshold": 1.0}'
comp 141 $P qwen3 p1 false; sleep 1                        # cached before this frontend started
prompt p9 9 3000; prompt p9x 9 3000 10 2500
comp 142 $P qwen3 p9 false; sleep 2                        # fresh: ratio 1.0 is not < 1.0
comp 143 $P qwen3 p9x false; sleep 1                       # eff 2508: bypassed here
for t in 141 142 143; do brief $t; done
decisions

frontend zero --router-conditional-disagg --router-conditional-disagg-config '{"eff_isl_threshold": 0}'
comp 151 $P qwen3 p9 false; sleep 1
comp 152 $P qwen3 p9 false; sleep 1
for t in 151 152; do brief $t; done
decisions

frontend dgate0 --router-conditional-disagg --router-conditional-disagg-config '{"decode_busy_threshold": 0.0}'
comp 161 $P qwen3 p9 false; sleep 1
comp 162 $P qwen3 p9 false; sleep 1
for t in 161 162; do brief $t; done
decisions
frontend dgate1 --router-conditional-disagg --router-conditional-disagg-config '{"decode_busy_threshold": 1.0}'
comp 163 $P qwen3 p9 false; sleep 1
comp 164 $P qwen3 p9 false; sleep 1
for t in 163 164; do brief $t; done
decisions

# load-aware policies: concurrent fresh long prompts against the slow prefill worker
frontend pload --router-conditional-disagg --router-queue-threshold 0.5 --router-conditional-disagg-config '{"policy": "prefill_load"}'
burst 171 5 1000; sleep 1
comp 176 $P qwen3 p1 false; sleep 1                        # cached, prefill calm: not bypassed
for t in $(seq 171 176); do brief $t; done
decisions
frontend isload --router-conditional-disagg --router-queue-threshold 0.5 --router-conditional-disagg-config '{"policy": "isl_or_load"}'
burst 181 5 2000; sleep 1
comp 186 $P qwen3 p1 false; sleep 1                        # cached: bypassed by isl
for t in $(seq 181 186); do brief $t; done
decisions
frontend pload0 --router-conditional-disagg --router-conditional-disagg-config '{"policy": "prefill_load", "prefill_busy_threshold": 0.0}'
burst 191 3 3000; sleep 1
for t in $(seq 191 193); do brief $t; done
decisions

kill "$FE"; wait "$FE" 2>/dev/null
sleep 1
kill $TCPDUMP; wait $TCPDUMP 2>/dev/null
PORTS=$(cat "$OUT"/kv-real/v1/instances/* "$OUT"/kv-main/v1/instances/* | grep -o '"tcp":"127.0.0.1:[0-9]*' | cut -d: -f3 | sort -u | tr '\n' ' ')
"$PY" scripts/observe/plane_frames.py "$OUT/lo.pcap" $PORTS >"$OUT/frames.txt" 2>&1
log "frames: $(grep -c '^REQUEST' "$OUT/frames.txt") requests in $OUT/frames.txt"

# ---- analysis ---------------------------------------------------------------------------------
cat >"$OUT/analyze.py" <<'EOF'
"""Per probe (resp/TAG.*): the decision line, the legs the workers received, nvext, usage."""
import glob, json, os, re, sys
out = sys.argv[1]
legs = {}  # request id -> [(endpoint, headers, control, body)]
cur = None
for line in open(f"{out}/frames.txt"):
    if line.startswith("REQUEST "):
        p = line.split(" path=", 1)[1]
        ep, h = p.split(" headers=", 1)
        cur = {"endpoint": ep, "headers": json.loads(h)}
    elif line.startswith("  control: ") and cur is not None:
        cur["control"] = json.loads(line[len("  control: "):])
    elif line.startswith("  body: ") and cur is not None:
        cur["body"] = json.loads(line[len("  body: "):])
        if cur["endpoint"].endswith("/generate"):
            legs.setdefault(cur["headers"].get("request-id"), []).append(cur)
        cur = None
dec = {}
for f in glob.glob(f"{out}/decisions-*.txt"):
    for line in open(f):
        m = re.search(r'request_id="?([0-9a-f-]{36})', line)
        if m and "Conditional disagg decision " in line:
            dec[m.group(1)] = re.sub(r".*Conditional disagg decision ", "", line.strip())
            dec[m.group(1)] = re.sub(r" method=POST.*", "", dec[m.group(1)])
def kind(ep):
    return "prefill" if "/prefill/" in ep else ("agg" if "/agg/" in ep else "decode")
def worker(ep):
    return ep.split("/")[0]
samples = {}
for f in sorted(glob.glob(f"{out}/resp/*.txt"), key=lambda x: int(os.path.basename(x)[:-4])):
    tag = os.path.basename(f)[:-4]
    text = open(f, errors="replace").read()
    meta = open(f[:-4] + ".meta").read().strip()
    m = re.search(r'"id":"(?:chatcmpl|cmpl)-([0-9a-f-]{36})"', text)
    rid = m.group(1) if m else None
    print(f"=== {tag}: {meta}  id={rid}")
    print(f"  status: {text.splitlines()[0] if text else '(none)'}")
    if rid in dec:
        print(f"  decision: {dec[rid]}")
        w = re.search(r" worker_id=(\d+)", dec[rid]).group(1)
        d = re.findall(r'"decode_worker_id":(\d+)', text)
        if d:
            print(f"  peeked decode worker {w} {'==' if d[-1] == w else '!='} answering decode worker {d[-1]}")
    for leg in legs.get(rid, []):
        b = leg["body"]
        print(f"  leg {kind(leg['endpoint'])} -> {worker(leg['endpoint'])}: headers={sorted(leg['headers'])} "
              f"control={json.dumps(leg.get('control'))[:200]} body keys={sorted(b) if isinstance(b, dict) else type(b).__name__} "
              f"prompt_len={len(b.get('token_ids', [])) if isinstance(b, dict) else '?'}")
        if isinstance(b, dict):
            for k in ("prefill_result", "bootstrap_info", "routing", "annotations", "disaggregated_params", "kv_hint"):
                if k in b:
                    print(f"    {k}: {json.dumps(b[k])[:600]}")
            samples.setdefault(tag, []).append((kind(leg["endpoint"]), leg))
    ev = re.findall(r"^event: .*$|^: .*$", text, re.M)
    if ev:
        print(f"  SSE event/comment lines: {ev[:6]}")
    for k in ("usage", "worker_id"):
        vals = re.findall(r'"%s":(\{[^{}]*(?:\{[^{}]*\}[^{}]*)*\}|null)' % k, text)
        if vals:
            print(f"  {k}: {vals[-1]}")
    tm = re.findall(r'"timing":(\{[^{}]*\})', text)
    if tm:
        print(f"  timing keys: {sorted(json.loads(tm[-1]))}")
# side by side: a normal decode leg (111), the bypassed request (112), the aggregated one (132)
def body(tag, k):
    for kk, leg in samples.get(tag, []):
        if kk == k:
            return leg
    return None
trio = [("normal decode leg 111", body("111", "decode")), ("normal prefill leg 111", body("111", "prefill")),
        ("bypassed 112", body("112", "decode")), ("aggregated 132", body("132", "agg"))]
print("\n=== bodies side by side (request ids, rooms aside)")
for name, leg in trio:
    if not leg:
        print(f"--- {name}: missing"); continue
    b = dict(leg["body"])
    if "token_ids" in b:
        b["token_ids"] = f"<{len(b['token_ids'])} ids>"
    print(f"--- {name}: endpoint={leg['endpoint']}\n  headers={json.dumps(leg['headers'])}\n  control={json.dumps(leg.get('control'))}")
    print("  body=" + json.dumps(b, sort_keys=True))
names = [n for n, l in trio if l]
bodies = {n: l["body"] for n, l in trio if l}
keys = sorted(set().union(*[set(b) for b in bodies.values()]))
print("\n=== fields that differ")
for k in keys:
    vals = {n: json.dumps(bodies[n].get(k, "<absent>"), sort_keys=True)[:300] for n in names}
    if k == "token_ids":
        vals = {n: f"<{len(bodies[n].get(k, []))} ids>" for n in names}
    if len(set(vals.values())) > 1:
        print(f"  {k}:")
        for n in names:
            print(f"    {n}: {vals[n]}")
EOF
"$PY" "$OUT/analyze.py" "$OUT" >"$OUT/probes.txt" 2>&1
log "probes: $OUT/probes.txt; decisions: $(cat "$OUT"/decisions-*.txt | grep -c 'Conditional disagg decision ') lines, $(cat "$OUT"/decisions-*.txt | grep -c 'bypass=true') bypassed"
echo "written to $OUT"
