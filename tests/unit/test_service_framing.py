"""The service's line framing against a peer that drips: the line deadline counts from a
line's first byte, so a client sending a byte now and then cannot hold a line open for
ever; a pause between whole lines is no line at all and is never cut."""

from __future__ import annotations

import asyncio
import time

import pytest

from core.service.framing import FrameError, LineReader

DEADLINE_S = 0.3


async def _drip(reader: asyncio.StreamReader, pieces: list[bytes], every_s: float) -> None:
    for piece in pieces:
        reader.feed_data(piece)
        await asyncio.sleep(every_s)
    reader.feed_eof()


async def test_a_line_dripped_a_byte_at_a_time_is_cut_at_its_deadline() -> None:
    reader = asyncio.StreamReader()
    # 40 bytes, one each 50 ms: 2 s in all, each piece well inside the deadline
    feeding = asyncio.ensure_future(_drip(reader, [b'{"id": 1, "call": "sta'] + [b" "] * 40, 0.05))
    lines = LineReader(reader, deadline_s=DEADLINE_S)
    started = time.monotonic()
    with pytest.raises(FrameError) as caught:
        await lines.read()
    feeding.cancel()
    assert caught.value.code == "TIMEOUT", caught.value.message
    assert time.monotonic() - started < 1.0


async def test_a_pause_between_whole_lines_is_not_a_timeout() -> None:
    reader = asyncio.StreamReader()
    feeding = asyncio.ensure_future(_drip(reader, [b'{"a": 1}\n{"b"', b': 2}\n', b'{"c": 3}\n'],
                                          DEADLINE_S / 3))
    lines = LineReader(reader, deadline_s=DEADLINE_S)
    assert await lines.read() == {"a": 1}
    assert await lines.read() == {"b": 2}
    await asyncio.sleep(DEADLINE_S * 2)  # idle between lines: nobody is mid-line
    assert await lines.read() == {"c": 3}
    assert await lines.read() is None
    await feeding
