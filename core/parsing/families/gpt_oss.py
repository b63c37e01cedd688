"""gpt-oss harmony: channels instead of tags.

    <|channel|>analysis<|message|>thinking<|end|>
    <|start|>assistant<|channel|>final<|message|>answer<|return|>
    <|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json
        <|message|>{"city": "Paris"}<|call|>

analysis -> reasoning, final -> text, commentary with a recipient -> a tool call, and
commentary without one (a preamble to the user) -> text. The prompt ends in
`<|start|>assistant`, so the stream starts inside a message header; a header that never
closes (special tokens stripped by the engine) falls back to text after HEADER_LIMIT chars.
"""

from __future__ import annotations

import re

from ..scanner import COLLECT, REASONING, TEXT, Grammar, Ids, ParsedEvent, State
from ..toolargs import as_text, named_json_call
from ._common import finished_or_text

START, CHANNEL, MESSAGE = "<|start|>", "<|channel|>", "<|message|>"
END, RETURN, CALL = "<|end|>", "<|return|>", "<|call|>"
HEADER_LIMIT = 256

_CHANNEL_RE = re.compile(r"<\|channel\|>\s*([A-Za-z_]+)")
_RECIPIENT_RE = re.compile(r"\bto=([^\s<]+)")
_BODY_EXITS = {END: "between", RETURN: "between", CALL: "between", START: "header",
               CHANNEL: "header"}


def collect(ids: Ids, state: str, enter: str, body: str, closer: str | None):
    if state == "header":
        header = enter + body
        if closer is None:  # cut off inside a header: markup only, unless no markup at all
            return ([] if "<|" in header else as_text(header)), None
        recipient = _RECIPIENT_RE.search(header)
        if recipient:
            ids.memo["recipient"] = recipient.group(1)
            return [], "tool"
        channel = _CHANNEL_RE.search(header)
        return [], ("analysis" if channel and channel.group(1) == "analysis" else "text")
    # tool body: JSON arguments for the recipient named in the header
    name = ids.memo.pop("recipient", "").removeprefix("functions.")
    if closer is None and not body.strip():
        return [], None
    calls = [named_json_call(ids, name, body.strip())]
    out: list[ParsedEvent] = list(calls) if closer is not None else finished_or_text(calls, body)
    return out, None


GRAMMAR = Grammar(
    "gpt-oss",
    [
        State("header", COLLECT, {MESSAGE: "text"}, limit=HEADER_LIMIT, overflow="text"),
        State("analysis", REASONING, dict(_BODY_EXITS)),
        State("text", TEXT, dict(_BODY_EXITS)),
        State("tool", COLLECT, {CALL: "between", END: "between", RETURN: "between"}),
        State("between", TEXT, {START: "header", CHANNEL: "header"}),
    ],
    "header",
    collect,
    reasoning_state="analysis",
    uses_think=True,
)
