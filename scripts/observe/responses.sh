#!/usr/bin/env bash
# Observes the OpenAI Responses API (`POST /v1/responses` and its neighbours) of the real
# Dynamo 1.6.1 frontend (`python -m dynamo.frontend`), for docs/dynamo/responses-api.md.
# Observation only: nothing of switchyard is built or run.
#
# Phase 1: one frontend in front of two recording workers on Dynamo's own Python runtime:
#   * `qwen3`: scripts/fidelity_worker.py (always answers " Hello world"; records the request);
#   * `qwen3-tools`: a scratch worker written below (records the request too) registered with
#     tool_call_parser=hermes and reasoning_parser=qwen3 that answers by a marker in the last
#     user turn (TOOLME: text + one hermes tool call, TOOLME2: two tool calls, THINKME:
#     <think>...</think> then text, FAILNOW: raises at once, FAILLATER: raises after one
#     token, else " Hello world"), cut to stop_conditions.max_tokens with finish "length".
#   Cases: plain and streamed responses, echoed fields, the prompt the worker gets for each
#   input shape (decoded with the model's tokenizer.json), tool calls and reasoning in the
#   output, max_output_tokens, the neighbouring routes, errors, and the real `openai` SDK.
# Phase 2: a frontend with DYN_HTTP_SVC_RESPONSES_PATH set (does the route move?).
# Phase 3: the real `dynamo.mocker` with --reasoning (random tokens, its own errors).
#
# Everything runs in a loopback-only network namespace (Dynamo's publishers bind 0.0.0.0),
# on HTTP ports $PORT and $PORT+1 (default 18600/18601), with its own file store.
# Output: one text file per case in $OBS/out (request, status, headers, body, decoded worker
# prompts), logs in $OBS/logs. Needs root (unshare -n), the Dynamo venv and the qwen3 files
# (scripts/install-dynamo.sh, scripts/fetch-models.sh qwen3).
# Usage: bash scripts/observe/responses.sh        (OBS=/tmp/obs-responses PORT=18600)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
if [ "${1:-}" != --inside ]; then
  exec unshare -n bash "$0" --inside
fi
ip link set lo up

OBS=${OBS:-/tmp/obs-responses}
PORT=${PORT:-18600}
VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
PY="$VENV/bin/python"
MODEL_DIR=${SWITCHYARD_MODELS:-$HOME/.cache/switchyard-models}/qwen3
OUT=$OBS/out
LOGS=$OBS/logs
rm -rf "$OBS/kv" "$OUT" "$LOGS" "$OBS"/rec-*.jsonl
mkdir -p "$OBS/kv" "$OUT" "$LOGS"
export DYN_FILE_KV="$OBS/kv"
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

# ---------------------------------------------------------------------------------------------
# Scratch helpers (written under $OBS, not part of the repo)
cat >"$OBS/script_worker.py" <<'EOF'
"""Scratch recording worker with scripted answers (see scripts/observe/responses.sh)."""
import argparse, asyncio, json, os
from tokenizers import Tokenizer
from dynamo.llm import ModelInput, ModelType, WorkerType, ModelRuntimeConfig, register_model
from dynamo.runtime import DistributedRuntime

ANSWERS = [
    ("TOOLME2", '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>\n'
                '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'),
    ("TOOLME", 'Let me check.<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'),
    ("THINKME", '<think>\nThe user greets me.\n</think>\n\nHello world'),
    ("", " Hello world"),
]

p = argparse.ArgumentParser()
p.add_argument("--model-path", required=True)
p.add_argument("--model-name", required=True)
p.add_argument("--endpoint", default="dynamo.script.generate")
p.add_argument("--record", required=True)
p.add_argument("--tool-call-parser")
p.add_argument("--reasoning-parser")
args = p.parse_args()


async def main():
    tok = Tokenizer.from_file(os.path.join(args.model_path, "tokenizer.json"))
    rec = open(args.record, "a")

    async def generate(request, context=None):
        rec.write(json.dumps(request, default=repr) + "\n")
        rec.flush()
        prompt = tok.decode(request.get("token_ids") or [], skip_special_tokens=False)
        # the marker is looked for in the last user turn only
        last = prompt.rsplit("<|im_start|>user", 1)[-1]
        if "FAILNOW" in last:
            raise RuntimeError("scripted failure before any token")
        text = next(a for m, a in ANSWERS if m in last)
        ids = tok.encode(text, add_special_tokens=False).ids
        mx = (request.get("stop_conditions") or {}).get("max_tokens")
        finish = "stop"
        if mx is not None and mx < len(ids):
            ids, finish = ids[:mx], "length"
        n = len(request.get("token_ids") or [])
        for i, t in enumerate(ids):
            if i == 1 and "FAILLATER" in last:
                raise RuntimeError("scripted failure after one token")
            yield {"token_ids": [t]}
        yield {"token_ids": [], "finish_reason": finish,
               "completion_usage": {"prompt_tokens": n, "completion_tokens": len(ids),
                                    "total_tokens": n + len(ids)}}

    rt = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    ep = rt.endpoint(args.endpoint)
    rc = ModelRuntimeConfig()
    if args.tool_call_parser:
        rc.tool_call_parser = args.tool_call_parser
    if args.reasoning_parser:
        rc.reasoning_parser = args.reasoning_parser
    await register_model(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, ep,
                         args.model_path, args.model_name, worker_type=WorkerType.Aggregated,
                         runtime_config=rc)
    await ep.serve_endpoint(generate)

asyncio.run(main())
EOF

cat >"$OBS/helper.py" <<'EOF'
"""prompt REC SKIP: decode the records of REC after its first SKIP lines.
sse FILE: the SSE events of a captured body, one line each.
sdk BASE_URL: the real openai SDK against the frontend."""
import json, sys, traceback

def prompt(path, skip, model_dir):
    from tokenizers import Tokenizer
    tok = Tokenizer.from_file(model_dir + "/tokenizer.json")
    lines = open(path).read().splitlines()[int(skip):]
    for line in lines:
        r = json.loads(line)
        print("--- worker received (decoded token_ids, %d tokens):" % len(r["token_ids"]))
        print(json.dumps(tok.decode(r["token_ids"], skip_special_tokens=False)))
        for key in ("stop_conditions", "sampling_options", "output_options"):
            print("%s (non-null): %s" % (key, json.dumps({k: v for k, v in r[key].items() if v is not None})))
        rest = {k: v for k, v in r.items() if k not in ("model", "token_ids", "stop_conditions",
                "sampling_options", "output_options", "eos_token_ids", "mdc_sum")}
        print("other fields:", json.dumps(rest))

def sse(path):
    raw = open(path, "rb").read().decode()
    body = raw.split("\r\n\r\n", 1)[1] if "\r\n\r\n" in raw else raw
    for block in body.split("\n\n"):
        if not block.strip():
            continue
        ev = None
        data = None
        for ln in block.split("\n"):
            if ln.startswith("event: "):
                ev = ln[7:]
            elif ln.startswith("data: "):
                data = ln[6:]
        if data == "[DONE]":
            print("(no event line) data: [DONE]")
            continue
        d = json.loads(data)
        extra = {k: v for k, v in d.items() if k not in ("type", "sequence_number", "response", "item", "part")}
        inner = ""
        if "response" in d:
            inner = "response.status=%s output=%d usage=%s" % (d["response"]["status"], len(d["response"]["output"]), json.dumps(d["response"].get("usage")))
        if "item" in d:
            inner = "item=" + json.dumps(d["item"])
        if "part" in d:
            inner = "part=" + json.dumps(d["part"])
        print("event=%s type=%s seq=%s %s %s" % (ev, d.get("type"), d.get("sequence_number"), json.dumps(extra), inner))

def sdk(base):
    import openai
    print("openai SDK", openai.__version__)
    c = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
    def attempt(name, fn):
        print("=== " + name)
        try:
            fn()
            print("OK")
        except Exception as e:
            print("EXCEPTION %s: %s" % (type(e).__name__, e))
            traceback.print_exc(limit=3, file=sys.stdout)
    def create():
        r = c.responses.create(model="qwen3", input="Say hello", instructions="Be brief.")
        print("id", r.id, "status", r.status, "output_text", repr(r.output_text))
        print("usage", r.usage)
    attempt("responses.create", create)
    def create_tools():
        r = c.responses.create(model="qwen3-tools", input="TOOLME please",
            tools=[{"type": "function", "name": "get_weather", "description": "Weather",
                    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}])
        for o in r.output:
            print("output item", o.type, o.model_dump_json())
    attempt("responses.create with tools (qwen3-tools TOOLME)", create_tools)
    def stream_ctx():
        with c.responses.stream(model="qwen3", input="Say hello") as s:
            for ev in s:
                print("event", ev.type, getattr(ev, "sequence_number", None))
            f = s.get_final_response()
        print("final", f.id, f.status, repr(f.output_text), f.usage)
    attempt("with responses.stream(...) as s: ...; s.get_final_response()", stream_ctx)
    def stream_ctx_final_only():
        with c.responses.stream(model="qwen3", input="Say hello") as s:
            f = s.get_final_response()
        print("final", f.id, f.status, repr(f.output_text))
    attempt("with responses.stream(...) as s: s.get_final_response() (no iteration)", stream_ctx_final_only)
    def stream_tools():
        with c.responses.stream(model="qwen3-tools", input="TOOLME now",
                tools=[{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}}]) as s:
            for ev in s:
                print("event", ev.type, getattr(ev, "sequence_number", None))
            f = s.get_final_response()
        for o in f.output:
            print("final output item", o.model_dump_json())
    attempt("responses.stream with a tool call (qwen3-tools TOOLME)", stream_tools)
    def stream_think():
        with c.responses.stream(model="qwen3-tools", input="THINKME") as s:
            for ev in s:
                print("event", ev.type, getattr(ev, "sequence_number", None))
            f = s.get_final_response()
        print("final", f.model_dump_json())
    attempt("responses.stream with reasoning (qwen3-tools THINKME)", stream_think)
    def create_stream():
        for ev in c.responses.create(model="qwen3", input="Say hello", stream=True):
            print("event", ev.type, ev.sequence_number)
    attempt("responses.create(stream=True) iteration", create_stream)
    def incomplete():
        r = c.responses.create(model="qwen3-tools", input="THINKME", max_output_tokens=3)
        print(r.status, r.incomplete_details, r.usage)
    attempt("responses.create max_output_tokens=3 (incomplete)", incomplete)
    def count():
        r = c.responses.input_tokens.count(model="qwen3", input="Say hello")
        print(r)
    attempt("responses.input_tokens.count", count)
    def retrieve():
        print(c.responses.retrieve("resp_0123"))
    attempt("responses.retrieve", retrieve)
    def delete():
        print(c.responses.delete("resp_0123"))
    attempt("responses.delete", delete)
    def prev():
        print(c.responses.create(model="qwen3", input="hi", previous_response_id="resp_0123"))
    attempt("responses.create previous_response_id", prev)
    def unknown():
        print(c.responses.create(model="nope", input="hi"))
    attempt("responses.create unknown model", unknown)
    def unknown_stream():
        with c.responses.stream(model="nope", input="hi") as s:
            print(s.get_final_response())
    attempt("responses.stream unknown model", unknown_stream)

def sdk_more(base, which):
    import openai
    c = openai.OpenAI(base_url=base, api_key="none", max_retries=0)
    tools = [{"type": "function", "name": "get_weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}},
             {"type": "function", "name": "get_time", "parameters": {"type": "object", "properties": {"tz": {"type": "string"}}}}]
    cases = {
        "two-tool-calls": dict(model="qwen3-tools", input="TOOLME2", tools=tools),
        "incomplete": dict(model="qwen3-tools", input="Say hello", max_output_tokens=1),
        "incomplete-in-think": dict(model="qwen3-tools", input="THINKME", max_output_tokens=3),
        "worker-fails-at-once": dict(model="qwen3-tools", input="FAILNOW"),
        "worker-fails-later": dict(model="qwen3-tools", input="FAILLATER"),
        "mocker-failed": dict(model="qwen3-mock", input="Say hello"),
    }
    for name in which.split(","):
        print("=== responses.stream " + name)
        try:
            with c.responses.stream(**cases[name]) as s:
                for ev in s:
                    print("event", ev.type, getattr(ev, "sequence_number", None))
                f = s.get_final_response()
            print("final", f.status, f.incomplete_details, [o.type for o in f.output], f.error)
            print("OK")
        except Exception as e:
            print("EXCEPTION %s: %s" % (type(e).__name__, e))
        print("=== responses.create " + name)
        try:
            r = c.responses.create(**cases[name])
            print("result", r.status, r.incomplete_details, [o.type for o in r.output], r.error)
            print("OK")
        except Exception as e:
            print("EXCEPTION %s: %s" % (type(e).__name__, e))

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "prompt":
        prompt(sys.argv[2], sys.argv[3], sys.argv[4])
    elif cmd == "sse":
        sse(sys.argv[2])
    elif cmd == "sdk":
        sdk(sys.argv[2])
    elif cmd == "sdk-more":
        sdk_more(sys.argv[2], sys.argv[3])
EOF

# ---------------------------------------------------------------------------------------------
wait_models() { # port models...: until /v1/models on port lists every model
  local port=$1; shift
  for _ in $(seq 1 600); do
    local all ok=1 m
    all=$(curl -s "127.0.0.1:$port/v1/models" || true)
    for m in "$@"; do [[ $all == *"\"$m\""* ]] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  echo "FAIL: $* not listed on $port" >&2; tail -n 30 "$LOGS"/*.log >&2; exit 1
}

reclines() { [ -f "$1" ] && wc -l <"$1" || echo 0; }

# req NAME METHOD PATH [BODY [CONTENT-TYPE]]: one HTTP exchange into $OUT/NAME.txt (the raw
# response in $OUT/NAME.raw), then the prompts the recording workers got for it.
req() {
  local name=$1 method=$2 path=$3 body=${4-} ctype=${5:-application/json}
  local f="$OUT/$name.txt" n1 n2
  n1=$(reclines "$OBS/rec-qwen3.jsonl"); n2=$(reclines "$OBS/rec-tools.jsonl")
  local args=(-sS -i -N -X "$method")
  if [ -n "$body" ]; then args+=(-H "content-type: $ctype" --data-binary "$body"); fi
  curl "${args[@]}" "http://127.0.0.1:${RPORT:-$PORT}$path" >"$OUT/$name.raw" 2>&1 || true
  {
    echo "> $method $path"
    [ -n "$body" ] && echo "> content-type: $ctype" && echo "> ${body:0:2000}"
    echo
    tr -d '\r' <"$OUT/$name.raw" | grep -v '^date:'
    echo
    if grep -q '^content-type: text/event-stream' <(tr -d '\r' <"$OUT/$name.raw"); then
      echo "--- SSE events:"
      "$PY" "$OBS/helper.py" sse "$OUT/$name.raw"
    fi
    [ -f "$OBS/rec-qwen3.jsonl" ] && "$PY" "$OBS/helper.py" prompt "$OBS/rec-qwen3.jsonl" "$n1" "$MODEL_DIR"
    [ -f "$OBS/rec-tools.jsonl" ] && "$PY" "$OBS/helper.py" prompt "$OBS/rec-tools.jsonl" "$n2" "$MODEL_DIR"
  } >"$f"
  echo "  $name: $(head -n 1 <(tr -d '\r' <"$OUT/$name.raw"))"
}

TOOL_W='{"type":"function","name":"get_weather","description":"Get the weather","parameters":{"type":"object","properties":{"city":{"type":"string"}},"required":["city"]}}'
TOOL_T='{"type":"function","name":"get_time","parameters":{"type":"object","properties":{"tz":{"type":"string"}}},"strict":false}'

# ---------------------------------------------------------------------------------------------
echo "phase 1: recording workers + dynamo.frontend on $PORT"
: >"$OBS/rec-qwen3.jsonl"; : >"$OBS/rec-tools.jsonl"
"$PY" "$REPO/scripts/fidelity_worker.py" --model-path "$MODEL_DIR" --model-name qwen3 \
  --endpoint dynamo.qwen.generate --record "$OBS/rec-qwen3.jsonl" >"$LOGS/worker-qwen3.log" 2>&1 &
PIDS+=("$!")
"$PY" "$OBS/script_worker.py" --model-path "$MODEL_DIR" --model-name qwen3-tools \
  --endpoint dynamo.script.generate --record "$OBS/rec-tools.jsonl" \
  --tool-call-parser hermes --reasoning-parser qwen3 >"$LOGS/worker-tools.log" 2>&1 &
PIDS+=("$!")
"$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$PORT" >"$LOGS/frontend.log" 2>&1 &
FE=$!
PIDS+=("$FE")
wait_models "$PORT" qwen3 qwen3-tools

echo "1. basic shapes"
req 101-basic POST /v1/responses '{"model":"qwen3","input":"Say hello"}'
req 102-basic-stream POST /v1/responses '{"model":"qwen3","input":"Say hello","stream":true}'
req 103-stream-false POST /v1/responses '{"model":"qwen3","input":"Say hello","stream":false}'
req 104-echo-many POST /v1/responses '{"model":"qwen3","instructions":"Be brief.","input":"Say hello","temperature":0.5,"top_p":0.9,"max_output_tokens":50,"store":true,"metadata":{"k":"v"},"tools":['"$TOOL_W"'],"tool_choice":"auto"}'
req 105-echo-many-stream POST /v1/responses '{"model":"qwen3","instructions":"Be brief.","input":"Say hello","temperature":0.5,"top_p":0.9,"max_output_tokens":50,"store":true,"metadata":{"k":"v"},"tools":['"$TOOL_W"'],"tool_choice":"auto","stream":true}'
# one optional field at a time: accepted? echoed? forwarded to the worker?
i=0
while IFS= read -r field; do
  i=$((i + 1))
  req "$(printf '11%02d' $i)-field" POST /v1/responses '{"model":"qwen3","input":"Say hello",'"$field"'}'
done <<'EOF'
"temperature":0
"top_p":0.5
"max_output_tokens":7
"store":false
"metadata":{"a":"1","b":"2"}
"user":"user-1"
"parallel_tool_calls":false
"tool_choice":"none"
"tool_choice":"required"
"tool_choice":{"type":"function","name":"get_weather"}
"top_logprobs":2
"truncation":"auto"
"text":{"format":{"type":"json_object"}}
"text":{"format":{"type":"json_schema","name":"s","schema":{"type":"object","properties":{"a":{"type":"string"}}}}}
"text":{"verbosity":"low"}
"reasoning":{"effort":"low","summary":"auto"}
"service_tier":"default"
"include":["reasoning.encrypted_content"]
"background":true
"background":false
"prompt_cache_key":"pck"
"safety_identifier":"sid"
"max_tool_calls":3
"conversation":"conv_123"
"prompt":{"id":"pmpt_123"}
"stream_options":{"include_obfuscation":false}
"nvext":{"annotations":["request_id"]}
"chat_template_args":{"enable_thinking":false}
"thinking_token_budget":5
"seed":42
"stop":["x"]
EOF

echo "2. prompts the worker gets"
req 201-instructions-string POST /v1/responses '{"model":"qwen3","instructions":"You are terse.","input":"What is 2+2?"}'
req 202-items-user-string POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"What is 2+2?"}]}'
req 203-items-roles POST /v1/responses '{"model":"qwen3","input":[{"role":"system","content":"SYS"},{"role":"developer","content":"DEV"},{"role":"user","content":"U1"},{"role":"assistant","content":"A1"},{"role":"user","content":"U2"}]}'
req 204-items-input-text-parts POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":[{"type":"input_text","text":"part one"},{"type":"input_text","text":"part two"}]}]}'
req 205-items-typed-messages POST /v1/responses '{"model":"qwen3","input":[{"type":"message","role":"system","content":[{"type":"input_text","text":"SYS-A"},{"type":"input_text","text":"SYS-B"}]},{"type":"message","role":"user","content":[{"type":"input_text","text":"U1"}]},{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"A1","annotations":[]}]},{"type":"message","role":"user","content":"U2"}]}'
req 206-instructions-and-system POST /v1/responses '{"model":"qwen3","instructions":"INSTR","input":[{"role":"system","content":"SYS"},{"role":"user","content":"U"}]}'
req 207-developer-only POST /v1/responses '{"model":"qwen3","input":[{"role":"developer","content":"DEV"},{"role":"user","content":"U"}]}'
req 208-tools-offered POST /v1/responses '{"model":"qwen3","input":"Weather in Paris?","tools":['"$TOOL_W"','"$TOOL_T"']}'
req 209-tools-choice-none POST /v1/responses '{"model":"qwen3","input":"Weather in Paris?","tools":['"$TOOL_W"'],"tool_choice":"none"}'
req 210-tools-choice-required POST /v1/responses '{"model":"qwen3","input":"Weather in Paris?","tools":['"$TOOL_W"'],"tool_choice":"required"}'
req 211-tools-choice-named POST /v1/responses '{"model":"qwen3","input":"Weather in Paris?","tools":['"$TOOL_W"','"$TOOL_T"'],"tool_choice":{"type":"function","name":"get_time"}}'
req 212-function-call-roundtrip POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"Weather in Paris?"},{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}"},{"type":"function_call_output","call_id":"call_1","output":"{\"temp\":21}"}],"tools":['"$TOOL_W"']}'
req 213-function-call-with-ids POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"Weather?"},{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Checking.","annotations":[]}]},{"type":"function_call","id":"fc_1","call_id":"call_1","name":"get_weather","arguments":"{\"city\":\"Paris\"}","status":"completed"},{"type":"function_call","id":"fc_2","call_id":"call_2","name":"get_time","arguments":"{}","status":"completed"},{"type":"function_call_output","call_id":"call_1","output":"sunny"},{"type":"function_call_output","call_id":"call_2","output":"noon"}]}'
req 214-function-output-parts POST /v1/responses '{"model":"qwen3","input":[{"type":"function_call","call_id":"call_1","name":"get_weather","arguments":"{}"},{"type":"function_call_output","call_id":"call_1","output":[{"type":"input_text","text":"out-a"},{"type":"input_text","text":"out-b"}]}]}'
req 215-reasoning-item POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"I thought."}]},{"role":"assistant","content":"A1"},{"role":"user","content":"U2"}]}'
req 216-reasoning-item-content POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"deep thought"}],"encrypted_content":"xyz"},{"role":"user","content":"U2"}]}'
req 217-item-reference POST /v1/responses '{"model":"qwen3","input":[{"type":"item_reference","id":"msg_1"},{"role":"user","content":"U"}]}'
req 218-input-image POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":[{"type":"input_text","text":"what is this"},{"type":"input_image","image_url":"https://example.com/a.png"}]}]}'
req 219-input-file POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":[{"type":"input_file","file_id":"file_1"}]}]}'
req 220-easy-assistant-parts POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"role":"assistant","content":[{"type":"output_text","text":"A1"}]},{"role":"user","content":"U2"}]}'
req 221-empty-string-input POST /v1/responses '{"model":"qwen3","input":""}'
req 222-instructions-only-empty-list POST /v1/responses '{"model":"qwen3","instructions":"I","input":[]}'
req 223-sampling POST /v1/responses '{"model":"qwen3","input":"hi","temperature":0.3,"top_p":0.7,"max_output_tokens":9,"top_logprobs":3}'
req 224-hosted-tool POST /v1/responses '{"model":"qwen3","input":"hi","tools":[{"type":"web_search"}]}'
req 225-custom-tool POST /v1/responses '{"model":"qwen3","input":"hi","tools":[{"type":"custom","name":"c1"}]}'
req 226-chat-template-args POST /v1/responses '{"model":"qwen3","input":"hi","chat_template_args":{"enable_thinking":false}}'
req 227-tool-call-item-no-tools POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{\"a\":1}"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'

# function_call items: they join the assistant message next to them; alone they make an
# assistant message with null content, which Qwen3's template cannot render
req 228-fc-after-assistant-text POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"role":"assistant","content":"X"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 229-fc-before-assistant-output POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"type":"function_call","id":"fc_1","call_id":"c1","name":"f","arguments":"{}","status":"completed"},{"type":"message","role":"assistant","id":"msg_1","status":"completed","content":[{"type":"output_text","text":"Let me check.","annotations":[]}]},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 230-fc-after-empty-assistant POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"role":"assistant","content":""},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 231-fc-last-after-text POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"role":"assistant","content":"X"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"}]}'
req 232-fc-args-not-json POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"role":"assistant","content":"X"},{"type":"function_call","call_id":"c1","name":"f","arguments":"not json"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 233-fco-parts-after-text POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"role":"assistant","content":"X"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":[{"type":"input_text","text":"a"},{"type":"input_text","text":"b"}]}]}'
req 234-fco-alone POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 235-chat-null-content-toolcalls POST /v1/chat/completions '{"model":"qwen3","messages":[{"role":"user","content":"U"},{"role":"assistant","content":null,"tool_calls":[{"id":"c1","type":"function","function":{"name":"f","arguments":"{}"}}]},{"role":"tool","tool_call_id":"c1","content":"R"}]}'
req 243-fc-after-later-user POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"role":"assistant","content":"X"},{"role":"user","content":"U2"},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
# reasoning items become the reasoning_content of the assistant turn
req 236-reasoning-summary-then-assistant-last POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"SUMMARY"}]},{"role":"assistant","content":"A1"}]}'
req 237-reasoning-content-last POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"CONTENT"}]}]}'
req 238-reasoning-then-fc POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"type":"reasoning","id":"rs_1","summary":[],"content":[{"type":"reasoning_text","text":"CONTENT"}]},{"type":"function_call","call_id":"c1","name":"f","arguments":"{}"},{"type":"function_call_output","call_id":"c1","output":"R"}]}'
req 239-output-message-last POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"type":"message","role":"assistant","content":[{"type":"output_text","text":"A","annotations":[]}]}]}'
# system / developer: only the leading run is merged
req 240-system-in-middle POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U1"},{"role":"system","content":"S1"},{"role":"developer","content":"S2"},{"role":"user","content":"U2"}]}'
req 241-instr-dev-sys POST /v1/responses '{"model":"qwen3","instructions":"I","input":[{"role":"developer","content":"D"},{"role":"system","content":"S"},{"role":"user","content":"U"}]}'
req 242-chat-two-systems POST /v1/chat/completions '{"model":"qwen3","messages":[{"role":"system","content":"S1"},{"role":"system","content":"S2"},{"role":"user","content":"U"}]}'

echo "3. tool calls, reasoning and length in the output (qwen3-tools)"
req 301-toolcall POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME weather in Paris","tools":['"$TOOL_W"']}'
req 302-toolcall-stream POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME weather in Paris","tools":['"$TOOL_W"'],"stream":true}'
req 303-two-toolcalls POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME2","tools":['"$TOOL_W"','"$TOOL_T"']}'
req 304-two-toolcalls-stream POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME2","tools":['"$TOOL_W"','"$TOOL_T"'],"stream":true}'
req 305-toolcall-no-tools-offered POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME"}'
req 306-toolcall-choice-none POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME","tools":['"$TOOL_W"'],"tool_choice":"none"}'
req 307-think POST /v1/responses '{"model":"qwen3-tools","input":"THINKME"}'
req 308-think-stream POST /v1/responses '{"model":"qwen3-tools","input":"THINKME","stream":true}'
req 309-length POST /v1/responses '{"model":"qwen3-tools","input":"Say hello","max_output_tokens":1}'
req 310-length-stream POST /v1/responses '{"model":"qwen3-tools","input":"Say hello","max_output_tokens":1,"stream":true}'
req 311-length-in-think POST /v1/responses '{"model":"qwen3-tools","input":"THINKME","max_output_tokens":3}'
req 312-length-in-think-stream POST /v1/responses '{"model":"qwen3-tools","input":"THINKME","max_output_tokens":3,"stream":true}'
req 313-length-in-toolcall POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME","tools":['"$TOOL_W"'],"max_output_tokens":8}'
req 314-length-in-toolcall-stream POST /v1/responses '{"model":"qwen3-tools","input":"TOOLME","tools":['"$TOOL_W"'],"max_output_tokens":8,"stream":true}'
req 315-think-disabled POST /v1/responses '{"model":"qwen3-tools","input":"THINKME","chat_template_args":{"enable_thinking":false}}'

req 316-worker-fails-at-once POST /v1/responses '{"model":"qwen3-tools","input":"FAILNOW"}'
req 317-worker-fails-at-once-stream POST /v1/responses '{"model":"qwen3-tools","input":"FAILNOW","stream":true}'
req 318-worker-fails-later POST /v1/responses '{"model":"qwen3-tools","input":"FAILLATER"}'
req 319-worker-fails-later-stream POST /v1/responses '{"model":"qwen3-tools","input":"FAILLATER","stream":true}'

echo "4. routes next to /v1/responses"
req 401-input-tokens POST /v1/responses/input_tokens '{"model":"qwen3","input":"Say hello"}'
req 402-input-tokens-instr POST /v1/responses/input_tokens '{"model":"qwen3","instructions":"Be brief.","input":"Say hello"}'
req 403-input-tokens-nomodel POST /v1/responses/input_tokens '{"input":"Say hello"}'
req 404-input-tokens-unknown-model POST /v1/responses/input_tokens '{"model":"nope","input":"Say hello"}'
req 405-input-tokens-noinput POST /v1/responses/input_tokens '{"model":"qwen3"}'
req 406-input-tokens-empty POST /v1/responses/input_tokens '{}'
req 407-input-tokens-tools POST /v1/responses/input_tokens '{"model":"qwen3","input":"Say hello","tools":['"$TOOL_W"']}'
req 408-input-tokens-badjson POST /v1/responses/input_tokens '{bad'
req 409-input-tokens-get GET /v1/responses/input_tokens
# the count is an estimate, not the tokenizer: probes that pin it down
{
  for body in '{"input":"a"}' '{"input":"ab"}' '{"input":"abcd"}' '{"input":"abcde"}' '{"input":""}' \
    '{"input":"\u65e5\u672c\u8a9e"}' '{"input":"xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"}' \
    '{"instructions":"","input":"a"}' '{"instructions":"abcd","input":"abcd"}' \
    '{"input":[{"role":"user","content":""}]}' '{"input":[]}' \
    '{"input":[{"role":"user","content":"abcd"},{"role":"user","content":"abcd"}]}' \
    '{"input":[{"role":"assistant","content":"abcd"}]}' '{"input":[{"role":"developer","content":"abcd"}]}' \
    '{"input":[{"role":"user","content":[{"type":"input_text","text":"abcd"},{"type":"input_text","text":"abcd"}]}]}' \
    '{"input":[{"type":"function_call","call_id":"cccc","name":"f","arguments":"{}"}]}' \
    '{"input":[{"type":"function_call_output","call_id":"cccc","output":"abcd"}]}' \
    '{"input":[{"type":"reasoning","id":"rs_1","summary":[{"type":"summary_text","text":"abcd"}]}]}' \
    '{"input":"a","tools":[{"type":"function","name":"f"}]}' \
    '{"input":"a","tools":[{"type":"function","name":"f","description":"abcd"}]}' \
    '{"input":"a","tools":[{"type":"function","name":"f","parameters":{"a":1,"b":2}}]}'; do
    printf '%s -> %s\n' "$body" "$(curl -s -H 'content-type: application/json' -d "$body" "127.0.0.1:$PORT/v1/responses/input_tokens")"
  done
} >"$OUT/409b-input-tokens-probes.txt"
echo "  409b-input-tokens-probes: $(wc -l <"$OUT/409b-input-tokens-probes.txt") probes"
req 410-get-response GET /v1/responses/resp_0123456789
req 411-delete-response DELETE /v1/responses/resp_0123456789
req 412-cancel POST /v1/responses/resp_0123456789/cancel '{}'
req 413-input-items GET /v1/responses/resp_0123456789/input_items
req 414-get-collection GET /v1/responses
req 415-previous-response-id POST /v1/responses '{"model":"qwen3","input":"hi","previous_response_id":"resp_0123456789"}'
req 416-previous-response-id-stream POST /v1/responses '{"model":"qwen3","input":"hi","previous_response_id":"resp_0123456789","stream":true}'
req 417-previous-response-id-null POST /v1/responses '{"model":"qwen3","input":"hi","previous_response_id":null}'
req 418-store-true POST /v1/responses '{"model":"qwen3","input":"hi","store":true}'
ID=$(tr -d '\r' <"$OUT/418-store-true.raw" | tail -n 1 | "$PY" -c 'import json,sys; print(json.load(sys.stdin)["id"])')
req 419-get-stored GET "/v1/responses/$ID"
req 420-compact POST /v1/responses/compact '{"model":"qwen3","input":"hi"}'
curl -s "127.0.0.1:$PORT/openapi.json" >"$OUT/421-openapi.json"
"$PY" - "$OUT/421-openapi.json" >"$OUT/421-openapi.txt" <<'EOF'
import json, sys
d = json.load(open(sys.argv[1]))
print("paths:", sorted(d["paths"]))
for p, v in d["paths"].items():
    if "respons" in p:
        print(p, json.dumps(v, indent=1))
EOF
echo "  421-openapi: $(grep -c responses "$OUT/421-openapi.txt") lines"

echo "5. errors"
req 501-bad-json POST /v1/responses '{bad json'
req 502-missing-input POST /v1/responses '{"model":"qwen3"}'
req 503-missing-model POST /v1/responses '{"input":"hi"}'
req 504-unknown-model POST /v1/responses '{"model":"nope","input":"hi"}'
req 505-unknown-model-stream POST /v1/responses '{"model":"nope","input":"hi","stream":true}'
req 506-unknown-field POST /v1/responses '{"model":"qwen3","input":"hi","bogus":1}'
req 507-bad-item-type POST /v1/responses '{"model":"qwen3","input":[{"type":"weird","x":1}]}'
req 508-bad-role POST /v1/responses '{"model":"qwen3","input":[{"role":"wizard","content":"hi"}]}'
req 509-bad-part-type POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":[{"type":"bogus_part","text":"x"}]}]}'
req 510-max-output-tokens-0 POST /v1/responses '{"model":"qwen3","input":"hi","max_output_tokens":0}'
req 511-max-output-tokens-neg POST /v1/responses '{"model":"qwen3","input":"hi","max_output_tokens":-1}'
req 512-input-number POST /v1/responses '{"model":"qwen3","input":42}'
req 513-input-empty-list POST /v1/responses '{"model":"qwen3","input":[]}'
req 514-temperature-5 POST /v1/responses '{"model":"qwen3","input":"hi","temperature":5}'
req 515-top-p-2 POST /v1/responses '{"model":"qwen3","input":"hi","top_p":2}'
req 516-model-number POST /v1/responses '{"model":5,"input":"hi"}'
req 517-model-empty POST /v1/responses '{"model":"","input":"hi"}'
req 518-fc-missing-call-id POST /v1/responses '{"model":"qwen3","input":[{"type":"function_call","name":"f","arguments":"{}"}]}'
req 519-fco-unmatched POST /v1/responses '{"model":"qwen3","input":[{"role":"user","content":"U"},{"type":"function_call_output","call_id":"nope","output":"x"}]}'
req 520-text-plain POST /v1/responses '{"model":"qwen3","input":"hi"}' text/plain
req 521-no-body POST /v1/responses
req 522-array-body POST /v1/responses '[]'
req 523-top-logprobs-30 POST /v1/responses '{"model":"qwen3","input":"hi","top_logprobs":30}'
req 524-tool-no-name POST /v1/responses '{"model":"qwen3","input":"hi","tools":[{"type":"function"}]}'
req 525-bad-tool-choice POST /v1/responses '{"model":"qwen3","input":"hi","tool_choice":"sometimes"}'
"$PY" -c 'import json; print(json.dumps({"model": "qwen3", "input": "word " * 42000}))' >"$OBS/long.json"
req 526-long-prompt POST /v1/responses "@$OBS/long.json"
req 527-error-stream-bad-json POST /v1/responses '{"model":"qwen3","input":"hi","stream":true,"temperature":5}'

echo "6. the openai SDK"
env PYTHONUNBUFFERED=1 "$PY" "$OBS/helper.py" sdk "http://127.0.0.1:$PORT/v1" >"$OUT/601-sdk.txt" 2>&1 || true
grep -E '^(===|OK|EXCEPTION)' "$OUT/601-sdk.txt" | paste - - | sed 's/^/  /'
env PYTHONUNBUFFERED=1 "$PY" "$OBS/helper.py" sdk-more "http://127.0.0.1:$PORT/v1" \
  two-tool-calls,incomplete,incomplete-in-think,worker-fails-at-once,worker-fails-later >"$OUT/602-sdk-more.txt" 2>&1 || true
grep -E '^(===|OK|EXCEPTION)' "$OUT/602-sdk-more.txt" | paste - - | sed 's/^/  /'
kill "$FE"; wait "$FE" 2>/dev/null || true

echo "phase 2: DYN_HTTP_SVC_RESPONSES_PATH=/custom/responses on $((PORT + 1))"
DYN_HTTP_SVC_RESPONSES_PATH=/custom/responses "$PY" -m dynamo.frontend --discovery-backend file \
  --request-plane tcp --http-host 127.0.0.1 --http-port $((PORT + 1)) >"$LOGS/frontend-path.log" 2>&1 &
FE=$!
PIDS+=("$FE")
wait_models $((PORT + 1)) qwen3
RPORT=$((PORT + 1))
req 701-path-new POST /custom/responses '{"model":"qwen3","input":"hi"}'
req 702-path-old POST /v1/responses '{"model":"qwen3","input":"hi"}'
req 703-path-new-input-tokens POST /custom/responses/input_tokens '{"model":"qwen3","input":"hi"}'
req 704-path-old-input-tokens POST /v1/responses/input_tokens '{"model":"qwen3","input":"hi"}'
curl -s "127.0.0.1:$RPORT/openapi.json" | "$PY" -c 'import json,sys; print(sorted(json.load(sys.stdin)["paths"]))' >"$OUT/705-path-openapi.txt"
echo "  705-path-openapi: $(cat "$OUT/705-path-openapi.txt")"
unset RPORT
kill "$FE"; wait "$FE" 2>/dev/null || true
for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
wait 2>/dev/null || true
PIDS=()

echo "phase 3: dynamo.mocker --reasoning (qwen3 think tokens) + dynamo.frontend on $PORT"
rm -rf "$OBS/kv"; mkdir -p "$OBS/kv"
"$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3-mock --speedup-ratio 10 \
  --discovery-backend file --request-plane tcp --event-plane zmq \
  --reasoning '{"start_thinking_token_id":151667,"end_thinking_token_id":151668,"thinking_ratio":0.5}' \
  >"$LOGS/mocker.log" 2>&1 &
PIDS+=("$!")
"$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$PORT" >"$LOGS/frontend-mocker.log" 2>&1 &
FE=$!
PIDS+=("$FE")
wait_models "$PORT" qwen3-mock
req 801-mocker POST /v1/responses '{"model":"qwen3-mock","input":"Say hello","max_output_tokens":12}'
req 802-mocker-stream POST /v1/responses '{"model":"qwen3-mock","input":"Say hello","max_output_tokens":12,"stream":true}'
req 803-mocker-no-max POST /v1/responses '{"model":"qwen3-mock","input":"Say hello"}'
req 804-mocker-no-max-stream POST /v1/responses '{"model":"qwen3-mock","input":"Say hello","stream":true}'
env PYTHONUNBUFFERED=1 "$PY" "$OBS/helper.py" sdk-more "http://127.0.0.1:$PORT/v1" mocker-failed >"$OUT/806-sdk-mocker.txt" 2>&1 || true
grep -E '^(===|OK|EXCEPTION)' "$OUT/806-sdk-mocker.txt" | paste - - | sed 's/^/  /'
req 805-mocker-tools POST /v1/responses '{"model":"qwen3-mock","input":"Weather?","max_output_tokens":6,"tools":['"$TOOL_W"']}'
echo "done: $OUT"
