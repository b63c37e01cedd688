"""Memory and time bounds on reading one document, for parsers nobody foresaw.

The checks before a converter (office_zip, pdf_streams, markup_shape) refuse the hostile
files we know with a sentence. This is the net under them, for the documents worker only:
while one file is read,

- memory: RLIMIT_DATA is lowered to the writable memory the process holds now plus
  `memory_bytes`, so an allocation past it fails, in C code too (Python raises
  MemoryError, which extract turns into a sentence); where the kernel does not keep that
  limit (macOS), a watchdog thread that sees the resident size grow past the same budget
  ends the process instead;
- time: SIGALRM at `seconds` raises OverTime in the reading thread (between two Python
  steps); a converter stuck inside C code cannot be interrupted that way, so the watchdog
  ends the process GRACE_S later with EXIT_OVER_TIME, which the app side turns into the
  same sentence;
- a pulse: every PULSE_S the watchdog reports ("converting", seconds so far, the limit),
  so a converter that says nothing for a minute still shows that it works, and the person
  can cancel it (the app kills the worker).

The limits are lifted again when the file is read: the embedding model that runs after
it in the same process needs what it needs. The process exits on an overrun: call this
only in a process of its own, never in the app.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass

DEFAULT_MEMORY_BYTES = 1024 * 1024 * 1024
DEFAULT_SECONDS = 180.0
GRACE_S = 3.0
PULSE_S = 1.0
WATCH_S = 0.05
EXIT_OVER_TIME = 86  # the worker's exit code when the watchdog ends a read past its time
EXIT_OVER_MEMORY = 87  # ... past its memory (where RLIMIT_DATA does not hold)

Progress = Callable[[str, int, int], None]


@dataclass(frozen=True, slots=True)
class ReadBounds:
    """What reading one document may take beyond what the process already holds."""

    memory_bytes: int = DEFAULT_MEMORY_BYTES
    seconds: float = DEFAULT_SECONDS


class OverTime(BaseException):  # noqa: N818 - a signal, like KeyboardInterrupt, not an error
    """Raised in the reading thread at the time limit. A BaseException, so that a
    converter's `except Exception` (markitdown tries its next converter) lets it through."""


class _Guard:
    """The state one bounded read shares between its thread and the watchdog."""

    def __init__(self, bounds: ReadBounds, progress: Progress | None) -> None:
        import psutil

        self.bounds = bounds
        self.progress = progress
        self.process = psutil.Process()
        self.rss_limit = self.process.memory_info().rss + bounds.memory_bytes
        self.started = time.monotonic()
        self.stop = threading.Event()
        self.lock = threading.Lock()  # one progress report at a time (a pipe is not shared)
        self.sending = False
        self.overdue = False
        self.watch_rss = False  # only where RLIMIT_DATA could not be set

    def report(self, stage: str, done: int, total: int) -> None:
        """`progress`, safe from both threads; an alarm during a send waits for its end
        (a message cut in half would garble the pipe to the app)."""
        if self.progress is None:
            return
        with self.lock:
            self.sending = True
            try:
                self.progress(stage, done, total)
            finally:
                self.sending = False
        if self.overdue and threading.current_thread() is threading.main_thread():
            raise OverTime()

    def on_alarm(self, signum: int, frame: object) -> None:
        if self.sending:  # try again in a moment, once the message is out
            self.overdue = True
            signal.setitimer(signal.ITIMER_REAL, WATCH_S)
            return
        raise OverTime()

    def watch(self) -> None:
        seconds = self.bounds.seconds
        next_pulse = PULSE_S
        while not self.stop.wait(WATCH_S):
            elapsed = time.monotonic() - self.started
            if elapsed > seconds + GRACE_S:
                os._exit(EXIT_OVER_TIME)
            try:
                if self.watch_rss and self.process.memory_info().rss > self.rss_limit:
                    os._exit(EXIT_OVER_MEMORY)
            except Exception:  # noqa: BLE001 - a failed look is no reason to stop reading
                pass
            if elapsed >= next_pulse:
                next_pulse += PULSE_S
                try:
                    self.report("converting", int(elapsed), int(seconds))
                except OverTime:  # only the reading thread raises it
                    pass
                except Exception:  # noqa: BLE001 - the app went away: the parent check ends us
                    pass


@contextmanager
def bounded(bounds: ReadBounds, progress: Progress | None = None) -> Iterator[Progress]:
    """Run the block under `bounds`; yields the progress function the block must use
    (safe beside the watchdog's pulse). Raises OverTime at the time limit."""
    guard = _Guard(bounds, progress)
    watchdog = threading.Thread(target=guard.watch, name="read-watchdog", daemon=True)
    watchdog.start()  # before the memory limit: its stack is mapped now
    restore_limit = _limit_data(bounds.memory_bytes, guard)
    guard.watch_rss = restore_limit is None
    in_main = threading.current_thread() is threading.main_thread()
    old_handler = None
    if in_main and hasattr(signal, "setitimer"):
        old_handler = signal.signal(signal.SIGALRM, guard.on_alarm)
        signal.setitimer(signal.ITIMER_REAL, bounds.seconds)
    try:
        yield guard.report
    finally:
        if old_handler is not None:
            signal.setitimer(signal.ITIMER_REAL, 0)
            signal.signal(signal.SIGALRM, old_handler)
        if restore_limit is not None:
            restore_limit()
        guard.stop.set()
        watchdog.join()


def _limit_data(budget: int, guard: _Guard) -> Callable[[], None] | None:
    """Lower RLIMIT_DATA's soft limit to the process's writable memory now plus
    `budget`; returns the undo, or None where the platform does not keep such a limit
    (then the watchdog's resident-size check stands in).

    RLIMIT_DATA (Linux 4.7 on) counts private writable mappings: what a process can
    actually fill. RLIMIT_AS counts address space merely reserved, and pyarrow's
    allocator (under pandas, for XLSX) or a new thread's malloc arena reserve hundreds of
    MB at once: under RLIMIT_AS a 2-cell spreadsheet failed to convert."""
    try:
        import resource

        if not sys.platform.startswith("linux"):
            return None
        soft, hard = resource.getrlimit(resource.RLIMIT_DATA)
        wanted = guard.process.memory_info().data + budget
        if hard != resource.RLIM_INFINITY:
            wanted = min(wanted, hard)
        if soft != resource.RLIM_INFINITY and soft <= wanted:
            return lambda: None  # already as tight
        resource.setrlimit(resource.RLIMIT_DATA, (wanted, hard))
    except (ImportError, ValueError, OSError, AttributeError):
        return None

    def undo() -> None:
        try:
            resource.setrlimit(resource.RLIMIT_DATA, (soft, hard))
        except (ValueError, OSError):
            pass

    return undo


def memory_error_in(exc: BaseException) -> bool:
    """Whether `exc` is, wraps or follows a MemoryError (markitdown wraps a converter's
    failure in FileConversionException, keeping the original in `attempts`)."""
    seen: set[int] = set()
    todo: list[BaseException | None] = [exc]
    while todo:
        current = todo.pop()
        if current is None or id(current) in seen:
            continue
        seen.add(id(current))
        if isinstance(current, MemoryError):
            return True
        todo += [current.__cause__, current.__context__]
        for attempt in getattr(current, "attempts", None) or ():
            info = getattr(attempt, "exc_info", None)
            if info and len(info) > 1 and isinstance(info[1], BaseException):
                todo.append(info[1])
    return False
