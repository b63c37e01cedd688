"""A tool whose `parameters` is not a JSON schema is a 400 naming it, through the real
server and the official openai client (the scripted engine behind it: the request must be
refused before any model work, and the server answers the next request as before)."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest
from openai import OpenAI

from tests.fixtures.serve import scripted_spec, served

HI = [{"role": "user", "content": "What is the weather in Paris?"}]
GOOD = {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}


def tool(name: str, parameters: object) -> dict:
    return {"type": "function", "function": {"name": name, "description": "A tool.",
                                             "parameters": parameters}}


@pytest.fixture(scope="module")
def client(tmp_path_factory: pytest.TempPathFactory) -> Iterator[OpenAI]:
    for srv in served(scripted_spec(reply="Fine."), tmp_path_factory.mktemp("serve-home")):
        yield OpenAI(base_url=srv.url, api_key="x", max_retries=0, timeout=30)


@pytest.mark.parametrize(("parameters", "says"), [
    ("{\"type\": \"object\"}", "got a string"),  # a schema sent as JSON text
    ([{"type": "object"}], "got a list"),
    (7, "got a number"),
    ({"type": "objekt"}, "is not a valid JSON schema"),  # no such type: does not compile
    ({"type": "object", "properties": {"x": {"type": "string", "minLength": "two"}}},
     "is not a valid JSON schema"),
    ({"type": "object", "required": "city"}, "is not a valid JSON schema"),
])
def test_parameters_that_are_not_a_schema_are_a_400_naming_them(client: OpenAI, parameters: object,
                                                                 says: str) -> None:
    tools = [tool("get_weather", GOOD), tool("broken", parameters)]
    for choice in ("auto", "none", "required"):
        with pytest.raises(openai.BadRequestError) as caught:
            client.chat.completions.create(model="scripted", messages=HI, tools=tools,
                                           tool_choice=choice, max_tokens=4)
        error = caught.value.body
        assert error["param"] == "tools[1].function.parameters", error
        assert says in error["message"] and "tools[1].function.parameters" in error["message"]
    # the server is fine afterwards, and a good schema (or none at all) is accepted
    ok = client.chat.completions.create(
        model="scripted", messages=HI, max_tokens=8,
        tools=[tool("get_weather", GOOD), {"type": "function", "function": {"name": "now"}}])
    assert ok.choices[0].message.content == "Fine."
