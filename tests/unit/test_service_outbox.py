"""The outbox counts bytes, not messages (issue 44 item 2): answers are encoded as they
are queued and counted exactly; text deltas still merge; past the bound, SlowClient."""

from __future__ import annotations

import asyncio

import pytest

from core.service.outbox import Outbox, SlowClient


def _answer(n: int, size: int) -> dict:
    return {"id": n, "result": "y" * size}


def test_big_answers_count_in_bytes_and_a_reader_frees_them() -> None:
    box = Outbox(max_bytes=10_000)
    box.put(_answer(1, 4_000))
    box.put(_answer(2, 4_000))
    assert 8_000 < box.pending_bytes < 8_100
    line = asyncio.run(box.get())
    assert line.startswith(b'{"id":1,') and line.endswith(b"\n")
    box.put(_answer(3, 4_000))  # room again: the first was taken
    with pytest.raises(SlowClient, match="MiB of answers waited unread"):
        box.put(_answer(4, 4_000))


def test_few_messages_of_many_megabytes_are_refused_long_before_the_count() -> None:
    box = Outbox()  # the real bounds
    with pytest.raises(SlowClient):
        for n in range(100):
            box.put(_answer(n, 3 * 2**20))
    assert len(box) < 30


def test_text_deltas_still_merge_and_are_counted() -> None:
    box = Outbox(max_bytes=10_000)
    for seq in range(50):
        box.put({"event": "turn", "turn": "t", "seq": seq,
                 "data": {"$type": "TextDelta", "text": "word "}})
    assert len(box) == 1 and box.merged == 49
    assert 250 <= box.pending_bytes < 600
    line = asyncio.run(box.get())
    assert b'"text":"' + b"word " * 50 + b'"' in line and box.pending_bytes == 0
