"""Several models loaded at once in one pool, with real worker processes.

Two small random-weight MLX models and the bundled Gemma GGUF (llama.cpp) answer side by
side; a small budget evicts the least recently used idle one; a load the budget cannot
hold is refused with its numbers. Leases: a model is never unloaded under a reply (an
unload or a load that needs its room waits for the reply to end), and keep_alive decides
how long an idle model stays (0: gone once its reply ends).
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done, Error, TextDelta
from core.workers import memory_budget as mb
from core.workers.pool import WorkerLoadError, WorkerPool
from tests.fixtures.mlx_models import LLAMA_SHAPE, QWEN3_SHAPE, build_model_dir
from tests.fixtures.sized_models import sized_model_dir
from tests.helpers.procs import wait_gone

pytestmark = pytest.mark.timeout(240)
CONTEXT = 512


@pytest.fixture(scope="module")
def two_mlx(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    base = tmp_path_factory.mktemp("two-mlx")
    return (build_model_dir(base / "tiny-qwen3", QWEN3_SHAPE, seed=1),
            build_model_dir(base / "tiny-llama", LLAMA_SHAPE, seed=2))


def mlx(folder: Path) -> ModelSpec:
    return ModelSpec(str(folder), "mlx", context_size=CONTEXT)


def gguf(path: Path) -> ModelSpec:
    return ModelSpec(str(path), "llamacpp", context_size=CONTEXT)


def request(rid: str, max_tokens: int = 6) -> GenerationRequest:
    return GenerationRequest(rid, ({"role": "user", "content": "Say hello."},),
                             SamplingParams(temperature=0.0, max_tokens=max_tokens))


async def answer(pool: WorkerPool, key: str, rid: str, max_tokens: int = 6) -> list:
    return [e async for e in pool.generate(key, request(rid, max_tokens))]


def need(spec: ModelSpec) -> int:
    return mb.model_need(spec.path, spec.context_size, engine=spec.engine).total_bytes


def set_budget(monkeypatch: pytest.MonkeyPatch, nbytes: int) -> None:
    monkeypatch.setenv(mb.ENV_BUDGET_MB, repr(nbytes / 10**6))


async def test_two_mlx_models_and_the_bundled_gguf_answer_together(
        two_mlx: tuple[Path, Path], bundled_gguf: Path) -> None:
    pool = WorkerPool()
    try:
        await asyncio.gather(pool.load("qwen", mlx(two_mlx[0])), pool.load("llama", mlx(two_mlx[1])),
                             pool.load("gemma", gguf(bundled_gguf), label="Gemma 3 270M"))
        assert sorted(pool.loaded()) == ["gemma", "llama", "qwen"]
        assert len(set(pool.pids())) == 3  # each in its own worker
        replies = await asyncio.gather(*(answer(pool, k, f"r-{k}") for k in ("qwen", "llama", "gemma")))
        for events in replies:
            assert events[-1] in (Done("stop"), Done("length")), events[-2:]
            assert not any(isinstance(e, Error) for e in events)
        models = {m.key: m for m in pool.models()}
        assert set(models) == {"qwen", "llama", "gemma"}
        assert all(m.state == "idle" and m.requests == 0 for m in models.values())
        assert models["gemma"].memory_bytes == need(gguf(bundled_gguf)) > 200_000_000
        assert models["gemma"].label == "Gemma 3 270M" and models["gemma"].rss_bytes > 0
        assert models["gemma"].idle_left_s is None  # no idle time set: kept loaded
    finally:
        await pool.shutdown()


async def test_a_small_budget_evicts_the_least_recently_used_idle_model(
        two_mlx: tuple[Path, Path], bundled_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    qwen, llama, gemma = mlx(two_mlx[0]), mlx(two_mlx[1]), gguf(bundled_gguf)
    set_budget(monkeypatch, need(gemma) + need(qwen) + need(llama) - 1)  # any two, not three
    pool = WorkerPool()
    try:
        await pool.load("qwen", qwen)
        await pool.load("llama", llama)
        [llama_pid] = [s.pid for s in pool.status() if s.worker_id.startswith("llama")]
        assert (await answer(pool, "qwen", "use-qwen"))[-1].finish_reason in ("stop", "length")
        await pool.load("gemma", gemma)  # llama, used least recently, makes room
        assert sorted(pool.loaded()) == ["gemma", "qwen"]
        assert wait_gone([llama_pid], 5.0) == []
        # the evicted model answers its next request (qwen, idle longest now, goes)
        assert (await answer(pool, "llama", "use-llama"))[-1].finish_reason in ("stop", "length")
        assert sorted(pool.loaded()) == ["gemma", "llama"]
    finally:
        await pool.shutdown()


async def test_a_load_the_budget_cannot_hold_is_refused_with_its_sentence(
        bundled_gguf: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gemma = gguf(bundled_gguf)
    set_budget(monkeypatch, 100_000_000)
    pool = WorkerPool()
    try:
        started = time.monotonic()
        with pytest.raises(WorkerLoadError) as refused:
            await pool.load("gemma", gemma, label="Gemma 3 270M")
        assert time.monotonic() - started < 5.0 and pool.pids() == []
        described = mb.model_need(bundled_gguf, CONTEXT, engine="llamacpp").describe()
        assert refused.value.code == "OOM"
        assert refused.value.message == (
            f"Gemma 3 270M needs {described}; 0.1 GB of the 0.1 GB memory budget is free. "
            f"{mb.RAISE}")
        [failed] = pool.models()
        assert failed.state == "failed" and failed.error == refused.value.message
    finally:
        await pool.shutdown()


# -- leases: the scripted engine (real workers) replays a reply at a known pace -----------

LONG = "word " * 40  # 40 pieces at 40 a second: a reply of ~1 s


def sized(tmp_path: Path, name: str, weights: int, **options: object) -> ModelSpec:
    folder = sized_model_dir(tmp_path / name, weights_bytes=weights, layers=28, heads=16,
                             kv_heads=8, head_dim=128)
    opts = {"reply": LONG, "tokens_per_s": 40, "chunk_chars": 5, **options}
    return ModelSpec(str(folder), "scripted", context_size=8192, options=tuple(opts.items()))


def text(events: list) -> str:
    return "".join(e.text for e in events if isinstance(e, TextDelta))


async def test_an_unload_waits_for_the_reply_running_on_the_model(tmp_path: Path) -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", sized(tmp_path, "m", 10_000_000))
        pids = pool.pids()
        stream = pool.generate("m", request("r1", 100))
        first = [await anext(stream)]
        assert pool.leases("m") == 1 and pool.models()[0].state == "busy"
        unloading = asyncio.ensure_future(pool.unload("m", wait_s=30))
        rest = [e async for e in stream]
        assert rest[-1] == Done("stop") and text(first + rest) == LONG  # not cut
        assert await asyncio.wait_for(unloading, 10) is True
        assert pool.loaded() == [] and wait_gone(pids, 5.0) == []
    finally:
        await pool.shutdown()


async def test_an_unload_whose_wait_runs_out_ends_the_reply_with_its_text(tmp_path: Path) -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", sized(tmp_path, "m", 10_000_000, tokens_per_s=5))
        stream = pool.generate("m", request("r1", 100))
        first = [await anext(stream)]
        assert await pool.unload("m", wait_s=0.3) is False
        rest = await asyncio.wait_for(_drain(stream), 10)
        assert rest[-1] == Done("error") and isinstance(rest[-2], Error)
        assert "unloaded" in rest[-2].message and LONG.startswith(text(first + rest))
    finally:
        await pool.shutdown()


async def _drain(stream) -> list:
    return [e async for e in stream]


async def test_a_load_that_needs_a_busy_models_room_waits_for_its_reply(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    a = sized(tmp_path, "a", 300_000_000)  # 1.24 GB each: one fits, not two
    b = sized(tmp_path, "b", 300_000_000, reply="from b")
    monkeypatch.setenv(mb.ENV_BUDGET_MB, "2000")
    pool = WorkerPool()
    try:
        await pool.load("a", a)
        stream = pool.generate("a", request("r1", 100))
        first = [await anext(stream)]
        with pytest.raises(WorkerLoadError):  # no wait: refused at once, the reply untouched
            await pool.load("b", b, wait_s=0)
        loading = asyncio.ensure_future(pool.load("b", b, wait_s=30))
        rest = [e async for e in stream]
        assert rest[-1] == Done("stop") and text(first + rest) == LONG
        await asyncio.wait_for(loading, 20)
        assert pool.loaded() == ["b"]  # a, idle once its reply ended, made room
        assert text(await answer(pool, "b", "r2")) == "from b"
    finally:
        await pool.shutdown()


async def test_keep_alive_zero_unloads_the_model_once_its_reply_ends(tmp_path: Path) -> None:
    pool = WorkerPool()
    try:
        await pool.load("m", sized(tmp_path, "m", 10_000_000))
        await pool.load("kept", sized(tmp_path, "kept", 10_000_000))
        pool.set_keep_alive("kept", -1)
        pids = pool.pids()
        [m_pid] = [s.pid for s in pool.status() if s.worker_id.startswith("m#")]
        stream = pool.generate("m", request("r1", 100))
        pool.set_keep_alive("m", 0)  # as the server does: just before the reply starts
        events = [await anext(stream)]
        assert {m.key: m.state for m in pool.models()} == {"m": "busy", "kept": "idle"}
        events += [e async for e in stream]
        assert events[-1] == Done("stop") and text(events) == LONG  # the reply is whole
        for _ in range(100):  # the loop must run for the unload: no blocking wait here
            if pool.loaded() == ["kept"]:
                break
            await asyncio.sleep(0.05)
        assert pool.loaded() == ["kept"] and len(pids) == 2
        assert wait_gone([m_pid], 5.0) == []
        # asked again, it loads again
        assert text(await answer(pool, "m", "r2", 100)) == LONG
    finally:
        await pool.shutdown()


async def test_keep_alive_seconds_show_as_idle_time_left_and_unload_then(tmp_path: Path) -> None:
    pool = WorkerPool(idle_unload_s=600)
    try:
        await pool.load("m", sized(tmp_path, "m", 10_000_000))
        [status] = pool.models()
        assert 590 < status.idle_left_s <= 600  # the pool's default
        pool.set_keep_alive("m", 1.0)
        [status] = pool.models()
        assert status.idle_left_s <= 1.0 and abs(status.last_used - time.time()) < 5
        for _ in range(100):
            if not pool.loaded():
                break
            await asyncio.sleep(0.05)
        assert pool.loaded() == []
    finally:
        await pool.shutdown()
