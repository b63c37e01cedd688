"""One path (issue 42): an app whose Runtime is in its own process is the service's client
too, its service in the same process behind a socket pair (core.service.loopback), so
every call, answer, push and error crosses the real framing and codec, as for the app
people run (tests/fixtures/tui.py scripted_app)."""

from __future__ import annotations

from pathlib import Path

from core.service.client import ServiceClient
from tests.fixtures.tui import scripted_app, send, wait_ready, wait_until
from tui.service_runtime import ServiceRuntime
from tui.widgets.sidebar import Sidebar


def _said(app) -> str:  # noqa: ANN001
    return "\n".join(str(n.message) for n in app._notifications)


def test_the_in_process_app_is_a_client_of_a_service_in_its_process(llmdeck_home: Path) -> None:
    """`llmdeck --in-process` (LLMDECK_IN_PROCESS=1)."""
    from core.runtime import Runtime
    from tui.cli import build_app

    app = build_app(in_process=True)
    assert isinstance(app.runtime, ServiceRuntime)
    assert isinstance(app.runtime.local, Runtime)


def test_an_app_handed_a_bare_runtime_is_its_client_all_the_same() -> None:
    """No app runs without the codec: a Runtime handed to LlmdeckApp (the pilot and
    snapshot tests) is served over the loopback, as with `--in-process`."""
    from core.runtime import Runtime
    from tui.app import LlmdeckApp

    runtime = Runtime()
    app = LlmdeckApp(runtime, preload=False)
    assert isinstance(app.runtime, ServiceRuntime) and app.runtime.local is runtime
    assert isinstance(scripted_app().runtime, ServiceRuntime)


async def test_a_reply_the_sidebar_and_a_refusal_over_the_loopback(llmdeck_home: Path) -> None:
    app = scripted_app()
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        runtime = app.runtime
        assert isinstance(runtime, ServiceRuntime) and runtime.connected
        assert isinstance(runtime._remote.client, ServiceClient)
        await send(pilot, "What is the capital of France?")
        await wait_until(pilot, lambda: "France" in str(app.main.query_one(Sidebar).options
                                                          .get_option_at_index(0).prompt))
        from tui.widgets.attachments import AttachmentBar

        bar = app.main.query_one(AttachmentBar)
        app.main.composer.load_text(f"/attach {llmdeck_home / 'nowhere.txt'}")
        await pilot.press("end", "enter")
        await wait_until(pilot, lambda: "does not exist" in str(bar.notice.render()), 15)
        await app.action_quit()


async def test_a_damaged_database_is_told_with_its_path_in_process(llmdeck_home: Path) -> None:
    from core import paths

    db = paths.db_path()
    db.write_bytes(b"this is no database " * 4096)
    app = scripted_app()
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: "damaged-" in _said(app), 30)
        moved = [p for p in db.parent.iterdir() if p.name.startswith("llmdeck.db.damaged-")]
        assert len(moved) == 1 and str(moved[0]) in _said(app)
        await app.action_quit()


async def test_a_reply_stopped_by_esc_is_regenerated_as_a_new_branch(llmdeck_home: Path) -> None:
    """The client read up to Done and never saw turn_end, so the stopped reply had no id
    and r answered "This message is not saved yet." (found by the tmux suite once the
    in-process app became a client)."""
    from tui.widgets.message_view import MessageView

    app = scripted_app(reply=" ".join(f"w{i}" for i in range(300)), tokens_per_s=20)
    async with app.run_test(size=(110, 32)) as pilot:
        await wait_ready(pilot)
        await pilot.press(*"hello", "enter")
        await wait_until(pilot, lambda: app.main.turn is not None)
        await wait_until(pilot, lambda: "w3" in str(list(app.main.query(MessageView))[-1].content))
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.turn is None)
        stopped = list(app.main.query(MessageView))[-1].message_id
        assert stopped, "the stopped reply knows its stored id"
        await pilot.press("ctrl+up")
        await pilot.press("r")
        await wait_until(pilot, lambda: app.main.turn is not None)
        await pilot.press("escape")
        await wait_until(pilot, lambda: app.main.turn is None
                         and list(app.main.query(MessageView))[-1].message_id not in (None, stopped))
        assert "not saved yet" not in _said(app)
        await app.action_quit()
