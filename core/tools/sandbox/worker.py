"""The sandbox worker: runs the model's (or the user's) Python like a notebook.

It runs as a script in a fresh interpreter started by the launcher (launcher.py) behind
the walls of jail.py, so it imports only the standard library. A runaway loop or a memory
bomb costs only this process: the app kills it (and everything it started) at the
timeout, the address-space limit turns a memory bomb into a MemoryError (after which the
worker exits and is respawned), and the chat keeps streaming meanwhile.

After each run nothing the code started may keep running: processes it left behind are
killed (as PID 1 of its own PID namespace, with kill(-1); elsewhere its descendants, which
the subreaper flag keeps under it), and a thread still alive costs the session: the worker
answers, then exits, and the app starts a fresh one.

Each conversation has its own namespace, kept between runs until the worker is replaced.
Matplotlib figures left open after a run are saved as PNG files and closed.
"""

from __future__ import annotations

import ast
import io
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 20_000  # characters of stdout/stderr/repr kept per run
EXIT_CPU_LIMIT = 72  # the exit status that tells the app the CPU-time limit was reached
PARENT_CHECK_S = 0.5


def _cut(text: str) -> str:
    if len(text) <= OUTPUT_LIMIT:
        return text
    return text[:OUTPUT_LIMIT] + f"\n… ({len(text) - OUTPUT_LIMIT} more characters cut)"


class _Cell:
    """Compiles one run: every statement, then the last expression evaluated for its repr."""

    def __init__(self, code: str, filename: str) -> None:
        tree = ast.parse(code, filename=filename, mode="exec")
        self.last: Any = None
        if tree.body and isinstance(tree.body[-1], ast.Expr):
            last = ast.Expression(tree.body.pop().value)
            self.last = compile(last, filename, "eval")
        self.body = compile(tree, filename, "exec")


def _traceback(exc: BaseException) -> str:
    """The traceback without the worker's own frames: only the user's cell lines."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def _save_figures(figure_dir: str, run_id: str) -> list[str]:
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return []
    saved: list[str] = []
    numbers = list(plt.get_fignums())
    if numbers:
        folder = Path(figure_dir)
        folder.mkdir(parents=True, exist_ok=True)
        for n in numbers:
            path = folder / f"{run_id}-{n}.png"
            plt.figure(n).savefig(path, format="png", dpi=100)
            saved.append(str(path))
    plt.close("all")
    return saved


def run_cell(namespace: dict[str, Any], code: str, run_id: str, figure_dir: str,
             number: int = 1) -> dict[str, Any]:
    """Run `code` in `namespace` as cell `number` (tracebacks name it like a notebook's
    In [n]); the result is a plain dict (it crosses a pipe)."""
    filename = f"<cell {number}>"
    linecache.cache[filename] = (len(code), None, code.splitlines(True), filename)
    out, err = io.StringIO(), io.StringIO()
    result: dict[str, Any] = {"ok": True, "value": None, "error": None, "kind": None}
    try:
        cell = _Cell(code, filename)
        with redirect_stdout(out), redirect_stderr(err):
            exec(cell.body, namespace)
            if cell.last is not None:
                value = eval(cell.last, namespace)
                if value is not None:
                    namespace["_"] = value
                    result["value"] = _cut(repr(value))
    except MemoryError:
        result.update(ok=False, kind="memory", error="MemoryError: the code went over the sandbox memory limit.")
    except SyntaxError as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        result.update(ok=False, kind="exception", error=text)
    except (Exception, KeyboardInterrupt, SystemExit) as exc:
        result.update(ok=False, kind="exception", error=_traceback(exc))
    try:
        result["figures"] = _save_figures(figure_dir, run_id)
    except Exception as exc:  # a broken figure must not lose the run's output
        result["figures"] = []
        err.write(f"\n(could not save figures: {exc})")
    result["stdout"] = _cut(out.getvalue())
    result["stderr"] = _cut(err.getvalue())
    return result




def _reap(wait_s: float = 0.0) -> None:
    """Collect exited children (orphans of the code end up ours: PID 1 or subreaper)."""
    deadline = time.monotonic() + wait_s
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            if time.monotonic() >= deadline:
                return
            time.sleep(0.005)


def _stop_processes() -> int:
    """Kill every process the code left running; how many there were."""
    _reap()
    if os.getpid() == 1:  # PID 1 of our own PID namespace: every other process is the code's
        try:
            count = sum(1 for e in os.listdir("/proc") if e.isdigit() and e != "1")
        except OSError:
            count = 1
        try:
            os.kill(-1, signal.SIGKILL)  # in a PID namespace: all of it but PID 1
        except ProcessLookupError:
            return 0
        _reap(wait_s=2.0)
        return max(count, 1)
    try:
        import psutil
    except ImportError:
        return 0
    try:
        left = psutil.Process().children(recursive=True)
    except psutil.Error:
        return 0
    for proc in left:
        try:
            proc.kill()
        except psutil.Error:
            pass
    _reap(wait_s=2.0 if left else 0.0)
    return len(left)


def _leftovers(threads_before: set[threading.Thread]) -> tuple[str | None, bool]:
    """(a note for the result, whether the worker must restart) after one run."""
    notes: list[str] = []
    stopped = _stop_processes()
    if stopped:
        notes.append(f"stopped {stopped} process{'es' if stopped > 1 else ''} the code left running")
    threads = [t for t in threading.enumerate() if t not in threads_before and t.is_alive()]
    deadline = time.monotonic() + 0.2  # a thread that is just finishing gets a moment
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    alive = [t for t in threads if t.is_alive()]
    if alive:
        notes.append(f"{len(alive)} background thread{'s' if len(alive) > 1 else ''} kept "
                     "running after the code finished, so the Python session was restarted "
                     "to stop it")
    if not notes:
        return None, False
    return "(Sandbox: " + "; ".join(notes) + ".)", bool(alive)


def serve(setup_json: str) -> None:
    """Serve ("run", run_id, conversation_id, code, figure_dir) until ("stop",) or EOF.

    `setup_json` (from the launcher): the pipe's fd, the app's pid (0 where the kernel
    ends us with it), the working folder and which walls are up."""
    import json

    setup = json.loads(setup_json)
    conn = Connection(setup["fd"])
    parent_pid = setup["parent_pid"]
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # A handler, not the default action: the kernel drops default-action signals to the
    # PID 1 of a namespace, and the exit status says "CPU limit" rather than "crashed".
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(EXIT_CPU_LIMIT))
    os.chdir(setup["workdir"])
    namespaces: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    conn.send(("ready", os.getpid(), setup["walls"]))
    while True:
        if not conn.poll(PARENT_CHECK_S):
            if parent_pid and os.getppid() != parent_pid:
                return
            continue
        try:
            msg = conn.recv()
        except (EOFError, OSError):
            return
        if msg[0] != "run":
            return
        _, run_id, conversation_id, code, figure_dir = msg
        namespace = namespaces.setdefault(conversation_id, {"__name__": "__main__"})
        counts[conversation_id] = counts.get(conversation_id, 0) + 1
        threads_before = set(threading.enumerate())
        result = run_cell(namespace, code, run_id, figure_dir, counts[conversation_id])
        result["note"], restart = _leftovers(threads_before)
        result["restart"] = restart or result.get("kind") == "memory"
        try:
            conn.send(("result", run_id, result))
        except (OSError, MemoryError):
            return
        if result["restart"]:
            # Memory may be fragmented or held by half-built objects; a thread cannot be
            # stopped from outside it: either way, start afresh.
            os._exit(0)


if __name__ == "__main__":
    serve(sys.argv[1])
