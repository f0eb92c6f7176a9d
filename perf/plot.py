"""Tables and plots of one `perf/side_by_side.sh` run, or the plot of one `perf/soak.sh` run.

Reads OUT/points.jsonl (one JSON object per measured point, start or callgrind count) and
OUT/w3.log (the KV ratios), writes OUT/tables.md and, for each of W1, W2 and W4,
OUT/ttft_<workload>.png: TTFT p50 and p99 against offered load, both frontends on one
chart (log-scaled axes). W4's table also names, per frontend, the lowest offered rate at
which TTFT p50 reached twice its value at the lowest rate.

With --soak, reads OUT/rss.csv (perf/soak.sh: time, phase, VmRSS, VmHWM, anonymous memory,
open descriptors) and writes OUT/soak_rss.png: resident and anonymous memory against time,
the load phase shaded (its warm-up darker), idle + 10 % and the 100 MB budget marked, the
open descriptors on the right axis.

Usage: python perf/plot.py OUT          (needs matplotlib for the plots; tables are written anyway)
       python perf/plot.py --soak OUT   (needs matplotlib)
"""
import csv
import json
import re
import statistics
import sys
from pathlib import Path

NAMES = {"switchyard": "switchyard (1 shard)", "dynamo": "dynamo.frontend 1.6.1"}
TITLES = {
    "w1": "W1: chat, 100 prompt tokens, 1 output token, not streamed (TTFT = whole answer)",
    "w2": "W2: chat, 1,000 prompt tokens, 64 output tokens, streamed",
    "w4": "W4: chat, long prompts, 16 output tokens, streamed",
}


def fmt(v, digits=2):
    if v is None:
        return "–"
    if isinstance(v, float):
        return f"{v:.{digits}f}"
    return str(v)


def doubling(points):
    """The first offered rate whose TTFT p50 is at least twice the lowest rate's."""
    pts = sorted(points, key=lambda r: r["rate"])
    if not pts:
        return None, None
    base = pts[0]["ttft_p50"]
    last_ok = pts[0]["rate"]
    for r in pts[1:]:
        if r["ttft_p50"] >= 2 * base or r["failed"] > 0:
            return last_ok, r["rate"]
        last_ok = r["rate"]
    return last_ok, None


def main(out: Path) -> int:
    rows = [json.loads(line) for line in (out / "points.jsonl").read_text().splitlines() if line.strip()]
    md = []
    ready = [r for r in rows if r.get("row") == "ready"]
    if ready:
        md += ["## Start: time to ready and idle memory (median of the starts)", "",
               "| frontend | starts | port answers ms | model listed ms | model files parsed ms | idle RSS MB |",
               "|---|---:|---:|---:|---:|---:|"]
        for fe in NAMES:
            rs = [r for r in ready if r["frontend"] == fe and "ready_ms" in r]
            if not rs:
                continue
            med = lambda k: statistics.median(r[k] for r in rs) if all(k in r for r in rs) else None
            md.append(f"| {NAMES[fe]} | {len(rs)} | {fmt(med('port_ms'), 1)} | {fmt(med('ready_ms'), 1)} | "
                      f"{fmt(med('model_load_ms'), 1)} | {fmt(med('idle_rss_mb'), 1)} |")
        md.append("")
    points = [r for r in rows if r.get("row") == "point"]
    for w in ("w1", "w2", "w4"):
        ps = [r for r in points if r["workload"] == w]
        if not ps:
            continue
        md += [f"## {TITLES[w]}", "",
               "| offered req/s | frontend | ok | failed | achieved req/s | TTFT p50 ms | TTFT p99 ms | "
               "ITL p50 ms | ITL p99 ms | CPU-s per 1k req | peak RSS MB |",
               "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
        for r in sorted(ps, key=lambda r: (r["rate"], r["frontend"] != "switchyard")):
            md.append(f"| {fmt(r['rate'], 0)} | {NAMES[r['frontend']]} | {r['ok']} | {r['failed']} | "
                      f"{fmt(r['achieved'], 1)} | {fmt(r['ttft_p50'])} | {fmt(r['ttft_p99'])} | "
                      f"{fmt(r['itl_p50'], 3)} | {fmt(r['itl_p99'], 3)} | {fmt(r['cpu_s_per_1k'], 3)} | "
                      f"{fmt(r['peak_rss_mb'], 1)} |")
        md.append("")
        if w == "w4":
            md += ["TTFT p50 doubling (first offered rate with p50 ≥ 2× the lowest rate's, or failures):", ""]
            for fe in NAMES:
                ok, bad = doubling([r for r in ps if r["frontend"] == fe])
                if ok is None:
                    continue
                what = f"between {fmt(ok, 0)} and {fmt(bad, 0)} req/s" if bad else f"not reached up to {fmt(ok, 0)} req/s"
                md.append(f"- {NAMES[fe]}: {what}")
            md.append("")
    cg = [r for r in rows if r.get("row") == "callgrind"]
    if cg:
        md += ["## switchyard instructions per request (callgrind: user space, all threads)", "",
               "| workload | requests | instructions per request |", "|---|---:|---:|"]
        for r in cg:
            md.append(f"| {r['workload'].upper()} | {r['requests']} | {r['instructions_per_request'] / 1e6:.3f} M |")
        md.append("")
    w3 = out / "w3.log"
    if w3.exists():
        found = re.findall(r"^(switchyard --router-mode \S+|dynamo\.frontend.*?):\s+cached-token ratio ([0-9.]+)",
                           w3.read_text(), re.M)
        if found:
            md += ["## W3: prefix-sharing KV workload, 4 real mockers (cached-token ratio, mean of 3 seeds)", "",
                   "| frontend | cached-token ratio |", "|---|---:|"]
            md += [f"| {label} | {ratio} |" for label, ratio in found]
            md.append("")
    (out / "tables.md").write_text("\n".join(md) + "\n")
    print("\n".join(md))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib missing: no plots", file=sys.stderr)
        return 0
    for w in ("w1", "w2", "w4"):
        ps = [r for r in points if r["workload"] == w]
        if not ps:
            continue
        fig, ax = plt.subplots(figsize=(7, 4.5))
        for fe, colour in (("switchyard", "tab:blue"), ("dynamo", "tab:orange")):
            rs = sorted((r for r in ps if r["frontend"] == fe), key=lambda r: r["rate"])
            if not rs:
                continue
            x = [r["rate"] for r in rs]
            ax.plot(x, [r["ttft_p50"] for r in rs], "o-", color=colour, label=f"{NAMES[fe]} p50")
            ax.plot(x, [r["ttft_p99"] for r in rs], "s--", color=colour, alpha=0.6, label=f"{NAMES[fe]} p99")
        ax.set_xscale("log")
        ax.set_yscale("log")
        ax.set_xlabel("offered load, requests/s (Poisson)")
        ax.set_ylabel("TTFT, ms" if w != "w1" else "latency (whole answer), ms")
        ax.set_title(TITLES[w], fontsize=9)
        ax.grid(True, which="both", alpha=0.3)
        ax.legend(fontsize=8)
        fig.tight_layout()
        fig.savefig(out / f"ttft_{w}.png", dpi=110)
        plt.close(fig)
    return 0


def soak(out: Path) -> int:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    rows = list(csv.DictReader(open(out / "rss.csv")))
    t = [float(r["t_s"]) / 60 for r in rows]
    mb = lambda k: [int(r[k]) / 1024 for r in rows]
    idle = statistics.median(int(r["rss_kb"]) / 1024 for r in rows if r["phase"] == "idle")
    load = [float(r["t_s"]) / 60 for r in rows if r["phase"] == "load"]
    summary = (out / "summary.md").read_text() if (out / "summary.md").exists() else ""
    warm = re.search(r"warm-up ([0-9.]+) s", summary)
    fig, ax = plt.subplots(figsize=(7, 4.5))
    if load:
        ax.axvspan(load[0], load[-1], color="tab:orange", alpha=0.08, label="load (mixed, open loop)")
        if warm:
            ax.axvspan(load[0], load[0] + float(warm.group(1)) / 60, color="tab:orange", alpha=0.12,
                       label="warm-up")
    ax.plot(t, mb("rss_kb"), "-", color="tab:blue", label="RSS (VmRSS)")
    ax.plot(t, mb("anon_kb"), "--", color="tab:blue", alpha=0.6, label="anonymous")
    ax.plot(t, mb("hwm_kb"), "-", color="tab:gray", alpha=0.6, linewidth=1, label="peak so far (VmHWM, start included)")
    ax.axhline(idle * 1.1, color="tab:green", linestyle=":", label="idle + 10 %")
    ax.axhline(100, color="tab:red", linestyle="--", linewidth=1, label="budget, 100 MB")
    ax.set_ylim(0, 110)
    if rows and "fds" in rows[0]:
        ax2 = ax.twinx()
        ax2.plot(t, [int(r["fds"]) for r in rows], "-", color="tab:purple", alpha=0.35, linewidth=1)
        ax2.set_ylabel("open descriptors (connections)", color="tab:purple", fontsize=8)
        ax2.set_ylim(bottom=0)
    ax.set_xlabel("minutes")
    ax.set_ylabel("MB")
    ax.set_title("switchyard (1 shard) memory under a steady mixed load", fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7, loc="lower right")
    fig.tight_layout()
    fig.savefig(out / "soak_rss.png", dpi=110)
    plt.close(fig)
    return 0


if __name__ == "__main__":
    if sys.argv[1] == "--soak":
        sys.exit(soak(Path(sys.argv[2])))
    sys.exit(main(Path(sys.argv[1])))
