"""The client side of scripts/interop_openai.sh: ordinary requests a new user sends with the
OpenAI Python SDK, checked against what Dynamo 1.6.1 answers and what OpenAI clients expect.

Subcommands (each prints what it saw; a failed check exits non-zero with a FAIL line):
  mocker     against real `dynamo.mocker` workers: batched completion prompts (strings and
             token-id arrays, whole and streamed), the max_tokens bound, a worker's own
             InvalidRequest error (a mocker request without max_tokens), content given as
             text parts, n samples and echo.
  recording  against recording workers on Dynamo's own runtime (scripts/fidelity_worker.py):
             what the worker received, decoded with the model's tokenizer: text parts joined
             with "\\n", `developer` on Qwen3 and on gpt-oss (whose own chat_template.jinja
             handles the role), a worker's custom chat template, and a model's aliases.

`--peer` runs the same requests against `python -m dynamo.frontend` and checks, where 1.6.1
falls short of what OpenAI clients expect (n samples, echo, developer on Qwen3), that it still
does: so the expectations switchyard is held to are shown to be 1.6.1's everywhere else.
"""

import argparse
import json
import sys
import time

import openai
from tokenizers import Tokenizer

from interop_client import Fail, client, expect


def ok(what):
    print(f"  ok {what}")


def qwen_user_turn(text):
    """Qwen3's template for one user turn and the generation prompt (thinking left on)."""
    return f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"


def expect_status_error(call, status, fragment, label):
    try:
        r = call()
    except openai.APIStatusError as e:
        expect(e.status_code == status, f"{label}: status {e.status_code} != {status}", str(e))
        expect(fragment in str(e), f"{label}: the error does not say {fragment!r}", str(e))
        return str(e)
    raise Fail(f"{label}: answered instead of a {status}: {r!r}")


def expect_stream_error(call, fragment, label):
    """A streamed request the worker refuses: 200, then an error event the SDK raises."""
    try:
        chunks = list(call())
    except openai.APIError as e:
        expect(fragment in str(e), f"{label}: the error does not say {fragment!r}", str(e))
        return str(e)
    raise Fail(f"{label}: streamed without an error: {chunks!r}")


# --- mocker -------------------------------------------------------------------------------

def batch_checks(c, m, tok):
    prompts = ["Hello there", "The sky is", "Once upon a time"]
    counts = [len(tok.encode(p, add_special_tokens=False).ids) for p in prompts]

    r = c.completions.create(model=m, prompt=prompts, max_tokens=3)
    expect([ch.index for ch in r.choices] == [0, 1, 2], "batch: one choice per prompt, in order", r.choices)
    expect(all(ch.text and ch.finish_reason == "length" for ch in r.choices), "batch: texts", r.choices)
    expect((r.usage.prompt_tokens, r.usage.completion_tokens) == (sum(counts), 9), "batch: usage summed", r.usage)
    ok(f"completions, 3 prompts: choices 0,1,2, usage {r.usage.prompt_tokens}+{r.usage.completion_tokens}")

    ids = [tok.encode(p, add_special_tokens=False).ids for p in prompts[:2]]
    r = c.completions.create(model=m, prompt=ids, max_tokens=2)
    expect([ch.index for ch in r.choices] == [0, 1], "token batch: one choice per prompt", r.choices)
    expect((r.usage.prompt_tokens, r.usage.completion_tokens) == (sum(counts[:2]), 4), "token batch: usage", r.usage)
    ok(f"completions, 2 token-id prompts: choices 0,1, usage {r.usage.prompt_tokens}+{r.usage.completion_tokens}")

    chunks = list(c.completions.create(model=m, prompt=prompts[:2], max_tokens=4, stream=True,
                                       stream_options={"include_usage": True}))
    by_index = {}
    for x in chunks[:-1]:
        expect(x.usage is None, "batch stream: usage before the end", x)
        for ch in x.choices:
            by_index.setdefault(ch.index, []).append(ch)
    expect(sorted(by_index) == [0, 1], "batch stream: indexes", sorted(by_index))
    for i, chs in by_index.items():
        finishes = [ch.finish_reason for ch in chs if ch.finish_reason]
        expect(finishes == ["length"], f"batch stream: prompt {i} finishes", finishes)
        expect("".join(ch.text for ch in chs), f"batch stream: prompt {i} has no text")
    last = chunks[-1]
    expect(last.choices == [] and last.usage is not None, "batch stream: one usage chunk at the end", last)
    expect((last.usage.prompt_tokens, last.usage.completion_tokens) == (sum(counts[:2]), 8), "batch stream: usage", last.usage)
    ok(f"completions stream, 2 prompts: {len(chunks)} chunks, each prompt finishes, usage summed")


def bound_checks(c, m):
    msg = "Max tokens must not exceed 1048576, got 1048577"
    expect_status_error(lambda: c.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}],
                                                          max_tokens=1048577), 400, msg, "chat max_tokens bound")
    expect_status_error(lambda: c.completions.create(model=m, prompt="hi", max_tokens=1048577), 400, msg,
                        "completions max_tokens bound")
    expect_status_error(lambda: c.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}],
                                                          max_completion_tokens=1048577), 400,
                        "Max completion tokens must not exceed 1048576, got 1048577", "max_completion_tokens bound")
    ok("max_tokens 1048577: 400 with Dynamo's message (chat, completions, max_completion_tokens)")


def worker_error_checks(c, m):
    said = "`max_output_tokens` (or `max_tokens`) is required by the mocker worker"
    expect_status_error(lambda: c.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}]),
                        400, said, "chat without max_tokens")
    expect_status_error(lambda: c.completions.create(model=m, prompt="hi"), 400, said, "completions without max_tokens")
    expect_stream_error(lambda: c.chat.completions.create(model=m, messages=[{"role": "user", "content": "hi"}],
                                                          stream=True), said, "chat stream without max_tokens")
    ok("no max_tokens: 400 with the mocker's own message (whole), its error event (streamed)")


def text_part_checks(c, m, tok):
    parts = [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]
    r = c.chat.completions.create(model=m, messages=[{"role": "user", "content": parts}], max_tokens=2)
    want = len(tok.encode(qwen_user_turn("First part.\nSecond part."), add_special_tokens=False).ids)
    expect(r.usage.prompt_tokens == want, f"text parts: prompt_tokens != {want}", r.usage)
    ok(f"content as text parts renders: {r.usage.prompt_tokens} prompt tokens")


def n_checks(c, m, peer):
    want = 1 if peer else 2
    msgs = [{"role": "user", "content": "Hello there"}]
    r = c.chat.completions.create(model=m, messages=msgs, n=2, temperature=0.7, max_tokens=3)
    expect([ch.index for ch in r.choices] == list(range(want)), f"chat n=2: {want} choice(s)", r.choices)
    expect(r.usage.completion_tokens == 3 * want, "chat n=2: completion tokens", r.usage)

    r = c.completions.create(model=m, prompt="Hello there", n=2, temperature=0.7, max_tokens=3)
    expect([ch.index for ch in r.choices] == list(range(want)), f"completions n=2: {want} choice(s)", r.choices)

    chunks = list(c.chat.completions.create(model=m, messages=msgs, n=2, temperature=0.7, max_tokens=3,
                                            stream=True, stream_options={"include_usage": True}))
    finished = sorted(ch.index for x in chunks for ch in x.choices if ch.finish_reason)
    expect(finished == list(range(want)), f"chat n=2 stream: {want} choice(s) finish", finished)
    expect(chunks[-1].usage and chunks[-1].usage.completion_tokens == 3 * want, "chat n=2 stream: usage", chunks[-1])
    ok(f"n=2: {want} choice(s), chat and completions, whole and streamed"
       + (" (1.6.1 answers one)" if peer else ""))


def echo_checks(c, m, peer):
    prompt = "Once upon a time"
    r = c.completions.create(model=m, prompt=prompt, echo=True, max_tokens=3)
    text = r.choices[0].text
    chunks = list(c.completions.create(model=m, prompt=prompt, echo=True, max_tokens=3, stream=True))
    streamed = "".join(ch.text for x in chunks for ch in x.choices)
    if peer:
        expect(not text.startswith(prompt) and not streamed.startswith(prompt), "echo: 1.6.1 now echoes", (text, streamed))
        ok("echo: 1.6.1 leaves the prompt out")
        return
    expect(text.startswith(prompt) and len(text) > len(prompt), "echo: the prompt then the completion", text)
    expect(streamed.startswith(prompt) and len(streamed) > len(prompt), "echo stream: the prompt first", streamed)
    expect(r.usage.completion_tokens == 3, "echo: completion tokens", r.usage)
    ok("echo: the prompt comes back before the completion, whole and streamed")


def cmd_mocker(a):
    c = client(a.base_url, timeout=60.0)
    tok = Tokenizer.from_file(f"{a.model_path}/tokenizer.json")
    batch_checks(c, a.model, tok)
    bound_checks(c, a.model)
    worker_error_checks(c, a.model)
    text_part_checks(c, a.model, tok)
    n_checks(c, a.model, a.peer)
    echo_checks(c, a.model, a.peer)


# --- recording workers --------------------------------------------------------------------

class Worker:
    """A recording worker: its model name, its tokenizer and its record file."""

    def __init__(self, spec):
        self.name, rest = spec.split("=", 1)
        self.model_path, self.record = rest.split(",")
        self.tok = Tokenizer.from_file(f"{self.model_path}/tokenizer.json")

    def lines(self):
        with open(self.record, encoding="utf-8") as f:
            return f.read().splitlines()

    def prompt_of(self, send):
        """Send a request; the prompt the worker received for it, decoded."""
        before = len(self.lines())
        send()
        for _ in range(50):
            lines = self.lines()
            if len(lines) > before:
                break
            time.sleep(0.1)
        expect(len(lines) == before + 1, f"{self.name}: the worker recorded {len(lines) - before} requests, not 1")
        ids = json.loads(lines[-1])["token_ids"]
        return self.tok.decode(ids, skip_special_tokens=False)


def cmd_recording(a):
    c = client(a.base_url, timeout=60.0)
    qwen, gptoss, custom = Worker(a.qwen3), Worker(a.gptoss), Worker(a.custom)

    def chat(w, messages, model=None):
        r = c.chat.completions.create(model=model or w.name, messages=messages, max_tokens=4)
        expect(r.choices[0].message.content == " Hello world", f"{w.name}: answer", r)
        return r

    parts = [{"type": "text", "text": "First part."}, {"type": "text", "text": "Second part."}]
    got = qwen.prompt_of(lambda: chat(qwen, [{"role": "user", "content": parts}]))
    expect(got == qwen_user_turn("First part.\nSecond part."), "text parts: the worker's prompt", got)
    ok("text parts reach the worker joined with a newline")

    dev = [{"role": "developer", "content": "Be terse."}, {"role": "user", "content": "Hi"}]
    got = qwen.prompt_of(lambda: chat(qwen, dev))
    if a.peer:
        expect(got == qwen_user_turn("Hi"), "developer on Qwen3: 1.6.1 no longer drops it", got)
        ok("developer on Qwen3: 1.6.1 drops the instructions")
    else:
        want = "<|im_start|>system\nBe terse.<|im_end|>\n" + qwen_user_turn("Hi")
        expect(got == want, "developer on Qwen3: a system turn", got)
        ok("developer on Qwen3 reaches the model as a system turn")

    # The gpt-oss directory's tokenizer_config.json has no template: only the card's
    # chat_template.jinja can render this.
    got = gptoss.prompt_of(lambda: chat(gptoss, dev))
    want = "<|start|>developer<|message|># Instructions\n\nBe terse.\n\n<|end|><|start|>user<|message|>Hi<|end|>"
    expect(want in got and got.startswith("<|start|>system<|message|>"), "gpt-oss: its own template, developer kept", got)
    expect(got.endswith("<|start|>assistant"), "gpt-oss: the generation prompt", got)
    ok("gpt-oss: served with its chat_template.jinja, developer handed to it unchanged")

    got = custom.prompt_of(lambda: chat(custom, [{"role": "user", "content": "Hi"}]))
    expect(got == "CUSTOM[user]Hi[assistant]", "custom template: the worker's prompt", got)
    ok("a worker's custom chat template renders the prompt")

    listed = {m.id for m in c.models.list().data}
    want = {qwen.name, gptoss.name, custom.name, *a.alias}
    expect(want <= listed, f"models: {sorted(want)} listed", sorted(listed))
    for alias in a.alias:
        answers = []
        got = qwen.prompt_of(lambda: answers.append(chat(qwen, [{"role": "user", "content": "Hi"}], model=alias)))
        expect(got == qwen_user_turn("Hi"), f"alias {alias}: the worker's prompt", got)
        expect(answers[0].model == qwen.name, f"alias {alias}: answered under the primary name", answers[0].model)
        r = c.models.retrieve(alias)
        expect(r.id == alias, f"alias {alias}: /v1/models/{alias}", r)
    ok(f"aliases {', '.join(a.alias)} listed, retrievable, served by the {qwen.name} worker under that name")


def main():
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("mocker")
    s.add_argument("--base-url", required=True)
    s.add_argument("--model", required=True)
    s.add_argument("--model-path", required=True)
    s.add_argument("--peer", action="store_true")
    s = sub.add_parser("recording")
    s.add_argument("--base-url", required=True)
    for name in ("qwen3", "gptoss", "custom"):
        s.add_argument(f"--{name}", required=True, help="NAME=MODEL_DIR,RECORD_FILE")
    s.add_argument("--alias", action="append", default=[])
    s.add_argument("--peer", action="store_true")
    a = p.parse_args()
    try:
        {"mocker": cmd_mocker, "recording": cmd_recording}[a.cmd](a)
    except Fail as e:
        print(f"FAIL: {e}", file=sys.stderr)
        sys.exit(1)


if __name__ == "__main__":
    main()
