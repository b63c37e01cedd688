"""The sandbox worker process: runs the model's (or the user's) Python like a notebook.

It is a separate process from the model workers so that a runaway loop or a memory bomb
costs only this process: the app kills it at the timeout, the address-space limit turns a
memory bomb into a MemoryError (after which the worker exits and is respawned), and the
chat keeps streaming meanwhile. It is containment, not a security boundary: the code runs
as the user, with the user's files.

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
import traceback
from contextlib import redirect_stderr, redirect_stdout
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

OUTPUT_LIMIT = 20_000  # characters of stdout/stderr/repr kept per run
PARENT_CHECK_S = 0.5


def _die_with_parent() -> None:
    """Ask Linux to SIGKILL us when the app dies; elsewhere we poll getppid()."""
    if not sys.platform.startswith("linux"):
        return
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGKILL)
    except OSError:
        pass


def _detach_terminal() -> None:
    """Point fds 1 and 2 at /dev/null: the app owns the terminal, and code writing below
    sys.stdout (os.system, C extensions) must not land on top of the UI. What Python code
    prints is captured per run; conversation output never goes to a log file."""
    null = os.open(os.devnull, os.O_WRONLY)
    for fd in (1, 2):
        try:
            os.dup2(null, fd)
        except OSError:
            pass
    os.close(null)


def _limit_memory(limit_bytes: int) -> None:
    """Cap the address space so a memory bomb raises MemoryError instead of swapping."""
    if limit_bytes <= 0:
        return
    try:
        import resource

        resource.setrlimit(resource.RLIMIT_AS, (limit_bytes, limit_bytes))
    except (ImportError, ValueError, OSError):  # macOS may refuse RLIMIT_AS; timeout still holds
        pass


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


def sandbox_main(conn: Connection, memory_limit_bytes: int, parent_pid: int, workdir: str) -> None:
    """Serve ("run", run_id, conversation_id, code, figure_dir) until ("stop",) or EOF."""
    _die_with_parent()
    _detach_terminal()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    os.environ["MPLBACKEND"] = "Agg"
    for var in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS"):
        os.environ.setdefault(var, "1")  # BLAS thread pools reserve address space per thread
    os.makedirs(workdir, exist_ok=True)
    os.chdir(workdir)
    _limit_memory(memory_limit_bytes)
    namespaces: dict[str, dict[str, Any]] = {}
    counts: dict[str, int] = {}
    conn.send(("ready", os.getpid()))
    while True:
        if not conn.poll(PARENT_CHECK_S):
            if os.getppid() != parent_pid:
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
        result = run_cell(namespace, code, run_id, figure_dir, counts[conversation_id])
        try:
            conn.send(("result", run_id, result))
        except (OSError, MemoryError):
            return
        if result.get("kind") == "memory":
            return  # memory may be fragmented or held by half-built objects: start afresh
