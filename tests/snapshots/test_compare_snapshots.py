"""Compare in the TUI (issue 31, item 5): two replies side by side with their stats lines,
then a key keeps one. Scripted engines behind the real pool and store: the left is the
app's chat model, the right a second scripted model loaded beside it."""

from __future__ import annotations

from core import paths
from core.engines.base import ModelSpec
from core.store import Store
from tests.fixtures.tui import (
    scripted_app,
    service_comparison,
    type_burst,
    wait_ready,
    wait_until,
)
from tui.screens.compare import CompareScreen
from tui.screens.model_picker import ModelPickerScreen
from tui.widgets.message_view import MessageView

SIZE = (110, 26)
QUESTION = "Capital of France?"
LEFT_REPLY = "Paris is the capital of **France**.\n\n- on the Seine\n- about 2 million people"
RIGHT_REPLY = "The capital of France is *Paris*.\n\n```text\nParis\n```"


def right_model() -> ModelSpec:
    options = {"reply": RIGHT_REPLY, "fixed_timing": True, "label": "scripted-right"}
    return ModelSpec(path="scripted", engine="scripted", context_size=4096,
                     options=tuple(options.items()))


async def open_compare(pilot) -> CompareScreen:
    """Type the question, open the comparison (as ctrl+t does after the picker) and wait
    until both replies have ended."""
    app = pilot.app
    await wait_ready(pilot)
    await type_burst(pilot, QUESTION)
    main = app.main
    text = main.composer.text
    main.composer.load_text("")
    screen = CompareScreen(main.conversation_id, text, right_model(), "scripted-right")
    app.push_screen(screen, main._compared)
    await wait_until(pilot, lambda: screen.streamed)
    await pilot.pause(0.3)
    return screen


def test_compare_side_by_side(snap_compare) -> None:
    async def run_before(pilot) -> None:
        screen = await open_compare(pilot)
        left, right = screen.views
        assert left.content == LEFT_REPLY and right.content == RIGHT_REPLY
        for view in (left, right):
            assert str(view.query_one(".stats").render()).startswith("TTFT 12 ms · 100.0 tok/s")

    app = scripted_app(reply=LEFT_REPLY)
    assert snap_compare(app, terminal_size=SIZE, run_before=run_before)


async def test_keeping_the_right_reply_makes_it_the_reply_and_the_left_a_branch() -> None:
    app = scripted_app(reply=LEFT_REPLY)
    async with app.run_test(size=SIZE) as pilot:
        screen = await open_compare(pilot)
        sides = service_comparison(app, screen).sides
        await pilot.press("2")
        await wait_until(pilot, lambda: app.screen is app.main and app.main.conversation_id
                         and len(app.main.query(MessageView)) == 2)
        await pilot.pause(0.2)
        user, reply = app.main.chat.views
        assert (user.role, user.content) == ("user", QUESTION)
        assert reply.content == RIGHT_REPLY and reply.branch is not None
        assert reply.branch[1] == 2  # two answers to the one question
        right_id = sides[1].message_id
        assert reply.message_id == right_id
        with Store.open(paths.db_path()) as store:
            stored = store.messages(app.main.conversation_id)
            assert stored[-1].id == right_id and stored[-1].model == "scripted-right"
            assert {m.id for m in store.branches(right_id)} == {
                s.message_id for s in sides}

        # The chat's branch keys step to the other answer.
        reply.focus()
        other = "left_square_bracket" if reply.branch[0] == 2 else "right_square_bracket"
        await pilot.press(other)
        await wait_until(pilot, lambda: app.main.chat.views
                         and app.main.chat.views[-1].content == LEFT_REPLY)


async def test_esc_stops_both_then_closes_keeping_the_left() -> None:
    app = scripted_app(reply="word " * 300, fixed_timing=False, tokens_per_s=40.0)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await type_burst(pilot, QUESTION)
        main = app.main
        slow_right = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                               options=(("reply", "more " * 300), ("tokens_per_s", 40.0)))
        screen = CompareScreen(None, QUESTION, slow_right, "slow-right")
        app.push_screen(screen, main._compared)
        await wait_until(pilot, lambda: screen.comparison is not None
                         and all(v.content for v in screen.views))
        sides = service_comparison(app, screen).sides
        await pilot.press("escape")  # stop both
        await wait_until(pilot, lambda: screen.streamed)
        assert all(side.finish_reason == "cancelled" for side in sides)
        assert "(stopped)" in str(screen.views[0].query_one(".role").render())
        await pilot.press("escape")  # close: the left stays the reply
        await wait_until(pilot, lambda: app.screen is main and len(main.chat.views) == 2)
        assert main.chat.views[-1].message_id == sides[0].message_id


async def test_ctrl_t_asks_for_the_message_first_then_opens_the_picker() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+t")
        await pilot.pause(0.1)
        assert not isinstance(app.screen, ModelPickerScreen)  # nothing to compare yet
        assert any("Type the message to compare first" in n.message
                   for n in app._notifications)
        await type_burst(pilot, QUESTION)
        await pilot.press("ctrl+t")
        await wait_until(pilot, lambda: isinstance(app.screen, ModelPickerScreen))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is app.main)
        assert app.main.composer.text == QUESTION  # a cancelled pick leaves the text


async def test_a_refused_second_model_gives_the_text_back_with_the_sentence() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        main = app.main
        broken = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                           options=(("fail_load", "LOAD_FAILED"),))
        app.push_screen(CompareScreen(None, QUESTION, broken, "broken"), main._compared)
        await wait_until(pilot, lambda: app.screen is main and main.composer.text == QUESTION)
        assert any("Scripted load failure" in str(n.message) for n in app._notifications)
        assert main.conversation_id is None  # nothing was saved


async def test_esc_while_the_second_model_loads_backs_out_with_the_text() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        main = app.main
        slow = ModelSpec(path="scripted", engine="scripted", context_size=4096,
                         options=(("hang_load_s", 30.0),))
        screen = CompareScreen(None, QUESTION, slow, "slow-loader")
        app.push_screen(screen, main._compared)
        await pilot.pause(0.5)
        assert app.screen is screen and screen.comparison is None  # still loading
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.screen is main and main.composer.text == QUESTION,
                         timeout=5)
        assert main.conversation_id is None  # nothing was saved
