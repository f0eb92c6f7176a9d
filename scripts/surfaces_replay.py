"""Replays Dynamo 1.6.1's recorded exchanges (tests/data/surfaces/exchanges-1.6.1.jsonl) against
a frontend in front of scripts/surfaces_worker.py, and compares, case by case: the status, the
body and what the recording worker received.

Bodies are compared as JSON where they are JSON, with what differs from run to run masked (the
`created` of model listings, ids the frontend makes). Error bodies are compared on 1.6.1's three
fields (`message`, `type`, `code`): switchyard's carry OpenAI's `error` object too.

Usage: surfaces_replay.py --base-url http://127.0.0.1:PORT --record FILE --cases REGEX
                          [--skip CASE,...] [--fixture PATH]
Exit 1 when a case differs; every difference is printed.
"""

import argparse
import json
import re
import sys
import time
import urllib.error
import urllib.request

MASKED = ("created",)


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--record", required=True, help="the recording worker's JSONL file")
    p.add_argument("--cases", required=True, help="a regular expression the replayed case names match whole")
    p.add_argument("--skip", default="", help="comma-separated case names not to replay")
    p.add_argument("--fixture", default="tests/data/surfaces/exchanges-1.6.1.jsonl")
    return p.parse_args()


def masked(v):
    if isinstance(v, dict):
        return {k: ("<masked>" if k in MASKED else masked(x)) for k, x in v.items()}
    if isinstance(v, list):
        return [masked(x) for x in v]
    return v


def body_of(text):
    try:
        v = json.loads(text)
    except ValueError:
        return text
    if isinstance(v, dict) and "message" in v and "code" in v and "type" in v:
        return {k: v[k] for k in ("message", "type", "code")}
    return masked(v)


def send(base, case):
    headers = {}
    for name, value in case["request_headers"]:
        if name == "curl":
            key, _, val = value.partition(":")
            headers[key.strip()] = val.strip()
        else:
            headers[name] = value
    body = case["request_body"]
    data = None if body is None else body.encode()
    req = urllib.request.Request(base + case["path"], data=data, method=case["method"], headers=headers)
    try:
        with urllib.request.urlopen(req, timeout=30) as r:
            return r.status, r.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode("utf-8", "replace")


def records(path):
    try:
        with open(path, encoding="utf-8") as f:
            return [json.loads(line) for line in f if line.strip()]
    except FileNotFoundError:
        return []


def main():
    a = parse_args()
    wanted = re.compile(a.cases)
    skip = {s for s in a.skip.split(",") if s}
    cases = [json.loads(line) for line in open(a.fixture, encoding="utf-8")]
    cases = [c for c in cases if wanted.fullmatch(c["case"]) and c["case"] not in skip and "websocket" not in c]
    if not cases:
        print("FAIL: no case matches", a.cases, file=sys.stderr)
        return 1
    failed = 0
    for c in cases:
        before = len(records(a.record))
        status, text = send(a.base_url, c)
        # The worker writes its record before it answers; give a late line a moment anyway.
        time.sleep(0.05)
        got_worker = [r.get("request") for r in records(a.record)[before:]]
        want_worker = [r.get("request") for r in c.get("worker", [])]
        problems = []
        if status != c["status"]:
            problems.append(f"status {status}, 1.6.1 {c['status']}")
        want_body = body_of((c.get("response_body") or {}).get("text", ""))
        if body_of(text) != want_body:
            problems.append(f"body\n    got  {text[:400]}\n    want {json.dumps(want_body)[:400]}")
        if masked(got_worker) != masked(want_worker):
            problems.append(f"worker received\n    got  {json.dumps(got_worker)[:400]}\n    want {json.dumps(want_worker)[:400]}")
        if problems:
            failed += 1
            print(f"DIFF {c['case']}: " + "; ".join(problems))
        else:
            print(f"same {c['case']}")
    print(f"{len(cases) - failed} of {len(cases)} cases as 1.6.1 answered them")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
