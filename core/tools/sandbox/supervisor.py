"""The sandbox supervisor: the one process in the sandbox that holds the app's channel.

The code never runs here. The supervisor starts a runner (runner.py) that holds only a
socketpair of its own, passes it each run, and relays what it answers, checked
(channel.py): a frame too large, of the wrong shape, a figure that is not a PNG or one
too many, and the runner is killed and the app gets a sentence instead. After each run it
ends every process the code left behind, and it starts a fresh runner when a run asks for
it (a MemoryError, a thread left running) or the runner died.

In the Linux jail it is PID 1 of the sandbox's PID namespace: the kernel drops signals
from the code that it has no handler for, and it sees exactly the sandbox's processes in
/proc. It makes itself undumpable (the runner, same user, cannot read or write its
memory through ptrace or /proc/<pid>/mem) and ignores the signals it need not take.
Standard library only (psutil where it is installed, to find leftovers outside the
jail): it runs as a script, started by the launcher.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import sys
import time
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import channel  # type: ignore[import-not-found]  # noqa: E402  # by path: no package here

del sys.path[0]

PR_SET_DUMPABLE = 4
EXIT_CPU_LIMIT = 72  # runner.EXIT_CPU_LIMIT
RUNNER_START_S = 60.0
IGNORED = ("SIGINT", "SIGHUP", "SIGTERM", "SIGQUIT", "SIGPIPE", "SIGUSR1", "SIGUSR2",
           "SIGTSTP", "SIGTTIN", "SIGTTOU", "SIGALRM", "SIGVTALRM", "SIGPROF", "SIGWINCH")
_RUNNER = os.path.join(os.path.dirname(os.path.abspath(__file__)), "runner.py")


def harden() -> None:
    """Undumpable, and deaf to the signals a supervisor has no use for."""
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0)
        except (OSError, AttributeError):
            pass
    for name in IGNORED:
        sig = getattr(signal, name, None)
        if sig is not None:
            try:
                signal.signal(sig, signal.SIG_IGN)
            except (OSError, ValueError):
                pass


class RunnerGone(Exception):
    """The runner died or broke the protocol; str() is the sentence for the app."""

    def __init__(self, sentence: str, kind: str = "crashed") -> None:
        super().__init__(sentence)
        self.kind = kind


class Runner:
    """One runner process and our end of its socketpair."""

    def __init__(self) -> None:
        ours, theirs = channel.inheritable_pair()
        fd = theirs.fileno()
        setup = json.dumps({"fd": fd, "parent_pid": os.getpid()})
        argv = [sys.executable, "-P", _RUNNER, setup]
        pid = os.fork()
        if pid == 0:  # keep only stdio and the runner's own end: never the app's channel
            try:
                os.closerange(3, fd)
                os.closerange(fd + 1, 1 << 16)
                for sig in IGNORED:  # the code gets ordinary signal handling
                    if hasattr(signal, sig):
                        signal.signal(getattr(signal, sig), signal.SIG_DFL)
                os.execve(argv[0], argv, dict(os.environ))
            finally:
                os._exit(127)
        theirs.close()
        self.pid = pid
        self.sock = ours
        self.status: int | None = None  # the wait status, once reaped
        channel.check(channel.read_frame(ours, time.monotonic() + RUNNER_START_S), ("ready",))

    def reaped(self, status: int) -> None:
        self.status = status

    def kill(self) -> None:
        if self.status is None:
            try:
                os.kill(self.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            try:
                _, status = os.waitpid(self.pid, 0)
                self.status = status
            except ChildProcessError:
                self.status = 0
        self.sock.close()

    def why_gone(self) -> RunnerGone:
        """After the runner's channel closed: why (the CPU limit, or a crash)."""
        if self.status is None:
            try:  # an exited runner is a zombie and keeps its status; a live one (the
                os.kill(self.pid, signal.SIGKILL)  # code closed the socket) ends here
            except ProcessLookupError:
                pass
            try:
                _, self.status = os.waitpid(self.pid, 0)
            except ChildProcessError:
                self.status = 0
        status = self.status
        cpu = ((os.WIFEXITED(status) and os.WEXITSTATUS(status) == EXIT_CPU_LIMIT)
               or (os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGXCPU))
        if cpu:
            return RunnerGone("cpu", kind="cpu")
        return RunnerGone("The Python sandbox died while running this code (out of memory "
                          "or a crash).")


def _state(pid: int) -> str:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0].decode()
    except (OSError, IndexError):
        return "X"


def _others_in_namespace(keep: set[int]) -> list[int]:
    try:
        return [int(e) for e in os.listdir("/proc")
                if e.isdigit() and int(e) not in keep and _state(int(e)) not in ("Z", "X")]
    except OSError:
        return []


def _descendants(keep: set[int]) -> list[int]:
    """Outside the jail: our descendants (on Linux orphans come to us: we are a
    subreaper) and, for macOS where a double fork hands them to launchd, every process of
    ours still in the sandbox's own session (one that also left the session is not found)."""
    try:
        import psutil
    except ImportError:
        return []
    found: set[int] = set()
    try:
        found = {p.pid for p in psutil.Process().children(recursive=True)}
    except psutil.Error:
        pass
    sid, uid = os.getsid(0), os.getuid()
    for proc in psutil.process_iter(["uids"]):
        try:
            if (proc.info["uids"] is not None and proc.info["uids"].real == uid
                    and os.getsid(proc.pid) == sid):
                found.add(proc.pid)
        except (OSError, psutil.Error):
            continue
    alive = []
    for pid in found - keep:
        try:
            if psutil.Process(pid).status() != psutil.STATUS_ZOMBIE:
                alive.append(pid)
        except psutil.Error:
            continue
    return alive


def reap(runner: Runner | None) -> None:
    while True:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        if runner is not None and pid == runner.pid:
            runner.reaped(status)


def stop_leftovers(runner: Runner | None) -> int:
    """Kill every process but us and the runner; how many there were. A process forking
    meanwhile is caught by the next pass."""
    keep = {os.getpid()} | ({runner.pid} if runner is not None and runner.status is None
                            else set())
    find = _others_in_namespace if os.getpid() == 1 else _descendants
    stopped: set[int] = set()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        reap(runner)
        left = find(keep)
        if not left:
            break
        for pid in left:
            try:
                os.kill(pid, signal.SIGKILL)
                stopped.add(pid)
            except ProcessLookupError:
                pass
        time.sleep(0.01)
    reap(runner)
    return len(stopped)


def relay_run(app: socket.socket, runner: Runner, msg: dict[str, Any]) -> dict[str, Any]:
    """Pass one run to the runner; relay its figures; return its (checked) result."""
    try:
        channel.send(runner.sock, {"t": "run", "id": msg["id"], "code": msg["code"]})
    except OSError:
        raise runner.why_gone() from None
    figures = 0
    while True:
        try:
            reply = channel.check(channel.read_frame(runner.sock, None), ("figure", "result"))
        except channel.Closed:
            raise runner.why_gone() from None
        except channel.ChannelError as exc:
            raise RunnerGone(f"The Python sandbox's runner sent a malformed message ({exc}), "
                             "so it was stopped.") from None
        if reply["id"] != msg["id"]:
            raise RunnerGone("The Python sandbox's runner answered a run it was not given, "
                             "so it was stopped.")
        if reply["t"] == "result":
            return reply
        figures += 1
        try:
            channel.figure_bytes(reply)
        except channel.ChannelError as exc:
            raise RunnerGone(f"The Python sandbox's runner sent {exc}, so it was stopped.") from None
        if figures > channel.FIGURES_PER_RUN:
            raise RunnerGone("The Python sandbox's runner sent more figures than a run may "
                             "have, so it was stopped.")
        channel.send(app, {"t": "figure", "id": msg["id"], "png": reply["png"]})


def _note(*parts: str | None) -> str | None:
    kept = [p for p in parts if p]
    return ("(Sandbox: " + "; ".join(kept) + ".)")[:channel.NOTE_LIMIT] if kept else None


def serve(setup: dict[str, Any]) -> None:
    harden()
    app_fd = int(setup["fd"])
    os.closerange(3, app_fd)  # nothing of the launcher's stays open here
    os.closerange(app_fd + 1, 1 << 16)
    app = socket.socket(fileno=app_fd)
    os.set_inheritable(app_fd, False)
    runner = Runner()
    channel.send(app, {"t": "ready", "walls": setup["walls"]})
    while True:
        try:
            msg = channel.check(channel.read_frame(app, None), ("run",))
        except channel.ChannelError:
            break  # the app closed the channel (or, impossible, spoke out of turn)
        restart = False
        try:
            result = relay_run(app, runner, msg)
            restart = result["restart"]
        except RunnerGone as gone:
            restart = True
            cpu = gone.kind == "cpu"
            result = {"t": "result", "id": msg["id"], "ok": False, "stdout": "", "stderr": "",
                      "value": None, "error": None if cpu else str(gone),
                      "kind": gone.kind, "note": None, "restart": True}
        if restart:
            runner.kill()
        stopped = stop_leftovers(runner if not restart else None)
        if stopped:
            result["note"] = _note(f"stopped {stopped} process{'es' if stopped > 1 else ''} "
                                   "the code left running", result["note"])
        elif result["note"]:
            result["note"] = _note(result["note"])
        result["restart"] = restart
        try:
            channel.send(app, result)
        except (OSError, ValueError):
            break
        if restart:  # after the answer: the app need not wait for the fresh interpreter
            runner = Runner()
    runner.kill()
    stop_leftovers(None)


if __name__ == "__main__":
    serve(json.loads(sys.argv[-1]))
