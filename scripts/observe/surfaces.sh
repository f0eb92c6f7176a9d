#!/usr/bin/env bash
# Observes every non-chat route of the real Dynamo 1.6.1 frontend (`python -m dynamo.frontend`)
# for docs/dynamo/surfaces.md: /v1/embeddings, /v1/images/generations and /edits, /v1/videos
# and /v1/videos/stream, /v1/audio/speech, /v1/classify, /v1/pooling, /v1/rerank, the
# /v1/realtime WebSocket, /v1/models/{id} and /v1/models/{id}/ready, /openapi.json, the
# batch/files routes, the vLLM and SGLang generate routes, and /metrics after the calls.
# Observation only: nothing of switchyard is built or run.
#
# Phase 1 (port $PORT): one frontend in front of scripts/surfaces_worker.py (one recording
#   model per surface, see its docstring; plus cls-wait, a model that is never ready).
# Phase 2 (port $PORT+1): a frontend with every route variable set (DYN_HTTP_SVC_*_PATH, the
#   two generate switches, DYN_DISABLE_FRONTEND_NVEXT=1), the same worker plus `gen` (a token
#   model advertising both generate capabilities).
# Phase 3 (port $PORT+2): the generate switches alone (default paths), and a start with an
#   invalid generate path.
# Phase 4 (port $PORT+3): a frontend restricted to a namespace holding only `tts` (routes
#   before any model, audio without `model`, switched-off surfaces).
#
# Everything runs in a loopback-only network namespace (Dynamo's publishers bind 0.0.0.0),
# with its own file store. Output: one file per case in $OBS/out: NNN-name.txt (request,
# status, headers without `date`, body as sent, or a hex dump when binary, what curl reported
# when the transfer broke, the requests the worker received for it, the frontend counters that
# moved) and NNN-name.raw (curl -i bytes); logs in $OBS/logs; every case folded into
# $OBS/exchanges-1.6.1.jsonl (the fixture tests/data/surfaces/exchanges-1.6.1.jsonl).
# Needs root (unshare -n); installs the Dynamo venv and the qwen3 files when missing (as the
# other scripts sourcing scripts/real-dynamo-env.sh; SWITCHYARD_SETUP_DONE=1 skips that).
# Usage: bash scripts/observe/surfaces.sh        (OBS=/tmp/obs-surfaces PORT=18700)
set -euo pipefail
cd "$(dirname "$0")/../.."
REPO=$PWD
source scripts/real-dynamo-env.sh
# sets VENV, PY, MODEL_DIR and the DYN_*_HOST variables inside the namespace
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"

OBS=${OBS:-/tmp/obs-surfaces}
PORT=${PORT:-18700}
OUT=$OBS/out
LOGS=$OBS/logs
REC=$OBS/rec.jsonl
rm -rf "$OBS/kv" "$OUT" "$LOGS" "$REC"
mkdir -p "$OBS/kv" "$OUT" "$LOGS"
: >"$REC"
export DYN_FILE_KV="$OBS/kv"
PIDS=()
trap 'for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done; wait 2>/dev/null || true' EXIT

# ---------------------------------------------------------------------------------------------
# Client-side helper (scratch, written under $OBS)
cat >"$OBS/client.py" <<'EOF'
"""show RAW: a captured response, readable (binary bodies as a hex dump).
fold OUT DEST: every case of OUT as one JSON line in DEST.
sdk BASE: the real openai SDK against the frontend.
ws URL SCENARIO: one scripted /v1/realtime WebSocket session.
metrics FILE: the frontend metric lines that the calls produced."""
import base64, json, struct, sys, time, traceback

def split_raw(data):
    # curl -i may print several header blocks (100-continue); the last one is the answer
    head, _, body = data.partition(b"\r\n\r\n")
    while head.startswith(b"HTTP/1.1 100"):
        head, _, body = body.partition(b"\r\n\r\n")
    return head.decode("latin-1"), body

def show(path):
    head, body = split_raw(open(path, "rb").read())
    ctype = ""
    for line in head.split("\r\n"):
        if not line.lower().startswith("date:"):
            print(line)
        if line.lower().startswith("content-type:"):
            ctype = line.split(":", 1)[1].strip()
    print()
    text_like = (not body) or ctype.startswith(("application/json", "text/")) or not ctype
    if text_like:
        try:
            print(body.decode("utf-8"))
            return
        except UnicodeDecodeError:
            pass
    print("(%d body bytes, %s)" % (len(body), ctype))
    for off in range(0, min(len(body), 768), 16):
        chunk = body[off:off + 16]
        print("%04x  %-48s %s" % (off, " ".join("%02x" % b for b in chunk),
                                  "".join(chr(b) if 32 <= b < 127 else "." for b in chunk)))
    if len(body) > 768:
        print("...")
    if body.startswith(b"RIFF"):
        riff, size, wave_, fmt, flen, afmt, ch, rate, brate, align, bits = struct.unpack("<4sI4s4sIHHIIHH", body[:36])
        print("WAV: riff-size=%#x format=%d channels=%d rate=%d bits=%d" % (size, afmt, ch, rate, bits))

def sdk(base):
    import httpx2, openai
    print("openai SDK", openai.__version__)
    def hook(req):
        print(">>> SDK sends %s %s" % (req.method, req.url))
        for k, v in req.headers.items():
            if k.lower() in ("content-type", "accept", "content-length"):
                print(">>>   %s: %s" % (k, v))
        try:
            body = req.content
        except Exception:
            body = req.read()
        print(">>>   body: %s" % (body[:600].decode("utf-8", "replace") if body else ""))
    def rhook(resp):
        print("<<< %s %s" % (resp.status_code, resp.headers.get("content-type")))
    c = openai.OpenAI(base_url=base, api_key="none", max_retries=0,
                      http_client=httpx2.Client(event_hooks={"request": [hook], "response": [rhook]}))
    def attempt(name, fn):
        print("=== " + name)
        try:
            fn()
            print("OK")
        except Exception as e:
            print("EXCEPTION %s: %s" % (type(e).__name__, e))
        sys.stdout.flush()
    def emb_default():
        r = c.embeddings.create(model="emb", input="hello")
        print("data[0].embedding", r.data[0].embedding, "usage", r.usage, "model", r.model)
    attempt("embeddings.create(model=emb, input='hello') (SDK default encoding)", emb_default)
    def emb_float():
        r = c.embeddings.create(model="emb", input=["a", "b c"], encoding_format="float")
        print([d.embedding for d in r.data], r.usage)
    attempt("embeddings.create(encoding_format='float', two inputs)", emb_float)
    def emb_b64():
        r = c.embeddings.create(model="emb-tok", input="hello", encoding_format="base64")
        print("data[0].embedding", r.data[0].embedding)
    attempt("embeddings.create(model=emb-tok, encoding_format='base64')", emb_b64)
    def emb_dims():
        r = c.embeddings.create(model="emb", input="hello", dimensions=3)
        print(r.data[0].embedding)
    attempt("embeddings.create(dimensions=3)", emb_dims)
    def emb_unknown():
        c.embeddings.create(model="nope", input="hello")
    attempt("embeddings.create(model=nope)", emb_unknown)
    def img():
        r = c.images.generate(model="img", prompt="a cat", response_format="b64_json", size="256x256")
        print("created", r.created, "data", [(d.url, (d.b64_json or "")[:24], d.revised_prompt) for d in r.data])
        print("model_dump", r.model_dump(exclude_none=True))
    attempt("images.generate(model=img, response_format=b64_json)", img)
    def img_url():
        r = c.images.generate(model="img", prompt="a dog", n=2)
        print([d.url for d in r.data])
    attempt("images.generate(n=2) (url)", img_url)
    def img_edit():
        r = c.images.edit(model="img", prompt="edit", image=("x.png", b"\x89PNG", "image/png"))
        print(r)
    attempt("images.edit (multipart upload)", img_edit)
    def speech(fmt):
        def run():
            kw = {} if fmt is None else {"response_format": fmt}
            r = c.audio.speech.create(model="tts", voice="alloy", input="Hello there", **kw)
            data = r.read()
            print("content-type", r.response.headers.get("content-type"), "content-length",
                  r.response.headers.get("content-length"), "bytes", len(data), data[:12])
        return run
    attempt("audio.speech.create(model=tts) (default format)", speech(None))
    attempt("audio.speech.create(response_format='mp3')", speech("mp3"))
    attempt("audio.speech.create(response_format='pcm')", speech("pcm"))
    def speech_stream():
        with c.audio.speech.with_streaming_response.create(model="tts", voice="alloy", input="Hi",
                                                           response_format="wav") as r:
            n = 0
            for chunk in r.iter_bytes():
                n += len(chunk)
            print("streamed", n, "bytes", r.headers.get("content-type"))
    attempt("audio.speech.with_streaming_response.create(wav)", speech_stream)
    def speech_empty():
        c.audio.speech.create(model="tts", voice="alloy", input=" ")
    attempt("audio.speech.create(input=' ') (worker answers status failed)", speech_empty)

def ws(url, scenario):
    import websocket
    conn = websocket.create_connection(url, timeout=10)
    print("connected; handshake status", conn.getstatus(), "headers:",
          {k: v for k, v in conn.getheaders().items() if k.lower() != "date"})
    def recv(n=1, until=None, limit=60):
        got = 0
        for _ in range(limit):
            try:
                op, data = conn.recv_data(control_frame=True)
            except websocket.WebSocketTimeoutException:
                print("<< (timeout)")
                return False
            except websocket.WebSocketConnectionClosedException:
                print("<< (connection closed)")
                return False
            if op == websocket.ABNF.OPCODE_CLOSE:
                code = struct.unpack(">H", data[:2])[0] if len(data) >= 2 else None
                print("<< CLOSE code=%s reason=%r" % (code, data[2:].decode("utf-8", "replace")))
                return False
            if op in (websocket.ABNF.OPCODE_PING, websocket.ABNF.OPCODE_PONG):
                print("<< control opcode", op)
                continue
            text = data.decode("utf-8", "replace")
            print("<< " + ("TEXT " if op == 1 else "BINARY ") + text)
            got += 1
            if until is not None:
                try:
                    if json.loads(text).get("type") == until:
                        return True
                except ValueError:
                    pass
            elif got >= n:
                return True
        return True
    def send(obj):
        text = obj if isinstance(obj, str) else json.dumps(obj)
        print(">> TEXT " + text)
        conn.send(text)
    def send_binary(b):
        print(">> BINARY %r" % b)
        conn.send_binary(b)
    update = {"type": "session.update", "session": {"type": "realtime", "model": "rt"}}
    item = {"type": "conversation.item.create", "event_id": "evt_client_1",
            "item": {"type": "message", "role": "user", "content": [{"type": "input_text", "text": "Say hello"}]}}
    def close():
        print(">> CLOSE 1000")
        conn.send_close(1000, b"bye")
        recv(n=99, limit=5)
    recv()  # session.created
    if scenario == "basic":
        send(update); recv()
        send(item); recv(2)
        send({"type": "response.create"}); recv(until="response.done")
        close()
    elif scenario == "selection-errors":
        send({"type": "response.create"}); recv()
        send("this is not json"); recv()
        send_binary(b"\x01\x02"); recv()
        send({"type": "session.update", "session": {"type": "realtime"}}); recv()
        send({"type": "session.update", "session": {"type": "realtime", "model": ""}}); recv()
        send({"type": "session.update", "session": {"type": "realtime", "model": "nope"}}); recv()
        send({"type": "session.update", "session": {"type": "realtime", "model": "emb"}}); recv()
        send({"type": "session.update", "session": {"type": "transcription"}}); recv()
        send({"type": "bogus.event"}); recv()
        send(update); recv()
        close()
    elif scenario == "full-session-update":
        send({"type": "session.update", "event_id": "evt_su", "session": {
            "type": "realtime", "model": "rt", "instructions": "Be brief.", "max_output_tokens": 64,
            "output_modalities": ["text"], "tool_choice": "auto", "tools": [], "truncation": "auto",
            "bogus_field": 1}}); recv()
        send(item); recv(2)
        send({"type": "response.create", "event_id": "evt_rc", "response": {
            "instructions": "Answer.", "max_output_tokens": 1, "metadata": {"k": "v"}}})
        recv(until="response.done")
        close()
    elif scenario == "input-text":
        send(update); recv()
        send({"type": "input_text.append", "text": "Say "})
        send({"type": "input_text.append", "text": "hello"})
        send({"type": "input_text.commit"}); recv(2)
        send({"type": "response.create"}); recv(until="response.done")
        send({"type": "input_text.clear"})
        send({"type": "response.cancel"}); recv()
        close()
    elif scenario == "worker-errors":
        send(update); recv()
        send({"type": "response.create"}); recv()
        send({"type": "input_audio_buffer.append", "audio": "AAAA"}); recv()
        send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "FAIL_RUNTIME"}]}}); recv(2)
        send({"type": "response.create"}); recv(until="response.done")
        close()
    elif scenario == "malformed-after-select":
        send(update); recv()
        send("{not json"); recv(n=99, limit=5)
    elif scenario == "unknown-event-after-select":
        send(update); recv()
        send({"type": "bogus.event"}); recv(n=99, limit=5)
    elif scenario == "binary-after-select":
        send(update); recv()
        send_binary(b"\x00\x01"); recv(n=99, limit=5)
    elif scenario == "transcription-session":
        send({"type": "session.update", "session": {"type": "transcription", "audio": {"input": {
            "format": {"type": "audio/pcm", "rate": 24000}, "transcription": {"model": "rt"}}}}})
        recv(n=99, limit=5)
    elif scenario == "worker-ends":
        send(update); recv()
        send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "WORKER_ENDS"}]}})
        recv(n=99, limit=10)
    elif scenario == "worker-raises":
        send(update); recv()
        send({"type": "conversation.item.create", "item": {"type": "message", "role": "user",
              "content": [{"type": "input_text", "text": "WORKER_RAISES"}]}})
        recv(n=99, limit=10)
    elif scenario == "session-max-tokens":
        send({"type": "session.update", "session": {"type": "realtime", "model": "rt",
              "max_output_tokens": 1, "instructions": "Be brief."}}); recv()
        send(item); recv(2)
        send({"type": "response.create"}); recv(until="response.done")
        close()
    elif scenario == "response-create-full":
        send(update); recv()
        send(item); recv(2)
        send({"type": "response.create", "event_id": "evt_rc", "response": {
            "audio": {"output": {"format": {"type": "audio/pcm", "rate": 24000}, "voice": "alloy"}},
            "conversation": "auto", "input": [], "instructions": "Answer.", "max_output_tokens": 1,
            "output_modalities": ["text"], "metadata": {"k": "v"}}})
        recv(until="response.done")
        close()
    elif scenario == "alias":
        send({"type": "session.update", "session": {"type": "realtime", "model": "rt-alias"}}); recv()
        close()
    elif scenario == "no-frames":
        time.sleep(1)
        close()
    elif scenario == "client-drops":
        send(update); recv()
        send(item); recv(2)
        send({"type": "response.create"}); recv(1)
        print(">> (socket closed without a close frame)")
        conn.sock.close()
        time.sleep(1)
        return
    try:
        conn.close()
    except Exception:
        pass

def metrics(path):
    keep = ("dynamo_frontend_",)
    for line in open(path):
        if line.startswith("#"):
            if any(k in line for k in keep) and ("TYPE" in line or "HELP" in line):
                print(line.rstrip())
            continue
        if any(line.startswith(k) for k in keep) and "_bucket{" not in line:
            print(line.rstrip())

def fold(out, dest):
    """Every HTTP and WebSocket case of OUT as one JSON line (tests/data/surfaces/)."""
    import os, re
    skip = re.compile(r"^(005-openapi|005-health|1005-openapi|1103-openapi|167-|9[05]\d-metrics|109\d-metrics|901-sdk|1110)")
    rows = []
    for name in sorted(os.listdir(out)):
        if not name.endswith(".txt") or skip.match(name):
            continue
        case = name[:-4]
        txt = open(os.path.join(out, name), encoding="utf-8", errors="replace").read()
        worker = []
        if "--- worker received:" in txt:
            part = txt.split("--- worker received:", 1)[1].split("--- metrics changed:", 1)[0]
            worker = [json.loads(l) for l in part.splitlines() if l.startswith("{")]
        raw_path = os.path.join(out, case + ".raw")
        if not os.path.exists(raw_path):
            lines = [l for l in txt.splitlines() if l.startswith(("<< ", ">> ", "connected"))]
            rows.append({"case": case, "websocket": lines, "worker": worker})
            continue
        method, path = txt.splitlines()[0][2:].split(" ", 1)
        req_headers, body = [], None
        for l in txt.splitlines()[1:]:
            if not l.startswith("> "):
                break
            if l.startswith("> content-type: "):
                req_headers.append(["content-type", l[len("> content-type: "):]])
            elif l.startswith("> curl arg: ") and not l.startswith("> curl arg: -"):
                req_headers.append(["curl", l[len("> curl arg: "):]])
            else:
                body = l[2:]
        row = {"case": case, "method": method, "path": path, "request_headers": req_headers,
               "request_body": body}
        raw = open(raw_path, "rb").read()
        if raw:
            head, rbody = split_raw(raw)
            lines = head.split("\r\n")
            row["status"] = int(lines[0].split()[1])
            row["response_headers"] = [h.split(": ", 1) for h in lines[1:]
                                       if not h.lower().startswith("date:")]
            try:
                row["response_body"] = {"text": rbody.decode("utf-8")}
            except UnicodeDecodeError:
                row["response_body"] = {"base64": base64.b64encode(rbody).decode()}
        else:
            row["status"] = None
        err = os.path.join(out, case + ".err")
        if os.path.exists(err):
            row["curl_error"] = open(err).read().strip()
        row["worker"] = worker
        rows.append(row)
    with open(dest, "w") as f:
        for r in rows:
            f.write(json.dumps(r, separators=(",", ":")) + "\n")
    print("%d cases in %s" % (len(rows), dest))

if __name__ == "__main__":
    cmd = sys.argv[1]
    if cmd == "show":
        show(sys.argv[2])
    elif cmd == "sdk":
        sdk(sys.argv[2])
    elif cmd == "ws":
        try:
            ws(sys.argv[2], sys.argv[3])
        except Exception as e:
            print("EXCEPTION %s: %s" % (type(e).__name__, e))
            traceback.print_exc(limit=2, file=sys.stdout)
    elif cmd == "metrics":
        metrics(sys.argv[2])
    elif cmd == "fold":
        fold(sys.argv[2], sys.argv[3])
EOF

# ---------------------------------------------------------------------------------------------
# wait_ready PORT NAME...: until `GET <models path>/NAME/ready` answers 200 for every NAME
# (MODELS_PATH, default /v1/models; three minutes at most each)
wait_ready() {
  local port=$1 m; shift
  for m in "$@"; do
    for _ in $(seq 1 900); do
      [ "$(curl -s -o /dev/null -w '%{http_code}' "127.0.0.1:$port${MODELS_PATH:-/v1/models}/$m/ready")" = 200 ] &&
        continue 2
      sleep 0.2
    done
    echo "FAIL: $m not ready on $port" >&2; tail -n 30 "$LOGS"/*.log >&2; exit 1
  done
}

reclines() { wc -l <"$REC"; }

# the frontend counters a case may move (compared before and after each case)
METRICS_RE='^dynamo_frontend_(requests_total|requests_started_total|failures_total|embedding_latency_seconds_count|request_duration_seconds_count|disconnected_clients|output_tokens_total|input_sequence_tokens_count|time_to_first_token_seconds_count|inter_token_latency_seconds_count|model_cancellation|model_rejection)'
metrics_snapshot() { curl -s "127.0.0.1:${RPORT:-$PORT}/metrics" | grep -E "$METRICS_RE" | sort || true; }
# metrics_changed BEFORE-FILE: the counter lines that changed since BEFORE-FILE
metrics_changed() {
  local changed
  sleep 0.3 # the counters move when the handler's guards drop, just after the last body byte
  changed=$(diff "$1" <(metrics_snapshot) | sed -n 's/^> //p' || true)
  echo "--- metrics changed:"
  if [ -n "$changed" ]; then echo "$changed"; else echo "(none)"; fi
}

# worker_since N: the worker records after line N
worker_since() {
  local n=$1
  sleep "${REC_WAIT:-0.2}"
  if [ "$(reclines)" -gt "$n" ]; then
    echo "--- worker received:"
    tail -n +"$((n + 1))" "$REC"
  else
    echo "--- worker received: nothing"
  fi
}

# req NAME METHOD PATH [BODY [CONTENT-TYPE [curl args...]]]: one HTTP exchange into
# $OUT/NAME.txt (and the raw bytes in $OUT/NAME.raw). CONTENT-TYPE "-" sends no content-type.
req() {
  local name=$1 method=$2 path=$3 body=${4-} ctype=${5:-application/json}
  shift 5 2>/dev/null || shift $#
  local f="$OUT/$name.txt" n
  n=$(reclines)
  metrics_snapshot >"$OBS/metrics-before"
  local args=(-sS -i -N -m 30 -X "$method")
  if [ -n "$body" ]; then
    [ "$ctype" != - ] && args+=(-H "content-type: $ctype")
    args+=(--data-binary "$body")
  fi
  curl "${args[@]}" "$@" "http://127.0.0.1:${RPORT:-$PORT}$path" >"$OUT/$name.raw" 2>"$OUT/$name.err" || true
  [ -s "$OUT/$name.err" ] || rm -f "$OUT/$name.err"
  {
    echo "> $method $path"
    [ -n "$body" ] && [ "$ctype" != - ] && echo "> content-type: $ctype"
    local a; for a in "$@"; do echo "> curl arg: $a"; done
    [ -n "$body" ] && echo "> ${body:0:3000}"
    echo
    "$PY" "$OBS/client.py" show "$OUT/$name.raw"
    [ -f "$OUT/$name.err" ] && echo "--- curl reported: $(cat "$OUT/$name.err")"
    echo
    worker_since "$n"
    metrics_changed "$OBS/metrics-before"
  } >"$f"
  echo "  $name: $(head -n 1 <(tr -d '\r' <"$OUT/$name.raw"))"
}

# wscase NAME SCENARIO: one scripted WebSocket session (client.py ws) into $OUT/NAME.txt
wscase() {
  local name=$1 scenario=$2 n
  n=$(reclines)
  metrics_snapshot >"$OBS/metrics-before"
  {
    echo "> WebSocket ws://127.0.0.1:${RPORT:-$PORT}/v1/realtime, scenario $scenario"
    echo
    timeout 60 "$PY" -u "$OBS/client.py" ws "ws://127.0.0.1:${RPORT:-$PORT}/v1/realtime" "$scenario" 2>&1
    echo
    REC_WAIT=1 worker_since "$n"
    metrics_changed "$OBS/metrics-before"
  } >"$OUT/$name.txt"
  echo "  $name: $(grep -c '^<<' "$OUT/$name.txt") frames received"
}

J=application/json
P1=(emb emb-alias emb-tok org/emb-slash img vid tts cls pool rr rt cls/ready)

# =============================================================================================
echo "phase 1: surfaces worker + dynamo.frontend on $PORT"
"$PY" "$REPO/scripts/surfaces_worker.py" --model-dir "$MODEL_DIR" --record "$REC" --unready \
  >"$LOGS/worker.log" 2>&1 &
PIDS+=("$!")
"$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$PORT" >"$LOGS/frontend-1.log" 2>&1 &
FE=$!
PIDS+=("$FE")
wait_ready "$PORT" "${P1[@]}"
sleep 2 # cls-wait is committed a moment after the listed ones

echo "0. listing, retrieve, readiness, docs, unmounted routes"
req 001-models GET /v1/models
for id in emb emb-alias emb-tok org/emb-slash img vid tts cls pool rr rt cls/ready cls-wait nope; do
  req "002-model-$(echo "$id" | tr '/' '_')" GET "/v1/models/$id"
done
for id in emb emb-alias emb-tok org/emb-slash img vid tts cls pool rr rt cls-wait nope org/nope; do
  req "003-ready-$(echo "$id" | tr '/' '_')" GET "/v1/models/$id/ready"
done
req 004-model-trailing-slash GET /v1/models/emb/
req 004-model-empty-id GET /v1/models/
req 004-model-double-slash GET /v1/models//emb
req 004-model-encoded-slash GET /v1/models/org%2Femb-slash
req 004-model-post POST /v1/models/emb '{}'
req 004-models-post POST /v1/models '{}'
req 005-openapi GET /openapi.json
req 005-health GET /health
req 005-live GET /live
for p in /v1/batches /v1/files /v1/batches/b1 /v1/files/f1/content /inference/v1/generate /generate \
         /v1/images/variations /v1/audio/transcriptions /v1/audio/translations /v1/moderations; do
  req "006-unmounted$(echo "$p" | tr '/' '_')" POST "$p" '{"model":"emb"}'
done
req 006-unmounted_get_batches GET /v1/batches/b1
req 006-chat-disabled POST /v1/chat/completions '{"model":"emb","messages":[{"role":"user","content":"hi"}]}'
req 006-completions-disabled POST /v1/completions '{"model":"emb","prompt":"hi"}'
req 006-responses-no-chat-model POST /v1/responses '{"model":"emb","input":"hi"}'
for p in /v1/embeddings /v1/images/generations /v1/images/edits /v1/videos /v1/videos/stream \
         /v1/audio/speech /v1/classify /v1/pooling /v1/rerank; do
  req "007-get$(echo "$p" | tr '/' '_')" GET "$p"
done
req 007-realtime-plain-get GET /v1/realtime
req 007-realtime-post POST /v1/realtime '{}'

echo "1. /v1/embeddings"
req 101-emb-min POST /v1/embeddings '{"model":"emb","input":"hello"}'
req 102-emb-array POST /v1/embeddings '{"model":"emb","input":["hello","the quick brown fox"]}'
req 103-emb-tokens POST /v1/embeddings '{"model":"emb","input":[1,2,3]}'
req 104-emb-token-batch POST /v1/embeddings '{"model":"emb","input":[[1,2],[3]]}'
req 105-emb-base64 POST /v1/embeddings '{"model":"emb","input":"hello","encoding_format":"base64"}'
req 106-emb-float POST /v1/embeddings '{"model":"emb","input":"hello","encoding_format":"float"}'
req 107-emb-dimensions POST /v1/embeddings '{"model":"emb","input":"hello","dimensions":3}'
req 108-emb-all-fields POST /v1/embeddings '{"model":"emb","input":["hello"],"encoding_format":"float","dimensions":4,"user":"u1","add_special_tokens":false,"truncate_prompt_tokens":16,"nvext":{"annotations":["token_ids"]},"bogus":1,"stream":true}'
req 109-emb-alias POST /v1/embeddings '{"model":"emb-alias","input":"hello"}'
req 110-emb-slash POST /v1/embeddings '{"model":"org/emb-slash","input":"hello"}'
req 111-emb-request-id POST /v1/embeddings '{"model":"emb","input":"hello"}' $J -H 'x-request-id: my-req-1' -H 'x-dynamo-request-id: 3f0e8a5c-1111-4222-8333-944455556666'
req 112-emb-stream-true POST /v1/embeddings '{"model":"emb","input":"hello","stream":true}'
req 113-emb-ctype-charset POST /v1/embeddings '{"model":"emb","input":"hello"}' 'application/json; charset=utf-8'
req 114-emb-ctype-vnd POST /v1/embeddings '{"model":"emb","input":"hello"}' 'application/vnd.api+json'
echo "   embeddings with token input (emb-tok: the frontend tokenizes)"
req 121-embtok-min POST /v1/embeddings '{"model":"emb-tok","input":"hello"}'
req 122-embtok-array POST /v1/embeddings '{"model":"emb-tok","input":["hello","the quick brown fox"]}'
req 123-embtok-tokens POST /v1/embeddings '{"model":"emb-tok","input":[1,2,3]}'
req 124-embtok-token-batch POST /v1/embeddings '{"model":"emb-tok","input":[[1,2],[3]]}'
req 125-embtok-base64 POST /v1/embeddings '{"model":"emb-tok","input":"hello","encoding_format":"base64"}'
req 126-embtok-all-fields POST /v1/embeddings '{"model":"emb-tok","input":["hello world"],"encoding_format":"float","dimensions":2,"user":"u1","add_special_tokens":false,"truncate_prompt_tokens":1,"nvext":{"annotations":["token_ids"]},"bogus":1}'
req 127-embtok-truncate-minus1 POST /v1/embeddings '{"model":"emb-tok","input":"hello world","truncate_prompt_tokens":-1}'
req 128-embtok-truncate-minus2 POST /v1/embeddings '{"model":"emb-tok","input":"hello world","truncate_prompt_tokens":-2}'
req 129-embtok-truncate-huge POST /v1/embeddings '{"model":"emb-tok","input":"hello world","truncate_prompt_tokens":100000}'
req 130-embtok-token-out-of-vocab POST /v1/embeddings '{"model":"emb-tok","input":[999999999]}'
req 131-embtok-empty-string POST /v1/embeddings '{"model":"emb-tok","input":""}'
req 132-embtok-empty-array POST /v1/embeddings '{"model":"emb-tok","input":[]}'
req 133-embtok-fail POST /v1/embeddings '{"model":"emb-tok","input":"FAIL_RUNTIME"}'
req 134-embtok-fail-invalid POST /v1/embeddings '{"model":"emb-tok","input":"FAIL_INVALID"}'
req 135-embtok-bad-b64 POST /v1/embeddings '{"model":"emb-tok","input":"BAD_B64"}'
req 136-embtok-no-items POST /v1/embeddings '{"model":"emb-tok","input":"NO_ITEMS"}'
req 137-embtok-dimensions-too-big POST /v1/embeddings '{"model":"emb-tok","input":"hello","dimensions":9}'
echo "   embeddings errors"
req 140-emb-bad-json POST /v1/embeddings '{"model":"emb",'
req 141-emb-text-plain POST /v1/embeddings '{"model":"emb","input":"hello"}' text/plain
req 142-emb-no-ctype POST /v1/embeddings '{"model":"emb","input":"hello"}' -
req 143-emb-missing-model POST /v1/embeddings '{"input":"hello"}'
req 144-emb-missing-input POST /v1/embeddings '{"model":"emb"}'
req 145-emb-unknown-model POST /v1/embeddings '{"model":"nope","input":"hello"}'
req 146-emb-other-surface POST /v1/embeddings '{"model":"img","input":"hello"}'
req 147-emb-unready-model POST /v1/embeddings '{"model":"cls-wait","input":"hello"}'
req 148-emb-empty-string POST /v1/embeddings '{"model":"emb","input":""}'
req 149-emb-empty-array POST /v1/embeddings '{"model":"emb","input":[]}'
req 150-emb-mixed-array POST /v1/embeddings '{"model":"emb","input":["a",1]}'
req 151-emb-number-input POST /v1/embeddings '{"model":"emb","input":5}'
req 152-emb-null-input POST /v1/embeddings '{"model":"emb","input":null}'
req 153-emb-negative-token POST /v1/embeddings '{"model":"emb","input":[-1]}'
req 154-emb-bad-format POST /v1/embeddings '{"model":"emb","input":"hello","encoding_format":"bogus"}'
req 155-emb-dimensions-zero POST /v1/embeddings '{"model":"emb","input":"hello","dimensions":0}'
req 156-emb-dimensions-negative POST /v1/embeddings '{"model":"emb","input":"hello","dimensions":-1}'
req 157-emb-dimensions-string POST /v1/embeddings '{"model":"emb","input":"hello","dimensions":"3"}'
req 158-emb-dimensions-too-big POST /v1/embeddings '{"model":"emb","input":"hello","dimensions":9}'
req 159-emb-model-number POST /v1/embeddings '{"model":7,"input":"hello"}'
req 160-emb-empty-model POST /v1/embeddings '{"model":"","input":"hello"}'
req 161-emb-empty-body POST /v1/embeddings ' '
req 162-emb-array-body POST /v1/embeddings '[]'
req 163-emb-n-field POST /v1/embeddings '{"model":"emb","input":"hello","n":2}'
req 164-emb-nvext-bad POST /v1/embeddings '{"model":"emb","input":"hello","nvext":{"annotations":"x"}}'
req 165-emb-truncate-string POST /v1/embeddings '{"model":"emb","input":"hello","truncate_prompt_tokens":"2"}'
"$PY" -c "import sys; sys.stdout.write('{\"model\":\"emb\",\"input\":\"' + 'a' * (46 * 1024 * 1024) + '\"}')" >"$OBS/big.json"
req 167-emb-body-over-45mb POST /v1/embeddings "@$OBS/big.json"
rm -f "$OBS/big.json"
req 166-emb-control-char POST /v1/embeddings "$(printf '{"model":"emb","input":"a\tb"}')"
echo "   embeddings worker errors and folds"
req 170-emb-fail-runtime POST /v1/embeddings '{"model":"emb","input":"FAIL_RUNTIME"}'
req 171-emb-fail-value POST /v1/embeddings '{"model":"emb","input":"FAIL_VALUE"}'
req 172-emb-fail-invalid POST /v1/embeddings '{"model":"emb","input":"FAIL_INVALID"}'
req 173-emb-fail-after POST /v1/embeddings '{"model":"emb","input":"FAIL_AFTER"}'
req 174-emb-multi-item POST /v1/embeddings '{"model":"emb","input":["MULTI_ITEM","b","c"]}'
req 175-emb-multi-item-b64 POST /v1/embeddings '{"model":"emb","input":["MULTI_ITEM","b"],"encoding_format":"base64"}'
req 176-emb-no-items POST /v1/embeddings '{"model":"emb","input":"NO_ITEMS"}'
req 177-emb-bad-b64-float POST /v1/embeddings '{"model":"emb","input":"BAD_B64"}'
req 178-emb-bad-b64-base64 POST /v1/embeddings '{"model":"emb","input":"BAD_B64","encoding_format":"base64"}'

echo "2. /v1/images/generations and /v1/images/edits"
req 201-img-min POST /v1/images/generations '{"model":"img","prompt":"a cat"}'
req 202-img-b64 POST /v1/images/generations '{"model":"img","prompt":"a cat","response_format":"b64_json"}'
req 203-img-n2 POST /v1/images/generations '{"model":"img","prompt":"a cat","n":2}'
req 204-img-all-fields POST /v1/images/generations '{"model":"img","prompt":"a cat","n":1,"quality":"hd","response_format":"url","output_format":"webp","output_compression":80,"stream":false,"partial_images":0,"size":"512x512","moderation":"low","background":"transparent","style":"natural","user":"u1","input_reference":"data:image/png;base64,iVBORw0KGgo=","nvext":{"annotations":["a"],"negative_prompt":"dogs","num_inference_steps":4,"guidance_scale":3.5,"seed":42},"extra_args":{"x":1},"guidance_rescale":0.7,"num_frames":3}'
req 205-img-size-other POST /v1/images/generations '{"model":"img","prompt":"a cat","size":"640x480"}'
req 206-img-size-bad POST /v1/images/generations '{"model":"img","prompt":"a cat","size":"huge"}'
req 207-img-no-model POST /v1/images/generations '{"prompt":"a cat"}'
req 208-img-openai-model POST /v1/images/generations '{"model":"dall-e-3","prompt":"a cat"}'
req 209-img-unknown-model POST /v1/images/generations '{"model":"nope","prompt":"a cat"}'
req 210-img-other-surface POST /v1/images/generations '{"model":"emb","prompt":"a cat"}'
req 211-img-missing-prompt POST /v1/images/generations '{"model":"img"}'
req 212-img-bad-json POST /v1/images/generations '{"model":'
req 213-img-text-plain POST /v1/images/generations '{"model":"img","prompt":"a cat"}' text/plain
req 214-img-n0 POST /v1/images/generations '{"model":"img","prompt":"a cat","n":0}'
req 215-img-n300 POST /v1/images/generations '{"model":"img","prompt":"a cat","n":300}'
req 216-img-n-string POST /v1/images/generations '{"model":"img","prompt":"a cat","n":"2"}'
req 217-img-bad-response-format POST /v1/images/generations '{"model":"img","prompt":"a cat","response_format":"png"}'
req 218-img-bad-quality POST /v1/images/generations '{"model":"img","prompt":"a cat","quality":"ultra"}'
req 219-img-nvext-steps-300 POST /v1/images/generations '{"model":"img","prompt":"a cat","nvext":{"num_inference_steps":300}}'
req 220-img-empty-prompt POST /v1/images/generations '{"model":"img","prompt":""}'
req 221-img-fail-runtime POST /v1/images/generations '{"model":"img","prompt":"FAIL_RUNTIME"}'
req 222-img-fail-invalid POST /v1/images/generations '{"model":"img","prompt":"FAIL_INVALID"}'
req 223-img-fail-value POST /v1/images/generations '{"model":"img","prompt":"FAIL_VALUE"}'
req 224-img-fail-after POST /v1/images/generations '{"model":"img","prompt":"FAIL_AFTER","n":2,"response_format":"b64_json"}'
req 225-img-multi-item POST /v1/images/generations '{"model":"img","prompt":"MULTI_ITEM","n":2}'
req 226-img-no-items POST /v1/images/generations '{"model":"img","prompt":"NO_ITEMS"}'
req 227-img-unready POST /v1/images/generations '{"model":"cls-wait","prompt":"a cat"}'
req 230-edits-min POST /v1/images/edits '{"model":"img","prompt":"make it blue","input_reference":"http://127.0.0.1:9/x.png"}'
req 231-edits-no-reference POST /v1/images/edits '{"model":"img","prompt":"make it blue"}'
req 232-edits-null-reference POST /v1/images/edits '{"model":"img","prompt":"make it blue","input_reference":null}'
req 233-edits-reference-number POST /v1/images/edits '{"model":"img","prompt":"make it blue","input_reference":5}'
req 234-edits-multipart POST /v1/images/edits '' - -F model=img -F prompt=blue -F 'image=@/dev/null;filename=x.png;type=image/png'
req 235-edits-openai-json POST /v1/images/edits '{"model":"img","prompt":"blue","images":[{"image_url":"http://127.0.0.1:9/x.png"}]}'
req 236-edits-unknown-model POST /v1/images/edits '{"model":"nope","prompt":"blue","input_reference":"x"}'
req 237-edits-bad-json POST /v1/images/edits '{'

echo "3. /v1/videos and /v1/videos/stream"
req 301-vid-min POST /v1/videos '{"model":"vid","prompt":"a cat running"}'
req 302-vid-url POST /v1/videos '{"model":"vid","prompt":"a cat","response_format":"url"}'
req 303-vid-all-fields POST /v1/videos '{"model":"vid","prompt":"a cat","input_reference":"http://127.0.0.1:9/x.png","seconds":2,"size":"832x480","user":"u1","response_format":"b64_json","output_format":"mp4","stream":false,"nvext":{"annotations":["a"],"fps":8,"num_frames":16,"negative_prompt":"dogs","num_inference_steps":4,"guidance_scale":5.0,"seed":1,"boundary_ratio":0.9,"guidance_scale_2":3.0},"extra_args":{"x":1},"flow_shift":5.0}'
req 304-vid-stream POST /v1/videos '{"model":"vid","prompt":"a cat","stream":true}'
req 305-vid-stream-fail-after POST /v1/videos '{"model":"vid","prompt":"FAIL_AFTER","stream":true}'
req 306-vid-stream-fail-runtime POST /v1/videos '{"model":"vid","prompt":"FAIL_RUNTIME","stream":true}'
req 307-vid-fail-status POST /v1/videos '{"model":"vid","prompt":"FAIL_STATUS"}'
req 308-vid-fail-runtime POST /v1/videos '{"model":"vid","prompt":"FAIL_RUNTIME"}'
req 309-vid-fail-invalid POST /v1/videos '{"model":"vid","prompt":"FAIL_INVALID"}'
req 310-vid-multi-item POST /v1/videos '{"model":"vid","prompt":"MULTI_ITEM"}'
req 311-vid-no-items POST /v1/videos '{"model":"vid","prompt":"NO_ITEMS"}'
req 312-vid-missing-model POST /v1/videos '{"prompt":"a cat"}'
req 313-vid-missing-prompt POST /v1/videos '{"model":"vid"}'
req 314-vid-unknown-model POST /v1/videos '{"model":"nope","prompt":"a cat"}'
req 315-vid-seconds-string POST /v1/videos '{"model":"vid","prompt":"a cat","seconds":"4"}'
req 316-vid-bad-response-format POST /v1/videos '{"model":"vid","prompt":"a cat","response_format":"gif"}'
req 317-vid-bad-output-format POST /v1/videos '{"model":"vid","prompt":"a cat","output_format":"webm"}'
req 318-vid-text-plain POST /v1/videos '{"model":"vid","prompt":"a cat"}' text/plain
req 319-vid-stream-fail-status POST /v1/videos '{"model":"vid","prompt":"FAIL_STATUS","stream":true}'
req 320-vid-stream-no-items POST /v1/videos '{"model":"vid","prompt":"NO_ITEMS","stream":true}'
req 330-vstream-mjpeg POST /v1/videos/stream '{"model":"vid","prompt":"a cat","output_format":"mjpeg","nvext":{"num_frames":3}}'
req 331-vstream-mjpeg-raw POST /v1/videos/stream '{"model":"vid","prompt":"a cat","output_format":"mjpeg","nvext":{"num_frames":2}}' $J --raw
req 332-vstream-mp4 POST /v1/videos/stream '{"model":"vid","prompt":"a cat"}'
req 333-vstream-url POST /v1/videos/stream '{"model":"vid","prompt":"a cat","response_format":"url"}'
req 334-vstream-fail-runtime POST /v1/videos/stream '{"model":"vid","prompt":"FAIL_RUNTIME"}'
req 335-vstream-fail-after POST /v1/videos/stream '{"model":"vid","prompt":"FAIL_AFTER","output_format":"mjpeg"}'
req 336-vstream-unknown-model POST /v1/videos/stream '{"model":"nope","prompt":"a cat"}'
req 337-vstream-stream-true POST /v1/videos/stream '{"model":"vid","prompt":"a cat","stream":true,"output_format":"mjpeg","nvext":{"num_frames":1}}'
req 338-vstream-fail-status POST /v1/videos/stream '{"model":"vid","prompt":"FAIL_STATUS"}'

echo "4. /v1/audio/speech"
req 401-tts-min POST /v1/audio/speech '{"model":"tts","input":"Hello there"}'
req 402-tts-min-raw POST /v1/audio/speech '{"model":"tts","input":"Hello there"}' $J --raw
req 403-tts-pcm POST /v1/audio/speech '{"model":"tts","input":"Hello","response_format":"pcm"}'
for fmt in mp3 flac aac opus wav-speed ogg MP3; do
  case $fmt in
    wav-speed) req 404-tts-wav-speed POST /v1/audio/speech '{"model":"tts","input":"Hello","response_format":"wav","speed":1.5}' ;;
    *) req "404-tts-$fmt" POST /v1/audio/speech "{\"model\":\"tts\",\"input\":\"Hello\",\"response_format\":\"$fmt\"}" ;;
  esac
done
req 405-tts-speed-1 POST /v1/audio/speech '{"model":"tts","input":"Hello","speed":1.0}'
req 406-tts-url POST /v1/audio/speech '{"model":"tts","input":"Hello","data_source":"url"}'
req 407-tts-b64-source POST /v1/audio/speech '{"model":"tts","input":"Hello","data_source":"b64_json","response_format":"mp3"}'
req 408-tts-all-fields POST /v1/audio/speech '{"model":"tts","input":"Hello","voice":"Vivian","data_source":"b64_json","response_format":"wav","speed":1.0,"task_type":"CustomVoice","language":"English","instructions":"calm","ref_audio":"data:audio/wav;base64,UklGRg==","ref_text":"ref","max_new_tokens":64,"user":"u1","nvext":{"annotations":["a"],"cfg_scale":1.5,"frontend_accepts_audio_chunks":false},"extra_args":{"x":1},"stream":true,"temperature":0.7}'
req 409-tts-no-model POST /v1/audio/speech '{"input":"Hello"}'
req 410-tts-unknown-model POST /v1/audio/speech '{"model":"nope","input":"Hello"}'
req 411-tts-other-surface POST /v1/audio/speech '{"model":"emb","input":"Hello"}'
req 412-tts-speed-low POST /v1/audio/speech '{"model":"tts","input":"Hello","speed":0.1}'
req 413-tts-speed-high POST /v1/audio/speech '{"model":"tts","input":"Hello","speed":5}'
req 414-tts-empty-input POST /v1/audio/speech '{"model":"tts","input":" "}'
req 415-tts-missing-input POST /v1/audio/speech '{"model":"tts"}'
req 416-tts-bad-data-source POST /v1/audio/speech '{"model":"tts","input":"Hello","data_source":"file"}'
req 417-tts-fail-status POST /v1/audio/speech '{"model":"tts","input":"FAIL_STATUS"}'
req 418-tts-fail-status-mp3 POST /v1/audio/speech '{"model":"tts","input":"FAIL_STATUS","response_format":"mp3"}'
req 419-tts-fail-runtime POST /v1/audio/speech '{"model":"tts","input":"FAIL_RUNTIME"}'
req 420-tts-fail-runtime-mp3 POST /v1/audio/speech '{"model":"tts","input":"FAIL_RUNTIME","response_format":"mp3"}'
req 421-tts-fail-invalid POST /v1/audio/speech '{"model":"tts","input":"FAIL_INVALID"}'
req 422-tts-fail-after POST /v1/audio/speech '{"model":"tts","input":"FAIL_AFTER"}'
req 423-tts-fail-after-mp3 POST /v1/audio/speech '{"model":"tts","input":"FAIL_AFTER","response_format":"mp3"}'
req 424-tts-multi-item-mp3 POST /v1/audio/speech '{"model":"tts","input":"MULTI_ITEM","response_format":"mp3"}'
req 425-tts-no-items POST /v1/audio/speech '{"model":"tts","input":"NO_ITEMS"}'
req 426-tts-no-items-mp3 POST /v1/audio/speech '{"model":"tts","input":"NO_ITEMS","response_format":"mp3"}'
req 427-tts-url-fail-status POST /v1/audio/speech '{"model":"tts","input":"FAIL_STATUS","data_source":"url"}'
req 428-tts-bad-json POST /v1/audio/speech '{"model"'
req 429-tts-text-plain POST /v1/audio/speech '{"model":"tts","input":"Hello"}' text/plain
req 430-tts-unready POST /v1/audio/speech '{"model":"cls-wait","input":"Hello"}'
req 431-tts-fail-status-after POST /v1/audio/speech '{"model":"tts","input":"FAIL_STATUS_AFTER"}'
req 432-tts-fail-status-after-raw POST /v1/audio/speech '{"model":"tts","input":"FAIL_STATUS_AFTER"}' $J --raw
req 433-tts-fail-after-raw POST /v1/audio/speech '{"model":"tts","input":"FAIL_AFTER"}' $J --raw
req 434-tts-multi-item-url POST /v1/audio/speech '{"model":"tts","input":"MULTI_ITEM","data_source":"url"}'
req 435-tts-pcm-speed POST /v1/audio/speech '{"model":"tts","input":"Hello","response_format":"pcm","speed":2}'
req 436-tts-empty-string POST /v1/audio/speech '{"model":"tts","input":""}'

echo "5. /v1/classify"
req 501-cls-min POST /v1/classify '{"model":"cls","input":"I love it"}'
req 502-cls-batch POST /v1/classify '{"model":"cls","input":["I love it","I hate it"]}'
req 503-cls-tokens POST /v1/classify '{"model":"cls","input":[1,2,3]}'
req 504-cls-token-batch POST /v1/classify '{"model":"cls","input":[[1,2],[3]]}'
req 505-cls-all-fields POST /v1/classify '{"model":"cls","input":"x","user":"u1","request_id":"rid-1","priority":3,"mm_processor_kwargs":{"a":1},"cache_salt":"salt","use_activation":false,"add_special_tokens":true,"truncate_prompt_tokens":8,"truncation_side":"left","nvext":{"annotations":["a"]},"bogus":1}'
req 506-cls-cache-salt-empty POST /v1/classify '{"model":"cls","input":"x","cache_salt":""}'
req 507-cls-truncation-side-bad POST /v1/classify '{"model":"cls","input":"x","truncation_side":"middle"}'
req 508-cls-priority-string POST /v1/classify '{"model":"cls","input":"x","priority":"high"}'
req 509-cls-missing-input POST /v1/classify '{"model":"cls"}'
req 510-cls-missing-model POST /v1/classify '{"input":"x"}'
req 511-cls-unknown-model POST /v1/classify '{"model":"nope","input":"x"}'
req 512-cls-other-surface POST /v1/classify '{"model":"rr","input":"x"}'
req 513-cls-on-pool-model POST /v1/classify '{"model":"pool","input":"x"}'
req 514-cls-unready POST /v1/classify '{"model":"cls-wait","input":"x"}'
req 515-cls-empty-array POST /v1/classify '{"model":"cls","input":[]}'
req 516-cls-mixed POST /v1/classify '{"model":"cls","input":["a",1]}'
req 517-cls-bad-json POST /v1/classify '{"model":'
req 518-cls-text-plain POST /v1/classify '{"model":"cls","input":"x"}' text/plain
req 519-cls-multi-item POST /v1/classify '{"model":"cls","input":["MULTI_ITEM","b"]}'
req 520-cls-fail-value POST /v1/classify '{"model":"cls","input":"FAIL_VALUE"}'
req 521-cls-fail-runtime POST /v1/classify '{"model":"cls","input":"FAIL_RUNTIME"}'
req 522-cls-no-items POST /v1/classify '{"model":"cls","input":"NO_ITEMS"}'
req 523-cls-slash-ready-model POST /v1/classify '{"model":"cls/ready","input":"x"}'
req 524-cls-encoding-format POST /v1/classify '{"model":"cls","input":"x","encoding_format":"float"}'
req 526-cls-x-request-id POST /v1/classify '{"model":"cls","input":"x"}' $J -H 'x-request-id: xr-cls'
req 527-cls-x-dynamo-request-id POST /v1/classify '{"model":"cls","input":"x"}' $J -H 'x-dynamo-request-id: 3f0e8a5c-1111-4222-8333-944455556666'
req 528-cls-x-dynamo-request-id-bad POST /v1/classify '{"model":"cls","input":"x"}' $J -H 'x-dynamo-request-id: not-a-uuid'
req 529-cls-unknown-model-empty-salt POST /v1/classify '{"model":"nope","input":"x","cache_salt":""}'
req 525-cls-messages POST /v1/classify '{"model":"cls","messages":[{"role":"user","content":"x"}]}'

echo "6. /v1/pooling"
req 601-pool-min POST /v1/pooling '{"model":"pool","input":"hello"}'
req 602-pool-batch POST /v1/pooling '{"model":"pool","input":["a","b"]}'
req 603-pool-token-task POST /v1/pooling '{"model":"pool","input":"hello world","task":"token_embed"}'
req 604-pool-base64 POST /v1/pooling '{"model":"pool","input":"hello","encoding_format":"base64"}'
req 605-pool-bytes POST /v1/pooling '{"model":"pool","input":["a","b"],"encoding_format":"bytes"}'
req 606-pool-bytes-only POST /v1/pooling '{"model":"pool","input":["a","b"],"encoding_format":"bytes_only"}'
req 607-pool-bytes-f16-big POST /v1/pooling '{"model":"pool","input":"a","encoding_format":"bytes","embed_dtype":"float16","endianness":"big"}'
req 608-pool-bytes-bf16 POST /v1/pooling '{"model":"pool","input":"a","encoding_format":"bytes","embed_dtype":"bfloat16","endianness":"little"}'
req 609-pool-bytes-fp8 POST /v1/pooling '{"model":"pool","input":"a","encoding_format":"bytes","embed_dtype":"fp8_e4m3"}'
req 610-pool-bytes-matrix POST /v1/pooling '{"model":"pool","input":"hello big world","encoding_format":"bytes","task":"token_classify"}'
req 611-pool-all-fields POST /v1/pooling '{"model":"pool","input":"x","user":"u1","request_id":"rid-2","priority":-1,"mm_processor_kwargs":{"a":1},"cache_salt":"s","task":"embed","encoding_format":"float","use_activation":true,"add_special_tokens":false,"truncation_side":"right","embed_dtype":"float32","endianness":"native","truncate_prompt_tokens":4,"nvext":{"annotations":["a"]},"bogus":1}'
req 612-pool-dimensions POST /v1/pooling '{"model":"pool","input":"x","dimensions":2}'
req 613-pool-cache-salt-empty POST /v1/pooling '{"model":"pool","input":"x","cache_salt":""}'
req 614-pool-bad-format POST /v1/pooling '{"model":"pool","input":"x","encoding_format":"bogus"}'
req 615-pool-bad-dtype POST /v1/pooling '{"model":"pool","input":"x","embed_dtype":"int8"}'
req 616-pool-bad-endianness POST /v1/pooling '{"model":"pool","input":"x","endianness":"middle"}'
req 617-pool-bytes-bad-b64 POST /v1/pooling '{"model":"pool","input":"BAD_B64","encoding_format":"bytes"}'
req 618-pool-base64-bad-b64 POST /v1/pooling '{"model":"pool","input":"BAD_B64","encoding_format":"base64"}'
req 619-pool-unknown-model POST /v1/pooling '{"model":"nope","input":"x"}'
req 620-pool-on-cls-model POST /v1/pooling '{"model":"cls","input":"x"}'
req 621-pool-classify-only-model POST /v1/pooling '{"model":"cls/ready","input":"x"}'
req 622-pool-fail-value POST /v1/pooling '{"model":"pool","input":"FAIL_VALUE"}'
req 623-pool-missing-input POST /v1/pooling '{"model":"pool"}'
req 624-pool-text-plain POST /v1/pooling '{"model":"pool","input":"x"}' text/plain
req 625-pool-bytes-no-items POST /v1/pooling '{"model":"pool","input":"NO_ITEMS","encoding_format":"bytes"}'
req 626-pool-dimensions-null POST /v1/pooling '{"model":"pool","input":"x","dimensions":null}'
req 633-pool-unknown-model-dimensions POST /v1/pooling '{"model":"nope","input":"x","dimensions":2}'
req 627-pool-bytes-float-data POST /v1/pooling '{"model":"pool","input":"FLOAT_DATA","encoding_format":"bytes"}'
req 628-pool-bytes-only-float-data POST /v1/pooling '{"model":"pool","input":"FLOAT_DATA","encoding_format":"bytes_only"}'
req 629-pool-bytes-bad-shape POST /v1/pooling '{"model":"pool","input":"BAD_SHAPE","encoding_format":"bytes"}'
req 630-pool-bytes-only-bad-shape POST /v1/pooling '{"model":"pool","input":"BAD_SHAPE","encoding_format":"bytes_only"}'
req 631-pool-multi-item POST /v1/pooling '{"model":"pool","input":["MULTI_ITEM","b"]}'
req 632-pool-multi-item-bytes POST /v1/pooling '{"model":"pool","input":["MULTI_ITEM","b"],"encoding_format":"bytes"}'

echo "7. /v1/rerank"
req 701-rr-min POST /v1/rerank '{"model":"rr","query":"fast cat","documents":["a slow dog","a fast cat","the cat"]}'
req 702-rr-top-n POST /v1/rerank '{"model":"rr","query":"fast cat","documents":["a slow dog","a fast cat","the cat"],"top_n":1}'
req 703-rr-no-docs-returned POST /v1/rerank '{"model":"rr","query":"cat","documents":["a cat","b"],"return_documents":false}'
req 704-rr-all-fields POST /v1/rerank '{"model":"rr","query":"cat","documents":["a cat"],"top_n":5,"return_documents":true,"nvext":{"annotations":["a"]},"bogus":1,"user":"u1"}'
req 705-rr-top-n-zero POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"],"top_n":0}'
req 706-rr-empty-query POST /v1/rerank '{"model":"rr","query":"  ","documents":["a"]}'
req 707-rr-empty-docs POST /v1/rerank '{"model":"rr","query":"cat","documents":[]}'
req 708-rr-blank-doc POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"," "]}'
req 709-rr-missing-docs POST /v1/rerank '{"model":"rr","query":"cat"}'
req 710-rr-missing-model POST /v1/rerank '{"query":"cat","documents":["a"]}'
req 711-rr-top-n-negative POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"],"top_n":-1}'
req 712-rr-bad-json POST /v1/rerank '{"model":'
req 713-rr-text-plain POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"]}' text/plain
req 714-rr-no-ctype POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"]}' -
req 715-rr-unknown-model POST /v1/rerank '{"model":"nope","query":"cat","documents":["a"]}'
req 716-rr-other-surface POST /v1/rerank '{"model":"cls","query":"cat","documents":["a"]}'
req 717-rr-unready POST /v1/rerank '{"model":"cls-wait","query":"cat","documents":["a"]}'
req 718-rr-multi-item POST /v1/rerank '{"model":"rr","query":"MULTI_ITEM cat","documents":["x","a cat","cat"]}'
req 719-rr-fail-value POST /v1/rerank '{"model":"rr","query":"FAIL_VALUE","documents":["a"]}'
req 720-rr-fail-runtime POST /v1/rerank '{"model":"rr","query":"FAIL_RUNTIME","documents":["a"]}'
req 721-rr-no-items POST /v1/rerank '{"model":"rr","query":"NO_ITEMS","documents":["a"]}'
req 722-rr-docs-objects POST /v1/rerank '{"model":"rr","query":"cat","documents":[{"text":"a"}]}'
req 723-rr-ctype-charset POST /v1/rerank '{"model":"rr","query":"cat","documents":["a"]}' 'application/json; charset=utf-8'
req 724-rr-control-char POST /v1/rerank "$(printf '{"model":"rr","query":"c\tat","documents":["a"]}')"
req 725-rr-empty-body POST /v1/rerank ' '
req 726-rr-unknown-model-empty-query POST /v1/rerank '{"model":"nope","query":" ","documents":["a"]}'
req 727-rr-unready-empty-query POST /v1/rerank '{"model":"cls-wait","query":" ","documents":["a"]}'

echo "8. /v1/realtime"
wscase 801-rt-basic basic
wscase 802-rt-selection-errors selection-errors
wscase 803-rt-full-session-update full-session-update
wscase 804-rt-input-text input-text
wscase 805-rt-worker-errors worker-errors
wscase 806-rt-malformed-after-select malformed-after-select
wscase 807-rt-unknown-event-after-select unknown-event-after-select
wscase 808-rt-binary-after-select binary-after-select
wscase 809-rt-transcription-session transcription-session
wscase 810-rt-client-drops client-drops
wscase 811-rt-worker-ends worker-ends
wscase 812-rt-worker-raises worker-raises
wscase 813-rt-session-max-tokens session-max-tokens
wscase 814-rt-response-create-full response-create-full
wscase 815-rt-alias alias
wscase 816-rt-idle-then-close no-frames

echo "9a. model aliases on every surface (each model NAME also registered NAME-alias)"
req 920-alias-emb-tok POST /v1/embeddings '{"model":"emb-tok-alias","input":"hello"}'
req 921-alias-img POST /v1/images/generations '{"model":"img-alias","prompt":"a cat"}'
req 922-alias-vid POST /v1/videos '{"model":"vid-alias","prompt":"a cat"}'
req 923-alias-vid-stream POST /v1/videos/stream '{"model":"vid-alias","prompt":"a cat","output_format":"mjpeg","nvext":{"num_frames":1}}'
req 924-alias-tts POST /v1/audio/speech '{"model":"tts-alias","input":"Hi","response_format":"mp3"}'
req 925-alias-cls POST /v1/classify '{"model":"cls-alias","input":"x"}'
req 926-alias-pool POST /v1/pooling '{"model":"pool-alias","input":"x"}'
req 927-alias-rr POST /v1/rerank '{"model":"rr-alias","query":"cat","documents":["a cat"]}'
req 928-alias-model-retrieve GET /v1/models/img-alias
req 929-alias-ready GET /v1/models/img-alias/ready

echo "9. the real openai SDK"
n=$(reclines)
{ "$PY" "$OBS/client.py" sdk "http://127.0.0.1:$PORT/v1" 2>&1; echo; worker_since "$n"; } >"$OUT/901-sdk.txt"
echo "  901-sdk: $(grep -c '^OK' "$OUT/901-sdk.txt") OK, $(grep -c '^EXCEPTION' "$OUT/901-sdk.txt") exceptions"

echo "10. metrics after the calls"
curl -s "127.0.0.1:$PORT/metrics" >"$OUT/950-metrics-full.txt"
"$PY" "$OBS/client.py" metrics "$OUT/950-metrics-full.txt" >"$OUT/951-metrics-frontend.txt"
req 952-models-after GET /v1/models

kill "$FE"; wait "$FE" 2>/dev/null || true

# =============================================================================================
P2=$((PORT + 1))
echo "phase 2: every route variable set, plus the generate-capable model 'gen', on $P2"
"$PY" "$REPO/scripts/surfaces_worker.py" --model-dir "$MODEL_DIR" --record "$REC" --only gen \
  --generate >"$LOGS/worker-gen.log" 2>&1 &
PIDS+=("$!")
env DYN_HTTP_SVC_EMB_PATH=/custom/embeddings DYN_HTTP_SVC_CLASSIFY_PATH=/classify \
  DYN_HTTP_SVC_RERANK_PATH=/rerank DYN_HTTP_SVC_POOLING_PATH=/pooling \
  DYN_HTTP_SVC_BATCHES_PATH=/custom/batches DYN_HTTP_SVC_FILES_PATH=/custom/files \
  DYN_HTTP_SVC_MODELS_PATH=/custom/models \
  DYN_VLLM_ENABLE_INFERENCE_V1_GENERATE=1 DYN_HTTP_SVC_VLLM_GENERATE_PATH=/custom/vllm/generate \
  DYN_SGLANG_ENABLE_GENERATE=true DYN_HTTP_SVC_SGLANG_GENERATE_PATH=/custom/sglang/generate \
  DYN_DISABLE_FRONTEND_NVEXT=1 \
  "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$P2" >"$LOGS/frontend-2.log" 2>&1 &
FE=$!
PIDS+=("$FE")
MODELS_PATH=/custom/models wait_ready "$P2" "${P1[@]}" gen
sleep 2
RPORT=$P2
req 1001-models-moved GET /custom/models
req 1002-models-old-path GET /v1/models
req 1003-model-retrieve-moved GET /custom/models/org/emb-slash
req 1004-ready-moved GET /custom/models/emb/ready
req 1005-openapi GET /openapi.json
req 1010-emb-moved POST /custom/embeddings '{"model":"emb","input":"hello","nvext":{"annotations":["x"]}}'
req 1011-emb-old-path POST /v1/embeddings '{"model":"emb","input":"hello"}'
req 1012-embtok-nvext-disabled POST /custom/embeddings '{"model":"emb-tok","input":"hello","nvext":{"annotations":["token_ids"]}}'
req 1013-cls-moved POST /classify '{"model":"cls","input":"x","nvext":{"annotations":["x"]}}'
req 1014-cls-old-path POST /v1/classify '{"model":"cls","input":"x"}'
req 1015-rr-moved POST /rerank '{"model":"rr","query":"cat","documents":["a cat"],"nvext":{"annotations":["x"]}}'
req 1016-rr-old-path POST /v1/rerank '{"model":"rr","query":"cat","documents":["a cat"]}'
req 1017-pool-moved POST /pooling '{"model":"pool","input":"x","nvext":{"annotations":["x"]}}'
req 1018-pool-old-path POST /v1/pooling '{"model":"pool","input":"x"}'
req 1019-img-nvext-disabled POST /v1/images/generations '{"model":"img","prompt":"a cat","nvext":{"annotations":["x"],"seed":3}}'
req 1020-vid-nvext-disabled POST /v1/videos '{"model":"vid","prompt":"a cat","nvext":{"annotations":["x"],"fps":4}}'
req 1021-tts-nvext-disabled POST /v1/audio/speech '{"model":"tts","input":"Hi","response_format":"mp3","nvext":{"annotations":["x"],"cfg_scale":2.0}}'
req 1030-batches-moved POST /custom/batches '{}'
req 1031-files-moved POST /custom/files '{}'
req 1032-batches-default POST /v1/batches '{}'
req 1040-vllm-generate POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4,"temperature":0.5}}'
req 1041-vllm-generate-model POST /custom/vllm/generate '{"model":"gen","token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}'
req 1041b-vllm-generate-request-id POST /custom/vllm/generate '{"request_id":"r-1","token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}'
req 1041c-vllm-generate-cache-salt POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4},"cache_salt":"s"}'
req 1041d-vllm-generate-priority POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4},"priority":2}'
req 1041e-vllm-generate-unknown-field POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4},"bogus":1}'
req 1041f-vllm-generate-dp-rank POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}' $J -H 'x-data-parallel-rank: 0'
req 1041g-vllm-generate-x-request-id POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4}}' $J -H 'x-request-id: xr-7'
req 1041h-vllm-generate-alias POST /custom/vllm/generate '{"model":"gen-alias","token_ids":[1,2,3],"sampling_params":{"max_tokens":1}}'
req 1041i-vllm-generate-all-sampling POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"temperature":0.7,"top_p":0.9,"top_k":5,"seed":3,"max_tokens":4,"min_tokens":1,"min_p":0.1,"frequency_penalty":0.5,"presence_penalty":0.5,"repetition_penalty":1.1,"stop_token_ids":[7],"ignore_eos":true,"skip_special_tokens":false,"logit_bias":{"5":1.0},"n":1}}'
req 1041j-vllm-generate-kv-transfer POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":4},"kv_transfer_params":{"do_remote_decode":true}}'
req 1041k-vllm-generate-no-sampling POST /custom/vllm/generate '{"token_ids":[1,2,3]}'
req 1041l-vllm-generate-max-tokens-0 POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{"max_tokens":0}}'
req 1041m-vllm-generate-fail POST /custom/vllm/generate '{"token_ids":[36973,52198],"sampling_params":{"max_tokens":4}}'
req 1041n-vllm-generate-text-plain POST /custom/vllm/generate '{"token_ids":[1],"sampling_params":{}}' text/plain
req 1042-vllm-generate-stream POST /custom/vllm/generate '{"token_ids":[1,2,3],"sampling_params":{},"stream":true}'
req 1043-vllm-generate-empty POST /custom/vllm/generate '{"token_ids":[],"sampling_params":{}}'
req 1044-vllm-generate-unknown POST /custom/vllm/generate '{"model":"emb","token_ids":[1],"sampling_params":{}}'
req 1045-vllm-generate-bad-json POST /custom/vllm/generate '{'
req 1046-vllm-generate-default-path POST /inference/v1/generate '{"token_ids":[1],"sampling_params":{}}'
req 1047-vllm-generate-logprobs POST /custom/vllm/generate '{"token_ids":[1,2],"sampling_params":{"max_tokens":2,"logprobs":1}}'
req 1050-sglang-generate POST /custom/sglang/generate '{"input_ids":[1,2,3],"sampling_params":{"max_new_tokens":4},"stream":true}'
req 1051-sglang-generate-put PUT /custom/sglang/generate '{"input_ids":[1,2,3],"stream":true,"rid":"rid-9","bogus":1}'
req 1052-sglang-generate-unary POST /custom/sglang/generate '{"input_ids":[1,2,3]}'
req 1053-sglang-generate-empty POST /custom/sglang/generate '{"input_ids":[],"stream":true}'
req 1054-sglang-generate-internal-field POST /custom/sglang/generate '{"input_ids":[1],"stream":true,"bootstrap_room":1}'
req 1055-sglang-generate-bad-json POST /custom/sglang/generate '{'
req 1056-sglang-generate-default-path POST /generate '{"input_ids":[1],"stream":true}'
req 1057-sglang-generate-text-plain POST /custom/sglang/generate '{"input_ids":[1],"stream":true}' text/plain
req 1058-sglang-generate-n2 POST /custom/sglang/generate '{"input_ids":[1],"stream":true,"sampling_params":{"n":2}}'
req 1059-sglang-generate-cache-salt POST /custom/sglang/generate '{"input_ids":[1,2],"stream":true,"cache_salt":"tenant","priority":3,"sampling_params":{"max_new_tokens":1,"min_new_tokens":1,"ignore_eos":true}}'
req 1059c-sglang-generate-dp-rank POST /custom/sglang/generate '{"input_ids":[1,2],"stream":true}' $J -H 'x-data-parallel-rank: 0'
req 1059d-sglang-generate-x-request-id POST /custom/sglang/generate '{"input_ids":[1,2],"stream":true}' $J -H 'x-request-id: xr-8'
req 1059b-sglang-generate-fail POST /custom/sglang/generate '{"input_ids":[36973,52198],"stream":true}'
req 1060-chat-gen POST /v1/chat/completions '{"model":"gen","messages":[{"role":"user","content":"hi"}],"max_tokens":4}'
curl -s "127.0.0.1:$P2/metrics" >"$OUT/1090-metrics-full.txt"
"$PY" "$OBS/client.py" metrics "$OUT/1090-metrics-full.txt" >"$OUT/1091-metrics-frontend.txt"
kill "$FE"; wait "$FE" 2>/dev/null || true

# =============================================================================================
P3=$((PORT + 2))
echo "phase 3: the generate switches alone (default paths) on $P3"
DYN_VLLM_ENABLE_INFERENCE_V1_GENERATE=true DYN_SGLANG_ENABLE_GENERATE=1 \
  "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$P3" >"$LOGS/frontend-3.log" 2>&1 &
FE=$!
PIDS+=("$FE")
wait_ready "$P3" "${P1[@]}" gen
sleep 2
RPORT=$P3
req 1101-vllm-generate-default POST /inference/v1/generate '{"model":"gen","token_ids":[1,2,3],"sampling_params":{"max_tokens":2}}'
req 1102-sglang-generate-default POST /generate '{"input_ids":[1,2,3],"stream":true}'
req 1103-openapi GET /openapi.json
kill "$FE"; wait "$FE" 2>/dev/null || true

echo "phase 3b: an invalid generate path"
set +e
DYN_VLLM_ENABLE_INFERENCE_V1_GENERATE=1 DYN_HTTP_SVC_VLLM_GENERATE_PATH=no-slash timeout 60 \
  "$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$P3" >"$LOGS/frontend-3b.log" 2>&1
echo "exit status $?" >"$OUT/1110-invalid-generate-path.txt"
set -e
sed 's/\x1b\[[0-9;]*m//g' "$LOGS/frontend-3b.log" | grep -iE 'error|generate route' | head -n 20 \
  >>"$OUT/1110-invalid-generate-path.txt" || true
echo "  1110-invalid-generate-path: $(head -n 1 "$OUT/1110-invalid-generate-path.txt")"

# =============================================================================================
P4=$((PORT + 3))
echo "phase 4: a frontend that sees one model only (tts, namespace surfaces-tts) on $P4"
"$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1 \
  --http-port "$P4" --namespace surfaces-tts >"$LOGS/frontend-4.log" 2>&1 &
FE=$!
PIDS+=("$FE")
RPORT=$P4
for _ in $(seq 1 600); do curl -s "127.0.0.1:$P4/live" >/dev/null && break; sleep 0.1; done
req 1200-models-before GET /v1/models
req 1201-emb-before-any-model POST /v1/embeddings '{"model":"emb","input":"x"}'
req 1202-cls-before-any-model POST /v1/classify '{"model":"cls","input":"x"}'
req 1203-ready-before GET /v1/models/tts/ready
"$PY" "$REPO/scripts/surfaces_worker.py" --model-dir "$MODEL_DIR" --record "$REC" --only tts \
  --namespace surfaces-tts >"$LOGS/worker-tts.log" 2>&1 &
PIDS+=("$!")
wait_ready "$P4" tts
sleep 1
req 1210-models GET /v1/models
req 1211-tts-no-model POST /v1/audio/speech '{"input":"Hello","response_format":"mp3"}'
req 1212-emb-no-embedding-model POST /v1/embeddings '{"model":"emb","input":"x"}'
req 1213-cls-route-disabled POST /v1/classify '{"model":"cls","input":"x"}'
req 1214-rerank-route-disabled POST /v1/rerank '{"model":"rr","query":"q","documents":["d"]}'
req 1215-images-route-disabled POST /v1/images/generations '{"model":"img","prompt":"p"}'
req 1216-realtime-route-disabled GET /v1/realtime '' - -H 'connection: upgrade' -H 'upgrade: websocket' -H 'sec-websocket-version: 13' -H 'sec-websocket-key: dGhlIHNhbXBsZSBub25jZQ=='
req 1217-responses-no-chat POST /v1/responses '{"model":"tts","input":"x"}'
req 1218-classify-get-disabled GET /v1/classify
kill "$FE"; wait "$FE" 2>/dev/null || true

"$PY" "$OBS/client.py" fold "$OUT" "$OBS/exchanges-1.6.1.jsonl"
echo "done: $(ls "$OUT" | wc -l) files in $OUT (copy $OBS/exchanges-1.6.1.jsonl to tests/data/surfaces/ to refresh the fixture)"
