"""Whatever a model writes, parsing never raises, never drops content, never depends on
how the stream was split."""

from __future__ import annotations

import random

import pytest

from core.events import ReasoningDelta, TextDelta, ToolCall
from core.parsing import FAMILIES, StreamParser, UnknownFamilyError, family_markers

WORDS = ["hello", " ", "\n", "{", "}", '"name"', ": ", '"f"', "[", "]", "(", ")", "a=1", "<",
         ">", "`", "``", "```", "|", "json", ",", '"arguments"', "{}", "function", "to=functions.f",
         "analysis", "final", "commentary", '{"a": 1}']


def soup(family: str, rng: random.Random) -> str:
    """Random text woven with the family's markers and pieces of them."""
    markers = sorted(family_markers(family))
    parts = []
    for _ in range(rng.randint(5, 40)):
        r = rng.random()
        if r < 0.3:
            parts.append(rng.choice(markers))
        elif r < 0.4:
            m = rng.choice(markers)
            parts.append(m[: rng.randint(1, len(m))])
        else:
            parts.append(rng.choice(WORDS))
    return "".join(parts)


def parse(family: str, pieces: list[str], in_reasoning: bool = False) -> tuple:
    parser = StreamParser(family, in_reasoning=in_reasoning)
    events: list = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    for e in events:
        assert type(e) in (TextDelta, ReasoningDelta, ToolCall)
        if type(e) is ToolCall:
            assert isinstance(e.arguments, dict) and (e.error is None) == (e.raw is None)
    return (
        "".join(e.text for e in events if type(e) is TextDelta),
        "".join(e.text for e in events if type(e) is ReasoningDelta),
        [(e.name, e.arguments, e.raw) for e in events if type(e) is ToolCall],
    )


@pytest.mark.parametrize("family", FAMILIES)
def test_marker_soup_is_split_invariant_and_never_raises(family: str) -> None:
    rng = random.Random(family)
    for _ in range(25):
        text = soup(family, rng)
        in_reasoning = rng.random() < 0.3
        whole = parse(family, [text], in_reasoning)
        assert parse(family, list(text), in_reasoning) == whole
        for _ in range(8):
            cuts = sorted(rng.sample(range(1, len(text)), k=rng.randint(1, len(text) - 1)))
            bounds = [0, *cuts, len(text)]
            pieces = [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False)]
            assert parse(family, pieces, in_reasoning) == whole, text


@pytest.mark.parametrize("family", FAMILIES)
def test_text_without_markers_comes_through_unchanged(family: str) -> None:
    """Prose full of marker-like characters is shown exactly as written."""
    prose = "Compare a < b, x[i] > 0, `code`, ``` fences ```, {braces} and <b>tags</b>."
    if family == "llama3":
        prose = "Sure: " + prose  # a reply starting with '{' is read as a JSON call
    assert parse(family, list(prose)) == (prose, "", [])


def test_unknown_family_is_an_error_a_person_can_act_on() -> None:
    with pytest.raises(UnknownFamilyError) as info:
        StreamParser("qwen4")
    assert info.value.code == "BAD_REQUEST"
    assert "qwen4" in str(info.value) and "qwen3-coder" in str(info.value)


# Nesting a model can write within its token budget, deeper than json.loads (about 1,000)
# or Python's parser (200) can follow: each raised RecursionError or MemoryError out of the
# tool-call parsers instead of becoming a call with an error.
DEEP = ("[" * 5000 + "]" * 5000, '{"name": "f", "arguments": ' + "[" * 5000 + "]" * 5000 + "}",
        "f(a=" + "-" * 100_000 + "1)", "[f(a=" + "not " * 50_000 + "1)]")


@pytest.mark.parametrize("family", FAMILIES)
def test_tool_calls_nested_too_deep_become_errors_not_crashes(family: str) -> None:
    markers = sorted(family_markers(family))
    for body in DEEP:
        text = "".join(m + body for m in markers) + body
        shown, thought, calls = parse(family, [text])
        assert len(shown) + len(thought) + sum(len(raw or "") for _, _, raw in calls) > 0
