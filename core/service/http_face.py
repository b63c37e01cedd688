"""The service's HTTP face: `llmdeck serve` asks the service to open the OpenAI-compatible
listener in its own process, over the Runtime (and pool) the TUIs use, so each model is
loaded once however many front ends there are. The listener lives while the `serve`
client that asked for it stays connected (core.service.process closes it when it goes).
"""

from __future__ import annotations

from typing import Any


class HttpFaceError(Exception):
    def __init__(self, message: str) -> None:
        super().__init__(message)
        self.message = message


def _number(args: dict[str, Any], key: str, kind: type, default: Any) -> Any:
    value = args.get(key, default)
    if value is None:
        return default
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise HttpFaceError(f"serve_open: {key} must be a number.")
    return kind(value)


async def open_listener(runtime: Any, args: dict[str, Any]) -> Any:
    """Bind the listener as `llmdeck serve` asked (its arguments, checked again here: the
    socket is a door too); returns the ServerHandle."""
    from core.server import ServeError, ServerHandle, is_loopback
    from core.server.app import DEFAULT_MAX_QUEUE
    from core.server.connections import ServeLimits
    from core.server.handle import DEFAULT_HOST, DEFAULT_PORT

    host = args.get("host") or DEFAULT_HOST
    api_key = args.get("api_key") or None
    if not isinstance(host, str) or (api_key is not None and not isinstance(api_key, str)):
        raise HttpFaceError("serve_open: host and api_key are strings.")
    if not is_loopback(host) and not api_key:
        raise HttpFaceError(f"Refusing to serve on {host} without an API key: anyone on the "
                            "network could use this machine's model.")
    defaults = ServeLimits()
    limits = ServeLimits(
        max_connections=_number(args, "max_connections", int, defaults.max_connections),
        idle_timeout_s=_number(args, "idle_timeout", float, defaults.idle_timeout_s),
        load_wait_s=_number(args, "load_wait", float, defaults.load_wait_s))
    served = args.get("served_name")
    try:
        return await ServerHandle.start(
            runtime, host, _number(args, "port", int, DEFAULT_PORT), api_key=api_key,
            max_queue=_number(args, "max_queue", int, DEFAULT_MAX_QUEUE),
            served_name=served if isinstance(served, str) else None, limits=limits)
    except ServeError as exc:
        raise HttpFaceError(exc.message) from None
