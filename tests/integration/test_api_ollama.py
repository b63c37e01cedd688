"""Ollama's API on `llmdeck serve`, driven by the official `ollama` Python client.

A real server on loopback over a real worker running the scripted engine (a reply with
<think> reasoning, a sentence and a hermes tool call). The client streams a chat,
generates, lists, shows and asks what runs; hostile bodies come back as Ollama's
{"error": "..."} and the server answers after them.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import ollama
import pytest

from core.server import ServerHandle
from tests.fixtures.serve import ServerThread, scripted_spec, served
from tests.helpers.http_raw import exchange, post_bytes

ASK = [{"role": "user", "content": "What is the weather in Paris?"}]
WEATHER = {"type": "function", "function": {
    "name": "get_weather", "description": "Current weather in a city.",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                   "required": ["city"]}}}


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(), tmp_path_factory.mktemp("ollama-home"))


def _host(server: ServerThread) -> str:
    return server.url.removesuffix("/v1")


@pytest.fixture
def client(server: ServerThread) -> ollama.Client:
    return ollama.Client(host=_host(server), timeout=30)


def test_a_streamed_chat_has_thinking_content_a_tool_call_and_counts(client: ollama.Client) -> None:
    parts = list(client.chat(model="scripted", messages=ASK, tools=[WEATHER], stream=True))
    # Streamed, not whole: under load the pool merges a step's deltas (thinking and text
    # can share one chunk), so the floor is text, the call, then the done chunk.
    assert len(parts) >= 3, "streamed in pieces"
    assert all(not p.done for p in parts[:-1]) and parts[-1].done
    assert "".join(p.message.content or "" for p in parts) == "I will look it up."
    assert "".join(p.message.thinking or "" for p in parts) == "The user wants the weather."
    [call] = [c for p in parts for c in p.message.tool_calls or ()]
    assert call.function.name == "get_weather" and call.function.arguments == {"city": "Paris"}
    last = parts[-1]
    assert last.done_reason == "stop" and last.eval_count > 0 and last.prompt_eval_count > 0
    assert last.total_duration > 0


def test_a_chat_in_one_answer_with_options(client: ollama.Client) -> None:
    reply = client.chat(model="scripted:latest", messages=ASK, stream=False, think=False,
                        options={"num_predict": 3, "temperature": 0.2, "num_ctx": 8192},
                        keep_alive="10m")
    assert reply.done and reply.done_reason == "length"  # num_predict applied
    assert not reply.message.thinking  # think=False hides the reasoning
    assert reply.model == "scripted"


def test_a_tool_round_trip_reaches_the_model(client: ollama.Client) -> None:
    first = client.chat(model="scripted", messages=ASK, tools=[WEATHER], stream=False)
    assert first.message.tool_calls

    def follow(result: str) -> ollama.ChatResponse:
        return client.chat(model="scripted", tools=[WEATHER], stream=False, messages=[
            *ASK, first.message, {"role": "tool", "tool_name": "get_weather", "content": result}])

    short, long = follow("Sunny."), follow("Sunny. " * 200)
    assert long.prompt_eval_count - short.prompt_eval_count >= 300


def test_generate_streams_and_answers_whole(client: ollama.Client) -> None:
    parts = list(client.generate(model="scripted", prompt="Weather?", system="Be brief.",
                                 stream=True))
    assert parts[-1].done and "".join(p.response for p in parts) == "I will look it up."
    whole = client.generate(model="scripted", prompt="Weather?", stream=False)
    assert whole.done and whole.response == "I will look it up."
    assert whole.thinking == "The user wants the weather."
    raw = client.generate(model="scripted", prompt="Once upon a time", raw=True, stream=False)
    assert raw.done and raw.response  # a raw prompt: no chat template, no parsing
    loaded = client.generate(model="scripted")  # no prompt: load the model
    assert loaded.done and loaded.done_reason == "load"


def test_a_raw_prompt_meets_the_same_check_as_a_text_completion(server: ServerThread,
                                                                client: ollama.Client) -> None:
    """Ollama's raw generate and /v1/completions send a raw prompt through one check, so a
    prompt too long for the context gets the same sentence at both doors (Ollama's own copy
    of the check said less: not how many characters the context holds)."""
    import openai

    from core.server.limits import MAX_CHARS_PER_TOKEN

    prompt = "x" * (4096 * MAX_CHARS_PER_TOKEN + 1)  # the scripted model's context: 4096
    with pytest.raises(ollama.ResponseError) as by_ollama:
        client.generate(model="scripted", prompt=prompt, raw=True, stream=False)
    with pytest.raises(openai.BadRequestError) as by_openai:
        openai.OpenAI(base_url=server.url, api_key="x", max_retries=0).completions.create(
            model="scripted", prompt=prompt, max_tokens=1)
    assert by_ollama.value.status_code == 400
    sentence = by_openai.value.body["message"]
    assert by_ollama.value.error == sentence and "however they tokenise" in sentence
    assert client.generate(model="scripted", prompt="Still here?", stream=False).done


def test_list_show_ps_and_version(server: ServerThread, client: ollama.Client) -> None:
    names = [m.model for m in client.list().models]
    assert "scripted" in names
    shown = client.show("scripted")
    assert "completion" in shown.capabilities and shown.modelinfo
    running = client.ps().models
    assert [m.model for m in running] == ["scripted"] and running[0].size > 0
    version = httpx.get(_host(server) + "/api/version").json()
    assert isinstance(version["version"], str)


# -- hostile input, answered in Ollama's shape --------------------------------------------


def test_bad_bodies_are_ollama_errors_with_a_sentence(client: ollama.Client) -> None:
    cases = [({"model": "scripted", "messages": "hi"}, "messages"),
             ({"model": "scripted", "messages": ASK, "options": [1]}, "options"),
             ({"model": "scripted", "messages": ASK, "options": {"temperature": "hot"}},
              "temperature"),
             ({"model": "scripted", "messages": ASK, "options": {"warp": 9}}, "warp"),
             ({"model": "scripted", "messages": ASK, "keep_alive": [1]}, "keep_alive"),
             ({"model": "scripted", "messages": ASK,
               "options": {"num_predict": 2**40}}, "num_predict"),
             ({"model": "nope", "messages": ASK}, "not served")]
    for body, words in cases:
        with pytest.raises(ollama.ResponseError) as caught:
            client._request_raw("POST", "/api/chat", json=body)
        assert caught.value.status_code in (400, 404)
        assert words in caught.value.error, caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        client.generate(model="scripted", prompt="x", context=[1, 2, 3])
    assert "context" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:  # (keep_alive 0 unloads: by_name tests)
        client.generate(model="scripted", keep_alive="soon")
    assert '"5m"' in caught.value.error


def test_an_image_meets_the_same_image_checks_as_chat(client: ollama.Client) -> None:
    png = "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    with pytest.raises(ollama.ResponseError) as caught:  # the scripted model is text-only
        client.chat(model="scripted", messages=[{"role": "user", "content": "What is this?",
                                                 "images": [png]}])
    assert caught.value.status_code == 400 and "cannot see images" in caught.value.error


def test_deep_nesting_and_oversize_bodies(server: ServerThread, client: ollama.Client) -> None:
    deep: object = 1
    for _ in range(200):
        deep = {"a": deep}
    body = json.dumps({"model": "scripted", "messages": ASK, "options": deep}).encode()
    reply = exchange(server.handle.host, server.handle.port, post_bytes("/api/chat", body))
    assert reply.status == 400 and "nested" in reply.json()["error"]
    huge = post_bytes("/api/generate", b"{}", headers={"Content-Length": str(64 << 20)})
    reply = exchange(server.handle.host, server.handle.port, huge)
    assert reply.status == 413 and "at most" in reply.json()["error"]
    assert client.chat(model="scripted", messages=ASK, stream=False).done


def test_a_keyed_server_wants_the_key_as_a_bearer_token(server: ServerThread) -> None:
    handle = server.call(ServerHandle.start(server.runtime, "127.0.0.1", 0, api_key="k3y"))
    host = handle.url.removesuffix("/v1")
    try:
        for headers in ({}, {"Authorization": "Bearer wrong"}):
            with pytest.raises(ollama.ResponseError) as caught:
                ollama.Client(host=host, headers=headers).list()
            assert caught.value.status_code == 401 and "API key" in caught.value.error
        keyed = ollama.Client(host=host, headers={"Authorization": "Bearer k3y"})
        assert keyed.chat(model="scripted", messages=ASK, stream=False).done
    finally:
        server.call(handle.stop())


def test_endpoints_not_offered_say_so_in_ollamas_shape(client: ollama.Client) -> None:
    with pytest.raises(ollama.ResponseError) as caught:  # models come from Hugging Face
        client.pull("llama3")
    assert caught.value.status_code == 400 and "hf.co/<owner>/<repo>" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        client.push("me/model")
    assert caught.value.status_code == 404 and "not pushed" in caught.value.error
    with pytest.raises(ollama.ResponseError) as caught:
        client._request_raw("GET", "/api/chat")
    assert caught.value.status_code == 405 and "does not accept GET" in caught.value.error


def test_a_client_that_hangs_up_mid_stream_stops_the_generation(
        tmp_path_factory: pytest.TempPathFactory) -> None:
    """The NDJSON writer is this dialect's own: a closed connection must end the request
    in the worker (its slot freed at once), not run the reply out (~20 s here)."""
    slow = scripted_spec(reply="word " * 200, tokens_per_s=50.0, chunk_chars=5)
    for srv in served(slow, tmp_path_factory.mktemp("ollama-slow-home")):
        url = srv.url.removesuffix("/v1") + "/api/chat"
        with httpx.stream("POST", url, json={"model": "scripted", "messages": ASK},
                          timeout=30) as reply:
            lines = reply.iter_lines()
            assert json.loads(next(lines))["done"] is False
            assert [w.active for w in srv.runtime.pool.status()] == [1]
        started = time.monotonic()
        while any(w.active for w in srv.runtime.pool.status()):
            assert time.monotonic() - started < 3, "the worker still runs the abandoned reply"
            time.sleep(0.05)
