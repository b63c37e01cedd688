"""The engine service process: one per home, owning the Runtime every client shares.

`llmdeck service run` (or `python -m core.service`) runs it in the foreground; `start`
runs the same thing detached (core.service.launch). It takes the home's service lock
(core.home_lock: one service per home; clients take none), listens on the home's socket,
and runs until asked to stop, a SIGTERM/SIGINT, or `idle_s` with no client, no streaming
reply and no HTTP listener. Stopping is graceful: clients are told, live replies are
stopped and stored as stopped, the HTTP face closes, models unload (Runtime.close), the
socket goes. Workers are spawned through core.workers.bootstrap and die with this
process even under kill -9 (PR_SET_PDEATHSIG; macOS workers poll their parent).

Its log (stdio, under paths.log_dir when detached) has lifecycle lines and error types,
never conversation text.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import os
import signal
import sys
import time
from typing import Any

from core.service.launch import EXIT_APP_RUNS, EXIT_TAKEN  # another service holds the home
from core.service.notices import forward_memory
from core.service.server import ServiceServer

log = logging.getLogger("llmdeck.service")
STATUS_PUSH_S = 1.0


class ServiceProcess:
    """The running service: runtime, server, idle clock, HTTP face."""

    def __init__(self, runtime: Any, idle_s: float | None) -> None:
        from core.service.socket_path import socket_path

        self.runtime = runtime
        self.idle_s = idle_s
        self.started = time.time()
        self.server = ServiceServer(runtime, socket_path(), self)
        self.stopping = asyncio.Event()
        self.stop_reason = ""
        self.restarting = False  # `llmdeck service restart`: the clients wait for the next
        self.http: Any = None  # core.server.ServerHandle while `llmdeck serve` asks for it
        self.http_owner: Any = None
        self.memory: Any = None  # core.workers.memory_watch.MemoryWatch once running

    # -- ServiceControl --------------------------------------------------------------
    def status(self) -> dict[str, Any]:
        rss, workers_rss = _memory()
        models = []
        try:
            models = sorted({s.model for s in self.runtime.pool.status() if s.model})
        except Exception:  # noqa: BLE001 - a status line never fails the call
            pass
        return {"pid": os.getpid(), "started_at": self.started,
                "uptime_s": round(time.time() - self.started, 1),
                "clients": len(self.server.sessions), "turns": self.server.hub.live_count(),
                "models": models, "model_state": getattr(self.runtime.model, "state", "?"),
                "rss_bytes": rss, "workers_rss_bytes": workers_rss,
                "socket": str(self.server.path), "idle_exit_s": self.idle_s,
                "memory": self.memory.last.as_dict() if self.memory is not None else None,
                "http": self.http.url if self.http is not None else None}

    def request_stop(self, reason: str, restart: bool = False) -> None:
        if not self.stopping.is_set():
            self.stop_reason = reason
            self.restarting = restart
            self.stopping.set()

    async def open_http(self, args: dict[str, Any], owner: Any = None) -> dict[str, Any]:
        from core.service.http_face import open_listener

        if self.http is not None:
            return {"url": self.http.url, "already": True}
        self.http = await open_listener(self.runtime, args)
        self.http_owner = owner
        if owner is not None and args.get("request_log"):  # one line per request, to `serve`
            self.http.server.request_log = (
                lambda text: owner.send({"event": "http_request", "data": text}))
        log.info("HTTP face open on %s", self.http.url)
        return {"url": self.http.url, "already": False}

    async def close_http(self) -> bool:
        handle, self.http, self.http_owner = self.http, None, None
        if handle is None:
            return False
        await handle.stop()
        log.info("HTTP face closed")
        return True

    def sticky_notices(self) -> list[dict[str, Any]]:
        """What a client that connects now is told at once (the database moved aside)."""
        return list(self.server.notices.sticky)

    def session_gone(self, session: Any) -> None:
        if self.http is not None and self.http_owner is session:
            asyncio.ensure_future(self.close_http())  # `serve` went: its listener goes too

    # -- running -----------------------------------------------------------------------
    async def run(self) -> int:
        await self.server.start()
        if self.runtime.store_notice:  # a damaged database was moved aside: where it went
            self.server.notices.say("store", self.runtime.store_notice, title="History",
                                    severity="warning", sticky=True)
        self.runtime.listeners.append(
            lambda state: self.server.broadcast({"event": "model", "data": _encoded(state)},
                                                "model"))
        forward_memory(self.runtime, self.server.broadcast)  # "summarising…" to the apps
        self._open_downloads()
        log.info("service ready (pid %d) on %s", os.getpid(), self.server.path)
        # The log line above says it in service.log; a raw JSON line there read as noise
        # (issue 48). Nobody reads stdout for it: clients wait on the socket.
        pushing = asyncio.ensure_future(self._push_status())
        await self.stopping.wait()
        pushing.cancel()
        await self.shutdown()
        return 0

    async def _push_status(self) -> None:
        """Status to subscribers every second, and the idle clock."""
        from core.workers.memory_watch import MemoryWatch

        self.memory = MemoryWatch(self.runtime.pool)
        while True:
            await asyncio.sleep(STATUS_PUSH_S)
            if self.memory.due():  # issue 45: what the workers hold, and idle models out
                try:  # under pressure
                    await self.memory.look()
                except Exception as exc:  # noqa: BLE001 - the watch never stops the service
                    log.warning("memory watch: %s", type(exc).__name__)
            if any("status" in s.topics for s in self.server.sessions):
                self.server.broadcast({"event": "status", "data": self.status()}, "status")
            try:
                self.server.notices.models_now(
                    s.model for s in self.runtime.pool.status() if s.model)
            except Exception:  # noqa: BLE001 - a notice never stops the service
                pass
            if self.server.busy() or self.http is not None or self._downloading():
                self.server.last_active = time.monotonic()
            elif self.idle_s and time.monotonic() - self.server.last_active >= self.idle_s:
                self.request_stop(f"idle for {self.idle_s:.0f} s with no client")

    def _open_downloads(self) -> None:
        """The download jobs, pushed to the clients subscribed to "downloads"; the ones a
        stopped service left unfinished start again (issue 45)."""
        from core.service.downloads import open_for_server

        resumed = open_for_server(self.runtime, self.server)
        if resumed:
            log.info("resumed %d download(s)", resumed)

    def _downloading(self) -> bool:
        from core.service.downloads import existing

        jobs = existing(self.runtime)
        return jobs is not None and jobs.busy()

    async def _close_downloads(self) -> None:
        from core.service.downloads import close_for

        await close_for(self.runtime)

    async def shutdown(self) -> None:
        log.info("stopping: %s", self.stop_reason or "asked")
        await self.server.close(f"The llmdeck service is stopping ({self.stop_reason}).",
                                restart=self.restarting)
        await self.server.hub.close()
        await self._close_downloads()
        await self.close_http()
        await self.runtime.close()  # models unload, workers stop, the store closes
        log.info("stopped")


def _encoded(value: Any) -> Any:
    from core.service import codec

    return codec.encode(value)


def _memory() -> tuple[int, int]:
    """RSS of this process and of all its descendants (workers, MCP servers, sandbox)."""
    try:
        import psutil

        me = psutil.Process()
        rss = me.memory_info().rss
        workers = 0
        for child in me.children(recursive=True):
            try:
                workers += child.memory_info().rss
            except (psutil.NoSuchProcess, psutil.AccessDenied):
                pass
        return rss, workers
    except Exception:  # noqa: BLE001
        return 0, 0


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmdeck service run",
                                description="Run the engine service in the foreground.")
    p.add_argument("--model", help="a .gguf file or an MLX model folder (default: settings)")
    p.add_argument("--engine", help="force an engine (mlx, llamacpp, scripted)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option (value read as JSON when it parses), repeatable")
    p.add_argument("--idle-seconds", type=float, default=None,
                   help="exit after this long with no client (default: the "
                   "service_idle_minutes setting; 0 = never)")
    p.add_argument("--no-preload", action="store_true", help="load the model on first use")
    return p


def _spec(args: argparse.Namespace, settings: Any) -> Any:
    if not (args.engine and (args.option or args.engine == "scripted")):
        return None
    from core.engines.base import ModelSpec

    options = []
    for pair in args.option:
        key, _, raw = pair.partition("=")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        options.append((key, value))
    return ModelSpec(path=args.model or args.engine, engine=args.engine,
                     context_size=settings.context_size, options=tuple(options))


async def _serve(args: argparse.Namespace) -> int:
    from core.config import Settings
    from core.runtime import Runtime

    settings = Settings.load()
    for problem in settings.problems:
        log.warning("settings: %s", problem)
    spec = _spec(args, settings)
    if spec is None and args.model:
        settings.model, settings.engine = args.model, args.engine
    idle_s = args.idle_seconds
    if idle_s is None:
        idle_s = float(getattr(settings, "service_idle_minutes", 30)) * 60
    runtime = Runtime(settings, model_spec=spec)
    try:
        await runtime.start(preload=not args.no_preload)
    except Exception as exc:  # noqa: BLE001 - a store that cannot open: say why, exit
        print(f"llmdeck service: {getattr(exc, 'message', exc)}", file=sys.stderr, flush=True)
        await runtime.close()
        return 1
    from core.service.recovery import stop_cut_replies

    try:
        cut = await stop_cut_replies(runtime)
        if cut:
            log.info("%d reply(ies) cut by the last service's end marked stopped", cut)
    except Exception as exc:  # noqa: BLE001 - a read-only or failing store: go on
        log.warning("could not mark cut replies: %s", type(exc).__name__)
    service = ServiceProcess(runtime, idle_s or None)
    loop = asyncio.get_running_loop()
    for sig, name in ((signal.SIGTERM, "SIGTERM"), (signal.SIGINT, "SIGINT")):
        loop.add_signal_handler(sig, service.request_stop, name)
    try:
        return await service.run()
    except Exception as exc:  # noqa: BLE001 - e.g. the socket's folder is not ours
        print(f"llmdeck service: {getattr(exc, 'message', exc)}", file=sys.stderr, flush=True)
        await runtime.close()
        return 1


LOCK_WAIT_S = 60.0  # how long a start waits for a service that holds the lock and is going


def _take_lock(acquire: Any) -> None:
    """The service lock. One held by a service that answers on the socket is taken for
    good (HomeLockError at once: the caller connects to it). One held by a service that
    does not listen is on its way out (`service stop` a moment ago: it is storing replies,
    unloading models) or still opening: wait for it rather than fail, up to LOCK_WAIT_S."""
    from core.home_lock import HomeLockError

    deadline = time.monotonic() + LOCK_WAIT_S
    while True:
        try:
            acquire("service", grace_s=0.5)
            return
        except HomeLockError:
            if time.monotonic() >= deadline or _someone_listens():
                raise


def _someone_listens() -> bool:
    import socket

    from core.service.socket_path import socket_path

    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as sock:
        sock.settimeout(1.0)
        try:
            sock.connect(str(socket_path()))
        except OSError:
            return False
    return True


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    logging.basicConfig(level=logging.INFO, stream=sys.stderr,
                        format="%(asctime)s %(name)s %(levelname)s %(message)s")
    signal.signal(signal.SIGHUP, signal.SIG_IGN)  # a closed terminal is no reason to stop
    from core.home_lock import HomeLockError, acquire, holder, home_label

    try:
        _take_lock(acquire)
    except HomeLockError as exc:
        print(f"llmdeck service: {exc.message}", file=sys.stderr, flush=True)
        return EXIT_TAKEN
    if app := holder("app"):  # an --in-process app owns an engine and writes the history
        who = f"pid {app}" if app > 0 else "running"
        print(f"llmdeck service: an llmdeck app with its own engine (--in-process, {who}) "
              f"runs on {home_label()}; two engines would write one history. Quit it first.",
              file=sys.stderr, flush=True)
        return EXIT_APP_RUNS
    try:
        return asyncio.run(_serve(args))
    except KeyboardInterrupt:
        return 130
