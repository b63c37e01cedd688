"""Tool registry: schemas for the template, argument checks, failures as results."""

from __future__ import annotations

from core.tools import Tool, ToolContext, ToolRegistry, ToolResult
from core.tools.builtins import default_registry
from core.tools.registry import check_arguments


async def _echo(arguments, ctx) -> ToolResult:
    return ToolResult(f"{ctx.conversation_id}:{arguments['n']}")


async def _broken(arguments, ctx) -> ToolResult:
    raise KeyError("boom")


ECHO = Tool("echo", "Echo a number.", {
    "type": "object", "properties": {"n": {"type": "integer"}, "mode": {"type": "string", "enum": ["a", "b"]}},
    "required": ["n"], "additionalProperties": False}, _echo, read_only=True)


def test_schemas_are_openai_function_tools() -> None:
    schemas = default_registry().schemas()
    names = [s["function"]["name"] for s in schemas]
    assert names == ["python", "search_conversations", "read_document", "now"]
    assert all(s["type"] == "function" and s["function"]["parameters"]["type"] == "object"
               for s in schemas)


def test_argument_checks_name_the_problem() -> None:
    assert check_arguments(ECHO, {"n": 1}) is None
    assert check_arguments(ECHO, {}) == "echo needs the argument 'n'."
    assert "must be integer, got str" in check_arguments(ECHO, {"n": "1"})
    assert "must be integer, got bool" in check_arguments(ECHO, {"n": True})
    assert "has no argument 'x'" in check_arguments(ECHO, {"n": 1, "x": 2})
    assert "must be one of" in check_arguments(ECHO, {"n": 1, "mode": "c"})


async def test_call_runs_and_turns_every_failure_into_a_result() -> None:
    reg = ToolRegistry([ECHO, Tool("broken", "", {"type": "object"}, _broken)])
    ctx = ToolContext("conv")
    assert await reg.call("echo", {"n": 3}, ctx) == ToolResult("conv:3")
    missing = await reg.call("nope", {}, ctx)
    assert not missing.ok and "no tool named 'nope'" in missing.text and "echo" in missing.text
    bad = await reg.call("echo", {}, ctx)
    assert not bad.ok
    broken = await reg.call("broken", {}, ctx)
    assert not broken.ok and "KeyError" in broken.text


def test_duplicate_names_are_refused() -> None:
    reg = ToolRegistry([ECHO])
    try:
        reg.register(ECHO)
    except ValueError as exc:
        assert "already registered" in str(exc)
    else:
        raise AssertionError("a second 'echo' was accepted")
