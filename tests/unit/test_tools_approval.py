"""Approval policy: what asks, what "always allow" covers, and the python setting."""

from __future__ import annotations

from core.tools import ApprovalPolicy
from core.tools.builtins import default_registry


def test_every_tool_asks_by_default() -> None:
    policy = ApprovalPolicy(default_registry())
    for name in ("python", "now", "search_conversations", "read_document"):
        assert policy.needs_approval("c1", name)


def test_always_allow_is_per_conversation_and_read_only_only() -> None:
    policy = ApprovalPolicy(default_registry())
    policy.remember("c1", "now", "always")
    policy.remember("c1", "python", "always")
    assert not policy.needs_approval("c1", "now")
    assert policy.needs_approval("c2", "now")
    assert policy.needs_approval("c1", "python"), "python is never always-allowed"
    assert policy.always_allowed("c1") == {"now"}
    assert not policy.can_always_allow("python") and policy.can_always_allow("read_document")
    policy.forget("c1")
    assert policy.needs_approval("c1", "now")


def test_python_prompt_can_be_turned_off() -> None:
    policy = ApprovalPolicy(default_registry(), python_asks=False)
    assert not policy.needs_approval("c1", "python")
    assert policy.needs_approval("c1", "now")


def test_unknown_tools_need_no_approval_because_nothing_runs() -> None:
    assert not ApprovalPolicy(default_registry()).needs_approval("c1", "rm_rf")
