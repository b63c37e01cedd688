"""Anthropic's Messages API on `llmdeck serve`, driven by the official `anthropic` SDK.

A real server on loopback over a real worker running the scripted engine, whose reply
reasons (<think>), says a sentence and calls get_weather the hermes way: the SDK must see
a thinking block, a text block and a tool_use block, streamed as Anthropic's events and
in one message. Hostile bodies and wrong keys come back in Anthropic's error shape, and
the server answers the next request after them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import anthropic
import pytest

from core.server import ServerHandle
from core.server.anthropic import chat_body
from tests.fixtures.serve import ServerThread, scripted_spec, served
from tests.helpers.http_raw import exchange, post_bytes

WEATHER = {"name": "get_weather", "description": "Current weather in a city.",
           "input_schema": {"type": "object", "properties": {"city": {"type": "string"}},
                            "required": ["city"]}}
ASK = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(), tmp_path_factory.mktemp("anthropic-home"))


def _root(server: ServerThread) -> str:
    return server.url.removesuffix("/v1")  # the SDK adds /v1/messages itself


@pytest.fixture
def client(server: ServerThread) -> anthropic.Anthropic:
    return anthropic.Anthropic(base_url=_root(server), api_key="unused", max_retries=0, timeout=30)


def test_a_streamed_reply_has_thinking_text_and_a_tool_use_block(client: anthropic.Anthropic) -> None:
    with client.messages.stream(model="scripted", max_tokens=200, messages=ASK,
                                tools=[WEATHER]) as stream:
        text = "".join(stream.text_stream)
        final = stream.get_final_message()
    assert text == "I will look it up."
    assert [b.type for b in final.content] == ["thinking", "text", "tool_use"]
    assert final.content[0].thinking == "The user wants the weather."
    call = final.content[2]
    assert call.name == "get_weather" and call.input == {"city": "Paris"} and call.id
    assert final.stop_reason == "tool_use"
    assert final.usage.output_tokens > 0 and final.usage.input_tokens > 0


def test_the_raw_event_sequence_is_anthropics(client: anthropic.Anthropic) -> None:
    events = list(client.messages.create(model="scripted", max_tokens=200, messages=ASK,
                                         tools=[WEATHER], stream=True))
    kinds = [e.type for e in events]
    assert kinds[0] == "message_start" and kinds[-2:] == ["message_delta", "message_stop"]
    starts = [e.content_block.type for e in events if e.type == "content_block_start"]
    assert starts == ["thinking", "text", "tool_use"]
    assert kinds.count("content_block_start") == kinds.count("content_block_stop") == 3
    deltas = {e.delta.type for e in events if e.type == "content_block_delta"}
    assert {"thinking_delta", "text_delta", "input_json_delta", "signature_delta"} <= deltas
    assert events[-2].delta.stop_reason == "tool_use"


def test_a_reply_in_one_message(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model="scripted", max_tokens=200, messages=ASK, tools=[WEATHER],
                                   system="You answer briefly.")
    assert reply.type == "message" and reply.role == "assistant" and reply.model == "scripted"
    assert [b.type for b in reply.content] == ["thinking", "text", "tool_use"]
    assert reply.content[2].input == {"city": "Paris"}
    assert reply.stop_reason == "tool_use"


def test_thinking_turned_off_sends_no_thinking_block(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model="scripted", max_tokens=200, messages=ASK,
                                   thinking={"type": "disabled"})
    assert [b.type for b in reply.content] == ["text", "tool_use"]


def test_max_tokens_cuts_the_reply_and_says_so(client: anthropic.Anthropic) -> None:
    reply = client.messages.create(model="scripted", max_tokens=3, messages=ASK)
    assert reply.stop_reason == "max_tokens"


def test_a_stop_sequence_is_named_as_the_reason_streamed_and_not(
        client: anthropic.Anthropic) -> None:
    """Anthropic answers stop_reason "stop_sequence" with the string that matched (it was
    "end_turn" with stop_sequence null, so a client could not tell it from a finished turn)."""
    stops = ["never said", "look"]
    reply = client.messages.create(model="scripted", max_tokens=200, messages=ASK,
                                   stop_sequences=stops)
    assert [b.text for b in reply.content if b.type == "text"] == ["I will "]
    assert (reply.stop_reason, reply.stop_sequence) == ("stop_sequence", "look")
    events = list(client.messages.create(model="scripted", max_tokens=200, messages=ASK,
                                         stop_sequences=stops, stream=True))
    delta = next(e for e in events if e.type == "message_delta").delta
    assert (delta.stop_reason, delta.stop_sequence) == ("stop_sequence", "look")
    plain = client.messages.create(model="scripted", max_tokens=200, messages=ASK,
                                   stop_sequences=["never said"], thinking={"type": "disabled"})
    assert (plain.stop_reason, plain.stop_sequence) == ("tool_use", None)


def test_a_tool_round_trip_reaches_the_model(client: anthropic.Anthropic) -> None:
    """The tool_use goes back as history and the tool_result as the next user turn; a long
    result shows up in the prompt's token count, so it reached the worker."""
    first = client.messages.create(model="scripted", max_tokens=200, messages=ASK, tools=[WEATHER])
    call = next(b for b in first.content if b.type == "tool_use")

    def follow_up(result: str) -> anthropic.types.Message:
        return client.messages.create(model="scripted", max_tokens=200, tools=[WEATHER], messages=[
            *ASK,
            {"role": "assistant", "content": [b.model_dump(exclude_none=True) for b in first.content]},
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": call.id,
                                          "content": [{"type": "text", "text": result}]}]}])

    short, long = follow_up("Sunny."), follow_up("Sunny. " * 200)
    assert short.content and long.content
    assert long.usage.input_tokens - short.usage.input_tokens >= 300


def test_tool_blocks_become_the_chat_messages_the_template_renders() -> None:
    body = {"model": "m", "max_tokens": 5, "system": [{"type": "text", "text": "Be brief."}],
            "messages": [*ASK,
                         {"role": "assistant", "content": [
                             {"type": "thinking", "thinking": "hm", "signature": "x"},
                             {"type": "tool_use", "id": "toolu_1", "name": "get_weather",
                              "input": {"city": "Paris"}}]},
                         {"role": "user", "content": [
                             {"type": "tool_result", "tool_use_id": "toolu_1", "content": "Sunny",
                              "is_error": False},
                             {"type": "text", "text": "And tomorrow?"}]}],
            "tool_choice": {"type": "tool", "name": "get_weather"}, "tools": [WEATHER]}
    chat = chat_body(body)
    assert [m["role"] for m in chat["messages"]] == ["system", "user", "assistant", "tool", "user"]
    assert chat["messages"][2]["tool_calls"][0]["function"] == {"name": "get_weather",
                                                                "arguments": {"city": "Paris"}}
    assert chat["messages"][3] == {"role": "tool", "tool_call_id": "toolu_1", "content": "Sunny"}
    assert chat["tool_choice"] == {"type": "function", "function": {"name": "get_weather"}}
    assert chat["tools"][0]["function"]["parameters"] == WEATHER["input_schema"]


def test_count_tokens_counts_the_prompt(client: anthropic.Anthropic) -> None:
    short = client.messages.count_tokens(model="scripted", messages=ASK)
    long = client.messages.count_tokens(model="scripted", messages=[
        {"role": "user", "content": "word " * 400}], system="Be brief.")
    assert 0 < short.input_tokens < long.input_tokens


# -- hostile input, answered in Anthropic's shape --------------------------------------


def _anthropic_error(exc: anthropic.APIStatusError, status: int, kind: str, words: str) -> None:
    assert exc.status_code == status
    body = exc.response.json()
    assert body["type"] == "error" and body["error"]["type"] == kind, body
    assert words in body["error"]["message"], body


def test_wrong_types_are_refused_with_a_sentence(client: anthropic.Anthropic) -> None:
    cases = [({"messages": "hi"}, "messages"),
             ({"messages": [{"role": "system", "content": "x"}]}, "needs a user turn"),
             ({"messages": [{"role": "user", "content": [{"type": "document"}]}]}, "'document'"),
             ({"messages": ASK, "max_tokens": "many"}, "max_tokens"),
             ({"messages": ASK, "temperature": "hot"}, "temperature"),
             # accepted and dropped before: no MCP tool ran, and no word why
             ({"messages": ASK, "mcp_servers": [{"type": "url", "url": "https://x.example/mcp",
                                                 "name": "x"}]}, "'mcp_servers'")]
    for extra, words in cases:
        body = {"model": "scripted", "max_tokens": 10, **extra}
        with pytest.raises(anthropic.BadRequestError) as caught:
            client.post("/v1/messages", body=body, cast_to=object)
        _anthropic_error(caught.value, 400, "invalid_request_error", words)


def test_an_image_meets_the_same_image_checks_as_chat(client: anthropic.Anthropic) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    image = {"type": "image", "source": {"type": "base64", "media_type": "image/png", "data": png}}
    with pytest.raises(anthropic.BadRequestError) as caught:  # the scripted model is text-only
        client.messages.create(model="scripted", max_tokens=10, messages=[
            {"role": "user", "content": [image, {"type": "text", "text": "What is this?"}]}])
    _anthropic_error(caught.value, 400, "invalid_request_error", "cannot see images")
    by_url = {"type": "image", "source": {"type": "url", "url": "http://169.254.169.254/x.png"}}
    with pytest.raises(anthropic.BadRequestError) as caught:
        client.messages.create(model="scripted", max_tokens=10, messages=[
            {"role": "user", "content": [by_url]}])
    _anthropic_error(caught.value, 400, "invalid_request_error", "fetches nothing")


def test_an_unknown_model_is_a_not_found_error(client: anthropic.Anthropic) -> None:
    with pytest.raises(anthropic.NotFoundError) as caught:
        client.messages.create(model="claude-opus-9", max_tokens=10, messages=ASK)
    _anthropic_error(caught.value, 404, "not_found_error", "claude-opus-9")


def test_deep_nesting_and_oversize_bodies_are_refused_unread(server: ServerThread,
                                                            client: anthropic.Anthropic) -> None:
    deep: object = "x"
    for _ in range(200):
        deep = [deep]
    body = json.dumps({"model": "scripted", "max_tokens": 5,
                       "messages": [{"role": "user", "content": deep}]}).encode()
    reply = exchange(server.handle.host, server.handle.port, post_bytes("/v1/messages", body))
    assert reply.status == 400 and reply.json()["error"]["type"] == "invalid_request_error"
    assert "nested" in reply.json()["error"]["message"]
    huge = post_bytes("/v1/messages", b"{}", headers={"Content-Length": str(64 << 20)})
    reply = exchange(server.handle.host, server.handle.port, huge)
    assert reply.status == 413 and reply.json()["error"]["type"] == "request_too_large"
    # and the server still answers
    assert client.messages.create(model="scripted", max_tokens=200, messages=ASK).content


def test_the_key_is_taken_as_x_api_key_or_bearer_and_refused_in_anthropics_shape(
        server: ServerThread) -> None:
    handle = server.call(ServerHandle.start(server.runtime, "127.0.0.1", 0, api_key="s3cret"))
    root = handle.url.removesuffix("/v1")
    try:
        for wrong in (anthropic.Anthropic(base_url=root, api_key="nope", max_retries=0),
                      anthropic.Anthropic(base_url=root, auth_token="nope", max_retries=0)):
            with pytest.raises(anthropic.AuthenticationError) as caught:
                wrong.messages.create(model="scripted", max_tokens=10, messages=ASK)
            _anthropic_error(caught.value, 401, "authentication_error", "API key")
        raw = exchange(handle.host, handle.port, post_bytes("/v1/messages", b"{}"))
        assert raw.status == 401 and raw.json()["error"]["type"] == "authentication_error"
        for right in (anthropic.Anthropic(base_url=root, api_key="s3cret", max_retries=0),
                      anthropic.Anthropic(base_url=root, auth_token="s3cret", max_retries=0)):
            assert right.messages.create(model="scripted", max_tokens=200, messages=ASK).content
    finally:
        server.call(handle.stop())


# -- a real model: a forced call, streamed as the grammar decodes it ---------------------


@pytest.fixture(scope="module")
def tiny(tmp_path_factory: pytest.TempPathFactory) -> Iterator[anthropic.Anthropic]:
    from core.engines.base import ModelSpec
    from tests.fixtures.tool_models import build_tool_model_dir

    model = build_tool_model_dir(tmp_path_factory.mktemp("tiny-tools"))
    spec = ModelSpec(str(model), "mlx", context_size=1024,
                     options=(("max_concurrency", 2), ("warmup_batch_sizes", (1,))))
    for srv in served(spec, tmp_path_factory.mktemp("tiny-home"), served_name="tiny"):
        yield anthropic.Anthropic(base_url=_root(srv), api_key="x", max_retries=0, timeout=60)


@pytest.mark.slow
def test_a_forced_tool_use_streams_valid_input_from_a_real_model(tiny: anthropic.Anthropic) -> None:
    from tests.fixtures.tool_models import TOOLS, valid_arguments

    tools = [{"name": t["function"]["name"], "description": t["function"].get("description", ""),
              "input_schema": t["function"]["parameters"]} for t in TOOLS]
    with tiny.messages.stream(model="tiny", max_tokens=160, tools=tools,
                              tool_choice={"type": "tool", "name": "set_alarm"},
                              messages=[{"role": "user", "content": "Wake me at seven."}]) as stream:
        events = list(stream)
        final = stream.get_final_message()
    pieces = [e for e in events if e.type == "content_block_delta"
              and e.delta.type == "input_json_delta"]
    assert len(pieces) > 1, "the input arrives as it is decoded"
    [call] = [b for b in final.content if b.type == "tool_use"]
    assert call.name == "set_alarm" and valid_arguments("set_alarm", call.input), call.input


def test_a_wrong_method_or_path_is_answered_in_anthropics_shape(server: ServerThread) -> None:
    import httpx

    root = _root(server)
    for method, path, status in (("GET", "/v1/messages", 405),
                                 ("POST", "/v1/messages/batches", 404)):
        reply = httpx.request(method, root + path, json={})
        assert reply.status_code == status
        assert reply.json()["type"] == "error", reply.text
