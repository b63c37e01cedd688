"""`llmdeck serve --standalone`: the OpenAI-compatible server on its own WorkerPool.

Plain `llmdeck serve` opens the same server inside the engine service instead
(core.service.serve_face), sharing the app's pool; this module is its argument parser
and the standalone process (also `python -m core.server.cli`, as the tests start it).

Loopback by default; binding elsewhere needs an API key (--api-key or LLMDECK_API_KEY).
`--engine`/`--option` build the model spec directly (e.g. the scripted engine for
tests, or max_concurrency for MLX).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
from pathlib import Path
from typing import Any

from core.server.app import DEFAULT_MAX_QUEUE
from core.server.connections import ServeLimits
from core.server.handle import DEFAULT_HOST, DEFAULT_PORT, ServeError, ServerHandle
from core.server.request_log import banner


def _whole(low: int, high: int | None = None) -> Any:
    """An argparse type: a whole number in [low, high], refused with the range otherwise."""
    def read(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
        if value < low or (high is not None and value > high):
            span = f"between {low} and {high}" if high is not None else f"{low} or more"
            raise argparse.ArgumentTypeError(f"must be {span} (got {value})")
        return value
    return read


def _seconds(*, zero: bool) -> Any:
    """An argparse type: a finite number of seconds, above 0 (or 0 too, when `zero`)."""
    def read(text: str) -> float:
        try:
            value = float(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
        if not (0 <= value if zero else 0 < value) or value == float("inf"):
            floor = "0 or more" if zero else "above 0"
            raise argparse.ArgumentTypeError(f"must be a number of seconds, {floor} (got {text})")
        return value
    return read


DESCRIPTION = ("Serve the local models over HTTP in the dialects agents and front ends speak: "
               "OpenAI (chat completions, completions, Responses, embeddings; base URL "
               "http://HOST:PORT/v1), Anthropic Messages (Claude Code: ANTHROPIC_BASE_URL="
               "http://HOST:PORT) and Ollama (OLLAMA_HOST=http://HOST:PORT). One line is printed "
               "per request unless --quiet.")


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="llmdeck serve", description=DESCRIPTION)
    p.add_argument("--host", default=DEFAULT_HOST, help=f"address to bind (default {DEFAULT_HOST})")
    p.add_argument("--port", type=_whole(0, 65535), default=DEFAULT_PORT, help=f"port (default {DEFAULT_PORT}; 0 = any free)")
    p.add_argument("--api-key", default=os.environ.get("LLMDECK_API_KEY"),
                   help="require this bearer key (default $LLMDECK_API_KEY, then api_key in "
                   "config.toml); needed off loopback")
    p.add_argument("--model", help="a .gguf file, an MLX model folder, remote:<endpoint>/<model>, "
                   "or cluster:<name> (a [[clusters]] entry: started, and stopped on exit)")
    p.add_argument("--engine", help="force an engine (mlx, llamacpp, scripted)")
    p.add_argument("--option", action="append", default=[], metavar="KEY=VALUE",
                   help="engine option (value read as JSON when it parses), repeatable")
    p.add_argument("--served-model-name", help="the model id clients use (default: the model's name)")
    p.add_argument("--max-queue", type=_whole(1), default=DEFAULT_MAX_QUEUE,
                   help=f"requests allowed to wait before answering 429 (default {DEFAULT_MAX_QUEUE})")
    p.add_argument("--replicas", type=_whole(1, 64), help="worker processes for the model")
    limits = ServeLimits()
    p.add_argument("--max-connections", type=_whole(1), default=limits.max_connections,
                   help=f"open connections allowed (default {limits.max_connections}; lowered to "
                   "fit the descriptor limit)")
    p.add_argument("--idle-timeout", type=_seconds(zero=False), default=limits.idle_timeout_s, metavar="S",
                   help=f"close a connection that sends no request for S seconds "
                   f"(default {limits.idle_timeout_s:.0f})")
    p.add_argument("--standalone", action="store_true",
                   help="run the server with its own worker pool in this process instead of "
                   "inside the llmdeck service (where the app's models are shared)")
    p.add_argument("--load-wait", type=_seconds(zero=True), default=limits.load_wait_s, metavar="S",
                   help="how long a request waits for a loading model before 503 "
                   f"(default {limits.load_wait_s:.0f})")
    p.add_argument("--quiet", action="store_true",
                   help="print no line per request (method, path, model, status, tokens, time)")
    return p


def take_settings_key(args: argparse.Namespace, settings: Any = None) -> None:
    """The key serve requires: --api-key, else LLMDECK_API_KEY (the parser's default),
    else `api_key` in config.toml."""
    if not args.api_key:
        if settings is None:
            from core.config import Settings

            settings = Settings.load()
        args.api_key = settings.api_key or None


def _options(pairs: list[str]) -> tuple[tuple[str, Any], ...]:
    out = []
    for pair in pairs:
        key, sep, raw = pair.partition("=")
        if not sep or not key:
            raise SystemExit(f"llmdeck serve: --option wants KEY=VALUE (got {pair!r})")
        try:
            value: Any = json.loads(raw)
        except ValueError:
            value = raw
        out.append((key, value))
    return tuple(out)


async def serve(args: argparse.Namespace) -> int:
    from core.config import Settings
    from core.engines.base import ModelSpec
    from core.runtime import Runtime

    settings = Settings.load()
    for problem in settings.problems:  # the defaults stand in; say what was not taken
        print(f"llmdeck serve: settings: {problem}", file=sys.stderr)
    if args.replicas:
        settings.replicas = args.replicas
    spec = None
    served = args.served_model_name
    if args.engine and (args.option or args.engine == "scripted"):
        options = _options(args.option)
        spec = ModelSpec(path=args.model or args.engine, engine=args.engine,
                         context_size=settings.context_size, options=options)
        # The scripted model goes by the pool's id (ChatServer.local_name), as in F4 and
        # /metrics: `scripted:latest`, not its path's `scripted`.
        served = served or dict(options).get("label") or (
            None if spec.engine == "scripted" else Path(spec.path).name)
    elif args.model:
        settings.model = args.model
        settings.engine = args.engine
    # --model cluster:NAME (issue 35): the Runtime opens it as the app does (core.cluster.
    # on_demand), so serve stops it after its idle_minutes too and starts it for the next
    # request; it is up before serve listens, and a name or start that fails ends serve.
    from core.cluster import ClusterError, cluster_ref, configured

    cluster = cluster_ref(settings.model) if spec is None else None
    if cluster is not None:
        try:
            configured(settings, cluster)
        except ClusterError as exc:
            print(f"llmdeck serve: {exc.message}", file=sys.stderr)
            return 2
        served = served or settings.model
    runtime = Runtime(settings, model_spec=spec)
    await runtime.start(preload=True)
    if cluster is not None and not await runtime.ensure_model():
        print(f"llmdeck serve: {runtime.model.error}", file=sys.stderr)
        await runtime.close()
        return 2
    try:
        limits = ServeLimits(max_connections=args.max_connections, idle_timeout_s=args.idle_timeout,
                             load_wait_s=args.load_wait)
        handle = await ServerHandle.start(runtime, args.host, args.port, api_key=args.api_key,
                                          max_queue=args.max_queue, served_name=served,
                                          limits=limits)
    except ServeError as exc:
        print(f"llmdeck serve: {exc.message}", file=sys.stderr)
        await runtime.close()
        return 2
    from core.home_lock import note_held

    note_held("serve", f"listening on {handle.url}")  # a second `serve` says where
    print(f"llmdeck serve: listening on {handle.url}", flush=True)
    print("\n".join(banner(handle.url, args.api_key)), flush=True)
    if not args.quiet:
        handle.server.request_log = lambda text: print(f"llmdeck serve: {text}", flush=True)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loaded = asyncio.ensure_future(runtime.ensure_model())
    loaded.add_done_callback(lambda t: print(_load_outcome(t, handle.server.local_name(), runtime),
                                             flush=True))
    await stop.wait()
    loaded.cancel()
    await handle.stop()
    await runtime.close()  # and every rank of a cluster it started, checked by pid
    return 0


def _load_outcome(task: asyncio.Future[bool], name: str, runtime: Any) -> str:
    """The log line for the end of the start-up load: what happened, never "failed: None"."""
    if task.cancelled():
        return f"llmdeck serve: stopped while model {name!r} was still loading"
    exc = task.exception()
    if exc is not None:
        return f"llmdeck serve: model {name!r} failed to load: {exc}"
    if task.result():
        return f"llmdeck serve: model {name!r} ready"
    return (f"llmdeck serve: model {name!r} failed to load: "
            f"{runtime.model.error or 'no reason was given (see the worker log)'}")


def main(argv: list[str] | None = None) -> int:
    args = parser().parse_args(argv)
    take_settings_key(args)
    from core.server.handle import is_loopback

    if not is_loopback(args.host) and not args.api_key:  # say so before loading anything
        print(f"llmdeck serve: refusing to serve on {args.host} without an API key: anyone on the "
              "network could use this machine's model. Pass --api-key (or set LLMDECK_API_KEY, or "
              "api_key in config.toml), or bind 127.0.0.1.", file=sys.stderr)
        return 2
    try:
        return asyncio.run(serve(args))
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
