"""The turn's tool loop end to end: scripted model (hermes tool calls) in a real worker
process, real parser, real SQLite, real sandbox process."""

from __future__ import annotations

import asyncio

from core.config import Settings
from core.events import Done, TextDelta, ToolCall
from core.runtime import Runtime
from core.tools import DENIED, ToolStatus
from tests.fixtures.tools import ApproverRecording, hermes_call, scripted_runtime


async def _run(rt: Runtime, text: str, approve=None, cid: str | None = None):
    turn = await rt.start_turn(cid, text)
    turn.approve = approve
    events = [e async for e in turn.events()]
    return turn, events


def _states(events) -> list[str]:
    return [e.state for e in events if isinstance(e, ToolStatus)]


async def test_python_call_is_approved_run_stored_and_the_model_continues() -> None:
    rt = scripted_runtime([
        hermes_call("python", {"code": "x = 6 * 7\nprint('computing')\nx"}, text="Let me compute."),
        "The answer is 42.",
    ])
    await rt.start()
    try:
        approve = ApproverRecording("allow")
        turn, events = await _run(rt, "What is 6 times 7?", approve)
        assert approve.asked == ["python"]
        calls = [e for e in events if isinstance(e, ToolCall)]
        assert [c.name for c in calls] == ["python"]
        assert _states(events) == ["awaiting-approval", "running", "done"]
        done = [e for e in events if isinstance(e, ToolStatus)][-1]
        assert done.result == "computing\n42"
        text = "".join(e.text for e in events if isinstance(e, TextDelta))
        assert "Let me compute." in text and "The answer is 42." in text
        assert [e for e in events if isinstance(e, Done)] == [Done("stop")], "one Done, at the end"
        # Tools were offered to the template, and the model's second round saw the result.
        assert {t["function"]["name"] for t in turn.request.tools} >= {"python", "now"}
        assert turn.request.messages[-2]["tool_calls"][0]["function"]["name"] == "python"
        assert turn.request.messages[-1] == {"role": "tool", "tool_call_id": calls[0].id,
                                             "name": "python", "content": "computing\n42"}
        stored = await rt.messages(turn.conversation_id)
        assert [m.role for m in stored] == ["user", "assistant", "tool", "assistant"]
        assert stored[1].tool_calls[0]["name"] == "python"
        assert stored[2].tool_results[0]["state"] == "done"
        assert stored[2].tool_results[0]["content"] == "computing\n42"
        assert stored[3].content == "The answer is 42."
        assert stored[3].parent_id == stored[2].id and stored[2].parent_id == stored[1].id
    finally:
        await rt.close()


async def test_a_denied_call_sends_denied_by_user_as_the_result() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "import os"}), "Alright, I won't."])
    await rt.start()
    try:
        turn, events = await _run(rt, "Delete my files", ApproverRecording("deny"))
        assert _states(events) == ["awaiting-approval", "denied"]
        assert turn.request.messages[-1]["content"] == DENIED == "denied by user"
        assert rt.tools.sandbox.pid is None, "nothing ran, so no sandbox was started"
        stored = await rt.messages(turn.conversation_id)
        assert stored[2].role == "tool" and stored[2].tool_results[0]["content"] == DENIED
        assert stored[3].content == "Alright, I won't."
    finally:
        await rt.close()


async def test_without_an_approver_nothing_runs() -> None:
    rt = scripted_runtime([hermes_call("now", {}), "ok"])
    await rt.start()
    try:
        turn, events = await _run(rt, "time?", approve=None)
        assert _states(events) == ["awaiting-approval", "denied"]
    finally:
        await rt.close()


async def test_always_allow_covers_read_only_tools_in_this_conversation_only() -> None:
    rt = scripted_runtime([hermes_call("now", {}), "It is now."])
    await rt.start()
    try:
        approve = ApproverRecording("always")
        first, events = await _run(rt, "time?", approve)
        assert _states(events) == ["awaiting-approval", "running", "done"]
        _, events = await _run(rt, "and now?", approve, cid=first.conversation_id)
        assert _states(events) == ["running", "done"], "not asked again in this conversation"
        assert approve.asked == ["now"]
        _, events = await _run(rt, "time elsewhere?", ApproverRecording("deny"))
        assert _states(events)[0] == "awaiting-approval", "a new conversation asks again"
    finally:
        await rt.close()


async def test_always_on_python_still_asks_next_time() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "1"}), "done"])
    await rt.start()
    try:
        approve = ApproverRecording("always", "deny")
        first, _ = await _run(rt, "run", approve)
        _, events = await _run(rt, "again", approve, cid=first.conversation_id)
        assert approve.asked == ["python", "python"]
        assert _states(events) == ["awaiting-approval", "denied"]
    finally:
        await rt.close()


async def test_python_runs_without_asking_when_turned_off_in_settings() -> None:
    settings = Settings(python_asks=False)
    rt = scripted_runtime([hermes_call("python", {"code": "2 + 2"}), "4"], settings=settings)
    await rt.start()
    try:
        _, events = await _run(rt, "2+2", approve=None)
        assert _states(events) == ["running", "done"]
    finally:
        await rt.close()


async def test_next_turn_prompt_carries_the_earlier_calls_and_results() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "y = 5\ny"}), "five", "bye"])
    await rt.start()
    try:
        first, _ = await _run(rt, "set y", ApproverRecording("allow"))
        second = await rt.start_turn(first.conversation_id, "thanks")
        roles = [m["role"] for m in second.request.messages]
        assert roles == ["user", "assistant", "tool", "assistant", "user"]
        assert second.request.messages[2]["content"] == "5"
    finally:
        await rt.close()


async def test_rounds_are_bounded() -> None:
    rt = scripted_runtime([hermes_call("now", {})])  # the model calls a tool forever
    await rt.start()
    try:
        turn = await rt.start_turn(None, "loop")
        turn.approve = ApproverRecording(*["allow"] * 10)
        turn.max_rounds = 3
        events = [e async for e in turn.events()]
        assert _states(events) == ["awaiting-approval", "running", "done"] * 2 + ["failed"]
        assert events[-1] == Done("tool_calls")
        stored = await rt.messages(turn.conversation_id)
        assert [m.role for m in stored] == ["user"] + ["assistant", "tool"] * 3
        assert "limit" in stored[-1].tool_results[0]["content"]
    finally:
        await rt.close()


async def test_cancel_while_waiting_for_approval_records_it_and_ends_the_turn() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "1"}), "never"])
    await rt.start()
    try:
        turn = await rt.start_turn(None, "run")
        asked = asyncio.Event()

        async def never_answers(call: ToolCall) -> str:
            asked.set()
            await asyncio.Event().wait()
            return "allow"

        turn.approve = never_answers
        events: list = []

        async def consume() -> None:
            async for e in turn.events():
                events.append(e)

        task = asyncio.ensure_future(consume())
        await asyncio.wait_for(asked.wait(), 30)
        turn.cancel()
        await asyncio.wait_for(task, 30)
        assert _states(events) == ["awaiting-approval", "denied"]
        assert events[-1] == Done("cancelled")
        stored = await rt.messages(turn.conversation_id)
        assert stored[-1].role == "tool" and "cancelled" in stored[-1].tool_results[0]["content"]
    finally:
        await rt.close()


async def test_a_bad_tool_name_or_arguments_become_failed_results_the_model_reads() -> None:
    rt = scripted_runtime([hermes_call("rm_rf", {}), hermes_call("python", {"source": "1"}), "ok"])
    await rt.start()
    try:
        turn, events = await _run(rt, "go", ApproverRecording("allow"))
        finals = [e for e in events if isinstance(e, ToolStatus) and e.final]
        assert [s.state for s in finals] == ["failed", "failed"]
        assert "no tool named 'rm_rf'" in finals[0].result
        assert "needs the argument 'code'" in finals[1].result
    finally:
        await rt.close()


async def test_models_without_tool_markup_get_no_tools() -> None:
    rt = scripted_runtime(["plain answer"], template=None)
    await rt.start()
    try:
        turn, events = await _run(rt, "hi")
        assert turn.request.tools == ()
        assert events[-1] == Done("stop")
    finally:
        await rt.close()


async def test_keyboard_runs_are_stored_in_the_chat_but_kept_out_of_the_prompt() -> None:
    from core.tools.fenced import fix_prompt, python_blocks, run_block

    rt = scripted_runtime(["```python\nvalue = 10\nvalue / 0\n```", "fixed"])
    await rt.start()
    try:
        turn, _ = await _run(rt, "show me code")
        reply = (await rt.messages(turn.conversation_id))[-1]
        [code] = python_blocks(reply.content)
        run = await run_block(rt, turn.conversation_id, code)
        result = run.result
        assert not result.ok and "ZeroDivisionError" in result.error
        assert 'File "<cell 1>", line 2' in result.error, "cells are numbered like a notebook"
        stored = (await rt.messages(turn.conversation_id))[-1]
        assert stored.id == run.message_id and stored.role == "tool"
        assert stored.tool_results == [run.record]
        assert stored.tool_results[0]["origin"] == "user" and stored.tool_results[0]["state"] == "failed"
        assert "value / 0" in fix_prompt(code, result)
        again = await rt.tools.sandbox.run(turn.conversation_id, "value")
        assert again.value == "10", "the keyboard run shares the conversation's namespace"
        nxt = await rt.start_turn(turn.conversation_id, fix_prompt(code, result))
        assert [m["role"] for m in nxt.request.messages] == ["user", "assistant", "user"]
    finally:
        await rt.close()


async def test_cancel_while_python_runs_stops_it_and_records_it() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "import time\ntime.sleep(120)"}), "never"],
                          settings=Settings(python_asks=False))
    await rt.start()
    try:
        await rt.tools.sandbox.start()
        turn = await rt.start_turn(None, "sleep")
        events: list = []

        async def consume() -> None:
            async for e in turn.events():
                events.append(e)

        task = asyncio.ensure_future(consume())
        while not any(isinstance(e, ToolStatus) and e.state == "running" for e in events):
            await asyncio.sleep(0.05)
        turn.cancel()
        await asyncio.wait_for(task, 60)
        assert _states(events) == ["running", "failed"]
        assert events[-1] == Done("cancelled")
        assert rt.tools.sandbox.restarts == 1, "the running code was killed with its process"
        stored = await rt.messages(turn.conversation_id)
        assert stored[-1].tool_results[0]["content"] == "cancelled by user"
    finally:
        await rt.close()


async def test_settings_changes_reach_the_next_turn() -> None:
    rt = scripted_runtime([hermes_call("python", {"code": "1"}), "ok"])
    await rt.start()
    try:
        rt.settings.python_asks = False
        _, events = await _run(rt, "run", approve=None)
        assert _states(events) == ["running", "done"]
        rt.settings.tools_enabled = False
        turn, _ = await _run(rt, "again")
        assert turn.request.tools == ()
    finally:
        await rt.close()
