"""A cluster's state in a small JSON file, one per cluster, beside the worker status files.

`llmdeck cluster up` starts the ranks and exits; `status`, `down`, `llmdeck workers` and a
server that wants the same cluster run later, in other processes (often another SSH
window). The file tells them which processes to watch or stop; whether those still run is
checked by pid every time it is read, so a stale file never claims a cluster is up.
"""

from __future__ import annotations

import json
import os
import stat
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from core import json_text, paths

MAX_STATE_BYTES = 256 * 1024  # a handful of ranks; anything bigger is not ours


@dataclass
class RankState:
    """One rank: where it runs and the local process standing for it (the rank itself on
    this machine; the ssh client that carries it for another host)."""

    rank: int
    host: str
    pid: int = 0
    local: bool = True


@dataclass
class ClusterState:
    name: str
    state: str  # starting | up | down | failed
    url: str = ""  # rank 0's OpenAI API base (…/v1)
    launcher_pid: int = 0  # mlx.launch, leader of the process group every local rank is in
    owner_pid: int = 0  # the llmdeck process that started it (0: nobody waits on it)
    backend: str = "ring"
    mode: str = "tensor"
    log: str = ""
    started: float = 0.0
    error: str = ""
    ranks: list[RankState] = field(default_factory=list)

    def endpoint(self) -> str:
        return self.url or "-"


class BadClusterName(ValueError):
    """A name that is not a cluster's (it would climb out of the clusters folder)."""


def clusters_dir() -> Path:
    folder = paths.data_dir() / "clusters"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def checked_name(name: str) -> str:
    """`name` when it is a cluster's name as settings take it (letters, digits, _ and -,
    1 to 64: no `/`, no `..`), else BadClusterName with the rule's sentence."""
    from core import settings_rules as rules

    try:
        return rules.cluster_name(name) if isinstance(name, str) else rules.cluster_name("")
    except rules.Refused as exc:
        raise BadClusterName(str(exc)) from None


def _inside(name: str, suffix: str) -> Path:
    folder = clusters_dir()
    path = folder / f"{checked_name(name)}{suffix}"
    if path.parent.resolve() != folder.resolve() or path.name != f"{name}{suffix}":
        raise BadClusterName(f"{name!r} does not name a file inside {folder}.")
    return path


def state_path(name: str) -> Path:
    return _inside(name, ".json")


def log_path(name: str) -> Path:
    return _inside(name, ".log")


def write_state(state: ClusterState) -> None:
    """Replace the file atomically, so a reader never sees half of it."""
    path = state_path(state.name)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        tmp.write_text(json.dumps(asdict(state)), encoding="utf-8")
        tmp.replace(path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def read_state(name: str) -> ClusterState | None:
    """The last state written for `name`; None when there is none or it is not ours: a
    bad name, a link or anything but a plain file, or a file whose own `name` is not
    `name` (a planted one naming somewhere else to write)."""
    try:
        path = state_path(name)
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
        with os.fdopen(fd, "rb") as f:
            if not stat.S_ISREG(os.fstat(f.fileno()).st_mode):
                return None
            raw = f.read(MAX_STATE_BYTES + 1)
        if len(raw) > MAX_STATE_BYTES:
            return None
        data = json_text.loads(raw.decode("utf-8", "replace"))
        state = _state(data)
    except (OSError, ValueError, TypeError, KeyError):
        return None
    if state.name != name:
        return None
    state.log = str(log_path(name))  # ours, whatever the file says
    return state


def _state(data: Any) -> ClusterState:
    if not isinstance(data, dict):
        raise TypeError("not an object")
    ranks = [RankState(int(r["rank"]), str(r["host"]), int(r.get("pid", 0)), bool(r.get("local", True)))
             for r in data.get("ranks", []) if isinstance(r, dict)]
    return ClusterState(
        name=str(data["name"]), state=str(data.get("state", "down")), url=str(data.get("url", "")),
        launcher_pid=int(data.get("launcher_pid", 0)), owner_pid=int(data.get("owner_pid", 0)),
        backend=str(data.get("backend", "ring")), mode=str(data.get("mode", "tensor")),
        log=str(data.get("log", "")), started=float(data.get("started", 0.0)),
        error=str(data.get("error", "")), ranks=ranks)


def alive(pid: int) -> bool:
    """True while `pid` runs (a zombie, dead but not yet reaped, counts as gone)."""
    if pid <= 0:
        return False
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False
    except psutil.Error:
        return True


def now() -> float:
    return time.time()
