"""KServe gRPC checks of a tensor model (the echo of scripts/interop_tensor_worker.py or
`switchyard mock-worker --tensor`) with the real tritonclient[grpc], against switchyard or the
real `python -m dynamo.frontend --kserve-grpc-server`.

Usage: interop_grpc_tensor_client.py PORT MODEL TRANSCRIPT.json [--switchyard]

Checks (both frontends), once the model is ready (waits up to 60 s): metadata and config from the card's
tensor_model_config, tritonclient infer (raw INT32 + BYTES in, the same arrays out), request
id and parameters passed through, typed contents through the raw stub, unknown model NOT_FOUND, a shape that does not match
the data INVALID_ARGUMENT, a failing worker (an error status), ModelStreamInfer with two
responses for one request. With --switchyard also what only switchyard does: requests that do
not match the declared inputs are INVALID_ARGUMENT, and a stream stays open after a request
for an unknown model. Every answer goes into TRANSCRIPT (JSON) so two runs can be compared.
Exits non-zero on the first failed check.
"""

import json
import queue
import sys
import time

import grpc
import numpy as np
import tritonclient.grpc as grpcclient
from google.protobuf import json_format
from tritonclient.grpc import service_pb2 as pb
from tritonclient.grpc import service_pb2_grpc as pbg
from tritonclient.utils import InferenceServerException

PORT = int(sys.argv[1])
MODEL = sys.argv[2]
TRANSCRIPT = sys.argv[3]
SWITCHYARD = "--switchyard" in sys.argv[4:]
URL = f"127.0.0.1:{PORT}"
record = {}


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}", file=sys.stderr)
        json.dump(record, open(TRANSCRIPT, "w"), indent=1, sort_keys=True)
        sys.exit(1)
    print(f"ok: {what}")


def as_dict(msg):
    return json_format.MessageToDict(msg, preserving_proto_field_name=True)


stub = pbg.GRPCInferenceServiceStub(grpc.insecure_channel(URL))


def call(name, req):
    """ModelInfer through the raw stub; the answer (or the status) is recorded."""
    try:
        out = {"response": as_dict(stub.ModelInfer(req))}
    except grpc.RpcError as e:
        out = {"code": e.code().name, "message": e.details()}
    record[name] = out
    return out


def typed_request(inputs, model=MODEL, rid="t1", **kw):
    req = pb.ModelInferRequest(model_name=model, id=rid, **kw)
    for name, datatype, shape, contents in inputs:
        t = req.inputs.add()
        t.name, t.datatype = name, datatype
        t.shape.extend(shape)
        for field, values in contents.items():
            getattr(t.contents, field).extend(values)
    return req


c = grpcclient.InferenceServerClient(url=URL)
for _ in range(600):
    try:
        if c.is_model_ready(MODEL):
            break
    except InferenceServerException:
        pass
    time.sleep(0.1)
check(c.is_model_ready(MODEL), "model ready")
md = c.get_model_metadata(MODEL, as_json=True)
record["metadata"] = md
check([(i["name"], i["datatype"], i["shape"]) for i in md["inputs"]]
      == [("INPUT0", "INT32", ["-1"]), ("INPUT1", "BYTES", ["-1"])], f"metadata inputs {md}")
check([o["name"] for o in md["outputs"]] == ["OUTPUT0", "OUTPUT1"], "metadata outputs")
cfg = c.get_model_config(MODEL, as_json=True)["config"]
record["config"] = cfg
check(cfg.get("platform") == "dynamo" and cfg.get("backend") == "dynamo", f"config {cfg}")
check([(i["name"], i["data_type"]) for i in cfg["input"]] == [("INPUT0", "TYPE_INT32"), ("INPUT1", "TYPE_STRING")],
      "config inputs")


def infer_input(name, arr, datatype):
    t = grpcclient.InferInput(name, list(arr.shape), datatype)
    t.set_data_from_numpy(arr)
    return t


a = np.array([1, -2, 3], dtype=np.int32)
b = np.array([b"x", b"yz"], dtype=np.object_)
r = c.infer(MODEL, [infer_input("INPUT0", a, "INT32"), infer_input("INPUT1", b, "BYTES")])
record["tritonclient raw"] = as_dict(r.get_response())
check(np.array_equal(r.as_numpy("OUTPUT0"), a), "raw INT32 echoed")
check(list(r.as_numpy("OUTPUT1")) == [b"x", b"yz"], "raw BYTES echoed")
r = c.infer(MODEL, [infer_input("INPUT0", a, "INT32")], request_id="abc", parameters={"p1": 5, "p2": "s", "p3": True})
resp = r.get_response()
record["tritonclient params"] = as_dict(resp)
check(resp.id == "abc", "request id passed through")
check(resp.parameters["p1"].int64_param == 5 and resp.parameters["p2"].string_param == "s"
      and resp.parameters["p3"].bool_param, "parameters passed through")

out = call("typed", typed_request([
    ("INPUT0", "INT32", [3], {"int_contents": [4, 5, 6]}),
    ("INPUT1", "BYTES", [1], {"bytes_contents": [b"hi"]}),
]))
outs = out.get("response", {}).get("outputs", [])
check([o["name"] for o in outs] == ["OUTPUT0", "OUTPUT1"], f"typed echo {out}")
check(outs[0]["contents"]["int_contents"] == [4, 5, 6], "typed INT32 echoed")
if SWITCHYARD:
    check(call("undeclared types", typed_request([
        ("X", "FP32", [2], {"fp32_contents": [1.5, 2.5]}),
    ])).get("code") == "INVALID_ARGUMENT", "an undeclared input is INVALID_ARGUMENT")
    check(call("declared type", typed_request([
        ("INPUT0", "FP32", [1], {"fp32_contents": [1.5]}),
    ])).get("code") == "INVALID_ARGUMENT", "a wrong type for a declared input is INVALID_ARGUMENT")
    check(call("no data", typed_request([("INPUT0", "INT32", [1], {})])).get("code") == "INVALID_ARGUMENT",
          "an input without data is INVALID_ARGUMENT")

check(call("unknown model", typed_request([("INPUT0", "INT32", [1], {"int_contents": [1]})], model="nope"))
      .get("code") == "NOT_FOUND", "unknown model NOT_FOUND")
check(call("shape mismatch", typed_request([("INPUT0", "INT32", [2], {"int_contents": [1]})]))
      .get("code") == "INVALID_ARGUMENT", "shape/data mismatch INVALID_ARGUMENT")
check(call("raw length", typed_request([("INPUT0", "INT32", [1], {})], raw_input_contents=[b"\0\0\0"]))
      .get("code") == "INVALID_ARGUMENT", "raw length INVALID_ARGUMENT")
fail = typed_request([("INPUT0", "INT32", [1], {"int_contents": [1]})], rid="f")
fail.parameters["fail"].bool_param = True
out = call("worker fails", fail)
check(out.get("code") in ("INTERNAL", "INVALID_ARGUMENT") and "asked to fail" in out.get("message", ""),
      f"a failing worker is an error status with its message {out}")
two = typed_request([("INPUT0", "INT32", [1], {"int_contents": [1]})], rid="two")
two.parameters["repeat"].int64_param = 2
check(call("two responses unary", two).get("code") == "INTERNAL", "two responses to a unary call INTERNAL")

# Streaming through tritonclient: two responses for one request, then a raw one.
results = queue.Queue()
c.start_stream(callback=lambda result, error: results.put((result, error)))
c.async_stream_infer(MODEL, [infer_input("INPUT0", np.array([7, 8], dtype=np.int32), "INT32")],
                     request_id="s1", parameters={"repeat": 2})
got = []
for _ in range(2):
    result, error = results.get(timeout=10)
    check(error is None, f"stream response without error ({error})")
    got.append(as_dict(result.get_response()))
    check(np.array_equal(result.as_numpy("OUTPUT0"), np.array([7, 8], dtype=np.int32)), "streamed echo")
record["stream two"] = got
c.stop_stream()

if SWITCHYARD:
    # A request for an unknown model in the middle of a stream: error_message, then the
    # stream answers the next request.
    def requests():
        yield typed_request([("INPUT0", "INT32", [1], {"int_contents": [1]})], model="nope", rid="x")
        yield typed_request([("INPUT0", "INT32", [1], {"int_contents": [2]})], rid="y")
    answers = [as_dict(m) for m in stub.ModelStreamInfer(requests(), timeout=10)]
    record["stream unknown model"] = answers
    check(len(answers) == 2 and "not found" in answers[0].get("error_message", ""), f"stream error {answers}")
    check(answers[1]["infer_response"]["id"] == "y", "the stream stays open")

json.dump(record, open(TRANSCRIPT, "w"), indent=1, sort_keys=True)
print("interop_grpc_tensor_client: all checks passed")
