"""The sandbox runner: runs the model's (or the user's) Python like a notebook.

It is the only process that runs the code, and it holds nothing of the app's: no channel
to it, no environment, no folder. It talks to its supervisor (supervisor.py) over a
socketpair of its own, in frames (channel.py); whatever the code writes there is checked
by the supervisor like any other hostile input. It runs as a script in a fresh
interpreter and imports only the standard library (and channel.py, by path).

A runaway loop or a memory bomb costs only this process: the app kills the sandbox at
the timeout, the address-space limit turns a memory bomb into a MemoryError (after which
the runner asks to be restarted), and the chat keeps streaming meanwhile. A thread still
alive after a run costs the session the same way: it cannot be stopped from outside.
Matplotlib figures left open after a run are sent as PNG bytes and closed; the app
writes them where it keeps figures (nothing here can write there).
"""

from __future__ import annotations

import ast
import base64
import io
import linecache
import os
import signal
import sys
import threading
import time
import traceback
from contextlib import redirect_stderr, redirect_stdout
from typing import Any

OUTPUT_LIMIT = 20_000  # characters of stdout/stderr/repr/error kept per run
EXIT_CPU_LIMIT = 72  # the exit status that tells the supervisor the CPU limit was reached
PR_SET_PDEATHSIG = 1


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
    """The traceback without the runner's own frames: only the user's cell lines."""
    tb = exc.__traceback__
    while tb is not None and not tb.tb_frame.f_code.co_filename.startswith("<cell"):
        tb = tb.tb_next
    return "".join(traceback.format_exception(type(exc), exc, tb)).rstrip()


def figures_png(limit: int) -> tuple[list[bytes], str | None]:
    """Open matplotlib figures as PNG bytes (at most `limit`), all closed after."""
    plt = sys.modules.get("matplotlib.pyplot")
    if plt is None:
        return [], None
    pngs: list[bytes] = []
    numbers = list(plt.get_fignums())
    for n in numbers[:limit]:
        buf = io.BytesIO()
        plt.figure(n).savefig(buf, format="png", dpi=100)
        pngs.append(buf.getvalue())
    plt.close("all")
    skipped = len(numbers) - len(pngs)
    return pngs, (f"{skipped} more figure{'s' if skipped > 1 else ''} not kept (at most "
                  f"{limit} a run)") if skipped else None


def run_cell(namespace: dict[str, Any], code: str, number: int = 1) -> dict[str, Any]:
    """Run `code` in `namespace` as cell `number` (tracebacks name it like a notebook's
    In [n]); the result is a plain dict of the result frame's fields."""
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
        result.update(ok=False, kind="memory", error="MemoryError")
    except SyntaxError as exc:
        text = "".join(traceback.format_exception_only(type(exc), exc)).rstrip()
        result.update(ok=False, kind="exception", error=_cut(text))
    except (Exception, KeyboardInterrupt, SystemExit) as exc:
        result.update(ok=False, kind="exception", error=_cut(_traceback(exc)))
    result["stdout"] = _cut(out.getvalue())
    result["stderr"] = _cut(err.getvalue())
    return result


def reap() -> None:
    """Collect children the supervisor killed after the last run (a zombie still counts
    against the process limit)."""
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def threads_left(before: set[threading.Thread]) -> int:
    """Threads the code started that are still alive after a short grace."""
    threads = [t for t in threading.enumerate() if t not in before and t.is_alive()]
    deadline = time.monotonic() + 0.2
    for thread in threads:
        thread.join(max(0.0, deadline - time.monotonic()))
    return sum(1 for t in threads if t.is_alive())


def _die_with_supervisor() -> None:
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
        except (OSError, AttributeError):
            pass


def serve(setup_json: str) -> None:
    """Answer "run" frames from the supervisor until it closes the channel."""
    import json
    import socket

    setup = json.loads(setup_json)
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    try:
        import channel  # type: ignore[import-not-found]  # by path: no package here
    finally:
        del sys.path[0]
    _die_with_supervisor()
    if setup.get("parent_pid") and os.getppid() != setup["parent_pid"]:
        return  # the supervisor died before the flag was set
    sock = socket.socket(fileno=setup["fd"])
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(EXIT_CPU_LIMIT))
    namespace: dict[str, Any] = {"__name__": "__main__"}
    count = 0
    channel.send(sock, {"t": "ready", "walls": {}})
    while True:
        try:
            msg = channel.check(channel.read_frame(sock, None), ("run",))
        except channel.ChannelError:
            return
        reap()
        count += 1
        before = set(threading.enumerate())
        result = run_cell(namespace, msg["code"], count)
        try:
            pngs, skipped = figures_png(channel.FIGURES_PER_RUN)
        except Exception as exc:  # noqa: BLE001 - a broken figure must not lose the run
            pngs, skipped = [], f"could not save figures: {str(exc)[:200]}"
        for png in pngs:
            if len(png) > channel.FIGURE_BYTES:
                skipped = "a figure over 4 MiB was not kept"
                continue
            channel.send(sock, {"t": "figure", "id": msg["id"],
                                "png": base64.b64encode(png).decode()})
        alive = threads_left(before)
        notes = [skipped] if skipped else []
        if alive:
            notes.append(f"{alive} background thread{'s' if alive > 1 else ''} kept running "
                         "after the code finished, so the Python session was restarted to stop it")
        result.update(t="result", id=msg["id"], note="; ".join(notes) or None,
                      restart=bool(alive) or result["kind"] == "memory")
        try:
            channel.send(sock, result)
        except (OSError, ValueError, MemoryError):
            return
        if result["restart"]:
            return  # memory may be fragmented, a thread cannot be stopped: start afresh


if __name__ == "__main__":
    serve(sys.argv[1])
