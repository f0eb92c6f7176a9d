"""A decode worker that publishes KV events, for tests of conditional disaggregation.

It is the real `python -m dynamo.mocker` of Dynamo 1.6.1, started with
`--disaggregation-mode decode` (so it registers as a decode worker: component `backend`,
`worker_type: decode` in its card), except that its engine runs as an aggregated one. 1.6.1's
mocker engine never publishes KV events for a decode worker (the cache a real vLLM decode
worker reports for the blocks it receives), so without this the router can never see a decode
worker's cache. Takes the mocker's arguments; run it with the Dynamo venv's Python.
"""
import sys

import dynamo.mocker.main as mocker

build = mocker.build_runtime_config


def as_aggregated(engine_args):
    engine_args["engine"]["worker_type"] = "aggregated"
    return build(engine_args)


mocker.build_runtime_config = as_aggregated
sys.argv[0] = "dynamo.mocker"
mocker.main()
