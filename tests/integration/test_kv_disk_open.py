"""Opening a conversation warms its KV cache before the person sends (issue 33 item 2),
end to end: a real Runtime and store, a real MLX worker (a tiny random-weight model), the
disk cache in the test's own LLMDECK_HOME.

A conversation of two turns; the Runtime closed (its worker, and the in-memory cache,
gone); a new Runtime opens the conversation as the app does (`messages`, the newest
page) while its model still loads (through the service: once it is loaded); once the worker has loaded the stored chain (its files touched), the files are
deleted, and the next turn still reuses the whole history: the warm-up happened on open.
Before the wiring nothing told the worker, and that turn prefilled everything.
"""

from __future__ import annotations

import asyncio
import os
import time
from pathlib import Path

import pytest

from core import paths
from core.config import Settings
from core.engines.base import ModelSpec
from core.events import Done, Usage
from core.runtime import Runtime
from tests.fixtures.mlx_models import QWEN3_SHAPE, build_model_dir
from tests.helpers import service_proc as svc
from tui.service_runtime import ServiceRuntime

pytestmark = pytest.mark.timeout(120)
SYSTEM = "You are a careful assistant. Answer briefly. " * 25
# The template's tokens around the new user message ("Again."): <|im_end|>\n<|im_start|>user
# \n ... <|im_end|>\n<|im_start|>assistant\n (as in test_kv_disk)
FRAME = 12
WARMED_WITHIN_S = 15.0


@pytest.fixture(scope="module")
def tiny_qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build_model_dir(tmp_path_factory.mktemp("kv-open") / "tiny-qwen3", QWEN3_SHAPE, seed=3)


def _settings() -> Settings:
    settings = Settings()
    settings.system_prompt = SYSTEM
    settings.sampling.max_tokens = 16
    settings.sampling.temperature = 0.0
    settings.context_size = 2048
    return settings


def _runtime(model: Path) -> Runtime:
    settings = _settings()
    spec = ModelSpec(str(model), "mlx", context_size=2048,
                     options=(("warmup_batch_sizes", (1,)), ("kv_disk_gb", 0.05)))
    return Runtime(settings, model_spec=spec)


async def _send(rt: Runtime | ServiceRuntime, cid: str | None, text: str) -> tuple[str, Usage]:
    turn = await rt.start_turn(cid, text)
    usage, done = None, None
    async for event in turn.events():
        if isinstance(event, Usage):
            usage = event
        elif isinstance(event, Done):
            done = event
    assert done is not None and done.finish_reason in ("stop", "length"), done
    assert usage is not None
    return turn.conversation_id, usage


def _files() -> list[Path]:
    return sorted((paths.cache_dir() / "kv").rglob("*.kv"))


def _age(files: list[Path]) -> float:
    """Mark the files used an hour ago; returns that time (see _wait_loaded)."""
    past = time.time() - 3600
    for f in files:
        os.utime(f, (past, past))
    return past


async def _wait_loaded(files: list[Path], past: float) -> None:
    """The worker reads the chain in an idle step and then marks it used (mtime): from
    outside, that is when it is in memory. Without the warm-up nothing moves (the test
    then goes on and fails on cached_tokens)."""
    deadline = time.monotonic() + WARMED_WITHIN_S
    while time.monotonic() < deadline and not all(
            f.exists() and f.stat().st_mtime > past + 1 for f in files):
        await asyncio.sleep(0.05)


async def test_opening_a_conversation_warms_its_cache_so_the_next_turn_reuses_the_history(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    first = _runtime(tiny_qwen3)
    await first.start()
    try:
        cid, _ = await _send(first, None, "Count to ten, then name three colours.")
        await _send(first, cid, "Again.")
    finally:
        await first.close()  # the worker exits: only the disk keeps the cache
    files = _files()
    assert files, "the turns' caches were written before the worker exited"
    past = _age(files)

    later = _runtime(tiny_qwen3)
    await later.start()
    try:
        assert later.model_state().state != "ready"
        # The app opening the conversation at its start: the model still loads, and the
        # warm-up waits for it (it never starts a load of its own).
        page = await later.messages(cid, 50)
        assert [m.role for m in page if m.role in ("user", "assistant")][-1] == "assistant"
        await _wait_loaded(files, past)
        for f in _files():
            f.unlink()
        _, usage = await _send(later, cid, "Again.")
        assert usage.cached_tokens >= usage.prompt_tokens - FRAME, usage
        assert usage.prompt_tokens > 200  # the history really was long (the system prompt)
    finally:
        await later.close()


async def _client() -> ServiceRuntime:
    client = ServiceRuntime()
    await client.start()
    for _ in range(600):
        if client.model_state().state == "ready":
            return client
        await asyncio.sleep(0.1)
    raise AssertionError(f"the service's model is {client.model_state()}")


async def test_a_client_opening_a_conversation_warms_the_services_worker(
        tiny_qwen3: Path, llmdeck_home: Path) -> None:
    """The same through the engine service: the client's `messages` is the service's
    Runtime's, so opening there warms the service's worker. The service is stopped and
    started again between the turns (its worker with it)."""
    _settings().save()
    args = ("--model", str(tiny_qwen3), "--engine", "mlx", "--option", "kv_disk_gb=0.05",
            "--option", "warmup_batch_sizes=[1]")
    with svc.no_service_left(llmdeck_home):
        svc.start(*args)
        client = await _client()
        try:
            cid, _ = await _send(client, None, "Count to ten, then name three colours.")
        finally:
            await client.close()
        stopped = svc.llmdeck("service", "stop")
        assert stopped.returncode == 0, stopped.stdout + stopped.stderr
        files = _files()
        assert files
        past = _age(files)
        svc.start(*args)
        client = await _client()
        try:
            await client.messages(cid, 50)
            await _wait_loaded(files, past)
            for f in _files():
                f.unlink()
            _, usage = await _send(client, cid, "Again.")
            assert usage.cached_tokens >= usage.prompt_tokens - FRAME, usage
        finally:
            await client.close()
