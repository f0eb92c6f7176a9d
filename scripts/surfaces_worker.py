"""A recording worker for the non-chat surfaces, on Dynamo 1.6.1's own Python runtime.

One process registers one model per surface (each on its own endpoint
`surfaces.<component>.generate`) and answers every request the way the matching real engine
handler of the 1.6.1 venv answers, with deterministic values:

  name          ModelType / ModelInput           answers like
  emb           Embedding / Text                 vllm EmbeddingWorkerHandler (text path)
  emb-tok       Embedding / Tokens (model dir)   vllm EmbeddingWorkerHandler (token path)
  org/emb-slash Embedding / Text                 same as emb (an id with a slash)
  img           Images / Text                    sglang ImageDiffusionWorkerHandler
  vid           Videos / Text                    sglang VideoGenerationWorkerHandler
  tts           Audios / Text                    vllm-omni AudioFormatter (chunked or whole)
  cls           Classify|Pooling / Text          vllm ClassifyWorkerHandler (classify wire)
  pool          Classify|Pooling / Text          vllm ClassifyWorkerHandler (pooling wire)
  rr            Rerank / Text                    sglang RerankWorkerHandler
  rt            Realtime / Text (bidirectional)  the venv's RealtimeHandler + RealtimeTextHandler
  cls/ready     Classify / Text                  a model whose id ends in "/ready"
  (every model above except cls/ready also has the alias NAME-alias, e.g. `emb-alias`)
  cls-wait      Classify / Text, Decode needing Prefill (never ready)      (--unready)
  gen           Chat|Completions / Tokens with the vllm_inference_v1_generate and
                sglang_generate capabilities; token answer " Hello world"   (--generate)

Every request the handler receives is appended to the record file as one JSON line
`{"worker": NAME, "request": <the request exactly as the handler got it>}`; a realtime
connection records each inbound frame as `{"worker": "rt", "frame": N, "request": ...}`.

Fixed values, so that answers are byte-stable: `created` is 1767225600; embeddings have 8
native dimensions [0.5, -0.25, input index, prompt tokens, 1.5, 0.125, -2.0, 0.0625]
(little-endian f32, base64 on the wire as the real handlers send them); prompt tokens are
counted with the model directory's tokenizer.json.

Error paths, chosen by a marker anywhere in the request (or for every request with --fail):
  FAIL_RUNTIME  raise RuntimeError before any item       FAIL_VALUE    raise ValueError
  FAIL_INVALID  raise dynamo InvalidArgument             FAIL_AFTER    one item, then RuntimeError
  FAIL_STATUS   audio/video: an item with status "failed" (what the real handlers yield)
  MULTI_ITEM    the answer split over two items (the second with its own ids, indexes restarting,
                rerank results out of order)         NO_ITEMS      return without an item
  BAD_B64       embeddings/pooling: invalid base64 in the answer
  FLOAT_DATA    pooling: float data although bytes were asked for
  BAD_SHAPE     pooling: a shape that does not match the bytes
  FAIL_STATUS_AFTER  audio chunks: a first chunk, then an item with status "failed"
Token input (emb-tok, gen) is decoded with the tokenizer to look for the markers.
Realtime (rt): a conversation item containing WORKER_ENDS makes the worker stop reading its
input (its answer stream then ends); WORKER_RAISES makes it raise; every event the worker sends
is recorded too, as `{"worker": "rt", "sent": N, "event": ...}`.

Usage (file discovery: DYN_FILE_KV; TCP request plane; in a loopback-only namespace):
  surfaces_worker.py --model-dir DIR --record FILE [--namespace NS] [--only NAME,...]
                     [--unready] [--generate] [--fail MARKER]
"""

import argparse
import asyncio
import base64
import io
import json
import os
import struct
import wave
import zlib

from tokenizers import Tokenizer

from dynamo.llm import ModelInput, ModelRuntimeConfig, ModelType, WorkerType, register_model
from dynamo.llm.exceptions import InvalidArgument
from dynamo.runtime import DistributedRuntime
from fidelity_worker import Recorder, to_json  # the same JSONL record (scripts/ is on sys.path)

CREATED = 1767225600
MARKERS = ("FAIL_RUNTIME", "FAIL_VALUE", "FAIL_INVALID", "FAIL_AFTER", "FAIL_STATUS_AFTER",
           "FAIL_STATUS", "MULTI_ITEM", "NO_ITEMS", "BAD_B64", "FLOAT_DATA", "BAD_SHAPE")
NATIVE_DIM = 8
ID2LABEL = {0: "NEGATIVE", 1: "POSITIVE"}


def parse_args():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--model-dir", required=True, help="model directory (tokenizer.json, config)")
    p.add_argument("--record", required=True)
    p.add_argument("--namespace", default="surfaces")
    p.add_argument("--only", default="", help="comma-separated model names (default: all)")
    p.add_argument("--unready", action="store_true", help="also register cls-wait")
    p.add_argument("--generate", action="store_true", help="also register gen")
    p.add_argument("--fail", default=None, choices=MARKERS, help="apply MARKER to every request")
    return p.parse_args()


def f32_b64(values):
    """Little-endian f32 bytes, standard base64: what the vLLM and SGLang handlers send."""
    return base64.b64encode(struct.pack("<%df" % len(values), *values)).decode()


def tensor_bytes(values, dtype, endianness):
    """Bytes of a flat tensor as vLLM's tensor2binary lays them out (native = little here)."""
    big = endianness == "big"
    if dtype == "float32":
        return struct.pack((">" if big else "<") + "%df" % len(values), *values)
    if dtype == "float16":
        return struct.pack((">" if big else "<") + "%de" % len(values), *values)
    if dtype == "bfloat16":
        out = b""
        for v in values:
            hi = struct.unpack("<I", struct.pack("<f", v))[0] >> 16
            out += struct.pack(">H" if big else "<H", hi)
        return out
    # fp8: one byte per element (sign + top 7 bits of the float16 pattern; not IEEE-exact)
    return bytes((struct.unpack("<H", struct.pack("<e", v))[0] >> 8) & 0xFF for v in values)


def tiny_png():
    raw = b"\x00\xff\x80\x00"  # one filter byte + one RGB pixel
    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))
    return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0))
            + chunk(b"IDAT", zlib.compress(raw)) + chunk(b"IEND", b""))


def wav_bytes(samples, rate=8000):
    buf = io.BytesIO()
    with wave.open(buf, "wb") as w:
        w.setnchannels(1)
        w.setsampwidth(2)
        w.setframerate(rate)
        w.writeframes(struct.pack("<%dh" % len(samples), *samples))
    return buf.getvalue()


def chunked_ok(request):
    """What the vllm-omni handler checks before it emits audio chunks."""
    fmt = (request.get("response_format") or "wav").lower()
    return bool((request.get("nvext") or {}).get("frontend_accepts_audio_chunks")
                and request.get("data_source") != "url" and fmt in ("wav", "pcm")
                and request.get("speed") in (None, 1.0))


def wav_stream_header(rate=8000):
    # the placeholder-length header the vllm-omni formatter puts before the first PCM chunk
    return struct.pack("<4sI4s4sIHHIIHH4sI", b"RIFF", 0xFFFFFFFF, b"WAVE", b"fmt ", 16, 1, 1,
                       rate, rate * 2, 2, 16, b"data", 0xFFFFFFFF)


class Surfaces:
    def __init__(self, args):
        self.args = args
        self.tok = Tokenizer.from_file(os.path.join(args.model_dir, "tokenizer.json"))
        self.rec = Recorder(args.record)

    def marker(self, request):
        if self.args.fail:
            return self.args.fail
        text = json.dumps(request, default=to_json)
        ids = request.get("token_ids") if isinstance(request, dict) else None
        if ids:
            flat = [t for row in ids for t in (row if isinstance(row, list) else [row])]
            text += self.tok.decode([t for t in flat if isinstance(t, int) and 0 <= t < 151936])
        return next((m for m in MARKERS if m in text), None)

    def ntokens(self, text):
        return len(self.tok.encode(text, add_special_tokens=True).ids)

    async def run(self, name, request, context, answer):
        """Record, apply the marker, then yield the items of `answer(request, context)`."""
        self.rec.write({"worker": name, "request": request})
        mark = self.marker(request)
        if mark == "FAIL_RUNTIME":
            raise RuntimeError("scripted failure before any item")
        if mark == "FAIL_VALUE":
            raise ValueError("scripted value error")
        if mark == "FAIL_INVALID":
            raise InvalidArgument("scripted invalid argument")
        if mark == "NO_ITEMS":
            return
        items = answer(request, context, mark)
        for i, item in enumerate(items):
            if mark == "FAIL_AFTER" and i == 1:
                raise RuntimeError("scripted failure after one item")
            yield item
        if mark == "FAIL_AFTER" and len(items) == 1:
            raise RuntimeError("scripted failure after one item")

    # -- embeddings (vLLM EmbeddingWorkerHandler) -------------------------------------------
    def prompts(self, value, what="Embedding request 'input'"):
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list):
            raise TypeError("Invalid 'input' type %s; expected str, list[str], list[int], or "
                            "list[list[int]]" % type(value).__name__)
        if not value:
            raise ValueError("%s must be non-empty" % what)
        if isinstance(value[0], list):
            return value
        if isinstance(value[0], int):
            return [value]
        return value

    def vector(self, index, ntok, dimensions):
        v = [0.5, -0.25, float(index), float(ntok), 1.5, 0.125, -2.0, 0.0625]
        if dimensions is not None:
            if not isinstance(dimensions, int) or dimensions < 1:
                raise ValueError("dimensions must be >= 1, got %s" % dimensions)
            if dimensions > NATIVE_DIM:
                raise ValueError("dimensions=%d exceeds model embedding dimension %d"
                                 % (dimensions, NATIVE_DIM))
            v = v[:dimensions]
        return v

    def embeddings(self, request, context, mark):
        token_path = request.get("token_ids") is not None
        field = request["token_ids"] if token_path else request.get("input")
        if field is None:
            raise ValueError("Embedding request missing required 'input' or 'token_ids' field")
        fmt = request.get("encoding_format") or "float"
        if fmt not in ("float", "base64"):
            raise ValueError("Invalid 'encoding_format' value %r; expected 'float' or 'base64'" % fmt)
        data, vectors, total = [], [], 0
        for i, prompt in enumerate(self.prompts(field)):
            n = len(prompt) if isinstance(prompt, list) else self.ntokens(prompt)
            total += n
            enc = "%%%" if mark == "BAD_B64" else f32_b64(self.vector(i, n, request.get("dimensions")))
            vectors.append(enc)
            data.append({"object": "embedding", "embedding": enc, "index": i})
        if token_path:
            return [{"embeddings": vectors, "prompt_tokens": total, "total_tokens": total}]
        body = {"object": "list", "data": data, "model": request.get("model") or "",
                "usage": {"prompt_tokens": total, "total_tokens": total}}
        if mark == "MULTI_ITEM" and len(data) > 1:
            first = dict(body, data=data[:1], usage={"prompt_tokens": 1, "total_tokens": 1})
            rest = [dict(d, index=k) for k, d in enumerate(data[1:])]  # indexes restart at 0
            second = dict(body, model="second-item-model", data=rest,
                          usage={"prompt_tokens": 2, "total_tokens": 2})
            return [first, second]
        return [body]

    # -- classify / pooling (vLLM ClassifyWorkerHandler) -----------------------------------
    def classify_or_pool(self, request, context, mark):
        if "encoding_format" in request:
            return self.pooling(request, context, mark)
        prompts = self.prompts(request.get("input"), "Request 'input'")
        data, total = [], 0
        for i, p in enumerate(prompts):
            total += len(p) if isinstance(p, list) else self.ntokens(p)
            probs = [0.25, 0.75] if i % 2 == 0 else [0.875, 0.125]
            best = max(range(2), key=probs.__getitem__)
            data.append({"index": i, "label": ID2LABEL[best], "probs": probs, "num_classes": 2})
        rid = request.get("request_id") or context.id()
        body = {"id": "classify-%s" % rid, "object": "list", "created": CREATED,
                "model": request.get("model") or "", "data": data,
                "usage": {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0}}
        if mark == "MULTI_ITEM" and len(data) > 1:
            second = dict(body, id="classify-second", created=CREATED + 1, model="second-item-model",
                          data=[dict(d, index=k) for k, d in enumerate(data[1:])],
                          usage={"prompt_tokens": 10, "total_tokens": 10, "completion_tokens": 1})
            return [dict(body, data=data[:1]), second]
        return [body]

    def pooling(self, request, context, mark):
        prompts = self.prompts(request.get("input"), "Request 'input'")
        if request.get("dimensions") is not None:
            raise ValueError("dimensions is currently not supported")
        fmt = request.get("encoding_format", "float")
        dtype = request.get("embed_dtype", "float32")
        endian = request.get("endianness", "native")
        task = request.get("task") or "classify"
        data, total = [], 0
        for i, p in enumerate(prompts):
            n = len(p) if isinstance(p, list) else self.ntokens(p)
            total += n
            if task.startswith("token_"):
                rows = [[float(r), 0.5] for r in range(min(n, 3))]
                flat, shape = [x for r in rows for x in r], [len(rows), 2]
                value = rows
            else:
                flat = value = [0.25, 0.75]
                shape = [2]
            item = {"index": i, "object": "pooling"}
            if fmt == "float" or mark == "FLOAT_DATA":
                item["data"] = value
            else:
                raw = tensor_bytes(flat, dtype, endian)
                item["data"] = "%%%" if mark == "BAD_B64" else base64.b64encode(raw).decode()
                if fmt == "bytes":
                    item["shape"] = [s_ + 1 for s_ in shape] if mark == "BAD_SHAPE" else shape
            data.append(item)
        rid = request.get("request_id") or context.id()
        body = {"id": "pool-%s" % rid, "object": "list", "created": CREATED,
                "model": request.get("model") or "", "data": data,
                "usage": {"prompt_tokens": total, "total_tokens": total, "completion_tokens": 0}}
        if mark == "MULTI_ITEM" and len(data) > 1:
            second = dict(body, id="pool-second", model="second-item-model",
                          data=[dict(d, index=k) for k, d in enumerate(data[1:])])
            return [dict(body, data=data[:1]), second]
        return [body]

    # -- rerank (SGLang RerankWorkerHandler) ----------------------------------------------
    def rerank(self, request, context, mark):
        query, docs = request.get("query", ""), request.get("documents") or []
        if not query.strip():
            raise ValueError("Query cannot be empty or whitespace only")
        if not docs:
            raise ValueError("Documents cannot be empty")
        qwords = set(query.lower().split())
        ranked = []
        for i, d in enumerate(docs):
            overlap = len(qwords & set(d.lower().split()))
            item = {"score": overlap + 1.0 / (2 + i), "index": i}
            if request.get("return_documents", True):
                item["document"] = d
            item["meta_info"] = {"id": "%s-%d" % (context.id(), i), "prompt_tokens": self.ntokens(query + d)}
            ranked.append(item)
        ranked.sort(key=lambda x: x["score"], reverse=True)
        if request.get("top_n") is not None:
            ranked = ranked[: request["top_n"]]
        if mark == "MULTI_ITEM" and len(ranked) > 1:
            return [ranked[1:], ranked[:1]]  # the best result arrives last
        return [ranked]

    # -- images (SGLang ImageDiffusionWorkerHandler) --------------------------------------
    def images(self, request, context, mark):
        size = request.get("size")
        if size not in (None, "auto"):
            try:
                int(size.split("x")[0]), int(size.split("x")[1])
            except (ValueError, IndexError, AttributeError):
                raise InvalidArgument("size must be '<width>x<height>', got %r" % size)
        n = request.get("n") or 1
        data = []
        for i in range(n):
            if (request.get("response_format") or "url") == "url":
                data.append({"url": "http://127.0.0.1:9/users/%s/generations/%d.png"
                             % (request.get("user") or "u", i), "b64_json": None, "revised_prompt": None})
            else:
                data.append({"url": None, "b64_json": base64.b64encode(tiny_png()).decode(),
                             "revised_prompt": None})
        if mark == "MULTI_ITEM" and n > 1:
            return [{"created": CREATED, "data": data[:1]}, {"created": CREATED + 1, "data": data[1:]}]
        return [{"created": CREATED, "data": data}]

    # -- videos (SGLang VideoGenerationWorkerHandler) -------------------------------------
    def videos(self, request, context, mark):
        rid = "video-%s" % context.id()
        base = {"id": rid, "object": "video", "model": request.get("model"), "status": "completed",
                "progress": 100, "created": CREATED, "data": [], "error": None,
                "inference_time_s": 0.25}
        if mark == "FAIL_STATUS":
            return [dict(base, status="failed", progress=0, error="scripted video failure",
                         inference_time_s=None)]
        fmt = request.get("output_format") or "mp4"
        nvext = request.get("nvext") or {}
        if fmt == "mjpeg":  # one JPEG frame per item, what /v1/videos/stream expects
            frames = nvext.get("num_frames") or 3
            return [dict(base, progress=int(100 * (k + 1) / frames),
                         data=[{"output_format": "jpeg", "url": None, "fps": nvext.get("fps") or 24,
                                "b64_json": base64.b64encode(b"\xff\xd8FRAME%d\xff\xd9" % k).decode()}])
                    for k in range(frames)]
        if fmt != "mp4":
            raise ValueError("Unsupported output_format: %r; only 'mp4' is supported" % fmt)
        video = b"\x00\x00\x00\x18ftypmp42fake-video"
        if (request.get("response_format") or "b64_json") == "url":
            item = {"output_format": "mp4", "url": "http://127.0.0.1:9/videos/%s.mp4" % rid, "b64_json": None}
        else:
            item = {"output_format": "mp4", "url": None, "b64_json": base64.b64encode(video).decode()}
        if request.get("stream"):
            return [dict(base, status="in_progress", progress=50, data=[]), dict(base, data=[item])]
        if mark == "MULTI_ITEM":
            return [dict(base, status="in_progress", progress=50, data=[item]),
                    dict(base, id="video-second", model="second-item-model", created=CREATED + 1,
                         data=[dict(item, output_format="second")])]
        return [dict(base, data=[item])]

    # -- audio speech (vLLM-Omni AudioFormatter) ------------------------------------------
    def speech(self, request, context, mark):
        rid = context.id()
        base = {"id": rid, "object": "audio.speech", "model": request.get("model") or "",
                "status": "completed", "progress": 100, "created": CREATED, "data": [],
                "error": None, "inference_time_s": 0.01}
        text = request.get("input") or ""
        if not text.strip() or mark == "FAIL_STATUS" or (mark == "FAIL_STATUS_AFTER" and not chunked_ok(request)):
            return [dict(base, status="failed", progress=100, inference_time_s=None,
                         error="Input text cannot be empty" if not text.strip() else "scripted audio failure")]
        fmt = (request.get("response_format") or "wav").lower()
        samples = [(k * 1000) % 30000 - 15000 for k in range(16)]
        chunked = chunked_ok(request)
        if chunked:
            out = []
            for k in range(2):
                pcm = struct.pack("<8h", *samples[8 * k: 8 * k + 8])
                if fmt == "wav" and k == 0:
                    pcm = wav_stream_header() + pcm
                out.append(dict(base, data=[{"output_format": fmt, "url": None,
                                             "b64_json": base64.b64encode(pcm).decode()}]))
            if mark == "FAIL_STATUS_AFTER":
                out[1] = dict(base, status="failed", inference_time_s=None, error="scripted late failure")
            return out
        if fmt == "wav":
            audio = wav_bytes(samples)
        elif fmt == "pcm":
            audio = struct.pack("<16h", *samples)
        else:
            audio = ("FAKE-%s-AUDIO" % fmt.upper()).encode()
        if request.get("data_source") == "url":
            item = {"output_format": fmt, "url": "http://127.0.0.1:9/audios/%s.%s" % (rid, fmt), "b64_json": None}
        else:
            item = {"output_format": fmt, "url": None, "b64_json": base64.b64encode(audio).decode()}
        if mark == "MULTI_ITEM":
            return [dict(base, data=[item]), dict(base, data=[item])]
        return [dict(base, data=[item])]

    # -- generate-capable token model -----------------------------------------------------
    def tokens(self, request, context, mark):
        """LLMEngineOutput items, as the vLLM/SGLang token handlers stream them.

        A request carrying extra_args.sglang_tito (the SGLang /generate envelope) is answered
        the way dynamo.sglang's native_generate_stream answers: every item has empty
        token_ids and the native SGLang chunk under engine_data.sglang_response."""
        ids = self.tok.encode(" Hello world", add_special_tokens=False).ids
        n = len(request.get("token_ids") or [])
        limit = (request.get("stop_conditions") or {}).get("max_tokens")
        finish = "stop"
        if limit is not None and limit < len(ids):
            ids, finish = ids[:limit], "length"
        tito = (request.get("extra_args") or {}).get("sglang_tito")
        if tito is not None:
            rid = tito.get("rid") or context.id()
            out = []
            for k, t in enumerate(ids):
                last = k == len(ids) - 1
                reason = None
                if last:
                    reason = {"type": "stop", "matched": 151645} if finish == "stop" else {
                        "type": "length", "length": len(ids)}
                out.append({"token_ids": [], "engine_data": {"sglang_response": {
                    "text": self.tok.decode([t]), "output_ids": [t],
                    "meta_info": {"id": rid, "finish_reason": reason, "prompt_tokens": n,
                                  "completion_tokens": k + 1, "cached_tokens": 0}}}})
            return out
        want_logprobs = (request.get("output_options") or {}).get("logprobs") is not None
        out = []
        for t in ids:
            item = {"token_ids": [t]}
            if want_logprobs:
                item["log_probs"] = [-0.25]
                item["top_logprobs"] = [[{"rank": 1, "token_id": t, "token": self.tok.decode([t]),
                                          "logprob": -0.25}]]
            out.append(item)
        usage = {"prompt_tokens": n, "completion_tokens": len(ids), "total_tokens": n + len(ids)}
        return out + [{"token_ids": [], "finish_reason": finish, "completion_usage": usage}]


def realtime_handler(model_name, surfaces):
    from dynamo.vllm.realtime import RealtimeHandler, RealtimeTextHandler

    async def chat(messages, max_output_tokens):
        if "FAIL_RUNTIME" in json.dumps(messages):
            raise ValueError("scripted chat failure")
        pieces = [" Hello", " world"]
        finish = "stop"
        if max_output_tokens is not None and max_output_tokens < len(pieces):
            pieces, finish = pieces[:max_output_tokens], "length"

        async def frames():
            base = {"id": "chatcmpl-rt", "object": "chat.completion.chunk", "created": CREATED,
                    "model": model_name}
            for i, p in enumerate(pieces):
                delta = {"content": p} if i else {"role": "assistant", "content": p}
                yield "data: " + json.dumps(dict(base, choices=[{"index": 0, "delta": delta,
                                                                   "finish_reason": None}])) + "\n\n"
            yield "data: " + json.dumps(dict(base, choices=[{"index": 0, "delta": {},
                                                               "finish_reason": finish}])) + "\n\n"
            n = len(json.dumps(messages)) // 8
            yield "data: " + json.dumps(dict(base, choices=[], usage={
                "prompt_tokens": n, "completion_tokens": len(pieces),
                "total_tokens": n + len(pieces)})) + "\n\n"
            yield "data: [DONE]\n\n"
        return frames()

    async def prefill(messages, updates):
        async for _ in updates:  # no prefix cache: updates are consumed, nothing is warmed
            pass

    inner = RealtimeHandler({"realtime": RealtimeTextHandler(
        model_name=model_name, chat_completion_factory=chat, text_prefill_factory=prefill)})

    async def generate(request_stream, context):
        state = {"raise": False}

        async def recorded():
            n = 0
            async for event in request_stream:
                surfaces.rec.write({"worker": model_name, "frame": n, "request": event})
                n += 1
                text = json.dumps(event)
                if "WORKER_RAISES" in text:
                    state["raise"] = True
                if "WORKER_ENDS" in text:
                    return  # the handler sees its input end
                yield event
        sent = 0
        async for event in inner.generate(recorded(), context):
            surfaces.rec.write({"worker": model_name, "sent": sent, "event": event})
            sent += 1
            yield event
            if state["raise"]:
                raise RuntimeError("scripted realtime failure")
    return generate


async def main():
    args = parse_args()
    s = Surfaces(args)
    text = ModelInput.Text
    table = [  # name, component, model type, input, answer, model path
        ("emb", "emb", ModelType.Embedding, text, s.embeddings, args.model_dir),
        ("emb-tok", "embtok", ModelType.Embedding, ModelInput.Tokens, s.embeddings, args.model_dir),
        ("org/emb-slash", "embslash", ModelType.Embedding, text, s.embeddings, args.model_dir),
        ("img", "img", ModelType.Images, text, s.images, "surfaces/img"),
        ("vid", "vid", ModelType.Videos, text, s.videos, "surfaces/vid"),
        ("tts", "tts", ModelType.Audios, text, s.speech, args.model_dir),
        ("cls", "cls", ModelType.Classify | ModelType.Pooling, text, s.classify_or_pool, args.model_dir),
        ("pool", "pool", ModelType.Classify | ModelType.Pooling, text, s.classify_or_pool, args.model_dir),
        ("rr", "rr", ModelType.Rerank, text, s.rerank, args.model_dir),
        ("cls/ready", "clsready", ModelType.Classify, text, s.classify_or_pool, args.model_dir),
        ("rt", "rt", ModelType.Realtime, text, None, "surfaces/rt"),
    ]
    if args.unready:
        table.append(("cls-wait", "clswait", ModelType.Classify, text, s.classify_or_pool, args.model_dir))
    if args.generate:
        table.append(("gen", "gen", ModelType.Chat | ModelType.Completions, ModelInput.Tokens,
                      s.tokens, args.model_dir))
    only = {n for n in args.only.split(",") if n}
    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    tasks = []
    for name, comp, mtype, minput, answer, path in table:
        if only and name not in only:
            continue
        endpoint = runtime.endpoint("%s.%s.generate" % (args.namespace, comp))
        kwargs = {"worker_type": WorkerType.Aggregated}
        if name != "cls/ready":
            kwargs["model_aliases"] = [name + "-alias"]
        if name == "cls-wait":
            kwargs.update(worker_type=WorkerType.Decode, needs=[[WorkerType.Prefill]])
        if name == "gen":
            rc = ModelRuntimeConfig()
            rc.set_engine_specific("vllm_inference_v1_generate", "true")
            rc.set_engine_specific("sglang_generate", "true")
            kwargs["runtime_config"] = rc
        await register_model(minput, mtype, endpoint, path, name, **kwargs)
        if name == "rt":
            tasks.append(endpoint.serve_bidirectional_endpoint(realtime_handler(name, s)))
            continue

        def make(name=name, answer=answer):
            async def generate(request, context=None):
                async for item in s.run(name, request, context, answer):
                    yield item
            return generate
        tasks.append(endpoint.serve_endpoint(make()))
    print("surfaces worker: serving %d models" % len(tasks), flush=True)
    await asyncio.gather(*tasks)


if __name__ == "__main__":
    asyncio.run(main())
