"""A long prompt on the MLX single path, prefilled a chunk per engine step (issue 43).

The single path prefilled a prompt's whole uncached part inside one engine step: for an
agent's 28,000-token prompt that is minutes on a small machine during which the worker
reads no message, so a client that went away kept the engine busy to the end. Here a
remainder longer than one prefill chunk (the engine option prefill_step_size, mlx_lm's
prefill step) is fed a chunk per step, and the worker reads its pipe between steps
(core.workers.worker_main), so a cancel ends the request after the chunk in hand. What
the cut prefill had read is kept in the prefix cache (not on disk): the same prompt sent
again (an agent's retry) starts where it was cut.

The chunks are the very passes SinglePath._prefill_alone makes when it runs a prompt in
one go (the same sizes at the same offsets, the GPU's bucketed ones too), and the last
chunk with the first token's pass is _prefill_alone itself: the same cache, the same
first token, one step per chunk. A request that arrives meanwhile takes the rest of the
prompt into the batch (BatchPath._single_to_batch), whose BatchGenerator prefills a
chunk per step already, so a batch's prompts were cancellable between chunks before.

Also here: the prompt's count before the prefill (core.events.PromptRead), for a request
that asks (GenerationRequest.report_prompt: Anthropic's `message_start`), once the
prompt is tokenized and the prefix cache looked up. A chunked prompt's count goes out
in a step of its own, before any chunk.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import mlx.core as mx

from core.engines.mlx.bucketed_kv import to_bucketed, to_plain
from core.engines.mlx.single import ASIDE_CHUNK, ONE_PASS_TAIL, PREFILL_QUANTUM, bucket_step
from core.engines.mlx.state import Request, SingleStream
from core.events import Event, PromptRead


class ChunkedPrefill:
    """MlxEngine's chunked single-path prefill (a base class of MlxEngine, which holds the
    state; SingleStream.at says a prefill is under way)."""

    _model: Any
    _stream: Any
    _bucketed_kv: bool
    _prefill_step: int
    _bg: Any
    _batch: dict[int, Request]
    _single: SingleStream | None
    _in_buckets: Callable[[int, list[Any]], bool]  # SinglePath's
    _prefill_alone: Callable[..., mx.array]  # SinglePath's

    def _chunk_at(self, act: Request, cache: list[Any], at: int) -> int:
        """Tokens of act.prompt[at:] to prefill in a step of their own: the next pass
        _prefill_alone would make (ASIDE_CHUNK for work beside a conversation), while more
        than one chunk and the first token's pass are left; 0 when the rest goes in one
        step."""
        n = len(act.prompt) - at
        if act.req.aside:  # a summary written ahead: a turn that comes waits for one chunk
            return ASIDE_CHUNK if n > ASIDE_CHUNK + ONE_PASS_TAIL else 0
        if self._in_buckets(n, cache):
            step = bucket_step(self._prefill_step)
            tail = (n - 1) % PREFILL_QUANTUM + 1
            return step if n - tail > step else 0
        step = max(1, self._prefill_step)
        return step if n > step + ONE_PASS_TAIL else 0

    def _chunked_start(self, act: Request, cache: list[Any], context: mx.array | None) -> bool:
        """Start `act` as a chunked prefill (True) when its remainder is long."""
        if not self._chunk_at(act, cache, act.cached):
            return False
        self._single = SingleStream(act, cache, None, context, at=act.cached)
        return True

    def _prefill_chunk(self, s: SingleStream, out: dict[str, list[Event]]) -> bool:
        """One step of `s`'s prefill; True once its first token is queued (the step then
        reads it, as the single path's first step does)."""
        assert s.at is not None
        if any(type(e) is PromptRead for e in out.get(s.act.req.request_id, ())):
            return False  # the count goes out first, before any of the prefill
        n = self._chunk_at(s.act, s.cache, s.at)
        if n == 0:
            s.y = self._prefill_alone(s.act, s.cache, s.context, start=s.at)
            s.at = None
            return True
        bucketed = self._bucketed_kv and self._in_buckets(len(s.act.prompt) - s.at, s.cache)
        tokens = mx.array(s.act.prompt[s.at : s.at + n])
        with mx.stream(self._stream):
            if bucketed:
                to_bucketed(s.cache)
            try:
                self._model(tokens[None], cache=s.cache)
                mx.eval([c.state for c in s.cache])
            finally:
                if bucketed:
                    to_plain(s.cache)
        s.at += n
        return False

    def _prefill_to_batch(self, s: SingleStream) -> None:
        """A request mid-prefill joins the batch: the rest of its prompt goes through
        BatchGenerator's prefill, over the cache read so far."""
        act, at = s.act, s.at
        assert at is not None
        [uid] = self._bg.insert(
            [act.prompt[at:]],
            max_tokens=[act.max_tokens],
            caches=[s.cache],
            all_tokens=[act.prompt[:at]],
            samplers=[act.sampler],
            logits_processors=[act.processors],
        )
        act.uid = uid
        self._batch[uid] = act

    @staticmethod
    def _prompt_read(act: Request, out: dict[str, list[Event]]) -> None:
        """The prompt's count, first among the request's events, when it asked for it."""
        if act.req.report_prompt:
            out.setdefault(act.req.request_id, []).insert(
                0, PromptRead(len(act.prompt), min(act.cached, len(act.prompt))))
