"""Keeps finished requests' KV caches so the next turn only prefills what is new.

A conversation's second turn repeats the whole first turn as its prompt; re-running that
prefill is what makes local chat feel slow. Each finished request leaves its KV cache
here, keyed by the tokens it holds. A new prompt takes the entry sharing the longest
prefix with it, trimmed to that prefix, and the engine prefills only the remainder.
The store is an LRU bounded in bytes so long sessions cannot exhaust memory.
"""

from __future__ import annotations

import copy
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

DEFAULT_MAX_BYTES = 2 * 1024**3


@dataclass
class _Entry:
    tokens: np.ndarray
    cache: list[Any]
    nbytes: int
    text: str | None = None


def cache_nbytes(cache: Sequence[Any]) -> int:
    """Bytes held by a per-layer KV cache list (0 for layers that cannot say)."""
    total = 0
    for layer in cache:
        try:
            total += int(layer.nbytes)
        except (AttributeError, NotImplementedError):
            continue
    return total


def _common_prefix(a: np.ndarray, b: np.ndarray) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.nonzero(a[:n] != b[:n])[0]
    return int(diff[0]) if len(diff) else n


def _trim(cache: list[Any], n: int) -> bool:
    """Drop the last n tokens of every layer; False when a layer cannot be trimmed."""
    if n == 0:
        return True
    if not all(layer.is_trimmable() for layer in cache):
        return False
    for layer in cache:
        layer.trim(n)
    return True


class PrefixCache:
    """LRU of KV caches keyed by the token sequence they contain."""

    def __init__(self, max_bytes: int = DEFAULT_MAX_BYTES) -> None:
        self.max_bytes = max_bytes
        self._entries: OrderedDict[int, _Entry] = OrderedDict()
        self._next_key = 0
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def clear(self) -> None:
        self._entries.clear()
        self.nbytes = 0

    def store(self, tokens: Sequence[int], cache: list[Any], text: str | None = None) -> None:
        """Keep `cache` (which holds exactly `tokens`); evict least recent beyond the bound.

        `text` is what those tokens spell (rendered prompt plus generated text), so a next
        turn whose rendered prompt starts with it can reuse these exact token ids even
        where re-tokenising the reply would split it differently. An entry whose tokens
        are a prefix of the new one is dropped: the new entry serves every prompt the old
        one could.
        """
        if not tokens or self.max_bytes <= 0:
            return
        arr = np.asarray(tokens, dtype=np.int64)
        size = cache_nbytes(cache)
        if size > self.max_bytes:
            return
        for key, entry in list(self._entries.items()):
            if len(entry.tokens) <= len(arr) and _common_prefix(entry.tokens, arr) == len(
                entry.tokens
            ):
                self._drop(key)
        self._entries[self._next_key] = _Entry(arr, cache, size, text)
        self._next_key += 1
        self.nbytes += size
        while self.nbytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))

    def tokens_for(self, text: str) -> tuple[list[int], str] | None:
        """(token ids, their text) of the longest entry whose text starts `text`."""
        best: _Entry | None = None
        for entry in self._entries.values():
            if entry.text and text.startswith(entry.text):
                if best is None or len(entry.text) > len(best.text or ""):
                    best = entry
        return None if best is None else (best.tokens.tolist(), best.text or "")

    def fetch(self, prompt: Sequence[int]) -> tuple[list[Any] | None, int]:
        """Return (a private copy of the best cache, tokens it covers) or (None, 0).

        At least one prompt token is always left uncached, because the engine must feed
        one token to get the logits of the next.
        """
        if not self._entries or len(prompt) < 2:
            return None, 0
        arr = np.asarray(prompt, dtype=np.int64)
        limit = len(arr) - 1
        best_key, best_len = None, 0
        for key, entry in self._entries.items():
            n = min(_common_prefix(entry.tokens, arr), limit)
            if n > best_len and (n == len(entry.tokens) or _trimmable(entry.cache)):
                best_key, best_len = key, n
        if best_key is None:
            return None, 0
        entry = self._entries[best_key]
        if best_len == len(entry.tokens):
            # The usual next turn: the whole entry is a prefix of the prompt. Hand the
            # cache over without copying (a copy of a long history costs more than the
            # prefill it saves); the request stores its longer cache when it finishes.
            self._drop(best_key)
            return entry.cache, best_len
        self._entries.move_to_end(best_key)
        cache = copy.deepcopy(entry.cache)
        if not _trim(cache, len(entry.tokens) - best_len):
            return None, 0
        return cache, best_len

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        self.nbytes -= entry.nbytes


def _trimmable(cache: list[Any]) -> bool:
    return all(layer.is_trimmable() for layer in cache)
