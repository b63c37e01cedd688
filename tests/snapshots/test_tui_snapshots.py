"""Snapshots of every screen and state of the TUI, driven by keys, with the scripted engine
behind the real worker pool and store (so the bytes on screen are identical every run)."""

from __future__ import annotations

import time

import pytest

from core.config import Settings
from core.workers.pool import WorkerStatus
from tests.fixtures.tui import (
    THINKING_REPLY,
    THINKING_TEMPLATE,
    scripted_app,
    seed_conversations,
    send,
    type_burst,
    wait_ready,
    wait_until,
)
from themes.palettes import THEME_NAMES
from tui.widgets.message_view import MessageView
from tui.widgets.tool_card import STATES, ToolCard

SIZE = (100, 32)
SMALL = (80, 24)


def _replies(app) -> list[MessageView]:
    return [v for v in app.main.query(MessageView) if v.role == "assistant"]


def test_streaming_midway(snap_compare) -> None:
    """One 40-character piece shown, the next 10 s away: the frame is stable."""

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await type_burst(pilot, "Tell me about Paris")
        await pilot.press("enter")
        await wait_until(pilot, lambda: _replies(pilot.app) and _replies(pilot.app)[-1].body.source)
        pilot.app.main.composer.cursor_blink = False  # a blinking cursor makes snapshots flaky
        await pilot.pause(0.2)
        assert pilot.app.main.turn is not None  # still streaming

    app = scripted_app(tokens_per_s=0.1, chunk_chars=40)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_thinking_collapsed_after_the_answer(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "Capital of France?")
        reply = _replies(pilot.app)[-1]
        assert reply.thinking.display and reply.thinking.collapsed
        assert reply.reasoning.startswith("The user asks")

    app = scripted_app(reply=THINKING_REPLY, template=THINKING_TEMPLATE)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_thinking_expanded_from_the_keyboard(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "Capital of France?")
        await pilot.press("ctrl+up", "t")  # focus the last message, toggle its thinking
        await pilot.pause(0.2)
        assert not _replies(pilot.app)[-1].thinking.collapsed

    app = scripted_app(reply=THINKING_REPLY, template=THINKING_TEMPLATE)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


TOOL_REPLY = "Checking." + "".join(
    f'<tool_call>{{"name": "tool_{i}", "arguments": {{"n": {i}}}}}</tool_call>' for i in range(5)
)


def test_tool_card_states(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "Use the tools")
        cards = list(pilot.app.main.query(ToolCard))
        # No such tools exist, so the real tool loop fails each call and the model goes on.
        assert [c.state for c in cards] == ["failed"] * 5
        for card, state in zip(cards, STATES, strict=True):
            card.state = state
        cards[2].result = "sunny, 21 °C"
        cards[3].result = "HTTP 503 from the weather service"
        await pilot.press("ctrl+up")
        await pilot.pause(0.3)

    app = scripted_app(replies=[TOOL_REPLY, "The tools answered."], template=THINKING_TEMPLATE)
    assert snap_compare(app, terminal_size=(100, 48), run_before=run_before)


def test_search_results_highlight_matches(snap_compare) -> None:
    seed_conversations([
        ("How do I bake sourdough bread?", "Feed the starter, then proof the dough overnight."),
        ("Plan a trip to Lisbon", "Visit Belém and ride tram 28."),
        ("Fix my Python import error", "Check the package is installed in the venv."),
    ])

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await pilot.press("ctrl+f", *"proof dough")
        await wait_until(pilot, lambda: "bake" in str(
            pilot.app.main.query_one("#conversations").get_option_at_index(0).prompt))

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def fixed_worker_status_for_snapshot() -> list[WorkerStatus]:
    """Real RSS and pids differ every run; the pane's layout is what this pins down: two
    models loaded at once, one answering (kept loaded, 4 threads: "answering", not "kept
    loaded"), one idle in two llama.cpp replicas told apart by number and pid (issue 48;
    unloads in 4 minutes; its engine reports no thread count: '-')."""
    now = time.time()
    return [WorkerStatus("w0", "scripted-test", "scripted", "busy", 4242, 512 * 1024 * 1024,
                         1, 2, 98.5, 1, memory_bytes=1_300_000_000, last_used=now - 0.5,
                         threads=4),
            WorkerStatus("chat#0", "gemma3:270m-q4_k_m", "llamacpp", "idle", 4250,
                         300 * 1024 * 1024, 0, 0, 0.0, 0, memory_bytes=200_000_000,
                         last_used=now - 42.4, idle_left_s=239.6),
            WorkerStatus("chat#1", "gemma3:270m-q4_k_m", "llamacpp", "idle", 4251,
                         300 * 1024 * 1024, 0, 0, 0.0, 0, memory_bytes=200_000_000,
                         last_used=now - 42.4, idle_left_s=239.6)]


def test_worker_pane(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        pilot.app.main.composer.blur()  # its cursor's blink phase must not decide the frame
        pane = pilot.app.main.query_one("#worker-pane")
        pane._read = fixed_worker_status_for_snapshot
        await pilot.press("f4")
        await pilot.pause(0.2)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_model_picker(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await pilot.press("f5")
        await wait_until(pilot, lambda: hasattr(pilot.app.screen, "choices"))

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_settings_refuses_out_of_range_temperature(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        pilot.app.main.composer.blur()  # it shows below the dialog: no cursor, drawn or not
        await pilot.pause()
        await pilot.press("f3")
        await pilot.pause(0.2)
        await pilot.press("end", "backspace", "backspace", "backspace", "3")  # 3: refused
        await pilot.press("ctrl+s")
        pilot.app.focused.cursor_blink = False  # the frame must not depend on the blink phase
        await pilot.pause(0.3)
        assert pilot.app.screen.__class__.__name__ == "SettingsScreen"

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_settings_tool_section_refuses_too_little_memory(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        # The composer shows below this dialog: unfocused first, so its cursor is not drawn
        # or not depending on whether the screen behind repainted after the focus moved.
        pilot.app.main.composer.blur()
        await pilot.pause()
        await pilot.press("f3")
        await pilot.pause(0.2)
        memory = pilot.app.screen.query_one("#set-python_memory_mb")
        memory.focus()
        await pilot.press("end", *["backspace"] * len(memory.value), *"64")  # 64 MiB: refused
        memory.cursor_blink = False
        pilot.app.screen.query_one("#tools-section").scroll_visible(animate=False, top=True)
        await pilot.pause(0.3)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_help_lists_bindings(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await pilot.press("f1")
        await pilot.pause(0.2)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


@pytest.mark.parametrize("theme", THEME_NAMES)
def test_each_theme(snap_compare, theme: str) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "What is the capital of France?")

    app = scripted_app(Settings(theme=theme))
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


def test_exchange_at_80x24(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "What is the capital of France?")

    assert snap_compare(scripted_app(), terminal_size=SMALL, run_before=run_before)


def test_empty_at_80x24(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)

    assert snap_compare(scripted_app(), terminal_size=SMALL, run_before=run_before)


def test_delete_conversation_asks_first(snap_compare) -> None:
    seed_conversations([("Old question", "Old answer")])

    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await pilot.press("ctrl+f", "tab", "d")
        await pilot.pause(0.2)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)
