"""Every family's real-format samples give the same events however the stream is split."""

from __future__ import annotations

import json
import random
import re

import pytest

from core.events import ReasoningDelta, TextDelta, ToolCall, ToolCallDelta
from core.parsing import FAMILIES, StreamParser, family_markers
from tests.fixtures.parsing_samples import SAMPLES, Sample

RANDOM_SPLITS = 200
MARKDOWN = {"```"}  # gemma closes tool_code with a fence that ordinary answers use too


def run(sample: Sample, pieces: list[str]) -> list:
    parser = StreamParser(sample.family, in_reasoning=sample.in_reasoning)
    events: list = []
    for piece in pieces:
        events += parser.feed(piece)
    events += parser.finish()
    return events


def normalise(events: list) -> tuple[str, str, list]:
    """Concatenated text, concatenated reasoning, and the calls (ids compared separately)."""
    text = "".join(e.text for e in events if type(e) is TextDelta)
    reasoning = "".join(e.text for e in events if type(e) is ReasoningDelta)
    calls = [(c.name, c.arguments, c.raw) for c in events if type(c) is ToolCall]
    return text, reasoning, calls


def splits(text: str, seed: int) -> list[str]:
    rng = random.Random(seed)
    cuts = sorted(rng.sample(range(1, len(text)), k=rng.randint(1, max(1, len(text) // 3))))
    bounds = [0, *cuts, len(text)]
    return [text[a:b] for a, b in zip(bounds, bounds[1:], strict=False) if b > a]


def check(sample: Sample, events: list) -> None:
    assert all(type(e) in (TextDelta, ReasoningDelta, ToolCall, ToolCallDelta) for e in events)
    assert all(e.text for e in events if type(e) in (TextDelta, ReasoningDelta)), "no empty deltas"
    check_streamed_arguments(sample, events)
    text, reasoning, calls = normalise(events)
    assert (text, reasoning, calls) == (sample.text, sample.reasoning, list(sample.calls))
    tool_calls = [e for e in events if type(e) is ToolCall]
    for c in tool_calls:
        assert c.id
        assert (c.error is None) == (c.raw is None), "error and raw come together"
    assert len({c.id for c in tool_calls}) == len(tool_calls)
    if sample.ids:
        assert tuple(c.id for c in tool_calls) == sample.ids


def check_streamed_arguments(sample: Sample, events: list) -> None:
    """A call streamed as ToolCallDeltas opens once (id and name first), and its argument
    pieces rebuild the arguments of the ToolCall that follows with the same id."""
    pieces: dict[str, list[str]] = {}
    for e in events:
        if type(e) is ToolCallDelta:
            if e.name is not None:
                assert e.id not in pieces and e.arguments == ""
                pieces[e.id] = []
            else:
                assert e.arguments and e.id in pieces
                pieces[e.id].append(e.arguments)
        elif type(e) is ToolCall and e.id in pieces and e.error is None:
            got = pieces.pop(e.id)  # none when the arguments were not an object (sent whole)
            assert not got or json.loads("".join(got)) == e.arguments
    assert not pieces or sample.malformed, "a streamed call always ends in its ToolCall"


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda s: s.id)
def test_sample_whole_one_char_and_random_splits(sample: Sample) -> None:
    check(sample, run(sample, [sample.stream]))
    check(sample, run(sample, list(sample.stream)))
    for seed in range(RANDOM_SPLITS):
        check(sample, run(sample, splits(sample.stream, seed)))


@pytest.mark.parametrize("sample", [s for s in SAMPLES if not s.malformed], ids=lambda s: s.id)
def test_markup_never_reaches_text(sample: Sample) -> None:
    for pieces in ([sample.stream], list(sample.stream)):
        text, reasoning, _ = normalise(run(sample, pieces))
        for marker in family_markers(sample.family) - MARKDOWN:
            assert marker not in text
            assert marker not in reasoning


def test_every_family_has_samples_and_a_malformed_one() -> None:
    families = {s.family for s in SAMPLES}
    assert families == set(FAMILIES)
    with_tools = set(FAMILIES) - {"plain"}
    assert with_tools <= {s.family for s in SAMPLES if s.malformed}


def test_text_streams_before_the_stream_ends() -> None:
    """Deltas come out as they arrive, not at finish (the UI streams them)."""
    parser = StreamParser("qwen3")
    assert parser.feed("<think>\nplanning") == [ReasoningDelta("planning")]
    assert parser.feed(" more</think>\n\nHel") == [ReasoningDelta(" more"), TextDelta("Hel")]
    assert parser.feed("lo <") == [TextDelta("lo ")]  # '<' may start a marker: held
    assert parser.feed("b>") == [TextDelta("<b>")]
    assert parser.finish() == []


def test_tool_call_is_emitted_when_its_block_closes() -> None:
    """... and streams its name and arguments while it is written."""
    parser = StreamParser("hermes")
    assert parser.feed('<tool_call>{"name": "f", "arguments": {"x": [1, ') == [
        ToolCallDelta(ANY_ID, "f", ""), ToolCallDelta(ANY_ID, None, '{"x": [1, ')]
    assert parser.feed('"}"]}}') == [ToolCallDelta(ANY_ID, None, '"}"]}')]  # not the body's }
    (call,) = parser.feed("</tool_call>")
    assert isinstance(call, ToolCall) and call.name == "f" and call.arguments == {"x": [1, "}"]}


class _AnyId(str):
    def __eq__(self, other: object) -> bool:
        return isinstance(other, str) and other.startswith("call_")

    __hash__ = str.__hash__


ANY_ID = _AnyId()


def test_mistral_ids_fit_its_template() -> None:
    """Mistral's template rejects tool_call ids that are not 9 alphanumeric characters."""
    events = run(SAMPLES[[s.id for s in SAMPLES].index("mistral:new args form")],
                 ['[TOOL_CALLS]f[ARGS]{}[TOOL_CALLS]g[ARGS]{}'])
    ids = [e.id for e in events if type(e) is ToolCall]
    assert len(ids) == 2 and all(re.fullmatch(r"[0-9a-zA-Z]{9}", i) for i in ids)


def test_family_and_in_reasoning_exposed() -> None:
    parser = StreamParser("gpt-oss", in_reasoning=True)
    assert parser.family == "gpt-oss"
    assert parser.feed("thinking") == [ReasoningDelta("thinking")]
    # Families without a reasoning block ignore in_reasoning.
    assert StreamParser("gemma", in_reasoning=True).feed("hi") == [TextDelta("hi")]


def test_the_json_call_reader_turns_a_bare_call_into_a_tool_call_for_any_chunking() -> None:
    """A forced call on a model without its own format (core.engines.tool_grammar.GENERIC)."""
    from core.events import TextDelta, ToolCall
    from core.parsing import JSON_CALL

    reply = '{"name":"set_alarm","arguments":{"hour":7,"loud":true}}'
    for size in (1, 3, len(reply)):
        parser = StreamParser(JSON_CALL)
        events = [e for i in range(0, len(reply), size) for e in parser.feed(reply[i:i + size])]
        events += parser.finish()
        [call] = events
        assert isinstance(call, ToolCall) and call.error is None
        assert (call.name, call.arguments) == ("set_alarm", {"hour": 7, "loud": True})
    cut = StreamParser(JSON_CALL)  # cut by max_tokens: shown as the text it is
    events = cut.feed('{"name":"set_al') + cut.finish()
    assert "".join(e.text for e in events if isinstance(e, TextDelta)) == '{"name":"set_al'
    assert JSON_CALL not in FAMILIES  # a reader, not a family settings may name
