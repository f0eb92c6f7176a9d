#!/usr/bin/env bash
# Keeps a shared cargo target directory from filling the disk: removes the incremental
# caches and the build outputs of this package's own targets (the library, the binary, every
# test and bench) that no build has written for DAYS days (default 1). Outputs of the
# dependencies stay: they are rebuilt only when the lock file changes.
#
#   bash scripts/prune-target.sh            # $CARGO_TARGET_DIR, or ~/.cache/switchyard-target
#   DAYS=0 bash scripts/prune-target.sh     # every output of this package, whatever its age
#
# When the disk holding the target has less than MIN_FREE_GB (default 20) free, age does not
# matter: every incremental cache and every output of this package goes, and if that is still
# not enough, the whole target directory (the dependencies are then rebuilt, a few minutes).
# A build that runs out of disk fails at the linker with a bus error, far from the cause.
set -euo pipefail
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-${HOME:-/tmp}/.cache/switchyard-target}"
minutes=$((${DAYS:-1} * 1440))
[ -d "$target" ] || exit 0
before=$(du -sm "$target" | cut -f1)
min_free_mb=$((${MIN_FREE_GB:-20} * 1024))
free_mb() { df -Pm "$target" | awk 'NR == 2 { print $4 }'; }
if [ "$(free_mb)" -lt "$min_free_mb" ]; then
    echo "prune-target: $(free_mb) MB free, under ${min_free_mb} MB: pruning whatever its age"
    minutes=0
fi

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
if [ "$(free_mb)" -lt "$min_free_mb" ]; then
    echo "prune-target: still $(free_mb) MB free: removing the whole target directory"
    rm -rf "$target"
    mkdir -p "$target"
fi
after=$(du -sm "$target" | cut -f1)
echo "prune-target: $target ${before} MB -> ${after} MB"
