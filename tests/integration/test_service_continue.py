"""A cut reply continued over the socket (issue 46): continue_reply is a turn call of
the service like regenerate, and the reply goes on in the same stored message."""

from __future__ import annotations

from pathlib import Path

import pytest

from core import paths
from core.config import Settings
from core.events import Done, TextDelta
from core.service import RemoteRuntime, connect
from tests.helpers import service_proc as svc

FIRST = "One two three four five six seven eight nine ten."
REST = " The end."


@pytest.fixture(autouse=True)
def _no_service_left(llmdeck_home: Path):  # noqa: ANN202
    with svc.no_service_left(llmdeck_home):
        yield


async def test_a_cut_reply_continues_over_the_socket(llmdeck_home: Path) -> None:
    settings = Settings()
    settings.sampling.max_tokens = 4
    settings.save(paths.config_path())
    svc.start(*svc.scripted_args(replies=[FIRST, REST]))
    rt = RemoteRuntime(await connect("tui"))
    await rt.start()
    try:
        assert await rt.ensure_model()
        turn = await rt.start_turn(None, "Count to ten.")
        assert [e async for e in turn.events()][-1] == Done("length")
        cid, mid = turn.conversation_id, turn.assistant_message_id
        assert (await rt.messages(cid))[-1].status == "cut"
        more = await rt.continue_reply(cid, mid)
        events = [e async for e in more.events()]
        assert "".join(e.text for e in events if isinstance(e, TextDelta)) == REST
        stored = await rt.messages(cid)
        assert [(m.id, m.content, m.status) for m in stored[1:]] == [
            (mid, FIRST[:16] + REST, "complete")]
    finally:
        await rt.close()
