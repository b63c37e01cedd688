"""The Runtime using a remote backend that is a second `llmdeck serve` on loopback.

A real subprocess serves the scripted engine over HTTP; the Runtime's turn goes through
RemoteBackend (aiohttp) and is stored like a local one. Killing the server with SIGKILL
mid-reply must end the turn with a clear error and keep the partial reply in the store.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from core.config import RemoteEndpoint, Settings
from core.engines.base import GenerationRequest, SamplingParams
from core.events import Done, Error, ReasoningDelta, TextDelta, ToolCall, Usage
from core.remote.client import RemoteBackend
from core.runtime import Runtime
from tests.fixtures.serve import PLAIN_REPLY, REPLY, scripted_args, spawn_serve


@pytest.fixture(scope="module")
def peer(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """A long-lived `llmdeck serve` with the scripted engine; yields its base URL."""
    proc, url = spawn_serve(tmp_path_factory.mktemp("peer-home"),
                            *scripted_args("peer-model", reply=PLAIN_REPLY), "--api-key", "peer-key")
    yield url
    proc.send_signal(signal.SIGTERM)
    assert proc.wait(15) == 0


def _settings(url: str, key: str = "peer-key", model: str = "peer-model") -> Settings:
    s = Settings(model=f"remote:peer/{model}")
    s.remotes = [RemoteEndpoint(name="peer", url=url, api_key=key, models=[model])]
    return s


def _request(text: str = "hi") -> GenerationRequest:
    return GenerationRequest(request_id=os.urandom(6).hex(), messages=({"role": "user", "content": text},),
                             sampling=SamplingParams(max_tokens=200))


async def test_runtime_turn_round_trips_through_a_remote_llmdeck(peer: str) -> None:
    rt = Runtime(_settings(peer))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Say hello.")
        events = [e async for e in turn.events()]
        assert rt.pool.pids() == [], "a remote model must not start a local worker"
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == "Hello from the peer, over HTTP."
        assert "".join(e.text for e in events if isinstance(e, ReasoningDelta)) == "Short answer."
        [usage] = [e for e in events if isinstance(e, Usage)]
        assert usage.completion_tokens > 0 and usage.prompt_tokens > 0
        assert events[-1] == Done("stop")
        assert rt.model.label == "peer/peer-model" and rt.model.state == "ready"  # its API id
        assert rt.model.name == "peer-model @ peer"
        [user, reply] = await rt.messages(turn.conversation_id)
        assert reply.content == "Hello from the peer, over HTTP." and reply.status == "complete"
        assert reply.reasoning == "Short answer."
    finally:
        await rt.close()


async def test_remote_tool_call_deltas_are_assembled(tmp_path: Path) -> None:
    proc, url = spawn_serve(tmp_path / "h", *scripted_args("tools-model", reply=REPLY, chunk_chars=3))
    try:
        backend = RemoteBackend(RemoteEndpoint("p", url), "tools-model")
        events = [e async for e in backend.generate(_request())]
        await backend.close()
        [call] = [e for e in events if isinstance(e, ToolCall)]
        assert (call.name, call.arguments, call.error) == ("get_weather", {"city": "Paris"}, None)
        assert events[-1] == Done("tool_calls")
    finally:
        proc.kill()
        proc.wait()


async def test_wrong_key_unknown_model_and_unreachable_remote_are_clear_errors(peer: str) -> None:
    cases = [
        (RemoteEndpoint("peer", peer, api_key="nope"), "peer-model", "LOAD_FAILED", "API key"),
        (RemoteEndpoint("peer", peer, api_key="peer-key"), "nosuch", "LOAD_FAILED", "model name"),
    ]
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        dead = f"http://127.0.0.1:{s.getsockname()[1]}/v1"
    cases.append((RemoteEndpoint("gone", dead), "m", "LOAD_FAILED", "Could not reach"))
    for endpoint, model, code, words in cases:
        backend = RemoteBackend(endpoint, model)
        events = [e async for e in backend.generate(_request())]
        await backend.close()
        assert isinstance(events[0], Error) and events[0].code == code, events
        assert words in events[0].message and endpoint.name in events[0].message
        assert events[-1] == Done("error")


async def test_bad_parameters_come_back_as_bad_request(peer: str) -> None:
    backend = RemoteBackend(RemoteEndpoint("peer", peer, api_key="peer-key"), "peer-model")
    request = GenerationRequest(request_id="r", messages=({"role": "user", "content": "x"},),
                                sampling=SamplingParams(temperature=9.0))
    events = [e async for e in backend.generate(request)]
    await backend.close()
    assert events[0].code == "BAD_REQUEST" and "temperature" in events[0].message


async def test_unknown_remote_endpoint_fails_the_model_load(peer: str) -> None:
    s = _settings(peer)
    s.model = "remote:elsewhere/x"
    rt = Runtime(s)
    await rt.start()
    try:
        turn = await rt.start_turn(None, "hi")
        events = [e async for e in turn.events()]
        assert isinstance(events[0], Error) and "elsewhere" in events[0].message
        assert "[[remotes]]" in events[0].message
    finally:
        await rt.close()


async def test_server_killed_mid_stream_keeps_the_partial_reply(tmp_path: Path) -> None:
    reply = "word " * 400
    proc, url = spawn_serve(tmp_path / "victim", *scripted_args("slow", reply=reply, tokens_per_s=50))
    rt = Runtime(_settings(url, key="", model="slow"))
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Talk for a while.")
        events = []
        async for event in turn.events():
            events.append(event)
            if sum(isinstance(e, TextDelta) for e in events) == 10:
                os.kill(proc.pid, signal.SIGKILL)
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert 0 < len(text) < len(reply)
        [error] = [e for e in events if isinstance(e, Error)]
        assert error.code == "WORKER_CRASHED"
        assert "connection" in error.message and "peer" in error.message and "kept" in error.message
        assert events[-1] == Done("error")
        [_, stored] = await rt.messages(turn.conversation_id)
        assert stored.status == "partial" and stored.content == text
    finally:
        await rt.close()
        proc.kill()
        proc.wait()


def test_serve_refuses_a_public_bind_without_a_key(tmp_path: Path) -> None:
    env = {**os.environ, "LLMDECK_HOME": str(tmp_path), "LLMDECK_API_KEY": ""}
    from tests.fixtures.serve import ROOT

    out = subprocess.run([sys.executable, "-m", "tui.cli", "serve", "--host", "0.0.0.0"],
                         cwd=ROOT, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert "without an API key" in out.stderr and "--api-key" in out.stderr


async def test_discover_lists_the_peer_models_and_reports_dead_endpoints(peer: str) -> None:
    from core.remote import discover_models

    s = _settings(peer)
    s.remotes.append(RemoteEndpoint(name="dead", url="http://127.0.0.1:9/v1"))
    found, problems = await discover_models(s)
    found_models = [(m.endpoint, m.model) for m in found]  # the peer lists its disk's too
    assert ("peer", "peer-model") in found_models and {e for e, _ in found_models} == {"peer"}
    assert len(problems) == 1 and "dead" in problems[0]


async def test_cancelling_a_remote_turn_ends_it_as_cancelled(tmp_path: Path) -> None:
    proc, url = spawn_serve(tmp_path / "slow", *scripted_args("slow", reply="tick " * 300, tokens_per_s=50))
    settings = _settings(url, key="", model="slow")
    settings.sampling.max_tokens = 20  # keeps the second, uncancelled turn short
    rt = Runtime(settings)
    await rt.start()
    try:
        turn = await rt.start_turn(None, "Keep going.")
        events = []
        async for event in turn.events():
            events.append(event)
            if sum(isinstance(e, TextDelta) for e in events) == 5:
                turn.cancel()
        assert events[-1] == Done("cancelled")
        assert not any(isinstance(e, Error) for e in events)
        again = await rt.start_turn(turn.conversation_id, "Still there?")
        assert any(isinstance(e, TextDelta) for e in [e async for e in again.events()])
    finally:
        await rt.close()
        proc.kill()
        proc.wait()


async def test_switching_between_a_remote_and_a_local_model(peer: str) -> None:
    rt = Runtime(_settings(peer))
    await rt.start()
    try:
        assert await rt.switch_model("local-script", engine="scripted")
        local = await rt.start_turn(None, "hi")
        text = "".join([e.text async for e in local.events() if isinstance(e, TextDelta)])
        assert text == "Hello from the scripted engine." and len(rt.pool.pids()) == 1
        assert await rt.switch_model("remote:peer/peer-model")
        assert rt.pool.pids() == [], "switching to a remote unloads the local worker"
        remote = await rt.start_turn(local.conversation_id, "and you?")
        text = "".join([e.text async for e in remote.events() if isinstance(e, TextDelta)])
        assert text == "Hello from the peer, over HTTP."
    finally:
        await rt.close()


# A remote that answers 200 but streams something else: a misconfigured proxy, or a
# server that is not quite OpenAI-compatible. Each stream used to raise out of the turn.
GARBLED = {
    "not-an-object": [b"data: [1]\n\n"],
    "odd-shapes": [b'data: {"choices": [1, {"delta": {"content": 5}}, {"delta": "x"}]}\n\n',
                   b'data: {"choices": [{"delta": {"content": "ok"}, "finish_reason": "stop"}]}\n\n',
                   b'data: {"choices": [], "usage": {"prompt_tokens": "many", '
                   b'"completion_tokens": 1, "prompt_tokens_details": 7}}\n\n',
                   b"data: [DONE]\n\n"],
    "html": [b'data: {"choices": [{"delta": {"content": "so far"}}]}\n\n',
             b"data: <html>Sign in</html>\n\n"],
}


async def _garbled_remote(chunks: list[bytes]):  # noqa: ANN202
    from aiohttp import web

    async def completions(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for chunk in chunks:
            await response.write(chunk)
        return response

    app = web.Application()
    app.router.add_post("/v1/chat/completions", completions)
    runner = web.AppRunner(app)
    await runner.setup()
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    await web.SockSite(runner, sock).start()
    return runner, f"http://127.0.0.1:{sock.getsockname()[1]}/v1"


@pytest.mark.parametrize("case", list(GARBLED))
async def test_a_remote_streaming_something_else_is_an_error_not_a_crash(case: str) -> None:
    runner, url = await _garbled_remote(GARBLED[case])
    try:
        backend = RemoteBackend(RemoteEndpoint("odd", url), "m")
        events = [e async for e in backend.generate(_request())]
        await backend.close()
    finally:
        await runner.cleanup()
    texts = "".join(e.text for e in events if isinstance(e, TextDelta))
    if case == "odd-shapes":
        assert texts == "ok" and events[-1] == Done("stop")
        [usage] = [e for e in events if isinstance(e, Usage)]
        assert (usage.prompt_tokens, usage.cached_tokens, usage.completion_tokens) == (0, 0, 1)
    else:
        [error] = [e for e in events if isinstance(e, Error)]
        assert "not an OpenAI-style stream" in error.message and events[-1] == Done("error")
        assert texts == ("so far" if case == "html" else "")
