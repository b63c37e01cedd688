"""PrefixCache: longest-prefix reuse, private copies, byte-bounded LRU."""

from __future__ import annotations

import mlx.core as mx
from mlx_lm.models.cache import KVCache

from core.engines.prefix_cache import PrefixCache, cache_nbytes


def filled_cache(tokens: list[int], layers: int = 2) -> list[KVCache]:
    """A KV cache whose entry at position i holds the value tokens[i] (easy to check)."""
    cache = []
    for _ in range(layers):
        c = KVCache()
        vals = mx.array(tokens, dtype=mx.float32).reshape(1, 1, len(tokens), 1)
        c.update_and_fetch(mx.broadcast_to(vals, (1, 1, len(tokens), 4)), mx.broadcast_to(vals, (1, 1, len(tokens), 4)))
        cache.append(c)
    return cache


def positions(cache: list[KVCache]) -> list[int]:
    k, _ = cache[0].keys_and_values() if cache[0].offset else (mx.zeros((1, 1, 0, 4)), None)
    return [int(v) for v in k[0, 0, :, 0].tolist()]


def test_longest_prefix_wins_and_is_trimmed():
    pc = PrefixCache()
    pc.store([1, 2, 3], filled_cache([1, 2, 3]))
    pc.store([1, 2, 9, 9, 9], filled_cache([1, 2, 9, 9, 9]))
    cache, n = pc.fetch([1, 2, 9, 9, 7, 7])
    assert n == 4
    assert positions(cache) == [1, 2, 9, 9]


def test_one_prompt_token_is_always_left_to_feed():
    pc = PrefixCache()
    pc.store([5, 6, 7], filled_cache([5, 6, 7]))
    cache, n = pc.fetch([5, 6, 7])
    assert n == 2 and positions(cache) == [5, 6]


def test_no_match_returns_nothing():
    pc = PrefixCache()
    pc.store([5, 6, 7], filled_cache([5, 6, 7]))
    assert pc.fetch([8, 9]) == (None, 0)


def test_fetched_copy_does_not_alter_the_stored_entry():
    pc = PrefixCache()
    pc.store([1, 2, 3, 4], filled_cache([1, 2, 3, 4]))
    cache, n = pc.fetch([1, 2, 3, 9, 5])  # partial match: a trimmed private copy
    assert n == 3
    new = mx.full((1, 1, 1, 4), 42.0)
    for c in cache:
        c.update_and_fetch(new, new)
    assert positions(cache) == [1, 2, 3, 42]
    again, _ = pc.fetch([1, 2, 3, 4, 5])
    assert positions(again) == [1, 2, 3, 4]


def test_whole_entry_match_is_handed_over_without_a_copy():
    pc = PrefixCache()
    stored = filled_cache([1, 2, 3])
    pc.store([1, 2, 3], stored)
    cache, n = pc.fetch([1, 2, 3, 4])
    assert n == 3 and cache is stored and len(pc) == 0


def test_a_fork_of_its_own_conversation_takes_the_entry_trimmed():
    # Entry: a first prompt of 4 tokens ("SSUU": system, user) and a 2-token reply. An
    # edit of the reply's turn shares all of that first prompt: the same conversation.
    pc = PrefixCache()
    stored = filled_cache([1, 2, 3, 4, 5, 6])
    pc.store([1, 2, 3, 4, 5, 6], stored, text="abcdef", marks=((4, 4), (6, 6)))
    cache, n = pc.fetch([1, 2, 3, 4, 9, 9])  # a batch row: it copies the head anyway
    assert n == 4 and cache is not stored and len(pc) == 1, "the other branch stays"
    cache, n = pc.fetch([1, 2, 3, 4, 9, 9], take_forks=True)  # one stream: no copy
    assert n == 4 and cache is stored and len(pc) == 0, "the old branch gives way"
    assert positions(cache) == [1, 2, 3, 4]
    # A regenerate of the first turn shares its prompt but the one token left to feed.
    pc.store([1, 2, 3, 4, 5, 6], filled_cache([1, 2, 3, 4, 5, 6]), text="abcdef",
             marks=((4, 4), (6, 6)))
    cache, n = pc.fetch([1, 2, 3, 4], take_forks=True)
    assert n == 3 and positions(cache) == [1, 2, 3] and len(pc) == 0


def test_another_conversation_sharing_only_the_system_prompt_copies():
    pc = PrefixCache()
    stored = filled_cache([1, 2, 3, 4, 5, 6])
    pc.store([1, 2, 3, 4, 5, 6], stored, text="abcdef", marks=((4, 4), (6, 6)))
    cache, n = pc.fetch([1, 2, 7, 7, 7], take_forks=True)  # shares "SS", then its own message
    assert n == 2 and cache is not stored and len(pc) == 1
    again, m = pc.fetch([1, 2, 3, 4, 5, 6, 7])  # the first conversation's next turn
    assert m == 6 and again is stored and positions(again) == [1, 2, 3, 4, 5, 6]


def test_entry_covered_by_a_longer_one_is_replaced():
    pc = PrefixCache()
    pc.store([1, 2], filled_cache([1, 2]))
    pc.store([1, 2, 3, 4], filled_cache([1, 2, 3, 4]))
    assert len(pc) == 1


def test_lru_evicts_least_recent_beyond_the_byte_bound():
    one = cache_nbytes(filled_cache([1, 2, 3]))
    pc = PrefixCache(max_bytes=2 * one)
    pc.store([1, 2, 3], filled_cache([1, 2, 3]))
    pc.store([4, 5, 6], filled_cache([4, 5, 6]))
    pc.fetch([1, 2, 0])  # touch the first (partial match): the second is least recent
    pc.store([7, 8, 9], filled_cache([7, 8, 9]))
    assert len(pc) == 2 and pc.nbytes <= 2 * one
    assert pc.fetch([4, 5, 6, 0]) == (None, 0)
    assert pc.fetch([1, 2, 3, 0])[1] == 3


def test_store_only_queues_and_lookups_settle_first():
    pc = PrefixCache()
    pc.store([1, 2, 3], filled_cache([1, 2, 3]))
    pc.store([1, 2, 3, 4, 5], filled_cache([1, 2, 3, 4, 5]))
    assert pc.pending == 2
    pc.settle(1)
    assert pc.pending == 1
    cache, n = pc.fetch([1, 2, 3, 4, 5, 6])  # settles the rest before looking
    assert pc.pending == 0 and n == 5 and positions(cache) == [1, 2, 3, 4, 5]
    assert len(pc) == 0  # the shorter entry was covered by the longer one, then handed over
