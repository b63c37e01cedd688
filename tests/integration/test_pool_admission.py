"""Admission before every load, with real worker processes: a model that does not fit the
memory budget is refused at once with the numbers and no worker starts; idle models make
room least recently used first, a busy one never; a worker the system kills while loading
is out of memory with the same numbers; the hub's Fits here agrees with the pool.

Models are real folders whose weights are sparse holes (tests/fixtures/sized_models.py), so
their sizes are large while the disk holds nothing; the scripted engine serves them (it
never reads weights), so every worker here is a real process that loads in a second.
"""

from __future__ import annotations

import asyncio
import math
import os
import signal
import time
from pathlib import Path

import psutil
import pytest

from core.config import Settings
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta
from core.hub import fit, load_recommended
from core.runtime import Runtime
from core.workers import memory_budget as mb
from core.workers.pool import WorkerLoadError, WorkerPool
from tests.fixtures.sized_models import sized_model_dir
from tests.helpers.procs import wait_gone

CONTEXT = 8192
# 28 layers x 8 KV heads x 128 dims x (K and V) x 2 bytes = 114,688 bytes a token
KV_AT_CONTEXT = 28 * 8 * 128 * 2 * 2 * CONTEXT  # 0.94 GB


def model(tmp_path: Path, name: str, weights: int) -> Path:
    return sized_model_dir(tmp_path / name, weights_bytes=weights, layers=28, heads=16,
                           kv_heads=8, head_dim=128)


def spec(folder: Path, engine: str = "scripted", context: int = CONTEXT, **options) -> ModelSpec:
    return ModelSpec(path=str(folder), engine=engine, context_size=context,
                     options=tuple(options.items()))


def request(rid: str) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "hi"},),
                             SamplingParams(max_tokens=400))


def budget_mb(monkeypatch: pytest.MonkeyPatch, megabytes: int) -> None:
    monkeypatch.setenv(mb.ENV_BUDGET_MB, str(megabytes))


def children() -> set[int]:
    return {p.pid for p in psutil.Process().children(recursive=True)}


async def test_a_load_over_the_budget_is_refused_at_once_with_the_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = model(tmp_path, "big", 300_000_000)
    budget_mb(monkeypatch, 1000)
    pool = WorkerPool()
    before = children()
    try:
        started = time.monotonic()
        with pytest.raises(WorkerLoadError) as refused:
            await pool.load("chat", spec(folder, engine="mlx"), label="Big 4B")
        assert time.monotonic() - started < 3.0  # at once: nothing was started
        assert refused.value.code == "OOM"
        assert refused.value.message.startswith(
            "Big 4B needs 1.2 GB (0.3 GB weights + 0.9 GB context cache at 8,192 tokens); "
            "1.0 GB of the 1.0 GB memory budget is free.")
        assert pool.pids() == [] and children() == before
        [status] = pool.status()
        assert status.state == "failed" and status.error == refused.value.message
        # a request for it is refused the same way, and ends
        events = [e async for e in pool.generate("chat", request("r1"))]
        assert events == [Error("OOM", refused.value.message), Done("error")]
        assert children() == before
    finally:
        await pool.shutdown()


async def test_the_app_shows_the_refusal_as_the_models_error(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = model(tmp_path, "big", 300_000_000)
    budget_mb(monkeypatch, 1000)
    rt = Runtime(Settings(), model_spec=spec(folder, label="Big 4B"))
    await rt.start()
    try:
        assert not await rt.ensure_model()
        assert rt.model.state == "failed"
        assert rt.model.error.startswith("Big 4B needs 1.2 GB (0.3 GB weights")
        assert rt.pool.pids() == []
    finally:
        await rt.close()


async def test_idle_models_make_room_least_recently_used_first(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a, b, c = (model(tmp_path, n, 300_000_000) for n in "abc")  # 1.24 GB each
    budget_mb(monkeypatch, 2600)  # two fit, not three
    pool = WorkerPool()
    try:
        await pool.load("vision", spec(a, reply="seen"))
        await pool.load("embeddings", spec(b, reply="vec"))
        [pid_b] = [s.pid for s in pool.status() if s.worker_id.startswith("embeddings")]
        replies = [e async for e in pool.generate("vision", request("use-a"))]  # a: used last
        assert replies[-1] == Done("stop")
        await pool.load("chat", spec(c, reply="hello"))
        assert sorted(pool.loaded()) == ["chat", "vision"]  # b, the least recently used, went
        assert wait_gone([pid_b], 5.0) == []
        held = sum(s.memory_bytes for s in pool.status() if s.state in ("idle", "busy"))
        assert held == 2 * (300_000_000 + KV_AT_CONTEXT)
        # an evicted model comes back on its next request (making room again)
        replies = [e async for e in pool.generate("embeddings", request("use-b"))]
        assert replies[-1] == Done("stop") and "".join(
            e.text for e in replies if isinstance(e, TextDelta)) == "vec"
        assert sorted(pool.loaded()) == ["chat", "embeddings"]  # vision was the idle LRU now
    finally:
        await pool.shutdown()


async def test_a_model_answering_is_never_unloaded_to_make_room(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = model(tmp_path, "a", 300_000_000)  # 1.24 GB
    big = model(tmp_path, "big", 600_000_000)  # 1.54 GB: fits only if a went
    budget_mb(monkeypatch, 2600)
    pool = WorkerPool()
    try:
        await pool.load("chat", spec(a, reply="word " * 30, tokens_per_s=40))
        stream = pool.generate("chat", request("busy"))
        first = await anext(stream)
        with pytest.raises(WorkerLoadError) as refused:
            await pool.load("vision", spec(big), label="Big vision")
        assert refused.value.code == "OOM"
        assert ("1.4 GB of the 2.6 GB memory budget is free (1.2 GB is held by models "
                "answering now)") in refused.value.message
        rest = [e async for e in stream]
        assert rest[-1] == Done("stop")  # the reply was not touched
        text = "".join(e.text for e in [first, *rest] if isinstance(e, TextDelta))
        assert text == "word " * 30
    finally:
        await pool.shutdown()


async def test_a_worker_killed_while_loading_is_out_of_memory_with_the_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = model(tmp_path, "big", 300_000_000)
    budget_mb(monkeypatch, 20_000)
    need = mb.model_need(folder, CONTEXT)
    pool = WorkerPool(load_timeout_s=60)
    try:
        loading = asyncio.ensure_future(pool.load("chat", spec(folder, hang_load_s=60),
                                                  label="Big 4B"))
        for _ in range(200):  # the worker process is up and inside its (slow) load
            if pool.pids():
                break
            await asyncio.sleep(0.05)
        [pid] = pool.pids()
        await asyncio.sleep(0.5)
        os.kill(pid, signal.SIGKILL)  # what the system's OOM killer does
        killed = time.monotonic()
        with pytest.raises(WorkerLoadError) as failed:
            await asyncio.wait_for(loading, 10)
        assert time.monotonic() - killed < 5.0
        assert failed.value.code == "OOM"
        message = failed.value.message
        assert message.startswith("Big 4B ran out of memory while loading (the system killed "
                                  f"its worker): it needs {need.describe()}; 20.0 GB of the "
                                  "20.0 GB memory budget was free")
        assert "exit code" not in message
        assert wait_gone([pid], 5.0) == []
    finally:
        await pool.shutdown()


async def test_the_hubs_fits_column_agrees_with_admission(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    rec = next(r for r in load_recommended("gguf") if r.name == "Qwen3 4B")
    folder = sized_model_dir(tmp_path / "qwen3-4b", weights_bytes=rec.size_bytes, layers=36,
                             heads=32, kv_heads=8, head_dim=128)
    need = rec.needed_bytes(4096)
    assert mb.model_need(folder, 4096).total_bytes == need  # one arithmetic
    assert need % 10**6  # so that the two budgets below fall either side of it
    for megabytes, verdict in ((math.ceil(need / 10**6), "ok"), (need // 10**6, "tight")):
        budget_mb(monkeypatch, megabytes)
        assert fit(rec, 4096).verdict == verdict
        pool = WorkerPool()
        try:
            if verdict == "ok":
                await pool.load("chat", spec(folder, context=4096))
                assert pool.loaded() == ["chat"]
            else:
                with pytest.raises(WorkerLoadError) as refused:
                    await pool.load("chat", spec(folder, context=4096))
                assert refused.value.code == "OOM" and pool.pids() == []
        finally:
            await pool.shutdown()
