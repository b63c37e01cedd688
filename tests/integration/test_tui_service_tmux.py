"""`llmdeck` as the engine service's client, in tmux as a person uses it (issue 30):
a reply goes on when its terminal goes away and the next `llmdeck` shows it streaming to
its end, stored once and whole; two terminals on one home chat at once; the app and
`llmdeck serve` share one worker. The service is a real process (the scripted engine in a
real worker, paced so a reply takes seconds), and no process of it outlives a test."""

from __future__ import annotations

import os
import re
import signal
import sqlite3
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from tests.helpers import service_proc as svc
from tests.helpers.tmux import TmuxSession, llmdeck_command

WORDS = 120
LONG = " ".join(f"w{i:03d}" for i in range(1, WORDS + 1))  # in order, each once
LAST = f"w{WORDS:03d}"


PACE = 24  # tokens a second: a reply takes 5 s, and 110 tokens (4.6 s) are left after w010
SLOW_PACE = 12  # a reply left running must outlast an app's start: 10 s


@pytest.fixture
def service(llmdeck_home: Path, request: pytest.FixtureRequest) -> Iterator[int]:
    """This home's service (scripted, LONG at PACE, or the pace a `pace` mark says), killed
    with its workers after."""
    mark = request.node.get_closest_marker("pace")
    pace = mark.args[0] if mark else PACE
    seen: list[int] = []
    with svc.no_service_left(llmdeck_home):
        pid = svc.start(*svc.scripted_args(reply=LONG, tokens_per_s=pace))
        seen += [pid, *svc.descendants(pid)]
        yield pid
        now = _service_pid(llmdeck_home)  # one the app started after a crash, say
        if now:
            seen += [now, *svc.descendants(now)]
    for p in seen:
        svc.wait_for(lambda p=p: not svc.alive(p), 15, f"process {p} of the service to end")


def _service_pid(home: Path) -> int:
    try:
        return int((home / "data" / "service.lock").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _tui(home: Path) -> TmuxSession:
    tmux = TmuxSession(llmdeck_command(), env={"LLMDECK_HOME": str(home), "HF_HUB_OFFLINE": "1",
                                               "LLMDECK_IN_PROCESS": "0"}, width=110, height=30)
    tmux.wait_for(lambda s: "scripted ●" in s, 60, "the app attached to the service's model")
    return tmux


def _app_pid(tmux: TmuxSession) -> int:
    """The `llmdeck` process in the pane (below the shell tmux started)."""
    for child in psutil.Process(tmux.pane_pid()).children(recursive=True):
        if "llmdeck" in " ".join(child.cmdline()):
            return child.pid
    raise AssertionError("no llmdeck process in the pane")


def _chat_pane(screen: str) -> str:
    """The chat, right of the sidebar's edge (the sidebar lists every conversation)."""
    return "\n".join(line.split("▕", 1)[1] for line in screen.splitlines() if "▕" in line)


def _messages(home: Path) -> list[tuple[str, str, str, str]]:
    from core import paths

    with sqlite3.connect(paths.db_path()) as db:
        return db.execute("SELECT conversation_id, role, content, status FROM messages "
                          "ORDER BY seq").fetchall()


def test_a_reply_outlives_its_terminal_and_the_next_llmdeck_shows_it_to_its_end(
        llmdeck_home: Path, service: int) -> None:
    first = _tui(llmdeck_home)
    try:
        first.send_line("Count for me")  # text and Enter in one burst
        first.wait_for(lambda s: "w010" in s, 30, "the reply to stream")
        app = _app_pid(first)
        subprocess.run(["tmux", "-L", first.socket, "kill-session", "-t", first.name],
                       check=True)  # the terminal goes away: SIGHUP
        svc.wait_for(lambda: not svc.alive(app), 10, "the app to end with its terminal")
    finally:
        first.close()
    assert svc.alive(service), "the service outlives the terminal"
    assert not any(r[1] == "assistant" and r[3] == "complete" and LAST in r[2]
                   for r in _messages(llmdeck_home)), "cut mid-reply: not finished yet"

    second = _tui(llmdeck_home)  # opens on the reply still streaming, and shows its end
    try:
        screen = second.wait_for(lambda s: LAST in s and "tok/s" in s, 60,
                                 "the reply to stream on to its end here")
        assert "Count for me" in screen
    finally:
        second.close()
    rows = _messages(llmdeck_home)
    assert [(r[1], r[3]) for r in rows] == [("user", "complete"), ("assistant", "complete")]
    assert rows[1][2] == LONG, "stored whole, in order, once"


def test_two_terminals_on_one_home_chat_in_two_conversations_at_once(
        llmdeck_home: Path, service: int) -> None:
    one, two = _tui(llmdeck_home), _tui(llmdeck_home)
    try:
        one.send_line("First terminal asks")
        two.send_line("Second terminal asks")
        one.wait_for(lambda s: "w005" in s, 30, "the first reply to stream")
        two.wait_for(lambda s: "w005" in s, 30, "the second reply to stream")
        assert LAST not in one.screen(), "both stream at once"
        for tmux in (one, two):
            tmux.wait_for(lambda s: LAST in s and "tok/s" in s, 60, "each reply's end")
        assert "Second terminal asks" not in _chat_pane(one.screen()), "its own chat only"
    finally:
        one.close()
        two.close()
    rows = _messages(llmdeck_home)
    assert sorted(r[2] for r in rows if r[1] == "user") == ["First terminal asks",
                                                            "Second terminal asks"]
    replies = [r for r in rows if r[1] == "assistant"]
    assert len(replies) == 2 and all(r[2] == LONG and r[3] == "complete" for r in replies)
    assert len({r[0] for r in rows}) == 2, "two conversations"


def test_a_second_terminal_on_the_same_conversation_shows_the_reply_live_and_stops_it(
        llmdeck_home: Path, service: int) -> None:
    one = _tui(llmdeck_home)
    one.send_line("Shared question")
    one.wait_for(lambda s: LAST in s and "tok/s" in s, 60, "the first reply")
    two = _tui(llmdeck_home)
    try:
        # It opens on the newest reply's conversation (just finished): the same one.
        two.wait_for(lambda s: "Shared question" in _chat_pane(s) and LAST in s, 30,
                     "the conversation open in the second terminal")
        one.send_line("Again please")  # a reply the second terminal did not start
        # "Again please" on this screen first: without it the rsplit is the whole screen
        # and the first reply's w030 matched, so Esc came before this terminal knew of
        # the new reply (the cause of the Esc that "did not stop it").
        two.wait_for(lambda s: "Again please" in _chat_pane(s)
                     and "w030" in _chat_pane(s).rsplit("Again please", 1)[-1], 30,
                     "the reply started elsewhere, live here")
        two.send("Escape")  # stops it for everyone
        two.wait_for(lambda s: "Assistant (stopped)" in s, 20, "the reply stopped here")
        one.wait_for(lambda s: "tok/s" in s.rsplit("Again please", 1)[-1], 20,
                     "the first terminal to see it stopped")
    finally:
        one.close()
        two.close()
    rows = _messages(llmdeck_home)
    assert [r[2] for r in rows if r[1] == "assistant"][0] == LONG, "the first reply, once"
    assert rows[-1][1] == "assistant" and rows[-1][3] == "stopped"
    assert LONG.startswith(rows[-1][2].rstrip()) and LAST not in rows[-1][2]


def test_a_crashed_service_is_said_a_new_one_started_and_the_cut_reply_stored_stopped(
        llmdeck_home: Path, service: int) -> None:
    tui = _tui(llmdeck_home)
    try:
        tui.send_line("Count before the crash")
        tui.wait_for(lambda s: "w010" in s, 30, "the reply to stream")
        kids = svc.descendants(service)
        os.kill(service, signal.SIGKILL)
        tui.wait_for(lambda s: "llmdeck service stopped" in s, 15, "the sentence")
        svc.wait_for(lambda: _service_pid(llmdeck_home) not in (0, service), 60,
                     "a new service, started by the app")
        tui.wait_for(lambda s: "Assistant (stopped)" in s, 60,
                     "the cut reply shown stopped, as stored")
        for kid in kids:
            svc.wait_for(lambda kid=kid: not svc.alive(kid), 15, "the dead service's worker gone")
    finally:
        tui.close()
    rows = _messages(llmdeck_home)
    assert [(r[1], r[3]) for r in rows] == [("user", "complete"), ("assistant", "stopped")]
    assert rows[1][2] and LONG.startswith(rows[1][2].rstrip()), "what arrived, kept"
    assert LAST not in rows[1][2]


@pytest.mark.pace(SLOW_PACE)
def test_leaving_a_followed_reply_for_another_chat_lets_it_finish_in_the_service(
        llmdeck_home: Path, service: int) -> None:
    import asyncio

    from core.service import RemoteRuntime, connect

    async def setup() -> None:  # an older chat, and a reply whose terminal went away
        rt = RemoteRuntime(await connect("gone"))
        await rt.start()
        older = await rt.start_turn(None, "Elsewhere entirely")
        await rt.cancel_turn(older.turn_id)
        async for _ in older.events():
            pass
        await rt.start_turn(None, "Left running")
        await rt.close()

    asyncio.run(setup())
    tui = _tui(llmdeck_home)
    try:
        tui.wait_for(lambda s: "Left running" in _chat_pane(s) and "w005" in s, 30,
                     "the reply left running, followed at start")
        tui.send("C-f")
        tui.type("Elsewhere")
        tui.wait_for(lambda s: "Elsewhere entirely" in s, 15, "the search hit")
        tui.send("Tab")
        tui.send("Enter")
        screen = tui.wait_for(lambda s: "Elsewhere entirely" in _chat_pane(s), 15,
                              "the other chat open")
        assert "Left running" not in _chat_pane(screen) and "still streaming" not in screen
    finally:
        tui.close()
    svc.wait_for(lambda: any(r[2] == LONG and r[3] == "complete" for r in _messages(llmdeck_home)),
                 60, "the left reply to finish in the service, stored whole")


def test_the_app_and_serve_share_one_worker(llmdeck_home: Path, service: int) -> None:
    tui = _tui(llmdeck_home)
    env = {**os.environ, "PYTHONPATH": str(svc.ROOT)}
    serve = subprocess.Popen([sys.executable, "-m", "tui.cli", "serve", "--port", "0"],
                             cwd=svc.ROOT, env=env, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, text=True)
    try:
        assert serve.stdout is not None
        line = serve.stdout.readline()
        assert re.search(rf"in the llmdeck service, pid {service}\)", line), line
        tui.send_line("hello")
        tui.wait_for(lambda s: LAST in s and "tok/s" in s, 60, "the app's reply")
        table = svc.llmdeck("workers").stdout
        assert sum(1 for row in table.splitlines() if " scripted " in row) == 1, table
        assert psutil.Process(serve.pid).children(recursive=True) == []
        # F4 says which engine this app talks to: the service, its clients, what it serves.
        tui.send("F4")
        tui.wait_for(lambda s: f"Engine service pid {service}" in s and " · serving " in s,
                     30, "F4's service line")  # (its address may wrap onto the next line)
    finally:
        serve.send_signal(signal.SIGTERM)
        try:
            serve.wait(30)
        finally:
            if serve.poll() is None:
                serve.kill()
            tui.close()


def test_a_new_users_llmdeck_starts_the_service_detached_and_nothing_outlives_its_idle_time(
        llmdeck_home: Path) -> None:
    """`llmdeck` with nothing set (the README's install-and-start command) starts the
    service in a session of its own and chats through it; after quitting, the service
    and its workers exit once its idle time passes with no client."""
    (llmdeck_home / "config").mkdir(exist_ok=True)
    (llmdeck_home / "config" / "config.toml").write_text(
        'model = "scripted"\nengine = "scripted"\nservice_idle_minutes = 0.05\n')  # 3 s
    with svc.no_service_left(llmdeck_home):
        tmux = TmuxSession(llmdeck_command(), env={"LLMDECK_HOME": str(llmdeck_home),
                                                   "HF_HUB_OFFLINE": "1",
                                                   "LLMDECK_IN_PROCESS": ""},
                           width=110, height=30)
        try:
            tmux.wait_for(lambda s: "scripted:latest ●" in s, 60, "the app attached to its service")
            pid = svc.wait_for(lambda: _service_pid(llmdeck_home), 10, "the service's pid")
            app = _app_pid(tmux)
            assert os.getsid(pid) != os.getsid(app), "the service has a session of its own"
            tmux.send_line("Hello there")
            tmux.wait_for(lambda s: "tok/s" in _chat_pane(s), 30, "the reply's stats line")
            processes = [pid, *svc.descendants(pid)]
            tmux.send("C-q")
            svc.wait_for(lambda: not psutil.pid_exists(app) or
                         psutil.Process(app).status() == psutil.STATUS_ZOMBIE, 15,
                         "the app to quit")
        finally:
            tmux.close()
        for p in processes:  # idle: 3 s with no client, then the models unload and it ends
            svc.wait_for(lambda p=p: not svc.alive(p), 30, f"process {p} of the service to end")
    assert [m[1] for m in _messages(llmdeck_home)] == ["user", "assistant"]
