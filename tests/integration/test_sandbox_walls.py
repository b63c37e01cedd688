"""The kernel-level walls of the Python sandbox (issue 37), tried as an attacker would.

Each attack runs behind the walls of core/tools/sandbox/jail.py exactly as the launcher
puts them up (unshare_namespaces, then PID 1 calls build_walls and lock_down and execs a
fresh interpreter), and each test checks the effect from outside: the host file still
holds what it held, the host socket saw no connection, the pty the test holds received
nothing, the process the kernel shows runs under an unprivileged id. This machine and CI
run as root, so the root path (inside-root mapped to an unprivileged id) is the one
exercised; as a user the same attacks hold.
"""

from __future__ import annotations

import ast
import ctypes
import json
import os
import pty
import re
import select
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import pytest

from core.tools.sandbox import cgroups, jail, macos_profile, seccomp

ROOT = Path(__file__).resolve().parents[2]
LINUX = sys.platform.startswith("linux")
pytestmark = pytest.mark.skipif(not LINUX, reason="the Linux walls (macOS: profile tests)")

# Runs `argv[1]` (Python source) behind every wall, as the launcher does. Prints the
# walls as one JSON line, then whatever the attack prints. Exit 70: a wall failed (its
# sentence printed as {"error": ...}).
WALLED = """
import json, os, sys
from core.tools.sandbox import jail

needed = [sys.prefix, sys.base_prefix, os.path.dirname(sys.executable),
          os.path.dirname(os.path.realpath(sys.executable))]
try:
    jail.unshare_namespaces()
except OSError as exc:
    print(json.dumps({"error": str(exc)}), flush=True)
    sys.exit(70)
pid = os.fork()
if pid == 0:
    try:
        walls = jail.build_walls(int(os.environ["SCRATCH_BYTES"]), needed)
        walls = walls.locked(jail.lock_down())
        print(json.dumps(walls.as_dict()), flush=True)
        os.chdir("/tmp")
        os.execve(sys.executable, [sys.executable, "-P", "-c", sys.argv[1]],
                  {"PATH": "/usr/bin:/bin", "HOME": "/tmp"})
    except BaseException as exc:
        print(json.dumps({"error": str(exc)}), flush=True)
        os._exit(70)
_, status = os.waitpid(pid, 0)
sys.exit(os.waitstatus_to_exitcode(status))
"""


def _tag() -> str:
    return f"walltag{os.getpid()}x{time.monotonic_ns() % 10**9}"


def _env(scratch: int) -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT), "SCRATCH_BYTES": str(scratch)}


def _walled(code: str, *, scratch: int = 32 << 20, root_only: bool = False,
            pass_fds: tuple[int, ...] = ()) -> subprocess.Popen[str]:
    return subprocess.Popen([sys.executable, "-c", WALLED, code], cwd=ROOT,
                            env=_env(scratch), text=True, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, pass_fds=pass_fds,
                            preexec_fn=_map_only_root if root_only else None)


def _map_only_root() -> None:
    """(In the child, before exec) a user namespace whose only id is root, mapped to the
    caller: a container of one id, where no unprivileged id exists to map root to."""
    libc = ctypes.CDLL(None, use_errno=True)
    uid, gid = os.geteuid(), os.getegid()
    if libc.unshare(jail.CLONE_NEWUSER) != 0:
        os._exit(99)
    for name, text in (("setgroups", "deny"), ("uid_map", f"0 {uid} 1"),
                       ("gid_map", f"0 {gid} 1")):
        with open(f"/proc/self/{name}", "w") as f:
            f.write(text)


def _user_namespaces_allowed() -> bool:
    return subprocess.run([sys.executable, "-c", "pass"], preexec_fn=_map_only_root
                          ).returncode == 0


def run_walled(code: str, **kwargs) -> tuple[dict, list]:
    """Run an attack to its end: (the walls reported, the JSON lines it printed)."""
    proc = _walled(code, **kwargs)
    out, err = proc.communicate(timeout=60)
    lines = [json.loads(line) for line in out.splitlines() if line.strip()]
    assert lines and "error" not in lines[0], (out, err[-2000:])
    return lines[0], lines[1:]


def _held(code: str, **kwargs) -> tuple[subprocess.Popen[str], dict, dict]:
    """Start an attack that prints one JSON line and then sleeps: the test looks at
    the host while it is still there."""
    proc = _walled(code + "\nimport time\ntime.sleep(30)\n", **kwargs)
    walls = json.loads(proc.stdout.readline() or '{"error": "no walls line"}')
    assert "error" not in walls, (walls, proc.stderr.read() if proc.poll() is not None else "")
    result = json.loads(proc.stdout.readline() or "{}")
    return proc, walls, result


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.kill()
    proc.wait(10)


def _tagged(tag: str) -> list[psutil.Process]:
    found = []
    for proc in psutil.process_iter(["cmdline"]):
        if any(tag in part for part in proc.info["cmdline"] or ()):
            found.append(proc)
    return found


def _inside(tag: str, launcher: subprocess.Popen[str]) -> list[psutil.Process]:
    """The attack's processes, as the host sees them (not the launcher outside)."""
    return [p for p in _tagged(tag) if p.pid != launcher.pid]


def _status(pid: int) -> dict[str, str]:
    with open(f"/proc/{pid}/status") as f:
        return dict(line.rstrip("\n").split(":\t", 1) for line in f if ":\t" in line)


EVERY_WALL = {"pid_namespace", "network", "read_only", "own_proc", "fresh_dev",
              "proc_sys_read_only", "unprivileged", "no_new_privs", "caps_dropped", "seccomp"}


def test_code_runs_under_an_unprivileged_id_and_cannot_read_the_shadow_file() -> None:
    tag = _tag()
    code = (f"# {tag}\nimport json, os\nseen = {{}}\n"
            "for path in ('/etc/shadow', '/root/.bashrc', '/root/.ssh/id_ed25519'):\n"
            "    try:\n        seen[path] = open(path).read()\n"
            "    except OSError as exc:\n        seen[path] = exc.strerror\n"
            "print(json.dumps({'uid': os.getuid(), 'seen': seen}), flush=True)")
    proc, walls, result = _held(code)
    try:
        assert {name for name, up in walls.items() if up} == EVERY_WALL, walls
        attack = _inside(tag, proc)
        ids = {(p.uids().real, p.uids().effective, p.gids().real) for p in attack}
        if os.geteuid() == 0:
            want = (jail.HOST_ID_FOR_ROOT,) * 3
        else:
            want = (os.getuid(), os.getuid(), os.getgid())
        assert ids == {want}, ids
        assert result["uid"] == 0, "root inside, of its own namespace only"
        assert result["seen"]["/etc/shadow"] == "Permission denied"
        secret = Path("/etc/shadow").read_text() if os.access("/etc/shadow", os.R_OK) else None
        assert secret is None or secret not in json.dumps(result)
    finally:
        _stop(proc)


CORE_PATTERN = """
import ctypes, json
libc = ctypes.CDLL(None, use_errno=True)
tried = {}
for path in ("/proc/sys/kernel/core_pattern", "/proc/sys/kernel/panic"):
    try:
        with open(path, "w") as f:
            f.write("|/tmp/pwn %p")
        tried[path] = "written"
    except OSError as exc:
        tried[path] = exc.strerror
# A second proc of our own (writable /proc/sys there?), and a remount of the first.
tried["mount proc"] = (libc.mount(b"proc", b"/tmp", b"proc", 0, None), ctypes.get_errno())
tried["remount"] = (libc.mount(None, b"/proc/sys", None, 32 | 4096, None), ctypes.get_errno())
open("/tmp/pwn", "w").write("#!/bin/sh\\ntouch /tmp/owned\\n")
print(json.dumps(tried))
"""


def test_proc_sys_cannot_be_written_so_the_kernel_runs_nothing_of_the_code() -> None:
    before = {p: Path(p).read_text() for p in ("/proc/sys/kernel/core_pattern",
                                              "/proc/sys/kernel/panic")}
    _, (tried,) = run_walled(CORE_PATTERN)
    for path, text in before.items():
        assert Path(path).read_text() == text, f"{path} changed on the host"
        assert tried[path] == "Read-only file system", tried
    assert tried["mount proc"][0] == -1 and tried["remount"] == [-1, 1], tried


DEVICES = """
import glob, json, os, sys
got = {"dev": sorted(os.listdir("/dev"))}
for path in ["/dev/tty", "/dev/console", "/dev/kmsg", "/dev/loop0", "/dev/loop-control",
             "/dev/ptmx", "/dev/mem", "/dev/vda", "/dev/sda", sys.argv[0]]:
    try:
        fd = os.open(path, os.O_WRONLY | os.O_NOCTTY)
        os.write(fd, b"\\x1b]52;c;cHduZWQ=\\x07\\x1b]0;pwned\\x07PWNED\\n")
        got[path] = "written"
    except OSError as exc:
        got[path] = exc.strerror
with open("/dev/null", "w") as f:
    f.write("fine")
got["urandom"] = len(open("/dev/urandom", "rb").read(16))
got["zero"] = open("/dev/zero", "rb").read(4).hex()
print(json.dumps(got))
"""


def test_dev_is_fresh_and_minimal_and_no_terminal_can_be_reached() -> None:
    master, slave = pty.openpty()
    slave_path = os.ttyname(slave)
    try:
        code = f"import sys\nsys.argv = [{slave_path!r}]\n" + DEVICES
        _, (got,) = run_walled(code)
        assert got["dev"] == ["fd", "full", "null", "random", "shm", "stderr", "stdin",
                              "stdout", "urandom", "zero"], got
        for path, what in got.items():
            if path.startswith("/dev/"):
                assert what == "No such file or directory", (path, what)
        assert got["urandom"] == 16 and got["zero"] == "00000000"
        ready, _, _ = select.select([master], [], [], 0.3)
        assert not ready, "something reached the terminal the test holds"
    finally:
        os.close(master)
        os.close(slave)


UNIX_SOCKET = """
import json, socket, sys
path = sys.argv[0]
got = {}
try:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.connect(path)
    s.sendall(b"hello from the sandbox")
    got["stream"] = "connected"
except OSError as exc:
    got["stream"] = exc.strerror
try:
    a, b = socket.socketpair(socket.AF_UNIX, socket.SOCK_DGRAM)
    a.sendto(b"x", path)
    got["dgram pair"] = "sent"
except OSError as exc:
    got["dgram pair"] = exc.strerror
a, b = socket.socketpair()
a.sendall(b"ok")
got["stream pair"] = b.recv(2).decode()
for family in (40, 38, 17):  # AF_VSOCK (the VM's host), AF_ALG, AF_PACKET
    try:
        socket.socket(family, socket.SOCK_STREAM if family != 17 else socket.SOCK_RAW)
        got[str(family)] = "made"
    except OSError as exc:
        got[str(family)] = exc.strerror
print(json.dumps(got))
"""


def test_a_unix_socket_outside_cannot_be_reached() -> None:
    # Outside /tmp (the sandbox's /tmp is its own) and open to everyone: only the
    # seccomp filter stands between the code and this socket, as with Docker's or D-Bus's.
    folder = Path(tempfile.mkdtemp(prefix="llmdeck-walls-", dir="/var/tmp"))
    folder.chmod(0o755)
    path = folder / "s"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o777)
    server.listen(1)
    server.settimeout(0.5)
    try:
        _, (got,) = run_walled(f"import sys\nsys.argv = [{str(path)!r}]\n" + UNIX_SOCKET)
        assert got["stream"] == "Operation not permitted", got
        assert got["dgram pair"] == "Operation not permitted", got
        assert got["stream pair"] == "ok", "socketpair (multiprocessing, asyncio) still works"
        assert got["40"] == got["38"] == got["17"] == "Operation not permitted", got
        with pytest.raises(TimeoutError):
            server.accept()
    finally:
        server.close()
        path.unlink(missing_ok=True)
        folder.rmdir()


PTRACE = """
import ctypes, json, os, time
libc = ctypes.CDLL(None, use_errno=True)
child = os.fork()
if child == 0:
    time.sleep(30)
    os._exit(0)
time.sleep(0.1)
got = {}
got["attach"] = (libc.ptrace(16, child, 0, 0), ctypes.get_errno())  # PTRACE_ATTACH
got["seize"] = (libc.ptrace(0x4206, child, 0, 0), ctypes.get_errno())  # PTRACE_SEIZE
buf = ctypes.create_string_buffer(8)

class Iov(ctypes.Structure):
    _fields_ = [("base", ctypes.c_void_p), ("len", ctypes.c_size_t)]

local, remote = Iov(ctypes.addressof(buf), 8), Iov(0x400000, 8)
got["vm_read"] = (libc.process_vm_readv(child, ctypes.byref(local), 1, ctypes.byref(remote),
                                         1, 0), ctypes.get_errno())
got["mem"] = "opened"
try:
    open(f"/proc/{child}/mem", "rb").close()
except OSError as exc:
    got["mem"] = exc.strerror
print(json.dumps(got), flush=True)
"""


def test_a_sibling_cannot_be_traced_or_read() -> None:
    tag = _tag()
    proc, _, got = _held(f"# {tag}\n" + PTRACE)
    try:
        assert got["attach"] == got["seize"] == [-1, 1], got
        assert got["vm_read"] == [-1, 1], got
        inside = _inside(tag, proc)
        assert len(inside) == 2, "the attack and its sibling"
        for p in inside:  # seen from the host: nobody traces them, none is stopped
            status = _status(p.pid)
            assert status["TracerPid"] == "0" and not status["State"].startswith("t"), status
    finally:
        _stop(proc)


NAMESPACES = """
import ctypes, json, os
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
got = {}
for name, flags in (("user", 0x10000000), ("mount", 0x00020000), ("net", 0x40000000)):
    got["unshare " + name] = (libc.unshare(flags), ctypes.get_errno())
# clone(CLONE_NEWUSER | SIGCHLD) and clone3 straight through syscall(2)
got["clone"] = (libc.syscall(56, 0x10000000 | 17, 0, 0, 0, 0), ctypes.get_errno())
got["clone3"] = (libc.syscall(435, 0, 0), ctypes.get_errno())
fd = os.open("/proc/self/ns/user", os.O_RDONLY)
got["setns"] = (libc.setns(fd, 0), ctypes.get_errno())
got["fork"] = os.waitstatus_to_exitcode(os.waitpid(os.fork() or os._exit(3), 0)[1])
print(json.dumps(got), flush=True)
"""


def test_no_new_namespace_can_be_made_or_entered() -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the raw clone number in the attack is x86_64's")
    tag = _tag()
    proc, _, got = _held(f"# {tag}\n" + NAMESPACES)
    try:
        for name in ("unshare user", "unshare mount", "unshare net", "clone", "setns"):
            assert got[name] == [-1, 1], (name, got)
        assert got["clone3"] == [-1, 38], "ENOSYS: libc falls back to clone"
        assert got["fork"] == 3, "a plain fork still works"
        inside = _inside(tag, proc)
        spaces = {os.readlink(f"/proc/{p.pid}/ns/{kind}") for p in inside
                  for kind in ("user", "mnt", "net")}
        assert len(inside) == 1 and len(spaces) == 3, "still in the sandbox's own three"
    finally:
        _stop(proc)


def test_a_terminal_handed_in_by_mistake_cannot_be_typed_into() -> None:
    master, slave = pty.openpty()
    try:
        code = ("import ctypes, fcntl, json, termios\ngot = []\n"
                "for ch in b'id\\n':\n    try:\n"
                f"        fcntl.ioctl({slave}, termios.TIOCSTI, bytes([ch]))\n"
                "        got.append('typed')\n"
                "    except OSError as exc:\n        got.append(exc.strerror)\n"
                "print(json.dumps(got))")
        _, (got,) = run_walled(code, pass_fds=(slave,))
        assert got == ["Operation not permitted"] * 3, got
        os.set_blocking(slave, False)
        ready, _, _ = select.select([slave], [], [], 0.3)  # typed input would be read here
        assert not ready, os.read(slave, 100)
    finally:
        os.close(master)
        os.close(slave)


SCRATCH = """
import json, os
written, error = 0, None
try:
    with open("/tmp/escape-{tag}", "wb") as f:
        for _ in range(128):
            f.write(b"x" * (1 << 20))
            f.flush()
            written += 1 << 20
except OSError as exc:
    error = exc.strerror
print(json.dumps({{"written": written, "error": error}}), flush=True)
"""


def test_the_scratch_folder_is_a_bounded_tmpfs_not_the_host_disk() -> None:
    tag = _tag()
    scratch = 16 << 20
    proc, walls, got = _held(f"# {tag}\n" + SCRATCH.format(tag=tag), scratch=scratch)
    try:
        assert got["error"] == "No space left on device" and got["written"] <= scratch, got
        assert not Path(f"/tmp/escape-{tag}").exists()
        inside = _inside(tag, proc)
        mounts = Path(f"/proc/{inside[0].pid}/mountinfo").read_text().splitlines()
        tmp = [m for m in mounts if m.split()[4] == "/tmp"]
        assert tmp and " - tmpfs " in tmp[-1] and f"size={scratch // 1024}k" in tmp[-1], tmp
        for line in mounts:  # every other mount read-only, nosuid, nodev, seen from the host
            fields = line.split()
            target, options = fields[4], fields[5].split(",")
            if target in ("/tmp", "/dev/shm", "/proc") or target.startswith("/dev/"):
                continue
            assert "ro" in options and "nosuid" in options and "nodev" in options, line
    finally:
        _stop(proc)


def test_lock_down_alone_holds_where_there_are_no_namespaces() -> None:
    # The fallback path: no namespaces, lock_down right before exec.
    code = ("import json, os, socket\nfrom core.tools.sandbox import jail\n"
            "parts = jail.lock_down()\n"
            "try:\n    socket.socket(socket.AF_UNIX)\n    unix = 'made'\n"
            "except OSError as exc:\n    unix = exc.strerror\n"
            "status = dict(l.split(':\\t') for l in open('/proc/self/status').read().splitlines() if ':\\t' in l)\n"
            "print(json.dumps({'parts': parts, 'unix': unix, 'status': {k: status[k] for k in "
            "('NoNewPrivs', 'Seccomp', 'CapEff', 'CapPrm', 'CapBnd')}}))")
    done = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=_env(0),
                          capture_output=True, text=True, timeout=60)
    got = json.loads(done.stdout)
    assert got["parts"] == {"no_new_privs": True, "caps_dropped": True, "seccomp": True}, got
    assert got["unix"] == "Operation not permitted"
    assert got["status"]["NoNewPrivs"] == "1" and got["status"]["Seccomp"] == "2"
    assert int(got["status"]["CapEff"], 16) == int(got["status"]["CapPrm"], 16) == 0
    if os.geteuid() == 0:
        assert int(got["status"]["CapBnd"], 16) == 0, "root gives up its bounding set too"


FOREIGN_CALL = """
import ctypes, mmap, sys
from core.tools.sandbox import jail
jail.lock_down()
# getpid through the i386 gate (int 0x80), and through the x32 numbering (bit 30):
# numbers the x86_64 filter's table does not describe, so they must not pass at all.
code = {"i386": b"\\xb8\\x14\\x00\\x00\\x00\\xcd\\x80\\xc3",
        "x32": b"\\xb8\\x27\\x00\\x00\\x40\\x0f\\x05\\xc3"}[sys.argv[1]]
page = mmap.mmap(-1, 4096, prot=mmap.PROT_READ | mmap.PROT_WRITE | mmap.PROT_EXEC)
page.write(code)
call = ctypes.CFUNCTYPE(ctypes.c_long)(ctypes.addressof(ctypes.c_char.from_buffer(page)))
print("returned", call(), flush=True)
"""


def test_system_calls_of_another_architecture_kill_the_caller() -> None:
    if os.uname().machine != "x86_64":
        pytest.skip("the i386 and x32 gates exist on x86_64 only")
    for gate in ("i386", "x32"):
        done = subprocess.run([sys.executable, "-c", FOREIGN_CALL, gate], cwd=ROOT,
                              env=_env(0), capture_output=True, text=True, timeout=60)
        assert done.returncode == -signal.SIGSYS and "returned" not in done.stdout, (
            gate, done.returncode, done.stdout, done.stderr[-500:])


def test_as_root_without_an_unprivileged_id_to_map_it_refuses_with_a_sentence() -> None:
    # A user namespace that maps only root (a container of one id): nothing to map
    # inside-root to, so the walls refuse instead of running the code as root.
    if not _user_namespaces_allowed():
        pytest.skip("this system refuses user namespaces outright (the launcher then says so)")
    proc = _walled("print('RAN')", root_only=True)
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 70, (out, err)
    said = json.loads(out.splitlines()[0])["error"]
    assert "RAN" not in out
    assert said == ("As root, the sandbox needs an unprivileged id to run code as, and this "
                    "container maps none; it will not run code as root."), said


MEMORY_HOG = """
import os, sys, time
from core.tools.sandbox import cgroups
cgroups.join_cgroup(sys.argv[1])
kids = []
for _ in range(4):
    pid = os.fork()
    if pid == 0:
        block = bytearray(96 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(2)
        os._exit(0)
    kids.append(pid)
print(" ".join(str(os.waitstatus_to_exitcode(os.waitpid(k, 0)[1])) for k in kids))
"""


def test_the_memory_cgroup_caps_all_the_sandboxs_processes_together() -> None:
    name = f"{cgroups.CGROUP_PREFIX}{os.getpid()}-walls"
    path = cgroups.memory_cgroup(name, 192 << 20)
    if os.geteuid() != 0:
        assert path is None, "only root makes one; the app watches memory otherwise"
        return
    assert path is not None, "root on Linux with a memory controller: a cgroup"
    try:
        done = subprocess.run([sys.executable, "-c", MEMORY_HOG, path], cwd=ROOT,
                              env=_env(0), capture_output=True, text=True, timeout=120)
        codes = [int(c) for c in done.stdout.split()]
        assert -signal.SIGKILL in codes, (codes, done.stderr[-500:])  # 4 x 96 MiB > 192
        peak_file = "memory.max_usage_in_bytes" if os.path.exists(
            os.path.join(path, "memory.max_usage_in_bytes")) else "memory.peak"
        peak = int(Path(path, peak_file).read_text())
        assert peak <= 192 << 20, f"the group peaked at {peak >> 20} MiB"
    finally:
        for _ in range(40):
            if cgroups.remove_cgroup(path):
                break
            time.sleep(0.05)
    assert not os.path.exists(path)


# --- the same attacks through the real door: Sandbox().run, as the tool loop and F8 ---

async def test_through_the_sandbox_a_unix_socket_a_terminal_and_a_host_file_stay_untouched(
) -> None:
    from core.tools.sandbox import Sandbox

    folder = Path(tempfile.mkdtemp(prefix="llmdeck-walls-", dir="/var/tmp"))
    folder.chmod(0o1777)
    target = folder / "open-to-all.txt"
    target.write_text("as it was")
    target.chmod(0o666)  # only the read-only mount stands between the code and this file
    sock_path = folder / "s"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(sock_path))
    sock_path.chmod(0o777)
    server.listen(1)
    server.settimeout(0.5)
    master, slave = pty.openpty()
    core_pattern = Path("/proc/sys/kernel/core_pattern").read_text()
    code = f"""
import os, socket
tried = []
try:
    s = socket.socket(socket.AF_UNIX)
    s.connect({str(sock_path)!r})
    tried.append("connected")
except OSError as exc:
    tried.append(exc.strerror)
for path in ({os.ttyname(slave)!r}, "/dev/tty", "/dev/console"):
    try:
        with open(path, "w") as f:
            f.write("\\x1b]52;c;cHduZWQ=\\x07PWNED")
        tried.append("wrote " + path)
    except OSError as exc:
        tried.append(exc.strerror)
for path, text in (({str(target)!r}, "changed"),
                   ("/proc/sys/kernel/core_pattern", "|/tmp/pwn %p")):
    try:
        with open(path, "w") as f:
            f.write(text)
        tried.append("wrote " + path)
    except OSError as exc:
        tried.append(exc.strerror)
try:
    tried.append(open("/etc/shadow").read())
except OSError as exc:
    tried.append(exc.strerror)
tried
"""
    sb = Sandbox(timeout_s=30)
    try:
        r = await sb.run("attacker", code)
        assert r.ok, r.text()
        assert sb.walls.get("seccomp") and sb.walls.get("fresh_dev"), sb.walls
        with pytest.raises(TimeoutError):
            server.accept()
        assert not select.select([master], [], [], 0.3)[0], "the terminal received something"
        assert target.read_text() == "as it was"
        assert Path("/proc/sys/kernel/core_pattern").read_text() == core_pattern
        shadow = Path("/etc/shadow").read_text() if os.access("/etc/shadow", os.R_OK) else None
        assert shadow is None or shadow not in r.text()
        # (open(..., "w") of a missing /dev node tries to create it: /dev is read-only)
        assert r.value == repr(["Operation not permitted", "No such file or directory",
                                "Read-only file system", "Read-only file system",
                                "Read-only file system", "Read-only file system",
                                "Permission denied"]), r.value
    finally:
        await sb.close()
        server.close()
        os.close(master)
        os.close(slave)
        for path in (sock_path, target):
            path.unlink(missing_ok=True)
        folder.rmdir()


async def test_through_the_sandbox_its_processes_run_as_an_unprivileged_id() -> None:
    import asyncio

    from core.tools.sandbox import Sandbox

    sb = Sandbox(timeout_s=30)
    try:
        await sb.run("c", "1")
        launcher = sb.pid
        assert launcher is not None
        running = asyncio.ensure_future(sb.run("c", "import os, time\n"
                                                    "if os.fork() == 0:\n    time.sleep(5)\n"
                                                    "time.sleep(2)"))
        await asyncio.sleep(1.0)
        inside = psutil.Process(launcher).children(recursive=True)
        ids = {p.uids().real for p in inside} | {p.uids().effective for p in inside}
        want = jail.HOST_ID_FOR_ROOT if os.geteuid() == 0 else os.getuid()
        assert len(inside) >= 3 and ids == {want}, (len(inside), ids)
        assert (await running).ok
    finally:
        await sb.close()


REFUSING_APP = """
import asyncio, sys
from core.tools.sandbox import Sandbox

async def main():
    sb = Sandbox(timeout_s=30)
    r = await sb.run("c", "open(" + repr(sys.argv[1]) + ", 'w').write('ran')")
    print(repr((r.ok, r.error)), flush=True)
    await sb.close()

asyncio.run(main())
"""


def test_through_the_sandbox_root_with_no_id_to_map_refuses_and_runs_nothing() -> None:
    if not _user_namespaces_allowed():
        pytest.skip("this system refuses user namespaces outright")
    folder = Path(tempfile.mkdtemp(prefix="llmdeck-walls-", dir="/var/tmp"))
    marker = folder / "ran"
    try:
        # The app as root in a user namespace that maps nothing but root.
        done = subprocess.run([sys.executable, "-c", REFUSING_APP, str(marker)], cwd=ROOT,
                              env=_env(0), capture_output=True, text=True, timeout=90,
                              preexec_fn=_map_only_root)
        ok, error = ast.literal_eval(done.stdout.strip().splitlines()[-1])
        assert ok is False and "unprivileged id" in error, (done.stdout, done.stderr[-800:])
        assert not marker.exists(), "the code ran as root"
    finally:
        marker.unlink(missing_ok=True)
        folder.rmdir()


# --- the filter itself and the macOS profile (text only: not runnable here) -----------

def test_the_filter_is_built_for_both_architectures_and_refuses_foreign_calls() -> None:
    for machine in ("x86_64", "aarch64"):
        program = seccomp.build(machine)
        assert len(program) % 8 == 0 and len(program) // 8 < 256
        _, _, _, k = struct.unpack("=HBBI", program[8:16])
        assert k == seccomp.AUDIT_ARCH[machine], "the architecture is checked first"
    x86_only = {"uselib", "_sysctl", "modify_ldt", "iopl", "ioperm"}
    assert set(seccomp.DENIED) <= set(seccomp.SYSCALLS["x86_64"]), "a name without a number"
    assert set(seccomp.DENIED) - x86_only <= set(seccomp.SYSCALLS["aarch64"])
    with pytest.raises(OSError):
        seccomp.build("riscv64")


def _outside_strings(profile: str) -> str:
    """The profile with every string literal taken out (escapes honoured)."""
    return re.sub(r'"(?:[^"\\]|\\.)*"', '""', profile)


def test_the_macos_profile_starts_from_deny_and_allows_no_network() -> None:
    hostile = ['/tmp/a") (allow default) (allow network* ("', "/tmp/b\\\")(allow file-write* (subpath \"/"]
    profile = macos_profile.macos_profile(hostile)
    bare = _outside_strings(profile)
    assert bare.splitlines()[:2] == ["(version 1)", "(deny default)"]
    assert "(allow default" not in bare and "allow network" not in bare
    assert "unix-socket" not in bare and "appleevent" not in bare
    assert "(allow process-fork" not in bare and "(deny process-fork)" in bare
    assert bare.count("(") == bare.count(")"), "the hostile names stayed inside their strings"
    assert "(allow file-write* (subpath \"/\"" not in bare
    writes = [line for line in bare.splitlines() if "file-write*" in line]
    assert writes == ['(allow file-read* file-write* (subpath "") (subpath ""))'], writes
    assert "allow process-fork" in macos_profile.macos_profile(["/tmp/s"], allow_fork=True)
    with pytest.raises(ValueError):
        macos_profile.macos_profile(["/tmp/x\n(allow default)"])
