"""The client side of scripts/interop.sh, speaking through the OpenAI Python SDK.

Subcommands (each prints what it saw; a failed check exits non-zero with a FAIL line):
  check     chat and completions, whole and streamed: shapes, finish_reason, exact usage.
  ids       N chat requests; prints the request ids the answers carry, one a line.
  failover  SIGKILL a worker, then send a request every INTERVAL s for DURATION s.
  gone      SIGTERM a worker, wait for the model to leave /v1/models, then expect a 404.

The prompts below use the qwen3 model files of scripts/fetch-models.sh: the chat prompt
("Hello there" in the qwen3 chat template) is 10 tokens, the completions prompt 4.
"""

import argparse
import os
import signal
import sys
import threading
import time

import openai

CHAT_MESSAGES = [{"role": "user", "content": "Hello there"}]
CHAT_PROMPT_TOKENS = 10
COMPLETION_PROMPT = "Once upon a time"
COMPLETION_PROMPT_TOKENS = 4


class Fail(Exception):
    pass


def expect(cond, what, seen=None):
    if not cond:
        raise Fail(what if seen is None else f"{what}; saw: {seen!r}")


def client(base_url, timeout=30.0):
    return openai.OpenAI(base_url=base_url, api_key="unused", timeout=timeout, max_retries=0)


def check_usage(usage, prompt_tokens, completion_tokens, label):
    expect(usage is not None, f"{label}: no usage")
    expect(usage.prompt_tokens == prompt_tokens, f"{label}: prompt_tokens != {prompt_tokens}", usage)
    expect(usage.completion_tokens == completion_tokens, f"{label}: completion_tokens != {completion_tokens}", usage)
    expect(usage.total_tokens == prompt_tokens + completion_tokens, f"{label}: total_tokens", usage)


def check_stream(chunks, object_name, max_tokens, prompt_tokens, label):
    expect(chunks, f"{label}: no chunks")
    for c in chunks:
        expect(c.object == object_name, f"{label}: chunk object != {object_name}", c)
    ids = {c.id for c in chunks}
    expect(len(ids) == 1, f"{label}: chunks carry different ids", ids)
    # With include_usage the last chunk carries the usage and no choices; the others none.
    last = chunks[-1]
    expect(last.choices == [], f"{label}: last chunk has choices", last)
    check_usage(last.usage, prompt_tokens, max_tokens, label)
    for c in chunks[:-1]:
        expect(c.usage is None, f"{label}: usage before the last chunk", c)
    finishes = [ch.finish_reason for c in chunks for ch in c.choices if ch.finish_reason is not None]
    expect(finishes == ["length"], f"{label}: finish reasons != ['length']", finishes)
    return chunks


def cmd_check(a):
    c = client(a.base_url)
    m = a.model

    r = c.chat.completions.create(model=m, messages=CHAT_MESSAGES, max_tokens=8)
    expect(r.object == "chat.completion", "chat: object", r)
    expect(r.model == m, "chat: model", r.model)
    expect(len(r.choices) == 1 and r.choices[0].message.role == "assistant", "chat: one assistant choice", r)
    expect(isinstance(r.choices[0].message.content, str) and r.choices[0].message.content, "chat: content", r)
    expect(r.choices[0].finish_reason == "length", "chat: finish_reason != length", r.choices[0])
    check_usage(r.usage, CHAT_PROMPT_TOKENS, 8, "chat")
    print(f"  ok chat: {r.usage.prompt_tokens}+{r.usage.completion_tokens} tokens, finish length")

    chunks = list(c.chat.completions.create(model=m, messages=CHAT_MESSAGES, max_tokens=6, stream=True,
                                            stream_options={"include_usage": True}))
    check_stream(chunks, "chat.completion.chunk", 6, CHAT_PROMPT_TOKENS, "chat stream")
    expect(chunks[0].choices and chunks[0].choices[0].delta.role == "assistant", "chat stream: first delta role", chunks[0])
    text = "".join(ch.delta.content or "" for x in chunks for ch in x.choices)
    expect(text, "chat stream: no content")
    print(f"  ok chat stream: {len(chunks)} chunks, usage {CHAT_PROMPT_TOKENS}+6, finish length")

    r = c.completions.create(model=m, prompt=COMPLETION_PROMPT, max_tokens=5)
    expect(r.object == "text_completion", "completions: object", r)
    expect(r.model == m, "completions: model", r.model)
    expect(len(r.choices) == 1 and isinstance(r.choices[0].text, str) and r.choices[0].text, "completions: text", r)
    expect(r.choices[0].finish_reason == "length", "completions: finish_reason != length", r.choices[0])
    check_usage(r.usage, COMPLETION_PROMPT_TOKENS, 5, "completions")
    print(f"  ok completions: {r.usage.prompt_tokens}+{r.usage.completion_tokens} tokens, finish length")

    chunks = list(c.completions.create(model=m, prompt=COMPLETION_PROMPT, max_tokens=7, stream=True,
                                       stream_options={"include_usage": True}))
    check_stream(chunks, "text_completion", 7, COMPLETION_PROMPT_TOKENS, "completions stream")
    text = "".join(ch.text or "" for x in chunks for ch in x.choices)
    expect(text, "completions stream: no text")
    print(f"  ok completions stream: {len(chunks)} chunks, usage {COMPLETION_PROMPT_TOKENS}+7, finish length")


def cmd_ids(a):
    c = client(a.base_url)
    for _ in range(a.n):
        r = c.chat.completions.create(model=a.model, messages=CHAT_MESSAGES, max_tokens=2)
        expect(r.choices[0].finish_reason == "length", "ids: finish_reason", r)
        print(r.id)


def one_request(c, model, t0, results, i):
    sent = time.monotonic() - t0
    try:
        r = c.chat.completions.create(model=model, messages=CHAT_MESSAGES, max_tokens=2)
        ok = r.choices[0].finish_reason == "length" and r.usage.completion_tokens == 2
        outcome = ("ok", 200) if ok else ("bad body", 200)
    except openai.APITimeoutError:
        outcome = ("timeout", None)
    except openai.APIStatusError as e:
        outcome = ("status", e.status_code)
    except openai.APIConnectionError as e:
        outcome = ("connection error: " + str(e.__cause__ or e), None)
    except Exception as e:  # noqa: BLE001 - reported as a failed request
        outcome = (f"{type(e).__name__}: {e}", None)
    results[i] = (sent, time.monotonic() - t0, *outcome)


def cmd_failover(a):
    c = client(a.base_url, timeout=a.timeout)
    n = int(a.duration / a.interval)
    results = [None] * n
    threads = []
    t0 = time.monotonic()
    os.kill(a.kill_pid, signal.SIGKILL)
    for i in range(n):
        delay = t0 + i * a.interval - time.monotonic()
        if delay > 0:
            time.sleep(delay)
        t = threading.Thread(target=one_request, args=(c, a.model, t0, results, i), daemon=True)
        t.start()
        threads.append(t)
    for t in threads:
        t.join(a.timeout + 5)

    problems = []
    failed_before = 0
    for i, r in enumerate(results):
        if r is None:
            problems.append(f"request {i} (sent at {i * a.interval:.1f}s) never ended")
            continue
        sent, ended, kind, status = r
        took = ended - sent
        if kind == "ok":
            continue
        clean = kind == "status" and status is not None and status >= 400
        if not clean:
            problems.append(f"request sent at {sent:.2f}s ended after {took:.2f}s with {kind} {status or ''}".rstrip())
        elif sent > a.window:
            problems.append(f"request sent at {sent:.2f}s (after the {a.window:.0f}s window) failed with HTTP {status}")
        else:
            failed_before += 1
    done = [r for r in results if r is not None]
    oks = [r for r in done if r[2] == "ok"]
    first_ok = min((r[1] for r in oks), default=None)
    last_fail = max((r[0] for r in done if r[2] != "ok"), default=None)
    statuses = sorted({r[3] for r in done if r[2] == "status"})
    slowest = max((r[1] - r[0] for r in done), default=0.0)
    print(f"  failover: {n} requests over {a.duration:.0f}s after SIGKILL, {len(oks)} ok, "
          f"{len(done) - len(oks)} failed (HTTP {statuses or '-'}), {failed_before} failed inside the "
          f"{a.window:.0f}s window; first success ended {first_ok if first_ok is None else round(first_ok, 2)}s "
          f"after the kill; last failure sent at {last_fail if last_fail is None else round(last_fail, 2)}s; "
          f"slowest request {slowest:.2f}s")
    expect(not problems, "failover: " + "; ".join(problems[:5]))
    expect(oks, "failover: no request succeeded after the kill")
    if a.strict:
        expect(len(oks) == n, f"failover (INTEROP_STRICT_FAILOVER=1): {n - len(oks)} requests failed after the kill")


def cmd_gone(a):
    c = client(a.base_url, timeout=5)
    t0 = time.monotonic()
    os.kill(a.term_pid, signal.SIGTERM)
    while True:
        ids = [m.id for m in c.models.list().data]
        if a.model not in ids:
            break
        expect(time.monotonic() - t0 < a.within,
               f"gone: model {a.model} still in /v1/models {a.within:.0f}s after SIGTERM", ids)
        time.sleep(0.05)
    took = time.monotonic() - t0
    print(f"  ok: model left /v1/models {took:.2f}s after SIGTERM")
    try:
        r = c.chat.completions.create(model=a.model, messages=CHAT_MESSAGES, max_tokens=2)
        raise Fail(f"gone: chat after the model left answered 200: {r!r}")
    except openai.APIStatusError as e:
        # The last chat model gone, the chat route is switched off: 1.6.1's bare 404, no body.
        expect(e.status_code == 404, "gone: chat status != 404", e.status_code)
        expect(e.response.content == b"", "gone: the 404 of a switched-off route has a body", e.response.content)
        print("  ok: chat then answered 404 with no body (the chat route switched off, as 1.6.1)")


def cmd_prefix(a):
    """A prefix-sharing workload: `--families` long shared prefixes, each request one of them
    plus a short unique tail (fixed seed), `--concurrency` at a time. Prints the cached-token
    ratio: sum of usage.prompt_tokens_details.cached_tokens / sum of prompt tokens. A
    comma-separated `--base-url` sends request i to URL i mod N (frontend replicas behind a
    round-robin client)."""
    import random
    import threading
    rng = random.Random(a.seed)
    words = ("alpha bravo charlie delta echo foxtrot golf hotel india juliet kilo lima mike november "
             "oscar papa quebec romeo sierra tango uniform victor whiskey xray yankee zulu").split()
    families = [" ".join(rng.choice(words) for _ in range(a.prefix_words)) for _ in range(a.families)]
    jobs = [(i, rng.randrange(a.families), " ".join(rng.choice(words) for _ in range(8))) for i in range(a.requests)]
    clients = [client(u) for u in a.base_url.split(",")]
    totals = {"prompt": 0, "cached": 0, "errors": 0}
    lock = threading.Lock()
    it = iter(jobs)

    def work():
        while True:
            with lock:
                job = next(it, None)
            if job is None:
                return
            i, f, tail = job
            try:
                r = clients[i % len(clients)].chat.completions.create(model=a.model, max_tokens=2, messages=[
                    {"role": "system", "content": f"Family {f}. {families[f]}"},
                    {"role": "user", "content": tail}])
                details = r.usage.prompt_tokens_details
                cached = (details.cached_tokens or 0) if details else 0
                with lock:
                    totals["prompt"] += r.usage.prompt_tokens
                    totals["cached"] += cached
                if a.pause:
                    time.sleep(a.pause)
            except Exception:
                with lock:
                    totals["errors"] += 1

    threads = [threading.Thread(target=work) for _ in range(a.concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    expect(totals["errors"] == 0, "prefix: requests failed", totals)
    ratio = totals["cached"] / max(totals["prompt"], 1)
    print(f"{ratio:.4f}")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("check", "ids", "failover", "gone", "prefix"):
        s = sub.add_parser(name)
        s.add_argument("--base-url", required=True)
        s.add_argument("--model", required=True)
        if name == "ids":
            s.add_argument("--n", type=int, default=8)
        if name == "failover":
            s.add_argument("--kill-pid", type=int, required=True)
            s.add_argument("--duration", type=float, default=16.0)
            s.add_argument("--interval", type=float, default=0.2)
            s.add_argument("--timeout", type=float, default=10.0)
            s.add_argument("--window", type=float, default=13.0)
            s.add_argument("--strict", action="store_true")
        if name == "prefix":
            s.add_argument("--families", type=int, default=20)
            s.add_argument("--prefix-words", type=int, default=300)
            s.add_argument("--requests", type=int, default=200)
            s.add_argument("--concurrency", type=int, default=4)
            s.add_argument("--seed", type=int, default=7)
            s.add_argument("--pause", type=float, default=0.0, help="seconds each client waits after an answer")
        if name == "gone":
            s.add_argument("--term-pid", type=int, required=True)
            s.add_argument("--within", type=float, default=3.0)
    a = p.parse_args()
    try:
        {"check": cmd_check, "ids": cmd_ids, "failover": cmd_failover, "gone": cmd_gone,
         "prefix": cmd_prefix}[a.cmd](a)
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)
    except openai.APIError as e:
        print(f"FAIL: {a.cmd}: unexpected {type(e).__name__}: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
