"""Start-up: the runtime reads the history on its store thread while Textual starts, the
first frame has the composer focused, and a database the app cannot open is reported
(real store in LLMDECK_HOME, real app under Textual's pilot)."""

from __future__ import annotations

import gc
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest
from textual.app import App
from textual.color import Color

from core import paths
from core.config import Settings
from core.runtime import SIDEBAR_PAGE, Runtime
from core.store import Store
from core.store.schema import SCHEMA_VERSION
from tests.fixtures.tui import wait_until
from themes.palettes import HIGH_CONTRAST, LIGHT
from tui import gc_tuning
from tui.app import LlmdeckApp
from tui.widgets.composer import Composer

ROOT = Path(__file__).resolve().parents[2]


def seed(titles: list[str]) -> None:
    """Conversations created in this order (the last is the newest)."""
    with Store.open(paths.db_path()) as store:
        for title in titles:
            store.create_conversation(title=title)


async def test_the_early_read_lists_the_newest_page_once() -> None:
    seed([f"chat {i}" for i in range(SIDEBAR_PAGE + 5)])
    rt = Runtime(Settings())
    rt.open_store_soon()
    await rt.start(preload=False)
    await rt.store_call(lambda: None)  # the store thread runs in order: the read is done
    page = rt.take_first_page()
    assert page is not None and len(page) == SIDEBAR_PAGE
    assert [c.title for c in page[:2]] == [f"chat {SIDEBAR_PAGE + 4}", f"chat {SIDEBAR_PAGE + 3}"]
    assert rt.take_first_page() is None  # given out once
    assert [c.id for c in await rt.list_conversations()] == [c.id for c in page]
    await rt.close()


async def test_the_early_read_restores_the_switch_interval() -> None:
    before = sys.getswitchinterval()
    rt = Runtime(Settings())
    rt.open_store_soon()
    await rt.start(preload=False)
    await rt.store_call(lambda: None)
    assert sys.getswitchinterval() == before
    await rt.close()


async def test_a_store_opened_early_is_closed_without_start() -> None:
    rt = Runtime(Settings())
    rt.open_store_soon()
    await rt.close()
    with pytest.raises(sqlite3.ProgrammingError):  # closed connection
        rt.store_handle.conn.execute("SELECT 1")


async def test_the_first_frame_has_the_composer_focused() -> None:
    seed(["an older chat"])
    focused_at_first_frame: list[bool] = []

    class Probe(LlmdeckApp):
        def _display(self, screen, renderable) -> None:  # noqa: ANN001  (Textual's)
            super()._display(screen, renderable)
            main = getattr(self, "main", None)
            if renderable is not None and not focused_at_first_frame and main is not None:
                focused_at_first_frame.append(isinstance(self.focused, Composer)
                                              and self.focused.has_focus)

    app = Probe(Runtime(Settings()), preload=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.main.history_listed)
        assert focused_at_first_frame == [True]
        titles = [str(app.main.query_one("#conversations").get_option_at_index(0).prompt)]
        assert titles == ["an older chat"]


async def test_a_saved_theme_applies_at_start_without_a_css_refresh(monkeypatch) -> None:
    refreshed: list[str] = []
    real = App.refresh_css

    def counted(self, animate: bool = True) -> None:  # noqa: ANN001
        refreshed.append(self.theme)
        real(self, animate)

    monkeypatch.setattr(App, "refresh_css", counted)
    app = LlmdeckApp(Runtime(Settings(theme="llmdeck-light")), preload=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: app.main.history_listed)
        assert refreshed == []  # the stylesheet was read once, with the light variables
        assert app.main.styles.background == Color.parse(LIGHT.background)
        await pilot.press("f2")  # a live switch still refreshes everything
        await wait_until(pilot, lambda: refreshed == ["llmdeck-high-contrast"])
        assert app.main.styles.background == Color.parse(HIGH_CONTRAST.background)


def test_full_collections_wait_until_the_app_is_up() -> None:
    before = gc.get_threshold()
    gc_tuning.pause_full_collections()
    try:
        assert gc.get_threshold() == (before[0], before[1], gc_tuning.START_GEN2_THRESHOLD)
        gc_tuning.settle_after_start()
        assert gc.get_threshold() == (gc_tuning.GEN0_THRESHOLD, before[1], before[2])
    finally:
        gc_tuning.restore()
    assert gc.get_threshold() == before


def test_the_command_line_looks_its_version_up_only_for_version() -> None:
    code = ("import sys\nfrom tui import cli\ncli._parser().parse_args([])\n"
            "print('importlib.metadata' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         check=True)
    assert out.stdout.strip() == "False"
    version = subprocess.run([sys.executable, "-m", "tui.cli", "--version"], capture_output=True,
                             text=True, cwd=ROOT)
    assert version.returncode == 0 and version.stdout.startswith("llmdeck "), version.stderr


FIRST_FRAME_PROBE = """
import os, sys
from textual.app import App
from tui.cli import build_app

app = build_app()
shown = App._display

def display(self, screen, renderable):
    shown(self, screen, renderable)
    main = getattr(self, "main", None)
    if renderable is not None and main is not None and main.is_mounted:
        print(sorted(m for m in LATER if m in sys.modules), flush=True)
        os._exit(0)

App._display = display
app.run(headless=True, size=(100, 30))
"""


def test_the_first_frame_comes_without_the_documents_and_memory_layers() -> None:
    later = ("core.docs", "core.memory", "core.runtime.context", "numpy")
    code = f"LATER = {later!r}\n" + FIRST_FRAME_PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


def test_the_first_frame_comes_without_markdown_the_hub_or_package_metadata() -> None:
    # Markdown (markdown-it, pygments: ~33 ms) loads after the first frame (tui.warmup);
    # the hub (~20 ms, psutil) only when a download is pending; the loopback's hello
    # looks no version up (importlib.metadata, ~20 ms). bench/ui.py's start_vs_bare.
    later = ("markdown_it", "pygments", "textual.widgets._markdown", "core.hub",
             "core.hub.jobs", "psutil", "importlib.metadata")
    code = f"LATER = {later!r}\n" + FIRST_FRAME_PROBE
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT,
                         timeout=60)
    assert out.stdout.strip() == "[]", out.stdout + out.stderr[-2000:]


async def test_the_chat_context_is_made_on_first_use_and_keeps_its_listeners() -> None:
    rt = Runtime(Settings())
    heard: list[tuple[str, str]] = []
    rt.memory_listeners.append(lambda cid, stage: heard.append((cid, stage)))
    rt.worker_status()  # the status pane asks before any turn: no chat context for that
    assert rt._chat is None
    assert rt.chat.listeners is rt.memory_listeners
    for listener in rt.chat.listeners:
        listener("c1", "summarising")
    assert heard == [("c1", "summarising")]
    await rt.close()


async def test_a_database_from_a_newer_llmdeck_is_reported_at_start() -> None:
    with Store.open(paths.db_path()):
        pass
    conn = sqlite3.connect(paths.db_path())
    conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    conn.commit()
    conn.close()
    before = gc.get_threshold()
    gc_tuning.pause_full_collections()  # as `llmdeck` starts
    app = LlmdeckApp(Runtime(Settings()), preload=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: any(n.title == "Cannot open history"
                                            for n in app._notifications))
        message = next(str(n.message) for n in app._notifications)
        assert "newer llmdeck" in message and "upgrade llmdeck" in message
        assert app.main.history_listed is False
        assert gc.get_threshold()[2] == before[2]  # full collections run again
    assert gc.get_threshold() == before


async def test_a_config_file_with_errors_is_reported_at_start_and_kept_when_saved() -> None:
    config = paths.config_path()
    config.parent.mkdir(parents=True, exist_ok=True)
    text = 'context_size = "big"\n[[mcp_servers]]\nname = "notes"\ncomand = "notes-server"\n'
    config.write_text(text, encoding="utf-8")
    app = LlmdeckApp(Runtime(Settings.load()), preload=False)
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_until(pilot, lambda: any(n.title == "Settings" for n in app._notifications))
        told = next(str(n.message) for n in app._notifications if n.title == "Settings")
        assert "context_size = 'big' ignored" in told and "'comand'" in told
        assert str(config) in told
        await pilot.press("f2")  # a theme change saves the settings: the hand-written MCP
        await wait_until(pilot, lambda: any("kept as" in str(n.message)  # entry must survive
                                            for n in app._notifications))
        theme = app.theme
    kept = list(config.parent.glob("config.kept-*.toml"))
    assert len(kept) == 1 and kept[0].read_text(encoding="utf-8") == text
    saved = Settings.load()
    assert saved.problems == [] and saved.theme == theme != "llmdeck-dark"
