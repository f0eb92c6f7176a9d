"""A tensor worker on Dynamo 1.6.1's own Python runtime, for scripts/interop_grpc.sh.

Registers model NAME (default `echo`) as ModelInput.Tensor / ModelType.TensorBased with a
tensor_model_config declaring INPUT0 (Int32, [-1]) and INPUT1 (Bytes, [-1]) and the outputs
OUTPUT0 / OUTPUT1, and serves the same echo as `switchyard mock-worker --tensor`: every input
tensor comes back as OUTPUT* (the name with INPUT replaced), with the request's id, model and
parameters; parameter `repeat` (int64) answers that many times, `fail` raises ValueError.

Usage (DYN_FILE_KV set, file discovery, TCP request plane): interop_tensor_worker.py [NAME]
"""

import asyncio
import sys

from dynamo.llm import ModelInput, ModelType, WorkerType, register_model
from dynamo.runtime import DistributedRuntime

NAME = sys.argv[1] if len(sys.argv) > 1 else "echo"


def int_param(params, key, default):
    value = params.get(key)
    if not isinstance(value, dict) or not value:
        return default
    return int(next(iter(value.values())))


async def generate(request, context=None):
    params = request.get("parameters") or {}
    if "fail" in params:
        raise ValueError("echo: asked to fail")
    tensors = []
    for t in request["tensors"]:
        meta = dict(t["metadata"])
        meta["name"] = meta["name"].replace("INPUT", "OUTPUT")
        tensors.append({"metadata": meta, "data": t["data"]})
    response = {"id": request.get("id"), "model": request["model"], "tensors": tensors}
    if params:
        response["parameters"] = params
    for _ in range(int_param(params, "repeat", 1)):
        yield response


async def main():
    runtime = DistributedRuntime(asyncio.get_running_loop(), "file", "tcp")
    endpoint = runtime.endpoint(f"dynamo.{NAME}.generate")
    config = {
        "name": NAME,
        "inputs": [
            {"name": "INPUT0", "data_type": "Int32", "shape": [-1]},
            {"name": "INPUT1", "data_type": "Bytes", "shape": [-1]},
        ],
        "outputs": [
            {"name": "OUTPUT0", "data_type": "Int32", "shape": [-1]},
            {"name": "OUTPUT1", "data_type": "Bytes", "shape": [-1]},
        ],
    }
    await register_model(
        ModelInput.Tensor,
        ModelType.TensorBased,
        endpoint,
        NAME,
        worker_type=WorkerType.Aggregated,
        tensor_model_config=config,
    )
    await endpoint.serve_endpoint(generate)


asyncio.run(main())
