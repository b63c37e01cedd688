"""Every local model by name on `llmdeck serve`: load on request, keep_alive, load/unload.

Ollama, LM Studio and llama.cpp's router answer any local model by name; so does this. A
request naming a model (its id `gemma3:270m-q4_k_m`, an alias from config.toml, its
display name, or its family alone as Ollama's clients send it) loads it into the same
pool the app uses, under its id, waiting up to the load wait; the pool's memory budget
decides what else has to go (idle models first) or refuses with the numbers. The model
the app (or `serve`) started with keeps its own door in ChatServer; this module serves
the others, and lists all of them.

keep_alive, Ollama's meaning: a request's value says how long its model stays loaded
once idle from then on (seconds or "5m"; 0 unloads it after the reply; -1 keeps it);
[keep_alive] in config.toml gives a model its default, else idle_unload_minutes. Scripts
load and unload explicitly with POST /v1/models/{id}/load and /unload (or Ollama's
empty /api/generate with keep_alive).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from aiohttp import web

from core import keep_alive
from core.engines.base import ModelSpec
from core.model_catalog import AmbiguousModel, CatalogEntry
from core.model_catalog import shared as shared_catalog
from core.remote.backend import PoolBackend
from core.runtime.models import chat_spec
from core.server.sse import json_response
from core.server.wire import ApiError
from core.workers.pool import ModelStatus, WorkerLoadError

UNLOAD_WAIT_S = 30.0  # an explicit unload lets replies running on the model finish first


@dataclass(frozen=True, slots=True)
class Loaded:
    """What a load told about a model: its context and whether it sees images."""

    context_size: int
    vision: bool
    info: dict[str, Any]


def keep_alive_of(body: Any) -> float | None | str:
    """A request's keep_alive in the pool's terms: seconds, -1.0 for ever, "absent"
    when it sent none; a 400 (ApiError) with the expected forms when it is unreadable."""
    if not isinstance(body, dict) or body.get("keep_alive") is None:
        return "absent"
    try:
        seconds = keep_alive.parse(body["keep_alive"])
    except keep_alive.KeepAliveError as exc:
        raise ApiError(400, str(exc), param="keep_alive") from None
    return -1.0 if seconds is None else seconds


class LocalModels:
    """The models on disk, by name, for one ChatServer."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.catalog = shared_catalog()  # the lifecycle's too: one id per model
        self.loaded: dict[str, Loaded] = {}  # by pool key (the model's id)
        self.waiters = 0  # requests waiting for a load

    @property
    def pool(self) -> Any:
        return self.server.runtime.pool

    # -- names ---------------------------------------------------------------------
    async def find(self, name: str) -> CatalogEntry | None:
        """The local model `name` means (None: no such model); 400 when it means several."""
        aliases = dict(getattr(self.server.runtime.settings, "aliases", {}) or {})
        try:
            return await asyncio.to_thread(self.catalog.lookup, name, aliases)
        except AmbiguousModel as exc:
            raise ApiError(400, str(exc), param="model", code="model_ambiguous") from None

    def is_app_model(self, entry: CatalogEntry) -> bool:
        """True when `entry` is the model the app itself runs (it keeps its own door)."""
        from core import model_refs

        ref = self.server.runtime.model_ref()
        if not ref:
            return False
        parsed = model_refs.parse(ref)
        return not parsed.is_label and Path(parsed.model).expanduser() == entry.path

    def app_entry(self) -> CatalogEntry | None:
        """The catalog's entry for the app's own model (the last listing; no disk read),
        or None when it is not a model on disk (a scripted or remote one)."""
        return next((e for e in self.catalog.cached() if self.is_app_model(e)), None)

    # -- load ------------------------------------------------------------------------
    async def backend(self, entry: CatalogEntry) -> PoolBackend:
        """The pool's backend for `entry`, loading it first (waiting up to the load wait;
        503 with the pool's sentence when it does not fit or fails). A model the app loaded
        before (a chat model switched away from) is shared, not loaded twice."""
        spec = chat_spec(entry.path, entry.engine or "", self.server.runtime.settings)
        key = self.pool.key_for(spec) or entry.id
        if key not in self.pool.loaded() or key not in self.loaded:
            await self._load(entry, spec, key)
        return PoolBackend(self.pool, key)

    async def _load(self, entry: CatalogEntry, spec: ModelSpec, key: str) -> None:
        server, rt = self.server, self.server.runtime
        if self.waiters >= server.max_queue:
            raise ApiError(429, f"The queue is full ({server.max_queue} requests waiting for a "
                           "model to load); retry shortly.", code="queue_full")
        if entry.engine is None:
            raise ApiError(503, f"{entry.name} cannot run on this machine (no engine serves "
                           f"its format, {entry.format}).", code="model_unavailable")
        wait = server.limits.load_wait_s
        settings = rt.settings
        replicas = settings.replicas or (2 if entry.engine == "llamacpp" else 1)
        self.waiters += 1
        try:
            if entry.bundled and not entry.path.exists():
                from core.hub import ensure_bundled

                await asyncio.to_thread(ensure_bundled)
            fresh = key not in self.pool.loaded()
            info = await asyncio.wait_for(asyncio.shield(self.pool.load(
                key, spec, replicas=replicas, label=entry.id, wait_s=wait)), wait)
        except TimeoutError:
            raise ApiError(503, f"{entry.name} is still loading after {wait:.0f} s of waiting; "
                           "retry in a moment.", code="model_loading") from None
        except WorkerLoadError as exc:
            raise ApiError(503, f"{entry.name} could not be loaded: {exc.message}",
                           code="model_unavailable") from None
        finally:
            self.waiters -= 1
        self.loaded[key] = Loaded(int(info.get("context_size") or settings.context_size),
                                  bool(info.get("vision")), dict(info))
        if fresh:
            default = settings.keep_alive_for(entry.id, entry.name)
            if default is not None:
                self.pool.set_keep_alive(key, default)

    def facts(self, key: str) -> Loaded | None:
        return self.loaded.get(key)

    def keep(self, key: str, seconds: float | None | str) -> None:
        """Apply a request's keep_alive to its model (call it just before the reply
        starts: with 0 the model goes once its replies end)."""
        if seconds != "absent":
            self.pool.set_keep_alive(key, seconds)

    async def unload(self, key: str) -> bool:
        """Unload now, its replies first allowed to finish; True when none was cut."""
        return await self.pool.release(key, wait_s=UNLOAD_WAIT_S)

    # -- listings -----------------------------------------------------------------------
    def running(self) -> dict[str, ModelStatus]:
        """The pool's models that are up, by key."""
        return {m.key: m for m in self.pool.models() if m.state != "failed"}

    def running_at(self, path: Path) -> ModelStatus | None:
        """The loaded model whose file or folder is `path` (under whichever key)."""
        return next((m for m in self.running().values() if Path(m.path).expanduser() == path),
                    None)

    def name_of(self, status: ModelStatus) -> str:
        """The id a loaded model is listed under: its catalog id, else its pool key."""
        entry = self.catalog.by_path(status.path)
        return entry.id if entry is not None else status.key

    async def entries(self) -> list[CatalogEntry]:
        return await asyncio.to_thread(self.catalog.entries)

    # -- explicit load / unload (POST /v1/models/{model}/load|unload) -------------------
    async def load_route(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        body = await self._optional_body(request)
        seconds = keep_alive_of(body)
        entry = await self._entry(name)
        if self.is_app_model(entry):
            backend = await self.server._backend_for(name)
            key = backend.key if isinstance(backend, PoolBackend) else None
        else:
            key = (await self.backend(entry)).key
        if key is not None:
            self.keep(key, seconds)
        return json_response(self._state(entry))

    async def unload_route(self, request: web.Request) -> web.Response:
        name = request.match_info["model"]
        await self._optional_body(request)
        entry = await self._entry(name)
        status = self.running_at(entry.path)
        clean = await self.unload(status.key) if status is not None else True
        return json_response({**self._state(entry), "replies_cut": not clean})

    async def _entry(self, name: str) -> CatalogEntry:
        entry = await self.find(name)
        if entry is None:
            raise ApiError(404, f"No local model {name[:200]!r}; GET /v1/models lists them.",
                           param="model", code="model_not_found")
        return entry

    async def _optional_body(self, request: web.Request) -> Any:
        if not request.can_read_body:
            return None
        return await self.server._body(request)

    def _state(self, entry: CatalogEntry) -> dict[str, Any]:
        status = self.running_at(entry.path)
        return {"id": entry.id, "object": "model", "name": entry.name,
                "loaded": status is not None, **(describe(status) if status else {})}


def describe(status: ModelStatus) -> dict[str, Any]:
    """A running model's figures for the API's lists."""
    left = status.idle_left_s
    return {"state": status.state, "memory_bytes": status.memory_bytes,
            "rss_bytes": status.rss_bytes, "requests": status.requests,
            "last_used": int(status.last_used),
            "expires_at": None if left is None else int(time.time() + left)}


def add_routes(app: web.Application, models: LocalModels) -> None:
    app.router.add_post("/v1/models/{model:.+}/load", models.load_route)
    app.router.add_post("/v1/models/{model:.+}/unload", models.unload_route)
