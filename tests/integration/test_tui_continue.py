"""In the app: a cut reply says so, and g on it continues it in place (issue 46)."""

from __future__ import annotations

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
