"""GET /metrics: what `llmdeck serve` has done and holds, in Prometheus' text format.

Operators scrape anything that serves. Kept here: requests by route and status (every
route, through a middleware), tokens in and out, time to first token and time per output
token as histograms (for the routes that generate through core.server.dialects), and, read
at scrape time from the pool, the queue depth, active requests, loaded models and their
workers' memory, and worker restarts.

Never conversation text: labels are route templates from the router (an unknown path
is "other", so a client cannot mint label values), status codes, model names and worker
ids. Written by hand (the format is a few lines of text), so serving needs no
Prometheus package; the tests read it back with prometheus_client's parser.
"""

from __future__ import annotations

import time
import weakref
from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from core.events import Event, ReasoningDelta, TextDelta, ToolCall, ToolCallDelta, Usage
from core.server.status_seen import run_seeing_status
from core.server.wire import ApiError

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
TTFT_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)
TPOT_BUCKETS = (0.005, 0.01, 0.02, 0.04, 0.06, 0.1, 0.2, 0.5, 1.0, 2.5)
_CONTENT_EVENTS = (TextDelta, ReasoningDelta, ToolCallDelta, ToolCall)


def _label(value: Any) -> str:
    return str(value).replace("\\", "\\\\").replace("\"", "\\\"").replace("\n", "\\n")


def _labels(pairs: tuple[tuple[str, Any], ...]) -> str:
    return "{" + ",".join(f'{k}="{_label(v)}"' for k, v in pairs) + "}" if pairs else ""


class Histogram:
    """Cumulative buckets, sum and count for one label set."""

    __slots__ = ("bounds", "counts", "sum", "count")

    def __init__(self, bounds: tuple[float, ...]) -> None:
        self.bounds = bounds
        self.counts = [0] * len(bounds)
        self.sum = 0.0
        self.count = 0

    def observe(self, value: float) -> None:
        for i, bound in enumerate(self.bounds):
            if value <= bound:
                self.counts[i] += 1
        self.sum += value
        self.count += 1


class Meter:
    """One generation's measures, taken from its event batches as they pass."""

    __slots__ = ("metrics", "route", "started", "first_at", "usage")

    def __init__(self, metrics: ServerMetrics, route: str) -> None:
        self.metrics = metrics
        self.route = route
        self.started = time.perf_counter()
        self.first_at: float | None = None
        self.usage: Usage | None = None

    def saw(self, batch: list[Event]) -> None:
        for event in batch:
            if self.first_at is None and isinstance(event, _CONTENT_EVENTS):
                self.first_at = time.perf_counter()
            elif isinstance(event, Usage):
                self.usage = event

    def done(self) -> None:
        self.metrics.finished(self)


class Metered:
    """The rest of a generation's batches, each shown to a Meter on its way."""

    def __init__(self, batches: AsyncIterator[list[Event]], meter: Meter) -> None:
        self.batches = batches
        self.meter = meter

    def __aiter__(self) -> Metered:
        return self

    async def __anext__(self) -> list[Event]:
        batch = await anext(self.batches)
        self.meter.saw(batch)
        return batch


class ServerMetrics:
    """The counters of one server, and its /metrics page."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.requests: dict[tuple[str, str], int] = {}
        self.tokens_in: dict[str, int] = {}
        self.tokens_out: dict[str, int] = {}
        self.ttft: dict[str, Histogram] = {}
        self.tpot: dict[str, Histogram] = {}

    # -- recording -------------------------------------------------------------------
    def meter(self, route: str) -> Meter:
        return Meter(self, route)

    def finished(self, meter: Meter) -> None:
        route, usage = meter.route, meter.usage
        if usage is not None:
            self.tokens_in[route] = self.tokens_in.get(route, 0) + usage.prompt_tokens
            self.tokens_out[route] = self.tokens_out.get(route, 0) + usage.completion_tokens
        if meter.first_at is None:
            return
        self.ttft.setdefault(route, Histogram(TTFT_BUCKETS)).observe(meter.first_at - meter.started)
        tokens = usage.completion_tokens if usage is not None else 0
        if tokens > 1:
            per_token = (time.perf_counter() - meter.first_at) / (tokens - 1)
            self.tpot.setdefault(route, Histogram(TPOT_BUCKETS)).observe(per_token)

    def count_request(self, request: web.Request, status: int) -> None:
        resource = request.match_info.route.resource
        route = resource.canonical if resource is not None else "other"
        key = (route, str(status))
        self.requests[key] = self.requests.get(key, 0) + 1

    @web.middleware
    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
        return await run_seeing_status(request, handler,
                                       lambda status: self.count_request(request, status))

    # -- the page --------------------------------------------------------------------
    def render(self) -> str:
        lines: list[str] = []

        def family(name: str, kind: str, text: str) -> None:
            lines.append(f"# HELP {name} {text}")
            lines.append(f"# TYPE {name} {kind}")

        def sample(name: str, labels: tuple[tuple[str, Any], ...], value: float) -> None:
            lines.append(f"{name}{_labels(labels)} {value:g}" if isinstance(value, float)
                         else f"{name}{_labels(labels)} {value}")

        family("llmdeck_requests_total", "counter", "HTTP requests answered, by route and status.")
        for (route, status), n in sorted(self.requests.items()):
            sample("llmdeck_requests_total", (("route", route), ("status", status)), n)
        family("llmdeck_prompt_tokens_total", "counter", "Prompt tokens processed, by route.")
        for route, n in sorted(self.tokens_in.items()):
            sample("llmdeck_prompt_tokens_total", (("route", route),), n)
        family("llmdeck_generation_tokens_total", "counter", "Tokens generated, by route.")
        for route, n in sorted(self.tokens_out.items()):
            sample("llmdeck_generation_tokens_total", (("route", route),), n)
        for name, text, table in (
                ("llmdeck_time_to_first_token_seconds", "Seconds from a request's admission to "
                 "its first generated token.", self.ttft),
                ("llmdeck_time_per_output_token_seconds", "Seconds per generated token after "
                 "the first.", self.tpot)):
            family(name, "histogram", text)
            for route, hist in sorted(table.items()):
                for bound, n in zip(hist.bounds, hist.counts, strict=True):
                    sample(f"{name}_bucket", (("route", route), ("le", f"{bound:g}")), n)
                sample(f"{name}_bucket", (("route", route), ("le", "+Inf")), hist.count)
                sample(f"{name}_sum", (("route", route),), float(hist.sum))
                sample(f"{name}_count", (("route", route),), hist.count)
        self._pool(family, sample)
        return "\n".join(lines) + "\n"

    def _pool(self, family: Any, sample: Any) -> None:
        rt = self.server.runtime
        family("llmdeck_queue_depth", "gauge", "Requests waiting for a slot on the local model.")
        sample("llmdeck_queue_depth", (), rt.backend.queued() if rt.backend.kind == "local" else 0)
        family("llmdeck_requests_active", "gauge", "Requests being generated now.")
        sample("llmdeck_requests_active", (), self.server.active)
        workers = rt.pool.status()
        models = sorted({w.model for w in workers})
        family("llmdeck_model_loaded", "gauge", "1 for each model with a worker ready.")
        for model in models:
            up = any(w.state in ("idle", "busy") for w in workers if w.model == model)
            sample("llmdeck_model_loaded", (("model", model),), 1 if up else 0)
        # the figures GET /v1/models gives (core.server.local_models.describe), by label
        held = {m.label: m for m in rt.pool.models()}
        family("llmdeck_model_memory_bytes", "gauge", "Memory a loaded model is counted for "
               "(weights and KV cache at its context), as GET /v1/models memory_bytes.")
        for model in models:
            status = held.get(model)
            sample("llmdeck_model_memory_bytes", (("model", model),),
                   status.memory_bytes if status is not None else 0)
        family("llmdeck_model_rss_bytes", "gauge", "Resident memory of a model's workers now, "
               "as GET /v1/models rss_bytes.")
        for model in models:
            sample("llmdeck_model_rss_bytes", (("model", model),),
                   sum(w.rss_bytes for w in workers if w.model == model))
        family("llmdeck_worker_restarts_total", "counter", "Times a worker was restarted after "
               "it died.")
        for w in workers:
            sample("llmdeck_worker_restarts_total", (("model", w.model), ("worker", w.worker_id)),
                   w.restarts)

    async def handle(self, request: web.Request) -> web.Response:
        return web.Response(body=self.render().encode(), headers={"Content-Type": CONTENT_TYPE})


_BY_SERVER: weakref.WeakKeyDictionary[Any, ServerMetrics] = weakref.WeakKeyDictionary()


def metrics_for(server: Any) -> ServerMetrics:
    """The server's metrics (made on first use; they live as long as the server)."""
    metrics = _BY_SERVER.get(server)
    if metrics is None:
        metrics = _BY_SERVER[server] = ServerMetrics(server)
    return metrics


def render_error(error: ApiError) -> web.Response:
    """/metrics refusals: plain text, which is what a scraper logs."""
    return web.Response(body=(error.message + "\n").encode(), status=error.status,
                        headers={"Content-Type": CONTENT_TYPE})
