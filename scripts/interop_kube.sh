#!/usr/bin/env bash
# Kubernetes discovery (`--discovery-backend kubernetes`) against real Dynamo 1.6.1 workers.
# No real kube-apiserver can be installed on this machine (no Debian, PyPI, npm or crates.io
# package ships one), so the API is scripts/kube_standin.py: a stand-in serving only the part
# of the Kubernetes API that Dynamo's discovery uses (list and watch of EndpointSlices, Pods
# and DynamoWorkerMetadata objects, server-side apply), checked against what real 1.6.1
# processes send it (tests/data/kube/exchanges-1.6.1.jsonl, scripts/observe/kube.sh).
#
# Real `dynamo.mocker` workers register themselves there (their own DynamoWorkerMetadata); the
# script plays the EndpointSlice controller. switchyard (pod frontend-1) and python -m
# dynamo.frontend (pod frontend-0) run side by side, both with --discovery-backend kubernetes:
#   1. worker-0 ready: both list qwen3 and answer the real openai SDK;
#   2. worker-1 joins the slice: switchyard sends requests to both;
#   3. worker-0 not ready: switchyard sends every request to worker-1 (and both frontends
#      still answer); ready again: both workers again;
#   4. every watch closed by the server, then its history compacted (410 → re-list): still
#      served, a change made meanwhile seen;
#   5. the Pod worker-1 deleted (its metadata goes with it): only worker-0 serves;
#   6. a second switchyard reaching the API over https with a client certificate and a token
#      (a kubeconfig with certificate-authority and client-certificate-data, as a cluster's
#      API server is reached) serves the same worker;
#      and a third in container mode (DYN_KUBE_DISCOVERY_MODE=container: readiness from the
#      labelled Pods' containers) serves it too, having deleted a stale metadata object of its
#      own name first, as 1.6.1 does;
#   7. no endpoint ready, no container ready: qwen3 leaves every frontend's /v1/models;
#   8. switchyard's list and watch requests are dynamo.frontend's, byte for byte (resource
#      versions aside).
# Root, loopback-only network namespace.
#
# Usage: bash scripts/interop_kube.sh     (SWITCHYARD_BIN: a binary already built)
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" "$@"
scratch_dir
need curl python3
KPORT=18720 DPORT=18721 SPORT=18722 TPORT=18723 KTLS=18724 CPORT=18725 NSP=dynamo SLICE=dynamo-workers-a1b2c
test_certs
K=http://127.0.0.1:$KPORT
ES=/apis/discovery.k8s.io/v1/namespaces/$NSP/endpointslices
DWM=/apis/nvidia.com/v1alpha1/namespaces/$NSP/dynamoworkermetadatas
PODS=/api/v1/namespaces/$NSP/pods

kreq() { # METHOD PATH [CONTENT-TYPE BODY]: the HTTP status; the answer in $WORK/resp.json
  if [ $# -ge 4 ]; then
    curl -s -m 10 -X "$1" "$K$2" -H "Content-Type: $3" --data-binary "$4" -o "$WORK/resp.json" -w '%{http_code}'
  else
    curl -s -m 10 -X "$1" "$K$2" -o "$WORK/resp.json" -w '%{http_code}'
  fi
}
new_pod() { # NAME: creates the Pod; prints its uid
  local code
  code=$(kreq POST "$PODS" application/json \
    "{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"metadata\":{\"name\":\"$1\"},\"spec\":{\"containers\":[{\"name\":\"main\",\"image\":\"x\"}]}}")
  [ "$code" = 201 ] || fail "create pod $1: HTTP $code" "$WORK/standin.log"
  python3 -c "import json; print(json.load(open('$WORK/resp.json'))['metadata']['uid'])"
}
endpoint() { # NAME UID READY
  echo "{\"addresses\":[\"10.0.0.1\"],\"conditions\":{\"ready\":$3},\"targetRef\":{\"kind\":\"Pod\",\"namespace\":\"$NSP\",\"name\":\"$1\",\"uid\":\"$2\"}}"
}
set_endpoints() { # JSON-LIST: merge-patches the slice's endpoints
  local code
  code=$(kreq PATCH "$ES/$SLICE" application/merge-patch+json "{\"endpoints\":$1}")
  [ "$code" = 200 ] || fail "patch slice: HTTP $code" "$WORK/standin.log"
}
kubeconfig_for() { sed "s/kube-standin-dummy-token/kube-standin-$1/" "$WORK/kubeconfig" >"$WORK/kc-$1"; echo "$WORK/kc-$1"; }
served() { # MOCKER-LOG: requests the mocker received
  sed 's/\x1b\[[0-9;]*m//g' "$1" | grep -c 'push_handler: request received' || true
}
chats() { # PORT N: N chat completions through the real openai SDK; fails on any error
  "$PY" - "$1" "$2" <<'EOF' || fail "chats through port $1 failed" "$WORK/switchyard.log" "$WORK/dynamo.log"
import sys
from openai import OpenAI
port, n = sys.argv[1], int(sys.argv[2])
client = OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=30)
for i in range(n):
    r = client.chat.completions.create(model="qwen3", messages=[{"role": "user", "content": f"Hello {i}"}], max_tokens=3)
    assert r.choices[0].message.content is not None and r.usage.completion_tokens > 0, r
EOF
}
until_models() { # PORT yes|no LABEL: waits (30 s) until qwen3 is (not) listed
  for _ in $(seq 1 300); do
    if curl -s -m 2 "127.0.0.1:$1/v1/models" | grep -q '"qwen3"'; then [ "$2" = yes ] && return 0
    else [ "$2" = no ] && return 0; fi
    sleep 0.1
  done
  fail "$3: qwen3 listed on port $1 is not '$2' after 30 s" "$WORK/switchyard.log" "$WORK/dynamo.log"
}
routed() { # LABEL EXPECT0 EXPECT1 N: N chats through switchyard; which workers got some (1/0)
  local a0 a1 b0 b1
  a0=$(served "$WORK/worker-0.log"); a1=$(served "$WORK/worker-1.log")
  chats $SPORT "$4"
  sleep 0.3
  b0=$(served "$WORK/worker-0.log"); b1=$(served "$WORK/worker-1.log")
  local got0=$(( b0 > a0 ? 1 : 0 )) got1=$(( b1 > a1 ? 1 : 0 ))
  [ "$got0$got1" = "$2$3" ] || fail "$1: worker-0 got $((b0 - a0)), worker-1 got $((b1 - a1)) of $4 (wanted $2/$3 having any)" \
    "$WORK/switchyard.log"
  echo "$1: ok (worker-0 $((b0 - a0)), worker-1 $((b1 - a1)))"
}

python3 scripts/kube_standin.py --port $KPORT --kubeconfig-out "$WORK/kubeconfig" --record "$WORK/record.jsonl" \
  --tls-port $KTLS --tls-cert "$C/server.pem" --tls-key "$C/server.key" --tls-client-ca "$C/ca.pem" \
  >"$WORK/standin.log" 2>&1 &
PIDS+=($!)
for _ in $(seq 1 100); do grep -q "listening on" "$WORK/standin.log" && break; sleep 0.1; done
grep -q "listening on" "$WORK/standin.log" || fail "the stand-in did not start" "$WORK/standin.log"

U0=$(new_pod worker-0); U1=$(new_pod worker-1); UD=$(new_pod frontend-0); US=$(new_pod frontend-1)
UT=$(new_pod frontend-2); UC=$(new_pod frontend-3)
for w in 0 1; do
  uid=$U0; [ $w = 1 ] && uid=$U1
  POD_NAME=worker-$w POD_UID=$uid POD_NAMESPACE=$NSP KUBECONFIG=$(kubeconfig_for worker-$w) \
    "$PY" -m dynamo.mocker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend kubernetes \
    --request-plane tcp --event-plane zmq --speedup-ratio 10 >"$WORK/worker-$w.log" 2>&1 &
  PIDS+=($!)
done
for w in 0 1; do
  for _ in $(seq 1 600); do [ "$(kreq GET "$DWM/worker-$w")" = 200 ] && break; sleep 0.2; done
  [ "$(kreq GET "$DWM/worker-$w")" = 200 ] || fail "worker-$w wrote no DynamoWorkerMetadata" "$WORK/worker-$w.log"
done
code=$(kreq POST "$ES" application/json "{\"apiVersion\":\"discovery.k8s.io/v1\",\"kind\":\"EndpointSlice\",\"metadata\":{\"name\":\"$SLICE\",\"labels\":{\"nvidia.com/dynamo-discovery-enabled\":\"true\",\"nvidia.com/dynamo-discovery-backend\":\"kubernetes\"}},\"addressType\":\"IPv4\",\"endpoints\":[$(endpoint worker-0 "$U0" true)]}")
[ "$code" = 201 ] || fail "create slice: HTTP $code" "$WORK/standin.log"

POD_NAME=frontend-0 POD_UID=$UD POD_NAMESPACE=$NSP KUBECONFIG=$(kubeconfig_for frontend-0) \
  "$PY" -m dynamo.frontend --discovery-backend kubernetes --http-host 127.0.0.1 --http-port $DPORT \
  --router-mode round-robin >"$WORK/dynamo.log" 2>&1 &
PIDS+=($!)
POD_NAME=frontend-1 POD_UID=$US POD_NAMESPACE=$NSP KUBECONFIG=$(kubeconfig_for frontend-1) \
  "$BIN" --discovery-backend kubernetes --http-host 127.0.0.1 --http-port $SPORT --router-mode round-robin \
  >"$WORK/switchyard.log" 2>&1 &
PIDS+=($!)
until_models $DPORT yes "1. dynamo.frontend"
until_models $SPORT yes "1. switchyard"
chats $DPORT 2
routed "1. worker-0 ready" 1 0 6

set_endpoints "[$(endpoint worker-0 "$U0" true),$(endpoint worker-1 "$U1" true)]"
sleep 1
routed "2. worker-1 joins" 1 1 8

set_endpoints "[$(endpoint worker-0 "$U0" false),$(endpoint worker-1 "$U1" true)]"
sleep 1
routed "3. worker-0 not ready" 0 1 6
chats $DPORT 2
set_endpoints "[$(endpoint worker-0 "$U0" true),$(endpoint worker-1 "$U1" true)]"
sleep 1
routed "3. worker-0 ready again" 1 1 8

curl -s -m 5 -X POST "$K/_standin/close-watches" >/dev/null
sleep 1
set_endpoints "[$(endpoint worker-0 "$U0" true),$(endpoint worker-1 "$U1" false)]"
sleep 1
routed "4. after the watches were closed, worker-1 not ready" 1 0 6
curl -s -m 5 -X POST "$K/_standin/compact" >/dev/null
curl -s -m 5 -X POST "$K/_standin/close-watches" >/dev/null
set_endpoints "[$(endpoint worker-0 "$U0" true),$(endpoint worker-1 "$U1" true)]"
sleep 3
routed "4. after the history was compacted (re-list), worker-1 ready" 1 1 8

[ "$(kreq DELETE "$PODS/worker-1")" = 200 ] || fail "delete pod worker-1" "$WORK/standin.log"
sleep 1
routed "5. pod worker-1 deleted" 1 0 6

cat >"$WORK/kc-tls" <<EOF
apiVersion: v1
kind: Config
current-context: tls
contexts:
- name: tls
  context: {cluster: tls, user: tls}
clusters:
- name: tls
  cluster:
    server: https://127.0.0.1:$KTLS
    certificate-authority: $C/ca.pem
users:
- name: tls
  user:
    token: kube-standin-frontend-2
    client-certificate-data: $(base64 -w0 "$C/client.pem")
    client-key-data: $(base64 -w0 "$C/client.key")
EOF
POD_NAME=frontend-2 POD_UID=$UT POD_NAMESPACE=$NSP KUBECONFIG="$WORK/kc-tls" \
  "$BIN" --discovery-backend kubernetes --http-host 127.0.0.1 --http-port $TPORT --router-mode round-robin \
  >"$WORK/switchyard-tls.log" 2>&1 &
PIDS+=($!)
until_models $TPORT yes "6. switchyard over https"
chats $TPORT 3
echo "6. switchyard over https with a client certificate: ok"
# Container mode: worker-0's Pod labelled, its container ready; a stale DWM of the frontend's.
code=$(kreq PATCH "$PODS/worker-0" application/merge-patch+json \
  '{"metadata":{"labels":{"nvidia.com/dynamo-discovery-enabled":"true"}},"status":{"containerStatuses":[{"name":"main","ready":true}]}}')
[ "$code" = 200 ] || fail "label pod worker-0: HTTP $code" "$WORK/standin.log"
code=$(kreq PATCH "$DWM/frontend-3?fieldManager=test&force=true" application/apply-patch+yaml \
  "{\"apiVersion\":\"nvidia.com/v1alpha1\",\"kind\":\"DynamoWorkerMetadata\",\"metadata\":{\"name\":\"frontend-3\",\"ownerReferences\":[{\"apiVersion\":\"v1\",\"kind\":\"Pod\",\"name\":\"frontend-3\",\"uid\":\"$UC\"}]},\"spec\":{\"data\":{}}}")
[ "$code" = 201 ] || fail "stale DWM frontend-3: HTTP $code" "$WORK/standin.log"
POD_NAME=frontend-3 POD_UID=$UC POD_NAMESPACE=$NSP KUBECONFIG=$(kubeconfig_for frontend-3) \
  DYN_KUBE_DISCOVERY_MODE=container CONTAINER_NAME=main \
  "$BIN" --discovery-backend kubernetes --http-host 127.0.0.1 --http-port $CPORT --router-mode round-robin \
  >"$WORK/switchyard-container.log" 2>&1 &
PIDS+=($!)
until_models $CPORT yes "6. switchyard in container mode"
chats $CPORT 3
[ "$(kreq GET "$DWM/frontend-3")" = 404 ] || fail "6. the stale DWM frontend-3 was not deleted" "$WORK/switchyard-container.log"
echo "6. switchyard in container mode (its stale metadata deleted first): ok"

set_endpoints "[$(endpoint worker-0 "$U0" false)]"
until_models $SPORT no "7. switchyard"
until_models $TPORT no "7. switchyard over https"
until_models $DPORT no "7. dynamo.frontend"
code=$(kreq PATCH "$PODS/worker-0" application/merge-patch+json '{"status":{"containerStatuses":[{"name":"main","ready":false}]}}')
[ "$code" = 200 ] || fail "pod worker-0 not ready: HTTP $code" "$WORK/standin.log"
until_models $CPORT no "7. switchyard in container mode"
# 8. The same requests as dynamo.frontend's (each frontend's token names it in the record):
# the paths and query parameters, resource versions and continue tokens aside.
python3 - "$WORK/record.jsonl" <<'EOF' || fail "8. switchyard's requests differ from dynamo.frontend's" "$WORK/standin.log"
import json, re, sys
asked = {"kube-standin-frontend-0": set(), "kube-standin-frontend-1": set()}
for line in open(sys.argv[1]):
    e = json.loads(line)
    who = (e.get("authorization") or "").replace("Bearer ", "")
    if who in asked:
        path = re.sub(r"(resourceVersion|continue)=[^&]*", r"\1=…", e["path"])
        asked[who].add((e["method"], path))
dynamo, ours = asked["kube-standin-frontend-0"], asked["kube-standin-frontend-1"]
for name, reqs in (("dynamo.frontend", dynamo), ("switchyard", ours)):
    print(f"8. {name} sent:", *sorted(" ".join(r) for r in reqs), sep="\n   ")
assert dynamo and ours == {r for r in dynamo if r[0] == "GET"}, (dynamo ^ ours)
# A 1.6.1 frontend in container mode starts with `DELETE …/dynamoworkermetadatas/<own name>?`
# and a `{}` body (tests/data/kube/exchanges-1.6.1.jsonl); so must switchyard.
deletes = [json.loads(l) for l in open(sys.argv[1])]
deletes = [e for e in deletes if e["method"] == "DELETE" and (e.get("authorization") or "").endswith("frontend-3")]
assert [(e["path"], e.get("body")) for e in deletes] == [
    ("/apis/nvidia.com/v1alpha1/namespaces/dynamo/dynamoworkermetadatas/frontend-3?", {})], deletes
print("8. the same list and watch requests: ok")
EOF
echo "interop_kube: ok (switchyard and dynamo.frontend discover real 1.6.1 mockers through the Kubernetes API stand-in: readiness flips, re-watch, re-list after 410, a deleted pod, https with a client certificate, no ready worker)"
