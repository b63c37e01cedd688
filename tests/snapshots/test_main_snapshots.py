"""Snapshots of the main screen, with the scripted engine for byte-identical replies."""

from __future__ import annotations

import asyncio

from core.config import Settings
from core.engines.base import ModelSpec
from core.runtime import Runtime
from tui.app import LlmdeckApp

REPLY = (
    "Paris is the capital of **France**.\n\n"
    "- It sits on the Seine\n- It has about 2 million people\n\n"
    "```python\nprint('bonjour')\n```\n"
)
SIZE = (120, 40)


def scripted_app(**options) -> LlmdeckApp:
    opts = {"reply": REPLY, "fixed_timing": True, "label": "scripted-test", **options}
    spec = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(opts.items()))
    return LlmdeckApp(Runtime(Settings(), model_spec=spec))


async def wait_until(pilot, predicate, timeout: float = 20.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        if loop.time() > deadline:
            raise AssertionError("condition not reached")
        await pilot.pause(0.05)
    await pilot.pause()


async def wait_ready(pilot) -> None:
    app = pilot.app
    await wait_until(pilot, lambda: app.runtime.model.state == "ready")
    app.main.composer.cursor_blink = False  # a blinking cursor makes snapshots flaky


async def send(pilot, text: str) -> None:
    """Type and send a message, then wait for the whole reply."""
    from tui.widgets.message_view import MessageView

    app = pilot.app
    before = len(app.main.query(MessageView))
    await pilot.press(*text)
    await pilot.press("enter")
    await wait_until(pilot, lambda: len(app.main.query(MessageView)) >= before + 2
                     and app.main.turn is None)
    await pilot.pause(0.3)


def test_empty_main_screen(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_finished_exchange(snap_compare) -> None:
    async def run_before(pilot) -> None:
        await wait_ready(pilot)
        await send(pilot, "What is the capital of France?")

    assert snap_compare(scripted_app(), terminal_size=SIZE, run_before=run_before)


def test_load_error_in_chat_view(snap_compare) -> None:
    async def run_before(pilot) -> None:
        app = pilot.app
        await wait_until(pilot, lambda: app.runtime.model.state == "failed")
        app.main.composer.cursor_blink = False
        await send(pilot, "Hello?")

    app = scripted_app(fail_load="LOAD_FAILED")
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)
