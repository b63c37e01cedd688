"""core.service.notices: what the service tells every client unasked (issue 42)."""

from __future__ import annotations

from typing import Any

from core.service.notices import Notices


def _captured() -> tuple[Notices, list[tuple[dict[str, Any], str | None]]]:
    sent: list[tuple[dict[str, Any], str | None]] = []
    return Notices(lambda message, topic, but=None: sent.append((message, topic))), sent


def test_models_that_come_and_go_are_told_after_the_first_look() -> None:
    notices, sent = _captured()
    notices.models_now(["/m/a.gguf"])  # what ran before anyone looked: no news
    assert sent == []
    notices.models_now(["/m/a.gguf", "/m/b.gguf"])
    notices.models_now(["/m/b.gguf"])
    said = [m["data"]["message"] for m, topic in sent if topic == "notices"]
    assert said[0] == "Model loaded: b.gguf."
    assert said[1].startswith("Model unloaded: a.gguf (idle, or to make room")


def test_a_sticky_notice_is_kept_for_later_clients_and_changes_are_pushed() -> None:
    notices, sent = _captured()
    notices.say("store", "moved to /h/llmdeck.db.damaged-1", title="History",
                severity="warning", sticky=True)
    assert [n["message"] for n in notices.sticky] == ["moved to /h/llmdeck.db.damaged-1"]
    notices.after_call("list_conversations")
    notices.after_call("rename_conversation")
    assert sent[-1] == ({"event": "conversations"}, "conversations")
    assert len(sent) == 2
