"""The status a request ended with, as the middlewares that count and log it see it.

The request log (core.server.request_log) and the metrics page (core.server.metrics) both
need it, including for a request that raised: an HTTPException's own status, 499 when
the client went away (or a bug an inner middleware did not catch), 500 until known.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from aiohttp import web


async def run_seeing_status(request: web.Request, handler: Any,
                            ended: Callable[[int], None]) -> web.StreamResponse:
    """`handler(request)`, then `ended(status)` however it ended (its outcome unchanged)."""
    status = 500
    try:
        response = await handler(request)
        status = response.status
        return response
    except web.HTTPException as exc:
        status = exc.status
        raise
    except BaseException:
        status = 499  # the client went away (or a bug the error middleware did not see)
        raise
    finally:
        ended(status)
