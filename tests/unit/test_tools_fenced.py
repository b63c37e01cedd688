"""Fenced Python blocks and the "fix" prompt; chat messages rebuilt from stored tool turns."""

from __future__ import annotations

from core.store import Message
from core.tools import RunResult, chat_messages, fix_prompt, python_blocks

DOC = """Here you go:

```python
print("a")
```

```bash
ls
```

~~~py
x = 1
```not a close
~~~

```
untagged
```

```python3
unclosed = True"""


def test_python_blocks_finds_tagged_blocks_in_order() -> None:
    assert python_blocks(DOC) == ['print("a")', "x = 1\n```not a close", "unclosed = True"]
    assert python_blocks("no code here") == []


def test_fix_prompt_carries_code_and_traceback() -> None:
    failed = RunResult(False, error="Traceback...\nZeroDivisionError: division by zero",
                       kind="exception")
    text = fix_prompt("1/0\n", failed)
    assert text.startswith("This code failed:")
    assert "```python\n1/0\n```" in text
    assert "ZeroDivisionError: division by zero" in text and text.endswith("Please fix it.")


def _m(role: str, content: str = "", **kw) -> Message:
    return Message(id=kw.pop("id", role), conversation_id="c", role=role, content=content,
                   reasoning="", tool_calls=kw.get("tool_calls"), tool_results=kw.get("tool_results"),
                   usage=None, model=None, status="complete", created_at=0.0, parent_id=None)


def test_chat_messages_rebuild_calls_and_results_and_skip_keyboard_runs() -> None:
    history = [
        _m("user", "compute"),
        _m("assistant", "ok", tool_calls=[{"id": "t1", "name": "python", "arguments": {"code": "1"}}]),
        _m("tool", "[python: done]\n1", tool_results=[{"id": "t1", "name": "python", "content": "1"}]),
        _m("assistant", "It is 1."),
        _m("tool", "[python: done]\n2", tool_results=[{"id": "run-x", "name": "python", "content": "2",
                                                        "origin": "user"}]),
        _m("user", "next"),
    ]
    out = chat_messages(history)
    assert [m["role"] for m in out] == ["user", "assistant", "tool", "assistant", "user"]
    assert out[1]["tool_calls"] == [{"id": "t1", "type": "function",
                                     "function": {"name": "python", "arguments": {"code": "1"}}}]
    assert out[2] == {"role": "tool", "tool_call_id": "t1", "name": "python", "content": "1"}
