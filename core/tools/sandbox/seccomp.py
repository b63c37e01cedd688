"""The sandbox's seccomp filter: the system calls its code may not make (Linux).

A small classic-BPF program of our own, installed with prctl(PR_SET_SECCOMP) after
PR_SET_NO_NEW_PRIVS, inherited by every process the code starts and kept across exec.
It answers EPERM to the calls that reach past the other walls, and lets all else through
(an allow-list of every call Python and its libraries make would break them with each
new glibc; the walls of jail.py do the containing, this filter closes their gaps):

- new AF_UNIX sockets (a read-only mount does not stop connect(2) to a socket file: the
  Docker socket, the D-Bus bus, ssh-agent, the engine service's own socket), and every
  family but AF_INET, AF_INET6 and AF_NETLINK (AF_VSOCK reaches the hypervisor's host,
  outside the network namespace); socketpair(2) stays (multiprocessing and asyncio use
  it) except as SOCK_DGRAM, whose end can sendto(2) any socket path;
- other processes' memory and the kernel's: ptrace, process_vm_readv/writev, kcmp,
  pidfd_getfd, process_madvise, bpf, perf_event_open, userfaultfd, io_uring (it makes
  these same calls on its own, unseen by this filter), the key rings, syslog;
- the mounts and namespaces the other walls are built of: mount, umount2, pivot_root,
  chroot, the new mount API (open_tree, move_mount, fsopen, fsconfig, fsmount, fspick,
  mount_setattr, open_tree_attr), unshare, setns, clone with a CLONE_NEW* flag, and
  clone3 (ENOSYS, whose flags sit in memory a filter cannot read: libc falls back to
  clone); open_by_handle_at and name_to_handle_at (they step around path walls);
- the terminal: ioctl TIOCSTI (typing into it), TIOCLINUX, TIOCCONS, TIOCSETD;
- the machine: kexec, module loading, reboot, swapon/swapoff, acct, quotactl, the
  clocks, iopl/ioperm/modify_ldt, personality flags other than the default.

Calls of another architecture (i386 through int 0x80 on x86_64, x32) kill the process:
their numbers differ, so a filter written for one table would let them all through.

Why our own and not a binding: PyPI has pyseccomp (ctypes over libseccomp, last release
2021) and mephi42-seccomp (an unofficial wheel of libseccomp's bindings). Both need the
libseccomp shared library on the machine (absent from slim containers and Alpine), and
libseccomp 2.5 (Debian 12, this CI) does not know the calls added since Linux 6.1
(open_tree_attr); the filter here is a page of checked-in data, tested by the
attacks in tests/integration/test_sandbox_walls.py, and needs nothing but the kernel.
"""

from __future__ import annotations

import ctypes
import errno
import platform
import struct

PR_SET_NO_NEW_PRIVS = 38
PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2

RET_KILL_PROCESS = 0x80000000
RET_ERRNO = 0x00050000
RET_ALLOW = 0x7FFF0000

AUDIT_ARCH = {"x86_64": 0xC000003E, "aarch64": 0xC00000B7}
X32_SYSCALL_BIT = 0x40000000

AF_INET, AF_INET6, AF_NETLINK = 2, 10, 16
SOCK_DGRAM, SOCK_TYPE_MASK = 2, 0xF
# CLONE_NEWNS | NEWCGROUP | NEWUTS | NEWIPC | NEWUSER | NEWPID | NEWNET
CLONE_NEW_ANY = 0x00020000 | 0x02000000 | 0x04000000 | 0x08000000 | 0x10000000 \
    | 0x20000000 | 0x40000000
TIOCSTI, TIOCCONS, TIOCLINUX, TIOCSETD = 0x5412, 0x541D, 0x541C, 0x5423
PERSONALITY_QUERY, PER_LINUX = 0xFFFFFFFF, 0

# Numbers per architecture (x86_64: arch/x86/entry/syscalls/syscall_64.tbl; aarch64:
# include/uapi/asm-generic/unistd.h). Calls from 425 on have one number everywhere.
_COMMON = {"io_uring_setup": 425, "io_uring_enter": 426, "io_uring_register": 427,
           "open_tree": 428, "move_mount": 429, "fsopen": 430, "fsconfig": 431,
           "fsmount": 432, "fspick": 433, "clone3": 435, "pidfd_getfd": 438,
           "process_madvise": 440, "mount_setattr": 442, "quotactl_fd": 443,
           "open_tree_attr": 467}
SYSCALLS: dict[str, dict[str, int]] = {
    "x86_64": {**_COMMON, "ioctl": 16, "socket": 41, "socketpair": 53, "clone": 56,
               "ptrace": 101, "syslog": 103, "uselib": 134, "personality": 135,
               "modify_ldt": 154, "pivot_root": 155, "_sysctl": 156, "chroot": 161,
               "acct": 163, "settimeofday": 164, "mount": 165, "umount2": 166,
               "swapon": 167, "swapoff": 168, "reboot": 169, "iopl": 172, "ioperm": 173,
               "init_module": 175, "delete_module": 176, "quotactl": 179,
               "clock_settime": 227, "kexec_load": 246, "add_key": 248,
               "request_key": 249, "keyctl": 250, "unshare": 272, "perf_event_open": 298,
               "fanotify_init": 300, "name_to_handle_at": 303, "open_by_handle_at": 304,
               "clock_adjtime": 305, "setns": 308, "process_vm_readv": 310,
               "process_vm_writev": 311, "kcmp": 312, "finit_module": 313,
               "kexec_file_load": 320, "bpf": 321, "userfaultfd": 323},
    "aarch64": {**_COMMON, "ioctl": 29, "socket": 198, "socketpair": 199, "clone": 220,
                "ptrace": 117, "syslog": 116, "personality": 92, "pivot_root": 41,
                "chroot": 51, "acct": 89, "settimeofday": 170, "mount": 40,
                "umount2": 39, "swapon": 224, "swapoff": 225, "reboot": 142,
                "init_module": 105, "delete_module": 106, "quotactl": 60,
                "clock_settime": 112, "kexec_load": 104, "add_key": 217,
                "request_key": 218, "keyctl": 219, "unshare": 97, "perf_event_open": 241,
                "fanotify_init": 262, "name_to_handle_at": 264, "open_by_handle_at": 265,
                "clock_adjtime": 266, "setns": 268, "process_vm_readv": 270,
                "process_vm_writev": 271, "kcmp": 272, "finit_module": 273,
                "kexec_file_load": 294, "bpf": 280, "userfaultfd": 282},
}
# Refused outright; the rest of the table is checked by argument below.
DENIED = ("ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_getfd",
          "process_madvise", "bpf", "perf_event_open", "userfaultfd", "io_uring_setup",
          "io_uring_enter", "io_uring_register", "keyctl", "add_key", "request_key",
          "syslog", "mount", "umount2", "pivot_root", "chroot", "open_tree", "move_mount",
          "fsopen", "fsconfig", "fsmount", "fspick", "mount_setattr", "open_tree_attr",
          "unshare", "setns", "open_by_handle_at", "name_to_handle_at", "kexec_load",
          "kexec_file_load", "init_module", "finit_module", "delete_module", "reboot",
          "swapon", "swapoff", "acct", "quotactl", "quotactl_fd", "settimeofday",
          "clock_settime", "clock_adjtime", "uselib", "_sysctl", "modify_ldt", "iopl",
          "ioperm", "fanotify_init")

# Classic BPF opcodes (linux/filter.h) and the offsets of struct seccomp_data.
LD_W_ABS = 0x20
JEQ_K, JGE_K, JSET_K = 0x15, 0x35, 0x45
AND_K = 0x54
RET_K = 0x06
NR, ARCH = 0, 4


def _arg_low(n: int) -> int:
    """Offset of the low 32 bits of argument n (both architectures are little-endian)."""
    return 16 + 8 * n


class _Program:
    """Instructions with named jump targets, resolved to the relative offsets BPF wants."""

    def __init__(self) -> None:
        self.code: list[tuple[int, str | int, str | int, int]] = []
        self.labels: dict[str, int] = {}

    def op(self, code: int, k: int = 0, jt: str | int = 0, jf: str | int = 0) -> None:
        self.code.append((code, jt, jf, k))

    def label(self, name: str) -> None:
        self.labels[name] = len(self.code)

    def assemble(self) -> bytes:
        out = bytearray()
        for at, (code, jt, jf, k) in enumerate(self.code):
            offsets = []
            for target in (jt, jf):
                offset = target if isinstance(target, int) else self.labels[target] - at - 1
                if not 0 <= offset <= 255:
                    raise ValueError(f"jump from {at} to {target!r} out of range")
                offsets.append(offset)
            out += struct.pack("=HBBI", code, offsets[0], offsets[1], k & 0xFFFFFFFF)
        return bytes(out)


def build(machine: str | None = None) -> bytes:
    """The filter for `machine` (platform.machine() by default) as struct sock_filter[]."""
    machine = machine or platform.machine()
    if machine not in SYSCALLS:
        raise OSError(errno.ENOSYS, f"no seccomp filter written for {machine}")
    nr = SYSCALLS[machine]
    p = _Program()
    p.op(LD_W_ABS, ARCH)
    p.op(JEQ_K, AUDIT_ARCH[machine], 0, "kill")
    p.op(LD_W_ABS, NR)
    if machine == "x86_64":
        p.op(JGE_K, X32_SYSCALL_BIT, "kill", 0)
    for name in DENIED:
        if name in nr:
            p.op(JEQ_K, nr[name], "eperm", 0)
    p.op(JEQ_K, nr["clone3"], "enosys", 0)
    p.op(JEQ_K, nr["socket"], "socket", 0)
    p.op(JEQ_K, nr["socketpair"], "socketpair", 0)
    p.op(JEQ_K, nr["clone"], "clone", 0)
    p.op(JEQ_K, nr["ioctl"], "ioctl", 0)
    p.op(JEQ_K, nr["personality"], "personality", "allow")
    p.label("socket")  # the family: only the namespaced network ones
    p.op(LD_W_ABS, _arg_low(0))
    p.op(JEQ_K, AF_INET, "allow", 0)
    p.op(JEQ_K, AF_INET6, "allow", 0)
    p.op(JEQ_K, AF_NETLINK, "allow", "eperm")
    p.label("socketpair")  # a stream pair only: a datagram end can sendto any path
    p.op(LD_W_ABS, _arg_low(1))
    p.op(AND_K, SOCK_TYPE_MASK)
    p.op(JEQ_K, SOCK_DGRAM, "eperm", "allow")
    p.label("clone")
    p.op(LD_W_ABS, _arg_low(0))
    p.op(JSET_K, CLONE_NEW_ANY, "eperm", "allow")
    p.label("ioctl")
    p.op(LD_W_ABS, _arg_low(1))
    for request in (TIOCSTI, TIOCLINUX, TIOCCONS, TIOCSETD):
        p.op(JEQ_K, request, "eperm", 0)
    p.op(RET_K, RET_ALLOW)  # (BPF jumps only forward: each check ends in its own answer)
    p.label("personality")  # asking, or the default; not READ_IMPLIES_EXEC and the like
    p.op(LD_W_ABS, _arg_low(0))
    p.op(JEQ_K, PERSONALITY_QUERY, "allow", 0)
    p.op(JEQ_K, PER_LINUX, "allow", "eperm")
    p.label("allow")
    p.op(RET_K, RET_ALLOW)
    p.label("eperm")
    p.op(RET_K, RET_ERRNO | errno.EPERM)
    p.label("enosys")
    p.op(RET_K, RET_ERRNO | errno.ENOSYS)
    p.label("kill")
    p.op(RET_K, RET_KILL_PROCESS)
    return p.assemble()


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def install(program: bytes | None = None) -> None:
    """Set NO_NEW_PRIVS and install the filter on the calling thread (its children and
    whatever it execs inherit both). Raises OSError where the kernel refuses."""
    program = build() if program is None else program
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_NO_NEW_PRIVS, ctypes.c_ulong(1), ctypes.c_ulong(0),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_NO_NEW_PRIVS: {errno.errorcode.get(err, err)}")
    buffer = ctypes.create_string_buffer(program, len(program))
    fprog = _SockFprog(len(program) // 8, ctypes.cast(buffer, ctypes.c_void_p))
    if libc.prctl(PR_SET_SECCOMP, ctypes.c_ulong(SECCOMP_MODE_FILTER), ctypes.byref(fprog),
                  ctypes.c_ulong(0), ctypes.c_ulong(0)) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"PR_SET_SECCOMP: {errno.errorcode.get(err, err)}")
