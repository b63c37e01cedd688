"""Default conversation titles, so the sidebar never shows a wall of "Untitled"."""

from __future__ import annotations

TITLE_MAX = 60


def auto_title(first_user_text: str, max_chars: int = TITLE_MAX) -> str:
    """The first non-empty line of the user's first message, whitespace-collapsed and cut
    at a word boundary with an ellipsis when longer than `max_chars`."""
    line = next((ln.strip() for ln in first_user_text.splitlines() if ln.strip()), "")
    line = " ".join(line.split())
    if not line:
        return "New conversation"
    if len(line) <= max_chars:
        return line
    cut = line[: max_chars - 1]
    space = cut.rfind(" ")
    if space >= max_chars // 2:
        cut = cut[:space]
    return cut.rstrip(" ,.;:-") + "…"
