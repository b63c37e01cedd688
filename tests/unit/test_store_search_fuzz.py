"""Search never raises, whatever is typed: lone surrogates, FTS5 syntax, NULs, megabytes.

2,000 seeded hostile queries against a real SQLite file (before the fix, 392 of these
raised UnicodeEncodeError); a valid query still finds its row afterwards.
"""

from __future__ import annotations

import collections

from core.store import SearchHit, Store, fts_query, snippet_parts
from core.store.search import MAX_QUERY_CHARS, clean_query
from tests.fixtures.hostile_text import hostile_strings
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401

FUZZ_QUERIES = 2000


def test_lone_surrogates_are_searched_not_raised(store: Store) -> None:
    cid = store.create_conversation(None)
    store.add_message(cid, "user", "sourdough bread proofs overnight")
    for query in ("\ud800", "\udfff", "bread\ud800", "\udc00\ud800 bread", '"\ud83d'):
        hits = store.search(query)
        assert all(isinstance(h, SearchHit) for h in hits)
    assert [h.conversation_id for h in store.search("bread\ud800")] == [cid]
    assert fts_query("\ud800") is None  # nothing searchable left: no query at all


def test_a_surrogate_pair_is_one_character_again() -> None:
    assert clean_query("\ud83d\ude00 x") == "\U0001f600 x"
    assert clean_query("a\ud800b\x00") == "a\ufffdb\ufffd"
    assert len(clean_query("word " * 10_000)) == MAX_QUERY_CHARS


def test_thousands_of_hostile_queries_never_raise(store: Store) -> None:
    cid = store.create_conversation("Kitchen notes")
    target = store.add_message(cid, "user", "How long should sourdough bread proof? été 中文字符")
    other = store.create_conversation(None)
    store.add_message(other, "user", "NEAR AND OR NOT * \" ( ) : content title")
    tried: collections.Counter[str] = collections.Counter()
    for family, query in hostile_strings(FUZZ_QUERIES, seed=19):
        tried[family] += 1
        hits = store.search(query)  # any exception fails the test with this query
        assert isinstance(hits, list), (family, ascii(query[:80]))
        for hit in hits:
            assert isinstance(hit, SearchHit)
            "".join(text for text, _ in snippet_parts(hit.snippet))
    assert sum(tried.values()) == FUZZ_QUERIES and len(tried) == 6, tried
    hits = store.search("sourdough")
    assert [(h.conversation_id, h.message_id) for h in hits] == [(cid, target)]


def test_text_with_lone_surrogates_is_stored_not_refused(store: Store) -> None:
    """A paste of invalid bytes reaches the composer as lone surrogates: the message is
    saved (the lone ones as U+FFFD) instead of failing with UnicodeEncodeError."""
    cid = store.create_conversation("title \udc80")
    mid = store.add_message(cid, "user", "bytes \udcff\udcfe and an emoji \ud83d\ude00")
    stored = store.get_message(mid)
    assert stored is not None
    assert stored.content == "bytes \ufffd\ufffd and an emoji \U0001f600"
    store.update_message(mid, content="again \ud800", reasoning="\udfff", error="x\ud800")
    stored = store.get_message(mid)
    assert stored is not None and stored.content == "again \ufffd" and stored.error == "x\ufffd"
    edited = store.edit_message(mid, "edit \udc80")
    assert store.get_message(edited).content == "edit \ufffd"  # type: ignore[union-attr]
    store.rename_conversation(cid, "renamed \ud800")
    assert store.get_conversation(cid).title == "renamed \ufffd"  # type: ignore[union-attr]
    assert [h.conversation_id for h in store.search("renamed")] == [cid]
