"""Esc pressed while a sent message is still on its way (start_turn not answered yet, as
on the engine service's socket under load) stops its reply as soon as it arrives; it used
to be dropped, and the reply ran to its end. Real worker (scripted engine), real store."""

from __future__ import annotations

import asyncio

from core import paths
from core.store import Store
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.widgets.message_view import MessageView

SIZE = (100, 32)
REPLY = "tick " * 100


async def test_esc_while_the_message_is_on_its_way_stops_the_reply() -> None:
    app = scripted_app(reply=REPLY, tokens_per_s=50, chunk_chars=5)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        door = asyncio.Event()  # holds start_turn's answer, as a slow socket does
        real_start = app.runtime.start_turn

        async def held_start_turn(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            await door.wait()
            return await real_start(*args, **kwargs)

        app.runtime.start_turn = held_start_turn
        await pilot.press(*"Go", "enter")
        await wait_until(pilot, lambda: app.main.busy and app.main.turn is None)
        await pilot.press("escape")  # before the turn exists here
        door.set()
        await wait_until(pilot, lambda: len(list(app.main.query(MessageView))) == 2
                         and app.main.turn is None and not app.main.busy)
        reply = list(app.main.query(MessageView))[-1]
        with Store.open(paths.db_path()) as store:
            saved = store.get_message(reply.message_id)
        assert saved is not None and saved.status == "stopped", saved and saved.status
        assert saved.content != REPLY and REPLY.startswith(saved.content)
