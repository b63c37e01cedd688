"""Attaching hostile or huge files through the Runtime and the real utility worker
(issue 19): the size limit is a setting, binary files are refused by the worker with a
sentence, reading and indexing report progress, and a cancel stops the worker's work at
once and changes nothing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest
import pytest_asyncio

from core.docs import DocError
from core.docs.embeddings import ensure_model_files
from core.runtime import AttachResult, Runtime
from tests.fixtures.docs_runtime import scripted_runtime, wait_for
from tests.helpers.procs import wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
MIB = 1024 * 1024


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("docs-limits-home")
        mp.setenv("LLMDECK_HOME", str(path))
        yield path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt(home: Path):
    runtime = scripted_runtime(ensure_model_files())
    await runtime.start()
    yield runtime
    await runtime.close()


def prose(path: Path, size: int) -> Path:
    line = "The committee met on Tuesday and agreed the budget for the spring fair. "
    path.write_text(line * (size // len(line)))
    return path


async def test_the_size_limit_is_a_setting_and_refuses_before_the_worker(rt: Runtime,
                                                                         home: Path) -> None:
    big = prose(home / "minutes.txt", 2 * MIB)
    rt.settings.attach_max_mb = 1
    try:
        [err] = await rt.attach(None, [big])
    finally:
        rt.settings.attach_max_mb = 20
    assert isinstance(err, DocError) and err.code == "TOO_LARGE"
    assert "minutes.txt is 2 MB, over the 1 MB limit" in err.message
    assert rt.chat.utility.pid is None, "refused from its size alone: no worker started"
    assert await rt.list_conversations() == []


async def test_nul_bytes_behind_a_txt_name_are_refused_by_the_worker(rt: Runtime,
                                                                    home: Path) -> None:
    zeros = home / "zeros.txt"
    with zeros.open("wb") as f:
        f.truncate(5 * MIB)
    [err] = await rt.attach(None, [zeros])
    assert isinstance(err, DocError) and err.code == "BINARY", err
    assert "zeros.txt is not text" in err.message
    assert await rt.list_conversations() == []


async def test_progress_then_a_cancel_stops_the_worker_and_changes_nothing(
    rt: Runtime, home: Path
) -> None:
    big = prose(home / "report.txt", MIB + MIB // 2)  # about 2,000 passages to embed
    seen: list[tuple[str, str, int, int]] = []
    task = asyncio.ensure_future(rt.attach(None, [big], lambda *a: seen.append(a)))
    await wait_for(lambda: any(s[1] == "embedding" for s in seen), timeout=120)
    reading = [s for s in seen if s[1] == "reading"]
    assert reading[0] == ("report.txt", "reading", MIB, big.stat().st_size)
    assert reading[-1][2] == reading[-1][3], "reading reached 100%"
    embedding = next(s for s in seen if s[1] == "embedding")
    assert embedding[3] > 1000 and embedding[2] < embedding[3]
    pid = rt.chat.utility.pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone([pid], 2) == [], "the worker stopped embedding at once"
    assert await rt.list_conversations() == []
    small = home / "note.md"
    small.write_text("# Note\n\nThe fair opens at noon.")
    [ok] = await rt.attach(None, [small])
    assert isinstance(ok, AttachResult) and ok.alias == "note.md", "the next attach works"
    assert [a.alias for a in await rt.attachments(ok.conversation_id)] == ["note.md"]
