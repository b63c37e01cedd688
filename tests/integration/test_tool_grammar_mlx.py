"""Tool calls under a grammar on the MLX engine (core.engines.tool_grammar), with the tiny
random-weight model whose template offers tools the Hermes way. The model writes nothing
sensible by itself, so a well-formed call can only come from the grammar."""

from __future__ import annotations

import json

import pytest

from core.engines.base import GenerationRequest, ModelSpec, SamplingParams
from core.engines.mlx import MlxEngine
from core.events import Error, TextDelta, ToolCall, ToolCallDelta
from core.parsing import StreamParser
from tests.fixtures.engines import drain
from tests.fixtures.tool_models import ALARM, TOOLS, build_tool_model_dir, valid_arguments

WEATHER_Q = ({"role": "user", "content": "What is the weather in Paris this week?"},)


@pytest.fixture(scope="module")
def engine(tmp_path_factory):
    path = build_tool_model_dir(tmp_path_factory.mktemp("tiny-tools"))
    eng = MlxEngine(ModelSpec(str(path), "mlx", context_size=1024,
                              options=(("max_concurrency", 8), ("warmup_batch_sizes", (1, 2)))))
    yield eng
    eng.close()


def ask(rid: str, *, tools=TOOLS, seed: int | None = None, **kw) -> GenerationRequest:
    sp = SamplingParams(temperature=1.0 if seed is not None else 0.0, seed=seed, max_tokens=160)
    return GenerationRequest(rid, WEATHER_Q, sp, tools=tuple(tools), **kw)


def run(engine: MlxEngine, *acts) -> dict[str, list]:
    """Submit requests (or admitted _Requests) together and collect their events."""
    engine._prefix.clear()
    for act in acts:
        if isinstance(act, GenerationRequest):
            engine.submit(act)
        else:
            engine._pending.append(act)
    return drain(engine)


def text_of(evs: list) -> str:
    return "".join(e.text for e in evs if isinstance(e, TextDelta))


def parsed(text: str) -> list:
    parser = StreamParser("hermes")
    return parser.feed(text) + parser.finish()


def calls_in(text: str) -> list[ToolCall]:
    return [e for e in parsed(text) if isinstance(e, ToolCall)]


def test_a_forced_call_fits_the_offered_schemas_on_every_seed(engine):
    assert engine._tool_grammars.format is not None  # the template made it the hermes family
    events = run(engine, *[ask(f"s{seed}", seed=seed, tool_choice="required") for seed in range(10)])
    for seed in range(10):
        text = text_of(events[f"s{seed}"])
        assert text.startswith("<tool_call>"), text
        [first, *_] = calls_in(text)
        assert first.error is None, text
        assert first.name in ("get_weather", "set_alarm")
        assert valid_arguments(first.name, first.arguments), text


def test_without_the_grammar_the_same_opener_gives_no_valid_call(engine):
    """The baseline: the prompt itself ends in the opener and nothing constrains the rest."""
    acts = []
    for seed in range(10):
        req = ask(f"free{seed}", seed=seed)
        prompt = engine.render_prompt(req) + engine._tokenizer.encode("<tool_call>\n",
                                                                      add_special_tokens=False)
        acts.append(engine._admit(GenerationRequest(req.request_id, req.messages, req.sampling),
                                  prompt=prompt))
    events = run(engine, *acts)
    for seed in range(10):
        body = text_of(events[f"free{seed}"]).split("</tool_call>")[0]
        with pytest.raises(ValueError):
            json.loads(body)


def test_a_named_tool_choice_calls_that_tool(engine):
    events = run(engine, *[ask(f"n{seed}", seed=seed, tool_choice="required", tool_name="set_alarm")
                           for seed in range(3)])
    for seed in range(3):
        [call, *_] = calls_in(text_of(events[f"n{seed}"]))
        assert call.name == "set_alarm" and valid_arguments("set_alarm", call.arguments)


def test_a_constrained_row_shares_a_batch_with_free_rows(engine):
    free = [GenerationRequest(f"free{i}", ({"role": "user", "content": f"Tell me a story {i}"},),
                              SamplingParams(temperature=0.0, max_tokens=40)) for i in range(2)]
    alone = {r.request_id: text_of(run(engine, r)[r.request_id]) for r in free}
    tool = ask("tool", seed=7, tool_choice="required")
    events = run(engine, free[0], tool, free[1])
    [call, *_] = calls_in(text_of(events["tool"]))
    assert call.error is None and valid_arguments(call.name, call.arguments)
    for r in free:  # the free rows decode exactly as they do alone
        assert text_of(events[r.request_id]) == alone[r.request_id]
        assert not calls_in(alone[r.request_id])


def test_a_call_opened_mid_reply_is_constrained_until_it_closes(engine):
    """Auto mode, driven by hand: free text, the opener (split over tokens), a call walked
    through the grammar's masks, free text again, and a second call."""
    from core.engines.tool_grammar import mask_of

    tg = engine._tool_grammars
    guide = tg.guide(TOOLS)
    assert guide is not None and not guide.constrained
    encode = engine._tokenizer.encode

    def write(text: str) -> None:
        for token in encode(text, add_special_tokens=False):
            guide.advance(token)

    def walk() -> str:
        """Take the lowest-numbered allowed token until the call closes."""
        out = []
        while guide.constrained:
            allowed = mask_of(guide.allowed(), tg.vocab_size)
            token = int(allowed.nonzero()[0][0])
            out.append(token)
            guide.advance(token)
        return engine._tokenizer.decode(out)

    write("<think>Should I write <tool_call> now? No.</think>")
    assert not guide.constrained  # a call thought about is not a call
    write("Let me look that up. <tool_")
    assert not guide.constrained
    write("call>")
    assert guide.constrained
    first = walk()
    write(" Now the alarm: <tool_call>\n")
    second = walk()
    assert guide.calls == 2
    for body in (first, second):
        [call] = calls_in("<tool_call>" + body)
        assert call.error is None and valid_arguments(call.name, call.arguments), body


BROKEN = {"type": "function", "function": {"name": "broken", "parameters": {
    "type": "object", "properties": {"x": {"type": "string", "minLength": "two"}}}}}


def test_a_forced_call_to_unusable_schemas_or_tools_is_a_bad_request(engine):
    evs = run(engine, ask("bad", tools=[BROKEN], tool_choice="required"))["bad"]
    assert isinstance(evs[0], Error) and evs[0].code == "BAD_REQUEST", evs
    assert "tool schemas cannot be enforced" in evs[0].message
    evs = run(engine, ask("nameless", tool_choice="required",
                          tools=[{"type": "function", "function": {"name": "x", "parameters": 3}}]))
    assert "'parameters' must be a JSON schema object" in evs["nameless"][0].message
    evs = run(engine, ask("who", tool_choice="required", tool_name="nope"))["who"]
    assert isinstance(evs[0], Error) and "not among the offered tools" in evs[0].message
    # a good request right after still works
    [call, *_] = calls_in(text_of(run(engine, ask("ok", tools=[ALARM], seed=1,
                                                  tool_choice="required"))["ok"]))
    assert call.name == "set_alarm" and valid_arguments("set_alarm", call.arguments)


def test_left_free_a_tool_whose_schema_cannot_be_enforced_takes_any_object(engine):
    """An MCP server's odd schema must not fail every chat turn that offers its tools."""
    encode = engine._tokenizer.encode

    def accepted(body: str) -> bool:
        """Whether the call's matcher takes every token of `body` after the opener."""
        guide = engine._tool_grammars.guide([BROKEN, ALARM])
        for token in encode("<tool_call>", add_special_tokens=False):
            guide.advance(token)
        assert guide.constrained
        for token in encode(body, add_special_tokens=False):
            guide.advance(token)
            if not guide.constrained:
                return False
        return True

    assert accepted('{"name":"broken","arguments":{"y":[1,{"z":null}]}')
    assert not accepted('{"name":"nope"')  # the names are still held to the offered ones
    assert not accepted('{"name":"set_alarm","arguments":{"hour":"seven"')  # and ALARM's schema
    assert run(engine, ask("auto", tools=[BROKEN, ALARM]))["auto"][-1].finish_reason == "length"


def test_the_parser_streams_argument_deltas_that_rebuild_the_call(engine):
    text = text_of(run(engine, ask("d", seed=3, tool_choice="required"))["d"])
    parser = StreamParser("hermes")
    events = []
    for token in engine._tokenizer.encode(text, add_special_tokens=False):
        events += parser.feed(engine._tokenizer.decode([token]))
    events += parser.finish()
    deltas = [e for e in events if isinstance(e, ToolCallDelta)]
    call = next(e for e in events if isinstance(e, ToolCall))
    opened = [d for d in deltas if d.name is not None]
    assert opened[0].id == call.id and opened[0].name == call.name
    pieces = [d.arguments for d in deltas if d.id == call.id and d.name is None]
    assert len(pieces) > 1
    assert json.loads("".join(pieces)) == call.arguments
