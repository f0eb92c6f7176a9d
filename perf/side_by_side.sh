#!/usr/bin/env bash
# W1–W4, switchyard and the real `python -m dynamo.frontend` 1.6.1 side by side, in one run.
#
#   bash perf/side_by_side.sh          # root: loopback-only network namespace; ~15 min
#
# Both frontends serve the same workers: two in-tree mock workers (`switchyard mock-worker
# --fast`: no artificial delay, so the frontend is what is measured; the real frontend serves
# them too) for W1, W2 and W4, and four real `python -m dynamo.mocker` workers for W3.
# The frontend is pinned to CPU 0 (switchyard with one shard); the workers and the load
# generator (`switchyard bench`, open loop, Poisson arrivals, fixed seed) share CPU 1. At each
# offered rate the two frontends run one after the other, alternating which goes first.
#
#   ready  time from exec to the port answering and to the model being listed (workers
#          registered beforehand), idle RSS 3 s later; switchyard's model-file parsing is
#          reported separately (its log line). 3 starts each, median.
#   W1     chat, 100 prompt tokens, max_tokens 1, not streamed      rates W1_RATES
#   W2     chat, 1,000 prompt tokens, 64 output tokens, streamed   rates W2_RATES
#   W3     prefix-sharing KV workload, 4 real mockers: kv vs round-robin vs Dynamo kv
#          (`KV_PHASES=ratios scripts/interop_kv.sh`: cached-token ratio, mean of 3 seeds)
#   W4     chat, W4_TOKENS (32,000) prompt tokens, 16 output tokens, streamed, rates
#          W4_RATES; the rate at which TTFT p50 doubles over its value at the lowest rate.
#
# Per point: requests ok/failed, achieved rate, TTFT (whole answer for W1) and ITL p50/p99,
# frontend CPU-seconds per 1,000 requests (all threads, /proc/PID/task/*/schedstat) and peak
# RSS (VmHWM). Instructions per request: `perf stat -e instructions` on the frontend where
# the machine has hardware counters; where it has none (most VMs), valgrind's callgrind on
# switchyard at one low rate per workload (user space only; Dynamo cannot be counted then).
#
# Output: $OUT (default perf/out/side_by_side-<UTC time>): raw bench JSON per point,
# points.jsonl, tables.md and the plots (perf/plot.py: TTFT p50/p99 vs offered load).
# Knobs: POINT_S (8), W1_RATES, W2_RATES, W4_RATES, W4_TOKENS, SKIP (e.g. "w3 cg").
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$(pwd)
if [ "${1:-}" != "--inside" ]; then
  export OUT=${OUT:-$ROOT/perf/out/side_by_side-$(date -u +%Y%m%dT%H%M)}
  mkdir -p "$OUT"
  command -v valgrind >/dev/null || { apt-get update -qq && apt-get install -y -qq valgrind; }
  PLOT_VENV=${PLOT_VENV:-$HOME/.cache/switchyard-plot-venv}
  [ -x "$PLOT_VENV/bin/python" ] || python3 -m venv "$PLOT_VENV"
  "$PLOT_VENV/bin/python" -c "import matplotlib" 2>/dev/null || "$PLOT_VENV/bin/pip" install -q "matplotlib==3.9.2"
  if [ -z "${SWITCHYARD_BIN:-}" ]; then
    cargo build --release --quiet
    export SWITCHYARD_BIN="${CARGO_TARGET_DIR:-target}/release/switchyard"
  fi
  SWITCHYARD_BIN=$(realpath "$SWITCHYARD_BIN")
  export SWITCHYARD_BIN
  # The namespace part: ready, W1, W2, W4 (and callgrind); Dynamo's publishers bind 0.0.0.0.
  bash scripts/install-dynamo.sh >/dev/null
  bash scripts/install-system.sh >/dev/null
  bash scripts/fetch-models.sh qwen3 >/dev/null
  unshare -n bash "$0" --inside
  if [[ " ${SKIP:-} " != *" w3 "* ]]; then
    echo "== W3: KV_PHASES=ratios scripts/interop_kv.sh" >&2
    KV_PHASES=ratios bash scripts/interop_kv.sh 2>&1 | tee "$OUT/w3.log" >&2
  fi
  "$PLOT_VENV/bin/python" perf/plot.py "$OUT"
  echo "results: $OUT/tables.md" >&2
  exit 0
fi

source scripts/real-dynamo-env.sh
enter_loopback_namespace "$0" --inside
POINT_S=${POINT_S:-8}
W1_RATES=${W1_RATES:-"250 500 1000 2000"}
W2_RATES=${W2_RATES:-"25 50 100 200"}
W4_RATES=${W4_RATES:-"2 5 10 20 40 80 160 320"}
W4_TOKENS=${W4_TOKENS:-32000}
scratch_dir
hwm() { awk '/^VmHWM:/ {print $2}' /proc/"$1"/status; }
PMU=0
perf stat -e instructions true 2>&1 | grep -q "not supported" || { command -v perf >/dev/null && PMU=1; }

# Workers: output length comes from each request's max_tokens (ignore_eos), capped here.
for i in 1 2; do
  taskset -c 1 "$BIN" mock-worker --model-path "$MODEL_DIR" --model-name qwen3 --discovery-backend file \
    --fast --output-tokens 64 >"$WORK/worker$i.log" 2>&1 &
  PIDS+=($!)
done
SY_CMD=("$BIN" --discovery-backend file --http-host 127.0.0.1 --shards 1 --no-pin-shards)
DY_CMD=("$PY" -m dynamo.frontend --discovery-backend file --request-plane tcp --http-host 127.0.0.1)
sleep 2

echo "== ready and idle memory (3 starts each)" >&2
for i in 1 2 3; do
  taskset -c 0 python3 perf/ready.py --port 18300 --model qwen3 --label switchyard --log "$WORK/ready-sy$i.log" \
    -- "${SY_CMD[@]}" --http-port 18300 >>"$OUT/points.jsonl"
  taskset -c 0 python3 perf/ready.py --port 18301 --model qwen3 --label dynamo --log "$WORK/ready-dy$i.log" \
    -- "${DY_CMD[@]}" --http-port 18301 >>"$OUT/points.jsonl"
done


start_frontend() { # name port → FE_PID
  if [ "$1" = switchyard ]; then
    taskset -c 0 "${SY_CMD[@]}" --http-port "$2" >>"$WORK/sy.log" 2>&1 &
  else
    taskset -c 0 "${DY_CMD[@]}" --http-port "$2" >>"$WORK/dy.log" 2>&1 &
  fi
  FE_PID=$!
  qwen3_listed "$2"
}

bench_args() { # workload → the bench's workload options
  case $1 in
    w1) echo "--endpoint chat --input-tokens 100 --output-tokens 1" ;;
    w2) echo "--endpoint chat --stream --input-tokens 1000 --output-tokens 64" ;;
    w4) echo "--endpoint chat --stream --input-tokens $W4_TOKENS --output-tokens 16" ;;
  esac
}

point() { # workload frontend port pid rate
  local w=$1 fe=$2 port=$3 pid=$4 rate=$5 c0 c1 ins="" json="$OUT/$1-$2-$5.json"
  # Warm-up: a short run at the same rate, not recorded.
  # shellcheck disable=SC2046
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$port" --model qwen3 --model-path "$MODEL_DIR" \
    $(bench_args "$w") --rate "$rate" --duration 1 --seed 1 --no-progress --allow-errors >/dev/null 2>&1 || true
  c0=$(cpu "$pid")
  if [ "$PMU" = 1 ]; then
    perf stat -e instructions -x, -o "$WORK/perf.$w" -p "$pid" &
    local perf_pid=$!
  fi
  # shellcheck disable=SC2046
  taskset -c 1 "$BIN" bench --url "http://127.0.0.1:$port" --model qwen3 --model-path "$MODEL_DIR" \
    $(bench_args "$w") --rate "$rate" --duration "$POINT_S" --seed 7 --timeout 60 --no-progress \
    --allow-errors --json "$json" >"$WORK/bench.out" 2>&1 || { cat "$WORK/bench.out" >&2; return 1; }
  c1=$(cpu "$pid")
  if [ "$PMU" = 1 ]; then
    kill -INT "$perf_pid"; wait "$perf_pid" || true
    ins=$(awk -F, '/instructions/ {print $1}' "$WORK/perf.$w")
  fi
  python3 - "$w" "$fe" "$rate" "$c0" "$c1" "$(hwm "$pid")" "$json" "$ins" >>"$OUT/points.jsonl" <<'PYEOF'
import json, sys
w, fe, rate, c0, c1, hwm, path, ins = sys.argv[1:]
r = json.load(open(path))
m = r["metrics"]
done = r["ok"] + r["failed"]
first = m["ttft"] if "ttft" in m and m["ttft"]["count"] else m["e2e"]
row = {"row": "point", "workload": w, "frontend": fe, "rate": float(rate), "ok": r["ok"], "failed": r["failed"],
       "errors": r["errors"], "achieved": round(r["requests_per_s"], 1),
       "ttft_p50": first["p50"], "ttft_p99": first["p99"],
       "itl_p50": m["itl"]["p50"] if m.get("itl", {}).get("count") else None,
       "itl_p99": m["itl"]["p99"] if m.get("itl", {}).get("count") else None,
       "cpu_s_per_1k": round((float(c1) - float(c0)) / 1e9 * 1000 / max(done, 1), 3),
       "peak_rss_mb": round(int(hwm) / 1024, 1)}
if ins:
    row["instructions_per_request"] = int(ins) / max(done, 1)
print(json.dumps(row))
PYEOF
  tail -n 1 "$OUT/points.jsonl" >&2
}

# A frontend whose TTFT p50 passed 8x its value at the lowest rate, or that failed requests,
# is not offered the higher rates (its queue would only grow; the run stays bounded).
saturated() { # workload frontend
  python3 - "$OUT/points.jsonl" "$1" "$2" <<'PYEOF'
import json, sys
path, w, fe = sys.argv[1:]
rows = [json.loads(l) for l in open(path) if '"point"' in l]
rows = [r for r in rows if r["workload"] == w and r["frontend"] == fe]
if rows:
    base, last = rows[0]["ttft_p50"], rows[-1]
    sys.exit(0 if last["failed"] > 0 or last["ttft_p50"] > 8 * base else 1)
sys.exit(1)
PYEOF
}

ladder() { # workload rates...
  local w=$1; shift
  local order=(switchyard dynamo)
  for rate in "$@"; do
    for fe in "${order[@]}"; do
      if saturated "$w" "$fe"; then echo "$w: $fe saturated; not offered $rate/s" >&2; continue; fi
      local port=18310; [ "$fe" = dynamo ] && port=18311
      start_frontend "$fe" "$port"
      point "$w" "$fe" "$port" "$FE_PID" "$rate" || echo "point $w $fe $rate failed" >&2
      kill "$FE_PID"; wait "$FE_PID" 2>/dev/null || true
    done
    order=("${order[1]}" "${order[0]}")
  done
}

echo "== W1" >&2; ladder w1 $W1_RATES
echo "== W2" >&2; ladder w2 $W2_RATES
echo "== W4" >&2; ladder w4 $W4_RATES

if [ "$PMU" = 0 ] && [[ " ${SKIP:-} " != *" cg "* ]]; then
  echo "== callgrind (no hardware counters here): switchyard instructions per request" >&2
  for w in w1 w2 w4; do
    rate=10; [ "$w" = w4 ] && rate=2
    taskset -c 0 valgrind --tool=callgrind --instr-atstart=no --callgrind-out-file="$WORK/cg.$w.out" \
      "${SY_CMD[@]}" --http-port 18320 --io-driver epoll >>"$WORK/cg.log" 2>&1 &
    CG=$!
    qwen3_listed 18320
    # shellcheck disable=SC2046
    taskset -c 1 "$BIN" bench --url http://127.0.0.1:18320 --model qwen3 --model-path "$MODEL_DIR" \
      $(bench_args "$w") --rate "$rate" --requests 5 --seed 3 --no-progress --allow-errors >/dev/null 2>&1 || true
    callgrind_control -i on "$CG" >/dev/null
    # shellcheck disable=SC2046
    taskset -c 1 "$BIN" bench --url http://127.0.0.1:18320 --model qwen3 --model-path "$MODEL_DIR" \
      $(bench_args "$w") --rate "$rate" --requests 60 --seed 4 --no-progress --allow-errors \
      --json "$WORK/cg.$w.json" >/dev/null 2>&1 || true
    callgrind_control -i off "$CG" >/dev/null
    kill "$CG"; wait "$CG" 2>/dev/null || true
    python3 - "$w" "$WORK/cg.$w.json" "$WORK/cg.$w.out" >>"$OUT/points.jsonl" <<'PYEOF'
import json, sys
w, report, path = sys.argv[1:]
r = json.load(open(report))
total = 0
for line in open(path):
    if line.startswith(("summary:", "totals:")):
        total = max(total, int(line.split()[1]))
done = r["ok"] + r["failed"]
print(json.dumps({"row": "callgrind", "workload": w, "frontend": "switchyard", "requests": done, "ok": r["ok"],
                  "instructions_per_request": total / max(done, 1)}))
PYEOF
    tail -n 1 "$OUT/points.jsonl" >&2
  done
fi
