"""Per-model presets in the app (core.presets does the work): a picked model's preset is
put into the settings before it loads, a new chat starts from the current model's preset,
and the settings screen files the current settings as the model's preset.

The model's id is looked up off the loop (it may list the local models).
"""

from __future__ import annotations

import asyncio
from functools import lru_cache
from pathlib import Path
from typing import Any

from core import presets


@lru_cache(maxsize=64)
def _key(model: str | None, label: str) -> str:
    """A model's id, read once per path: listing the local models walks the disk, and a
    file keeps its id (core.model_ids)."""
    return presets.model_key(model, label)


async def apply_for(runtime: Any, model: str | None, label: str) -> tuple[str, bool] | None:
    """Put the preset of `model` (a path; None: the label names it) into the settings:
    (its id, whether the context size changed), or None when it has no preset."""
    def _find() -> tuple[str, presets.Preset | None]:
        key = _key(model, label)
        return key, presets.load().get(key)

    key, preset = await asyncio.to_thread(_find)
    if preset is None:
        return None
    return key, presets.apply(runtime.settings, preset)


async def apply_current(runtime: Any) -> tuple[str, bool] | None:
    """The current model's preset into the settings (a new chat starts from it)."""
    return await apply_for(runtime, runtime.settings.model, runtime.model_state().label)


async def save_current(runtime: Any) -> tuple[str, Path]:
    """File the current settings as the current model's preset: (its id, the file)."""
    def _save() -> tuple[str, Path]:
        key = _key(runtime.settings.model, runtime.model_state().label)
        old = presets.load().get(key)
        thinking = old.thinking if old is not None else None  # set in the file by hand
        return key, presets.save(key, presets.from_settings(runtime.settings, thinking))

    return await asyncio.to_thread(_save)
