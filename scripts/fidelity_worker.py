"""A recording worker on Dynamo 1.6.1's own Python runtime, for the request-fidelity cases.

It registers one model the way real engines do (`register_model` with the model directory,
ModelType Chat|Completions, token input unless `--model-input text`, and an optional custom
chat template like vLLM's `--chat-template`), serves `dynamo.backend.generate`, and for every
request it receives appends one JSON line to the record file: the request dict exactly as the
handler got it.

Every request gets the same short answer, " Hello world":
  * token input: the answer's token ids one per item (for each choice index when
    `sampling_options.n` > 1), then a final item with finish_reason "stop" and
    completion_usage (prompt_tokens = len(token_ids) of the request);
  * text input: OpenAI `chat.completion.chunk` (a request with `messages`) or
    `text_completion` (a request with `prompt`) chunks, the last one with finish_reason
    "stop" and usage (prompt_tokens 0: the worker does not tokenize text prompts).

Usage (file discovery: DYN_FILE_KV, or the default store under $TMPDIR; TCP request plane;
in a loopback-only namespace):
  fidelity_worker.py --model-path DIR --model-name NAME [--model-input tokens|text]
                     [--custom-template PATH] [--alias NAME]... [--endpoint NS.COMPONENT.ENDPOINT]
                     --record FILE
"""

import argparse
import asyncio
import json
import os
import time

from tokenizers import Tokenizer

from dynamo.llm import ModelInput, ModelType, WorkerType, register_model
from dynamo.runtime import DistributedRuntime

ANSWER = " Hello world"


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-path", required=True)
    p.add_argument("--model-name", required=True)
    p.add_argument("--model-input", choices=["tokens", "text"], default="tokens")
    p.add_argument("--custom-template", default=None)
    p.add_argument("--record", required=True)
    p.add_argument("--alias", action="append", default=[], help="another name of the model (repeatable)")
    p.add_argument("--endpoint", default="dynamo.backend.generate", help="namespace.component.endpoint")
    return p.parse_args()


def to_json(value):
    if isinstance(value, (bytes, bytearray)):
        return {"$bytes": bytes(value).hex()}
    return repr(value)


class Recorder:
    def __init__(self, path):
        self.file = open(path, "a", encoding="utf-8")

    def write(self, request):
        self.file.write(json.dumps(request, default=to_json) + "\n")
        self.file.flush()


def token_answer(request, answer_ids):
    n = (request.get("sampling_options") or {}).get("n") or 1
    usage = {
        "prompt_tokens": len(request.get("token_ids") or []),
        "completion_tokens": len(answer_ids),
        "total_tokens": len(request.get("token_ids") or []) + len(answer_ids),
    }
    for index in range(n):
        extra = {"index": index} if n > 1 else {}
        for token in answer_ids:
            yield {"token_ids": [token], **extra}
        yield {"token_ids": [], "finish_reason": "stop", "completion_usage": usage, **extra}


def text_answer(request, answer_pieces):
    chat = "messages" in request
    base = {
        "id": ("chatcmpl-" if chat else "cmpl-") + "fidelity",
        "object": "chat.completion.chunk" if chat else "text_completion",
        "created": int(time.time()),
        "model": request.get("model"),
    }
    for i, piece in enumerate(answer_pieces):
        if chat:
            delta = {"content": piece}
            if i == 0:
                delta["role"] = "assistant"
            choice = {"index": 0, "delta": delta, "finish_reason": None}
        else:
            choice = {"index": 0, "text": piece, "finish_reason": None}
        yield {**base, "choices": [choice]}
    last = {"index": 0, "finish_reason": "stop"}
    last.update({"delta": {}} if chat else {"text": ""})
    usage = {
        "prompt_tokens": 0,
        "completion_tokens": len(answer_pieces),
        "total_tokens": len(answer_pieces),
    }
    yield {**base, "choices": [last], "usage": usage}


async def main():
    args = parse_args()
    tokenizer = Tokenizer.from_file(os.path.join(args.model_path, "tokenizer.json"))
    answer_ids = tokenizer.encode(ANSWER, add_special_tokens=False).ids
    answer_pieces = [tokenizer.decode([t]) for t in answer_ids]
    recorder = Recorder(args.record)

    async def generate(request, context=None):
        recorder.write(request)
        if args.model_input == "text":
            items = text_answer(request, answer_pieces)
        else:
            items = token_answer(request, answer_ids)
        for item in items:
            yield item

    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    endpoint = runtime.endpoint(args.endpoint)
    model_input = ModelInput.Text if args.model_input == "text" else ModelInput.Tokens
    await register_model(
        model_input,
        ModelType.Chat | ModelType.Completions,
        endpoint,
        args.model_path,
        args.model_name,
        worker_type=WorkerType.Aggregated,
        custom_template_path=args.custom_template,
        model_aliases=args.alias or None,
    )
    await endpoint.serve_endpoint(generate)


if __name__ == "__main__":
    asyncio.run(main())
