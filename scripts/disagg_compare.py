"""Compares what the workers of a disaggregated pair received from switchyard and from
dynamo.frontend (scripts/interop_disagg.sh): the frames plane_frames.py printed from the
capture, the probe requests told apart by their decode leg's max_tokens (31, 32 through
switchyard; 41, 42 through dynamo.frontend). For each pair of probes, the prefill legs must be
equal and the decode legs must be equal, once request ids, rendezvous rooms and hand-off ids
(random per request) are set aside; the headers and control messages must have the same keys.

Usage: python disagg_compare.py FRAMES BOOTSTRAP(0|1)
"""
import json
import sys


def legs(path):
    """request id -> {"prefill"|"decode": (headers, control, body)}"""
    out, cur = {}, None
    for line in open(path):
        if line.startswith("REQUEST "):
            p = line.split(" path=", 1)[1]
            endpoint, headers = p.split(" headers=", 1)
            cur = {"endpoint": endpoint, "headers": json.loads(headers)}
        elif line.startswith("  control: ") and cur is not None:
            cur["control"] = json.loads(line[len("  control: "):])
        elif line.startswith("  body: ") and cur is not None:
            cur["body"] = json.loads(line[len("  body: "):])
            if cur["endpoint"].endswith("/generate"):
                kind = "prefill" if "/prefill/" in cur["endpoint"] else "decode"
                out.setdefault(cur["headers"]["request-id"], {})[kind] = cur
            cur = None
    return out


def normal(body):
    b = json.loads(json.dumps(body))
    info = b.get("bootstrap_info")
    if isinstance(info, dict):
        for k in ("bootstrap_room", "handoff_id"):
            if k in info:
                info[k] = "<random>"
    return b


def main():
    path, boot = sys.argv[1], sys.argv[2] == "1"
    by_tokens = {}
    for rid, pair in legs(path).items():
        if "decode" not in pair:
            continue
        by_tokens[pair["decode"]["body"]["stop_conditions"]["max_tokens"]] = pair
    problems = []
    for mine, theirs in ((31, 41), (32, 42)):
        a, b = by_tokens.get(mine), by_tokens.get(theirs)
        if not a or not b or "prefill" not in a or "prefill" not in b:
            problems.append(f"probe {mine}/{theirs}: a leg is missing (switchyard {sorted(a or {})}, dynamo {sorted(b or {})})")
            continue
        for leg in ("prefill", "decode"):
            x, y = normal(a[leg]["body"]), normal(b[leg]["body"])
            if leg == "decode":
                y["stop_conditions"]["max_tokens"] = x["stop_conditions"]["max_tokens"]
            if x != y:
                keys = sorted(set(x) | set(y))
                diff = {k: (x.get(k), y.get(k)) for k in keys if x.get(k) != y.get(k)}
                problems.append(f"probe {mine}: {leg} leg differs (switchyard, dynamo): {json.dumps(diff)}")
            if sorted(a[leg]["headers"]) != sorted(b[leg]["headers"]):
                problems.append(f"probe {mine}: {leg} headers {sorted(a[leg]['headers'])} vs {sorted(b[leg]['headers'])}")
            if sorted(a[leg]["control"]) != sorted(b[leg]["control"]):
                problems.append(f"probe {mine}: {leg} control {sorted(a[leg]['control'])} vs {sorted(b[leg]['control'])}")
        d = a["decode"]["body"]
        want = "bootstrap_info" if boot else "prefill_result"
        if want not in d:
            problems.append(f"probe {mine}: the decode leg carries no {want}")
        if boot and a["prefill"]["body"].get("bootstrap_info") != d.get("bootstrap_info"):
            problems.append(f"probe {mine}: the legs' bootstrap_info differ")
        if a["prefill"]["headers"]["request-id"] != a["decode"]["headers"]["request-id"]:
            problems.append(f"probe {mine}: the legs' request ids differ")
    for p in problems:
        print("  " + p)
    if problems:
        sys.exit(1)
    print(f"  ok: 2 probes, both legs equal to dynamo.frontend's ({'bootstrap_info' if boot else 'prefill_result'})")


if __name__ == "__main__":
    main()
