"""Opening conversations in the real app (Textual's pilot, real worker process with the
scripted engine, real store in LLMDECK_HOME): each selects the model it was having, and a
search hit deep in a long conversation opens at that message, not at the newest page."""

from __future__ import annotations

from pathlib import Path

from core import model_refs, paths
from core.config import RemoteEndpoint, Settings
from core.runtime import Runtime
from core.store import Store
from tests.fixtures.tui import send, wait_ready, wait_until
from tui.app import LlmdeckApp
from tui.widgets.chat_view import PAGE
from tui.widgets.message_view import MessageView
from tui.widgets.status_bar import StatusBar

SIZE = (100, 32)


def views(app) -> list[MessageView]:
    return list(app.main.query(MessageView))


def header(app) -> str:
    return str(app.main.query_one(StatusBar).render())


def notices(app) -> str:
    return " ".join(str(n.message) for n in app._notifications)


def seed(model: str | None, word: str, count: int = 2) -> str:
    """A conversation remembered with `model`; `word` is in its first message."""
    with Store.open(paths.db_path()) as store:
        cid = store.create_conversation(model=model)
        for i in range(count):
            text = f"message {i}" + (f" {word}" if i == 0 else "")
            store.add_message(cid, "user" if i % 2 == 0 else "assistant", text)
    return cid


async def open_by_search(pilot, word: str) -> None:
    """Search the sidebar for `word` and open the hit with the keyboard."""
    app = pilot.app
    await pilot.press("ctrl+f")
    app.main.query_one("#search").value = ""
    await pilot.press(*word)
    await wait_until(pilot, lambda: word in str(
        app.main.query_one("#conversations").get_option_at_index(0).prompt))
    await pilot.press("tab", "enter")
    await wait_until(pilot, lambda: any(word in v.content for v in views(app)))


def scripted_models(tmp_path: Path) -> tuple[str, str]:
    a, b = tmp_path / "model-a", tmp_path / "model-b"
    a.write_text("scripted")
    b.write_text("scripted")
    return str(a), str(b)


async def test_opening_a_conversation_selects_its_model(tmp_path: Path) -> None:
    a, b = scripted_models(tmp_path)
    seed(model_refs.make(b, "scripted"), "bravo")
    seed(model_refs.make(a, "scripted"), "alpha")
    seed("remote:gpu/big-model", "remote")
    settings = Settings(model=a, engine="scripted",
                        remotes=[RemoteEndpoint("gpu", "http://127.0.0.1:9/v1")])
    app = LlmdeckApp(Runtime(settings))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        assert "model-a" in header(app)

        await open_by_search(pilot, "bravo")
        await wait_until(pilot, lambda: app.runtime.model.label == "model-b:latest"
                         and app.runtime.model.state == "ready")
        assert "model-b:latest ●" in header(app)  # its one id
        assert app.runtime.settings.model == b
        await wait_until(pilot, lambda: Settings.load().model == b)  # saved for the next start

        await open_by_search(pilot, "alpha")
        await wait_until(pilot, lambda: app.runtime.model.label == "model-a:latest"
                         and app.runtime.model.state == "ready")
        assert "model-a:latest ●" in header(app)

        await open_by_search(pilot, "remote")  # configured endpoint: no network needed to pick it
        await wait_until(pilot, lambda: app.runtime.model.label == "gpu/big-model")
        assert "gpu/big-model" in header(app)  # the id the API lists
        assert app.runtime.model.info["engine"] == "remote"


async def test_a_model_that_is_gone_keeps_the_current_one_and_says_so(tmp_path: Path) -> None:
    a, _ = scripted_models(tmp_path)
    gone = seed(model_refs.make(str(tmp_path / "deleted.gguf"), "llamacpp"), "gone")
    seed("remote:nowhere/some-model", "unplugged")
    app = LlmdeckApp(Runtime(Settings(model=a, engine="scripted")))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_by_search(pilot, "gone")
        await wait_until(pilot, lambda: "no longer available" in notices(app))
        assert "deleted:latest" in notices(app) and "keeping model-a:latest" in notices(app)
        assert app.runtime.model.label == "model-a:latest" and app.runtime.model.state == "ready"
        assert app.runtime.settings.model == a
        assert [v.content for v in views(app)] == ["message 0 gone", "message 1"]
        with Store.open(paths.db_path()) as store:  # nothing lost or rewritten
            assert store.get_conversation(gone).model == model_refs.make(
                str(tmp_path / "deleted.gguf"), "llamacpp")

        await open_by_search(pilot, "unplugged")
        await wait_until(pilot, lambda: "nowhere/some-model" in notices(app))
        assert app.runtime.model.label == "model-a:latest"

        await pilot.press("ctrl+l")
        await send(pilot, "still here")  # the conversation goes on with the current model
        assert views(app)[-1].content.startswith("Hello from the scripted engine")


async def test_a_new_conversation_remembers_the_active_model(tmp_path: Path) -> None:
    a, _ = scripted_models(tmp_path)
    app = LlmdeckApp(Runtime(Settings(model=a, engine="scripted")))
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await send(pilot, "Hello")
        with Store.open(paths.db_path()) as store:
            saved = store.get_conversation(app.main.conversation_id)
        assert saved.model == f"scripted:{a}"
        assert model_refs.parse(saved.model) == model_refs.ModelRef(a, "scripted")


# -- a search hit in an old part of a long conversation --------------------------------------
LONG = 3 * PAGE  # three pages


def seed_long() -> tuple[str, list[str]]:
    with Store.open(paths.db_path()) as store:
        cid = store.create_conversation(title="Long chat", model="scripted-test")
        ids = [store.add_message(cid, "user" if i % 2 == 0 else "assistant",
                                 f"message {i}" + (" zebra" if i == 10 else ""))
               for i in range(LONG)]
    return cid, ids


def in_view(app, view: MessageView) -> bool:
    chat = app.main.chat
    top = chat.scroll_y
    return top <= view.virtual_region.y and view.virtual_region.bottom <= top + chat.size.height


async def test_search_hit_opens_the_page_with_the_hit_and_pages_both_ways() -> None:
    from tests.fixtures.tui import scripted_app

    _, ids = seed_long()
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_by_search(pilot, "zebra")
        await pilot.pause(0.2)
        hit = next(v for v in views(app) if v.message_id == ids[10])
        assert app.focused is hit  # selected: the message cursor is on it
        assert in_view(app, hit)
        shown = [v.message_id for v in views(app)]
        assert shown == ids[:len(shown)] and len(shown) <= PAGE  # its page, not the newest
        assert app.main.chat.has_newer

        app.main.chat.scroll_end(animate=False, immediate=True)  # newer pages load below
        for _ in range(LONG // PAGE + 1):
            if not app.main.chat.has_newer:
                break
            count = len(views(app))
            await wait_until(pilot, lambda: len(views(app)) > count)  # noqa: B023
            await pilot.pause(0.1)
            app.main.chat.scroll_end(animate=False, immediate=True)
        assert [v.message_id for v in views(app)] == ids  # every message once, in order
        assert not app.main.chat.has_newer


async def test_sending_from_an_older_page_goes_to_the_newest() -> None:
    from tests.fixtures.tui import scripted_app

    _, ids = seed_long()
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        await open_by_search(pilot, "zebra")
        await pilot.press("ctrl+l")
        await send(pilot, "Next question")
        shown = [v.message_id for v in views(app)]
        assert shown[:-2] == ids[-len(shown) + 2:]  # the newest page, then the new turn
        assert [v.content for v in views(app)[-2:]][0] == "Next question"
        assert not app.main.chat.has_newer


async def test_the_page_around_a_hit_and_a_deleted_hit() -> None:
    from tests.fixtures.tui import scripted_app

    cid, ids = seed_long()
    app = scripted_app()
    async with app.run_test(size=SIZE) as pilot:
        await wait_ready(pilot)
        messages, older, newer = await app.runtime.messages_around(cid, "no-such-message", PAGE)
        assert (messages, older, newer) == ([], False, False)
        messages, older, newer = await app.runtime.messages_around(cid, ids[10], PAGE)
        assert [m.id for m in messages] == ids[:PAGE] and not older and newer
        messages, older, newer = await app.runtime.messages_around(cid, ids[100], PAGE)
        assert [m.id for m in messages] == ids[100 - PAGE // 2 + 1:100 + PAGE // 2 + 1]
        assert older and newer


async def test_a_turn_ending_as_the_app_closes_lists_nothing_and_raises_nothing() -> None:
    """The turn's tail lists the conversations; a person who quits as a reply ends has
    taken the sidebar away first (seen in the cluster test: NoMatches from the tail)."""
    from tests.fixtures.tui import scripted_app
    from tui.widgets.sidebar import Sidebar

    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        await send(pilot, "hello there")
        listed = app.main.history_listed
        await app.main.query_one(Sidebar).remove()  # as the app's teardown does
        await app.main.refresh_sidebar()  # raised NoMatches before
        assert listed and app.main.history_listed
