"""`llmdeck serve` as a client of the engine service: the HTTP listener opens inside the
service, over the pool every TUI uses, so a model is loaded once however many front ends
there are. This process makes sure the service runs, asks it to listen, prints where,
and stays in the foreground until Ctrl+C / SIGTERM, which closes that listener (the
service also closes it by itself if this process dies: the listener belongs to our
connection). A service this command had to start is stopped again on the way out when
no other client uses it, so `serve` leaves the machine as it found it.

`--standalone` (and `--model cluster:NAME`, whose ranks attach to an in-process
Runtime) keep the previous shape: the server with its own pool in this process.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys
from typing import Any

from core.service.client import ServiceCallError, ServiceClient, ServiceUnavailable, connect
from core.service.launch import spawn_detached, wait_for_service


def service_args(args: argparse.Namespace) -> tuple[str, ...]:
    """What a service this command starts is given: the model as `serve` was asked."""
    out: list[str] = []
    if args.model:
        out += ["--model", args.model]
    if args.engine:
        out += ["--engine", args.engine]
    for pair in args.option:
        out += ["--option", pair]
    return tuple(out)


async def _connect_or_start(args: argparse.Namespace) -> tuple[ServiceClient, bool]:
    try:
        return await connect("serve"), False
    except ServiceUnavailable as exc:
        if not isinstance(exc.__cause__, (FileNotFoundError, ConnectionRefusedError)):
            raise
    proc = await asyncio.to_thread(spawn_detached, service_args(args))
    return await wait_for_service(proc, "serve", 120.0), True


async def run(args: argparse.Namespace) -> int:
    try:
        client, started = await _connect_or_start(args)
    except ServiceUnavailable as exc:
        print(f"llmdeck serve: {exc.message}", file=sys.stderr)
        return 2
    try:
        return await _serve(client, args, started)
    finally:
        await client.close()


async def _serve(client: ServiceClient, args: argparse.Namespace, started: bool) -> int:
    if not started and (args.model or args.engine):
        state = await client.call("model_state", timeout=10)
        print(f"llmdeck serve: the service already runs {getattr(state, 'label', 'a model')!r}; "
              "--model/--engine apply when it starts (`llmdeck service restart` first).",
              file=sys.stderr)
    request: dict[str, Any] = {
        "host": args.host, "port": args.port, "api_key": args.api_key,
        "max_queue": args.max_queue, "served_name": args.served_model_name,
        "max_connections": args.max_connections, "idle_timeout": args.idle_timeout,
        "load_wait": args.load_wait, "request_log": not args.quiet}
    try:
        opened = await client.call("serve_open", timeout=60, **request)
    except (ServiceCallError, ServiceUnavailable) as exc:
        print(f"llmdeck serve: {exc.message}", file=sys.stderr)
        await _leave(client, started)
        return 2
    if opened.get("already"):
        print(f"llmdeck serve: another `llmdeck serve` already listens on {opened['url']} "
              f"(in the llmdeck service, pid {client.pid}); point clients there, or stop that "
              "one first.", file=sys.stderr)
        return 1
    from core.home_lock import note_held
    from core.server.request_log import banner

    note_held("serve", f"listening on {opened['url']}")  # a second `serve` says where
    print(f"llmdeck serve: listening on {opened['url']} (in the llmdeck service, pid "
          f"{client.pid})", flush=True)
    print("\n".join(banner(opened["url"], args.api_key)), flush=True)
    client.listeners.append(_print_request)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    loading = asyncio.ensure_future(_report_load(client))
    gone = asyncio.ensure_future(_wait_gone(client))
    await asyncio.wait([asyncio.ensure_future(stop.wait()), gone],
                       return_when=asyncio.FIRST_COMPLETED)
    loading.cancel()
    if gone.done():  # the API had no engine left: say so, and that the port is closed
        why = client.closed_reason or "The llmdeck service went away."
        print(f"llmdeck serve: lost its engine: {why} The API on {opened['url']} is closed; "
              "run `llmdeck serve` again to serve on a new service.", file=sys.stderr,
              flush=True)
        return 1
    gone.cancel()
    try:
        await client.call("serve_close", timeout=30)
    except (ServiceCallError, ServiceUnavailable):
        pass
    await _leave(client, started)
    return 0


def _print_request(message: dict[str, Any]) -> None:
    """The service's line for each HTTP request (core.server.request_log)."""
    if message.get("event") == "http_request" and isinstance(message.get("data"), str):
        print(f"llmdeck serve: {message['data']}", flush=True)


async def _report_load(client: ServiceClient) -> None:
    try:
        ok = await client.call("ensure_model")
        state = await client.call("model_state", timeout=10)
    except (ServiceCallError, ServiceUnavailable) as exc:
        print(f"llmdeck serve: the model could not be loaded: {exc.message}", flush=True)
        return
    name = getattr(state, "label", "?")
    print(f"llmdeck serve: model {name!r} ready" if ok else
          f"llmdeck serve: model {name!r} failed to load: "
          f"{getattr(state, 'error', None) or 'no reason was given (see the service log)'}",
          flush=True)


async def _wait_gone(client: ServiceClient) -> None:
    while client.connected:
        await asyncio.sleep(0.2)


async def _leave(client: ServiceClient, started: bool) -> None:
    """Stop a service this command started, unless someone else uses it now."""
    if not started:
        return
    try:
        status = await client.call("status", timeout=10)
        if status.get("clients", 0) <= 1 and not status.get("turns"):
            await client.call("shutdown", timeout=10)
    except (ServiceCallError, ServiceUnavailable):
        pass


def main(argv: list[str]) -> int:
    """`llmdeck serve [--standalone] ...` (the same options as ever)."""
    from core.server import cli as server_cli

    args = server_cli.parser().parse_args(argv)
    if args.standalone or (args.model or "").startswith("cluster:"):
        return server_cli.main([a for a in argv if a != "--standalone"])
    from core.home_lock import holder

    if app := holder("app"):  # an --in-process app owns this home's engine: no service
        print(f"llmdeck serve: an llmdeck app with its own engine (--in-process, pid {app}) "
              "runs on this home, so serve runs its own (--standalone).", file=sys.stderr,
              flush=True)
        return server_cli.main([a for a in argv if a != "--standalone"])
    from core.config import Settings
    from core.server.handle import is_loopback

    settings = Settings.load()
    for problem in settings.problems:  # the service reads the same file: say it here
        print(f"llmdeck serve: settings: {problem}", file=sys.stderr, flush=True)
    server_cli.take_settings_key(args, settings)
    if not is_loopback(args.host) and not args.api_key:
        return server_cli.main(argv)  # its refusal, said before anything starts
    try:
        return asyncio.run(run(args))
    except KeyboardInterrupt:
        return 130
