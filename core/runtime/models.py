"""Model lifecycle: which model answers, and getting it ready.

Resolves the configured model (a file, the bundled default on first run, a remote endpoint
or a cluster's rank 0) to a backend, loads it in the worker pool, switches and reloads it,
and tells listeners each state change (the UI's model line). Turns and the chat context
only ask `ensure()` and read `state` and `backend`; nothing here knows about turns, the
store or the UI.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from pathlib import Path

# core.model_files is read from worker threads (the memory budget, the hub's listings, the
# engine choice): imported here, on the loop's thread, before any of them, so that two
# threads never import the package and its `names` module at once (Python's import locks
# then raise "deadlock detected": a model failed to load so in the -n 4 suite).
import core.model_files  # noqa: F401
from core import bundled, model_catalog, model_ids, model_refs, paths
from core.config import Settings
from core.engines.base import ModelSpec
from core.remote.backend import Backend, PoolBackend
from core.remote.refs import remote_ref
from core.runtime.state import ModelState
from core.workers.pool import WorkerLoadError, WorkerPool

# A switch loads the new model beside the old one; when the budget holds only one, the
# load waits this long for the replies on the old model to end (Esc ends one at once).
SWITCH_WAIT_S = 600.0


def engine_for(path: Path) -> str:
    """Pick the engine from the artifact alone (rules in core.engines.select); does disk I/O.

    Raises WorkerLoadError with a sentence the user can act on when nothing can serve it.
    """
    from core.engines.select import SelectionError, select_engine

    if not path.exists():
        from core.bundled import BUNDLED_CHAT_NAME

        # restore-default brings back the bundled model only: a downloaded one that was
        # removed (`llmdeck models rm`) comes back with a pull
        fix = ("restore the bundled one with `llmdeck models restore-default`"
               if path.name == BUNDLED_CHAT_NAME else
               "download it again (`llmdeck models list` shows the models here)")
        raise WorkerLoadError("LOAD_FAILED",
                              f"Model file not found: {path}. Pick another model, or {fix}.")
    try:
        return select_engine(path).engine
    except SelectionError as exc:
        raise WorkerLoadError(exc.code, exc.message) from None


def cluster_name(model: str | None) -> str | None:
    """NAME of "cluster:NAME" (issue 35, core.cluster); kept here so start-up does not
    import core.cluster."""
    prefix = "cluster:"
    return model[len(prefix):] or None if model and model.startswith(prefix) else None


def chat_spec(path: Path, engine: str, settings: Settings) -> ModelSpec:
    """How a local model is loaded for chat; the API loads models the same way, so the
    app and the API share one copy of a model in the pool (WorkerPool.key_for)."""
    return ModelSpec(path=str(path), engine=engine, context_size=settings.context_size,
                     options=(("speculative", bool(settings.speculative)),
                              ("draft_model", settings.draft_model if engine == "mlx" else None)))


class ModelLifecycle:
    """The chat model: its state, its backend, and loading / switching it."""

    def __init__(self, settings: Settings, pool: WorkerPool, *,
                 spec_override: ModelSpec | None = None) -> None:
        self.settings = settings
        self.pool = pool
        self.key = "chat"  # the pool's name for the chat model (another one after a switch)
        self.state = ModelState()
        # Where generations come from: the pool (local model) or a remote endpoint.
        self.backend: Backend = PoolBackend(self.pool, self.key)
        self.spec_override = spec_override  # a fixed spec (tests, `serve --model`) over settings
        self.listeners: list[Callable[[ModelState], None]] = []
        self._load_task: asyncio.Task[bool] | None = None
        self._switched = 0  # pool keys handed out by switches

    def notify(self) -> None:
        for listener in list(self.listeners):
            listener(self.state)

    # -- loading ---------------------------------------------------------------------------
    def preload(self) -> None:
        """Start loading the configured model now, without waiting for it."""
        self._load_task = asyncio.ensure_future(self._load())

    async def ensure(self) -> bool:
        """Load the configured model if it is not loaded; False (with state.error) if it can't."""
        crashed = self.pool.crash_failure(self.key)
        if crashed:
            self.state.state = "failed"
            self.state.error = crashed
            self.notify()
            return False
        if self.state.state == "ready" and self.backend.ready():
            return True
        if self._load_task is None or self._load_task.done():
            self._load_task = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._load_task)

    async def reload(self) -> bool:
        """Unload and load the current model again (clears a crash-budget failure)."""
        await self.pool.unload(self.key)
        self.state.state = "idle"
        self._load_task = asyncio.ensure_future(self._load())
        return await asyncio.shield(self._load_task)

    async def switch(self, path: str, engine: str | None = None) -> bool:
        """Make `path` (a file, or a remote model string) the model and load it.

        The old model is not unloaded under a reply: the new one loads beside it when the
        memory budget has room, and otherwise waits (SWITCH_WAIT_S) for the replies on it
        to end, then takes its place (the pool evicts idle models, least recently used
        first). A reply streaming meanwhile completes, or Esc stops it; the old model
        stays loaded while it fits, so switching back is instant. A switch to a remote
        model unloads the local one once its replies are done: nothing local needs it."""
        if remote_ref(path) is not None or cluster_name(path) is not None:
            await self.pool.release(self.key, wait_s=SWITCH_WAIT_S)
        self.settings.model = path
        self.settings.engine = engine
        self.spec_override = None
        self.state = ModelState()
        self._load_task = asyncio.ensure_future(self._load(switching=True))
        return await asyncio.shield(self._load_task)

    def _key_for(self, spec: ModelSpec) -> str:
        """The pool key of the model switched to: the one it is known under already
        (loaded by the API, or used before), else a new one."""
        known = self.pool.key_for(spec)
        if known is not None:
            return known
        self._switched += 1
        return f"chat-{self._switched}"

    async def _resolve_spec(self) -> ModelSpec:
        if self.spec_override is not None:
            return self.spec_override
        s = self.settings
        if s.model:
            path = Path(s.model).expanduser()
            label = path.name
        else:
            self.state.label = model_ids.base_id(bundled.BUNDLED_CHAT_NAME)
            self.state.name = bundled.BUNDLED_CHAT_LABEL
            self.state.bundled = True
            target = bundled.bundled_chat_target()
            if not await asyncio.to_thread(paths.config_path().exists):  # first run
                self.state.state = "provisioning"
                self.notify()
                # The bundled Gemma: its MLX import where MLX has a GPU, else the GGUF.
                from core.engines.select import default_model

                chosen = await asyncio.to_thread(default_model)
                target = Path(chosen.path)
                s.model, s.engine = chosen.path, chosen.engine
                await asyncio.to_thread(s.save)
            else:
                if not await asyncio.to_thread(target.is_file):
                    # a hand-written config.toml (say, only context_size) on a fresh home:
                    # the bundled model is still set up on first use
                    self.state.state = "provisioning"
                    self.notify()
                    target = await asyncio.to_thread(bundled.provision_bundled_chat)
                # named by its file in memory (the config file is left as written), so the
                # API's id for it is the app's model, not a second copy loaded beside it
                s.model = str(target)
            path, label = target, bundled.BUNDLED_CHAT_LABEL
        self.state.name = label if label != bundled.BUNDLED_CHAT_NAME else bundled.BUNDLED_CHAT_LABEL
        self.state.bundled = self.state.name == bundled.BUNDLED_CHAT_LABEL
        # One id everywhere (issue 45): the header, F4, the pool's rows, /metrics and the
        # API all name the model by the id the catalog lists it under.
        self.state.label = await asyncio.to_thread(model_catalog.id_for_path, path)
        engine = s.engine or await asyncio.to_thread(engine_for, path)
        return chat_spec(path, engine, s)

    async def _use_remote(self, endpoint_name: str, model: str) -> bool:
        """Point generations at a remote endpoint; nothing loads locally."""
        endpoint = self.settings.remote(endpoint_name)
        self.state.label = f"{endpoint_name}/{model}"  # the id the API lists it under
        self.state.name = f"{model} @ {endpoint_name}"
        self.state.bundled = False
        if endpoint is None:
            self.state.state = "failed"
            self.state.error = (f"No remote endpoint named {endpoint_name!r} is configured; "
                                "add it under [[remotes]] in settings.")
            self.notify()
            return False
        from core.remote.client import RemoteBackend

        self.backend = RemoteBackend(endpoint, model)
        self.state.state = "ready"
        self.state.error = None
        self.state.info = {"engine": "remote", "url": endpoint.url, "model": model}
        self.notify()
        return True

    # -- issue 35: "cluster:NAME", a cluster's rank 0 through the remote backend -----------
    async def _use_cluster(self, name: str) -> bool:
        """Start the cluster (core.cluster.open_backend; it stops itself when idle, and when
        this backend closes) and stream from it as from a remote."""
        from core.cluster.launch import ClusterError  # not core.cluster: its doctor imports us
        from core.cluster.on_demand import open_backend

        self.state.label = f"cluster:{name}"
        self.state.bundled = False
        self.state.state = "loading"
        self.state.error = None
        self.notify()
        try:
            self.backend = await open_backend(self.settings, name)
        except (ClusterError, OSError) as exc:  # OSError: its log or a process could not start
            self.backend = PoolBackend(self.pool, self.key)
            self.state.state = "failed"
            self.state.error = (exc.message if isinstance(exc, ClusterError) else
                                f"Could not start cluster {name!r}: {exc.strerror or exc}.")
            self.notify()
            return False
        self.state.state = "ready"
        self.state.info = self.backend.describe()
        self.notify()
        return True

    async def _load(self, *, switching: bool = False) -> bool:
        await self.backend.close()
        cluster = cluster_name(self.settings.model) if self.spec_override is None else None
        if cluster is not None:
            return await self._use_cluster(cluster)
        ref = remote_ref(self.settings.model) if self.spec_override is None else None
        if ref is not None:
            return await self._use_remote(*ref)
        self.backend = PoolBackend(self.pool, self.key)
        try:
            spec = await self._resolve_spec()
            if switching:
                self.key = self._key_for(spec)
                self.backend = PoolBackend(self.pool, self.key)
            if spec.engine == "scripted" and self.spec_override is not None:
                # One id everywhere (issue 45): `--engine scripted` is the model that
                # `model = "scripted"` in the config names, `scripted:latest` both ways.
                self.state.label = spec.option("label", model_ids.base_id(Path(spec.path).name))
            self.state.state = "loading"
            self.state.error = None
            self.notify()
            # llama.cpp runs one sequence per worker: two workers let two chats stream at
            # once; MLX batches every session in one worker.
            replicas = self.settings.replicas or (2 if spec.engine == "llamacpp" else 1)
            info = await self.pool.load(self.key, spec, replicas=replicas,
                                        label=self.state.label,
                                        wait_s=SWITCH_WAIT_S if switching else 0.0)
        except WorkerLoadError as exc:
            self.state.state = "failed"
            self.state.error = exc.message
            self.notify()
            return False
        except Exception as exc:  # provisioning (disk full, missing package)
            self.state.state = "failed"
            self.state.error = f"Could not prepare the model: {exc}"
            self.notify()
            return False
        self.state.state = "ready"
        self.state.info = info
        self.state.context_size = int(info.get("context_size") or 0)
        self.notify()
        return True

    # -- which model a conversation remembers ----------------------------------------------
    def ref(self) -> str | None:
        """What a conversation remembers of the active model (core.model_refs)."""
        if self.spec_override is not None:
            return self.state.label
        ref = model_refs.make(self.settings.model, self.settings.engine)
        return ref or (self.state.label if self.state.state != "idle" else None)

    def is_active(self, ref: str) -> bool:
        """Whether `ref` names the model in use now (then opening needs no switch)."""
        if ref in (self.ref(), self.state.label):
            return True
        parsed = model_refs.parse(ref)
        current = self.settings.model
        # An engine left to choose (settings' None) is the one the model runs on: a
        # conversation saved as "llamacpp:PATH" is the loaded PATH then (issue 48).
        return (self.spec_override is None and not parsed.is_label and current is not None
                and Path(parsed.model).expanduser() == Path(current).expanduser()
                and parsed.engine in (None, self.settings.engine or self.state.info.get("engine")))

    async def find(self, ref: str) -> tuple[str, str | None] | None:
        """(model, engine) to load for a conversation's remembered model, or None when it is
        no longer here: its file is gone, or its remote endpoint is no longer configured.
        Reads the disk, so it runs in a thread."""
        parsed = model_refs.parse(ref)
        if (name := cluster_name(ref)) is not None:  # issue 35
            return (ref, None) if self.settings.cluster(name) else None
        if parsed.remote is not None:
            return (parsed.model, None) if self.settings.remote(parsed.remote[0]) else None
        if not parsed.is_label:
            exists = await asyncio.to_thread(Path(parsed.model).expanduser().exists)
            return (parsed.model, parsed.engine) if exists else None

        def _by_label() -> tuple[str, str | None] | None:  # conversations saved before refs
            from core.hub.registry import list_local_models

            label = parsed.model
            for m in list_local_models():
                names = {m.name, m.path.name, m.model_id}
                if m.source == "bundled":
                    names.add(bundled.BUNDLED_CHAT_LABEL)
                if m.valid and label in names:
                    return str(m.path), m.engine
            return None

        return await asyncio.to_thread(_by_label)

    def loading(self) -> bool:
        """A load (or switch) is under way: its task started, not yet ended."""
        return self._load_task is not None and not self._load_task.done()

    # -- closing -----------------------------------------------------------------------------
    def stop_loading(self) -> None:
        """Cancel a load in flight (the first step of closing)."""
        if self._load_task and not self._load_task.done():
            self._load_task.cancel()

    async def close(self) -> None:
        """Stop the workers and the backend."""
        await self.pool.shutdown()
        await self.backend.close()
