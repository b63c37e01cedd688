"""Stop strings split across deltas are found, never shown, and do not delay other text."""

from __future__ import annotations

import random

import pytest

from core.parsing import StopMatcher

CASES = [
    # (stops, stream, shown, stopped)
    (["</s>"], "Hello world</s>ignored", "Hello world", True),
    (["\n\nUser:", "###"], "Answer.\n\nUse this\n\nUser: hi", "Answer.\n\nUse this", True),
    (["abc", "b"], "xxabc", "xxa", True),  # the stop that completes first wins
    (["bc", "abc"], "xxabc", "xx", True),  # same end: the longer one wins
    (["<|im_end|>"], "no stop here <|im_", "no stop here <|im_", False),
    (["aab"], "aaab", "a", True),  # overlapping prefix: the tail re-aligns
    ([], "anything", "anything", False),
]


def run(stops: list[str], pieces: list[str]) -> tuple[str, bool]:
    matcher = StopMatcher(stops)
    shown, stopped = "", False
    for piece in pieces:
        out, stopped = matcher.feed(piece)
        shown += out
    shown += matcher.finish()
    assert stopped == matcher.stopped
    return shown, stopped


@pytest.mark.parametrize(("stops", "stream", "shown", "stopped"), CASES)
def test_any_split_gives_the_same_result(stops, stream, shown, stopped) -> None:
    assert run(stops, [stream]) == (shown, stopped)
    assert run(stops, list(stream)) == (shown, stopped)
    rng = random.Random(7)
    for _ in range(200):
        cuts = sorted(rng.sample(range(1, len(stream)), k=rng.randint(1, len(stream) - 1)))
        bounds = [0, *cuts, len(stream)]
        pieces = [stream[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
        assert run(stops, pieces) == (shown, stopped)


def test_text_that_cannot_start_a_stop_is_not_held() -> None:
    matcher = StopMatcher(["</s>", "\n\nUser:"])
    assert matcher.feed("Hello wor") == ("Hello wor", False)
    assert matcher.feed("ld <") == ("ld ", False)  # '<' could begin </s>
    assert matcher.feed("b>") == ("<b>", False)


def test_after_a_stop_input_is_ignored() -> None:
    matcher = StopMatcher(["STOP"])
    assert matcher.feed("aSTOPb") == ("a", True)
    assert matcher.feed("more") == ("", True)
    assert matcher.finish() == ""


def test_a_reply_cut_by_max_tokens_drops_the_start_of_a_stop_it_was_writing() -> None:
    """A base model's "Hello,\\n\\nUser" at max_tokens is the next turn's marker begun: the
    held tail is dropped when the reply is cut, and shown when it ends otherwise."""
    stops = ["\nUser:", "\nAssistant:", "\n\n\n"]
    for pieces in (["Hello,", "\n\n", "User"], list("Hello,\n\nUser")):
        matcher = StopMatcher(stops)
        shown = "".join(matcher.feed(p)[0] for p in pieces)
        assert shown + matcher.finish(cut=True) == "Hello,\n"
        matcher = StopMatcher(stops)
        shown = "".join(matcher.feed(p)[0] for p in pieces)
        assert shown + matcher.finish() == "Hello,\n\nUser"
