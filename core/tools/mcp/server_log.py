"""A stdio MCP server's stderr on disk, capped and rotated.

A server writes what it likes to stderr: one wrote 300 MiB in a single call. Its words go
to `mcp-NAME.log` in the log folder, at most MAX_LOG_BYTES, then that file becomes
`mcp-NAME.log.1` (the one before it dropped) and a new one starts: never more than
LOG_FILES files of MAX_LOG_BYTES each, whatever the server writes. The last line is what
the status pane and `llmdeck workers` quote when a server dies at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO

from core import paths
from core.terminal_text import visible

MAX_LOG_BYTES = 1024 * 1024
LOG_FILES = 2  # the current file and one rotated before it
TAIL_BYTES = 4096  # what is read back for the last words


def log_path(name: str) -> Path:
    """Where a stdio server's stderr goes (its own diagnostics, never shown over the UI)."""
    folder = paths.log_dir()
    folder.mkdir(parents=True, exist_ok=True)
    return folder / f"mcp-{name}.log"


def _older(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


class CappedLog:
    """Append-only bytes, rotated at `max_bytes`, `files` files kept."""

    def __init__(self, path: Path, max_bytes: int = MAX_LOG_BYTES, files: int = LOG_FILES) -> None:
        self.path = path
        self.max_bytes = max_bytes
        self.files = max(1, files)
        self._file: BinaryIO | None = None
        self._size = 0

    def _open(self) -> BinaryIO:
        if self._file is None:
            self._file = open(self.path, "ab")  # noqa: SIM115 - kept open across writes
            self._size = self._file.tell()
        return self._file

    def write(self, data: bytes) -> None:
        """Append `data`, rotating as often as it takes; a piece larger than a whole
        file keeps only its tail (what the server said last is what matters)."""
        if len(data) > self.max_bytes:
            data = data[-self.max_bytes:]
        while data:
            file = self._open()
            room = self.max_bytes - self._size
            if room <= 0:
                self._rotate()
                continue
            piece, data = data[:room], data[room:]
            file.write(piece)
            file.flush()
            self._size += len(piece)

    def _rotate(self) -> None:
        self.close()
        for n in range(self.files - 1, 0, -1):
            source = self.path if n == 1 else _older(self.path, n - 1)
            if source.exists():
                source.replace(_older(self.path, n))
        if self.files == 1:
            self.path.unlink(missing_ok=True)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()
            self._file = None
            self._size = 0

    def __enter__(self) -> CappedLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


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
