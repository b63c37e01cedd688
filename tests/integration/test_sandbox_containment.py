"""The Python sandbox's walls, tried the way hostile code would (issue 19).

Each test runs a real sandbox worker and does one escape: a forked child or a
`start_new_session` process outliving the run, the timeout or the app; a thread spinning
after "done"; signalling the app; the network; writing outside the scratch folder; reading
the app's environment. Linux (this box): the walls of core/tools/sandbox/jail.py must be
up, so a missing wall fails here rather than skipping.
"""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import psutil

from core import paths
from core.tools import Sandbox

ROOT = Path(__file__).resolve().parents[2]
# Children that leave the run's process tree: a fork that execs, and a new session.
ESCAPERS = ("import os, subprocess\n"
            "if os.fork() == 0:\n"
            "    os.execvp('sleep', ['sleep', '{tag}1'])\n"
            "subprocess.Popen(['sleep', '{tag}2'], start_new_session=True)\n")


def _sleepers(tag: str) -> list[int]:
    """Host pids of `sleep <tag>N` processes (what ESCAPERS started)."""
    found = []
    for proc in psutil.process_iter(["pid", "cmdline", "status"]):
        cmd = proc.info["cmdline"] or []
        if (len(cmd) == 2 and cmd[0].endswith("sleep") and cmd[1].startswith(tag)
                and proc.info["status"] != psutil.STATUS_ZOMBIE):
            found.append(proc.info["pid"])
    return found


def _wait_none(tag: str, timeout: float = 5.0) -> list[int]:
    deadline = time.monotonic() + timeout
    while (left := _sleepers(tag)) and time.monotonic() < deadline:
        time.sleep(0.05)
    return left


def _tag() -> str:
    return f"{os.getpid() % 1000}{time.monotonic_ns() % 100000}"


def _runners(launcher_pid: int) -> list[int]:
    """Host pids of the runner processes (where the code runs) below a sandbox's launcher."""
    found = []
    for proc in psutil.Process(launcher_pid).children(recursive=True):
        try:
            if any(arg.endswith("runner.py") for arg in proc.cmdline()):
                found.append(proc.pid)
        except psutil.Error:
            pass
    return found


async def test_plain_code_runs_behind_every_wall_and_returns_its_output() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", "import math\nprint('hello')\nopen('notes.txt', 'w').write('kept')\nmath.factorial(5)")
        assert r.ok and r.stdout == "hello\n" and r.value == "120" and r.note is None, r
        # Its scratch (/tmp, its working folder) is its own tmpfs: nothing lands on the host.
        assert not list(paths.data_dir().rglob("notes.txt"))
        assert (await sb.run("c", "open('/tmp/notes.txt').read()")).value == "'kept'"
        assert {"pid_namespace", "network", "read_only", "own_proc"} <= set(sb.walls)
        assert all(sb.walls.values()), sb.walls
    finally:
        await sb.close()


async def test_forked_and_new_session_children_are_killed_when_the_run_ends() -> None:
    tag = _tag()
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", ESCAPERS.format(tag=tag) + "print('started')")
        assert r.ok and r.stdout == "started\n"
        assert r.note is not None and "stopped 2 processes" in r.note
        assert _wait_none(tag) == []
        assert (await sb.run("c", "1 + 1")).value == "2", "the session itself lives on"
    finally:
        await sb.close()


async def test_forked_and_new_session_children_die_with_the_run_at_the_timeout() -> None:
    tag = _tag()
    sb = Sandbox(timeout_s=1.5, memory_mb=512)
    try:
        r = await sb.run("c", ESCAPERS.format(tag=tag) + "while True:\n    pass")
        assert r.kind == "timeout"
        assert _wait_none(tag) == []
    finally:
        await sb.close()


APP_KILLED = """
import asyncio, os, sys
from core.tools import Sandbox

async def main():
    sb = Sandbox(timeout_s=20, memory_mb=512)
    r = await sb.run("c", sys.argv[1])
    print("ran", r.ok, flush=True)
    await asyncio.sleep(600)  # the test kills this "app" with SIGKILL here

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_children_that_left_the_session_die_when_the_app_is_killed(tmp_path: Path) -> None:
    tag = _tag()
    script = tmp_path / "app.py"
    script.write_text(APP_KILLED)
    # The escapers sleep in the background while the run itself stays busy: the app dies
    # mid-run, so the after-run sweep never happens and only the walls can end them.
    code = ESCAPERS.format(tag=tag) + "import time\ntime.sleep(0.3)\nprint('x')"
    app = subprocess.Popen([sys.executable, str(script), code], cwd=ROOT, text=True,
                           stdout=subprocess.PIPE, env={**os.environ, "PYTHONPATH": str(ROOT)})
    try:
        deadline = time.monotonic() + 30
        while len(_sleepers(tag)) < 2 and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(_sleepers(tag)) == 2, "the escapers started"
        app.send_signal(signal.SIGKILL)
        app.wait(10)
        assert _wait_none(tag) == []
    finally:
        app.kill()
        app.wait()


async def test_a_thread_left_spinning_after_done_costs_the_session_not_the_cpu() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        await sb.run("c", "kept = 1")
        [runner] = _runners(sb.pid)
        r = await sb.run("c", "import threading\n"
                              "threading.Thread(target=lambda: [0 for _ in iter(int, 1)], daemon=True).start()\n"
                              "print('done')")
        assert r.ok and r.stdout == "done\n" and r.reset
        assert "background thread" in r.note and "restarted" in r.text()
        from tests.helpers.procs import wait_gone

        assert wait_gone([runner], 5) == [], "the runner with the spinning thread is gone"
        after = await sb.run("c", "'kept' in globals()")
        assert after.ok and after.value == "False"
        assert _runners(sb.pid) and runner not in _runners(sb.pid), "a fresh runner"
    finally:
        await sb.close()


KILL_THE_APP = """
import asyncio, os
from core.tools import Sandbox

async def main():
    sb = Sandbox(timeout_s=20, memory_mb=512)
    first = await sb.run("c", "1")
    if not sb.walls.get("pid_namespace"):  # without its PID namespace kill(-1) would end
        print("no walls:", first.note, flush=True)  # every process of this user: refuse
        await sb.close()
        raise SystemExit(3)
    code = ("import os, signal\\n"
            "for target in (os.getppid(), {app}, -{app}, -1):\\n"
            "    try:\\n"
            "        os.kill(target, signal.SIGKILL)\\n"
            "    except OSError as exc:\\n"
            "        print(type(exc).__name__)\\n"
            "'still here'").format(app=os.getpid())
    r = await sb.run("c", code)
    print("app alive; sandbox said:", r.value, r.kind, flush=True)
    await sb.close()

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_the_code_cannot_signal_the_app(tmp_path: Path) -> None:
    script = tmp_path / "app.py"
    script.write_text(KILL_THE_APP)
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                          timeout=60, cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert done.returncode == 0, f"the app died: rc={done.returncode} {done.stderr[-500:]}"
    assert "app alive; sandbox said:" in done.stdout


async def test_the_network_is_out_of_reach_even_on_loopback() -> None:
    server = socket.create_server(("127.0.0.1", 0))
    server.settimeout(0.5)
    port = server.getsockname()[1]
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", f"import socket\nsocket.create_connection(('127.0.0.1', {port}), timeout=3)")
        assert not r.ok and "OSError" in r.error, r
        try:
            server.accept()
            raise AssertionError("the sandbox reached a host socket")
        except TimeoutError:
            pass
        outside = await sb.run("c", "import socket\nsocket.getaddrinfo('example.com', 443)")
        assert not outside.ok
    finally:
        server.close()
        await sb.close()


async def test_writes_outside_the_scratch_folder_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "outside.txt"
    home = Path.home() / f".llmdeck-sandbox-escape-{_tag()}"
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        # The home folder, and the environment the sandbox runs from (bound back read-only
        # when it lives under /tmp, as in a CI clone).
        for path in (home, Path(sys.prefix) / f"escape-{_tag()}.txt"):
            r = await sb.run("c", f"open({str(path)!r}, 'w').write('x')")
            assert not r.ok and "Read-only file system" in r.error, r
            assert not path.exists()
        # /tmp inside is the sandbox's own tmpfs: a write there never reaches the host's
        # (nor does one into the checkout: read-only, or under that tmpfs when it is in /tmp).
        for path in (target, paths.data_dir().parent / "escape.txt", ROOT / f"escape-{_tag()}.txt"):
            r = await sb.run("c", f"open({str(path)!r}, 'w').write('x')")
            assert not path.exists(), r
        scratch = await sb.run("c", "import tempfile\nwith tempfile.TemporaryFile() as f:\n"
                                    "    f.write(b'ok')\nopen('here.txt', 'w').write('ok')")
        assert scratch.ok, scratch.text()
    finally:
        await sb.close()


async def test_the_apps_environment_is_not_readable(monkeypatch) -> None:
    monkeypatch.setenv("LLMDECK_TEST_SECRET", "hunter2-sandbox")
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        code = ("import os\nseen = repr(dict(os.environ)) + open('/proc/self/environ').read()\n"
                f"try:\n    seen += open('/proc/{os.getpid()}/environ').read()\n"
                "except OSError as exc:\n    seen += type(exc).__name__\n"
                "'hunter2' in seen, os.environ['HOME']")
        r = await sb.run("c", code)
        assert r.ok and r.value == "(False, '/tmp')", r
    finally:
        await sb.close()


async def test_cpu_time_past_the_limit_ends_the_run_with_its_own_message() -> None:
    sb = Sandbox(timeout_s=60, memory_mb=512, cpu_s=1)
    try:
        started = time.monotonic()
        r = await sb.run("c", "while True:\n    pass")
        assert r.kind == "timeout" and "CPU" in r.error and r.reset
        assert time.monotonic() - started < 20, "the CPU limit, not the 60 s timeout"
    finally:
        await sb.close()


FORK_BOMB = """
import os, time
made, refused = 0, None
for _ in range(150):
    try:
        pid = os.fork()
    except OSError as exc:
        refused = type(exc).__name__
        break
    if pid == 0:
        time.sleep(60)
        os._exit(0)
    made += 1
made, refused
"""


async def test_a_fork_bomb_hits_the_process_limit_and_is_swept() -> None:
    from core.tools.sandbox.client import PROCESSES

    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", FORK_BOMB)
        assert r.value is not None, r
        made, refused = ast.literal_eval(r.value)
        assert refused == "BlockingIOError" and made < PROCESSES, r
        assert f"stopped {made} processes" in r.note
        again = await sb.run("c", FORK_BOMB)
        assert again.value == r.value, "the sweep gave every slot back"
    finally:
        await sb.close()
    from core.tools.sandbox.cgroups import CGROUP_PREFIX

    mine = f"{CGROUP_PREFIX}{os.getpid()}-"
    left = [p for base in (Path("/sys/fs/cgroup"), Path("/sys/fs/cgroup/pids")) if base.is_dir()
            for p in base.iterdir() if p.name.startswith(mine)]
    assert left == [], "as root, its cgroups are removed at close"


async def test_without_namespaces_it_says_so_and_still_sweeps_children(monkeypatch) -> None:
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "0")  # as where user namespaces are off
    tag = _tag()
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        assert "full rights" in sb.unwalled(), "what the approval dialog says before each run"
        r = await sb.run("c", ESCAPERS.format(tag=tag) + "print('started')")
        assert r.ok and r.stdout == "started\n"
        assert r.note == "(Sandbox: stopped 2 processes the code left running.)"
        assert _wait_none(tag) == [], "the subreaper kept both under the supervisor"
        assert not any(sb.walls[wall] for wall in ("pid_namespace", "network", "read_only"))
        sb.timeout_s = 1.0
        late = await sb.run("c", ESCAPERS.format(tag=tag) + "while True:\n    pass")
        assert late.kind == "timeout" and _wait_none(tag) == []
    finally:
        await sb.close()


UNDO_READ_ONLY = r"""
import ctypes
libc = ctypes.CDLL(None, use_errno=True)

class MountAttr(ctypes.Structure):
    _fields_ = [(n, ctypes.c_uint64) for n in ("set", "clear", "propagation", "userns")]

results = []
remount = libc.mount(None, b"/", None, ctypes.c_ulong(32 | 4096), None)  # MS_REMOUNT|MS_BIND
results.append((remount, ctypes.get_errno()))
attr = MountAttr(0, 1, 0, 0)  # clear MOUNT_ATTR_RDONLY on the whole tree (mount_setattr)
cleared = libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr))
results.append((cleared, ctypes.get_errno()))
results
"""


async def test_root_inside_cannot_undo_the_read_only_mounts() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512)
    target = Path(sys.prefix) / f"escape-{_tag()}.txt"  # read-only, even bound back under /tmp
    try:
        r = await sb.run("c", UNDO_READ_ONLY)
        assert r.ok and r.value == "[(-1, 1), (-1, 1)]", r  # both EPERM: the mounts are locked
        w = await sb.run("c", f"open({str(target)!r}, 'w').write('x')")
        assert not w.ok and "Read-only file system" in w.error and not target.exists()
    finally:
        await sb.close()
