#!/usr/bin/env bash
# Observes the Anthropic Messages API of the real Dynamo 1.6.1 frontend
# (`python -m dynamo.frontend --enable-anthropic-api`) and writes what it saw under $OUT
# (default /tmp/obs-anthropic): one Markdown file per case (request, status, headers, body or
# raw SSE with its event list, and what each worker received: the prompt decoded with the
# model's tokenizer plus the other request fields), a summary.jsonl per phase, the frontend
# logs and the real `anthropic` SDK's results (sdk-*.txt). docs/dynamo/anthropic-messages.md
# is written from these files.
#
# Phases, each with its own frontend on 127.0.0.1:$PORT (file discovery, TCP request plane):
#   noflag  - without --enable-anthropic-api;
#   main    - --enable-anthropic-api (preamble stripping on, the default), all cases + SDK;
#   nostrip - --no-strip-anthropic-preamble: the preamble cases again;
#   path    - DYN_HTTP_SVC_ANTHROPIC_PATH=/anthropic/v1/messages;
#   extra   - follow-up cases (mid-stream worker failure, a slow stream timed line by line,
#             tool-history variants, images, unmatched routes, thinking on the parsed model,
#             max_tokens bounds, x-request-id, ...), frontend with DYN_LOG=debug;
#   keepalive - DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS=3000: slow streams timed line by line;
#   timeout - DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS=5: a slow stream and a slow whole answer;
#   modelenv - DYN_CONTEXT_WINDOW=1000 DYN_MAX_OUTPUT_TOKENS=500: model listings, max_tokens;
#   mocker  - a real `python -m dynamo.mocker` instead of the recording workers, + SDK.
# All but mocker use two scripted recording workers on Dynamo's Python runtime (written to
# $OUT/src/worker.py, derived from scripts/fidelity_worker.py): `qwen3` (no parsers, what
# fidelity_worker registers) and `qwen3p` (tool_call_parser hermes, reasoning_parser qwen3,
# what `vllm --dyn-tool-call-parser hermes --dyn-reasoning-parser qwen3` registers). A worker
# answers " Hello world" (finish "stop") unless the prompt holds a marker like @@TOOL@@ (see
# ANSWERS in worker.py).
#
# Needs the Dynamo 1.6.1 venv (scripts/install-dynamo.sh) and the qwen3 model files
# (scripts/fetch-models.sh qwen3); installs the PyPI `anthropic` SDK into the venv if absent.
# Runs everything inside a loopback-only network namespace (root). Does not build switchyard.
# Usage: bash scripts/observe/anthropic.sh   (OUT=dir PORT=port to override; PHASES="main extra"
#        runs only those phases, default all: noflag main nostrip path extra keepalive timeout modelenv mocker)
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-anthropic}
PORT=${PORT:-18571}
VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
PY="$VENV/bin/python"
MODEL_DIR=${SWITCHYARD_MODELS:-${HOME:-/root}/.cache/switchyard-models}/qwen3

if [ "${1:-}" != --inside ]; then
  "$PY" -c 'import anthropic' 2>/dev/null || "$PY" -m pip install -q anthropic
  for p in ${PHASES:-noflag main nostrip path extra keepalive timeout modelenv mocker}; do rm -rf "${OUT:?}/$p"; done
  rm -rf "$OUT/kv" "$OUT"/record-*.jsonl
  mkdir -p "$OUT/src"
  cat >"$OUT/src/worker.py" <<'PYEOF'
"""Scripted recording worker on Dynamo 1.6.1's Python runtime (derived from
scripts/fidelity_worker.py). Registers MODEL (token input, Chat|Completions), records every
request dict it receives (one JSON line) and answers with token ids of a canned text chosen
by a marker found in the decoded prompt (@@NAME@@); default " Hello world", finish "stop".
Optional --tool-call-parser / --reasoning-parser go into the ModelRuntimeConfig, as vLLM's
--dyn-tool-call-parser / --dyn-reasoning-parser do."""
import argparse, asyncio, json, os
from tokenizers import Tokenizer
from dynamo.llm import ModelInput, ModelType, ModelRuntimeConfig, WorkerType, register_model
from dynamo.runtime import DistributedRuntime

TOOL = '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris", "unit": "c"}}\n</tool_call>'
TOOL2 = '<tool_call>\n{"name": "get_time", "arguments": {"tz": "CET"}}\n</tool_call>'
ANSWERS = {  # marker: (text, finish_reason, usage tweak)
    "LEN": (" Hello world", "length", None),
    "TOOL": (TOOL, "stop", None),
    "TEXTTOOL": ("Let me check.\n" + TOOL, "stop", None),
    "TWOTOOLS": (TOOL + "\n" + TOOL2, "stop", None),
    "THINK": ("<think>\nThe user greets me.\n</think>\n\nHello world", "stop", None),
    "THINKTOOL": ("<think>\nNeed weather.\n</think>\n\n" + TOOL, "stop", None),
    "LONG": (" one two three four five six seven eight nine ten", "stop", None),
    "STOPSEQ": (" Hello world and goodbye", "stop", None),
    "CACHED": (" Hello world", "stop", "cached"),
    "USAGE1000": (" Hello world", "stop", "plus1000"),
    "ERRFINISH": (" Hello", "error", None),
    "EOS": (" Hello world", "eos", None),
    "RAISE1": (" Hello world", "stop", "raise1"),
    "SLOW": (" Hello world", "stop", "slow"),
    "SLOW0": (" Hello world", "stop", "slow0"),
}

def parse_args():
    p = argparse.ArgumentParser()
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", required=True)
    p.add_argument("--record", required=True)
    p.add_argument("--endpoint", default="dynamo.backend.generate")
    p.add_argument("--tool-call-parser")
    p.add_argument("--reasoning-parser")
    return p.parse_args()

def to_json(v):
    return {"$bytes": bytes(v).hex()} if isinstance(v, (bytes, bytearray)) else repr(v)

async def main():
    a = parse_args()
    tok = Tokenizer.from_file(os.path.join(a.model_path, "tokenizer.json"))
    rec = open(a.record, "a", encoding="utf-8")

    async def generate(request, context=None):
        rec.write(json.dumps(request, default=to_json) + "\n"); rec.flush()
        prompt = tok.decode(request.get("token_ids") or [], skip_special_tokens=False)
        text, finish, tweak = " Hello world", "stop", None
        for name, ans in ANSWERS.items():  # the marker @@NAME@@ picks the answer
            if f"@@{name}@@" in prompt:
                text, finish, tweak = ans
        ids = tok.encode(text, add_special_tokens=False).ids
        n_prompt = len(request.get("token_ids") or [])
        usage = {"prompt_tokens": n_prompt, "completion_tokens": len(ids), "total_tokens": n_prompt + len(ids)}
        if tweak == "cached":
            usage["prompt_tokens_details"] = {"cached_tokens": 7}
        if tweak == "plus1000":
            usage["prompt_tokens"] += 1000; usage["total_tokens"] += 1000
        for i, t in enumerate(ids):
            if tweak == "raise1" and i == 1:  # after the first token
                raise RuntimeError("scripted worker failure")
            if tweak == "slow" and i == 1:  # a 20 s pause between the two tokens
                await asyncio.sleep(20)
            if tweak == "slow0" and i == 0:  # a 7 s pause before the first token
                await asyncio.sleep(7)
            yield {"token_ids": [t]}
        yield {"token_ids": [], "finish_reason": finish, "completion_usage": usage}

    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    ep = runtime.endpoint(a.endpoint)
    rc = ModelRuntimeConfig()
    if a.tool_call_parser:
        rc.tool_call_parser = a.tool_call_parser
    if a.reasoning_parser:
        rc.reasoning_parser = a.reasoning_parser
    await register_model(ModelInput.Tokens, ModelType.Chat | ModelType.Completions, ep, a.model_path,
                         a.model_name, worker_type=WorkerType.Aggregated, runtime_config=rc)
    await ep.serve_endpoint(generate)

if __name__ == "__main__":
    asyncio.run(main())
PYEOF
  cat >"$OUT/src/client.py" <<'PYEOF'
"""Sends the observation cases of one phase to the frontend on $PORT and writes, per case,
the request, the response (status, headers, body; SSE raw and as an event list) and what
each recording worker received (prompt decoded with the model's tokenizer, other fields)."""
import glob, http.client, json, os, sys, time
from tokenizers import Tokenizer

PORT = int(os.environ["PORT"]); OUT = os.environ["OUT"]; PHASE = sys.argv[1]
TOK = Tokenizer.from_file(os.path.join(os.environ["MODEL_DIR"], "tokenizer.json"))
RECORDS = sorted(glob.glob(f"{OUT}/record-*.jsonl"))
os.makedirs(f"{OUT}/{PHASE}", exist_ok=True)
SUMMARY = open(f"{OUT}/{PHASE}/summary.jsonl", "w")
PNG = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8DwHwAFBQIAX8jx0gAAAABJRU5ErkJggg=="
PRE = "x-anthropic-billing-header: cc_version=2.1.3.abc; cc_entrypoint=cli; cch=1f2e3;\n"
TOOLS = [{"name": "get_weather", "description": "Get the weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                           "required": ["city"]}}]
TOOLS2 = TOOLS + [{"name": "get_time", "description": "Current time",
                   "input_schema": {"type": "object", "properties": {"tz": {"type": "string"}}}}]

def offsets():
    return {p: os.path.getsize(p) for p in RECORDS}

def new_records(before):
    out = []
    for p in RECORDS:
        with open(p, encoding="utf-8") as f:
            f.seek(before[p]); data = f.read()
        for line in data.splitlines():
            if line.strip():
                out.append((os.path.basename(p)[7:-6], json.loads(line)))
    return out

def sse_events(text):
    evs = []
    for block in text.replace("\r\n", "\n").split("\n\n"):
        if not block.strip():
            continue
        ev = {"event": None, "data": None, "other": []}
        for line in block.split("\n"):
            if line.startswith("event:"):
                ev["event"] = line[6:].strip()
            elif line.startswith("data:"):
                d = line[5:].strip()
                try:
                    ev["data"] = json.loads(d)
                except Exception:
                    ev["data"] = d
            else:
                ev["other"].append(line)
        evs.append(ev)
    return evs

def base(content="Hi", model="qwen3", **kw):
    b = {"model": model, "max_tokens": 32, "messages": [{"role": "user", "content": content}]}
    b.update(kw); return b

def call(name, body=None, path="/v1/messages", method="POST", headers=None, raw=None, note="", timed=False):
    hdrs = {"content-type": "application/json"}
    if headers is not None:
        hdrs = {k: v for k, v in {**hdrs, **headers}.items() if v is not None}
    data = raw if raw is not None else (json.dumps(body).encode() if body is not None else None)
    before = offsets()
    conn = http.client.HTTPConnection("127.0.0.1", PORT, timeout=60)
    t0 = time.time()
    try:
        conn.request(method, path, body=data, headers=hdrs)
        r = conn.getresponse(); status = r.status; rh = r.getheaders()
        if timed:  # arrival time of every line
            chunks = []
            while True:
                line = r.readline()
                if not line:
                    break
                chunks.append(f"[{time.time() - t0:6.2f}s] ".encode() + line)
            payload = b"".join(chunks)
        else:
            payload = r.read()
    except Exception as e:
        payload = repr(e).encode(); status = None; rh = []
    dt = time.time() - t0
    time.sleep(0.3)
    recs = new_records(before)
    text = payload.decode("utf-8", "replace")
    ctype = dict((k.lower(), v) for k, v in rh).get("content-type", "")
    lines = [f"# {PHASE}/{name}", note, "", f"## request\n{method} {path}", "headers: " + json.dumps(hdrs),
             "body:", "```", (data.decode("utf-8", "replace") if data else "(none)"), "```",
             f"## response  status={status}  ({dt:.2f}s)", "headers:"]
    lines += [f"  {k}: {v}" for k, v in rh]
    summ = {"case": name, "status": status, "ctype": ctype, "path": path}
    if "event-stream" in ctype:
        evs = sse_events(text)
        lines += ["raw body:", "```", text, "```", "events:"]
        for e in evs:
            lines.append(f"  {e['event']}: {json.dumps(e['data'])}" + (f"  other={e['other']}" if e['other'] else ""))
        summ["events"] = [e["event"] for e in evs]
        summ["last_raw"] = text[-200:]
    else:
        try:
            js = json.loads(text); lines += ["body:", "```json", json.dumps(js, indent=2, ensure_ascii=False), "```"]
            summ["body"] = js
        except Exception:
            lines += ["body (raw):", "```", text, "```"]; summ["body_raw"] = text
    lines.append(f"## worker received ({len(recs)} request(s))")
    summ["worker"] = []
    for model, rq in recs:
        ids = rq.get("token_ids") or []
        prompt = TOK.decode(ids, skip_special_tokens=False)
        rest = {k: v for k, v in rq.items() if k != "token_ids"}
        lines += [f"### {model}: {len(ids)} prompt tokens", "prompt:", "```", prompt, "```", "other fields:", "```json",
                  json.dumps(rest, indent=1, ensure_ascii=False), "```"]
        summ["worker"].append({"model": model, "n_tokens": len(ids), "prompt": prompt, "rest": rest})
    with open(f"{OUT}/{PHASE}/{name}.md", "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")
    SUMMARY.write(json.dumps(summ, ensure_ascii=False) + "\n"); SUMMARY.flush()
    print(f"{PHASE}/{name}: {status} {ctype} worker={[ (m, len(r.get('token_ids') or [])) for m, r in recs]}", flush=True)

def both(name, body, **kw):
    call(name, body, **kw)
    call(name + "__stream", {**body, "stream": True}, **kw)

# ---------------------------------------------------------------------------------------
def phase_noflag():
    call("messages_basic", base())
    call("count_tokens_basic", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}, path="/v1/messages/count_tokens")
    call("chat_completions_sanity", {"model": "qwen3", "max_tokens": 8, "messages": [{"role": "user", "content": "Hi"}]}, path="/v1/chat/completions")
    call("models", path="/v1/models", method="GET")
    call("models_anthropic_version", path="/v1/models", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("model_by_id", path="/v1/models/qwen3", method="GET")
    call("openapi", path="/openapi.json", method="GET")

def phase_main():
    # 1. basics
    both("basic", base())
    call("basic_stream_false", base(stream=False))
    call("basic_headers", base(), headers={"anthropic-version": "2023-06-01", "x-api-key": "sk-ant-bogus",
                                           "anthropic-beta": "prompt-caching-2024-07-31", "authorization": "Bearer bogus"})
    call("basic_no_content_type", base(), headers={"content-type": None})
    call("basic_text_plain", base(), headers={"content-type": "text/plain"})
    both("stop_length", base("@@LEN@@"))
    both("stop_eos", base("@@EOS@@"))
    both("stop_sequences", base("@@STOPSEQ@@", stop_sequences=["goodbye", "zzz"]))
    both("stop_sequences_world", base("Hi", stop_sequences=["world"]))
    both("long", base("@@LONG@@"))
    both("usage_cached", base("@@CACHED@@"))
    both("usage_plus1000", base("@@USAGE1000@@"))
    both("worker_raises", base("@@RAISE1@@"))
    both("worker_finish_error", base("@@ERRFINISH@@"))
    call("sampling", base("Hi", temperature=0.5, top_p=0.9, top_k=40, metadata={"user_id": "u-1"},
                          stop_sequences=["END"], service_tier="auto"))
    call("max_tokens_1", base("@@LONG@@", max_tokens=1))
    # 2. system, content, multi-turn
    call("system_string", base(system="You are terse."))
    call("system_blocks", base(system=[{"type": "text", "text": "First block."},
                                       {"type": "text", "text": "Second block.", "cache_control": {"type": "ephemeral"}}]))
    call("system_empty_string", base(system=""))
    call("system_empty_list", base(system=[]))
    call("content_blocks", base([{"type": "text", "text": "Hello"}, {"type": "text", "text": "there", "cache_control": {"type": "ephemeral"}}]))
    call("content_empty_string", base(""))
    call("content_empty_list", base([]))
    call("multi_turn", {"model": "qwen3", "max_tokens": 32, "system": "Sys.", "messages": [
        {"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
        {"role": "user", "content": [{"type": "text", "text": "U2"}]},
        {"role": "assistant", "content": [{"type": "text", "text": "A2a"}, {"type": "text", "text": "A2b"}]},
        {"role": "user", "content": "U3"}]})
    call("consecutive_user", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "user", "content": "U1"}, {"role": "user", "content": "U2"}]})
    call("assistant_prefill", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "user", "content": "U1"}, {"role": "assistant", "content": "The answer is"}]})
    call("assistant_first", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "assistant", "content": "A0"}, {"role": "user", "content": "U1"}]})
    # 3. tools
    for model in ("qwen3", "qwen3p"):
        call(f"tools_auto_{model}", base("@@TOOL@@", model=model, tools=TOOLS, tool_choice={"type": "auto"}))
        call(f"tools_nochoice_{model}", base("@@TOOL@@", model=model, tools=TOOLS))
    call("tools_any", base("@@TOOL@@", model="qwen3p", tools=TOOLS, tool_choice={"type": "any"}))
    call("tools_tool", base("@@TOOL@@", model="qwen3p", tools=TOOLS2, tool_choice={"type": "tool", "name": "get_weather"}))
    call("tools_none", base("@@TOOL@@", model="qwen3p", tools=TOOLS, tool_choice={"type": "none"}))
    call("tools_auto_noparallel", base("@@TOOL@@", model="qwen3p", tools=TOOLS, tool_choice={"type": "auto", "disable_parallel_tool_use": True}))
    both("tool_use_out", base("@@TOOL@@", model="qwen3p", tools=TOOLS))
    both("text_and_tool_out", base("@@TEXTTOOL@@", model="qwen3p", tools=TOOLS))
    both("two_tools_out", base("@@TWOTOOLS@@", model="qwen3p", tools=TOOLS2))
    call("tool_use_out_no_tools_in_request", base("@@TOOL@@", model="qwen3p"))
    call("tool_cache_control", base("Hi", tools=[{**TOOLS[0], "cache_control": {"type": "ephemeral"}}]))
    hist = [{"role": "user", "content": "Weather in Paris?"},
            {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                              {"type": "tool_use", "id": "toolu_01A", "name": "get_weather", "input": {"city": "Paris"}}]}]
    call("tool_result_string", base(model="qwen3p", tools=TOOLS, content=None) | {"messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Sunny, 21C"}]}]})
    call("tool_result_blocks_and_text", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A",
                                      "content": [{"type": "text", "text": "Sunny"}, {"type": "text", "text": "21C"}]},
                                     {"type": "text", "text": "Thanks, and tomorrow?"}]}]})
    call("tool_result_error", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "city not found", "is_error": True}]}]})
    call("tool_result_no_content", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A"}]}]})
    call("tool_result_with_image", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": [
            {"type": "text", "text": "see"}, {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]}]}]})
    call("tool_use_two_in_history", base(model="qwen3p", tools=TOOLS2) | {"messages": [
        {"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "12:00"}]}]})
    # 4. thinking
    call("thinking_enabled", base(thinking={"type": "enabled", "budget_tokens": 1024}))
    call("thinking_disabled", base(thinking={"type": "disabled"}))
    call("thinking_adaptive", base(thinking={"type": "adaptive"}))
    for model in ("qwen3", "qwen3p"):
        both(f"think_out_{model}", base("@@THINK@@", model=model))
    call("think_out_qwen3p_thinking_enabled", base("@@THINK@@", model="qwen3p", thinking={"type": "enabled", "budget_tokens": 1024}))
    both("think_and_tool_out", base("@@THINKTOOL@@", model="qwen3p", tools=TOOLS))
    call("thinking_in_history", base(model="qwen3p") | {"messages": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "Reasoned.", "signature": "sig"},
                                          {"type": "text", "text": "A1"}]},
        {"role": "user", "content": "U2"}]})
    call("redacted_thinking_in_history", base(model="qwen3p") | {"messages": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": [{"type": "redacted_thinking", "data": "abc"}, {"type": "text", "text": "A1"}]},
        {"role": "user", "content": "U2"}]})
    # 5. images / documents
    call("image_base64", base([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                               {"type": "text", "text": "What is this?"}]))
    call("image_url", base([{"type": "image", "source": {"type": "url", "url": "http://127.0.0.1:9/x.png"}},
                            {"type": "text", "text": "What is this?"}]))
    call("document_block", base([{"type": "document", "source": {"type": "text", "media_type": "text/plain", "data": "doc"}},
                                 {"type": "text", "text": "Summarize"}]))
    call("unknown_block_type", base([{"type": "video", "url": "x"}, {"type": "text", "text": "Hi"}]))
    call("text_block_missing_text", base([{"type": "text"}]))
    # 6. preamble (strip on by default)
    preamble_cases()
    # 7. count_tokens
    ct = "/v1/messages/count_tokens"
    call("ct_basic", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_hello_world", {"model": "qwen3", "messages": [{"role": "user", "content": "Hello, world"}]}, path=ct)
    call("ct_12chars", {"model": "qwen3", "messages": [{"role": "user", "content": "abcdefghijkl"}]}, path=ct)
    call("ct_13chars", {"model": "qwen3", "messages": [{"role": "user", "content": "abcdefghijklm"}]}, path=ct)
    call("ct_system", {"model": "qwen3", "system": "You are terse.", "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_system_blocks", {"model": "qwen3", "system": [{"type": "text", "text": "You are"}, {"type": "text", "text": "terse."}],
                              "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_tools", {"model": "qwen3", "tools": TOOLS, "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_blocks", {"model": "qwen3", "messages": [{"role": "user", "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}]}]}, path=ct)
    call("ct_multi", {"model": "qwen3", "messages": [{"role": "user", "content": "U1"}, {"role": "assistant", "content": "A1"},
                                                     {"role": "user", "content": "U2"}]}, path=ct)
    call("ct_tool_history", {"model": "qwen3", "tools": TOOLS, "messages": hist + [
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_01A", "content": "Sunny, 21C"}]}]}, path=ct)
    call("ct_image", {"model": "qwen3", "messages": [{"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}, {"type": "text", "text": "x"}]}]}, path=ct)
    call("ct_with_max_tokens_and_thinking", {"model": "qwen3", "max_tokens": 10, "thinking": {"type": "enabled", "budget_tokens": 1024},
                                             "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_unknown_model", {"model": "nope", "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_missing_model", {"messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_missing_messages", {"model": "qwen3"}, path=ct)
    call("ct_empty_messages", {"model": "qwen3", "messages": []}, path=ct)
    call("ct_bad_json", path=ct, raw=b'{"model": "qwen3", ')
    call("ct_unknown_field", {"model": "qwen3", "foo": 1, "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_get", path=ct, method="GET")
    call("ct_preamble", {"model": "qwen3", "system": PRE + "You are terse.", "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    call("ct_no_preamble", {"model": "qwen3", "system": "You are terse.", "messages": [{"role": "user", "content": "Hi"}]}, path=ct)
    # 8. errors
    call("err_bad_json", raw=b'{"model": "qwen3", ')
    call("err_empty_body", raw=b'')
    call("err_not_object", raw=b'[1,2]')
    b = base(); del b["max_tokens"]; call("err_missing_max_tokens", b)
    b = base(); del b["messages"]; call("err_missing_messages", b)
    b = base(); del b["model"]; call("err_missing_model", b)
    call("err_empty_messages", base() | {"messages": []})
    call("err_messages_not_array", base() | {"messages": "Hi"})
    call("err_unknown_model", base(model="nope"))
    call("err_unknown_model_stream", base(model="nope", stream=True))
    call("err_role_system", base() | {"messages": [{"role": "system", "content": "S"}, {"role": "user", "content": "Hi"}]})
    call("err_role_tool", base() | {"messages": [{"role": "tool", "content": "T"}]})
    call("err_role_foo", base() | {"messages": [{"role": "foo", "content": "Hi"}]})
    call("err_missing_role", base() | {"messages": [{"content": "Hi"}]})
    call("err_unknown_top_field", base(foo=1))
    call("err_max_tokens_0", base(max_tokens=0))
    call("err_max_tokens_neg", base(max_tokens=-1))
    call("err_max_tokens_huge", base(max_tokens=1000000000))
    call("err_max_tokens_40000", base(max_tokens=40000))
    call("err_max_tokens_string", base(max_tokens="32"))
    call("err_max_tokens_float", base(max_tokens=32.0))
    call("err_temperature_5", base(temperature=5))
    call("err_stream_string", base(stream="yes"))
    call("err_system_number", base(system=5))
    call("err_tool_no_schema", base(tools=[{"name": "t"}]))
    call("err_tool_choice_tool_no_name", base(tools=TOOLS, tool_choice={"type": "tool"}))
    call("err_tool_choice_unknown_tool", base(tools=TOOLS, tool_choice={"type": "tool", "name": "nope"}))
    call("err_tool_choice_without_tools", base(tool_choice={"type": "any"}))
    call("err_tool_choice_bad_type", base(tools=TOOLS, tool_choice={"type": "whatever"}))
    call("err_tool_choice_string", base(tools=TOOLS, tool_choice="auto"))
    call("err_tool_use_missing_id", base() | {"messages": [{"role": "user", "content": "Q"},
        {"role": "assistant", "content": [{"type": "tool_use", "name": "get_weather", "input": {}}]},
        {"role": "user", "content": "x"}]})
    call("err_tool_result_unknown_id", base() | {"messages": [{"role": "user", "content": [
        {"type": "tool_result", "tool_use_id": "toolu_x", "content": "r"}]}]})
    call("err_thinking_bad_type", base(thinking={"type": "weird"}))
    call("err_server_tool", base(tools=[{"type": "web_search_20250305", "name": "web_search"}]))
    call("err_get_messages", path="/v1/messages", method="GET")
    call("err_put_messages", base(), method="PUT")
    call("err_messages_trailing_slash", base(), path="/v1/messages/")
    # 9. models / docs
    call("models", path="/v1/models", method="GET")
    call("models_anthropic_version", path="/v1/models", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("model_by_id", path="/v1/models/qwen3", method="GET")
    call("model_by_id_anthropic_version", path="/v1/models/qwen3", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("model_by_id_unknown", path="/v1/models/nope", method="GET")
    call("openapi", path="/openapi.json", method="GET")

def preamble_cases():
    call("preamble_system_string", base(system=PRE + "You are terse."))
    call("preamble_system_string_leading_ws", base(system="  \n" + PRE + "You are terse."))
    call("preamble_only_no_newline", base(system=PRE.rstrip("\n")))
    call("preamble_system_blocks_first", base(system=[{"type": "text", "text": PRE.rstrip("\n")},
                                                      {"type": "text", "text": "You are terse."}]))
    call("preamble_system_blocks_joined", base(system=[{"type": "text", "text": PRE + "You are terse."},
                                                       {"type": "text", "text": "Second."}]))
    call("preamble_not_first", base(system="You are terse.\n" + PRE + "More."))
    call("preamble_in_user_message", base(PRE + "Hi"))
    call("ct_preamble", {"model": "qwen3", "system": PRE + "You are terse.", "messages": [{"role": "user", "content": "Hi"}]},
         path="/v1/messages/count_tokens")

def phase_nostrip():
    preamble_cases()
    call("system_string", base(system="You are terse."))

def phase_path():
    p = os.environ.get("ANTH_PATH", "/anthropic/v1/messages")
    call("custom_path", base(), path=p)
    call("custom_path_count_tokens", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}, path=p + "/count_tokens")
    call("default_path", base())
    call("default_count_tokens", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]}, path="/v1/messages/count_tokens")
    call("openapi", path="/openapi.json", method="GET")

def phase_mocker():
    both("mocker_max_tokens_5", base("Tell me a story", max_tokens=5))
    both("mocker_max_tokens_64", base("Tell me a story", max_tokens=64))
    long_prompt = " ".join(f"word{i}" for i in range(200))
    call("mocker_cache_1", base(long_prompt, max_tokens=4))
    call("mocker_cache_2", base(long_prompt, max_tokens=4))
    call("mocker_cache_3_stream", base(long_prompt, max_tokens=4, stream=True))
    both("mocker_stop_sequences", base("Tell me a story", max_tokens=64, stop_sequences=["the"]))
    call("mocker_max_tokens_huge", base("Hi", max_tokens=1000000000))
    call("mocker_missing_max_tokens", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]})
    call("mocker_system_tools", base("Hi", system="You are terse.", tools=TOOLS))

def phase_extra():
    call("worker_raises_after_first_token", base("@@RAISE1@@"))
    call("worker_raises_after_first_token__stream", base("@@RAISE1@@", stream=True))
    call("slow_stream_timed", base("@@SLOW@@", stream=True), timed=True)
    hist = [{"role": "user", "content": "Q"}]
    call("hist_one_tool_use_empty_input", base(model="qwen3p", tools=TOOLS2) | {"messages": hist + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_2", "content": "12:00"}]}]})
    call("hist_two_tool_uses", base(model="qwen3p", tools=TOOLS2) | {"messages": hist + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "CET"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "12:00"}]}]})
    call("hist_two_tool_uses_qwen3", base(model="qwen3", tools=TOOLS2) | {"messages": hist + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}},
                                          {"type": "tool_use", "id": "toolu_2", "name": "get_time", "input": {"tz": "CET"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"},
                                     {"type": "tool_result", "tool_use_id": "toolu_2", "content": "12:00"}]}]})
    call("hist_tool_use_no_text", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]})
    call("hist_tool_use_without_result", base(model="qwen3p", tools=TOOLS) | {"messages": hist + [
        {"role": "assistant", "content": [{"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": "never mind"}]})
    call("image_base64_qwen3p", base([{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}},
                                      {"type": "text", "text": "What is this?"}], model="qwen3p"))
    call("image_base64_jpeg_bad_data", base([{"type": "image", "source": {"type": "base64", "media_type": "image/jpeg", "data": "AAAA"}},
                                      {"type": "text", "text": "What is this?"}]))
    call("system_block_image", base(system=[{"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": PNG}}]))
    call("system_block_no_type", base(system=[{"text": "S"}]))
    for p in ("/v1/messagesX", "/v1/messages/foo", "/v1/foo", "/anthropic/v1/messages"):
        call("route_" + p.strip("/").replace("/", "_"), base(), path=p)
    call("route_get_v1_foo", path="/v1/foo", method="GET")
    call("thinking_disabled_qwen3p", base("@@THINK@@", model="qwen3p", thinking={"type": "disabled"}))
    call("thinking_enabled_qwen3p", base("Hi", model="qwen3p", thinking={"type": "enabled", "budget_tokens": 2048}))
    call("thinking_disabled_qwen3p_tools", base("Hi", model="qwen3p", tools=TOOLS, thinking={"type": "disabled"}))
    call("max_tokens_50000", base(max_tokens=50000))
    call("max_tokens_1048576", base(max_tokens=1048576))
    call("max_tokens_1048577", base(max_tokens=1048577))
    call("model_by_id_unknown_anthropic_version", path="/v1/models/nope", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("x_request_id", base(), headers={"x-request-id": "req-abc-123"})
    call("x_request_id_stream", base(stream=True), headers={"x-request-id": "req-abc-124"})
    call("ct_no_content_type", {"model": "qwen3", "messages": [{"role": "user", "content": "Hi"}]},
         path="/v1/messages/count_tokens", headers={"content-type": None})
    call("assistant_empty_string", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "user", "content": "U1"}, {"role": "assistant", "content": ""}, {"role": "user", "content": "U2"}]})
    call("stop_sequences_empty", base(stop_sequences=[]))
    call("temperature_0_top_k_0", base(temperature=0, top_k=0))
    call("nvext_ignore_eos", base(nvext={"ignore_eos": True}))
    call("stream_null", base(stream=None))
    call("max_tokens_null", base(max_tokens=None))
    call("stream_unknown_block", base([{"type": "video"}], stream=True))
    call("stream_bad_json", raw=b'{"stream": true, ')
    call("content_null", base(None))
    call("tool_result_in_assistant", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "user", "content": "U1"},
        {"role": "assistant", "content": [{"type": "tool_result", "tool_use_id": "t", "content": "x"}]}]})
    call("thinking_in_tool_turn", base(model="qwen3p", tools=TOOLS) | {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "T1 reasoning.", "signature": "sig"},
                                          {"type": "text", "text": "Let me check."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]})
    call("text_before_tool_result", base(model="qwen3p", tools=TOOLS) | {"messages": [
        {"role": "user", "content": "Weather in Paris?"},
        {"role": "assistant", "content": [{"type": "text", "text": "Let me check."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "get_weather", "input": {"city": "Paris"}}]},
        {"role": "user", "content": [{"type": "text", "text": "Before."},
                                     {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny"}]}]})
    call("tool_use_in_user", {"model": "qwen3", "max_tokens": 32, "messages": [
        {"role": "user", "content": [{"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}]}]})

def phase_keepalive():  # DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS=3000
    call("slow_first_token_timed", base("@@SLOW0@@", stream=True), timed=True)
    call("slow_stream_timed", base("@@SLOW@@", stream=True), timed=True)

def phase_timeout():  # DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS=5
    call("slow_stream_timed", base("@@SLOW@@", stream=True), timed=True)
    time.sleep(20)
    call("slow_whole_answer", base("@@SLOW@@"))

def phase_modelenv():  # DYN_CONTEXT_WINDOW=1000 DYN_MAX_OUTPUT_TOKENS=500
    call("models", path="/v1/models", method="GET")
    call("models_anthropic_version", path="/v1/models", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("model_by_id_anthropic_version", path="/v1/models/qwen3", method="GET", headers={"anthropic-version": "2023-06-01"})
    call("max_tokens_600", base(max_tokens=600))
    call("max_tokens_2000", base(max_tokens=2000))

{"extra": phase_extra, "modelenv": phase_modelenv, "keepalive": phase_keepalive, "timeout": phase_timeout, "noflag": phase_noflag, "main": phase_main, "nostrip": phase_nostrip, "path": phase_path,
 "mocker": phase_mocker}[PHASE]()
PYEOF
  cat >"$OUT/src/sdk.py" <<'PYEOF'
"""The real `anthropic` SDK against the frontend on $PORT: does each call finish without error?"""
import json, os, sys, traceback
import anthropic

PORT = int(os.environ["PORT"]); PHASE = sys.argv[1]
OUT = os.environ["OUT"]
client = anthropic.Anthropic(base_url=f"http://127.0.0.1:{PORT}", api_key="sk-ant-bogus", max_retries=0, timeout=60)
TOOLS = [{"name": "get_weather", "description": "Get the weather for a city",
          "input_schema": {"type": "object", "properties": {"city": {"type": "string"}, "unit": {"type": "string"}},
                           "required": ["city"]}}]
log = open(f"{OUT}/sdk-{PHASE}.txt", "w")

def out(*a):
    s = " ".join(str(x) for x in a); print(s, flush=True); log.write(s + "\n"); log.flush()

def run(name, fn):
    out(f"=== {name}")
    try:
        r = fn()
        out("OK:", r.model_dump_json(indent=1) if hasattr(r, "model_dump_json") else json.dumps(r, indent=1, default=str))
    except Exception as e:
        out("EXCEPTION:", type(e).__module__ + "." + type(e).__name__, str(e)[:1500])
        out("".join(traceback.format_exception(e))[-2500:])

def stream_final(**kw):
    events = []
    with client.messages.stream(**kw) as s:
        for ev in s:
            events.append(ev.type)
        fm = s.get_final_message()
    return {"events": events, "final": fm.model_dump()}

def raw_stream(**kw):
    evs = []
    for ev in client.messages.create(stream=True, **kw):
        evs.append(ev.model_dump())
    return evs

def text_stream(**kw):
    with client.messages.stream(**kw) as s:
        return {"text": "".join(s.text_stream), "final_text": s.get_final_text()}

M = [{"role": "user", "content": "Hi"}]
if PHASE == "main":
    run("create_basic", lambda: client.messages.create(model="qwen3", max_tokens=32, messages=M))
    run("create_system_blocks", lambda: client.messages.create(model="qwen3", max_tokens=32, system=[{"type": "text", "text": "S"}], messages=M))
    run("stream_basic", lambda: stream_final(model="qwen3", max_tokens=32, messages=M))
    run("stream_text", lambda: text_stream(model="qwen3", max_tokens=32, messages=M))
    run("raw_stream_basic", lambda: raw_stream(model="qwen3", max_tokens=32, messages=M))
    run("create_length", lambda: client.messages.create(model="qwen3", max_tokens=32, messages=[{"role": "user", "content": "@@LEN@@"}]))
    run("create_stop_sequence", lambda: client.messages.create(model="qwen3", max_tokens=32, stop_sequences=["goodbye"], messages=[{"role": "user", "content": "@@STOPSEQ@@"}]))
    run("stream_stop_sequence", lambda: stream_final(model="qwen3", max_tokens=32, stop_sequences=["goodbye"], messages=[{"role": "user", "content": "@@STOPSEQ@@"}]))
    run("create_tool_use", lambda: client.messages.create(model="qwen3p", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "@@TOOL@@"}]))
    run("stream_tool_use", lambda: stream_final(model="qwen3p", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "@@TEXTTOOL@@"}]))
    run("create_think", lambda: client.messages.create(model="qwen3p", max_tokens=64, thinking={"type": "enabled", "budget_tokens": 1024}, messages=[{"role": "user", "content": "@@THINK@@"}]))
    run("stream_think", lambda: stream_final(model="qwen3p", max_tokens=64, thinking={"type": "enabled", "budget_tokens": 1024}, messages=[{"role": "user", "content": "@@THINK@@"}]))
    run("stream_think_tool", lambda: stream_final(model="qwen3p", max_tokens=64, tools=TOOLS, messages=[{"role": "user", "content": "@@THINKTOOL@@"}]))
    run("count_tokens", lambda: client.messages.count_tokens(model="qwen3", messages=M))
    run("create_unknown_model", lambda: client.messages.create(model="nope", max_tokens=32, messages=M))
    run("stream_unknown_model", lambda: stream_final(model="nope", max_tokens=32, messages=M))
    run("create_empty_messages", lambda: client.messages.create(model="qwen3", max_tokens=32, messages=[]))
    run("create_worker_raises", lambda: client.messages.create(model="qwen3", max_tokens=32, messages=[{"role": "user", "content": "@@RAISE1@@"}]))
    run("stream_worker_raises", lambda: stream_final(model="qwen3", max_tokens=32, messages=[{"role": "user", "content": "@@RAISE1@@"}]))
    run("stream_worker_finish_error", lambda: stream_final(model="qwen3", max_tokens=32, messages=[{"role": "user", "content": "@@ERRFINISH@@"}]))
    run("models_list", lambda: [m.model_dump() for m in client.models.list()])
    run("models_retrieve", lambda: client.models.retrieve("qwen3"))
else:
    run("create_basic", lambda: client.messages.create(model="qwen3", max_tokens=16, messages=[{"role": "user", "content": "Tell me a story"}]))
    run("stream_basic", lambda: stream_final(model="qwen3", max_tokens=16, messages=[{"role": "user", "content": "Tell me a story"}]))
    run("stream_text", lambda: text_stream(model="qwen3", max_tokens=16, messages=[{"role": "user", "content": "Tell me a story"}]))
    run("raw_stream", lambda: raw_stream(model="qwen3", max_tokens=8, messages=[{"role": "user", "content": "Tell me a story"}]))
    run("count_tokens", lambda: client.messages.count_tokens(model="qwen3", messages=[{"role": "user", "content": "Tell me a story"}]))
PYEOF
  exec unshare -n bash "$0" --inside
fi

ip link set lo up
export OUT PORT MODEL_DIR DYN_FILE_KV="$OUT/kv"
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
PHASES=${PHASES:-noflag main nostrip path extra keepalive timeout modelenv mocker}
want() { [[ " $PHASES " == *" $1 "* ]]; }
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

stop() { kill "$1" 2>/dev/null || true; wait "$1" 2>/dev/null || true; }

listed() { # models (comma-separated): wait until the frontend on $PORT lists every one
  local all m ok
  for _ in $(seq 1 900); do
    all=$(curl -s "127.0.0.1:$PORT/v1/models" || true); ok=1
    for m in ${1//,/ }; do [[ $all == *"\"$m\""* ]] || ok=0; done
    [ $ok = 1 ] && return 0
    sleep 0.1
  done
  echo "FAIL: $1 not listed" >&2; tail -n 30 "$OUT"/frontend-*.log >&2; return 1
}

frontend() { # phase models [VAR=value...] -- [frontend args...]: runs the phase's client
  local phase=$1 models=$2; shift 2
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  env "${envs[@]}" "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp \
    --http-host 127.0.0.1 --http-port "$PORT" "$@" >"$OUT/frontend-$phase.log" 2>&1 &
  FE=$!; PIDS+=("$FE")
  listed "$models"
  echo "== phase $phase (frontend $*)"
  "$PY" "$OUT/src/client.py" "$phase"
}

if want noflag || want main || want nostrip || want path || want extra || want keepalive || want timeout || want modelenv; then
  echo "recording workers qwen3, qwen3p"
  for spec in "qwen3 qwen" "qwen3p qwenp --tool-call-parser hermes --reasoning-parser qwen3"; do
    set -- $spec
    name=$1 comp=$2; shift 2
    : >"$OUT/record-$name.jsonl"
    "$PY" "$OUT/src/worker.py" --model-path "$MODEL_DIR" --model-name "$name" --endpoint "dynamo.$comp.generate" \
      --record "$OUT/record-$name.jsonl" "$@" >"$OUT/worker-$name.log" 2>&1 &
    PIDS+=("$!")
  done
  W1=${PIDS[0]} W2=${PIDS[1]}
  if want noflag; then frontend noflag qwen3,qwen3p --; stop "$FE"; fi
  if want main; then
    frontend main qwen3,qwen3p -- --enable-anthropic-api
    "$PY" "$OUT/src/sdk.py" main; stop "$FE"
  fi
  if want nostrip; then
    frontend nostrip qwen3,qwen3p -- --enable-anthropic-api --no-strip-anthropic-preamble; stop "$FE"
  fi
  if want path; then
    frontend path qwen3,qwen3p ANTH_PATH=/anthropic/v1/messages DYN_HTTP_SVC_ANTHROPIC_PATH=/anthropic/v1/messages \
      -- --enable-anthropic-api; stop "$FE"
  fi
  if want extra; then frontend extra qwen3,qwen3p DYN_LOG=debug -- --enable-anthropic-api; stop "$FE"; fi
  if want keepalive; then
    frontend keepalive qwen3,qwen3p DYN_HTTP_SSE_KEEP_ALIVE_INTERVAL_MS=3000 -- --enable-anthropic-api; stop "$FE"
  fi
  if want timeout; then
    frontend timeout qwen3,qwen3p DYN_HTTP_BACKEND_STREAM_TIMEOUT_SECS=5 -- --enable-anthropic-api; stop "$FE"
  fi
  if want modelenv; then
    frontend modelenv qwen3,qwen3p DYN_CONTEXT_WINDOW=1000 DYN_MAX_OUTPUT_TOKENS=500 -- --enable-anthropic-api; stop "$FE"
  fi
  stop "$W1"; stop "$W2"
fi

if want mocker; then
  echo "dynamo.mocker qwen3"
  rm -rf "$DYN_FILE_KV"
  "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file --request-plane tcp \
    --event-plane zmq --speedup-ratio 10 >"$OUT/mocker.log" 2>&1 &
  MOCKER=$!; PIDS+=("$MOCKER")
  frontend mocker qwen3 -- --enable-anthropic-api
  "$PY" "$OUT/src/sdk.py" mocker; stop "$FE"; stop "$MOCKER"
fi
echo "done: $OUT"
