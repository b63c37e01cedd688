"""/attach of a large file in the real app: the attachment bar shows how far reading has
got, Esc cancels it (the utility worker is stopped), nothing is attached, and the
composer keeps working (issue 19)."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.tui import scripted_app, wait_until
from tests.helpers.procs import wait_gone
from tui.widgets.attachments import AttachmentBar, progress_line

pytestmark = pytest.mark.slow


def test_progress_line_reads_like_a_sentence() -> None:
    assert progress_line("a.txt", "reading", 1024 * 1024, 4 * 1024 * 1024) == (
        "Reading a.txt: 1.0 of 4.0 MB (25%) · Esc cancels")
    assert progress_line("b.pdf", "pages", 3, 40) == "Reading b.pdf: page 3 of 40 · Esc cancels"
    assert progress_line("c.md", "embedding", 1200, 2400) == (
        "Indexing c.md: 1,200 of 2,400 passages (50%) · Esc cancels")
    assert progress_line("c.md", "embedding", 64, 13_000, 900.0) == (
        "Indexing c.md: 64 of 13,000 passages (0%), about 15 min left · Esc cancels")
    assert progress_line("c.md", "embedding", 64, 128, 12.4).endswith(
        "(50%), about 12 s left · Esc cancels")
    # the documents worker's pulse while a converter runs: seconds, against its time limit
    assert progress_line("d.docx", "converting", 3, 180) == (
        "Converting d.docx: 3 s (gives up at 180 s) · Esc cancels")


async def test_esc_cancels_a_file_being_read_and_nothing_is_attached(tmp_path: Path) -> None:
    big = tmp_path / "minutes.txt"
    line = "The committee met on Tuesday and agreed the budget for the spring fair. "
    big.write_text(line * (3 * 1024 * 1024 // 2 // len(line)))
    app = scripted_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        main = app.main
        bar = main.query_one(AttachmentBar)
        main.composer.load_text(f"/attach {big}")
        await pilot.press("end", "enter")
        notice = lambda: str(bar.notice.render())  # noqa: E731
        await wait_until(pilot, lambda: "(100%)" in notice() or "Indexing" in notice(), 60)
        assert notice().startswith("Reading minutes.txt:") or notice().startswith("Indexing")
        assert notice().endswith("Esc cancels")
        assert "escape" in main.active_bindings, "the footer offers Esc while a file is read"
        pid = app.runtime.local.chat.utility.pid
        assert pid is not None
        await pilot.press("escape")
        await wait_until(pilot, lambda: "Cancelled" in notice())
        assert notice() == "Cancelled: nothing was attached."
        await wait_until(pilot, lambda: "escape" not in main.active_bindings)
        assert wait_gone([pid], 2) == [], "the document reader was stopped"
        assert bar.chips == [] and main.conversation_id is None
        assert await app.runtime.list_conversations() == []
        await pilot.press(*"hello")
        assert main.composer.text == "hello", "the composer still takes keys"
