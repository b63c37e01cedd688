"""What a new user tripped over in the first hour (issue 48), in the real app (Textual's
pilot, the scripted engine in a real worker, the real store in LLMDECK_HOME): Enter on a
search hit opens it at that message; a message typed over several lines shows its lines;
the header counts the context while a new chat streams."""

from __future__ import annotations

from core import paths
from core.store import Store
from tests.fixtures.tui import scripted_app, type_burst, wait_ready, wait_until
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
        await type_burst(pilot, "one number per line:")
        await pilot.press("ctrl+j", "1", "ctrl+j", "2", "ctrl+j", "3")
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
        await type_burst(pilot, "Hello there")
        await pilot.press("enter")
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
        await type_burst(pilot, "Hello")
        await pilot.press("enter")
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
            await type_burst(pilot, "Hello")
            await pilot.press("enter")
            await wait_until(pilot, lambda: app.main.turn is not None)
            await pilot.press("ctrl+q")  # no question: the reply is the service's
            await wait_until(pilot, lambda: not app.is_running)
        said = " ".join(capsys.readouterr().err.split())
        assert QUIT_NOTE in said, said
        status = svc.llmdeck("service", "status")
        assert "replies streaming: 1" in status.stdout, status.stdout


async def test_a_message_sent_while_the_model_loads_shows_at_once(llmdeck_home) -> None:
    """As the service's client (the default `llmdeck`): the message left the composer and
    showed nowhere until the service had saved it, 0.4 s here and ~2 s on a busy box
    while the model loads (issue 48). It shows before the service is asked."""
    from tests.helpers import service_proc as svc
    from tui.app import LlmdeckApp
    from tui.service_runtime import ServiceRuntime

    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args(reply="Paris.", hang_load_s=4))
        app = LlmdeckApp(ServiceRuntime())
        async with app.run_test(size=SIZE) as pilot:
            await wait_until(pilot, lambda: app.runtime.model.state == "loading", 30)
            shown_when_asked: list[list[str]] = []
            start_turn = app.runtime.start_turn

            async def recorded(conversation_id, text):  # noqa: ANN001, ANN202
                shown_when_asked.append([v.content for v in views(app)])
                return await start_turn(conversation_id, text)

            app.runtime.start_turn = recorded
            await type_burst(pilot, "Hello while loading")
            await pilot.press("enter")
            await wait_until(pilot, lambda: bool(shown_when_asked))
            assert shown_when_asked == [["Hello while loading"]]
            await wait_until(pilot, lambda: len(views(app)) == 2 and app.main.at_rest, 30)
            assert [v.content for v in views(app)] == ["Hello while loading", "Paris."]
            assert views(app)[0].message_id is not None  # the stored message, once saved


async def test_the_first_frames_say_connecting_then_open_the_newest_reply(
        llmdeck_home, monkeypatch) -> None:
    """As the service's client on a warm start: "connecting…" (not "no model ○") until the
    service answers, then the conversation of the reply it just finished, with no empty
    chat and "ctx 0" shown before it (issue 48, item 4)."""
    import asyncio

    from tests.helpers import service_proc as svc
    from tui.app import LlmdeckApp
    from tui.service_runtime import ServiceRuntime

    class SlowToConnectMock(ServiceRuntime):
        """The real client, held before it connects until the test lets it."""

        gate = asyncio.Event()

        async def start(self, *, preload: bool = True) -> None:
            await self.gate.wait()
            await super().start(preload=preload)

    headers: list[str] = []
    render = StatusBar.render

    def recorded(bar: StatusBar):  # noqa: ANN202
        out = render(bar)
        headers.append(str(out))
        return out

    monkeypatch.setattr(StatusBar, "render", recorded)
    with svc.no_service_left(llmdeck_home):
        svc.start(*svc.scripted_args(reply="Paris is the capital."))
        first = ServiceRuntime()
        await first.start()
        turn = await first.start_turn(None, "Capital of France?")
        async for _ in turn.events():
            pass
        await first.close()

        app = LlmdeckApp(SlowToConnectMock())
        async with app.run_test(size=SIZE) as pilot:
            await pilot.pause(0.2)
            assert str(app.main.query_one(StatusBar).render()) == " llmdeck │ connecting…"
            assert not app.main.query(".empty-hint"), "an empty chat before the service answered"
            SlowToConnectMock.gate.set()
            await wait_until(pilot, lambda: [v.content for v in views(app)]
                             == ["Capital of France?", "Paris is the capital."])
            await wait_until(pilot, lambda: "ctx" in headers[-1])
        assert not any("no model" in h for h in headers), headers
        assert not any("ctx 0 " in h for h in headers), headers


async def test_opening_a_conversation_of_the_loaded_model_says_nothing(bundled_gguf) -> None:
    """The model's engine left to choose (settings' engine unset, as `--model PATH` or a
    picked file leaves it), a conversation saved as "llamacpp:PATH" of the loaded PATH:
    opening it said "Loading gemma-3-270m-q4_k_m.gguf for this conversation…" while
    nothing loaded (issue 48, item 2)."""
    from core import model_refs
    from core.config import Settings
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    with Store.open(paths.db_path()) as store:
        cid = store.create_conversation(model=model_refs.make(str(bundled_gguf), "llamacpp"))
        store.add_message(cid, "user", "kiwi question")
        store.add_message(cid, "assistant", "kiwi answer")
    app = LlmdeckApp(Runtime(Settings(model=str(bundled_gguf), engine=None, context_size=512)))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.runtime.model.state == "ready", 120)
        workers = [w.pid for w in app.runtime.worker_status()]
        await search_for(pilot, "kiwi")
        await pilot.press("tab", "enter")
        await wait_until(pilot, lambda: app.main.conversation_id == cid)
        await pilot.pause(0.5)
        said = " ".join(str(n.message) for n in app._notifications)
        assert "Loading" not in said, said
        assert [w.pid for w in app.runtime.worker_status()] == workers


def empty_hint_text(app) -> str:
    from textual.widgets import Static

    return "\n".join(str(h.render()) for h in app.main.query(".empty-hint").results(Static))


async def test_offline_the_empty_chat_says_so_and_how_to_leave_it(monkeypatch) -> None:
    """HF_HUB_OFFLINE=1 in the service: the empty chat says offline mode is on and how to
    leave it (it said Ctrl+O and d download a model, which fails at once), and a new chat
    says it again; without it, the download line as before."""
    from core.hub.endpoint import OFFLINE_SENTENCE

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    async with scripted_app().run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        shown = empty_hint_text(pilot.app)
        assert OFFLINE_SENTENCE in shown and "downloads and loads" not in shown, shown
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: OFFLINE_SENTENCE in empty_hint_text(pilot.app))
    monkeypatch.delenv("HF_HUB_OFFLINE")
    async with scripted_app().run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        shown = empty_hint_text(pilot.app)
        assert "d there downloads and loads one" in shown and "Offline" not in shown, shown


async def test_the_empty_chat_speaks_of_the_gemma_only_when_it_is_the_model(tmp_path) -> None:
    """`llmdeck --model other.gguf` (or a downloaded model, after Ctrl+N): the empty chat
    said "The bundled Gemma 3 270M is a small base model, fine for a first try only" beside
    another model's name in the header."""
    from core.config import Settings
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    other = tmp_path / "qwen3-4b-q4_k_m.gguf"
    other.write_bytes(b"GGUF")  # never read: the scripted engine answers
    app = LlmdeckApp(Runtime(Settings(model=str(other), engine="scripted")))
    async with app.run_test(size=SIZE) as pilot:
        await wait_until(pilot, lambda: app.runtime.model_state().name == other.name
                         and app.main.offline_known)
        await wait_until(pilot, lambda: "Ctrl+O opens" in empty_hint_text(app)
                         or "Offline mode" in empty_hint_text(app))
        await wait_until(pilot, lambda: "Gemma" not in empty_hint_text(app))
        await pilot.press("ctrl+n")
        await wait_until(pilot, lambda: "Enter sends" in empty_hint_text(app))
        assert "Gemma" not in empty_hint_text(app)
