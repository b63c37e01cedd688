"""A log file that cannot grow without bound: append-only bytes, rotated at a size.

What another program writes (an MCP server's stderr, a cluster rank's output) goes to
`NAME.log`, at most `max_bytes`, then that file becomes `NAME.log.1` (the one before it
dropped) and a new one starts: never more than `files` files of `max_bytes` each,
whatever the writer says, however long it runs.
"""

from __future__ import annotations

from pathlib import Path
from typing import BinaryIO


def older(path: Path, n: int) -> Path:
    return path.with_name(f"{path.name}.{n}")


class CappedLog:
    """Append-only bytes, rotated at `max_bytes`, `files` files kept."""

    def __init__(self, path: Path, max_bytes: int = 1024 * 1024, files: int = 2) -> None:
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
            source = self.path if n == 1 else older(self.path, n - 1)
            if source.exists():
                source.replace(older(self.path, n))
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
