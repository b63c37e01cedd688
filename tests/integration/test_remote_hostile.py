"""A hostile remote, attacked through the real doors: RemoteBackend as the Runtime uses it,
and a real `llmdeck serve` process passing a remote on beside a good one.

Each answer of tests/fakes/remote_server.py must end within a bound (time, bytes, text)
with a sentence that says which bound, and `serve` must stay healthy and small after.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import aiohttp
import psutil
import pytest
import pytest_asyncio

from core.config import RemoteEndpoint
from core.engines.base import GenerationRequest, SamplingParams
from core.events import Done, Error, Event, TextDelta, ToolCall
from core.remote import reading
from core.remote.client import RemoteBackend
from tests.fakes.remote_server import FakeRemote
from tests.fixtures.serve import scripted_args, spawn_serve

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def remote() -> AsyncIterator[FakeRemote]:
    fake = await FakeRemote(limit_s=60).start()
    yield fake
    await fake.stop()


def _request(max_tokens: int = 50) -> GenerationRequest:
    return GenerationRequest(request_id=os.urandom(6).hex(), messages=({"role": "user", "content": "hi"},),
                             sampling=SamplingParams(max_tokens=max_tokens))


async def _ask(url: str, model: str, max_tokens: int = 50, **timeouts: float) -> tuple[list[Event], float]:
    backend = RemoteBackend(RemoteEndpoint("hostile", url), model, **timeouts)
    started = time.monotonic()
    try:
        events = [e async for e in backend.generate(_request(max_tokens))]
    finally:
        await backend.close()
    return events, time.monotonic() - started


def _text(events: list[Event]) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


def _error(events: list[Event]) -> Error:
    [error] = [e for e in events if isinstance(e, Error)]
    assert events[-1] == Done("error")
    return error


async def _hung_up(remote: FakeRemote, model: str) -> None:
    """The remote's writer saw the connection close (the client stopped it, not just us)."""
    deadline = time.monotonic() + 10
    while remote.open[model]:
        assert time.monotonic() < deadline, f"{model}: the remote was never hung up on"
        await asyncio.sleep(0.05)


async def test_an_endless_stream_is_cut_at_the_clients_max_tokens(remote: FakeRemote) -> None:
    events, took = await _ask(remote.url, "endless-stream", max_tokens=50)
    text = _text(events)
    bounds = reading.ReplyBounds.for_max_tokens(50)
    assert events[-1] == Done("length") and not any(isinstance(e, Error) for e in events)
    assert 0 < len(text) <= bounds.chars and text.count("word") <= bounds.pieces
    assert took < 10
    await _hung_up(remote, "endless-stream")


@pytest.mark.parametrize("model", ["endless-body", "endless-error"])
async def test_an_endless_body_is_refused_at_its_size_cap(remote: FakeRemote, model: str) -> None:
    events, took = await _ask(remote.url, model)
    error = _error(events)
    assert "larger than 16 MiB" in error.message and "'hostile'" in error.message
    assert took < 30
    await _hung_up(remote, model)


async def test_a_500_mb_line_is_refused_at_the_line_cap(remote: FakeRemote) -> None:
    events, took = await _ask(remote.url, "huge-line")
    error = _error(events)
    assert "a line longer than 4 MiB" in error.message
    assert took < 30
    await _hung_up(remote, "huge-line")
    assert remote.sent["huge-line"] < 100 * 2**20, "the rest of the line was never read"


async def test_bytes_that_are_not_utf8_are_replaced_not_raised(remote: FakeRemote) -> None:
    events, _ = await _ask(remote.url, "bad-utf8")
    assert _text(events) == "ok \ufffd\ufffd\ufffd then fine." and events[-1] == Done("stop")


@pytest.mark.parametrize("model", ["huge-tool-call", "one-line-tool"])
async def test_a_million_character_tool_call_is_refused_not_run(remote: FakeRemote, model: str) -> None:
    events, took = await _ask(remote.url, model, max_tokens=200_000)
    [call] = [e for e in events if isinstance(e, ToolCall)]
    assert call.arguments == {} and call.error is not None
    assert "ran past 262,144 characters" in call.error and len(call.raw or "") <= 4096
    assert events[-1] == Done("tool_calls") and took < 30


async def test_a_tool_call_past_max_tokens_is_cut_and_not_run(remote: FakeRemote) -> None:
    events, _ = await _ask(remote.url, "huge-tool-call", max_tokens=100)
    [call] = [e for e in events if isinstance(e, ToolCall)]
    assert call.error is not None and "length limit (max_tokens)" in call.error
    assert events[-1] == Done("length")


async def test_a_login_page_with_status_200_is_a_sentence(remote: FakeRemote) -> None:
    error = _error((await _ask(remote.url, "html"))[0])
    assert "web page (text/html)" in error.message and "URL in settings" in error.message


async def test_a_remote_that_never_answers_hits_the_first_byte_timeout(remote: FakeRemote) -> None:
    events, took = await _ask(remote.url, "silent", connect_timeout_s=1.0, read_timeout_s=1.0)
    error = _error(events)
    assert error.code == "TIMEOUT" and "sent nothing back within 1 s (first-byte timeout)" in error.message
    assert took < 5


async def test_a_remote_that_stops_mid_reply_hits_the_stall_timeout(remote: FakeRemote) -> None:
    events, took = await _ask(remote.url, "stall", read_timeout_s=5.0, stall_timeout_s=1.0)
    error = _error(events)
    assert _text(events) == "Starting", "the reply so far is kept"
    assert "nothing came for 1 s (stall timeout)" in error.message and "kept" in error.message
    assert took < 5


async def test_an_endless_model_list_is_refused_at_its_size_cap(remote: FakeRemote) -> None:
    from core.config import Settings
    from core.remote import discover_models

    settings = Settings()
    settings.remotes = [RemoteEndpoint("hostile", remote.url)]
    remote.endless_models = True
    try:
        started = time.monotonic()
        found, problems = await discover_models(settings)
    finally:
        remote.endless_models = False
    assert found == [] and len(problems) == 1
    assert "'hostile'" in problems[0] and "larger than 16 MiB" in problems[0]
    assert time.monotonic() - started < 30
    await _hung_up(remote, "models")


@pytest.fixture
def full_listener() -> Iterator[str]:
    """A port whose accept queue is full: a new connection is never accepted (SYNs dropped)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(0)
    port = server.getsockname()[1]
    fillers = []
    for _ in range(4):
        s = socket.socket()
        s.setblocking(False)
        try:
            s.connect(("127.0.0.1", port))
        except BlockingIOError:
            pass
        fillers.append(s)
    time.sleep(0.2)
    yield f"http://127.0.0.1:{port}/v1"
    for s in [*fillers, server]:
        s.close()


async def test_a_remote_that_never_accepts_hits_the_connect_timeout(full_listener: str) -> None:
    events, took = await _ask(full_listener, "good", connect_timeout_s=1.0)
    error = _error(events)
    assert "did not accept a connection within 1 s (connect timeout)" in error.message
    assert took < 5


async def test_a_remote_that_drops_mid_reply_gets_remote_advice(remote: FakeRemote) -> None:
    """Issue 32 item 7: the advice is about the endpoint, not a local worker restarting."""
    events, _ = await _ask(remote.url, "drop")
    error = _error(events)
    assert _text(events) == "Half a reply" and error.code == "WORKER_CRASHED"
    assert "The reply so far was kept" in error.message
    assert "Check that the remote is running and reachable" in error.message
    assert "restarts" not in error.message
    from core.remote import remote_hint

    hint = remote_hint(error.code)  # what the chat shows under it, in place of a worker's advice
    assert hint is not None and "remote is running" in hint and "restarts" not in hint


# -- a real `llmdeck serve` with a hostile remote beside a good one ----------------------------


def _write_config(home: Path, url: str) -> None:
    """[[remotes]] in the serve home's config.toml (core.paths: <LLMDECK_HOME>/config)."""
    target = home / "config" / "config.toml"
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(
        f'[[remotes]]\nname = "good"\nurl = "{url}"\nmodels = ["good"]\n\n'
        f'[[remotes]]\nname = "bad"\nurl = "{url}"\n'
        'models = ["endless-body", "endless-error", "endless-stream", "huge-line"]\n',
        encoding="utf-8")


async def _chat(session: aiohttp.ClientSession, base: str, model: str, *, stream: bool,
                max_tokens: int = 30) -> tuple[int, bytes]:
    body = {"model": model, "messages": [{"role": "user", "content": "hi"}],
            "stream": stream, "max_tokens": max_tokens}
    async with session.post(f"{base}/chat/completions", json=body) as response:
        data = b""
        async for piece in response.content.iter_any():
            data += piece
            assert len(data) < 8 * 2**20, "serve passed a remote's flood on to its client"
        return response.status, data


async def test_serve_stays_healthy_and_small_beside_a_hostile_remote(
        remote: FakeRemote, tmp_path: Path) -> None:
    home = tmp_path / "serve-home"
    home.mkdir()
    _write_config(home, remote.url)
    proc, base = await asyncio.to_thread(spawn_serve, home, *scripted_args("local"))
    server = psutil.Process(proc.pid)
    try:
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as session:
            status, data = await _chat(session, base, "good/good", stream=False)
            assert status == 200 and b"Hello from the good remote." in data
            before = server.memory_info().rss
            peak = before

            async def watch() -> None:
                nonlocal peak
                while True:
                    peak = max(peak, server.memory_info().rss)
                    await asyncio.sleep(0.02)

            watcher = asyncio.create_task(watch())
            hostile = [asyncio.create_task(_chat(session, base, f"bad/{m}", stream=s))
                       for m, s in [("endless-body", False), ("endless-body", True),
                                    ("huge-line", True), ("endless-stream", True),
                                    ("endless-error", False), ("endless-error", True)]]
            started = time.monotonic()
            good_times = []
            while not all(t.done() for t in hostile):  # the good remote answers all along
                t0 = time.monotonic()
                status, data = await _chat(session, base, "good/good", stream=True)
                good_times.append(time.monotonic() - t0)
                assert status == 200 and b"good " in data
                assert time.monotonic() - started < 60
            watcher.cancel()
            answers = [t.result() for t in hostile]
            peak = max(peak, server.memory_info().rss)
        assert answers[0][0] >= 500 and b"larger than 16 MiB" in answers[0][1]
        assert b"larger than 16 MiB" in answers[1][1]
        assert b"longer than 4 MiB" in answers[2][1]
        assert answers[3][0] == 200 and b'"finish_reason": "length"' in answers[3][1].replace(b'":"', b'": "')
        assert answers[4][0] >= 500 and b"larger than 16 MiB" in answers[4][1]
        assert b"larger than 16 MiB" in answers[5][1]
        assert max(good_times) < 5, good_times
        grown = (peak - before) / 2**20
        print(f"serve RSS before {before / 2**20:.0f} MiB, peak {peak / 2**20:.0f} MiB "
              f"(+{grown:.0f} MiB); good answers {len(good_times)}, slowest {max(good_times):.2f} s")
        assert grown < 200, f"serve grew by {grown:.0f} MiB"
    finally:
        proc.send_signal(signal.SIGTERM)
        await asyncio.to_thread(proc.wait, 15)
