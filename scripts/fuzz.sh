#!/usr/bin/env bash
# Fuzzes switchyard's parsers and decoders with cargo-fuzz (libFuzzer), FUZZ_JOBS targets at a
# time (default 1; each target's fuzzer is one process on one core).
#
#   scripts/fuzz.sh [--dev] [--update-corpus] SECONDS [TARGET...]
#
# Installs what it needs when missing (a nightly toolchain through rustup, cargo-fuzz), builds
# every target once, then runs each TARGET (default: all, see `cargo fuzz list` in fuzz/)
# for SECONDS, niced, starting from the committed corpus fuzz/corpus/<target>/ (read only:
# new inputs go to a scratch corpus under fuzz/work/). Crashes, hangs and out-of-memory inputs
# go to fuzz/artifacts/<target>/ (gitignored). Prints per target: runs, execs/s, coverage
# (libFuzzer's cov and ft counters) and corpus size; exits non-zero if any target failed.
#
# --dev: build without optimisation (a cold build takes ~3 minutes instead of ~20, each input
# runs several times slower); for short runs such as CI's.
# --update-corpus: afterwards, minimise the committed corpus together with what the run
# found (`cargo fuzz cmin`) back into fuzz/corpus/<target>/.
#
# Environment: FUZZ_JOBS (targets run side by side, default 1), FUZZ_TIMEOUT (seconds one
# input may take, default 20), FUZZ_RSS_MB (memory limit, default 2048), FUZZ_ARGS (more
# libFuzzer flags), CARGO_TARGET_DIR as for cargo.
# Built without a sanitizer (the fuzzed code has no `unsafe`) and with debug assertions, so
# integer overflow panics.
set -euo pipefail
cd "$(dirname "$0")/.."

update=0
profile=()
while [[ "${1:-}" == --* ]]; do
    case "$1" in
        --update-corpus) update=1 ;;
        --dev) profile=(--dev) ;;
        *) echo "unknown option $1" >&2; exit 2 ;;
    esac
    shift
done
if [[ $# -lt 1 || ! "$1" =~ ^[0-9]+$ ]]; then
    sed -n '2,22p' "$0" | sed 's/^# \{0,1\}//'
    exit 2
fi
seconds=$1
shift

# -- tools ---------------------------------------------------------------------------------
if ! rustup toolchain list | grep -q '^nightly'; then
    echo "== installing the nightly toolchain (rustup, minimal profile)"
    rustup toolchain install nightly --profile minimal
fi
if ! command -v cargo-fuzz >/dev/null 2>&1; then
    echo "== installing cargo-fuzz"
    cargo install cargo-fuzz --locked
fi

cd fuzz
flags=(+nightly fuzz build "${profile[@]}" --sanitizer none --debug-assertions)
run_flags=("${profile[@]}" --sanitizer none --debug-assertions)
targets=("$@")
if [[ ${#targets[@]} -eq 0 ]]; then
    mapfile -t targets < <(cargo +nightly fuzz list)
fi

echo "== build (${targets[*]})"
start=$(date +%s)
nice -n 10 cargo "${flags[@]}"
echo "built in $(($(date +%s) - start)) s"

# -- runs ----------------------------------------------------------------------------------
# run_one TARGET: fuzzes one target; its summary line goes to work/TARGET.line, and the file
# work/TARGET.failed exists when it failed.
run_one() {
    local t=$1 corpus=corpus/$1 work=work/$1 log=work/$1.log dict=() status runs rate last cov ft corp line
    mkdir -p "$corpus" "$work" "artifacts/$t"
    rm -f "work/$t.failed"
    if [[ -f dict/$t.dict ]]; then
        dict=(-dict="dict/$t.dict")
    fi
    echo "== $t: ${seconds} s"
    set +e
    # shellcheck disable=SC2086
    nice -n 10 cargo +nightly fuzz run "${run_flags[@]}" "$t" "$work" "$corpus" -- \
        -max_total_time="$seconds" -timeout="${FUZZ_TIMEOUT:-20}" -rss_limit_mb="${FUZZ_RSS_MB:-2048}" \
        -print_final_stats=1 -artifact_prefix="artifacts/$t/" "${dict[@]}" ${FUZZ_ARGS:-} >"$log" 2>&1
    status=$?
    set -e
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -1)
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log" | tail -1)
    last=$(grep -E '^#[0-9]+' "$log" | tail -1 || true)
    cov=$(sed -n 's/.* cov: \([0-9]*\).*/\1/p' <<<"$last")
    ft=$(sed -n 's/.* ft: \([0-9]*\).*/\1/p' <<<"$last")
    corp=$(sed -n 's/.* corp: \([0-9]*\/[0-9]*[a-zA-Z]*\).*/\1/p' <<<"$last")
    line=$(printf '%-14s %6s s  runs %-10s execs/s %-7s cov %-6s ft %-7s corpus %s' \
        "$t" "$seconds" "${runs:-?}" "${rate:-?}" "${cov:-?}" "${ft:-?}" "${corp:-?}")
    if [[ $status -ne 0 ]]; then
        touch "work/$t.failed"
        line="$line  FAILED (exit $status; see fuzz/$log and fuzz/artifacts/$t/)"
        grep -E '^(thread .* panicked|==[0-9]+== ERROR|SUMMARY|ALARM|.*out-of-memory|.*Test unit written)' "$log" | head -5 || true
    fi
    echo "$line" | tee "work/$t.line"
    if [[ $update -eq 1 && $status -eq 0 ]]; then
        local merged=work/$t.merged
        rm -rf "$merged"
        mkdir -p "$merged"
        cp "$corpus"/* "$work"/* "$merged"/ 2>/dev/null || true
        nice -n 10 cargo +nightly fuzz cmin "${run_flags[@]}" "$t" "$merged" >"work/$t.cmin.log" 2>&1
        rm -rf "$corpus"
        mv "$merged" "$corpus"
        echo "   corpus minimised: $(find "$corpus" -type f | wc -l) files, $(du -sk "$corpus" | cut -f1) KiB"
    fi
}

parallel=${FUZZ_JOBS:-1}
mkdir -p work
for t in "${targets[@]}"; do
    run_one "$t" &
    while [[ $(jobs -rp | wc -l) -ge $parallel ]]; do
        wait -n || true
    done
done
wait
failed=()
summary=()
for t in "${targets[@]}"; do
    summary+=("$(cat "work/$t.line" 2>/dev/null || echo "$t: no result")")
    if [[ -f work/$t.failed || ! -f work/$t.line ]]; then
        failed+=("$t")
    fi
done

echo
echo "== fuzz summary"
printf '%s\n' "${summary[@]}"
if [[ ${#failed[@]} -gt 0 ]]; then
    echo "failed: ${failed[*]}"
    exit 1
fi
