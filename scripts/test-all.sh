#!/usr/bin/env bash
# Builds every test target (`cargo test --all-targets --locked --no-run`) and runs the test
# binaries several at a time, as `cargo test` would run them one after another: each from the
# package root with cargo's run-time variables, the slowest started first. Most of the suite
# waits on sockets, timers and child processes rather than the CPU, so running binaries side by
# side shortens the step without changing what any test checks.
#
#   bash scripts/test-all.sh            # TEST_JOBS=3 binaries at a time
#   TEST_JOBS=1 bash scripts/test-all.sh
#
# Each binary's whole output is printed when it ends (a failing one's last, again, with its
# name); the exit status is non-zero when any binary failed.
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
jobs=${TEST_JOBS:-3}
export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-${HOME:-/tmp}/.cache/switchyard-target}"

list=$(mktemp)
out=$(mktemp -d)
trap 'rm -rf "$list" "$out"' EXIT

# One line per test executable: "<kind> <target name> <path>".
cargo test --all-targets --locked --no-run --message-format=json-render-diagnostics |
    python3 -c '
import json, sys
for line in sys.stdin:
    try:
        m = json.loads(line)
    except ValueError:
        continue
    if m.get("reason") == "compiler-artifact" and m.get("executable") and m["profile"]["test"]:
        print(m["target"]["kind"][0], m["target"]["name"], m["executable"])
' > "$list"

# The binaries that take longest (measured in CI) go first so the others fill in beside them.
slow="e2e_mock bench grpc migrate shutdown_signal cards responses plane_tls switchyard cancel"
ordered=$(mktemp)
{
    for name in $slow; do awk -v n="$name" '$2 == n' "$list"; done
    for name in $slow; do printf '%s\n' "$name"; done | awk 'NR == FNR { s[$1] = 1; next } !($2 in s)' - "$list"
} > "$ordered"
mv "$ordered" "$list"

# Cargo's run-time environment for a test binary of this package.
export CARGO_MANIFEST_DIR="$root"
export CARGO_PKG_NAME=switchyard
export CARGO_PKG_VERSION
CARGO_PKG_VERSION=$(awk -F'"' '/^version *=/ { print $2; exit }' Cargo.toml)

run_one() {
    local kind=$1 name=$2 exe=$3 log="$out/$1-$2.log" started rc=0
    started=$(date +%s)
    (cd "$root" && "$exe") > "$log" 2>&1 || rc=$?
    {
        printf '\n==== %s %s (%s s, exit %s)\n' "$kind" "$name" "$(($(date +%s) - started))" "$rc"
        cat "$log"
    } | flock "$out/.print" cat
    [ "$rc" -eq 0 ] || echo "$kind $name" >> "$out/failed"
    return 0
}
export -f run_one
export root out

started=$(date +%s)
xargs -P "$jobs" -L 1 bash -c 'run_one "$0" "$1" "$2"' < "$list"
printf '\n==== %s test binaries, %s at a time, in %s s\n' "$(wc -l < "$list")" "$jobs" "$(($(date +%s) - started))"

if [ -s "$out/failed" ]; then
    while read -r kind name; do
        printf '\n==== FAILED: %s %s\n' "$kind" "$name"
        tail -n 60 "$out/$kind-$name.log"
    done < "$out/failed"
    exit 1
fi
