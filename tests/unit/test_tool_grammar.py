"""core.engines.tool_grammar without a model: which families are constrained, what a
request may force, and the call schema built from the offered tools."""

from __future__ import annotations

import pytest

from core.engines.tool_grammar import ToolGrammars, calls_schema, tool_format
from tests.fixtures.tool_models import ALARM, TOOLS


def _no_tokenizer() -> None:
    raise AssertionError("a family without a constrained format never builds a tokenizer")


def grammars(family: str) -> ToolGrammars:
    return ToolGrammars(family, _no_tokenizer, str, lambda _text: None, 100)


def test_only_json_between_markers_families_are_constrained() -> None:
    assert tool_format("qwen3") == tool_format("hermes") is not None
    assert tool_format("gemma") is None and tool_format("qwen3-coder") is None
    assert tool_format("glm") is None and tool_format("deepseek") is None
    assert tool_format("llama3").args_key == "parameters" and tool_format("mistral").array


def test_an_unconstrained_family_runs_free_but_cannot_be_forced() -> None:
    g = grammars("gemma")
    assert g.guide(TOOLS) is None and g.guide(TOOLS, "none") is None
    with pytest.raises(ValueError, match="cannot be forced while decoding"):
        g.guide(TOOLS, "required")
    with pytest.raises(ValueError, match="cannot be forced"):
        g.guide(TOOLS, "required", "set_alarm")
    assert grammars("hermes").guide((), "auto") is None  # no tools: nothing to hold


def test_the_call_schema_pairs_each_name_with_its_own_parameters() -> None:
    schema = calls_schema(TOOLS)
    names = [o["properties"]["name"]["const"] for o in schema["anyOf"]]
    assert names == ["get_weather", "set_alarm"]
    assert schema["anyOf"][1]["properties"]["arguments"] == ALARM["function"]["parameters"]
    assert schema["x-guidance"] == {"whitespace_flexible": False}
    one = calls_schema(TOOLS, only="set_alarm")
    assert "anyOf" not in one and one["properties"]["name"] == {"const": "set_alarm"}
    bare = calls_schema([{"type": "function", "function": {"name": "now"}}])
    assert bare["properties"]["arguments"] == {"type": "object"}  # no parameters: any object
    with pytest.raises(ValueError, match="not among the offered tools"):
        calls_schema(TOOLS, only="nope")
    with pytest.raises(ValueError, match=r"tools\[0\] has no function name"):
        calls_schema([{"type": "function", "function": {}}])


def byte_grammars(family: str) -> tuple[ToolGrammars, object]:
    """ToolGrammars over llguidance's byte tokenizer (no model: one token a character)."""
    import llguidance

    tok = llguidance.LLTokenizer("byte")
    return ToolGrammars(family, lambda: tok, lambda t: chr(t) if t < 256 else "",
                        lambda _text: None, tok.vocab_size), tok


GOOD = '{"hour":7,"loud":true}'
CALLS = {  # family: (a valid forced call, the same with a bad name, with a bad argument)
    "llama3": ('<|python_tag|>{"name":"set_alarm","parameters":' + GOOD + "}",
               '<|python_tag|>{"name":"set_clock","parameters":' + GOOD + "}",
               '<|python_tag|>{"name":"set_alarm","parameters":{"hour":77,'),
    "mistral": ('[TOOL_CALLS][{"name":"set_alarm","arguments":' + GOOD + '},{"name":"get_weather",'
                '"arguments":{"city":"Oslo","unit":"celsius","days":2}}]',
                '[TOOL_CALLS][{"name":"set_clock",',
                '[TOOL_CALLS][{"name":"set_alarm","arguments":{"hour":7,"loud":1'),
    "mistral-v11": ("[TOOL_CALLS]set_alarm[ARGS]" + GOOD, "[TOOL_CALLS]set_clock[ARGS]" + GOOD,
                    '[TOOL_CALLS]get_weather[ARGS]{"city":"Oslo","unit":"kelvin"'),
    "kimi": ("<|tool_calls_section_begin|><|tool_call_begin|>functions.set_alarm:0"
             "<|tool_call_argument_begin|>" + GOOD + "<|tool_call_end|>",
             "<|tool_calls_section_begin|><|tool_call_begin|>functions.set_clock:0",
             "<|tool_calls_section_begin|><|tool_call_begin|>functions.set_alarm:0"
             '<|tool_call_argument_begin|>{"hour":7}<|tool_call_end|>'),
}


@pytest.mark.parametrize("family", sorted(CALLS))
def test_json_after_an_opener_formats_accept_a_valid_call_and_no_other(family) -> None:
    from core.engines.tool_grammar import MISTRAL_NAMED, mask_of

    gr, tok = byte_grammars(family.removesuffix("-v11"))
    if family == "mistral-v11":  # chosen by an [ARGS] token, which bytes lack
        gr.format = MISTRAL_NAMED
    good, bad_name, bad_arg = CALLS[family]
    for text, fits in ((good, True), (bad_name, False), (bad_arg, False)):
        guide = gr.guide(TOOLS, "required")
        ids = tok.tokenize_str(text)
        assert (guide.matcher.try_consume_tokens(ids) == len(ids)) is fits, text
    guide = gr.guide(TOOLS, "required")
    for t in tok.tokenize_str(good):
        guide.advance(t)
    if gr.format.closer:  # closed by its marker: the text is free again
        assert not guide.constrained and guide.calls == 1
        return
    assert guide.constrained  # no closer: the call ends only with the end-of-message token
    assert mask_of(guide.allowed(), tok.vocab_size).nonzero()[0].tolist() == [tok.eos_token]
    guide.advance(tok.eos_token)
    assert not guide.constrained


def test_a_mistral_call_drafted_in_a_think_block_stays_free() -> None:
    """Magistral's [THINK] (and <think>) hold reasoning: a [TOOL_CALLS] there is not a call,
    and constrained it would end the reply at its end token."""
    gr, tok = byte_grammars("mistral")
    for draft in ("[THINK]maybe [TOOL_CALLS][{ no[/THINK]", "<think>[TOOL_CALLS]?</think>"):
        guide = gr.guide(TOOLS)
        for t in tok.tokenize_str(draft):
            guide.advance(t)
        assert not guide.constrained and guide.calls == 0, draft
        for t in tok.tokenize_str("ok [TOOL_CALLS]"):
            guide.advance(t)
        assert guide.constrained and guide.calls == 1, draft


def _forcing(tool_choice: str = "required", tool_name: str | None = None, **kw):
    from core.engines.base import GenerationRequest, SamplingParams

    return GenerationRequest("r", ({"role": "user", "content": "hi"},), SamplingParams(**kw),
                             tools=TOOLS, tool_choice=tool_choice, tool_name=tool_name)


def test_a_forced_call_is_generic_where_the_model_has_no_format_to_force() -> None:
    from core.engines.tool_grammar import forces_generic_call

    assert forces_generic_call(_forcing(), "gemma", base_model=False)
    assert forces_generic_call(_forcing(tool_name="set_alarm"), "plain", base_model=False)
    assert forces_generic_call(_forcing(), "hermes", base_model=True)  # a base transcript
    assert not forces_generic_call(_forcing(), "hermes", base_model=False)  # its own format
    assert not forces_generic_call(_forcing("auto"), "gemma", base_model=True)
    assert not forces_generic_call(_forcing(json_schema='{"type": "object"}'), "gemma", False)


@pytest.mark.parametrize("family", ["gemma", "plain", "hermes"])
def test_a_generic_call_is_one_bare_json_object_then_only_the_end_token(family) -> None:
    from core.engines.tool_grammar import mask_of

    gr, tok = byte_grammars(family)
    good = '{"name":"set_alarm","arguments":' + GOOD + "}"
    for text, fits in ((good, True), ('{"name":"set_clock",', False),
                       ('{"name":"set_alarm","arguments":{"hour":77', False),
                       ("Sure! " + good, False), ("<tool_call>" + good, False)):
        guide = gr.guide(TOOLS, "required", generic=True)
        ids = tok.tokenize_str(text)
        assert (guide.matcher.try_consume_tokens(ids) == len(ids)) is fits, (family, text)
    guide = gr.guide(TOOLS, "required", "get_weather", generic=True)
    assert guide.matcher.try_consume_tokens(tok.tokenize_str(good)) < len(good)  # not named
    guide = gr.guide(TOOLS, "required", generic=True)
    first = mask_of(guide.allowed(), tok.vocab_size).nonzero()[0].tolist()
    assert first == [ord("{")] and tok.eos_token not in first  # no end before the call
    for t in tok.tokenize_str(good):
        guide.advance(t)
    assert mask_of(guide.allowed(), tok.vocab_size).nonzero()[0].tolist() == [tok.eos_token]
    guide.advance(tok.eos_token)
    assert not guide.constrained and guide.calls == 1


def test_the_generic_prompt_lists_the_tools_it_may_call() -> None:
    from core.engines.tool_grammar import generic_call_messages

    msgs = ({"role": "user", "content": "Wake me at 7"},)
    note, user = generic_call_messages(msgs, TOOLS, None)
    assert note["role"] == "system" and user == msgs[0]
    assert '"name": "set_alarm"' in note["content"] and '"name": "get_weather"' in note["content"]
    note, _ = generic_call_messages(msgs, TOOLS, "set_alarm")
    assert "get_weather" not in note["content"]
