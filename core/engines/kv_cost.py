"""Whether reading a stored KV cache beats prefilling its tokens again (issue 49 item 2).

On a fast GPU a prefill of a few thousand tokens of a small model takes about 100 ms,
while its cache is hundreds of megabytes: reading, checking and handing that to the
device can cost more than recomputing it. So each lookup compares two estimates fed by
what this model measured on this machine:

- the read rate: bytes a second a stored chain took to read, check and reach the device
  (the fastest recent load: a slow one is usually a cold page cache, which is the
  common case after a reboot, so the mean of the recent ones is what is used);
- the prefill rate: prompt tokens a second the engine prefilled (the fastest seen: a
  slow one waited behind other work, which the engine's time to first token includes).

- the pass: the fastest time to first token of a lone request whose history was already
  in place (a turn's few new tokens over it). A read is followed by such a pass, while
  the prefill's rate (a whole prompt's time to first token) already holds one.

A file is read when `bytes / read rate + pass < tokens / prefill rate`; with no prefill
measured yet it is read (that is what the file is for), with no read measured the read
rate is taken as DEFAULT_READ_BPS, and with no pass measured it counts as 0. The rates are
kept in a small JSON file beside the model's cache files so a restarted worker decides
well from its first turn; a worker also times a read of a file it wrote in idle time
(core.engines.kv_mlx), so a fresh home has a read rate before its first restart.
"""

from __future__ import annotations

import json
import os
import stat
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path

from core import json_text

# Assumed until a load is measured: a page-cache read, its checksums and a host-to-
# device copy, on the slower machines measured (a 2-core CPU box, an H100 over PCIe).
DEFAULT_READ_BPS = 1.0e9
# Prefills shorter than this say more about fixed costs than about the rate.
MIN_PREFILL_TOKENS = 256
_RECENT = 4
_MAX_FILE = 4096
NAME = "rates.json"


@dataclass
class LoadCost:
    """Measured read and prefill rates for one model (see the module docstring)."""

    reads: deque[float] = field(default_factory=lambda: deque(maxlen=_RECENT))  # bytes/s
    prefill_tps: float | None = None
    pass_s: float | None = None

    @property
    def read_bps(self) -> float:
        return sum(self.reads) / len(self.reads) if self.reads else DEFAULT_READ_BPS

    def worth_reading(self, nbytes: int, tokens: int) -> bool:
        """True when reading `nbytes` is estimated faster than prefilling `tokens`."""
        if self.prefill_tps is None or tokens <= 0:
            return True
        return nbytes / self.read_bps + (self.pass_s or 0.0) < tokens / self.prefill_tps

    def read(self, nbytes: int, seconds: float) -> None:
        if nbytes > 0 and seconds > 0:
            self.reads.append(nbytes / seconds)

    def prefilled(self, tokens: int, seconds: float) -> bool:
        """Record a prefill; True when it changed the estimate."""
        if tokens < MIN_PREFILL_TOKENS or seconds <= 0:
            return False
        tps = tokens / seconds
        if self.prefill_tps is not None and tps <= self.prefill_tps:
            return False
        self.prefill_tps = tps
        return True

    def passed(self, cached: int, tokens: int, seconds: float) -> bool:
        """Record a lone request's time to first token over `cached` tokens already in
        place and `tokens` new ones; True when it changed the estimate (only a long history
        and a short new part count: a pass, not a prefill)."""
        if cached < MIN_PREFILL_TOKENS or tokens >= MIN_PREFILL_TOKENS or seconds <= 0:
            return False
        if self.pass_s is not None and seconds >= self.pass_s:
            return False
        self.pass_s = seconds
        return True

    def save(self, folder: Path) -> None:
        """Write the rates beside the cache files (atomically; errors are the caller's)."""
        blob = json.dumps({"reads": list(self.reads), "prefill_tps": self.prefill_tps,
                           "pass_s": self.pass_s}).encode()
        tmp = folder / f".{NAME}.{os.getpid()}.tmp"
        tmp.unlink(missing_ok=True)  # a stale or planted one: created afresh below, never followed
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0), 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(blob)
        os.replace(tmp, folder / NAME)

    @classmethod
    def load(cls, folder: Path) -> LoadCost:
        """The saved rates, or none measured when the file is missing or not ours (a
        link, not a regular file, too large, not the expected JSON, values that are no
        rate: booleans, strings, NaN, out of range). Never raises: the file lies in the
        cache folder, where anything may be found."""
        cost = cls()
        try:
            fd = os.open(folder / NAME, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0)
                         | getattr(os, "O_NONBLOCK", 0))
        except OSError:
            return cost
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_size > _MAX_FILE:
                return cost
            data = json_text.loads(os.read(fd, _MAX_FILE))  # deep nesting: ValueError
        except (OSError, ValueError):
            return cost
        finally:
            os.close(fd)
        if not isinstance(data, dict):
            return cost
        reads, tps, pass_s = data.get("reads"), data.get("prefill_tps"), data.get("pass_s")
        if isinstance(reads, list):
            cost.reads.extend(float(r) for r in reads[-_RECENT:] if _rate(r, *_READ_RANGE))
        if _rate(tps, *_PREFILL_RANGE):
            cost.prefill_tps = float(tps)
        if _rate(pass_s, *_PASS_RANGE):
            cost.pass_s = float(pass_s)
        return cost


# What a saved rate may be: bytes a second (1 MB/s to 10 TB/s), prompt tokens a second.
_READ_RANGE = (1e6, 1e13)
_PREFILL_RANGE = (1e-3, 1e9)
_PASS_RANGE = (1e-5, 60.0)  # seconds


def _rate(value: object, low: float, high: float) -> bool:
    """A number (not a boolean) within [low, high)."""
    return type(value) in (int, float) and low <= value < high  # type: ignore[operator]
