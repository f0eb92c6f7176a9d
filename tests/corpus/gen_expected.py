#!/usr/bin/env python3
"""Generate the chat-template conformance corpus expectations.

For every model directory assembled by scripts/fetch-models.sh and every
conversation in conversations.json that applies to it, this renders the
conversation with Python transformers' ``tokenizer.apply_chat_template(...,
tokenize=False)`` and tokenizes the rendered prompt the way Dynamo's frontend
does: ``tokenizer.encode(prompt, add_special_tokens=False)``.

Output: expected/<model>.json, a JSON list sorted by id, one entry per line:
    {"id": ..., "prompt": "<exact rendered string>", "token_ids": [...]}
or, when transformers / the template raises:
    {"id": ..., "error": "<exception message>", "error_type": "<exception class>"}

Determinism: ``strftime_now`` is pinned to 2024-07-26 (see FIXED_NOW), entries
are sorted by id, JSON is written with ensure_ascii=False and a fixed layout.
Running the script twice gives byte-identical files.

Usage (see README.md):
    /root/corpus-venv/bin/python tests/corpus/gen_expected.py [--models-dir DIR] [--only NAME ...] [--check]
"""

from __future__ import annotations

import argparse
import copy
import datetime as _dt
import json
import logging
import os
import sys
import warnings
from pathlib import Path

HERE = Path(__file__).resolve().parent
MODELS = ["qwen3", "llama3", "deepseek_v3", "gemma3", "gptoss"]

# The date every `strftime_now(fmt)` call in a template sees. Templates format
# it themselves: "%Y-%m-%d" -> "2024-07-26", "%d %b %Y" -> "26 Jul 2024".
FIXED_NOW = _dt.datetime(2024, 7, 26, 0, 0, 0)

# Keys of a conversation object that are metadata for this corpus and are not
# passed to apply_chat_template.
CONVERSATION_KEYS = {
    "id", "note", "templates", "messages", "tools", "documents",
    "add_generation_prompt", "continue_final_message", "chat_template_kwargs",
}


def _quiet() -> None:
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    warnings.filterwarnings("ignore")
    logging.disable(logging.WARNING)


def _pin_strftime_now() -> None:
    """Make the `strftime_now` template global return FIXED_NOW.

    transformers defines strftime_now(format) as `datetime.now().strftime(format)`
    inside transformers.utils.chat_template_utils, looking `datetime` up in that
    module's globals at call time, so replacing the module attribute pins it.
    """
    from transformers.utils import chat_template_utils as ctu

    class _FixedDatetime(_dt.datetime):
        @classmethod
        def now(cls, tz=None):  # noqa: D401 - signature mirrors datetime.now
            return FIXED_NOW if tz is None else FIXED_NOW.replace(tzinfo=tz)

    if not hasattr(ctu, "datetime"):
        raise SystemExit("transformers.utils.chat_template_utils has no `datetime`; update _pin_strftime_now()")
    ctu.datetime = _FixedDatetime
    # Guard: make sure the pin is effective with this transformers version.
    tmpl = ctu._compile_jinja_template("{{ strftime_now('%Y-%m-%d|%d %b %Y') }}")
    got = tmpl.render()
    if got != "2024-07-26|26 Jul 2024":
        raise SystemExit(f"strftime_now pin is not effective (rendered {got!r})")


def load_conversations(path: Path) -> list[dict]:
    with path.open(encoding="utf-8") as f:
        convs = json.load(f)
    ids = [c["id"] for c in convs]
    dupes = sorted({i for i in ids if ids.count(i) > 1})
    if dupes:
        raise SystemExit(f"duplicate conversation ids: {dupes}")
    for c in convs:
        unknown = set(c) - CONVERSATION_KEYS
        if unknown:
            raise SystemExit(f"conversation {c['id']}: unknown keys {sorted(unknown)}")
        for t in c.get("templates", []):
            if t not in MODELS:
                raise SystemExit(f"conversation {c['id']}: unknown template {t!r}")
    return convs


def render_one(tokenizer, conv: dict) -> str:
    kwargs = copy.deepcopy(conv.get("chat_template_kwargs") or {})
    return tokenizer.apply_chat_template(
        copy.deepcopy(conv["messages"]),
        tools=copy.deepcopy(conv.get("tools")),
        documents=copy.deepcopy(conv.get("documents")),
        add_generation_prompt=conv.get("add_generation_prompt", False),
        continue_final_message=conv.get("continue_final_message", False),
        tokenize=False,
        **kwargs,
    )


def generate_model(name: str, model_dir: Path, convs: list[dict]) -> list[dict]:
    from tokenizers import Tokenizer
    from transformers import AutoTokenizer

    if not (model_dir / "tokenizer.json").is_file():
        raise SystemExit(f"{model_dir} is not a model directory; run scripts/fetch-models.sh {name}")
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    # The plain `tokenizers` pipeline from tokenizer.json (what a Rust frontend
    # using the tokenizers crate runs). Must agree with transformers' encode.
    raw = Tokenizer.from_file(str(model_dir / "tokenizer.json"))

    entries = []
    for conv in convs:
        if conv.get("templates") and name not in conv["templates"]:
            continue
        try:
            prompt = render_one(tokenizer, conv)
        except Exception as e:  # noqa: BLE001 - every failure is an expected result
            entries.append({"id": conv["id"], "error": str(e), "error_type": type(e).__name__})
            continue
        if not isinstance(prompt, str):
            raise SystemExit(f"{name}/{conv['id']}: apply_chat_template returned {type(prompt).__name__}, not str")
        ids = tokenizer.encode(prompt, add_special_tokens=False)
        raw_ids = raw.encode(prompt, add_special_tokens=False).ids
        if list(ids) != list(raw_ids):
            raise SystemExit(
                f"{name}/{conv['id']}: transformers encode() and tokenizers.Tokenizer.encode() disagree;"
                " the corpus would be ambiguous for a tokenizers-crate frontend"
            )
        entries.append({"id": conv["id"], "prompt": prompt, "token_ids": [int(i) for i in ids]})
    entries.sort(key=lambda e: e["id"])
    for e in entries:
        if "error" in e and " at 0x" in e["error"]:
            raise SystemExit(f"{name}/{e['id']}: error message contains a memory address (non-deterministic): {e['error']!r}")
    return entries


def serialize(entries: list[dict]) -> str:
    lines = [json.dumps(e, ensure_ascii=False) for e in entries]
    return "[\n" + ",\n".join(lines) + "\n]\n"


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--models-dir", type=Path,
                    default=Path(os.environ.get("SWITCHYARD_MODELS", Path.home() / ".cache" / "switchyard-models")),
                    help="directory holding the model dirs from scripts/fetch-models.sh (default: $SWITCHYARD_MODELS or ~/.cache/switchyard-models)")
    ap.add_argument("--conversations", type=Path, default=HERE / "conversations.json")
    ap.add_argument("--out", type=Path, default=HERE / "expected")
    ap.add_argument("--only", nargs="+", choices=MODELS, help="generate only these models")
    ap.add_argument("--check", action="store_true", help="do not write; exit 1 if any expected file would change")
    args = ap.parse_args()

    _quiet()
    _pin_strftime_now()
    import jinja2
    import tokenizers
    import transformers

    print(f"transformers {transformers.__version__}, tokenizers {tokenizers.__version__}, jinja2 {jinja2.__version__}",
          file=sys.stderr)
    convs = load_conversations(args.conversations)
    args.out.mkdir(parents=True, exist_ok=True)
    stale = []
    for name in args.only or MODELS:
        entries = generate_model(name, args.models_dir / name, convs)
        text = serialize(entries)
        path = args.out / f"{name}.json"
        n_err = sum(1 for e in entries if "error" in e)
        print(f"{name}: {len(entries)} entries ({len(entries) - n_err} ok, {n_err} expected errors)", file=sys.stderr)
        if args.check:
            old = path.read_text(encoding="utf-8") if path.exists() else None
            if old != text:
                stale.append(str(path))
        else:
            path.write_text(text, encoding="utf-8")
    if stale:
        print("out of date: " + ", ".join(stale), file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
