"""The advice under a reply's error fits where the reply came from (issue 32, item 7).

A local worker that crashes is respawned by the pool, so "the model process restarts by
itself" is true; a remote that drops mid-reply is across the network, where the person has
to check the endpoint and retry."""

from __future__ import annotations

from tui.widgets.message_view import error_text


def test_a_dropped_remote_reply_gets_the_remote_advice() -> None:
    text = error_text("the remote closed the connection mid-reply", "WORKER_CRASHED", remote=True)
    assert "restarts by itself" not in text
    assert "remote" in text.split("→", 1)[1] and "retry" in text


def test_a_crashed_local_worker_keeps_its_own_advice() -> None:
    text = error_text("the worker died", "WORKER_CRASHED")
    assert "restarts by itself" in text


def test_a_remote_error_without_advice_of_its_own_falls_back_to_the_general_one() -> None:
    text = error_text("bad request", "BAD_REQUEST", remote=True)
    assert "→" in text and text.split("→", 1)[1].strip()
