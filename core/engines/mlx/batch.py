"""The batch path: two or more requests through mlx_lm's BatchGenerator.

A running single request joins the batch with its cache and pending token, and the last
one left returns to the single path, nothing recomputed either way. Finished requests'
rows are retired lazily (their KV gathered for the prefix cache, the rows removed once
that is cheap), since removing rows copies the KV of every row that stays.
"""

from __future__ import annotations

import logging
from collections import deque
from collections.abc import Callable
from typing import Any

import mlx.core as mx
from mlx_lm.generate import BatchGenerator
from mlx_lm.models.cache import BatchKVCache

from core.engines.mlx.cached_group import detached, group_pass, sharing
from core.engines.mlx.lean_batch import LeanGenerationBatch
from core.engines.mlx.lean_prompt import lean_prompt_batch
from core.engines.mlx.single import pick_token
from core.engines.mlx.state import FinishedRows, Request, SingleStream
from core.engines.sampling import greedy
from core.events import Event

log = logging.getLogger(__name__)


class BatchPath:
    """MlxEngine's batch methods (a base class of MlxEngine, which holds the state)."""

    max_concurrency: int
    _model: Any
    _eos: set[int]
    _prefill_step: int
    _prefix: Any
    _kv: Any
    _bg: BatchGenerator
    _single: SingleStream | None
    _batch: dict[int, Request]
    _idle_rows: set[int]
    _unsaved: deque[FinishedRows]
    _lean_prompt: bool
    _joined: bool
    _group_cached: bool  # cached turns arriving together share a pass (cached_group)
    _group_matmul: bool  # ... with attention as matmuls, not MLX's fused kernel
    _group_pipelined: bool  # ... the device starting on each layer as its graph is built
    _prefill_to_batch: Callable[[SingleStream], None]  # ChunkedPrefill's
    _cache_for: Callable[[Request], tuple[list[Any], mx.array | None]]  # SinglePath's
    _prefill_alone: Callable[..., mx.array]  # SinglePath's

    def _single_to_batch(self, out: dict[str, list[Event]]) -> None:
        """Hand the running single request to the batch with its cache, nothing recomputed.

        Its queued token is read and emitted here: BatchGenerator treats the last token of
        an inserted sequence as prompt (fed, not reported), and the cache already holds
        everything before it.
        """
        s = self._single
        assert s is not None
        self._single = None
        act = s.act
        if s.at is not None:  # mid-prefill: the rest of its prompt (core.engines.mlx.chunked)
            self._prefill_to_batch(s)
            return
        token = s.y.item()
        if not s.emitted:
            events = out.setdefault(act.req.request_id, [])
            finish = self._take_token(act, token, events)
            if finish is not None:
                self._finish(act, finish, events)
                self._remember(act, act.prompt + act.generated[:-1], s.cache)
                return
        [uid] = self._bg.insert(
            [[token]],
            max_tokens=[act.max_tokens - len(act.generated)],
            caches=[s.cache],
            all_tokens=[act.prompt + act.generated[:-1]],
            samplers=[act.sampler],
            logits_processors=[act.processors],
        )
        act.uid = uid
        self._batch[uid] = act

    def _batch_to_single(self) -> None:
        """Move the batch's last request back to the single path, nothing recomputed.

        The batch has already queued that request's next token (sampled, not yet read) and
        its cache holds everything before it: exactly the single path's state.
        """
        bg = self._bg
        gen = bg._generation_batch
        if len(gen) != 1 or len(bg._prompt_batch) or bg._unprocessed_sequences:
            return
        [(uid, act)] = self._batch.items()
        y = gen._next_tokens
        if y is None or gen.uids != [uid]:
            return
        cache = gen.extract_cache(0)
        bg.remove([uid])
        del self._batch[uid]
        act.uid = None
        context = mx.array(act.prompt + act.generated) if act.processors else None
        self._single = SingleStream(act, cache, y, context)

    def _new_batch_generator(self) -> BatchGenerator:
        bg = BatchGenerator(
            self._model,
            stop_tokens=[[t] for t in sorted(self._eos)],
            completion_batch_size=self.max_concurrency,
            prefill_batch_size=min(8, self.max_concurrency),
            prefill_step_size=self._prefill_step,
        )
        bg._generation_batch = LeanGenerationBatch.empty(self._model, bg.sampler)
        if self._lean_prompt:
            bg._prompt_batch = lean_prompt_batch(self._model, bg.sampler, self._prefill_step)
        return bg

    def _insert_batch(self, act: Request) -> None:
        cache, cached = self._prefix.fetch(act.prompt)
        if self._kv is not None:  # kv-disk hook: a stored cache covering more
            cache, cached = self._kv.lookup(act.prompt, cache, cached)
        act.cached = cached
        [uid] = self._bg.insert(
            [act.prompt[cached:]],
            max_tokens=[act.max_tokens],
            caches=[cache] if cache is not None else None,
            all_tokens=[act.prompt[:cached]],
            samplers=[act.sampler],
            logits_processors=[act.processors],
        )
        act.uid = uid
        self._batch[uid] = act

    def _join_prefilled(self, acts: list[Request], out: dict[str, list[Event]]) -> None:
        """Cached turns join the batch at their first token, each prefilled alone first.

        A later turn of a long conversation has a few new tokens over a long cached
        history. Prefilled in the batch, its cache is first merged into one padded batch
        cache with the group's others, grown, rolled to move the padding left, and
        compiled for a new (rows, tokens, history) shape almost every turn (eight such
        turns on an H200: ~150 ms before any first token). Prefilled alone on its own
        plain cache, in the single path's few fixed shapes, the passes queue back to back;
        each request's first token is read and handed out here, then it joins the batch
        like a single request does (_single_to_batch), its cache merged once. Turns that
        can share a pass (on CUDA by default) are prefilled together in one, over their
        histories in one padded buffer (core.engines.mlx.cached_group): one pass costs
        about what a lone one does there, where eight lone ones queued took 70-110 ms.
        """
        self._joined = True
        fetched = [(act, *self._cache_for(act)) for act in acts]
        grouped = self._group_first_tokens(fetched)
        started = []
        for (act, cache, context), got in zip(fetched, grouped, strict=True):
            if got is None:
                got = (cache, self._prefill_alone(act, cache, context))
            started.append((act, *got))
        for act, cache, y in started:
            token = y.item()
            events = out.setdefault(act.req.request_id, [])
            finish = self._take_token(act, token, events)
            if finish is not None:
                self._finish(act, finish, events)
                # kept: its own arrays, not views that would keep the group's buffers
                self._remember(act, list(act.prompt), detached(cache))
                continue
            [uid] = self._bg.insert(
                [[token]],
                max_tokens=[act.max_tokens - len(act.generated)],
                caches=[cache],
                all_tokens=[list(act.prompt)],
                samplers=[act.sampler],
                logits_processors=[act.processors],
            )
            act.uid = uid
            self._batch[uid] = act

    def _group_first_tokens(
        self, fetched: list[tuple[Request, list[Any], mx.array | None]]
    ) -> list[tuple[list[Any], mx.array] | None]:
        """Cached turns that can share a pass prefilled in one (core.engines.mlx.cached_group):
        per request (its cache after the pass, its first token, queued), or None for one
        that cannot share it (or when off): it is then prefilled alone."""
        got: list[tuple[list[Any], mx.array] | None] = [None] * len(fetched)
        if not self._group_cached or len(fetched) < 2:
            return got
        rows = sharing([cache for _, cache, _ in fetched],
                       [len(act.prompt) - act.cached for act, _, _ in fetched])
        if not rows:
            return got
        group = [fetched[i] for i in rows]
        try:
            with mx.stream(self._stream):
                logits, caches = group_pass(
                    self._model, [cache for _, cache, _ in group],
                    [act.prompt[act.cached:] for act, _, _ in group], self._group_matmul,
                    self._group_pipelined)
                ys = self._sample_rows([act for act, _, _ in group], logits,
                                       [context for _, _, context in group])
                mx.async_eval(ys)
        except Exception:  # noqa: BLE001 - a model the pass does not fit (its histories are
            # untouched: the pass copies them): these rows and later ones go alone
            log.warning("cached turns cannot share a pass on this model; each goes alone",
                        exc_info=True)
            self._group_cached = False
            return got
        for i, cache, y in zip(rows, caches, ys, strict=True):
            got[i] = (cache, y)
        return got

    def _sample_rows(self, acts: list[Request], logits: mx.array,
                     contexts: list[mx.array | None]) -> list[mx.array]:
        """Each row's first token from its logits (pick_token, as a lone pass takes its
        own); greedy rows without processors together."""
        if all(a.sampler is greedy and not a.processors for a in acts):
            y = greedy(logits)
            return [y[i : i + 1] for i in range(len(acts))]
        return [pick_token(logits[i : i + 1], act, context)
                for i, (act, context) in enumerate(zip(acts, contexts, strict=True))]

    def _retire(self, uids: list[int]) -> None:
        """Take finished requests off the batch, keeping their KV for the prefix cache.

        Their rows stay in the batch, decoding tokens nobody reads, until `_compact`
        finds removing them worth it: removing rows copies every layer's KV of the rows
        that stay, which made each step where a group of requests finished several
        times slower than the rest, while a few idle rows cost next to nothing at the
        batch sizes where that copy hurts. Plain KV layers get one lazy gather of the
        finished rows per layer, split per request on later steps (`_save_rows`).
        """
        gen = self._bg._generation_batch
        where = {u: i for i, u in enumerate(gen.uids)}
        layers = gen.prompt_cache
        if not (
            layers
            and all(u in where for u in uids)
            and all(type(c) is BatchKVCache and c.keys is not None for c in layers)
        ):
            caches = self._bg.remove(uids, return_prompt_caches=True)
            for uid in uids:
                act = self._batch.pop(uid)
                if uid in caches:
                    cache, tokens = caches[uid]
                    self._remember(act, tokens, cache)
            return
        rows = mx.array([where[u] for u in uids])
        kv = [(c.keys[rows], c.values[rows], c._idx) for c in layers]
        mx.async_eval([a for k, v, _ in kv for a in (k, v)])
        # Copies: an idle row's token list keeps growing while it stays in the batch.
        tokens = [list(gen.tokens[where[u]]) for u in uids]
        acts = [self._batch.pop(uid) for uid in uids]
        self._idle_rows.update(uids)
        self._unsaved.append(FinishedRows(acts, tokens, kv))

    def _compact(self, force: bool = False) -> None:
        """Remove the idle rows of finished requests once that is cheap or needed.

        Cheap: the copy is of the rows that stay, so it waits until at most a quarter
        of the rows are live (or none, when the batch is simply emptied). Needed: before
        new requests join (joining copies the cache anyway), and when one request is
        left, so it can go back to the single-stream path.
        """
        if not self._idle_rows:
            return
        live = len(self._batch)
        if force or live <= 1 or live * 4 <= live + len(self._idle_rows):
            self._bg.remove(sorted(self._idle_rows))
            self._idle_rows.clear()
