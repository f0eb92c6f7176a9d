"""KServe v2 gRPC checks with the real tritonclient[grpc] against a running switchyard.

Usage: interop_grpc_client.py GRPC_PORT MODEL [--deterministic]

Checks: server live/ready, model ready (and not ready for an unknown model), server and model
metadata, model config, repository index, unary infer with max_tokens (typed as tritonclient
sends it: BYTES as raw_input_contents), the same prompt over /v1/completions on the same port
(same text), gzip- and deflate-compressed requests, unknown model -> NOT_FOUND, bad input name -> INVALID_ARGUMENT, and a stream
with several requests and a bad one in the middle (the stream stays open; streamed pieces
concatenate to the unary answer; the final piece says so). The text comparisons need a worker
whose output depends only on the prompt (--deterministic: switchyard's mock worker). Exits
non-zero on the first failure.
"""

import json
import queue
import sys
import urllib.request

import numpy as np
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

PORT = int(sys.argv[1])
MODEL = sys.argv[2]
SAME = "--deterministic" in sys.argv[3:]
URL = f"127.0.0.1:{PORT}"


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        sys.exit(1)
    print(f"ok: {what}")


def text_input(text):
    t = grpcclient.InferInput("text_input", [1], "BYTES")
    t.set_data_from_numpy(np.array([text.encode()], dtype=np.object_))
    return t


def streaming_input(on):
    t = grpcclient.InferInput("streaming", [1], "BOOL")
    t.set_data_from_numpy(np.array([on], dtype=bool))
    return t


def value(result, name):
    arr = result.as_numpy(name)
    return arr[0].decode() if arr is not None and len(arr) else None


def expect_status(fn, code, what):
    try:
        fn()
    except InferenceServerException as e:
        check(e.status() == code, f"{what}: {e.status()} ({e.message()})")
        return
    check(False, f"{what}: no error")


c = grpcclient.InferenceServerClient(url=URL)
check(c.is_server_live(), "server live")
check(c.is_server_ready(), "server ready")
check(c.is_model_ready(MODEL), "model ready")
check(not c.is_model_ready("no-such-model"), "unknown model not ready")

sm = c.get_server_metadata(as_json=True)
check(sm.get("name") == "switchyard" and sm.get("version"), f"server metadata {sm}")

md = c.get_model_metadata(MODEL, as_json=True)
check(md["name"] == MODEL and md["platform"] == "dynamo" and md["versions"] == ["1"], f"model metadata {md}")
check([(i["name"], i["datatype"]) for i in md["inputs"]] == [("text_input", "BYTES"), ("streaming", "BOOL")],
      "metadata inputs")
check([o["name"] for o in md["outputs"]] == ["text_output", "finish_reason"], "metadata outputs")

cfg = c.get_model_config(MODEL, as_json=True)["config"]
check(cfg["platform"] == "dynamo" and cfg["backend"] == "dynamo", f"model config {cfg}")
check([i["name"] for i in cfg["input"]] == ["text_input", "streaming"], "config inputs")

idx = c.get_model_repository_index(as_json=True)
check([m["name"] for m in idx.get("models", [])] == [MODEL] and idx["models"][0]["state"] == "READY",
      f"repository index {idx}")

PROMPT = "Tell me about the sea"
res = c.infer(MODEL, [text_input(PROMPT)], request_id="u1", parameters={"max_tokens": 5})
unary_text = value(res, "text_output")
check(value(res, "finish_reason") == "length", f"unary infer max_tokens=5 -> length ({unary_text!r})")
check(res.get_response().id == "u1", "response id")

body = json.dumps({"model": MODEL, "prompt": PROMPT, "max_tokens": 5}).encode()
req = urllib.request.Request(f"http://{URL}/v1/completions", data=body,
                             headers={"content-type": "application/json"})
openai = json.load(urllib.request.urlopen(req, timeout=30))
check(openai["choices"][0]["finish_reason"] == "length", "/v1/completions answers on the same port")
if SAME:
    check(openai["choices"][0]["text"] == unary_text, "same text as /v1/completions on the same port")

# Compressed requests (grpc-encoding gzip / deflate, as tritonclient sends them).
for algorithm in ("gzip", "deflate"):
    z = c.infer(MODEL, [text_input(PROMPT)], request_id="z1", parameters={"max_tokens": 5},
                compression_algorithm=algorithm)
    check(value(z, "finish_reason") == "length" and (value(z, "text_output") == unary_text or not SAME),
          f"{algorithm}-compressed request answered")

expect_status(lambda: c.infer("no-such-model", [text_input("x")]), "StatusCode.NOT_FOUND", "unknown model")
bogus = grpcclient.InferInput("bogus", [1], "BYTES")
bogus.set_data_from_numpy(np.array([b"x"], dtype=np.object_))
expect_status(lambda: c.infer(MODEL, [bogus]), "StatusCode.INVALID_ARGUMENT", "bad input name")

# One stream: a streamed request, a bad one, then a whole one; the stream must survive.
results = queue.Queue()
c.start_stream(callback=lambda result, error: results.put((result, error)))
c.async_stream_infer(MODEL, [text_input(PROMPT), streaming_input(True)], request_id="s1",
                     parameters={"max_tokens": 5})
c.async_stream_infer(MODEL, [bogus], request_id="s2")
c.async_stream_infer(MODEL, [text_input(PROMPT)], request_id="s3", parameters={"max_tokens": 5})

# Requests on one stream run concurrently: collect until s1's final piece, s2's error and s3.
pieces, errors, whole = [], [], None
while whole is None or not errors or not (pieces and pieces[-1][2]):
    result, error = results.get(timeout=30)
    if error is not None:
        errors.append(str(error))
        continue
    resp = result.get_response()
    final = resp.parameters["triton_final_response"].bool_param
    if resp.id == "s1":
        pieces.append((value(result, "text_output"), value(result, "finish_reason"), final))
    elif resp.id == "s3":
        whole = value(result, "text_output")
c.stop_stream()

check(len(pieces) >= 2, f"streamed in {len(pieces)} pieces")
if SAME:
    check("".join(p[0] for p in pieces) == unary_text, "streamed pieces concatenate to the unary answer")
check(pieces[-1][1] == "length" and pieces[-1][2] and not any(p[2] for p in pieces[:-1]),
      "last piece carries finish_reason and triton_final_response")
check(len(errors) == 1 and "Invalid input name: bogus" in errors[0], f"bad request in the middle: {errors}")
check(whole is not None and (whole == unary_text or not SAME), "request after the bad one answered on the same stream")
print("tritonclient interop: all checks passed")
