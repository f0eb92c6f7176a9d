"""A connection flood on one shard: CONNS connections opened and held by HOLDERS client
processes against a switchyard shard allowed LIMIT connections (`--max-connections-per-shard`).

Usage: python3 perf/flood.py [--conns 20000] [--limit 19500] [--holders 2] [--port 18490]
       (SWITCHYARD_BIN: the binary, default target/release/switchyard; root raises the
       open-files limit to what the server needs)

One shard on CPU 0 with embedded fast mock workers (file-free `mem` discovery); the holders
(perf/hold_conns.py: the first holder's connections answer one `GET /live`, the others only
connect) and a probe on CPU 1. The probe opens a keep-alive connection before the flood and
sends `GET /live` on it again while every connection is held: the shard must keep serving the
connections it has. Connections beyond the limit are closed at once and counted
(`switchyard_limit_hits_total{limit="connections_per_shard"}`). Prints the server's descriptors
and RSS with the flood held, the probe's answer and time, what the holders saw closed, the
counter, and RSS after; exits 1 when the probe fails, the counter misses the excess, or RSS
does not come back within 20 % of its figure before the flood.
"""

import argparse
import http.client
import os
import re
import resource
import socket
import subprocess
import sys
import time
import urllib.request

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def rss_kb(pid):
    with open(f"/proc/{pid}/status") as f:
        return int(re.search(r"VmRSS:\s+(\d+)", f.read()).group(1))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--conns", type=int, default=20000)
    ap.add_argument("--limit", type=int, default=19500)
    ap.add_argument("--holders", type=int, default=2)
    ap.add_argument("--port", type=int, default=18490)
    a = ap.parse_args()
    binary = os.environ.get("SWITCHYARD_BIN", os.path.join(ROOT, "target/release/switchyard"))
    model = os.path.join(os.environ.get("SWITCHYARD_MODELS", os.path.expanduser("~/.cache/switchyard-models")), "qwen3")
    need = a.limit + 200
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and hard < need:
        sys.exit(f"the server needs {need} open files; the hard limit is {hard}: lower --limit")
    resource.setrlimit(resource.RLIMIT_NOFILE, (need, hard))
    try:
        socket.create_connection(("127.0.0.1", a.port), timeout=1).close()
        sys.exit(f"FAIL: something already listens on 127.0.0.1:{a.port} (a server left running?): --port")
    except OSError:
        pass
    server = subprocess.Popen(
        ["taskset", "-c", "0", binary, "--discovery-backend", "mem", "--embedded-fast", "--embedded-model-path", model,
         "--http-host", "127.0.0.1", "--http-port", str(a.port), "--shards", "1", "--no-pin-shards",
         "--max-connections-per-shard", str(a.limit)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    holders = []
    try:
        url = f"http://127.0.0.1:{a.port}"
        for _ in range(200):
            try:
                if b"qwen3" in urllib.request.urlopen(url + "/v1/models", timeout=1).read():
                    break
            except OSError:
                pass
            time.sleep(0.1)
        else:
            sys.exit("FAIL: switchyard did not list qwen3")
        time.sleep(3)  # the start's last frees reach the system (handed back once a second)
        rest_kb = rss_kb(server.pid)
        probe = http.client.HTTPConnection("127.0.0.1", a.port, timeout=10)
        probe.request("GET", "/live")
        probe.getresponse().read()
        per = a.conns // a.holders
        for i in range(a.holders):
            n = per if i < a.holders - 1 else a.conns - per * (a.holders - 1)
            h = subprocess.Popen(
                ["taskset", "-c", "1", sys.executable, os.path.join(ROOT, "perf/hold_conns.py"), str(a.port), str(n),
                 "used" if i == 0 else "fresh"],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
            line = h.stdout.readline().split()
            if line[:1] != ["open"]:
                sys.exit(f"FAIL: holder {i} did not open its connections: {line}")
            holders.append(h)
        # The holders' connects complete in the kernel's backlog before the shard accepts them:
        # wait until the shard's descriptor count stops moving.
        fds, still = -1, 0
        for _ in range(600):
            now = len(os.listdir(f"/proc/{server.pid}/fd"))
            still = still + 1 if now == fds else 0
            fds = now
            if still >= 10 and fds >= min(a.conns, a.limit):
                break
            time.sleep(0.1)
        held_kb = rss_kb(server.pid)
        t0 = time.perf_counter()
        probe.request("GET", "/live")
        status = probe.getresponse()
        status.read()
        probe_ms = (time.perf_counter() - t0) * 1e3
        closed = 0
        for h in holders:
            out, _ = h.communicate("done\n", timeout=120)
            m = re.search(r"closed (\d+)", out)
            closed += int(m.group(1)) if m else 0
        holders = []
        probe.close()
        time.sleep(3)
        after_kb = rss_kb(server.pid)
        metrics = urllib.request.urlopen(url + "/metrics", timeout=5).read().decode()
        m = re.search(r'switchyard_limit_hits_total\{limit="connections_per_shard"\} (\d+)', metrics)
        hits = int(m.group(1)) if m else 0
        excess = a.conns + 1 - a.limit  # the probe holds one of the shard's connections
        print(f"{a.conns} connections opened by {a.holders} holders against a limit of {a.limit}")
        print(f"server with the flood held: {fds} descriptors, RSS {held_kb / 1024:.1f} MB "
              f"(at rest {rest_kb / 1024:.1f} MB); after: RSS {after_kb / 1024:.1f} MB")
        print(f"probe on a connection opened before the flood: {status.status} in {probe_ms:.1f} ms")
        print(f"closed by the server while held (seen by the holders): {closed}; "
              f"connections_per_shard limit hits: {hits} (excess {excess})")
        bad = []
        if status.status != 200:
            bad.append(f"the probe got {status.status}")
        if hits < excess:
            bad.append(f"{hits} limit hits counted, {excess} connections were over the limit")
        if after_kb > rest_kb * 1.2:
            bad.append(f"RSS after {after_kb / 1024:.1f} MB, at rest {rest_kb / 1024:.1f} MB")
        for b in bad:
            print(f"FAIL: {b}", file=sys.stderr)
        sys.exit(1 if bad else 0)
    finally:
        for h in holders:
            h.kill()
        server.terminate()
        server.wait()


if __name__ == "__main__":
    main()
