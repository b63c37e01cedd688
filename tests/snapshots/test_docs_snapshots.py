"""Documents and memory on the main screen: attachment chips, mention warnings, a cited
answer, the memory rollover marker, and a bad path refused in the composer area.

Real pieces throughout: the utility worker reads the files with markitdown, the scripted
engine answers in a worker process, SQLite keeps everything. Only small documents are
attached (they go into the prompt whole), so no snapshot waits for MiniLM.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from tests.fixtures.docs_files import make_docx, make_pdf, make_pptx
from tests.fixtures.tui import type_burst
from tests.fixtures.tui import wait_until as shared_wait_until
from tui.app import LlmdeckApp
from tui.widgets.attachments import AttachmentBar, MemoryMarker

SIZE = (120, 40)
CITED = (
    "The launch is planned for **June** [deck.pptx slide 1], with a budget of "
    "40k EUR [deck.pptx slide 2]."
)
LONG_REPLIES = tuple(
    f"Reply {i}: noted, item {i} sits on shelf {i} of the archive. "
    "The catalogue lists it with the others in the east wing."
    for i in range(30)
)


def docs_app(*, context_size: int = 4096, **options) -> LlmdeckApp:
    opts = {"reply": CITED, "fixed_timing": True, "label": "scripted-test", **options}
    spec = ModelSpec(path="scripted", engine="scripted", context_size=context_size,
                     options=tuple(opts.items()))
    return LlmdeckApp(Runtime(Settings(context_size=context_size), model_spec=spec))


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    return {
        "memo": make_pdf(tmp_path / "memo.pdf", ["Standup moves to 9:30.", "Retro is on Friday."]),
        "deck": make_pptx(tmp_path / "deck.pptx", [("Plan", "Launch in June"),
                                                   ("Budget", "40k EUR")]),
        "notes": make_docx(tmp_path / "notes.docx", ["The venue is the Linden Hall."]),
    }


async def wait_until(pilot, predicate, timeout: float = 60.0) -> None:
    """Documents index in a worker: a longer wait than the shared default."""
    await shared_wait_until(pilot, predicate, timeout)


async def command(pilot, text: str) -> None:
    """Put `text` in the composer (typing a long tmp path key by key adds nothing) and send."""
    composer = pilot.app.main.composer
    composer.load_text(text)
    composer.move_cursor(composer.document.end)
    await pilot.press("enter")


async def attach(pilot, *paths: Path) -> None:
    bar = pilot.app.main.query_one(AttachmentBar)
    before = len(bar.chips)
    await command(pilot, "/attach " + " ".join(str(p) for p in paths))
    await wait_until(pilot, lambda: len(bar.chips) >= before + len(paths)
                     and "Attached" in str(bar.notice.render()))


async def send(pilot, text: str) -> None:
    from tui.widgets.message_view import MessageView

    app = pilot.app
    before = len(app.main.query(MessageView))
    await command(pilot, text)
    await wait_until(pilot, lambda: len(app.main.query(MessageView)) >= before + 2
                     and app.main.turn is None)
    await pilot.pause(0.3)


async def ready(pilot) -> None:
    await wait_until(pilot, lambda: pilot.app.runtime.model.state == "ready")
    pilot.app.main.composer.cursor_blink = False  # a blinking cursor makes snapshots flaky


def test_attachments_in_the_composer(snap_compare, files) -> None:
    async def run_before(pilot) -> None:
        await ready(pilot)
        await attach(pilot, files["memo"], files["deck"], files["notes"], files["memo"])
        bar = pilot.app.main.query_one(AttachmentBar)
        assert bar.chips == ["memo.pdf", "deck.pptx", "notes.docx", "memo.pdf #2"]
        assert pilot.app.main.composer.text == ""

    assert snap_compare(docs_app(), terminal_size=SIZE, run_before=run_before)


def test_mention_warning_before_sending(snap_compare, files) -> None:
    async def run_before(pilot) -> None:
        await ready(pilot)
        await attach(pilot, files["memo"], files["deck"])
        await type_burst(pilot, "What does @doc(report.pdf) say about @doc(deck.pptx)?")
        await pilot.press("enter")  # refused: the warning stays, nothing is sent
        await pilot.pause(0.2)
        main = pilot.app.main
        assert main.turn is None and "@doc(report.pdf)" in main.composer.text
        assert "matches no attachment" in str(main.query_one(AttachmentBar).notice.render())

    assert snap_compare(docs_app(), terminal_size=SIZE, run_before=run_before)


def test_cited_answer(snap_compare, files) -> None:
    async def run_before(pilot) -> None:
        await ready(pilot)
        await attach(pilot, files["deck"], files["memo"])
        await send(pilot, "When is the launch? @doc(deck.pptx)")
        turn_sources = pilot.app.main.query(".sources")
        assert len(turn_sources) == 1

    assert snap_compare(docs_app(), terminal_size=SIZE, run_before=run_before)


def test_memory_rollover_marker(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await ready(pilot)
        main = pilot.app.main
        for i in range(12):
            await send(pilot, f"Question {i}: where is item {i} kept, and who catalogued it?")
            if main.query(MemoryMarker):
                break
        markers = main.query(MemoryMarker)
        assert len(markers) == 1
        # Reopening the conversation shows the stored marker in the same place.
        await main.open_conversation(main.conversation_id)
        await pilot.pause(0.3)
        assert len(main.query(MemoryMarker)) == 1

    app = docs_app(context_size=400, replies=LONG_REPLIES)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_bad_path_is_refused_in_the_composer_area(snap_compare, files) -> None:
    async def run_before(pilot) -> None:
        await ready(pilot)
        main = pilot.app.main
        await command(pilot, "/attach nowhere/missing.pdf")
        bar = main.query_one(AttachmentBar)
        await wait_until(pilot, lambda: "does not exist" in str(bar.notice.render()))
        assert main.composer.text == "/attach nowhere/missing.pdf"  # given back to fix
        assert main.conversation_id is None and bar.chips == []
        assert await main.runtime.list_conversations() == []  # nothing else changed

    assert snap_compare(docs_app(), terminal_size=SIZE, run_before=run_before)
