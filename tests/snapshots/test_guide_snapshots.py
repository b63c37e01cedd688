"""The README's pictures: the main screen, the hub and a reasoning reply with a tool call.

Each is a real snapshot test (scripted engine behind the real worker pool, store and tool
loop); `python docs/screenshots.py` regenerates them and copies the SVGs into docs/, and
tests/unit/test_readme_guide.py checks the copies match.
"""

from __future__ import annotations

import json

import pytest

from core.hub import recommended
from tests.fixtures.hub_screen import hub_app, open_hub
from tests.fixtures.tui import (
    THINKING_TEMPLATE,
    scripted_app,
    seed_conversations,
    send,
    wait_ready,
    wait_until,
)
from tui.widgets.tool_card import ToolCard

SIZE = (110, 34)

CONVERSATIONS = [
    ("How do I bake sourdough bread?", "Feed the starter, then proof the dough overnight."),
    ("Plan a trip to Lisbon", "Visit Belém and ride tram 28."),
    ("Fix my Python import error", "Check the package is installed in the venv."),
]


def test_guide_main_screen(snap_compare) -> None:
    seed_conversations(CONVERSATIONS)

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "What is a good first model to try?")
        await pilot.pause(0.2)

    app = scripted_app(reply="Open the hub with **Ctrl+O**: its *Recommended* tab lists small "
                       "models that fit this machine, and `d` downloads and loads one.")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_guide_hub(snap_compare, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(recommended, "total_memory_bytes", lambda: 16 * 10**9)
    monkeypatch.setattr(recommended, "machine_format", lambda *a: "gguf")
    monkeypatch.setenv("HF_ENDPOINT", "http://127.0.0.1:9")

    async def run_before(pilot) -> None:
        screen = await open_hub(pilot, search=False)
        await wait_until(pilot, lambda: screen.query_one("#hub-recommended").row_count > 0)

    assert snap_compare(hub_app(), terminal_size=SIZE, run_before=run_before)


def test_guide_reasoning_reply_with_a_tool_call(snap_compare) -> None:
    seed_conversations(CONVERSATIONS)
    call = {"name": "search_conversations", "arguments": {"query": "bread"}}  # one hit: a stable picture
    first = ("<think>The user baked bread with me before; the notes are in an earlier chat, "
             "so search the conversations.</think>Let me look that up.\n"
             f"<tool_call>\n{json.dumps(call)}\n</tool_call>")
    second = "Last time: feed the starter, then proof the dough **overnight**."

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await pilot.press(*"How did I make my sourdough?")
        await pilot.press("enter")
        await wait_until(pilot, lambda: pilot.app.screen.__class__.__name__
                         == "ToolApprovalScreen", 60)
        await pilot.press("y")
        await wait_until(pilot, lambda: pilot.app.main.turn is None, 60)
        assert [c.state for c in pilot.app.main.query(ToolCard)] == ["done"]
        await pilot.press("ctrl+up", "up", "t")  # the reply with the call: open its thinking
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)

    app = scripted_app(replies=[first, second], template=THINKING_TEMPLATE)
    assert snap_compare(app, terminal_size=(110, 44), run_before=run_before)
