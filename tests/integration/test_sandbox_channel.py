"""The sandbox's channel, conversations and totals, attacked (issue 37).

Each test runs real sandboxes and checks the effect from outside: a file the app would
have written had it unpickled a message, the app's own memory (psutil), the time a run
took, which processes are left, what a second conversation can see. The hostile
supervisor (tests/fakes/hostile_supervisor.py) stands where code that took over the
sandbox would: on the sandbox's end of the app's channel.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from core.events import ToolCall
from core.tools import Sandbox, ToolKit, ToolRunner
from tests.fixtures.tools import ApproverRecording
from tests.helpers.procs import wait_gone

HOSTILE = str(Path(__file__).resolve().parents[1] / "fakes" / "hostile_supervisor.py")

# Code inside writes, to every file descriptor it has, a pickle in multiprocessing's own
# framing (what the old pipe unpickled: it would create SENTINEL in the app's process)
# and a forged result frame in the new framing.
FORGE_ON_EVERY_FD = r"""
import json, os, pickle, struct

class WritesFile:
    def __reduce__(self):
        return (open, ({sentinel!r}, "w"))

payload = pickle.dumps(WritesFile())
forged = json.dumps({{"t": "result", "id": "x", "ok": True, "stdout": "forged", "stderr": "",
                     "value": None, "error": None, "kind": None, "note": None,
                     "restart": False}}).encode()
written = []
for fd in os.listdir("/proc/self/fd"):
    for data in (struct.pack("!i", len(payload)) + payload, struct.pack(">I", len(forged)) + forged):
        try:
            os.write(int(fd), data)
            written.append(int(fd))
        except OSError:
            pass
sorted(set(written))
"""


@pytest.mark.parametrize("jail", ["1", "0"])
async def test_code_writing_pickles_and_forged_frames_to_every_fd_runs_nothing_in_the_app(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, jail: str) -> None:
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", jail)
    sentinel = tmp_path / "written-by-the-app"
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", FORGE_ON_EVERY_FD.format(sentinel=str(sentinel)))
        assert not sentinel.exists(), "the app ran the sandbox's pickle"
        assert "forged" not in r.text(), r
        # The code reaches only its own runner's socket: the supervisor refuses the frame.
        assert not r.ok and r.reset and "malformed" in r.error, r
        after = await sb.run("c", "1 + 1")
        assert after.ok and after.value == "2", "the next run starts a fresh runner"
    finally:
        await sb.close()


# Code that finds its own run's id (in the runner's frames) and sends, on the runner's
# socket, a figure frame of that run holding something that is not a PNG (say, a script),
# or a 2 GiB length prefix.
FORGED_FIGURE = r"""
import base64, json, os, socket, struct, sys
frame = sys._getframe()
while frame is not None and "msg" not in frame.f_locals:
    frame = frame.f_back
run_id = frame.f_locals["msg"]["id"]
fd = max(int(fd) for fd in os.listdir("/proc/self/fd") if os.path.exists(f"/proc/self/fd/{{fd}}")
         and os.readlink(f"/proc/self/fd/{{fd}}").startswith("socket:"))
chan = socket.socket(fileno=os.dup(fd))
if {huge}:
    chan.sendall(struct.pack(">I", (2 << 30) - 1) + b"0" * (1 << 20))
else:
    body = json.dumps({{"t": "figure", "id": run_id,
                       "png": base64.b64encode(b"#!/bin/sh\nrm -rf ~\n").decode()}}).encode()
    chan.sendall(struct.pack(">I", len(body)) + body)
'sent'
"""


@pytest.mark.parametrize("huge", [False, True])
async def test_a_runner_that_forges_frames_is_stopped_and_nothing_reaches_the_app(huge) -> None:
    from core import paths

    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        r = await sb.run("c", FORGED_FIGURE.format(huge=huge))
        assert not r.ok and r.reset and r.kind == "crashed", r
        assert "stopped" in r.error and ("PNG" in r.error or "byte limit" in r.error), r.error
        assert not (paths.data_dir() / "figures").exists(), "no file written for the sandbox"
        assert (await sb.run("c", "'next'")).value == "'next'"
    finally:
        await sb.close()


async def _hostile(attack: str, *args: str, timeout_s: float = 5.0,
                   monkeypatch: pytest.MonkeyPatch) -> tuple[Sandbox, object, float]:
    # Without the jail the fake stands in on the host directly; the reader under attack
    # is the app's either way.
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "0")
    sb = Sandbox(timeout_s=timeout_s, memory_mb=512, supervisor=[HOSTILE, attack, *args])
    await sb.start("c")
    started = time.monotonic()
    result = await sb.run("c", "1")
    return sb, result, time.monotonic() - started


async def test_a_frame_cut_short_ends_the_run_at_its_timeout(monkeypatch) -> None:
    sb, r, took = await _hostile("cut", timeout_s=1.5, monkeypatch=monkeypatch)
    try:
        assert r.kind == "timeout" and r.reset and "1.5 s limit" in r.error, r
        assert took < 6, f"the run waited {took:.1f} s for the rest of the frame"
    finally:
        await sb.close()


@pytest.mark.parametrize("attack", ["garbage", "schema", "other-run"])
async def test_a_malformed_reply_is_a_sentence_not_an_exception(monkeypatch, attack) -> None:
    sb, r, took = await _hostile(attack, timeout_s=20, monkeypatch=monkeypatch)
    try:
        assert not r.ok and r.kind == "crashed" and r.reset, r
        assert r.error.startswith("The Python sandbox sent a malformed reply"), r.error
        assert took < 10, "refused at once, not at the timeout"
        assert sb.restarts == 1
    finally:
        await sb.close()


async def test_a_pickle_on_the_apps_channel_is_never_unpickled(tmp_path, monkeypatch) -> None:
    sentinel = tmp_path / "written-by-the-app"
    sb, r, _ = await _hostile("pickle", str(sentinel), timeout_s=20, monkeypatch=monkeypatch)
    try:
        assert not sentinel.exists(), "the app ran the sandbox's pickle"
        assert not r.ok and "malformed" in r.error, r
    finally:
        await sb.close()


async def test_a_2_gib_length_prefix_does_not_grow_the_app(monkeypatch) -> None:
    app = psutil.Process()
    before = app.memory_info().rss
    sb, r, took = await _hostile("huge", timeout_s=20, monkeypatch=monkeypatch)
    try:
        grew = app.memory_info().rss - before
        assert grew < 64 << 20, f"the app grew by {grew >> 20} MiB"
        assert not r.ok and "malformed" in r.error and "byte limit" in r.error, r
        assert took < 10
    finally:
        await sb.close()


async def test_a_late_result_does_not_pass_for_a_run(monkeypatch) -> None:
    sb, r, took = await _hostile("late", "3", timeout_s=1.0, monkeypatch=monkeypatch)
    try:
        assert r.kind == "timeout" and r.reset, r
        assert took < 3, "not waited for"
    finally:
        await sb.close()


# -- one sandbox per conversation -----------------------------------------------------------

SET_IN_A = "secret = 'A-secret-41'\nopen('/tmp/a-scratch.txt', 'w').write('A')\n'set'"
LOOK_FROM_B = r"""
import gc, os
seen = []
if 'secret' in globals():
    seen.append('variable')
if any(isinstance(o, dict) and o.get('secret') == 'A-secret-41' for o in gc.get_objects()):
    seen.append('gc')
if os.path.exists('/tmp/a-scratch.txt'):
    seen.append('file')
if sum(1 for e in os.listdir('/proc') if e.isdigit()) > 2:  # its supervisor and runner
    seen.append('process')
seen
"""


async def test_one_conversation_sees_nothing_of_another() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512)
    try:
        a = await sb.run("conv-A", SET_IN_A)
        assert a.ok and a.value == "'set'", a
        b = await sb.run("conv-B", LOOK_FROM_B)
        assert b.ok and b.value == "[]", b
        assert a.pid != b.pid, "two sandboxes"
        a_tree = {p.pid for p in psutil.Process(a.pid).children(recursive=True)}
        b_tree = {p.pid for p in psutil.Process(b.pid).children(recursive=True)}
        assert a_tree and b_tree and not a_tree & b_tree
        again = await sb.run("conv-A", "secret, open('/tmp/a-scratch.txt').read()")
        assert again.value == "('A-secret-41', 'A')", "A keeps its own"
    finally:
        await sb.close()


async def test_past_max_live_the_least_recent_sandbox_goes_and_its_next_result_says_so() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512, max_live=2)
    try:
        first = await sb.run("a", "kept = 1")
        await sb.run("b", "kept = 2")
        await sb.run("c", "kept = 3")
        assert wait_gone([first.pid], 10) == [], "a's sandbox was closed for room"
        assert sb.live() <= 2
        back = await sb.run("a", "'kept' in globals()")
        assert back.ok and back.value == "False" and back.reset, back
        assert "variables from earlier runs are gone" in back.text()
        assert (await sb.run("a", "1")).reset is False, "said once"
    finally:
        await sb.close()
    assert sb.live() == 0


# -- totals ----------------------------------------------------------------------------------

# Four children of 100 MiB each (touched, so resident) under a 300 MiB total: each is well
# inside the per-process limit, together they are not (the issue: ten of 850 MiB).
CHILDREN = """
import os, time
for _ in range(4):
    if os.fork() == 0:
        block = bytearray(100 << 20)
        for i in range(0, len(block), 4096):
            block[i] = 1
        time.sleep(60)
        os._exit(0)
time.sleep(60)
"""


async def test_children_together_are_stopped_at_the_memory_total() -> None:
    sb = Sandbox(timeout_s=30, memory_mb=300)
    try:
        started = time.monotonic()
        r = await sb.run("c", CHILDREN)
        assert r.kind == "memory" and r.reset and "300 MiB" in r.error, r
        assert time.monotonic() - started < 20, "stopped by the total, not the timeout"
        assert wait_gone([r.pid], 10) == [], "the whole sandbox went with them"
        assert (await sb.run("c", "'fresh'")).value == "'fresh'"
    finally:
        await sb.close()


# Forty forks of the runner, touching nothing: their resident sizes add up past 256 MiB
# (each counts the interpreter's shared pages again), what they use together does not.
SHARING_FORKS = """
import os, time
pids = []
for _ in range(40):
    pid = os.fork()
    if pid == 0:
        time.sleep(3)
        os._exit(0)
    pids.append(pid)
for pid in pids:
    os.waitpid(pid, 0)
len(pids)
"""


async def test_forks_that_share_their_pages_are_not_counted_again_and_again() -> None:
    sb = Sandbox(timeout_s=30, memory_mb=256)
    try:
        r = await sb.run("c", SHARING_FORKS)
        assert r.ok and r.value == "40", r
    finally:
        await sb.close()


async def test_the_scratch_folder_holds_what_the_setting_says_and_no_more() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512, scratch_mb=16)
    try:
        # Eight files of 4 MiB: each under the per-file limit, together past the tmpfs.
        r = await sb.run("c", "import os\nblock = b'x' * (4 << 20)\nfor n in range(8):\n"
                              "    with open(f'fill-{n}', 'wb') as f:\n        f.write(block)\n")
        assert not r.ok and "No space left on device" in r.error, r
        size = await sb.run("c", "sum(os.path.getsize(n) for n in os.listdir('.')) >> 20")
        assert int(size.value) <= 16, size
    finally:
        await sb.close()


# -- without walls: ask before every run -------------------------------------------------------

async def test_without_walls_python_asks_before_every_run_whatever_the_setting(monkeypatch) -> None:
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "0")
    kit = ToolKit(python_asks=False)  # the person chose "don't ask"
    try:
        warning = kit.policy.warning("python")
        assert warning is not None and "full rights" in warning
        approve = ApproverRecording("allow", "allow")
        for n in (1, 2):
            runner = ToolRunner(kit.registry, kit.policy, kit.context("c"), approve)
            states = [s.state async for s in runner.run(
                [ToolCall(id=f"call-{n}", name="python", arguments={"code": f"{n} + 1"})])]
            assert states == ["awaiting-approval", "running", "done"]
        assert approve.asked == ["python", "python"]
    finally:
        await kit.close()
    monkeypatch.setenv("LLMDECK_SANDBOX_JAIL", "1")
    assert not ToolKit(python_asks=False).policy.needs_approval("c", "python"), \
        "behind the walls the setting holds"


async def test_close_ends_every_conversations_sandbox() -> None:
    sb = Sandbox(timeout_s=20, memory_mb=512)
    pids = [(await sb.run(cid, "1")).pid for cid in ("x", "y", "z")]
    await sb.close()
    assert wait_gone(pids, 10) == []


# -- where the walls cannot go up -----------------------------------------------------------

# An "app" on a system that refuses new namespaces (as Docker's default seccomp profile
# does): the sandbox's own filter, installed in the app's process, is inherited by the
# launcher, whose unshare(2) then fails.
NO_NAMESPACES_APP = """
import asyncio, os, sys
from core.tools.sandbox import seccomp
seccomp.install()
from core.tools import Sandbox

async def main():
    sb = Sandbox(timeout_s=20, memory_mb=512)
    code = "open(%r, 'w').write('ran')" % sys.argv[1]
    first = await sb.run("c", code)
    print("first:", first.kind, first.error, flush=True)
    print("unwalled:", sb.unwalled(), flush=True)
    await sb.close()

if __name__ == "__main__":
    asyncio.run(main())
"""


def test_where_the_walls_cannot_go_up_the_code_does_not_run_unasked(tmp_path: Path) -> None:
    root = Path(__file__).resolve().parents[2]
    script = tmp_path / "app.py"
    script.write_text(NO_NAMESPACES_APP)
    ran = tmp_path / "ran.txt"
    done = subprocess.run([sys.executable, str(script), str(ran)], capture_output=True,
                          text=True, timeout=120, cwd=root,
                          env={**os.environ, "PYTHONPATH": str(root)})
    assert done.returncode == 0, done.stderr[-2000:]
    assert not ran.exists(), "the code ran without its walls"
    if os.geteuid() == 0:  # never as root without the walls, not even when asked
        assert "first: crashed The Python sandbox will not run" in done.stdout, done.stdout
        assert "llmdeck runs as root" in done.stdout
    else:  # this run was approved for a walled sandbox: it does not go ahead without
        assert "first: crashed The code did not run" in done.stdout, done.stdout
        assert "unwalled: This code will run with your full rights" in done.stdout


async def test_deleting_a_conversation_ends_its_sandbox() -> None:
    """Its variables and scratch files go with it at once, not when the pool needs room."""
    from tests.fixtures.tools import scripted_runtime

    runtime = scripted_runtime(["ok"])
    await runtime.start(preload=False)
    try:
        cid = await runtime.store_call(runtime.store_handle.create_conversation, "scratch")
        kept = await runtime.tools.sandbox.run(cid, "secret = 42\nsecret")
        other = await runtime.tools.sandbox.run("another", "1 + 1")
        assert kept.ok and kept.value == "42" and other.ok
        await runtime.delete_conversation(cid)
        assert wait_gone([kept.pid], 10) == [], "the deleted conversation's sandbox is gone"
        assert wait_gone([other.pid], 0.5) == [other.pid], "another conversation's stays"
    finally:
        await runtime.close()
