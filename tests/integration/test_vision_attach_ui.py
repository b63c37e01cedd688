"""Images in the real app (issue 23): a dragged-in path attaches, a corrupt picture is
refused with a sentence and the chat goes on, and a reopened conversation shows the
image card before the message sent after it."""

from __future__ import annotations

from pathlib import Path

from tests.fixtures.images import make_corrupt, make_image
from tests.snapshots.test_docs_snapshots import command, docs_app, ready, send, wait_until
from tui.widgets.attachments import AttachmentBar
from tui.widgets.image_card import ImageCard
from tui.widgets.message_view import MessageView


async def test_dropped_path_corrupt_image_and_reopen(tmp_path: Path) -> None:
    photo = make_image(tmp_path / "my photo.png")
    broken = make_corrupt(tmp_path / "broken.png")
    app = docs_app(reply="Noted.")
    async with app.run_test(size=(100, 30)) as pilot:
        await ready(pilot)
        main = pilot.app.main
        bar = main.query_one(AttachmentBar)
        await command(pilot, f"/attach {broken}")
        await wait_until(pilot, lambda: "could not be read" in str(bar.notice.render()))
        assert "broken.png could not be read as PNG" in str(bar.notice.render())
        assert main.composer.text == f"/attach {broken}"  # given back to fix
        assert main.conversation_id is None and not main.query(ImageCard)
        main.composer.load_text("")
        await send(pilot, "Still here?")  # the chat goes on
        # A terminal pastes a dropped file as its quoted path: that attaches it.
        await command(pilot, f"'{photo}'")
        await wait_until(pilot, lambda: bar.chips == ["my photo.png"])
        assert len(main.query(ImageCard)) == 1
        assert len(main.query(MessageView)) == 2, "the path was not sent as a message"
        await send(pilot, "What is this?")
        cid = main.conversation_id
        await main.action_new_chat()
        await main.open_conversation(cid)
        await pilot.pause(0.2)
        order = [type(w).__name__ for w in main.chat.children]
        assert order.count("ImageCard") == 1
        card = order.index("ImageCard")
        assert order[card + 1] == "MessageView"
        views = main.chat.views
        assert views[-2].message_id is not None and card == len(order) - 3


async def test_the_worker_pane_lists_the_vision_model_with_its_state(tmp_path: Path) -> None:
    from rich.console import Console

    from tui.widgets.worker_pane import WorkerPane, status_table

    app = docs_app()
    async with app.run_test(size=(120, 30)) as pilot:
        await ready(pilot)
        # The service's settings (the app is its client: the pane reads the service's rows).
        service = app.runtime.local
        service.settings.vision_model = str(tmp_path / "tiny-llava")
        service.settings.vision_idle_unload_s = 120
        await pilot.press("f4")
        pane = app.main.query_one(WorkerPane)
        assert pane.display
        console = Console(width=110, record=True)

        def shown() -> str:  # what the pane draws: its table of the rows it reads
            console.print(status_table(pane._read()))
            return console.export_text()

        await wait_until(pilot, lambda: "tiny-llava (vision)" in shown())
        line = next(t for t in shown().splitlines() if "tiny-llava (vision)" in t)
        assert "unloaded" in line, line  # loaded on the first image, not before
