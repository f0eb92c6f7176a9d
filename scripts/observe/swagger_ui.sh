#!/usr/bin/env bash
# Observes the Swagger UI of the real Dynamo 1.6.1 frontend (`python -m dynamo.frontend`,
# `/docs` and what is under it), for docs/dynamo/swagger-ui.md. Observation only: nothing of
# switchyard is built or run. No worker is needed: the UI is served without models.
#
# Cases: `/docs` and `/docs/` (GET, HEAD, other methods, a query), every file name the UI's
# distribution holds (status, headers, length, SHA-256), unknown names, nested and odd paths.
# Also saves each served asset whole, and greps the bundle for its version.
#
# Runs in a loopback-only network namespace (Dynamo binds 0.0.0.0) on HTTP port $PORT
# (default 18710) with its own file store. Output: $OBS/out/cases.txt (one block per case),
# $OBS/out/files/ (the assets), $OBS/logs. Needs root (unshare -n) and the Dynamo venv
# (scripts/install-dynamo.sh).
# Usage: bash scripts/observe/swagger_ui.sh        (OBS=/tmp/obs-swagger PORT=18710)
set -euo pipefail
cd "$(dirname "$0")/../.."
if [ "${1:-}" != --inside ]; then
  exec unshare -n bash "$0" --inside
fi
ip link set lo up

OBS=${OBS:-/tmp/obs-swagger}
PORT=${PORT:-18710}
VENV=${VENV:-${HOME:-/root}/.cache/switchyard-dynamo-venv}
OUT=$OBS/out
rm -rf "$OBS/kv" "$OUT" "$OBS/logs"
mkdir -p "$OBS/kv" "$OUT/files" "$OBS/logs"
export DYN_FILE_KV="$OBS/kv"
export DYN_TCP_RPC_HOST=127.0.0.1 DYN_TCP_RESPONSE_STREAM_HOST=127.0.0.1 DYN_EVENT_PLANE_HOST=127.0.0.1
"$VENV/bin/python" -m dynamo.frontend --http-port "$PORT" --discovery-backend file \
  >"$OBS/logs/frontend.log" 2>&1 &
FE=$!
trap 'kill "$FE" 2>/dev/null || true; wait 2>/dev/null || true' EXIT
for _ in $(seq 1 600); do
  curl -s -o /dev/null "127.0.0.1:$PORT/health" && break
  sleep 0.1
done

base=127.0.0.1:$PORT
# case TITLE CURL-ARGS...: the status line, headers, body length and hash of one request
# (for HEAD, `-I`, curl reads no body: only the head is shown).
case_() {
  local title=$1; shift
  local body=$OBS/body
  rm -f "$body"
  {
    echo "== $title"
    if [ "$1" = -I ]; then
      curl -s "$@" | tr -d '\r' | grep -v '^date:'
    else
      curl -s -D - -o "$body" "$@" | tr -d '\r' | grep -v '^date:'
      echo "body: $(wc -c <"$body") bytes, sha256 $(sha256sum "$body" | cut -c1-16)"
      # A short text body whole.
      if [ "$(wc -c <"$body")" -le 200 ] && [ -s "$body" ] && ! grep -q '[^[:print:][:space:]]' "$body"; then
        echo "body text: $(cat "$body")"
      fi
    fi
  } >>"$OUT/cases.txt"
}
# failures: the frontend's request and failure counters in /metrics.
failures() { curl -s "$base/metrics" | grep -E '^dynamo_[a-z_]*(failure|error|requests)[a-z_]*' || true; }

: >"$OUT/cases.txt"
failures >"$OUT/metrics_before.txt"
case_ 'GET /docs' "$base/docs"
case_ 'HEAD /docs' -I "$base/docs"
case_ 'GET /docs?x=1' "$base/docs?x=1"
case_ 'POST /docs' -X POST "$base/docs"
case_ 'GET /docs/' "$base/docs/"
case_ 'HEAD /docs/' -I "$base/docs/"
case_ 'POST /docs/' -X POST "$base/docs/"
case_ 'PUT /docs/swagger-ui.css' -X PUT "$base/docs/swagger-ui.css"
case_ 'DELETE /docs/index.html' -X DELETE "$base/docs/index.html"
case_ 'OPTIONS /docs/' -X OPTIONS "$base/docs/"
case_ 'GET /docs/?x=1' "$base/docs/?x=1"
case_ 'GET /docs/index.css?v=2' "$base/docs/index.css?v=2"
for f in index.html index.css swagger-ui.css swagger-ui.css.map swagger-ui-bundle.js \
  swagger-ui-bundle.js.map swagger-ui-standalone-preset.js swagger-ui-standalone-preset.js.map \
  swagger-initializer.js swagger-ui.js swagger-ui.js.map swagger-ui-es-bundle.js \
  swagger-ui-es-bundle.js.map swagger-ui-es-bundle-core.js swagger-ui-es-bundle-core.js.map \
  oauth2-redirect.html oauth2-redirect.js favicon-16x16.png favicon-32x32.png LICENSE NOTICE \
  README.md package.json index.js absolute-path.js; do
  case_ "GET /docs/$f" "$base/docs/$f"
  [ ! -s "$OBS/body" ] || cp "$OBS/body" "$OUT/files/$f"
  case_ "HEAD /docs/$f" -I "$base/docs/$f"
done
case_ 'GET /docs/nope.js' "$base/docs/nope.js"
case_ 'GET /docs/nope' "$base/docs/nope"
case_ 'HEAD /docs/nope.js' -I "$base/docs/nope.js"
case_ 'GET /docs//' "$base/docs//"
case_ 'GET /docs//index.css' "$base/docs//index.css"
case_ 'GET /docs/a/b' "$base/docs/a/b"
case_ 'GET /docs/dist/index.css' "$base/docs/dist/index.css"
case_ 'GET /docs/%69ndex.css' "$base/docs/%69ndex.css"
case_ 'GET /docs/../openapi.json' --path-as-is "$base/docs/../openapi.json"
case_ 'GET /docs/INDEX.CSS' "$base/docs/INDEX.CSS"
case_ 'GET /docsx' "$base/docsx"
case_ 'GET /Docs' "$base/Docs"
case_ 'GET /docs with Accept-Encoding gzip' -H 'accept-encoding: gzip, br' "$base/docs/swagger-ui.css"
case_ 'GET /docs/ with If-None-Match' -H 'if-none-match: "x"' "$base/docs/index.css"
case_ 'GET /docs/ with Range' -H 'range: bytes=0-9' "$base/docs/index.css"
case_ 'GET /docs/%zz' "$base/docs/%zz"
case_ 'GET /docs/%ff' "$base/docs/%ff"
case_ 'GET /docs/a%ffb' "$base/docs/a%ffb"
case_ 'GET /docs/%c3%a9' "$base/docs/%c3%a9"
case_ 'HEAD /docs/%ff' -I "$base/docs/%ff"
case_ 'POST /docs/%ff' -X POST "$base/docs/%ff"
case_ 'GET /docs/%2Findex.css' "$base/docs/%2Findex.css"
case_ 'GET /docs/index.css%00' "$base/docs/index.css%00"
case_ 'GET /docs/index.css/' "$base/docs/index.css/"
case_ 'GET /docs/%' "$base/docs/%"
case_ 'GET /docs/index%2ecss' "$base/docs/index%2ecss"
case_ 'GET /docs/index.css#frag' "$base/docs/index.css#frag"
case_ 'GET /docs (HTTP/1.0)' -0 "$base/docs"
case_ 'GET /docs with Host' -H 'host: example.com:1234' "$base/docs"
case_ 'POST /docs/nope.js' -X POST "$base/docs/nope.js"
case_ 'GET /openapi.json/' "$base/openapi.json/"
failures >"$OUT/metrics_after.txt"
curl -s "$base/openapi.json" >"$OUT/openapi.json"
grep -o -E 'version:"[0-9]+\.[0-9]+\.[0-9]+"|swagger-ui[^"]{0,20}[0-9]+\.[0-9]+\.[0-9]+' \
  "$OUT/files/swagger-ui-bundle.js" | sort | uniq -c >"$OUT/version.txt" || true
echo "done: $OUT/cases.txt"
