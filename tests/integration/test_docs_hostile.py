"""Hostile files through `/attach`'s real door (issue 38): Runtime.attach, the real
documents worker process, files built to attack its converters.

Checked from outside: the sentence the person reads, the time to it, the worker tree's
peak resident memory sampled with psutil every 10 ms, no conversation created, and the
app (and the next attach) alive after. Before these checks a lying DOCX peaked at
1.2 GiB, a 190 MB document.xml and a 1 GiB PDF flate bomb ran past 60 s at 2.4 and
3.1 GiB."""

from __future__ import annotations

import asyncio
import os
import threading
import time
from collections.abc import Callable
from pathlib import Path

import psutil
import pytest
import pytest_asyncio

from core.docs import DocError
from core.docs import worker as docs_worker
from core.docs.budget import ReadBounds
from core.runtime import AttachResult, Runtime
from tests.fixtures import docs_files as build
from tests.fixtures.docs_runtime import scripted_runtime

pytestmark = [pytest.mark.slow, pytest.mark.asyncio(loop_scope="module")]
MIB = 1024 * 1024
TREE_BOUND = 1024 * MIB  # the documents worker and its children, whatever the file
READ_SECONDS = 6.0


@pytest.fixture(scope="module")
def home(tmp_path_factory: pytest.TempPathFactory):
    with pytest.MonkeyPatch.context() as mp:
        path = tmp_path_factory.mktemp("docs-hostile-home")
        mp.setenv("LLMDECK_HOME", str(path))
        yield path


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def rt(home: Path):
    runtime = scripted_runtime()
    runtime.chat.utility.read_bounds = ReadBounds(seconds=READ_SECONDS)
    await runtime.start()
    yield runtime
    await runtime.close()


class TreePeak:
    """Peak resident memory of the documents worker and its children, sampled every
    10 ms from a thread (the worker may be replaced meanwhile: each pid is followed)."""

    def __init__(self, pid_of: Callable[[], int | None]) -> None:
        self.pid_of = pid_of
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while True:
            pid = self.pid_of()
            try:
                if pid is None:
                    raise psutil.NoSuchProcess(0)
                root = psutil.Process(pid)
                rss = sum(p.memory_info().rss for p in [root, *root.children(recursive=True)])
            except psutil.Error:
                rss = 0
            self.peak = max(self.peak, rss)
            if self._stop.wait(0.01):
                return

    def __enter__(self) -> TreePeak:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def attach_one(rt: Runtime, path: Path, progress=None) -> tuple[object, float, int]:
    t0 = time.monotonic()
    with TreePeak(lambda: rt.chat.utility.pid) as tree:
        [result] = await rt.attach(None, [path], progress)
    return result, time.monotonic() - t0, tree.peak


async def assert_alive(rt: Runtime, home: Path) -> None:
    note = home / "note.md"
    note.write_text("# Note\n\nThe fair opens at noon.")
    [ok] = await rt.attach(None, [note])
    assert isinstance(ok, AttachResult), ok
    await rt.delete_conversation(ok.conversation_id)


HOSTILE = {
    "lying-sizes.docx": (lambda p: build.make_lying_docx(p, 512), "UNSAFE",
                         "unpacks to a size other than the 1,000 bytes it declares"),
    "lying-bzip2.docx": (lambda p: build.make_lying_docx(p, 48, method="bzip2"), "UNSAFE",
                         "with a compression Office never uses"),
    "many-parts.docx": (lambda p: build.make_many_entry_docx(p, 20_000), "UNSAFE",
                        "holds 20,001 parts, more than the 10,000"),
    "unpacks-huge.docx": (lambda p: build.make_huge_docx(p, 256), "TOO_LARGE",
                          "unpacks to 256 MB, over 10 times the 20 MB attachment limit"),
    "xml-190mb.docx": (lambda p: build.make_docx_of_xml(p, 190), "TOO_LARGE",
                       "MB of XML, over 2 times the 20 MB attachment limit"),
    "cells-190mb.xlsx": (lambda p: build.make_xlsx_of_cells(p, 190), "TOO_LARGE",
                         "190 MB of XML, over 2 times the 20 MB attachment limit"),
    "laughs.docx": (lambda p: build.make_docx_with_dtd(p, "laughs"), "UNSAFE",
                    "declares a DTD in its part 'word/document.xml'"),
    "flate-bomb.pdf": (lambda p: build.make_pdf_flate_bomb(p, 1024), "TOO_LARGE",
                       "unpacks to more than 200 MB, 10 times the 20 MB attachment limit"),
    "deep.html": (lambda p: build.make_deep_html(p, 100_000), "UNSAFE",
                  "nests its HTML elements more than 1,000 deep"),
    "flood.html": (lambda p: build.make_tag_flood_html(p, 19), "TOO_LARGE",
                   "more than 200,000 HTML elements"),
    "endless.csv": (lambda p: build.make_endless_csv_line(p, 19), "TOO_LARGE",
                    "has a line over 1 MB long"),
}


@pytest.mark.parametrize("name", list(HOSTILE))
async def test_a_hostile_file_is_refused_with_a_sentence_in_bounded_memory_and_time(
    rt: Runtime, home: Path, name: str
) -> None:
    make, code, says = HOSTILE[name]
    path = make(home / name)
    assert path.stat().st_size < 20 * MIB
    err, seconds, peak = await attach_one(rt, path)
    print(f"{name}: {seconds:.1f} s, worker tree peak {peak / MIB:.0f} MiB")
    assert isinstance(err, DocError) and err.code == code, err
    assert says in err.message and err.message.startswith(name), err.message
    assert seconds < 10, f"{seconds:.1f} s to refuse {name}"
    assert peak < TREE_BOUND, f"the worker tree reached {peak / MIB:.0f} MiB"
    assert rt.chat.utility.running, "refused by a check: the worker lives on"
    assert await rt.list_conversations() == []


async def test_an_external_entity_never_reads_a_local_file(rt: Runtime, home: Path) -> None:
    secret = home / "secret.txt"
    secret.write_text("TOPSECRET-7731")
    path = build.make_docx_with_dtd(home / "xxe.docx", str(secret))
    err, _, _ = await attach_one(rt, path)
    assert isinstance(err, DocError) and err.code == "UNSAFE", err
    assert "TOPSECRET" not in err.message
    assert await rt.list_conversations() == []


@pytest.mark.parametrize("kind", ["fifo", "device"])
async def test_a_fifo_or_a_device_named_txt_is_refused_before_the_worker(
    rt: Runtime, home: Path, kind: str
) -> None:
    path = home / f"{kind}.txt"
    if kind == "fifo":
        os.mkfifo(path)
    else:
        path.symlink_to("/dev/zero")
    err, seconds, _ = await attach_one(rt, path)
    assert isinstance(err, DocError) and err.code == "UNREADABLE", err
    assert f"{kind}.txt is not a regular file" in err.message
    assert seconds < 2


async def test_a_slow_file_stops_at_the_time_limit_with_a_pulse_meanwhile(
    rt: Runtime, home: Path
) -> None:
    """4 MB of ordinary paragraphs passes every check, and markitdown takes about a
    minute over it on a busy 2-core machine: the read limit stops it, and a
    'converting' pulse showed it working meanwhile."""
    path = build.make_docx_of_xml(home / "long-report.docx", 4)
    seen: list[tuple[str, str, int, int]] = []
    err, seconds, peak = await attach_one(rt, path, lambda *a: seen.append(a))
    print(f"slow docx: {seconds:.1f} s, peak {peak / MIB:.0f} MiB, pulses {seen[-2:]}")
    assert isinstance(err, DocError) and err.code == "TIMEOUT", err
    assert f"took longer than {READ_SECONDS:.0f} s to read, the limit for one document" \
        in err.message
    assert seconds < READ_SECONDS + 8
    assert peak < TREE_BOUND
    assert any(s[1] == "converting" and s[3] == int(READ_SECONDS) for s in seen), seen
    await assert_alive(rt, home)
    assert await rt.list_conversations() == []


async def test_a_file_past_the_memory_budget_is_refused_and_the_worker_lives(
    rt: Runtime, home: Path
) -> None:
    """A 150 MiB content stream passes the flate check (under 200 MB); pdfminer unpacks
    it whole, past a 128 MiB budget: MemoryError inside the worker, a sentence outside."""
    worker = rt.chat.utility
    path = build.make_pdf_flate_bomb(home / "dense.pdf", 150)
    worker.read_bounds = ReadBounds(memory_bytes=128 * MIB, seconds=READ_SECONDS)
    await worker.unload()  # the bounds are read as the worker starts
    try:
        warm = build.make_pdf(home / "warm.pdf", ["A page to load the converters."])
        [ok] = await rt.attach(None, [warm])  # the worker is up, its converters loaded
        assert isinstance(ok, AttachResult), ok
        await rt.delete_conversation(ok.conversation_id)
        base = psutil.Process(worker.pid).memory_info().rss
        err, seconds, peak = await attach_one(rt, path)
        print(f"dense pdf: {seconds:.1f} s, peak {peak / MIB:.0f} MiB over {base / MIB:.0f}")
        assert isinstance(err, DocError) and err.code == "TOO_LARGE", err
        assert "needs more than the 128 MB of memory a document may use" in err.message
        assert peak < base + 128 * MIB + 64 * MIB, "the budget, and a little of the reader's"
        assert worker.running
        await assert_alive(rt, home)
    finally:
        worker.read_bounds = ReadBounds(seconds=READ_SECONDS)
        await worker.unload()


async def test_a_worker_that_stops_answering_mid_read_is_killed_at_the_apps_deadline(
    rt: Runtime, home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A converter holding Python's lock inside C code stops the worker's own clock
    too; the app's deadline is the last word. Simulated from outside: the worker is
    stopped (SIGSTOP) while it reads."""
    monkeypatch.setattr(docs_worker, "DEADLINE_SLACK_S", 1.0)
    worker = rt.chat.utility
    worker.read_bounds = ReadBounds(seconds=1.0)
    await worker.unload()
    path = build.make_docx_of_xml(home / "stuck.docx", 2)
    try:
        await worker.ping()
        pid = worker.pid
        task = asyncio.ensure_future(attach_one(rt, path))
        await asyncio.sleep(0.3)
        psutil.Process(pid).suspend()
        err, seconds, _ = await task
        assert isinstance(err, DocError), err
        assert "took longer than 1 s, the limit for one document" in err.message, err.message
        assert seconds < 1.0 + 3.0 + 1.0 + 4
        assert not psutil.pid_exists(pid) or psutil.Process(pid).status() == "zombie"
        await assert_alive(rt, home)
    finally:
        worker.read_bounds = ReadBounds(seconds=READ_SECONDS)
        await worker.unload()


async def test_a_cancel_while_a_file_converts_stops_the_worker_at_once(
    rt: Runtime, home: Path
) -> None:
    """Esc during the conversion (no pages, no passages yet: only the pulse shows)."""
    from tests.helpers.procs import wait_gone

    path = build.make_docx_of_xml(home / "to-cancel.docx", 4)
    seen: list[tuple[str, str, int, int]] = []
    task = asyncio.ensure_future(rt.attach(None, [path], lambda *a: seen.append(a)))
    deadline = time.monotonic() + 20
    while not any(s[1] == "converting" for s in seen):
        assert time.monotonic() < deadline, seen
        await asyncio.sleep(0.05)
    pid = rt.chat.utility.pid
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert wait_gone([pid], 2) == [], "the worker stopped converting at once"
    assert await rt.list_conversations() == []
    await assert_alive(rt, home)
