"""Many connections against one switchyard: idle keep-alive connections, concurrent streams,
and a probe that measures TTFT while they are open.

Usage: connections.py --port P --model M --pid PID [--idle N] [--streams S] [--tokens T]
                      [--probes K] [--hold-seconds H]

Phases, one after the other (the server's RSS is read from /proc/PID/status at each step):
  1. probe alone: K streamed chats one after the other, TTFT of each (the unloaded value);
  2. N idle connections opened, each answered once (`GET /live`) and then kept open;
  3. with them open, S streamed chats at once, each of T tokens, restarted as they end for
     H seconds, while the probe runs again;
  4. everything closed; RSS again after 3 s.
Prints one JSON object: RSS at each step (MB), TTFT p50/p99 of both probes (ms), streams
completed and failed, idle connections that were closed by the server.
"""

import argparse
import asyncio
import json
import time


def rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def pct(xs, p):
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(p / 100 * len(xs)))] if xs else None


async def chat(port, model, tokens):
    """One streamed chat; (ttft seconds, ok)."""
    body = json.dumps({"model": model, "stream": True, "max_tokens": tokens,
                       "messages": [{"role": "user", "content": "Tell me a story"}]}).encode()
    t0 = time.perf_counter()
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: x\r\ncontent-type: application/json\r\n"
            b"connection: close\r\ncontent-length: %d\r\n\r\n" % len(body) + body)
    await w.drain()
    ttft, buf = None, b""
    while True:
        chunk = await r.read(65536)
        if not chunk:
            break
        buf += chunk
        if ttft is None and b"data: {" in buf:
            ttft = time.perf_counter() - t0
        if b"data: [DONE]" in buf:
            break
    w.close()
    return ttft, buf.startswith(b"HTTP/1.1 200") and b"[DONE]" in buf


async def probe(port, model, n):
    out = []
    for _ in range(n):
        ttft, ok = await chat(port, model, 8)
        if ok and ttft is not None:
            out.append(ttft * 1000)
    return out


async def idle_conn(port):
    r, w = await asyncio.open_connection("127.0.0.1", port)
    w.write(b"GET /live HTTP/1.1\r\nhost: x\r\n\r\n")
    await w.drain()
    head = await r.readuntil(b"\r\n\r\n")
    n = int([l for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")][0].split(b":")[1])
    await r.readexactly(n)
    return r, w


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--pid", type=int, required=True)
    ap.add_argument("--idle", type=int, default=10000)
    ap.add_argument("--streams", type=int, default=2000)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--probes", type=int, default=50)
    ap.add_argument("--hold-seconds", type=float, default=20)
    a = ap.parse_args()
    res = {"rss_start_mb": rss_mb(a.pid)}
    base = await probe(a.port, a.model, a.probes)
    res["ttft_unloaded_ms"] = {"p50": pct(base, 50), "p99": pct(base, 99), "n": len(base)}
    res["rss_after_probe_mb"] = rss_mb(a.pid)
    conns = []
    for i in range(0, a.idle, 500):
        conns += await asyncio.gather(*(idle_conn(a.port) for _ in range(min(500, a.idle - i))))
    await asyncio.sleep(1)
    res["rss_idle_mb"] = rss_mb(a.pid)
    res["idle_kb_each"] = round((res["rss_idle_mb"] - res["rss_after_probe_mb"]) * 1024 / max(1, a.idle), 2)
    done, failed = 0, 0
    stop = time.perf_counter() + a.hold_seconds
    peak = [0.0]

    async def streamer():
        nonlocal done, failed
        while time.perf_counter() < stop:
            try:
                _, ok = await chat(a.port, a.model, a.tokens)
            except (ConnectionError, OSError):
                ok = False
            done += ok
            failed += not ok

    async def sampler():
        while time.perf_counter() < stop:
            peak[0] = max(peak[0], rss_mb(a.pid))
            await asyncio.sleep(0.5)

    tasks = [asyncio.create_task(streamer()) for _ in range(a.streams)] + [asyncio.create_task(sampler())]
    await asyncio.sleep(2)
    loaded = await probe(a.port, a.model, a.probes)
    await asyncio.gather(*tasks)
    res["ttft_loaded_ms"] = {"p50": pct(loaded, 50), "p99": pct(loaded, 99), "n": len(loaded)}
    res["streams_done"], res["streams_failed"] = done, failed
    res["rss_peak_loaded_mb"] = peak[0]
    closed = sum(1 for r, _ in conns if r.at_eof())
    res["idle_closed_by_server"] = closed
    for _, w in conns:
        w.close()
    await asyncio.sleep(3)
    res["rss_end_mb"] = rss_mb(a.pid)
    print(json.dumps(res, indent=1))


asyncio.run(main())
