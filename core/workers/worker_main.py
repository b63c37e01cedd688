"""The worker process: load one engine, then serve requests step by step.

Runs under multiprocessing's spawn start method, so it imports only what the engine
needs (never textual). It exits by itself when the app process disappears, so killing
the app never leaves a model in memory.
"""

from __future__ import annotations

import logging
import os
import sys
import time
import traceback
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from core.engines.base import Engine, EngineLoadError, GenerationRequest, ModelSpec
from core.events import Done, Error, Event, TextDelta
from core.workers import protocol as p
from core.workers.bootstrap import start_child

PARENT_CHECK_S = 0.5
log = logging.getLogger(__name__)


def with_settings(spec: ModelSpec) -> ModelSpec:
    """`spec` with the settings an engine reads filled in where the spec leaves them out
    (the disk KV cache's bound, kv_disk_gb): engines know nothing of the config file, so
    the worker, which runs in the person's home, hands them what it says."""
    if spec.option("kv_disk_gb") is not None:
        return spec
    from dataclasses import replace

    from core.config import Settings

    gb = getattr(Settings.load(), "kv_disk_gb", None)
    return spec if gb is None else replace(spec, options=(*spec.options, ("kv_disk_gb", gb)))


def load_engine(spec: ModelSpec) -> Engine:
    """Build the engine named by the spec; raises EngineLoadError for user-caused failures."""
    spec = with_settings(spec)
    if spec.engine == "llamacpp":
        from core.engines.llamacpp import LlamaCppEngine

        return LlamaCppEngine(spec)
    if spec.engine == "mlx":
        from core.engines.torchless import hide_torch_for

        hide_torch_for(Path(spec.path))  # 1.3 s of imports a plain tokenizer never uses
        from core.engines.mlx import MlxEngine

        return MlxEngine(spec)
    if spec.engine == "mlx-vlm":  # a vision-language model folder (core.vision)
        from core.engines.vlm import VlmEngine

        return VlmEngine(spec)
    if spec.engine == "scripted":
        from core.engines.scripted import ScriptedEngine

        return ScriptedEngine(spec)
    raise EngineLoadError("UNSUPPORTED", f"Unknown engine {spec.engine!r}.")


class _Parsers:
    """Runs the model family's stream parser on each request's raw text, in the worker."""

    def __init__(self, engine_info: dict[str, Any]) -> None:
        self.family = "plain"
        self._factory = None
        self._base_model = bool(engine_info.get("base_model"))
        try:
            from core.parsing import StreamParser, detect_family

            self.family = detect_family(
                engine_info.get("chat_template"), engine_info.get("model_type")
            )
            self._factory = StreamParser
        except ImportError:  # parsing package not present yet: plain text
            pass
        self._active: dict[str, Any] = {}

    def start(self, request: GenerationRequest) -> None:
        # A raw prompt's completion (/v1/completions) is text as the model wrote it.
        if self._factory is not None and request.prompt is None:
            family = self.family
            if request.tools and _forces_generic_call(request, family, self._base_model):
                from core.parsing import JSON_CALL

                family = JSON_CALL  # the engine holds the reply to one bare JSON call
            self._active[request.request_id] = self._factory(
                family, continues=bool(request.reply_prefix))

    def process(self, request_id: str, events: list[Event]) -> list[Event]:
        parser = self._active.get(request_id)
        if parser is None:
            return events
        out: list[Event] = []
        for event in events:
            if isinstance(event, TextDelta):
                out.extend(parser.feed(event.text))
            else:
                if isinstance(event, Done | Error):
                    out.extend(parser.finish())
                    self._active.pop(request_id, None)
                out.append(event)
        return out


def _forces_generic_call(request: GenerationRequest, family: str, base_model: bool) -> bool:
    from core.engines.tool_grammar import forces_generic_call

    return forces_generic_call(request, family, base_model)


def worker_main(conn: Connection, spec: ModelSpec, parent_pid: int, urgent: Any = None) -> None:
    """Entry point of a worker process. `urgent`: a bool in memory shared with the pool,
    raised when a person's turn needs this worker now (core.workers.worker_process)."""
    start_child(log_name="worker")
    try:
        engine = load_engine(spec)
    except EngineLoadError as exc:
        conn.send((p.LOAD_FAILED, exc.code, exc.message))
        return
    except MemoryError:
        conn.send((p.LOAD_FAILED, "OOM", "Not enough memory to load this model."))
        return
    except Exception as exc:  # an engine bug: report it, never a silent death
        conn.send((p.LOAD_FAILED, "LOAD_FAILED", f"Could not load the model: {exc}"))
        return
    info = dict(engine.info())
    parsers = _Parsers(info)
    info["family"] = parsers.family
    info["pid"] = os.getpid()
    info["max_concurrency"] = engine.max_concurrency
    info["torch"] = sys.modules.get("torch") is not None  # loaded (core.engines.torchless)
    # sets a running reply aside for a person's turn (core.engines.turn_order)
    info["preempts"] = bool(getattr(engine, "preempts", False))
    listen = getattr(engine, "listen", None)
    if urgent is not None and callable(listen):  # the step in flight can be cut for it
        listen(urgent)
    conn.send((p.LOADED, info))
    try:
        _serve(conn, engine, parsers, parent_pid, urgent)
    except (EOFError, BrokenPipeError, ConnectionResetError):
        pass  # the app went away
    except Exception:
        try:
            conn.send((p.FATAL, traceback.format_exc(limit=5)))
        except OSError:
            pass
    finally:
        engine.close()


class _Holds:
    """Holds asked by the pool (protocol.HOLD): no engine step while one is in force."""

    def __init__(self) -> None:
        self.count = 0
        self.until = 0.0

    def on(self, seconds: float) -> None:
        if seconds > 0:
            self.count += 1
            self.until = max(self.until, time.monotonic() + seconds)
        else:
            self.count = max(0, self.count - 1)

    def left(self) -> float:
        """Seconds the hold still runs (0: none)."""
        if not self.count:
            return 0.0
        left = self.until - time.monotonic()
        if left <= 0:
            self.count = 0
        return max(0.0, left)


def _serve(conn: Connection, engine: Engine, parsers: _Parsers, parent_pid: int,
           urgent: Any = None) -> None:
    last_parent_check = time.monotonic()
    tokens_out = 0
    holds = _Holds()
    while True:
        if urgent is not None:  # lowered before the pipe is read: what it was raised for
            urgent.value = False  # (sent before it) is read now
        held = holds.left()
        busy = engine.has_work() and not held
        # When idle, block on the pipe (cheap); when busy, only drain what is there.
        if conn.poll(0 if busy else min(held or PARENT_CHECK_S, PARENT_CHECK_S)):
            while True:
                msg = conn.recv()
                if msg[0] == p.HOLD:
                    holds.on(float(msg[1]))
                elif not _handle(msg, conn, engine, parsers, tokens_out):
                    return
                if not conn.poll(0):
                    break
        now = time.monotonic()
        if now - last_parent_check >= PARENT_CHECK_S:
            last_parent_check = now
            if os.getppid() != parent_pid:
                return
        if holds.left() or not engine.has_work():
            continue
        results = engine.step()
        if results:
            batch = []
            for request_id, events in results:
                events = parsers.process(request_id, events)
                if not events:
                    continue
                tokens_out += 1
                # The common case, one text piece, travels as a bare str: far cheaper to
                # pickle and unpickle than a dataclass (see protocol.STEP).
                if len(events) == 1 and type(events[0]) is TextDelta:
                    batch.append((request_id, events[0].text))
                else:
                    batch.append((request_id, events))
            if batch:
                conn.send((p.STEP, batch))


def _warm(engine: Engine, request: GenerationRequest) -> None:
    """Hand an opened conversation to the engine's warm-up (MLX: its disk cache loaded in
    an idle step). Engines without one (llama.cpp, scripted) ignore it; a failure here is
    only a cache left cold, so it is logged at debug and the worker serves on."""
    warm = getattr(engine, "warm", None)
    if not callable(warm):
        return
    try:
        warm(request)
    except Exception:
        log.debug("warming %s failed", request.session_id, exc_info=True)


def _handle(msg: tuple, conn: Connection, engine: Engine, parsers: _Parsers, tokens: int) -> bool:
    kind = msg[0]
    if kind == p.GENERATE:
        request: GenerationRequest = msg[1]
        parsers.start(request)
        try:
            engine.submit(request)
        except Exception as exc:  # whatever admitting one request raises fails it alone
            conn.send(
                (p.STEP, [(request.request_id, [Error("BAD_REQUEST", str(exc)), Done("error")])])
            )
    elif kind == p.CANCEL:
        engine.cancel(msg[1])
    elif kind == p.WARM:
        _warm(engine, msg[1])
    elif kind == p.TRIM:
        trim = getattr(engine, "trim", None)
        if callable(trim):
            trim()
    elif kind == p.STATS:
        conn.send((p.STATS, {"pid": os.getpid(), "steps_with_output": tokens}))
    elif kind == p.SHUTDOWN:
        return False
    return True
