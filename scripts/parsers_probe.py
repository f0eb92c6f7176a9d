"""Put the scripted model outputs of tests/data/parsers/corpus.json through a frontend's
tool-call and reasoning parsers, and write what came back, one JSON line per request.

The frontend serves echo workers (`switchyard mock-worker --echo token`), one per parser
setting, named `t-<tool parser>`, `r-<reasoning parser>`, `c-<tool parser>+<reasoning parser>`.
Each request scripts the worker's answer in its user message (`[[echo]]…[[/echo]]` split per
token, `[[echo:char]]…[[/echo]]` per character) and is sent whole and streamed; the streamed
answers are put back together (content, reasoning and each tool call's name and arguments
concatenated) so a whole and a streamed answer compare alike.

Usage: parsers_probe.py --url http://127.0.0.1:PORT --corpus tests/data/parsers/corpus.json
                        --models t-hermes,r-qwen3,... --out FILE [--reasoning-field reasoning_content]
"""

import argparse
import concurrent.futures
import http.client
import json
import sys
import threading
import urllib.parse

MODES = ("whole", "token", "char")
# The texts also sent without tools and with tool_choice "none", to every tool parser.
VARIANT_TEXTS = ("hermes_one", "qwen3_coder", "pythonic", "python_tag")


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url", required=True)
    p.add_argument("--corpus", required=True)
    p.add_argument("--models", required=True, help="comma-separated model names")
    p.add_argument("--out", required=True)
    p.add_argument("--reasoning-field", default="reasoning_content")
    p.add_argument("--jobs", type=int, default=4)
    return p.parse_args()


def parsers_of(model):
    kind, _, rest = model.partition("-")
    if kind == "t":
        return rest, None
    if kind == "r":
        return None, rest
    tool, _, reasoning = rest.partition("+")
    return tool, reasoning


def plan(corpus, models):
    """Every request: (model, text id, text, variant, mode)."""
    out = []
    for model in models:
        tool, reasoning = parsers_of(model)
        if tool and reasoning:
            combo = next(c for c in corpus["combos"] if c["tool"] == tool and c["reasoning"] == reasoning)
            texts, variants = combo["texts"], {"tools": None}
        elif tool:
            texts, variants = corpus["tool_texts"], {"tools": None}
        else:
            texts, variants = corpus["reasoning_texts"], {"plain": None}
        for tid, text in texts.items():
            for variant in variants:
                for mode in MODES:
                    out.append((model, tid, text, variant, mode))
        if tool and not reasoning:
            for tid in VARIANT_TEXTS:
                for variant in ("notools", "none"):
                    for mode in ("whole", "token"):
                        out.append((model, tid, corpus["tool_texts"][tid], variant, mode))
    return out


def body_of(corpus, model, text, variant, mode):
    marker = "[[echo:char]]" if mode == "char" else "[[echo]]"
    body = {
        "model": model,
        "max_tokens": 2000,
        "messages": [{"role": "user", "content": f"{marker}{text}[[/echo]]"}],
    }
    if variant in ("tools", "none"):
        body["tools"] = corpus["tools"]
    if variant == "none":
        body["tool_choice"] = "none"
    if mode != "whole":
        body["stream"] = True
    return body


def args_value(s):
    try:
        return json.loads(s)
    except (TypeError, ValueError):
        return s


def post(conn, path, body):
    conn.request("POST", path, json.dumps(body), {"content-type": "application/json"})
    return conn.getresponse()


def whole(conn, path, body, field):
    r = post(conn, path, body)
    raw = r.read().decode(errors="replace")
    try:
        v = json.loads(raw)
    except ValueError:
        return {"status": r.status, "error": raw[:500]}
    if r.status != 200:
        return {"status": r.status, "error": v}
    choice = v["choices"][0]
    msg = choice.get("message") or {}
    calls = [
        {"name": c["function"]["name"], "arguments": args_value(c["function"].get("arguments")), "type": c.get("type")}
        for c in msg.get("tool_calls") or []
    ]
    return {
        "status": 200,
        "content": msg.get("content"),
        "reasoning": msg.get(field),
        "tool_calls": calls,
        "finish_reason": choice.get("finish_reason"),
    }


def streamed(conn, path, body, field):
    content, reasoning, finish, calls, chunks = None, None, None, {}, 0
    r = post(conn, path, body)
    if r.status != 200:
        return {"status": r.status, "error": r.read().decode(errors="replace")[:500]}
    lines = r.read().decode().split("\n")
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line[5:].strip()
        if data == "[DONE]":
            break
        ev = json.loads(data)
        if "choices" not in ev:
            return {"status": 200, "error": ev}
        for choice in ev["choices"]:
            chunks += 1
            d = choice.get("delta") or {}
            if d.get("content") is not None:
                content = (content or "") + d["content"]
            if d.get(field) is not None:
                reasoning = (reasoning or "") + d[field]
            for c in d.get("tool_calls") or []:
                slot = calls.setdefault(c.get("index", 0), {"name": "", "arguments": "", "type": None})
                f = c.get("function") or {}
                slot["name"] += f.get("name") or ""
                slot["arguments"] += f.get("arguments") or ""
                slot["type"] = slot["type"] or c.get("type")
            if choice.get("finish_reason"):
                finish = choice["finish_reason"]
    tool_calls = [dict(c, arguments=args_value(c["arguments"])) for _, c in sorted(calls.items())]
    return {"status": 200, "content": content, "reasoning": reasoning, "tool_calls": tool_calls,
            "finish_reason": finish, "chunks": chunks}


def main():
    a = parse_args()
    corpus = json.load(open(a.corpus, encoding="utf-8"))
    models = [m for m in a.models.split(",") if m]
    target = urllib.parse.urlsplit(a.url)
    path = "/v1/chat/completions"
    todo = plan(corpus, models)
    local = threading.local()

    def connection():
        if getattr(local, "conn", None) is None:
            local.conn = http.client.HTTPConnection(target.hostname, target.port, timeout=60)
        return local.conn

    def run(item):
        model, tid, text, variant, mode = item
        body = body_of(corpus, model, text, variant, mode)
        try:
            got = (whole if mode == "whole" else streamed)(connection(), path, body, a.reasoning_field)
        except (OSError, http.client.HTTPException, ValueError) as e:
            local.conn = None
            got = {"status": None, "error": repr(e)}
        tool, reasoning = parsers_of(model)
        return dict({"tool_parser": tool, "reasoning_parser": reasoning, "text": tid, "variant": variant,
                     "mode": mode}, **got)

    with concurrent.futures.ThreadPoolExecutor(a.jobs) as pool, open(a.out, "w", encoding="utf-8") as out:
        results = list(pool.map(run, todo))
        results.sort(key=lambda r: (r["tool_parser"] or "", r["reasoning_parser"] or "", r["text"], r["variant"],
                                    MODES.index(r["mode"])))
        for r in results:
            out.write(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n")
    bad = sum(1 for r in results if r["status"] != 200)
    print(f"{len(results)} requests, {bad} not answered 200", file=sys.stderr)


if __name__ == "__main__":
    main()
