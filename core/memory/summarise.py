"""The summarise prompt the loaded model answers at a rollover, and a fallback without it.

The request has to fit the same context window that is about to overflow, with room
left for the summary itself, so the transcript is cut to a token budget: the earlier
summary (the session's first system message after a rollover) is always kept, then the
newest turns, and what does not fit in the middle is dropped with a note. If the model
cannot answer (it failed to load, or crashed), `fallback_summary` keeps the user's own
questions, so a rollover never has to wait for a model that is not there.
"""

from __future__ import annotations

from collections.abc import Sequence

from core.docs.chunking import count_tokens
from core.memory.window import Message

SUMMARISE_INSTRUCTIONS = (
    "You keep the memory of a long conversation. Summarise the conversation below so it "
    "can continue without it: the user's goals and preferences, every fact, name, number "
    "and decision, and any open question. Write plain sentences, at most about "
    "{words} words, no preamble."
)
SUMMARY_PREFIX = "Summary of the conversation so far (earlier turns were condensed):"
_LABELS = {"user": "User", "assistant": "Assistant", "system": "Earlier summary"}


def _clip(text: str, max_tokens: int) -> str:
    words = text.split()
    if count_tokens(text) <= max_tokens:
        return text
    keep = max(1, max_tokens * 2 // 3)  # words carry ~1.3 tokens with punctuation
    return " ".join(words[:keep]) + " ..."


def transcript(messages: Sequence[Message], budget_tokens: int) -> str:
    """The conversation as labelled lines, cut to about `budget_tokens` tokens."""
    lines = [
        f"{_LABELS.get(m['role'], m['role'].title())}: {str(m.get('content') or '').strip()}"
        for m in messages
        if str(m.get("content") or "").strip()
    ]
    if not lines:
        return ""
    per_line = max(16, budget_tokens // 3)
    lines = [_clip(line, per_line) for line in lines]
    head = [lines[0]] if messages and messages[0]["role"] == "system" else []
    rest = lines[len(head) :]
    used = sum(count_tokens(line) for line in head)
    kept: list[str] = []
    for line in reversed(rest):  # newest first: the recent turns matter most
        cost = count_tokens(line)
        if used + cost > budget_tokens and kept:
            break
        kept.append(line)
        used += cost
    kept.reverse()
    dropped = len(rest) - len(kept)
    gap = [f"[{dropped} earlier messages left out]"] if dropped else []
    return "\n\n".join([*head, *gap, *kept])


def summary_request(
    messages: Sequence[Message], budget_tokens: int, summary_tokens: int
) -> list[Message]:
    """The messages of the summarise request (system instructions, user transcript)."""
    words = max(30, summary_tokens * 2 // 3)
    return [
        {"role": "system", "content": SUMMARISE_INSTRUCTIONS.format(words=words)},
        {"role": "user", "content": "Conversation:\n\n" + transcript(messages, budget_tokens)},
    ]


def summary_followup(summary_tokens: int) -> Message:
    """The message that asks for a summary of the conversation above it: sent after the
    session itself, so the engine reuses the session's KV cache and prefills only this."""
    words = max(30, summary_tokens * 2 // 3)
    return {"role": "user", "content": SUMMARISE_INSTRUCTIONS.format(words=words).replace(
        "the conversation below", "our conversation so far (everything above this message)")}


def fallback_summary(messages: Sequence[Message], max_tokens: int) -> str:
    """A summary without a model: the earlier summary and the user's questions, newest kept."""
    earlier = [str(m["content"]).removeprefix(SUMMARY_PREFIX).strip()
               for m in messages[:1] if m["role"] == "system"]  # never nested prefixes
    asked = [str(m["content"]).strip() for m in messages if m["role"] == "user"]
    text = " ".join(earlier)
    if asked:
        text = (text + " " if text else "") + "The user asked: " + " | ".join(asked)
    return _clip(text.strip(), max_tokens)
