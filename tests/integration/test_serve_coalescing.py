"""A stream whose consumer fell behind catches up in fewer, bigger chunks, losing nothing.

Real worker process (scripted engine, paced), real server, the official openai client.
The server's loop is held for a moment, as a busy box would hold it, while the worker
keeps producing: the backlog must come out merged by kind, in order, with the exact text
and the exact token count; a client that keeps up still gets the reply token by token.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import pytest
from openai import OpenAI

from core.engines.base import GenerationRequest, SamplingParams
from core.events import Done, ReasoningDelta, TextDelta, Usage
from tests.fixtures.serve import ServerThread, scripted_spec

REASONING = "".join(f"r{i:02d} " for i in range(10))  # 10 pieces of 4 characters
CONTENT = "".join(f"c{i:02d} " for i in range(30))  # 30 pieces
HI = [{"role": "user", "content": "count"}]


def _reply() -> str:
    # Padded to 4-character pieces: "<thi" "nk> ", 10 reasoning, "</th" "ink>", 30 content.
    return "<think> " + REASONING + "</think>" + CONTENT


PIECES = len(_reply()) // 4  # the engine's tokens: 44


@pytest.fixture
def paced(llmdeck_home: object) -> Iterator[ServerThread]:
    srv = ServerThread(scripted_spec(reply=_reply(), tokens_per_s=100, chunk_chars=4))
    yield srv
    srv.close()


def _read(client: OpenAI, hold: ServerThread | None = None) -> tuple[list[tuple[str, str]], int]:
    """(kind, text) of every non-empty delta in order, and usage.completion_tokens.
    With `hold`, the server's loop is blocked for 0.4 s once the first piece arrived."""
    stream = client.chat.completions.create(model="scripted", messages=HI, stream=True,
                                            stream_options={"include_usage": True})
    deltas: list[tuple[str, str]] = []
    tokens = -1
    for chunk in stream:
        if chunk.usage:
            tokens = chunk.usage.completion_tokens
        if not chunk.choices:
            continue
        delta = chunk.choices[0].delta
        reasoning = (delta.model_extra or {}).get("reasoning_content") or ""
        assert not (reasoning and delta.content), "a chunk never mixes reasoning and content"
        if reasoning:
            deltas.append(("reasoning", reasoning))
        elif delta.content:
            deltas.append(("content", delta.content))
        if hold is not None and deltas:
            hold.loop.call_soon_threadsafe(time.sleep, 0.4)  # the worker keeps stepping
            hold = None
    return deltas, tokens


def _joined(deltas: list[tuple[str, str]], kind: str) -> str:
    return "".join(text for k, text in deltas if k == kind)


def test_a_backlog_is_merged_into_fewer_chunks_with_the_same_text_and_count(paced: ServerThread) -> None:
    client = OpenAI(base_url=paced.url, api_key="x", max_retries=0)
    deltas, tokens = _read(client, hold=paced)
    assert _joined(deltas, "reasoning").strip() == REASONING.strip()
    assert _joined(deltas, "content") == CONTENT
    kinds = [k for k, _ in deltas]
    assert kinds == sorted(kinds, key=lambda k: k == "content"), "reasoning, then content: no reordering"
    assert tokens == PIECES, "usage counts tokens, not chunks"
    assert len(deltas) < 40, "the held-back pieces must arrive merged"
    assert max(len(text) for _, text in deltas) > 4


def test_a_client_that_keeps_up_gets_the_reply_piece_by_piece(paced: ServerThread) -> None:
    client = OpenAI(base_url=paced.url, api_key="x", max_retries=0)
    deltas, tokens = _read(client)
    assert _joined(deltas, "content") == CONTENT
    assert _joined(deltas, "reasoning").strip() == REASONING.strip()
    assert sum(k == "content" for k, _ in deltas) > 1
    assert tokens == PIECES


def test_the_pool_hands_a_backlog_over_in_one_batch_in_order(paced: ServerThread) -> None:
    async def run() -> list[list[object]]:
        request = GenerationRequest("batches-1", tuple(HI), SamplingParams(max_tokens=100))
        batches = []
        async for batch in paced.runtime.backend.generate_batches(request):  # type: ignore[attr-defined]
            batches.append(batch)
            if len(batches) == 1:
                await asyncio.sleep(0.3)  # fall behind: the worker keeps producing
        return batches

    batches = paced.call(run())
    events = [e for b in batches for e in b]
    assert any(len(b) > 2 for b in batches), "what queued while the consumer slept comes at once"
    assert all(b for b in batches) and isinstance(events[-1], Done)
    assert [e for e in events if isinstance(e, Done)] == [events[-1]]
    assert isinstance(events[-2], Usage)
    text = "".join(e.text for e in events if isinstance(e, TextDelta))
    reasoning = "".join(e.text for e in events if isinstance(e, ReasoningDelta))
    assert (reasoning.strip(), text) == (REASONING.strip(), CONTENT)
