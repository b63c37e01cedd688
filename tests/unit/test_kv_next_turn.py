"""The cache kept after a reply is the history as the next turn renders it (issue 33):
under a Qwen3-style template, earlier turns lose their reasoning."""

from __future__ import annotations

from typing import Any

import jinja2

from bench.kvdisk import QWEN3_THINKING
from core.engines.kv_next_turn import next_turn_prefix, reply_content


def _render(template: str) -> Any:
    compiled = jinja2.Environment().from_string(template)
    return lambda messages: compiled.render(messages=messages, add_generation_prompt=True)


def test_the_next_turn_prefix_drops_the_reasoning_and_every_next_prompt_starts_with_it() -> None:
    render = _render(QWEN3_THINKING)
    history = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Hi?"}]
    prompt = render(history)
    raw = "<think>The user greets me.</think>\n\nHello!"
    content = reply_content(raw, "qwen3")
    assert content is not None and "greets" not in content and "Hello!" in content
    prefix = next_turn_prefix(render, history, content, prompt)
    assert prefix is not None and prefix.startswith(prompt)
    assert "greets" not in prefix
    for question in ("What now?", "x", "<think>"):
        nxt = render([*history, {"role": "assistant", "content": content},
                      {"role": "user", "content": question}])
        assert nxt.startswith(prefix)
    # what the cache held as generated is NOT where the next prompt goes
    assert not nxt.startswith(prompt + raw)


def test_a_tool_call_or_an_unstable_template_keeps_the_cache_as_generated() -> None:
    assert reply_content('<tool_call>{"name": "f", "arguments": {}}</tool_call>', "qwen3") is None
    # a template that numbers turns from the end renders the history differently each turn
    unstable = _render("{% for m in messages %}[{{ loop.revindex }}]{{ m['content'] }}{% endfor %}")
    history = [{"role": "user", "content": "Hi?"}]
    assert next_turn_prefix(unstable, history, "Hello!", unstable(history)) is None
