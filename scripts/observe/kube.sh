#!/usr/bin/env bash
# Observes Dynamo 1.6.1's Kubernetes discovery (`--discovery-backend kubernetes`) on real
# processes, against scripts/kube_standin.py (a stand-in serving only the part of the
# Kubernetes API that this discovery uses; no real kube-apiserver can be installed here), and
# writes what it saw under $OUT (default /tmp/obs-kube): the stand-in's record of every
# exchange (record.jsonl), the logs, and summary.txt.
#
# Pod mode: Pod objects worker-0, worker-1 and frontend-0 are created first (the stand-in
# assigns their uids, which each process gets as POD_UID); a real `dynamo.mocker` runs as
# worker-0; once its DynamoWorkerMetadata (DWM) is there, a labelled EndpointSlice lists it
# ready; a real `dynamo.frontend` runs as frontend-0. Then: /v1/models and one chat; the
# endpoint flipped (merge patches) to not ready, to no conditions, to an empty list, to
# `endpoints: null`, to no `endpoints` field and to another uid, and back each time (how long
# until the model leaves and comes back, reflector errors); a second mocker (worker-1) on the
# same slice and chats through both; every open watch closed (re-watch), then the history
# compacted and the watches closed again (410 Expired, re-list); worker-1 stopped (SIGTERM)
# while the slice still lists it ready (what its DWM keeps); the Pod worker-0 deleted (the
# stand-in deletes its DWM, as the garbage collector does) while the slice still lists it
# ready; worker-0 and the frontend stopped (what they send on the way out).
# Container mode: a DWM left over for worker-2 (the mocker deletes it at start-up), a Pod
# worker-2 whose container `main` is ready, a mocker and a second frontend (frontend-1) with
# DYN_KUBE_DISCOVERY_MODE=container; the container flipped to not ready and back.
#
# Each process gets its own kubeconfig whose dummy token names it (`kube-standin-<pod>`), so
# the record tells which process sent which request ($OUT/requests.txt lists the distinct
# ones). With KUBE_FIXTURES=DIR (e.g. tests/data/kube), the sanitised capture goes to
# DIR/exchanges-1.6.1.jsonl, in arrival order: uuids replaced by stable uuids in order of first
# appearance, timestamps by one fixed time, times rounded to 0.1 s; of each watch's bookmarks
# only the first and the last kept; every model card after the first replaced by
# {"$elided": "card_json", "same_as_seq": N}, a DWM already sent on an earlier watch at the
# same resourceVersion by {"$elided": "object", "same_as_seq": N, kind, name, rv}, an answer's
# spec equal to the request's by {"$elided": "spec", ...}; this script's own requests are kept
# for context (its GETs without the answer body). The DWM of worker-0 goes to
# DIR/dwm-mocker-1.6.1.json.
#
# Settings come from the environment (the script re-runs itself inside `unshare -n`):
# OUT, KPORT (stand-in, default 18791), FPORT (frontend, default 18790; container mode uses
# FPORT+2), KUBE_FIXTURES. Needs root (unshare -n), python3, curl, the Dynamo venv
# (scripts/install-dynamo.sh) and the qwen3 files (scripts/fetch-models.sh).
# Usage: SWITCHYARD_BIN=/bin/true KUBE_FIXTURES=tests/data/kube bash scripts/observe/kube.sh
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/obs-kube}
source scripts/real-dynamo-env.sh
if [ "${1:-}" != "--inside" ]; then
  need python3 curl
  rm -rf "$OUT"; mkdir -p "$OUT"
fi
# Only Dynamo's processes run here: no switchyard build needed.
SWITCHYARD_BIN=${SWITCHYARD_BIN:-unused} enter_loopback_namespace "$0" "$@"
scratch_dir
KPORT=${KPORT:-18791}
FPORT=${FPORT:-18790}
CPORT=$((FPORT + 2))
NSP=dynamo
K=http://127.0.0.1:$KPORT
ES=/apis/discovery.k8s.io/v1/namespaces/$NSP/endpointslices
DWM=/apis/nvidia.com/v1alpha1/namespaces/$NSP/dynamoworkermetadatas
PODS=/api/v1/namespaces/$NSP/pods
SLICE=dynamo-workers-x7k2p
S=$OUT/summary.txt
log() { echo "$*" | tee -a "$S"; }
ms() { echo $(($(date +%s%N) / 1000000)); }
export DYN_LOG=${DYN_LOG:-info,dynamo_runtime::discovery=debug}

# `kreq METHOD PATH [CONTENT-TYPE BODY]`: one request to the stand-in; the answer goes to
# $OUT/resp.json, the HTTP status to stdout.
kreq() {
  if [ $# -ge 4 ]; then
    curl -s -m 10 -X "$1" "$K$2" -H "Content-Type: $3" --data-binary "$4" -o "$OUT/resp.json" -w '%{http_code}'
  else
    curl -s -m 10 -X "$1" "$K$2" -o "$OUT/resp.json" -w '%{http_code}'
  fi
}
field() { python3 -c "import json,sys; d=json.load(open('$OUT/resp.json')); print($1)"; }
# `new_pod NAME`: creates the Pod object; prints the uid the stand-in gave it.
new_pod() {
  local code
  code=$(kreq POST "$PODS" application/json \
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\",\"labels\":{\"app\":\"$1\"}},\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"dynamo:1.6.1\"}]},\"status\":{\"phase\":\"Running\",\"containerStatuses\":[{\"name\":\"main\",\"ready\":true}]}}")
  [ "$code" = 201 ] || fail "create pod $1: HTTP $code $(cat "$OUT/resp.json")" "$OUT/standin.log"
  field 'd["metadata"]["uid"]'
}
# `endpoint NAME UID READY`: one EndpointSlice endpoint for that pod.
endpoint() {
  echo "{\"addresses\":[\"10.0.0.1${1##*-}\"],\"conditions\":{\"ready\":$3,\"serving\":$3,\"terminating\":false},\"nodeName\":\"node-a\",\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"$NSP\",\"name\":\"$1\",\"uid\":\"$2\"}}"
}
# `set_endpoints JSON-LIST`: merge-patches the slice's endpoints (a merge patch replaces a list).
set_endpoints() {
  local code
  code=$(kreq PATCH "$ES/$SLICE" application/merge-patch+json "{\"endpoints\":$1}")
  [ "$code" = 200 ] || fail "patch slice: HTTP $code $(cat "$OUT/resp.json")" "$OUT/standin.log"
}
# `wait_dwm NAME`: waits (90 s) for the DWM; logs how long it took.
wait_dwm() {
  local t0; t0=$(ms)
  for _ in $(seq 1 900); do
    [ "$(kreq GET "$DWM/$1")" = 200 ] && { log "DWM $1 present after $(($(ms) - t0)) ms"; return 0; }
    sleep 0.1
  done
  return 1
}
# `listed PORT`: 0 when the frontend on PORT lists qwen3.
listed() { curl -s -m 2 "127.0.0.1:$1/v1/models" | grep -q '"qwen3"'; }
# `until_listed PORT yes|no LABEL`: polls every 50 ms (60 s at most); logs the delay.
until_listed() {
  local t0; t0=$(ms)
  for _ in $(seq 1 1200); do
    if listed "$1"; then [ "$2" = yes ] && break; else [ "$2" = no ] && break; fi
    sleep 0.05
  done
  local t=$(($(ms) - t0)) now=no
  listed "$1" && now=yes
  log "$3: qwen3 listed=$now after $t ms (wanted $2) models: $(curl -s -m 2 "127.0.0.1:$1/v1/models" | tr -d '\n' | cut -c1-200)"
}
# `chat PORT LABEL`: one chat completion; logs the status.
chat() {
  local code
  code=$(curl -s -m 30 "127.0.0.1:$1/v1/chat/completions" -H 'content-type: application/json' \
    -d '{"model":"qwen3","messages":[{"role":"user","content":"Hello there"}],"max_tokens":4}' \
    -o "$OUT/chat-$2.json" -w '%{http_code}')
  log "chat $2 (port $1): HTTP $code $(head -c 300 "$OUT/chat-$2.json")"
  CHAT_CODE=$code
}
mocker_requests() { sed 's/\x1b\[[0-9;]*m//g' "$OUT/$1.log" | grep -c 'push_handler: request received'; }
start_mocker() { # NAME UID [VAR=VALUE...]
  local name=$1 uid=$2; shift 2
  sed "s/kube-standin-dummy-token/kube-standin-$name/" "$OUT/kubeconfig" >"$OUT/kc-$name"
  env POD_NAME="$name" POD_UID="$uid" POD_NAMESPACE=$NSP KUBECONFIG="$OUT/kc-$name" "$@" \
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend kubernetes \
    --request-plane tcp --event-plane zmq --speedup-ratio 10 >"$OUT/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_${name//-/_}=$!"
}
start_frontend() { # NAME UID PORT [VAR=VALUE...]
  local name=$1 uid=$2 port=$3; shift 3
  sed "s/kube-standin-dummy-token/kube-standin-$name/" "$OUT/kubeconfig" >"$OUT/kc-$name"
  env POD_NAME="$name" POD_UID="$uid" POD_NAMESPACE=$NSP KUBECONFIG="$OUT/kc-$name" "$@" \
    "$PY" -m dynamo.frontend --discovery-backend kubernetes --http-host 127.0.0.1 --http-port "$port" \
    --router-mode round-robin >"$OUT/$name.log" 2>&1 &
  PIDS+=($!)
  eval "PID_${name//-/_}=$!"
}
stop() { # PID
  kill "$1" 2>/dev/null
  for _ in $(seq 1 100); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.1; done
  kill -9 "$1" 2>/dev/null
}
dwm_names() { kreq GET "$DWM" >/dev/null; field '" ".join(i["metadata"]["name"] for i in d["items"]) or "-"'; }

# `since N`: the non-watch requests recorded after line N of the record.
since() {
  tail -n +$(($1 + 1)) "$OUT/record.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    if not e.get("watch"):
        d = ((e.get("body") or {}).get("spec") or {}).get("data") or {}
        print(e["method"], e["path"], e.get("authorization", ""), e["status"],
              {k: len(v) for k, v in d.items() if isinstance(v, dict)} if d else "", "|", end=" ")'
}
dwm_data() { # NAME: the sizes of the maps in the DWM's spec.data, or its HTTP status
  local code; code=$(kreq GET "$DWM/$1")
  [ "$code" = 200 ] || { echo "HTTP $code"; return; }
  field '{k: len(v) for k, v in d["spec"]["data"].items()}'
}

python3 scripts/kube_standin.py --port "$KPORT" --record "$OUT/record.jsonl" --kubeconfig-out "$OUT/kubeconfig" \
  --bookmark-interval 5 >"$OUT/standin.log" 2>&1 &
PIDS+=($!); STANDIN=$!
for _ in $(seq 1 100); do grep -q "listening on" "$OUT/standin.log" && break; sleep 0.1; done
grep -q 'listening on' "$OUT/standin.log" || fail "the stand-in did not start" "$OUT/standin.log"
log "== stand-in: $(cat "$OUT/standin.log")"

log "== pod mode"
U0=$(new_pod worker-0) || exit 1
U1=$(new_pod worker-1) || exit 1
UF=$(new_pod frontend-0) || exit 1
log "pod uids: worker-0 $U0, worker-1 $U1, frontend-0 $UF"
T0=$(ms)
start_mocker worker-0 "$U0"
wait_dwm worker-0 || fail "no DWM from worker-0" "$OUT/worker-0.log"
code=$(kreq POST "$ES" application/json "{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"$SLICE\",\"labels\":{\"nvidia.com/dynamo-discovery-enabled\":\"true\",\"nvidia.com/dynamo-discovery-backend\":\"kubernetes\",\"kubernetes.io/service-name\":\"dynamo-workers\",\"endpointslice.kubernetes.io/managed-by\":\"endpointslice-controller.k8s.io\"}},\"addressType\":\"IPv4\",\"endpoints\":[$(endpoint worker-0 "$U0" true)],\"ports\":[{\"name\":\"system\",\"port\":9090,\"protocol\":\"TCP\"}]}")
[ "$code" = 201 ] || fail "create slice: HTTP $code $(cat "$OUT/resp.json")" "$OUT/standin.log"
log "slice $SLICE created with worker-0 ready"
TF=$(ms)
start_frontend frontend-0 "$UF" "$FPORT"
model_listed "$FPORT" qwen3 || fail "the frontend lists no qwen3" "$OUT/frontend-0.log" "$OUT/worker-0.log"
log "frontend lists qwen3 $(($(ms) - TF)) ms after its start"
chat "$FPORT" first
[ "$CHAT_CODE" = 200 ] || fail "first chat: $CHAT_CODE" "$OUT/frontend-0.log" "$OUT/worker-0.log"
# worker-0's DWM once it has registered everything (it applies its CR once per registration).
kreq GET "$DWM/worker-0" >/dev/null; cp "$OUT/resp.json" "$OUT/dwm-worker-0.json"
log "DWM worker-0 after the first chat: $(dwm_data worker-0)"

log "== readiness flips"
set_endpoints "[$(endpoint worker-0 "$U0" false)]"
until_listed "$FPORT" no "worker-0 not ready"
chat "$FPORT" not-ready
set_endpoints "[$(endpoint worker-0 "$U0" true)]"
until_listed "$FPORT" yes "worker-0 ready again"
chat "$FPORT" ready-again
# An endpoint without conditions (ready unknown), then no endpoints at all.
set_endpoints "[{\"addresses\":[\"10.0.0.5\"],\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"$NSP\",\"name\":\"worker-0\",\"uid\":\"$U0\"}}]"
until_listed "$FPORT" no "worker-0 without conditions"
set_endpoints "[]"
sleep 1
log "slice with an empty endpoints list: listed=$(listed "$FPORT" && echo yes || echo no)"
# What a real server sends for a slice without endpoints (Go's nil list): "endpoints": null;
# then the field left out. Does the reflector still read the slice (reflector errors)?
set_endpoints "[$(endpoint worker-0 "$U0" true)]"
until_listed "$FPORT" yes "worker-0 ready (before endpoints null)"
E0=$(grep -c 'reflector error' "$OUT/frontend-0.log")
code=$(kreq PATCH "$ES/$SLICE" application/json-patch+json '[{"op":"replace","path":"/endpoints","value":null}]')
until_listed "$FPORT" no "slice with \"endpoints\": null (HTTP $code)"
log "frontend reflector errors since: $(($(grep -c 'reflector error' "$OUT/frontend-0.log") - E0))"
set_endpoints "[$(endpoint worker-0 "$U0" true)]"
until_listed "$FPORT" yes "worker-0 ready (after endpoints null)"
code=$(kreq PATCH "$ES/$SLICE" application/json-patch+json '[{"op":"remove","path":"/endpoints"}]')
until_listed "$FPORT" no "slice without an endpoints field (HTTP $code)"
log "frontend reflector errors since: $(($(grep -c 'reflector error' "$OUT/frontend-0.log") - E0))"
set_endpoints "[$(endpoint worker-0 "$U0" true)]"
until_listed "$FPORT" yes "worker-0 ready (third time)"
# The endpoint names worker-0 with a wrong uid.
set_endpoints "[$(endpoint worker-0 00000000-0000-0000-0000-000000000000 true)]"
until_listed "$FPORT" no "worker-0 listed with another uid"
set_endpoints "[$(endpoint worker-0 "$U0" true)]"
until_listed "$FPORT" yes "worker-0 with its uid again"

log "== second worker"
start_mocker worker-1 "$U1"
wait_dwm worker-1 || fail "no DWM from worker-1" "$OUT/worker-1.log"
set_endpoints "[$(endpoint worker-0 "$U0" true),$(endpoint worker-1 "$U1" true)]"
sleep 2
B0=$(mocker_requests worker-0); B1=$(mocker_requests worker-1)
for i in 1 2 3 4 5 6; do chat "$FPORT" both-$i; done
kreq GET "$DWM/worker-1" >/dev/null; cp "$OUT/resp.json" "$OUT/dwm-worker-1.json"
log "requests received (mocker logs), before/after 6 chats: worker-0 $B0/$(mocker_requests worker-0), worker-1 $B1/$(mocker_requests worker-1)"

log "== watches closed by the server (re-watch), then history compacted (410, re-list)"
N=$(wc -l <"$OUT/record.jsonl")
curl -s -m 5 -X POST "$K/_standin/close-watches" >/dev/null
sleep 3
log "requests after close-watches: $(tail -n +$((N + 1)) "$OUT/record.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    print(e["method"], e["path"], e.get("authorization", ""), "|", end=" ")')"
N=$(wc -l <"$OUT/record.jsonl")
curl -s -m 5 -X POST "$K/_standin/compact" >/dev/null
curl -s -m 5 -X POST "$K/_standin/close-watches" >/dev/null
sleep 5
log "requests after compact + close-watches: $(tail -n +$((N + 1)) "$OUT/record.jsonl" | python3 -c '
import json, sys
for l in sys.stdin:
    e = json.loads(l)
    print(e["method"], e["path"], e.get("authorization", ""), [ev["type"] for ev in e.get("events", [])][:3], "|", end=" ")')"
chat "$FPORT" after-relist
until_listed "$FPORT" yes "after re-list"

log "== worker-1 stopped (SIGTERM) while the slice still lists it ready"
N=$(wc -l <"$OUT/record.jsonl")
B0=$(mocker_requests worker-0)
stop "$PID_worker_1"
sleep 1
log "requests while worker-1 stopped: $(since "$N")"
log "DWM worker-1 now: $(dwm_data worker-1); qwen3 listed=$(listed "$FPORT" && echo yes || echo no)"
for i in 1 2 3 4; do chat "$FPORT" after-stop-$i; done
log "requests received by worker-0 during those 4 chats: $(($(mocker_requests worker-0) - B0))"

log "== deletions"
code=$(kreq DELETE "$PODS/worker-0")
log "DELETE pod worker-0: HTTP $code; DWMs now: $(dwm_names)"
until_listed "$FPORT" no "pod worker-0 deleted (its DWM collected; the slice still lists it ready)"
chat "$FPORT" after-pod-delete
sleep 3
log "DWMs 3 s later: $(dwm_names) (does worker-0 write its DWM again?)"
code=$(kreq DELETE "$PODS/worker-1")
log "DELETE pod worker-1: HTTP $code; DWMs now: $(dwm_names)"
code=$(kreq DELETE "$ES/$SLICE")
log "DELETE slice: HTTP $code $(head -c 200 "$OUT/resp.json")"
sleep 1
log "== worker-0 and the frontend stopped (SIGTERM)"
N=$(wc -l <"$OUT/record.jsonl")
stop "$PID_worker_0"
sleep 1
log "requests while worker-0 stopped (its pod is gone): $(since "$N")"
log "DWM worker-0 now: $(dwm_data worker-0)"
kreq GET "$DWM/worker-0" >/dev/null && cp "$OUT/resp.json" "$OUT/dwm-worker-0-after-stop.json"
N=$(wc -l <"$OUT/record.jsonl")
stop "$PID_frontend_0"
sleep 1
log "requests while the frontend stopped: $(since "$N")"

log "== container mode"
U2=$(new_pod worker-2) || exit 1
UF1=$(new_pod frontend-1) || exit 1
code=$(kreq PATCH "$DWM/worker-2?fieldManager=kube-sh" application/apply-patch+yaml \
  "{\"apiVersion\":\"nvidia.com/v1alpha1\",\"kind\":\"DynamoWorkerMetadata\",\"metadata\":{\"name\":\"worker-2\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"worker-2\",\"uid\":\"$U2\",\"controller\":false,\"blockOwnerDeletion\":false}]},\"spec\":{\"data\":{\"endpoints\":{},\"model_cards\":{},\"event_channels\":{},\"event_sources\":{}}}}")
log "stale DWM worker-2 applied: HTTP $code"
STALE_RV=$(field 'd["metadata"]["resourceVersion"]')
kreq PATCH "$PODS/worker-2" application/merge-patch+json \
  '{"metadata":{"labels":{"nvidia.com/dynamo-discovery-enabled":"true","nvidia.com/dynamo-discovery-backend":"kubernetes"}}}' >/dev/null
kreq PATCH "$PODS/frontend-1" application/merge-patch+json \
  '{"metadata":{"labels":{"nvidia.com/dynamo-discovery-enabled":"true"}}}' >/dev/null
start_mocker worker-2 "$U2" DYN_KUBE_DISCOVERY_MODE=container CONTAINER_NAME=main
for _ in $(seq 1 900); do
  kreq GET "$DWM/worker-2" >/dev/null
  [ "$(field 'd.get("metadata", {}).get("resourceVersion", "")')" != "$STALE_RV" ] && [ -n "$(field 'd.get("spec", {}).get("data", {}).get("model_cards") or ""')" ] && break
  sleep 0.1
done
log "worker-2 DWM (container mode): $(head -c 300 "$OUT/resp.json")"
cp "$OUT/resp.json" "$OUT/dwm-worker-2.json"
start_frontend frontend-1 "$UF1" "$CPORT" DYN_KUBE_DISCOVERY_MODE=container CONTAINER_NAME=main
if model_listed "$CPORT" qwen3; then
  chat "$CPORT" container
  kreq PATCH "$PODS/worker-2/status" application/merge-patch+json \
    '{"status":{"containerStatuses":[{"name":"main","ready":false}]}}' >/dev/null
  until_listed "$CPORT" no "container main of worker-2 not ready"
  kreq PATCH "$PODS/worker-2/status" application/merge-patch+json \
    '{"status":{"containerStatuses":[{"name":"main","ready":true}]}}' >/dev/null
  until_listed "$CPORT" yes "container main of worker-2 ready again"
else
  log "container-mode frontend lists no qwen3 (see frontend-1.log)"
fi
N=$(wc -l <"$OUT/record.jsonl")
stop "$PID_frontend_1"; stop "$PID_worker_2"
sleep 1
log "requests while container-mode processes stopped: $(since "$N")"

log "== stand-in stopped"
stop "$STANDIN"
for f in worker-0 worker-1 frontend-0 worker-2 frontend-1; do
  sed 's/\x1b\[[0-9;]*m//g' "$OUT/$f.log" | grep -iE 'kube|discovery|daemon|reflector|endpointslice|dynamoworker|WARN|ERROR' |
    cut -c1-400 >"$OUT/$f.grep.txt"
  log "$f log (kube|discovery|daemon|reflector|WARN|ERROR): $(wc -l <"$OUT/$f.grep.txt") lines in $OUT/$f.grep.txt"
done

# The distinct requests, by process, in order of first appearance.
python3 - "$OUT/record.jsonl" <<'PYEOF' | tee "$OUT/requests.txt" | tee -a "$S"
import json, re, sys
lines = sorted((json.loads(l) for l in open(sys.argv[1])), key=lambda e: e["seq"])
seen = set()
for e in lines:
    who = (e.get("authorization") or "Bearer kube-standin-script").split("kube-standin-")[-1]
    if "curl" in (e.get("user_agent") or ""):
        who = "script"
    path = re.sub(r"resourceVersion=\d+", "resourceVersion=<rv>", e["path"])
    path = re.sub(r"continue=[^&]*", "continue=<token>", path)
    key = (who, e["method"], path, e.get("content_type"), e.get("accept"), e.get("user_agent"))
    if key in seen or who == "script":
        continue
    seen.add(key)
    print(f"{e['t']:8.2f} {who:11} {e['method']} {path} status={e['status']} ct={e.get('content_type')} "
          f"accept={e.get('accept')} ua={e.get('user_agent')}")
PYEOF

if [ -n "${KUBE_FIXTURES:-}" ]; then
  mkdir -p "$KUBE_FIXTURES"
  python3 - "$OUT/record.jsonl" "$KUBE_FIXTURES/exchanges-1.6.1.jsonl" "$OUT/dwm-worker-0.json" \
    "$KUBE_FIXTURES/dwm-mocker-1.6.1.json" <<'PYEOF'
import json, re, sys
record, out, dwm_in, dwm_out = sys.argv[1:]
UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
STAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z")
uuids = {}

def uid(m):
    u = m.group(0)
    if u == "00000000-0000-0000-0000-000000000000":
        return u
    uuids.setdefault(u, "00000000-0000-4000-8000-%012d" % (len(uuids) + 1))
    return uuids[u]

def clean(text):
    return STAMP.sub("2025-01-01T00:00:00Z", UUID.sub(uid, text))

first_card = {}

def elide_cards(obj, seq):
    """Every card_json after the first is the same model card: keep the first one only."""
    if isinstance(obj, dict):
        for k, v in obj.items():
            if k == "card_json" and isinstance(v, dict):
                if not first_card:
                    first_card.update(card=v, seq=seq)
                elif v == first_card["card"]:
                    obj[k] = {"$elided": "card_json", "same_as_seq": first_card["seq"]}
                    continue
            elide_cards(v, seq)
    elif isinstance(obj, list):
        for v in obj:
            elide_cards(v, seq)

sent = {}

def elide_repeat(ev, seq):
    """An object already sent at the same resourceVersion on an earlier watch: named only."""
    obj = ev.get("object") or {}
    meta = obj.get("metadata") or {}
    if ev["type"] in ("BOOKMARK", "ERROR") or obj.get("kind") != "DynamoWorkerMetadata":
        return
    key = (obj.get("kind"), meta.get("name"), meta.get("resourceVersion"), ev["type"])
    if key in sent:
        ev["object"] = {"$elided": "object", "same_as_seq": sent[key], "kind": obj.get("kind"),
                        "metadata": {"name": meta.get("name"), "resourceVersion": meta.get("resourceVersion")}}
    else:
        sent[key] = seq

entries = sorted((json.loads(l) for l in open(record)), key=lambda e: e["seq"])
with open(out, "w") as f:
    for e in entries:
        if "curl" in (e.get("user_agent") or "") and e["method"] == "GET":
            e.pop("response", None)  # the script's own polling: the status is enough
        body, resp = e.get("body"), e.get("response")
        if isinstance(body, dict) and isinstance(resp, dict) and "spec" in body and resp.get("spec") == body["spec"]:
            resp["spec"] = {"$elided": "spec", "same_as": "the request body's spec"}
        elide_cards(e, e["seq"])
        e["t"] = round(e["t"], 1)
        if "t_end" in e:
            e["t_end"] = round(e["t_end"], 1)
        if e.get("watch"):
            kept, dropped = [], 0
            evs = e["events"]
            for i, ev in enumerate(evs):
                ev["t"] = round(ev["t"], 1)
                elide_repeat(ev, e["seq"])
                if ev["type"] == "BOOKMARK" and 0 < i < len(evs) - 1 and any(
                        k["type"] == "BOOKMARK" for k in kept):
                    dropped += 1
                    continue
                kept.append(ev)
            e["events"] = kept
            if dropped:
                e["bookmarks_dropped"] = dropped
        f.write(clean(json.dumps(e, separators=(",", ":"))) + "\n")
with open(dwm_out, "w") as f:
    f.write(clean(json.dumps(json.load(open(dwm_in)), indent=2)) + "\n")
PYEOF
  log "written $KUBE_FIXTURES/exchanges-1.6.1.jsonl ($(wc -c <"$KUBE_FIXTURES/exchanges-1.6.1.jsonl") bytes) and $KUBE_FIXTURES/dwm-mocker-1.6.1.json"
fi
echo "written to $OUT"
