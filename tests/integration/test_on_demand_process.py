"""The on-demand child life both the documents reader and the vision model share
(core.workers.on_demand), pinned with a real spawned child that echoes: start on first
use, replies routed by id, a failing request answered while the child stays, idle unload
and restart (also for a request that arrives during the stop), cancel by kill, crash and
start timeout as error values."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from core.workers.on_demand import READY, OnDemandProcess, serve
from tests.helpers.procs import wait_gone

pytestmark = pytest.mark.slow


def echo_main(conn, parent_pid: int) -> None:
    """The child: upper-cases text; 'boom' raises, 'hang' sleeps, 'exit' dies with 3."""
    from core.workers.bootstrap import start_child

    start_child(log_name=None)

    def handle(request_id: int, text: str) -> None:
        if text == "boom":
            raise ValueError("no boom here")
        if text == "hang":
            time.sleep(60)
        if text == "exit":
            os._exit(3)
        conn.send((request_id, True, text.upper()))

    serve(conn, parent_pid, handle, lambda request_id, error: (request_id, False, error))


class EchoFailed(Exception):
    pass


class Echo(OnDemandProcess):
    process_name = "llmdeck-echo"

    def _child(self):
        return echo_main, ()

    def _dispatch(self, msg: tuple) -> None:
        if msg[0] == READY:
            self._started(msg[1])
        elif msg[1]:
            self._resolve(msg[0], msg[2])
        else:
            self._reject(msg[0], EchoFailed(f"failed: {msg[2]}"))

    def _start_timeout_error(self):
        return EchoFailed("did not start")

    def _crashed_error(self, exitcode):
        return EchoFailed(f"crashed ({exitcode})")

    def _closing_error(self):
        return EchoFailed("closing")

    def _not_running_error(self):
        return EchoFailed("not running")

    def _send_failed_error(self):
        return EchoFailed("send failed")

    def _cancelled_for_other_error(self):
        return EchoFailed("stopped for another")

    async def say(self, text: str) -> str:
        return await self._request(text)


async def test_first_use_replies_failures_idle_unload_and_restart() -> None:
    echo = Echo(idle_s=60.0, start_timeout_s=60.0)
    assert echo.pid is None and echo.starts == 0
    try:
        assert await asyncio.gather(echo.say("a"), echo.say("b")) == ["A", "B"]
        pid = echo.pid
        assert pid is not None and echo.starts == 1
        with pytest.raises(EchoFailed, match="failed: ValueError: no boom here"):
            await echo.say("boom")
        assert echo.pid == pid  # a failing request leaves the child up
        echo.idle_s = 0.2
        assert await echo.say("c") == "C"  # re-arms the idle timer with the short delay
        deadline = time.monotonic() + 10
        while echo.running and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        assert not echo.running and wait_gone([pid], 5) == []
        assert await echo.say("d") == "D" and echo.starts == 2 and echo.pid != pid
    finally:
        await echo.unload()
        echo.kill_now()


async def test_cancel_kills_crash_and_start_timeout_are_errors() -> None:
    echo = Echo(idle_s=0, start_timeout_s=60.0)
    try:
        await echo.say("warm")
        pid = echo.pid
        hung = asyncio.ensure_future(echo.say("hang"))
        other = asyncio.ensure_future(echo.say("x"))  # queued behind the hang in the child
        while len(echo._pending) < 2:
            await asyncio.sleep(0.01)
        hung.cancel()
        with pytest.raises(asyncio.CancelledError):
            await hung
        with pytest.raises(EchoFailed, match="stopped for another"):
            await other
        assert echo.pid is None and wait_gone([pid], 5) == []
        with pytest.raises(EchoFailed, match=r"crashed \(3\)"):
            await echo.say("exit")
        assert await echo.say("back") == "BACK" and echo.starts == 3
        stop = asyncio.ensure_future(echo.unload())
        await asyncio.sleep(0)  # the stop is under way: SHUTDOWN sent, the child exiting
        # Sent to the exiting child, it would never be answered: it waits and starts anew.
        assert await asyncio.wait_for(echo.say("meanwhile"), 20) == "MEANWHILE"
        assert echo.starts == 4
        await stop
        assert echo.running  # the stop ended the old child, not the new one
        await echo.unload()
        echo.start_timeout_s = 0.001  # no spawned child says READY that fast
        with pytest.raises(EchoFailed, match="did not start"):
            await echo.say("late")
        assert echo.pid is None
    finally:
        echo.kill_now()
