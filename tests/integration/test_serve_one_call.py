"""`parallel_tool_calls: false` (OpenAI chat and Responses) and Anthropic's
`tool_choice.disable_parallel_tool_use` give at most one tool call, through each real
client, streamed and not; left on, both calls come. They were accepted and dropped.

The model is the scripted engine (real worker, real parser) writing two hermes calls.
"""

from __future__ import annotations

from collections.abc import Iterator

import anthropic
import openai
import pytest

from tests.fixtures.serve import ServerThread, scripted_spec, served

TWO_CALLS = ('Looking both up.<tool_call>{"name": "get_weather", "arguments": {"city": "Paris"}}'
             '</tool_call><tool_call>{"name": "get_weather", "arguments": {"city": "Rome"}}'
             '</tool_call>')
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "parameters": {"type": "object", "properties": {
        "city": {"type": "string"}}, "required": ["city"]}}}
ASK = [{"role": "user", "content": "Weather in Paris and Rome?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(reply=TWO_CALLS), tmp_path_factory.mktemp("one-call-home"))


@pytest.fixture
def client(server: ServerThread) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.url, api_key="x", max_retries=0, timeout=30)


def test_chat_gives_one_call_when_parallel_calls_are_off(client: openai.OpenAI) -> None:
    def calls(**kwargs: object) -> list[str]:
        reply = client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER],
                                               **kwargs)
        assert reply.choices[0].finish_reason == "tool_calls"
        return [c.function.arguments for c in reply.choices[0].message.tool_calls]

    assert len(calls()) == 2 and len(calls(parallel_tool_calls=True)) == 2
    [only] = calls(parallel_tool_calls=False)
    assert "Paris" in only  # the first one
    stream = client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER],
                                            parallel_tool_calls=False, stream=True)
    indices = {tc.index for chunk in stream if chunk.choices
               for tc in chunk.choices[0].delta.tool_calls or ()}
    assert indices == {0}
    with pytest.raises(openai.BadRequestError, match="parallel_tool_calls"):
        client.chat.completions.create(model="scripted", messages=ASK, tools=[WEATHER],
                                       extra_body={"parallel_tool_calls": "no"})


def test_responses_give_one_function_call_when_parallel_calls_are_off(
        client: openai.OpenAI) -> None:
    tools = [{"type": "function", **WEATHER["function"]}]
    both = client.responses.create(model="scripted", input="Weather?", tools=tools)
    one = client.responses.create(model="scripted", input="Weather?", tools=tools,
                                  parallel_tool_calls=False)
    assert [o.type for o in both.output].count("function_call") == 2
    assert [o.type for o in one.output].count("function_call") == 1
    assert one.parallel_tool_calls is False


def test_anthropic_gives_one_tool_use_when_parallel_use_is_off(server: ServerThread) -> None:
    client = anthropic.Anthropic(base_url=server.url.removesuffix("/v1"), api_key="x",
                                 max_retries=0, timeout=30)
    tools = [{"name": "get_weather", "input_schema": WEATHER["function"]["parameters"]}]
    both = client.messages.create(model="scripted", max_tokens=300, messages=ASK, tools=tools)
    assert [b.type for b in both.content].count("tool_use") == 2
    choice = {"type": "auto", "disable_parallel_tool_use": True}
    one = client.messages.create(model="scripted", max_tokens=300, messages=ASK, tools=tools,
                                 tool_choice=choice)
    assert [b.input for b in one.content if b.type == "tool_use"] == [{"city": "Paris"}]
    with client.messages.stream(model="scripted", max_tokens=300, messages=ASK, tools=tools,
                                tool_choice=choice) as stream:
        final = stream.get_final_message()
    assert [b.type for b in final.content].count("tool_use") == 1
    assert final.stop_reason == "tool_use"
