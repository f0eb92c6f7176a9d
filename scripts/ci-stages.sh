#!/usr/bin/env bash
# Runs CI stages side by side, CI_STAGE_JOBS at a time (default 2), in the order given (put
# the longest first so the short ones fill in beside them).
#
#   bash scripts/ci-stages.sh TITLE COMMAND [TITLE COMMAND]...
#
# Each COMMAND runs with `bash -c` from the package root, its output to a file of its own;
# when it ends, a heading with the time since this script started, the stage's title, its
# duration and exit status is printed, then its whole output (stages never interleave). At
# the end the failed stages are named again with the last lines of their output, and the
# exit status is non-zero when any failed.
set -euo pipefail
cd "$(dirname "$0")/.."

jobs=${CI_STAGE_JOBS:-2}
if (($# == 0 || $# % 2 != 0)); then
    sed -n '2,10p' "$0" | sed 's/^# \{0,1\}//' >&2
    exit 2
fi
out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
started=$(date +%s)

# run_stage N TITLE COMMAND: one stage; its status goes to $out/N.rc.
run_stage() {
    local n=$1 title=$2 command=$3 t0 rc=0
    t0=$(date +%s)
    bash -c "$command" </dev/null >"$out/$n.log" 2>&1 || rc=$?
    echo "$rc" >"$out/$n.rc"
    {
        printf '\n== [%s s] %s (%s s, exit %s)\n' "$(($(date +%s) - started))" "$title" "$(($(date +%s) - t0))" "$rc"
        cat "$out/$n.log"
    } | flock "$out/.print" cat
}

titles=()
n=0
running=0
while (($# > 0)); do
    titles+=("$1")
    run_stage "$n" "$1" "$2" &
    shift 2
    n=$((n + 1))
    running=$((running + 1))
    if ((running >= jobs)); then
        wait -n || true
        running=$((running - 1))
    fi
done
wait || true

failed=0
for ((i = 0; i < n; i++)); do
    rc=$(cat "$out/$i.rc" 2>/dev/null || echo "no status")
    if [ "$rc" != 0 ]; then
        failed=$((failed + 1))
        printf '\n==== FAILED (exit %s): %s\n' "$rc" "${titles[$i]}"
        tail -n 40 "$out/$i.log" 2>/dev/null || true
    fi
done
printf '\n==== %s stages, %s at a time, in %s s; %s failed\n' "$n" "$jobs" "$(($(date +%s) - started))" "$failed"
((failed == 0))
