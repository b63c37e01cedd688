"""The sidebar searches on each key, so the word being typed is a prefix: "Germ" already
finds the conversation about Germany. The index matches whole words, and the box said
"No matches" until a word was typed to its end (a new user typing "Germ" saw nothing)."""

from __future__ import annotations

import pytest

from tests.fixtures.tui import (
    scripted_app,
    seed_conversations,
    sidebar_kinds,
    wait_ready,
    wait_until,
)
from tui.widgets.sidebar import searched_as_typed


@pytest.mark.parametrize(("typed", "searched"), [
    ("Germ", "Germ*"), ("capital of Germ", "capital of Germ*"),
    ("Germ ", "Germ "), ("a", "a"), ("Paris OR", "Paris OR"), ('"exact phr', '"exact phr'),
    ("Germ*", "Germ*"), ("Germany?", "Germany?"), ("", ""),
])
def test_the_last_word_typed_is_a_prefix(typed: str, searched: str) -> None:
    assert searched_as_typed(typed) == searched


async def test_a_word_typed_halfway_finds_its_conversation() -> None:
    seed_conversations([("What is the capital of Germany?", "Berlin."),
                        ("Who wrote Hamlet?", "Shakespeare.")])
    app = scripted_app()
    async with app.run_test(size=(100, 30)) as pilot:
        await wait_ready(pilot)
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["c:", "c:"])
        await pilot.press("ctrl+f", *"Germ")
        await wait_until(pilot, lambda: sidebar_kinds(app) == ["h:"])
        rows = app.main.query_one("#conversations")
        assert "Germany" in str(rows.get_option_at_index(0).prompt)
