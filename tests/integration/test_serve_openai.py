"""The official `openai` client against a real llmdeck server on loopback.

The server runs in-process (its own loop in a thread) over a real worker process with
the scripted engine, whose reply carries <think> reasoning and a hermes <tool_call>; the
worker's parser must turn them into reasoning_content and tool_calls.
"""

from __future__ import annotations

import json
import socket
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx2 as httpx
import openai
import pytest
from openai import OpenAI

from core.events import TextDelta
from core.server import ServeError, ServerHandle
from tests.fixtures.serve import ServerThread, scripted_spec, served

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather in a city.",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}},
                       "required": ["city"]},
    },
}
HI = [{"role": "user", "content": "What is the weather in Paris?"}]


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ServerThread]:
    yield from served(scripted_spec(), tmp_path_factory.mktemp("serve-home"))


@pytest.fixture
def client(server: ServerThread) -> OpenAI:
    return OpenAI(base_url=server.url, api_key="unused-on-loopback", max_retries=0)


def test_non_streaming_chat_has_content_reasoning_tool_calls_and_usage(client: OpenAI) -> None:
    reply = client.chat.completions.create(model="scripted", messages=HI, tools=[WEATHER_TOOL])
    choice = reply.choices[0]
    assert choice.message.content == "I will look it up."
    assert choice.message.model_extra["reasoning_content"] == "The user wants the weather."
    assert choice.finish_reason == "tool_calls"
    [call] = choice.message.tool_calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}
    assert reply.usage.completion_tokens > 0 and reply.usage.prompt_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


def test_streaming_chat_sends_deltas_and_usage_last(client: OpenAI) -> None:
    stream = client.chat.completions.create(model="scripted", messages=HI, tools=[WEATHER_TOOL],
                                            stream=True, stream_options={"include_usage": True})
    chunks = list(stream)
    content = "".join(c.choices[0].delta.content or "" for c in chunks if c.choices)
    reasoning = "".join((c.choices[0].delta.model_extra or {}).get("reasoning_content") or ""
                        for c in chunks if c.choices)
    calls = [tc for c in chunks if c.choices for tc in c.choices[0].delta.tool_calls or ()]
    assert content == "I will look it up."
    assert reasoning == "The user wants the weather."
    assert len(chunks) > 5, "the reply must arrive in pieces, not at once"
    # OpenAI's shape: the call opens with its id, type, name and no arguments, then the
    # arguments follow as they are decoded, in deltas of the same index
    assert calls[0].id and calls[0].type == "function" and calls[0].function.name == "get_weather"
    assert calls[0].function.arguments == ""
    assert {c.index for c in calls} == {0} and not any(c.id or c.function.name for c in calls[1:])
    assert json.loads("".join(c.function.arguments for c in calls)) == {"city": "Paris"}
    finishes = [c.choices[0].finish_reason for c in chunks if c.choices and c.choices[0].finish_reason]
    assert finishes == ["tool_calls"]
    assert chunks[-1].choices == [] and chunks[-1].usage.completion_tokens > 0


@pytest.mark.parametrize("version", ["1.0", "1.1"])
def test_raw_http_clients_of_either_version_get_the_whole_stream(server: ServerThread, version: str) -> None:
    # 1.1 gets chunked transfer encoding (framed by the server's own writer once the
    # headers are out); 1.0 has no chunking and reads to the end of the connection.
    body = json.dumps({"model": "scripted", "messages": HI, "stream": True}).encode()
    with socket.create_connection((server.handle.host, server.handle.port), timeout=30) as sock:
        sock.sendall(f"POST /v1/chat/completions HTTP/{version}\r\nHost: x\r\n"
                     f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
                     "Connection: close\r\n\r\n".encode() + body)
        data = b""
        while chunk := sock.recv(65536):
            data += chunk
    head, _, payload = data.partition(b"\r\n\r\n")
    assert head.startswith(f"HTTP/{version} 200".encode())
    assert (b"transfer-encoding: chunked" in head.lower()) == (version == "1.1")
    if version == "1.1":
        pieces, rest = [], payload
        while True:
            size, _, rest = rest.partition(b"\r\n")
            n = int(size, 16)
            if n == 0:
                break
            pieces.append(rest[:n])
            assert rest[n:n + 2] == b"\r\n"
            rest = rest[n + 2:]
        payload = b"".join(pieces)
    events = [line[6:] for line in payload.split(b"\n") if line.startswith(b"data: ")]
    assert events[-1] == b"[DONE]"
    chunks = [json.loads(e) for e in events[:-1]]
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks) == "I will look it up."


def test_streaming_without_include_usage_sends_no_usage_chunk(client: OpenAI) -> None:
    chunks = list(client.chat.completions.create(model="scripted", messages=HI, stream=True))
    assert all(c.usage is None for c in chunks)
    assert chunks[-1].choices[0].finish_reason == "tool_calls"


def test_tool_result_round_trip(client: OpenAI) -> None:
    first = client.chat.completions.create(model="scripted", messages=HI, tools=[WEATHER_TOOL])
    call = first.choices[0].message.tool_calls[0]
    history = [
        *HI,
        {"role": "assistant", "content": first.choices[0].message.content,
         "tool_calls": [{"id": call.id, "type": "function",
                         "function": {"name": call.function.name, "arguments": call.function.arguments}}]},
        {"role": "tool", "tool_call_id": call.id, "content": json.dumps({"temp_c": 21})},
    ]
    second = client.chat.completions.create(model="scripted", messages=history, tools=[WEATHER_TOOL])
    assert second.choices[0].message.content == "I will look it up."
    assert second.usage.prompt_tokens > first.usage.prompt_tokens  # the tool result was sent


def test_parallel_streaming_requests_all_complete(client: OpenAI) -> None:
    def one(i: int) -> str:
        stream = client.chat.completions.create(
            model="scripted", messages=[{"role": "user", "content": f"question {i}"}], stream=True)
        return "".join(c.choices[0].delta.content or "" for c in stream if c.choices)

    with ThreadPoolExecutor(16) as pool:
        texts = list(pool.map(one, range(16)))
    assert texts == ["I will look it up."] * 16


@pytest.mark.parametrize(
    ("kwargs", "words"),
    [
        ({"temperature": 5}, "temperature"),
        ({"top_p": 0}, "top_p"),
        ({"max_tokens": 0}, "max_tokens"),
        ({"n": 2}, "n=1"),
        ({"temperature": "hot"}, "temperature"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "wizard", "content": "x"}]}, "role"),
        ({"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "image_url"),
        ({"stop": 7}, "stop"),
        ({"tools": [{"type": "function", "function": {}}]}, "tools[0]"),
        ({"presence_penalty": 2.5}, "between -2 and 2"),
        ({"logprobs": True, "top_logprobs": 21}, "between 0 and 20"),
        ({"logit_bias": {"3": 200}}, "between -100 and 100"),
        ({"response_format": {"type": "yaml"}}, "'yaml' is not supported"),
        ({"response_format": {"type": "json_schema", "json_schema": {"name": "w"}}},
         "schema as an object"),
        # accepted and dropped before: no call, no audio, no search came back, and no word
        ({"functions": [{"name": "f", "parameters": {"type": "object"}}]}, "as 'tools'"),
        ({"function_call": "auto"}, "as 'tools'"),
        ({"modalities": ["text", "audio"], "audio": {"voice": "alloy", "format": "wav"}},
         "in text only"),
        ({"web_search_options": {}}, "searches nothing"),
    ],
)
def test_bad_parameters_are_400_with_a_message(client: OpenAI, kwargs: dict, words: str) -> None:
    args = {"model": "scripted", "messages": HI, **kwargs}
    with pytest.raises(openai.BadRequestError) as info:
        client.chat.completions.create(**args)
    assert info.value.status_code == 400
    assert words in info.value.message
    assert info.value.body["type"] == "invalid_request_error"


def test_default_values_of_unsupported_fields_are_accepted(client: OpenAI) -> None:
    reply = client.chat.completions.create(
        model="scripted", messages=HI, presence_penalty=0, frequency_penalty=0, logprobs=False,
        response_format={"type": "text"})
    assert reply.choices[0].message.content == "I will look it up."


def test_unknown_model_is_404_naming_the_served_one(client: OpenAI) -> None:
    with pytest.raises(openai.NotFoundError) as info:
        client.chat.completions.create(model="gpt-9", messages=HI)
    assert info.value.status_code == 404
    assert "gpt-9" in info.value.message and "scripted" in info.value.message
    assert info.value.body["code"] == "model_not_found"


def test_models_lists_the_served_model(client: OpenAI) -> None:
    ids = [m.id for m in client.models.list()]
    assert "scripted" in ids and "all-MiniLM-L6-v2" in ids


def test_non_json_body_and_unknown_route_answer_in_openai_shape(server: ServerThread) -> None:
    bad = httpx.post(f"{server.url}/chat/completions", content=b"{nope",
                     headers={"Content-Type": "application/json"})
    assert bad.status_code == 400 and "not valid JSON" in bad.json()["error"]["message"]
    missing = httpx.get(f"{server.url}/fine_tuning/jobs")
    assert missing.status_code == 404 and "not an endpoint" in missing.json()["error"]["message"]


def test_a_second_server_on_the_same_runtime_requires_its_api_key(server: ServerThread) -> None:
    handle: ServerHandle = server.call(ServerHandle.start(server.runtime, "127.0.0.1", 0, api_key="s3cret"))
    try:
        with pytest.raises(openai.AuthenticationError) as info:
            OpenAI(base_url=handle.url, api_key="wrong", max_retries=0).models.list()
        assert "API key" in info.value.message
        good = OpenAI(base_url=handle.url, api_key="s3cret", max_retries=0)
        reply = good.chat.completions.create(model="scripted", messages=HI)
        assert reply.choices[0].message.content == "I will look it up."
    finally:
        server.call(handle.stop())


def test_binding_beyond_loopback_without_a_key_is_refused(server: ServerThread) -> None:
    with pytest.raises(ServeError) as info:
        server.call(ServerHandle.start(server.runtime, "0.0.0.0", 0))
    assert "API key" in info.value.message and "127.0.0.1" in info.value.message


def test_requests_during_a_load_wait_for_it_then_429_when_the_queue_is_full(tmp_path: Path) -> None:
    # the streaming reply holds the one slot for 5 s (200 tokens at 40/s), so the request
    # sent after the queue filled meets it full even on a loaded box; the others stop at 8
    srv = ServerThread(scripted_spec(hang_load_s=1.5, tokens_per_s=40, max_concurrency=1,
                                     reply="slow " * 200),
                       wait_ready=False, max_queue=1)
    try:
        health = httpx.get(srv.url.removesuffix("/v1") + "/health")
        assert health.status_code == 503 and health.json()["status"] == "loading"
        assert health.json()["error"] is None
        listed = [m["id"] for m in httpx.get(f"{srv.url}/models").json()["data"]]
        assert "scripted" in listed  # what a request for it gets: an answer once loaded
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        started = time.monotonic()
        reply = client.chat.completions.create(model="scripted", messages=HI,
                                               max_tokens=8)  # waits for the load
        assert reply.choices[0].message.content.startswith("slow")
        assert srv.runtime.model.state == "ready" and time.monotonic() - started > 0.5
        health = httpx.get(srv.url.removesuffix("/v1") + "/health")
        assert health.status_code == 200 and health.json()["status"] == "ready"

        with ThreadPoolExecutor(2) as pool:
            running = pool.submit(lambda: list(client.chat.completions.create(
                model="scripted", messages=HI, stream=True)))
            waiting = pool.submit(lambda: client.chat.completions.create(
                model="scripted", messages=HI, max_tokens=8))
            deadline = time.monotonic() + 30
            while srv.runtime.backend.queued() < 1 and time.monotonic() < deadline:
                time.sleep(0.02)
            assert srv.runtime.backend.queued() == 1
            with pytest.raises(openai.RateLimitError) as info:
                client.chat.completions.create(model="scripted", messages=HI)
            assert info.value.status_code == 429 and "queue is full" in info.value.message
            assert running.result(60) and waiting.result(60).choices[0].message.content.startswith("slow")
    finally:
        srv.close()


def test_embeddings_from_the_bundled_minilm(client: OpenAI) -> None:
    reply = client.embeddings.create(model="all-MiniLM-L6-v2",
                                     input=["a cat sat on the mat", "a kitten on a rug", "tax law"])
    vectors = [d.embedding for d in reply.data]
    assert [len(v) for v in vectors] == [384, 384, 384]
    # wordpieces with [CLS] and [SEP], as the model read them (not words: 6 + 5 + 2)
    assert reply.usage.prompt_tokens == reply.usage.total_tokens == 8 + 7 + 4

    def dot(a: list[float], b: list[float]) -> float:
        return sum(x * y for x, y in zip(a, b, strict=True))

    assert dot(vectors[0], vectors[1]) > dot(vectors[0], vectors[2])
    with pytest.raises(openai.NotFoundError):
        client.embeddings.create(model="text-embedding-3-large", input="x")
    with pytest.raises(openai.BadRequestError):
        client.embeddings.create(model="all-MiniLM-L6-v2", input=[])
    with pytest.raises(openai.BadRequestError) as info:
        client.embeddings.create(model="all-MiniLM-L6-v2", input=["x"] * 2049)
    assert "at most 2048" in info.value.message
    started = time.monotonic()  # 20 MB of text: only what the model reads is tokenised
    long = client.embeddings.create(model="all-MiniLM-L6-v2", input="word " * 4_000_000)
    assert long.usage.prompt_tokens == 256 and time.monotonic() - started < 10


def test_http_clients_and_a_tui_turn_share_one_worker(server: ServerThread, client: OpenAI) -> None:
    async def tui_turn() -> str:
        turn = await server.runtime.start_turn(None, "from the chat window")
        turn.max_rounds = 1  # the scripted reply always calls a tool; one round is enough here
        return "".join([e.text async for e in turn.events() if isinstance(e, TextDelta)])

    with ThreadPoolExecutor(4) as pool:
        http = [pool.submit(lambda: client.chat.completions.create(model="scripted", messages=HI))
                for _ in range(3)]
        tui = server.call(tui_turn())
        replies = [f.result(60) for f in http]
    assert tui == "I will look it up."
    assert all(r.choices[0].message.content == "I will look it up." for r in replies)
    assert len(server.runtime.pool.pids()) == 1, "HTTP and the chat window must use the same worker"


def test_a_client_that_hangs_up_frees_its_slot(tmp_path: Path) -> None:
    srv = ServerThread(scripted_spec(tokens_per_s=30, reply="slow " * 200))
    try:
        with httpx.stream("POST", f"{srv.url}/chat/completions", timeout=30,
                          json={"model": "scripted", "messages": HI, "stream": True}) as response:
            lines = response.iter_lines()
            for _ in range(4):
                next(lines)
            assert [w.active for w in srv.runtime.worker_status()] == [1]
        deadline = time.monotonic() + 20
        while srv.runtime.worker_status()[0].active and time.monotonic() < deadline:
            time.sleep(0.05)
        assert srv.runtime.worker_status()[0].active == 0
    finally:
        srv.close()


def test_a_model_that_failed_to_load_is_503_with_the_reason(tmp_path: Path) -> None:
    srv = ServerThread(scripted_spec(fail_load="MODEL_CORRUPT"), wait_ready=False)
    try:
        assert srv.call(srv.runtime.ensure_model()) is False
        client = OpenAI(base_url=srv.url, api_key="x", max_retries=0)
        with pytest.raises(openai.InternalServerError) as info:
            client.chat.completions.create(model="scripted", messages=HI)
        assert info.value.status_code == 503
        assert "failed to load" in info.value.message and "MODEL_CORRUPT" in info.value.message
    finally:
        srv.close()
