"""Compare two runs of scripts/fidelity_cases.py (the same cases through two frontends in
front of the same recording worker): for every case, the HTTP status, the answer and what
the worker received, byte for byte (the worker's JSON lines, key order included).

Usage: fidelity_compare.py REFERENCE.json CANDIDATE.json [--allow FILE]

REFERENCE is the run through `python -m dynamo.frontend` 1.6.1, CANDIDATE the run through
switchyard. `--allow` names a file of expected differences, one per line:
`<case> <part> <reason>`, where part is `status`, `response` or `worker`; blank lines and
`#` comments are ignored. Exits 1 if any case differs in a part not allowed, or if an allowed
difference no longer happens (the allowance is stale), 0 otherwise.
"""

import argparse
import difflib
import json
import sys


def load(path):
    with open(path) as f:
        data = json.load(f)
    return {c["name"]: c for c in data["cases"]}


def allowances(path):
    out = {}
    if not path:
        return out
    with open(path) as f:
        for line in f:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            case, part, *reason = line.split(maxsplit=2)
            out[(case, part)] = reason[0] if reason else ""
    return out


def without_nested_error(body):
    """An error body without the OpenAI-shaped `error` member switchyard adds beside Dynamo's
    flat fields (the one designed difference of error bodies), when it repeats them."""
    if isinstance(body, dict) and isinstance(body.get("error"), dict) and "message" in body:
        nested = body["error"]
        if nested.get("message") == body["message"] and nested.get("code") == body.get("code"):
            body = {k: v for k, v in body.items() if k != "error"}
    return body


def parts(case):
    return {
        "status": json.dumps(case.get("status")),
        "response": json.dumps(without_nested_error(case.get("response", case.get("events"))), indent=1, sort_keys=True),
        "worker": "\n".join(case.get("worker_lines", [])),
    }


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("reference")
    ap.add_argument("candidate")
    ap.add_argument("--allow")
    ap.add_argument("--quiet", action="store_true", help="names only, no diffs")
    args = ap.parse_args()
    ref, cand = load(args.reference), load(args.candidate)
    allowed = allowances(args.allow)
    failures, used = [], set()
    for name in ref:
        if name not in cand:
            failures.append(f"{name}: missing from {args.candidate}")
            continue
        a, b = parts(ref[name]), parts(cand[name])
        for part in ("status", "response", "worker"):
            if a[part] == b[part]:
                continue
            if (name, part) in allowed:
                used.add((name, part))
                continue
            failures.append(f"{name}: {part} differs")
            if not args.quiet:
                diff = difflib.unified_diff(
                    a[part].splitlines(), b[part].splitlines(), "dynamo 1.6.1", "switchyard", lineterm="", n=1
                )
                print(f"--- {name} ({part})")
                print("\n".join(list(diff)[:60]))
    for key, reason in allowed.items():
        if key not in used and key[0] in ref:
            failures.append(f"{key[0]}: {key[1]} was allowed to differ ({reason}) but does not: remove the allowance")
    print(f"{len(ref)} cases compared, {len(failures)} unexpected difference(s)")
    for f in failures:
        print("  " + f)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
