"""The monitor projects context use before prefill and learns from real token counts."""

from __future__ import annotations

import pytest

from core.memory.window import ContextMonitor, messages_tokens


def _msgs(n: int, words: int = 10) -> list[dict]:
    return [{"role": "user", "content": " ".join(["word"] * words)} for _ in range(n)]


def test_projected_use_counts_messages_and_new_prompt() -> None:
    monitor = ContextMonitor(context_tokens=100)
    msgs = _msgs(2)  # 2 * (10 + 4 overhead) = 28
    assert messages_tokens(msgs) == 28
    assert monitor.projected_use(msgs, 12) == pytest.approx(0.40)
    assert not monitor.should_roll(msgs, 12)
    assert monitor.should_roll(msgs, 42)  # 70 / 100 hits the 0.7 threshold


def test_reply_reserve_counts_against_the_window() -> None:
    monitor = ContextMonitor(context_tokens=100, reply_reserve=30)
    assert monitor.projected_use(_msgs(2), 12) == pytest.approx(0.70)


def test_observed_usage_rescales_estimates_per_conversation() -> None:
    monitor = ContextMonitor(context_tokens=1000)
    msgs = _msgs(5)  # estimate 70
    monitor.observe("c1", msgs, prompt_tokens=140)  # the real tokenizer says twice as many
    assert monitor.used(msgs, "c1") == 140
    assert monitor.used(msgs, "c2") == 70
    monitor.observe("c1", msgs, prompt_tokens=10_000)  # an outlier is clamped
    assert monitor.used(msgs, "c1") == 280


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="threshold"):
        ContextMonitor(context_tokens=100, threshold=1.5)
    with pytest.raises(ValueError, match="context_tokens"):
        ContextMonitor(context_tokens=0)
