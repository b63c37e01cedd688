"""What walls the Python sandbox runs behind, per platform, and how they go up.

Linux (no root needed; unprivileged user namespaces): the launcher unshares a user, mount,
PID, network, IPC and UTS namespace and forks the sandbox as PID 1 of the new PID
namespace. Hence:
- every process the code starts (forked, daemonised, `start_new_session`) lives in that
  namespace and the kernel kills them all when PID 1 dies: at the timeout, at a reset,
  when the app exits or is killed (PR_SET_PDEATHSIG on PID 1);
- the app's processes are not visible from inside, so none can be signalled (getppid()
  is 0 there), and a fresh /proc shows no other process's environment;
- the network namespace has only a loopback interface, down: no connection leaves;
- every mount is read-only except a tmpfs on /tmp and the scratch folders the app names
  (the working folder, the figures folder); a second user namespace on top locks those
  mounts, so code that is "root" inside cannot remount them writable. What the sandbox
  itself runs from (the interpreter, its environment, the worker script) stays visible,
  read-only, even when it lives under /tmp (a checkout or a virtual environment there).
What it does not do: hide files from reading (the code reads what the user can read),
limit CPU share or disk I/O bandwidth.

Processes: RLIMIT_NPROC counts them, but the kernel exempts root from it; when the app
runs as root, a pids cgroup (`pids_cgroup`, v1 or v2) caps the sandbox's process count
instead.

macOS: `sandbox-exec` with a small profile (no network, no writes outside the scratch
folders and temp, no signals or process inspection beyond its own processes), plus the
rlimits, its own session (the whole group is killed at the timeout) and a sweep of its
descendants after each run; a daemon that double-forks away from it is re-parented to
launchd and is not found by that sweep. Not testable on this Linux box.
"""

from __future__ import annotations

import contextlib
import ctypes
import errno
import os
import sys
from dataclasses import dataclass

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY = 0x1
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64 (new syscalls are unified)


class JailError(OSError):
    """A wall could not go up; the launcher falls back and says what is missing."""


@dataclass(frozen=True, slots=True)
class Walls:
    """Which walls are up (the worker reports it; the README lists the same)."""

    pid_namespace: bool = False
    network: bool = False
    read_only: bool = False
    own_proc: bool = False

    def as_dict(self) -> dict[str, bool]:
        return {"pid_namespace": self.pid_namespace, "network": self.network,
                "read_only": self.read_only, "own_proc": self.own_proc}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(err, f"{what}: {os.strerror(err)}")


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


def unshare_namespaces() -> None:
    """Enter new user/mount/PID/net/IPC/UTS namespaces, mapping ourselves to root inside.

    The calling process stays in the old PID namespace; its next child is PID 1 of the
    new one. Raises JailError where user namespaces are off (some distributions, Docker's
    default seccomp profile)."""
    uid, gid = os.geteuid(), os.getegid()
    flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
             | CLONE_NEWUTS)
    _check(_libc().unshare(flags), "unshare")
    _map_ids(uid, gid)


def _map_ids(uid: int, gid: int) -> None:
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:  # kernels before 3.19
        pass
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags),
                         enc(data)), f"mount {target}")


def _set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    """mount_setattr(2) (Linux 5.12+): flip the read-only flag of a mount (tree)."""

    class MountAttr(ctypes.Structure):
        _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                    ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]

    attr = MountAttr(MOUNT_ATTR_RDONLY if read_only else 0,
                     0 if read_only else MOUNT_ATTR_RDONLY, 0, 0)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                          path.encode(), ctypes.c_uint(AT_RECURSIVE if recursive else 0),
                          ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(0 if result == 0 else -1, f"mount_setattr {path}")


def _under_tmp(path: str) -> bool:
    return os.path.abspath(path).startswith("/tmp/")


def build_walls(writable: list[str], tmp_bytes: int, needed: list[str] = ()) -> Walls:
    """In PID 1 of the new namespaces: a fresh /proc, everything read-only but `writable`
    (and a tmpfs on /tmp), then a second user namespace to lock it. Returns what holds.

    `needed` are folders the sandbox runs from (interpreter, environment, worker script):
    those under /tmp are bound back, read-only, over the fresh tmpfs, or the worker could
    not even start (a checkout or a venv under /tmp, as a CI clone may be)."""
    uid, gid = os.geteuid(), os.getegid()  # 0 inside, as mapped
    # Keep handles on the scratch folders before /tmp is covered (they may live under it).
    keep = sorted({os.path.abspath(p) for p in needed if _under_tmp(p) and os.path.isdir(p)})
    kept = [(path, os.open(path, os.O_PATH | os.O_DIRECTORY)) for path in keep]
    handles = []
    for path in writable:
        os.makedirs(path, exist_ok=True)
        handles.append((path, os.open(path, os.O_PATH | os.O_DIRECTORY)))
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do leaks back to the host
    own_proc = True
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except JailError:
        own_proc = False  # a masked /proc (containers) refuses a new one; README says so
    read_only = True
    try:
        _set_read_only("/", True, recursive=True)
    except JailError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            raise
        read_only = False
    if read_only and own_proc:  # /proc/self/uid_map must stay writable for the lock below
        _set_read_only("/proc", False, recursive=False)
    _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={max(tmp_bytes, 1 << 20)},mode=1777")
    for path, fd in kept:  # what the sandbox runs from, back under the tmpfs, read-only
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if read_only:
            _set_read_only(path, True, recursive=True)
        os.close(fd)
    for path, fd in handles:
        os.makedirs(path, exist_ok=True)  # inside the new tmpfs when under /tmp
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if read_only:
            _set_read_only(path, False, recursive=False)
        os.close(fd)
    # Mounts copied into a mount namespace owned by a less privileged user namespace are
    # locked: the code, root in that namespace, cannot remount them writable or unmount them.
    _check(_libc().unshare(CLONE_NEWUSER | CLONE_NEWNS), "unshare (lock)")
    _map_ids(uid, gid)
    return Walls(pid_namespace=True, network=True, read_only=read_only, own_proc=own_proc)


CGROUP_PREFIX = "llmdeck-sandbox-"


def _pids_hierarchy() -> str | None:
    """Where a pids cgroup can be made: cgroup v1's pids mount, or v2's root."""
    if os.path.isfile("/sys/fs/cgroup/pids/cgroup.procs"):
        return "/sys/fs/cgroup/pids"
    try:
        with open("/sys/fs/cgroup/cgroup.subtree_control") as f:
            return "/sys/fs/cgroup" if "pids" in f.read().split() else None
    except OSError:
        return None


def pids_cgroup(name: str, limit: int) -> str | None:
    """As root, a pids cgroup capped at `limit` for one sandbox (None where there is
    none to make: not root, not Linux, no pids controller). Empty ones left by an app
    that died are removed on the way."""
    if not sys.platform.startswith("linux") or os.geteuid() != 0 or limit <= 0:
        return None
    base = _pids_hierarchy()
    if base is None:
        return None
    for entry in os.listdir(base):
        if entry.startswith(CGROUP_PREFIX) and entry != name:
            owner = entry[len(CGROUP_PREFIX):].split("-")[0]
            if owner.isdigit() and not os.path.exists(f"/proc/{owner}"):
                with contextlib.suppress(OSError):
                    os.rmdir(os.path.join(base, entry))
    path = os.path.join(base, name)
    try:
        os.makedirs(path, exist_ok=True)
        _write(os.path.join(path, "pids.max"), str(limit))
    except OSError:
        return None
    return path


def join_cgroup(path: str) -> None:
    """Move the calling process (and so every process it starts) into `path`."""
    _write(os.path.join(path, "cgroup.procs"), str(os.getpid()))


def remove_cgroup(path: str) -> bool:
    """Remove an emptied cgroup (False while a killed process is still on its way out)."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return True
    except OSError:
        return False
    return True


MACOS_PROFILE = """(version 1)
(allow default)
(deny network*)
(allow network* (remote unix-socket))
(deny file-write*)
(allow file-write* {paths} (literal "/dev/null") (subpath "/private/var/folders")
       (subpath "/private/tmp"))
(deny process-info* (target others))
(deny signal (target others))
"""


def macos_profile(writable: list[str]) -> str:
    """A sandbox-exec profile: no network, writes only to `writable` and temp folders,
    no signals or process inspection outside its own processes. sandbox-exec is deprecated
    by Apple but still shipped; the profile is kept small so it is easy to audit."""
    quoted = " ".join('(subpath "{}")'.format(os.path.realpath(p).replace('"', '\\"'))
                      for p in writable)
    return MACOS_PROFILE.format(paths=quoted)
