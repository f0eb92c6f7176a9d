#!/usr/bin/env bash
# Keeps a shared cargo target directory from filling the disk: removes the incremental
# caches and the build outputs of this package's own targets (the library, the binary, every
# test and bench) that no build has written for DAYS days (default 1). Outputs of the
# dependencies stay: they are rebuilt only when the lock file changes.
#
#   bash scripts/prune-target.sh            # $CARGO_TARGET_DIR, or ~/.cache/switchyard-target
#   DAYS=0 bash scripts/prune-target.sh     # every output of this package, whatever its age
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-${HOME:-/tmp}/.cache/switchyard-target}"
minutes=$((${DAYS:-1} * 1440))
[ -d "$target" ] || exit 0
before=$(du -sm "$target" | cut -f1)

# Incremental caches: one directory per crate and build, each with its sessions.
find "$target" -maxdepth 4 -type d -name incremental -print0 |
    xargs -0 -I{} find {} -mindepth 1 -maxdepth 1 -mmin +"$minutes" -exec rm -rf {} + 2> /dev/null || true

# This package's own outputs: switchyard, libswitchyard, and one per test, bench and fuzz target.
names="switchyard"
for f in tests/*.rs benches/*.rs fuzz/fuzz_targets/*.rs; do
    [ -e "$f" ] && names="$names $(basename "$f" .rs)"
done
find "$target" -maxdepth 4 -type d -name deps -print0 | while IFS= read -r -d '' deps; do
    for n in $names; do
        find "$deps" -maxdepth 1 -type f \( -name "$n-*" -o -name "lib$n-*" \) -mmin +"$minutes" -delete
    done
done
after=$(du -sm "$target" | cut -f1)
echo "prune-target: $target ${before} MB -> ${after} MB"
