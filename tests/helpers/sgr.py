"""The foreground colour a terminal would use at a point of an output stream, read from
its SGR sequences. A terminal multiplexer sends a colour only when it changes, so a
cell's colour may have been set cells earlier: a test must track it, not look for it
right before the cell."""

from __future__ import annotations

import re

_SGR = re.compile(rb"\x1b\[([0-9;:]*)m")


def foreground_at(output: bytes, index: int) -> int | tuple[int, int, int] | None:
    """The foreground in force at output[index]: a 256-colour index (0..255, the basic
    and bright codes included), an (r, g, b) triple, or None for the default."""
    fg: int | tuple[int, int, int] | None = None
    for match in _SGR.finditer(output, 0, index):
        params = [int(p) if p else 0 for p in re.split(rb"[;:]", match.group(1))]
        i = 0
        while i < len(params):
            p = params[i]
            if p in (38, 48):
                kind = params[i + 1] if i + 1 < len(params) else None
                width = 3 if kind == 5 else 5 if kind == 2 else 2
                if p == 38 and kind == 5:
                    fg = params[i + 2]
                elif p == 38 and kind == 2:
                    fg = (params[i + 2], params[i + 3], params[i + 4])
                i += width
                continue
            if p in (0, 39):
                fg = None
            elif 30 <= p <= 37:
                fg = p - 30
            elif 90 <= p <= 97:
                fg = p - 90 + 8
            i += 1
    return fg
