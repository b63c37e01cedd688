"""Text that is no UTF-8 (a lone surrogate, as a paste can bring) in a call's arguments is
refused by the client with a sentence, as the service's door refuses it, and the
connection goes on (issue 42: over the codec the search box's fuzz test ended the app
with a UnicodeEncodeError; in process the store had taken the query)."""

from __future__ import annotations

from pathlib import Path

import pytest

from core.service.client import ServiceCallError, connect
from core.service.server import ServiceServer
from tests.integration.test_service_errors_cross import ControlMock


async def test_a_lone_surrogate_is_refused_by_the_client_and_the_connection_goes_on(
        tmp_path: Path) -> None:
    server = ServiceServer(object(), tmp_path / "s.sock", ControlMock())  # type: ignore[arg-type]
    await server.start()
    client = await connect("test", path=tmp_path / "s.sock")
    try:
        with pytest.raises(ServiceCallError) as caught:
            await client.call("search", timeout=10, query="\ud800 lone", limit=5)
        assert caught.value.code == "BAD_CALL" and "not valid Unicode" in caught.value.message
        assert await client.call("status", timeout=10) == {}
    finally:
        await client.close()
        await server.close("the test is over")
