#!/usr/bin/env bash
# Swagger UI at /docs in a real browser: starts switchyard (on an empty file store: the page
# and /openapi.json need no worker), checks that every file 1.6.1 serves under /docs/
# comes back with the bytes of assets/swagger-ui/SHA256SUMS, loads http://127.0.0.1:PORT/docs/
# in headless Chromium, dumps the DOM the page renders and checks that every operation of
# /openapi.json has its block there (scripts/docs_chromium_check.py), then saves a
# screenshot of the page to $SHOT (default /tmp/switchyard-docs.png).
#
# Needs Chromium (Debian package `chromium`; scripts/install-system.sh installs it as root)
# and python3; fails naming what is missing. The binary is $SWITCHYARD_BIN, else
# $CARGO_TARGET_DIR/debug/switchyard (build it with `cargo build`).
# Usage: bash scripts/docs_chromium.sh        (SHOT=/tmp/switchyard-docs.png)
set -euo pipefail
cd "$(dirname "$0")/.."

SHOT=${SHOT:-/tmp/switchyard-docs.png}
BIN=${SWITCHYARD_BIN:-${CARGO_TARGET_DIR:-target}/debug/switchyard}
CHROMIUM=${CHROMIUM:-$(command -v chromium || command -v chromium-browser || true)}
if [ -z "$CHROMIUM" ] || ! command -v "$CHROMIUM" >/dev/null; then
    echo "FAIL: Chromium${CHROMIUM:+ ($CHROMIUM)} is missing: install the Debian package (apt-get install chromium, or as root: bash scripts/install-system.sh)" >&2
    exit 1
fi
if [ ! -x "$BIN" ]; then
    echo "FAIL: no switchyard binary at $BIN: build it with \`cargo build\`, or set SWITCHYARD_BIN" >&2
    exit 1
fi
command -v python3 >/dev/null || { echo "FAIL: python3 is missing" >&2; exit 1; }

WORK=$(mktemp -d)
SY=
cleanup() {
    if [ -n "$SY" ]; then kill "$SY" 2>/dev/null || true; wait "$SY" 2>/dev/null || true; fi
    rm -rf "$WORK"
}
trap cleanup EXIT

PORT=$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')
BASE=http://127.0.0.1:$PORT
DYN_FILE_KV="$WORK/kv" "$BIN" --discovery-backend file --http-host 127.0.0.1 --http-port "$PORT" --shards 1 --no-pin-shards \
    >"$WORK/switchyard.log" 2>&1 &
SY=$!
for _ in $(seq 1 300); do
    curl -sf -o /dev/null "$BASE/live" && break
    kill -0 "$SY" 2>/dev/null || { cat "$WORK/switchyard.log" >&2; echo "FAIL: switchyard exited" >&2; exit 1; }
    sleep 0.1
done
curl -sf -o /dev/null "$BASE/live" || { echo "FAIL: switchyard did not answer /live on $BASE" >&2; exit 1; }

# The served bytes are the package's (1.6.1 serves the same files of the same version).
(cd assets/swagger-ui && while read -r sum name; do
    got=$(curl -sf "$BASE/docs/$name" | sha256sum | cut -d' ' -f1)
    [ "$got" = "$sum" ] || { echo "FAIL: /docs/$name: sha256 $got, want $sum" >&2; exit 1; }
done <SHA256SUMS)
echo "ok: the $(wc -l <assets/swagger-ui/SHA256SUMS) files of assets/swagger-ui/SHA256SUMS served with their bytes"
curl -sf "$BASE/openapi.json" >"$WORK/openapi.json"

# One headless Chromium run for the DOM, one for the screenshot. The virtual time budget
# lets the page load its scripts, fetch /openapi.json and render (it ends sooner when idle).
chromium_run() {
    "$CHROMIUM" --headless --disable-gpu --no-sandbox --no-first-run --disable-dev-shm-usage \
        --user-data-dir="$WORK/profile" --virtual-time-budget=20000 --window-size=1280,1400 "$@" \
        2>>"$WORK/chromium.log"
}
chromium_run --dump-dom "$BASE/docs/" >"$WORK/dom.html" ||
    { tail -20 "$WORK/chromium.log" >&2; echo "FAIL: Chromium did not load $BASE/docs/" >&2; exit 1; }
python3 scripts/docs_chromium_check.py "$WORK/openapi.json" "$WORK/dom.html"

rm -f "$SHOT"
chromium_run --screenshot="$SHOT" "$BASE/docs/" >/dev/null ||
    { tail -20 "$WORK/chromium.log" >&2; echo "FAIL: Chromium took no screenshot" >&2; exit 1; }
[ "$(head -c 8 "$SHOT" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
    { echo "FAIL: $SHOT is not a PNG" >&2; exit 1; }
echo "ok: screenshot of $BASE/docs/ in $SHOT ($(wc -c <"$SHOT") bytes)"
