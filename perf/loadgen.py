"""Open-loop HTTP load at a fixed request rate for the W1/W2 side-by-side runs.

Request i is sent at start + i/rate whatever happened to earlier ones (an open loop, so a
slow frontend shows up as latency, not as a lower offered rate). Each request's prompt is
different (a numbered, reshuffled text) so no frontend can answer from a tokenization cache.
Prints one JSON object: counts, TTFT and end-to-end percentiles in milliseconds.

  W1: chat, ~100 prompt tokens, max_tokens 1, non-streaming (TTFT = whole answer)
  W2: chat, ~1,000 prompt tokens, 64 output tokens, streaming (TTFT = first content chunk)

Usage: python perf/loadgen.py --url http://127.0.0.1:8000 --model M --workload w1 --rate 50 --duration 20
"""
import argparse
import asyncio
import json
import random
import time

import aiohttp

WORDS = ("river forest engine window market silver garden lantern thunder harbor pencil orbit "
         "meadow copper violin glacier signal canyon ember falcon ribbon quartz tunnel saddle").split()


def prompt(i: int, words: int) -> str:
    rng = random.Random(i)
    text = " ".join(rng.choice(WORDS) for _ in range(words))
    return f"Request {i}. Summarise the following notes in one sentence: {text}."


def body(workload: str, model: str, i: int) -> dict:
    if workload == "w1":
        return {"model": model, "max_tokens": 1, "messages": [
            {"role": "system", "content": "You are a helpful assistant that answers briefly."},
            {"role": "user", "content": prompt(i, 70)}]}
    return {"model": model, "max_tokens": 64, "min_tokens": 64, "stream": True, "ignore_eos": True,
            "messages": [{"role": "user", "content": prompt(i, 940)}]}


async def one(session, url, payload, stream, out):
    t0 = time.perf_counter()
    ttft = None
    try:
        async with session.post(url, json=payload) as r:
            if r.status != 200:
                await r.read()
                out["errors"] += 1
                return
            if stream:
                async for line in r.content:
                    if ttft is None and line.startswith(b"data: {") and b'"content"' in line:
                        ttft = time.perf_counter() - t0
            else:
                await r.read()
                ttft = time.perf_counter() - t0
    except Exception:
        out["errors"] += 1
        return
    out["ok"] += 1
    out["ttft"].append(ttft if ttft is not None else time.perf_counter() - t0)
    out["e2e"].append(time.perf_counter() - t0)


def pct(xs, p):
    if not xs:
        return None
    xs = sorted(xs)
    return round(xs[min(len(xs) - 1, int(p / 100 * len(xs)))] * 1000, 2)


async def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--workload", choices=["w1", "w2"], required=True)
    ap.add_argument("--rate", type=float, required=True)
    ap.add_argument("--duration", type=float, required=True)
    ap.add_argument("--offset", type=int, default=0, help="first request number (distinct prompts per run)")
    a = ap.parse_args()
    url = a.url.rstrip("/") + "/v1/chat/completions"
    n = int(a.rate * a.duration)
    out = {"sent": n, "ok": 0, "errors": 0, "ttft": [], "e2e": []}
    conn = aiohttp.TCPConnector(limit=0)
    timeout = aiohttp.ClientTimeout(total=120)
    async with aiohttp.ClientSession(connector=conn, timeout=timeout) as s:
        start = time.perf_counter()
        tasks = []
        for i in range(n):
            delay = start + i / a.rate - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            payload = body(a.workload, a.model, a.offset + i)
            tasks.append(asyncio.create_task(one(s, url, payload, a.workload == "w2", out)))
        await asyncio.gather(*tasks)
        elapsed = time.perf_counter() - start
    print(json.dumps({"sent": n, "ok": out["ok"], "errors": out["errors"], "seconds": round(elapsed, 2),
                      "ttft_p50_ms": pct(out["ttft"], 50), "ttft_p99_ms": pct(out["ttft"], 99),
                      "e2e_p50_ms": pct(out["e2e"], 50), "e2e_p99_ms": pct(out["e2e"], 99)}))


asyncio.run(main())
