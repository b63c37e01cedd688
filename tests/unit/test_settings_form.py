"""Field rules of the settings form: the tool section's sandbox limits."""

from __future__ import annotations

import pytest

from tui import settings_form as form

VALID = {"temperature": "0.7", "top_p": "0.9", "top_k": "40", "max_tokens": "512",
         "context_size": "4096"}


@pytest.mark.parametrize(("text", "reason"), [
    ("0", "between 1 and 3600 seconds"), ("3601", "between 1 and 3600 seconds"),
    ("soon", "must be a number"),
])
def test_python_time_limit_refusals(text: str, reason: str) -> None:
    with pytest.raises(form.Refused, match=reason):
        form.python_timeout(text)


@pytest.mark.parametrize(("text", "reason"), [
    ("255", "between 256 and 65536 MiB"), ("70000", "between 256 and 65536 MiB"),
    ("1.5", "must be a whole number"),
])
def test_python_memory_refusals(text: str, reason: str) -> None:
    with pytest.raises(form.Refused, match=reason):
        form.python_memory(text)


def test_validate_all_carries_the_tool_settings() -> None:
    values, problems = form.validate_all({**VALID, "python_timeout_s": "2.5", "python_memory_mb": "300"},
                                         "", "llmdeck-dark", tools_enabled=False, python_asks=False)
    assert problems == {}
    assert (values.python_timeout_s, values.python_memory_mb) == (2.5, 300)
    assert (values.tools_enabled, values.python_asks) == (False, False)
    values, problems = form.validate_all({**VALID, "python_timeout_s": "0", "python_memory_mb": "300"},
                                         "", "llmdeck-dark")
    assert values is None and set(problems) == {"python_timeout_s"}
