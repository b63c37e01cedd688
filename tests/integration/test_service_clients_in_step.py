"""The app as the service's client, against a real service process (issue 42 items 2-4):
the service's notices reach the app (a damaged database moved aside, with the path);
conversations made, renamed and deleted in one client appear in another's sidebar,
pushed; `service stop` is said with a key to start again and nothing restarts behind
the person's back; `service restart` reconnects the app; a client never stays refusing."""

from __future__ import annotations

import asyncio
from pathlib import Path

import pytest

from core.config import Settings
from core.service import ServiceUnavailable
from core.service import control as service_control
from tests.fixtures.tui import wait_until
from tests.helpers import service_proc as svc
from tui.app import LlmdeckApp
from tui.service_runtime import ServiceRuntime
from tui.widgets.sidebar import Sidebar, last_used


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


def _said(app: LlmdeckApp) -> str:
    return "\n".join(str(n.message) for n in app._notifications)


def _rows(app: LlmdeckApp) -> list[str]:
    options = app.main.query_one(Sidebar).options
    return [str(options.get_option_at_index(i).prompt) for i in range(options.option_count)]


async def _reply(client: ServiceRuntime, cid: str | None, text: str) -> str:
    turn = await client.start_turn(cid, text)
    async for _ in turn.events():
        pass
    return turn.conversation_id


async def test_a_damaged_database_is_told_with_its_path_in_the_client_app(
        llmdeck_home: Path) -> None:
    from core import paths

    db = paths.db_path()
    db.write_bytes(b"this is no database " * 4096)
    svc.start(*svc.scripted_args(), "--no-preload")
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: "damaged-" in _said(app), 30)
        said = _said(app)
        moved = [p for p in db.parent.iterdir() if p.name.startswith("llmdeck.db.damaged-")]
        assert len(moved) == 1 and str(moved[0]) in said, said
        await app.action_quit()


async def test_another_clients_conversations_reach_the_sidebar_pushed(
        llmdeck_home: Path) -> None:
    svc.start(*svc.scripted_args(reply="Noted."))
    other = ServiceRuntime()
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and app.runtime.connected, 30)
        await other.start()
        try:
            # Polling is off the table: the app's poll of the mirror is not the sidebar's.
            cid = await _reply(other, None, "Llamas in winter")
            await wait_until(pilot, lambda: _rows(app) == ["Llamas in winter"], 1.5)
            await other.rename_conversation(cid, "Alpacas")
            await wait_until(pilot, lambda: _rows(app) == ["Alpacas"], 1.5)
            again = await _reply(other, None, "Alpacas")  # the same title: dates tell apart
            await wait_until(pilot, lambda: len(_rows(app)) == 2, 1.5)
            assert all(row.startswith("Alpacas · ") for row in _rows(app)), _rows(app)
            await other.delete_conversation(again)
            await wait_until(pilot, lambda: _rows(app) == ["Alpacas"], 1.5)
            await other.delete_conversation(cid)
            await wait_until(pilot, lambda: _rows(app) == ["No conversations yet"], 1.5)
        finally:
            await other.close()
        await app.action_quit()


def test_last_used_is_short() -> None:
    import time

    now = time.mktime((2026, 11, 28, 15, 0, 0, 0, 0, -1))
    assert last_used(now - 3600, now) == "14:00"
    assert last_used(now - 3 * 86400, now) == "25 Nov 15:00"
    assert last_used(now - 400 * 86400, now) == "24 Oct 2025"


@pytest.mark.slow
async def test_stop_is_said_with_a_key_and_restart_reconnects_many_times(
        llmdeck_home: Path) -> None:
    Settings(model="scripted", engine="scripted").save()  # what F10's service loads
    svc.start(*svc.scripted_args(reply="Noted."), "--no-preload")
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    runtime = app.runtime
    assert isinstance(runtime, ServiceRuntime)
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and runtime.connected, 30)
        for round_ in range(5):
            pid = runtime._remote.client.pid
            assert await asyncio.to_thread(service_control.main, ["stop"]) == 0
            await wait_until(pilot, lambda: "was stopped" in _said(app), 10)
            assert "F10" in _said(app)
            assert not svc.alive(pid)
            with pytest.raises(ServiceUnavailable, match="was stopped. Press F10"):
                await runtime.list_conversations()  # at once, with the key: no 90 s wait
            with pytest.raises(ServiceUnavailable, match="was stopped. Press F10"):
                await runtime.start_turn(None, "lost?")
            assert await asyncio.to_thread(service_control.service_status) is None, \
                "nothing started a service behind the person's back"
            app.clear_notifications()
            await pilot.press("f10")
            await wait_until(pilot, lambda: runtime.connected, 60)
            assert runtime._remote.client.pid != pid
            cid = await _reply(runtime, None, f"round {round_}")  # messages are taken
            assert (await runtime.list_conversations())[0].title == f"round {round_}"
            # `service restart`: the app waits for the next service and attaches to it.
            pid = runtime._remote.client.pid
            assert await asyncio.to_thread(
                service_control.main, ["restart", *svc.scripted_args(), "--no-preload"]) == 0
            await wait_until(pilot, lambda pid=pid: runtime.connected
                             and runtime._remote.client.pid != pid, 60)
            assert runtime.stopped is None
            await _reply(runtime, cid, "still there?")
        await app.action_quit()


async def test_the_header_follows_a_stop_and_f10_takes_the_stopped_notice_down(
        llmdeck_home: Path) -> None:
    """After `service stop` the header no longer shows the model as ready (it said ●
    while nothing could answer), and after F10 the ten-minute "stopped, press F10"
    notice is gone (it stayed, asking for F10 on a connected app)."""
    from tui.widgets.status_bar import StatusBar

    Settings(model="scripted", engine="scripted").save()  # what F10's service loads
    svc.start(*svc.scripted_args(reply="Noted."), "--no-preload")
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    runtime = app.runtime
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and runtime.connected, 30)
        await _reply(runtime, None, "load it")
        bar = app.main.query_one(StatusBar)
        await wait_until(pilot, lambda: bar.model_state == "ready", 10)
        assert await asyncio.to_thread(service_control.main, ["stop"]) == 0
        await wait_until(pilot, lambda: "was stopped" in _said(app), 10)
        await wait_until(pilot, lambda: bar.model_state == "stopped", 5)
        assert "●" not in str(bar.render()) and "service stopped" in str(bar.render())
        await pilot.press("f10")
        await wait_until(pilot, lambda: runtime.connected, 60)
        await wait_until(pilot, lambda: bar.model_state != "stopped", 10)
        assert "was stopped" not in _said(app) and "Connected" in _said(app)
        await app.action_quit()


async def test_a_stopped_app_joins_a_service_another_window_started(llmdeck_home: Path) -> None:
    """After `service stop`, another window's F10 (or `llmdeck service start`) brings a
    service: this app attaches to it by itself, and no longer says "stopped, press F10"
    beside a running service (its message failed with that sentence). It started none."""
    from tui.widgets.status_bar import StatusBar

    svc.start(*svc.scripted_args(reply="Noted."), "--no-preload")
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    runtime = app.runtime
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and runtime.connected, 30)
        assert await asyncio.to_thread(service_control.main, ["stop"]) == 0
        await wait_until(pilot, lambda: "was stopped" in _said(app), 10)
        await pilot.pause(1.5)  # the app looks and finds nothing: it starts none
        assert await asyncio.to_thread(service_control.service_status) is None
        pid = svc.start(*svc.scripted_args(reply="Noted."), "--no-preload")  # another window
        await wait_until(pilot, lambda: runtime.connected, 15)
        assert runtime._remote.client.pid == pid and runtime.stopped is None
        bar = app.main.query_one(StatusBar)
        await wait_until(pilot, lambda: bar.model_state != "stopped", 5)
        await wait_until(pilot, lambda: "was stopped" not in _said(app), 5)
        assert "Connected" in _said(app)
        await _reply(runtime, None, "back?")  # messages are taken
        await app.action_quit()


@pytest.mark.slow
async def test_a_start_waits_for_a_dying_service_instead_of_failing(llmdeck_home: Path) -> None:
    """A client that starts a service the moment the last one said it is stopping (the
    app after a crash, `service start` after `stop`) gets a new one, each time."""
    from core import home_lock
    from core.service import connect, start_or_connect

    # A holder of the lock that does not listen (a service storing its replies and
    # unloading its models as it goes): the new one waits for it, then serves.
    dying = home_lock.acquire("service")
    asyncio.get_running_loop().call_later(2.0, dying.release)
    first = await start_or_connect("test", timeout=30, service_args=tuple(svc.scripted_args()))
    await first.close()
    for _ in range(5):
        client = await connect("test")
        old = client.pid
        closing = asyncio.Event()
        client.listeners.append(lambda m, c=closing: m.get("event") == "closing" and c.set())
        await client.call("shutdown", timeout=10)
        await asyncio.wait_for(closing.wait(), 10)
        fresh = await start_or_connect("test", timeout=60,
                                       service_args=tuple(svc.scripted_args()))
        try:
            assert fresh.pid != old
            assert await fresh.call("list_conversations", timeout=10) == []
        finally:
            await client.close()
            await fresh.close()


async def test_an_attach_the_service_refuses_is_a_sentence_in_the_client_app(
        llmdeck_home: Path) -> None:
    """The refusal (an AttachError value) crosses the socket; the app says it and goes on."""
    svc.start(*svc.scripted_args(), "--no-preload")
    app = LlmdeckApp(ServiceRuntime(), preload=False)
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and app.runtime.connected, 30)
        from tui.widgets.attachments import AttachmentBar

        bar = app.main.query_one(AttachmentBar)
        missing = llmdeck_home / "nowhere.txt"
        app.main.composer.load_text(f"/attach {missing}")
        await pilot.press("end", "enter")
        await wait_until(pilot, lambda: "does not exist" in str(bar.notice.render()), 15)
        assert app.is_running
        await app.action_quit()


@pytest.mark.slow
async def test_a_stop_mid_reply_says_stopped_once(llmdeck_home: Path) -> None:
    """`service stop` while a reply streams: "stopped, press F10" once. The reply's worker
    then failed on the gone service with the same sentence, and the app said it again
    in a second, identical notice."""
    from tui.widgets.message_view import MessageView

    svc.start(*svc.scripted_args(reply="word " * 200, tokens_per_s=20, fixed_timing=False))
    app = LlmdeckApp(ServiceRuntime())
    runtime = app.runtime
    async with app.run_test() as pilot:
        await wait_until(pilot, lambda: app.main.history_listed and runtime.connected
                         and runtime.model_state().state == "ready", 30)
        await pilot.press(*"Talk.", "enter")
        await wait_until(pilot, lambda: app.main.busy and len(app.main.query(MessageView)) == 2
                         and app.main.query(MessageView).last().content, 20)
        assert await asyncio.to_thread(service_control.main, ["stop"]) == 0
        await wait_until(pilot, lambda: "was stopped" in _said(app), 10)
        await wait_until(pilot, lambda: not app.main.busy, 10)
        await pilot.pause(0.5)
        assert _said(app).count("was stopped") == 1, _said(app)
        await app.action_quit()
