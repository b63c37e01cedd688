"""What walls the Python sandbox runs behind, per platform, and how they go up.

Linux (unprivileged user namespaces; as a user or as root): the launcher calls
`unshare_namespaces` (user, mount, PID, network, IPC and UTS namespaces), forks PID 1 of
the new PID namespace, which calls `build_walls` and then `lock_down` and execs the
sandbox. Hence:
- every process the code starts lives in that PID namespace; the kernel kills them all
  when PID 1 dies (at the timeout, a reset, when the app exits or is killed); the app's
  processes are not visible from inside, and a fresh /proc shows no other environment;
- the network namespace has only a loopback interface, down: no connection leaves;
- every mount is read-only, nosuid and nodev; /proc/sys, /proc/sysrq-trigger, /proc/irq,
  /proc/bus and /proc/fs are read-only too; the only writable place is /tmp, a tmpfs of
  `scratch_bytes` (the sandbox's working folder); /dev is a fresh tmpfs holding null,
  zero, full, random and urandom (bound from the host), a small /dev/shm and the fd
  links: no terminal, no pts, no loop device, no kmsg;
- a second user namespace on top locks those mounts: code that is "root" inside cannot
  remount or unmount them;
- as root, "root" inside is an unprivileged id outside (HOST_ID_FOR_ROOT): host files
  keep their owners' permissions (/etc/shadow unreadable, /proc/sys/kernel/core_pattern
  unwritable even if /proc/sys were not read-only). The folders the sandbox runs from
  (the interpreter, its environment, the worker's folder) are bound back, read-only, over
  a tmpfs where an ancestor is closed to that id (/root is 0700) or lies under /tmp;
- `lock_down`: NO_NEW_PRIVS, every capability dropped (bounding, ambient, inheritable,
  permitted, effective; SECBIT_NOROOT locked, so exec as uid 0 inside regains none), and
  the seccomp filter of seccomp.py (no new Unix sockets, ptrace, bpf, io_uring, key
  rings, mounts, namespaces, TIOCSTI, ...). It also runs where there are no namespaces,
  before the sandbox is exec'd in place.
What it does not do: hide files from reading (the code reads what the user, or as root
the unprivileged id, can read), limit CPU share or disk I/O bandwidth.

Totals: RLIMIT_NPROC counts processes, but the kernel exempts root from it; as root a
pids cgroup and a memory cgroup (cgroups.py) cap the count and the memory of all the
sandbox's processes together (tmpfs pages included), v1 or v2.

macOS: the Seatbelt profile of macos_profile.py.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace

from core.tools.sandbox import seccomp

CLONE_NEWNS = 0x00020000
CLONE_NEWUTS = 0x04000000
CLONE_NEWIPC = 0x08000000
CLONE_NEWUSER = 0x10000000
CLONE_NEWPID = 0x20000000
CLONE_NEWNET = 0x40000000
MS_NOSUID, MS_NODEV, MS_NOEXEC = 2, 4, 8
MS_BIND, MS_REC, MS_PRIVATE = 4096, 16384, 1 << 18
MOUNT_ATTR_RDONLY, MOUNT_ATTR_NOSUID, MOUNT_ATTR_NODEV, MOUNT_ATTR_NOEXEC = 0x1, 0x2, 0x4, 0x8
AT_FDCWD = -100
AT_RECURSIVE = 0x8000
SYS_MOUNT_SETATTR = 442  # the same number on x86_64 and aarch64 (new syscalls are unified)
PR_GET_PDEATHSIG, PR_SET_PDEATHSIG = 2, 1
PR_SET_DUMPABLE = 4
PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_SET_NO_NEW_PRIVS, PR_GET_NO_NEW_PRIVS = 38, 39
PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL = 47, 4
# NOROOT, NO_SETUID_FIXUP, KEEP_CAPS (off) and NO_CAP_AMBIENT_RAISE, each with its lock.
SECUREBITS_LOCKED = 0x01 | 0x02 | 0x04 | 0x08 | 0x20 | 0x40 | 0x80
CAPABILITY_VERSION_3 = 0x20080522

# The host id "root" inside the sandbox maps to when the app runs as root: no account
# has it, so it owns no host file and shares no process with anything on the host.
# 65534 (nobody) is the second choice, for user namespaces that map only 0-65535.
HOST_ID_FOR_ROOT = 2_000_000_000
HOST_IDS_FOR_ROOT = (HOST_ID_FOR_ROOT, 65534)
DEVICES = ("null", "zero", "full", "random", "urandom")
DEV_LINKS = {"fd": "/proc/self/fd", "stdin": "/proc/self/fd/0",
             "stdout": "/proc/self/fd/1", "stderr": "/proc/self/fd/2"}
PROC_READ_ONLY = ("/proc/sys", "/proc/sysrq-trigger", "/proc/irq", "/proc/bus", "/proc/fs")
SHM_BYTES = 64 << 20  # /dev/shm at most (POSIX semaphores of multiprocessing live there)
COVER_BYTES = 1 << 20  # the tmpfs laid over a folder closed to the unprivileged id


class JailError(OSError):
    """A wall could not go up; str() is a sentence the launcher can show as it is."""

    def __str__(self) -> str:
        return self.strerror or super().__str__()


@dataclass(frozen=True, slots=True)
class Walls:
    """Which walls are up (the worker reports it; the README lists the same)."""

    pid_namespace: bool = False
    network: bool = False
    read_only: bool = False
    own_proc: bool = False
    fresh_dev: bool = False  # /dev holds only null, zero, full, random, urandom, shm
    proc_sys_read_only: bool = False
    unprivileged: bool = False  # "root" inside is not root outside
    scratch_bytes: int = 0  # the size of /tmp, the only writable place (0: no tmpfs)
    no_new_privs: bool = False  # lock_down's parts (see `locked`)
    caps_dropped: bool = False
    seccomp: bool = False

    def locked(self, parts: dict[str, bool]) -> Walls:
        """These walls plus what `lock_down` reported."""
        return replace(self, no_new_privs=bool(parts.get("no_new_privs")),
                       caps_dropped=bool(parts.get("caps_dropped")),
                       seccomp=bool(parts.get("seccomp")))

    def as_dict(self) -> dict[str, bool]:
        return {"pid_namespace": self.pid_namespace, "network": self.network,
                "read_only": self.read_only, "own_proc": self.own_proc,
                "fresh_dev": self.fresh_dev, "proc_sys_read_only": self.proc_sys_read_only,
                "unprivileged": self.unprivileged, "no_new_privs": self.no_new_privs,
                "caps_dropped": self.caps_dropped, "seccomp": self.seccomp}


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _check(result: int, what: str) -> None:
    if result != 0:
        err = ctypes.get_errno()
        raise JailError(err, f"The sandbox could not build its walls ({what}: "
                        f"{os.strerror(err)}).")


def _prctl(option: int, arg: int = 0, arg3: int = 0) -> int:
    return _libc().prctl(option, ctypes.c_ulong(arg), ctypes.c_ulong(arg3), ctypes.c_ulong(0),
                         ctypes.c_ulong(0))


def _write(path: str, text: str) -> None:
    fd = os.open(path, os.O_WRONLY)
    try:
        os.write(fd, text.encode())
    finally:
        os.close(fd)


# --- namespaces and ids ---------------------------------------------------------------

def unshare_namespaces() -> None:
    """Enter new user/mount/PID/net/IPC/UTS namespaces, with "root" inside.

    As a user, inside-root is that user. As root, inside-root is HOST_ID_FOR_ROOT: a
    helper forked beforehand (still outside, with the privilege to map any id) writes
    the map, and `build_walls` takes that id on. The calling process stays in the old PID
    namespace; its next child is PID 1 of the new one. Raises JailError (a sentence)
    where user namespaces are off (some distributions, Docker's default seccomp profile)
    or, as root, where no unprivileged id can be mapped."""
    uid, gid = os.geteuid(), os.getegid()
    flags = (CLONE_NEWUSER | CLONE_NEWNS | CLONE_NEWPID | CLONE_NEWNET | CLONE_NEWIPC
             | CLONE_NEWUTS)
    if uid != 0:
        _unshare(flags)
        _map_ids(uid, gid)
        return
    host_id = _unprivileged_id()
    os.setgroups([])  # root's supplementary groups would stay host groups inside
    go_r, go_w = os.pipe()
    me = os.getpid()
    helper = os.fork()
    if helper == 0:  # outside the new namespace: allowed to map inside-root to any id
        os.close(go_w)
        code = 1
        try:
            if os.read(go_r, 1) == b"1":
                _write(f"/proc/{me}/setgroups", "deny")
                _write(f"/proc/{me}/uid_map", f"0 {host_id} 1")
                _write(f"/proc/{me}/gid_map", f"0 {host_id} 1")
                code = 0
        except BaseException:  # noqa: BLE001 - the parent reports it from the exit code
            code = 1
        finally:
            os._exit(code)
    os.close(go_r)
    try:
        _unshare(flags)
        os.write(go_w, b"1")
    finally:
        os.close(go_w)
        _, status = os.waitpid(helper, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise JailError(errno.EPERM, "As root, the sandbox could not map its root to an "
                        "unprivileged id, so it will not run code as root.")


def _unshare(flags: int) -> None:
    if _libc().unshare(ctypes.c_int(flags)) != 0:
        err = ctypes.get_errno()
        raise JailError(err, "This system does not allow user namespaces "
                        f"({os.strerror(err)}), so the sandbox cannot build its walls.")


def _map_ids(uid: int, gid: int) -> None:
    try:
        _write("/proc/self/setgroups", "deny")
    except FileNotFoundError:  # kernels before 3.19
        pass
    _write("/proc/self/uid_map", f"0 {uid} 1")
    _write("/proc/self/gid_map", f"0 {gid} 1")


def _mapped_ranges(path: str) -> list[tuple[int, int]]:
    ranges = []
    try:
        with open(path) as f:
            for line in f:
                inside, _outside, count = (int(x) for x in line.split())
                ranges.append((inside, inside + count))
    except (OSError, ValueError):
        pass
    return ranges


def _unprivileged_id() -> int:
    """The id inside-root becomes as root: one that this (maybe nested) namespace maps."""
    users, groups = _mapped_ranges("/proc/self/uid_map"), _mapped_ranges("/proc/self/gid_map")
    for candidate in HOST_IDS_FOR_ROOT:
        if (any(lo <= candidate < hi for lo, hi in users)
                and any(lo <= candidate < hi for lo, hi in groups)):
            return candidate
    raise JailError(errno.EPERM, "As root, the sandbox needs an unprivileged id to run "
                    "code as, and this container maps none; it will not run code as root.")


def _root_outside() -> int | None:
    """The id (in the parent namespace) that root in our user namespace is."""
    try:
        with open("/proc/self/uid_map") as f:
            for line in f:
                inside, outside, _count = (int(x) for x in line.split())
                if inside == 0:
                    return outside
    except (OSError, ValueError):
        pass
    return None


# --- mounts ---------------------------------------------------------------------------

def _mount(source: str | None, target: str, fstype: str | None, flags: int,
           data: str | None = None) -> None:
    def enc(text: str | None) -> bytes | None:
        return text.encode() if text is not None else None

    _check(_libc().mount(enc(source), enc(target), enc(fstype), ctypes.c_ulong(flags),
                         enc(data)), f"mount {target}")


class _MountAttr(ctypes.Structure):
    _fields_ = [("attr_set", ctypes.c_uint64), ("attr_clr", ctypes.c_uint64),
                ("propagation", ctypes.c_uint64), ("userns_fd", ctypes.c_uint64)]


def _set_attrs(path: str, set_: int, clear: int = 0, recursive: bool = False) -> None:
    """mount_setattr(2) (Linux 5.12+): set and clear flags of a mount (tree)."""
    attr = _MountAttr(set_, clear, 0, 0)
    libc = _libc()
    libc.syscall.restype = ctypes.c_long
    result = libc.syscall(ctypes.c_long(SYS_MOUNT_SETATTR), ctypes.c_int(AT_FDCWD),
                          path.encode(), ctypes.c_uint(AT_RECURSIVE if recursive else 0),
                          ctypes.byref(attr), ctypes.c_size_t(ctypes.sizeof(attr)))
    _check(0 if result == 0 else -1, f"mount_setattr {path}")


def _set_read_only(path: str, read_only: bool, recursive: bool) -> None:
    if read_only:
        _set_attrs(path, MOUNT_ATTR_RDONLY, 0, recursive)
    else:
        _set_attrs(path, 0, MOUNT_ATTR_RDONLY, recursive)


def _under(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip("/") + "/")


def _open_to(st: os.stat_result, uid: int) -> bool:
    """Whether a folder can be walked through by `uid` (its group is `uid` too, no
    supplementary groups): the plain permission bits, as the kernel checks them."""
    if st.st_uid == uid:
        return bool(st.st_mode & stat.S_IXUSR)
    if st.st_gid == uid:
        return bool(st.st_mode & stat.S_IXGRP)
    return bool(st.st_mode & stat.S_IXOTH)


def _covers(needed: Sequence[str], uid: int | None) -> dict[str, list[str]]:
    """Which folders get a tmpfs laid over them, each with the needed folders under it to
    bind back: /tmp (the scratch tmpfs) and, when the code will run as another id
    (`uid`), the outermost ancestor of a needed folder that this id cannot walk."""
    paths = set()
    for path in needed:
        for form in (os.path.abspath(path), os.path.realpath(path)):
            if os.path.isdir(form):
                paths.add(form)
    covers: dict[str, list[str]] = {"/tmp": []}
    for path in sorted(paths - {"/", "/tmp"}):  # (never the host's whole /tmp back)
        cover = "/tmp" if _under(path, "/tmp") else None
        if cover is None and uid is not None:
            walked = "/"
            for part in path.strip("/").split("/")[:-1]:
                walked = os.path.join(walked, part)
                if not _open_to(os.stat(walked), uid):
                    cover = walked
                    break
        if cover is not None:
            covers.setdefault(cover, []).append(path)
    for cover, inside in covers.items():  # a folder under another is bound with it
        covers[cover] = [p for p in inside if not any(q != p and _under(p, q) for q in inside)]
    return covers


def build_walls(scratch_bytes: int, needed: Sequence[str] = ()) -> Walls:
    """In PID 1 of the new namespaces: take on inside-root, a fresh /proc (its /proc/sys
    read-only), everything read-only, nosuid and nodev, a fresh minimal /dev, /tmp a
    tmpfs of `scratch_bytes` (the only writable place), then a second user namespace to
    lock it all. Returns what holds; raises JailError (a sentence) when a wall fails.

    `needed` are the folders the sandbox runs from (interpreter, environment, worker
    script): they stay visible, read-only, even under /tmp or under a folder the
    unprivileged id cannot walk. Figures and the like go back over the channel as bytes:
    no host folder is writable."""
    try:
        return _build_walls(scratch_bytes, list(needed))
    except JailError:
        raise
    except OSError as exc:
        raise JailError(exc.errno or errno.EPERM,
                        f"The sandbox could not build its walls ({exc}).") from exc


def _build_walls(scratch_bytes: int, needed: list[str]) -> Walls:
    libc = _libc()
    deathsig = ctypes.c_int(0)
    libc.prctl(PR_GET_PDEATHSIG, ctypes.byref(deathsig), 0, 0, 0)
    outside = _root_outside()
    switching = os.geteuid() != 0  # as root: we are still host root, unmapped here
    covers = _covers(needed, outside if switching else None)
    # Handles on what must stay visible, opened while we may still walk to it; and on
    # the host's harmless devices, before a fresh /dev covers them.
    kept = [(cover, path, os.open(path, os.O_PATH | os.O_DIRECTORY))
            for cover, paths in covers.items() for path in paths]
    devices = [(name, os.open(f"/dev/{name}", os.O_PATH)) for name in DEVICES]
    if switching:  # become inside-root: the unprivileged id outside, no host groups
        os.setresgid(0, 0, 0)
        os.setresuid(0, 0, 0)
    # A change of id makes the process undumpable (its /proc/self would then belong to
    # host root, and the lock below could not write its uid_map) and clears the
    # parent-death signal: both back as they were.
    _prctl(PR_SET_DUMPABLE, 1)
    if deathsig.value:
        _prctl(PR_SET_PDEATHSIG, deathsig.value)
    _mount(None, "/", None, MS_REC | MS_PRIVATE)  # nothing we do leaks back to the host
    own_proc = True
    try:
        _mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC)
    except JailError:
        own_proc = False  # a masked /proc (containers) refuses a new one; README says so
    read_only = True
    try:
        _set_attrs("/", MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
                   recursive=True)
    except JailError as exc:
        if exc.errno not in (errno.ENOSYS, errno.EPERM, errno.EINVAL):
            raise
        read_only = False
    proc_sys_read_only = _proc_read_only(read_only)
    if read_only and own_proc:  # /proc/self/uid_map must stay writable for the lock below
        _set_read_only("/proc", False, recursive=False)
    scratch = max(scratch_bytes, 1 << 20)
    for cover in covers:
        if cover == "/tmp":
            _mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID | MS_NODEV, f"size={scratch},mode=1777")
        else:
            _mount("tmpfs", cover, "tmpfs", MS_NOSUID | MS_NODEV, f"size={COVER_BYTES},mode=755")
    for _cover, path, fd in kept:  # what the sandbox runs from, back, read-only
        os.makedirs(path, exist_ok=True)
        _mount(f"/proc/self/fd/{fd}", path, None, MS_BIND | MS_REC)
        if read_only:
            _set_read_only(path, True, recursive=True)
        os.close(fd)
    if read_only:
        for cover in covers:
            if cover != "/tmp":
                _set_read_only(cover, True, recursive=False)
    fresh_dev = _fresh_dev(devices, scratch, read_only)
    uid_outside = _root_outside()
    # Mounts copied into a mount namespace owned by a less privileged user namespace are
    # locked: the code, root in that namespace, cannot remount them writable or unmount them.
    _unshare(CLONE_NEWUSER | CLONE_NEWNS)
    _map_ids(0, 0)
    if deathsig.value:
        _prctl(PR_SET_PDEATHSIG, deathsig.value)
    return Walls(pid_namespace=True, network=True, read_only=read_only, own_proc=own_proc,
                 fresh_dev=fresh_dev, proc_sys_read_only=proc_sys_read_only,
                 unprivileged=uid_outside not in (None, 0), scratch_bytes=scratch)


def _proc_read_only(read_only: bool) -> bool:
    """/proc/sys and its kin bound over themselves, read-only (a sysctl the namespace's
    root owns, e.g. its own network's, stays unwritable too)."""
    if not read_only:
        return False
    for path in PROC_READ_ONLY:
        if not os.path.exists(path):
            continue
        _mount(path, path, None, MS_BIND | MS_REC)
        _set_attrs(path, MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV
                   | MOUNT_ATTR_NOEXEC, recursive=True)
    return True


def _fresh_dev(devices: list[tuple[str, int]], scratch: int, read_only: bool) -> bool:
    """A tmpfs on /dev with the harmless devices bound from the host, /dev/shm and the fd
    links; the host's terminals, pts, loop devices and kmsg are out of reach under it."""
    _mount("tmpfs", "/dev", "tmpfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, "size=65536,mode=755")
    for name, fd in devices:
        target = f"/dev/{name}"
        os.close(os.open(target, os.O_CREAT | os.O_WRONLY, 0o666))
        _mount(f"/proc/self/fd/{fd}", target, None, MS_BIND)
        if read_only:  # the bind took the nodev of "/" above; these five are the devices
            _set_attrs(target, MOUNT_ATTR_NOSUID | MOUNT_ATTR_NOEXEC, MOUNT_ATTR_NODEV)
        os.close(fd)
    for name, target in DEV_LINKS.items():
        os.symlink(target, f"/dev/{name}")
    os.mkdir("/dev/shm")
    _mount("tmpfs", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV,
           f"size={min(scratch, SHM_BYTES)},mode=1777")
    if read_only:
        _set_attrs("/dev", MOUNT_ATTR_RDONLY)
    return True


# --- lock-down: no new privileges, no capabilities, seccomp ---------------------------

class _CapHeader(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _CapData(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _last_cap() -> int:
    try:
        with open("/proc/sys/kernel/cap_last_cap") as f:
            return int(f.read())
    except (OSError, ValueError):
        return 63


def _caps_now() -> dict[str, int]:
    caps = {}
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("Cap"):
                name, value = line.split(":")
                caps[name] = int(value, 16)
    return caps


def _drop_capabilities() -> bool:
    """Every capability gone, for good: securebits first and the bounding set (both need
    CAP_SETPCAP), then the ambient, inheritable, permitted and effective sets. True when
    none is left to this process (unprivileged, the bounding set may stay: NO_NEW_PRIVS
    and an empty permitted set mean nothing is gained from it)."""
    libc = _libc()
    _prctl(PR_SET_SECUREBITS, SECUREBITS_LOCKED)
    for cap in range(_last_cap() + 1):
        _prctl(PR_CAPBSET_DROP, cap)
    _prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL)
    header = _CapHeader(CAPABILITY_VERSION_3, 0)
    data = (_CapData * 2)()
    libc.capset(ctypes.byref(header), data)
    try:
        caps = _caps_now()
    except (OSError, ValueError):
        return False
    return all(caps.get(name, 1) == 0 for name in ("CapInh", "CapPrm", "CapEff", "CapAmb"))


def lock_down() -> dict[str, bool]:
    """Right before the sandbox is exec'd (PID 1 behind the walls, or in place where
    there are none): NO_NEW_PRIVS, every capability dropped, the seccomp filter on.
    Returns which parts took; raises JailError (a sentence) where NO_NEW_PRIVS or seccomp
    cannot be set at all on Linux. Elsewhere it does nothing and says so."""
    if not sys.platform.startswith("linux"):
        return {"no_new_privs": False, "caps_dropped": False, "seccomp": False}
    caps_dropped = _drop_capabilities()
    if _prctl(PR_SET_NO_NEW_PRIVS, 1) != 0 or _prctl(PR_GET_NO_NEW_PRIVS) != 1:
        raise JailError(ctypes.get_errno() or errno.EPERM, "The kernel refused "
                        "PR_SET_NO_NEW_PRIVS, so the sandbox cannot lock its code down.")
    try:
        seccomp.install()
    except OSError as exc:
        raise JailError(exc.errno or errno.EPERM, f"The kernel refused the sandbox's "
                        f"seccomp filter ({exc}), so it cannot lock its code down.") from exc
    return {"no_new_privs": True, "caps_dropped": caps_dropped, "seccomp": True}
