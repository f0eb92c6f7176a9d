#!/usr/bin/env python3
"""Sanity-check tests/corpus/expected/*.json against the tokenizers.

For every entry with a prompt:
  1. re-encoding the prompt with the model's tokenizer.json (tokenizers
     library, add_special_tokens=False) must give exactly `token_ids`;
  2. decoding `token_ids` (skip_special_tokens=False) must give back the
     prompt. Tokenizers with a normalizer (qwen3 applies NFC) cannot
     round-trip text that is not already normalized (qwen3 applies NFC;
     gemma3 maps " " to "\u2581" and decodes "\u2581" as " "); such entries
     are accepted when the decoded text encodes back to the same ids, and
     are listed as "decode is normalized".
Also checks the file layout: sorted ids, one entry per line, each entry has
either prompt+token_ids or error.

Needs only the `tokenizers` package. Exit status 1 on any failure.

    /root/corpus-venv/bin/python tests/corpus/check_tokens.py [--models-dir DIR] [NAME ...]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

from tokenizers import Tokenizer

HERE = Path(__file__).resolve().parent
MODELS = ["qwen3", "llama3", "deepseek_v3", "gemma3", "gptoss"]


def check(name: str, models_dir: Path, expected_dir: Path) -> tuple[int, int, list[str]]:
    path = expected_dir / f"{name}.json"
    text = path.read_text(encoding="utf-8")
    entries = json.loads(text)
    failures: list[str] = []
    normalized: list[str] = []

    ids = [e["id"] for e in entries]
    if ids != sorted(ids) or len(ids) != len(set(ids)):
        failures.append(f"{name}: ids are not sorted/unique")
    if text.count("\n") != len(entries) + 2:
        failures.append(f"{name}: expected one entry per line")

    tok = Tokenizer.from_file(str(models_dir / name / "tokenizer.json"))
    n_ok = 0
    for e in entries:
        if "error" in e:
            if "prompt" in e or "token_ids" in e or not isinstance(e["error"], str):
                failures.append(f"{name}/{e['id']}: malformed error entry")
            continue
        prompt, token_ids = e["prompt"], e["token_ids"]
        again = tok.encode(prompt, add_special_tokens=False).ids
        if again != token_ids:
            failures.append(f"{name}/{e['id']}: re-encoding the prompt gives different ids")
            continue
        decoded = tok.decode(token_ids, skip_special_tokens=False)
        if decoded != prompt:
            # Lossy only through normalization (qwen3's NFC, gemma3's " " <-> "\u2581"):
            # the decoded text must still encode to exactly the same ids.
            if tok.encode(decoded, add_special_tokens=False).ids == token_ids:
                normalized.append(e["id"])
            else:
                first = next((i for i, (a, b) in enumerate(zip(decoded, prompt)) if a != b), min(len(decoded), len(prompt)))
                failures.append(
                    f"{name}/{e['id']}: decode(token_ids) != prompt at char {first}: "
                    f"{decoded[max(0, first - 20):first + 20]!r} vs {prompt[max(0, first - 20):first + 20]!r}"
                )
                continue
        n_ok += 1
    n_err = sum(1 for e in entries if "error" in e)
    msg = f"{name}: {n_ok} prompts verified, {n_err} expected errors"
    if normalized:
        msg += f"; decode is normalized (not byte-identical) for: {', '.join(normalized)}"
    print(msg)
    return n_ok, len(failures), failures


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("SWITCHYARD_MODELS", Path.home() / ".cache" / "switchyard-models")))
    ap.add_argument("--expected", type=Path, default=HERE / "expected")
    ap.add_argument("names", nargs="*", metavar="NAME", help=f"models to check (default: all of {' '.join(MODELS)})")
    args = ap.parse_args()
    for n in args.names:
        if n not in MODELS:
            ap.error(f"unknown model {n!r}; choose from {MODELS}")

    total_fail = 0
    passed = 0
    for name in args.names or MODELS:
        ok, nfail, failures = check(name, args.models_dir, args.expected)
        passed += 1 if nfail == 0 else 0
        for f in failures:
            print("FAIL", f)
        total_fail += nfail
    print(f"{passed} passed, {len(args.names or MODELS) - passed} failed")
    return 1 if total_fail else 0


if __name__ == "__main__":
    sys.exit(main())
