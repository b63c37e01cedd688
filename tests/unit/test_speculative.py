"""Prompt-lookup drafting's pieces (core.engines.speculative): the n-gram index, the
greedy acceptance count and the switch that turns drafting off when it keeps failing."""

from __future__ import annotations

from core.engines.base import SamplingParams
from core.engines.speculative import (
    MAX_DRAFT,
    MAX_MISSES,
    MIN_DRAFTED,
    Acceptance,
    NgramDrafter,
    accepted,
    speculable,
)


def test_the_drafter_continues_the_latest_earlier_occurrence_of_the_last_ngram() -> None:
    d = NgramDrafter([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 8])
    d.extend([1, 2, 3])
    assert d.draft(4) == [7, 8, 1, 2]  # the later "1 2 3" (followed by 7) wins over the first
    d.extend([4])
    assert d.draft(3) == [5, 9, 1]  # the 4-gram "1 2 3 4" occurs once, at the start
    assert NgramDrafter([5, 6, 7]).draft() == []  # nothing repeats yet


def test_drafts_are_kept_up_to_the_first_token_the_model_would_not_pick() -> None:
    assert accepted([4, 5, 6], [4, 5, 9, 1]) == 2
    assert accepted([4, 5, 6], [0, 5, 6, 1]) == 0
    assert accepted([4, 5], [4, 5, 3]) == 2


def test_drafting_turns_itself_off_when_drafts_keep_failing_or_find_nothing() -> None:
    good = Acceptance()
    for _ in range(10):
        good.record(8, 6)
    assert good.on
    bad = Acceptance()
    while bad.drafted < MIN_DRAFTED:
        assert bad.on
        bad.record(8, 1)
    assert not bad.on
    idle = Acceptance()
    for _ in range(MAX_MISSES - 1):
        idle.miss()
    idle.record(4, 4)  # a hit resets the run of misses
    for _ in range(MAX_MISSES - 1):
        idle.miss()
    assert idle.on
    idle.miss()
    assert not idle.on


def test_only_greedy_requests_without_grammar_or_logprobs_speculate() -> None:
    assert speculable(SamplingParams(temperature=0, repetition_penalty=1.2))
    assert not speculable(SamplingParams(temperature=0.7))
    assert not speculable(SamplingParams(temperature=0, logprobs=True))
    assert not speculable(SamplingParams(temperature=0, json_schema="{}"))


def test_the_draft_length_shrinks_after_a_failed_draft_and_grows_back() -> None:
    record = Acceptance()
    record.record(record.k, 1)
    assert record.k == 2  # just past what was accepted
    record.record(2, 2)
    assert record.k == 4
    for _ in range(5):
        record.record(record.k, record.k)
    assert record.k == MAX_DRAFT
