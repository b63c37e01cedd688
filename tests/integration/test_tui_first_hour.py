"""What a new user tripped over in the first hour (issue 48), in the real app (Textual's
pilot, the scripted engine in a real worker, the real store in LLMDECK_HOME): Enter on a
search hit opens it at that message; a message typed over several lines shows its lines;
the header counts the context while a new chat streams."""

from __future__ import annotations

from core import paths
from core.store import Store
from tests.fixtures.tui import scripted_app, wait_ready, wait_until
from tui.widgets.message_view import MessageView
from tui.widgets.status_bar import StatusBar

SIZE = (100, 32)


def views(app) -> list[MessageView]:
    return list(app.main.query(MessageView))


def seed_hit() -> tuple[str, str]:
    """A conversation whose middle message holds "zebra"; (conversation id, message id)."""
    with Store.open(paths.db_path()) as store:
        cid = store.create_conversation(title="Animals", model="scripted-test")
        ids = [store.add_message(cid, "user" if i % 2 == 0 else "assistant",
                                 f"message {i}" + (" zebra" if i == 5 else ""))
               for i in range(12)]
        store.create_conversation(title="Newer, empty", model="scripted-test")
    return cid, ids[5]


async def search_for(pilot, word: str) -> None:
    app = pilot.app
    await pilot.press("ctrl+f", *word)
    await wait_until(pilot, lambda: word in str(
        app.main.query_one("#conversations").get_option_at_index(0).prompt))


async def test_enter_on_a_search_hit_opens_it_at_that_message() -> None:
    cid, hit = seed_hit()
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await search_for(pilot, "zebra")
        await pilot.press("enter")  # straight from the search box
        await wait_until(pilot, lambda: app.main.conversation_id == cid)
        await wait_until(pilot, lambda: isinstance(app.focused, MessageView))
        assert app.focused.message_id == hit and "zebra" in app.focused.content


async def test_down_then_enter_on_a_search_hit_opens_it_too() -> None:
    cid, hit = seed_hit()
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await search_for(pilot, "zebra")
        await pilot.press("down")
        assert app.focused is app.main.query_one("#conversations")
        await pilot.press("enter")
        await wait_until(pilot, lambda: app.main.conversation_id == cid)
        await wait_until(pilot, lambda: isinstance(app.focused, MessageView))
        assert app.focused.message_id == hit


def body_lines(view: MessageView) -> list[str]:
    """The body's rendered lines, as the screen shows them."""
    from textual.widgets._markdown import MarkdownBlock

    text = "\n".join(str(block._content) if hasattr(block, "_content") else ""
                     for block in view.body.query(MarkdownBlock))
    return [line.strip() for line in text.splitlines() if line.strip()]


async def test_a_message_typed_over_several_lines_shows_them() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press(*"one number per line:", "ctrl+j", "1", "ctrl+j", "2", "ctrl+j", "3")
        await pilot.press("enter")
        await wait_until(pilot, lambda: bool(views(app)) and app.main.at_rest)
        mine = views(app)[0]
        assert mine.content == "one number per line:\n1\n2\n3"  # stored as typed
        assert body_lines(mine)[-3:] == ["1", "2", "3"], body_lines(mine)


async def test_the_header_counts_the_context_while_a_new_chat_streams() -> None:
    app = scripted_app(reply="word " * 200, tokens_per_s=40)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        bar = app.main.query_one(StatusBar)
        await pilot.press(*"Hello there", "enter")
        await wait_until(pilot, lambda: len(views(app)) == 2 and len(views(app)[1].content) > 40)
        assert app.main.turn is not None, "still streaming"
        first = bar.context_used
        assert first > 10, "ctx 0 while the reply streams"
        await wait_until(pilot, lambda: len(views(app)[1].content) > 200)
        assert bar.context_used > first  # it counts as the reply goes
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.at_rest)
        assert bar.context_used > 0


async def test_quit_while_a_reply_streams_in_process_asks_first() -> None:
    from tui.app import QUIT_QUESTION
    from tui.screens.dialogs import ConfirmScreen

    app = scripted_app(reply="word " * 200, tokens_per_s=20)
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press(*"Hello", "enter")
        await wait_until(pilot, lambda: app.main.turn is not None)
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        assert app.screen.question == QUIT_QUESTION
        await pilot.press("n")  # the reply goes on
        await wait_until(pilot, lambda: not isinstance(app.screen, ConfirmScreen))
        assert app.is_running and app.main.turn is not None
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: isinstance(app.screen, ConfirmScreen))
        await pilot.press("y")
        await wait_until(pilot, lambda: not app.is_running)
    with Store.open(paths.db_path()) as store:  # what arrived is kept, marked stopped
        cid = store.list_conversations()[0].id
        reply = store.messages(cid)[-1]
    assert reply.role == "assistant" and reply.content.startswith("word")
    assert reply.status in ("stopped", "partial")


async def test_quit_at_rest_asks_nothing() -> None:
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await pilot.press("ctrl+q")
        await wait_until(pilot, lambda: not app.is_running)


async def test_quit_while_a_reply_streams_as_the_services_client_says_it_goes_on(
        llmdeck_home, capsys) -> None:
    from tests.helpers import service_proc as svc
    from tui.app import QUIT_NOTE, LlmdeckApp
    from tui.service_runtime import ServiceRuntime

    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args(reply="word " * 100, tokens_per_s=10))
        app = LlmdeckApp(ServiceRuntime())
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.runtime.model.state == "ready", 60)
            await pilot.press(*"Hello", "enter")
            await wait_until(pilot, lambda: app.main.turn is not None)
            await pilot.press("ctrl+q")  # no question: the reply is the service's
            await wait_until(pilot, lambda: not app.is_running)
        said = " ".join(capsys.readouterr().err.split())
        assert QUIT_NOTE in said, said
        status = svc.llmdeck("service", "status")
        assert "replies streaming: 1" in status.stdout, status.stdout


async def test_a_message_sent_while_the_model_loads_shows_at_once(llmdeck_home) -> None:
    """As the service's client (the default `llmdeck`): the message left the composer and
    showed nowhere until the model had loaded (issue 48)."""
    from tests.helpers import service_proc as svc
    from tui.app import LlmdeckApp
    from tui.service_runtime import ServiceRuntime

    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args(reply="Paris.", hang_load_s=4))
        app = LlmdeckApp(ServiceRuntime())
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.runtime.model.state == "loading", 30)
            app.main.composer.cursor_blink = False
            await pilot.press(*"Hello while loading", "enter")
            await pilot.pause(0.5)
            assert app.runtime.model.state == "loading"
            assert [v.content for v in views(app)][:1] == ["Hello while loading"]
            await wait_until(pilot, lambda: len(views(app)) == 2 and app.main.at_rest, 30)
            assert [v.content for v in views(app)] == ["Hello while loading", "Paris."]
            assert views(app)[0].message_id is not None  # the stored message, once saved
