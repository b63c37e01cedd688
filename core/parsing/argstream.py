"""Following a JSON tool-call body while it is written, for streamed argument deltas.

A client that streams wants a call's name as soon as it is known and its arguments as they
are decoded (OpenAI's `tool_calls` deltas), not one chunk once the call closes. Families
whose call body is `{"name": "...", "arguments": {...}}` feed each new piece of the body
here; out come ToolCallDelta events: one with the id and name, then pieces of the
arguments' JSON text, never a character past the end of the arguments object (the body's
own closing brace is not part of them). A body in another shape (arguments first, not an
object) streams nothing: the complete ToolCall that follows carries it.

Incremental: each piece is scanned once (string and nesting state are kept), so a long
argument costs no more than its length.
"""

from __future__ import annotations

import re

from core import json_text
from core.events import ToolCallDelta

_HEAD = re.compile(r'\s*\{\s*"name"\s*:\s*("(?:[^"\\]|\\.)*")\s*,\s*"(?:arguments|parameters)"\s*:\s*')
_HEAD_LIMIT = 4096  # a head this long without matching is not the shape we follow


class ArgumentStream:
    """One call body's stream of deltas; `id` is the call's id, shared with its ToolCall."""

    __slots__ = ("id", "announced", "_head", "_depth", "_in_str", "_esc", "_done")

    def __init__(self, call_id: str) -> None:
        self.id = call_id
        self.announced = False  # the id and name went out
        self._head = ""  # the body before the arguments, until it is read
        self._depth = 0
        self._in_str = False
        self._esc = False
        self._done = False

    def feed(self, piece: str) -> list[ToolCallDelta]:
        if self._done or not piece:
            return []
        out: list[ToolCallDelta] = []
        if not self.announced:
            self._head += piece
            m = _HEAD.match(self._head)
            if m is None:
                head = self._head.lstrip()
                if len(self._head) > _HEAD_LIMIT or (head and head[0] != "{"):
                    self._done = True
                elif re.search(r'"(?:arguments|parameters)"\s*:\s*\S', self._head):
                    self._done = True  # arguments came first, or the head is malformed
                return out
            try:
                name = json_text.loads(m.group(1))
            except ValueError:
                self._done = True
                return out
            self.announced = True
            out.append(ToolCallDelta(self.id, name, ""))
            piece, self._head = self._head[m.end():], ""
        args = self._scan(piece)
        if args:
            out.append(ToolCallDelta(self.id, None, args))
        return out

    def _scan(self, piece: str) -> str:
        """The part of `piece` that belongs to the arguments object."""
        depth, in_str, esc = self._depth, self._in_str, self._esc
        start = 0
        if depth == 0:  # before the object opens: only whitespace may come first
            stripped = piece.lstrip()
            if not stripped:
                return ""
            if stripped[0] != "{":
                self._done = True
                return ""
            start = len(piece) - len(stripped)
        end = len(piece)
        for i in range(start, len(piece)):
            c = piece[i]
            if in_str:
                if esc:
                    esc = False
                elif c == "\\":
                    esc = True
                elif c == '"':
                    in_str = False
            elif c == '"':
                in_str = True
            elif c in "{[":
                depth += 1
            elif c in "}]":
                depth -= 1
                if depth == 0:
                    end = i + 1
                    self._done = True
                    break
        self._depth, self._in_str, self._esc = depth, in_str, esc
        return piece[start:end]
