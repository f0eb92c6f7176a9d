"""The real Anthropic Python SDK against switchyard's /v1/messages (scripts/interop_anthropic.sh).

Each check prints one line; the first failure raises (exit status 1).
"""

import argparse

import anthropic


def check(cond, what):
    if not cond:
        raise AssertionError(what)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--model", required=True)
    args = ap.parse_args()
    client = anthropic.Anthropic(base_url=args.base_url, api_key="sk-ant-bogus", max_retries=0)
    model = args.model
    messages = [{"role": "user", "content": "Tell me about the weather in Paris in two sentences."}]

    # Whole answer.
    m = client.messages.create(model=model, max_tokens=24, system="You are terse.", messages=messages)
    check(m.type == "message" and m.role == "assistant", f"a message: {m}")
    check(m.id.startswith("msg_"), f"a msg_ id: {m.id}")
    check(len(m.content) >= 1 and m.content[0].type == "text" and m.content[0].text, f"a text block: {m.content}")
    check(m.stop_reason in ("end_turn", "max_tokens"), f"stop_reason: {m.stop_reason}")
    check(m.usage.input_tokens > 0 and m.usage.output_tokens > 0, f"usage: {m.usage}")
    print(f"create: {len(m.content[0].text)} chars, stop_reason={m.stop_reason}, usage={m.usage}")

    # count_tokens is the templated prompt's count: what the same request's usage says
    # (cached prompt tokens counted in as well).
    n = client.messages.count_tokens(model=model, system="You are terse.", messages=messages)
    cached = m.usage.cache_read_input_tokens or 0
    check(n.input_tokens == m.usage.input_tokens + cached, f"count_tokens {n.input_tokens} vs usage {m.usage}")
    print(f"count_tokens: {n.input_tokens}")

    # max_tokens bound.
    m = client.messages.create(model=model, max_tokens=3, messages=messages)
    check(m.stop_reason == "max_tokens" and m.usage.output_tokens == 3, f"max_tokens: {m.stop_reason} {m.usage}")
    print("max_tokens: stop_reason=max_tokens")

    # Raw stream.
    names = []
    text = ""
    start_input = None
    final_output = None
    for ev in client.messages.create(model=model, max_tokens=24, messages=messages, stream=True):
        names.append(ev.type)
        if ev.type == "message_start":
            start_input = ev.message.usage.input_tokens
        elif ev.type == "content_block_delta" and ev.delta.type == "text_delta":
            text += ev.delta.text
        elif ev.type == "message_delta":
            final_output = ev.usage.output_tokens
    check(names[0] == "message_start" and names[-1] == "message_stop", f"event order: {names}")
    check("content_block_start" in names and "content_block_stop" in names, f"a block: {names}")
    check(text and final_output and final_output > 0, f"text {text!r}, output {final_output}")
    n = client.messages.count_tokens(model=model, messages=messages)
    check(start_input == n.input_tokens, f"message_start input_tokens {start_input} vs count_tokens {n.input_tokens}")
    print(f"create(stream=True): {len(names)} events, message_start input_tokens={start_input}")

    # The stream helper, to the end.
    with client.messages.stream(model=model, max_tokens=24, messages=messages) as s:
        streamed = "".join(s.text_stream)
        final = s.get_final_message()
    check(final.content and final.content[0].text == streamed, f"final {final.content} vs {streamed!r}")
    check(final.stop_reason in ("end_turn", "max_tokens"), f"final stop_reason {final.stop_reason}")
    print(f"messages.stream: get_final_message {len(streamed)} chars, stop_reason={final.stop_reason}")

    # Typed errors.
    try:
        client.messages.create(model="nope", max_tokens=8, messages=messages)
        raise AssertionError("an unknown model was answered")
    except anthropic.NotFoundError as e:
        check(e.status_code == 404 and e.body["error"]["type"] == "not_found_error", f"404 body: {e.body}")
    try:
        client.messages.create(model=model, max_tokens=8, messages=[])
        raise AssertionError("empty messages were answered")
    except anthropic.BadRequestError as e:
        check(e.body["error"]["type"] == "invalid_request_error", f"400 body: {e.body}")
    print("errors: NotFoundError 404, BadRequestError 400")


if __name__ == "__main__":
    main()
