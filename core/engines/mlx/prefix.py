"""Saving finished requests' KV caches for the next turn: the in-memory PrefixCache and
the disk-KV hooks (issue 33, core.engines.kv_mlx), which see every save too.

A conversation's next turn then prefills only its new tokens; the boundaries saved with
each cache let a regenerated or edited turn reuse the ids up to them.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from core.engines.base import GenerationRequest, ModelSpec
from core.engines.kv_mlx import MlxKvKeeper
from core.engines.mlx.bucketed_kv import to_bucketed, to_plain
from core.engines.mlx.single import PREFILL_QUANTUM, tail_bucket
from core.engines.mlx.state import FinishedRows, Request


class PrefixSaves:
    """MlxEngine's cache saves (a base class of MlxEngine, which holds the state)."""

    spec: ModelSpec
    _model: Any
    _tokenizer: Any
    _tool_grammars: Any
    _stream: Any
    _eos: set[int]
    _prefix: Any
    _kv: MlxKvKeeper | None
    _bucketed: bool
    _bucketed_kv: bool
    render_text: Callable[[GenerationRequest], str]  # Admission's

    def _open_kv(self, path: Path) -> MlxKvKeeper | None:
        """kv-disk hook (issue 33): caches on disk across restarts (core.engines.kv_mlx).
        The warm-up's long prompt (prefilled once its shapes were compiled) is the cost
        model's first prefill rate."""
        keeper = self._new_kv(path)
        seen = getattr(self, "warmup_prefill_seen", None)
        if keeper is not None and seen is not None:
            keeper.cost.prefilled(*seen)
        return keeper

    def _new_kv(self, path: Path) -> MlxKvKeeper | None:
        return MlxKvKeeper.open(
            self.spec.option("kv_disk_gb"), path, model=self._model, tokenizer=self._tokenizer,
            family=self._tool_grammars.family, stream=self._stream, eos=self._eos,
            render=lambda msgs, tools, thinking: self.render_text(
                GenerationRequest("", tuple(msgs), tools=tools, thinking=thinking)),
            remember=self._prefix.store, bits=int(self.spec.option("kv_disk_bits", 16)),
            read=str(self.spec.option("kv_disk_read", "auto")),
            copy=str(self.spec.option("kv_disk_copy", "stream")), discard=self._prefix.discard,
            prefill=self._follow_up_pass)

    def _follow_up_pass(self, tokens: list[int], cache: list[Any]) -> None:
        """The keeper's next-turn prefill (a reply's tokens over its history, in idle time)
        in the shapes the engine's own passes meet: a short piece padded like a prefill's
        tail and the history's length bucketed (bucketed_kv). On CUDA a pass over a new
        history length builds an attention plan (60-130 ms on an H200), and a turn that
        arrives meanwhile waits for it."""
        with mx.stream(self._stream):
            if self._bucketed_kv:
                to_bucketed(cache)
            try:
                for start in range(0, len(tokens), 2048):
                    piece = tokens[start:start + 2048]
                    pad = 0
                    if self._bucketed and len(piece) <= PREFILL_QUANTUM:
                        pad = tail_bucket(len(piece)) - len(piece)
                    self._model(mx.array(piece + [0] * pad)[None], cache=cache)
                    for layer in cache if pad else ():
                        layer.trim(pad)  # after the real tokens: none of them saw it
                    mx.eval([c.state for c in cache])
            finally:
                to_plain(cache)

    def warm(self, request: GenerationRequest) -> bool:
        """kv-disk hook (issue 33 item 2): the runtime opened `request`'s conversation (its
        messages so far); load its stored cache into the in-memory prefix cache in idle
        time, so the next turn starts as if it had never left memory. True when a warm-up
        was queued (a stored file knows more of it than memory does)."""
        if self._kv is None:
            return False
        text = self.render_text(request)
        on_disk = self._kv.tokens_for(text)
        in_memory = self._prefix.tokens_for(text)
        if on_disk is None or (in_memory is not None and in_memory[1] >= on_disk[1]):
            return False
        ids, chars, _ = on_disk
        prompt = ids + list(self._tokenizer.encode(text[chars:], add_special_tokens=False))
        self._kv.hint(prompt)
        return True

    def _save_rows(self, rows: FinishedRows) -> None:
        """Split a finished group's gathered KV per request and store it (see above).

        Every row ends at the cache's write index `end`, so a request's KV is its last
        len(tokens) columns; no padding has to be read back from the device.
        """
        for j, (act, tokens) in enumerate(zip(rows.acts, rows.tokens, strict=True)):
            cache = []
            for keys, values, end in rows.kv:
                start = end - len(tokens)
                c = KVCache()
                c.keys = keys[j : j + 1, :, start:end]
                c.values = values[j : j + 1, :, start:end]
                c.offset = len(tokens)
                cache.append(c)
            self._remember(act, tokens, cache)

    def _remember(self, act: Request, tokens: list[int], cache: list[Any]) -> None:
        """Keep a finished request's cache, with the text it spells at exact boundaries:
        the prompt's (inherited ones and its end) and, when `tokens` holds every generated
        token, the reply's end. A regenerated or edited turn reuses the ids up to them."""
        if len(tokens) < len(act.prompt):  # a prefill cut short (core.engines.mlx.chunked):
            if tokens:  # kept for a retry, in memory only
                self._prefix.store(tokens, cache, act.text, act.marks)
            return
        if self._kv is not None:  # kv-disk hook: queued for disk, written off this thread
            # a prefill's rate for the cost model: only a lone request's TTFT is one (under
            # concurrency it includes the others' prefills and steps)
            first = act.first_token_at
            prefill = ((len(act.prompt) - act.cached, first - act.submitted, act.cached)
                       if first and act.alone else None)
            self._kv.finished(act.req, act.prompt, act.text, act.marks, act.raw, tokens, cache,
                              prefill)
        if act.text is None:
            self._prefix.store(tokens, cache)
            return
        text = act.text + act.raw
        marks = (*act.marks, (len(act.text), len(act.prompt)))
        if len(tokens) == len(act.prompt) + len(act.generated):
            marks = (*marks, (len(text), len(tokens)))
        self._prefix.store(tokens, cache, text, marks)
