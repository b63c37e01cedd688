"""In the app: a cut reply says so, and g on it continues it in place (issue 46)."""

from __future__ import annotations

import pytest

from core.config import Settings
from tests.fixtures.tui import scripted_app, send, wait_ready, wait_until
from tui.widgets.message_view import MessageView

FIRST = "One two three four five six seven eight nine ten."
REST = " The end."


async def test_g_on_a_cut_reply_continues_it_in_the_same_message() -> None:
    settings = Settings()
    settings.sampling.max_tokens = 4
    app = scripted_app(settings, replies=(FIRST, REST))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Count to ten, please.")
        reply = app.main.query(MessageView).last()
        assert reply.status == "cut" and reply.query_one(".cut").display
        assert "cut at 4 tokens" in str(reply.query_one(".cut").render())
        reply.focus()
        await pilot.press("g")
        await wait_until(pilot, lambda: app.main.at_rest and reply.content == FIRST[:16] + REST)
        views = list(app.main.query(MessageView))
        assert [v.role for v in views] == ["user", "assistant"]  # the same view went on
        assert reply.status == "complete" and not reply.query_one(".cut").display
        # its stats count the whole reply, as the stored message (and a reopened one) does
        assert "· 7 tokens" in str(reply.query_one(".stats").render())
        stored = await app.runtime.messages(app.main.conversation_id)
        assert [(m.id, m.content, m.status) for m in stored[1:]] == [
            (reply.message_id, FIRST[:16] + REST, "complete")]


async def test_g_on_a_finished_reply_says_what_it_is_for() -> None:
    app = scripted_app()
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Hello")
        reply = app.main.query(MessageView).last()
        reply.focus()
        await pilot.press("g")
        await wait_until(pilot, lambda: any("cut at its length limit" in str(n.message)
                                            for n in app._notifications))
        assert len(app.main.query(MessageView)) == 2


@pytest.mark.slow
async def test_a_reply_that_filled_the_context_says_so_live_and_reopened() -> None:
    """The cut line of a reply that ran to the end of the context says the context is
    full and how to go on (a larger context, then g), not "the length limit" (no Max
    tokens was set); g says the same in a notice and the reply stays cut."""
    from core.engines.base import ModelSpec
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    opts = {"reply": "word " * 400, "fixed_timing": True, "label": "scripted-test"}
    spec = ModelSpec(path="scripted", engine="scripted", context_size=256,
                     options=tuple(opts.items()))
    app = LlmdeckApp(Runtime(Settings(context_size=256), model_spec=spec))
    async with app.run_test(size=(120, 40)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Talk.")
        reply = app.main.query(MessageView).last()
        note = str(reply.query_one(".cut").render())
        assert reply.status == "cut" and "filled the context (256 tokens)" in note, note
        assert "length limit" not in note and "F3" in note
        reply.focus()
        await pilot.press("g")
        await wait_until(pilot, lambda: any("filled the model's whole context" in str(n.message)
                                            for n in app._notifications))
        assert reply.status == "cut"
        await app.main.open_conversation(app.main.conversation_id)
        await pilot.pause(0.2)
        reopened = app.main.query(MessageView).last()
        assert "filled the context (256 tokens)" in str(reopened.query_one(".cut").render())
