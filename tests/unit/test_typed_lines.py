"""A user's message keeps its line breaks on screen (issue 48, item 3): the Markdown it is
rendered as gets a hard break where a paragraph's lines would have been joined, and nothing
else changes (code, lists, tables, quotes keep their own lines already)."""

from __future__ import annotations

from tui.widgets.body_text import typed_lines


def test_a_paragraphs_lines_become_hard_breaks() -> None:
    assert typed_lines("one number per line:\n1\n2\n3") == "one number per line:\\\n1\\\n2\\\n3"
    assert typed_lines("trailing   \nspaces") == "trailing\\\nspaces"
    assert typed_lines("one line") == "one line"


def test_blocks_that_keep_their_lines_are_left_alone() -> None:
    for text in ("```\na\nb\n```", "- a\n- b", "1. a\n2. b", "| a |\n|---|\n| b |",
                 "> a\n> b", "# Title\nbody", "---\nbody", "para\n\nnext", "    code\n    more",
                 "ends with a backslash\\\nnext"):
        assert typed_lines(text) == text, text
    assert typed_lines("```\nx\ny\n```\na\nb") == "```\nx\ny\n```\na\\\nb"  # after the fence
