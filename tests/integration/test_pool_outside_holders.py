"""The vision model, the embeddings reader and a draft model count against the memory
budget like the chat models (issue 31, items 1-2).

Real processes under a small LLMDECK_MEMORY_BUDGET_MB: the chat model is a sized folder
(sparse weights) served by the scripted engine; the documents reader is the real utility
process with the bundled MiniLM; the vision model is a tiny random-weight LLaVA on mlx-vlm.
Before, both children started outside admission: nothing was evicted for them, nothing
refused, and F4 showed no memory for them.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.docs.embeddings import ensure_model_files
from core.docs.worker import UtilityWorker, UtilityWorkerError
from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.events import Done
from core.vision.worker import CAPTION_CONTEXT, VisionWorker
from core.workers import memory_budget as mb
from core.workers.pool import WorkerLoadError, WorkerPool
from core.workers.status_file import format_table
from tests.fixtures.sized_models import sized_model_dir
from tests.fixtures.vlm_models import build_tiny_llava
from tests.helpers.procs import wait_gone
from tui.widgets.worker_pane import loaded_lines

pytestmark = pytest.mark.slow
CONTEXT = 256


def chat_model(tmp_path: Path, name: str = "chat", weights: int = 300_000_000) -> Path:
    return sized_model_dir(tmp_path / name, weights_bytes=weights, layers=28, heads=16,
                           kv_heads=8, head_dim=128)


def chat_spec(folder: Path, engine: str = "scripted", **options: object) -> ModelSpec:
    return ModelSpec(path=str(folder), engine=engine, context_size=CONTEXT,
                     options=tuple({"reply": "hi", **options}.items()))


def need_of(folder: Path) -> int:
    return mb.model_need(folder, CONTEXT).total_bytes


def budget(monkeypatch: pytest.MonkeyPatch, total_bytes: int) -> None:
    monkeypatch.setenv(mb.ENV_BUDGET_MB, str(total_bytes / 10**6))


async def test_the_embeddings_reader_evicts_an_idle_chat_model_and_gives_its_bytes_back(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = chat_model(tmp_path)
    reader_need = mb.weights_need(ensure_model_files()).total_bytes
    assert reader_need > 50_000_000  # MiniLM's weights
    budget(monkeypatch, need_of(folder) + reader_need // 2)  # one of them at a time
    pool = WorkerPool()
    reader = UtilityWorker(idle_s=0)
    reader.gate = pool
    try:
        await pool.load("chat", chat_spec(folder))
        [chat_pid] = pool.pids()
        assert (await reader.ping())["pid"] == reader.pid
        assert pool.loaded() == [] and wait_gone([chat_pid], 5.0) == []  # evicted for it
        row = reader.status()
        assert row is not None and row.memory_bytes == reader_need
        lines = [line.plain for line in loaded_lines([row])]
        assert lines and lines[0].startswith(f"{row.model}: {reader_need / 10**6:.1f} MB")
        assert "MEMORY" in format_table([row]) and f"{reader_need / 10**6:.0f}MB" in format_table([row])
        # While the reader runs the chat model does not fit beside it (the reader is busy
        # with nothing, so it is the idle one that goes).
        await reader.unload()
        assert reader.pid is None and reader.memory_bytes == 0
        events = [e async for e in pool.generate("chat", GenerationRequest(
            "r1", ({"role": "user", "content": "hi"},), SamplingParams(max_tokens=4)))]
        assert events[-1] == Done("stop") and pool.loaded() == ["chat"]
    finally:
        await reader.shutdown()
        await pool.shutdown()


async def test_an_embeddings_reader_too_big_for_the_budget_is_refused_with_the_numbers(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    reader_need = mb.weights_need(ensure_model_files()).total_bytes
    budget(monkeypatch, reader_need // 2)
    pool = WorkerPool()
    reader = UtilityWorker(idle_s=0)
    reader.gate = pool
    try:
        with pytest.raises(UtilityWorkerError) as refused:
            await reader.ping()
        assert refused.value.code == "OOM"
        assert refused.value.message.startswith(
            "The document reader (MiniLM embeddings) needs ")
        assert "of the" in refused.value.message and "memory budget is free" in refused.value.message
        assert reader.pid is None and reader.starts == 0  # no process was started
    finally:
        await reader.shutdown()
        await pool.shutdown()


async def test_the_vision_model_evicts_an_idle_chat_model_and_is_refused_when_too_big(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vlm = build_tiny_llava(tmp_path / "tiny-llava")
    vision_need = mb.weights_need(vlm, CAPTION_CONTEXT).total_bytes
    folder = chat_model(tmp_path)
    budget(monkeypatch, need_of(folder) + vision_need // 2)
    pool = WorkerPool()
    vision = VisionWorker(vlm, idle_s=0)
    vision.gate = pool
    try:
        await pool.load("chat", chat_spec(folder))
        await vision._ensure_started()  # what the first image does before its caption
        assert pool.loaded() == []
        row = vision.status()
        assert row.memory_bytes == vision_need and row.state == "ready"
        await vision.unload()
        assert vision.memory_bytes == 0
        await pool.load("chat", chat_spec(folder))  # its bytes came back
        assert pool.loaded() == ["chat"]
        budget(monkeypatch, vision_need // 2)  # now the vision model alone is too big
        await pool.unload("chat")
        with pytest.raises(Exception) as refused:
            await vision._ensure_started()
        assert getattr(refused.value, "code", "") == "OOM"
        assert str(refused.value).startswith("The vision model tiny-llava needs ")
        assert vision.status().state == "failed" and vision.pid is None
    finally:
        await vision.shutdown()
        await pool.shutdown()


async def test_a_draft_model_counts_with_its_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder, draft = chat_model(tmp_path), chat_model(tmp_path, "draft", 100_000_000)
    budget(monkeypatch, need_of(folder) + need_of(draft) // 2)  # the model fits, not both
    pool = WorkerPool()
    try:
        with pytest.raises(WorkerLoadError) as refused:
            await pool.load("chat", chat_spec(folder, engine="mlx", draft_model=str(draft)))
        assert refused.value.code == "OOM" and "of it the draft model" in refused.value.message
        assert pool.pids() == []
        await pool.load("chat", chat_spec(folder))  # without its draft it fits
        [row] = pool.status()
        assert row.memory_bytes == need_of(folder)
    finally:
        await pool.shutdown()


async def test_an_idle_embeddings_reader_makes_room_for_a_chat_model(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    folder = chat_model(tmp_path)
    reader_need = mb.weights_need(ensure_model_files()).total_bytes
    budget(monkeypatch, need_of(folder) + reader_need // 2)
    pool = WorkerPool()
    reader = UtilityWorker(idle_s=0)
    reader.gate = pool
    try:
        pid = (await reader.ping())["pid"]
        await pool.load("chat", chat_spec(folder))  # the idle reader is the LRU idle holder
        assert pool.loaded() == ["chat"]
        assert reader.pid is None and reader.memory_bytes == 0 and wait_gone([pid], 5.0) == []
    finally:
        await reader.shutdown()
        await pool.shutdown()


async def test_the_apps_document_reader_counts_against_the_budget_and_a_refusal_keeps_nothing(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The Runtime hands its reader and its vision model the pool: attaching a document
    under a budget too small for MiniLM answers the budget's sentence and stores nothing
    (before, the reader started outside the budget and the file attached)."""
    from tests.fixtures.docs_runtime import scripted_runtime

    reader_need = mb.weights_need(ensure_model_files()).total_bytes
    budget(monkeypatch, reader_need // 2)
    note = tmp_path / "note.md"
    note.write_text("# Plan\n\nLaunch in June.\n")
    rt = scripted_runtime(ensure_model_files())
    await rt.start(preload=False)
    try:
        assert rt.chat.captioner.gate is rt.chat.utility.gate  # one budget for both
        [result] = await rt.attach(None, [note])
        assert "memory budget is free" in getattr(result, "message", ""), result
        assert rt.chat.utility.pid is None  # no reader process was started
        assert await rt.list_conversations() == []  # nothing half-attached
    finally:
        await rt.close()
