"""An attached image in the chat at 80 and 120 columns: the card with name, size and
dimensions, and its half-block preview, above the question asked about it (issue 23).
Real pieces: the picture is decoded and stored by core.vision in a thread, the row is
written to SQLite, the scripted engine answers from a worker process."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.fixtures.images import make_image
from tests.snapshots.test_docs_snapshots import command, docs_app, ready, send, wait_until
from tui.widgets.attachments import AttachmentBar
from tui.widgets.image_card import ImageCard


@pytest.mark.parametrize("columns", [80, 120])
def test_image_card_in_the_chat(snap_compare, tmp_path: Path, columns: int) -> None:
    photo = make_image(tmp_path / "harbour.png", 96, 64)

    async def run_before(pilot) -> None:
        await ready(pilot)
        main = pilot.app.main
        await command(pilot, f"/attach {photo}")
        bar = main.query_one(AttachmentBar)
        await wait_until(pilot, lambda: "Attached" in str(bar.notice.render()))
        assert bar.chips == ["harbour.png"]
        await wait_until(pilot, lambda: any(
            str(c.query_one(".image-preview").render()) for c in main.query(ImageCard)))
        await send(pilot, "What is in this picture?")

    app = docs_app(reply="A harbour at dusk.")
    assert snap_compare(app, terminal_size=(columns, 30), run_before=run_before)
