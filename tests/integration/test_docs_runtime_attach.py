"""Attaching documents through the Runtime: real files, markitdown and MiniLM in the real
utility worker process, the real store, the scripted model for turns.

One runtime (and so one utility process, one MiniLM load) serves the whole module.
"""

from __future__ import annotations

import asyncio
import os
import signal
from pathlib import Path

import pytest
import pytest_asyncio

from core.docs import DocError
from core.docs.embeddings import ensure_model_files
from core.events import TextDelta
from core.runtime import AttachResult, Runtime
from tests.fixtures.docs_files import (
    FACTS,
    make_corrupt_pdf,
    make_docx,
    make_encrypted_pdf,
    make_fact_document,
    make_pdf,
    make_pptx,
    make_xlsx,
)
from tests.fixtures.docs_runtime import scripted_runtime, wait_for
from tests.helpers.procs import wait_gone

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("docs-runtime-home")
        mp.setenv("LLMDECK_HOME", str(path))
        yield path


@pytest.fixture(scope="module")
def model_folder(home: Path) -> Path:
    return ensure_model_files()


@pytest.fixture(scope="module")
def files(home: Path) -> dict[str, Path]:
    folder = home / "files"
    folder.mkdir()
    facts = FACTS[:6]
    handbook = folder / "handbook.pdf"
    where = make_fact_document(handbook, pages=12, facts=facts)
    assert where[2] == 6  # the cluster fact sits on page 6 (the cited reply says so)
    return {
        "handbook": handbook,
        "memo": make_pdf(folder / "memo.pdf", ["Standup moves to 9:30.", "Retro is on Friday."]),
        "deck": make_pptx(folder / "deck.pptx", [("Plan", "Launch in June"), ("Budget", "40k EUR")]),
        "sheet": make_xlsx(folder / "budget.xlsx", {"Costs": [["item", "eur"], ["GPUs", 9000]]}),
        "notes": make_docx(folder / "notes.docx", ["The venue is the Linden Hall."]),
    }


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt(home: Path, model_folder: Path):
    runtime = scripted_runtime(model_folder)
    await runtime.start()
    yield runtime
    await runtime.close()


def _bad_files(folder: Path) -> dict[str, Path]:
    folder.mkdir(exist_ok=True)
    huge = folder / "huge.pdf"
    with open(huge, "wb") as fh:  # sparse: 500 MB on paper, nothing on disk
        fh.truncate(500 * 1024 * 1024)
    broken_docx = folder / "broken.docx"
    broken_docx.write_text("this was never a Word file", encoding="utf-8")
    exe = folder / "tool.exe"
    exe.write_bytes(b"MZ\x90\x00")
    return {
        "NOT_FOUND": folder / "missing.pdf",
        "IS_DIRECTORY": folder,
        "UNSUPPORTED_TYPE": exe,
        "TOO_LARGE": huge,
        "ENCRYPTED": make_encrypted_pdf(folder / "locked.pdf"),
        "CORRUPT": make_corrupt_pdf(folder / "broken.pdf"),
        "CORRUPT_DOCX": broken_docx,
    }


async def test_bad_input_is_a_value_and_creates_nothing(rt: Runtime, home: Path) -> None:
    bad = _bad_files(home / "bad")
    results = await rt.attach(None, list(bad.values()))
    assert all(isinstance(r, DocError) for r in results), results
    codes = [r.code for r in results]
    assert codes == ["NOT_FOUND", "IS_DIRECTORY", "UNSUPPORTED_TYPE", "TOO_LARGE",
                     "ENCRYPTED", "CORRUPT", "CORRUPT"]
    for (key, path), error in zip(bad.items(), results, strict=True):
        shown = path.name if key not in ("NOT_FOUND",) else str(path)
        assert shown in error.message, error.message
        assert error.message.endswith("."), error.message  # a sentence, not a traceback
    assert "500 MB" in results[3].message and "password" in results[4].message
    assert await rt.list_conversations() == []  # nothing else changed


async def test_attach_several_with_aliases_then_errors_change_nothing(
    rt: Runtime, files: dict[str, Path], home: Path
) -> None:
    paths = [files["handbook"], files["memo"], files["deck"], files["sheet"], files["notes"],
             files["memo"]]
    results = await rt.attach(None, paths)
    assert all(isinstance(r, AttachResult) for r in results), [
        r for r in results if not isinstance(r, AttachResult)]  # the refusals, whole
    cid = results[0].conversation_id
    assert {r.conversation_id for r in results} == {cid}
    assert [r.alias for r in results] == ["handbook.pdf", "memo.pdf", "deck.pptx", "budget.xlsx",
                                          "notes.docx", "memo.pdf #2"]
    handbook = results[0]
    assert not handbook.whole and handbook.chunks > 0 and handbook.units == 12
    assert results[2].whole and results[2].units == 2 and results[2].label == (
        "deck.pptx (2 slides, whole)")

    # Stored: attachments and chunks are in SQLite.
    stored = await rt.store_call(rt.store_handle.attachments, cid)
    assert [a.alias for a in stored] == [r.alias for r in results]

    # A bad file next to them: an error value, the rest of the conversation untouched.
    before = [a.alias for a in await rt.attachments(cid)]
    again = await rt.attach(cid, [home / "bad" / "locked.pdf", home / "nowhere.txt"])
    assert [r.code for r in again] == ["ENCRYPTED", "NOT_FOUND"]
    assert [a.alias for a in await rt.attachments(cid)] == before
    assert len(await rt.store_call(rt.store_handle.attachments, cid)) == len(before)
    rt.test_cid = cid  # type: ignore[attr-defined]  # the next tests continue this chat


async def test_mentions_are_checked_before_sending(rt: Runtime) -> None:
    cid = rt.test_cid  # type: ignore[attr-defined]
    ok = rt.check_mentions(cid, "compare @doc(memo.pdf #2) with @doc(DECK.pptx)")
    assert ok.ok and [a.alias for a in ok.resolved] == ["memo.pdf #2", "deck.pptx"]
    bad = rt.check_mentions(cid, "what does @doc(report.pdf) say? and @doc(memo.pdf")
    assert [m.alias for m in bad.unresolved] == ["report.pdf"]
    assert [a.alias for a in bad.resolved] == ["memo.pdf"]
    assert not rt.check_mentions(None, "@doc(x.pdf)").ok  # a new chat has nothing attached


async def test_a_turn_gets_cited_excerpts_and_the_stored_message_stays_plain(
    rt: Runtime,
) -> None:
    cid = rt.test_cid  # type: ignore[attr-defined]
    question = f"@doc(handbook.pdf) {FACTS[2][1]}"
    turn = await rt.start_turn(cid, question)
    sent = turn.request.messages[-1]["content"]
    assert "[handbook.pdf p.6]" in sent and "340 kilowatts" in sent
    assert sent.endswith(question)
    assert "memo.pdf" not in sent  # only the mentioned document feeds this turn
    assert turn.sources[0] == "handbook.pdf p.6"
    text = "".join([e.text async for e in turn.events() if isinstance(e, TextDelta)])
    assert "[handbook.pdf p.6]" in text
    stored = await rt.messages(cid)
    assert stored[-2].content == question  # the excerpts are not written into history

    # No mention: every document feeds the turn; small ones whole, with their labels.
    turn = await rt.start_turn(cid, "When is the launch?")
    sent = turn.request.messages[-1]["content"]
    for source in ("[deck.pptx slide 1]", "[memo.pdf p.2]", "[budget.xlsx sheet Costs]",
                   "[notes.docx]", "[memo.pdf #2 p.1]"):
        assert source in sent, source
    [e async for e in turn.events()]


async def test_attachments_come_back_after_a_restart(
    rt: Runtime, home: Path, model_folder: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cid = rt.test_cid  # type: ignore[attr-defined]
    monkeypatch.setenv("LLMDECK_HOME", str(home))
    rt2 = scripted_runtime(model_folder)
    await rt2.start(preload=False)
    try:
        assert rt2.check_mentions(cid, "@doc(deck.pptx)").unresolved  # not loaded yet
        aliases = [a.alias for a in await rt2.attachments(cid)]
        assert aliases == ["handbook.pdf", "memo.pdf", "deck.pptx", "budget.xlsx",
                           "notes.docx", "memo.pdf #2"]
        assert rt2.check_mentions(cid, "@doc(deck.pptx)").ok
        whole = await rt2.chat.context_for(cid, "@doc(deck.pptx) budget?")
        assert "[deck.pptx slide 2]\n" in whole.text and "40k EUR" in whole.text
        # The chunk vectors came back from SQLite: a query embedded by the first runtime's
        # worker (no second MiniLM load) finds the fact's page in the reloaded index.
        query = (await rt.chat.utility.encode([FACTS[4][1]]))[0]
        hits = rt2.chat.docs.index(cid).search(query, 3, docs=["handbook.pdf"])
        assert "saffron risotto" in hits[0].chunk.text and hits[0].chunk.label == "p.10"
        assert not rt2.chat.utility.running  # nothing needed embedding over there
    finally:
        await rt2.close()


async def test_a_rollover_carries_facts_retrieved_from_the_attachments(rt: Runtime) -> None:
    from core.memory.rollover import FACTS_PREFIX

    cid = rt.test_cid  # type: ignore[attr-defined]
    rt.chat.threshold = 0.05  # this conversation is already past 5% of 4096 tokens
    rt.chat._monitors.clear()
    # The summary is written ahead (in the background from 60% full): here, at once.
    session, sid = rt.chat.session_so_far(cid, await rt.messages(cid, limit=400))

    async def written() -> str:
        return "They went over the handbook."

    rt.chat.ahead.start(sid, len(session), written())
    await asyncio.gather(*rt.chat.ahead.pending())
    try:
        turn = await rt.start_turn(cid, FACTS[4][1])
    finally:
        rt.chat.threshold = 0.7
        rt.chat._monitors.clear()
    marker = turn.rollover
    assert marker is not None and marker.summary == "They went over the handbook."
    assert marker.facts[0].startswith(FACTS[4][0]) and "[handbook.pdf p." in marker.facts[0]
    facts = [m["content"] for m in turn.request.messages if m["content"].startswith(FACTS_PREFIX)]
    assert facts and FACTS[4][0] in facts[0]
    [e async for e in turn.events()]


async def test_detach_forgets_the_document_and_its_stored_chunks(rt: Runtime) -> None:
    cid = rt.test_cid  # type: ignore[attr-defined]
    assert await rt.detach(cid, "memo.pdf #2")
    assert "memo.pdf #2" not in [a.alias for a in await rt.attachments(cid)]
    stored = await rt.store_call(rt.store_handle.attachments, cid)
    assert "memo.pdf #2" not in [a.alias for a in stored]
    assert not rt.check_mentions(cid, "@doc(memo.pdf #2)").ok
    assert not await rt.detach(cid, "memo.pdf #2")  # nothing left to detach


async def test_a_crashed_worker_is_an_error_value_and_the_next_attach_works(
    rt: Runtime, files: dict[str, Path], home: Path
) -> None:
    import asyncio

    cid = rt.test_cid  # type: ignore[attr-defined]
    task = asyncio.ensure_future(rt.attach(cid, [files["handbook"]]))
    await wait_for(lambda: rt.chat.utility._pending)
    os.kill(rt.chat.utility.pid, signal.SIGKILL)
    [result] = await task
    assert isinstance(result, DocError) and "stopped unexpectedly" in result.message
    assert "handbook.pdf #2" not in [a.alias for a in await rt.attachments(cid)]
    [ok] = await rt.attach(cid, [files["notes"]])
    assert isinstance(ok, AttachResult) and ok.alias == "notes.docx #2"
    assert rt.chat.utility.starts >= 2


async def test_the_worker_stops_when_idle_and_appears_in_status(rt: Runtime) -> None:
    utility = rt.chat.utility
    await utility.ping()
    pid = utility.pid
    status = [s for s in rt.worker_status() if s.engine == "utility"]
    assert status and status[0].pid == pid and status[0].rss_bytes > 0
    utility.idle_s = 0.3
    await utility.ping()  # re-arms the idle timer with the short delay
    await wait_for(lambda: not utility.running, timeout=15)
    assert wait_gone([pid], 5) == []
    assert not [s for s in rt.worker_status() if s.engine == "utility"]
    utility.idle_s = 60.0
