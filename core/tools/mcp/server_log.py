"""A stdio MCP server's stderr on disk, capped and rotated.

A server writes what it likes to stderr: one wrote 300 MiB in a single call. Its words go
to `mcp-NAME.log` in the log folder, at most MAX_LOG_BYTES, then that file becomes
`mcp-NAME.log.1` (the one before it dropped) and a new one starts: never more than
LOG_FILES files of MAX_LOG_BYTES each, whatever the server writes. The last line is what
the status pane and `llmdeck workers` quote when a server dies at start-up.
"""

from __future__ import annotations

from pathlib import Path

from core import paths
from core.capped_log import CappedLog
from core.capped_log import older as _older
from core.terminal_text import visible

MAX_LOG_BYTES = 1024 * 1024
LOG_FILES = 2  # the current file and one rotated before it
__all__ = ["LOG_FILES", "MAX_LOG_BYTES", "CappedLog", "last_words", "log_path"]
TAIL_BYTES = 4096  # what is read back for the last words


def log_path(name: str) -> Path:
    """Where a stdio server's stderr goes (its own diagnostics, never shown over the UI)."""
    folder = paths.log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"mcp-{name}.log"


def last_words(name: str, limit: int = 200) -> str:
    """The last line the server wrote to stderr, safe to print (control characters
    shown, not obeyed), read from the file's tail only."""
    for path in (log_path(name), _older(log_path(name), 1)):
        try:
            with open(path, "rb") as file:
                file.seek(max(0, file.seek(0, 2) - TAIL_BYTES))
                tail = file.read().decode("utf-8", errors="replace")
        except OSError:
            continue
        lines = [line for line in tail.strip().splitlines() if line.strip()]
        if lines:
            return visible(lines[-1].strip())[:limit]
    return ""
