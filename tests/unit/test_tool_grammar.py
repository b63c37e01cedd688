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
    assert tool_format("gemma") is None and tool_format("mistral") is None


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
