"""`python -m core.cluster.log_keeper PATH`: a cluster's output into a log that is bounded.

mlx.launch and every rank write to one pipe; this small process reads it and writes a
CappedLog (core.capped_log): LOG_BYTES a file, LOG_FILES files, rotated, whatever a rank
prints (one printing endless lines grew its log to 71 MB before). It outlives `llmdeck
cluster up` with the ranks and ends when the last of them closes the pipe.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

from core.capped_log import CappedLog

LOG_BYTES = 4 * 1024 * 1024
LOG_FILES = 2
CHUNK = 64 * 1024


def keep(path: Path, fd: int = 0) -> None:
    """Copy `fd` into the capped log at `path` until its end."""
    with CappedLog(path, LOG_BYTES, LOG_FILES) as log:
        while chunk := os.read(fd, CHUNK):
            log.write(chunk)


def main(argv: list[str]) -> int:
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # a Ctrl+C in `cluster up` is the ranks' to take
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        keep(Path(argv[0]))
    except OSError:
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
