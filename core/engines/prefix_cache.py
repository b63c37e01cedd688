"""Keeps finished requests' KV caches so the next turn only prefills what is new.

A conversation's second turn repeats the whole first turn as its prompt; re-running that
prefill is what makes local chat feel slow. Each finished request leaves its KV cache
here, keyed by the tokens it holds. A new prompt takes the entry sharing the longest
prefix with it, trimmed to that prefix, and the engine prefills only the remainder.
The store is an LRU bounded in bytes so long sessions cannot exhaust memory.

Saving must never stall decoding: when many requests of a batch finish on one step,
`store` only queues a reference, and `settle` indexes queued entries a few at a time
(the engine calls it once per step) or all at once before a lookup needs them. Copies
are lazy too: a partial match hands out slices of the stored arrays, which MLX copies
only when the new request first writes past them. A lone regenerated or edited turn
of the same conversation takes the entry itself, trimmed (no copy at all).

Entries also remember which text their tokens spell, at a few exact boundaries ("marks":
the end of every earlier prompt and reply in the conversation). A new prompt is
tokenised from the longest mark its text starts with, so the history keeps the token ids
it was generated or prefilled with. Re-tokenising a model's reply can split it otherwise,
and a regenerated or edited turn (whose text ends inside a stored one) would then share
only the tokens before the first split.
"""

from __future__ import annotations

import copy
from collections import OrderedDict, deque
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import mlx.core as mx
import numpy as np
from mlx_lm.models.cache import KVCache

DEFAULT_MAX_BYTES = 2 * 1024**3


@dataclass
class _Entry:
    tokens: np.ndarray
    cache: list[Any]
    nbytes: int
    text: str | None = None
    marks: tuple[tuple[int, int], ...] = ()  # (chars, tokens): text[:chars] is tokens[:tokens]


Marks = tuple[tuple[int, int], ...]


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
        self._incoming: deque[tuple[Sequence[int], list[Any], str | None, Marks]] = deque()
        self._next_key = 0
        self._nbytes = 0

    def __len__(self) -> int:
        self.settle()
        return len(self._entries)

    @property
    def nbytes(self) -> int:
        self.settle()
        return self._nbytes

    @property
    def pending(self) -> int:
        """Entries stored but not yet indexed."""
        return len(self._incoming)

    def clear(self) -> None:
        self._entries.clear()
        self._incoming.clear()
        self._nbytes = 0

    def store(self, tokens: Sequence[int], cache: list[Any], text: str | None = None,
              marks: Marks = ()) -> None:
        """Keep `cache` (which holds exactly `tokens`); cheap, the indexing waits for `settle`.

        `text` is what those tokens spell (rendered prompt plus generated text), so a next
        turn whose rendered prompt starts with it can reuse these exact token ids even
        where re-tokenising the reply would split it differently. `marks` are the exact
        (chars, tokens) boundaries in it, ascending: text[:chars] is tokens[:tokens].
        """
        if tokens and self.max_bytes > 0:
            if text is None:
                marks = ()
            else:
                marks = tuple(m for m in marks if 0 < m[0] <= len(text) and m[1] <= len(tokens))
            self._incoming.append((tokens, cache, text, marks))

    def settle(self, limit: int | None = None) -> None:
        """Index up to `limit` queued entries (all when None), oldest first.

        An entry whose tokens are a prefix of the new one is dropped: the new entry serves
        every prompt the old one could. Each settled cache is queued for evaluation so it
        stops pinning the batch arrays it was sliced from.
        """
        n = len(self._incoming) if limit is None else min(limit, len(self._incoming))
        for _ in range(n):
            tokens, cache, text, marks = self._incoming.popleft()
            self._index(np.asarray(tokens, dtype=np.int64), cache, text, marks)

    def _index(self, arr: np.ndarray, cache: list[Any], text: str | None, marks: Marks) -> None:
        size = cache_nbytes(cache)
        if size > self.max_bytes:
            return
        n = len(arr)
        for key, entry in list(self._entries.items()):
            m = len(entry.tokens)
            if m <= n and entry.tokens[m - 1] == arr[m - 1] and entry.tokens[0] == arr[0]:
                if _common_prefix(entry.tokens, arr) == m:
                    self._drop(key)
        mx.async_eval([layer.state for layer in cache])
        self._entries[self._next_key] = _Entry(arr, cache, size, text, marks)
        self._next_key += 1
        self._nbytes += size
        while self._nbytes > self.max_bytes and self._entries:
            self._drop(next(iter(self._entries)))

    def tokens_for(self, text: str) -> tuple[list[int], int, Marks] | None:
        """The longest known start of `text`: (its token ids, its length in characters,
        the marks up to it), or None when no entry's text shares a marked start with it."""
        self.settle()
        best: tuple[_Entry, int] | None = None
        best_chars = 0
        for entry in self._entries.values():
            if not entry.text or not entry.marks:
                continue
            i = _longest_mark(entry, text)
            if i >= 0 and entry.marks[i][0] > best_chars:
                best, best_chars = (entry, i), entry.marks[i][0]
        if best is None:
            return None
        entry, i = best
        chars, count = entry.marks[i]
        return entry.tokens[:count].tolist(), chars, entry.marks[: i + 1]

    def fetch(self, prompt: Sequence[int], *, take_forks: bool = False,
              ) -> tuple[list[Any] | None, int]:
        """Return (a private copy of the best cache, tokens it covers) or (None, 0).

        At least one prompt token is always left uncached, because the engine must feed
        one token to get the logits of the next. `take_forks`: a regenerated or edited
        turn takes the entry itself rather than a copy of its head; for a caller that
        writes into the cache as it is (one stream), not one that copies it into a
        batch anyway, where taking it would only lose the other branch.
        """
        best_key, best_len = self._best(prompt)
        if best_key is None:
            return None, 0
        entry = self._entries[best_key]
        if best_len == len(entry.tokens) or (
                take_forks and _forks_its_own_conversation(entry, best_len)):
            # The usual next turn: the whole entry is a prefix of the prompt. Hand the
            # cache over without copying (a copy of a long history costs more than the
            # prefill it saves); the request stores its longer cache when it finishes.
            # A regenerate or an edit takes it too, trimmed to where it forks: see
            # _forks_its_own_conversation for what that gives up.
            if not _trim(entry.cache, len(entry.tokens) - best_len):
                return None, 0
            self._drop(best_key)
            return entry.cache, best_len
        self._entries.move_to_end(best_key)
        cache = _prefix_copy(entry.cache, best_len, len(entry.tokens))
        if cache is None:
            return None, 0
        return cache, best_len

    def match(self, prompt: Sequence[int]) -> int:
        """How many of the prompt's tokens `fetch` would cover now, without taking them
        (the engine orders waiting prompts by what is left to prefill)."""
        return self._best(prompt)[1]

    def _best(self, prompt: Sequence[int]) -> tuple[int | None, int]:
        self.settle()
        if not self._entries or len(prompt) < 2:
            return None, 0
        arr = np.asarray(prompt, dtype=np.int64)
        limit = len(arr) - 1
        best_key, best_len = None, 0
        for key, entry in self._entries.items():
            n = min(_common_prefix(entry.tokens, arr), limit)
            if n > best_len and (n == len(entry.tokens) or _trimmable(entry.cache)):
                best_key, best_len = key, n
        return best_key, best_len

    def discard(self, tokens: Sequence[int]) -> None:
        """Drop the entry holding exactly `tokens` (a reply's cache as generated, once its
        next-turn form is kept: the two share the prompt, and keeping both doubled the
        memory a conversation takes, evicting other conversations)."""
        self.settle()
        arr = np.asarray(tokens, dtype=np.int64)
        for key, entry in list(self._entries.items()):
            if len(entry.tokens) == len(arr) and np.array_equal(entry.tokens, arr):
                self._drop(key)

    def _drop(self, key: int) -> None:
        entry = self._entries.pop(key)
        self._nbytes -= entry.nbytes


def _longest_mark(entry: _Entry, text: str) -> int:
    """Index of the last mark of `entry` whose text `text` starts with (-1 for none).

    "text starts with entry.text[:chars]" holds for every mark up to some point and for
    none after it, so a binary search needs a few C-speed startswith calls, not a
    character loop over a long history.
    """
    etext = entry.text or ""
    lo, hi = 0, len(entry.marks) - 1
    found = -1
    while lo <= hi:
        mid = (lo + hi) // 2
        if text.startswith(etext[: entry.marks[mid][0]]):
            found, lo = mid, mid + 1
        else:
            hi = mid - 1
    return found


def _forks_its_own_conversation(entry: _Entry, n: int) -> bool:
    """True when a prompt sharing `n` tokens with `entry` is the same conversation going
    another way (a regenerated or edited turn), not another conversation that starts
    alike.

    The test: the shared part covers the entry's whole first prompt (all but the one
    token every prompt leaves to feed), so system prompt and first user message match.
    Two conversations that only share a system prompt stop inside it, and each keeps
    its own entry. A fork takes the entry whole instead of a copy of its head, because
    on a GPU the copy (two arrays per layer) costs a regenerate or an edit a few
    milliseconds that a later turn does not pay (H100, 4-bit Qwen3-0.6B shape, 1.5k-token
    history: an edit at 1.20-1.39x a later turn with the copy, 0.99-1.06x without).
    What it gives up: the branch left behind loses its cached tail, so going back to it
    and going on re-prefills from the fork, one turn's tokens.
    """
    first_prompt = entry.marks[0][1] if entry.marks else 0
    return first_prompt > 1 and n >= first_prompt - 1


def _prefix_copy(cache: list[Any], n: int, held: int) -> list[Any] | None:
    """A private cache holding the first n tokens of `cache`, or None when it cannot.

    Plain KV layers get slices of the stored arrays (no data moves now; MLX copies on
    the first write past them); other layer types are deep-copied and trimmed.
    """
    if all(type(layer) is KVCache for layer in cache):
        out = []
        for layer in cache:
            c = KVCache()
            c.keys = layer.keys[..., :n, :]
            c.values = layer.values[..., :n, :]
            c.offset = n
            out.append(c)
        return out
    copied = copy.deepcopy(cache)
    return copied if _trim(copied, held - n) else None


def _trimmable(cache: list[Any]) -> bool:
    return all(layer.is_trimmable() for layer in cache)
