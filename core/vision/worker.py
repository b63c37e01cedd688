"""The vision worker: a vision-language model (the "vision" role) in its own process.

A text-only chat model cannot see, so a picture reaches it as a caption a vision model
wrote. That model is large and used rarely, so it is loaded on the first image that needs
it and unloaded after `idle_s` without work: the process exits, which is the only way MLX
and torch give all their memory back. Like every child it starts through
core.workers.bootstrap (dies with the app, quiet stdio, own process group).

Images travel as paths of stored files (core.vision.images), never as pixels. The worker
streams caption pieces back as it decodes, one image request at a time; text requests
of chat models run in their own workers and never wait on it.
"""

from __future__ import annotations

from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.workers.on_demand import READY, OnDemandProcess, serve

DEFAULT_IDLE_S = 180.0
# The tokens a caption request holds in the model's cache: an image's tokens (576 for
# LLaVA 1.5, up to ~1,500 for newer models) plus the prompt and the caption. Admission
# counts the cache at this length (core.workers.memory_budget).
CAPTION_CONTEXT = 2048
FAILED, DELTA, DONE, ERROR = "failed", "delta", "done", "error"


class VisionError(Exception):
    """A caption could not be made; `message` is a sentence for the person."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.message = message


# -- the worker process ----------------------------------------------------------------------
def vision_main(conn: Connection, parent_pid: int, model_dir: str) -> None:
    """Entry point: load the model, then caption requests until told to stop."""
    from core.workers.bootstrap import start_child

    start_child(log_name="vision")
    try:
        from core.engines.vlm import load_vlm
        from core.vision.vlm import stream_caption

        model, processor = load_vlm(model_dir)
    except Exception as exc:  # noqa: BLE001 - reported to the app as a load failure
        conn.send((FAILED, f"{type(exc).__name__}: {exc}"))
        return

    def handle(request_id: int, paths: list[str], prompt: str, max_tokens: int) -> None:
        pieces = []
        for piece in stream_caption(model, processor, paths, prompt, max_tokens):
            pieces.append(piece)
            conn.send((DELTA, request_id, piece))
        conn.send((DONE, request_id, "".join(pieces)))

    # A caption that fails answers ERROR; the worker stays for the next image.
    serve(conn, parent_pid, handle, lambda request_id, error: (ERROR, request_id, error))


# -- the app side ------------------------------------------------------------------------------
class VisionWorker(OnDemandProcess):
    """Starts the vision process on first use, routes caption requests, unloads when idle.

    Lives on the app's asyncio loop (core.workers.on_demand); `state` is what the worker
    pane shows: unloaded, loading, ready, busy or failed.
    """

    process_name = "llmdeck-vision"
    join_timeout_s = 1.0

    def __init__(self, model_dir: str | Path, *, idle_s: float = DEFAULT_IDLE_S,
                 load_timeout_s: float = 300.0) -> None:
        super().__init__(idle_s=idle_s, start_timeout_s=load_timeout_s)
        self.model_dir = str(model_dir)
        self.error: str | None = None

    @property
    def load_timeout_s(self) -> float:
        return self.start_timeout_s

    @property
    def loads(self) -> int:
        """Processes started (tests and the bench count reloads)."""
        return self.starts

    @property
    def name(self) -> str:
        return Path(self.model_dir).name

    @property
    def label(self) -> str:
        """How the memory budget's sentences and F4 name it."""
        return f"The vision model {self.name}"

    def _memory_need(self):
        from core.workers.memory_budget import weights_need

        return weights_need(self.model_dir, CAPTION_CONTEXT)

    def _refused_error(self, message: str) -> Exception:
        return VisionError("OOM", message)

    @property
    def state(self) -> str:
        if self.process is None:
            return "failed" if self.error else "unloaded"
        if self._ready is not None and not self._ready.done():
            return "loading"
        return "busy" if self._pending else "ready"

    # -- lifecycle -----------------------------------------------------------------------------
    def _child(self) -> tuple[Any, tuple]:
        return vision_main, (self.model_dir,)

    async def _ensure_started(self) -> None:
        if self._ready is None:
            self.error = None  # a new load: the last failure no longer shows
        await super()._ensure_started()

    def _dispatch(self, msg: tuple) -> None:
        kind = msg[0]
        if kind == READY:
            self._started(msg[1])
            self._arm_idle()
        elif kind == FAILED:
            self._fail(VisionError("LOAD_FAILED", f"The vision model {self.name} could not "
                                   f"be loaded ({msg[1]}); pick another in Settings."))
        elif kind == DELTA:
            on_delta = self._listener(msg[1])
            if on_delta is not None:
                on_delta(msg[2])
        elif kind == DONE:
            self._resolve(msg[1], msg[2])
        elif kind == ERROR:
            self._reject(msg[1], VisionError(
                "INTERNAL", f"The vision model could not describe the image: {msg[2]}"))

    def _exit_is_quiet(self, exitcode: int | None) -> bool:
        # Closing, or a clean exit with nothing waiting: an unload, not a crash.
        return self._closing or (self._ready is not None and self._ready.done()
                                 and not self._pending and exitcode == 0)

    def _fail(self, error: Exception) -> None:
        self.error = str(error)  # the pane shows the sentence until the next load
        super()._fail(error)

    # -- its sentences -------------------------------------------------------------------------
    def _start_timeout_error(self) -> Exception:
        return VisionError("TIMEOUT", f"The vision model {self.name} did not load "
                           f"within {self.load_timeout_s:.0f} s; check free memory.")

    def _crashed_error(self, exitcode: int | None) -> Exception:
        return VisionError("WORKER_CRASHED", f"The vision model {self.name} stopped "
                           f"unexpectedly (exit code {exitcode}); it reloads on the next image.")

    def _closing_error(self) -> Exception:
        return VisionError("CANCELLED", "The app is closing.")

    def _not_running_error(self) -> Exception:
        return VisionError("WORKER_CRASHED", f"The vision model {self.name} is not running.")

    def _send_failed_error(self) -> Exception:
        return VisionError("WORKER_CRASHED", "The vision model stopped; try again.")

    def _cancelled_for_other_error(self) -> Exception:
        # Decoding cannot be interrupted from here: the process goes (a person's cancel,
        # not a failure: the pane shows it unloaded, not failed).
        return VisionError("CANCELLED", "The vision model was stopped to cancel another "
                           "image; send again.")

    async def shutdown(self) -> None:
        """The app is closing: fail what waits, stop the process, refuse later calls."""
        self._closing = True
        self._fail_pending(self._closing_error())
        await self.unload()
        self._stop_now()

    # -- requests ------------------------------------------------------------------------------
    async def caption(self, paths: list[str], prompt: str, *, max_tokens: int = 200,
                      on_delta: Callable[[str], None] | None = None) -> str:
        """The model's text about the images at `paths`; `on_delta(piece)` as it decodes.

        Cancelling the caller kills the process (decoding is not interruptible from here);
        the next call loads the model again."""
        return await self._request(list(paths), prompt, max_tokens, listener=on_delta)

    def status(self):
        """A WorkerStatus row for the worker pane (always shown once configured)."""
        from core.workers.status import WorkerStatus

        pid, rss = self.pid, self.rss_bytes()
        return WorkerStatus(
            worker_id="vision#1", model=f"{self.name} (vision)", engine="mlx-vlm",
            state=self.state, pid=pid, rss_bytes=rss, active=len(self._pending), queued=0,
            tokens_per_s=0.0, restarts=max(0, self.loads - 1), error=self.error,
            **self.budget_fields(),
        )

