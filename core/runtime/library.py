"""The face's calls about models on this machine and on the Hub, and per-model presets.

A part of Runtime (core.runtime.face), kept apart so the face stays small: the hub's
search, file listing, recommended list and deletes (core.hub does the work), the local
models, the clusters F4 shows and the presets (core.presets). Everything here reads the
disk or the network, so each call runs in a thread; the service answers them for its
clients, which do none of this work themselves (issue 47, item 4).
"""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from core.wire.hub import Fit, LocalModel, Recommendation, RepoListing, SearchResult


class ModelLibrary:
    """Runtime's model-library calls; Runtime gives it `settings` and `models`."""

    settings: Any  # core.config.Settings
    models: Any  # core.runtime.models.ModelLifecycle

    def cluster_report(self) -> str | None:
        """F4's lines about the clusters not down (issue 35), as `llmdeck workers` prints
        them; reads their state files, so the service asks it in a thread. A home where no
        cluster ever started has no folder for them: nothing is read, and none is made."""
        from core import paths

        try:
            if not (paths.data_dir() / "clusters").is_dir():
                return None
            from core.cluster import clusters_report

            return clusters_report()
        except OSError:
            return None

    async def local_models(self) -> list[LocalModel]:
        """The models on this machine (the hub's registry, read in a thread): the model
        picker lists them from here, so a client reads no model folder itself."""
        from core.hub import list_local_models

        return await asyncio.to_thread(list_local_models)

    async def apply_preset(self, model: str | None = None,
                           label: str | None = None) -> tuple[str, bool] | None:
        """Put the per-model preset of `model` (a path; None with a label: the label names
        it; both None: the model in use) into the settings (core.presets): (its id, whether
        the context size changed, so the model must load again), or None when it has none."""
        from core import presets

        if model is None and label is None:
            model, label = self.settings.model, self.models.state.label
        key, preset = await asyncio.to_thread(presets.find, model, label or "")
        return None if preset is None else (key, presets.apply(self.settings, preset))

    async def save_preset(self) -> tuple[str, Path]:
        """File the settings as the model in use's preset: (its id, the presets file)."""
        from core import presets

        return await asyncio.to_thread(presets.save_current, self.settings, self.settings.model,
                                       self.models.state.label)

    # -- the model hub (core.hub does the work, each call in a thread) ---------------------------
    async def hub_search(self, query: str, fmt: str = "all",
                         sort: str = "downloads") -> list[SearchResult]:
        """Hugging Face repos matching `query` (HubError with its sentence)."""
        from core.hub import search_models

        return await asyncio.to_thread(search_models, query, fmt, sort)  # type: ignore[arg-type]

    async def hub_files(self, repo_id: str) -> RepoListing:
        """A repo's files with sizes, quant labels and roles (HubError)."""
        from core.hub import list_files

        return await asyncio.to_thread(list_files, repo_id)

    async def hub_offline(self) -> str | None:
        """The sentence saying the Hub is off by choice (HF_HUB_OFFLINE in the service's
        environment, which does the downloads), or None; no network is asked."""
        from core.hub.endpoint import OFFLINE_SENTENCE, offline_mode

        return OFFLINE_SENTENCE if offline_mode() else None

    async def recommended_models(self, context_size: int | None = None,
                                 ) -> tuple[list[Recommendation], list[Fit]]:
        """The recommended list in this machine's build, and each one's fit in memory at
        `context_size` tokens (the settings' when None)."""
        from core.hub import fit, load_recommended

        context = context_size or self.settings.context_size

        def _gather() -> tuple[list[Recommendation], list[Fit]]:
            recs = load_recommended()
            return recs, [fit(r, context) for r in recs]

        return await asyncio.to_thread(_gather)

    async def delete_local_model(self, model_id: str) -> int:
        """Delete the files of the local model listed as `model_id` (LocalModel.id); the
        bytes freed. HubError when it is gone or cannot go (the bundled one)."""
        from core.hub import HubError, delete_model, list_local_models

        def _delete() -> int:
            found = next((m for m in list_local_models() if m.id == model_id), None)
            if found is None:
                raise HubError("NOT_FOUND", f"{model_id} is no longer on this machine.")
            return delete_model(found, confirm=True)

        return await asyncio.to_thread(_delete)
