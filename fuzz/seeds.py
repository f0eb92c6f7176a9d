#!/usr/bin/env python3
"""Writes the seed inputs of every fuzz target into fuzz/seeds/<target>/, from the project's
real inputs: the request-fidelity cases (scripts/fidelity_cases.py), the captured request-plane
streams (tests/data/plane), the captured KV event frames (tests/data/kv), the captured
discovery stores (tests/data/discovery, tests/data/nats), and the chat templates of the test
models (a directory of model files, e.g. ~/.cache/switchyard-models). scripts/fuzz.sh --seed
runs this, then `cargo fuzz cmin` to minimise seeds and corpus into fuzz/corpus/<target>/.

Usage: seeds.py OUT_DIR [MODELS_DIR]
"""

import json
import os
import struct
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def write(out, target, name, data):
    d = os.path.join(out, target)
    os.makedirs(d, exist_ok=True)
    with open(os.path.join(d, name), "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def js(v):
    return json.dumps(v).encode()


# --------------------------------------------------------------------------- http1

def http1(out):
    body = js({"model": "qwen3", "messages": [{"role": "user", "content": "hi"}]})
    reqs = {
        "get": b"GET /v1/models HTTP/1.1\r\nHost: a\r\n\r\n",
        "post": b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(body), body),
        "chunked": b"POST /v1/completions HTTP/1.1\r\nHost: a\r\nTransfer-Encoding: chunked\r\n"
        b"Expect: 100-continue\r\n\r\n5;ext=1\r\nhello\r\n0\r\nX-Trailer: y\r\n\r\n",
        "pipelined": b"GET /health HTTP/1.1\r\n\r\nHEAD /live HTTP/1.0\r\nConnection: keep-alive\r\n\r\n"
        b"DELETE /x HTTP/1.1\r\nContent-Length: 0\r\n\r\n",
        "smuggle": b"POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\n",
        "synthetic": b"POST\n/v1/chat/completions\ncontent-type:application/json\nx-request-id:abc",
    }
    for i, (name, raw) in enumerate(reqs.items()):
        write(out, "http1", name, bytes([i * 7 % 64]) + raw)


# --------------------------------------------------------------------------- h2

def frame(kind, flags, stream, payload):
    n = len(payload)
    return bytes([n >> 16 & 255, n >> 8 & 255, n & 255, kind, flags]) + struct.pack(">I", stream) + payload


def literal(name, value):
    return bytes([0, len(name)]) + name + bytes([len(value)]) + value


def h2(out):
    preface = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
    settings = frame(4, 0, 0, b"")
    head = frame(1, 4, 1, b"\x83\x86" + literal(b"x-a", b"1"))
    trailer_bad = frame(1, 4 | 1 | 8, 1, b"\x02" + literal(b"x-b", b"2") + literal(b":method", b"POST") + b"\0\0")
    cont = frame(1, 4, 3, literal(b"x-a", b"1")) + frame(1, 1, 3, literal(b"x-b", b"2")) + frame(9, 4, 3, b"\x82")
    write(out, "h2_trailers", "pseudo_trailer", b"\x07" + preface + settings + head + frame(0, 0, 1, b"data") + trailer_bad)
    write(out, "h2_trailers", "continuation", b"\x00" + preface + settings + cont)
    write(out, "h2_trailers", "clean", b"\x03" + preface + head + frame(0, 1, 1, b"{}") + frame(3, 0, 5, b"\0\0\0\x08"))


# --------------------------------------------------------------------------- gRPC / KServe

def varint(n):
    n &= (1 << 64) - 1
    out = b""
    while True:
        b = n & 0x7F
        n >>= 7
        if n:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def field(num, wire, payload):
    key = varint(num << 3 | wire)
    if wire == 2:
        return key + varint(len(payload)) + payload
    return key + payload


def s(num, text):
    return field(num, 2, text if isinstance(text, bytes) else text.encode())


def packed(num, values, enc=varint):
    return field(num, 2, b"".join(enc(v) for v in values))


def param(name, choice):
    kind, v = choice
    if kind == "bool":
        p = field(1, 0, varint(int(v)))
    elif kind == "int":
        p = field(2, 0, varint(v))
    elif kind == "str":
        p = s(3, v)
    else:
        p = field(4, 1, struct.pack("<d", v))
    return s(1, name) + field(2, 2, p)


def tensor(name, dtype, shape, contents=None, params=()):
    t = s(1, name) + s(2, dtype) + packed(3, shape)
    for k, v in params:
        t += field(4, 2, param(k, v))
    if contents is not None:
        t += field(5, 2, contents)
    return t


def infer_request(model, inputs, raw=(), params=(), outputs=()):
    m = s(1, model) + s(3, "req-1")
    for k, v in params:
        m += field(4, 2, param(k, v))
    for t in inputs:
        m += field(5, 2, t)
    for o in outputs:
        m += field(6, 2, s(1, o))
    for r in raw:
        m += s(7, r)
    return m


def grpc_frame(msg):
    return b"\0" + struct.pack(">I", len(msg)) + msg


def kserve(out):
    text = tensor("text_input", "BYTES", [1], s(8, "What is the capital of France?"))
    stream = tensor("streaming", "BOOL", [1], packed(1, [1]))
    typed = infer_request("qwen3", [text, stream], params=[("max_tokens", ("int", 16)), ("temperature", ("float", 0.5)),
                                                           ("stop", ("str", "\n")), ("triton_enable_empty_final_response", ("bool", True))])
    raw_text = struct.pack("<I", 5) + b"hello"
    raw = infer_request("qwen3", [tensor("text_input", "BYTES", [1, 1]), tensor("stream", "BOOL", [1])],
                        raw=[raw_text, b"\x00"])
    ints = infer_request("echo", [tensor("INPUT0", "INT32", [3], packed(2, [1, 2, 3])),
                                  tensor("INPUT1", "BYTES", [2], s(8, "a") + s(8, "bc"))],
                         outputs=["OUTPUT0", "OUTPUT1"], params=[("p1", ("int", 5))])
    raw_ints = infer_request("echo", [tensor("INPUT0", "INT32", [2]), tensor("INPUT1", "FP16", [1, 2])],
                             raw=[struct.pack("<ii", 7, -1), struct.pack("<HH", 0x3C00, 0x4000)])
    write(out, "kserve_grpc", "text_typed", b"\x00" + grpc_frame(typed))
    write(out, "kserve_grpc", "text_raw", b"\x0f" + grpc_frame(raw))
    write(out, "kserve_grpc", "tensor_typed", b"\x03" + grpc_frame(ints) + grpc_frame(ints))
    write(out, "kserve_grpc", "tensor_raw", b"\x00" + grpc_frame(raw_ints))
    import gzip
    import zlib
    gz = gzip.compress(typed)
    write(out, "kserve_grpc", "gzip", b"\x01" + b"\x01" + struct.pack(">I", len(gz)) + gz)
    zl = zlib.compress(ints)
    write(out, "kserve_grpc", "deflate", b"\x02" + b"\x01" + struct.pack(">I", len(zl)) + zl)


# --------------------------------------------------------------------------- JSON APIs

def apis(out):
    sys.path.insert(0, os.path.join(ROOT, "scripts"))
    import fidelity_cases
    for case in fidelity_cases.CASES:
        write(out, "openai", case["name"], js(case["body"]))
    msgs = [{"role": "user", "content": "hi"}]
    tool = {"name": "get_weather", "description": "Weather", "input_schema": {"type": "object", "properties": {"city": {"type": "string"}}}}
    anthropic = {
        "plain": {"model": "qwen3", "max_tokens": 64, "messages": msgs},
        "system_blocks": {"model": "qwen3", "max_tokens": 64, "system": [{"type": "text", "text": "x-anthropic-billing-header: a\nBe brief."}],
                          "messages": msgs, "stop_sequences": ["\n\n"], "temperature": 0.2, "top_p": 0.9, "top_k": 5, "stream": True},
        "tools": {"model": "qwen3", "max_tokens": 64, "tools": [tool], "tool_choice": {"type": "tool", "name": "get_weather"},
                  "messages": [{"role": "user", "content": [{"type": "text", "text": "Weather in Paris?"}]},
                               {"role": "assistant", "content": [{"type": "thinking", "thinking": "hm", "signature": "s"},
                                                                 {"type": "tool_use", "id": "t1", "name": "get_weather", "input": {"city": "Paris"}}]},
                               {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": [{"type": "text", "text": "sunny"}]},
                                                            {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": "AAAA"}}]}]},
        "thinking": {"model": "qwen3", "max_tokens": 64, "thinking": {"type": "enabled", "budget_tokens": 1024}, "metadata": {"user_id": "u"},
                     "messages": msgs, "tool_choice": {"type": "auto"}},
    }
    for name, body in anthropic.items():
        write(out, "anthropic", name, js(body))
    fn = {"type": "function", "name": "get_weather", "description": "Weather", "parameters": {"type": "object", "properties": {"city": {"type": "string"}}}, "strict": True}
    responses = {
        "text": {"model": "qwen3", "input": "Say hello"},
        "items": {"model": "qwen3", "instructions": "Be brief.", "max_output_tokens": 32, "temperature": 0.5, "stream": True,
                  "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]},
                            {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "hello"}]},
                            {"role": "developer", "content": "dev"}]},
        "tools": {"model": "qwen3", "tools": [fn], "tool_choice": {"type": "function", "name": "get_weather"}, "parallel_tool_calls": False,
                  "input": [{"role": "user", "content": "Weather?"},
                            {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{\"city\":\"Paris\"}"},
                            {"type": "function_call_output", "call_id": "c1", "output": "sunny"},
                            {"type": "reasoning", "summary": [{"type": "summary_text", "text": "thought"}]}]},
        "format": {"model": "qwen3", "input": "json please", "text": {"format": {"type": "json_schema", "name": "x", "schema": {"type": "object"}}},
                   "reasoning": {"effort": "low"}, "metadata": {"a": "b"}, "store": False, "truncation": "disabled", "top_p": 1, "user": "u"},
        "count_empty": {"model": "qwen3", "instructions": ""},
    }
    for name, body in responses.items():
        write(out, "responses", name, js(body))


# --------------------------------------------------------------------------- planes

def plane(out):
    d = os.path.join(ROOT, "tests", "data", "plane")
    for name in sorted(os.listdir(d)):
        if not name.endswith(".resp.bin"):
            continue
        data = open(os.path.join(d, name), "rb").read()
        codec = 1 if "json" in name else 0
        mode = 1 if "text" in name else 0
        write(out, "plane_stream", name, bytes([codec | mode << 1 | (len(name) % 8) << 3]) + data)


def zmtp(flags, body):
    if len(body) <= 255:
        return bytes([flags, len(body)]) + body
    return bytes([flags | 2]) + struct.pack(">Q", len(body)) + body


def kv(out):
    samples = json.load(open(os.path.join(ROOT, "tests", "data", "kv", "kv-zmq-frames-sample.json")))
    ready = zmtp(4, b"\x05READY\x0bSocket-Type\x00\x00\x00\x03PUB")
    allmsgs = b""
    for name, s_ in samples.items():
        if not isinstance(s_, dict) or "frame3_hex" not in s_:
            continue
        frames = [bytes.fromhex(s_[k]) for k in ("frame0_topic_hex", "frame1_publisher_id_be_hex", "frame2_sequence_be_hex", "frame3_hex")]
        msg = b"".join(zmtp(1, f) for f in frames[:3]) + zmtp(0, frames[3])
        allmsgs += msg
        write(out, "kv_events", name, ready + msg)
    write(out, "kv_events", "all", ready + allmsgs)


# --------------------------------------------------------------------------- discovery

def discovery(out):
    buckets = ["v1/event_channels", "v1/event_sources", "v1/instances", "v1/mdc"]
    snap = json.load(open(os.path.join(ROOT, "tests", "data", "discovery", "filekv_snapshot.json")))
    recs = []
    for bucket, files in snap.items():
        if bucket not in buckets or not isinstance(files, dict):
            continue
        for fname, entry in files.items():
            value = entry.get("value", entry.get("content")) if isinstance(entry, dict) else None
            if value is None:
                continue
            recs.append(bytes([buckets.index(bucket)]) + fname.encode() + b"\n" + js(value))
    write(out, "discovery", "filekv", b"\x1e".join(recs))
    nats = json.load(open(os.path.join(ROOT, "tests", "data", "nats", "discovery.json")))
    lines = []
    for i, (key, value) in enumerate(nats.items()):
        kv_ = {"key": __import__("base64").b64encode(key.encode()).decode(),
               "value": __import__("base64").b64encode(js(value)).decode(), "mod_revision": str(i + 2)}
        lines.append(js({"result": {"header": {"revision": str(i + 2)}, "events": [{"kv": kv_}]}}))
    lines.insert(0, js({"result": {"header": {"revision": "1"}, "created": True}}))
    write(out, "discovery", "etcd_watch", b"\n".join(lines) + b"\n")


# --------------------------------------------------------------------------- chat templates

def templates(out, models):
    conv = {"messages": [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "What is 2+2?"},
                         {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": {"name": "calc", "arguments": {"x": "2+2"}}}]},
                         {"role": "tool", "content": "4"}, {"role": "user", "content": [{"type": "text", "text": "thanks"}]}],
            "tools": [{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
            "add_generation_prompt": True, "extra": {"enable_thinking": False}}
    write(out, "chat_template", "inline", b"{% for m in messages %}<|{{ m.role }}|>{{ m.content | trim }}\n{% endfor %}"
          b"{% if add_generation_prompt %}<|assistant|>{% endif %}\0" + js(conv))
    if not models or not os.path.isdir(models):
        return
    for model in sorted(os.listdir(models)):
        d = os.path.join(models, model)
        srcs = []
        p = os.path.join(d, "chat_template.jinja")
        if os.path.exists(p):
            srcs.append(open(p).read())
        p = os.path.join(d, "tokenizer_config.json")
        if os.path.exists(p):
            t = json.load(open(p)).get("chat_template")
            if isinstance(t, str):
                srcs.append(t)
            elif isinstance(t, list):
                srcs += [x["template"] for x in t if isinstance(x, dict) and "template" in x]
        for i, src in enumerate(srcs):
            write(out, "chat_template", f"{model}_{i}", src.encode() + b"\0" + js(conv))


def main():
    out = sys.argv[1]
    models = sys.argv[2] if len(sys.argv) > 2 else None
    http1(out)
    h2(out)
    kserve(out)
    apis(out)
    plane(out)
    kv(out)
    discovery(out)
    templates(out, models)


if __name__ == "__main__":
    main()
