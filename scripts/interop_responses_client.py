"""The OpenAI Python SDK's Responses calls against a frontend (scripts/interop_responses.sh).

Checks `responses.create` (whole and `stream=True`), the `responses.stream(...)` helper read
to the end and its `get_final_response()`, and `responses.input_tokens.count`, in front of a
`dynamo.mocker` worker (its text is random tokens: shapes are checked, not words).
"""

import argparse
import sys

import openai


def check(cond, what):
    if not cond:
        print(f"FAIL: {what}")
        sys.exit(1)
    print(f"  ok: {what}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    ap.add_argument("--echo-model", required=True)
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key="none")
    m = a.model

    r = client.responses.create(model=m, input="Say hello", instructions="Be brief.", max_output_tokens=8)
    check(r.object == "response" and r.id.startswith("resp_"), f"create: a response {r.id}")
    check(r.status in ("completed", "incomplete"), f"create: status {r.status}")
    check(r.output and r.output[0].type == "message", "create: a message item")
    check(isinstance(r.output_text, str) and len(r.output_text) > 0, "create: output_text")
    check(r.usage.input_tokens > 0 and r.usage.output_tokens > 0, f"create: usage {r.usage}")
    check(r.usage.total_tokens == r.usage.input_tokens + r.usage.output_tokens, "create: total_tokens")
    check(r.instructions == "Be brief.", "create: instructions echoed")

    items = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "input_text", "text": "Say hello"}]},
    ]
    events = list(client.responses.create(model=m, input=items, max_output_tokens=8, stream=True))
    types = [e.type for e in events]
    check(types[0] == "response.created" and types[1] == "response.in_progress", "stream=True: created, in_progress")
    check(types[-1] in ("response.completed", "response.incomplete"), f"stream=True: ends with {types[-1]}")
    check([e.sequence_number for e in events] == list(range(len(events))), "stream=True: sequence numbers")
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    check(text == events[-1].response.output[0].content[0].text, "stream=True: deltas add up to the final text")

    with client.responses.stream(model=m, input="Say hello", max_output_tokens=16) as s:
        seen = [e.type for e in s]
    check(seen[-1] == "response.incomplete", f"stream(): the mocker's answer read to its end ({seen[-1]})")

    # The echo worker answers what the prompt scripts, and finishes: the helper's final response.
    e = a.echo_model
    with client.responses.stream(model=e, input="[[echo]]<think>Greet.</think>Hello there.[[/echo]]") as s:
        seen = [ev.type for ev in s]
        final = s.get_final_response()
    check("response.output_text.delta" in seen and "response.reasoning_text.delta" in seen, "stream(): text and reasoning deltas")
    check(final.status == "completed", f"stream(): final status {final.status}")
    check(final.output_text == "Hello there.", f"stream(): get_final_response text {final.output_text!r}")
    check(final.output[0].type == "reasoning", "stream(): a reasoning item first")

    with client.responses.stream(model=e, input="[[echo]]Hi.[[/echo]]") as s:
        final = s.get_final_response()
    check(final.output_text == "Hi.", "stream(): get_final_response without iterating")

    tools = [{"type": "function", "name": "get_weather", "description": "Get the weather",
              "parameters": {"type": "object", "properties": {"location": {"type": "string"}}, "required": ["location"]}}]
    ask = 'Weather? [[echo]]<tool_call>\n{"name": "get_weather", "arguments": {"location": "Paris"}}\n</tool_call>[[/echo]]'
    with client.responses.stream(model=e, input=ask, tools=tools) as s:
        final = s.get_final_response()
    calls = [o for o in final.output if o.type == "function_call"]
    check(len(calls) == 1 and calls[0].name == "get_weather", "stream(): a function_call item")
    call = calls[0]
    nxt = client.responses.create(model=e, tools=tools, input=[
        {"role": "user", "content": ask},
        {"type": "function_call", "call_id": call.call_id, "name": call.name, "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "[[echo]]It is sunny.[[/echo]]"},
    ])
    check(nxt.output_text == "It is sunny.", f"the next turn: the call's output reached the model ({nxt.output_text!r})")

    n = client.responses.input_tokens.count(model=m, input="Say hello")
    check(n.input_tokens == 10, f"input_tokens.count: the templated prompt's 10 tokens ({n.input_tokens})")

    try:
        client.responses.create(model="nope", input="x", max_output_tokens=8)
        check(False, "unknown model: 404")
    except openai.NotFoundError as e:
        check("Model not found" in str(e), "unknown model: NotFoundError")
    try:
        client.responses.create(model=m, input="x", previous_response_id="resp_1")
        check(False, "previous_response_id: 501")
    except openai.InternalServerError as e:
        check(e.status_code == 501, "previous_response_id: 501")


if __name__ == "__main__":
    main()
