"""The decisions that keep the TUI fast, pinned down (the numbers are in bench/ui.py):
no order-dependent CSS on Markdown blocks, the last block marked by a class once a reply
settles, heavy libraries kept out of start-up, the garbage collector settled after start."""

from __future__ import annotations

import gc
import os
import subprocess
import sys
import time
from pathlib import Path

from textual.widgets._markdown import MarkdownBlock

from tests.fixtures.tui import scripted_app, send, wait_ready, wait_until
from tui import gc_tuning
from tui.widgets.message_body import LAST
from tui.widgets.message_view import MessageView

ROOT = Path(__file__).resolve().parents[2]
REPLY = "First paragraph.\n\nSecond paragraph.\n\n- a list item\n- another\n\nLast words."


async def test_a_settled_reply_marks_only_its_last_block_and_no_block_restyles_by_order() -> None:
    app = scripted_app(reply=REPLY, chunk_chars=3)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Hello")
        reply = list(app.main.query(MessageView))[-1]
        blocks = [b for b in reply.body.children if isinstance(b, MarkdownBlock)]
        assert len(blocks) == 4
        assert [b.has_class(LAST) for b in blocks] == [False, False, False, True]
        # A :last-child / :first-child rule would make Textual re-style every sibling
        # block on each mount while a reply streams.
        assert not any(b._has_order_style for b in app.screen.query(MarkdownBlock))
        # The page of history shown when a conversation opens is marked the same way.
        await app.main.open_conversation(app.main.conversation_id)
        await pilot.pause()
        reopened = list(app.main.query(MessageView))[-1]
        marks = [b.has_class(LAST) for b in reopened.body.children]
        assert marks == [False, False, False, True]


def test_starting_the_app_imports_no_heavy_library(tmp_path: Path) -> None:
    code = (
        "import sys; import tui.app, tui.cli; "
        "heavy = ['numpy', 'pandas', 'sqlite_utils', 'aiohttp', 'huggingface_hub', 'mlx', "
        "'mlx_lm', 'llama_cpp', 'markitdown', 'sentence_transformers', 'torch', 'core.server']; "
        "print(','.join(m for m in heavy if m in sys.modules))"
    )
    env = {**os.environ, "LLMDECK_HOME": str(tmp_path)}
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True,
                         text=True, check=True)
    assert out.stdout.strip() == ""


def test_the_history_opens_without_sqlite_utils_which_loads_on_first_use(tmp_path: Path) -> None:
    code = (
        "import sys; from core.store import Store; s = Store.open(sys.argv[1]); "
        "c = s.create_conversation(); s.list_conversations(); s.messages(c); s.attachments(c); "
        "before = 'sqlite_utils' in sys.modules; tables = s.db.table_names(); "
        "print(before, 'sqlite_utils' in sys.modules, 'pandas' in sys.modules, "
        "'attachments' in tables)"
    )
    out = subprocess.run([sys.executable, "-c", code, str(tmp_path / "h.db")], cwd=ROOT,
                         capture_output=True, text=True, check=True)
    assert out.stdout.split() == ["False", "True", "False", "True"]


def test_gc_settling_is_undone_when_the_app_ends() -> None:
    before = gc.get_threshold()
    gc_tuning.settle_after_start()
    try:
        assert gc.get_freeze_count() > 0
        assert gc.get_threshold()[0] == gc_tuning.GEN0_THRESHOLD
    finally:
        gc_tuning.restore()
    assert gc.get_freeze_count() == 0
    assert gc.get_threshold() == before


def test_warm_up_imports_what_the_first_turn_needs_and_tolerates_a_missing_one() -> None:
    from tui import warmup

    sys.modules.pop("colorsys", None)
    warmup.warm_imports(("colorsys", "no_such_module_here"))
    assert "colorsys" in sys.modules


def test_the_first_turn_modules_include_the_documents_index_library() -> None:
    from tui import warmup

    assert "numpy" in warmup.IN_PROCESS_MODULES  # core.docs builds a numpy index per turn
    assert "core.wire.docs" in warmup.CLIENT_MODULES  # the composer resolves @doc mentions


RACE = """
import importlib.abc, sys, threading, time
from tui import warmup
main, looking_up = threading.current_thread(), threading.Event()

class HoldTheLookUp(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name == "warmpkg" and threading.current_thread() is main:
            looking_up.set()
            time.sleep(0.3)  # the thread runs into its import meanwhile
        return None

sys.meta_path.insert(0, HoldTheLookUp())
def warm():
    looking_up.wait(5)
    warmup.warm_imports(("warmpkg.sub",))
thread = threading.Thread(target=warm)
thread.start()
import warmpkg  # the loop's lazy import, racing the thread
thread.join(10)
print("imported", warmpkg.VALUE)
"""


def test_warming_a_submodule_while_the_loop_imports_its_package_does_not_deadlock(
        tmp_path) -> None:
    """CI's crash: the warm-up thread took `core.docs.attachments`' import lock and then
    asked for the package, which the UI loop had just begun importing; the loop's
    `core/docs/__init__.py` then asked for that submodule: _DeadlockError on the loop.
    A finder that holds the loop inside the package's look-up opens that window wide (in
    a fresh interpreter: pytest's own import hooks close it)."""
    (tmp_path / "warmpkg").mkdir()
    (tmp_path / "warmpkg" / "__init__.py").write_text("from warmpkg.sub import VALUE\n")
    (tmp_path / "warmpkg" / "sub.py").write_text("VALUE = 7\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)])}
    done = subprocess.run([sys.executable, "-c", RACE], env=env, capture_output=True,
                          text=True, timeout=60)
    assert "DeadlockError" not in done.stderr
    assert done.returncode == 0 and "imported 7" in done.stdout, done.stderr


async def test_a_streamed_reply_grows_without_asking_for_a_second_layout() -> None:
    """The chat, its messages and their blocks repaint when their virtual size changes but
    ask for no layout (Textual's default asks for one: a second full chat layout after
    every frame that grew a reply); the quiet blocks still get every Markdown style."""
    from tui.widgets.chat_view import ChatView

    app = scripted_app(reply=REPLY, chunk_chars=3)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Hello")
        reply = list(app.main.query(MessageView))[-1]
        blocks = [b for b in reply.body.children if isinstance(b, MarkdownBlock)]
        widgets = [app.main.query_one(ChatView), reply, reply.body, *blocks]
        assert [type(w).virtual_size._layout for w in widgets] == [False] * len(widgets)
        assert [type(b).__name__ for b in blocks] == [
            "MarkdownParagraph", "MarkdownParagraph", "MarkdownBulletList", "MarkdownParagraph"]
        assert [b.styles.margin.bottom for b in blocks] == [1, 1, 1, 0]
        assert reply.body.children[0].region.height == 1  # laid out, not left at size 0


async def test_keys_typed_without_pause_delay_a_stream_by_a_frame_but_never_stall_it() -> None:
    from tui.widgets.message_view import input_pending_paint

    app = scripted_app(reply=REPLY, chunk_chars=3)
    async with app.run_test(size=(100, 32)) as pilot:
        await wait_ready(pilot)
        before = time.monotonic()
        await pilot.press("H", "i")
        assert app.last_input_at > before  # the app notes when keys arrive
        # A key every moment: the stream is always behind a key's frame.
        type(app).last_input_at = property(lambda _: time.monotonic(), lambda _, __: None)
        try:
            assert input_pending_paint(app)
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.main.turn is None
                             and len(app.main.query(MessageView)) == 2)
            reply = list(app.main.query(MessageView))[-1]
            assert reply.content == REPLY
            assert [type(b).__name__ for b in reply.body.children][-1] == "MarkdownParagraph"
        finally:
            del type(app).last_input_at


async def test_a_streams_first_words_show_at_once_and_later_ones_once_a_frame(monkeypatch) -> None:
    # The first words waited a whole frame (FRAME_S) with nothing of the reply on screen:
    # bench/ui.py's latest tokens were a reply's first, 110-135 ms from engine to screen.
    from textual.app import App

    monkeypatch.setattr("tui.widgets.message_view.FRAME_S", 60.0)  # a frame never comes

    class OneReply(App):
        def compose(self):  # noqa: ANN202
            yield MessageView("assistant")

    async with OneReply().run_test() as pilot:
        view = pilot.app.query_one(MessageView)
        await view.append_text("First")
        await wait_until(pilot, lambda: view.body.source == "First", timeout=5)
        await view.append_text(" words")
        await pilot.pause()
        assert view.body.source == "First"  # coalesced until the frame (or the end)
        await view.finish()
        assert view.body.source == "First words"
