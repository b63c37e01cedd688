"""The read bound the disk-cache benches compare a load with (bench/kvdisk.py, kvload.py):
one definition, so their `read_bound_ms` and `read_parallel_ms` measure the same thing."""

from __future__ import annotations

import os
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

PIECE = 8 * 1024**2


def read_whole(paths: list[Path], pool: ThreadPoolExecutor) -> None:
    """Read `paths` whole into fresh buffers (plain read calls, PIECE bytes each, on the
    pool's threads, the page cache as it is): what any loader of them has to do."""
    for path in paths:
        size = path.stat().st_size
        buf = np.empty(size, np.uint8)
        fd = os.open(path, os.O_RDONLY)
        try:
            list(pool.map(lambda at, fd=fd, buf=buf: os.preadv(fd, [buf[at: at + PIECE]], at),
                          range(0, size, PIECE)))
        finally:
            os.close(fd)
