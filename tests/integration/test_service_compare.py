"""Compare (ctrl+t) through the engine service: the client's comparison streams both
replies from a real service process, Esc (cancel) stops both, and keep makes one the
reply with the other as its sibling, in the service's store."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.engines.base import ModelSpec
from core.events import Done, TextDelta
from core.runtime.compare import LEFT, RIGHT, CompareRefused
from tests.helpers import service_proc as svc
from tui.service_runtime import ServiceRuntime


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def scripted(label: str, reply: str, **options: object) -> ModelSpec:
    opts = {"reply": reply, "fixed_timing": True, "label": label, **options}
    return ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(opts.items()))


async def test_both_replies_stream_from_the_service_and_the_kept_one_is_the_reply(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply="Left says Paris."))
    client = ServiceRuntime()
    await client.start()
    try:
        result = await client.compare(None, "Capital of France?",
                                      scripted("right-model", "Right says PARIS!"), "right-model")
        assert not isinstance(result, CompareRefused), result
        seen: dict[int, list] = {LEFT: [], RIGHT: []}
        async for item in result.events():
            seen[item.side].append(item.event)
        for side, want in ((LEFT, "Left says Paris."), (RIGHT, "Right says PARIS!")):
            assert "".join(e.text for e in seen[side] if isinstance(e, TextDelta)) == want
            assert [e for e in seen[side] if isinstance(e, Done)] == [Done("stop")]
        kept = await result.keep(RIGHT)
        stored = await client.messages(result.conversation_id)
        assert [m.content for m in stored] == ["Capital of France?", "Right says PARIS!"]
        assert stored[-1].id == kept
        assert (await client.branch_positions([kept]))[kept][1] == 2  # the left: its sibling
        with pytest.raises(LookupError, match="comparison is over"):
            await result.keep(LEFT)
        refused = await client.compare(result.conversation_id, "  ", scripted("r", "R"), "r")
        assert isinstance(refused, CompareRefused) and "Type the message" in refused.message
    finally:
        await client.close()


async def test_cancel_stops_both_replies_in_the_service(llmdeck_home: Path) -> None:
    long = "tick " * 300
    svc.start(*svc.scripted_args(reply=long, tokens_per_s=30, chunk_chars=5))
    client = ServiceRuntime()
    await client.start()
    try:
        result = await client.compare(None, "Count.", scripted(
            "right-model", long, tokens_per_s=30, chunk_chars=5), "right-model")
        assert not isinstance(result, CompareRefused), result
        seen: dict[int, list] = {LEFT: [], RIGHT: []}
        async with asyncio.timeout(60):
            async for item in result.events():
                seen[item.side].append(item.event)
                if isinstance(item.event, TextDelta) and not result.cancelled:
                    result.cancel()  # Esc at the first piece
        for side in (LEFT, RIGHT):
            assert seen[side][-1] == Done("cancelled"), seen[side][-3:]
            assert len("".join(e.text for e in seen[side] if isinstance(e, TextDelta))) < len(long)
        stored = await client.messages(result.conversation_id)
        assert stored[-1].status == "stopped" and len(stored[-1].content) < len(long)
    finally:
        await client.close()


async def test_the_compare_screen_in_the_services_client_keeps_the_right_reply(
        llmdeck_home: Path) -> None:
    """ctrl+t's screen in `llmdeck` as the service's client (it used to refuse, naming
    --in-process): both replies stream side by side, 2 keeps the right one."""
    from tests.fixtures.tui import wait_ready, wait_until
    from tui.app import LlmdeckApp
    from tui.screens.compare import CompareScreen
    from tui.widgets.message_view import MessageView

    svc.start(*svc.scripted_args(reply="Left says Paris."))
    app = LlmdeckApp(ServiceRuntime())
    async with app.run_test(size=(110, 26)) as pilot:
        await wait_ready(pilot)
        screen = CompareScreen(None, "Capital of France?",
                               scripted("right-model", "Right says PARIS!"), "right-model")
        app.push_screen(screen, app.main._compared)
        await wait_until(pilot, lambda: screen.streamed, 60)
        left, right = screen.views
        assert (left.content, right.content) == ("Left says Paris.", "Right says PARIS!")
        await pilot.press("2")
        await wait_until(pilot, lambda: app.screen is app.main and app.main.conversation_id
                         and len(app.main.query(MessageView)) == 2)
        await pilot.pause(0.2)
        user, reply = app.main.chat.views
        assert (user.content, reply.content) == ("Capital of France?", "Right says PARIS!")
        assert reply.branch is not None and reply.branch[1] == 2
