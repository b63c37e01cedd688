"""The incremental marker scanner every family parser runs on.

A model family's output format is a small state machine: plain answer text, a reasoning
block, a tool-call body being collected, and the literal markers that move between them
(`<think>`, `<tool_call>`, `<|channel|>` ...). A family module describes its states as a
`Grammar`; `MarkerScanner` runs it over a stream that arrives in arbitrary pieces.

Why this shape: the parser runs in the worker on every token, so a feed looks only at the
new text plus a held-back tail no longer than the longest marker, never at the whole
buffer. A marker split across feeds is held until it can be decided, so markup never
reaches a TextDelta, whatever the chunking.
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import Any

from core.events import ReasoningDelta, TextDelta, ToolCall, ToolCallDelta

TEXT = 0
"""Content is visible answer text."""
REASONING = 1
"""Content is the model's thinking."""
COLLECT = 2
"""Content is gathered until an exit marker, then handed to the grammar's collector."""
SNIFF = 3
"""Content is held until `State.sniff` decides which state the stream really starts in."""

ParsedEvent = TextDelta | ReasoningDelta | ToolCall | ToolCallDelta


@dataclass(frozen=True)
class State:
    """One state of a family's output format.

    `exits` maps a literal marker to the state it leads to. For COLLECT states the
    grammar's collector may override that target (harmony decides from the header).
    `limit` caps a COLLECT body: past it the body is shown as text and the scanner moves
    to `overflow` (a header that never closes must not swallow the whole answer).
    """

    name: str
    kind: int
    exits: dict[str, str] = field(default_factory=dict)
    limit: int | None = None
    overflow: str = "text"
    sniff: Callable[[str, bool], str | None] | None = None


class Ids:
    """Per-stream context for collectors: tool-call ids, and notes kept between blocks.

    Ids are unique within one parser and, by a random base, across a conversation.
    Mistral's template only accepts 9 alphanumeric characters, so it gets its own style.
    `memo` holds what one block tells the next (harmony's header names the recipient
    that the following message body is for).
    """

    def __init__(self, style: str = "default") -> None:
        self._style = style
        self._base = secrets.token_hex(3 if style == "mistral" else 4)
        self._n = 0
        self.memo: dict[str, Any] = {}

    def new(self) -> str:
        self._n += 1
        if self._style == "mistral":
            return f"{self._base}{self._n % 1000:03d}"
        return f"call_{self._base}_{self._n}"


Collector = Callable[[Ids, str, str, str, "str | None"], "tuple[list[ParsedEvent], str | None]"]
"""(ids, state name, enter marker, body, exit marker or None at end of stream)
-> (events, next state or None for the state's static exit target)."""

Streamer = Callable[[Ids, str, str], "list[ParsedEvent]"]
"""(ids, state name, a new piece of the COLLECT body) -> events while the body is written
(ToolCallDelta for streaming clients); the collector still gets the whole body."""


class _Compiled:
    """A state with its markers compiled for the hot path."""

    __slots__ = ("state", "name", "kind", "exits", "pattern", "firsts", "markers", "limit")

    def __init__(self, state: State) -> None:
        self.state = state
        self.name = state.name
        self.kind = state.kind
        self.exits = dict(state.exits)
        self.markers = tuple(sorted(self.exits, key=len, reverse=True))
        # One search finds either a whole marker or, in group "p", the longest tail of the
        # text that is the start of a marker and must be held back until more arrives.
        # (No marker lies inside another, so the leftmost match is the right one.)
        self.pattern = (
            re.compile(
                "|".join(re.escape(m) for m in self.markers)
                + "|(?P<p>(?:" + "|".join(_prefix_regex(m) for m in self.markers) + r")\Z)"
            )
            if self.markers
            else None
        )
        self.firsts = tuple(sorted({m[0] for m in self.markers}))
        self.limit = state.limit


def _prefix_regex(marker: str) -> str:
    """A regex matching any proper, non-empty prefix of marker: a(?:b(?:c)?)? for 'abcd'."""
    out = ""
    for ch in reversed(marker[1:-1]):
        out = f"(?:{re.escape(ch)}{out})?"
    return re.escape(marker[0]) + out


class Grammar:
    """A family's states, start state and collector, compiled once and shared."""

    def __init__(
        self,
        name: str,
        states: Iterable[State],
        start: str,
        collect: Collector | None = None,
        *,
        reasoning_state: str | None = None,
        uses_think: bool = False,
        id_style: str = "default",
        stream: Streamer | None = None,
    ) -> None:
        self.name = name
        self.states = {s.name: _Compiled(s) for s in states}
        for st in self.states.values():
            # A marker inside another in the same state would make the result depend on
            # where the stream is split (the short one could complete first).
            for a in st.markers:
                for b in st.markers:
                    if a != b and a in b:
                        raise ValueError(f"grammar {name}: {a!r} is inside {b!r}")
        if start not in self.states:
            raise ValueError(f"grammar {name}: unknown start state {start!r}")
        for st in self.states.values():
            for target in (*st.exits.values(), st.state.overflow):
                if target not in self.states:
                    raise ValueError(f"grammar {name}: {st.name} leads to unknown {target!r}")
        self.start = start
        self.collect = collect
        self.reasoning_state = reasoning_state
        self.uses_think = uses_think
        self.id_style = id_style
        self.stream = stream

    def markers(self) -> set[str]:
        """Every literal marker of the format (tests check none of them leaks)."""
        return {m for st in self.states.values() for m in st.markers}


def _push(events: list[ParsedEvent], kind: int, text: str) -> None:
    """Append a delta, merging it into the previous one of the same kind."""
    if events:
        last = events[-1]
        if kind == TEXT and type(last) is TextDelta:
            events[-1] = TextDelta(last.text + text)
            return
        if kind == REASONING and type(last) is ReasoningDelta:
            events[-1] = ReasoningDelta(last.text + text)
            return
    events.append(TextDelta(text) if kind == TEXT else ReasoningDelta(text))


class MarkerScanner:
    """Runs a Grammar over a stream fed in pieces of any size."""

    __slots__ = ("_g", "_st", "_pending", "_body", "_body_len", "_enter", "_lstrip", "_ids")

    def __init__(self, grammar: Grammar, *, start: str | None = None) -> None:
        self._g = grammar
        self._st = grammar.states[start or grammar.start]
        self._pending = ""  # a tail that may be the start of a marker
        self._body: list[str] = []  # COLLECT / SNIFF content so far
        self._body_len = 0
        self._enter = ""  # the marker that entered the current state
        self._lstrip = True  # drop whitespace at the start of the next text/reasoning run
        self._ids = Ids(grammar.id_style)

    @property
    def state(self) -> str:
        return self._st.name

    def feed(self, text: str) -> list[ParsedEvent]:
        """Events for a new piece of the stream."""
        if not text:
            return []
        st = self._st
        kind = st.kind
        pending = self._pending
        if pending:
            buf = pending + text
        else:
            # Fast path: no held tail and no character that could start a marker.
            for c in st.firsts:
                if c in text:
                    break
            else:
                if kind == TEXT or kind == REASONING:
                    if self._lstrip:
                        text = text.lstrip()
                        if not text:
                            return []
                        self._lstrip = False
                    return [TextDelta(text) if kind == TEXT else ReasoningDelta(text)]
                if kind == COLLECT and (st.limit is None or self._body_len + len(text) <= st.limit):
                    self._body.append(text)
                    self._body_len += len(text)
                    if self._g.stream is not None:
                        return self._g.stream(self._ids, st.name, text)
                    return []
            buf = text
        if kind == TEXT or kind == REASONING:
            m = st.pattern.search(buf)
            if m is not None and m.lastgroup is None:
                self._pending = ""
                return self._scan(buf)  # a whole marker: state changes
            # Common slow path: something marker-like (`a < b`, `x[i]`) but no marker.
            if m is None:
                self._pending = ""
            else:
                self._pending = buf[m.start() :]
                buf = buf[: m.start()]
                if not buf:
                    return []
            if self._lstrip:
                buf = buf.lstrip()
                if not buf:
                    return []
                self._lstrip = False
            return [TextDelta(buf) if kind == TEXT else ReasoningDelta(buf)]
        self._pending = ""
        return self._scan(buf)

    def finish(self) -> list[ParsedEvent]:
        """Flush what is held at the end of the stream; malformed markup ends as text."""
        events: list[ParsedEvent] = []
        buf, self._pending = self._pending, ""
        st = self._st
        if st.kind == SNIFF:
            held = "".join(self._body) + buf
            self._body, self._body_len = [], 0
            target = st.state.sniff(held, True) if st.state.sniff else None
            self._st = st = self._g.states[target or "text"]
            if held:
                events.extend(self._scan(held))
            buf, self._pending = self._pending, ""
            st = self._st
        if st.kind == COLLECT:
            if buf:
                self._body.append(buf)
                if self._g.stream is not None:
                    events.extend(self._g.stream(self._ids, st.name, buf))
            body = "".join(self._body)
            self._body, self._body_len = [], 0
            if self._g.collect is not None:
                got, _ = self._g.collect(self._ids, st.name, self._enter, body, None)
                for ev in got:
                    if isinstance(ev, ToolCall):
                        events.append(ev)
                    else:
                        _push(events, TEXT if type(ev) is TextDelta else REASONING, ev.text)
            elif self._enter + body:
                _push(events, TEXT, self._enter + body)
        elif buf:
            self._emit(events, st.kind, buf)
        return events

    # -- internals -----------------------------------------------------------------------

    def _emit(self, events: list[ParsedEvent], kind: int, text: str) -> None:
        if self._lstrip:
            text = text.lstrip()
            if not text:
                return
            self._lstrip = False
        _push(events, kind, text)

    def _scan(self, buf: str) -> list[ParsedEvent]:
        events: list[ParsedEvent] = []
        pos = 0
        n = len(buf)
        states = self._g.states
        while pos < n:
            st = self._st
            if st.kind == SNIFF:
                self._body.append(buf[pos:])
                held = "".join(self._body)
                target = st.state.sniff(held, False) if st.state.sniff else "text"
                if target is None:
                    self._pending = ""
                    return events
                self._body, self._body_len = [], 0
                self._st = states[target]
                buf, pos, n = held, 0, len(held)
                continue
            m = st.pattern.search(buf, pos) if st.pattern is not None else None
            if m is not None and m.lastgroup is not None:  # only a marker's start, at the end
                end = m.start()
                m = None
            else:
                end = n if m is None else m.start()
            if st.kind == COLLECT and st.state.limit is not None and (
                self._body_len + end - pos > st.state.limit
            ):
                # The block never closed within its limit: it was not markup after all.
                # Re-read its body in the overflow state, so the outcome does not depend
                # on where the stream was split.
                body = "".join(self._body) + buf[pos:]
                self._body, self._body_len = [], 0
                if self._enter:
                    self._emit(events, TEXT, self._enter)
                self._enter = ""
                self._st = states[st.state.overflow]
                buf, pos, n = body, 0, len(body)
                continue
            if m is None:
                self._pending = buf[end:]
                if end > pos:
                    self._content(events, st, buf[pos:end])
                return events
            if end > pos:
                self._content(events, st, buf[pos:end])
            marker = m.group()
            target = st.exits[marker]
            if st.kind == COLLECT:
                body = "".join(self._body)
                self._body, self._body_len = [], 0
                if self._g.collect is not None:
                    got, override = self._g.collect(self._ids, st.name, self._enter, body, marker)
                    for ev in got:
                        if isinstance(ev, ToolCall):
                            events.append(ev)
                        else:
                            _push(events, TEXT if type(ev) is TextDelta else REASONING, ev.text)
                    if override is not None:
                        target = override
            self._st = states[target]
            self._enter = marker
            self._lstrip = True
            pos = m.end()
        self._pending = ""
        return events

    def _content(self, events: list[ParsedEvent], st: _Compiled, text: str) -> None:
        if st.kind == COLLECT:
            self._body.append(text)
            self._body_len += len(text)
            if self._g.stream is not None:
                events.extend(self._g.stream(self._ids, st.name, text))
        else:
            self._emit(events, st.kind, text)
