"""DeepSeek V3 / R1 / V3.1 tool calls (full-width bar and ▁ markers) and R1's <think>.

V3/R1:  <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>function<｜tool▁sep｜>name
        ```json {..} ```<｜tool▁call▁end｜><｜tool▁calls▁end｜>
V3.1:   <｜tool▁calls▁begin｜><｜tool▁call▁begin｜>name<｜tool▁sep｜>{..}<｜tool▁call▁end｜>...
"""

from __future__ import annotations

from core.events import ToolCall

from ..scanner import Ids
from ..toolargs import bad_call, named_json_call
from ._common import sectioned_calls_grammar

CALLS_BEGIN = "<｜tool▁calls▁begin｜>"
CALLS_END = "<｜tool▁calls▁end｜>"
CALL_BEGIN = "<｜tool▁call▁begin｜>"
CALL_END = "<｜tool▁call▁end｜>"
SEP = "<｜tool▁sep｜>"


def _fenced(text: str) -> str:
    """The JSON inside an optional ```json fence."""
    text = text.strip()
    if text.startswith("```"):
        text = text[3:]
        if text.startswith("json"):
            text = text[4:]
        if text.rstrip().endswith("```"):
            text = text.rstrip()[:-3]
    return text


def deepseek_call(ids: Ids, body: str) -> ToolCall:
    head, sep, rest = body.partition(SEP)
    if not sep:
        return bad_call(ids, "", body.strip(), "tool call has no <｜tool▁sep｜> separator")
    if head.strip() == "function":  # V3/R1: type, then name on its own line, then a fence
        name, _, args = rest.partition("\n")
        return named_json_call(ids, name.strip(), _fenced(args))
    return named_json_call(ids, head.strip(), _fenced(rest))


GRAMMAR = sectioned_calls_grammar(
    "deepseek", (CALLS_BEGIN, CALLS_END, CALL_BEGIN, CALL_END), deepseek_call
)
