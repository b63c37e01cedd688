"""OpenAI's Responses API on `llmdeck serve`, driven by the official `openai` client's
`responses` resource.

A real server on loopback over a real worker running the scripted engine (a reply with
<think> reasoning, a sentence and a hermes call to get_weather): the client must get a
reasoning item, a message and a function_call, whole and streamed; the call's output
goes back with previous_response_id and reaches the model; hostile bodies come back in
OpenAI's error shape.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from core.server.responses import ConversationStore
from tests.fixtures.serve import ServerThread, scripted_spec, served
from tests.helpers.http_raw import exchange, post_bytes

WEATHER = {"type": "function", "name": "get_weather", "description": "Current weather in a city.",
           "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                          "required": ["city"]}}
ASK = "What is the weather in Paris?"


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(), tmp_path_factory.mktemp("responses-home"))


@pytest.fixture
def client(server: ServerThread) -> OpenAI:
    return OpenAI(base_url=server.url, api_key="unused", max_retries=0, timeout=30)


def test_a_response_has_reasoning_text_and_a_function_call(client: OpenAI) -> None:
    reply = client.responses.create(model="scripted", input=ASK, tools=[WEATHER],
                                    instructions="Answer briefly.")
    assert reply.status == "completed" and reply.object == "response"
    assert [item.type for item in reply.output] == ["reasoning", "message", "function_call"]
    assert reply.output[0].content[0].text == "The user wants the weather."
    assert reply.output_text == "I will look it up."
    call = reply.output[2]
    assert call.name == "get_weather" and json.loads(call.arguments) == {"city": "Paris"}
    assert call.call_id
    assert reply.usage.input_tokens > 0 and reply.usage.output_tokens > 0


def test_a_streamed_response_sends_the_documented_events(client: OpenAI) -> None:
    with client.responses.stream(model="scripted", input=ASK, tools=[WEATHER]) as stream:
        events = list(stream)
        final = stream.get_final_response()
    kinds = [e.type for e in events]
    assert kinds[:2] == ["response.created", "response.in_progress"]
    assert kinds[-1] == "response.completed"
    for kind in ("response.output_text.delta", "response.function_call_arguments.delta",
                 "response.reasoning_text.delta", "response.output_item.added",
                 "response.output_item.done", "response.function_call_arguments.done"):
        assert kind in kinds, kind
    text = "".join(e.delta for e in events if e.type == "response.output_text.delta")
    assert text == "I will look it up." == final.output_text
    arguments = "".join(e.delta for e in events if e.type == "response.function_call_arguments.delta")
    assert json.loads(arguments) == {"city": "Paris"}
    assert [e.sequence_number for e in events] == list(range(len(events)))


def test_a_function_call_round_trip_with_previous_response_id(client: OpenAI) -> None:
    first = client.responses.create(model="scripted", input=ASK, tools=[WEATHER])
    call = next(item for item in first.output if item.type == "function_call")

    def follow(result: str) -> openai.types.responses.Response:
        return client.responses.create(model="scripted", tools=[WEATHER],
                                       previous_response_id=first.id, input=[
                                           {"type": "function_call_output", "call_id": call.call_id,
                                            "output": result}])

    short, long = follow("Sunny."), follow("Sunny. " * 200)
    assert short.usage.input_tokens > first.usage.input_tokens  # the history came along
    assert long.usage.input_tokens - short.usage.input_tokens >= 300  # and the output reached it
    # the same round trip sent as items, without the stored history
    whole = client.responses.create(model="scripted", tools=[WEATHER], input=[
        {"role": "user", "content": ASK},
        {"type": "function_call", "call_id": call.call_id, "name": call.name,
         "arguments": call.arguments},
        {"type": "function_call_output", "call_id": call.call_id, "output": "Sunny."}])
    assert whole.status == "completed"


def test_max_output_tokens_makes_it_incomplete(client: OpenAI) -> None:
    reply = client.responses.create(model="scripted", input=ASK, max_output_tokens=3)
    assert reply.status == "incomplete"
    assert reply.incomplete_details.reason == "max_output_tokens"


def test_the_store_forgets_least_recently_used_first() -> None:
    store = ConversationStore(max_items=3, max_chars=10_000)
    for i in range(3):
        store.put(f"r{i}", [{"role": "user", "content": f"turn {i}"}])
    assert store.get("r0") is not None  # used: now the newest
    store.put("r3", [{"role": "user", "content": "turn 3"}])
    assert store.get("r1") is None and store.get("r0") is not None and len(store) == 3
    store.put("big", [{"role": "user", "content": "x" * 9_950}])  # the size bound too
    assert len(store) == 1 and store.get("big") is not None
    store.put("huge", [{"role": "user", "content": "x" * 20_000}])  # larger than it all
    assert store.get("huge") is None and store.get("big") is not None


# -- hostile input, answered in OpenAI's shape ------------------------------------------


def test_bad_bodies_are_refused_with_a_sentence(client: OpenAI) -> None:
    cases = [({"input": 5}, "input"),
             ({"input": [{"type": "item_reference", "id": "x"}]}, "item_reference"),
             ({"input": ASK, "tools": [{"type": "namespace", "name": "ns"}]}, "namespace"),
             ({"input": [{"role": "user", "content": [{"type": "input_file", "file_id": "f"}]}]},
              "input_file"),
             ({"input": ASK, "temperature": "warm"}, "temperature"),
             ({"input": ASK, "previous_response_id": "resp_never"}, "not found"),
             ({"input": ASK, "max_output_tokens": 2**40}, "max_output_tokens"),
             # accepted and dropped before: the model answered without the history
             ({"input": ASK, "conversation": "conv_123"}, "previous_response_id")]
    for extra, words in cases:
        with pytest.raises(openai.BadRequestError) as caught:
            client.responses.create(model="scripted", **extra)
        error = caught.value.body
        assert words in error["message"], error
        assert error["type"] == "invalid_request_error"


def test_deep_nesting_oversize_and_wrong_keys(server: ServerThread, client: OpenAI) -> None:
    deep: object = "x"
    for _ in range(200):
        deep = [deep]
    body = json.dumps({"model": "scripted", "input": deep}).encode()
    reply = exchange(server.handle.host, server.handle.port, post_bytes("/v1/responses", body))
    assert reply.status == 400 and "nested" in reply.json()["error"]["message"]
    huge = post_bytes("/v1/responses", b"{}", headers={"Content-Length": str(64 << 20)})
    reply = exchange(server.handle.host, server.handle.port, huge)
    assert reply.status == 413 and reply.json()["error"]["code"] == "request_too_large"
    assert client.responses.create(model="scripted", input=ASK).status == "completed"
