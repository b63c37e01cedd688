"""Snapshots of tool cards in each state, reached through the real tool loop: a scripted
model emitting hermes tool calls in a worker process, the approval dialog answered with
keys, and the real sandbox process running the code."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from core.config import Settings
from core.tools.builtins import now as now_tool
from tests.fixtures.tui import scripted_app, type_burst, wait_until
from tui.widgets.message_view import MessageView
from tui.widgets.tool_card import ToolCard

SIZE = (100, 34)
HERMES = "{{ '<tool_call>' }}"  # the worker detects the hermes family from this


def _call(name: str, arguments: dict) -> str:
    return f"Let me check.\n<tool_call>\n{json.dumps({'name': name, 'arguments': arguments})}\n</tool_call>"


def _app(code: str, follow: str = "Done.", settings: Settings | None = None):
    return scripted_app(settings, replies=[_call("python", {"code": code}), follow], template=HERMES)


def _card(pilot) -> ToolCard | None:
    cards = list(pilot.app.main.query(ToolCard))
    return cards[-1] if cards else None


async def _ask(pilot, text: str = "Compute it") -> None:
    app = pilot.app
    app.main.composer.cursor_blink = False  # a blinking cursor makes snapshots flaky
    await wait_until(pilot, lambda: app.runtime.model.state == "ready")
    await type_burst(pilot, text)
    await pilot.press("enter")


SLOW = 90.0  # the sandbox process starts on first use; CI machines can be busy


async def _finish(pilot) -> None:
    await wait_until(pilot, lambda: pilot.app.main.turn is None, SLOW)
    await pilot.press("ctrl+l")
    await pilot.pause(0.3)


def test_card_awaiting_approval(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _ask(pilot)
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval"
                         and pilot.app.screen.__class__.__name__ == "ToolApprovalScreen")
        await pilot.pause(0.3)

    assert snap_compare(_app("6 * 7"), terminal_size=SIZE, run_before=run_before)


def test_card_running(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _ask(pilot)
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval")
        await pilot.press("y")
        await wait_until(pilot, lambda: _card(pilot).state == "running", SLOW)
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)

    app = _app("import time\ntime.sleep(60)")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_card_done(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _ask(pilot)
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval")
        await pilot.press("y")
        await _finish(pilot)
        assert _card(pilot).state == "done" and _card(pilot).result == "squares\n[0, 1, 4, 9]"

    app = _app("print('squares')\n[n * n for n in range(4)]", "The squares are 0, 1, 4 and 9.")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_card_failed(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _ask(pilot)
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval")
        await pilot.press("y")
        await _finish(pilot)
        assert _card(pilot).state == "failed" and "ZeroDivisionError" in _card(pilot).result

    app = _app("total = 10\ntotal / 0", "Dividing by zero fails.")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_card_denied(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await _ask(pilot, "Clean up")
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval")
        await pilot.press("n")
        await _finish(pilot)
        assert _card(pilot).state == "denied" and _card(pilot).result == "denied by user"
        assert pilot.app.runtime.local.tools.sandbox.pid is None, "nothing ran"

    app = _app("import shutil\nshutil.rmtree('/tmp/x')", "Understood, I left it alone.")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_always_allow_for_a_read_only_tool_skips_the_next_question(snap_compare, monkeypatch) -> None:
    # The clock's answer goes into the prompt, so the header's token count would follow the
    # weekday's length (CI met 'ctx 64' on a Tuesday): hold the clock on a Monday.
    monday = datetime(2026, 11, 23, 9, 0, tzinfo=UTC)
    monkeypatch.setattr(now_tool, "current_time", lambda: monday)

    async def run_before(pilot) -> None:
        app = pilot.app
        await _ask(pilot, "What day is it?")
        await wait_until(pilot, lambda: _card(pilot) is not None
                         and _card(pilot).state == "awaiting-approval")
        await pilot.press("a")
        await _finish(pilot)
        await type_burst(pilot, "And now?")
        await pilot.press("enter")
        await _finish(pilot)
        states = [c.state for c in app.main.query(ToolCard)]
        assert states == ["done", "done"], "asked once, then always allowed in this chat"
        assert app.runtime.local.tools.policy.always_allowed(app.main.conversation_id) == {"now"}
        for card in app.main.query(ToolCard):  # the clock's answer differs every run
            card.result = "Monday 2026-11-23T09:00:00+00:00 (UTC)"
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)

    app = scripted_app(replies=[_call("now", {}), "It is Monday."], template=HERMES)
    assert snap_compare(app, terminal_size=(100, 52), run_before=run_before)


def test_run_code_block_then_fix_puts_code_and_traceback_in_the_composer(snap_compare) -> None:
    reply = "Try this:\n\n```python\nitems = [1, 2, 3]\nitems[5]\n```\n"

    async def run_before(pilot) -> None:
        app = pilot.app
        app.main.composer.cursor_blink = False
        await wait_until(pilot, lambda: app.runtime.model.state == "ready")
        await type_burst(pilot, "Show me indexing")
        await pilot.press("enter")
        await _finish(pilot)
        await pilot.press("f8")
        await wait_until(pilot, lambda: app.main.code_runs.failed_run is not None, SLOW)
        await pilot.press("f9")
        await pilot.press("ctrl+l")
        await pilot.pause(0.3)
        text = app.main.composer.text
        assert "items[5]" in text and "IndexError: list index out of range" in text
        tools = [v for v in app.main.query(MessageView) if v.role == "tool"]
        assert len(tools) == 1 and tools[0].message_id is not None
        stored = (await app.runtime.messages(app.main.conversation_id))[-1]
        assert stored.role == "tool" and stored.tool_results[0]["origin"] == "user"

    app = scripted_app(reply=reply)
    assert snap_compare(app, terminal_size=(100, 44), run_before=run_before)
