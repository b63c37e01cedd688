"""A call the client gives up on stops in the service too (issue 42, found driving the
pilot tests over the codec): Esc on an `/attach` cancelled the client's call, while the
service read, chunked and embedded the file on for nobody, its documents worker busy.
The client now sends `cancel_call` for the call it abandoned; the service cancels that
call's task, and only the caller's own calls."""

from __future__ import annotations

import asyncio
import contextlib
from pathlib import Path
from typing import Any

from core.service.client import connect
from core.service.server import ServiceServer
from tests.integration.test_service_errors_cross import ControlMock


class HangingAttachRuntimeMock:
    """attach() waits for ever and records how it ended: a stand-in for the Runtime."""

    settings = None

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.ended: list[str] = []

    async def attach(self, conversation_id: Any, paths: list[Any], progress: Any) -> Any:
        self.started.set()
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            self.ended.append("cancelled")
            raise


async def _served(tmp_path: Path) -> tuple[HangingAttachRuntimeMock, ServiceServer]:
    runtime = HangingAttachRuntimeMock()
    server = ServiceServer(runtime, tmp_path / "s.sock", ControlMock())  # type: ignore[arg-type]
    await server.start()
    return runtime, server


async def test_a_call_the_client_cancels_is_cancelled_in_the_service(tmp_path: Path) -> None:
    runtime, server = await _served(tmp_path)
    client = await connect("test", path=tmp_path / "s.sock")
    try:
        call = asyncio.ensure_future(client.call("attach", conversation_id=None, paths=["/x"]))
        await asyncio.wait_for(runtime.started.wait(), 10)
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
        for _ in range(200):
            if runtime.ended:
                break
            await asyncio.sleep(0.01)
        assert runtime.ended == ["cancelled"], "the service read on for nobody"
        assert await client.call("status", timeout=10) == {}, "the connection goes on"
    finally:
        await client.close()
        await server.close("the test is over")


async def test_cancel_call_reaches_only_the_callers_own_calls(tmp_path: Path) -> None:
    runtime, server = await _served(tmp_path)
    first = await connect("test", path=tmp_path / "s.sock")
    other = await connect("test", path=tmp_path / "s.sock")
    try:
        call = asyncio.ensure_future(first.call("attach", conversation_id=None, paths=["/x"]))
        await asyncio.wait_for(runtime.started.wait(), 10)
        for call_id in (1, 2, 3, "1", 999_999):  # whatever id the other client guesses
            assert await other.call("cancel_call", timeout=10, call=call_id) is False
        assert runtime.ended == [] and not call.done()
        call.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await call
    finally:
        await first.close()
        await other.close()
        await server.close("the test is over")
