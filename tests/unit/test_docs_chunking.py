"""Chunks are token windows with overlap that never cross a page and keep its label."""

from __future__ import annotations

import pytest

from core.docs.chunking import chunk_sections, chunk_text, count_tokens
from core.docs.extract import Section


def test_count_tokens_splits_words_and_punctuation() -> None:
    assert count_tokens("Hello, world!") == 4
    assert count_tokens("") == 0


def test_windows_overlap_by_the_requested_tokens() -> None:
    text = " ".join(f"w{i}" for i in range(100))
    chunks = chunk_text("doc.txt", "", text, max_tokens=30, overlap=10)
    assert all(c.tokens <= 30 for c in chunks)
    first, second = chunks[0].text.split(), chunks[1].text.split()
    assert first[-10:] == second[:10]
    # every word is covered, the last chunk ends at the end
    assert chunks[-1].text.endswith("w99")
    covered = {w for c in chunks for w in c.text.split()}
    assert covered == {f"w{i}" for i in range(100)}


def test_chunks_keep_section_labels_and_do_not_cross_them() -> None:
    sections = [Section("p.1", "alpha " * 50), Section("p.2", "bravo " * 50)]
    chunks = chunk_sections("r.pdf", sections, max_tokens=20, overlap=5)
    assert {c.label for c in chunks} == {"p.1", "p.2"}
    assert all(("alpha" in c.text) != ("bravo" in c.text) for c in chunks)
    assert chunks[0].source == "r.pdf p.1"
    assert chunk_sections("x.txt", [Section("", "one two")])[0].source == "x.txt"


def test_original_formatting_is_kept_inside_a_chunk() -> None:
    table = "| a | b |\n|---|---|\n| 1 | 2 |"
    [chunk] = chunk_text("t.csv", "", table, max_tokens=100, overlap=0)
    assert chunk.text == table


def test_bad_sizes_are_refused() -> None:
    with pytest.raises(ValueError, match="overlap"):
        chunk_sections("d", [Section("", "x")], max_tokens=10, overlap=10)
    with pytest.raises(ValueError, match="max_tokens"):
        chunk_sections("d", [Section("", "x")], max_tokens=0, overlap=0)
