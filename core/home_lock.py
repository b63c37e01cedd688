"""One app and one server per llmdeck home, held by a lock file for the process's life.

Two apps on one home would both write the history, the settings and the worker status,
and each would load its own copy of the model: the second one is refused with the first
one's pid. `llmdeck serve` takes its own lock (`serve.lock`), so one server may run beside
one app on the same home, which is what a person running the app in one SSH window and
the API for their editor in another expects: SQLite (WAL) takes writes from both, model
downloads and the bundled model's assembly are locked per file, and each process writes
its own worker-status file. A second server on the same home is refused like a second app.
The engine service (core.service) holds `service.lock`: one service per home, whoever
starts it; its clients take no lock of their own.

The lock is an flock(2) on a file in the data folder: the kernel drops it when the process
dies, even by kill -9, so a crash never leaves a stale lock behind. The file holds the
holder's pid for the message.
"""

from __future__ import annotations

import errno
import os
import time
from pathlib import Path
from typing import IO

from core import paths

try:
    import fcntl
except ImportError:  # Windows: no flock; llmdeck targets macOS and Linux
    fcntl = None  # type: ignore[assignment]

ROLES = {"app": "llmdeck", "serve": "llmdeck serve", "service": "llmdeck service"}
_READ_ONLY = {errno.EROFS, errno.EACCES, errno.EPERM}
# How long a second instance waits for a first one that is quitting (stopping its workers
# takes up to a second or two) before it says the home is taken.
GRACE_S = 2.0
_held: dict[str, HomeLock] = {}


class HomeLockError(Exception):
    """The home cannot be used by this process; `message` says why and what to do."""

    def __init__(self, message: str, pid: int | None = None) -> None:
        super().__init__(message)
        self.message = message
        self.pid = pid


def home_label() -> str:
    """The home as the user set it, without creating anything (it may be read-only)."""
    home = os.environ.get("LLMDECK_HOME")
    if home:
        return f"LLMDECK_HOME={home}"
    import platformdirs

    return f"the data folder {platformdirs.user_data_dir(paths.APP)}"


def lock_path(role: str) -> Path:
    return paths.data_dir() / f"{role}.lock"


class HomeLock:
    """A held lock; release() (or the process's exit) lets the next instance in."""

    def __init__(self, role: str, file: IO[str] | None) -> None:
        self.role = role
        self._file = file

    @property
    def read_only(self) -> bool:
        """Held without a file: the home is read-only, so nothing here can be written."""
        return self._file is None

    def note(self, text: str) -> None:
        """A line after the pid for the next instance's refusal (serve: its URL)."""
        if self._file is not None:
            self._file.seek(0)
            self._file.truncate()
            self._file.write(f"{os.getpid()}\n{text}\n")
            self._file.flush()

    def release(self) -> None:
        if self._file is not None:
            self._file.close()  # closing drops the flock
            self._file = None
        _held.pop(self.role, None)


def acquire(role: str = "app", grace_s: float = GRACE_S) -> HomeLock:
    """Take this home's lock for `role` ("app" or "serve") or raise HomeLockError naming
    the process that holds it, or saying why the home cannot be written. A holder that is
    on its way out (quit a moment ago, still stopping its workers) gets `grace_s` to go."""
    if role in _held:
        return _held[role]
    name = ROLES[role]
    try:
        folder = paths.data_dir()
        path = folder / f"{role}.lock"
        file = open(path, "a+", encoding="utf-8")  # noqa: SIM115  (held for the process's life)
    except OSError as exc:
        if exc.errno in _READ_ONLY and _history_exists():
            # A read-only home with a history: it can be read, and nobody can write it, so
            # there is nothing for a second instance to spoil.
            lock = _held[role] = HomeLock(role, None)
            return lock
        raise HomeLockError(
            f"{name} cannot write to its home folder ({exc.strerror or exc}: "
            f"{exc.filename or home_label()}). Make it writable, or point LLMDECK_HOME at a "
            "folder you can write to.") from None
    if fcntl is not None:
        try:
            _flock(file, grace_s)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                file.close()
                raise HomeLockError(f"{name} could not lock {path}: {exc}.") from None
            file.seek(0)
            text = file.read()
            pid = _pid(text)
            file.close()
            who = f"pid {pid}" if pid else "another process"
            noted = text.splitlines()[1:2]
            if noted and noted[0].strip():
                who += f", {noted[0].strip()[:200]}"
            raise HomeLockError(
                f"{name} is already running on {home_label()} ({who}). Use that one, stop it "
                "first, or set LLMDECK_HOME to another folder to run a separate one.",
                pid) from None
    file.seek(0)
    file.truncate()
    file.write(f"{os.getpid()}\n")
    file.flush()
    lock = _held[role] = HomeLock(role, file)
    return lock


def note_held(role: str, text: str) -> None:
    """Note `text` in the lock this process holds for `role` (nothing when none)."""
    lock = _held.get(role)
    if lock is not None:
        lock.note(text)


def _flock(file: IO[str], grace_s: float) -> None:
    """flock without blocking, tried again for up to `grace_s` (flock has no timeout)."""
    deadline = time.monotonic() + grace_s
    while True:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN) \
                    or time.monotonic() >= deadline:
                raise
            time.sleep(0.05)


def _history_exists() -> bool:
    try:
        return paths.db_path().is_file()
    except OSError:  # db_path() creates the data folder, which a read-only home refuses
        return False


def holder(role: str) -> int | None:
    """The pid of another process holding this home's `role` lock, or None when it is free
    (checked by taking and dropping the flock, never by the pid file alone: a stale pid
    after a crash is no holder). An engine owner (the service, an --in-process app) asks
    before it runs, so two pools never write one history."""
    if role in _held or fcntl is None:
        return None
    try:
        file = open(paths.data_dir() / f"{role}.lock", "a+", encoding="utf-8")  # noqa: SIM115
    except OSError:
        return None
    with file:
        try:
            fcntl.flock(file.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as exc:
            if exc.errno not in (errno.EWOULDBLOCK, errno.EAGAIN, errno.EACCES):
                return None
            file.seek(0)
            return _pid(file.read()) or -1
        fcntl.flock(file.fileno(), fcntl.LOCK_UN)
    return None


def held_role() -> str | None:
    """The role this process holds a lock for ("app", "serve"), if any."""
    return next(iter(_held), None)


def _pid(text: str) -> int | None:
    try:
        return int(text.split()[0])
    except (ValueError, IndexError):
        return None
