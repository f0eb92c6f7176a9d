"""Request-fidelity cases: named OpenAI requests and a runner that records what reaches the worker.

Each case is one chat or completions request that sets one field (or a few related fields) on
top of a plain baseline; its prompt carries a unique marker (`Case <name>`). The runner sends
the cases one at a time, exactly as written (except "{{instance_id}}", replaced by the
worker's instance id from the frontend's /health), to a frontend in front of
scripts/fidelity_worker.py, waits for each answer, and attributes every line the worker
appended to its record file meanwhile to that case. OUT.json holds, per case: the request,
the HTTP status, the response body (JSON, or the SSE events in order plus the stream text),
the worker request(s) recorded for it (parsed, and as recorded, in the frontend's key
order), and (with --model-path) their token ids decoded.

To make two runs, or two frontends, comparable with a plain diff: response ids, `created`,
timings, request ids and instance ids are replaced by placeholders; the annotation events
that open a stream are sorted by name and one-choice chunks are grouped by choice index
(Dynamo 1.6.1 sends the former in no fixed order and interleaves the streams of a batch of
prompts as tokens arrive); several worker requests of one case are sorted.

Usage:
  fidelity_cases.py --url http://127.0.0.1:PORT --record FILE --out OUT.json
                    [--model qwen3] [--model-path DIR] [--only NAME ...]
  fidelity_cases.py --list
  fidelity_cases.py --diff OUT.json [--prompts] [NAME ...]
      per case: where each worker request differs from its baseline's (chat_baseline or
      completions_baseline); token_ids and mdc_sum are left out (--prompts: the decoded
      prompt of each worker request).
  fidelity_cases.py --show OUT.json [NAME ...]
      per case: the request, the response (or the stream text), the worker requests as
      recorded and their decoded prompts.
"""

import argparse
import http.client
import json
import os
import re
import sys
import time
import urllib.parse

CHAT = "/v1/chat/completions"
COMPLETIONS = "/v1/completions"

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Get the weather in a city",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}},
                "required": ["city"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Get the time in a timezone",
            "parameters": {
                "type": "object",
                "properties": {"tz": {"type": "string"}, "utc": {"type": "boolean"}},
            },
        },
    },
]

TOOL_CALL = {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}

SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "age": {"type": "integer"}},
    "required": ["name", "age"],
    "additionalProperties": False,
}

GRAMMAR = 'root ::= "yes" | "no"'


def user(name, text=None):
    return [{"role": "user", "content": text or f"Case {name}: say hello"}]


def chat(name, messages=None, headers=None, **fields):
    body = {"model": "qwen3", "messages": user(name) if messages is None else messages}
    body.update(fields)
    return {"name": name, "path": CHAT, "body": body, "headers": headers or {}}


def completion(name, prompt=None, headers=None, **fields):
    body = {"model": "qwen3", "prompt": prompt if prompt is not None else f"Case {name}: say hello"}
    body.update(fields)
    return {"name": name, "path": COMPLETIONS, "body": body, "headers": headers or {}}


def annotated(name, path, annotations, stream):
    maker = chat if path == CHAT else completion
    fields = {"nvext": {"annotations": annotations}}
    if stream:
        fields["stream"] = True
    return maker(name, **fields)


CASES = [
    # --- baselines -------------------------------------------------------------------------
    chat("chat_baseline"),
    completion("completions_baseline"),
    chat("chat_baseline_stream", stream=True),
    completion("completions_baseline_stream", stream=True),
    # --- sampling ----------------------------------------------------------------------------
    chat("chat_temperature", temperature=0.7),
    chat("chat_temperature_zero", temperature=0),
    chat("chat_top_p", top_p=0.9),
    chat("chat_top_k", top_k=20),
    chat("chat_min_p", min_p=0.05),
    chat("chat_seed", seed=42),
    chat("chat_presence_frequency_penalty", presence_penalty=0.5, frequency_penalty=0.25),
    chat("chat_repetition_penalty", repetition_penalty=1.1),
    chat("chat_length_penalty", length_penalty=0.8),
    chat("chat_use_beam_search", use_beam_search=True),
    completion("completions_sampling", temperature=0.5, top_p=0.8, top_k=5, min_p=0.1, seed=7,
               presence_penalty=0.1, frequency_penalty=0.2, repetition_penalty=1.05),
    chat("chat_n2", n=2),
    chat("chat_n2_stream", n=2, stream=True),
    chat("chat_n2_stream_usage", n=2, stream=True, stream_options={"include_usage": True}),
    completion("completions_n2", n=2),
    completion("completions_n2_stream", n=2, stream=True),
    completion("completions_best_of", best_of=2),
    completion("completions_best_of_n", n=2, best_of=3),
    chat("chat_best_of", best_of=2),
    chat("chat_logit_bias", logit_bias={"21927": 5, "1879": -100}),
    completion("completions_logit_bias", logit_bias={"21927": 5}),
    chat("chat_user", user="user-1234"),
    chat("chat_nvext_greed_sampling", nvext={"greed_sampling": True}),
    chat("chat_nvext_top_k_deprecated", nvext={"top_k": 3}),
    # --- stop conditions ---------------------------------------------------------------------
    chat("chat_max_tokens", max_tokens=5),
    chat("chat_max_completion_tokens", max_completion_tokens=6),
    chat("chat_max_tokens_and_max_completion_tokens", max_tokens=5, max_completion_tokens=7),
    completion("completions_max_tokens", max_tokens=5),
    chat("chat_min_tokens", min_tokens=3),
    completion("completions_min_tokens", min_tokens=3),
    chat("chat_stop_string", stop="world"),
    chat("chat_stop_list", stop=["xyz", "world"]),
    chat("chat_stop_token_ids_in_stop", stop=[1879, 13]),
    completion("completions_stop_list", stop=["xyz", "world"]),
    completion("completions_stop_token_ids_in_stop", stop=[1879]),
    chat("chat_stop_token_ids", stop_token_ids=[1879, 13]),
    completion("completions_stop_token_ids", stop_token_ids=[1879]),
    chat("chat_ignore_eos", ignore_eos=True),
    chat("chat_ignore_eos_with_stop", ignore_eos=True, stop=["xyz"], stop_token_ids=[13]),
    chat("chat_nvext_ignore_eos_deprecated", nvext={"ignore_eos": True}),
    chat("chat_include_stop_str_in_output", stop=["world"], include_stop_str_in_output=True),
    chat("chat_nvext_max_thinking_tokens", nvext={"max_thinking_tokens": 10}),
    chat("chat_thinking_token_budget", thinking_token_budget=12),
    # --- output options ----------------------------------------------------------------------
    chat("chat_skip_special_tokens_false", skip_special_tokens=False),
    completion("completions_skip_special_tokens_false", skip_special_tokens=False),
    chat("chat_logprobs", logprobs=True),
    chat("chat_logprobs_top_logprobs", logprobs=True, top_logprobs=3),
    chat("chat_top_logprobs_without_logprobs", top_logprobs=3),
    chat("chat_logprobs_false", logprobs=False, top_logprobs=2),
    completion("completions_logprobs", logprobs=2),
    completion("completions_logprobs_zero", logprobs=0),
    completion("completions_echo", echo=True),
    completion("completions_echo_stream", echo=True, stream=True),
    completion("completions_echo_logprobs", echo=True, logprobs=1),
    chat("chat_prompt_logprobs", prompt_logprobs=1),
    completion("completions_prompt_logprobs", prompt_logprobs=2),
    chat("chat_return_tokens_as_token_ids", return_tokens_as_token_ids=True, logprobs=True),
    completion("completions_return_tokens_as_token_ids", return_tokens_as_token_ids=True, logprobs=1),
    chat("chat_detokenize_false", detokenize=False),
    chat("chat_stream_include_usage", stream=True, stream_options={"include_usage": True}),
    completion("completions_stream_include_usage", stream=True, stream_options={"include_usage": True}),
    chat("chat_stream_continuous_usage", stream=True,
         stream_options={"include_usage": True, "continuous_usage_stats": True}),
    chat("chat_stream_options_without_stream", stream_options={"include_usage": True}),
    # --- structured output -------------------------------------------------------------------
    chat("chat_response_format_text", response_format={"type": "text"}),
    chat("chat_response_format_json_object", response_format={"type": "json_object"}),
    chat("chat_response_format_json_schema", response_format={
        "type": "json_schema",
        "json_schema": {"name": "person", "schema": SCHEMA, "strict": True}}),
    chat("chat_response_format_json_schema_no_schema", response_format={
        "type": "json_schema", "json_schema": {"name": "person"}}),
    chat("chat_response_format_structural_tag", response_format={
        "type": "structural_tag",
        "structures": [{"begin": "<f>", "schema": SCHEMA, "end": "</f>"}],
        "triggers": ["<f>"]}),
    completion("completions_response_format_json_object", response_format={"type": "json_object"}),
    chat("chat_guided_json", guided_json=SCHEMA),
    chat("chat_guided_json_string", guided_json=json.dumps(SCHEMA)),
    completion("completions_guided_json", guided_json=SCHEMA),
    chat("chat_guided_regex", guided_regex="[a-z]{3}"),
    chat("chat_guided_choice", guided_choice=["yes", "no"]),
    completion("completions_guided_choice", guided_choice=["yes", "no"]),
    chat("chat_guided_grammar", guided_grammar=GRAMMAR),
    chat("chat_guided_decoding_backend", guided_json=SCHEMA, guided_decoding_backend="xgrammar"),
    chat("chat_guided_whitespace_pattern", guided_json=SCHEMA, guided_whitespace_pattern=r"[ ]?"),
    chat("chat_guided_decoding_backend_alone", guided_decoding_backend="xgrammar"),
    chat("chat_response_format_and_guided_json", response_format={"type": "json_object"},
         guided_json=SCHEMA),
    chat("chat_structural_tag_field", structural_tag=json.dumps({
        "structures": [{"begin": "<f>", "schema": SCHEMA, "end": "</f>"}], "triggers": ["<f>"]})),
    # --- tools -------------------------------------------------------------------------------
    chat("chat_tools", tools=TOOLS),
    chat("chat_tool_choice_auto", tools=TOOLS, tool_choice="auto"),
    chat("chat_tool_choice_none", tools=TOOLS, tool_choice="none"),
    chat("chat_tool_choice_required", tools=TOOLS, tool_choice="required"),
    chat("chat_tool_choice_named", tools=TOOLS,
         tool_choice={"type": "function", "function": {"name": "get_time"}}),
    chat("chat_tool_choice_named_missing", tools=TOOLS,
         tool_choice={"type": "function", "function": {"name": "search"}}),
    chat("chat_tool_choice_required_no_tools", tool_choice="required"),
    chat("chat_parallel_tool_calls_false", tools=TOOLS, parallel_tool_calls=False),
    chat("chat_tool_choice_required_parallel_false", tools=TOOLS, tool_choice="required",
         parallel_tool_calls=False),
    chat("chat_tool_choice_required_no_parameters", tool_choice="required",
         tools=[{"type": "function", "function": {"name": "ping"}}]),
    chat("chat_tool_choice_named_no_parameters", tools=[{"type": "function", "function": {"name": "ping"}}],
         tool_choice={"type": "function", "function": {"name": "ping"}}),
    chat("chat_tool_strict", tools=[{**TOOLS[0], "function": {**TOOLS[0]["function"], "strict": True}}],
         tool_choice="required"),
    chat("chat_functions_legacy", functions=[TOOLS[0]["function"]], function_call="auto"),
    # --- chat template -----------------------------------------------------------------------
    chat("chat_template_args", chat_template_args={"enable_thinking": False}),
    chat("chat_template_kwargs", chat_template_kwargs={"enable_thinking": False}),
    chat("chat_thinking_true", thinking=True),
    chat("chat_thinking_disabled", thinking={"type": "disabled"}),
    chat("chat_thinking_bad", thinking={"type": "sometimes"}),
    chat("chat_reasoning_effort", reasoning_effort="low"),
    chat("chat_reasoning_effort_none", reasoning_effort="none"),
    chat("chat_add_generation_prompt_false", add_generation_prompt=False),
    chat("chat_continue_final_message", add_generation_prompt=False, continue_final_message=True,
         messages=user("chat_continue_final_message") + [
             {"role": "assistant", "content": "Sure, here"}]),
    completion("completions_add_generation_prompt", add_generation_prompt=True),
    chat("chat_system_message", messages=[{"role": "system", "content": "You are terse."}]
         + user("chat_system_message")),
    chat("chat_developer_message", messages=[{"role": "developer", "content": "Developer says be terse."}]
         + user("chat_developer_message")),
    chat("chat_content_one_text_part", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Case chat_content_one_text_part: say hello"}]}]),
    chat("chat_content_two_text_parts", messages=[{"role": "user", "content": [
        {"type": "text", "text": "Case chat_content_two_text_parts: first part."},
        {"type": "text", "text": "Second part."}]}]),
    chat("chat_system_content_parts", messages=[{"role": "system", "content": [
        {"type": "text", "text": "System part one."}, {"type": "text", "text": "System part two."}]}]
         + user("chat_system_content_parts")),
    chat("chat_multi_turn", messages=user("chat_multi_turn") + [
        {"role": "assistant", "content": "Hello!"}, {"role": "user", "content": "Again."}]),
    chat("chat_tool_result_turn", tools=TOOLS, messages=user("chat_tool_result_turn") + [
        {"role": "assistant", "content": "", "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
    chat("chat_tool_result_turn_null_content", tools=TOOLS, messages=user("chat_tool_result_turn_null_content") + [
        {"role": "assistant", "content": None, "tool_calls": [TOOL_CALL]},
        {"role": "tool", "tool_call_id": "call_1", "content": "sunny"}]),
    chat("chat_mm_processor_kwargs", mm_processor_kwargs={"num_crops": 4}),
    chat("chat_media_io_kwargs", media_io_kwargs={"video": {"num_frames": 4}}),
    # --- nvext -------------------------------------------------------------------------------
    annotated("chat_annotations", CHAT, ["formatted_prompt", "token_ids"], False),
    annotated("chat_annotations_stream", CHAT, ["formatted_prompt", "token_ids"], True),
    annotated("completions_annotations", COMPLETIONS, ["formatted_prompt", "token_ids"], False),
    annotated("completions_annotations_stream", COMPLETIONS, ["formatted_prompt", "token_ids"], True),
    annotated("chat_annotation_request_id_stream", CHAT, ["request_id"], True),
    annotated("chat_annotation_llm_metrics_stream", CHAT, ["llm_metrics"], True),
    annotated("chat_annotation_worker_id_stream", CHAT, ["worker_id"], True),
    annotated("chat_annotation_timing_stream", CHAT, ["timing"], True),
    annotated("chat_annotation_query_instance_id_stream", CHAT, ["query_instance_id:"], True),
    annotated("chat_annotation_query_instance_id", CHAT, ["query_instance_id:"], False),
    annotated("chat_annotations_other", CHAT, ["request_id", "llm_metrics", "worker_id"], False),
    annotated("completions_annotations_other_stream", COMPLETIONS, ["request_id", "llm_metrics"], True),
    # "{{instance_id}}" is replaced by the worker's instance id (from the frontend's /health).
    chat("chat_nvext_backend_instance_id", nvext={"backend_instance_id": "{{instance_id}}"}),
    chat("chat_nvext_backend_instance_id_unknown", nvext={"backend_instance_id": 1}),
    chat("chat_nvext_token_data", nvext={"backend_instance_id": "{{instance_id}}",
                                         "token_data": [4207, 7162, 3950, 14151, 1156]}),
    chat("chat_nvext_worker_ids", nvext={"prefill_worker_id": "{{instance_id}}",
                                         "decode_worker_id": "{{instance_id}}"}),
    chat("chat_nvext_dp_rank", nvext={"dp_rank": 0, "prefill_dp_rank": 0}),
    chat("chat_header_worker_instance_id", headers={"x-worker-instance-id": "{{instance_id}}"}),
    chat("chat_nvext_routing_constraints", nvext={"routing_constraints": {"required_taints": []}}),
    chat("chat_nvext_routing_constraints_taint", nvext={"routing_constraints": {"required_taints": ["gpu"]}}),
    chat("chat_nvext_router", nvext={"router": {"ttft_target": 100}}),
    chat("chat_nvext_metadata_upload_empty", nvext={"metadata_upload": {"url": ""}}),
    chat("chat_nvext_agent_hints_more", nvext={"agent_hints": {"speculative_prefill": False,
                                                               "latency_sensitivity": 0.5}}),
    chat("chat_nvext_extra_fields", nvext={"extra_fields": ["worker_id", "timing"]}),
    chat("chat_nvext_extra_fields_stream", stream=True, nvext={"extra_fields": ["worker_id", "timing"]}),
    chat("chat_nvext_use_raw_prompt", nvext={"use_raw_prompt": True}),
    completion("completions_nvext_use_raw_prompt", nvext={"use_raw_prompt": True}),
    chat("chat_nvext_agent_hints", nvext={"agent_hints": {"priority": 5, "osl": 32}}),
    chat("chat_nvext_cache_salt", nvext={"cache_salt": "salt-nvext"}),
    chat("chat_nvext_request_timestamp_ms", nvext={"request_timestamp_ms": 1234.5}),
    chat("chat_nvext_unknown_field", nvext={"no_such_field": 1}),
    chat("chat_cache_salt", cache_salt="salt-1"),
    chat("chat_allowed_token_ids", allowed_token_ids=[21927, 1879]),
    chat("chat_bad_words_token_ids", bad_words_token_ids=[[1879]]),
    chat("chat_logprob_token_ids", logprob_token_ids=[21927], logprobs=True),
    completion("completions_passthrough", cache_salt="salt-2", allowed_token_ids=[21927],
               bad_words_token_ids=[[1879]], detokenize=True),
    # --- OpenAI fields Dynamo reads without using, and unknown fields -------------------------
    chat("chat_openai_extras", store=False, metadata={"k": "v"}, service_tier="auto",
         modalities=["text"]),
    chat("chat_prediction", prediction={"type": "content", "content": "Hello world"}),
    chat("chat_web_search_options", web_search_options={}),
    chat("chat_unknown_field", foo_bar=1),
    chat("chat_truncate_prompt_tokens", truncate_prompt_tokens=2),
    completion("completions_suffix", suffix="!"),
    completion("completions_user", user="user-1234"),
    completion("completions_unknown_field", foo_bar=1),
    # --- prompts -----------------------------------------------------------------------------
    completion("completions_prompt_token_ids",  # "Case completions_prompt_token_ids: say hello"
               prompt=[4207, 3459, 908, 61421, 6458, 8077, 25, 1977, 23811]),
    completion("completions_prompt_list_one", prompt=["Case completions_prompt_list_one: say hello"]),
    completion("completions_batch_strings",
               prompt=["Case completions_batch_strings: first", "Case completions_batch_strings: second"]),
    completion("completions_batch_strings_stream", stream=True,
               prompt=["Case completions_batch_strings_stream: first",
                       "Case completions_batch_strings_stream: second"]),
    completion("completions_batch_token_ids",  # "Case batch token ids first" / "... second"
               prompt=[[4207, 7162, 3950, 14151, 1156], [4207, 7162, 3950, 14151, 2086]]),
    completion("completions_batch_token_ids_stream", stream=True,
               prompt=[[4207, 7162, 3950, 14151, 4269, 1156], [4207, 7162, 3950, 14151, 4269, 2086]]),
    completion("completions_batch_n2", n=2,
               prompt=["Case completions_batch_n2: first", "Case completions_batch_n2: second"]),
    completion("completions_batch_echo", echo=True,
               prompt=["Case completions_batch_echo: first", "Case completions_batch_echo: second"]),
    completion("completions_batch_stream_usage", stream=True, stream_options={"include_usage": True},
               prompt=["Case completions_batch_stream_usage: first",
                       "Case completions_batch_stream_usage: second"]),
    completion("completions_prompt_special_tokens",
               prompt="<|im_start|>user\nCase completions_prompt_special_tokens<|im_end|>\n"),
    completion("completions_empty_prompt", prompt=""),
    chat("chat_empty_messages", messages=[]),
]


# --- running ---------------------------------------------------------------------------------

INSTANCE = "{{instance_id}}"
# Values that change from run to run, replaced by placeholders (instance ids are handled apart).
VOLATILE_KEYS = {"request_received_ms", "prefill_wait_time_ms", "prefill_time_ms", "ttft_ms",
                 "total_time_ms", "decode_time_ms", "kv_transfer_ms"}
UUID = r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}"
VOLATILE_RAW = [
    (re.compile(r'"id":"(chatcmpl|cmpl)-%s' % UUID), r'"id":"\1-<id>'),
    (re.compile(r'"created":\d+'), '"created":"<created>"'),
    (re.compile(r'"(%s)":[-+0-9.eE]+' % "|".join(sorted(VOLATILE_KEYS))), r'"\1":"<num>"'),
    (re.compile(r'(event: request_id\r?\n: )"[^"\r\n]*"'), r'\1"<request-id>"'),
]


class Normalizer:
    def __init__(self, instance_ids):
        self.instance_ids = set(instance_ids)

    def value(self, value, key=None):
        """Replace response ids, creation times, timings and instance ids by placeholders."""
        if isinstance(value, dict):
            return {k: self.value(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v) for v in value]
        if isinstance(value, bool):
            return value
        if key == "id" and isinstance(value, str):
            return re.sub(r"^(chatcmpl|cmpl)-%s" % UUID, r"\1-<id>", value)
        if key == "created" and isinstance(value, int):
            return "<created>"
        if key in VOLATILE_KEYS and isinstance(value, (int, float)):
            return "<num>"
        if isinstance(value, int) and value in self.instance_ids:
            return "<instance-id>"
        if isinstance(value, str) and value in {str(i) for i in self.instance_ids}:
            return "<instance-id>"
        return value

    def text(self, text):
        for pattern, repl in VOLATILE_RAW:
            text = pattern.sub(repl, text)
        for iid in self.instance_ids:
            text = re.sub(r'"?\b%d\b"?' % iid, '"<instance-id>"', text)
        return text


def choice_index(block):
    """The choice index of an SSE data block with exactly one choice, else None."""
    if not block.startswith("data: {"):
        return None
    try:
        choices = json.loads(block[len("data: "):]).get("choices")
    except ValueError:
        return None
    return choices[0].get("index") if isinstance(choices, list) and len(choices) == 1 else None


def stable_stream(text):
    """The SSE stream with the parts whose order depends on timing put in a fixed order.

    * The annotation events (event + comment, no data) before the first data event are sorted
      by name: Dynamo 1.6.1 sends formatted_prompt and token_ids in no fixed order.
    * The one-choice chunks are grouped by choice index (their order within an index kept):
      the streams of a batch of prompts are interleaved as their tokens arrive.
    Anything else (the usage chunk with no choices, [DONE]) stays after them, in order.
    """
    blocks = [b for b in re.split(r"(?<=\n)\n", text) if b]
    lead = 0
    while lead < len(blocks) and blocks[lead].startswith("event:") and "\ndata:" not in blocks[lead]:
        lead += 1
    rest = blocks[lead:]
    chunks = [b for b in rest if choice_index(b) is not None]
    others = [b for b in rest if choice_index(b) is None]
    chunks.sort(key=choice_index)
    return "\n".join(sorted(blocks[:lead]) + chunks + others) + ("\n" if blocks else "")


def parse_sse(text, norm):
    """SSE events in order: each a dict of its fields (data parsed as JSON when it is)."""
    events = []
    for block in re.split(r"\r?\n\r?\n", text):
        if not block.strip():
            continue
        event = {}
        for line in re.split(r"\r?\n", block):
            if line.startswith(":"):
                event.setdefault("comment", []).append(line[1:].lstrip(" "))
                continue
            field, _, val = line.partition(":")
            val = val[1:] if val.startswith(" ") else val
            if field == "data":
                event["data"] = event["data"] + "\n" + val if "data" in event else val
            else:
                event[field] = val
        if "data" in event:
            try:
                event["data"] = json.loads(event["data"])
            except ValueError:
                pass
        if event.get("event") == "request_id" and "comment" in event:
            event["comment"] = ['"<request-id>"']
        events.append(norm.value(event))
    return events


def exchange(url, method, path, body=None, headers=None, timeout=30.0):
    parts = urllib.parse.urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=timeout)
    try:
        payload = None if body is None else json.dumps(body).encode()
        hdrs = {"Accept": "*/*"}
        if payload is not None:
            hdrs["Content-Type"] = "application/json"
        hdrs.update(headers or {})
        conn.request(method, path, body=payload, headers=hdrs)
        resp = conn.getresponse()
        data = resp.read()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, data.decode("utf-8", errors="replace")
    finally:
        conn.close()


def instance_ids(url):
    """The generate endpoint instances the frontend knows (its /health), in order."""
    try:
        _, _, text = exchange(url, "GET", "/health", timeout=5)
        ids = [i["instance_id"] for i in json.loads(text).get("instances", [])
               if i.get("endpoint") == "generate"]
    except (OSError, ValueError, KeyError, TypeError):
        ids = []
    return ids


def substitute(value, instance):
    if isinstance(value, dict):
        return {k: substitute(v, instance) for k, v in value.items()}
    if isinstance(value, list):
        return [substitute(v, instance) for v in value]
    if value == INSTANCE:
        return instance
    return value


def read_new_lines(path, offset):
    """Complete lines appended to path since offset, and the new offset."""
    if not os.path.exists(path):
        return [], offset
    with open(path, "rb") as f:
        f.seek(offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    lines = [line.decode() for line in data[:end].splitlines() if line.strip()]
    return lines, offset + end


def run_case(case, args, tokenizer, offset, instance, norm):
    body = dict(case["body"])
    if "model" in body:
        body["model"] = args.model
    body = substitute(body, instance)
    headers = {k: str(v) for k, v in substitute(case.get("headers") or {}, instance).items()}
    result = {"name": case["name"], "path": case["path"], "request": norm.value(body)}
    if headers:
        result["request_headers"] = norm.value(headers)
    try:
        status, resp_headers, text = exchange(args.url, "POST", case["path"], body, headers, args.timeout)
    except Exception as e:  # a reset connection or a timeout is an observation too
        status, resp_headers, text = None, {}, ""
        result["transport_error"] = f"{type(e).__name__}: {e}"
    result["status"] = status
    result["content_type"] = resp_headers.get("content-type")
    if "text/event-stream" in (resp_headers.get("content-type") or ""):
        text = stable_stream(text)
        result["events"] = parse_sse(text, norm)
        result["raw"] = norm.text(text)
    else:
        try:
            result["response"] = norm.value(json.loads(text))
        except ValueError:
            result["response_text"] = norm.text(text)
    # The worker records a request before it answers; allow a moment for late arrivals
    # (a request the frontend sends after the client's answer is complete).
    time.sleep(args.settle)
    lines, offset = read_new_lines(args.record, offset)
    # Several requests of one case (a batch of prompts) arrive in no fixed order: sort them.
    lines.sort(key=lambda line: json.dumps(json.loads(line), sort_keys=True))
    records = [json.loads(line) for line in lines]
    result["worker_requests"] = [norm.value(r) for r in records]
    # The same requests as recorded (the frontend's key order), for byte-level comparisons.
    result["worker_lines"] = [norm.text(line) for line in lines]
    if tokenizer is not None:
        result["worker_prompts"] = [
            tokenizer.decode(r["token_ids"], skip_special_tokens=False)
            if isinstance(r.get("token_ids"), list) else None
            for r in records
        ]
    return result, offset


def load_tokenizer(model_path):
    if not model_path:
        return None
    from tokenizers import Tokenizer
    return Tokenizer.from_file(os.path.join(model_path, "tokenizer.json"))


def run(args):
    names = {c["name"] for c in CASES}
    assert len(names) == len(CASES), "case names must be unique"
    missing = set(args.only or []) - names
    if missing:
        sys.exit(f"unknown cases: {sorted(missing)}")
    cases = [c for c in CASES if not args.only or c["name"] in args.only]
    tokenizer = load_tokenizer(args.model_path)
    ids = instance_ids(args.url)
    norm = Normalizer(ids)
    instance = ids[0] if ids else 0
    offset = os.path.getsize(args.record) if os.path.exists(args.record) else 0
    results = []
    for case in cases:
        result, offset = run_case(case, args, tokenizer, offset, instance, norm)
        results.append(result)
        print(f"{case['name']}: {result['status']}, {len(result['worker_requests'])} worker request(s)",
              file=sys.stderr)
    out = {"model": args.model, "cases": results}
    with open(args.out, "w", encoding="utf-8") as f:
        json.dump(out, f, indent=1, sort_keys=True, ensure_ascii=False)
        f.write("\n")


# --- comparing -------------------------------------------------------------------------------

def differences(base, mine, prefix=""):
    """(path, value) for every place mine differs from base; descends only into two dicts."""
    if isinstance(base, dict) and isinstance(mine, dict):
        out = []
        for key in sorted(set(base) | set(mine)):
            path = f"{prefix}.{key}" if prefix else key
            if key not in mine:
                out.append((path, "<absent>"))
            elif key not in base:
                out.append((path, mine[key]))
            else:
                out.extend(differences(base[key], mine[key], path))
        return out
    return [] if base == mine else [(prefix, mine)]


def diff(args):
    with open(args.diff, encoding="utf-8") as f:
        cases = {c["name"]: c for c in json.load(f)["cases"]}
    ignore = {"token_ids", "mdc_sum"}
    for name, case in cases.items():
        if args.names and name not in args.names:
            continue
        base_name = "chat_baseline" if case["path"] == CHAT else "completions_baseline"
        base = (cases.get(base_name, {}).get("worker_requests") or [{}])[0]
        print(f"== {name}: status {case['status']}, {len(case['worker_requests'])} worker request(s)")
        if case["status"] != 200:
            print("   response:", json.dumps(case.get("response", case.get("response_text"))))
        for i, req in enumerate(case["worker_requests"]):
            for path, value in differences(base, req):
                if path.split(".")[0] not in ignore:
                    print(f"   [{i}] {path} = {json.dumps(value, sort_keys=True)}")
            if args.prompts and case.get("worker_prompts"):
                print(f"   [{i}] prompt: {json.dumps(case['worker_prompts'][i], ensure_ascii=False)}")


def show(args):
    with open(args.show, encoding="utf-8") as f:
        cases = [c for c in json.load(f)["cases"] if not args.names or c["name"] in args.names]
    for case in cases:
        print(f"== {case['name']}: {case['path']} status {case['status']}")
        print("request:", json.dumps(case["request"]))
        if "raw" in case:
            print("stream:")
            print(case["raw"], end="")
        else:
            print("response:", json.dumps(case.get("response", case.get("response_text"))))
        for i, line in enumerate(case["worker_lines"]):
            print(f"worker request [{i}]: {line}")
            if case.get("worker_prompts"):
                print(f"worker prompt [{i}]: {json.dumps(case['worker_prompts'][i], ensure_ascii=False)}")
        print()


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--url")
    p.add_argument("--record")
    p.add_argument("--out")
    p.add_argument("--model", default="qwen3")
    p.add_argument("--model-path", default=None, help="decode the worker's token ids with this tokenizer")
    p.add_argument("--only", nargs="*", default=None, help="run only these cases")
    p.add_argument("--timeout", type=float, default=30.0)
    p.add_argument("--settle", type=float, default=0.3, help="seconds to wait for late worker records")
    p.add_argument("--list", action="store_true", help="print the case names")
    p.add_argument("--diff", metavar="OUT_JSON", help="compare worker requests with the baselines")
    p.add_argument("--prompts", action="store_true", help="with --diff: print the decoded prompts")
    p.add_argument("--show", metavar="OUT_JSON", help="print the named cases: response and worker requests")
    p.add_argument("names", nargs="*", help="with --diff or --show: only these cases")
    args = p.parse_args()
    if args.list:
        for case in CASES:
            print(case["name"])
    elif args.diff:
        diff(args)
    elif args.show:
        show(args)
    else:
        if not (args.url and args.record and args.out):
            p.error("--url, --record and --out are required")
        run(args)


if __name__ == "__main__":
    main()
