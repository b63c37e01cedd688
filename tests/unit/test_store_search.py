"""FTS5 search: ranking, snippets, prefix and phrase, titles, and odd input."""

from __future__ import annotations

import re

import pytest

from core.store import HIGHLIGHT_END, HIGHLIGHT_START, Store, fts_query, snippet_parts
from tests.fixtures.store import store_fixture, store_path_fixture  # noqa: F401


def _conv(store: Store, title: str | None, *texts: str) -> str:
    cid = store.create_conversation(title)
    for text in texts:
        store.add_message(cid, "user", text)
    return cid


def test_finds_words_with_highlighted_snippets(store: Store) -> None:
    cid = _conv(store, "Kitchen", "How long should sourdough bread proof overnight?")
    _conv(store, "Cars", "My engine makes a rattling noise")
    hits = store.search("sourdough")
    assert [h.conversation_id for h in hits] == [cid]
    hit = hits[0]
    assert hit.title == "Kitchen" and hit.message_id is not None
    assert f"{HIGHLIGHT_START}sourdough{HIGHLIGHT_END}" in hit.snippet
    assert ("sourdough", True) in snippet_parts(hit.snippet)


def test_bm25_ranks_denser_matches_first(store: Store) -> None:
    sparse = _conv(store, None, "python " + "filler words about other things " * 20)
    dense = _conv(store, None, "python python python tips")
    assert [h.conversation_id for h in store.search("python")] == [dense, sparse]
    ranks = [h.rank for h in store.search("python")]
    assert ranks == sorted(ranks)


def test_one_hit_per_conversation(store: Store) -> None:
    cid = _conv(store, None, "tomato soup", "tomato salad", "tomato sauce")
    hits = store.search("tomato")
    assert len(hits) == 1 and hits[0].conversation_id == cid


def test_prefix_query(store: Store) -> None:
    cid = _conv(store, None, "configuration of the tokenizer")
    assert [h.conversation_id for h in store.search("tokeni*")] == [cid]
    assert store.search("tokeni") == []


def test_phrase_query_needs_adjacent_words(store: Store) -> None:
    together = _conv(store, None, "the quick brown fox")
    apart = _conv(store, None, "brown bears are quick")
    assert {h.conversation_id for h in store.search("quick brown")} == {together, apart}
    assert [h.conversation_id for h in store.search('"quick brown"')] == [together]


def test_or_and_not_between_terms_are_operators(store: Store) -> None:
    cats = _conv(store, None, "cats purr")
    dogs = _conv(store, None, "dogs bark")
    both = _conv(store, None, "cats and dogs")
    assert {h.conversation_id for h in store.search("cats OR dogs")} == {cats, dogs, both}
    assert {h.conversation_id for h in store.search("cats NOT dogs")} == {cats}


def test_titles_are_searchable_and_renames_reindex(store: Store) -> None:
    cid = _conv(store, "Quarterly budget", "numbers")
    hits = store.search("budget")
    assert hits[0].conversation_id == cid and hits[0].message_id is None
    assert f"{HIGHLIGHT_START}budget{HIGHLIGHT_END}" in hits[0].snippet
    store.rename_conversation(cid, "Holiday plans")
    assert store.search("budget") == []
    assert [h.conversation_id for h in store.search("holiday")] == [cid]


def test_updates_and_deletes_keep_the_index_in_sync(store: Store) -> None:
    cid = store.create_conversation()
    mid = store.add_message(cid, "assistant", "draft about giraffes", status="partial")
    store.update_message(mid, content="final text about elephants")
    assert store.search("giraffes") == []
    assert [h.message_id for h in store.search("elephants")] == [mid]
    store.delete_conversation(cid)
    assert store.search("elephants") == []


def test_accents_fold(store: Store) -> None:
    cid = _conv(store, None, "un café crème")
    assert [h.conversation_id for h in store.search("cafe creme")] == [cid]


def test_limit(store: Store) -> None:
    for i in range(5):
        _conv(store, None, f"shared word {i}")
    assert len(store.search("shared", limit=3)) == 3
    assert store.search("shared", limit=0) == []


MALFORMED = [
    '"', '""', '"unbalanced quote', 'word"', '*', '**', 'AND', 'OR', 'NOT', 'apple AND',
    'AND apple', 'apple OR', 'NOT apple', 'apple NOT', 'apple AND OR banana', '(', ')',
    '(apple', 'apple)', 'apple(banana)', 'NEAR(apple banana', 'NEAR/3', 'apple:', ':apple',
    'content:apple', 'title:apple', '^apple', 'apple^', '-apple', 'apple -banana', '+apple',
    'apple*banana', '*apple', 'apple**', '"apple" "', "'apple'", 'apple\\', '\\"', '{apple}',
    '[apple]', 'apple; DROP TABLE messages; --', '%', '_', '$$', 'apple \x00 banana',
    '"apple" AND', 'apple AND "', '    ', '', 'a"b"c', 'apple NEAR banana', '@#!',
    'apple,banana', 'apple/banana', '🍎 apple',
]


@pytest.mark.parametrize("query", MALFORMED)
def test_malformed_queries_never_raise(store: Store, query: str) -> None:
    _conv(store, "fruit", "apple banana smoothie")
    hits = store.search(query)
    assert isinstance(hits, list)
    words = {w.lower() for w in re.findall(r"\w+", query)} - {"and", "or", "not"}
    if words and words <= {"apple", "banana"}:
        # Only words the message holds: searched as plain words, it is found.
        assert len(hits) == 1, fts_query(query)


def test_malformed_list_is_long_enough() -> None:
    assert len(MALFORMED) >= 30


def test_fts_query_quotes_everything_it_passes_on() -> None:
    assert fts_query('apple AND') == '"apple"'
    assert fts_query('NEAR(apple') == '"NEAR(apple"'
    assert fts_query('tok*') == '"tok"*'
    assert fts_query('"two words"') == '"two words"'
    assert fts_query('a OR b') == '"a" OR "b"'
    assert fts_query('* ( )') is None


def test_snippet_is_a_window_around_the_matches(store: Store) -> None:
    text = " ".join(f"w{i}" for i in range(100)) + " needle " + " ".join(f"x{i}" for i in range(100))
    cid = _conv(store, None, text)
    (hit,) = store.search("needle")
    assert hit.conversation_id == cid
    assert hit.snippet.startswith("…") and hit.snippet.endswith("…")
    assert "«needle»" in hit.snippet
    assert len(hit.snippet.split()) == 12


def test_snippet_marks_prefix_folded_and_phrase_hits_but_not_negated_ones(store: Store) -> None:
    _conv(store, None, "Tokenizers and the Café tokenizer\nsplit words")
    assert store.search("token*")[0].snippet == "«Tokenizers» and the Café «tokenizer» split words"
    assert store.search("cafe")[0].snippet == "Tokenizers and the «Café» tokenizer split words"
    assert store.search('"split words"')[0].snippet.endswith("«split» «words»")
    assert "«" not in store.search("split NOT zebra")[0].snippet.replace("«split»", "")


def test_ranking_is_bm25_among_the_newest_candidates(store: Store, monkeypatch: pytest.MonkeyPatch) -> None:
    import core.store.search as search_module

    old_dense = _conv(store, None, "kiwi kiwi kiwi kiwi")
    newer = [_conv(store, None, f"kiwi and {i} other words here") for i in range(3)]
    assert store.search("kiwi")[0].conversation_id == old_dense
    monkeypatch.setattr(search_module, "CANDIDATES", 3)
    assert {h.conversation_id for h in store.search("kiwi")} == set(newer)
